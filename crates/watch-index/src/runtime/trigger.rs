//! Flux's watch-configs behaviour as a stream: when a ConfigMap or Secret changes, which
//! referrers should reconcile (docs/design.md section 3.3).
//!
//! - A [`ReferrerIndex`] is fed by informers of the referrer kinds (Flux's, or your own CRD with
//!   its own [`ReferenceSet`] paths) and answers "who references this config".
//! - A [`ConfigTrigger`] subscribes to the shared ConfigMap/Secret watches. The initial list is
//!   the baseline and fires nothing (a restart must not reconcile the whole cluster); every later
//!   change, including those a re-list finds after a watch gap, goes through [`Trigger::decide`]
//!   (Flux's exact rule, or data-hash) and, when it fires, yields a [`Fired`] with the referrers,
//!   Kustomizations in `dependsOn` order.
//!
//! Plug it into a kube `Controller` with `reconcile_on`:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use futures::StreamExt;
//! # use k8s_openapi::api::core::v1::Secret;
//! # use kube::runtime::controller::{Action, Controller};
//! # use conflux_watch_index::refs::{ConfigKind, ReferenceSet};
//! # use conflux_watch_index::runtime::trigger::{ConfigTrigger, ReferrerIndex};
//! # use conflux_runtime::Runtime;
//! # use conflux_runtime::ConfigWatches;
//! # use conflux_watch_index::trigger::{Mode, Trigger};
//! # async fn doc(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! # type Widget = k8s_openapi::api::core::v1::ConfigMap;
//! let rt = Runtime::new(client.clone());
//! let configs = ConfigWatches::start(&rt, None);
//! let widgets = rt.informer(kube::Api::<Widget>::all(client.clone()), Default::default(), "Widget", rt.health());
//! let mut refs = ReferenceSet::new();
//! refs.register_path("", "ConfigMap", ConfigKind::Secret, "data.secretName")?;
//! let index = ReferrerIndex::new(refs);
//! rt.spawn(index.feed(&widgets, "v1", "ConfigMap"));
//! let trigger = Trigger::from_flag("reconcile.fluxcd.io/watch=Enabled", Mode::Upstream)?;
//! let fired = ConfigTrigger::new(trigger, index, client).stream(&configs);
//! let requests = fired.flat_map(|f| futures::stream::iter(f.requests::<Widget>("", "ConfigMap")));
//! Controller::for_shared_stream(widgets.subscribe("widgets").touched(), widgets.store())
//!     .reconcile_on(requests)
//! #   .run(|_, _| async { Ok::<_, kube::Error>(Action::await_change()) }, |_, _, _: Arc<()>| Action::await_change(), Arc::new(()))
//! #   .for_each(|_| async {}).await;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use conflux_runtime::client::object_id;
use conflux_runtime::events::{Problems, recorder};
use conflux_runtime::{Change, Informer, Runtime, Tasks, Watched};

use crate::index::{DependencyOrder, ReverseIndex};
use crate::refs::{ConfigKey, ConfigKind, ObjectRef, ReferenceSet, flux_reference_problems};
use crate::trigger::{self, Decision, Event as ConfigEvent, Mode, Observed, Trigger, Why};
use conflux_runtime::configs::{ConfigResource, ConfigWatches};
use conflux_runtime::queue::{Gate, Opening};
use conflux_runtime::sync::{lock, read, write};

/// Labels of a ConfigMap/Secret event seen by the trigger.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigEventLabels {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// `create`, `update` or `delete`.
    pub event: String,
    /// `fire` when referrers were asked to reconcile, `skip` otherwise.
    pub decision: String,
}

/// Metrics of the trigger and its index.
#[derive(Debug, Default)]
pub struct TriggerMetrics {
    /// `trigger_config_events_total`.
    pub config_events: Family<ConfigEventLabels, Counter>,
    /// `index_referrers`.
    pub index_referrers: Gauge,
    /// `index_keys`.
    pub index_keys: Gauge,
}

impl TriggerMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "trigger_config_events",
            "ConfigMap/Secret events seen by the flux-trigger controller",
            self.config_events.clone(),
        );
        registry.register(
            "index_referrers",
            "Objects in the reverse index that reference at least one ConfigMap/Secret",
            self.index_referrers.clone(),
        );
        registry.register(
            "index_keys",
            "Distinct ConfigMaps/Secrets referenced by indexed objects",
            self.index_keys.clone(),
        );
    }
}

