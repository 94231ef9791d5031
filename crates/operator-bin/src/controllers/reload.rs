//! The `reload` controller: roll Deployments, StatefulSets, DaemonSets and CronJobs whose
//! ConfigMaps/Secrets changed, once per change, without fighting Flux over fields (DESIGN.md
//! section 5). The decisions are the `reloader` crate's; this module observes, fetches, applies
//! and reports.
//!
//! Observe → decide → act:
//! - Workloads are watched as full objects (the pod template is what says what they read) and
//!   kept, when they opt in, in a [`ConsumerIndex`] and a cache of the objects themselves.
//! - ConfigMaps and Secrets are watched metadata-only: their annotations (`ignore`, `match`) and
//!   names are all the index needs. Data is read (GET) only when a workload is evaluated, only for
//!   the configs it watches, and dropped once hashed; it is never cached or logged.
//! - A config event schedules the workloads [`ConsumerIndex::lookup`] returns for evaluation after
//!   the coalescing window (`--reload-debounce`); further events within the window join the same
//!   evaluation, so several configs changed together roll once. A workload event (added, or
//!   changed in what the decision reads) is evaluated right away; a content change found that
//!   way (a config changed while conflux was down, or an evaluation racing a config write) waits
//!   one window as well before it rolls.
//! - Evaluation hashes what the workload reads and asks [`decide`]. Baselines (first sight,
//!   restarts, membership changes) and rollouts are one server-side apply each, field manager
//!   [`FIELD_MANAGER`], forced. Rollouts pass a cluster-wide token bucket (`--reload-rate`,
//!   `--reload-burst`); a throttled rollout is evaluated again when a token is free.
//! - Every rollout gets a `Reloaded` Event on the workload; failures get `ReloadFailed` (also for
//!   a rollout held because a required config is missing), a log line and a retry with backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use reloader::consumers::Consumption;
use reloader::hash::{ConfigData, ContentHash, content_hash};
use reloader::index::ConsumerIndex;
use reloader::opt_in::{Options, watched_configs};
use reloader::patch::{Action, CONFIG_HASH_ANNOTATION, FIELD_MANAGER, WorkloadState, decide};
use reloader::{Workload, WorkloadKind};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};
use watch_index::refs::{ConfigKind, ObjectRef};
use watch_index::selector::Selector;

use crate::controllers::common::{
    ConfigResource, WatchEvents, metadata_api, object_id, publish, recorder, sharded,
};
use crate::metrics::{DecisionLabels, Health, Metrics, RolloutLabels};

/// Default of `--reload-debounce`.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(2);
/// First retry delay after a failed evaluation or patch; doubles up to [`MAX_BACKOFF`].
const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// Longest retry delay.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

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
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || format!("invalid duration '{input}': expected e.g. 0, 300ms, 2s, 1m30s");
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

/// Why a workload is waiting for evaluation, and when it is due.
#[derive(Debug, Clone)]
struct Pending {
    due: Instant,
    /// The configs whose events scheduled it (for the Event note; names only).
    causes: BTreeSet<(ConfigKind, String)>,
    /// Whether a rollout may happen at evaluation: the change was first noticed at least one
    /// coalescing window before `due`. A workload event (added, updated) alone is evaluated at
    /// once, and a content change found then waits one window, like a config event.
    window_passed: bool,
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
    pending: HashMap<ObjectRef, Pending>,
    /// Consecutive failures per workload, for the retry backoff.
    failures: HashMap<ObjectRef, u32>,
    /// Workloads held because required configs are missing (what was last reported).
    held: HashMap<ObjectRef, Vec<(ConfigKind, String)>>,
    /// Resolved API resources of the workload kinds served by this cluster.
    resources: HashMap<WorkloadKind, ApiResource>,
}

impl State {
    fn config_annotations(
        &self,
        kind: ConfigKind,
        namespace: &str,
        name: &str,
    ) -> Option<&BTreeMap<String, String>> {
        self.configs
            .get(namespace)?
            .get(&(kind, name.to_owned()))?
            .annotations
            .as_ref()
    }

    /// Schedules `object` for evaluation at `due`. The first config event decides the time, so a
    /// stream of events cannot postpone a rollout forever; a config event joining an entry that
    /// only a workload event made (due now) still gets its coalescing window.
    fn schedule(&mut self, object: ObjectRef, due: Instant, cause: Option<(ConfigKind, String)>) {
        match self.pending.entry(object) {
            std::collections::hash_map::Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                if cause.is_some() && !pending.window_passed {
                    pending.due = pending.due.max(due);
                    pending.window_passed = true;
                }
                pending.causes.extend(cause);
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Pending {
                    due,
                    window_passed: cause.is_some(),
                    causes: cause.into_iter().collect(),
                });
            }
        }
    }

    /// Schedules `object` again at `due` after an evaluation (deferred, throttled or failed),
    /// keeping the causes; its coalescing window has passed by then. An entry made meanwhile by
    /// a new event keeps its time.
    fn reschedule(
        &mut self,
        object: ObjectRef,
        due: Instant,
        causes: &BTreeSet<(ConfigKind, String)>,
    ) {
        let entry = self.pending.entry(object).or_insert_with(|| Pending {
            due,
            causes: BTreeSet::new(),
            window_passed: true,
        });
        entry.window_passed = true;
        entry.causes.extend(causes.iter().cloned());
    }
}

