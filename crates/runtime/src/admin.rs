//! The admin endpoints: Prometheus metrics on `/metrics`, liveness on `/healthz` and readiness on
//! `/readyz`, as a `tower` service for [`crate::server::Server`].

use std::convert::Infallible;
use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use prometheus_client::registry::Registry;

use crate::health::Health;

/// What one admin listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoints {
    /// `/metrics`.
    Metrics,
    /// `/healthz` and `/readyz`.
    Health,
}

/// The admin service: answers `GET`s of its [`Endpoints`], 404 otherwise. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admin {
    endpoints: Endpoints,
    registry: Arc<Registry>,
    health: Arc<Health>,
}

impl Endpoints {
    /// The paths served, for logs (`/metrics`, `/healthz /readyz`).
    pub fn paths(self) -> &'static str {
        match self {
            Endpoints::Metrics => "/metrics",
            Endpoints::Health => "/healthz /readyz",
        }
    }
}

impl Admin {
    /// Serves `endpoints` from `registry` and `health`.
    pub fn new(endpoints: Endpoints, registry: Arc<Registry>, health: Arc<Health>) -> Self {
        Admin {
            endpoints,
            registry,
            health,
        }
    }

    /// The answer to a request for `path`: status, content type and body.
    pub fn respond(&self, path: &str) -> (StatusCode, &'static str, String) {
        const TEXT: &str = "text/plain; charset=utf-8";
        match (self.endpoints, path) {
            (Endpoints::Metrics, "/metrics") => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &self.registry) {
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
                let problems = self.health.problems(path == "/readyz");
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
}

impl<B> tower_service::Service<Request<B>> for Admin {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (status, content_type, body) = self.respond(request.uri().path());
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
        std::future::ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_name_what_is_not_ready_and_unknown_paths_are_404() {
        let health = Arc::new(Health::new("conflux"));
        let part = health.part("configs");
        let admin = Admin::new(Endpoints::Health, Arc::new(Registry::default()), health);
        let (status, _, body) = admin.respond("/readyz");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "conflux/configs: not ready\n");
        part.set_ready(true);
        assert_eq!(admin.respond("/readyz").0, StatusCode::OK);
        assert_eq!(admin.respond("/healthz").0, StatusCode::OK);
        assert_eq!(admin.respond("/metrics").0, StatusCode::NOT_FOUND);
    }
}
