//! The one metadata-only watch of ConfigMaps and one of Secrets per process, shared by every
//! controller. Metadata only, so Secret data is never cached: whoever needs data reads the
//! objects it needs, when it needs them (one GET, or pages of a LIST hashed and dropped).

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::{Health, Informer, MetaStore, Runtime, StoredMeta};

/// ConfigMap or Secret, as a value. Libraries with a kind enum of their own convert to and from
/// it (`conflux_watch_index::refs::ConfigKind` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// `v1` ConfigMap.
    ConfigMap,
    /// `v1` Secret.
    Secret,
}

impl Kind {
    /// The kind's name (`ConfigMap`, `Secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }
}

/// The shared informer of one config kind: metadata only, kept in a compact [`MetaStore`].
pub type ConfigInformer<K> = Informer<PartialObjectMeta<K>, MetaStore<K>>;

/// ConfigMap or Secret, as a type.
pub trait ConfigResource:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind as a value.
    const KIND: Kind;

    /// This kind's informer among the shared watches.
    fn informer(watches: &ConfigWatches) -> &ConfigInformer<Self>;
}

impl ConfigResource for ConfigMap {
    const KIND: Kind = Kind::ConfigMap;

    fn informer(watches: &ConfigWatches) -> &ConfigInformer<Self> {
        &watches.config_maps
    }
}

impl ConfigResource for Secret {
    const KIND: Kind = Kind::Secret;

    fn informer(watches: &ConfigWatches) -> &ConfigInformer<Self> {
        &watches.secrets
    }
}

/// The shared metadata watches of ConfigMaps and Secrets. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConfigWatches {
    config_maps: ConfigInformer<ConfigMap>,
    secrets: ConfigInformer<Secret>,
    namespace: Option<String>,
}

impl ConfigWatches {
    /// Starts both watches, in `namespace` or cluster-wide; their health goes under a `configs`
    /// part of the runtime's health.
    pub fn start(runtime: &Runtime, namespace: Option<&str>) -> Self {
        let health = runtime.health().part("configs");
        ConfigWatches {
            config_maps: start_kind::<ConfigMap>(runtime, namespace, &health),
            secrets: start_kind::<Secret>(runtime, namespace, &health),
            namespace: namespace.map(str::to_owned),
        }
    }

    /// The shared watches made of two informers started elsewhere (on a runtime, or fed by
    /// streams in tests), watching `namespace` or all namespaces.
    pub fn from_informers(
        config_maps: ConfigInformer<ConfigMap>,
        secrets: ConfigInformer<Secret>,
        namespace: Option<&str>,
    ) -> Self {
        ConfigWatches {
            config_maps,
            secrets,
            namespace: namespace.map(str::to_owned),
        }
    }

    /// The informer of kind `K`.
    pub fn informer<K: ConfigResource>(&self) -> &ConfigInformer<K> {
        K::informer(self)
    }

    /// The namespace watched, or `None` for all.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Whether an object in `namespace` is visible to these watches.
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// Waits until both kinds are listed.
    pub async fn wait_synced(&self) {
        self.config_maps.wait_synced().await;
        self.secrets.wait_synced().await;
    }

    /// What the shared store keeps of one object (see [`StoredMeta`]).
    pub fn stored(
        &self,
        kind: impl Into<Kind>,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<StoredMeta>> {
        match kind.into() {
            Kind::ConfigMap => self.config_maps.store().get(namespace, name),
            Kind::Secret => self.secrets.store().get(namespace, name),
        }
    }

    /// The last known metadata of one object, from the shared store (what it keeps: see
    /// [`StoredMeta`]).
    pub fn meta(
        &self,
        kind: impl Into<Kind>,
        namespace: &str,
        name: &str,
    ) -> Option<kube::api::ObjectMeta> {
        Some(self.stored(kind, namespace, name)?.to_meta())
    }

    /// The annotations of one object (`None` when it is unknown or has none), from the shared
    /// store.
    pub fn annotations(
        &self,
        kind: impl Into<Kind>,
        namespace: &str,
        name: &str,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        self.stored(kind, namespace, name)?.annotations()
    }

    /// The kind and name of every ConfigMap and Secret of `namespace`, sorted.
    pub fn names(&self, namespace: &str) -> Vec<(Kind, String)> {
        let config_maps = self.config_maps.store().state_in(namespace);
        let secrets = self.secrets.store().state_in(namespace);
        let mut out: Vec<(Kind, String)> = config_maps
            .iter()
            .map(|o| (Kind::ConfigMap, o.name().to_owned()))
            .chain(secrets.iter().map(|o| (Kind::Secret, o.name().to_owned())))
            .collect();
        out.sort();
        out
    }
}

fn start_kind<K: ConfigResource>(
    runtime: &Runtime,
    namespace: Option<&str>,
    health: &Health,
) -> ConfigInformer<K> {
    // `Api<PartialObjectMeta<_>>` asks the API server for metadata only.
    let api = metadata_api::<K>(&runtime.client(), namespace);
    // Each item of a metadata list names its own apiVersion and kind (two strings per object);
    // nobody reads them, and they are two allocations for every object of the cluster.
    runtime.informer_compact(
        api,
        watcher::Config::default(),
        K::KIND.as_str(),
        health,
        |meta: &mut PartialObjectMeta<K>| meta.types = None,
    )
}

/// Metadata-only access to ConfigMaps or Secrets in `namespace`, or in all namespaces.
pub fn metadata_api<K: ConfigResource>(
    client: &Client,
    namespace: Option<&str>,
) -> Api<PartialObjectMeta<K>> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
