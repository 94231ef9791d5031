//! The process machinery of conflux controllers, in one place: what an embedder takes to run the
//! `copy-core`, `reloader` and `watch-index` controllers, or its own, the way the `conflux`
//! binary does. Modelled on kubert's split (admin, client, lease, server, shutdown).
//!
//! - [`Runtime`]: one client, the watch metrics, the health tree and the owned tasks of the
//!   process or of one leadership term.
//! - [`client`]: the client's timeouts as a layer, requests named for errors, waiting for the
//!   API server.
//! - [`configs`]: the one metadata-only watch of ConfigMaps and one of Secrets, shared by every
//!   controller of the process.
//! - [`informer`]: one fault-tolerant watch per kind, fanned out to every subscriber, with
//!   re-lists diffed so nothing is lost; its objects kept whole (kube's store), as compact
//!   metadata ([`MetaStore`]) or as JSON text parsed when read ([`PackedStore`]).
//! - [`queue`]: the one work queue of every controller: keyed, coalescing, debounced with a
//!   leading edge and a deadline, rate-limited, bounded, started once its watches are in.
//! - [`health`]: readiness and liveness as a tree of named parts.
//! - [`lease`]: leader election on a Lease; only the leader's term writes, and its tasks end
//!   with the term.
//! - [`tasks`]: owned tasks, cancelled and awaited when their owner ends.
//! - [`backoff`]: the one retry policy (exponential, from `backon`).
//! - [`events`]: Kubernetes Events, and problems reported once.
//! - [`server`]: the HTTP(S) server with graceful shutdown; [`admin`]: its metrics and probe
//!   endpoints.
//! - [`shutdown`]: the stop signal.
#![doc = include_str!("../README.md")]

pub mod admin;
pub mod backoff;
pub mod client;
pub mod configs;
mod error;
pub mod events;
pub mod health;
pub mod informer;
mod initial_list;
pub mod lease;
pub mod meta_store;
pub mod metrics;
pub mod packed_store;
pub mod queue;
pub mod server;
pub mod shutdown;
pub mod sync;
pub mod tasks;
#[cfg(test)]
mod testing;

use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};

pub use configs::ConfigWatches;
pub use error::{ApiError, Error};
pub use health::{Health, Probe};
pub use informer::{Change, Informer, Subscription, Watched, WithPrevious};
pub use initial_list::InitialList;
pub use meta_store::{MetaStore, StoredMeta};
pub use metrics::WatchMetrics;
pub use packed_store::PackedStore;
pub use queue::{Gate, Next, QueueConfig, QueueMetrics, Window, WorkQueue};
pub use tasks::Tasks;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Default bound after which a subscriber that leaves events unread fails liveness.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(300);

/// The process-wide runtime: one client, the watch metrics, the health tree, and the tasks it
/// owns. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    metrics: Arc<WatchMetrics>,
    health: Arc<Health>,
    stall_after: Duration,
    initial_list: InitialList,
    /// Whether the API server refused a streaming list (shared by every runtime derived).
    refusals: initial_list::Refusals,
    /// The watches and tasks started through this runtime; cancelled when it ends or the last
    /// handle goes.
    tasks: Owner,
    /// For a leadership term: the health tree its own node hangs in.
    parent_health: Option<Arc<Health>>,
    /// The shared metadata watch of Namespaces, started by its first user.
    namespaces: OnceLock<Informer<PartialObjectMeta<Namespace>>>,
    /// The metrics of every work queue made through this runtime.
    queue_metrics: Arc<QueueMetrics>,
}

impl Inner {
    /// A runtime that shares this one's client, metrics, health node and stall bound, with
    /// `tasks` of its own and no parent.
    fn derived(&self, tasks: Tasks) -> Inner {
        Inner {
            client: self.client.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            stall_after: self.stall_after,
            initial_list: self.initial_list,
            refusals: self.refusals.clone(),
            tasks: Owner(tasks),
            parent_health: None,
            namespaces: OnceLock::new(),
            queue_metrics: self.queue_metrics.clone(),
        }
    }
}

impl From<Inner> for Runtime {
    fn from(inner: Inner) -> Self {
        Runtime {
            inner: Arc::new(inner),
        }
    }
}

