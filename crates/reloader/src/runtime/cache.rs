//! What the controller keeps between events: the opted-in workloads (the informer's copy, without
//! what no decision reads), the consumer index, the memory, the Job re-creations under way and
//! what pods mounted from SecretProviderClasses; and the view of one namespace's configs an
//! evaluation takes from the shared metadata watches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use conflux_runtime::ConfigWatches;
use conflux_watch_index::refs::{ConfigKind, ObjectRef};
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{ApiResource, DynamicObject};

use super::providers::ProviderStore;
use crate::index::{ConsumerIndex, IndexedWorkload};
use crate::memory::{Entry, shard_of};
use crate::opt_in::{NamespaceConfigs, Options};
use crate::policy::Policies;
use crate::settings::WorkloadSettings;
use crate::{Rollout, Workload, WorkloadKind};

/// kubectl's copy of the whole applied object, which no decision reads.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of a container that a decision or a patch reads: which configs it consumes and
/// the env-vars strategy's variables.
const CONTAINER_FIELDS: [&str; 4] = ["name", "env", "envFrom", "volumeMounts"];
/// The fields of a pod spec that a decision reads (the consumers; ephemeral containers are not).
const POD_SPEC_FIELDS: [&str; 3] = ["containers", "initContainers", "volumes"];
/// Fields of a Deployment's, StatefulSet's or DaemonSet's spec that no decision reads and that
/// can be large (a StatefulSet's claim templates, a rollout strategy).
const UNREAD_SPEC_FIELDS: [&str; 10] = [
    "replicas",
    "strategy",
    "updateStrategy",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
    "minReadySeconds",
    "volumeClaimTemplates",
    "persistentVolumeClaimRetentionPolicy",
    "podManagementPolicy",
    "ordinals",
];
/// The fields of an Argo Rollout's spec that conflux reads ([`Rollout`]).
const ROLLOUT_SPEC_FIELDS: [&str; 3] = ["template", "workloadRef", "restartAt"];

/// Drops from a watched workload what no decision reads and what makes it large: the status,
/// `managedFields` (a server-side apply response carries them) and kubectl's last-applied copy.
pub(super) fn trim(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(annotations) = obj.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    if let Some(fields) = obj.data.as_object_mut() {
        fields.remove("status");
    }
}

/// [`trim`], and for the kinds that roll in place (not Jobs, which are re-created whole, nor
/// CronJobs, whose Jobs are made from their template) also the parts of the spec and pod
/// template that no decision or patch reads: images, probes, resources, scheduling. What is
/// kept is what [`crate::consumers`], [`crate::patch`] and the settings read. The informer keeps
/// the objects this way, so every copy of a workload is the small one.
pub(super) fn trim_kind(kind: WorkloadKind) -> impl Fn(&mut DynamicObject) + Send + Sync + 'static {
    move |obj: &mut DynamicObject| {
        trim(obj);
        let keep_spec: Option<&[&str]> = match kind {
            WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::DaemonSet => None,
            WorkloadKind::Rollout => Some(&ROLLOUT_SPEC_FIELDS),
            _ => return,
        };
        let Some(spec) = obj.data.get_mut("spec").and_then(|s| s.as_object_mut()) else {
            return;
        };
        match keep_spec {
            Some(keep) => spec.retain(|k, _| keep.contains(&k.as_str())),
            None => spec.retain(|k, _| !UNREAD_SPEC_FIELDS.contains(&k.as_str())),
        }
        let Some(pod) = spec
            .get_mut("template")
            .and_then(|t| t.get_mut("spec"))
            .and_then(|s| s.as_object_mut())
        else {
            return;
        };
        pod.retain(|k, _| POD_SPEC_FIELDS.contains(&k.as_str()));
        for list in ["containers", "initContainers"] {
            let containers = pod.get_mut(list).and_then(|c| c.as_array_mut());
            for container in containers.into_iter().flatten() {
                if let Some(fields) = container.as_object_mut() {
                    fields.retain(|k, _| CONTAINER_FIELDS.contains(&k.as_str()));
                }
            }
        }
    }
}

/// A workload object of one of the kinds, owned.
// Always kept behind an `Arc`, so the size of the largest variant costs nothing when moved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(super) enum Owned {
    Deployment(Deployment),
    StatefulSet(StatefulSet),
    DaemonSet(DaemonSet),
    CronJob(CronJob),
    Job(Job),
    Rollout(Rollout),
}

