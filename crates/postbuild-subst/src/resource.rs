//! The resource layer: what kustomize-controller does to each built resource (fluxcd/pkg
//! `kustomize.SubstituteVariables`, docs/design.md 2.2), and two opt-in improvements.
//!
//! Default mode, exactly upstream: the resource is re-serialised with `JSONToYAML`, skipped when
//! disabled or when there are no variables, the variable names are validated, `${…}` is
//! substituted in that YAML text, and the text is parsed back with YAML 1.1 resolution
//! (`YAMLToJSON`), so a value `yes` becomes `true` and a value `a: b` breaks the document.
//!
//! [`SubstitutionOptions::typed`] instead substitutes inside the parsed string scalars: values
//! keep their type and cannot inject YAML structure. [`undefined_variables_in_resource`] lists
//! the names a resource uses without defining them (they silently become empty strings).

use std::fmt;

use serde_json::Value;

use crate::Error;
use crate::envsubst::{self, Mode, UndefinedVariable};
use crate::redact::RedactedJson;
use crate::vars::Variables;
use crate::yaml::{emit, parse};

/// The label or annotation that turns substitution off for one resource.
pub const SUBSTITUTE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
/// Its value that disables substitution (exact, case-sensitive).
pub const DISABLED_VALUE: &str = "disabled";
/// The pattern every defined variable name must match (ASCII classes, as Go's RE2).
pub const VAR_NAME_PATTERN: &str = "^[_[:alpha:]][_[:alpha:][:digit:]]*$";

/// How to substitute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubstitutionOptions {
    /// Strict mode: a variable used without a default and not defined is an error.
    pub strict: bool,
    /// `substituteStrategy: Always`: substitute even when no variable is defined.
    pub always: bool,
    /// Opt-in typed mode: substitute inside string scalars of the parsed resource instead of in
    /// its YAML text. Not upstream behaviour.
    pub typed: bool,
}

/// What happened to a resource. `Debug` shows the resource's kind, name and keys, never a value.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum ResourceOutcome {
    /// Substitution ran; the resulting resource.
    Substituted(Value),
    /// The resource is labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled`;
    /// it is used unchanged.
    Disabled,
    /// No variable is defined and the strategy is not `Always`; the resource is used unchanged.
    NoVariables,
}

/// By hand: a substituted resource holds the variables' values, and they may come from Secrets.
impl fmt::Debug for ResourceOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Substituted(value) => f
                .debug_tuple("Substituted")
                .field(&RedactedJson(value))
                .finish(),
            Self::Disabled => f.write_str("Disabled"),
            Self::NoVariables => f.write_str("NoVariables"),
        }
    }
}

impl ResourceOutcome {
    /// The resulting resource: the substituted one, or `original` when substitution was skipped.
    pub fn into_value(self, original: &Value) -> Value {
        match self {
            Self::Substituted(value) => value,
            Self::Disabled | Self::NoVariables => original.clone(),
        }
    }
}

fn is_disabled(resource: &Value) -> bool {
    ["/metadata/labels", "/metadata/annotations"]
        .iter()
        .any(|path| {
            resource
                .pointer(path)
                .and_then(|map| map.get(SUBSTITUTE_KEY))
                .and_then(Value::as_str)
                == Some(DISABLED_VALUE)
        })
}

/// Whether `name` is a valid variable name: `^[_[:alpha:]][_[:alpha:][:digit:]]*$`, ASCII only.
pub fn is_valid_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first == b'_' || first.is_ascii_alphabetic())
        && bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

fn validate_names(vars: &Variables) -> Result<(), Error> {
    // Upstream ranges over a Go map, so with several invalid names the one reported is random;
    // we report the first in byte order.
    match vars.iter().find(|(name, _)| !is_valid_var_name(name)) {
        Some((name, _)) => Err(Error::InvalidVarName(name.to_owned())),
        None => Ok(()),
    }
}

fn envsubst_error(err: Error) -> Error {
    Error::Envsubst(Box::new(err))
}

/// `yaml.YAMLToJSON` on substituted bytes. Bytes that are not UTF-8 (a substring splitting a
/// character) are rejected the way go-yaml's reader rejects them.
///
/// Where upstream's message quotes a piece of the text (an anchor, a map key, a scalar that does
/// not fit its tag), the piece is redacted: it may be a variable's value, taken from a Secret, and
/// the message ends up in the Kustomization's status and Events.
fn yaml_bytes_to_json(bytes: Vec<u8>) -> Result<Value, Error> {
    match String::from_utf8(bytes) {
        Ok(text) => parse::yaml_to_json(&text).map_err(parse::redact_quoted_input),
        Err(err) => {
            let utf8 = err.utf8_error();
            let bytes = err.as_bytes();
            let problem = match (utf8.error_len(), bytes.get(utf8.valid_up_to())) {
                (None, _) => "incomplete UTF-8 octet sequence",
                (Some(_), Some(&lead)) if (0x80..0xC0).contains(&lead) || lead >= 0xF8 => {
                    "invalid leading UTF-8 octet"
                }
                _ => "invalid trailing UTF-8 octet",
            };
            Err(Error::Yaml(format!("yaml: {problem}")))
        }
    }
}

