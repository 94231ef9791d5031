//! The errors of reading a fleet and of what `conflux plan` is asked to read.

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
    /// Text that is not YAML (the parser's first line, and the line where it failed).
    #[error("invalid YAML: {message}")]
    Yaml {
        /// The parser's message (first line).
        message: String,
        /// The 1-based line where parsing failed, when the parser says.
        line: Option<usize>,
    },
    /// A resource kustomize reads but cannot write back (a YAML timestamp as a map key, or with
    /// a zone offset of a day or more): kustomize's reason, and the 1-based line.
    #[error("{message}")]
    Unwritable {
        /// kustomize's reason, with the text at fault.
        message: String,
        /// The 1-based line, when known.
        line: Option<usize>,
    },
    /// A file of a build that cannot be read as kustomize reads it: where, and why.
    #[error("{file}: {source}")]
    InFile {
        /// The file, relative to the directory built from.
        file: String,
        /// The 1-based line, when known.
        line: Option<usize>,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// The kustomize binary failed: the end of its message, where its cause is.
    #[error("{0}")]
    Kustomize(String),
    /// The built-in kustomize cannot build the layout (a missing resource, a generator without a
    /// name, nesting too deep…).
    #[error("{0}")]
    Build(String),
    /// An `--external` file of `conflux plan` that cannot be read.
    #[error("--external {file}: {source}")]
    External {
        /// The file as given.
        file: String,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// `--base`: the revision cannot be read from the Git repository holding the path.
    #[error("--base {revision}: {reason}")]
    Base {
        /// The revision as given.
        revision: String,
        /// Why (git's message).
        reason: String,
    },
    /// A `--substitute-from` value that cannot be read (its values are never shown).
    #[error("--substitute-from {spec}: {reason}")]
    SubstituteFrom {
        /// The value as given.
        spec: String,
        /// Why.
        reason: String,
    },
    /// `--cluster` given with several PATHs or a file: clusters are directories of one
    /// repository.
    #[error("--cluster needs exactly one PATH: the repository's directory")]
    ClusterWithoutRoot,
    /// A `--cluster` directory that exists neither below the repository nor as given.
    #[error("--cluster {dir}: no such directory in {root}")]
    ClusterNotFound {
        /// The directory as given.
        dir: String,
        /// The repository's directory.
        root: String,
    },
    /// A `--cluster` directory outside the repository.
    #[error("--cluster {dir}: not inside {root}")]
    ClusterOutsideRoot {
        /// The directory as given.
        dir: String,
        /// The repository's directory.
        root: String,
    },
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
