//! Offline audit of a set of objects (a fleet repository, a cluster dump): every copy conflux would
//! make, whether it is allowed, and the copies as they would be written (docs/design.md 4.1, 4.2).
//!
//! - Pull copies (`fluxcd.controlplane.io/copyFrom`, reflector's `reflects`, replicator's
//!   `replicate-from`): the source is looked up among the objects and among the fan-out copies; a
//!   cross-namespace copy needs the source's consent ([`consent`](crate::consent::decide)).
//! - Fan-out (`ConfigSync`, and sources annotated by kopy, reflector or replicator in
//!   `sync_source_namespaces`): the target namespaces are chosen among the `Namespace` objects of
//!   the input (with their labels) and the namespaces other objects live in (without labels); a
//!   same-name object not made by the owner is skipped or adopted as its `conflictPolicy` says
//!   (an annotated source adopts the copies kopy, reflector and replicator left behind).
//!
//! [`CopyAudit::written`] holds the copies with their content filled in, so the other audits
//! (watch labels, substitution variables, reload edges) see the cluster as it would be.
//!
//! ```
//! use conflux_copy_core::audit::{audit, AuditOptions, Verdict};
//! use serde_json::json;
//!
//! let objects = [
//!     json!({"apiVersion": "v1", "kind": "ConfigMap",
//!            "metadata": {"name": "info", "namespace": "flux-system",
//!                         "annotations": {"copy.conflux.dev/allowed-namespaces": "team-*"}},
//!            "data": {"region": "eu-1"}}),
//!     json!({"apiVersion": "v1", "kind": "ConfigMap",
//!            "metadata": {"name": "info", "namespace": "team-a",
//!                         "annotations": {"fluxcd.controlplane.io/copyFrom": "flux-system/info"}}}),
//!     json!({"apiVersion": "v1", "kind": "ConfigMap",
//!            "metadata": {"name": "info", "namespace": "prod",
//!                         "annotations": {"fluxcd.controlplane.io/copyFrom": "flux-system/info"}}}),
//! ];
//! let report = audit(&objects, &AuditOptions::default());
//! assert!(matches!(report.copies[0].verdict, Verdict::Refused(_))); // prod: no consent
//! assert!(matches!(report.copies[1].verdict, Verdict::Allowed(_))); // team-a
//! assert_eq!(report.findings[0].code, "CopyRefused");
//! assert_eq!(report.written[0]["data"]["region"], "eu-1");
//! ```

use std::collections::BTreeMap;
use std::fmt;

use conflux_watch_index::audit::{Finding, Severity, config_key, configs, metadata_map, name_of};
use conflux_watch_index::redact::RedactedJson;
use conflux_watch_index::refs::{ConfigKey, ConfigKind};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::Value;

use crate::config_sync::{self, ConfigSyncSpec, ConflictPolicy};
use crate::consent::{self, ALLOWED_NAMESPACES_ANNOTATION, Grant, Refusal};
use crate::copy_from::{self, Pull, PullVia};
use crate::desired::{fan_out_copy, pulled};
use crate::fan_out::{FanOut, Predecessor};
use crate::selection::NamespaceView;
use crate::source::{ConfigObject, SourceRef};
use crate::{Error, reflector, replicator};

/// Settings of the audit, as the controllers' flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditOptions {
    /// `--sync-source-namespaces`: where annotated sources (kopy, reflector, replicator) may fan
    /// out.
    pub sync_source_namespaces: Vec<String>,
    /// `--copy-resourceset-targets`: also judge the copies of targets a Flux Operator
    /// ResourceSet generates. Off (the default): Flux Operator copies those under its own RBAC,
    /// so they are reported as its copies, allowed without conflux's consent.
    pub resource_set_targets: bool,
}

/// What makes the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Via {
    /// The target's `fluxcd.controlplane.io/copyFrom` annotation.
    CopyFrom,
    /// The target's reflector `reflects` annotation.
    Reflects,
    /// The target's replicator `replicate-from` annotation.
    ReplicateFrom,
    /// A `ConfigSync`, by name.
    ConfigSync(String),
    /// A kopy-annotated source.
    Kopy,
    /// A source asking reflector for automatic mirrors.
    Reflector,
    /// A source asking replicator to push it (`replicate-to`, `replicate-to-matching`).
    Replicator,
}

