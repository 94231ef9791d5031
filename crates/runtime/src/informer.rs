//! The shared, fault-tolerant watch: one `watcher` per kind, its store, and a fan-out of its
//! changes to every controller that subscribes.
//!
//! Why not one `watcher` per controller: every watch of ConfigMaps or Secrets costs the API
//! server a watcher and this process a full copy of the objects. One informer per kind, with
//! subscribers, costs one of each.
//!
//! What it guarantees to a subscriber:
//! - first the objects present when it subscribed ([`Change::Initial`], then
//!   [`Change::InitDone`]), delivered once the kind has been listed;
//! - then every change, in order: [`Change::Applied`], [`Change::Deleted`];
//! - across faults, nothing lost: dropped connections resume the watch; a re-list (410 Gone,
//!   apiserver restart) is diffed against the store, so objects changed meanwhile arrive as
//!   `Applied` and objects deleted meanwhile as `Deleted` (with their last known state), after the
//!   store holds the new list. Unchanged objects are not repeated.
//!
//! Errors are retried with kube's default backoff (0.8 s doubling to 30 s), counted, logged once
//! per incident (and once when it recovers), and make readiness false until the watch answers
//! again. A subscriber that leaves events unread longer than the stall bound fails liveness.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::health::{Health, Probe};
pub use crate::meta_store::{Backend, KubeStore, MetaStore, Snapshot, StoredMeta};
use crate::metrics::{ResourceLabels, WatchMetrics};
use crate::packed_store::PackedStore;
use crate::sync::lock;

/// How long after the last watch error the kind counts as failing when no event proved it
/// healthy since. kube's watcher retries at least every 30 s while it fails, so a quiet 40 s
/// means the retry got through.
const ERROR_GRACE: Duration = Duration::from_secs(40);

/// kubectl's copy of the whole applied object (for a Secret: its data). No controller reads it;
/// dropping it keeps the stores small and Secret data out of memory.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// One change seen by a subscriber.
#[derive(Debug)]
#[non_exhaustive]
pub enum Change<K> {
    /// An object present when the subscription started (the initial state).
    Initial(Arc<K>),
    /// Every [`Change::Initial`] was delivered; what follows are changes.
    InitDone,
    /// An object was created or changed (live, or found changed by a re-list).
    Applied(Arc<K>),
    /// An object was deleted (live, or missing from a re-list); its last known state.
    Deleted(Arc<K>),
}

impl<K> Change<K> {
    /// The object of the change, if it has one.
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Change::Initial(o) | Change::Applied(o) | Change::Deleted(o) => Some(o),
            Change::InitDone => None,
        }
    }
}

/// A change and the state the store held before it ([`Subscription::recv_with_previous`]).
pub type WithPrevious<K> = (Change<K>, Option<Arc<K>>);

/// Bounds of the objects an informer can watch.
pub trait Watched: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static
where
    Self::DynamicType: Eq + Hash + Clone + Send + Sync,
{
}

impl<K> Watched for K
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
}

/// A handle to one shared watch. Cheap to clone. `B` is where it keeps the objects: kube's
/// reflector store by default ([`Informer::store`]), or a compact [`MetaStore`] of metadata
/// ([`Informer::new_compact`], for kinds with very many objects).
pub struct Informer<K: Watched, B: Backend<K> = KubeStore<K>>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    shared: Arc<Shared<K, B>>,
}

impl<K: Watched, B: Backend<K>> Clone for Informer<K, B>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    fn clone(&self) -> Self {
        Informer {
            shared: self.shared.clone(),
        }
    }
}

impl<K: Watched, B: Backend<K>> Debug for Informer<K, B>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.shared.resource)
            .finish_non_exhaustive()
    }
}

struct Shared<K: Watched, B: Backend<K>>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    resource: String,
    store: B,
    subscribers: Mutex<Subscribers<K>>,
    status: Mutex<Status>,
    metrics: Arc<WatchMetrics>,
    labels: ResourceLabels,
    /// Base of the millisecond clocks of the subscribers' stall tracking.
    epoch: Instant,
    stall_after: Duration,
}

