//! Flux Operator `ResourceSet`s (`fluxcd.controlplane.io`), expanded offline: the objects the
//! ResourceSet controller would generate from `spec.inputs` and `spec.resources` (plus
//! `spec.resourcesTemplate` and `spec.steps[].resources`), for tools that audit a repository.
//!
//! As upstream, each resource template is serialised with `JSONToYAML`, rendered once per input
//! (once with no input when there are none), and read back with `YAMLToJSON`, so
//! `replicas: << inputs.replicas >>` gives a number. Objects annotated
//! `fluxcd.controlplane.io/reconcile: disabled` are dropped, the first object with a given group,
//! kind, namespace and name wins, and `spec.commonMetadata` labels and annotations are set on
//! every object, with Flux Operator's [`NAME_LABEL`] and [`NAMESPACE_LABEL`].
//!
//! Only the simple substitution of the template language is supported: `<< inputs.a.b >>`,
//! optionally `| quote`, with `<<-`/`->>` trimming. Anything else (sprig functions, `if`,
//! `range`) is reported and its resource skipped. Inputs from `spec.inputsFrom` providers are not
//! known offline.
//!
//! ```
//! use conflux_postbuild_subst::resource_set::expand;
//! use serde_json::json;
//!
//! let rset = json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
//!     "metadata": {"name": "apps", "namespace": "flux-system"},
//!     "spec": {"inputs": [{"tenant": "a", "replicas": 2}, {"tenant": "b", "replicas": 3}],
//!              "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
//!                             "metadata": {"name": "<< inputs.tenant >>-info", "namespace": "<< inputs.tenant >>"},
//!                             "data": {"replicas": "<< inputs.replicas | quote >>"}}]}});
//! let expansion = expand(&rset);
//! assert!(expansion.findings.is_empty());
//! assert_eq!(expansion.objects[1]["metadata"]["name"], "b-info");
//! assert_eq!(expansion.objects[1]["data"]["replicas"], "3");
//! ```

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::Error;
use crate::audit::{Finding, Severity};
use crate::json::text;
use crate::redact::RedactedJson;
use crate::yaml::{emit::json_to_yaml, parse::yaml_to_json};

/// API group of ResourceSets.
pub const GROUP: &str = "fluxcd.controlplane.io";
/// Kind of ResourceSets.
pub const KIND: &str = "ResourceSet";
/// Annotation that excludes a generated object when `disabled`.
pub const RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";

/// Whether `object` is a ResourceSet (any version of the group).
pub fn is_resource_set(object: &Value) -> bool {
    let api_version = text(object, "/apiVersion");
    api_version.rsplit_once('/').map(|(g, _)| g) == Some(GROUP) && text(object, "/kind") == KIND
}

/// What [`expand`] generated. `Debug` shows each object's kind, name and keys, never a value.
#[derive(Clone, Default, PartialEq)]
pub struct Expansion {
    /// The generated objects, in template then input order.
    pub objects: Vec<Value>,
    /// `ResourceSetTemplateFailed` (error: a missing input field, a result that is not YAML),
    /// `ResourceSetUnsupported` (warning: a template action beyond simple substitution; that
    /// resource is skipped), `ResourceSetInputsFrom` (info: provider inputs are not expanded).
    pub findings: Vec<Finding>,
}

/// By hand: a generated object may be a Secret with its data.
impl fmt::Debug for Expansion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let objects: Vec<RedactedJson<'_>> = self.objects.iter().map(RedactedJson).collect();
        f.debug_struct("Expansion")
            .field("objects", &objects)
            .field("findings", &self.findings)
            .finish()
    }
}

