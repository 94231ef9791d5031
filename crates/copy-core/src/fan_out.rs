//! Fan-out: which namespaces get a copy of a source (docs/design.md 4.2).
//!
//! A [`FanOut`] is everything a sync needs to know, built either from a `ConfigSync`
//! ([`FanOut::from_config_sync`]) or from a kopy-annotated source ([`FanOut::from_kopy`]). Given
//! the cluster's namespaces it answers which ones are targets:
//!
//! - the `namespaceSelector` ORed with the `namespaces` globs; with neither, every namespace;
//! - minus `excludeNamespaces` globs and minus `kube-system`, `kube-public`, `kube-node-lease`
//!   (unless one of those is listed by exact name in `namespaces`);
//! - minus the source's own namespace when the copy would have the source's name (it would be the
//!   source itself);
//! - minus terminating namespaces (writes there fail and the copy would die with the namespace).
//!
//! ```
//! use copy_core::fan_out::{FanOut, NamespaceView};
//! use copy_core::config_sync::ConfigSyncSpec;
//!
//! let spec: ConfigSyncSpec = serde_json::from_value(serde_json::json!({
//!     "source": {"kind": "Secret", "namespace": "flux-system", "name": "ghcr-auth"},
//!     "target": {"namespaces": ["team-*"]},
//! })).unwrap();
//! let fan_out = FanOut::from_config_sync("ghcr-auth", &spec).unwrap();
//! let namespaces = [
//!     NamespaceView::new("team-a"),
//!     NamespaceView::new("team-b").terminating(true),
//!     NamespaceView::new("default"),
//! ];
//! let targets = fan_out.target_namespaces(namespaces);
//! assert_eq!(targets.into_iter().collect::<Vec<_>>(), ["team-a"]);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use watch_index::selector::Selector;

use crate::config_sync::{ConfigSyncSpec, ConflictPolicy, DeletionPolicy};
use crate::glob::{any_match, glob_match, is_literal};
use crate::ownership::Owner;
use crate::source::SourceRef;
use crate::{Error, Result};

/// Namespaces never targeted unless listed by exact name in `namespaces`.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 3] =
    ["kube-system", "kube-public", "kube-node-lease"];

/// kopy's annotation on a source: the value is a label selector for target namespaces.
pub const KOPY_SYNC_ANNOTATION: &str = "kopy.kot-labs.com/sync";
/// The older spelling of [`KOPY_SYNC_ANNOTATION`] (flynshue/kopy).
pub const KOPY_SYNC_ANNOTATION_LEGACY: &str = "flynshue.io/sync";

/// What fan-out needs to know about a namespace. Borrowed, so a namespace cache can be scanned
/// without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceView<'a> {
    /// The namespace's name.
    pub name: &'a str,
    /// Its labels.
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// True while it is being deleted.
    pub terminating: bool,
}

impl<'a> NamespaceView<'a> {
    /// A namespace without labels that is not terminating.
    pub fn new(name: &'a str) -> Self {
        NamespaceView {
            name,
            labels: None,
            terminating: false,
        }
    }

    /// The same namespace with `labels`.
    pub fn labels(self, labels: &'a BTreeMap<String, String>) -> Self {
        NamespaceView {
            labels: Some(labels),
            ..self
        }
    }

    /// The same namespace, terminating or not.
    pub fn terminating(self, terminating: bool) -> Self {
        NamespaceView {
            terminating,
            ..self
        }
    }
}

/// A namespace is terminating once it has a deletion timestamp or phase `Terminating`.
impl<'a> From<&'a Namespace> for NamespaceView<'a> {
    fn from(ns: &'a Namespace) -> Self {
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        NamespaceView {
            name: ns.metadata.name.as_deref().unwrap_or_default(),
            labels: ns.metadata.labels.as_ref(),
            terminating: ns.metadata.deletion_timestamp.is_some() || phase == Some("Terminating"),
        }
    }
}

/// A fan-out sync: the source, the owner of the copies, how copies look, and which namespaces get
/// one.
#[derive(Debug, Clone, PartialEq)]
pub struct FanOut {
    /// The source.
    pub source: SourceRef,
    /// Who owns the copies (labels on every copy name it).
    pub owner: Owner,
    /// Name of every copy.
    pub target_name: String,
    /// Extra labels on every copy.
    pub labels: BTreeMap<String, String>,
    /// Extra annotations on every copy.
    pub annotations: BTreeMap<String, String>,
    /// Delete copies in namespaces no longer selected.
    pub prune: bool,
    /// Same-name objects we do not own: skip or adopt.
    pub conflict_policy: ConflictPolicy,
    /// What happens to copies when the owner goes away.
    pub deletion_policy: DeletionPolicy,
    /// `None`: no selector given.
    selector: Option<Selector>,
    namespaces: Vec<String>,
    exclude_namespaces: Vec<String>,
}

