//! The reload controller, to embed (feature `runtime`): roll Deployments, StatefulSets,
//! DaemonSets and CronJobs whose ConfigMaps/Secrets changed, once per change, without fighting
//! Flux over fields (docs/design.md section 5). The decisions are this crate's pure modules; this
//! one observes, fetches, applies and reports.
//!
//! Observe → decide → act:
//! - Workloads are watched as full objects (the pod template says what they read) through
//!   watch-index's shared informers and kept, when they opt in, in a [`ConsumerIndex`] and a
//!   cache of the objects themselves.
//! - ConfigMaps and Secrets come from the process's shared metadata-only watches
//!   ([`ConfigWatches`]): their annotations (`ignore`, `match`) and names are all the index needs.
//!   Data is read (GET) only when a workload is evaluated, only for the configs it watches, and
//!   dropped once hashed; it is never cached or logged.
//! - A config event schedules the workloads [`ConsumerIndex::lookup`] returns for evaluation after
//!   the coalescing window (`--reload-debounce`); further events within the window join the same
//!   evaluation, so several configs changed together roll once. A workload event (added, or
//!   changed in what the decision reads) is evaluated right away; a content change found that
//!   way (a config changed while the controller was down, or an evaluation racing a config
//!   write) waits one window as well before it rolls.
//! - Evaluation hashes what the workload reads and asks [`decide`]. Baselines (first sight,
//!   restarts, membership changes) and rollouts are one server-side apply each, field manager
//!   [`FIELD_MANAGER`], forced. Rollouts pass a cluster-wide token bucket; a throttled rollout is
//!   evaluated again when a token is free.
//! - Every rollout gets a `Reloaded` Event on the workload; failures get `ReloadFailed` (also for
//!   a rollout held because a required config is missing), a log line and a retry with backoff;
//!   the same failure is reported once until the workload rolls again. Annotation problems
//!   (`InvalidPattern`, `InvalidAnnotation`) are reported when the annotations change.
//!
//! Nothing here makes the process exit: discovery is retried with backoff, watches are the
//! shared informers' (which ride out faults), and a re-list's changes arrive as events.

mod scheduler;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conflux_runtime::backoff::Policy;
use conflux_runtime::client::object_id;
use conflux_runtime::events::{Problems, publish, recorder};
use conflux_runtime::{Change, Informer, Probe, Runtime};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
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
use watch_index::runtime::configs::ConfigResource;
use watch_index::runtime::{ConfigWatches, sharded};
use watch_index::selector::Selector;

use crate::consumers::Consumption;
use crate::hash::{ConfigData, ContentHash, content_hash};
use crate::index::ConsumerIndex;
use crate::opt_in::{NamespaceConfigs, Options, watched_configs};
use crate::patch::{
    Action, CONFIG_HASH_ANNOTATION, FIELD_MANAGER, WorkloadPatch, WorkloadState, decide,
};
use crate::{Error, Result, Workload, WorkloadKind};
use conflux_runtime::sync::lock;
use scheduler::{Pending, Schedule, TokenBucket};

/// Labels of a rollout written by the reload controller.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// Workload kind (`Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`).
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels of a reload decision.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `none`, `baseline`, `rollout`, `held` (a required config is missing), `throttled` or
    /// `deferred` (a change found through a workload event waits one coalescing window).
    pub action: String,
}

/// Metrics of the reload controller.
#[derive(Debug, Default)]
pub struct ReloadMetrics {
    /// `reload_rollouts_total`.
    pub rollouts: Family<RolloutLabels, Counter>,
    /// `reload_decisions_total`.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `reload_pending`.
    pub pending: Gauge,
    /// `reload_workloads`.
    pub workloads: Gauge,
}

impl ReloadMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reload_rollouts",
            "Rollouts written by the reload controller (pod-template hash changed)",
            self.rollouts.clone(),
        );
        registry.register(
            "reload_decisions",
            "Reload evaluations by outcome (none, baseline, rollout, held, throttled, deferred)",
            self.decisions.clone(),
        );
        registry.register(
            "reload_pending",
            "Workloads waiting for evaluation (coalescing window, throttle or retry)",
            self.pending.clone(),
        );
        registry.register(
            "reload_workloads",
            "Opted-in workloads in the reload controller's index",
            self.workloads.clone(),
        );
    }
}

