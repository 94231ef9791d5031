//! The `copy` controller: a ConfigMap or Secret annotated `fluxcd.controlplane.io/copyFrom:
//! namespace/name` gets the data of its source (DESIGN.md 4.1, Flux Operator compatible).
//!
//! Observe → decide → act → report:
//! - Copy targets are watched metadata-only (one [`Controller`] per kind, `--watch-label-selector`
//!   shards them). Sources are watched metadata-only too, all of them, with no label needed: a
//!   [`ReverseIndex`] maps a source to the targets whose `copyFrom` names it, so a change of a source
//!   re-syncs its copies (copies always track their source; stricter than Flux Operator, which
//!   needs `reconcile.fluxcd.io/watch: Enabled` on the source).
//! - A reconcile reads the target and its source (data is read here and dropped, never cached), asks
//!   `copy-core` for consent and for the desired copy, and writes it: server-side apply with field
//!   manager `conflux` and `force`, plus the merge patch that removes keys someone else added; or
//!   delete and create when the Secret type changes or the target is immutable.
//! - Refusals, missing sources and type conflicts become a Warning Event on the target, a log line
//!   and a metric, and are retried with backoff; every other target keeps being served.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use copy_core::consent;
use copy_core::copy_from::copy_source;
use copy_core::desired::{WriteMode, pull_copy};
use copy_core::ownership::FIELD_MANAGER;
use copy_core::{ConfigObject, SourceKind, SourceRef};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, DeleteParams, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef as KubeObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};
use watch_index::index::ReverseIndex;
use watch_index::refs::{ObjectRef, ReferenceSet};
use watch_index::selector::Selector;

use super::common::{ConfigResource, concurrency, publish, recorder, sharded};
use crate::metrics::{ApplyLabels, Health, Metrics};

/// How often a healthy copy is checked again even when nothing was seen to change.
pub(crate) const RESYNC_INTERVAL: Duration = Duration::from_secs(600);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct CopyConfig {
    /// `--watch-label-selector`: only targets with matching labels are handled (sharding).
    pub object_selector: Selector,
    /// `--concurrent`: targets reconciled in parallel.
    pub concurrent: usize,
    /// Only copy targets in this namespace (`--watch-all-namespaces=false`), or in all when
    /// `None`. Sources may be anywhere.
    pub namespace: Option<String>,
}

/// Errors of one reconcile. Messages never contain data.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The copy-core decision failed (bad annotation, refused, missing source, type conflict).
    #[error(transparent)]
    Copy(#[from] copy_core::Error),
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// A short name for Events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Copy(e) => e.reason(),
            Error::Api { source, .. } => api_reason(source),
        }
    }
}

/// The reason label of an API error: conflicts are told apart from the rest.
pub(crate) fn api_reason(err: &kube::Error) -> &'static str {
    match err {
        kube::Error::Api(status) if status.code == 409 => "Conflict",
        _ => "ApiError",
    }
}

/// Wraps an API error with what was being done.
pub(crate) fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Api {
        action,
        source: Box::new(source),
    }
}

/// Per-object exponential backoff for failed reconciles (1 s doubling up to 5 min), reset on
/// success.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// The delay before retrying `key` after one more failure.
    pub(crate) fn next(&self, key: String) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        let secs = 1u64 << (*n - 1).min(9);
        Duration::from_secs(secs.min(300))
    }

    /// Forgets the failures of `key`.
    pub(crate) fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: CopyConfig,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    refs: ReferenceSet,
    /// Target → source, from the `copyFrom` annotations seen by the source watch.
    index: RwLock<ReverseIndex>,
    backoff: Backoff,
}

impl Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one controller instance.
    pub fn new(client: Client, config: CopyConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client),
            client,
            config,
            metrics,
            refs: ReferenceSet::flux(),
            index: RwLock::new(ReverseIndex::new()),
            backoff: Backoff::default(),
        })
    }
}

/// Runs the controller (ConfigMaps and Secrets) until it fails.
pub async fn run(ctx: Arc<Context>, health: Arc<Health>) -> anyhow::Result<()> {
    let config_maps = run_kind::<ConfigMap>(ctx.clone(), SourceKind::ConfigMap, health.part());
    let secrets = run_kind::<Secret>(ctx, SourceKind::Secret, health.part());
    tokio::select! {
        () = config_maps => anyhow::bail!("copy controller for ConfigMaps stopped"),
        () = secrets => anyhow::bail!("copy controller for Secrets stopped"),
    }
}