struct Subscribers<K> {
    synced: bool,
    list: Vec<Subscriber<K>>,
}

struct Subscriber<K> {
    tx: mpsc::UnboundedSender<Message<K>>,
    stats: Arc<SubscriberStats>,
}

/// What travels to a subscriber. The initial state is one shared snapshot (one `Arc` per object,
/// shared by every subscriber) that the [`Subscription`] hands out as [`Change::Initial`]s: at
/// 100,000 objects and a dozen subscribers, one queued message per object and subscriber cost
/// more than the store itself.
enum Message<K> {
    /// The initial state, then [`Change::InitDone`].
    Snapshot(Arc<dyn Snapshot<K>>),
    /// A change, and the state the store held before it (for an update or a deletion).
    Change(Change<K>, Option<Arc<K>>),
}

/// How far behind one subscriber is.
#[derive(Debug)]
struct SubscriberStats {
    name: String,
    queued: AtomicUsize,
    /// Milliseconds since the informer's epoch of the last read, or of the moment the queue
    /// became non-empty.
    progress_ms: AtomicU64,
}

#[derive(Debug, Default)]
struct Status {
    synced: bool,
    last_error: Option<Instant>,
    last_ok: Option<Instant>,
    /// Start and error count of the incident in progress, for its log lines.
    incident: Option<(Instant, u64)>,
    /// The last error said the kind is not served (a CRD not installed).
    not_served: bool,
}

impl<K: Watched> Informer<K>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// A shared watch fed by `stream` (a kube `watcher`, or any stream of its events), and the
    /// future that drives it: run that on a task ([`Runtime::informer`](crate::Runtime::informer)
    /// does it on the runtime's tasks). Registers a readiness/liveness check named `resource`
    /// under `health`. Errors are retried with kube's default backoff. `managedFields` and
    /// kubectl's last-applied annotation are dropped from every object (no controller reads
    /// them, and they are often the larger part of the metadata).
    pub fn new(
        stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        dyntype: K::DynamicType,
        resource: &str,
        metrics: Arc<WatchMetrics>,
        health: &Health,
        stall_after: Duration,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::with_backend(
            stream,
            KubeStore::new(dyntype),
            resource,
            metrics,
            health,
            stall_after,
        )
    }

    /// The store of every object of the kind (shared; never mutate through it).
    pub fn store(&self) -> Store<K> {
        self.shared.store.store()
    }
}

impl<X> Informer<PartialObjectMeta<X>, MetaStore<X>>
where
    PartialObjectMeta<X>: Watched,
    <PartialObjectMeta<X> as Resource>::DynamicType: Eq + Hash + Clone + Send + Sync,
    X: 'static,
{
    /// A shared metadata watch that keeps its objects in a compact [`MetaStore`] (see
    /// [`Informer::new`] for the rest). Subscribers still receive `PartialObjectMeta`s, holding
    /// what the store keeps (see [`StoredMeta`]).
    pub fn new_compact(
        stream: impl Stream<Item = Result<Event<PartialObjectMeta<X>>, watcher::Error>> + Send + 'static,
        resource: &str,
        metrics: Arc<WatchMetrics>,
        health: &Health,
        stall_after: Duration,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::with_backend(
            stream,
            MetaStore::default(),
            resource,
            metrics,
            health,
            stall_after,
        )
    }

    /// The store of every object of the kind (shared).
    pub fn store(&self) -> MetaStore<X> {
        self.shared.store.clone()
    }
}

impl<K> Informer<K, PackedStore<K>>
where
    K: Watched + serde::Serialize,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// A shared watch that keeps its objects as JSON text in a [`PackedStore`] and parses one
    /// when it is delivered or asked for (see [`Informer::new`] for the rest): for kinds with
    /// many objects that are read on a change only.
    pub fn new_packed(
        stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        resource: &str,
        metrics: Arc<WatchMetrics>,
        health: &Health,
        stall_after: Duration,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::with_backend(
            stream,
            PackedStore::default(),
            resource,
            metrics,
            health,
            stall_after,
        )
    }

    /// The store of every object of the kind (shared).
    pub fn store(&self) -> PackedStore<K> {
        self.shared.store.clone()
    }
}