/// Default of `--reload-debounce`.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(2);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// `--watch-label-selector`: which workloads are handled (sharding).
    pub object_selector: Selector,
    /// `--reload-debounce`: how long a config event waits for others before its workloads are
    /// evaluated.
    pub debounce: Duration,
    /// `--reload-rate`: rollouts per second, cluster-wide.
    pub rate: f64,
    /// `--reload-burst`: rollouts allowed at once before the rate applies.
    pub burst: u32,
    /// `--concurrent`: config reads and patches in flight.
    pub concurrent: usize,
    /// Reloader's global options (`--auto-reload-all`).
    pub options: Options,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            namespace: None,
            object_selector: Selector::everything(),
            debounce: DEFAULT_DEBOUNCE,
            rate: 5.0,
            burst: 10,
            concurrent: 4,
            options: Options::default(),
        }
    }
}

/// Parses a Go-style duration as Flux flags take them: `0`, `300ms`, `2s`, `1.5s`, `1m`, `1m30s`.
pub fn parse_duration(input: &str) -> Result<Duration> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || Error::InvalidDuration {
        input: input.to_owned(),
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_len);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// A workload object of one of the four kinds, owned.
// Always kept behind an `Arc`, so the size of the largest variant costs nothing when moved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Owned {
    Deployment(Deployment),
    StatefulSet(StatefulSet),
    DaemonSet(DaemonSet),
    CronJob(CronJob),
}

impl Owned {
    fn workload(&self) -> Workload<'_> {
        match self {
            Owned::Deployment(w) => w.into(),
            Owned::StatefulSet(w) => w.into(),
            Owned::DaemonSet(w) => w.into(),
            Owned::CronJob(w) => w.into(),
        }
    }

    /// The typed object of a dynamic one. The type fields are dropped first: list items have
    /// none, and a `batch/v1beta1` CronJob (Kubernetes < 1.21) has the same shape as `batch/v1`.
    fn from_dynamic(kind: WorkloadKind, mut obj: DynamicObject) -> serde_json::Result<Self> {
        obj.types = None;
        let value = serde_json::to_value(obj)?;
        Ok(match kind {
            WorkloadKind::Deployment => Owned::Deployment(serde_json::from_value(value)?),
            WorkloadKind::StatefulSet => Owned::StatefulSet(serde_json::from_value(value)?),
            WorkloadKind::DaemonSet => Owned::DaemonSet(serde_json::from_value(value)?),
            WorkloadKind::CronJob => Owned::CronJob(serde_json::from_value(value)?),
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

/// (kind, namespace, name) of a ConfigMap/Secret.
type ConfigId = (ConfigKind, String, String);

/// What is remembered of a ConfigMap/Secret from its metadata-only watch. Never its data.
#[derive(Debug, Clone)]
struct ConfigMeta {
    resource_version: String,
    annotations: Option<BTreeMap<String, String>>,
}

/// The controller's caches. Critical sections are short and never await.
#[derive(Debug, Default)]
struct State {
    index: ConsumerIndex,
    /// Opted-in workloads, as last seen (or as returned by our own patch).
    workloads: HashMap<ObjectRef, Arc<Owned>>,
    /// Metadata of every ConfigMap/Secret, by namespace then (kind, name), so a namespace's
    /// configs can be listed for `reload` regexes.
    configs: BTreeMap<String, BTreeMap<(ConfigKind, String), ConfigMeta>>,
    /// Workloads waiting for evaluation.
    pending: Schedule,
    /// Consecutive failures per workload, for the retry backoff.
    failures: HashMap<ObjectRef, u32>,
    /// Workloads held because required configs are missing (what was last reported).
    held: HashMap<ObjectRef, Vec<(ConfigKind, String)>>,
    /// Resolved API resources of the workload kinds served by this cluster.
    resources: HashMap<WorkloadKind, ApiResource>,
}

/// One namespace of the metadata cache, as the opt-in rules read it.
struct NamespaceView<'a>(Option<&'a BTreeMap<(ConfigKind, String), ConfigMeta>>);

impl NamespaceConfigs for NamespaceView<'_> {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        self.0?.get(&(kind, name.to_owned()))?.annotations.as_ref()
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        self.0
            .into_iter()
            .flat_map(|m| m.keys().map(|(k, n)| (*k, n.as_str())))
            .collect()
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
    let resources = loop {
        conflux_runtime::client::wait_apiserver_ready(&ctx.client, "reload").await;
        match discover(&ctx.client).await {
            Ok(found) => break found,
            Err(err) => {
                warn!(reason = err.reason(), error = %err, "reload: API discovery failed; retrying");
                backoff.wait().await;
            }
        }
    };
    discovered.store(true, std::sync::atomic::Ordering::Release);
    ctx.state().resources = resources.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let workers = Arc::new(tokio::sync::Semaphore::new(0));
    let expected = 2 + resources.len();
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
        tasks.spawn(worker(ctx.clone()));
    }
    while let Some(result) = tasks.join_next().await {
        if let Err(join) = result {
            warn!(error = %join, "reload: a task ended");
        }
    }
}

