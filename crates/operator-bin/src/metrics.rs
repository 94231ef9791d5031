//! Prometheus metrics, and the small HTTP endpoints for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use copy_core::runtime::CopyMetrics;
use copy_core::runtime::protect::ProtectMetrics;
use prometheus_client::registry::Registry;
use reloader::runtime::ReloadMetrics;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use watch_index::runtime::flux::FluxMetrics;
use watch_index::runtime::leader::LeaderMetrics;
use watch_index::runtime::{Health, WatchMetrics};

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
    /// Registers every metric, and the shared watches' (`conflux_watch_*`), under `conflux`.
    pub fn register(&self, watch: &WatchMetrics, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("conflux");
        watch.register(sub);
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

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/metrics`.
    Metrics,
    /// `/healthz` and `/readyz`.
    Health,
}

/// How long a client may take to send its request head; idle and slow connections are closed
/// after it, so they cannot pile up and starve the probes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may stay open in all (keep-alive included).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Binds `addr` and serves `endpoints` over HTTP/1.1 (hyper) until the process ends. Every
/// connection is served on its own task, with [`HEADER_READ_TIMEOUT`] and [`CONNECTION_TIMEOUT`].
/// Returns the bound address.
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
            let Ok((socket, _)) = listener.accept().await else {
                // Out of file descriptors and the like: wait a moment instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let (registry, health) = (registry.clone(), health.clone());
            let service = service_fn(move |request: Request<Incoming>| {
                let (status, content_type, body) =
                    respond(endpoints, request.uri().path(), &registry, &health);
                let response = Response::builder()
                    .status(status)
                    .header(CONTENT_TYPE, content_type)
                    .body(Full::new(Bytes::from(body)));
                async move { response }
            });
            tokio::spawn(async move {
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    // One request per connection, as probes make them: nothing lingers.
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(socket), service);
                // Errors here are the client's (reset, timeout): nothing to report.
                let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
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
) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match (endpoints, path) {
        (Endpoints::Metrics, "/metrics") => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => (
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                ),
                Err(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    "encoding failed\n".into(),
                ),
            }
        }
        (Endpoints::Health, "/healthz" | "/readyz") => {
            // The body names every part that is not ready (or not live), one per line.
            let problems = health.problems(path == "/readyz");
            if problems.is_empty() {
                (StatusCode::OK, TEXT, "ok\n".into())
            } else {
                let mut body = problems.join("\n");
                body.push('\n');
                (StatusCode::SERVICE_UNAVAILABLE, TEXT, body)
            }
        }
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}