impl Owned {
    pub(super) fn workload(&self) -> Workload<'_> {
        match self {
            Owned::Deployment(w) => w.into(),
            Owned::StatefulSet(w) => w.into(),
            Owned::DaemonSet(w) => w.into(),
            Owned::CronJob(w) => w.into(),
            Owned::Job(w) => w.into(),
            Owned::Rollout(w) => w.into(),
        }
    }

    /// The typed object of a dynamic one, trimmed ([`trim_kind`]).
    #[cfg(test)]
    pub(super) fn from_dynamic(
        kind: WorkloadKind,
        mut obj: DynamicObject,
    ) -> serde_json::Result<Self> {
        trim_kind(kind)(&mut obj);
        Self::from_json(kind, &untyped_json(&obj)?)
    }

    /// The typed object of its JSON without type fields (list items have none, and a
    /// `batch/v1beta1` CronJob, Kubernetes < 1.21, has the same shape as `batch/v1`).
    fn from_json(kind: WorkloadKind, json: &str) -> serde_json::Result<Self> {
        Ok(match kind {
            WorkloadKind::Deployment => Owned::Deployment(serde_json::from_str(json)?),
            WorkloadKind::StatefulSet => Owned::StatefulSet(serde_json::from_str(json)?),
            WorkloadKind::DaemonSet => Owned::DaemonSet(serde_json::from_str(json)?),
            WorkloadKind::CronJob => Owned::CronJob(serde_json::from_str(json)?),
            WorkloadKind::Job => Owned::Job(serde_json::from_str(json)?),
            WorkloadKind::Rollout => Owned::Rollout(serde_json::from_str(json)?),
        })
    }

    /// Its rollout settings (`conflux.dev/reload-debounce`, Reloader's pause-period and
    /// rollout-strategy).
    pub(super) fn settings(&self) -> WorkloadSettings {
        let w = self.workload();
        WorkloadSettings::parse(w.kind(), w.annotations())
    }
}

/// `obj` as JSON without its type fields.
fn untyped_json(obj: &DynamicObject) -> serde_json::Result<String> {
    #[derive(serde::Serialize)]
    struct Untyped<'a> {
        metadata: &'a kube::api::ObjectMeta,
        #[serde(flatten)]
        data: &'a serde_json::Value,
    }
    serde_json::to_string(&Untyped {
        metadata: &obj.metadata,
        data: &obj.data,
    })
}

/// An opted-in workload as the cache keeps it: its JSON (trimmed by [`trim_kind`]) and the few
/// fields every event compares, about a tenth of the memory of the object as a tree. Decisions
/// type it on demand ([`Cached::typed`]): a typed copy lives only while one evaluation or write
/// uses it.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    kind: WorkloadKind,
    packed: Arc<Packed>,
}

#[derive(Debug)]
struct Packed {
    /// The object without its type fields.
    json: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<u64>,
    /// SHA-256 of what [`decide`](crate::patch::decide) reads: the uid, the annotations and the
    /// pod template.
    decision: [u8; 32],
}

impl Cached {
    /// `object` of `kind`, as the informer (or our own write's response, trimmed) gave it, and
    /// its typed form (read once here, so `typed` can rely on it); an error if it does not read
    /// as its kind.
    pub(super) fn new(
        kind: WorkloadKind,
        object: &DynamicObject,
    ) -> serde_json::Result<(Self, Owned)> {
        use sha2::{Digest, Sha256};
        let json = untyped_json(object)?;
        let owned = Owned::from_json(kind, &json)?;
        let spec = object.data.get("spec");
        let template = match kind {
            WorkloadKind::CronJob => spec
                .and_then(|s| s.get("jobTemplate"))
                .and_then(|j| j.get("spec"))
                .and_then(|s| s.get("template")),
            _ => spec.and_then(|s| s.get("template")),
        };
        let meta = &object.metadata;
        let decision = serde_json::to_vec(&(&meta.uid, &meta.annotations, template))?;
        let cached = Cached {
            kind,
            packed: Arc::new(Packed {
                json: json.into(),
                uid: meta.uid.as_deref().map(Box::from),
                resource_version: meta
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok()),
                decision: Sha256::digest(decision).into(),
            }),
        };
        Ok((cached, owned))
    }

    /// The typed object (`None` only if it no longer reads as its kind, which [`Cached::new`]
    /// already checked).
    pub(super) fn typed(&self) -> Option<Owned> {
        Owned::from_json(self.kind, &self.packed.json).ok()
    }

    /// Its kind.
    pub(super) fn kind(&self) -> WorkloadKind {
        self.kind
    }

    /// Whether everything [`decide`](crate::patch::decide) reads of the two versions is equal:
    /// the pod template (what is consumed, our template annotation) and the workload's
    /// annotations (opt-in, settings). An update that changes none of it (status, replicas,
    /// labels) needs no evaluation.
    pub(super) fn same_for_decision(&self, other: &Cached) -> bool {
        self.packed.decision == other.packed.decision
    }

    /// Whether this version is known to be older than `other` (etcd resourceVersions are
    /// integers; anything else is treated as not older).
    pub(super) fn is_older_than(&self, other: &Cached) -> bool {
        matches!(
            (self.packed.resource_version, other.packed.resource_version),
            (Some(a), Some(b)) if a < b
        )
    }

    /// Its uid.
    pub(super) fn uid(&self) -> Option<&str> {
        self.packed.uid.as_deref()
    }

    /// Its rollout settings (see [`Owned::settings`]).
    pub(super) fn settings(&self) -> WorkloadSettings {
        #[derive(serde::Deserialize)]
        struct Meta {
            metadata: kube::api::ObjectMeta,
        }
        let annotations = serde_json::from_str::<Meta>(&self.packed.json)
            .ok()
            .and_then(|m| m.metadata.annotations);
        WorkloadSettings::parse(self.kind, annotations.as_ref())
    }
}

