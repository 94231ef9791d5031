//! Test support: a client without an API server, and a drop counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::Client;

/// A client whose every request waits forever (a connection that silently died).
pub(crate) fn never_answering_client() -> Client {
    crate::client::from_fn(|_request| std::future::pending())
}

/// Counts its drops: proves a cancelled task's future is gone.
pub(crate) struct CountOnDrop(pub(crate) Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
