//! The errors of reading a fleet (the fleet reading of `conflux plan`).

/// What can go wrong reading a fleet or building one of its paths. Each becomes a finding of
/// `conflux plan`, so the messages say what failed in the user's terms.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory that cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program that cannot be started.
    #[error("running {program}: {source}")]
    Run {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file that is not YAML (the parser's first line).
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// The kustomize binary failed: the end of its message, where its cause is.
    #[error("{0}")]
    Kustomize(String),
    /// The built-in kustomize cannot build the layout (a missing resource, a generator without a
    /// name, nesting too deep…).
    #[error("{0}")]
    Build(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
