//! Flux's post-build substitution over a stream of already built manifests (`conflux build`, on
//! `kustomize build` output for example): the variables from a Flux Kustomization's
//! `spec.postBuild` or from ConfigMaps and Secrets ([`variables`]), then each document
//! substituted and written as kustomize-controller would see it ([`substitute_document`]).
//!
//! ```
//! use conflux_postbuild_subst::resource::SubstitutionOptions;
//! use conflux_postbuild_subst::stream::{substitute_document, variables};
//! use serde_json::json;
//!
//! let sources = [json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vars"},
//!                       "data": {"region": "eu-1"}})];
//! let (vars, always) = variables(None, &sources)?;
//! assert!(!always);
//! let document = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
//!                       "data": {"region": "${region}"}});
//! let yaml = substitute_document(&document, &vars, &SubstitutionOptions::default())?;
//! assert_eq!(yaml, "apiVersion: v1\ndata:\n  region: eu-1\nkind: ConfigMap\nmetadata:\n  name: app\n");
//! # Ok::<(), conflux_postbuild_subst::Error>(())
//! ```

use serde_json::Value;

use crate::json::text;
use crate::resource::{
    SubstitutionOptions, post_build_error, resource_id, substitute_resource,
    undefined_variables_in_resource,
};
use crate::vars::{
    PostBuild, SourceKind, SourceLookup, SubstituteReference, SubstituteStrategy, Variables,
    load_variables, source_data,
};
use crate::yaml::emit::json_to_yaml;
use crate::{Error, Result};

/// The Flux Kustomization named `name` (`NAME` or `NAMESPACE/NAME`) among `documents`, or the
/// only one there is.
pub fn pick_kustomization(documents: Vec<Value>, name: Option<&str>) -> Result<Value> {
    let is_flux = |d: &Value| {
        text(d, "/kind") == "Kustomization"
            && text(d, "/apiVersion").starts_with("kustomize.toolkit.fluxcd.io/")
    };
    let id = |d: &Value| {
        format!(
            "{}/{}",
            text(d, "/metadata/namespace"),
            text(d, "/metadata/name")
        )
    };
    let mut found: Vec<Value> = documents.into_iter().filter(is_flux).collect();
    if let Some(name) = name {
        found.retain(|d| text(d, "/metadata/name") == name || id(d) == name);
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Error::NoKustomization {
            name: name.map(str::to_owned),
        }),
        _ => Err(Error::SeveralKustomizations(found.iter().map(id).collect())),
    }
}

/// The variables, and whether to substitute even without any (`substituteStrategy: Always`).
///
/// With a Flux Kustomization: its `spec.postBuild`, each `substituteFrom` object looked up among
/// `sources` in the Kustomization's namespace or without a namespace. Without one: the data of
/// every ConfigMap and Secret of `sources`, in order (a later key wins); any other kind is an
/// error.
pub fn variables(kustomization: Option<&Value>, sources: &[Value]) -> Result<(Variables, bool)> {
    let Some(kustomization) = kustomization else {
        let mut vars = Variables::new();
        for object in sources {
            let kind = match text(object, "/kind") {
                "ConfigMap" => SourceKind::ConfigMap,
                "Secret" => SourceKind::Secret,
                other => return Err(Error::NotAVariableSource(other.to_owned())),
            };
            for (name, value) in source_data(&kind, object)? {
                vars.insert(name, &value);
            }
        }
        return Ok((vars, false));
    };
    let namespace = text(kustomization, "/metadata/namespace");
    let post_build = PostBuild::from_kustomization(kustomization)?;
    let vars = load_variables(&post_build, |reference: &SubstituteReference| {
        let found = sources.iter().find(|object| {
            text(object, "/kind") == reference.kind.as_str()
                && text(object, "/metadata/name") == reference.name
                && [namespace, ""].contains(&text(object, "/metadata/namespace"))
        });
        match found {
            Some(object) => SourceLookup::Found(object.clone()),
            None => SourceLookup::NotFound,
        }
    })?;
    let always = post_build.substitute_strategy == SubstituteStrategy::Always;
    Ok((vars, always))
}