/// A cluster-wide token bucket for rollouts.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: if rate > 0.0 { rate } else { f64::INFINITY },
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token, or says how long until one is free.
    fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.rate;
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(1)))
        }
    }
}

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: ReloadConfig,
    metrics: Arc<Metrics>,
    recorder: Recorder,
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
    pub fn new(client: Client, config: ReloadConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client),
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update_gauges(&self, state: &State) {
        self.metrics.reload_pending.set(state.pending.len() as i64);
        self.metrics.reload_workloads.set(state.index.len() as i64);
    }

    fn count(&self, action: &str) {
        self.metrics
            .reload_decisions
            .get_or_create(&DecisionLabels {
                action: action.to_owned(),
            })
            .inc();
    }
}

/// Runs the controller until it fails; it only returns on errors it cannot retry.
pub async fn run(ctx: Arc<Context>, health: Arc<Health>) -> anyhow::Result<()> {
    let resources = discover(&ctx.client).await?;
    let kinds: Vec<WorkloadKind> = resources.keys().copied().collect();
    ctx.state().resources = resources.clone();
    let (ready_tx, mut ready_rx) = watch::channel(0usize);
    let ready_tx = Arc::new(ready_tx);
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (c, r) = (ctx.clone(), ready_tx.clone());
        tasks.spawn(async move { watch_configs::<ConfigMap>(c, ConfigKind::ConfigMap, r).await });
        let (c, r) = (ctx.clone(), ready_tx.clone());
        tasks.spawn(async move { watch_configs::<Secret>(c, ConfigKind::Secret, r).await });
    }
    for (kind, ar) in resources {
        let (c, r) = (ctx.clone(), ready_tx.clone());
        tasks.spawn(async move { watch_workloads(c, kind, ar, r).await });
    }
    let expected = 2 + kinds.len();
    {
        let ctx = ctx.clone();
        tasks.spawn(async move {
            // Evaluations start once every initial list is in: the first decisions see complete
            // caches (a workload's configs, their `ignore`/`match` annotations).
            while *ready_rx.borrow() < expected {
                if ready_rx.changed().await.is_err() {
                    anyhow::bail!("reload: watchers stopped before their initial lists");
                }
            }
            info!(workloads = ctx.state().index.len(), "reload: caches warm");
            health.set_ready(true);
            worker(ctx).await
        });
    }
    match tasks.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(join)) => Err(anyhow::anyhow!("reload task panicked: {join}")),
        None => Ok(()),
    }
}

/// The workload kinds this API server serves, with the version to use (CronJob is `batch/v1`
/// from Kubernetes 1.21, `batch/v1beta1` before).
async fn discover(client: &Client) -> anyhow::Result<HashMap<WorkloadKind, ApiResource>> {
    let discovery = Discovery::new(client.clone())
        .filter(&["apps", "batch"])
        .run()
        .await
        .context("API discovery failed")?;
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
    Ok(found)
}