impl Via {
    fn of_pull(via: PullVia) -> Self {
        match via {
            PullVia::Reflects => Via::Reflects,
            PullVia::ReplicateFrom => Via::ReplicateFrom,
            _ => Via::CopyFrom,
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Via::CopyFrom => f.write_str("copyFrom"),
            Via::Reflects => f.write_str("reflects"),
            Via::ReplicateFrom => f.write_str("replicate-from"),
            Via::ConfigSync(name) => write!(f, "ConfigSync/{name}"),
            Via::Kopy => f.write_str("kopy"),
            Via::Reflector => f.write_str("reflector"),
            Via::Replicator => f.write_str("replicator"),
        }
    }
}

/// Whether the copy happens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It happens; why it may (`same namespace`, the consent annotation, the ConfigSync).
    Allowed(String),
    /// The source did not consent.
    Refused(Refusal),
    /// The source is not among the objects: nothing is written.
    SourceMissing,
    /// A same-name object not made by this owner is in the way (`conflictPolicy: Skip`).
    Conflict,
    /// The copy cannot be written (a Secret type conflict); the message says why.
    Failed(String),
}

impl Verdict {
    /// `allowed`, `refused`, `source-missing`, `conflict` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allowed(_) => "allowed",
            Verdict::Refused(_) => "refused",
            Verdict::SourceMissing => "source-missing",
            Verdict::Conflict => "conflict",
            Verdict::Failed(_) => "failed",
        }
    }

    /// The detail: why it is allowed, or what is wrong.
    pub fn detail(&self) -> String {
        match self {
            Verdict::Allowed(why) | Verdict::Failed(why) => why.clone(),
            Verdict::Refused(refusal) => refusal.to_string(),
            Verdict::SourceMissing => "source not found in the input".to_owned(),
            Verdict::Conflict => "a same-name object not made by conflux exists".to_owned(),
        }
    }
}

/// One copy: source → target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyEdge {
    /// What is copied.
    pub source: SourceRef,
    /// The copy.
    pub target: SourceRef,
    /// What makes the copy.
    pub via: Via,
    /// Whether it happens.
    pub verdict: Verdict,
}

/// What [`audit`] found. `Debug` shows the written copies without their data values.
#[derive(Clone, Default, PartialEq)]
pub struct CopyAudit {
    /// Every copy, sorted by target then source.
    pub copies: Vec<CopyEdge>,
    /// Problems, by stable code: `InvalidCopyFrom`, `InvalidReference`, `ConflictingSources`,
    /// `SelfReference`, `CopySourceMissing`, `CopyRefused`, `SecretTypeConflict`,
    /// `InvalidConfigSync`, `InvalidSelector`, `InvalidPattern`, `InvalidAnnotation`,
    /// `UntrustedSyncSource` (errors); `CopyConflict`, `ConfigSyncNoTargets` (warnings).
    pub findings: Vec<Finding>,
    /// The copies that are written, as `v1` objects with their content: pull-copy targets with
    /// their own metadata and the source's data, fan-out copies as the sync writes them. Append
    /// them to the input to see the cluster as it would be (see
    /// [`conflux_watch_index::audit::configs`]).
    pub written: Vec<Value>,
}

/// By hand: `written` holds the copies' data (Secret data among it), which a derived `Debug`
/// would print.
impl fmt::Debug for CopyAudit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let written: Vec<RedactedJson<'_>> = self.written.iter().map(RedactedJson).collect();
        f.debug_struct("CopyAudit")
            .field("copies", &self.copies)
            .field("findings", &self.findings)
            .field("written", &written)
            .finish()
    }
}

/// Audits the copies among `objects`.
pub fn audit(objects: &[Value], options: &AuditOptions) -> CopyAudit {
    let mut report = CopyAudit::default();
    let namespaces = namespaces(objects);
    let views: Vec<NamespaceView<'_>> = namespaces
        .iter()
        .map(|(name, labels)| NamespaceView {
            name,
            labels: labels.as_ref(),
            terminating: false,
        })
        .collect();
    let input = configs(objects);

    // Fan-out first: a pull copy may copy a fan-out copy.
    for object in objects {
        let Some(fan_out) = fan_out_of(object, options, &mut report.findings) else {
            continue;
        };
        let owner = name_of(object);
        fan_out_copies(&fan_out, &owner, &input, &views, &mut report);
    }

    let mut sources = input.clone();
    for written in &report.written {
        if let Some(key) = config_key(written) {
            sources.insert(key, written);
        }
    }
    let mut pulled = Vec::new();
    for object in objects {
        pull(
            object,
            options,
            &sources,
            &namespaces,
            &mut report.copies,
            &mut report.findings,
            &mut pulled,
        );
    }
    report.written.extend(pulled);
    report
        .copies
        .sort_by(|a, b| (&a.target, &a.source).cmp(&(&b.target, &b.source)));
    report
}