/// Reports (or clears) the malformed reference lists of one referrer, on a task of its own so
/// that indexing never waits for the API server.
fn report_malformed(
    reporter: &Reporter,
    value: &serde_json::Value,
    meta: &kube::api::ObjectMeta,
    object: &ObjectRef,
) {
    let key = object.to_string();
    let problems = flux_reference_problems(value);
    if problems.is_empty() {
        reporter.problems.resolve(&key);
        return;
    }
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: value
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        kind: Some(object.kind.to_string()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    };
    let message = format!(
        "malformed config references (ignored): {}",
        problems.join("; ")
    );
    let recorder = reporter.recorder.clone();
    let tracker = reporter.problems.clone();
    reporter.tasks.spawn(async move {
        tracker
            .report(
                &recorder,
                &reference,
                &key,
                "InvalidReference",
                &message,
                "Index",
                "flux-trigger: malformed references",
            )
            .await;
    });
}

/// The referrer → config index, fed by informers of the referrer kinds. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ReferrerIndex {
    inner: Arc<IndexInner>,
}

#[derive(Debug)]
struct IndexInner {
    /// One writer at a time (the feeds), many readers; critical sections never await.
    index: RwLock<ReverseIndex>,
    refs: ReferenceSet,
    /// One flag per feed: listed at least once.
    feeds: Mutex<Vec<Arc<AtomicBool>>>,
    metrics: Arc<TriggerMetrics>,
    /// Where malformed reference lists of Flux objects are reported, when set.
    reporter: Option<Reporter>,
}

/// Reports malformed reference lists ([`flux_reference_problems`]) once per object and problem.
struct Reporter {
    recorder: kube::runtime::events::Recorder,
    problems: Arc<Problems>,
    /// Where the reports run (the runtime's tasks: they end with it).
    tasks: Tasks,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").finish_non_exhaustive()
    }
}

impl ReferrerIndex {
    /// An empty index extracting references with `refs`.
    pub fn new(refs: ReferenceSet) -> Self {
        Self::with_metrics(refs, Arc::new(TriggerMetrics::default()))
    }

    /// Same, reporting the index size in `metrics`.
    pub fn with_metrics(refs: ReferenceSet, metrics: Arc<TriggerMetrics>) -> Self {
        Self::build(refs, metrics, None)
    }

    /// Same, also reporting Flux objects whose `substituteFrom`/`valuesFrom` lists are malformed
    /// (a Warning Event `InvalidReference` on the object and one log line, once per problem),
    /// with `runtime`'s client and on its tasks.
    pub fn with_events(
        refs: ReferenceSet,
        metrics: Arc<TriggerMetrics>,
        runtime: &Runtime,
    ) -> Self {
        let reporter = Reporter {
            recorder: recorder(&runtime.client(), "conflux"),
            problems: Arc::new(Problems::default()),
            tasks: runtime.tasks().clone(),
        };
        Self::build(refs, metrics, Some(reporter))
    }

    fn build(refs: ReferenceSet, metrics: Arc<TriggerMetrics>, reporter: Option<Reporter>) -> Self {
        ReferrerIndex {
            inner: Arc::new(IndexInner {
                index: RwLock::new(ReverseIndex::new()),
                refs,
                feeds: Mutex::new(Vec::new()),
                metrics,
                reporter,
            }),
        }
    }