/// The workload kinds this API server serves, with the version to use (CronJob is `batch/v1`
/// from Kubernetes 1.21, `batch/v1beta1` before).
async fn discover(client: &Client) -> Result<HashMap<WorkloadKind, ApiResource>> {
    let discovery = Discovery::new(client.clone())
        .filter(&["apps", "batch"])
        .run()
        .await
        .map_err(conflux_runtime::Error::api(
            "API discovery of the workload kinds",
        ))?;
    let mut found = HashMap::new();
    for kind in WorkloadKind::ALL {
        // The preferred version of the group, else the most stable one serving the kind
        // (`batch/v1` has no CronJob before Kubernetes 1.21).
        let resolved = discovery
            .get(kind.group())
            .and_then(|g| {
                g.recommended_kind(kind.as_str()).or_else(|| {
                    g.versions().find_map(|v| {
                        g.versioned_resources(v)
                            .into_iter()
                            .find(|(ar, _)| ar.kind == kind.as_str())
                    })
                })
            })
            .filter(|(_, caps)| caps.scope == Scope::Namespaced);
        match resolved {
            Some((ar, _)) => {
                info!(kind = %kind, version = %ar.version, "reload: watching");
                found.insert(kind, ar);
            }
            None => info!(kind = %kind, "reload: kind not served by this cluster, not watching"),
        }
    }
    // Every cluster serves apps/v1 Deployments: without them, discovery answered too early.
    if !found.contains_key(&WorkloadKind::Deployment) {
        return Err(Error::KindNotServed {
            kind: WorkloadKind::Deployment,
        });
    }
    Ok(found)
}

/// Keeps the index and the workload cache in step with one workload kind.
async fn watch_workloads(
    ctx: Arc<Context>,
    kind: WorkloadKind,
    mut sub: conflux_runtime::Subscription<DynamicObject>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    while let Some(change) = sub.recv().await {
        match change {
            Change::Initial(obj) | Change::Applied(obj) => {
                on_workload(&ctx, kind, (*obj).clone()).await;
            }
            Change::Deleted(obj) => {
                let object = ObjectRef::new(
                    kind.group(),
                    kind.as_str(),
                    obj.namespace().unwrap_or_default(),
                    obj.name_any(),
                );
                forget_workload(&ctx, &object);
            }
            Change::InitDone => listed.add_permits(1),
            _ => {}
        }
    }
}