/// The runtime's tasks stop when its last handle goes.
struct Owner(Tasks);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("stall_after", &self.stall_after)
            .field("initial_list", &self.initial_list)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over `client`, whose requests (but watches) it bounds with
    /// [`client::REQUEST_TIMEOUT`] and whose streaming lists it makes consistent reads
    /// ([`client::with_consistent_streaming_lists`]). Register [`Runtime::metrics`] and
    /// [`Runtime::queue_metrics`] in the process's registry.
    pub fn new(client: Client) -> Self {
        let client = client::with_consistent_streaming_lists(client);
        Runtime::from(Inner {
            client: client::with_timeouts(client, client::REQUEST_TIMEOUT),
            metrics: Arc::default(),
            health: Arc::new(Health::new("conflux")),
            stall_after: DEFAULT_STALL_AFTER,
            initial_list: InitialList::default(),
            refusals: initial_list::Refusals::default(),
            tasks: Owner(Tasks::new()),
            parent_health: None,
            namespaces: OnceLock::new(),
            queue_metrics: Arc::default(),
        })
    }

    /// The same runtime with another stall bound (liveness fails after a subscriber left events
    /// unread this long).
    ///
    /// Call it before starting watches: watches started through the old handle stop with it.
    pub fn with_stall_after(self, stall_after: Duration) -> Self {
        Runtime::from(Inner {
            stall_after,
            ..self.inner.derived(Tasks::new())
        })
    }

    /// The same runtime with another initial-list strategy for every watch it starts.
    ///
    /// Call it before starting watches: watches started through the old handle stop with it.
    pub fn with_initial_list(self, initial_list: InitialList) -> Self {
        Runtime::from(Inner {
            initial_list,
            ..self.inner.derived(Tasks::new())
        })
    }

    /// A runtime for one leadership term ([`lease::run_elected`]): `client` (the term's, which
    /// stops writing when the term ends), the same metrics and stall bound, its own health node
    /// (under `leader` in this runtime's tree) and its own tasks (a child set of this runtime's),
    /// all stopped by [`Runtime::end`].
    pub fn term(&self, client: Client) -> Runtime {
        let health = Arc::new(Health::new("leader"));
        self.inner.health.attach(health.clone());
        Runtime::from(Inner {
            client,
            health,
            parent_health: Some(self.inner.health.clone()),
            ..self.inner.derived(self.inner.tasks.0.child())
        })
    }

    /// Cancels the tasks started through this runtime and waits for them, at most `bound`
    /// (`true` when they all stopped); for a term, removes its health node. Handles that
    /// outlive it keep a runtime whose tasks are gone.
    pub async fn end(&self, bound: Duration) -> bool {
        let stopped = self.inner.tasks.0.shutdown(bound).await;
        if let Some(parent) = &self.inner.parent_health {
            parent.detach(&self.inner.health);
        }
        stopped
    }

    /// The watch of `api` with this runtime's initial-list strategy (a refused streaming list
    /// falls back to list-watch).
    fn watch<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
    ) -> futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        initial_list::watch(api, config, self.inner.initial_list, &self.inner.refusals)
    }

    /// The one client of the process (or of the term).
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The watch metrics (register them once).
    pub fn metrics(&self) -> &Arc<WatchMetrics> {
        &self.inner.metrics
    }

    /// The metrics of every work queue made by [`Runtime::queue`] (register them once).
    pub fn queue_metrics(&self) -> &Arc<QueueMetrics> {
        &self.inner.queue_metrics
    }

    /// A work queue reporting to this runtime's [`Runtime::queue_metrics`], handing out nothing
    /// before `gate` opens. Run it with [`WorkQueue::run`] on a task of this runtime
    /// ([`Runtime::spawn`]), so it ends with it.
    pub fn queue<K, V>(&self, config: QueueConfig, gate: Gate) -> WorkQueue<K, V>
    where
        K: Hash + Eq + Ord + Clone + Send + Sync + 'static,
        V: queue::Payload,
    {
        WorkQueue::new(config, gate, self.inner.queue_metrics.clone())
    }

    /// The root of the health tree.
    pub fn health(&self) -> &Arc<Health> {
        &self.inner.health
    }

    /// The stall bound of liveness.
    pub fn stall_after(&self) -> Duration {
        self.inner.stall_after
    }

    /// The tasks this runtime owns.
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks.0
    }

    /// Runs `future` as a task of this runtime: cancelled when the runtime ends.
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<Option<F::Output>>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.tasks.0.spawn(future)
    }

    /// The one metadata watch of Namespaces of this runtime (or term), shared by every controller
    /// that needs namespace labels; started on first use, its checks under that caller's
    /// `health`.
    pub fn namespaces(&self, health: &Health) -> Informer<PartialObjectMeta<Namespace>> {
        self.inner
            .namespaces
            .get_or_init(|| {
                self.informer(
                    Api::all(self.client()),
                    watcher::Config::default(),
                    "Namespace",
                    health,
                )
            })
            .clone()
    }

    /// Starts a shared watch of a kind with a static type; its checks go under `health`.
    pub fn informer<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        resource: &str,
        health: &Health,
    ) -> Informer<K>
    where
        K: Watched,
        K::DynamicType: Eq + Hash + Clone + Send + Sync + Default,
    {
        self.informer_with(api, config, K::DynamicType::default(), resource, health)
    }

    /// Starts a shared watch of a kind with a static type whose objects `trim` makes smaller
    /// before they are stored or delivered (fields no controller of the process reads: every
    /// byte kept here is kept once per object of the cluster).
    pub fn informer_trimmed<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        resource: &str,
        health: &Health,
        trim: impl FnMut(&mut K) + Send + 'static,
    ) -> Informer<K>
    where
        K: Watched,
        K::DynamicType: Eq + Hash + Clone + Send + Sync + Default,
    {
        let (informer, driver) = Informer::new(
            self.watch(api, config).modify(trim),
            K::DynamicType::default(),
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.spawn(driver);
        informer
    }

    /// Starts a shared metadata-only watch whose objects are kept in a compact [`MetaStore`]
    /// (for kinds with very many objects: ConfigMaps, Secrets); `trim` as in
    /// [`Runtime::informer_trimmed`].
    pub fn informer_compact<X>(
        &self,
        api: Api<kube::api::PartialObjectMeta<X>>,
        config: watcher::Config,
        resource: &str,
        health: &Health,
        trim: impl FnMut(&mut kube::api::PartialObjectMeta<X>) + Send + 'static,
    ) -> Informer<kube::api::PartialObjectMeta<X>, MetaStore<X>>
    where
        kube::api::PartialObjectMeta<X>: Watched,
        <kube::api::PartialObjectMeta<X> as Resource>::DynamicType:
            Eq + std::hash::Hash + Clone + Send + Sync + Default,
        X: 'static,
    {
        let (informer, driver) = Informer::new_compact(
            self.watch(api, config).modify(trim),
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.spawn(driver);
        informer
    }

    /// Starts a shared watch of a kind found by discovery whose objects `trim` makes smaller
    /// (see [`Runtime::informer_trimmed`]).
    pub fn informer_trimmed_with<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        dyntype: K::DynamicType,
        resource: &str,
        health: &Health,
        trim: impl FnMut(&mut K) + Send + 'static,
    ) -> Informer<K>
    where
        K: Watched + Resource,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let (informer, driver) = Informer::new(
            self.watch(api, config).modify(trim),
            dyntype,
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.spawn(driver);
        informer
    }

    /// [`Runtime::informer_trimmed_with`], keeping the objects as JSON text
    /// ([`PackedStore`]): for kinds with many objects read on a change only.
    pub fn informer_packed_with<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        resource: &str,
        health: &Health,
        trim: impl FnMut(&mut K) + Send + 'static,
    ) -> Informer<K, PackedStore<K>>
    where
        K: Watched + Resource + serde::Serialize,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let (informer, driver) = Informer::new_packed(
            self.watch(api, config).modify(trim),
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.spawn(driver);
        informer
    }

    /// Starts a shared watch of a kind found by discovery.
    pub fn informer_with<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        dyntype: K::DynamicType,
        resource: &str,
        health: &Health,
    ) -> Informer<K>
    where
        K: Watched + Resource,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        self.informer_trimmed_with(api, config, dyntype, resource, health, |_| {})
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_term_that_ends_cancels_and_awaits_its_tasks_within_a_bound() {
        let process = Runtime::new(testing::never_answering_client());
        let term = process.term(testing::never_answering_client());
        assert_eq!(
            process.health().problems(true).len(),
            1,
            "the term's node hangs in the tree"
        );
        let stopped = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let guard = testing::CountOnDrop(stopped.clone());
            term.spawn(async move {
                let _guard = guard;
                // A background retry that never succeeds.
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        let survivor = process.spawn(tokio::time::sleep(Duration::from_millis(100)));
        let started = std::time::Instant::now();
        assert!(
            term.end(Duration::from_secs(1)).await,
            "every task stopped in time"
        );
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(stopped.load(Ordering::SeqCst), 4);
        assert!(term.tasks().is_empty());
        assert!(
            process
                .health()
                .problems(true)
                .iter()
                .all(|p| !p.contains("leader"))
        );
        assert_eq!(
            survivor.await.ok(),
            Some(Some(())),
            "the process's tasks go on"
        );
    }
}