/// Namespace names with their labels: `Namespace` objects (labelled), then every namespace an
/// object lives in (unlabelled unless a `Namespace` object says otherwise).
fn namespaces(objects: &[Value]) -> BTreeMap<String, Option<BTreeMap<String, String>>> {
    let mut found = BTreeMap::new();
    for object in objects {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        if text("/apiVersion") == "v1"
            && text("/kind") == "Namespace"
            && !text("/metadata/name").is_empty()
        {
            found.insert(
                text("/metadata/name").to_owned(),
                metadata_map(object, "labels"),
            );
        }
    }
    for object in objects {
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        if let Some(ns) = namespace.filter(|ns| !ns.is_empty() && !found.contains_key(*ns)) {
            found.insert(ns.to_owned(), None);
        }
    }
    found
}

fn group_of(object: &Value) -> &str {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The fan-out an object declares: a ConfigSync, or a source annotated by kopy, reflector or
/// replicator.
fn fan_out_of(
    object: &Value,
    options: &AuditOptions,
    findings: &mut Vec<Finding>,
) -> Option<FanOut> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if group_of(object) == config_sync::GROUP && kind == config_sync::KIND {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        let spec: ConfigSyncSpec = match serde_json::from_value(spec) {
            Ok(spec) => spec,
            Err(err) => {
                findings.push(Finding::new(
                    Severity::Error,
                    "InvalidConfigSync",
                    name_of(object),
                    format!("invalid spec: {err}"),
                ));
                return None;
            }
        };
        return match FanOut::from_config_sync(name, &spec) {
            Ok(fan_out) => Some(fan_out),
            Err(err) => {
                findings.push(error_finding(&err, name_of(object)));
                None
            }
        };
    }
    let key = config_key(object)?;
    let source = SourceRef::new(key.kind, key.namespace.as_ref(), key.name.as_ref());
    let annotations = metadata_map(object, "annotations");
    let labels = metadata_map(object, "labels");
    let trusted = options.sync_source_namespaces.iter().map(String::as_str);
    match FanOut::from_annotations(&source, labels.as_ref(), annotations.as_ref(), trusted) {
        Ok(fan_out) => fan_out,
        Err(err) => {
            findings.push(error_finding(&err, name_of(object)));
            None
        }
    }
}

fn error_finding(err: &Error, object: String) -> Finding {
    let code = match err {
        Error::UntrustedSyncSource { .. } => "UntrustedSyncSource",
        Error::Refused(_) => "CopyRefused",
        Error::SourceUnavailable { .. } => "CopySourceMissing",
        other => other.reason(),
    };
    Finding::new(Severity::Error, code, object, err.to_string())
}