/// Expands one ResourceSet; see the [module docs](self).
pub fn expand(resource_set: &Value) -> Expansion {
    let name = format!(
        "{KIND}/{}/{}",
        text(resource_set, "/metadata/namespace"),
        text(resource_set, "/metadata/name")
    );
    let mut expansion = Expansion::default();
    let spec = resource_set.get("spec").unwrap_or(&Value::Null);
    let from_providers = spec
        .get("inputsFrom")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if from_providers {
        expansion.findings.push(Finding::new(
            Severity::Info,
            "ResourceSetInputsFrom",
            name.clone(),
            "inputs from ResourceSetInputProviders are not known offline; only spec.inputs are expanded (none when there are only those)",
        ));
    }
    let inputs: Vec<Value> = match spec.get("inputs").and_then(Value::as_array) {
        Some(inputs) if !inputs.is_empty() => inputs.clone(),
        // Every input comes from providers, unknown offline: nothing to expand.
        _ if from_providers => return expansion,
        _ => vec![Value::Null],
    };
    let mut templates: Vec<(String, &Value)> = Vec::new();
    for (i, t) in spec
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        templates.push((format!("resources[{i}]"), t));
    }
    let steps = spec.get("steps").and_then(Value::as_array);
    for (s, step) in steps.into_iter().flatten().enumerate() {
        for (i, t) in step
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            templates.push((format!("steps[{s}].resources[{i}]"), t));
        }
    }
    let mut seen = BTreeSet::new();
    let mut report =
        |severity, code, message: String| Finding::new(severity, code, name.clone(), message);
    let mut generated = Vec::new();
    for (label, template) in templates {
        let yaml = match json_to_yaml(template) {
            Ok(yaml) => yaml,
            Err(err) => {
                expansion.findings.push(report(
                    Severity::Error,
                    "ResourceSetTemplateFailed",
                    format!("failed to build {label}: failed to convert template to YAML: {err}"),
                ));
                continue;
            }
        };
        match render_all(&yaml, &inputs, false) {
            Ok(objects) => generated.extend(objects),
            Err(err) => expansion
                .findings
                .push(template_finding(&mut report, &label, err)),
        }
    }
    let yaml_templates = std::iter::once(("resourcesTemplate".to_owned(), spec)).chain(
        steps
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(s, step)| (format!("steps[{s}].resourcesTemplate"), step)),
    );
    for (label, holder) in yaml_templates {
        let Some(template) = holder.get("resourcesTemplate").and_then(Value::as_str) else {
            continue;
        };
        match render_all(template, &inputs, true) {
            Ok(objects) => generated.extend(objects),
            Err(err) => expansion
                .findings
                .push(template_finding(&mut report, &label, err)),
        }
    }
    let common = spec.get("commonMetadata");
    for mut object in generated {
        if text(
            &object,
            &format!(
                "/metadata/annotations/{}",
                RECONCILE_ANNOTATION.replace('/', "~1")
            ),
        ) == "disabled"
        {
            continue;
        }
        let group = text(&object, "/apiVersion")
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_owned();
        let key = (
            group,
            text(&object, "/kind").to_owned(),
            text(&object, "/metadata/namespace").to_owned(),
            text(&object, "/metadata/name").to_owned(),
        );
        if !seen.insert(key) {
            continue;
        }
        for field in ["labels", "annotations"] {
            let Some(extra) = common.and_then(|c| c.get(field)).and_then(Value::as_object) else {
                continue;
            };
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                let map = metadata
                    .entry(field)
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
                if let Some(map) = map.as_object_mut() {
                    map.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        // Flux Operator labels every object it generates with its ResourceSet.
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            let labels = metadata
                .entry("labels")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Some(labels) = labels.as_object_mut() {
                let owner = [
                    (NAME_LABEL, text(resource_set, "/metadata/name")),
                    (NAMESPACE_LABEL, text(resource_set, "/metadata/namespace")),
                ];
                for (label, value) in owner {
                    labels.insert(label.to_owned(), Value::String(value.to_owned()));
                }
            }
        }
        expansion.objects.push(object);
    }
    expansion
}

/// The label Flux Operator puts on every object a ResourceSet generates: its name.
pub const NAME_LABEL: &str = "resourceset.fluxcd.controlplane.io/name";
/// The label Flux Operator puts on every object a ResourceSet generates: its namespace.
pub const NAMESPACE_LABEL: &str = "resourceset.fluxcd.controlplane.io/namespace";