/// Keeps the index and the workload cache in step with one workload kind.
async fn watch_workloads(
    ctx: Arc<Context>,
    kind: WorkloadKind,
    ar: ApiResource,
    ready: Arc<watch::Sender<usize>>,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match &ctx.config.namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        None => Api::all_with(ctx.client.clone(), &ar),
    };
    let stream = watcher(api, sharded(&ctx.config.object_selector));
    let mut listed: Option<HashSet<ObjectRef>> = None;
    let mut seen: HashSet<ObjectRef> = HashSet::new();
    let mut announced = false;
    let mut events = WatchEvents::new(stream, "reload", kind.as_str());
    loop {
        let event = events.next(&ctx.metrics).await?;
        match event {
            watcher::Event::Init => listed = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                if let Some(object) = on_workload(&ctx, kind, obj).await {
                    if let Some(l) = listed.as_mut() {
                        l.insert(object.clone());
                    }
                    seen.insert(object);
                }
            }
            watcher::Event::InitDone => {
                if let Some(l) = listed.take() {
                    let gone: Vec<ObjectRef> = seen.difference(&l).cloned().collect();
                    for object in gone {
                        forget_workload(&ctx, &object);
                        seen.remove(&object);
                    }
                }
                if !announced {
                    announced = true;
                    ready.send_modify(|n| *n += 1);
                }
            }
            watcher::Event::Apply(obj) => {
                if let Some(object) = on_workload(&ctx, kind, obj).await {
                    seen.insert(object);
                }
            }
            watcher::Event::Delete(obj) => {
                let object = ObjectRef::new(
                    kind.group(),
                    kind.as_str(),
                    obj.namespace().unwrap_or_default(),
                    obj.name_any(),
                );
                forget_workload(&ctx, &object);
                seen.remove(&object);
            }
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
    let problems: Vec<String> = {
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
                        .map(ToString::to_string)
                        .collect()
                })
                .unwrap_or_default();
            state.workloads.insert(object.clone(), owned.clone());
            state.schedule(object.clone(), Instant::now(), None);
            problems
        } else {
            state.workloads.remove(&object);
            state.pending.remove(&object);
            Vec::new()
        };
        ctx.update_gauges(&state);
        problems
    };
    ctx.wake.notify_one();
    if !problems.is_empty() {
        let note = format!("reload annotations: {}", problems.join("; "));
        warn!(workload = %object, %note, "reload: annotation problems");
        let reference = reference(ctx, &object, &owned);
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

/// Watches one of ConfigMaps/Secrets, metadata only, and schedules the workloads that read them.
async fn watch_configs<K: ConfigResource>(
    ctx: Arc<Context>,
    kind: ConfigKind,
    ready: Arc<watch::Sender<usize>>,
) -> anyhow::Result<()> {
    let api = metadata_api::<K>(&ctx.client, ctx.config.namespace.as_deref());
    let stream = watcher(api, watcher::Config::default());
    let mut listed: Option<HashSet<(String, String)>> = None;
    let mut baseline_done = false;
    let mut events = WatchEvents::new(stream, "reload", kind.as_str());
    loop {
        let event = events.next(&ctx.metrics).await?;
        match event {
            watcher::Event::Init => listed = Some(HashSet::new()),
            watcher::Event::InitApply(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                if let Some(l) = listed.as_mut() {
                    l.insert((ns.clone(), name.clone()));
                }
                // The first list is the baseline: workloads are evaluated on their own first
                // sight. A re-list after a watch gap reports what changed meanwhile.
                on_config(&ctx, kind, ns, name, Some(meta.metadata), baseline_done);
            }
            watcher::Event::InitDone => {
                if let Some(l) = listed.take()
                    && baseline_done
                {
                    let gone: Vec<(String, String)> = {
                        let state = ctx.state();
                        state
                            .configs
                            .iter()
                            .flat_map(|(ns, m)| {
                                m.keys()
                                    .filter(|(k, _)| *k == kind)
                                    .map(move |(_, n)| (ns.clone(), n.clone()))
                            })
                            .filter(|id| !l.contains(id))
                            .collect()
                    };
                    for (ns, name) in gone {
                        on_config(&ctx, kind, ns, name, None, true);
                    }
                }
                if !baseline_done {
                    baseline_done = true;
                    ready.send_modify(|n| *n += 1);
                }
            }
            watcher::Event::Apply(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                on_config(&ctx, kind, ns, name, Some(meta.metadata), true);
            }
            watcher::Event::Delete(meta) => {
                let (ns, name) = object_id(&meta.metadata);
                on_config(&ctx, kind, ns, name, None, true);
            }
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
        state.schedule(object, due, Some((kind, name.clone())));
    }
    ctx.update_gauges(&state);
    drop(state);
    ctx.wake.notify_one();
}

/// Evaluates due workloads, forever.
async fn worker(ctx: Arc<Context>) -> anyhow::Result<()> {
    loop {
        let now = Instant::now();
        let (due, next) = {
            let mut state = ctx.state();
            let due: Vec<(ObjectRef, Pending)> = state
                .pending
                .iter()
                .filter(|(_, p)| p.due <= now)
                .map(|(o, p)| (o.clone(), p.clone()))
                .collect();
            for (object, _) in &due {
                state.pending.remove(object);
            }
            let next = state.pending.values().map(|p| p.due).min();
            ctx.update_gauges(&state);
            (due, next)
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
                let ns = object.namespace.as_ref();
                let candidates: Vec<(ConfigKind, &str)> = if entry.opt_in.has_regex_patterns() {
                    state
                        .configs
                        .get(ns)
                        .into_iter()
                        .flat_map(|m| m.keys().map(|(k, n)| (*k, n.as_str())))
                        .collect()
                } else {
                    Vec::new()
                };
                let watched = watched_configs(
                    &entry.consumers,
                    &entry.opt_in,
                    ctx.config.options,
                    |k, n| state.config_annotations(k, ns, n),
                    candidates,
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
    let fetched: HashMap<ConfigId, Result<Option<Fetched>, String>> = futures::stream::iter(wanted)
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
async fn fetch(client: &Client, id: &ConfigId) -> Result<Option<Fetched>, String> {
    let (kind, ns, name) = id;
    let result = match kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .map(|o| o.map(Fetched::ConfigMap)),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .map(|o| o.map(Fetched::Secret)),
    };
    result.map_err(|err| format!("cannot read {kind} {ns}/{name}: {err}"))
}

async fn decide_and_act(
    ctx: &Context,
    plan: Plan,
    fetched: &HashMap<ConfigId, Result<Option<Fetched>, String>>,
) {
    let ns = plan.object.namespace.to_string();
    let errors: Vec<&String> = plan
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
            state.reschedule(plan.object.clone(), due, &plan.causes);
            ctx.update_gauges(&state);
            drop(state);
            ctx.wake.notify_one();
        }
        Action::Rollout(patch) => {
            let throttled = ctx
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_take(Instant::now());
            if let Err(wait) = throttled {
                ctx.count("throttled");
                debug!(workload = %plan.object, ?wait, "reload: rollout throttled");
                let mut state = ctx.state();
                state.reschedule(plan.object.clone(), Instant::now() + wait, &plan.causes);
                ctx.update_gauges(&state);
                drop(state);
                ctx.wake.notify_one();
                return;
            }
            ctx.count("rollout");
            let result = apply(ctx, &plan, patch).await;
            ctx.metrics
                .reload_rollouts
                .get_or_create(&RolloutLabels {
                    kind: plan.object.kind.to_string(),
                    result: if result.is_ok() { "success" } else { "error" }.to_owned(),
                })
                .inc();
            match result {
                Ok(()) => {
                    ctx.state().failures.remove(&plan.object);
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
async fn fail(ctx: &Context, plan: &Plan, err: String) {
    let delay = {
        let mut state = ctx.state();
        let n = state.failures.entry(plan.object.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let delay = BASE_BACKOFF
            .saturating_mul(1u32 << (*n - 1).min(16))
            .min(MAX_BACKOFF);
        state.reschedule(plan.object.clone(), Instant::now() + delay, &plan.causes);
        ctx.update_gauges(&state);
        delay
    };
    ctx.wake.notify_one();
    warn!(workload = %plan.object, error = %err, retry_in = ?delay, "reload: failed, will retry");
    let reference = reference(ctx, &plan.object, &plan.workload);
    publish(
        &ctx.recorder,
        &reference,
        EventType::Warning,
        "ReloadFailed",
        format!("{err}; retrying in {delay:?}"),
        "Reload",
    )
    .await;
}

/// Server-side applies `patch` (field manager [`FIELD_MANAGER`], forced) and keeps the returned
/// object, so a second evaluation before the watch catches up sees our write.
async fn apply(ctx: &Context, plan: &Plan, mut patch: serde_json::Value) -> Result<(), String> {
    let kind = plan.workload.workload().kind();
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(format!("{kind} is not served by this cluster"));
    };
    // The served version (a `batch/v1beta1` CronJob on Kubernetes < 1.21).
    patch["apiVersion"] = serde_json::Value::String(ar.api_version.clone());
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.object.namespace, &ar);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&plan.object.name, &params, &Patch::Apply(&patch))
        .await
        .map_err(|err| format!("cannot apply {kind} {}: {err}", plan.object))?;
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

    #[test]
    fn token_bucket_allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.try_take(start), Ok(()));
        }
        let wait = bucket.try_take(start).unwrap_err();
        assert!(wait <= Duration::from_millis(500) && wait > Duration::ZERO);
        assert_eq!(bucket.try_take(start + Duration::from_millis(500)), Ok(()));
        assert!(bucket.try_take(start + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn first_schedule_decides_the_time() {
        let mut state = State::default();
        let object = ObjectRef::new("apps", "Deployment", "ns", "web");
        let t0 = Instant::now();
        state.schedule(
            object.clone(),
            t0,
            Some((ConfigKind::ConfigMap, "a".into())),
        );
        state.schedule(
            object.clone(),
            t0 + Duration::from_secs(5),
            Some((ConfigKind::Secret, "b".into())),
        );
        let pending = &state.pending[&object];
        assert_eq!(pending.due, t0);
        assert_eq!(pending.causes.len(), 2);
        // A workload event (no cause, due now) does not pull a config event's window in...
        state.schedule(object.clone(), t0 - Duration::from_secs(1), None);
        assert_eq!(state.pending[&object].due, t0);
        // ...and a config event joining a workload event's entry gets its window.
        let other = ObjectRef::new("apps", "Deployment", "ns", "api");
        state.schedule(other.clone(), t0, None);
        state.schedule(
            other.clone(),
            t0 + Duration::from_secs(2),
            Some((ConfigKind::ConfigMap, "a".into())),
        );
        assert_eq!(state.pending[&other].due, t0 + Duration::from_secs(2));
    }
}
