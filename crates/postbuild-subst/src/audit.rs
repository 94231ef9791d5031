//! Offline audit of Flux Kustomizations with `spec.postBuild` over a set of manifests (a fleet
//! repository): what kustomize-controller's substitution would do to the resources each one
//! applies, and where that goes wrong (docs/design.md 2.2).
//!
//! For each Kustomization with `postBuild`:
//! 1. the variables are loaded as upstream loads them, from `substitute` and the `substituteFrom`
//!    ConfigMaps/Secrets found among the documents (in the Kustomization's namespace; later
//!    documents with the same key win, so copies as written can be appended);
//! 2. every defined name is validated (`InvalidVariableName`: upstream fails the whole build);
//! 3. the resources it applies are the documents whose file lies under `spec.path` — following a
//!    `kustomization.yaml` there (its `resources`, files or directories, recursively), else every
//!    document below the directory, as kustomize-controller generates one;
//! 4. each resource is substituted exactly as upstream (`JSONToYAML`, `${…}`, YAML 1.1
//!    `YAMLToJSON`) and, to compare, in typed mode. Findings: `UndefinedVariable` (error: used
//!    outside a default operator and never defined, it becomes an empty string; info when no
//!    variable is defined at all, so upstream does not substitute and it stays literally, or
//!    when a source's keys are not known offline, see [`UNKNOWN_KEYS_ANNOTATION`]), `CoercedValue` (warning: a string that YAML
//!    1.1 turns into a bool, a number other than a plain decimal integer, or null, such as `yes`,
//!    `on`, `0755`, `1e3`, `~` or empty), `SubstitutionFailed` (error: upstream's message, e.g. a
//!    value that breaks the YAML), `SubstituteSourceMissing` (warning: a non-optional
//!    `substituteFrom` source not in the input; it may be made outside the repository),
//!    `InvalidPostBuild` (error).
//!
//! [`target_namespaces`] gives the namespaces `spec.targetNamespace` sets on the documents a
//! Kustomization applies, for callers that read manifests without namespaces.
//!
//! Documents without a file (generated ones, copies) are never resources of a Kustomization.
//! The resource selection is an approximation: kustomize patches, generators and remote bases
//! are not applied.
//!
//! ```
//! use conflux_postbuild_subst::audit::{audit, Document};
//! use serde_json::json;
//!
//! let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
//!     "metadata": {"name": "apps", "namespace": "flux-system"},
//!     "spec": {"path": "./apps", "postBuild": {"substitute": {"ENABLED": "yes"}}}});
//! let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flags"},
//!     "data": {"enabled": "${ENABLED}", "region": "${REGION}"}});
//! let documents = [
//!     Document { object: &ks, file: Some("clusters/prod/apps.yaml") },
//!     Document { object: &cm, file: Some("apps/flags.yaml") },
//! ];
//! let codes: Vec<&str> = audit(&documents).iter().map(|f| f.code).collect();
//! assert_eq!(codes, ["CoercedValue", "UndefinedVariable"]);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::Error;
use crate::json::{pointer as json_at, text};
use crate::redact::RedactedJson;
use crate::resource::{
    ResourceOutcome, SubstitutionOptions, is_valid_var_name, post_build_error, substitute_resource,
    undefined_variables_in_resource,
};
use crate::vars::{
    PostBuild, SourceKind, SourceLookup, SubstituteStrategy, load_variables, source_data,
};

/// Set by a caller on a ConfigMap or Secret of the input whose keys are not all known offline
/// (for example the Secret an External Secrets `ExternalSecret` makes from `dataFrom`), with why
/// as its value. A variable such a `substituteFrom` source may define is never reported as an
/// error: `UndefinedVariable` is then an info that names the source.
pub const UNKNOWN_KEYS_ANNOTATION: &str = "audit.conflux.dev/unknown-keys";

