//! The one error type of this crate.

/// Everything that can go wrong in this crate. Never carries ConfigMap or Secret data: only
/// annotation keys, the patterns users wrote, and object names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An entry of a `configmap.reloader.stakater.com/reload` (or secret) list is not a valid regex.
    /// Reloader compares such an entry literally with the config name, and so do we; the error is
    /// reported so the controller can warn about it.
    #[error("invalid pattern {pattern:?} in annotation {annotation}: {reason}")]
    InvalidPattern {
        /// The annotation holding the list.
        annotation: &'static str,
        /// The entry as written (trimmed).
        pattern: String,
        /// What the regex parser said.
        reason: String,
    },
}

impl Error {
    /// A short, stable label for metrics and Event reasons.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::InvalidPattern { .. } => "invalid_pattern",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