/// A workload was added or changed: index it and, when what the decision reads changed,
/// evaluate it now. Returns its reference.
async fn on_workload(ctx: &Context, kind: WorkloadKind, obj: DynamicObject) -> Option<ObjectRef> {
    let name = obj.name_any();
    let owned = match Owned::from_dynamic(kind, obj) {
        Ok(owned) => Arc::new(owned),
        Err(err) => {
            warn!(%kind, %name, error = %err, "reload: cannot read workload");
            return None;
        }
    };
    let object = owned.workload().object_ref()?;
    let problems: Vec<(&'static str, String)> = {
        let mut state = ctx.state();
        // Our own patch's response may already be cached; a watch event from before it must not
        // bring back the state it replaced (that would roll a second time).
        if state
            .workloads
            .get(&object)
            .is_some_and(|cached| owned.is_older_than(cached))
        {
            return Some(object);
        }
        let unchanged = state
            .workloads
            .get(&object)
            .is_some_and(|old| old.same_for_decision(&owned));
        if unchanged {
            state.workloads.insert(object.clone(), owned);
            return Some(object);
        }
        let indexed = state.index.apply(owned.workload());
        let problems = if indexed {
            let problems = state
                .index
                .get(&object)
                .map(|e| {
                    e.opt_in
                        .problems()
                        .iter()
                        .map(|p| (p.reason(), p.to_string()))
                        .collect()
                })
                .unwrap_or_default();
            state.workloads.insert(object.clone(), owned.clone());
            state.pending.schedule(object.clone(), Instant::now(), None);
            problems
        } else {
            state.workloads.remove(&object);
            state.pending.remove(&object);
            // Not opted in; perhaps because an annotation meant to opt in is malformed.
            crate::opt_in::OptIn::of(owned.workload())
                .problems()
                .iter()
                .map(|p| (p.reason(), p.to_string()))
                .collect()
        };
        ctx.update_gauges(&state);
        problems
    };
    ctx.wake.notify_one();
    // Looked at when the annotations change, reported once per distinct problem.
    let key = format!("{object} annotations");
    match problems.first() {
        Some((reason, _)) => {
            let notes: Vec<&str> = problems.iter().map(|(_, note)| note.as_str()).collect();
            let note = format!("reload annotations: {}", notes.join("; "));
            let reference = reference(ctx, &object, &owned);
            ctx.problems
                .report(
                    &ctx.recorder,
                    &reference,
                    &key,
                    reason,
                    &note,
                    "Reload",
                    "reload: annotation problems",
                )
                .await;
        }
        None => {
            ctx.problems.resolve(&key);
        }
    }
    Some(object)
}

fn forget_workload(ctx: &Context, object: &ObjectRef) {
    let mut state = ctx.state();
    state.index.delete(object);
    state.workloads.remove(object);
    state.pending.remove(object);
    state.failures.remove(object);
    state.held.remove(object);
    ctx.update_gauges(&state);
}

/// Follows one of ConfigMaps/Secrets (the shared metadata watch) and schedules the workloads
/// that read them. The initial state is the baseline: workloads are evaluated on their own first
/// sight. Later changes (re-lists included) schedule evaluations.
async fn watch_configs<K: ConfigResource>(
    ctx: Arc<Context>,
    mut sub: conflux_runtime::Subscription<PartialObjectMeta<K>>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    let kind = K::KIND;
    while let Some(change) = sub.recv().await {
        match change {
            Change::Initial(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                on_config(&ctx, kind, ns, name, Some(meta.metadata.clone()), false);
            }
            Change::InitDone => listed.add_permits(1),
            Change::Applied(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                on_config(&ctx, kind, ns, name, Some(meta.metadata.clone()), true);
            }
            Change::Deleted(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                on_config(&ctx, kind, ns, name, None, true);
            }
            _ => {}
        }
    }
}