fn template_finding(
    report: &mut impl FnMut(Severity, &'static str, String) -> Finding,
    label: &str,
    err: Error,
) -> Finding {
    match err {
        Error::UnsupportedTemplate { .. } => report(
            Severity::Warning,
            "ResourceSetUnsupported",
            format!("{label} is not expanded offline: {err}"),
        ),
        err => report(
            Severity::Error,
            "ResourceSetTemplateFailed",
            format!("failed to build {label}: {err}"),
        ),
    }
}

/// Renders `template` for every input and reads the objects back (one document, or several when
/// `multi_document`).
fn render_all(template: &str, inputs: &[Value], multi_document: bool) -> Result<Vec<Value>, Error> {
    let mut objects = Vec::new();
    for input in inputs {
        let rendered = render(template, input)?;
        let documents: Vec<&str> = if multi_document {
            split_documents(&rendered)
        } else {
            vec![rendered.as_str()]
        };
        for document in documents {
            let object = yaml_to_json(document)
                .map_err(|err| Error::Yaml(format!("failed to read object: {err}")))?;
            if !object.is_null() {
                objects.push(object);
            }
        }
    }
    Ok(objects)
}

/// Splits a multi-document YAML text on `---` lines.
fn split_documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            documents.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    documents.push(&text[start..]);
    documents.retain(|d| !d.trim().is_empty());
    documents
}

