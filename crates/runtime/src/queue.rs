//! The one work queue of every conflux controller: keyed, coalescing, debounced with a
//! deadline, rate-limited and bounded in concurrency, and started once the watches it needs have
//! delivered their initial state.
//!
//! A controller adds keys (an object to reconcile) from its watch streams; the queue hands each
//! due key to the controller's handler, at most once at a time per key, and the handler says what
//! comes next ([`Next`]). What it adds up to (client-go's workqueue and kube-runtime's scheduler,
//! with one more rule for bursts):
//!
//! - **Coalescing.** A key is pending at most once; adding it again merges the payloads
//!   ([`Payload`]). A key added while its handler runs is handed out again after it returns,
//!   never to two handlers at once.
//! - **Now, or debounced with a leading edge.** [`WorkQueue::add`] makes a key due at once.
//!   [`WorkQueue::debounce`] is for changes that come in bursts (a config written several times,
//!   a ConfigMap and a Secret applied together): the first change to a quiet key is due after a
//!   short settle ([`Window::settle`], tens of milliseconds), so a lone change is handled at once;
//!   while the key is held after the handler acted ([`Next::Hold`]), further changes are coalesced
//!   into one trailing run, due once they stop for [`Window::quiet`], but never later than
//!   [`Window::deadline`] after the first of them.
//! - **Retries** back off per key ([`Policy`]), and are forgotten once the handler succeeds.
//! - **Rate and concurrency.** At most [`QueueConfig::concurrency`] keys are handled at once, and
//!   dispatches pass an optional rate limit ([`Limit`], on the maintained `governor` crate).
//! - **Start.** [`WorkQueue::run`] hands nothing out before its [`Gate`] opens: each watch the
//!   controller needs opens its part once its initial state is in, so the first decisions see
//!   complete caches.
//!
//! The queue state is plain data driven by the caller's clock ([`Schedule`], tested without
//! waiting); [`WorkQueue`] adds the tasks, the wake-ups and the metrics.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::backoff::Policy;
use crate::health::{Health, Probe};
use crate::sync::lock;

/// What a pending key carries to its handler: merged when the key is added again while pending.
pub trait Payload: Default + Send + 'static {
    /// Takes `other` in (the newer addition).
    fn merge(&mut self, other: Self);
}

impl Payload for () {
    fn merge(&mut self, _other: Self) {}
}

impl<T: Ord + Send + 'static> Payload for BTreeSet<T> {
    fn merge(&mut self, other: Self) {
        self.extend(other);
    }
}

/// The timing of a debounced key ([`WorkQueue::debounce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// How long the first change to a quiet key waits for its companions (a ConfigMap and a
    /// Secret applied together): tens of milliseconds.
    pub settle: Duration,
    /// While the key is held, how long changes must stop before the trailing run.
    pub quiet: Duration,
    /// The latest the trailing run may be, counted from the first change it coalesces.
    pub deadline: Duration,
}

/// What the handler says comes next for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Next {
    /// Done; failures are forgotten.
    Done,
    /// Done, and the handler acted (say, rolled a workload): changes in the next `Duration` are
    /// coalesced into one trailing run instead of each being handled on arrival.
    Hold(Duration),
    /// Failed: handled again after the key's next backoff delay.
    Retry,
    /// Not now (throttled, or waiting for something): handled again after this long, with its
    /// payload; failures are kept.
    After(Duration),
}

/// Settings of a queue.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// The name in metrics, logs and readiness (`reload`, `flux-trigger`, ...).
    pub name: String,
    /// Keys handled at once (at least 1).
    pub concurrency: usize,
    /// Dispatches per second, and the burst allowed at once; `None`: unlimited.
    pub rate: Option<(NonZeroU32, NonZeroU32)>,
    /// The backoff of [`Next::Retry`].
    pub retry: Policy,
}

impl QueueConfig {
    /// A queue named `name` handling `concurrency` keys at once, without a rate limit, retrying
    /// with [`Policy::RECONCILE`].
    pub fn new(name: &str, concurrency: usize) -> Self {
        QueueConfig {
            name: name.to_owned(),
            concurrency: concurrency.max(1),
            rate: None,
            retry: Policy::RECONCILE,
        }
    }
}

/// A rate limit (GCRA, from `governor`): `per_second` on average, `burst` at once.
#[derive(Debug)]
pub struct Limit {
    limiter: DefaultDirectRateLimiter,
}