fn fan_out_copies(
    fan_out: &FanOut,
    owner: &str,
    input: &BTreeMap<ConfigKey, &Value>,
    namespaces: &[NamespaceView<'_>],
    report: &mut CopyAudit,
) {
    let via = match (&fan_out.owner, fan_out.predecessors.first()) {
        (crate::Owner::ConfigSync { name }, _) => Via::ConfigSync(name.clone()),
        (_, Some(Predecessor::Reflector)) => Via::Reflector,
        (_, Some(Predecessor::Replicator)) => Via::Replicator,
        _ => Via::Kopy,
    };
    let source = input
        .get(&fan_out.source.config_key())
        .and_then(|v| config_object(v));
    let source_found = input.contains_key(&fan_out.source.config_key());
    let targets = fan_out.target_namespaces(namespaces.iter().copied());
    if !source_found {
        report.findings.push(Finding::new(
            Severity::Error,
            "CopySourceMissing",
            owner,
            format!(
                "source {} not found in the input: no copy is made ({} target namespaces)",
                fan_out.source,
                targets.len()
            ),
        ));
    }
    if targets.is_empty() {
        report.findings.push(Finding::new(
            Severity::Warning,
            "ConfigSyncNoTargets",
            owner,
            format!(
                "selects no namespace of the input: {} is copied nowhere",
                fan_out.source
            ),
        ));
    }
    for namespace in targets {
        let target = SourceRef::new(
            fan_out.source.kind,
            namespace.as_str(),
            fan_out.target_name.as_str(),
        );
        let existing = input.get(&target.config_key());
        let foreign =
            existing.is_some_and(|e| !fan_out.owner.owns(metadata_map(e, "labels").as_ref()));
        let inherited = existing
            .and_then(|e| config_object(e))
            .is_some_and(|e| fan_out.inherits(&e));
        let verdict = if !source_found {
            Verdict::SourceMissing
        } else if foreign && !inherited && fan_out.conflict_policy == ConflictPolicy::Skip {
            report.findings.push(Finding::new(
                Severity::Warning,
                "CopyConflict",
                target.to_string(),
                format!("exists and was not made by {owner}: left alone (conflictPolicy Skip), so it is not a copy of {}", fan_out.source),
            ));
            Verdict::Conflict
        } else {
            let why = match &via {
                _ if inherited => {
                    "annotated source in a --sync-source-namespaces namespace, adopting the copy its previous tool made"
                }
                Via::ConfigSync(_) if foreign => {
                    "ConfigSync, adopting the existing object (conflictPolicy Adopt)"
                }
                Via::ConfigSync(_) => "ConfigSync (cluster-scoped: no consent needed)",
                _ => "annotated source in a --sync-source-namespaces namespace",
            };
            if let Some(source) = &source {
                report
                    .written
                    .extend(to_value(&fan_out_copy(source, fan_out, &namespace)));
            }
            Verdict::Allowed(why.to_owned())
        };
        report.copies.push(CopyEdge {
            source: fan_out.source.clone(),
            target,
            via: via.clone(),
            verdict,
        });
    }
}

fn pull(
    object: &Value,
    options: &AuditOptions,
    sources: &BTreeMap<ConfigKey, &Value>,
    namespaces: &BTreeMap<String, Option<BTreeMap<String, String>>>,
    copies: &mut Vec<CopyEdge>,
    findings: &mut Vec<Finding>,
    written: &mut Vec<Value>,
) {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let annotations = metadata_map(object, "annotations");
    let wanted = copy_from::pull(
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
        annotations.as_ref(),
    );
    let Pull { source, via } = match wanted {
        Ok(Some(wanted)) => wanted,
        Ok(None) => return,
        Err(err) => {
            findings.push(error_finding(&err, name_of(object)));
            return;
        }
    };
    let Some(key) = config_key(object) else {
        return;
    };
    let target = SourceRef::new(key.kind, key.namespace.as_ref(), key.name.as_ref());
    let verdict = match sources.get(&source.config_key()) {
        None => {
            findings.push(Finding::new(
                Severity::Error,
                "CopySourceMissing",
                target.to_string(),
                format!("failed to copy data from {source}: not found in the input"),
            ));
            Verdict::SourceMissing
        }
        Some(found) => {
            let consent_list = metadata_map(found, "annotations");
            let labels = metadata_map(object, "labels");
            let flux_operator = crate::ownership::resource_set_of(labels.as_ref())
                .filter(|_| !options.resource_set_targets && via == PullVia::CopyFrom);
            let namespace_labels = namespaces.get(&target.namespace).and_then(Option::as_ref);
            let mut view = NamespaceView::new(&target.namespace);
            if let Some(labels) = namespace_labels {
                view = view.labels(labels);
            }
            let consent = match &flux_operator {
                Some(_) => Ok(Grant::SameNamespace),
                None => consent::decide(&source, consent_list.as_ref(), view, via),
            };
            match consent {
                Err(Error::Refused(refusal)) => {
                    findings.push(Finding::new(
                        Severity::Error,
                        "CopyRefused",
                        target.to_string(),
                        format!(
                            "{refusal}; add '{}' to the source's {} annotation to allow it",
                            target.namespace,
                            consent_hint(via)
                        ),
                    ));
                    Verdict::Refused(refusal)
                }
                Err(err) => {
                    findings.push(error_finding(&err, target.to_string()));
                    Verdict::Failed(err.to_string())
                }
                Ok(grant) => {
                    let why = if let Some(resource_set) = &flux_operator {
                        format!(
                            "Flux Operator's: ResourceSet {resource_set} copies it with its own RBAC (conflux leaves it alone unless --copy-resourceset-targets)"
                        )
                    } else if let Grant::Annotation(annotation) = grant {
                        let list = consent_list
                            .as_ref()
                            .and_then(|a| a.get(annotation))
                            .map(String::as_str)
                            .unwrap_or_default();
                        format!("{annotation}: {list}")
                    } else {
                        grant.to_string()
                    };
                    match fill(found, object, via) {
                        Ok(Some(copy)) => {
                            written.push(copy);
                            Verdict::Allowed(why)
                        }
                        // Unreadable content (a SOPS-encrypted Secret): allowed, shown as is.
                        Ok(None) => Verdict::Allowed(why),
                        Err(err) => {
                            findings.push(error_finding(&err, target.to_string()));
                            Verdict::Failed(err.to_string())
                        }
                    }
                }
            }
        }
    };
    copies.push(CopyEdge {
        source,
        target,
        via: Via::of_pull(via),
        verdict,
    });
}

/// The annotation to add a namespace to, for a copy asked through `via`.
fn consent_hint(via: PullVia) -> &'static str {
    match via {
        PullVia::Reflects => reflector::ALLOWED_NAMESPACES,
        PullVia::ReplicateFrom => replicator::REPLICATION_ALLOWED_NAMESPACES,
        _ => ALLOWED_NAMESPACES_ANNOTATION,
    }
}