/// How serious a finding is. Ordered: `Info < Warning < Error`. The same levels as
/// `conflux_watch_index::audit::Severity`, kept apart on purpose: depending on watch-index would pull
/// k8s-openapi (and its version feature) into this text-only crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Works, but probably not as intended.
    Warning,
    /// Fails when applied.
    Error,
}

impl Severity {
    /// `info`, `warning` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found, in the shape of `conflux_watch_index::audit::Finding`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How serious it is.
    pub severity: Severity,
    /// A stable, PascalCase reason code (`UndefinedVariable`).
    pub code: &'static str,
    /// The object to fix, `Kind/namespace/name` (`Kind/name` without a namespace).
    pub object: String,
    /// What is wrong and what it causes. Never contains Secret values.
    pub message: String,
}

impl Finding {
    /// A finding from its parts.
    pub fn new(
        severity: Severity,
        code: &'static str,
        object: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            code,
            object: object.into(),
            message: message.into(),
        }
    }
}

/// One parsed manifest and the file it came from. `Debug` shows the object's kind, name and keys,
/// never a value.
#[derive(Clone, Copy)]
pub struct Document<'a> {
    /// The object.
    pub object: &'a Value,
    /// Its file, relative to the repository root with `/` separators (`tenants/team-a/app.yaml`);
    /// `None` for objects that no Kustomization applies (generated objects, copies).
    pub file: Option<&'a str>,
}

/// By hand: the manifest may be a Secret with its data.
impl fmt::Debug for Document<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("object", &RedactedJson(self.object))
            .field("file", &self.file)
            .finish()
    }
}

