//! Fan-out: which namespaces get a copy of a source (docs/design.md 4.2).
//!
//! A [`FanOut`] is everything a sync needs to know, built either from a `ConfigSync`
//! ([`FanOut::from_config_sync`]) or from a source annotated by kopy, reflector or replicator
//! ([`FanOut::from_annotations`]). Given the cluster's namespaces it answers which ones are
//! targets:
//!
//! - those its [`Selection`] selects: the `namespaceSelector` ORed with the `namespaces` globs
//!   (with neither, every namespace), or what the annotations say;
//! - minus `excludeNamespaces` globs and minus `kube-system`, `kube-public`, `kube-node-lease`
//!   (unless one of those is listed by exact name);
//! - minus the source's own namespace when the copy would have the source's name (it would be the
//!   source itself);
//! - minus terminating namespaces (writes there fail and the copy would die with the namespace).
//!
//! ```
//! use conflux_copy_core::fan_out::{FanOut, NamespaceView};
//! use conflux_copy_core::config_sync::ConfigSyncSpec;
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

use conflux_watch_index::selector::Selector;

use crate::config_sync::{ConfigSyncSpec, ConflictPolicy, DeletionPolicy};
use crate::ownership::Owner;
use crate::source::{ConfigObject, SourceRef};
use crate::{Error, Result, reflector, replicator};
use conflux_watch_index::glob::any_match;

// Defined with the selection they feed; still reachable here, where fan-out's callers look.
pub use crate::selection::{NamespaceView, Selection};

/// Namespaces never targeted unless listed by exact name in `namespaces`.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 3] =
    ["kube-system", "kube-public", "kube-node-lease"];

/// kopy's annotation on a source: the value is a label selector for target namespaces.
pub const KOPY_SYNC_ANNOTATION: &str = "kopy.kot-labs.com/sync";
/// The older spelling of [`KOPY_SYNC_ANNOTATION`] (flynshue/kopy).
pub const KOPY_SYNC_ANNOTATION_LEGACY: &str = "flynshue.io/sync";
/// The label kopy puts on its copies, naming the source's namespace.
pub const KOPY_ORIGIN_NAMESPACE_LABEL: &str = "kopy.kot-labs.com/origin.namespace";
/// The older spelling of [`KOPY_ORIGIN_NAMESPACE_LABEL`].
pub const KOPY_ORIGIN_NAMESPACE_LABEL_LEGACY: &str = "flynshue.io/origin.namespace";
/// The labels Kyverno puts on what a `generate` rule made: who manages it, and (for `clone`) the
/// source's kind, namespace and name.
pub const KYVERNO_MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kyverno");
/// Kyverno's label naming a clone's source kind.
pub const KYVERNO_SOURCE_KIND_LABEL: &str = "generate.kyverno.io/source-kind";
/// Kyverno's label naming a clone's source namespace.
pub const KYVERNO_SOURCE_NAMESPACE_LABEL: &str = "generate.kyverno.io/source-namespace";
/// Kyverno's label naming a clone's source name (absent on clones made by older Kyverno).
pub const KYVERNO_SOURCE_NAME_LABEL: &str = "generate.kyverno.io/source-name";

/// A tool whose fan-out copies conflux takes over from (adopts) when it fans the same source out:
/// the copies it left behind are recognised by the marks it puts on them, so switching to conflux
/// neither skips them as conflicts nor re-creates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Predecessor {
    /// kopy: a same-name object labelled `kopy.kot-labs.com/origin.namespace` (or
    /// `flynshue.io/origin.namespace`) with the source's namespace.
    Kopy,
    /// reflector: an auto mirror, `auto-reflects: "True"` and `reflects` naming the source.
    Reflector,
    /// replicator: a same-name object with `replicated-keys` (and no `replicate-from`) holding
    /// only keys replicator copied; replicator's copies do not name their source.
    Replicator,
    /// Kyverno: a same-name clone made by a `generate` rule, labelled managed by `kyverno` with the
    /// source's kind and namespace (and name, where Kyverno writes it). ConfigSyncs adopt them,
    /// so a ClusterPolicy imported with `conflux import kyverno` takes over its clones in place.
    Kyverno,
}

