//! Test support: a client without an API server, and a drop counter.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;

/// A client whose every request waits forever (a connection that silently died).
pub(crate) fn never_answering_client() -> Client {
    Client::new(
        ServiceFn(|_request: Request<Body>| {
            std::future::pending::<Result<Response<Body>, Infallible>>()
        }),
        "default",
    )
}

/// A `tower` service from a closure.
#[derive(Clone)]
pub(crate) struct ServiceFn<F>(pub(crate) F);

impl<F, Fut> tower_service::Service<Request<Body>> for ServiceFn<F>
where
    F: FnMut(Request<Body>) -> Fut,
    Fut: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Fut {
        (self.0)(request)
    }
}

/// Counts its drops: proves a cancelled task's future is gone.
pub(crate) struct CountOnDrop(pub(crate) Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