    /// Keeps the index in step with the objects of `informer` (of `api_version`/`kind`, which list
    /// items lack) while the returned future runs: spawn it on the runtime
    /// ([`Runtime::spawn`]), so it ends with it.
    #[must_use = "the index is fed only while the returned future runs"]
    pub fn feed<K>(
        &self,
        informer: &Informer<K>,
        api_version: &str,
        kind: &str,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        K: Watched + Serialize,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let flag = Arc::new(AtomicBool::new(false));
        lock(&self.inner.feeds).push(flag.clone());
        let mut sub = informer.subscribe(&format!("index {kind}"));
        let this = self.clone();
        let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
        let group = api_version
            .rsplit_once('/')
            .map(|(g, _)| g.to_owned())
            .unwrap_or_default();
        async move {
            while let Some(change) = sub.recv().await {
                match change {
                    Change::Initial(obj) | Change::Applied(obj) => {
                        this.apply(&*obj, &group, &api_version, &kind);
                    }
                    Change::Deleted(obj) => {
                        let object = ObjectRef::new(
                            group.as_str(),
                            kind.as_str(),
                            obj.namespace().unwrap_or_default(),
                            obj.name_any(),
                        );
                        this.write().delete(&object);
                        this.update_gauges();
                    }
                    Change::InitDone => flag.store(true, Ordering::Release),
                    _ => {}
                }
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ReverseIndex> {
        write(&self.inner.index)
    }

    /// Puts one referrer into the index (or removes it when it references nothing any more).
    fn apply<K: Resource + Serialize>(&self, obj: &K, group: &str, api_version: &str, kind: &str) {
        let object = ObjectRef::new(
            group,
            kind,
            obj.meta().namespace.clone().unwrap_or_default(),
            obj.meta().name.clone().unwrap_or_default(),
        );
        let mut value = match serde_json::to_value(obj) {
            Ok(v) => v,
            Err(err) => {
                warn!(object = %object, error = %err, "cannot read referrer; not indexed");
                return;
            }
        };
        value["apiVersion"] = api_version.into();
        value["kind"] = kind.into();
        if let Some(reporter) = &self.inner.reporter {
            report_malformed(reporter, &value, obj.meta(), &object);
        }
        let referrer = self.inner.refs.extract(&value);
        {
            let mut index = self.write();
            match referrer {
                Some(referrer) => index.apply(referrer),
                None => {
                    index.delete(&object);
                }
            }
        }
        self.update_gauges();
    }

    fn update_gauges(&self) {
        let stats = self.read().stats();
        let metrics = &self.inner.metrics;
        metrics
            .index_referrers
            .set(i64::try_from(stats.referrers).unwrap_or(i64::MAX));
        metrics
            .index_keys
            .set(i64::try_from(stats.keys).unwrap_or(i64::MAX));
    }

    /// The configs an object (as JSON, with `apiVersion` and `kind`) references, read from the
    /// object itself rather than from the index (which may not have seen this version yet).
    pub fn references_in(&self, obj: &serde_json::Value) -> Vec<ConfigKey> {
        self.inner
            .refs
            .extract(obj)
            .map(|r| r.references.into_iter().map(|r| r.key).collect())
            .unwrap_or_default()
    }

    /// Reads the index.
    pub fn read(&self) -> RwLockReadGuard<'_, ReverseIndex> {
        read(&self.inner.index)
    }

    /// Whether every feed has listed its kind once.
    pub fn is_synced(&self) -> bool {
        lock(&self.inner.feeds)
            .iter()
            .all(|f| f.load(Ordering::Acquire))
    }

    /// Waits until every feed has listed its kind once.
    pub async fn wait_synced(&self) {
        while !self.is_synced() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn is_referenced(&self, kind: ConfigKind, id: &(String, String)) -> bool {
        self.read().is_referenced(kind, &id.0, &id.1)
    }
}

/// What happened to the config of a [`Fired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigChange {
    /// Created (or first seen after the baseline).
    Created,
    /// Changed.
    Updated,
    /// Deleted.
    Deleted,
}

impl ConfigChange {
    /// `create`, `update` or `delete`, as in metrics and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigChange::Created => "create",
            ConfigChange::Updated => "update",
            ConfigChange::Deleted => "delete",
        }
    }
}

/// A config change that fired: the referrers to ask to reconcile.
#[derive(Debug, Clone)]
pub struct Fired {
    /// The ConfigMap/Secret that changed.
    pub source: ConfigKey,
    /// What happened to it.
    pub change: ConfigChange,
    /// Why it fired.
    pub why: Why,
    /// Its referrers, Kustomizations in `dependsOn` order (cycles reported).
    pub order: DependencyOrder,
}

impl Fired {
    /// The referrers of one kind as kube `ObjectRef`s, for `Controller::reconcile_on`.
    pub fn requests<K>(
        &self,
        group: &str,
        kind: &str,
    ) -> Vec<kube::runtime::reflector::ObjectRef<K>>
    where
        K: Resource<DynamicType = ()>,
    {
        self.order
            .order
            .iter()
            .filter(|o| o.group.as_ref() == group && o.kind.as_ref() == kind)
            .map(|o| kube::runtime::reflector::ObjectRef::new(&o.name).within(&o.namespace))
            .collect()
    }
}

/// The config-event → referrer stream.
#[derive(Clone)]
pub struct ConfigTrigger {
    trigger: Trigger,
    index: ReferrerIndex,
    client: Client,
    concurrent: usize,
    /// Parts of a start gate, opened once each kind's baseline is recorded.
    baselines: Arc<Mutex<Vec<(ConfigKind, Opening)>>>,
}