/// A config was created or updated (`meta` given) or deleted (`None`): update the metadata
/// cache and, when `notify` and something changed, schedule its workloads after the window.
fn on_config(
    ctx: &Context,
    kind: ConfigKind,
    namespace: String,
    name: String,
    meta: Option<kube::api::ObjectMeta>,
    notify: bool,
) {
    let mut state = ctx.state();
    let key = (kind, name.clone());
    let previous = match meta {
        Some(meta) => {
            let entry = ConfigMeta {
                resource_version: meta.resource_version.unwrap_or_default(),
                annotations: meta.annotations,
            };
            let configs = state.configs.entry(namespace.clone()).or_default();
            let previous = configs.insert(key.clone(), entry.clone());
            if previous
                .as_ref()
                .is_some_and(|p| p.resource_version == entry.resource_version)
            {
                return;
            }
            Some(entry)
        }
        None => {
            let configs = state.configs.get_mut(&namespace);
            let previous = configs.and_then(|c| c.remove(&key));
            if state
                .configs
                .get(&namespace)
                .is_some_and(BTreeMap::is_empty)
            {
                state.configs.remove(&namespace);
            }
            if previous.is_none() {
                return;
            }
            previous
        }
    };
    if !notify {
        return;
    }
    let annotations = previous.and_then(|p| p.annotations);
    let hits: Vec<ObjectRef> = state
        .index
        .lookup(kind, &namespace, &name, annotations.as_ref())
        .into_iter()
        .map(|hit| hit.workload.clone())
        .collect();
    if hits.is_empty() {
        return;
    }
    debug!(%kind, %namespace, %name, workloads = hits.len(), "reload: config changed");
    let due = Instant::now() + ctx.config.debounce;
    for object in hits {
        state
            .pending
            .schedule(object, due, Some((kind, name.clone())));
    }
    ctx.update_gauges(&state);
    drop(state);
    ctx.wake.notify_one();
}

/// Evaluates due workloads, forever.
async fn worker(ctx: Arc<Context>) {
    loop {
        let now = Instant::now();
        let (due, next) = {
            let mut state = ctx.state();
            let taken = state.pending.take_due(now);
            ctx.update_gauges(&state);
            taken
        };
        if due.is_empty() {
            let sleep = next.unwrap_or_else(|| now + Duration::from_secs(3600));
            tokio::select! {
                () = ctx.wake.notified() => {}
                () = tokio::time::sleep_until(sleep) => {}
            }
            continue;
        }
        evaluate(&ctx, due).await;
    }
}

/// One workload ready to be hashed: its object and what it watches.
struct Plan {
    object: ObjectRef,
    workload: Arc<Owned>,
    watched: Vec<Consumption>,
    causes: BTreeSet<(ConfigKind, String)>,
    window_passed: bool,
}

/// A fetched config, kept only while its batch is hashed.
enum Fetched {
    ConfigMap(ConfigMap),
    Secret(Secret),
}

impl Fetched {
    fn data(&self) -> ConfigData<'_> {
        match self {
            Fetched::ConfigMap(cm) => ConfigData::from_config_map(cm),
            Fetched::Secret(s) => ConfigData::from_secret(s),
        }
    }
}

/// Hashes and decides a batch of due workloads; configs read by several are fetched once.
async fn evaluate(ctx: &Arc<Context>, due: Vec<(ObjectRef, Pending)>) {
    let plans: Vec<Plan> = {
        let state = ctx.state();
        due.into_iter()
            .filter_map(|(object, pending)| {
                let entry = state.index.get(&object)?;
                let workload = state.workloads.get(&object)?.clone();
                let configs = NamespaceView(state.configs.get(object.namespace.as_ref()));
                let watched = watched_configs(
                    &entry.consumers,
                    &entry.opt_in,
                    ctx.config.options,
                    &configs,
                );
                Some(Plan {
                    object,
                    workload,
                    watched,
                    causes: pending.causes,
                    window_passed: pending.window_passed,
                })
            })
            .collect()
    };
    let wanted: BTreeSet<ConfigId> = plans
        .iter()
        .flat_map(|p| {
            p.watched
                .iter()
                .map(|c| (c.kind, p.object.namespace.to_string(), c.name.clone()))
        })
        .collect();
    let fetched: HashMap<ConfigId, Result<Option<Fetched>>> = futures::stream::iter(wanted)
        .map(|id| async move {
            let result = fetch(&ctx.client, &id).await;
            (id, result)
        })
        .buffer_unordered(ctx.config.concurrent.max(1))
        .collect()
        .await;
    futures::stream::iter(plans)
        .for_each_concurrent(ctx.config.concurrent.max(1), |plan| {
            let fetched = &fetched;
            async move { decide_and_act(ctx, plan, fetched).await }
        })
        .await;
    // `fetched` (the only copy of any config data) is dropped here.
}

