//! How a watch gets the objects that exist when it starts, and the way back from a streaming
//! list the API server refuses.
//!
//! Streaming lists (one WATCH with `sendInitialEvents`) cost fewer requests and less memory than
//! a paginated LIST. An API server whose WatchList feature is off (Kubernetes 1.33 by default)
//! refuses them with `422 Invalid`, and kube-runtime's watcher would retry the same request for
//! ever. client-go's reflector lists instead when a streaming list fails; so does this: the first
//! refusal switches that watch to list-watch, and every watch the process starts after it lists
//! first without asking again.

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::stream::{BoxStream, Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

/// How a watch gets the objects that exist when it starts (kube-runtime's
/// `InitialListStrategy`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialList {
    /// A paginated LIST, then a WATCH from its resourceVersion: what every API server serves.
    ListWatch,
    /// One WATCH that streams the existing objects first (`sendInitialEvents`, the API server's
    /// WatchList feature: on by default in Kubernetes 1.32 and from 1.34): no LIST response is
    /// held in memory at once on either side, so fewer requests and less memory
    /// (docs/benchmarks.md). Its reads are consistent (see
    /// [`crate::client::with_consistent_streaming_lists`]), so a change made just after start is
    /// a change. The default: an API server that refuses it (WatchList off, as Kubernetes 1.33
    /// ships) gets a LIST instead, as client-go does (see this module's docs). API servers older
    /// than 1.27 do not know the parameter and never end the initial list: use `ListWatch` there.
    #[default]
    StreamingList,
}

impl InitialList {
    /// `config` with this strategy.
    pub fn apply(self, config: watcher::Config) -> watcher::Config {
        match self {
            InitialList::ListWatch => config,
            InitialList::StreamingList => config.streaming_lists(),
        }
    }
}

/// Whether the API server of a process refused a streaming list (shared by every watch the
/// process starts, so only the first one asks).
#[derive(Clone, Debug, Default)]
pub(crate) struct Refusals(Arc<AtomicBool>);

impl Refusals {
    fn refused(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

type Events<K> = BoxStream<'static, watcher::Result<Event<K>>>;

/// kube-runtime's watcher of `api` with `strategy`; a streaming list the API server refuses
/// falls back to list-watch (see this module's docs).
pub(crate) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    strategy: InitialList,
    refusals: &Refusals,
) -> Events<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    if strategy == InitialList::ListWatch || refusals.refused() {
        return watcher::watcher(api, config).boxed();
    }
    let streaming = watcher::watcher(api.clone(), config.clone().streaming_lists()).boxed();
    Fallback {
        inner: streaming,
        list_watch: Some(Box::new(move || watcher::watcher(api, config).boxed())),
        refusals: refusals.clone(),
    }
    .boxed()
}

/// A streaming-list watch that becomes a list-watch on the first refusal.
struct Fallback<K> {
    inner: Events<K>,
    /// Makes the list-watch; taken when the fallback happens.
    list_watch: Option<Box<dyn FnOnce() -> Events<K> + Send>>,
    refusals: Refusals,
}

impl<K> Stream for Fallback<K> {
    type Item = watcher::Result<Event<K>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is Unpin (boxed), so the struct is.
        let this = self.get_mut();
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Err(err))) if refuses_streaming(&err) => {
                    let Some(list_watch) = this.list_watch.take() else {
                        return Poll::Ready(Some(Err(err)));
                    };
                    if !this.refusals.0.swap(true, Ordering::AcqRel) {
                        warn!(
                            reason = "StreamingListRefused",
                            error = %err,
                            "the API server refuses streaming lists (its WatchList feature is \
                             off): watches list first instead (--initial-list-strategy=list-watch \
                             says so up front)"
                        );
                    }
                    this.inner = list_watch();
                }
                other => return other,
            }
        }
    }
}

/// Whether `err` is the API server refusing the streaming list's parameters (`400`/`422`), not
/// a transient failure.
fn refuses_streaming(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}