impl<K: Watched, B: Backend<K>> Informer<K, B>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    fn with_backend(
        stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        store: B,
        resource: &str,
        metrics: Arc<WatchMetrics>,
        health: &Health,
        stall_after: Duration,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let shared = Arc::new(Shared {
            resource: resource.to_owned(),
            store,
            subscribers: Mutex::new(Subscribers {
                synced: false,
                list: Vec::new(),
            }),
            status: Mutex::new(Status::default()),
            labels: ResourceLabels::new(resource),
            metrics,
            epoch: Instant::now(),
            stall_after,
        });
        shared.metrics.synced.get_or_create(&shared.labels).set(0);
        let probe = Arc::downgrade(&shared);
        health.check(format!("watch {resource}"), move || match probe.upgrade() {
            Some(shared) => shared.probe(),
            None => Probe::not_ready("informer stopped"),
        });
        let stream = stream.default_backoff().modify(|obj| {
            let meta = obj.meta_mut();
            meta.managed_fields = None;
            if let Some(annotations) = meta.annotations.as_mut() {
                annotations.remove(LAST_APPLIED_ANNOTATION);
            }
        });
        let driver = run(shared.clone(), stream);
        (Informer { shared }, driver)
    }

    /// The kind's name, as used in metrics and logs.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// Whether the kind is listed and its watch healthy.
    pub fn is_synced(&self) -> bool {
        self.shared.probe().ready
    }

    /// Whether the kind has been listed once (its store is complete, if perhaps not current).
    pub fn has_listed(&self) -> bool {
        self.shared.lock_subscribers().synced
    }

    /// Waits until the kind has been listed once.
    pub async fn wait_synced(&self) {
        // The store's own signal wakes one waiter only; poll it (cheap) instead.
        loop {
            if self.shared.lock_subscribers().synced {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A new subscriber named `name` (for liveness reports). It receives the initial state as
    /// soon as the kind is listed, then every change.
    pub fn subscribe(&self, name: &str) -> Subscription<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(SubscriberStats {
            name: name.to_owned(),
            queued: AtomicUsize::new(0),
            progress_ms: AtomicU64::new(self.shared.now_ms()),
        });
        let subscriber = Subscriber { tx, stats };
        let mut subs = self.shared.lock_subscribers();
        if subs.synced {
            self.shared
                .send_initial(&subscriber, self.shared.store.snapshot());
        }
        subs.list.push(subscriber.clone_handle());
        drop(subs);
        Subscription {
            rx,
            initial: None,
            stats: subscriber.stats,
            epoch: self.shared.epoch,
        }
    }
}

impl<K> Subscriber<K> {
    fn clone_handle(&self) -> Self {
        Subscriber {
            tx: self.tx.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<K: Watched, B: Backend<K>> Shared<K, B>
where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    fn lock_subscribers(&self) -> MutexGuard<'_, Subscribers<K>> {
        lock(&self.subscribers)
    }

    fn lock_status(&self) -> MutexGuard<'_, Status> {
        lock(&self.status)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Queues `message` (worth `events` changes) for `subscriber`.
    fn send(&self, subscriber: &Subscriber<K>, message: Message<K>, events: usize) -> bool {
        if subscriber.stats.queued.fetch_add(events, Ordering::AcqRel) == 0 {
            subscriber
                .stats
                .progress_ms
                .store(self.now_ms(), Ordering::Release);
        }
        if subscriber.tx.send(message).is_err() {
            subscriber.stats.queued.fetch_sub(events, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Queues the initial state (each object, then [`Change::InitDone`]).
    fn send_initial(&self, subscriber: &Subscriber<K>, state: Arc<dyn Snapshot<K>>) {
        let events = state.len() + 1;
        self.send(subscriber, Message::Snapshot(state), events);
    }

    /// Sends `changes` (each with the state before it) to every subscriber, forgetting those
    /// that went away.
    fn broadcast(&self, subs: &mut Subscribers<K>, changes: Vec<(Change<K>, Option<Arc<K>>)>) {
        if changes.is_empty() {
            return;
        }
        subs.list.retain(|s| !s.tx.is_closed());
        for (change, previous) in changes {
            for subscriber in &subs.list {
                let message = Message::Change(clone_change(&change), previous.clone());
                self.send(subscriber, message, 1);
            }
        }
    }

    fn probe(&self) -> Probe {
        let status = self.lock_status();
        if !status.synced && status.not_served {
            return self.with_stall(Probe::not_ready(
                "not served by the API server (is its CustomResourceDefinition installed?)",
            ));
        }
        if !status.synced {
            return self.with_stall(Probe::not_ready("not listed yet"));
        }
        if let Some(err) = status.last_error
            && status.last_ok.is_none_or(|ok| ok < err)
            && err.elapsed() < ERROR_GRACE
        {
            return self.with_stall(Probe::not_ready("watch failing, retrying with backoff"));
        }
        drop(status);
        self.with_stall(Probe::ok())
    }

    /// Turns the probe not-live when a subscriber stalled.
    fn with_stall(&self, mut probe: Probe) -> Probe {
        let now = self.now_ms();
        let bound = u64::try_from(self.stall_after.as_millis()).unwrap_or(u64::MAX);
        let subs = self.lock_subscribers();
        // A subscriber that went away (a leadership term that ended) is not stalled.
        for s in subs.list.iter().filter(|s| !s.tx.is_closed()) {
            let queued = s.stats.queued.load(Ordering::Acquire);
            let since = s.stats.progress_ms.load(Ordering::Acquire);
            if queued > 0 && now.saturating_sub(since) > bound {
                probe.live = false;
                probe.ready = false;
                probe.detail = Some(format!(
                    "subscriber {} has left {queued} events unread for {}s",
                    s.stats.name,
                    now.saturating_sub(since) / 1000
                ));
            }
        }
        probe
    }

    fn on_error(&self, err: &watcher::Error) {
        self.metrics.errors.get_or_create(&self.labels).inc();
        self.metrics.synced.get_or_create(&self.labels).set(0);
        let mut status = self.lock_status();
        let now = Instant::now();
        status.last_error = Some(now);
        status.not_served = not_served(err);
        match &mut status.incident {
            Some((_, count)) => {
                *count += 1;
                debug!(resource = %self.resource, error = %err, "watch still failing");
            }
            None => {
                status.incident = Some((now, 1));
                if status.not_served {
                    warn!(resource = %self.resource, reason = "NotServed", error = %err, "the API server does not serve this kind: is its CustomResourceDefinition installed? Not ready until it is; retrying with backoff");
                } else {
                    warn!(resource = %self.resource, reason = "WatchFailed", error = %err, "watch failed; retrying with backoff");
                }
            }
        }
    }

    fn on_ok(&self) {
        let now = Instant::now();
        self.metrics.events.get_or_create(&self.labels).inc();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.metrics
            .last_event
            .get_or_create(&self.labels)
            .set(unix);
        let mut status = self.lock_status();
        status.last_ok = Some(now);
        status.not_served = false;
        if let Some((since, errors)) = status.incident.take() {
            info!(
                resource = %self.resource,
                errors,
                seconds = since.elapsed().as_secs(),
                "watch recovered"
            );
        }
        if status.synced {
            self.metrics.synced.get_or_create(&self.labels).set(1);
        }
    }

    fn set_synced(&self, synced: bool) {
        self.lock_status().synced = synced;
        self.metrics
            .synced
            .get_or_create(&self.labels)
            .set(i64::from(synced));
        self.metrics
            .objects
            .get_or_create(&self.labels)
            .set(i64::try_from(self.store.len()).unwrap_or(i64::MAX));
    }
}

fn clone_change<K>(change: &Change<K>) -> Change<K> {
    match change {
        Change::Initial(o) => Change::Initial(o.clone()),
        Change::InitDone => Change::InitDone,
        Change::Applied(o) => Change::Applied(o.clone()),
        Change::Deleted(o) => Change::Deleted(o.clone()),
    }
}

/// A re-list in progress: what the store held before it, and what changed so far.
struct Relist<K, B: Backend<K>> {
    before: B::Before,
    changes: Vec<(Change<K>, Option<Arc<K>>)>,
}

async fn run<K: Watched, B: Backend<K>>(
    shared: Arc<Shared<K, B>>,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
) where
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut stream = std::pin::pin!(stream);
    let mut relist: Option<Relist<K, B>> = None;
    let mut listed_once = false;
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(event) => event,
            Err(err) => {
                shared.on_error(&err);
                continue;
            }
        };
        // `Init` is the watcher starting a list, not an answer from the API server.
        if !matches!(event, Event::Init) {
            shared.on_ok();
        }
        match &event {
            Event::Init => {
                relist = if listed_once {
                    shared.metrics.relists.get_or_create(&shared.labels).inc();
                    debug!(resource = %shared.resource, "re-listing");
                    Some(Relist {
                        before: shared.store.before(),
                        changes: Vec::new(),
                    })
                } else {
                    None
                };
                shared.store.apply(&event);
            }
            Event::InitApply(obj) => {
                if listed_once && let Some(r) = relist.as_mut() {
                    let (old, changed) = shared.store.take(&mut r.before, obj);
                    if changed {
                        r.changes
                            .push((Change::Applied(Arc::new(obj.clone())), old));
                    }
                }
                shared.store.apply(&event);
            }
            Event::InitDone => {
                let mut subs = shared.lock_subscribers();
                shared.store.apply(&event);
                let done = relist.take();
                if listed_once {
                    if let Some(done) = done {
                        let mut changes = done.changes;
                        changes.extend(
                            shared
                                .store
                                .rest(done.before)
                                .into_iter()
                                .map(|old| (Change::Deleted(old.clone()), Some(old))),
                        );
                        if !changes.is_empty() {
                            info!(resource = %shared.resource, changes = changes.len(), "re-list found changes made while the watch was down");
                        }
                        shared.broadcast(&mut subs, changes);
                    }
                } else {
                    listed_once = true;
                    subs.synced = true;
                    let state = shared.store.snapshot();
                    for subscriber in &subs.list {
                        shared.send_initial(subscriber, state.clone());
                    }
                    info!(resource = %shared.resource, objects = state.len(), "listed");
                }
                drop(subs);
                shared.set_synced(true);
            }
            Event::Apply(obj) => {
                let mut subs = shared.lock_subscribers();
                let previous = shared.store.get_like(obj);
                shared.store.apply(&event);
                let stored = shared
                    .store
                    .get_like(obj)
                    .unwrap_or_else(|| Arc::new(obj.clone()));
                shared.broadcast(&mut subs, vec![(Change::Applied(stored), previous)]);
            }
            Event::Delete(obj) => {
                let mut subs = shared.lock_subscribers();
                let previous = shared.store.get_like(obj);
                shared.store.apply(&event);
                shared.broadcast(
                    &mut subs,
                    vec![(Change::Deleted(Arc::new(obj.clone())), previous)],
                );
            }
        }
        if matches!(event, Event::Apply(_) | Event::Delete(_)) {
            shared
                .metrics
                .objects
                .get_or_create(&shared.labels)
                .set(i64::try_from(shared.store.len()).unwrap_or(i64::MAX));
        }
        // While re-listing the kind is not synced (readiness says so).
        if matches!(event, Event::Init) && listed_once {
            shared.set_synced(false);
        }
    }
    // `watcher` streams never end; if this one did, readiness says so from now on.
    warn!(resource = %shared.resource, "watch stream ended");
    shared.set_synced(false);
}

/// The changes of one subscriber. A [`Stream`] of [`Change`]s that never ends while the informer
/// runs.
pub struct Subscription<K> {
    rx: mpsc::UnboundedReceiver<Message<K>>,
    /// The initial state being handed out, and how much of it was.
    initial: Option<(Arc<dyn Snapshot<K>>, usize)>,
    stats: Arc<SubscriberStats>,
    epoch: Instant,
}

impl<K> Debug for Subscription<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.stats.name)
            .field("queued", &self.stats.queued.load(Ordering::Relaxed))
            .finish()
    }
}

