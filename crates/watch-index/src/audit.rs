//! Offline audit of a set of objects (a fleet repository, a cluster dump): which Flux objects
//! reconcile when a ConfigMap or Secret changes, and which of those changes Flux will only see at
//! the referrer's next interval because the source lacks the watch label (docs/design.md 3.2, 3.3).
//!
//! Also the shape every conflux audit reports in: a [`Finding`] with a [`Severity`], a stable
//! `code`, the object to fix and a message. copy-core and reloader reuse these types;
//! postbuild-subst, which does not depend on this crate, has a struct with the same fields.
//!
//! ```
//! use serde_json::json;
//! use conflux_watch_index::audit::{audit, Severity};
//! use conflux_watch_index::refs::ReferenceSet;
//! use conflux_watch_index::selector::Selector;
//!
//! let objects = [
//!     json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
//!            "metadata": {"name": "apps", "namespace": "team"},
//!            "spec": {"interval": "10m",
//!                     "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}}}),
//!     json!({"apiVersion": "v1", "kind": "ConfigMap",
//!            "metadata": {"name": "vars", "namespace": "team"}}),
//! ];
//! let selector = Selector::parse("reconcile.fluxcd.io/watch=Enabled").unwrap();
//! let report = audit(&objects, &ReferenceSet::flux(), &selector);
//! assert_eq!(report.edges.len(), 1);
//! assert!(!report.edges[0].watched);
//! assert_eq!(report.findings[0].code, "WatchLabelMissing");
//! assert_eq!(report.findings[0].severity, Severity::Warning);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::refs::{ConfigKey, ConfigKind, ObjectRef, ReferenceSet};
use crate::selector::Selector;

/// How serious a finding is. Ordered: `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Works, but probably not as intended (late, silently different).
    Warning,
    /// Fails, or is refused, when applied.
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

/// One problem found by an audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How serious it is.
    pub severity: Severity,
    /// A stable, PascalCase reason code (`WatchLabelMissing`), for scripts and tests.
    pub code: &'static str,
    /// The object to fix, `Kind/namespace/name` (`Kind/name` when cluster-scoped).
    pub object: String,
    /// What is wrong and what it causes. Never contains ConfigMap or Secret data.
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

/// `Kind/namespace/name`, or `Kind/name` without a namespace: how audits name objects.
pub fn object_name(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

/// [`object_name`] of an object's `kind`, `metadata.namespace` and `metadata.name`.
pub fn name_of(object: &Value) -> String {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    object_name(
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// [`object_name`] of a referrer (the group is left out).
pub fn referrer_name(object: &ObjectRef) -> String {
    object_name(&object.kind, &object.namespace, &object.name)
}

/// [`object_name`] of a ConfigMap/Secret key.
pub fn config_name(key: &ConfigKey) -> String {
    object_name(key.kind.as_str(), &key.namespace, &key.name)
}

/// `metadata.<field>` (`labels`, `annotations`) of an object as a string map; `None` when absent.
/// Non-string values are skipped.
pub fn metadata_map(object: &Value, field: &str) -> Option<BTreeMap<String, String>> {
    let map = object.get("metadata")?.get(field)?.as_object()?;
    Some(
        map.iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
    )
}

/// The `v1` ConfigMaps and Secrets among `objects` (with a namespace and a name), by key. A later
/// object with the same key replaces an earlier one, so callers can append copies as they would
/// be written to the objects read from the input.
pub fn configs(objects: &[Value]) -> BTreeMap<ConfigKey, &Value> {
    let mut found = BTreeMap::new();
    for object in objects {
        if let Some(key) = config_key(object) {
            found.insert(key, object);
        }
    }
    found
}

/// The key of a `v1` ConfigMap or Secret with a namespace and a name.
pub fn config_key(object: &Value) -> Option<ConfigKey> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    let kind = ConfigKind::of_object(text("/apiVersion")?, text("/kind")?)?;
    let namespace = text("/metadata/namespace").filter(|s| !s.is_empty())?;
    let name = text("/metadata/name").filter(|s| !s.is_empty())?;
    Some(ConfigKey::new(kind, namespace, name))
}

/// One reference from a Flux object to a ConfigMap/Secret: a change of the source reconciles the
/// referrer, right away when the source is watched, at the referrer's next interval otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEdge {
    /// The ConfigMap/Secret.
    pub source: ConfigKey,
    /// The Flux object that reads it.
    pub referrer: ObjectRef,
    /// Where the reference is (`spec.postBuild.substituteFrom[kind=ConfigMap].name`).
    pub path: Arc<str>,
    /// The reference says `optional: true`.
    pub optional: bool,
    /// The source is among the audited objects.
    pub source_found: bool,
    /// The source matches the watch-configs selector, so Flux reconciles the referrer as soon as
    /// it changes. `false` when the source is missing.
    pub watched: bool,
    /// The referrer's `spec.interval` (how stale it can get without the label), when set.
    pub interval: Option<String>,
}

impl WatchEdge {
    /// When a change of the source reaches the referrer: `at once` (watched), `at interval`
    /// (not watched), or `missing` (the source is not in the input).
    pub fn when(&self) -> &'static str {
        match (self.source_found, self.watched) {
            (false, _) => "missing",
            (true, false) => "at interval",
            (true, true) => "at once",
        }
    }
}

