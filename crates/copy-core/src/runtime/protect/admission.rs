//! The admission endpoint as a `tower` service: AdmissionReviews in, decisions of
//! [`crate::protect::decide`] out. It knows nothing of TLS or sockets.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Response, StatusCode};
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use tracing::{debug, info};

use super::{MAX_BODY, PATH, ProtectMetrics, WebhookLabels};
use crate::protect::{Policy, Request, Verdict, decide};

/// conflux's own identity in a Pod (`system:serviceaccount:<ns>:<name>`, from its token), so
/// that its own writes (removing a protection that no longer applies) always pass.
pub(super) fn own_service_account() -> Option<String> {
    use base64::Engine;
    let token =
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/token").ok()?;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["sub"].as_str().map(str::to_owned)
}

/// The admission endpoint as a `tower` service: `POST` [`PATH`] with an AdmissionReview, answered
/// from the object's own labels ([`crate::protect::decide`]). It knows nothing of TLS or
/// sockets; [`serve`](super::serve) puts it behind conflux-runtime's HTTPS server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admission {
    policy: Arc<Policy>,
    metrics: Arc<ProtectMetrics>,
}

impl Admission {
    /// Decides with `policy`, counting answers in `metrics`.
    pub fn new(policy: Policy, metrics: Arc<ProtectMetrics>) -> Self {
        Admission {
            policy: Arc::new(policy),
            metrics,
        }
    }
}

impl<B> tower_service::Service<hyper::Request<B>> for Admission
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Full<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<B>) -> Self::Future {
        let (policy, metrics) = (self.policy.clone(), self.metrics.clone());
        Box::pin(async move { Ok(handle(req, &policy, &metrics).await) })
    }
}

pub(super) async fn handle<B>(
    req: hyper::Request<B>,
    policy: &Policy,
    metrics: &ProtectMetrics,
) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        response
    };
    if req.method() != Method::POST || req.uri().path() != PATH {
        return reply(StatusCode::NOT_FOUND, b"{}".to_vec());
    }
    let started = Instant::now();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, b"{}".to_vec()),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(err) => {
            debug!(error = %err, "protect: not an AdmissionReview");
            return reply(StatusCode::BAD_REQUEST, b"{}".to_vec());
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => return reply(StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let (response, operation, denied) = review_one(&request, policy);
    let verdict = if denied { "deny" } else { "allow" };
    metrics
        .requests
        .get_or_create(&WebhookLabels {
            operation: operation.to_owned(),
            verdict: verdict.to_owned(),
        })
        .inc();
    let body = serde_json::to_vec(&response.into_review()).unwrap_or_default();
    metrics.duration.observe(started.elapsed().as_secs_f64());
    reply(StatusCode::OK, body)
}

/// Decides one request; the response, the operation's name and whether it was denied.
pub(super) fn review_one(
    request: &AdmissionRequest<DynamicObject>,
    policy: &Policy,
) -> (AdmissionResponse, &'static str, bool) {
    use crate::protect::Operation as Op;
    let (operation, name) = match request.operation {
        Operation::Create => (Op::Create, "CREATE"),
        Operation::Update => (Op::Update, "UPDATE"),
        Operation::Delete => (Op::Delete, "DELETE"),
        Operation::Connect => (Op::Connect, "CONNECT"),
    };
    let old = request
        .old_object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok());
    let new = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok());
    let groups = request.user_info.groups.clone().unwrap_or_default();
    let username = request.user_info.username.clone().unwrap_or_default();
    let namespace = request.namespace.clone().unwrap_or_default();
    let verdict = decide(
        policy,
        &Request {
            operation,
            username: &username,
            groups: &groups,
            kind: &request.kind.kind,
            namespace: &namespace,
            name: &request.name,
            old_object: old.as_ref(),
            new_object: new.as_ref(),
        },
    );
    let response = AdmissionResponse::from(request);
    match verdict {
        Verdict::Deny { message } => {
            info!(object = %format!("{}/{namespace}/{}", request.kind.kind, request.name), user = %username, operation = name, reason = "Denied", "protect: request denied");
            (response.deny(message), name, true)
        }
        _ => (response, name, false),
    }
}