/// Renders one template with one input: each `<< inputs.a.b >>` (optionally `| quote`) is
/// replaced by the input's value as Go's template engine prints it (strings as is, numbers and
/// booleans in their JSON form). `<<-` and `->>` trim the whitespace before and after the action.
///
/// Errors: [`Error::UnsupportedTemplate`] for any other action, [`Error::MissingInput`] for a
/// field the input does not have (the ResourceSet controller runs with `missingkey=error`).
pub fn render(template: &str, input: &Value) -> Result<String, Error> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let unsupported = |action: &str| Error::UnsupportedTemplate {
        action: action.to_owned(),
    };
    while let Some(start) = rest.find("<<") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find(">>") else {
            return Err(unsupported(after.lines().next().unwrap_or_default()));
        };
        let mut action = &after[..end];
        rest = &after[end + 2..];
        if let Some(trimmed) = action.strip_prefix("- ") {
            out.truncate(out.trim_end().len());
            action = trimmed;
        }
        if let Some(trimmed) = action.strip_suffix(" -") {
            rest = rest.trim_start();
            action = trimmed;
        }
        let (path, pipe) = match action.split_once('|') {
            Some((path, pipe)) => (path.trim(), Some(pipe.trim())),
            None => (action.trim(), None),
        };
        let Some(fields) = path.strip_prefix("inputs.") else {
            return Err(unsupported(action));
        };
        let simple = fields
            .split('.')
            .all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !simple {
            return Err(unsupported(action));
        }
        let mut value = input;
        for field in fields.split('.') {
            value = value.get(field).ok_or_else(|| Error::MissingInput {
                action: path.to_owned(),
                key: field.to_owned(),
            })?;
        }
        let printed = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => "<no value>".to_owned(),
            Value::Array(_) | Value::Object(_) => return Err(unsupported(action)),
        };
        match pipe {
            None => out.push_str(&printed),
            Some("quote") => out.push_str(&Value::String(printed).to_string()),
            Some(_) => return Err(unsupported(action)),
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rset(spec: Value) -> Value {
        json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
               "metadata": {"name": "rs", "namespace": "flux-system"}, "spec": spec})
    }

    #[test]
    fn inputs_only_from_providers_expand_nothing() {
        let rset = json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": "previews", "namespace": "apps"},
            "spec": {"inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "prs"}],
                     "resources": [{"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": "pr-<< inputs.id >>"}}]}});
        let expansion = expand(&rset);
        assert!(expansion.objects.is_empty());
        let codes: Vec<&str> = expansion.findings.iter().map(|f| f.code).collect();
        assert_eq!(codes, ["ResourceSetInputsFrom"]);
    }

    #[test]
    fn render_subset() {
        let input = json!({"t": "team-a", "app": {"replicas": 2, "on": true, "v": "1.2"}});
        let ok = |t: &str| render(t, &input).unwrap();
        assert_eq!(ok("name: x-<< inputs.t >>\n"), "name: x-team-a\n");
        assert_eq!(ok("r: <<inputs.app.replicas>>"), "r: 2");
        assert_eq!(ok("v: << inputs.app.v | quote >>"), "v: \"1.2\"");
        assert_eq!(ok("a:   <<- inputs.app.on ->>   !"), "a:true!");
        assert_eq!(ok("no actions"), "no actions");
        for bad in [
            "<< inputs.t | upper >>",
            "<< if inputs.t >>",
            "<< inputs.app >>",
            "<< inputs..t >>",
            "<< inputs.t",
        ] {
            assert!(
                matches!(render(bad, &input), Err(Error::UnsupportedTemplate { .. })),
                "{bad}"
            );
        }
        let err = render("<< inputs.app.nope >>", &input).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to execute template: executing \"resourceset\" at <inputs.app.nope>: map has no entry for key \"nope\""
        );
    }

    #[test]
    fn expands_inputs_times_resources() {
        let expansion = expand(&rset(json!({
            "commonMetadata": {"labels": {"team": "platform"}},
            "inputs": [{"tenant": "a", "n": 1}, {"tenant": "b", "n": 2}],
            "resources": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "<< inputs.tenant >>"}},
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "shared", "namespace": "flux-system"}},
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "w", "namespace": "<< inputs.tenant >>",
                              "annotations": {"fluxcd.controlplane.io/reconcile": "<< inputs.tenant >>"}},
                 "spec": {"replicas": "<< inputs.n >>"}},
            ],
            "resourcesTemplate": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: t-<< inputs.tenant >>\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: flux-system\n",
        })));
        assert!(expansion.findings.is_empty(), "{:?}", expansion.findings);
        let names: Vec<String> = expansion
            .objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "Namespace/a",
                "Namespace/b",
                "ConfigMap/shared",
                "Deployment/w",
                "Deployment/w",
                "ConfigMap/t-a",
                "ConfigMap/t-b"
            ]
        );
        assert_eq!(
            expansion.objects[4]["spec"]["replicas"], 2,
            "typed by YAMLToJSON"
        );
        assert_eq!(
            expansion.objects[0]["metadata"]["labels"]["team"],
            "platform"
        );
    }

    #[test]
    fn disabled_objects_and_findings() {
        let expansion = expand(&rset(json!({
            "inputs": [{"tenant": "a", "state": "disabled", "q": "it's"}],
            "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "prs"}],
            "resources": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "off", "annotations": {"fluxcd.controlplane.io/reconcile": "<< inputs.state >>"}}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "<< inputs.nope >>"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "<< inputs.tenant | slugify >>"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "<< inputs.q >>: b"}},
            ],
        })));
        assert!(expansion.objects.is_empty(), "{:?}", expansion.objects);
        let codes: Vec<(&str, Severity)> = expansion
            .findings
            .iter()
            .map(|f| (f.code, f.severity))
            .collect();
        assert_eq!(
            codes,
            [
                ("ResourceSetInputsFrom", Severity::Info),
                ("ResourceSetTemplateFailed", Severity::Error),
                ("ResourceSetUnsupported", Severity::Warning),
                ("ResourceSetTemplateFailed", Severity::Error),
            ]
        );
        assert!(
            expansion.findings[1]
                .message
                .starts_with("failed to build resources[1]: failed to execute template")
        );
        assert_eq!(expansion.findings[1].object, "ResourceSet/flux-system/rs");
        assert!(is_resource_set(&rset(json!({}))));
        // No inputs: rendered once, and an action has nothing to read.
        let once = expand(&rset(
            json!({"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]}),
        ));
        assert_eq!(once.objects.len(), 1);
    }
}
