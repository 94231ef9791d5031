//! The labeller (the leader's): keeps [`PROTECTED_LABEL`] and [`DEPENDENTS_ANNOTATION`] on
//! exactly the objects conflux copies from.
//!
//! One controller shape ([`conflux_runtime::queue`]): each source (kind, namespace, name) is a
//! key of a work queue. The watches of ConfigSyncs, ConfigMaps and Secrets keep who depends on
//! which source ([`Sources`]) and add the sources a change concerns: a ConfigSync's source, old
//! and new; a copy's `copyFrom` source, old and new; a ConfigMap or Secret that is a source or
//! carries the label (its consent or its labels may have changed). The handler compares the
//! object's label and annotation with its dependents now and writes the difference (one
//! server-side apply); a failed write is retried with backoff. Nothing is handed out before the
//! three watches delivered their initial state.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use conflux_runtime::configs::ConfigResource;
use conflux_runtime::queue::{Gate, Next, Opening, QueueConfig, WorkQueue};
use conflux_runtime::sync::lock;
use conflux_runtime::{Change, ConfigWatches, Runtime, Subscription};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use super::{FIELD_MANAGER, ProtectMetrics};
use crate::ConfigSync;
use crate::consent;
use crate::copy_from::copy_source;
use crate::protect::{DEPENDENTS_ANNOTATION, Dependent, PROTECTED_LABEL, dependents_annotation};
use crate::{Error, SourceKind, SourceRef};

/// Sources labelled at once.
const CONCURRENCY: usize = 4;

/// A source: kind, namespace, name.
pub(super) type Key = (SourceKind, String, String);

/// Shared state of the labeller.
pub struct Context {
    client: Client,
    metrics: Arc<ProtectMetrics>,
    excluded_namespaces: Vec<String>,
    /// Sources in excluded namespaces already warned about (once each).
    warned: Mutex<HashSet<Key>>,
    /// Who depends on which source, from the watches.
    sources: Mutex<Sources>,
    /// The sources labelled protected now (the gauge).
    protected: Mutex<HashSet<Key>>,
    /// Sources whose last write failed (reported once until it succeeds).
    failing: Mutex<HashSet<Key>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one labeller; `excluded_namespaces` are never protected (kube-system).
    pub fn new(
        client: Client,
        excluded_namespaces: Vec<String>,
        metrics: Arc<ProtectMetrics>,
    ) -> Arc<Self> {
        Arc::new(Context {
            client,
            metrics,
            excluded_namespaces,
            warned: Mutex::default(),
            sources: Mutex::default(),
            protected: Mutex::default(),
            failing: Mutex::default(),
        })
    }
}

/// Who depends on which source: ConfigSyncs (every one protects its source) and `copyFrom`
/// copies (each protects its source when the source consents to its namespace; the handler
/// checks, as the source's consent may change).
#[derive(Debug, Default)]
pub(super) struct Sources {
    /// Each dependent's source.
    of: HashMap<Dependent, Key>,
    /// Each source's dependents.
    dependents: HashMap<Key, BTreeSet<Dependent>>,
}

impl Sources {
    /// Sets `dependent`'s source (`None`: it depends on nothing, or is gone); the sources whose
    /// dependents changed.
    pub(super) fn set(&mut self, dependent: Dependent, source: Option<Key>) -> Vec<Key> {
        let old = self.of.remove(&dependent);
        if old == source {
            if let Some(source) = source {
                self.of.insert(dependent, source);
            }
            return Vec::new();
        }
        if let Some(old) = &old
            && let Some(set) = self.dependents.get_mut(old)
        {
            set.remove(&dependent);
            if set.is_empty() {
                self.dependents.remove(old);
            }
        }
        if let Some(source) = &source {
            self.of.insert(dependent.clone(), source.clone());
            self.dependents
                .entry(source.clone())
                .or_default()
                .insert(dependent);
        }
        old.into_iter().chain(source).collect()
    }

    /// Whether `key` has dependents.
    pub(super) fn is_source(&self, key: &Key) -> bool {
        self.dependents.contains_key(key)
    }