/// What the controller keeps.
#[derive(Debug)]
pub(super) struct State {
    pub(super) index: ConsumerIndex,
    /// Opted-in workloads, as last seen (or as returned by our own patch).
    pub(super) workloads: HashMap<ObjectRef, Cached>,
    /// What is remembered of each workload (its baseline), and which shards changed.
    pub(super) memory: Memory,
    /// Workloads held because required configs are missing (what was last reported).
    pub(super) held: HashMap<ObjectRef, Vec<(ConfigKind, String)>>,
    /// Resolved API resources of the workload kinds served by this cluster.
    pub(super) resources: HashMap<WorkloadKind, ApiResource>,
    /// Jobs being re-created: the replacement, kept until it is created.
    pub(super) recreations: HashMap<ObjectRef, Recreation>,
    /// What pods mounted from SecretProviderClasses, and the classes' annotations.
    pub(super) providers: ProviderStore,
    /// The valid ReloadPolicies.
    pub(super) policies: Policies,
}

impl State {
    pub(super) fn new(options: Options) -> Self {
        State {
            index: ConsumerIndex::new(options),
            workloads: HashMap::new(),
            memory: Memory::default(),
            held: HashMap::new(),
            resources: HashMap::new(),
            recreations: HashMap::new(),
            providers: ProviderStore::default(),
            policies: Policies::default(),
        }
    }
}

/// What the opt-in rules read of one namespace's configs for one workload, taken from the shared
/// metadata watches (the controller keeps no copy of them): the annotations of the configs the
/// workload names or consumes, and, when its `reload` lists hold a regex, every config's name.
pub(super) struct NamespaceView {
    annotations: HashMap<(ConfigKind, String), BTreeMap<String, String>>,
    names: Vec<(ConfigKind, String)>,
    /// Configs that exist and fail `--resource-label-selector`.
    unselected: BTreeSet<(ConfigKind, String)>,
    /// The labels of the configs, for workloads ReloadPolicies opt in (their `configs.selector`).
    labels: HashMap<(ConfigKind, String), BTreeMap<String, String>>,
    /// SecretProviderClasses' annotations (CSI integration).
    provider_annotations: HashMap<String, BTreeMap<String, String>>,
    /// Every SecretProviderClass of the namespace, when a `reload` list holds a regex.
    provider_names: Vec<String>,
}