impl Predecessor {
    /// Whether `observed` (named like the copy) is this tool's copy of `source` that conflux may
    /// take over without losing anything.
    pub fn made(&self, observed: &ConfigObject, source: &SourceRef) -> bool {
        let meta = observed.metadata();
        match self {
            Predecessor::Kopy => meta.labels.as_ref().is_some_and(|labels| {
                [
                    KOPY_ORIGIN_NAMESPACE_LABEL,
                    KOPY_ORIGIN_NAMESPACE_LABEL_LEGACY,
                ]
                .iter()
                .any(|key| labels.get(*key) == Some(&source.namespace))
            }),
            Predecessor::Reflector => {
                reflector::is_auto_mirror_of(meta.annotations.as_ref(), source)
            }
            Predecessor::Replicator => replicator::is_push_copy(observed),
            Predecessor::Kyverno => meta.labels.as_ref().is_some_and(|labels| {
                let is = |key: &str, value: &str| labels.get(key).is_some_and(|v| v == value);
                is(KYVERNO_MANAGED_BY.0, KYVERNO_MANAGED_BY.1)
                    && is(KYVERNO_SOURCE_KIND_LABEL, source.kind.as_str())
                    && is(KYVERNO_SOURCE_NAMESPACE_LABEL, &source.namespace)
                    && labels
                        .get(KYVERNO_SOURCE_NAME_LABEL)
                        .is_none_or(|name| *name == source.name)
            }),
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
    /// Tools whose copies of this source are adopted whatever the conflict policy.
    pub predecessors: Vec<Predecessor>,
    /// The namespaces selected, before exclusions.
    selection: Selection,
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
        let globs = spec.target.namespaces.clone();
        // The selector ORed with the globs; with neither, every namespace.
        let selection = match (selector, globs.is_empty()) {
            (None, true) => Selection::All,
            (Some(selector), true) => Selection::Labels(selector),
            (None, false) => Selection::Globs(globs),
            (Some(selector), false) => {
                Selection::AnyOf(vec![Selection::Labels(selector), Selection::Globs(globs)])
            }
        };
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
            // Only Kyverno's clones: the other tools' copies are marked by annotations on the
            // source, which a ConfigSync does not use.
            predecessors: vec![Predecessor::Kyverno],
            selection,
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
    /// [`FanOut::from_annotations`] reads reflector's and replicator's annotations as well.
    pub fn from_kopy<'t>(
        source: &SourceRef,
        source_annotations: Option<&BTreeMap<String, String>>,
        trusted_namespaces: impl IntoIterator<Item = &'t str>,
    ) -> Result<Option<Self>> {
        let Some((annotation, selection)) = kopy_selection(source, source_annotations) else {
            return Ok(None);
        };
        trust(source, annotation, trusted_namespaces)?;
        let mut fan_out = FanOut::of_source(source, selection?);
        fan_out.predecessors = vec![Predecessor::Kopy];
        Ok(Some(fan_out))
    }

    /// The implicit fan-out of a source annotated for it by kopy, reflector or replicator: the
    /// union of what each annotation selects.
    ///
    /// - kopy: `kopy.kot-labs.com/sync` (or `flynshue.io/sync`), a label selector.
    /// - reflector: `reflection-auto-enabled: "true"` with `reflection-allowed: "true"`; the
    ///   namespaces both `reflection-allowed-namespaces` (or its `-selector`) and
    ///   `reflection-auto-namespaces` (or its `-selector`) select, each list every namespace when
    ///   unset or empty ([`reflector::auto`]).
    /// - replicator: `replicate-to` (regexes) ORed with `replicate-to-matching` (a label
    ///   selector); copies carry the source's labels unless `strip-labels: "true"`
    ///   ([`replicator::push`]).
    ///
    /// `Ok(None)` when the source asks for no fan-out. A source outside `trusted_namespaces`
    /// (`--sync-source-namespaces`) is refused with [`Error::UntrustedSyncSource`] whatever tool's
    /// annotation it carries: the source opting in is what these tools ask for, but the namespaces
    /// that receive the copies never did, so conflux only lets the namespaces an operator trusts
    /// push into others. Malformed values (a bad regex, selector or boolean) are errors, and nothing
    /// is planned from them: no copy is made or pruned because of a typo.
    ///
    /// Copies keep the source's name, are pruned when a namespace stops being selected, and kept
    /// (orphaned or released) when the source or its annotations go; the copies these tools left
    /// behind are adopted ([`Predecessor`]).
    pub fn from_annotations<'t>(
        source: &SourceRef,
        source_labels: Option<&BTreeMap<String, String>>,
        source_annotations: Option<&BTreeMap<String, String>>,
        trusted_namespaces: impl IntoIterator<Item = &'t str>,
    ) -> Result<Option<Self>> {
        let kopy = kopy_selection(source, source_annotations);
        let reflector = reflector::auto_enabled(source, source_annotations)?;
        let replicator = replicator::push_annotation(source_annotations);
        let first = kopy
            .as_ref()
            .map(|(annotation, _)| *annotation)
            .or(reflector.then_some(reflector::AUTO_ENABLED))
            .or(replicator);
        let Some(annotation) = first else {
            return Ok(None);
        };
        trust(source, annotation, trusted_namespaces)?;
        let mut parts = Vec::new();
        let mut predecessors = Vec::new();
        if let Some((_, selection)) = kopy {
            parts.push(selection?);
            predecessors.push(Predecessor::Kopy);
        }
        if let Some(selection) = reflector::auto(source, source_annotations)? {
            parts.push(selection);
            predecessors.push(Predecessor::Reflector);
        }
        let mut labels = BTreeMap::new();
        if let Some(selection) = replicator::push(source, source_annotations)? {
            parts.push(selection);
            predecessors.push(Predecessor::Replicator);
            labels = replicator::copied_labels(source_labels, source_annotations);
        }
        if parts.is_empty() {
            // reflector's auto-enabled without reflection-allowed: reflector makes no mirror.
            return Ok(None);
        }
        let mut fan_out = FanOut::of_source(source, Selection::any_of(parts));
        fan_out.labels = labels;
        fan_out.predecessors = predecessors;
        Ok(Some(fan_out))
    }

