//! Test support: informers fed by hand-made watch streams, and the objects they carry.

use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::{Informer, WatchMetrics, Watched};
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};

pub(crate) type Feed<K> = mpsc::UnboundedSender<Result<Event<K>, watcher::Error>>;

/// An informer of `K` on a stream the test feeds, its driver running.
pub(crate) fn informer<K>(dyntype: K::DynamicType, resource: &str) -> (Feed<K>, Informer<K>)
where
    K: Watched,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (tx, rx) = mpsc::unbounded();
    let health = conflux_runtime::Health::new("test");
    let (informer, driver) = Informer::new(
        rx,
        dyntype,
        resource,
        Arc::new(WatchMetrics::default()),
        &health,
        Duration::from_secs(600),
    );
    tokio::spawn(driver);
    (tx, informer)
}

/// A compact config informer (as the shared watches run it) on a stream the test feeds.
pub(crate) fn config_informer<X: 'static>(
    resource: &str,
) -> (
    Feed<PartialObjectMeta<X>>,
    conflux_runtime::configs::ConfigInformer<X>,
)
where
    PartialObjectMeta<X>: Watched,
    <PartialObjectMeta<X> as kube::Resource>::DynamicType:
        Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (tx, rx) = mpsc::unbounded();
    let health = conflux_runtime::Health::new("test");
    let (informer, driver) = Informer::new_compact(
        rx,
        resource,
        Arc::new(WatchMetrics::default()),
        &health,
        Duration::from_secs(600),
    );
    tokio::spawn(driver);
    (tx, informer)
}

pub(crate) fn send<K>(feed: &Feed<K>, events: impl IntoIterator<Item = Event<K>>) {
    for event in events {
        feed.unbounded_send(Ok(event)).expect("the informer runs");
    }
}

pub(crate) fn relist<K>(feed: &Feed<K>, objects: Vec<K>) {
    send(feed, [Event::Init]);
    send(feed, objects.into_iter().map(Event::InitApply));
    send(feed, [Event::InitDone]);
}

/// A ConfigMap's metadata in `flux-system`, labelled for watching.
pub(crate) fn config_map(name: &str, version: &str) -> PartialObjectMeta<ConfigMap> {
    let labels = [("reconcile.fluxcd.io/watch".to_owned(), "Enabled".to_owned())];
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("flux-system".into()),
            resource_version: Some(version.into()),
            labels: Some(labels.into_iter().collect()),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

pub(crate) fn kustomizations() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
    ))
}

/// A Kustomization `name` substituting from the ConfigMap `vars`.
pub(crate) fn kustomization(name: &str) -> DynamicObject {
    let mut object = DynamicObject::new(name, &kustomizations()).within("flux-system");
    object.metadata.resource_version = Some("1".into());
    object.data = serde_json::json!({
        "spec": {"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}}
    });
    object
}
