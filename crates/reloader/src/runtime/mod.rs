//! The reload controller, to embed (feature `runtime`): roll Deployments, StatefulSets,
//! DaemonSets, CronJobs, Jobs (re-created) and, with `--is-argo-rollouts`, Argo Rollouts whose
//! ConfigMaps/Secrets (and, with `--enable-csi-integration`, mounted SecretProviderClasses)
//! changed, once per change, without fighting Flux over fields (docs/design.md section 5). The
//! decisions are this crate's pure modules; this one observes, fetches, applies and reports.
//!
//! Observe → decide → act:
//! - Workloads are watched as full objects (the pod template says what they read) through
//!   conflux-runtime's shared informers and kept, when they opt in, in a [`ConsumerIndex`] and a
//!   cache of the objects themselves.
//! - ConfigMaps and Secrets come from the process's shared metadata-only watches
//!   ([`ConfigWatches`]): their annotations (`ignore`, `match`) and names are all the index needs.
//!   Data is read (GET) only when a workload is evaluated, only for the configs it watches, and
//!   dropped once hashed; it is never cached or logged.
//! - A config event schedules the workloads [`ConsumerIndex::lookup`] returns for evaluation after
//!   the coalescing window (`--reload-debounce`); each further event restarts the window (up to
//!   `--reload-debounce-max` after the first) and joins the same evaluation, so several configs
//!   changed together, or one flapping back and forth, roll once. A workload event (added, or
//!   changed in what the decision reads) is evaluated right away; a content change found that
//!   way (a config changed while the controller was down, or an evaluation racing a config
//!   write) waits one window as well before it rolls.
//! - Evaluation hashes what the workload reads and asks [`decide`]. Baselines (first sight,
//!   restarts, membership changes) and rollouts are one server-side apply each, field manager
//!   [`FIELD_MANAGER`], forced. Rollouts pass a cluster-wide token bucket; a throttled rollout is
//!   evaluated again when a token is free.
//! - A Job rolls by being re-created (`recreate`): deleted with a precondition on its uid, then
//!   created again from the copy kept until the create succeeds, and written down beforehand in
//!   the records namespace so that a restart finishes it. An Argo Rollout with
//!   `rollout-strategy: restart` rolls by one merge patch of `spec.restartAt` and its baseline.
//! - SecretProviderClasses (CSI integration): the `SecretProviderClassPodStatus` objects the CSI
//!   driver writes per pod say what each pod mounted; what a SecretProviderClass "contains" is
//!   the objects and versions of its most recently written status in the namespace (`providers`).
//!   A change there schedules the workloads that mount it, like a config event.
//! - Every rollout gets a `Reloaded` Event on the workload; failures get `ReloadFailed` (also for
//!   a rollout held because a required config is missing), a log line and a retry with backoff;
//!   the same failure is reported once until the workload rolls again. Annotation problems
//!   (`InvalidPattern`, `InvalidAnnotation`) are reported when the annotations change.
//!
//! Nothing here makes the process exit: discovery is retried with backoff, watches are the
//! shared informers' (which ride out faults), and a re-list's changes arrive as events.
//!
//! One concern per file: `config` (settings, durations), `metrics`, `discovery` (the workload
//! kinds served), `watches` (observe), `providers` (what pods mounted from SecretProviderClasses),
//! `scheduler` (the coalescing window and the token bucket), `worker` (decide and act),
//! `recreate` (Jobs); this file holds the shared state and the wiring ([`run`]).

mod config;
mod discovery;
mod metrics;
mod providers;
mod recreate;
mod scheduler;
mod watches;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conflux_runtime::ConfigWatches;
use conflux_runtime::backoff::Policy;
use conflux_runtime::client::object_id;
use conflux_runtime::configs::ConfigResource;
use conflux_runtime::events::{Problems, publish, recorder};
use conflux_runtime::{Change, Informer, Probe, Runtime};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::events::{EventType, Recorder};
use kube::{Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use watch_index::refs::{ConfigKind, ObjectRef};
use watch_index::runtime::sharded;
use watch_index::selector::Selector;

use crate::filters::NamespaceFilter;
use crate::hash::{ConfigData, ContentHash, content_hash_with_providers};
use crate::index::ConsumerIndex;
use crate::opt_in::{NamespaceConfigs, Options, Watch, watch_with_providers};
use crate::patch::{
    Action, CONFIG_HASH_ANNOTATION, ConfigChange, FIELD_MANAGER, WorkloadPatch, WorkloadState,
    decide,
};
use crate::settings::{Pause, RolloutStrategy, WorkloadSettings};
use crate::source::{ProviderObject, SourceKind};
use crate::{Error, Result, Rollout, Workload, WorkloadKind};
use conflux_runtime::sync::lock;
use providers::ProviderStore;
use recreate::Recreation;
use scheduler::{Pending, Schedule, TokenBucket};

pub use crate::settings::parse_duration;
pub use config::{DEFAULT_DEBOUNCE, ReloadConfig};
use discovery::*;
pub use metrics::{DecisionLabels, ReloadMetrics, RolloutLabels};
use recreate::*;
use watches::*;
use worker::*;

/// A workload object of one of the kinds, owned.
// Always kept behind an `Arc`, so the size of the largest variant costs nothing when moved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Owned {
    Deployment(Deployment),
    StatefulSet(StatefulSet),
    DaemonSet(DaemonSet),
    CronJob(CronJob),
    Job(Job),
    Rollout(Rollout),
}

