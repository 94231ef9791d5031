//! Leader election on a `coordination.k8s.io/v1` Lease, with Flux's flags and defaults
//! (`--enable-leader-election`, `--leader-election-lease-duration` 35s, `…-renew-deadline` 30s,
//! `…-retry-period` 5s). The lease itself is kept by the maintained `kube-lease-manager` crate;
//! this module adds what a controller needs around it:
//!
//! - **Only the leader writes.** Each leadership term gets its own [`Client`] that shares the
//!   process's connection pool but refuses every write (anything but GET) once the term has
//!   ended. Tasks a controller spawned during the term are the term's ([`Runtime::spawn`]):
//!   cancelled and awaited when it ends, and refused at the client meanwhile, so losing the
//!   lease stops writing at once.
//! - **Losing the lease is noticed in time.** The term ends when the lease manager says so, when
//!   a renewal fails, when the Lease names another holder, or when the Lease could not be read
//!   for the renew deadline (a leader cut off from the API server steps down before its lease can
//!   expire and another replica takes over).
//! - **A new leader derives everything from the cluster.** The term's work is started afresh on
//!   every acquisition; conflux's controllers converge from cluster state, so nothing is lost or
//!   doubled across a handover.
//!
//! Replicas that are not leading keep their shared ConfigMap/Secret watches warm (they are
//! started outside the term) and stay ready.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::Runtime;
use crate::backoff::Policy;

/// Settings of the election, named after Flux's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease (the runtime namespace).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Who this replica is (`$POD_NAME`, else a unique hostname-based id: [`default_identity`]).
    pub identity: String,
    /// How long a lease stays valid after its last renewal (`--leader-election-lease-duration`).
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a confirmed lease before it steps down
    /// (`--leader-election-renew-deadline`).
    pub renew_deadline: Duration,
    /// How often the leader renews and the others try to acquire
    /// (`--leader-election-retry-period`).
    pub retry_period: Duration,
}

/// Flux's defaults: 35 s, 30 s, 5 s.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(35);
/// Flux's default renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(30);
/// Flux's default retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(5);

impl LeaderElectionConfig {
    /// A configuration with Flux's defaults and [`default_identity`].
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        LeaderElectionConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Checks the durations: whole seconds (the Lease counts in seconds), and
    /// retry period < renew deadline < lease duration, as client-go requires.
    pub fn validate(&self) -> crate::Result<()> {
        let invalid = |reason: &'static str| crate::Error::LeaderElection { reason };
        let secs = |d: Duration| d.as_secs() >= 1 && d.subsec_nanos() == 0;
        if !(secs(self.lease_duration) && secs(self.renew_deadline) && secs(self.retry_period)) {
            return Err(invalid("durations must be whole seconds, at least 1s"));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(invalid(
                "the renew deadline must be shorter than the lease duration",
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(invalid(
                "the retry period must be shorter than the renew deadline",
            ));
        }
        if self.namespace.is_empty() || self.name.is_empty() || self.identity.is_empty() {
            return Err(invalid(
                "the lease needs a namespace, a name and an identity",
            ));
        }
        Ok(())
    }
}

/// `$POD_NAME` when set; otherwise the host name with a random suffix, so two processes on one
/// host never share an identity.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "conflux".to_owned());
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded randomly per process: a unique suffix without a rand dependency.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{host}_{:016x}", hasher.finish())
}

/// `conflux_leader_election_master_status`: 1 while this replica leads (controller-runtime's
/// name for the same gauge).
#[derive(Debug, Default)]
pub struct LeaderMetrics {
    /// 1 while leading, else 0.
    pub master_status: Gauge,
}

impl LeaderMetrics {
    /// Registers the gauge.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leader_election_master_status",
            "1 while this replica holds the leader election lease",
            self.master_status.clone(),
        );
    }
}

/// Runs the election until `shutdown` resolves. Each time the lease is acquired, `lead` is
/// called with a [`Runtime`] whose client writes only during this term; the future it returns
/// runs until the lease is lost, then it is dropped, and the term's tasks and watches are
/// cancelled and awaited (at most a retry period). On shutdown a leader stops writing and releases the lease, so another replica takes
/// over at once instead of after the lease duration.
pub async fn run_elected<F, Fut>(
    runtime: Runtime,
    config: LeaderElectionConfig,
    metrics: Arc<LeaderMetrics>,
    shutdown: impl Future<Output = ()>,
    mut lead: F,
) where
    F: FnMut(Runtime) -> Fut,
    Fut: Future<Output = ()> + Send,
{
    let base = runtime.client();
    let health = runtime.health().part("leader-election");
    // A replica that is not leading serves probes and keeps its watches warm: it is ready.
    health.set_ready(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let manager = tokio::select! {
            manager = build_manager(&base, &config) => manager,
            () = &mut shutdown => return,
        };
        let acquired = tokio::select! {
            acquired = acquire(&manager, &config) => acquired,
            () = &mut shutdown => return,
        };
        if !acquired {
            continue;
        }
        info!(lease = %config.name, identity = %config.identity, "leader election: acquired the lease; starting the controllers");
        metrics.master_status.set(1);
        let open = Arc::new(AtomicBool::new(true));
        let term = runtime.term(term_client(base.clone(), open.clone()));
        let work = lead(term.clone());
        let (why, stopping) = tokio::select! {
            () = work => ("the controllers stopped", false),
            why = lost(&manager, &base, &config) => (why, false),
            () = &mut shutdown => ("shutting down", true),
        };
        // Stop writing before anything else: background tasks of the term hold its client.
        open.store(false, Ordering::SeqCst);
        metrics.master_status.set(0);
        // The term's tasks (retries, catch-ups, its watches) end with it.
        if !term.end(config.retry_period).await {
            warn!(lease = %config.name, "leader election: some tasks of the ended term did not stop in time");
        }
        if stopping {
            let released = tokio::time::timeout(config.retry_period, manager.release()).await;
            info!(lease = %config.name, released = matches!(released, Ok(Ok(()))), "leader election: stopped writing and released the lease");
            return;
        }
        warn!(lease = %config.name, identity = %config.identity, why, "leader election: no longer leading; stopped writing");
    }
}

