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
use crate::json::pointer as json_at;
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
            json_at(resource, path)
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
    let mut value = yaml_bytes_to_json(substituted)
        .map_err(|err| envsubst_error(Error::YamlToJson(Box::new(err))))?;
    numbers_through_float64(&mut value);
    if let Some(line) = crate::yaml::emit::kyaml::tab_led_block_line(&value) {
        return Err(Error::TabLedBlock { line });
    }
    Ok(ResourceOutcome::Substituted(value))
}

/// What kustomize's `res.UnmarshalJSON` (kyaml `RNode.UnmarshalJSON`) does to the substituted
/// resource: it decodes the JSON with Go's `encoding/json` into `interface{}`, so every number
/// becomes a `float64`, which is written back as JSON. Integers beyond 2^53 come out rounded
/// (`12345678901234567` is applied as `12345678901234568`, `2^63 - 1` as
/// `9223372036854776000`); smaller ones are unchanged.
fn numbers_through_float64(value: &mut Value) {
    // A loop, not recursion: resources may nest deeper than the stack allows.
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Number(n) => {
                if let Some(rounded) = through_float64(n) {
                    *n = rounded;
                }
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(fields) => pending.extend(fields.values_mut()),
            _ => {}
        }
    }
}

/// `n` after Go's round trip: a `float64`, written by `encoding/json` (the shortest digits that
/// give the float back, then zeros: Rust's `Display` writes the same), read again as an integer
/// where it fits one, else as a float (`yaml.YAMLToJSON`'s resolution). `None` when unchanged.
fn through_float64(n: &serde_json::Number) -> Option<serde_json::Number> {
    // Every integer up to 2^53 is a float64 exactly.
    const EXACT: u64 = 1 << 53;
    let f = if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= EXACT {
            return None;
        }
        i as f64
    } else if let Some(u) = n.as_u64() {
        if u <= EXACT {
            return None;
        }
        u as f64
    } else {
        return None;
    };
    let text = f.to_string();
    if let Ok(i) = text.parse::<i64>() {
        Some(serde_json::Number::from(i))
    } else if let Ok(u) = text.parse::<u64>() {
        Some(serde_json::Number::from(u))
    } else {
        serde_json::Number::from_f64(f)
    }
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
        json_at(resource, path)
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

    /// Vectors from kustomize-controller v1.9.5's own `SubstituteVariables` (fluxcd/pkg
    /// kustomize v1.35.6, kustomize api v0.21.1), run on this resource.
    #[test]
    fn numbers_go_through_float64_as_in_kustomize() {
        let resource = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
            "data": {"v": "${V}"},
            "spec": {"a": 9_007_199_254_740_993_i64, "b": -9_007_199_254_740_993_i64,
                     "c": u64::MAX, "d": i64::MAX, "e": 1_000_000, "g": 1.5,
                     "h": 12_345_678_901_234_567_i64, "k": "${N}"}});
        let vars = Variables::from_merged([
            ("V".to_string(), "1".to_string()),
            ("N".to_string(), "9007199254740995".to_string()),
        ]);
        let outcome = substitute_resource(&resource, &vars, &SubstitutionOptions::default());
        let Ok(ResourceOutcome::Substituted(value)) = outcome else {
            panic!("not substituted")
        };
        let spec = &value["spec"];
        assert_eq!(spec["a"], json!(9_007_199_254_740_992_i64));
        assert_eq!(spec["b"], json!(-9_007_199_254_740_992_i64));
        assert_eq!(spec["c"], json!(1.844_674_407_370_955_2e19));
        assert_eq!(spec["d"], json!(9_223_372_036_854_776_000_u64));
        assert_eq!(spec["e"], json!(1_000_000));
        assert_eq!(spec["g"], json!(1.5));
        assert_eq!(spec["h"], json!(12_345_678_901_234_568_i64));
        assert_eq!(spec["k"], json!(9_007_199_254_740_996_i64));
        // Without substitution kustomize keeps the resource as built: nothing is rounded.
        let none = substitute_resource(
            &resource,
            &Variables::default(),
            &SubstitutionOptions::default(),
        );
        assert!(matches!(none, Ok(ResourceOutcome::NoVariables)));
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