impl Owned {
    fn workload(&self) -> Workload<'_> {
        match self {
            Owned::Deployment(w) => w.into(),
            Owned::StatefulSet(w) => w.into(),
            Owned::DaemonSet(w) => w.into(),
            Owned::CronJob(w) => w.into(),
            Owned::Job(w) => w.into(),
            Owned::Rollout(w) => w.into(),
        }
    }

    /// The typed object of a dynamic one. The type fields are dropped first: list items have
    /// none, and a `batch/v1beta1` CronJob (Kubernetes < 1.21) has the same shape as `batch/v1`.
    /// So are what no decision reads and what makes a kept workload large: `managedFields`
    /// (a server-side apply response carries them: 2,000 workloads kept from our own patches
    /// were most of the controller's memory), kubectl's last-applied copy, and the status.
    fn from_dynamic(kind: WorkloadKind, mut obj: DynamicObject) -> serde_json::Result<Self> {
        obj.types = None;
        obj.metadata.managed_fields = None;
        if let Some(annotations) = obj.metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED_ANNOTATION);
        }
        if let Some(fields) = obj.data.as_object_mut() {
            fields.remove("status");
        }
        let value = serde_json::to_value(obj)?;
        Ok(match kind {
            WorkloadKind::Deployment => Owned::Deployment(serde_json::from_value(value)?),
            WorkloadKind::StatefulSet => Owned::StatefulSet(serde_json::from_value(value)?),
            WorkloadKind::DaemonSet => Owned::DaemonSet(serde_json::from_value(value)?),
            WorkloadKind::CronJob => Owned::CronJob(serde_json::from_value(value)?),
            WorkloadKind::Job => Owned::Job(serde_json::from_value(value)?),
            WorkloadKind::Rollout => Owned::Rollout(serde_json::from_value(value)?),
        })
    }

    /// Whether everything [`decide`] reads of the two versions is equal: the pod template (what
    /// is consumed, our template annotation) and the workload's annotations (opt-in, baseline).
    /// An update that changes none of it (status, replicas, labels) needs no evaluation.
    fn same_for_decision(&self, other: &Owned) -> bool {
        let (a, b) = (self.workload(), other.workload());
        a.metadata().uid == b.metadata().uid
            && a.annotations() == b.annotations()
            && a.pod_template() == b.pod_template()
    }

    /// Whether this version is known to be older than `other` (etcd resourceVersions are
    /// integers; anything else is treated as not older).
    fn is_older_than(&self, other: &Owned) -> bool {
        let rv = |o: &Owned| {
            o.workload()
                .metadata()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        matches!((rv(self), rv(other)), (Some(a), Some(b)) if a < b)
    }
}

/// An Event target.
fn reference_to(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: Option<String>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}

/// A Deployment's `spec.paused` and its `paused-at` annotation.
fn pause_state(d: &Deployment) -> (bool, Option<&str>) {
    let paused_at = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::settings::PAUSED_AT))
        .map(String::as_str);
    (d.spec.paused.unwrap_or(false), paused_at)
}

/// kubectl's copy of the whole applied object, which no decision reads.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// (kind, namespace, name) of a ConfigMap/Secret.
type ConfigId = (ConfigKind, String, String);

/// The API resources the controller found served at start-up.
#[derive(Debug, Clone, Default)]
struct Served {
    /// Workload kinds.
    workloads: HashMap<WorkloadKind, ApiResource>,
    /// `SecretProviderClassPodStatus` and `SecretProviderClass` (CSI integration).
    providers: Option<(ApiResource, ApiResource)>,
}

