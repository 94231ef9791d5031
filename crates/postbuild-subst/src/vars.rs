//! Where substitution variables come from (docs/design.md 2.2 step 3): a Flux Kustomization's
//! `spec.postBuild.substitute` and `substituteFrom`, resolved against ConfigMaps and Secrets.
//!
//! The crate does no I/O: the caller fetches each referenced object and reports what it found
//! as a [`SourceLookup`], so "not found" (tolerated for `optional: true`) is told apart from any
//! other failure (never tolerated).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde_json::Value;

use crate::Error;
use crate::envsubst::VarSource;
use crate::json::pointer as json_at;
use crate::redact::{RedactedJson, RedactedMap};

/// The merged variables, every `\n` already removed from every value (upstream does this when it
/// loads them). Names are kept as given; they are validated when substitution runs. `Debug` shows
/// the names and the length of each value, never a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Variables {
    values: BTreeMap<String, String>,
}

/// By hand: values may come from Secrets, and `{:?}` ends up in logs and panic messages.
impl fmt::Debug for Variables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Variables")
            .field(&RedactedMap(&self.values))
            .finish()
    }
}

impl Variables {
    /// No variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Variables from an already merged map (values still may contain `\n`).
    pub fn from_merged(values: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut vars = Self::new();
        for (name, value) in values {
            vars.insert(name, &value);
        }
        vars
    }

    /// Defines (or overrides) `name`; every `\n` of `value` is removed.
    pub fn insert(&mut self, name: impl Into<String>, value: &str) {
        self.values.insert(name.into(), value.replace('\n', ""));
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// How many variables are defined.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no variable is defined.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Names and values, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl VarSource for Variables {
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>> {
        self.get(name).map(Cow::Borrowed)
    }
}

/// The kind of object a `substituteFrom` entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceKind {
    /// A ConfigMap: its `data` (not `binaryData`).
    ConfigMap,
    /// A Secret: its `data`, base64-decoded.
    Secret,
    /// Anything else; upstream ignores such entries.
    Other(String),
}

impl SourceKind {
    fn parse(kind: &str) -> Self {
        match kind {
            "ConfigMap" => Self::ConfigMap,
            "Secret" => Self::Secret,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The Kubernetes kind name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
            Self::Other(kind) => kind,
        }
    }
}

/// One `spec.postBuild.substituteFrom` entry (always in the Kustomization's namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubstituteReference {
    /// `ConfigMap` or `Secret`.
    pub kind: SourceKind,
    /// The object's name.
    pub name: String,
    /// `optional: true`: a missing object is skipped (any other error still fails).
    pub optional: bool,
}

/// `spec.postBuild.substituteStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubstituteStrategy {
    /// Substitute only when at least one variable is defined (the default).
    #[default]
    WithVariables,
    /// Always substitute, so defaults like `${x:=y}` apply even without variables.
    Always,
}

/// The substitution settings of a Flux Kustomization (`spec.postBuild`). `Debug` shows the names
/// of the inline variables, not their values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PostBuild {
    /// `substitute`: inline variables, applied last.
    pub substitute: BTreeMap<String, String>,
    /// `substituteFrom`, in order.
    pub substitute_from: Vec<SubstituteReference>,
    /// `substituteStrategy`.
    pub substitute_strategy: SubstituteStrategy,
}

/// By hand: the inline values are not from Secrets, but they become [`Variables`], whose values
/// are never shown; one rule for every variable value cannot be got wrong.
impl fmt::Debug for PostBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostBuild")
            .field("substitute", &RedactedMap(&self.substitute))
            .field("substitute_from", &self.substitute_from)
            .field("substitute_strategy", &self.substitute_strategy)
            .finish()
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidPostBuild(message)
}