    /// The fan-out of a kopy source with an already parsed `selector`. With
    /// `Selector::nothing()` it selects no namespace, which is what the controller needs once the
    /// source or its annotation is gone: `plan_sync(.., None, ..)` then marks the copies orphaned,
    /// and [`plan_deletion`](crate::steps::plan_deletion) releases them.
    pub fn kopy(source: &SourceRef, selector: Selector) -> Self {
        FanOut::of_source(source, Selection::Labels(selector))
    }

    /// The implicit fan-out of an annotated source selecting `selection` (see
    /// [`FanOut::from_annotations`]); [`Selection::nothing`] for a source whose copies are only
    /// released or orphaned.
    pub fn of_source(source: &SourceRef, selection: Selection) -> Self {
        FanOut {
            source: source.clone(),
            owner: Owner::source(source),
            target_name: source.name.clone(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            prune: true,
            conflict_policy: ConflictPolicy::Skip,
            deletion_policy: DeletionPolicy::Orphan,
            predecessors: Vec::new(),
            selection,
            exclude_namespaces: Vec::new(),
        }
    }

    /// The namespaces selected, before exclusions.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Whether `ns` gets a copy.
    pub fn selects(&self, ns: NamespaceView<'_>) -> bool {
        if ns.terminating || self.is_source_itself(ns.name) || self.excludes(ns.name) {
            return false;
        }
        self.selection.matches(ns)
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

    /// Whether `observed`, a same-name object conflux does not own, is a copy of this source a
    /// [`Predecessor`] made (and so is adopted).
    pub fn inherits(&self, observed: &ConfigObject) -> bool {
        self.predecessors
            .iter()
            .any(|p| p.made(observed, &self.source))
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
            && !self.selection.names_literally(namespace)
    }
}

/// kopy's annotation and the selection it asks for (the selector parsed, or why not).
type KopySelection = Option<(&'static str, Result<Selection>)>;

fn kopy_selection(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> KopySelection {
    let found = annotations.and_then(|annotations| {
        [KOPY_SYNC_ANNOTATION, KOPY_SYNC_ANNOTATION_LEGACY]
            .into_iter()
            .find_map(|a| annotations.get(a).map(|v| (a, v)))
    });
    found.map(|(annotation, value)| {
        let selection =
            Selector::parse(value)
                .map(Selection::Labels)
                .map_err(|e| Error::InvalidSelector {
                    context: format!("{annotation} on {source}"),
                    message: e.to_string(),
                });
        (annotation, selection)
    })
}

/// Refuses a fan-out annotation outside the trusted namespaces.
fn trust<'t>(
    source: &SourceRef,
    annotation: &'static str,
    trusted_namespaces: impl IntoIterator<Item = &'t str>,
) -> Result<()> {
    if trusted_namespaces
        .into_iter()
        .any(|ns| ns == source.namespace)
    {
        return Ok(());
    }
    Err(Error::UntrustedSyncSource {
        source_ref: source.clone(),
        annotation,
    })
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
        use k8s_openapi::api::core::v1::Namespace;

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
    fn config_syncs_adopt_the_clones_kyverno_made_of_their_source_only() {
        let fan_out = FanOut::from_config_sync(
            "cs",
            &serde_json::from_value(serde_json::json!({
                "source": {"kind": "Secret", "namespace": "platform", "name": "blogsecret"}
            }))
            .unwrap(),
        )
        .unwrap();
        let clone = |labels: serde_json::Value| -> ConfigObject {
            ConfigObject::Secret(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "blogsecret", "namespace": "team-a", "labels": labels},
                }))
                .unwrap(),
            )
        };
        let kyverno = serde_json::json!({
            "app.kubernetes.io/managed-by": "kyverno",
            "generate.kyverno.io/source-kind": "Secret",
            "generate.kyverno.io/source-namespace": "platform",
            "generate.kyverno.io/source-name": "blogsecret",
        });
        assert!(fan_out.inherits(&clone(kyverno.clone())));
        let mut older = kyverno.clone();
        older
            .as_object_mut()
            .unwrap()
            .remove("generate.kyverno.io/source-name");
        assert!(
            fan_out.inherits(&clone(older)),
            "older Kyverno writes no source name"
        );
        for (key, value) in [
            ("app.kubernetes.io/managed-by", "helm"),
            ("generate.kyverno.io/source-kind", "ConfigMap"),
            ("generate.kyverno.io/source-namespace", "elsewhere"),
            ("generate.kyverno.io/source-name", "other"),
        ] {
            let mut other = kyverno.clone();
            other[key] = serde_json::json!(value);
            assert!(!fan_out.inherits(&clone(other)), "{key}={value}");
        }
        assert!(!fan_out.inherits(&clone(serde_json::json!({}))));
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