#[derive(Debug, Default)]
struct State {
    index: ConsumerIndex,
    /// Opted-in workloads, as last seen (or as returned by our own patch).
    workloads: HashMap<ObjectRef, Arc<Owned>>,
    /// Workloads waiting for evaluation.
    pending: Schedule,
    /// Consecutive failures per workload, for the retry backoff.
    failures: HashMap<ObjectRef, u32>,
    /// Workloads held because required configs are missing (what was last reported).
    held: HashMap<ObjectRef, Vec<(ConfigKind, String)>>,
    /// Resolved API resources of the workload kinds served by this cluster.
    resources: HashMap<WorkloadKind, ApiResource>,
    /// Deployments paused by a `pause-period`, and when to resume them.
    resumes: HashMap<ObjectRef, Instant>,
    /// Jobs being re-created: the replacement, kept until it is created.
    recreations: HashMap<ObjectRef, Recreation>,
    /// What pods mounted from SecretProviderClasses, and the classes' annotations.
    providers: ProviderStore,
}

/// What the opt-in rules read of one namespace's configs for one workload, taken from the shared
/// metadata watches (the controller keeps no copy of them): the annotations of the configs the
/// workload names or consumes, and, when its `reload` lists hold a regex, every config's name.
struct NamespaceView {
    annotations: HashMap<(ConfigKind, String), BTreeMap<String, String>>,
    names: Vec<(ConfigKind, String)>,
    /// Configs that exist and fail `--resource-label-selector`.
    unselected: BTreeSet<(ConfigKind, String)>,
    /// SecretProviderClasses' annotations (CSI integration).
    provider_annotations: HashMap<String, BTreeMap<String, String>>,
    /// Every SecretProviderClass of the namespace, when a `reload` list holds a regex.
    provider_names: Vec<String>,
}