impl Limit {
    /// `per_second` permits a second on average, up to `burst` at once.
    pub fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        Limit {
            limiter: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
        }
    }

    /// A limit from a rate that may be fractional or unlimited (`<= 0` or not finite: `None`).
    pub fn per_second_f64(rate: f64, burst: u32) -> Option<Self> {
        if !rate.is_finite() || rate <= 0.0 {
            return None;
        }
        let burst = NonZeroU32::new(burst.max(1))?;
        let period = Duration::try_from_secs_f64(1.0 / rate).ok()?;
        let quota = Quota::with_period(period)?.allow_burst(burst);
        Some(Limit {
            limiter: RateLimiter::direct(quota),
        })
    }

    /// Takes a permit, or says how long until one is free.
    pub fn check(&self) -> Result<(), Duration> {
        self.limiter.check().map_err(|not_until| {
            not_until
                .wait_time_from(DefaultClock::default().now())
                .max(Duration::from_millis(1))
        })
    }
}

/// A start gate: closed until every named part opened. A controller makes one part per watch it
/// needs and opens it when that watch's initial state is in.
#[derive(Debug, Clone)]
pub struct Gate {
    tx: Arc<watch::Sender<BTreeSet<String>>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A gate with no parts (open until one is made).
    pub fn new() -> Self {
        Gate {
            tx: Arc::new(watch::channel(BTreeSet::new()).0),
        }
    }

    /// A part the gate waits for, named for readiness (`watch Deployment`).
    pub fn part(&self, name: &str) -> Opening {
        let name = name.to_owned();
        self.tx.send_modify(|waiting| {
            waiting.insert(name.clone());
        });
        Opening {
            gate: self.clone(),
            name: Some(name),
        }
    }

    /// The parts not open yet.
    pub fn waiting_for(&self) -> Vec<String> {
        self.tx.borrow().iter().cloned().collect()
    }

    /// Whether every part opened.
    pub fn is_open(&self) -> bool {
        self.tx.borrow().is_empty()
    }

    /// Waits until every part opened.
    pub async fn opened(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(BTreeSet::is_empty).await;
    }
}

/// One part of a [`Gate`]; [`Opening::open`] opens it (dropping it does not).
#[derive(Debug)]
pub struct Opening {
    gate: Gate,
    name: Option<String>,
}

impl Opening {
    /// Opens this part (again: a no-op).
    pub fn open(&mut self) {
        if let Some(name) = self.name.take() {
            self.gate.tx.send_modify(|waiting| {
                waiting.remove(&name);
            });
        }
    }
}

/// Labels of a queue's metrics (client-go's workqueue metrics are labelled `name` too).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name.
    pub name: String,
}

/// Metrics of every queue of the process, after client-go's `workqueue_*`.
#[derive(Debug, Default)]
pub struct QueueMetrics {
    /// `workqueue_depth`: keys pending.
    pub depth: Family<QueueLabels, Gauge>,
    /// `workqueue_in_flight`: keys being handled.
    pub in_flight: Family<QueueLabels, Gauge>,
    /// `workqueue_adds_total`: additions (coalesced ones included).
    pub adds: Family<QueueLabels, Counter>,
    /// `workqueue_retries_total`: handlers that asked for a retry with backoff.
    pub retries: Family<QueueLabels, Counter>,
    /// `workqueue_handled_total`: handler runs.
    pub handled: Family<QueueLabels, Counter>,
}

impl QueueMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_depth",
            "Keys waiting in each controller's queue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_in_flight",
            "Keys being handled by each controller",
            self.in_flight.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Keys added to each controller's queue, coalesced ones included",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Handler runs that failed and were retried with backoff",
            self.retries.clone(),
        );
        registry.register(
            "workqueue_handled",
            "Handler runs of each controller's queue",
            self.handled.clone(),
        );
    }
}

/// How a pending key became due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timing {
    /// Added to run now (or after a delay): an earlier addition pulls it in.
    Now,
    /// The first change to a quiet key, waiting for its companions.
    Leading,
    /// Changes to a held key, coalesced until they stop (or the deadline).
    Trailing,
}

/// One pending key.
#[derive(Debug)]
struct Pending<V> {
    due: Instant,
    /// The latest a trailing run may be moved to.
    deadline: Instant,
    timing: Timing,
    payload: V,
}