/// What [`audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchAudit {
    /// Every reference of a Flux object, sorted by source then referrer; one per pair.
    pub edges: Vec<WatchEdge>,
    /// `WatchLabelMissing` (warning): a referenced source does not match the selector, so its
    /// changes reach the referrers only at their next interval. `ReferenceMissing` (warning, info
    /// when every reference to it is optional): a referenced source is not among the objects.
    pub findings: Vec<Finding>,
}

/// Audits `objects`: the references `references` extracts from each object whose group is not
/// empty (Flux objects; copies are copy-core's business), resolved against the ConfigMaps and
/// Secrets among `objects` (later objects with the same key win, see [`configs`]) and judged
/// against the watch-configs `selector` (`--watch-configs-label-selector`; the empty selector
/// watches everything).
pub fn audit(objects: &[Value], references: &ReferenceSet, selector: &Selector) -> WatchAudit {
    let configs = configs(objects);
    let mut edges: BTreeMap<(ConfigKey, ObjectRef), WatchEdge> = BTreeMap::new();
    for object in objects {
        let Some(referrer) = references.extract(object) else {
            continue;
        };
        if referrer.object.group.is_empty() {
            continue;
        }
        let interval = object
            .pointer("/spec/interval")
            .and_then(Value::as_str)
            .map(str::to_owned);
        for reference in referrer.references {
            let source = configs.get(&reference.key);
            let watched = source.is_some_and(|s| {
                let labels = metadata_map(s, "labels").unwrap_or_default();
                selector.matches(&labels)
            });
            let key = (reference.key.clone(), referrer.object.clone());
            // The same source referenced twice: optional only when both say so.
            if let Some(edge) = edges.get_mut(&key) {
                edge.optional &= reference.optional;
                continue;
            }
            edges.insert(
                key,
                WatchEdge {
                    source: reference.key,
                    referrer: referrer.object.clone(),
                    path: reference.path,
                    optional: reference.optional,
                    source_found: source.is_some(),
                    watched,
                    interval: interval.clone(),
                },
            );
        }
    }
    let edges: Vec<WatchEdge> = edges.into_values().collect();
    let findings = findings(&edges, selector);
    WatchAudit { edges, findings }
}

