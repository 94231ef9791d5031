//! The async kube glue (feature `runtime`): what another controller embeds to get conflux's
//! behaviour, not only its data structures. Modelled on kubert: one [`Runtime`] owns the client,
//! the shared watches with their re-list and backoff handling, health and watch metrics; the
//! controllers are fed by its streams.
//!
//! - [`informer`]: one fault-tolerant watch per kind, fanned out to every subscriber, with
//!   re-lists diffed so nothing is lost.
//! - [`configs`]: the one metadata-only watch of ConfigMaps and one of Secrets per process.
//! - [`trigger`]: Flux's watch-configs behaviour as a stream: config change → the referrers to
//!   reconcile, with the first-list baseline and both trigger modes.
//! - [`flux`]: the flux-trigger executor (`reconcile.fluxcd.io/requestedAt` on Flux objects).
//! - [`health`]: readiness and liveness as a tree of named parts.
//! - [`events`]: Kubernetes Events, and API calls bounded in time.
//! - [`leader`]: leader election on a Lease; only the leader's term client writes.

pub mod configs;
pub mod events;
pub mod flux;
pub mod health;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod trigger;

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, Resource};

pub use configs::ConfigWatches;
pub use health::{Health, Probe};
pub use informer::{Change, Informer, Subscription, Watched};
pub use metrics::WatchMetrics;

/// Default bound after which a subscriber that leaves events unread fails liveness.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(300);

/// How a watch gets the objects that exist when it starts (kube-runtime's
/// `InitialListStrategy`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialList {
    /// A paginated LIST, then a WATCH from its resourceVersion: every API server has it.
    ListWatch,
    /// One WATCH that streams the existing objects first (`sendInitialEvents`, the API server's
    /// WatchList feature: on by default in Kubernetes 1.32 and from 1.34, off in 1.33): no LIST
    /// response is held in memory at once on either side. Slightly smaller in the scale run
    /// (docs/benchmarks.md).
    #[default]
    StreamingList,
}

impl InitialList {
    /// `config` with this strategy.
    pub fn apply(self, config: watcher::Config) -> watcher::Config {
        match self {
            InitialList::ListWatch => config,
            InitialList::StreamingList => config.streaming_lists(),
        }
    }
}