impl PostBuild {
    /// Reads `spec.postBuild` of a Kustomization object (absent fields mean empty).
    pub fn from_kustomization(kustomization: &Value) -> Result<Self, Error> {
        let Some(post_build) = json_at(kustomization, "/spec/postBuild") else {
            return Ok(Self::default());
        };
        let mut result = Self::default();
        match post_build.get("substitute") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, value) in map {
                    let Value::String(value) = value else {
                        return Err(invalid(format!(
                            ".spec.postBuild.substitute.{name} accessor error: {value} is of the type {}, expected string",
                            json_type(value)
                        )));
                    };
                    result.substitute.insert(name.clone(), value.clone());
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    ".spec.postBuild.substitute accessor error: {other} is of the type {}, expected map[string]interface{{}}",
                    json_type(other)
                )));
            }
        }
        match post_build.get("substituteFrom") {
            None | Some(Value::Null) => {}
            Some(Value::Array(entries)) => {
                for (index, entry) in entries.iter().enumerate() {
                    let kind = entry.get("kind").and_then(Value::as_str);
                    let name = entry.get("name").and_then(Value::as_str);
                    let (Some(kind), Some(name)) = (kind, name) else {
                        return Err(invalid(format!(
                            "unable to get subsituteFrom: entry {index} needs string fields kind and name"
                        )));
                    };
                    result.substitute_from.push(SubstituteReference {
                        kind: SourceKind::parse(kind),
                        name: name.to_owned(),
                        optional: entry
                            .get("optional")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    });
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    ".spec.postBuild.substituteFrom accessor error: {other} is of the type {}, expected []interface{{}}",
                    json_type(other)
                )));
            }
        }
        if post_build.get("substituteStrategy").and_then(Value::as_str) == Some("Always") {
            result.substitute_strategy = SubstituteStrategy::Always;
        }
        Ok(result)
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// What fetching a `substituteFrom` object gave. `Debug` shows the object's kind, name and data
/// keys, never a data value.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum SourceLookup {
    /// The object (a ConfigMap or Secret as JSON).
    Found(Value),
    /// It does not exist (`apierrors.IsNotFound`).
    NotFound,
    /// Any other failure; the message is kept in the error.
    Failed(String),
}

/// By hand: a found object is a ConfigMap or a Secret with its data.
impl fmt::Debug for SourceLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceLookup::Found(object) => {
                f.debug_tuple("Found").field(&RedactedJson(object)).finish()
            }
            SourceLookup::NotFound => f.write_str("NotFound"),
            SourceLookup::Failed(reason) => f.debug_tuple("Failed").field(reason).finish(),
        }
    }
}

/// The variables an object provides: ConfigMap `data`; Secret `data` base64-decoded (and
/// `stringData`, which the API server would have merged into `data`, on top). ConfigMap
/// `binaryData` is ignored, as upstream. Secret bytes that are not UTF-8 are converted lossily.
pub fn source_data(kind: &SourceKind, object: &Value) -> Result<BTreeMap<String, String>, Error> {
    let name = json_at(object, "/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut data = BTreeMap::new();
    let entries = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
    };
    match kind {
        SourceKind::ConfigMap => {
            for (key, value) in entries("data") {
                data.insert(key.clone(), value.as_str().unwrap_or_default().to_owned());
            }
        }
        SourceKind::Secret => {
            for (key, value) in entries("data") {
                let encoded = value.as_str().unwrap_or_default();
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .map_err(|err| Error::InvalidSecretData {
                        name: name.to_owned(),
                        key: key.clone(),
                        reason: base64_problem(&err),
                    })?;
                data.insert(key.clone(), String::from_utf8_lossy(&decoded).into_owned());
            }
            for (key, value) in entries("stringData") {
                data.insert(key.clone(), value.as_str().unwrap_or_default().to_owned());
            }
        }
        SourceKind::Other(_) => {}
    }
    Ok(data)
}

/// What is wrong with a Secret value that is not base64, without the offending character: the
/// decoder's own message quotes it, and it is a piece of the Secret.
fn base64_problem(err: &base64::DecodeError) -> String {
    use base64::DecodeError;
    match err {
        DecodeError::InvalidByte(offset, _) => format!("invalid character at offset {offset}"),
        DecodeError::InvalidLength(length) => format!("invalid length {length}"),
        DecodeError::InvalidLastSymbol(offset, _) => {
            format!("invalid last character at offset {offset}")
        }
        DecodeError::InvalidPadding => "invalid padding".to_owned(),
    }
}