impl std::fmt::Debug for ConfigTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigTrigger")
            .field("trigger", &self.trigger)
            .finish_non_exhaustive()
    }
}

impl ConfigTrigger {
    /// A trigger deciding with `trigger`, looking referrers up in `index`; `client` reads data
    /// (data-hash mode only, and only for referenced objects).
    pub fn new(trigger: Trigger, index: ReferrerIndex, client: Client) -> Self {
        ConfigTrigger {
            trigger,
            index,
            client,
            concurrent: 4,
            baselines: Arc::default(),
        }
    }

    /// Reads at most `concurrent` objects at once when recording data-hash baselines.
    pub fn concurrent(mut self, concurrent: usize) -> Self {
        self.concurrent = concurrent.max(1);
        self
    }

    /// Holds `gate` closed until both kinds' baselines are recorded (a part per kind, `baseline
    /// ConfigMap` and `baseline Secret`): what a controller decides from then on compares with
    /// the state the trigger fires against.
    pub fn with_gate(self, gate: &Gate) -> Self {
        {
            let mut baselines = lock(&self.baselines);
            for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
                baselines.push((kind, gate.part(&format!("baseline {kind}"))));
            }
        }
        self
    }

    /// Subscribes to both kinds of `configs` and yields every change that fires. Changes are
    /// decided once the referrer index has listed (they wait in the subscription until then).
    ///
    /// The stream does the work itself, while it is polled: it starts no task, and dropping it
    /// stops everything.
    pub fn stream(self, configs: &ConfigWatches) -> impl Stream<Item = Fired> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        let this = Arc::new(self);
        let kinds = futures::future::join(
            watch_kind::<ConfigMap>(this.clone(), configs, tx.clone()),
            watch_kind::<Secret>(this, configs, tx),
        );
        let fired = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|f| (Some(f), rx))
        });
        // The kinds' loops end only with the informers; then nothing more fires.
        let kinds = futures::stream::once(kinds).map(|_| None);
        futures::stream::select(fired, kinds).filter_map(std::future::ready)
    }
}

fn watch_kind<K: ConfigResource>(
    trigger: Arc<ConfigTrigger>,
    configs: &ConfigWatches,
    tx: mpsc::UnboundedSender<Fired>,
) -> impl Future<Output = ()> + Send + 'static {
    let informer = configs.informer::<K>();
    let sub = informer.subscribe(&format!("trigger {}", K::KIND.as_str()));
    let kind: ConfigKind = K::KIND.into();
    let opening = {
        let mut baselines = lock(&trigger.baselines);
        let at = baselines.iter().position(|(k, _)| *k == kind);
        at.map(|at| baselines.swap_remove(at).1)
    };
    async move {
        trigger.index.wait_synced().await;
        let mut state = KindState::<K> {
            trigger: &trigger,
            kind,
            hashes: DataHashes::default(),
            baseline: Vec::new(),
            opening,
            tx,
            _kind: std::marker::PhantomData,
        };
        let mut sub = sub;
        while let Some((change, previous)) = sub.recv_with_previous().await {
            state.on_change(change, previous).await;
        }
    }
}

/// SHA-256 of what a ConfigMap/Secret holds.
pub(crate) type DataHash = [u8; 32];

/// Data hashes of ConfigMaps/Secrets, each with the resourceVersion of the object it was read
/// from. A hash stands for a version only when it was read at that version: a read made after an
/// event may already hold a newer change, and taking it for the version before that change would
/// make the change look like no change at all (a lost trigger).
#[derive(Debug, Default)]
pub(crate) struct DataHashes {
    read: Mutex<HashMap<ConfigKey, (String, DataHash)>>,
}

impl DataHashes {
    /// The hash of `key` as of `resource_version`, if one was read at that version.
    pub(crate) fn at(&self, key: &ConfigKey, resource_version: &str) -> Option<DataHash> {
        lock(&self.read)
            .get(key)
            .filter(|(rv, _)| rv == resource_version)
            .map(|(_, hash)| *hash)
    }

    /// Records the hash of `key` read at `resource_version`.
    pub(crate) fn insert(&self, key: ConfigKey, resource_version: String, hash: DataHash) {
        lock(&self.read).insert(key, (resource_version, hash));
    }

    /// Forgets `key` (deleted).
    pub(crate) fn remove(&self, key: &ConfigKey) {
        lock(&self.read).remove(key);
    }