async fn run_kind<K: ConfigResource>(ctx: Arc<Context>, kind: SourceKind, health: Arc<Health>) {
    let targets: Api<PartialObjectMeta<K>> = match &ctx.config.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let sources: Api<PartialObjectMeta<K>> = Api::all(ctx.client.clone());
    let mapper_ctx = ctx.clone();
    let controller = Controller::new(targets, sharded(&ctx.config.object_selector))
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches(sources, watcher::Config::default(), move |meta| {
            copies_of(&mapper_ctx, kind, &meta)
        });
    let store = controller.store();
    tokio::spawn(async move {
        wait_until_ready(&store).await;
        info!(%kind, "copy: targets listed");
        health.set_ready(true);
    });
    controller
        .run(
            move |obj, ctx| reconcile(obj, ctx, kind),
            move |obj, err, ctx| error_policy(obj, err, ctx, kind),
            ctx,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                debug!(error = %err, "copy: controller event");
            }
        })
        .await;
}

/// Waits until a controller's store has listed. The store's ready signal wakes only its last
/// poller (the controller's own runner competes for it), so it is polled again every 200 ms.
pub(crate) async fn wait_until_ready<K>(store: &Store<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        let poll = tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready());
        // `Ok(Err(_))`: the controller is gone; nothing more to wait for.
        if poll.await.is_ok() {
            return;
        }
    }
}

/// Keeps the target → source index in step with one object and returns the copy targets of that
/// object as a source.
fn copies_of<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    meta: &PartialObjectMeta<K>,
) -> Vec<KubeObjectRef<PartialObjectMeta<K>>> {
    let namespace = meta.namespace().unwrap_or_default();
    let name = meta.name_any();
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": kind.as_str(),
        "metadata": {
            "namespace": namespace,
            "name": name,
            "annotations": meta.metadata.annotations,
        },
    });
    let mut index = ctx.index.write().unwrap_or_else(|p| p.into_inner());
    let deleted = meta.metadata.deletion_timestamp.is_some();
    let is_target = ctx.config.object_selector.matches(&meta.metadata.labels)
        && ctx
            .config
            .namespace
            .as_ref()
            .is_none_or(|ns| *ns == namespace);
    match ctx.refs.extract(&value) {
        Some(referrer) if is_target && !deleted => index.apply(referrer),
        _ => {
            index.delete(&ObjectRef::new(
                "",
                kind.as_str(),
                namespace.as_str(),
                name.as_str(),
            ));
        }
    }
    index
        .referrers_of(kind.into(), &namespace, &name)
        .map(|r| KubeObjectRef::new(&r.name).within(&r.namespace))
        .collect()
}

fn error_policy<K: ConfigResource>(
    obj: Arc<PartialObjectMeta<K>>,
    err: &Error,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Action {
    let key = format!(
        "{kind}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let delay = ctx.backoff.next(key.clone());
    warn!(target = %key, reason = err.reason(), error = %err, retry_in = ?delay, "copy: cannot sync copy");
    Action::requeue(delay)
}

async fn reconcile<K: ConfigResource>(
    obj: Arc<PartialObjectMeta<K>>,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Result<Action, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let Some(wanted) = copy_source("v1", kind.as_str(), obj.metadata.annotations.as_ref()) else {
        return Ok(Action::await_change());
    };
    let key = format!("{kind}/{namespace}/{name}");
    let reference = object_reference(kind, &obj.metadata);
    let result = sync_copy(&ctx, kind, &namespace, &name, wanted).await;
    let label = match &result {
        Ok(Some(mode)) => mode,
        Ok(None) => "unchanged",
        Err(err) => err.reason(),
    };
    ctx.metrics
        .copy_applies
        .get_or_create(&ApplyLabels {
            controller: "copy".to_owned(),
            result: label.to_owned(),
        })
        .inc();
    match result {
        Ok(written) => {
            ctx.backoff.reset(&key);
            if let Some(mode) = written {
                info!(target = %key, mode, "copy: copy written");
            }
            Ok(Action::requeue(RESYNC_INTERVAL))
        }
        Err(err) => {
            publish(
                &ctx.recorder,
                &reference,
                EventType::Warning,
                err.reason(),
                err.to_string(),
                "Copy",
            )
            .await;
            Err(err)
        }
    }
}

/// Makes one target a copy of its source. `Ok(Some(how))` when something was written.
async fn sync_copy(
    ctx: &Context,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    wanted: copy_core::Result<SourceRef>,
) -> Result<Option<&'static str>, Error> {
    let source_ref = wanted?;
    let Some(target) = get_object(&ctx.client, kind, namespace, name).await? else {
        return Ok(None);
    };
    let source = match get_object(&ctx.client, kind, &source_ref.namespace, &source_ref.name).await
    {
        Ok(Some(source)) => source,
        Ok(None) => {
            let reason = format!(
                "{}s \"{}\" not found",
                kind.as_str().to_lowercase(),
                source_ref.name
            );
            return Err(source_ref.unavailable(reason).into());
        }
        Err(Error::Api { source, .. }) => return Err(source_ref.unavailable(source).into()),
        Err(err) => return Err(err),
    };
    consent::check(
        &source_ref,
        source.metadata().annotations.as_ref(),
        namespace,
    )
    .map_err(copy_core::Error::from)?;
    let desired = pull_copy(&source, &target)?;
    match desired.mode {
        WriteMode::Unchanged => Ok(None),
        WriteMode::Apply => {
            apply(&ctx.client, &desired.object).await?;
            if let Some(cleanup) = &desired.cleanup {
                merge_patch(&ctx.client, kind, namespace, name, cleanup).await?;
            }
            Ok(Some("apply"))
        }
        WriteMode::Recreate => {
            recreate(&ctx.client, &desired.object).await?;
            Ok(Some("recreate"))
        }
    }
}

/// Reads a ConfigMap or Secret with its data; `None` when it does not exist.
pub(crate) async fn get_object(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
) -> Result<Option<ConfigObject>, Error> {
    let action = || format!("reading {kind} {namespace}/{name}");
    Ok(match kind {
        SourceKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(api_err(action()))?
            .map(ConfigObject::from),
        SourceKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(api_err(action()))?
            .map(ConfigObject::from),
    })
}

/// Server-side applies `object` with field manager `conflux` and `force`.
pub(crate) async fn apply(client: &Client, object: &ConfigObject) -> Result<(), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let (namespace, name) = (object.namespace(), object.name());
    let action = || format!("applying {} {namespace}/{name}", object.kind());
    match object {
        ConfigObject::ConfigMap(cm) => {
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .patch(name, &params, &Patch::Apply(cm))
                .await
                .map_err(api_err(action()))?;
        }
        ConfigObject::Secret(s) => {
            Api::<Secret>::namespaced(client.clone(), namespace)
                .patch(name, &params, &Patch::Apply(s))
                .await
                .map_err(api_err(action()))?;
        }
    }
    Ok(())
}

