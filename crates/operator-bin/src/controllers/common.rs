//! Plumbing every conflux controller shares: the Event recorder, Events, watch configuration for
//! sharding, and metadata-only access to ConfigMaps and Secrets.

use std::fmt::Debug;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};
use watch_index::selector::Selector;

use crate::metrics::{Metrics, ResourceLabels};

/// The Event recorder every conflux controller uses.
pub(crate) fn recorder(client: &Client) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: "conflux".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// Bounds of the two kinds the controllers handle.
pub(crate) trait ConfigResource:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl ConfigResource for ConfigMap {}
impl ConfigResource for Secret {}

/// The watcher configuration for objects sharded by `selector`.
pub(crate) fn sharded(selector: &Selector) -> watcher::Config {
    let wc = watcher::Config::default();
    if selector.is_empty() {
        wc
    } else {
        wc.labels(&selector.to_string())
    }
}

/// `--concurrent` as the controller's limit.
pub(crate) fn concurrency(concurrent: usize) -> u16 {
    u16::try_from(concurrent.max(1)).unwrap_or(u16::MAX)
}

/// Publishes an Event; failing to publish is only logged. `note` must not contain data.
pub(crate) async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    let event = KubeEvent {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, reference).await {
        debug!(error = %err, "cannot publish event");
    }
}

/// Metadata-only access to ConfigMaps or Secrets in `namespace`, or in all namespaces: list and
/// watch through it never carry data, so Secret data is never cached.
pub(crate) fn metadata_api<K: ConfigResource>(
    client: &Client,
    namespace: Option<&str>,
) -> Api<PartialObjectMeta<K>> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// `(namespace, name)` of an object.
pub(crate) fn object_id(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A watch that retries with backoff: errors are counted (`conflux_watch_errors_total`) and
/// logged, and the next event is waited for; only the end of the stream is an error.
pub(crate) struct WatchEvents<K> {
    stream: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    labels: ResourceLabels,
    controller: &'static str,
}

impl<K: Send + 'static> WatchEvents<K> {
    /// Wraps a `watcher` stream of `resource` (a kind, for metrics and logs) for `controller`.
    pub(crate) fn new(
        stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
        controller: &'static str,
        resource: &str,
    ) -> Self {
        Self {
            stream: stream.default_backoff().boxed(),
            labels: ResourceLabels {
                resource: resource.to_owned(),
            },
            controller,
        }
    }

    /// The next event.
    pub(crate) async fn next(&mut self, metrics: &Metrics) -> anyhow::Result<watcher::Event<K>> {
        loop {
            match self.stream.try_next().await {
                Ok(Some(event)) => return Ok(event),
                Ok(None) => anyhow::bail!(
                    "{}: watch of {} ended",
                    self.controller,
                    self.labels.resource
                ),
                Err(err) => {
                    metrics.watch_errors.get_or_create(&self.labels).inc();
                    warn!(controller = self.controller, kind = %self.labels.resource, error = %err, "watch error, retrying");
                }
            }
        }
    }
}
