//! The one error type of this crate.

/// Everything that can go wrong in substitution. `Display` gives the upstream message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// JSONToYAML or YAMLToJSON failed; the message is go-yaml's / sigs.k8s.io/yaml's, exactly
    /// (for example `yaml: line 3: mapping values are not allowed in this context`).
    #[error("{0}")]
    Yaml(String),
}