/// Reads one config; `None` when it does not exist. Errors carry no data.
async fn fetch(client: &Client, id: &ConfigId) -> Result<Option<Fetched>> {
    let (kind, ns, name) = id;
    let action = format!("reading {kind} {ns}/{name}");
    Ok(match kind {
        ConfigKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(Fetched::ConfigMap)
        }
        ConfigKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), ns);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(Fetched::Secret)
        }
    })
}

async fn decide_and_act(
    ctx: &Context,
    plan: Plan,
    fetched: &HashMap<ConfigId, Result<Option<Fetched>>>,
) {
    let ns = plan.object.namespace.to_string();
    let errors: Vec<&Error> = plan
        .watched
        .iter()
        .filter_map(
            |c| match fetched.get(&(c.kind, ns.clone(), c.name.clone())) {
                Some(Err(err)) => Some(err),
                _ => None,
            },
        )
        .collect();
    if let Some(err) = errors.first() {
        let err = (*err).clone();
        fail(ctx, &plan, err).await;
        return;
    }
    let hash = content_hash(&plan.watched, |kind, name| {
        match fetched.get(&(kind, ns.clone(), name.to_owned())) {
            Some(Ok(Some(f))) => Some(f.data()),
            _ => None,
        }
    });
    let Some(state) = WorkloadState::of(plan.workload.workload()) else {
        return;
    };
    let action = decide(&state, &hash);
    match action {
        Action::None => {
            ctx.count(if hash.missing_required.is_empty() {
                "none"
            } else {
                "held"
            });
            report_held(ctx, &plan, &hash).await;
            ctx.state().failures.remove(&plan.object);
        }
        Action::RecordBaseline(patch) => {
            ctx.count("baseline");
            match apply(ctx, &plan, patch).await {
                Ok(()) => {
                    debug!(workload = %plan.object, "reload: baseline recorded");
                    ctx.state().failures.remove(&plan.object);
                }
                Err(err) => fail(ctx, &plan, err).await,
            }
        }
        Action::Rollout(_) if !plan.window_passed && !ctx.config.debounce.is_zero() => {
            // Found through a workload event: the config change behind it gets its window too,
            // so changes made together still roll once.
            ctx.count("deferred");
            let mut state = ctx.state();
            let due = Instant::now() + ctx.config.debounce;
            state
                .pending
                .reschedule(plan.object.clone(), due, &plan.causes);
            ctx.update_gauges(&state);
            drop(state);
            ctx.wake.notify_one();
        }
        Action::Rollout(patch) => {
            let throttled = lock(&ctx.bucket).try_take(Instant::now());
            if let Err(wait) = throttled {
                ctx.count("throttled");
                debug!(workload = %plan.object, wait_seconds = wait.as_secs_f64(), "reload: rollout throttled");
                let mut state = ctx.state();
                state
                    .pending
                    .reschedule(plan.object.clone(), Instant::now() + wait, &plan.causes);
                ctx.update_gauges(&state);
                drop(state);
                ctx.wake.notify_one();
                return;
            }
            ctx.count("rollout");
            let result = apply(ctx, &plan, patch).await;
            ctx.metrics
                .rollouts
                .get_or_create(&RolloutLabels {
                    kind: plan.object.kind.to_string(),
                    result: if result.is_ok() { "success" } else { "error" }.to_owned(),
                })
                .inc();
            match result {
                Ok(()) => {
                    ctx.state().failures.remove(&plan.object);
                    ctx.problems.resolve(&plan.object.to_string());
                    let short = &hash.hex[..hash.hex.len().min(12)];
                    let why = if plan.causes.is_empty() {
                        "watched configuration changed".to_owned()
                    } else {
                        let names: Vec<String> = plan
                            .causes
                            .iter()
                            .map(|(k, n)| format!("{k} {n}"))
                            .collect();
                        format!("{} changed", names.join(", "))
                    };
                    info!(workload = %plan.object, %why, hash = %short, "reload: rolled out");
                    let reference = reference(ctx, &plan.object, &plan.workload);
                    publish(
                        &ctx.recorder,
                        &reference,
                        EventType::Normal,
                        "Reloaded",
                        format!("{why}; rolling out ({CONFIG_HASH_ANNOTATION}={short})"),
                        "Reload",
                    )
                    .await;
                }
                Err(err) => fail(ctx, &plan, err).await,
            }
        }
    }
}