/// `Kind/namespace/name` (`Kind/name` without a namespace).
fn object_name(object: &Value) -> String {
    let namespace = text(object, "/metadata/namespace");
    let (kind, name) = (text(object, "/kind"), text(object, "/metadata/name"));
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

fn group(object: &Value) -> &str {
    let api_version = text(object, "/apiVersion");
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// A kustomize configuration file (`kustomize.config.k8s.io`), not a resource.
fn is_kustomize_config(object: &Value) -> bool {
    group(object) == "kustomize.config.k8s.io"
}

/// Audits every Flux Kustomization with `spec.postBuild` among `documents`; see the
/// [module docs](self). Findings are ordered by Kustomization, in document order.
pub fn audit(documents: &[Document<'_>]) -> Vec<Finding> {
    let configs = Configs::new(documents.iter().map(|doc| doc.object));
    let mut findings = Vec::new();
    for doc in documents {
        let object = doc.object;
        let is_flux_ks = group(object) == "kustomize.toolkit.fluxcd.io"
            && text(object, "/kind") == "Kustomization";
        if is_flux_ks && json_at(object, "/spec/postBuild").is_some_and(|p| !p.is_null()) {
            let resources = resources(text(object, "/spec/path"), documents);
            kustomization(object, &resources, &configs.0, &mut findings);
        }
    }
    findings
}

/// The cluster's ConfigMaps and Secrets by kind, namespace and name (later ones win), indexed
/// once for every [`audit_kustomization`] of a fleet.
pub struct Configs<'a>(BTreeMap<(&'a str, &'a str, &'a str), &'a Value>);

impl<'a> Configs<'a> {
    /// The ConfigMaps and Secrets among `objects`; other objects are left out.
    pub fn new(objects: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut by_key = BTreeMap::new();
        for object in objects {
            let kind = text(object, "/kind");
            if text(object, "/apiVersion") == "v1" && matches!(kind, "ConfigMap" | "Secret") {
                let key = (
                    kind,
                    text(object, "/metadata/namespace"),
                    text(object, "/metadata/name"),
                );
                by_key.insert(key, object);
            }
        }
        Configs(by_key)
    }
}

/// Audits one Flux Kustomization given what it applies (`resources`, as built, before
/// substitution), with the ConfigMaps/Secrets of the cluster ([`Configs`]); see the
/// [module docs](self). For callers that build each Kustomization themselves.
pub fn audit_kustomization(
    ks: &Value,
    resources: &[Document<'_>],
    configs: &Configs<'_>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    if json_at(ks, "/spec/postBuild").is_some_and(|p| !p.is_null()) {
        kustomization(ks, resources, &configs.0, &mut findings);
    }
    findings
}

fn kustomization(
    ks: &Value,
    resources: &[Document<'_>],
    configs: &BTreeMap<(&str, &str, &str), &Value>,
    findings: &mut Vec<Finding>,
) {
    let name = object_name(ks);
    let namespace = text(ks, "/metadata/namespace");
    let mut add = |severity, code, message: String| {
        findings.push(Finding::new(severity, code, name.clone(), message));
    };
    let post_build = match PostBuild::from_kustomization(ks) {
        Ok(post_build) => post_build,
        Err(err) => return add(Severity::Error, "InvalidPostBuild", err.to_string()),
    };
    let vars = load_variables(&post_build, |reference| {
        match configs.get(&(reference.kind.as_str(), namespace, reference.name.as_str())) {
            Some(object) => SourceLookup::Found((*object).clone()),
            None => SourceLookup::NotFound,
        }
    });
    let vars = match vars {
        Ok(vars) => vars,
        Err(err) => {
            // Not in the input is not "not in the cluster": Terraform, External Secrets or an
            // operator may make it. Its variables are unknown, so none is checked.
            return add(
                Severity::Warning,
                "SubstituteSourceMissing",
                format!(
                    "{err} in the input: if it is not made outside the repository (declare it with --external), the Kustomization fails to build; its variables are not checked"
                ),
            );
        }
    };
    // Names whose value comes from a Secret (and not overridden inline): never shown.
    let mut secret_names = BTreeSet::new();
    for reference in &post_build.substitute_from {
        let key = (reference.kind.as_str(), namespace, reference.name.as_str());
        if let (SourceKind::Secret, Some(secret)) = (&reference.kind, configs.get(&key)) {
            let data = source_data(&reference.kind, secret).unwrap_or_default();
            secret_names.extend(data.into_keys());
        } else if let Some(config) = configs.get(&key) {
            let data = source_data(&reference.kind, config).unwrap_or_default();
            data.keys().for_each(|k| {
                secret_names.remove(k);
            });
        }
    }
    secret_names.retain(|name: &String| !post_build.substitute.contains_key(name));
    // Sources whose keys are not all known offline (marked by the caller), with why.
    let unknown_keys: Vec<(String, String)> = post_build
        .substitute_from
        .iter()
        .filter_map(|reference| {
            let key = (reference.kind.as_str(), namespace, reference.name.as_str());
            let why = configs
                .get(&key)?
                .pointer("/metadata/annotations")?
                .get(UNKNOWN_KEYS_ANNOTATION)?
                .as_str()?;
            Some((
                format!("{}/{}", reference.kind.as_str(), reference.name),
                why.to_owned(),
            ))
        })
        .collect();
    let invalid: Vec<&str> = vars
        .iter()
        .map(|(n, _)| n)
        .filter(|n| !is_valid_var_name(n))
        .collect();
    for bad in &invalid {
        add(
            Severity::Error,
            "InvalidVariableName",
            format!(
                "{}: the Kustomization fails to build",
                Error::InvalidVarName((*bad).to_owned())
            ),
        );
    }
    if !invalid.is_empty() {
        return;
    }
    let always = post_build.substitute_strategy == SubstituteStrategy::Always;
    let runs = always || !vars.is_empty();
    let options = SubstitutionOptions {
        always,
        ..SubstitutionOptions::default()
    };
    let typed = SubstitutionOptions {
        typed: true,
        ..options
    };
    // Undefined names, with the resources using them, in order of first use.
    let mut undefined: Vec<(String, Vec<String>)> = Vec::new();
    for resource in resources.iter().copied() {
        let label = match resource.file {
            Some(file) => format!("{} ({file})", object_name(resource.object)),
            None => object_name(resource.object),
        };
        match undefined_variables_in_resource(resource.object, &vars, &options) {
            Ok(names) => {
                for variable in names {
                    match undefined.iter_mut().find(|(n, _)| *n == variable.name) {
                        Some((_, users)) if users.contains(&label) => {}
                        Some((_, users)) => users.push(label.clone()),
                        None => undefined.push((variable.name, vec![label.clone()])),
                    }
                }
            }
            Err(err) => {
                add(
                    Severity::Error,
                    "SubstitutionFailed",
                    post_build_error(resource.object, err).to_string(),
                );
                continue;
            }
        }
        if !runs {
            continue;
        }
        let upstream = match substitute_resource(resource.object, &vars, &options) {
            Ok(ResourceOutcome::Substituted(value)) => value,
            Ok(_) => continue,
            Err(err) => {
                add(
                    Severity::Error,
                    "SubstitutionFailed",
                    post_build_error(resource.object, err).to_string(),
                );
                continue;
            }
        };
        if let Ok(ResourceOutcome::Substituted(as_strings)) =
            substitute_resource(resource.object, &vars, &typed)
        {
            let mut found = Vec::new();
            let mut walk = Walk {
                vars: &vars,
                path: String::new(),
                found: &mut found,
            };
            walk.coerced(resource.object, &upstream, &as_strings);
            for (path, template, value, intended) in found {
                let secret = secret_names
                    .iter()
                    .any(|name| template.contains(&format!("${{{name}")));
                let what = if secret {
                    format!(
                        "a value of type {} (from a Secret, not shown)",
                        json_type(&value)
                    )
                } else {
                    format!(
                        "{value} ({}), not the string {intended:?}",
                        json_type(&value)
                    )
                };
                add(
                    Severity::Warning,
                    "CoercedValue",
                    format!(
                        "{label}: {path} = '{template}' becomes {what}: substitution runs on the re-serialised YAML, where the value is unquoted, and YAML 1.1 resolves it; put quotes in the variable's value to keep a string"
                    ),
                );
            }
        }
    }
    for (variable, users) in undefined {
        // Only a blanked value is an error: with no variable at all, upstream does not substitute
        // and `${X}` is applied as written (Grafana dashboards rely on it); a source whose keys
        // are not known offline may define it.
        let (severity, effect) = if !unknown_keys.is_empty() {
            (
                Severity::Info,
                format!(
                    "{} may define it (its keys are not known offline: {}); if it does not, it is {}",
                    unknown_keys
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    unknown_keys
                        .iter()
                        .map(|(_, why)| why.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if runs {
                        "replaced by an empty string"
                    } else {
                        "applied literally"
                    }
                ),
            )
        } else if runs {
            (
                Severity::Error,
                "it is replaced by an empty string".to_owned(),
            )
        } else {
            (
                Severity::Info,
                "no variable is defined, so substitution does not run and it is applied literally"
                    .to_owned(),
            )
        };
        add(
            severity,
            "UndefinedVariable",
            format!(
                "${{{variable}}} is used by {} but defined neither by postBuild.substitute nor by a substituteFrom source in the input: {effect}",
                users.join(", ")
            ),
        );
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// A plain decimal integer, or `true`/`false`: what a variable is expected to turn into when it
/// fills a number or bool field (`replicas: ${REPLICAS}`). Anything else YAML 1.1 resolves is a
/// surprise.
fn intended_coercion(s: &str) -> bool {
    if matches!(s, "true" | "false" | "True" | "False" | "TRUE" | "FALSE") {
        return true;
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    digits == "0"
        || (!digits.is_empty()
            && !digits.starts_with('0')
            && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Walks the original resource, its upstream substitution and its typed substitution together;
/// collects (path, template, upstream value, typed string) where the typed result is a string that
/// upstream turned into something else by surprise. Templates using an undefined variable are left
/// to `UndefinedVariable`.
struct Walk<'a> {
    vars: &'a crate::vars::Variables,
    path: String,
    found: &'a mut Vec<(String, String, Value, String)>,
}

impl Walk<'_> {
    fn coerced(&mut self, original: &Value, upstream: &Value, typed: &Value) {
        match (original, upstream, typed) {
            (Value::String(template), up, Value::String(s)) if !up.is_string() => {
                let uses_undefined = crate::envsubst::undefined_variables(template, self.vars)
                    .map_or(true, |u| !u.is_empty());
                if template.contains("${") && !intended_coercion(s) && !uses_undefined {
                    let entry = (self.path.clone(), template.clone(), up.clone(), s.clone());
                    self.found.push(entry);
                }
            }
            (Value::Object(o), Value::Object(u), Value::Object(t)) => {
                for (key, value) in o {
                    if let (Some(u), Some(t)) = (u.get(key), t.get(key)) {
                        let len = self.path.len();
                        if key.contains(['.', '/', '[', ' ']) {
                            self.path.push_str(&format!("[{key:?}]"));
                        } else {
                            if !self.path.is_empty() {
                                self.path.push('.');
                            }
                            self.path.push_str(key);
                        }
                        self.coerced(value, u, t);
                        self.path.truncate(len);
                    }
                }
            }
            (Value::Array(o), Value::Array(u), Value::Array(t)) => {
                for (i, ((o, u), t)) in o.iter().zip(u).zip(t).enumerate() {
                    let len = self.path.len();
                    self.path.push_str(&format!("[{i}]"));
                    self.coerced(o, u, t);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// Kinds kustomize never puts in a namespace (the built-in cluster-scoped kinds, plus conflux's
/// `ConfigSync`); every other kind is taken as namespaced, as kustomize does for unknown kinds.
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "APIService",
    "CSIDriver",
    "CSINode",
    "CertificateSigningRequest",
    "ClusterIssuer",
    "ClusterRole",
    "ClusterRoleBinding",
    "ComponentStatus",
    "ConfigSync",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
    "VolumeSnapshotClass",
];

/// The namespaces Flux Kustomizations' `spec.targetNamespace` give documents: `(index into
/// documents, namespace)` for every namespaced document (by kind, see [`CLUSTER_SCOPED_KINDS`])
/// that a Kustomization with a `targetNamespace` applies ([`resources`]). When several do, the
/// one with the longest `spec.path` wins. kustomize-controller sets the namespace whether or not
/// the manifest has one.
pub fn target_namespaces(documents: &[Document<'_>]) -> Vec<(usize, String)> {
    let mut assigned: BTreeMap<usize, (usize, String)> = BTreeMap::new();
    for doc in documents {
        let object = doc.object;
        let target = text(object, "/spec/targetNamespace");
        let is_flux_ks = group(object) == "kustomize.toolkit.fluxcd.io"
            && text(object, "/kind") == "Kustomization";
        if !is_flux_ks || target.is_empty() {
            continue;
        }
        let path = normalize(text(object, "/spec/path"));
        let mut picked = BTreeSet::new();
        collect(&path, documents, &mut picked, 0);
        for index in picked {
            let Some(resource) = documents.get(index) else {
                continue;
            };
            if CLUSTER_SCOPED_KINDS.contains(&text(resource.object, "/kind")) {
                continue;
            }
            let more_specific = assigned
                .get(&index)
                .is_none_or(|(len, _)| path.len() > *len);
            if more_specific {
                assigned.insert(index, (path.len(), target.to_owned()));
            }
        }
    }
    assigned
        .into_iter()
        .map(|(index, (_, namespace))| (index, namespace))
        .collect()
}

/// `a/b/../c/./d` → `a/c/d`; leading `./` and `/`, trailing `/` removed: a Flux `spec.path`
/// or a kustomize resource as a path relative to the repository root.
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

fn join(dir: &str, entry: &str) -> String {
    if dir.is_empty() {
        normalize(entry)
    } else {
        normalize(&format!("{dir}/{entry}"))
    }
}

fn under(file: &str, dir: &str) -> bool {
    dir.is_empty()
        || file
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The documents a Kustomization with `spec.path` `path` applies (see the [module docs](self)).
pub fn resources<'a>(path: &str, documents: &[Document<'a>]) -> Vec<Document<'a>> {
    let mut picked = BTreeSet::new();
    collect(&normalize(path), documents, &mut picked, 0);
    picked
        .into_iter()
        .filter_map(|i| documents.get(i).copied())
        .collect()
}

fn collect(dir: &str, documents: &[Document<'_>], picked: &mut BTreeSet<usize>, depth: usize) {
    if depth > 32 {
        return;
    }
    let config = ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|f| join(dir, f))
        .find_map(|file| {
            documents
                .iter()
                .find(|d| d.file == Some(file.as_str()) && is_kustomize_config(d.object))
        });
    let Some(config) = config else {
        for (i, doc) in documents.iter().enumerate() {
            if doc.file.is_some_and(|f| under(f, dir)) && !is_kustomize_config(doc.object) {
                picked.insert(i);
            }
        }
        return;
    };
    let entries = ["resources", "components"]
        .iter()
        .filter_map(|field| config.object.get(field)?.as_array())
        .flatten()
        .filter_map(Value::as_str);
    for entry in entries {
        if entry.contains("://") || entry.starts_with("github.com/") {
            continue;
        }
        let target = join(dir, entry);
        let mut is_file = false;
        for (i, doc) in documents.iter().enumerate() {
            if doc.file == Some(target.as_str()) {
                is_file = true;
                if !is_kustomize_config(doc.object) {
                    picked.insert(i);
                }
            }
        }
        if !is_file {
            collect(&target, documents, picked, depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ks(post_build: Value) -> Value {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
               "metadata": {"name": "apps", "namespace": "flux-system"},
               "spec": {"path": "./apps", "postBuild": post_build}})
    }

    fn run(objects: &[(&Value, Option<&str>)]) -> Vec<(&'static str, Severity, String)> {
        let documents: Vec<Document<'_>> = objects
            .iter()
            .map(|(object, file)| Document {
                object,
                file: *file,
            })
            .collect();
        audit(&documents)
            .into_iter()
            .map(|f| (f.code, f.severity, f.message))
            .collect()
    }

    #[test]
    fn undefined_coerced_and_intended() {
        let ks = ks(json!({
            "substitute": {"REPLICAS": "3", "ON": "true"},
            "substituteFrom": [{"kind": "ConfigMap", "name": "vars"}],
        }));
        let vars = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "vars", "namespace": "flux-system"},
            "data": {"MODE": "0755", "FLAG": "yes", "EMPTY": "", "VERSION": "1.20", "NAME": "web"}});
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "${NAME}", "namespace": "apps"},
            "spec": {"replicas": "${REPLICAS}", "paused": "${ON}",
                     "template": {"metadata": {"annotations": {
                         "mode": "${MODE}", "flag": "${FLAG}", "empty": "${EMPTY}",
                         "version": "${VERSION}", "mixed": "v-${FLAG}",
                         "default": "${UNSET:=x}", "missing": "${MISSING}"}}}}});
        let out = run(&[
            (&ks, Some("clusters/prod/apps.yaml")),
            (&vars, Some("clusters/prod/vars.yaml")),
            (&deployment, Some("apps/web/deployment.yaml")),
        ]);
        let codes: Vec<(&str, Severity)> = out.iter().map(|(c, s, _)| (*c, *s)).collect();
        assert_eq!(
            codes,
            [
                ("CoercedValue", Severity::Warning),
                ("CoercedValue", Severity::Warning),
                ("CoercedValue", Severity::Warning),
                ("CoercedValue", Severity::Warning),
                ("UndefinedVariable", Severity::Error),
            ]
        );
        let paths: Vec<&str> = out
            .iter()
            .take(4)
            .map(|(_, _, m)| m.split(" = ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            paths,
            [
                "Deployment/apps/${NAME} (apps/web/deployment.yaml): spec.template.metadata.annotations.empty",
                "Deployment/apps/${NAME} (apps/web/deployment.yaml): spec.template.metadata.annotations.flag",
                "Deployment/apps/${NAME} (apps/web/deployment.yaml): spec.template.metadata.annotations.mode",
                "Deployment/apps/${NAME} (apps/web/deployment.yaml): spec.template.metadata.annotations.version",
            ]
        );
        assert!(
            out[2]
                .2
                .contains("becomes 493 (int), not the string \"0755\""),
            "{}",
            out[2].2
        );
        assert!(
            out[4].2.starts_with(
                "${MISSING} is used by Deployment/apps/${NAME} (apps/web/deployment.yaml)"
            ),
            "{}",
            out[4].2
        );
    }

    #[test]
    fn names_sources_and_strategy() {
        let bad_names = ks(json!({"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}));
        let vars = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "vars", "namespace": "flux-system"},
            "data": {"cluster-name": "prod"}});
        let out = run(&[(&bad_names, None), (&vars, None)]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "InvalidVariableName");
        assert!(out[0].2.starts_with("'cluster-name' var name is invalid"));

        let missing = ks(
            json!({"substituteFrom": [{"kind": "Secret", "name": "nope"},
                                                   {"kind": "ConfigMap", "name": "maybe", "optional": true}]}),
        );
        let out = run(&[(&missing, None)]);
        assert_eq!(out[0].0, "SubstituteSourceMissing");
        assert!(
            out[0]
                .2
                .contains("substitute from 'Secret/nope' error: secrets \"nope\" not found")
        );

        // No variables at all: substitution does not run, `${X}` stays literally.
        let none = ks(
            json!({"substituteFrom": [{"kind": "ConfigMap", "name": "maybe", "optional": true}]}),
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"x": "${X}"}});
        let out = run(&[(&none, None), (&cm, Some("apps/cm.yaml"))]);
        assert_eq!(out.len(), 1);
        assert!(out[0].2.contains("applied literally"), "{}", out[0].2);
        assert_eq!(
            out[0].1,
            Severity::Info,
            "applied as written, never blanked: not an error"
        );
        // `postBuild: {substitute: {}}` and no source (a Grafana dashboard's `${DS_PROMETHEUS}`).
        let empty = ks(json!({"substitute": {}}));
        let out = run(&[(&empty, None), (&cm, Some("apps/cm.yaml"))]);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].0, out[0].1), ("UndefinedVariable", Severity::Info));

        // A source whose keys are not known offline (an ExternalSecret's dataFrom) may define
        // it: an info naming the source, whether or not other variables make substitution run.
        let open = ks(json!({"substitute": {"A": "a"},
                             "substituteFrom": [{"kind": "Secret", "name": "es"}]}));
        let es = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "es", "namespace": "flux-system",
                         "annotations": {UNKNOWN_KEYS_ANNOTATION: "ExternalSecret/es dataFrom"}},
            "data": {"KNOWN": "RVhURVJOQUw="}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"x": "${FROM_VAULT}"}});
        let out = run(&[(&open, None), (&es, None), (&cm, Some("apps/cm.yaml"))]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].0, out[0].1), ("UndefinedVariable", Severity::Info));
        assert!(
            out[0].2.contains("Secret/es may define it")
                && out[0].2.contains("ExternalSecret/es dataFrom"),
            "{}",
            out[0].2
        );
        // Without the mark, the same is an error.
        let mut closed = es.clone();
        closed["metadata"]
            .as_object_mut()
            .map(|m| m.remove("annotations"));
        let out = run(&[(&open, None), (&closed, None), (&cm, Some("apps/cm.yaml"))]);
        assert_eq!((out[0].0, out[0].1), ("UndefinedVariable", Severity::Error));

        // A value from a Secret is never shown.
        let from_secret = ks(json!({"substituteFrom": [{"kind": "Secret", "name": "s"}]}));
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "flux-system"}, "data": {"PIN": "MDc1NQ=="}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"x": "${PIN}"}});
        let out = run(&[
            (&from_secret, None),
            (&secret, None),
            (&cm, Some("apps/cm.yaml")),
        ]);
        assert_eq!(out[0].0, "CoercedValue");
        assert!(
            out[0]
                .2
                .contains("becomes a value of type int (from a Secret, not shown)"),
            "{}",
            out[0].2
        );
        assert!(
            !out[0].2.contains("0755") && !out[0].2.contains("493"),
            "{}",
            out[0].2
        );

        // A value that breaks the YAML.
        let inject = ks(json!({"substitute": {"X": "a: b"}}));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"x": "${X}"}});
        let out = run(&[(&inject, None), (&cm, Some("apps/cm.yaml"))]);
        assert_eq!(out[0].0, "SubstitutionFailed");
        assert!(
            out[0]
                .2
                .starts_with("post build failed for 'ConfigMap.v1.[noGrp]/c'"),
            "{}",
            out[0].2
        );

        let invalid = ks(json!({"substitute": ["not", "a", "map"]}));
        assert_eq!(run(&[(&invalid, None)])[0].0, "InvalidPostBuild");
    }

    #[test]
    fn resources_follow_kustomization_files() {
        let doc = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        let kfile = json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                           "resources": ["a.yaml", "../base", "https://example.com/x.yaml"]});
        let (a, b, shared, other, deep) =
            (doc("a"), doc("b"), doc("shared"), doc("other"), doc("deep"));
        let documents = [
            Document {
                object: &kfile,
                file: Some("apps/prod/kustomization.yaml"),
            },
            Document {
                object: &a,
                file: Some("apps/prod/a.yaml"),
            },
            Document {
                object: &b,
                file: Some("apps/prod/b.yaml"),
            },
            Document {
                object: &shared,
                file: Some("apps/base/s.yaml"),
            },
            Document {
                object: &deep,
                file: Some("apps/base/more/d.yaml"),
            },
            Document {
                object: &other,
                file: Some("apps/prodigy/o.yaml"),
            },
            Document {
                object: &other,
                file: None,
            },
        ];
        let names = |path: &str| -> Vec<String> {
            resources(path, &documents)
                .iter()
                .map(|d| text(d.object, "/metadata/name").to_owned())
                .collect()
        };
        assert_eq!(names("./apps/prod"), ["a", "shared", "deep"]);
        assert_eq!(names("apps/prod/"), ["a", "shared", "deep"]);
        assert_eq!(names("./apps/base"), ["shared", "deep"]);
        assert_eq!(names("./"), ["a", "b", "shared", "deep", "other"]);
        assert!(names("./nowhere").is_empty());
        let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "x", "namespace": "flux-system"},
            "spec": {"path": "./apps/base", "targetNamespace": "team"}});
        let wide = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "y", "namespace": "flux-system"},
            "spec": {"path": "./apps", "targetNamespace": "wide"}});
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        let mut with_ks = documents.to_vec();
        with_ks.push(Document {
            object: &ks,
            file: Some("clusters/x.yaml"),
        });
        with_ks.push(Document {
            object: &wide,
            file: Some("clusters/y.yaml"),
        });
        with_ks.push(Document {
            object: &ns,
            file: Some("apps/base/ns.yaml"),
        });
        assert_eq!(
            target_namespaces(&with_ks),
            [
                (1, "wide".to_owned()),
                (2, "wide".to_owned()),
                (3, "team".to_owned()),
                (4, "team".to_owned()),
                (5, "wide".to_owned()),
            ]
        );
        assert!(intended_coercion("10") && intended_coercion("-1") && intended_coercion("0"));
        assert!(!intended_coercion("010") && !intended_coercion("1e3") && !intended_coercion(""));
    }
}