/// Sends a JSON merge patch (cleanup of stray keys, release of ownership).
pub(crate) async fn merge_patch(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let action = || format!("patching {kind} {namespace}/{name}");
    match kind {
        SourceKind::ConfigMap => {
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(api_err(action()))?;
        }
        SourceKind::Secret => {
            Api::<Secret>::namespaced(client.clone(), namespace)
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(api_err(action()))?;
        }
    }
    Ok(())
}

/// Deletes an object; a missing one is fine.
pub(crate) async fn delete(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
) -> Result<(), Error> {
    let action = || format!("deleting {kind} {namespace}/{name}");
    let dp = DeleteParams::default();
    let result = match kind {
        SourceKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .delete(name, &dp)
            .await
            .map(drop),
        SourceKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .delete(name, &dp)
            .await
            .map(drop),
    };
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(api_err(action())(err)),
    }
}

/// Deletes the object and creates `object` in its place (Secret `type` and `immutable` data cannot
/// be patched).
pub(crate) async fn recreate(client: &Client, object: &ConfigObject) -> Result<(), Error> {
    let (namespace, name) = (object.namespace(), object.name());
    delete(client, object.kind(), namespace, name).await?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let action = || format!("creating {} {namespace}/{name}", object.kind());
    match object {
        ConfigObject::ConfigMap(cm) => {
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .create(&params, cm)
                .await
                .map_err(api_err(action()))?;
        }
        ConfigObject::Secret(s) => {
            Api::<Secret>::namespaced(client.clone(), namespace)
                .create(&params, s)
                .await
                .map_err(api_err(action()))?;
        }
    }
    Ok(())
}

/// The reference of a ConfigMap/Secret for an Event.
pub(crate) fn object_reference(kind: SourceKind, meta: &kube::api::ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some(kind.as_str().to_owned()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_object_up_to_five_minutes_and_resets_on_success() {
        let backoff = Backoff::default();
        let delays: Vec<u64> = (0..12)
            .map(|_| backoff.next("ConfigMap/a/b".to_owned()).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(
            backoff.next("Secret/a/b".to_owned()).as_secs(),
            1,
            "per object"
        );
        backoff.reset("ConfigMap/a/b");
        assert_eq!(backoff.next("ConfigMap/a/b".to_owned()).as_secs(), 1);
    }

    #[test]
    fn conflicts_are_told_apart_from_other_api_errors() {
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            }))
        };
        assert_eq!(api_reason(&status(409)), "Conflict");
        assert_eq!(api_reason(&status(500)), "ApiError");
    }
}