/// The queue's state: plain data driven by the caller's clock.
#[derive(Debug)]
pub struct Schedule<K, V> {
    pending: HashMap<K, Pending<V>>,
    /// Keys being handled.
    running: BTreeSet<K>,
    /// Keys held after acting: changes before this instant are coalesced.
    held: HashMap<K, Instant>,
    /// Consecutive failures per key.
    failures: HashMap<K, u32>,
    retry: Policy,
}

impl<K: Hash + Eq + Ord + Clone, V: Payload> Schedule<K, V> {
    /// An empty schedule retrying with `retry`.
    pub fn new(retry: Policy) -> Self {
        Schedule {
            pending: HashMap::new(),
            running: BTreeSet::new(),
            held: HashMap::new(),
            failures: HashMap::new(),
            retry,
        }
    }

    /// The instant a key held after acting may run again.
    fn hold_of(&self, key: &K, now: Instant) -> Option<Instant> {
        self.held.get(key).copied().filter(|until| *until > now)
    }

    /// `key` is due at `now`, or when its hold ends. A debounced key keeps its time (a change of
    /// something else never pulls a burst's window in).
    pub fn add(&mut self, key: K, payload: V, now: Instant) {
        let due = self.hold_of(&key, now).unwrap_or(now);
        self.add_at(key, payload, due);
    }

    /// `key` is due at `due` at the latest: an earlier time of a key added this way is kept, a
    /// later one pulled in; a debounced key keeps its time.
    pub fn add_at(&mut self, key: K, payload: V, due: Instant) {
        match self.pending.get_mut(&key) {
            Some(p) => {
                p.payload.merge(payload);
                if p.timing == Timing::Now {
                    p.due = p.due.min(due);
                }
            }
            None => {
                self.pending.insert(
                    key,
                    Pending {
                        due,
                        deadline: due,
                        timing: Timing::Now,
                        payload,
                    },
                );
            }
        }
    }

    /// A change to `key` that may come in a burst (see [`Window`]).
    pub fn debounce(&mut self, key: K, payload: V, window: Window, now: Instant) {
        let hold = self.hold_of(&key, now);
        let busy = hold.is_some() || self.running.contains(&key);
        let trailing_due = (now + window.quiet).max(hold.unwrap_or(now));
        match self.pending.get_mut(&key) {
            // Every change moves a trailing run, up to the deadline of the first.
            Some(p) if p.timing == Timing::Trailing => {
                p.payload.merge(payload);
                p.due = p.due.max(trailing_due).min(p.deadline.max(p.due));
            }
            Some(p) if busy => {
                p.payload.merge(payload);
                p.timing = Timing::Trailing;
                p.due = p.due.max(trailing_due);
                p.deadline = (now + window.deadline).max(p.due);
            }
            // The first change of a quiet key: its companions join it.
            Some(p) => {
                p.payload.merge(payload);
                p.due = p.due.min(now + window.settle);
                if p.timing == Timing::Now {
                    p.timing = Timing::Leading;
                }
            }
            None if busy => {
                self.pending.insert(
                    key,
                    Pending {
                        due: trailing_due,
                        deadline: (now + window.deadline).max(trailing_due),
                        timing: Timing::Trailing,
                        payload,
                    },
                );
            }
            None => {
                let due = now + window.settle;
                self.pending.insert(
                    key,
                    Pending {
                        due,
                        deadline: due,
                        timing: Timing::Leading,
                        payload,
                    },
                );
            }
        }
    }

    /// Forgets `key` (its object is gone): pending work, hold and failures.
    pub fn remove(&mut self, key: &K) {
        self.pending.remove(key);
        self.held.remove(key);
        self.failures.remove(key);
    }

    /// Keys pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no key is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Keys being handled.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether `key` is pending.
    pub fn contains(&self, key: &K) -> bool {
        self.pending.contains_key(key)
    }

    /// When `key` is due, if it is pending.
    pub fn due(&self, key: &K) -> Option<Instant> {
        self.pending.get(key).map(|p| p.due)
    }

    /// Takes up to `max` keys due at `now` (earliest first) that are not being handled, and
    /// marks them running.
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<(K, V)> {
        let mut due: Vec<(Instant, K)> = self
            .pending
            .iter()
            .filter(|(k, p)| p.due <= now && !self.running.contains(*k))
            .map(|(k, p)| (p.due, k.clone()))
            .collect();
        due.sort();
        due.truncate(max);
        due.into_iter()
            .filter_map(|(_, k)| {
                let p = self.pending.remove(&k)?;
                self.running.insert(k.clone());
                Some((k, p.payload))
            })
            .collect()
    }