    /// The dependents of `key`.
    pub(super) fn dependents(&self, key: &Key) -> Vec<Dependent> {
        self.dependents
            .get(key)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Keeps [`PROTECTED_LABEL`] and [`DEPENDENTS_ANNOTATION`] on exactly the objects conflux copies
/// from (see this module's docs); readiness (under `protect/labels`) waits for the three
/// watches.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("protect").part("labels");
    let syncs = runtime.informer(
        Api::<ConfigSync>::all(runtime.client()),
        Default::default(),
        "ConfigSync",
        &health,
    );
    let gate = Gate::new();
    let queue: WorkQueue<Key, ()> =
        runtime.queue(QueueConfig::new("protect", CONCURRENCY), gate.clone());
    queue.report(&health);
    runtime.spawn(feed_syncs(
        syncs.subscribe("protect ConfigSyncs"),
        ctx.clone(),
        queue.clone(),
        gate.part("watch ConfigSync"),
    ));
    runtime.spawn(feed_configs::<ConfigMap>(
        &configs,
        ctx.clone(),
        queue.clone(),
        gate.part("watch ConfigMap"),
    ));
    runtime.spawn(feed_configs::<Secret>(
        &configs,
        ctx.clone(),
        queue.clone(),
        gate.part("watch Secret"),
    ));
    queue
        .run(move |key, _: &()| handle(ctx.clone(), configs.clone(), key))
        .await;
}

/// Keeps the ConfigSyncs' sources, adding each source whose ConfigSyncs changed.
async fn feed_syncs(
    mut sub: Subscription<ConfigSync>,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    mut listed: Opening,
) {
    while let Some(change) = sub.recv().await {
        let (cs, gone) = match change {
            Change::Initial(cs) | Change::Applied(cs) => (cs, false),
            Change::Deleted(cs) => (cs, true),
            Change::InitDone => {
                listed.open();
                continue;
            }
            _ => continue,
        };
        let dependent = Dependent::ConfigSync {
            name: cs.name_any(),
        };
        let source = (!gone && cs.metadata.deletion_timestamp.is_none()).then(|| {
            let s = &cs.spec.source;
            (s.kind, s.namespace.clone(), s.name.clone())
        });
        let changed = lock(&ctx.sources).set(dependent, source);
        for key in changed {
            queue.add(key, ());
        }
    }
}

/// Keeps the `copyFrom` copies' sources of one kind, adding each source whose copies changed,
/// and each object of the kind that is a source or is labelled (its consent or labels may have
/// changed).
fn feed_configs<K: ConfigResource>(
    configs: &ConfigWatches,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    mut listed: Opening,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let kind: SourceKind = K::KIND.into();
    let mut sub = configs
        .informer::<K>()
        .subscribe(&format!("protect {}", kind.as_str()));
    async move {
        while let Some(change) = sub.recv().await {
            let (meta, gone): (Arc<PartialObjectMeta<K>>, bool) = match change {
                Change::Initial(meta) | Change::Applied(meta) => (meta, false),
                Change::Deleted(meta) => (meta, true),
                Change::InitDone => {
                    listed.open();
                    continue;
                }
                _ => continue,
            };
            let namespace = meta.metadata.namespace.clone().unwrap_or_default();
            let name = meta.metadata.name.clone().unwrap_or_default();
            let dependent = Dependent::CopyFrom {
                kind: kind.as_str().to_owned(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let source = match copy_source("v1", kind.as_str(), meta.metadata.annotations.as_ref())
            {
                Ok(Some(source)) if !gone => Some((source.kind, source.namespace, source.name)),
                _ => None,
            };
            let key = (kind, namespace, name);
            let (changed, concerned) = {
                let mut sources = lock(&ctx.sources);
                // Only copies are remembered: the set is as small as their number.
                let changed = if source.is_some() || sources.of.contains_key(&dependent) {
                    sources.set(dependent, source)
                } else {
                    Vec::new()
                };
                let labelled =
                    meta.metadata.labels.as_ref().is_some_and(|l| {
                        l.get(PROTECTED_LABEL).map(String::as_str) == Some("true")
                    });
                (changed, sources.is_source(&key) || labelled)
            };
            for source in changed {
                queue.add(source, ());
            }
            if concerned && !gone {
                queue.add(key, ());
            } else if gone {
                lock(&ctx.protected).remove(&key);
            }
        }
    }
}

/// Labels one source (or unlabels what is no longer one), from its dependents now.
async fn handle(ctx: Arc<Context>, configs: ConfigWatches, key: Key) -> Next {
    let (kind, namespace, name) = &key;
    let Some(meta) = configs.stored(*kind, namespace, name) else {
        set_protected(&ctx, &key, false);
        return Next::Done;
    };
    let labelled = meta.label(PROTECTED_LABEL) == Some("true");
    let current = meta.annotation(DEPENDENTS_ANNOTATION).map(str::to_owned);
    let annotations = meta.annotations();
    let source = SourceRef::new(*kind, namespace.clone(), name.clone());
    // A refused copy protects nothing.
    let dependents: Vec<Dependent> = lock(&ctx.sources)
        .dependents(&key)
        .into_iter()
        .filter(|d| match d {
            Dependent::CopyFrom { namespace, .. } => {
                consent::check(&source, annotations.as_ref(), namespace).is_ok()
            }
            _ => true,
        })
        .collect();
    let wanted = if dependents.is_empty() {
        None
    } else if ctx.excluded_namespaces.contains(namespace) {
        if lock(&ctx.warned).insert(key.clone()) {
            warn!(object = %format!("{kind}/{namespace}/{name}"), dependents = %dependents_annotation(&dependents), reason = "NotProtected", "protect: sources in this namespace are never protected");
        }
        None
    } else {
        Some(dependents_annotation(&dependents))
    };
    set_protected(&ctx, &key, wanted.is_some());
    let result = match (&wanted, labelled) {
        (Some(text), true) if current.as_ref() == Some(text) => return Next::Done,
        (Some(text), _) => label(&ctx.client, *kind, namespace, name, Some(text)).await,
        // Only what conflux labelled (it set the annotation too) is unlabelled.
        (None, true) if current.is_some() => label(&ctx.client, *kind, namespace, name, None).await,
        (None, _) => return Next::Done,
    };
    let object = format!("{kind}/{namespace}/{name}");
    match result {
        Ok(()) => {
            lock(&ctx.failing).remove(&key);
            info!(object = %object, protected = wanted.is_some(), "protect: labels updated");
            Next::Done
        }
        Err(err) => {
            if lock(&ctx.failing).insert(key.clone()) {
                warn!(object = %object, reason = err.reason(), error = %err, "protect: cannot update labels; retrying with backoff");
            } else {
                debug!(object = %object, reason = err.reason(), error = %err, "protect: retry failed");
            }
            Next::Retry
        }
    }
}

/// Counts `key` as protected now (or not), for the gauge.
fn set_protected(ctx: &Context, key: &Key, protected: bool) {
    let mut set = lock(&ctx.protected);
    if protected {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
    ctx.metrics
        .protected
        .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
}

/// Applies (with [`FIELD_MANAGER`]) the protection label and annotation, or nothing, which
/// removes the ones this manager set.
pub(super) async fn label(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    dependents: Option<&str>,
) -> Result<(), Error> {
    let mut metadata = serde_json::json!({"name": name, "namespace": namespace});
    if let Some(text) = dependents {
        metadata["labels"] = serde_json::json!({PROTECTED_LABEL: "true"});
        metadata["annotations"] = serde_json::json!({DEPENDENTS_ANNOTATION: text});
    }
    let body = serde_json::json!({"apiVersion": "v1", "kind": kind.as_str(), "metadata": metadata});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let action = format!("labelling {kind} {namespace}/{name}");
    match kind {
        SourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
        SourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (SourceKind::ConfigMap, "apps".to_owned(), name.to_owned())
    }

    fn copy(name: &str) -> Dependent {
        Dependent::CopyFrom {
            kind: "ConfigMap".to_owned(),
            namespace: "team".to_owned(),
            name: name.to_owned(),
        }
    }

    #[test]
    fn sources_say_which_sources_a_dependents_change_concerns() {
        let mut sources = Sources::default();
        assert_eq!(sources.set(copy("a"), Some(key("s1"))), [key("s1")]);
        assert_eq!(sources.set(copy("b"), Some(key("s1"))), [key("s1")]);
        assert_eq!(
            sources.set(copy("a"), Some(key("s1"))),
            Vec::<Key>::new(),
            "unchanged"
        );
        assert_eq!(sources.dependents(&key("s1")), [copy("a"), copy("b")]);
        // `a` now copies s2: both sources are concerned.
        assert_eq!(
            sources.set(copy("a"), Some(key("s2"))),
            [key("s1"), key("s2")]
        );
        assert_eq!(sources.set(copy("b"), None), [key("s1")]);
        assert!(!sources.is_source(&key("s1")), "no dependents left");
        assert_eq!(sources.set(copy("c"), None), Vec::<Key>::new());
        assert!(sources.of.len() == 1 && sources.dependents.len() == 1);
    }
}