/// One document substituted, as YAML (go-yaml v2's `JSONToYAML`); an error carries
/// kustomize-controller's `post build failed for '<id>'` prefix.
pub fn substitute_document(
    document: &Value,
    vars: &Variables,
    options: &SubstitutionOptions,
) -> Result<String> {
    substitute_resource(document, vars, options)
        .map(|outcome| outcome.into_value(document))
        .and_then(|value| json_to_yaml(&value))
        .map_err(|err| post_build_error(document, err))
}

/// What a lint says about one document: each variable it uses that `vars` does not define
/// (substitution makes it an empty string). A document that does not parse as a template says
/// nothing here; substituting it reports the error.
pub fn undefined_warnings(
    document: &Value,
    vars: &Variables,
    options: &SubstitutionOptions,
) -> Vec<String> {
    let undefined = undefined_variables_in_resource(document, vars, options).unwrap_or_default();
    let id = resource_id(document);
    undefined
        .into_iter()
        .map(|variable| {
            format!(
                "'{id}': variable '{}' is used but not defined (substituted as an empty string)",
                variable.name
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kustomization(namespace: &str, name: &str) -> Value {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"postBuild": {"substitute": {"A": name}}}})
    }

    #[test]
    fn a_kustomization_is_picked_by_name_or_as_the_only_one() {
        let config_map = json!({"apiVersion": "v1", "kind": "Kustomization"});
        let two = || {
            vec![
                kustomization("x", "a"),
                kustomization("y", "b"),
                config_map.clone(),
            ]
        };
        assert_eq!(
            pick_kustomization(two(), Some("y/b")),
            Ok(kustomization("y", "b"))
        );
        assert_eq!(
            pick_kustomization(two(), Some("a")),
            Ok(kustomization("x", "a"))
        );
        let several = pick_kustomization(two(), None).map_err(|e| e.to_string());
        assert_eq!(
            several,
            Err("holds several Flux Kustomizations (x/a, y/b): choose one with --name".into())
        );
        let missing = pick_kustomization(two(), Some("c")).map_err(|e| e.to_string());
        assert_eq!(missing, Err("holds no Flux Kustomization named 'c'".into()));
        let none = pick_kustomization(vec![config_map], None).map_err(|e| e.to_string());
        assert_eq!(none, Err("holds no Flux Kustomization".into()));
    }

    #[test]
    fn variables_come_from_the_kustomization_or_from_every_source() {
        let cm = |namespace: &str, value: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "vars", "namespace": namespace}, "data": {"B": value}})
        };
        let mut ks = kustomization("flux-system", "apps");
        ks["spec"]["postBuild"]["substituteFrom"] = json!([{"kind": "ConfigMap", "name": "vars"}]);
        ks["spec"]["postBuild"]["substituteStrategy"] = json!("Always");
        let sources = [cm("elsewhere", "no"), cm("flux-system", "yes")];
        let (vars, always) = variables(Some(&ks), &sources).expect("variables");
        assert_eq!(
            (vars.get("A"), vars.get("B"), always),
            (Some("apps"), Some("yes"), true)
        );

        let (vars, always) = variables(None, &sources).expect("variables");
        assert_eq!(
            (vars.get("B"), always),
            (Some("yes"), false),
            "the later source wins"
        );
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        let refused = variables(None, &[deployment]).map_err(|e| e.to_string());
        assert_eq!(
            refused,
            Err("--substitute-from: expected ConfigMap or Secret, found kind 'Deployment'".into())
        );
    }

    #[test]
    fn lint_names_each_undefined_variable_of_a_document() {
        let document = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                              "data": {"a": "${a}", "b": "${b:=x}"}});
        let warnings = undefined_warnings(&document, &Variables::new(), &Default::default());
        assert_eq!(
            warnings,
            [
                "'ConfigMap.v1.[noGrp]/c': variable 'a' is used but not defined (substituted as an empty string)"
            ]
        );
        let failed = substitute_document(
            &document,
            &Variables::new(),
            &SubstitutionOptions {
                strict: true,
                always: true,
                typed: false,
            },
        );
        let message = failed.map_err(|e| e.to_string());
        assert!(
            message
                .is_err_and(|m| m.starts_with("post build failed for 'ConfigMap.v1.[noGrp]/c': ")),
        );
    }
}