    /// Puts back a key taken by [`Schedule::take_due`] but not handled (throttled), due at `due`.
    fn put_back(&mut self, key: K, payload: V, due: Instant) {
        self.running.remove(&key);
        self.add_at(key, payload, due);
    }

    /// When the next key not being handled is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter(|(k, _)| !self.running.contains(*k))
            .map(|(_, p)| p.due)
            .min()
    }

    /// The handler of `key` (taken with `payload`) finished at `now` with `next`.
    pub fn finish(&mut self, key: K, payload: V, next: Next, now: Instant) {
        self.running.remove(&key);
        self.held.retain(|_, until| *until > now);
        match next {
            Next::Done => {
                self.failures.remove(&key);
            }
            Next::Hold(d) => {
                self.failures.remove(&key);
                let until = now + d;
                self.held.insert(key.clone(), until);
                // What arrived while it ran joins the trailing run.
                if let Some(p) = self.pending.get_mut(&key) {
                    p.due = p.due.max(until);
                    p.deadline = p.deadline.max(p.due);
                    if p.timing == Timing::Leading {
                        p.timing = Timing::Trailing;
                    }
                }
            }
            Next::Retry => {
                let n = self.failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                let delay = self.retry.delay(*n);
                self.add_at(key, payload, now + delay);
            }
            Next::After(d) => self.add_at(key, payload, now + d),
        }
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

struct Shared<K, V> {
    config: QueueConfig,
    schedule: Mutex<Schedule<K, V>>,
    wake: Notify,
    limit: Option<Limit>,
    gate: Gate,
    metrics: Arc<QueueMetrics>,
    labels: QueueLabels,
}

/// A keyed work queue (see the [module docs](self)). Cheap to clone; clones share the queue.
pub struct WorkQueue<K, V = ()> {
    shared: Arc<Shared<K, V>>,
}

impl<K, V> Clone for WorkQueue<K, V> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for WorkQueue<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.config.name)
            .finish_non_exhaustive()
    }
}

