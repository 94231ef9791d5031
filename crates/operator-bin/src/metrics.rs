//! Prometheus metrics of every controller, and the bind addresses of the admin endpoints (served
//! by `conflux_runtime::admin`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use conflux_copy_core::runtime::CopyMetrics;
use conflux_copy_core::runtime::protect::ProtectMetrics;
use conflux_reloader::runtime::ReloadMetrics;
use prometheus_client::registry::Registry;

use conflux_runtime::lease::LeaderMetrics;
use conflux_watch_index::runtime::flux_trigger::FluxMetrics;

/// Every metric conflux exports: the libraries' metric sets, registered under `conflux_`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// The flux-trigger's (`conflux_trigger_*`, `conflux_index_*`).
    pub flux: Arc<FluxMetrics>,
    /// The copy and sync controllers' (`conflux_copy_*`).
    pub copy: Arc<CopyMetrics>,
    /// The reload controller's (`conflux_reload_*`).
    pub reload: Arc<ReloadMetrics>,
    /// Leader election (`conflux_leader_election_master_status`).
    pub leader: Arc<LeaderMetrics>,
    /// The protect controller's (`conflux_protect_*`).
    pub protect: Arc<ProtectMetrics>,
}

impl Metrics {
    /// Registers every metric, the shared watches' (`conflux_watch_*`) and the work queues'
    /// (`conflux_workqueue_*`), under `conflux`.
    pub fn register(&self, runtime: &conflux_runtime::Runtime, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("conflux");
        runtime.metrics().register(sub);
        runtime.queue_metrics().register(sub);
        self.flux.register(sub);
        self.copy.register(sub);
        self.reload.register(sub);
        self.leader.register(sub);
        self.protect.register(sub);
    }
}

/// Parses a Flux-style bind address: `:8080` (all interfaces), `127.0.0.1:8080`, or `0` (off).
pub fn parse_bind_addr(flag: &str, value: &str) -> anyhow::Result<Option<SocketAddr>> {
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Ok(None);
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    };
    full.parse()
        .map(Some)
        .with_context(|| format!("invalid {flag} '{value}': expected [host]:port or 0 to disable"))
}