    /// How many objects have a hash.
    pub(crate) fn len(&self) -> usize {
        lock(&self.read).len()
    }

    /// The hash of `key` at `resource_version`: recorded, or read now (and recorded at the
    /// version read, which may be newer). `None` when the object is gone or cannot be read.
    pub(crate) async fn get_or_read(
        &self,
        client: &Client,
        key: &ConfigKey,
        resource_version: &str,
    ) -> crate::Result<Option<DataHash>> {
        if let Some(hash) = self.at(key, resource_version) {
            return Ok(Some(hash));
        }
        let read = fetch_data_hash(client, key.kind, &key.namespace, &key.name).await?;
        Ok(read.map(|(rv, hash)| {
            self.insert(key.clone(), rv, hash);
            hash
        }))
    }
}

/// What the trigger remembers of one kind between events. The previous version of an object
/// (to tell create from update, and its resourceVersion) comes with each change from the shared
/// informer; only the data hashes of the objects hashed (data-hash mode: referenced) are kept
/// here, each with the version it was read at. Never the data itself.
struct KindState<'a, K: ConfigResource> {
    trigger: &'a ConfigTrigger,
    kind: ConfigKind,
    hashes: DataHashes,
    /// The referenced objects of the initial state and their versions (data-hash mode), hashed
    /// once it is complete.
    baseline: Vec<(ConfigKey, String)>,
    /// The gate part to open once the baseline is recorded.
    opening: Option<Opening>,
    tx: mpsc::UnboundedSender<Fired>,
    _kind: std::marker::PhantomData<K>,
}