impl NamespaceView {
    pub(super) fn of(
        configs: &ConfigWatches,
        providers: &ProviderStore,
        namespace: &str,
        entry: &IndexedWorkload,
        selector: &Selector,
    ) -> Self {
        let names: Vec<(ConfigKind, String)> = if entry.opt_in.has_regex_patterns() {
            configs
                .names(namespace)
                .into_iter()
                .map(|(kind, name)| (kind.into(), name))
                .collect()
        } else {
            Vec::new()
        };
        let mut wanted: BTreeSet<(ConfigKind, &str)> = entry
            .consumers
            .iter()
            .map(|c| (c.kind, c.name.as_str()))
            .collect();
        for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
            wanted.extend(
                entry
                    .opt_in
                    .named_patterns(kind)
                    .iter()
                    .filter_map(|p| p.as_literal())
                    .map(|name| (kind, name)),
            );
        }
        wanted.extend(names.iter().map(|(k, n)| (*k, n.as_str())));
        let mut annotations = HashMap::new();
        let mut unselected = BTreeSet::new();
        let mut config_labels = HashMap::new();
        let granted = !entry.opt_in.grant().is_empty();
        for (kind, name) in wanted {
            let Some(stored) = configs.stored(kind, namespace, name) else {
                continue;
            };
            if let Some(a) = stored.annotations() {
                annotations.insert((kind, name.to_owned()), a);
            }
            let labels = stored.labels();
            if !selector.is_empty() && !selector.matches(&labels.as_ref()) {
                unselected.insert((kind, name.to_owned()));
            }
            if granted && let Some(labels) = labels {
                config_labels.insert((kind, name.to_owned()), labels);
            }
        }
        let mut provider_names = Vec::new();
        let mut provider_annotations = HashMap::new();
        if !providers.is_empty() {
            if entry.opt_in.has_regex_patterns() {
                provider_names = providers.class_names(namespace);
            }
            let named = entry
                .opt_in
                .named_provider_patterns()
                .iter()
                .filter_map(|p| p.as_literal());
            let wanted = entry
                .providers
                .iter()
                .map(String::as_str)
                .chain(named)
                .chain(provider_names.iter().map(String::as_str));
            for name in wanted {
                if let Some(a) = providers.class_annotations(namespace, name) {
                    provider_annotations.insert(name.to_owned(), a.clone());
                }
            }
        }
        NamespaceView {
            annotations,
            names,
            unselected,
            labels: config_labels,
            provider_annotations,
            provider_names,
        }
    }
}

impl NamespaceConfigs for NamespaceView {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        self.annotations.get(&(kind, name.to_owned()))
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        self.names.iter().map(|(k, n)| (*k, n.as_str())).collect()
    }

    fn selected(&self, kind: ConfigKind, name: &str) -> bool {
        !self.unselected.contains(&(kind, name.to_owned()))
    }

    fn labels(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        self.labels.get(&(kind, name.to_owned()))
    }

    fn provider_annotations(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.provider_annotations.get(name)
    }

    fn provider_names(&self) -> Vec<&str> {
        self.provider_names.iter().map(String::as_str).collect()
    }
}

/// What is remembered, and which shards changed since they were written.
#[derive(Debug, Default)]
pub(super) struct Memory {
    pub(super) entries: HashMap<ObjectRef, Entry>,
    pub(super) dirty: BTreeSet<u32>,
}

impl Memory {
    /// What is remembered of `object`, if it is the workload with `uid`.
    pub(super) fn get(&self, object: &ObjectRef, uid: Option<&str>) -> Option<&Entry> {
        self.entries
            .get(object)
            .filter(|e| uid.is_some_and(|uid| uid == e.uid))
    }

    /// Remembers `entry` for `object`; whether that changed anything.
    pub(super) fn set(&mut self, object: &ObjectRef, entry: Entry) -> bool {
        if self.entries.get(object) == Some(&entry) {
            return false;
        }
        self.dirty.insert(shard_of(object));
        self.entries.insert(object.clone(), entry);
        true
    }

    /// As [`Memory::set`], except that when only the versions its digests stand for changed
    /// (a metadata-only write of a config), the shard is not marked: its next write carries
    /// them, and a restart before it reads those configs again (the same answer, one page
    /// dearer). Whether the shard needs a write.
    pub(super) fn refresh(&mut self, object: &ObjectRef, entry: Entry) -> bool {
        match self.entries.get_mut(object) {
            Some(known) if known.uid == entry.uid && known.baseline == entry.baseline => {
                known.versions = entry.versions;
                false
            }
            _ => self.set(object, entry),
        }
    }

    /// Forgets `object`; whether it was remembered.
    pub(super) fn remove(&mut self, object: &ObjectRef) -> bool {
        let removed = self.entries.remove(object).is_some();
        if removed {
            self.dirty.insert(shard_of(object));
        }
        removed
    }

    /// How many workloads are remembered.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A Job being re-created.
#[derive(Debug, Clone)]
pub(super) struct Recreation {
    /// The uid of the Job being replaced.
    pub(super) old_uid: String,
    /// The Job to create.
    pub(super) replacement: Job,
    /// What the rollout answers (for its Event).
    pub(super) why: String,
    /// Whether conflux has sent the delete (from then on, a missing Job is ours to create).
    pub(super) delete_sent: bool,
    /// Whether the [`Record`] is written (or no records namespace is configured).
    pub(super) recorded: bool,
    /// Whether the re-creation is over and only its record remains to be deleted.
    pub(super) finished: bool,
    /// Failed or waiting attempts so far.
    pub(super) attempts: u32,
}
