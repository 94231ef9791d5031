//! The one client of the process, with its timeouts as a layer.
//!
//! kube's client has no response timeout by default (watches need none), so a request on a
//! connection that silently died would wait forever and wedge the reconcile holding it.
//! [`with_timeouts`] puts a bound on every request but watches, once, under the client: the
//! whole answer (head and body) must arrive within it, or the request fails with an error that
//! [`Error::api`](crate::Error::api) reports as [`Error::Timeout`](crate::Error::Timeout). A
//! call site only names what it did:
//!
//! ```no_run
//! # async fn doc(client: kube::Client) -> conflux_runtime::Result<()> {
//! use conflux_runtime::Error;
//! use k8s_openapi::api::core::v1::Secret;
//! let secrets: kube::Api<Secret> = kube::Api::namespaced(client, "apps");
//! let found = secrets.get_opt("db").await.map_err(Error::api("reading Secret apps/db"))?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;

use crate::backoff::Policy;

/// How long one API request (head and body) may take before it counts as failed (and is
/// retried by its caller).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A request that did not answer within its bound.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {seconds}s")]
pub struct TimedOut {
    /// The bound that passed.
    pub seconds: u64,
}

/// The seconds of the bound when `err` is a request that timed out in the layer.
pub fn timed_out(err: &kube::Error) -> Option<u64> {
    match err {
        kube::Error::Service(inner) => inner.downcast_ref::<TimedOut>().map(|t| t.seconds),
        _ => None,
    }
}

/// `client` with every request but watches bounded by `timeout`, answer body included. The
/// returned client shares `client`'s connection pool.
pub fn with_timeouts(client: Client, timeout: Duration) -> Client {
    layered(client, move |client, request| {
        Box::pin(bounded_send(client, request, timeout))
    })
}

/// What a layer returns for one request.
pub type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

/// `client` with `layer` in front of it: the layer gets every request and `client` to send it
/// with (or not). The returned client shares `client`'s connection pool and default namespace.
pub fn layered<F>(client: Client, layer: F) -> Client
where
    F: Fn(Client, Request<Body>) -> Answer + Clone + Send + Sync + 'static,
{
    let namespace = client.default_namespace().to_owned();
    Client::new(
        FnService(move |request| layer(client.clone(), request)),
        namespace,
    )
}

/// Sends `request` with `client`, bounded by `timeout` unless it is a watch (see the module).
async fn bounded_send(
    client: Client,
    request: Request<Body>,
    timeout: Duration,
) -> Result<Response<Body>, kube::Error> {
    if is_watch(&request) {
        return client.send(request).await;
    }
    let answer = async {
        let response = client.send(request).await?;
        let (parts, body) = response.into_parts();
        // Non-watch answers are read whole by every caller: read them here, in time.
        let bytes = body.collect().await?.to_bytes();
        Ok(Response::from_parts(parts, Body::from(bytes)))
    };
    match tokio::time::timeout(timeout, answer).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(TimedOut {
            seconds: timeout.as_secs(),
        }))),
    }
}

/// Whether a request is a watch, which streams for as long as it lasts.
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// A client answered by `answer` instead of an API server: for tests and fakes that run a
/// controller without a cluster. `answer` gets every request (method, path and query, body).
pub fn from_fn<F, Fut>(answer: F) -> Client
where
    F: Fn(Request<Body>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    Client::new(
        FnService(move |request| -> Answer {
            let answer = answer(request);
            Box::pin(async move { Ok(answer.await) })
        }),
        "default",
    )
}

/// The one `tower` service under conflux's clients: a closure from request to answer.
#[derive(Clone)]
struct FnService<F>(F);

impl<F> tower_service::Service<Request<Body>> for FnService<F>
where
    F: Fn(Request<Body>) -> Answer,
{
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The client underneath queues and drives its own connections.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Answer {
        (self.0)(request)
    }
}

/// Waits until the API server says it is ready (`/readyz`, readable by every user), retrying
/// with backoff. Discovery right after an API server (re)start can miss groups and CRDs that it
/// serves a moment later; asking only once it is ready avoids taking that for the truth.
pub async fn wait_apiserver_ready(client: &Client, what: &str) {
    let mut backoff = Policy::STARTUP.backoff();
    let mut logged = false;
    loop {
        let get = http::Request::get("/readyz").body(Vec::new());
        let answer = match get {
            Ok(get) => client
                .request_text(get)
                .await
                .map_err(crate::Error::api("asking /readyz")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_not_bounded_and_other_requests_are() {
        let watch = Request::get("/api/v1/configmaps?watch=true&resourceVersion=1")
            .body(())
            .expect("request");
        let list = Request::get("/api/v1/configmaps?limit=500")
            .body(())
            .expect("request");
        assert!(is_watch(&watch));
        assert!(!is_watch(&list));
        assert!(!is_watch(
            &Request::get("/readyz").body(()).expect("request")
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_never_answers_is_a_timeout_naming_its_action() {
        let client = with_timeouts(crate::testing::never_answering_client(), REQUEST_TIMEOUT);
        let get = Request::get("/api/v1/namespaces/a/secrets/b")
            .body(Vec::new())
            .expect("request");
        let err = client.request_text(get).await.expect_err("timed out");
        assert_eq!(timed_out(&err), Some(30));
        let named = crate::Error::api("reading Secret a/b")(err);
        assert_eq!(named.reason(), "Timeout");
        assert_eq!(
            named.to_string(),
            "reading Secret a/b: no answer within 30s"
        );
    }
}