impl NamespaceView {
    fn of(
        configs: &ConfigWatches,
        providers: &ProviderStore,
        namespace: &str,
        entry: &crate::index::IndexedWorkload,
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
        for (kind, name) in wanted {
            let Some(stored) = configs.stored(kind, namespace, name) else {
                continue;
            };
            if let Some(a) = stored.annotations() {
                annotations.insert((kind, name.to_owned()), a);
            }
            if !selector.is_empty() && !selector.matches(&stored.labels().unwrap_or_default()) {
                unselected.insert((kind, name.to_owned()));
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

    fn provider_annotations(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.provider_annotations.get(name)
    }

    fn provider_names(&self) -> Vec<&str> {
        self.provider_names.iter().map(String::as_str).collect()
    }
}

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: ReloadConfig,
    metrics: Arc<ReloadMetrics>,
    recorder: Recorder,
    /// Failures of each workload, each reported once.
    problems: Problems,
    state: Mutex<State>,
    bucket: Mutex<TokenBucket>,
    wake: Notify,
    /// The shared Namespace watch, when `--namespace-selector` needs namespace labels.
    namespaces: Mutex<Option<Informer<PartialObjectMeta<Namespace>>>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one controller instance.
    pub fn new(client: Client, config: ReloadConfig, metrics: Arc<ReloadMetrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client, "conflux"),
            problems: Problems::default(),
            state: Mutex::new(State {
                index: ConsumerIndex::new(config.options),
                ..State::default()
            }),
            bucket: Mutex::new(TokenBucket::new(config.rate, config.burst)),
            wake: Notify::new(),
            namespaces: Mutex::new(None),
            client,
            config,
            metrics,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn update_gauges(&self, state: &State) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.metrics.pending.set(gauge(state.pending.len()));
        self.metrics.workloads.set(gauge(state.index.len()));
    }

    /// Whether workloads of `namespace` are served (`--namespace-selector`,
    /// `--namespaces-to-ignore`).
    fn serves(&self, namespace: &str) -> bool {
        let filter = &self.config.namespaces;
        if !filter.needs_labels() {
            return filter.allows(namespace, None);
        }
        let informer = lock(&self.namespaces).clone();
        let labels = informer
            .and_then(|i| {
                i.store()
                    .get(&kube::runtime::reflector::ObjectRef::new(namespace))
            })
            .and_then(|ns| ns.metadata.labels.clone());
        filter.allows(namespace, labels.as_ref())
    }

    /// The rollout settings of a cached workload.
    fn settings(workload: &Owned) -> WorkloadSettings {
        let w = workload.workload();
        WorkloadSettings::parse(w.kind(), w.annotations())
    }

    fn count(&self, action: &str) {
        self.metrics
            .decisions
            .get_or_create(&DecisionLabels {
                action: action.to_owned(),
            })
            .inc();
    }
}

/// Runs the reload controller until the process ends, on `runtime`'s shared watches: the configs
/// of `configs`, and one informer per workload kind served. Readiness (a `reload` part) turns
/// true once every list is in; nothing here exits on an API error.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("reload");
    let discovered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let discovered = discovered.clone();
        health.check("discovery", move || {
            if discovered.load(std::sync::atomic::Ordering::Acquire) {
                Probe::ok()
            } else {
                Probe::not_ready("API discovery of the workload kinds has not answered yet")
            }
        });
    }
    let mut backoff = Policy::STARTUP.backoff();
    let served = loop {
        conflux_runtime::client::wait_apiserver_ready(&ctx.client, "reload").await;
        match discover(&ctx.client, &ctx.config).await {
            Ok(found) => break found,
            Err(err) => {
                warn!(reason = err.reason(), error = %err, "reload: API discovery failed; retrying");
                backoff.wait().await;
            }
        }
    };
    discovered.store(true, std::sync::atomic::Ordering::Release);
    let resources: HashMap<WorkloadKind, ApiResource> = served
        .workloads
        .into_iter()
        .filter(|(kind, _)| {
            let ignored = ctx.config.ignored_kinds.contains(kind);
            if ignored {
                info!(kind = %kind, "reload: kind ignored (--ignored-workload-types), not watching");
            }
            !ignored
        })
        .collect();
    ctx.state().resources = resources.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let workers = Arc::new(tokio::sync::Semaphore::new(0));
    let mut expected = 2 + resources.len();
    if ctx.config.namespaces.needs_labels() {
        let informer = runtime.namespaces(&health);
        *lock(&ctx.namespaces) = Some(informer.clone());
        let sub = informer.subscribe("reload namespaces");
        tasks.spawn(watch_namespaces(ctx.clone(), sub, workers.clone()));
        expected += 1;
    }
    {
        let sub = configs
            .informer::<ConfigMap>()
            .subscribe("reload ConfigMap");
        tasks.spawn(watch_configs::<ConfigMap>(
            ctx.clone(),
            sub,
            workers.clone(),
        ));
        let sub = configs.informer::<Secret>().subscribe("reload Secret");
        tasks.spawn(watch_configs::<Secret>(ctx.clone(), sub, workers.clone()));
    }
    if let Some((statuses, classes)) = served.providers {
        let api = |ar: &ApiResource| -> Api<DynamicObject> {
            match &ctx.config.namespace {
                Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, ar),
                None => Api::all_with(ctx.client.clone(), ar),
            }
        };
        let config = kube::runtime::watcher::Config::default;
        let informer: Informer<DynamicObject> = runtime.informer_with(
            api(&statuses),
            config(),
            statuses.clone(),
            "SecretProviderClassPodStatus",
            &health,
        );
        let sub = informer.subscribe("reload");
        tasks.spawn(watch_provider_statuses(
            ctx.clone(),
            sub,
            statuses,
            workers.clone(),
        ));
        let informer: Informer<DynamicObject> = runtime.informer_with(
            api(&classes),
            config(),
            classes.clone(),
            "SecretProviderClass",
            &health,
        );
        let sub = informer.subscribe("reload");
        tasks.spawn(watch_provider_classes(ctx.clone(), sub, workers.clone()));
        expected += 2;
    }
    for (kind, ar) in resources {
        let api: Api<DynamicObject> = match &ctx.config.namespace {
            Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
            None => Api::all_with(ctx.client.clone(), &ar),
        };
        let informer: Informer<DynamicObject> = runtime.informer_with(
            api,
            sharded(&ctx.config.object_selector),
            ar.clone(),
            kind.as_str(),
            &health,
        );
        let sub = informer.subscribe("reload");
        tasks.spawn(watch_workloads(ctx.clone(), kind, sub, workers.clone()));
    }
    // Evaluations start once every initial list is in: the first decisions see complete caches
    // (a workload's configs, their `ignore`/`match` annotations).
    let expected = u32::try_from(expected).unwrap_or(u32::MAX);
    if let Ok(permit) = workers.acquire_many(expected).await {
        permit.forget();
        info!(workloads = ctx.state().index.len(), "reload: caches warm");
        tasks.spawn(recover(ctx.clone()));
        tasks.spawn(worker(ctx.clone(), configs.clone()));
    }
    while let Some(result) = tasks.join_next().await {
        if let Err(join) = result {
            warn!(error = %join, "reload: a task ended");
        }
    }
}