/// Runs post-build substitution on one resource (`kustomize.SubstituteVariables`), with the
/// already loaded variables. Errors read exactly as upstream's (`envsubst error: …`), except that
/// where the substituted YAML does not parse and upstream quotes a piece of it (an anchor, a map
/// key, a scalar that does not fit its tag), that piece is `<redacted: N bytes>`: it may be a
/// value from a Secret. Wrap errors with [`post_build_error`] for the controller's prefix.
pub fn substitute_resource(
    resource: &Value,
    vars: &Variables,
    options: &SubstitutionOptions,
) -> Result<ResourceOutcome, Error> {
    let yaml_text = if options.typed {
        None
    } else {
        Some(emit::json_to_yaml(resource)?)
    };
    if is_disabled(resource) {
        return Ok(ResourceOutcome::Disabled);
    }
    if vars.is_empty() && !options.always {
        return Ok(ResourceOutcome::NoVariables);
    }
    validate_names(vars).map_err(envsubst_error)?;
    let mode = if options.strict {
        Mode::Strict
    } else {
        Mode::NonStrict
    };
    let Some(yaml_text) = yaml_text else {
        let mut value = resource.clone();
        substitute_scalars(&mut value, vars, mode)
            .map_err(|err| envsubst_error(Error::VariableSubstitution(Box::new(err))))?;
        return Ok(ResourceOutcome::Substituted(value));
    };
    let substituted = envsubst::eval_bytes(&yaml_text, vars, mode)
        .map_err(|err| envsubst_error(Error::VariableSubstitution(Box::new(err))))?;
    let value = yaml_bytes_to_json(substituted)
        .map_err(|err| envsubst_error(Error::YamlToJson(Box::new(err))))?;
    Ok(ResourceOutcome::Substituted(value))
}

/// Typed mode: substitute in every string value (not in keys), in document order.
fn substitute_scalars(value: &mut Value, vars: &Variables, mode: Mode) -> Result<(), Error> {
    match value {
        Value::String(text) => {
            if text.contains('$') {
                *text = envsubst::eval(text, vars, mode)?;
            }
        }
        Value::Array(items) => {
            for item in items {
                substitute_scalars(item, vars, mode)?;
            }
        }
        Value::Object(map) => {
            for (_, item) in map.iter_mut() {
                substitute_scalars(item, vars, mode)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// Lint: the variables `resource` uses (outside default operators) that `vars` does not define,
/// which non-strict mode silently turns into empty strings. Never fails for a missing variable;
/// a template that does not parse is an error. Offsets refer to the YAML text (default mode) or
/// to the string scalar (typed mode). Disabled resources use nothing.
pub fn undefined_variables_in_resource(
    resource: &Value,
    vars: &Variables,
    options: &SubstitutionOptions,
) -> Result<Vec<UndefinedVariable>, Error> {
    if is_disabled(resource) {
        return Ok(Vec::new());
    }
    if !options.typed {
        let yaml_text = emit::json_to_yaml(resource)?;
        return envsubst::undefined_variables(&yaml_text, vars);
    }
    let mut found = Vec::new();
    let mut pending = vec![resource];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) if text.contains('$') => {
                found.extend(envsubst::undefined_variables(text, vars)?);
            }
            Value::Array(items) => pending.extend(items.iter().rev()),
            Value::Object(map) => pending.extend(map.values().rev()),
            _ => {}
        }
    }
    Ok(found)
}

/// kustomize's resource id as the controller prints it: `<Kind>.<version>.<group>/<name>`, with
/// `[noGrp]` for the core group (and `[noVer]`, `[noKind]` when missing).
pub fn resource_id(resource: &Value) -> String {
    let text = |path: &str| {
        resource
            .pointer(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let api_version = text("/apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = text("/kind");
    format!(
        "{}.{}.{}/{}",
        if kind.is_empty() { "[noKind]" } else { kind },
        if version.is_empty() {
            "[noVer]"
        } else {
            version
        },
        if group.is_empty() { "[noGrp]" } else { group },
        text("/metadata/name"),
    )
}

/// Wraps an error the way kustomize-controller reports it:
/// `post build failed for '<Kind>.<version>.<group|[noGrp]>/<name>': <error>`.
pub fn post_build_error(resource: &Value, err: Error) -> Error {
    Error::PostBuild {
        id: resource_id(resource),
        source: Box::new(err),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_are_ascii_only() {
        assert!(is_valid_var_name("_Region"));
        assert!(is_valid_var_name("a1"));
        assert!(!is_valid_var_name("1a"));
        assert!(!is_valid_var_name("é"));
        assert!(!is_valid_var_name(""));
        assert!(!is_valid_var_name("a-b"));
    }

    #[test]
    fn resource_ids() {
        let deployment =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"}});
        assert_eq!(resource_id(&deployment), "Deployment.v1.apps/app");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let err = post_build_error(
            &cm,
            Error::Envsubst(Box::new(Error::InvalidVarName("x-y".into()))),
        );
        assert_eq!(
            err.to_string(),
            "post build failed for 'ConfigMap.v1.[noGrp]/c': envsubst error: 'x-y' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
        );
    }

    #[test]
    fn typed_mode_keeps_types_and_structure() {
        let resource = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "${v}", "b": "x ${v}"}, "spec": {"replicas": 3}});
        let vars = Variables::from_merged([("v".to_string(), "a: b".to_string())]);
        let options = SubstitutionOptions {
            typed: true,
            ..Default::default()
        };
        let outcome = substitute_resource(&resource, &vars, &options).unwrap();
        let ResourceOutcome::Substituted(value) = outcome else {
            panic!("not substituted")
        };
        assert_eq!(value["data"], json!({"a": "a: b", "b": "x a: b"}));
        assert_eq!(value["spec"]["replicas"], json!(3));
    }

    #[test]
    fn lint_lists_undefined() {
        let resource = json!({"data": {"a": "${v}", "b": "${w:=x}", "c": "${u}"}});
        let vars = Variables::from_merged([("v".to_string(), "1".to_string())]);
        let options = SubstitutionOptions {
            typed: true,
            ..Default::default()
        };
        let names: Vec<_> = undefined_variables_in_resource(&resource, &vars, &options)
            .unwrap()
            .into_iter()
            .map(|u| u.name)
            .collect();
        assert_eq!(names, ["u"]);
    }
}