impl<K: ConfigResource> KindState<'_, K> {
    async fn on_change(
        &mut self,
        change: Change<PartialObjectMeta<K>>,
        previous: Option<Arc<PartialObjectMeta<K>>>,
    ) {
        match change {
            Change::Initial(meta) => {
                let id = object_id(&meta.metadata);
                if self.trigger.trigger.mode() == Mode::DataHash
                    && self.trigger.index.is_referenced(self.kind, &id)
                {
                    let rv = meta.metadata.resource_version.clone().unwrap_or_default();
                    self.baseline.push((self.key(&id), rv));
                }
            }
            Change::InitDone => {
                self.record_baseline_hashes().await;
                debug!(kind = %self.kind, hashed = self.hashes.len(), "trigger: baseline recorded");
                if let Some(mut opening) = self.opening.take() {
                    opening.open();
                }
            }
            Change::Applied(meta) => {
                let previous_rv =
                    previous.map(|p| p.metadata.resource_version.clone().unwrap_or_default());
                self.on_apply(&meta.metadata, previous_rv).await;
            }
            Change::Deleted(meta) => {
                let id = object_id(&meta.metadata);
                self.hashes.remove(&self.key(&id));
                let rv = previous
                    .as_ref()
                    .unwrap_or(&meta)
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default();
                let decision = self.trigger.trigger.decide(
                    &ConfigEvent::Deleted(Observed::new(&meta.metadata.labels, &rv)),
                    self.trigger.index.is_referenced(self.kind, &id),
                );
                self.fire(&id, ConfigChange::Deleted, decision);
            }
            _ => {}
        }
    }

    fn key(&self, id: &(String, String)) -> ConfigKey {
        ConfigKey::new(self.kind, id.0.as_str(), id.1.as_str())
    }

    /// An object was created (`previous_rv` `None`) or updated.
    async fn on_apply(&mut self, meta: &kube::api::ObjectMeta, previous_rv: Option<String>) {
        let trigger = self.trigger;
        let id = object_id(meta);
        let key = self.key(&id);
        let matched = trigger.trigger.selector().matches(&meta.labels);
        let new_rv = meta.resource_version.clone().unwrap_or_default();
        // The hash of the version before this change, only if it was read at that version.
        let previous_hash = previous_rv
            .as_deref()
            .and_then(|rv| self.hashes.at(&key, rv));
        if previous_rv.is_none() {
            // A new object: a hash left from an earlier object of the same name is stale.
            self.hashes.remove(&key);
        }
        let has_referrers = trigger.index.is_referenced(self.kind, &id);
        // Data is read only when it can matter: data-hash mode, a matching object, referrers.
        let data_hash = if trigger.trigger.mode() == Mode::DataHash && matched && has_referrers {
            match self
                .hashes
                .get_or_read(&trigger.client, &key, &new_rv)
                .await
            {
                Ok(hash) => hash,
                Err(err) => {
                    warn!(kind = %self.kind, namespace = %id.0, name = %id.1, reason = err.reason(), error = %err, "trigger: cannot read data");
                    None
                }
            }
        } else {
            None
        };
        let new_observed = match &data_hash {
            Some(hash) => Observed::new(&meta.labels, &new_rv).with_data_hash(hash),
            None => Observed::new(&meta.labels, &new_rv),
        };
        let decision = match &previous_rv {
            None => trigger
                .trigger
                .decide(&ConfigEvent::Created(new_observed), has_referrers),
            Some(old_rv) => {
                // The old labels do not matter to the rule (the new ones decide); the old
                // resourceVersion and data hash do.
                let no_labels: Option<&std::collections::BTreeMap<String, String>> = None;
                let mut old_observed = Observed::new(&no_labels, old_rv);
                if let Some(hash) = &previous_hash {
                    old_observed = old_observed.with_data_hash(hash);
                }
                trigger.trigger.decide(
                    &ConfigEvent::Updated {
                        old: old_observed,
                        new: new_observed,
                    },
                    has_referrers,
                )
            }
        };
        let change = if previous_rv.is_none() {
            ConfigChange::Created
        } else {
            ConfigChange::Updated
        };
        if data_hash.is_none()
            && let Some(hash) = previous_hash
        {
            // Not read now (not matching, or no referrers): the last data known stays the one
            // the next read compares with; if this change did change the data, that read
            // differs and fires.
            self.hashes.insert(key, new_rv, hash);
        }
        self.fire(&id, change, decision);
    }

    fn fire(&self, id: &(String, String), change: ConfigChange, decision: Decision) {
        let key = ConfigKey::new(self.kind, id.0.as_str(), id.1.as_str());
        let fired = match decision {
            Decision::Fire(why) => {
                let order = self
                    .trigger
                    .index
                    .read()
                    .referrers_in_dependency_order(&key);
                (!order.order.is_empty()).then_some((why, order))
            }
            Decision::Skip(_) => None,
        };
        self.trigger
            .index
            .inner
            .metrics
            .config_events
            .get_or_create(&ConfigEventLabels {
                kind: self.kind.as_str().to_owned(),
                event: change.as_str().to_owned(),
                decision: if fired.is_some() { "fire" } else { "skip" }.to_owned(),
            })
            .inc();
        if let Some((why, order)) = fired {
            let _ = self.tx.send(Fired {
                source: key,
                change,
                why,
                order,
            });
        }
    }

    /// Hashes the data of every referenced object of the initial state (data-hash mode). Each
    /// hash is recorded at the version read, which is newer than the listed one when the object
    /// changed since: then the hash is not taken for the listed version, and that change fires
    /// when its event comes (taking it for the baseline would lose it).
    async fn record_baseline_hashes(&mut self) {
        let trigger = self.trigger;
        let hashes = &self.hashes;
        let wanted = std::mem::take(&mut self.baseline);
        futures::stream::iter(wanted)
            .for_each_concurrent(trigger.concurrent, |(key, rv)| async move {
                // Unreadable: no hash, so the next change fires (it cannot be proven unchanged).
                let _ = hashes.get_or_read(&trigger.client, &key, &rv).await;
            })
            .await;
    }
}

/// Reads one object and hashes its data: its resourceVersion and hash, `None` when it no longer
/// exists. The data is dropped right after hashing and never logged.
pub(crate) async fn fetch_data_hash(
    client: &Client,
    kind: ConfigKind,
    namespace: &str,
    name: &str,
) -> crate::Result<Option<(String, DataHash)>> {
    let action = format!("reading {kind} {namespace}/{name}");
    match kind {
        ConfigKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            Ok(api
                .get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(|cm| {
                    let text = cm.data.unwrap_or_default();
                    let binary = cm.binary_data.unwrap_or_default();
                    let hash = trigger::data_hash(
                        "",
                        text.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
                        binary.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())),
                    );
                    (cm.metadata.resource_version.unwrap_or_default(), hash)
                }))
        }
        ConfigKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            Ok(api
                .get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(|secret| {
                    let data = secret.data.unwrap_or_default();
                    let hash = trigger::data_hash(
                        secret.type_.as_deref().unwrap_or("Opaque"),
                        data.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())),
                        std::iter::empty(),
                    );
                    (secret.metadata.resource_version.unwrap_or_default(), hash)
                }))
        }
    }
}

#[cfg(test)]
mod tests;