/// Loads the variables of `post_build` (`loadVars` + the inline `substitute`): the
/// `substituteFrom` objects in order (later entries win), then `substitute` (wins last). `fetch`
/// resolves one reference in the Kustomization's namespace.
pub fn load_variables(
    post_build: &PostBuild,
    mut fetch: impl FnMut(&SubstituteReference) -> SourceLookup,
) -> Result<Variables, Error> {
    let mut vars = Variables::new();
    for reference in &post_build.substitute_from {
        if matches!(reference.kind, SourceKind::Other(_)) {
            continue;
        }
        let object = match fetch(reference) {
            SourceLookup::Found(object) => object,
            SourceLookup::NotFound if reference.optional => continue,
            SourceLookup::NotFound => {
                let resource = match reference.kind {
                    SourceKind::Secret => "secrets",
                    _ => "configmaps",
                };
                return Err(Error::SubstituteFrom {
                    kind: reference.kind.as_str().to_owned(),
                    name: reference.name.clone(),
                    reason: format!("{resource} \"{}\" not found", reference.name),
                });
            }
            SourceLookup::Failed(reason) => {
                return Err(Error::SubstituteFrom {
                    kind: reference.kind.as_str().to_owned(),
                    name: reference.name.clone(),
                    reason,
                });
            }
        };
        for (name, value) in source_data(&reference.kind, &object)? {
            vars.insert(name, &value);
        }
    }
    for (name, value) in &post_build.substitute {
        vars.insert(name.clone(), value);
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn post_build() -> PostBuild {
        PostBuild::from_kustomization(&json!({
            "spec": {"postBuild": {
                "substitute": {"zone": "inline", "region": "eu\n"},
                "substituteFrom": [
                    {"kind": "ConfigMap", "name": "cm"},
                    {"kind": "Secret", "name": "secret"},
                    {"kind": "ConfigMap", "name": "missing", "optional": true}
                ]
            }}
        }))
        .unwrap()
    }

    #[test]
    fn later_sources_win_inline_last_newlines_removed() {
        let vars = load_variables(&post_build(), |reference| match reference.name.as_str() {
            "cm" => SourceLookup::Found(json!({"data": {"a": "\n1\n", "b": "cm", "zone": "cm"}, "binaryData": {"c": "AA=="}})),
            "secret" => SourceLookup::Found(json!({"data": {"b": "c2VjcmV0Cg=="}})),
            _ => SourceLookup::NotFound,
        })
        .unwrap();
        let all: Vec<_> = vars.iter().collect();
        assert_eq!(
            all,
            [
                ("a", "1"),
                ("b", "secret"),
                ("region", "eu"),
                ("zone", "inline")
            ]
        );
    }

    /// The decoder's message quotes the offending character, a piece of the Secret; ours does not.
    #[test]
    fn invalid_base64_is_reported_without_the_character() {
        let secret = json!({"metadata": {"name": "s"}, "data": {"k": "QUJD$A=="}});
        let err = source_data(&SourceKind::Secret, &secret).unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret 's' key 'k': invalid base64 data: invalid character at offset 4"
        );
    }

    #[test]
    fn optional_tolerates_only_not_found() {
        let err = load_variables(&post_build(), |reference| match reference.name.as_str() {
            "missing" => SourceLookup::Failed("forbidden".into()),
            _ => SourceLookup::Found(json!({})),
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "substitute from 'ConfigMap/missing' error: forbidden"
        );
        let err = load_variables(&post_build(), |_| SourceLookup::NotFound).unwrap_err();
        assert_eq!(
            err.to_string(),
            "substitute from 'ConfigMap/cm' error: configmaps \"cm\" not found"
        );
    }
}
