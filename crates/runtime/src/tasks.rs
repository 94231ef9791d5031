//! Owned tasks: every task a controller starts belongs to a [`Tasks`] set (the process's, or one
//! leadership term's), which cancels them and waits for them when it ends.
//!
//! A detached `tokio::spawn` outlives whoever started it: when a leadership term ends its retry
//! loops would go on (refused only at the client), and on shutdown nothing would wait for them.
//! [`Tasks::spawn`] runs a future until the set is cancelled; [`Tasks::shutdown`] cancels and
//! waits, within a bound.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A set of owned tasks with one cancellation token. Cheap to clone (clones share the set).
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// An empty set, not cancelled.
    pub fn new() -> Self {
        Tasks::default()
    }

    /// A set of its own whose token is a child of this one: cancelling this set cancels it too,
    /// not the other way round (a leadership term under the process).
    pub fn child(&self) -> Tasks {
        Tasks {
            token: self.token.child_token(),
            tracker: TaskTracker::new(),
        }
    }

    /// Runs `future` on the current tokio runtime until it finishes or the set is cancelled
    /// (then it is dropped at its next `.await`). The handle yields `None` when cancelled.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let token = self.token.clone();
        self.tracker
            .spawn(async move { token.run_until_cancelled(future).await })
    }

    /// The set's token: resolves [`CancellationToken::cancelled`] when the set ends. Servers
    /// take it as their shutdown signal.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Whether the set was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Cancels every task of the set (and of its children), without waiting.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Tasks still running.
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    /// Whether no task is running.
    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// Cancels every task and waits until they have stopped, at most `bound`; `true` when they
    /// all stopped in time. Tasks spawned afterwards are cancelled at once.
    pub async fn shutdown(&self, bound: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        tokio::time::timeout(bound, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::testing::CountOnDrop;

    #[tokio::test]
    async fn shutdown_cancels_every_task_within_the_bound() {
        let tasks = Tasks::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let guard = CountOnDrop(dropped.clone());
            tasks.spawn(async move {
                let _guard = guard;
                // A retry loop that would run forever.
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        }
        assert_eq!(tasks.len(), 3);
        assert!(tasks.shutdown(Duration::from_secs(1)).await);
        assert!(tasks.is_empty());
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        let late = tasks.spawn(async { 1 });
        assert_eq!(
            late.await.ok(),
            Some(None),
            "a task spawned after the end never runs"
        );
    }

    #[tokio::test]
    async fn a_child_set_ends_with_its_parent_but_not_the_other_way() {
        let process = Tasks::new();
        let term = process.child();
        let survivor = process.spawn(async { tokio::time::sleep(Duration::from_millis(50)).await });
        assert!(term.shutdown(Duration::from_secs(1)).await);
        assert!(!process.is_cancelled());
        assert_eq!(survivor.await.ok(), Some(Some(())));
        let term = process.child();
        let pending = term.spawn(std::future::pending::<()>());
        process.cancel();
        assert!(term.is_cancelled());
        assert_eq!(pending.await.ok(), Some(None));
    }

    #[tokio::test]
    async fn a_finished_task_yields_its_output() {
        let tasks = Tasks::new();
        assert_eq!(tasks.spawn(async { 7 }).await.ok(), Some(Some(7)));
    }
}
