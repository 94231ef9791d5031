//! The one error type of this crate.

/// Everything that can go wrong in substitution. `Display` gives the upstream message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// JSONToYAML or YAMLToJSON failed; the message is go-yaml's / sigs.k8s.io/yaml's, exactly
    /// (for example `yaml: line 3: mapping values are not allowed in this context`).
    #[error("{0}")]
    Yaml(String),
    /// A `${…}` template did not parse or evaluate (docs/design.md 2.1). `Display` is upstream's
    /// message; `offset` is the byte offset in the template where it was detected.
    #[error("{kind}")]
    Substitution {
        /// What went wrong.
        kind: crate::envsubst::SubstitutionErrorKind,
        /// Byte offset in the template.
        offset: usize,
    },
    /// A defined variable name does not match `^[_[:alpha:]][_[:alpha:][:digit:]]*$`.
    #[error("'{0}' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'")]
    InvalidVarName(String),
    /// Upstream's `variable substitution failed: %w` (Display carries the whole chain).
    #[error("variable substitution failed: {0}")]
    VariableSubstitution(Box<Error>),
    /// Upstream's `YAMLToJSON: %w` around parsing the substituted text.
    #[error("YAMLToJSON: {0}")]
    YamlToJson(Box<Error>),
    /// kustomize's `res.UnmarshalJSON` refused the substituted resource (see
    /// `yaml::emit::kyaml`); the message is yaml.v3's.
    #[error(
        "UnmarshalJSON: yaml: line {line}: found a tab character where an indentation space is expected"
    )]
    TabLedBlock {
        /// The line yaml.v3 reports.
        line: usize,
    },
    /// Upstream's `envsubst error: %w` around everything the resource layer reports.
    #[error("envsubst error: {0}")]
    Envsubst(Box<Error>),
    /// kustomize-controller's prefix: `post build failed for '<resource id>': %w`.
    #[error("post build failed for '{id}': {source}")]
    PostBuild {
        /// `<Kind>.<version>.<group|[noGrp]>/<name>`.
        id: String,
        /// What failed.
        source: Box<Error>,
    },
    /// A `substituteFrom` object could not be read (`optional` tolerates only NotFound).
    #[error("substitute from '{kind}/{name}' error: {reason}")]
    SubstituteFrom {
        /// `ConfigMap` or `Secret`.
        kind: String,
        /// The object's name.
        name: String,
        /// The lookup failure.
        reason: String,
    },
    /// `spec.postBuild` of a Kustomization has the wrong shape.
    #[error("{0}")]
    InvalidPostBuild(String),
    /// A Secret `data` value is not base64.
    #[error("secret '{name}' key '{key}': invalid base64 data: {reason}")]
    InvalidSecretData {
        /// The Secret's name.
        name: String,
        /// The data key.
        key: String,
        /// The decoding error.
        reason: String,
    },
    /// A ResourceSet template action beyond the simple `<< inputs.field >>` substitution that the
    /// offline expansion supports (see [`resource_set`](crate::resource_set)).
    #[error(
        "unsupported template action '<<{action}>>': only << inputs.field >> (optionally | quote) is expanded offline"
    )]
    UnsupportedTemplate {
        /// The action between `<<` and `>>`, as written.
        action: String,
    },
    /// A Flux Kustomization asked for (`conflux build --kustomization`, [`stream`](crate::stream))
    /// that the file does not hold, by that name or at all.
    #[error("holds no Flux Kustomization{}", named(.name))]
    NoKustomization {
        /// The name asked for (`NAME` or `NAMESPACE/NAME`), if any.
        name: Option<String>,
    },
    /// Several Flux Kustomizations where one is needed, and no name to choose one
    /// (`NAMESPACE/NAME` of each).
    #[error("holds several Flux Kustomizations ({}): choose one with --name", .0.join(", "))]
    SeveralKustomizations(Vec<String>),
    /// A variable source ([`stream::variables`](crate::stream::variables)) that is neither a
    /// ConfigMap nor a Secret: its kind.
    #[error("--substitute-from: expected ConfigMap or Secret, found kind '{0}'")]
    NotAVariableSource(String),
    /// A ResourceSet template reads an input field the input does not have (the ResourceSet
    /// controller renders with `missingkey=error`).
    #[error(
        "failed to execute template: executing \"resourceset\" at <{action}>: map has no entry for key \"{key}\""
    )]
    MissingInput {
        /// The field path, e.g. `inputs.app.version`.
        action: String,
        /// The missing key.
        key: String,
    },
}

/// ` named '<name>'` when a name was asked for.
fn named(name: &Option<String>) -> String {
    name.as_ref()
        .map(|n| format!(" named '{n}'"))
        .unwrap_or_default()
}
