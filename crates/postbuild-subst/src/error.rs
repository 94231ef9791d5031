//! The one error type of this crate.

/// Everything that can go wrong in substitution. `Display` gives the upstream message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// JSONToYAML or YAMLToJSON failed; the message is go-yaml's / sigs.k8s.io/yaml's, exactly
    /// (for example `yaml: line 3: mapping values are not allowed in this context`).
    #[error("{0}")]
    Yaml(String),
    /// A `${…}` template did not parse or evaluate (DESIGN.md 2.1). `Display` is upstream's
    /// message; `offset` is the byte offset in the template where it was detected.
    #[error("{kind}")]
    Substitution {
        /// What went wrong.
        kind: crate::envsubst::SubstitutionErrorKind,
        /// Byte offset in the template.
        offset: usize,
    },
}
