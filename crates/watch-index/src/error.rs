//! The one error type of this crate.

/// Everything that can go wrong in this crate. `Display` gives the upstream message where one exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A label selector could not be parsed or converted; the message is apimachinery's, exactly.
    #[error("{0}")]
    Selector(String),
    /// A reference field path (such as `spec.valuesFrom[kind=ConfigMap].name`) could not be parsed.
    #[error("invalid field path {path:?}: {reason}")]
    FieldPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A name glob (`*`, `?`) of a policy's `configs` block can match no object name.
    #[error("{field}: invalid glob {pattern:?}: {reason}")]
    InvalidGlob {
        /// Where it is, such as `spec.configs.names[1]`.
        field: String,
        /// The pattern (at most 64 characters of it).
        pattern: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A Kubernetes API call failed or timed out (runtime feature). The message names the
    /// action, never data.
    #[cfg(feature = "runtime")]
    #[error(transparent)]
    Kube(#[from] conflux_runtime::Error),
}

impl Error {
    /// A stable short reason for logs, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Selector(_) => "InvalidSelector",
            Error::FieldPath { .. } => "InvalidFieldPath",
            Error::InvalidGlob { .. } => "InvalidGlob",
            #[cfg(feature = "runtime")]
            Error::Kube(err) => err.reason(),
        }
    }
}