impl<K, V> WorkQueue<K, V>
where
    K: Hash + Eq + Ord + Clone + Send + Sync + 'static,
    V: Payload,
{
    /// A queue with `config`, reporting to `metrics`, that starts once `gate` opens.
    pub fn new(config: QueueConfig, gate: Gate, metrics: Arc<QueueMetrics>) -> Self {
        let limit = config.rate.map(|(rate, burst)| Limit::new(rate, burst));
        let labels = QueueLabels {
            name: config.name.clone(),
        };
        WorkQueue {
            shared: Arc::new(Shared {
                schedule: Mutex::new(Schedule::new(config.retry)),
                config,
                wake: Notify::new(),
                limit,
                gate,
                metrics,
                labels,
            }),
        }
    }

    /// The start gate.
    pub fn gate(&self) -> &Gate {
        &self.shared.gate
    }

    fn with<T>(&self, f: impl FnOnce(&mut Schedule<K, V>) -> T) -> T {
        let mut schedule = lock(&self.shared.schedule);
        let out = f(&mut schedule);
        let depth = i64::try_from(schedule.len()).unwrap_or(i64::MAX);
        drop(schedule);
        self.shared
            .metrics
            .depth
            .get_or_create(&self.shared.labels)
            .set(depth);
        self.shared.wake.notify_one();
        out
    }

    fn count_add(&self) {
        self.shared
            .metrics
            .adds
            .get_or_create(&self.shared.labels)
            .inc();
    }

    /// Makes `key` due now (or when its hold ends), with `payload`.
    pub fn add(&self, key: K, payload: V) {
        self.count_add();
        self.with(|s| s.add(key, payload, Instant::now()));
    }

    /// Makes `key` due after `delay` at the latest.
    pub fn add_after(&self, key: K, payload: V, delay: Duration) {
        self.count_add();
        self.with(|s| s.add_at(key, payload, Instant::now() + delay));
    }

    /// A change to `key` that may come in a burst (see [`Window`]).
    pub fn debounce(&self, key: K, payload: V, window: Window) {
        self.count_add();
        self.with(|s| s.debounce(key, payload, window, Instant::now()));
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &K) {
        self.with(|s| s.remove(key));
    }

    /// Keys pending.
    pub fn len(&self) -> usize {
        lock(&self.shared.schedule).len()
    }

    /// Whether no key is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is pending.
    pub fn contains(&self, key: &K) -> bool {
        lock(&self.shared.schedule).contains(key)
    }

    /// Adds a readiness check named `queue` under `health`: not ready while the gate waits.
    pub fn report(&self, health: &Health) {
        let gate = self.shared.gate.clone();
        health.check("queue", move || {
            let waiting = gate.waiting_for();
            if waiting.is_empty() {
                Probe::ok()
            } else {
                Probe::not_ready(format!("waiting for {}", waiting.join(", ")))
            }
        });
    }

    /// Waits for the gate, then for the next due keys (at most `max`, passing the rate limit),
    /// marked running. Returns them with the time they were taken.
    async fn next_due(&self, max: usize) -> Vec<(K, V)> {
        self.shared.gate.opened().await;
        loop {
            let now = Instant::now();
            let (due, next) = {
                let mut schedule = lock(&self.shared.schedule);
                let limit = match &self.shared.limit {
                    Some(_) => max.min(1),
                    None => max,
                };
                let mut due = schedule.take_due(now, limit);
                if let (Some(limit), Some((key, _))) = (&self.shared.limit, due.first())
                    && let Err(wait) = limit.check()
                {
                    // Throttled: put it back untouched, try again when a permit is free.
                    let key = key.clone();
                    if let Some((_, payload)) = due.pop() {
                        schedule.put_back(key, payload, now + wait);
                    }
                }
                (due, schedule.next_due())
            };
            if !due.is_empty() {
                return due;
            }
            let sleep = next.unwrap_or_else(|| now + Duration::from_secs(3600));
            tokio::select! {
                () = self.shared.wake.notified() => {}
                () = tokio::time::sleep_until(sleep) => {}
            }
        }
    }

    fn finish(&self, key: K, payload: V, next: Next) {
        let m = &self.shared.metrics;
        m.handled.get_or_create(&self.shared.labels).inc();
        if next == Next::Retry {
            m.retries.get_or_create(&self.shared.labels).inc();
        }
        self.with(|s| s.finish(key, payload, next, Instant::now()));
    }

    fn set_in_flight(&self, n: usize) {
        self.shared
            .metrics
            .in_flight
            .get_or_create(&self.shared.labels)
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Hands every due key to `handler`, at most [`QueueConfig::concurrency`] at once, forever
    /// (run it on a task of the controller's runtime). The handler gets the key and its merged
    /// payload, and returns what comes next.
    pub async fn run<F, Fut>(self, mut handler: F)
    where
        F: FnMut(K, &V) -> Fut,
        Fut: Future<Output = Next>,
    {
        let concurrency = self.shared.config.concurrency.max(1);
        let mut running = FuturesUnordered::new();
        loop {
            self.set_in_flight(running.len());
            if running.len() >= concurrency {
                if let Some((key, payload, next)) = running.next().await {
                    self.finish(key, payload, next);
                }
                continue;
            }
            tokio::select! {
                due = self.next_due(concurrency - running.len()) => {
                    for (key, payload) in due {
                        let fut = handler(key.clone(), &payload);
                        running.push(async move { (key, payload, fut.await) });
                    }
                }
                Some((key, payload, next)) = running.next(), if !running.is_empty() => {
                    self.finish(key, payload, next);
                }
            }
        }
    }

    /// Hands the due keys to `handler` in batches of at most `max` (one batch at a time), forever.
    /// For controllers whose work shares reads across keys (one read of a config for every
    /// workload that consumes it); the handler answers each key of the batch.
    pub async fn run_batches<F, Fut>(self, max: usize, mut handler: F)
    where
        F: FnMut(Vec<(K, V)>) -> Fut,
        Fut: Future<Output = Vec<(K, V, Next)>>,
    {
        loop {
            let batch = self.next_due(max.max(1)).await;
            self.set_in_flight(batch.len());
            let mut unanswered: BTreeSet<K> = batch.iter().map(|(k, _)| k.clone()).collect();
            for (key, payload, next) in handler(batch).await {
                if unanswered.remove(&key) {
                    self.finish(key, payload, next);
                }
            }
            // A key the handler did not answer is done (it must not stay running forever).
            for key in unanswered {
                self.finish(key, V::default(), Next::Done);
            }
            self.set_in_flight(0);
        }
    }
}

#[cfg(test)]
mod tests;
