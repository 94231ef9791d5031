//! Prometheus metrics, and the small HTTP endpoints for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Labels of a ConfigMap/Secret event seen by the flux-trigger controller.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigEventLabels {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// `create`, `update` or `delete`.
    pub event: String,
    /// `fire` when referrers were asked to reconcile, `skip` otherwise.
    pub decision: String,
}

/// Labels of a reconcile request written to a Flux object.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kind of the Flux object (`Kustomization`, `HelmRelease`, `Receiver`).
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels naming a watched resource.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The watched kind.
    pub resource: String,
}

/// Labels of a write (or decision not to write) made by the copy and sync controllers.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplyLabels {
    /// `copy` or `sync`.
    pub controller: String,
    /// What happened: `apply`, `recreate`, `create`, `update`, `delete`, `unchanged`, or the
    /// reason of a failure (`SourceNotFound`, `Refused`, `Conflict`, ...).
    pub result: String,
}

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

/// Every metric conflux exports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// `conflux_trigger_config_events_total`.
    pub config_events: Family<ConfigEventLabels, Counter>,
    /// `conflux_trigger_reconcile_requests_total`.
    pub reconcile_requests: Family<RequestLabels, Counter>,
    /// `conflux_watch_errors_total`.
    pub watch_errors: Family<ResourceLabels, Counter>,
    /// `conflux_index_referrers`.
    pub index_referrers: Gauge,
    /// `conflux_index_keys`.
    pub index_keys: Gauge,
    /// `conflux_copy_applies_total`.
    pub copy_applies: Family<ApplyLabels, Counter>,
    /// `conflux_reload_rollouts_total`.
    pub reload_rollouts: Family<RolloutLabels, Counter>,
    /// `conflux_reload_decisions_total`.
    pub reload_decisions: Family<DecisionLabels, Counter>,
    /// `conflux_reload_pending`.
    pub reload_pending: Gauge,
    /// `conflux_reload_workloads`.
    pub reload_workloads: Gauge,
}

impl Metrics {
    /// Registers every metric under the `conflux` prefix.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("conflux");
        sub.register(
            "trigger_config_events",
            "ConfigMap/Secret events seen by the flux-trigger controller",
            self.config_events.clone(),
        );
        sub.register(
            "trigger_reconcile_requests",
            "reconcile.fluxcd.io/requestedAt patches written to Flux objects",
            self.reconcile_requests.clone(),
        );
        sub.register(
            "watch_errors",
            "Errors of the watches conflux keeps (each is retried with backoff)",
            self.watch_errors.clone(),
        );
        sub.register(
            "index_referrers",
            "Objects in the reverse index that reference at least one ConfigMap/Secret",
            self.index_referrers.clone(),
        );
        sub.register(
            "index_keys",
            "Distinct ConfigMaps/Secrets referenced by indexed objects",
            self.index_keys.clone(),
        );
        sub.register(
            "copy_applies",
            "Copies written (or found in sync, or failed) by the copy and sync controllers",
            self.copy_applies.clone(),
        );
        sub.register(
            "reload_rollouts",
            "Rollouts written by the reload controller (pod-template hash changed)",
            self.reload_rollouts.clone(),
        );
        sub.register(
            "reload_decisions",
            "Reload evaluations by outcome (none, baseline, rollout, held, throttled, deferred)",
            self.reload_decisions.clone(),
        );
        sub.register(
            "reload_pending",
            "Workloads waiting for evaluation (coalescing window, throttle or retry)",
            self.reload_pending.clone(),
        );
        sub.register(
            "reload_workloads",
            "Opted-in workloads in the reload controller's index",
            self.reload_workloads.clone(),
        );
    }
}

/// Liveness and readiness as the HTTP endpoints report them.
///
/// Readiness is a tree: a `Health` with parts (one per controller, or per watched kind inside a
/// controller) is ready once every part is; one without parts once [`Health::set_ready`] was
/// called. So `/readyz` waits for the slowest initial list, not the first.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    parts: std::sync::Mutex<Vec<Arc<Health>>>,
}

impl Health {
    /// Marks this part ready (its initial lists are done).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// A new part that must be ready before this one is.
    pub fn part(&self) -> Arc<Health> {
        let part = Arc::new(Health::default());
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(part.clone());
        part
    }

    /// Whether this part (and every part below it) is ready.
    pub fn is_ready(&self) -> bool {
        let parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        if parts.is_empty() {
            self.ready.load(Ordering::Relaxed)
        } else {
            parts.iter().all(|part| part.is_ready())
        }
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

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/metrics`.
    Metrics,
    /// `/healthz` and `/readyz`.
    Health,
}

/// Binds `addr` and serves `endpoints` until the process ends. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    endpoints: Endpoints,
    registry: Arc<Registry>,
    health: Arc<Health>,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                continue;
            };
            let registry = registry.clone();
            let health = health.clone();
            tokio::spawn(async move {
                // Requests here are one line from a scraper or a probe; 4 KiB holds the line.
                let mut buf = [0u8; 4096];
                let Ok(n) = socket.read(&mut buf).await else {
                    return;
                };
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, content_type, body) = respond(endpoints, path, &registry, &health);
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Ok(bound)
}

fn respond(
    endpoints: Endpoints,
    path: &str,
    registry: &Registry,
    health: &Health,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match (endpoints, path) {
        (Endpoints::Metrics, "/metrics") => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                ),
                Err(_) => (
                    "500 Internal Server Error",
                    TEXT,
                    "encoding failed\n".into(),
                ),
            }
        }
        (Endpoints::Health, "/healthz") => ("200 OK", TEXT, "ok\n".into()),
        (Endpoints::Health, "/readyz") if health.is_ready() => ("200 OK", TEXT, "ok\n".into()),
        (Endpoints::Health, "/readyz") => (
            "503 Service Unavailable",
            TEXT,
            "initial lists in progress\n".into(),
        ),
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_every_part() {
        let root = Health::default();
        assert!(!root.is_ready(), "nothing listed yet");
        root.set_ready(true);
        assert!(root.is_ready(), "a health without parts is its own flag");

        let root = Health::default();
        let copy = root.part();
        let (config_maps, secrets) = (copy.part(), copy.part());
        let reload = root.part();
        config_maps.set_ready(true);
        reload.set_ready(true);
        assert!(
            !root.is_ready(),
            "Secrets of the copy controller are not listed yet"
        );
        secrets.set_ready(true);
        assert!(copy.is_ready());
        assert!(root.is_ready());
    }
}
