//! The pull-copy controller: a ConfigMap or Secret annotated `fluxcd.controlplane.io/copyFrom:
//! namespace/name` gets the data of its source (docs/design.md section 4.1, Flux Operator
//! compatible).
//!
//! Observe → decide → act → report:
//! - Copy targets and sources both come from the process's shared metadata-only watch of their
//!   kind ([`ConfigWatches`]); no watch of its own. `--watch-label-selector` shards the targets.
//!   A [`ReverseIndex`] maps a source to the targets whose `copyFrom` names it, so a change of a
//!   source re-syncs its copies (copies always track their source; stricter than Flux Operator,
//!   which needs `reconcile.fluxcd.io/watch: Enabled` on the source).
//! - A reconcile reads the target and its source (data is read here and dropped, never cached),
//!   asks the pure modules for consent and for the desired copy, and writes it through the
//!   [`executor`](super::executor).
//! - Refusals, missing sources and type conflicts become a Warning Event on the target, a log
//!   line and a metric, and are retried with backoff; every other target keeps being served.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::ObjectRef as KubeObjectRef;
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};
use watch_index::index::ReverseIndex;
use watch_index::refs::{ObjectRef, ReferenceSet};
use watch_index::runtime::configs::ConfigResource;
use watch_index::runtime::events::{publish, recorder};
use watch_index::runtime::{ConfigWatches, Health, Runtime};
use watch_index::selector::Selector;

use super::executor::{Backoff, apply, get_object, merge_patch, object_reference, recreate};
use super::{ApplyLabels, CopyMetrics, concurrency};
use crate::consent;
use crate::copy_from::copy_source;
use crate::desired::{WriteMode, pull_copy};
use crate::{Error, SourceKind, SourceRef};

/// How often a healthy copy is checked again even when nothing was seen to change.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(600);

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

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: CopyConfig,
    metrics: Arc<CopyMetrics>,
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
    pub fn new(client: Client, config: CopyConfig, metrics: Arc<CopyMetrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client, "conflux"),
            client,
            config,
            metrics,
            refs: ReferenceSet::flux(),
            index: RwLock::new(ReverseIndex::new()),
            backoff: Backoff::default(),
        })
    }

    /// Whether an object is a copy target this instance handles (shard and namespace).
    fn handles(&self, meta: &kube::api::ObjectMeta) -> bool {
        self.config.object_selector.matches(&meta.labels)
            && self
                .config
                .namespace
                .as_ref()
                .is_none_or(|ns| Some(ns) == meta.namespace.as_ref())
    }
}

/// Runs the controller (ConfigMaps and Secrets) until the process ends; readiness is a `copy`
/// part of the runtime's health.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("copy");
    tokio::join!(
        run_kind::<ConfigMap>(&configs, ctx.clone(), health.part("ConfigMap")),
        run_kind::<Secret>(&configs, ctx, health.part("Secret")),
    );
}

async fn run_kind<K: ConfigResource>(
    configs: &ConfigWatches,
    ctx: Arc<Context>,
    health: Arc<Health>,
) {
    let kind = SourceKind::from(K::KIND);
    let informer = configs.informer::<K>();
    let target_ctx = ctx.clone();
    let targets = informer
        .subscribe(&format!("copy targets {kind}"))
        .touched()
        .filter(move |meta| {
            let keep = target_ctx.handles(&meta.metadata)
                && !matches!(
                    copy_source("v1", kind.as_str(), meta.metadata.annotations.as_ref()),
                    Ok(None)
                );
            async move { keep }
        });
    let sources = informer
        .subscribe(&format!("copy sources {kind}"))
        .touched();
    let mapper_ctx = ctx.clone();
    let controller = Controller::for_shared_stream(targets, informer.store())
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(sources, move |meta| copies_of(&mapper_ctx, kind, &meta));
    {
        let informer = informer.clone();
        tokio::spawn(async move {
            informer.wait_synced().await;
            info!(%kind, "copy: targets listed");
            health.set_ready(true);
        });
    }
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
    match ctx.refs.extract(&value) {
        Some(referrer) if ctx.handles(&meta.metadata) && !deleted => index.apply(referrer),
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
        .referrers_of(kind, &namespace, &name)
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
    let wanted = match copy_source("v1", kind.as_str(), obj.metadata.annotations.as_ref()) {
        Ok(None) => return Ok(Action::await_change()),
        Ok(Some(source)) => Ok(source),
        Err(malformed) => Err(malformed),
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
        .applies
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
    wanted: crate::Result<SourceRef>,
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
            return Err(source_ref.unavailable(reason));
        }
        // The source could not be read: say so as Flux Operator does, with the API's reason.
        Err(Error::Kube(watch_index::Error::Api { source, .. })) => {
            return Err(source_ref.unavailable(source));
        }
        Err(err) => return Err(err),
    };
    consent::check(
        &source_ref,
        source.metadata().annotations.as_ref(),
        namespace,
    )
    .map_err(Error::from)?;
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