impl FanOut {
    /// The fan-out of the ConfigSync named `name`. Fails only on a `namespaceSelector` that does not
    /// convert to a selector (a bad operator or label value).
    pub fn from_config_sync(name: &str, spec: &ConfigSyncSpec) -> Result<Self> {
        let selector = spec
            .target
            .namespace_selector
            .as_ref()
            .map(Selector::from_label_selector)
            .transpose()
            .map_err(|e| Error::InvalidSelector {
                context: format!("ConfigSync {name} spec.target.namespaceSelector"),
                message: e.to_string(),
            })?;
        Ok(FanOut {
            source: spec.source.clone(),
            owner: Owner::ConfigSync {
                name: name.to_owned(),
            },
            target_name: spec.target_name().to_owned(),
            labels: spec.target.labels.clone(),
            annotations: spec.target.annotations.clone(),
            prune: spec.prune,
            conflict_policy: spec.conflict_policy,
            deletion_policy: spec.deletion_policy,
            selector,
            namespaces: spec.target.namespaces.clone(),
            exclude_namespaces: spec.target.exclude_namespaces.clone(),
        })
    }

    /// The implicit fan-out of a source annotated `kopy.kot-labs.com/sync` (or `flynshue.io/sync`)
    /// with a label selector for target namespaces.
    ///
    /// `Ok(None)` when the source carries neither annotation. A source outside `trusted_namespaces`
    /// (`--sync-source-namespaces`) is refused with [`Error::UntrustedSyncSource`]: otherwise any
    /// tenant could plant objects in every namespace. Copies keep the source's name, carry no extra
    /// labels, are pruned when a namespace stops matching and orphaned when the annotation goes.
    pub fn from_kopy<'t>(
        source: &SourceRef,
        source_annotations: Option<&BTreeMap<String, String>>,
        trusted_namespaces: impl IntoIterator<Item = &'t str>,
    ) -> Result<Option<Self>> {
        let found = source_annotations.and_then(|annotations| {
            [KOPY_SYNC_ANNOTATION, KOPY_SYNC_ANNOTATION_LEGACY]
                .into_iter()
                .find_map(|a| annotations.get(a).map(|v| (a, v)))
        });
        let Some((annotation, value)) = found else {
            return Ok(None);
        };
        let trusted = trusted_namespaces
            .into_iter()
            .any(|ns| ns == source.namespace);
        if !trusted {
            return Err(Error::UntrustedSyncSource {
                source_ref: source.clone(),
                annotation,
            });
        }
        let selector = Selector::parse(value).map_err(|e| Error::InvalidSelector {
            context: format!("{annotation} on {source}"),
            message: e.to_string(),
        })?;
        Ok(Some(FanOut::kopy(source, selector)))
    }

    /// The fan-out of a kopy source with an already parsed `selector`. With
    /// `Selector::nothing()` it selects no namespace, which is what the controller needs once the
    /// source or its annotation is gone: `plan_sync(.., None, ..)` then marks the copies orphaned,
    /// and [`plan_deletion`](crate::steps::plan_deletion) releases them.
    pub fn kopy(source: &SourceRef, selector: Selector) -> Self {
        FanOut {
            source: source.clone(),
            owner: Owner::kopy(source),
            target_name: source.name.clone(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            prune: true,
            conflict_policy: ConflictPolicy::Skip,
            deletion_policy: DeletionPolicy::Orphan,
            selector: Some(selector),
            namespaces: Vec::new(),
            exclude_namespaces: Vec::new(),
        }
    }

    /// Whether `ns` gets a copy.
    pub fn selects(&self, ns: NamespaceView<'_>) -> bool {
        if ns.terminating || self.is_source_itself(ns.name) || self.excludes(ns.name) {
            return false;
        }
        match (&self.selector, self.namespaces.is_empty()) {
            (None, true) => true,
            (selector, _) => {
                selector.as_ref().is_some_and(|s| s.matches(&ns.labels))
                    || any_match(self.namespaces.iter().map(String::as_str), ns.name)
            }
        }
    }

    /// The names of the namespaces among `namespaces` that get a copy.
    pub fn target_namespaces<'a>(
        &self,
        namespaces: impl IntoIterator<Item = NamespaceView<'a>>,
    ) -> BTreeSet<String> {
        namespaces
            .into_iter()
            .filter(|ns| self.selects(*ns))
            .map(|ns| ns.name.to_owned())
            .collect()
    }

    /// A copy with the source's name in the source's namespace would overwrite the source.
    fn is_source_itself(&self, namespace: &str) -> bool {
        namespace == self.source.namespace && self.target_name == self.source.name
    }

    fn excludes(&self, namespace: &str) -> bool {
        if any_match(
            self.exclude_namespaces.iter().map(String::as_str),
            namespace,
        ) {
            return true;
        }
        DEFAULT_EXCLUDED_NAMESPACES.contains(&namespace)
            && !self
                .namespaces
                .iter()
                .any(|p| is_literal(p) && glob_match(p, namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(target: serde_json::Value) -> ConfigSyncSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"kind": "Secret", "namespace": "flux-system", "name": "ghcr-auth"},
            "target": target,
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// (case, target spec, namespace, its labels, terminating, selected)
    type SelectionRow<'a> = (
        &'a str,
        serde_json::Value,
        &'a str,
        &'a BTreeMap<String, String>,
        bool,
        bool,
    );
    /// (case, annotations, source namespace, None = not kopy / Ok(namespace selected) / Err(reason))
    type KopyRow<'a> = (
        &'a str,
        Option<BTreeMap<String, String>>,
        &'a str,
        Option<std::result::Result<bool, &'a str>>,
    );

    /// One row per selection rule.
    #[test]
    fn selection_table() {
        let tenant = labels(&[("toolkit.fluxcd.io/role", "tenant")]);
        let none = labels(&[]);
        let by_label = serde_json::json!({"namespaceSelector": {"matchLabels": {"toolkit.fluxcd.io/role": "tenant"}}});
        let by_both = serde_json::json!({
            "namespaceSelector": {"matchLabels": {"toolkit.fluxcd.io/role": "tenant"}},
            "namespaces": ["team-*"],
        });
        let cases: &[SelectionRow<'_>] = &[
            (
                "no selector, no list: everything",
                serde_json::json!({}),
                "apps",
                &none,
                false,
                true,
            ),
            (
                "default exclusion kube-system",
                serde_json::json!({}),
                "kube-system",
                &none,
                false,
                false,
            ),
            (
                "default exclusion kube-public",
                serde_json::json!({}),
                "kube-public",
                &none,
                false,
                false,
            ),
            (
                "default exclusion kube-node-lease",
                serde_json::json!({}),
                "kube-node-lease",
                &none,
                false,
                false,
            ),
            (
                "kube-system listed by name",
                serde_json::json!({"namespaces": ["kube-system"]}),
                "kube-system",
                &none,
                false,
                true,
            ),
            (
                "kube-* glob does not lift defaults",
                serde_json::json!({"namespaces": ["kube-*"]}),
                "kube-system",
                &none,
                false,
                false,
            ),
            (
                "kube-* glob selects others",
                serde_json::json!({"namespaces": ["kube-*"]}),
                "kube-flannel",
                &none,
                false,
                true,
            ),
            (
                "listed but excluded",
                serde_json::json!({"namespaces": ["kube-system"], "excludeNamespaces": ["kube-*"]}),
                "kube-system",
                &none,
                false,
                false,
            ),
            (
                "selector matches",
                by_label.clone(),
                "t1",
                &tenant,
                false,
                true,
            ),
            (
                "selector does not match",
                by_label.clone(),
                "t2",
                &none,
                false,
                false,
            ),
            (
                "selector OR glob: glob",
                by_both.clone(),
                "team-a",
                &none,
                false,
                true,
            ),
            (
                "selector OR glob: selector",
                by_both.clone(),
                "shop",
                &tenant,
                false,
                true,
            ),
            (
                "selector OR glob: neither",
                by_both,
                "shop",
                &none,
                false,
                false,
            ),
            (
                "empty selector matches all",
                serde_json::json!({"namespaceSelector": {}}),
                "apps",
                &none,
                false,
                true,
            ),
            (
                "glob list only",
                serde_json::json!({"namespaces": ["team-?"]}),
                "team-ab",
                &none,
                false,
                false,
            ),
            (
                "exclude glob",
                serde_json::json!({"excludeNamespaces": ["sandbox-*"]}),
                "sandbox-1",
                &none,
                false,
                false,
            ),
            (
                "exclude beats selector",
                serde_json::json!({"namespaceSelector": {}, "excludeNamespaces": ["t1"]}),
                "t1",
                &tenant,
                false,
                false,
            ),
            (
                "terminating skipped",
                serde_json::json!({}),
                "apps",
                &none,
                true,
                false,
            ),
            (
                "source namespace, same name",
                serde_json::json!({}),
                "flux-system",
                &none,
                false,
                false,
            ),
            (
                "source namespace, other name",
                serde_json::json!({"name": "ghcr-copy"}),
                "flux-system",
                &none,
                false,
                true,
            ),
        ];
        for (case, target, name, ns_labels, terminating, want) in cases {
            let fan_out = FanOut::from_config_sync("cs", &spec(target.clone())).unwrap();
            let ns = NamespaceView::new(name)
                .labels(ns_labels)
                .terminating(*terminating);
            assert_eq!(fan_out.selects(ns), *want, "{case}");
        }
    }

    #[test]
    fn target_namespaces_from_k8s_namespaces() {
        let ns = |name: &str, role: Option<&str>, terminating: bool| -> Namespace {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "labels": role.map(|r| serde_json::json!({"role": r})),
                },
                "status": {"phase": if terminating { "Terminating" } else { "Active" }},
            }))
            .unwrap()
        };
        let all = [
            ns("a", Some("tenant"), false),
            ns("b", Some("tenant"), true),
            ns("c", None, false),
            ns("kube-system", Some("tenant"), false),
        ];
        let fan_out = FanOut::from_config_sync(
            "cs",
            &spec(serde_json::json!({"namespaceSelector": {"matchLabels": {"role": "tenant"}}})),
        )
        .unwrap();
        let got = fan_out.target_namespaces(all.iter().map(NamespaceView::from));
        assert_eq!(got.into_iter().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn bad_namespace_selector_is_an_error() {
        let bad = spec(
            serde_json::json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}),
        );
        let err = FanOut::from_config_sync("cs", &bad).unwrap_err();
        assert_eq!(err.reason(), "InvalidSelector");
        assert!(
            err.to_string()
                .contains("ConfigSync cs spec.target.namespaceSelector"),
            "{err}"
        );
    }

    #[test]
    fn kopy_table() {
        let source = SourceRef::new(crate::SourceKind::Secret, "flux-system", "registry");
        let trusted = ["flux-system", "infra"];
        let ann = |k: &str, v: &str| Some(labels(&[(k, v)]));
        let tenant = labels(&[("role", "tenant")]);
        // (case, annotations, source namespace, outcome: None = not kopy, Some(Ok(ns → selected)), Some(Err(reason)))
        let cases: Vec<KopyRow<'_>> = vec![
            ("no annotations", None, "flux-system", None),
            (
                "unrelated annotation",
                ann("x", "role=tenant"),
                "flux-system",
                None,
            ),
            (
                "kopy, trusted, matches",
                ann(KOPY_SYNC_ANNOTATION, "role=tenant"),
                "flux-system",
                Some(Ok(true)),
            ),
            (
                "legacy, trusted, matches",
                ann(KOPY_SYNC_ANNOTATION_LEGACY, "role=tenant"),
                "infra",
                Some(Ok(true)),
            ),
            (
                "kopy, trusted, no match",
                ann(KOPY_SYNC_ANNOTATION, "role=prod"),
                "flux-system",
                Some(Ok(false)),
            ),
            (
                "kopy, untrusted namespace",
                ann(KOPY_SYNC_ANNOTATION, "role=tenant"),
                "team-a",
                Some(Err("Refused")),
            ),
            (
                "kopy, bad selector",
                ann(KOPY_SYNC_ANNOTATION, "role in (a"),
                "flux-system",
                Some(Err("InvalidSelector")),
            ),
        ];
        for (case, annotations, namespace, want) in cases {
            let source = SourceRef {
                namespace: namespace.to_owned(),
                ..source.clone()
            };
            let got = FanOut::from_kopy(&source, annotations.as_ref(), trusted)
                .transpose()
                .map(|r| {
                    r.map(|f| f.selects(NamespaceView::new("t").labels(&tenant)))
                        .map_err(|e| e.reason())
                });
            assert_eq!(got, want, "{case}");
        }
        let refused = FanOut::from_kopy(&source, ann(KOPY_SYNC_ANNOTATION, "").as_ref(), ["infra"])
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Secret/flux-system/registry carries kopy.kot-labs.com/sync but its namespace is not a trusted sync source namespace (--sync-source-namespaces); the annotation is ignored"
        );
    }
}