async fn build_manager(client: &Client, config: &LeaderElectionConfig) -> LeaseManager {
    let mut backoff = Policy::STARTUP.backoff();
    let mut logged = false;
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), &config.name)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity)
            .with_duration(config.lease_duration.as_secs())
            // The holder renews one retry period after each renewal.
            .with_grace((config.lease_duration - config.retry_period).as_secs())
            // The field manager stays the crate's per-identity default: server-side apply's
            // conflicts between distinct managers are what make two holders impossible.
            .build();
        match tokio::time::timeout(config.renew_deadline, built).await {
            Ok(Ok(manager)) => return manager,
            Ok(Err(err)) if !logged => {
                warn!(lease = %config.name, error = %err, "leader election: cannot set up the lease; retrying");
                logged = true;
            }
            Err(_) if !logged => {
                warn!(lease = %config.name, "leader election: setting up the lease timed out; retrying");
                logged = true;
            }
            _ => {}
        }
        backoff.wait().await;
    }
}

/// Waits until this replica holds the lease; `false` when the manager failed (build a new one).
async fn acquire(manager: &LeaseManager, config: &LeaderElectionConfig) -> bool {
    loop {
        match manager.changed().await {
            Ok(true) => return true,
            Ok(false) => {}
            Err(err) => {
                warn!(lease = %config.name, error = %err, "leader election: lease error; retrying");
                tokio::time::sleep(config.retry_period).await;
                return false;
            }
        }
    }
}

/// Resolves, with the reason, once this replica may no longer count on holding the lease.
async fn lost(
    manager: &LeaseManager,
    client: &Client,
    config: &LeaderElectionConfig,
) -> &'static str {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let guard = async {
        let mut confirmed = Instant::now();
        loop {
            tokio::time::sleep(config.retry_period).await;
            let read = tokio::time::timeout(config.retry_period, leases.get_opt(&config.name));
            match read.await {
                Ok(Ok(Some(lease))) => {
                    let holder = lease.spec.and_then(|s| s.holder_identity);
                    if holder.as_deref() != Some(config.identity.as_str()) {
                        return "the lease names another holder";
                    }
                    confirmed = Instant::now();
                }
                Ok(Ok(None)) => return "the lease was deleted",
                _ if confirmed.elapsed() >= config.renew_deadline => {
                    return "the lease could not be confirmed within the renew deadline";
                }
                _ => {}
            }
        }
    };
    tokio::select! {
        changed = manager.changed() => match changed {
            Ok(_) => "the lease manager reported the lease lost",
            Err(_) => "renewing the lease failed",
        },
        why = guard => why,
    }
}

/// The client of one leadership term: every request goes to the process's client, writes only
/// while the term lasts (`open`).
fn term_client(client: Client, open: Arc<AtomicBool>) -> Client {
    crate::client::layered(client, move |client, request| {
        // Watches and reads go on after the term (they are GETs); anything else is a write.
        if request.method() != Method::GET && !open.load(Ordering::SeqCst) {
            return Box::pin(async { Err(kube::Error::Service(Box::new(NotLeader))) });
        }
        Box::pin(async move { client.send(request).await })
    })
}

/// A write refused because this replica no longer leads.
#[derive(Debug, thiserror::Error)]
#[error("not the leader any more: write refused")]
struct NotLeader;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_defaults_are_valid_and_bad_orders_are_refused() {
        let mut config = LeaderElectionConfig::new("conflux-system", "conflux-leader-election");
        config.identity = "me".into();
        assert_eq!(config.validate(), Ok(()));
        let mut bad = config.clone();
        bad.renew_deadline = bad.lease_duration;
        assert!(bad.validate().is_err());
        let mut bad = config.clone();
        bad.retry_period = Duration::from_millis(500);
        assert!(bad.validate().is_err());
        let mut bad = config;
        bad.retry_period = bad.renew_deadline;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn identities_are_unique_per_process_without_pod_name() {
        if std::env::var("POD_NAME").is_err() {
            assert_ne!(default_identity(), default_identity());
        }
    }
}
