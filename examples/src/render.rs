//! A small renderer: Flux's post-build `${VAR}` substitution on a multi-document YAML stream,
//! with `postbuild-subst` doing exactly what kustomize-controller does to each built resource
//! (go-yaml v2 round trip included, so `"3"` substituted into `replicas` becomes the number 3).
//!
//! Variables come from a vars file (a flat `name: value` mapping, or ConfigMap/Secret manifests as
//! Flux's `substituteFrom` reads them) and from the environment (`RENDER_VAR_<name>=value`, which
//! wins). Strict mode is Flux's `--strict`: a `${name}` without a default and without a value is
//! an error naming the resource, instead of an empty string.

use conflux_postbuild_subst::resource::{
    ResourceOutcome, SubstitutionOptions, post_build_error, substitute_resource,
};
use conflux_postbuild_subst::vars::{SourceKind, Variables, source_data};
use conflux_postbuild_subst::yaml::emit::json_to_yaml;
use serde_json::Value;

/// Prefix of environment variables that define substitution variables.
pub const ENV_PREFIX: &str = "RENDER_VAR_";

/// What can go wrong while rendering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A YAML stream does not parse.
    #[error("parsing {what}: {message}")]
    Parse {
        /// Which input.
        what: String,
        /// The parser's message.
        message: String,
    },
    /// The vars file holds something other than a mapping of names to scalars, a ConfigMap or a
    /// Secret.
    #[error("vars file: {0}")]
    Vars(String),
    /// Substitution failed, worded as kustomize-controller words it.
    #[error(transparent)]
    Substitution(#[from] conflux_postbuild_subst::Error),
}

/// The documents of a YAML stream, empty ones dropped. YAML 1.2 booleans only: `yes` stays a
/// string, as kustomize hands it to the substitution step.
pub fn parse_documents(text: &str, what: &str) -> Result<Vec<Value>, Error> {
    let options = serde_saphyr::options! { strict_booleans: true };
    let documents: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|err| Error::Parse {
            what: what.to_owned(),
            message: err.to_string(),
        })?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// Variables from a vars file: each document is a ConfigMap or Secret (its data, as
/// `substituteFrom` reads it) or a flat mapping of names to scalars. Later documents win.
pub fn vars_from_file(text: &str) -> Result<Variables, Error> {
    let mut vars = Variables::new();
    for document in parse_documents(text, "the vars file")? {
        let kind = document.get("kind").and_then(Value::as_str);
        match kind {
            Some("ConfigMap") | Some("Secret") => {
                let kind = if kind == Some("Secret") {
                    SourceKind::Secret
                } else {
                    SourceKind::ConfigMap
                };
                for (name, value) in source_data(&kind, &document)? {
                    vars.insert(name, &value);
                }
            }
            Some(other) => {
                return Err(Error::Vars(format!(
                    "expected a ConfigMap, a Secret or a mapping, found kind '{other}'"
                )));
            }
            None => {
                let Some(map) = document.as_object() else {
                    return Err(Error::Vars("a document is not a mapping".to_owned()));
                };
                for (name, value) in map {
                    let value = match value {
                        Value::String(s) => s.clone(),
                        Value::Number(_) | Value::Bool(_) => value.to_string(),
                        _ => {
                            return Err(Error::Vars(format!(
                                "'{name}' must be a string, number or boolean"
                            )));
                        }
                    };
                    vars.insert(name.clone(), &value);
                }
            }
        }
    }
    Ok(vars)
}

/// Adds `RENDER_VAR_<name>=value` pairs from `env` to `vars` (overriding them).
pub fn add_env_vars(vars: &mut Variables, env: impl IntoIterator<Item = (String, String)>) {
    for (key, value) in env {
        if let Some(name) = key.strip_prefix(ENV_PREFIX) {
            vars.insert(name, &value);
        }
    }
}

/// Substitutes every document of `manifests` with `vars`, as Flux's post-build step, and returns
/// the YAML stream (documents separated by `---`). Stops at the first resource that fails.
pub fn render(manifests: &str, vars: &Variables, strict: bool) -> Result<String, Error> {
    let options = SubstitutionOptions {
        strict,
        ..SubstitutionOptions::default()
    };
    let mut out = String::new();
    for (i, document) in parse_documents(manifests, "the manifests")?
        .iter()
        .enumerate()
    {
        let rendered = substitute_resource(document, vars, &options)
            .map(|outcome: ResourceOutcome| outcome.into_value(document))
            .and_then(|value| json_to_yaml(&value))
            .map_err(|err| post_build_error(document, err))?;
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&rendered);
    }
    Ok(out)
}
