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

/// `client` whose streaming lists are consistent reads, as client-go's are.
///
/// kube-runtime's watcher opens a streaming list (`sendInitialEvents=true`) from
/// `resourceVersion=0`, which the API server answers from its watch cache as the cache is,
/// without first catching up with etcd ("any" resourceVersion): the first list may then be older
/// than the moment the watch started, so objects written just before it come as changes after
/// the first list instead of in it. A first list that is a baseline (the flux-trigger's, the
/// reload controller's) must hold everything written before start. client-go's reflector asks
/// with no resourceVersion, which the API server treats as a consistent read (it waits until its
/// cache holds everything written before the request), and kube's own list-then-watch asks a
/// quorum read. This layer drops `resourceVersion=0` from streaming lists, so they are
/// consistent too; every other request goes out unchanged.
pub fn with_consistent_streaming_lists(client: Client) -> Client {
    layered(client, |client, mut request| {
        consistent_streaming_list(&mut request);
        Box::pin(async move { client.send(request).await })
    })
}

/// Drops `resourceVersion=0` from a streaming list request (see
/// [`with_consistent_streaming_lists`]); other requests are left alone.
fn consistent_streaming_list<B>(request: &mut Request<B>) {
    let Some(query) = request.uri().query() else {
        return;
    };
    let pairs: Vec<&str> = query.split('&').collect();
    if !pairs.contains(&"sendInitialEvents=true") || !pairs.contains(&"resourceVersion=0") {
        return;
    }
    let kept: Vec<&str> = pairs
        .into_iter()
        .filter(|pair| *pair != "resourceVersion=0")
        .collect();
    let path_and_query = format!("{}?{}", request.uri().path(), kept.join("&"));
    let mut parts = request.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        // Built from a valid URI minus one pair: always valid; if not, send it unchanged.
        Err(_) => return,
    }
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
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

    #[test]
    fn a_streaming_list_from_resource_version_0_becomes_a_consistent_read() {
        let uri = |q: &str| {
            let mut request = Request::get(format!("/api/v1/namespaces/a/configmaps?{q}"))
                .body(())
                .expect("request");
            consistent_streaming_list(&mut request);
            request.uri().to_string()
        };
        // kube-runtime's initial streaming watch.
        assert_eq!(
            uri(
                "watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
            ),
            "/api/v1/namespaces/a/configmaps?watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
        // A resumed watch, a list from the cache and a streaming list from a version: unchanged.
        for q in [
            "watch=true&allowWatchBookmarks=true&resourceVersion=0",
            "watch=true&allowWatchBookmarks=true&resourceVersion=41",
            "limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan",
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=41",
        ] {
            assert_eq!(uri(q), format!("/api/v1/namespaces/a/configmaps?{q}"));
        }
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