/// The pull copy as written: the target's metadata, the source's content (copy-core's rules).
fn fill(source: &Value, target: &Value, via: PullVia) -> crate::Result<Option<Value>> {
    let (Some(source), Some(target_object)) = (config_object(source), config_object(target)) else {
        return Ok(None);
    };
    let mut copy = pulled(&source, &target_object, via)?;
    let meta = copy.metadata_mut();
    meta.labels = metadata_map(target, "labels");
    meta.annotations = metadata_map(target, "annotations");
    Ok(to_value(&copy))
}

fn to_value(object: &ConfigObject) -> Option<Value> {
    serde_json::to_value(object).ok()
}

/// A ConfigMap/Secret as copy-core's type; Secret `stringData` is merged into `data` as the API
/// server does. `None` when it does not deserialise (e.g. SOPS-encrypted data).
pub fn config_object(object: &Value) -> Option<ConfigObject> {
    match config_key(object)?.kind {
        ConfigKind::ConfigMap => serde_json::from_value::<ConfigMap>(object.clone())
            .ok()
            .map(ConfigObject::ConfigMap),
        ConfigKind::Secret => {
            let mut secret = serde_json::from_value::<Secret>(object.clone()).ok()?;
            if let Some(string_data) = secret.string_data.take() {
                let data = secret.data.get_or_insert_with(BTreeMap::new);
                for (k, v) in string_data {
                    data.insert(k, ByteString(v.into_bytes()));
                }
            }
            Some(ConfigObject::Secret(secret))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(ns: &str, name: &str, annotations: Value, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns, "annotations": annotations},
               "data": data})
    }

    #[test]
    fn resource_set_targets_are_flux_operators_unless_conflux_copies_them() {
        let source = cm("flux-system", "info", json!({}), json!({"k": "v"}));
        let mut target = cm(
            "team-a",
            "info",
            json!({"fluxcd.controlplane.io/copyFrom": "flux-system/info"}),
            json!({}),
        );
        target["metadata"]["labels"] = json!({
            "resourceset.fluxcd.controlplane.io/name": "tenants",
            "resourceset.fluxcd.controlplane.io/namespace": "flux-system",
        });
        let objects = [source, target];
        let report = audit(&objects, &AuditOptions::default());
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        let Verdict::Allowed(why) = &report.copies[0].verdict else {
            panic!("{:?}", report.copies[0].verdict);
        };
        assert!(
            why.starts_with("Flux Operator's: ResourceSet flux-system/tenants"),
            "{why}"
        );
        assert_eq!(report.written[0]["data"]["k"], "v");
        let conflux = AuditOptions {
            resource_set_targets: true,
            ..AuditOptions::default()
        };
        let report = audit(&objects, &conflux);
        assert!(matches!(report.copies[0].verdict, Verdict::Refused(_)));
    }

    fn copy_from(ns: &str, name: &str, from: &str) -> Value {
        cm(
            ns,
            name,
            json!({"fluxcd.controlplane.io/copyFrom": from}),
            json!({}),
        )
    }

    fn edges(report: &CopyAudit) -> Vec<(String, String, String, &'static str)> {
        report
            .copies
            .iter()
            .map(|c| {
                (
                    c.target.to_string(),
                    c.source.to_string(),
                    c.via.to_string(),
                    c.verdict.as_str(),
                )
            })
            .collect()
    }

    fn codes(report: &CopyAudit) -> Vec<(&'static str, String)> {
        report
            .findings
            .iter()
            .map(|f| (f.code, f.object.clone()))
            .collect()
    }

    fn e(t: &str, s: &str, via: &str, v: &'static str) -> (String, String, String, &'static str) {
        (t.to_owned(), s.to_owned(), via.to_owned(), v)
    }

    #[test]
    fn pull_copies_consent_missing_and_invalid() {
        let objects = [
            cm(
                "src",
                "info",
                json!({ALLOWED_NAMESPACES_ANNOTATION: "team-*"}),
                json!({"k": "v"}),
            ),
            copy_from("team-a", "info", "src/info"),
            copy_from("prod", "info", "src/info"),
            copy_from("src", "local", "src/info"),
            copy_from("team-b", "gone", "src/gone"),
            copy_from("team-c", "bad", "no-slash"),
        ];
        let report = audit(&objects, &AuditOptions::default());
        assert_eq!(
            edges(&report),
            [
                e(
                    "ConfigMap/prod/info",
                    "ConfigMap/src/info",
                    "copyFrom",
                    "refused"
                ),
                e(
                    "ConfigMap/src/local",
                    "ConfigMap/src/info",
                    "copyFrom",
                    "allowed"
                ),
                e(
                    "ConfigMap/team-a/info",
                    "ConfigMap/src/info",
                    "copyFrom",
                    "allowed"
                ),
                e(
                    "ConfigMap/team-b/gone",
                    "ConfigMap/src/gone",
                    "copyFrom",
                    "source-missing"
                ),
            ]
        );
        assert_eq!(
            codes(&report),
            [
                ("CopyRefused", "ConfigMap/prod/info".to_owned()),
                ("CopySourceMissing", "ConfigMap/team-b/gone".to_owned()),
                ("InvalidCopyFrom", "ConfigMap/team-c/bad".to_owned()),
            ]
        );
        assert!(
            report
                .findings
                .iter()
                .all(|f| f.severity == Severity::Error)
        );
        // Two allowed copies are written with the source's data and their own metadata.
        assert_eq!(report.written.len(), 2);
        let team_a = report
            .written
            .iter()
            .find(|w| w["metadata"]["namespace"] == "team-a")
            .unwrap();
        assert_eq!(team_a["data"], json!({"k": "v"}));
        assert_eq!(team_a["kind"], "ConfigMap");
        assert_eq!(
            team_a["metadata"]["annotations"]["fluxcd.controlplane.io/copyFrom"],
            "src/info"
        );
    }

    #[test]
    fn config_sync_fans_out_to_input_namespaces() {
        let sync = json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
            "metadata": {"name": "pull"},
            "spec": {"source": {"kind": "Secret", "namespace": "flux-system", "name": "pull"},
                     "target": {"namespaceSelector": {"matchLabels": {"role": "tenant"}},
                                "labels": {"reconcile.fluxcd.io/watch": "Enabled"}}}});
        let ns = |name: &str, labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        let objects = [
            sync,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "pull", "namespace": "flux-system"},
                   "stringData": {".dockerconfigjson": "{}"}}),
            ns("team-a", json!({"role": "tenant"})),
            ns("team-b", json!({"role": "tenant"})),
            ns("other", json!({})),
            // Someone else's object of that name in team-b.
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull", "namespace": "team-b"}}),
        ];
        let report = audit(&objects, &AuditOptions::default());
        assert_eq!(
            edges(&report),
            [
                e(
                    "Secret/team-a/pull",
                    "Secret/flux-system/pull",
                    "ConfigSync/pull",
                    "allowed"
                ),
                e(
                    "Secret/team-b/pull",
                    "Secret/flux-system/pull",
                    "ConfigSync/pull",
                    "conflict"
                ),
            ]
        );
        assert_eq!(
            codes(&report),
            [("CopyConflict", "Secret/team-b/pull".to_owned())]
        );
        assert_eq!(report.written.len(), 1);
        let copy = &report.written[0];
        assert_eq!(
            copy["metadata"]["labels"]["reconcile.fluxcd.io/watch"],
            "Enabled"
        );
        assert_eq!(copy["type"], "kubernetes.io/dockerconfigjson");
        assert_eq!(
            copy["data"][".dockerconfigjson"], "e30=",
            "stringData became data"
        );
    }

    #[test]
    fn config_sync_problems() {
        let objects = [
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync", "metadata": {"name": "bad"},
                   "spec": {"source": {"kind": "Pod", "namespace": "a", "name": "b"}}}),
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync", "metadata": {"name": "nowhere"},
                   "spec": {"source": {"kind": "ConfigMap", "namespace": "a", "name": "b"},
                            "target": {"namespaces": ["zzz-*"]}}}),
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync", "metadata": {"name": "sel"},
                   "spec": {"source": {"kind": "ConfigMap", "namespace": "a", "name": "b"},
                            "target": {"namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "Bogus"}]}}}}),
            cm("a", "b", json!({}), json!({})),
            cm(
                "a",
                "kopy",
                json!({"kopy.kot-labs.com/sync": "team=x"}),
                json!({}),
            ),
        ];
        let report = audit(&objects, &AuditOptions::default());
        assert_eq!(
            codes(&report),
            [
                ("InvalidConfigSync", "ConfigSync/bad".to_owned()),
                ("ConfigSyncNoTargets", "ConfigSync/nowhere".to_owned()),
                ("InvalidSelector", "ConfigSync/sel".to_owned()),
                ("UntrustedSyncSource", "ConfigMap/a/kopy".to_owned()),
            ]
        );
        let trusted = AuditOptions {
            sync_source_namespaces: vec!["a".to_owned()],
            ..AuditOptions::default()
        };
        let report = audit(&objects, &trusted);
        assert!(
            !codes(&report)
                .iter()
                .any(|(c, _)| *c == "UntrustedSyncSource")
        );
    }

    #[test]
    fn pull_copy_of_a_fan_out_copy_and_missing_config_sync_source() {
        let objects = [
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync", "metadata": {"name": "s"},
                   "spec": {"source": {"kind": "ConfigMap", "namespace": "a", "name": "b"},
                            "target": {"namespaces": ["c"]}}}),
            cm("a", "b", json!({}), json!({"x": "1"})),
            copy_from("c", "mine", "c/b"),
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync", "metadata": {"name": "lost"},
                   "spec": {"source": {"kind": "ConfigMap", "namespace": "a", "name": "nope"},
                            "target": {"namespaces": ["c"]}}}),
        ];
        let report = audit(&objects, &AuditOptions::default());
        let mine = report
            .written
            .iter()
            .find(|w| w["metadata"]["name"] == "mine")
            .unwrap();
        assert_eq!(mine["data"], json!({"x": "1"}));
        assert_eq!(
            codes(&report),
            [("CopySourceMissing", "ConfigSync/lost".to_owned())]
        );
    }

    #[test]
    fn secret_type_conflict_and_unreadable_secrets() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": "s", "namespace": "a"}, "data": {"k": "dg=="}}),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
                   "metadata": {"name": "s", "namespace": "a2",
                   "annotations": {"fluxcd.controlplane.io/copyFrom": "a/s"}}}),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "sops", "namespace": "a",
                                "annotations": {ALLOWED_NAMESPACES_ANNOTATION: "*"}},
                   "data": {"k": "ENC[AES256_GCM,data:...]"}}),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "sops", "namespace": "b",
                   "annotations": {"fluxcd.controlplane.io/copyFrom": "a/sops"}}}),
        ];
        let report = audit(&objects, &AuditOptions::default());
        let verdicts: Vec<&str> = report.copies.iter().map(|c| c.verdict.as_str()).collect();
        // a2/s is refused first (no consent); give consent to see the type conflict.
        assert_eq!(verdicts, ["refused", "allowed"]);
        assert!(
            report.written.is_empty(),
            "the SOPS secret is not rewritten"
        );
        let mut objects = objects;
        objects[0]["metadata"]["annotations"] = json!({ALLOWED_NAMESPACES_ANNOTATION: "a2"});
        let report = audit(&objects, &AuditOptions::default());
        assert_eq!(report.copies[0].verdict.as_str(), "failed");
        assert_eq!(
            codes(&report),
            [("SecretTypeConflict", "Secret/a2/s".to_owned())]
        );
    }

    /// reflector's and replicator's annotations in `conflux plan`: their pull copies with their
    /// consent, their fan-outs from trusted namespaces, and the copies they left behind adopted.
    #[test]
    fn reflector_and_replicator_annotations() {
        let ns = |name: &str, labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        let objects = [
            ns("namespace-1", json!({})),
            ns("shop", json!({"env": "production"})),
            ns("dev", json!({})),
            cm(
                "default",
                "source-config-map",
                json!({
                    crate::reflector::ALLOWED: "true",
                    crate::reflector::ALLOWED_NAMESPACES: "namespace-1,namespace-2,namespace-[0-9]*",
                    crate::reflector::ALLOWED_NAMESPACES_SELECTOR: "env=production",
                }),
                json!({"k": "v"}),
            ),
            cm(
                "shop",
                "mirror",
                json!({crate::reflector::REFLECTS: "default/source-config-map"}),
                json!({}),
            ),
            cm(
                "dev",
                "mirror",
                json!({crate::reflector::REFLECTS: "default/source-config-map"}),
                json!({}),
            ),
            cm(
                "dev",
                "replica",
                json!({crate::replicator::REPLICATE_FROM: "default/source-config-map"}),
                json!({"own": "o"}),
            ),
            cm(
                "platform",
                "pushed",
                json!({crate::replicator::REPLICATE_TO: "namespace-.*,dev"}),
                json!({"p": "1"}),
            ),
            // replicator's copy from before the switch.
            cm(
                "dev",
                "pushed",
                json!({crate::replicator::REPLICATED_KEYS: "p"}),
                json!({"p": "0"}),
            ),
        ];
        let options = AuditOptions {
            sync_source_namespaces: vec!["platform".to_owned()],
            ..AuditOptions::default()
        };
        let report = audit(&objects, &options);
        assert_eq!(
            edges(&report),
            [
                e(
                    "ConfigMap/dev/mirror",
                    "ConfigMap/default/source-config-map",
                    "reflects",
                    "refused"
                ),
                e(
                    "ConfigMap/dev/pushed",
                    "ConfigMap/platform/pushed",
                    "replicator",
                    "allowed"
                ),
                e(
                    "ConfigMap/dev/replica",
                    "ConfigMap/default/source-config-map",
                    "replicate-from",
                    "refused"
                ),
                e(
                    "ConfigMap/namespace-1/pushed",
                    "ConfigMap/platform/pushed",
                    "replicator",
                    "allowed"
                ),
                e(
                    "ConfigMap/shop/mirror",
                    "ConfigMap/default/source-config-map",
                    "reflects",
                    "allowed"
                ),
            ]
        );
        let replica_refusal = report
            .findings
            .iter()
            .find(|f| f.object == "ConfigMap/dev/replica")
            .unwrap();
        assert!(
            replica_refusal
                .message
                .contains(crate::replicator::REPLICATION_ALLOWED_NAMESPACES),
            "{}",
            replica_refusal.message
        );
        let adopted = report
            .copies
            .iter()
            .find(|c| c.target.to_string() == "ConfigMap/dev/pushed")
            .unwrap();
        assert!(
            adopted.verdict.detail().contains("adopting"),
            "{:?}",
            adopted.verdict
        );
        let shop = report
            .written
            .iter()
            .find(|w| w["metadata"]["namespace"] == "shop")
            .unwrap();
        assert_eq!(shop["data"], json!({"k": "v"}));

        // Untrusted: the replicator source is refused, nothing is pushed.
        let report = audit(&objects, &AuditOptions::default());
        assert!(codes(&report).contains(&(
            "UntrustedSyncSource",
            "ConfigMap/platform/pushed".to_owned()
        )));
        // A replica merges: consent given, the replica keeps its own key.
        let mut objects = objects.to_vec();
        objects[3]["metadata"]["annotations"][crate::replicator::REPLICATION_ALLOWED] =
            json!("true");
        objects[3]["metadata"]["annotations"][crate::replicator::REPLICATION_ALLOWED_NAMESPACES] =
            json!("dev");
        let report = audit(&objects, &options);
        let replica = report
            .written
            .iter()
            .find(|w| w["metadata"]["name"] == "replica")
            .unwrap();
        assert_eq!(replica["data"], json!({"k": "v", "own": "o"}));
    }
}