/// Warns once per missing set when a required config holds a rollout.
async fn report_held(ctx: &Context, plan: &Plan, hash: &ContentHash) {
    let changed = {
        let mut state = ctx.state();
        if hash.missing_required.is_empty() {
            state.held.remove(&plan.object);
            false
        } else if state.held.get(&plan.object) == Some(&hash.missing_required) {
            false
        } else {
            state
                .held
                .insert(plan.object.clone(), hash.missing_required.clone());
            true
        }
    };
    if !changed {
        return;
    }
    let names: Vec<String> = hash
        .missing_required
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let note = format!(
        "rollout held: required {} missing; new pods could not start",
        names.join(", ")
    );
    warn!(workload = %plan.object, %note, "reload: rollout held");
    let reference = reference(ctx, &plan.object, &plan.workload);
    publish(
        &ctx.recorder,
        &reference,
        EventType::Warning,
        "ReloadFailed",
        note,
        "Reload",
    )
    .await;
}

/// Logs, records an Event and schedules a retry with backoff.
async fn fail(ctx: &Context, plan: &Plan, err: Error) {
    let delay = {
        let mut state = ctx.state();
        let n = state.failures.entry(plan.object.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let delay = Policy::ROLLOUT.delay(*n);
        state
            .pending
            .reschedule(plan.object.clone(), Instant::now() + delay, &plan.causes);
        ctx.update_gauges(&state);
        delay
    };
    ctx.wake.notify_one();
    debug!(workload = %plan.object, reason = err.reason(), retry_in_seconds = delay.as_secs_f64(), "reload: retrying with backoff");
    let reference = reference(ctx, &plan.object, &plan.workload);
    ctx.problems
        .report(
            &ctx.recorder,
            &reference,
            &plan.object.to_string(),
            "ReloadFailed",
            &format!("{err}; retrying with backoff"),
            "Reload",
            "reload: failed, will retry",
        )
        .await;
}

/// Server-side applies `patch` (field manager [`FIELD_MANAGER`], forced) and keeps the returned
/// object, so a second evaluation before the watch catches up sees our write.
async fn apply(ctx: &Context, plan: &Plan, patch: WorkloadPatch) -> Result<()> {
    let kind = plan.workload.workload().kind();
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    // The served version (a `batch/v1beta1` CronJob on Kubernetes < 1.21).
    let patch = patch.body_for(&ar.api_version);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.object.namespace, &ar);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&plan.object.name, &params, &Patch::Apply(&patch))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "applying {kind} {}",
            plan.object
        )))?;
    if let Ok(owned) = Owned::from_dynamic(kind, written) {
        let mut state = ctx.state();
        let newer = state
            .workloads
            .get(&plan.object)
            .is_some_and(|cached| !owned.is_older_than(cached));
        if newer {
            state.workloads.insert(plan.object.clone(), Arc::new(owned));
        }
    }
    Ok(())
}

/// The Event target for a workload.
fn reference(ctx: &Context, object: &ObjectRef, workload: &Owned) -> ObjectReference {
    let w = workload.workload();
    let api_version = ctx
        .state()
        .resources
        .get(&w.kind())
        .map(|ar| ar.api_version.clone())
        .unwrap_or_else(|| w.kind().api_version().to_owned());
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(object.kind.to_string()),
        namespace: Some(object.namespace.to_string()),
        name: Some(object.name.to_string()),
        uid: w.metadata().uid.clone(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        for (input, want) in [
            ("0", Duration::ZERO),
            ("2s", Duration::from_secs(2)),
            ("300ms", Duration::from_millis(300)),
            ("1.5s", Duration::from_millis(1500)),
            ("1m30s", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
        for bad in ["", "2", "s", "2x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
