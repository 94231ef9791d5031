//! Prometheus metrics, and the small HTTP endpoints for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use copy_core::runtime::CopyMetrics;
use prometheus_client::registry::Registry;
use reloader::runtime::ReloadMetrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
        (Endpoints::Health, "/healthz" | "/readyz") => {
            // The body names every part that is not ready (or not live), one per line.
            let problems = health.problems(path == "/readyz");
            if problems.is_empty() {
                ("200 OK", TEXT, "ok\n".into())
            } else {
                let mut body = problems.join("\n");
                body.push('\n');
                ("503 Service Unavailable", TEXT, body)
            }
        }
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_name_the_parts_that_are_not_ready() {
        let registry = Registry::default();
        let health = Health::new("conflux");
        let copy = health.part("copy");
        let (status, _, body) = respond(Endpoints::Health, "/readyz", &registry, &health);
        assert_eq!(status, "503 Service Unavailable");
        assert_eq!(body, "conflux/copy: not ready\n");
        let (status, _, _) = respond(Endpoints::Health, "/healthz", &registry, &health);
        assert_eq!(status, "200 OK", "not ready is still live");
        copy.set_ready(true);
        let (status, _, body) = respond(Endpoints::Health, "/readyz", &registry, &health);
        assert_eq!((status, body.as_str()), ("200 OK", "ok\n"));
    }
}