fn findings(edges: &[WatchEdge], selector: &Selector) -> Vec<Finding> {
    let mut findings = Vec::new();
    // Edges are sorted by source: one finding per source, naming every referrer.
    for group in edges.chunk_by(|a, b| a.source == b.source) {
        let Some(first) = group.first() else {
            continue;
        };
        let source = config_name(&first.source);
        let referrers = |edge_text: &dyn Fn(&WatchEdge) -> String| {
            group.iter().map(edge_text).collect::<Vec<_>>().join(", ")
        };
        if !first.source_found {
            let all_optional = group.iter().all(|e| e.optional);
            let (severity, effect) = if all_optional {
                (Severity::Info, "optional, so they reconcile without it")
            } else {
                (
                    Severity::Warning,
                    "they fail to reconcile unless it is created outside this input",
                )
            };
            findings.push(Finding::new(
                severity,
                "ReferenceMissing",
                source.clone(),
                format!(
                    "referenced by {} but not found in the input: {effect}",
                    referrers(&|e| format!("{} ({})", referrer_name(&e.referrer), e.path))
                ),
            ));
        } else if !first.watched {
            findings.push(Finding::new(
                Severity::Warning,
                "WatchLabelMissing",
                source,
                format!(
                    "does not match the watch-configs selector '{selector}': a change reaches {} only at the next interval; label it to reconcile at once",
                    referrers(&|e| format!(
                        "{} (every {})",
                        referrer_name(&e.referrer),
                        e.interval.as_deref().unwrap_or("interval unknown")
                    ))
                ),
            ));
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ks(ns: &str, name: &str, from: Value) -> Value {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"interval": "10m", "postBuild": {"substituteFrom": from}}})
    }

    fn cm(ns: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns, "labels": labels}})
    }

    fn default_selector() -> Selector {
        Selector::parse(crate::trigger::DEFAULT_WATCH_CONFIGS_SELECTOR).unwrap()
    }

    fn codes(report: &WatchAudit) -> Vec<(&'static str, String, Severity)> {
        report
            .findings
            .iter()
            .map(|f| (f.code, f.object.clone(), f.severity))
            .collect()
    }

    #[test]
    fn labelled_unlabelled_and_missing_sources() {
        let objects = [
            ks(
                "t",
                "apps",
                json!([{"kind": "ConfigMap", "name": "watched"},
                       {"kind": "ConfigMap", "name": "plain"},
                       {"kind": "ConfigMap", "name": "gone"},
                       {"kind": "Secret", "name": "maybe", "optional": true}]),
            ),
            cm(
                "t",
                "watched",
                json!({"reconcile.fluxcd.io/watch": "Enabled"}),
            ),
            cm("t", "plain", json!({})),
        ];
        let report = audit(&objects, &ReferenceSet::flux(), &default_selector());
        let edges: Vec<(String, bool, bool)> = report
            .edges
            .iter()
            .map(|e| (config_name(&e.source), e.source_found, e.watched))
            .collect();
        assert_eq!(
            edges,
            [
                ("ConfigMap/t/gone".to_owned(), false, false),
                ("ConfigMap/t/plain".to_owned(), true, false),
                ("ConfigMap/t/watched".to_owned(), true, true),
                ("Secret/t/maybe".to_owned(), false, false),
            ]
        );
        assert_eq!(
            codes(&report),
            [
                (
                    "ReferenceMissing",
                    "ConfigMap/t/gone".to_owned(),
                    Severity::Warning
                ),
                (
                    "WatchLabelMissing",
                    "ConfigMap/t/plain".to_owned(),
                    Severity::Warning
                ),
                (
                    "ReferenceMissing",
                    "Secret/t/maybe".to_owned(),
                    Severity::Info
                ),
            ]
        );
        let stale = &report.findings[1].message;
        assert!(
            stale.contains("Kustomization/t/apps (every 10m)"),
            "{stale}"
        );
    }

    #[test]
    fn empty_selector_watches_everything_and_copies_are_skipped() {
        let copy = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "t",
                         "annotations": {"fluxcd.controlplane.io/copyFrom": "src/c"}}});
        let objects = [
            ks("t", "apps", json!([{"kind": "ConfigMap", "name": "plain"}])),
            cm("t", "plain", json!({})),
            copy,
        ];
        let report = audit(&objects, &ReferenceSet::flux(), &Selector::everything());
        assert_eq!(report.edges.len(), 1, "the copy is not a watch edge");
        assert!(report.edges[0].watched);
        assert_eq!(report.edges[0].when(), "at once");
        assert!(report.findings.is_empty());
    }

    #[test]
    fn later_objects_replace_earlier_ones_and_duplicates_merge() {
        let objects = [
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                   "metadata": {"name": "web", "namespace": "t"},
                   "spec": {"valuesFrom": [{"kind": "ConfigMap", "name": "v", "optional": true},
                                           {"kind": "ConfigMap", "name": "v"}]}}),
            cm("t", "v", json!({})),
            cm("t", "v", json!({"reconcile.fluxcd.io/watch": "Enabled"})),
        ];
        let report = audit(&objects, &ReferenceSet::flux(), &default_selector());
        assert_eq!(report.edges.len(), 1);
        assert!(!report.edges[0].optional, "one required reference wins");
        assert!(report.edges[0].watched, "the later object counts");
        assert_eq!(report.edges[0].interval, None);
        assert!(report.findings.is_empty());
    }

    #[test]
    fn names_and_maps() {
        assert_eq!(object_name("ConfigSync", "", "x"), "ConfigSync/x");
        let obj = json!({"kind": "Secret", "metadata": {"name": "s", "namespace": "n",
            "labels": {"a": "1", "b": 2}}});
        assert_eq!(name_of(&obj), "Secret/n/s");
        assert_eq!(
            metadata_map(&obj, "labels"),
            Some(BTreeMap::from([("a".to_owned(), "1".to_owned())]))
        );
        assert_eq!(metadata_map(&obj, "annotations"), None);
        assert_eq!(config_key(&obj), None, "no apiVersion");
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Error);
    }
}