    /// One row per rule of [`FanOut::from_annotations`]: which namespaces a source annotated by
    /// reflector or replicator selects, and what is refused.
    #[test]
    fn annotated_sources_table() {
        use crate::{reflector as rf, replicator as rp};
        let source = SourceRef::new(crate::SourceKind::Secret, "platform", "wildcard-tls");
        let prod = labels(&[("env", "production")]);
        let none = labels(&[]);
        // (case, annotations, source namespace, namespace, its labels, Ok(selected) / Err(reason) / None)
        type Row<'a> = (
            &'a str,
            Vec<(&'a str, &'a str)>,
            &'a str,
            &'a str,
            &'a BTreeMap<String, String>,
            Option<std::result::Result<bool, &'a str>>,
        );
        let rows: Vec<Row<'_>> = vec![
            ("nothing", vec![], "platform", "a", &none, None),
            (
                "reflector auto, every namespace",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "true")],
                "platform",
                "a",
                &none,
                Some(Ok(true)),
            ),
            (
                "reflector auto without reflection-allowed: no mirrors",
                vec![(rf::AUTO_ENABLED, "true")],
                "platform",
                "a",
                &none,
                None,
            ),
            (
                "reflector auto disabled",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "false")],
                "platform",
                "a",
                &none,
                None,
            ),
            (
                "reflector auto, not in the allowed list",
                vec![
                    (rf::ALLOWED, "true"),
                    (rf::ALLOWED_NAMESPACES, "team-.*"),
                    (rf::AUTO_ENABLED, "true"),
                ],
                "platform",
                "prod",
                &none,
                Some(Ok(false)),
            ),
            (
                "reflector auto, allowed by label",
                vec![
                    (rf::ALLOWED, "true"),
                    (rf::ALLOWED_NAMESPACES, "team-.*"),
                    (rf::ALLOWED_NAMESPACES_SELECTOR, "env=production"),
                    (rf::AUTO_ENABLED, "true"),
                ],
                "platform",
                "prod",
                &prod,
                Some(Ok(true)),
            ),
            (
                "reflector auto never copies onto the source itself",
                vec![
                    (rf::ALLOWED, "true"),
                    (rf::ALLOWED_NAMESPACES, "platform,team-a"),
                    (rf::AUTO_ENABLED, "true"),
                ],
                "platform",
                "platform",
                &none,
                Some(Ok(false)),
            ),
            (
                "kube-system excluded unless named",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "true")],
                "platform",
                "kube-system",
                &none,
                Some(Ok(false)),
            ),
            (
                "kube-system named",
                vec![
                    (rf::ALLOWED, "true"),
                    (rf::AUTO_ENABLED, "true"),
                    (rf::AUTO_NAMESPACES, "kube-system"),
                ],
                "platform",
                "kube-system",
                &none,
                Some(Ok(true)),
            ),
            (
                "kube-* pattern does not lift the default",
                vec![(rp::REPLICATE_TO, "kube-.*")],
                "platform",
                "kube-public",
                &none,
                Some(Ok(false)),
            ),
            (
                "replicate-to",
                vec![(rp::REPLICATE_TO, "my-ns-1,namespace-[0-9]*")],
                "platform",
                "namespace-4",
                &none,
                Some(Ok(true)),
            ),
            (
                "replicate-to-matching",
                vec![(rp::REPLICATE_TO_MATCHING, "env=production")],
                "platform",
                "shop",
                &prod,
                Some(Ok(true)),
            ),
            (
                "replicate-to OR matching",
                vec![
                    (rp::REPLICATE_TO, "a"),
                    (rp::REPLICATE_TO_MATCHING, "env=production"),
                ],
                "platform",
                "b",
                &none,
                Some(Ok(false)),
            ),
            (
                "kopy OR replicator",
                vec![
                    ("kopy.kot-labs.com/sync", "env=production"),
                    (rp::REPLICATE_TO, "b"),
                ],
                "platform",
                "b",
                &none,
                Some(Ok(true)),
            ),
            (
                "untrusted reflector source",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "true")],
                "team-a",
                "b",
                &none,
                Some(Err("Refused")),
            ),
            (
                "untrusted replicator source",
                vec![(rp::REPLICATE_TO, ".*")],
                "team-a",
                "b",
                &none,
                Some(Err("Refused")),
            ),
            (
                "untrusted, auto disabled: nothing to refuse",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "false")],
                "team-a",
                "b",
                &none,
                None,
            ),
            (
                "bad regex",
                vec![(rp::REPLICATE_TO, "a,[")],
                "platform",
                "a",
                &none,
                Some(Err("InvalidPattern")),
            ),
            (
                "bad selector",
                vec![(rp::REPLICATE_TO_MATCHING, "env in (a")],
                "platform",
                "a",
                &none,
                Some(Err("InvalidSelector")),
            ),
            (
                "bad boolean",
                vec![(rf::ALLOWED, "true"), (rf::AUTO_ENABLED, "yes")],
                "platform",
                "a",
                &none,
                Some(Err("InvalidAnnotation")),
            ),
        ];
        for (case, annotations, source_ns, ns, ns_labels, want) in rows {
            let source = SourceRef {
                namespace: source_ns.to_owned(),
                ..source.clone()
            };
            let annotations = labels(&annotations);
            let got = FanOut::from_annotations(&source, None, Some(&annotations), ["platform"])
                .transpose()
                .map(|r| {
                    r.map(|f| f.selects(NamespaceView::new(ns).labels(ns_labels)))
                        .map_err(|e| e.reason())
                });
            assert_eq!(got, want, "{case}");
        }
        let refused = FanOut::from_annotations(
            &SourceRef {
                namespace: "team-a".to_owned(),
                ..source.clone()
            },
            None,
            Some(&labels(&[(rp::REPLICATE_TO, ".*")])),
            ["platform"],
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Secret/team-a/wildcard-tls carries replicator.v1.mittwald.de/replicate-to but its namespace is not a trusted sync source namespace (--sync-source-namespaces); the annotation is ignored"
        );
    }
}