/// The process-wide runtime: one client, the watch metrics, the health tree. Cheap to clone.
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
    /// The watches started through this runtime; stopped when the last handle goes.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// For a leadership term: the health tree its own node hangs in.
    parent_health: Option<Arc<Health>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
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
    /// A runtime over `client`. Register [`Runtime::metrics`] in the process's registry.
    pub fn new(client: Client) -> Self {
        Runtime::with_parts(
            client,
            Arc::new(WatchMetrics::default()),
            Arc::new(Health::new("conflux")),
            DEFAULT_STALL_AFTER,
            InitialList::default(),
            None,
        )
    }

    /// The same runtime with another initial-list strategy for every watch it starts.
    ///
    /// Call it before starting watches: watches started through the old handle stop with it.
    pub fn with_initial_list(self, initial_list: InitialList) -> Self {
        let inner = &self.inner;
        Runtime::with_parts(
            inner.client.clone(),
            inner.metrics.clone(),
            inner.health.clone(),
            inner.stall_after,
            initial_list,
            None,
        )
    }

    /// The same runtime with another stall bound (liveness fails after a subscriber left events
    /// unread this long).
    ///
    /// Call it before starting watches: watches started through the old handle stop with it.
    pub fn with_stall_after(self, stall_after: Duration) -> Self {
        let inner = &self.inner;
        Runtime::with_parts(
            inner.client.clone(),
            inner.metrics.clone(),
            inner.health.clone(),
            stall_after,
            inner.initial_list,
            None,
        )
    }

    /// A runtime for one leadership term ([`leader::run_elected`]): `client` (the term's, which
    /// stops writing when the term ends), the same metrics and stall bound, its own health node
    /// (under `leader` in this runtime's tree) and its own watches, all stopped by
    /// [`Runtime::end`].
    pub fn term(&self, client: Client) -> Runtime {
        let health = Arc::new(Health::new("leader"));
        self.inner.health.attach(health.clone());
        Runtime::with_parts(
            client,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
            self.inner.initial_list,
            Some(self.inner.health.clone()),
        )
    }

    /// Stops the watches started through this runtime and, for a term, removes its health node.
    /// Handles that outlive it keep a runtime whose watches are gone.
    pub fn end(&self) {
        for task in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        if let Some(parent) = &self.inner.parent_health {
            parent.detach(&self.inner.health);
        }
    }

    fn with_parts(
        client: Client,
        metrics: Arc<WatchMetrics>,
        health: Arc<Health>,
        stall_after: Duration,
        initial_list: InitialList,
        parent_health: Option<Arc<Health>>,
    ) -> Runtime {
        Runtime {
            inner: Arc::new(Inner {
                client,
                metrics,
                health,
                stall_after,
                initial_list,
                tasks: Mutex::new(Vec::new()),
                parent_health,
            }),
        }
    }

    /// The one client of the process.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The watch metrics (register them once).
    pub fn metrics(&self) -> &Arc<WatchMetrics> {
        &self.inner.metrics
    }

    /// The root of the health tree.
    pub fn health(&self) -> &Arc<Health> {
        &self.inner.health
    }

    /// The stall bound of liveness.
    pub fn stall_after(&self) -> Duration {
        self.inner.stall_after
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
        let informer = Informer::spawn(
            api,
            self.inner.initial_list.apply(config),
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.own(informer.task());
        informer
    }

    /// Stops `task` when the last handle of this runtime goes.
    pub fn own(&self, task: &tokio::task::AbortHandle) {
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.clone());
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
        let informer = Informer::spawn_with(
            api,
            self.inner.initial_list.apply(config),
            dyntype,
            resource,
            self.inner.metrics.clone(),
            health,
            self.inner.stall_after,
        );
        self.own(informer.task());
        informer
    }
}

/// Exponential backoff for start-up steps that must not make the process exit (discovery, first
/// reads): 0.5 s doubling to 30 s.
#[derive(Debug, Clone)]
pub struct StartupBackoff {
    next: Duration,
}

impl Default for StartupBackoff {
    fn default() -> Self {
        StartupBackoff {
            next: Duration::from_millis(500),
        }
    }
}

impl StartupBackoff {
    /// Sleeps the current delay and doubles it (up to 30 s).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(30));
    }
}

/// Waits until the API server says it is ready (`/readyz`, readable by every user), retrying
/// with backoff. Discovery right after an API server (re)start can miss groups and CRDs that it
/// serves a moment later; asking only once it is ready avoids taking that for the truth.
pub async fn wait_apiserver_ready(client: &Client, what: &str) {
    let mut backoff = StartupBackoff::default();
    let mut logged = false;
    loop {
        let request = http::Request::get("/readyz").body(Vec::new());
        let answer = match request {
            Ok(request) => events::bounded("asking /readyz", client.request_text(request)).await,
            // A constant request always builds; keep going rather than panic if it ever does not.
            Err(_) => return,
        };
        match answer {
            Ok(_) => return,
            Err(err) if !logged => {
                tracing::warn!(reason = err.reason(), error = %err, "{what}: the API server is not ready; waiting");
                logged = true;
            }
            Err(_) => {}
        }
        backoff.wait().await;
    }
}

/// `(namespace, name)` of an object.
pub fn object_id(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The watcher configuration for objects sharded by `selector` (`--watch-label-selector`).
pub fn sharded(selector: &crate::selector::Selector) -> watcher::Config {
    let wc = watcher::Config::default();
    if selector.is_empty() {
        wc
    } else {
        wc.labels(&selector.to_string())
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): what a controller in a Pod stops on.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