impl<K> Subscription<K> {
    /// The next change; `None` only when the informer is gone.
    pub async fn recv(&mut self) -> Option<Change<K>> {
        self.recv_with_previous().await.map(|(change, _)| change)
    }

    /// The next change and the state the store held before it: for [`Change::Applied`] the
    /// object's previous version (`None` when it is new), for [`Change::Deleted`] its last known
    /// state, for the initial state `None`. A subscriber that needs to compare with the previous
    /// version reads it here instead of keeping its own copy of every object.
    pub async fn recv_with_previous(&mut self) -> Option<WithPrevious<K>> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    fn poll_change(&mut self, cx: &mut Context<'_>) -> Poll<Option<WithPrevious<K>>> {
        loop {
            if let Some((state, next)) = self.initial.as_mut() {
                let change = match state.get(*next) {
                    Some(obj) => {
                        *next += 1;
                        Change::Initial(obj.clone())
                    }
                    None => {
                        self.initial = None;
                        Change::InitDone
                    }
                };
                self.record_read(true);
                return Poll::Ready(Some((change, None)));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Message::Snapshot(state))) => self.initial = Some((state, 0)),
                Poll::Ready(Some(Message::Change(change, previous))) => {
                    self.record_read(true);
                    return Poll::Ready(Some((change, previous)));
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn record_read(&self, got: bool) {
        if got {
            self.stats.queued.fetch_sub(1, Ordering::AcqRel);
            let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.stats.progress_ms.store(ms, Ordering::Release);
        }
    }

    /// The objects touched by each change (initial, applied and deleted), for
    /// `Controller::for_shared_stream` and `Controller::watches_shared_stream`. A deleted object
    /// carries a `deletionTimestamp` (set to now when the API server sent none), so mappers can
    /// tell it from a live one.
    pub fn touched(self) -> impl Stream<Item = Arc<K>> + Send + 'static
    where
        K: Resource + Clone + Send + Sync + 'static,
    {
        touched(self)
    }
}

impl<K> Subscription<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// [`Subscription::touched`], with a kube [`Store`] of the objects `keep` accepts, for a
    /// `Controller` over a subset of a kind kept in a [`MetaStore`] (say, the ConfigMaps with a
    /// given annotation). The store is updated before each object is yielded, so a reconcile
    /// the object triggers finds it; it is ready once the initial state is in.
    pub fn touched_keeping(
        self,
        keep: impl Fn(&K) -> bool + Send + 'static,
    ) -> (Store<K>, impl Stream<Item = Arc<K>> + Send + 'static) {
        let mut writer = kube::runtime::reflector::store::Writer::<K>::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        let stream = self.inspect(move |change| {
            let event = match change {
                Change::Initial(o) if keep(o) => Event::InitApply((**o).clone()),
                Change::InitDone => Event::InitDone,
                Change::Applied(o) if keep(o) => Event::Apply((**o).clone()),
                Change::Applied(o) | Change::Deleted(o) => Event::Delete((**o).clone()),
                _ => return,
            };
            writer.apply_watcher_event(&event);
        });
        (store, touched(stream))
    }
}

impl<K> Stream for Subscription<K> {
    type Item = Change<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_change(cx)
            .map(|item| item.map(|(change, _previous)| change))
    }
}

fn touched<K>(
    changes: impl Stream<Item = Change<K>> + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
{
    changes.filter_map(|change| async move {
        match change {
            Change::Initial(o) | Change::Applied(o) => Some(o),
            Change::Deleted(o) if o.meta().deletion_timestamp.is_some() => Some(o),
            Change::Deleted(o) => {
                let mut gone = (*o).clone();
                gone.meta_mut().deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    ));
                Some(Arc::new(gone))
            }
            Change::InitDone => None,
        }
    })
}

/// Whether a watch error means the API server does not serve the kind (404 on list or watch).
fn not_served(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
