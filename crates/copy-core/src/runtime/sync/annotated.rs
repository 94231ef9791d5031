//! Sources annotated for fan-out (kopy's `kopy.kot-labs.com/sync` / `flynshue.io/sync`,
//! reflector's `reflection-auto-enabled`, replicator's `replicate-to` / `replicate-to-matching`)
//! in a trusted namespace, the primary objects of a controller per kind
//! ([`FanOut::from_annotations`]); their copies are orphaned when they go, released when the
//! annotation goes.
//!
//! Level-triggered from the shared informers: a namespace event re-plans every trusted annotated
//! source from the stores, and an event on one of our copies, or on any object named like an
//! annotated source, re-plans that source. So a namespace created while a watch reconnects, a copy
//! deleted by hand, or a conflicting object that goes away is never missed (the failures reflector
//! and replicator users report: copies that stop until a restart).

use std::collections::BTreeMap;
use std::sync::Arc;

use conflux_runtime::ConfigWatches;
use conflux_runtime::configs::ConfigResource;
use conflux_runtime::events::publish;
use conflux_runtime::sync::{read, write};
use conflux_runtime::{Health, Informer, Runtime};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef as KubeObjectRef, Store};
use tracing::{debug, info, warn};

use super::Context;
use super::config_sync::{finish, report};
use super::fan_out::{execute, fan_out_once, owner_list};
use crate::fan_out::{KOPY_SYNC_ANNOTATION, KOPY_SYNC_ANNOTATION_LEGACY};
use crate::ownership::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, SOURCE_ANNOTATION, SOURCE_NAME_LABEL,
    parse_source_annotation,
};
use crate::runtime::executor::{get_object, list_objects, object_reference};
use crate::runtime::{concurrency, requeue_object};
use crate::{Error, FanOut, Selection, SourceKind, SourceRef, plan_deletion, plan_sync};

pub(super) async fn run_annotated<K: ConfigResource>(
    ctx: Arc<Context>,
    runtime: &Runtime,
    namespaces: &Informer<PartialObjectMeta<Namespace>>,
    configs: &ConfigWatches,
    health: &Health,
) {
    let kind = SourceKind::from(conflux_watch_index::refs::ConfigKind::from(K::KIND));
    let informer = configs.informer::<K>();
    let trusted = ctx.config.sync_source_namespaces.clone();
    let source_ctx = ctx.clone();
    // Sources: annotated ones in this shard, and those known to own copies (so removing the
    // annotation releases them). Deletions come through too; the controller answers them with
    // `ObjectNotFound`, handled below.
    // The controller's store holds only these (the shared one keeps every object, compactly).
    // An owner named by a copy that is not kept here (its annotation removed before the copy
    // named it) comes back as `ObjectNotFound`, handled below.
    let wanted = Arc::new(move |meta: &PartialObjectMeta<K>| {
        let m = &meta.metadata;
        let in_scope = source_ctx.config.object_selector.matches(&m.labels)
            && source_ctx
                .config
                .namespace
                .as_ref()
                .is_none_or(|ns| Some(ns) == m.namespace.as_ref());
        in_scope
            && (fan_out_annotation(m.annotations.as_ref())
                || read(&source_ctx.source_owners).contains(&SourceRef::new(
                    kind,
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default(),
                )))
    });
    let keep = wanted.clone();
    let (store, sources) = informer
        .subscribe(&format!("annotated sources {kind}"))
        .touched_keeping(move |meta: &PartialObjectMeta<K>| keep(meta));
    let sources = sources.filter(move |meta| {
        let keep = wanted(meta);
        async move { keep }
    });
    let related_ctx = ctx.clone();
    let related_store = store.clone();
    let namespace_store = store.clone();
    let controller = Controller::for_shared_stream(sources, store)
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(
            namespaces
                .subscribe(&format!("annotated namespaces {kind}"))
                .touched(),
            move |_ns| annotated_sources(&namespace_store, &trusted),
        )
        .watches_shared_stream(
            informer
                .subscribe(&format!("annotated related {kind}"))
                .touched(),
            move |meta| related_sources(&related_ctx, &related_store, kind, &meta.metadata),
        );
    let _ = health;
    let orphan_ctx = ctx.clone();
    let tasks = runtime.tasks().clone();
    controller
        .run(
            move |obj, ctx| reconcile_annotated(obj, ctx, kind),
            move |obj, err, ctx| {
                let wait = err.is_input_problem() || matches!(err, Error::SourceUnavailable { .. });
                requeue_object(&ctx.backoff, kind, &*obj, err, wait, "sync")
            },
            ctx,
        )
        .for_each(|result| {
            let (ctx, tasks) = (orphan_ctx.clone(), tasks.clone());
            async move {
                match result {
                    // An annotated source (or the owner named by a copy) that no longer exists.
                    Err(controller::Error::ObjectNotFound(gone)) => {
                        let source = SourceRef::new(
                            kind,
                            gone.namespace.clone().unwrap_or_default(),
                            gone.name.clone(),
                        );
                        tasks.spawn(async move { orphan_copies(&ctx, source).await });
                    }
                    Err(err) => debug!(error = %err, "sync: annotated sources controller event"),
                    Ok(_) => {}
                }
            }
        })
        .await;
}

/// An annotated source is gone: its copies are kept (workloads keep running) and marked orphaned,
/// and an Event says so.
pub(super) async fn orphan_copies(ctx: &Context, source: SourceRef) {
    let result: Result<usize, Error> = async {
        if let Some(object) =
            get_object(&ctx.client, source.kind, &source.namespace, &source.name).await?
        {
            // It exists, without a fan-out annotation (the controller keeps only annotated
            // sources): release the copies it owned, if it owned any.
            if !fan_out_annotation(object.metadata().annotations.as_ref()) {
                let reference = object_reference(source.kind, object.metadata());
                release(ctx, &source, &reference).await?;
            }
            return Ok(0);
        }
        let fan_out = FanOut::of_source(&source, Selection::nothing());
        let observed = list_objects(&ctx.client, source.kind, &owner_list(&fan_out)).await?;
        let steps = plan_sync(&fan_out, None, std::iter::empty(), &observed);
        let count = steps.len();
        if count > 0 {
            let reference = ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some(source.kind.as_str().to_owned()),
                namespace: Some(source.namespace.clone()),
                name: Some(source.name.clone()),
                ..ObjectReference::default()
            };
            execute(ctx, source.kind, &reference, steps, None).await;
            publish(
                &ctx.recorder,
                &reference,
                EventType::Warning,
                crate::status::REASON_SOURCE_NOT_FOUND,
                format!("{source} was deleted; its {count} copies are kept and marked orphaned"),
                "Sync",
            )
            .await;
        }
        Ok(count)
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(count) => {
            info!(source = %source, copies = count, "sync: annotated source deleted, copies marked orphaned")
        }
        Err(err) => {
            warn!(source = %source, error = %err, "sync: cannot mark the copies of a deleted annotated source")
        }
    }
}

/// Whether a ConfigMap/Secret carries an annotation asking for fan-out (kopy, reflector,
/// replicator); what it asks for, and whether it may, is [`FanOut::from_annotations`]'s.
pub(super) fn fan_out_annotation(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        [
            KOPY_SYNC_ANNOTATION,
            KOPY_SYNC_ANNOTATION_LEGACY,
            crate::reflector::AUTO_ENABLED,
            crate::replicator::REPLICATE_TO,
            crate::replicator::REPLICATE_TO_MATCHING,
        ]
        .iter()
        .any(|key| a.contains_key(*key))
    })
}

pub(super) fn annotated_sources<K: ConfigResource>(
    store: &Store<PartialObjectMeta<K>>,
    trusted: &[String],
) -> Vec<KubeObjectRef<PartialObjectMeta<K>>> {
    store
        .state()
        .iter()
        .filter(|m| fan_out_annotation(m.metadata.annotations.as_ref()))
        .filter(|m| {
            trusted
                .iter()
                .any(|t| Some(t.as_str()) == m.metadata.namespace.as_deref())
        })
        .map(|m| KubeObjectRef::from_obj(&**m))
        .collect()
}

/// The annotated sources an event on a ConfigMap/Secret concerns: the owner of one of our
/// copies, and every annotated source of the same name in another namespace (the object may be
/// a conflicting one that went away, or a copy deleted or edited by someone).
pub(super) fn related_sources<K: ConfigResource>(
    ctx: &Context,
    store: &Store<PartialObjectMeta<K>>,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Vec<KubeObjectRef<PartialObjectMeta<K>>> {
    let ours = meta.labels.as_ref().is_some_and(|l| {
        l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
            && l.contains_key(SOURCE_NAME_LABEL)
    });
    let mut out: Vec<KubeObjectRef<PartialObjectMeta<K>>> = Vec::new();
    if ours {
        out.extend(source_owner_of(ctx, kind, meta));
    }
    let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
    out.extend(
        store
            .state()
            .iter()
            .filter(|s| {
                s.metadata.name.as_deref() == name && s.metadata.namespace.as_deref() != namespace
            })
            .map(|s| KubeObjectRef::from_obj(&**s)),
    );
    out
}

/// The annotated source owning a copy, from the copy's source annotation; remembered so that
/// removing the annotation from the source releases its copies.
pub(super) fn source_owner_of<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Option<KubeObjectRef<PartialObjectMeta<K>>> {
    let value = meta.annotations.as_ref()?.get(SOURCE_ANNOTATION)?;
    let source = parse_source_annotation(value).filter(|s| s.kind == kind)?;
    let reference = KubeObjectRef::new(&source.name).within(&source.namespace);
    write(&ctx.source_owners).insert(source);
    Some(reference)
}

pub(super) async fn reconcile_annotated<K: ConfigResource>(
    meta: Arc<PartialObjectMeta<K>>,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Result<Action, Error> {
    let source_ref = SourceRef::new(kind, meta.namespace().unwrap_or_default(), meta.name_any());
    let key = source_ref.to_string();
    let reference = object_reference(kind, &meta.metadata);
    let annotations = meta.metadata.annotations.as_ref();
    let labels = meta.metadata.labels.as_ref();
    let trusted = ctx.config.sync_source_namespaces.iter().map(String::as_str);
    let fan_out = match FanOut::from_annotations(&source_ref, labels, annotations, trusted) {
        Ok(None) => return release(&ctx, &source_ref, &reference).await,
        Err(refused) => {
            // Refused or unparsable: reported once, not retried (a change of the source is).
            report(&ctx, &reference, &refused, refused.to_string()).await;
            return Ok(Action::await_change());
        }
        Ok(Some(fan_out)) => fan_out,
    };
    let outcome = fan_out_once(&ctx, &fan_out, &reference).await?;
    if outcome.failed == 0 && outcome.problem.is_none() {
        write(&ctx.source_owners).insert(source_ref);
    }
    finish(&ctx, &key, &reference, &outcome).await
}

/// A source without (or no longer with) a fan-out annotation: release the copies it owned.
pub(super) async fn release(
    ctx: &Context,
    source_ref: &SourceRef,
    reference: &ObjectReference,
) -> Result<Action, Error> {
    let known = read(&ctx.source_owners).contains(source_ref);
    if !known {
        return Ok(Action::await_change());
    }
    let fan_out = FanOut::of_source(source_ref, Selection::nothing());
    let observed = list_objects(&ctx.client, source_ref.kind, &owner_list(&fan_out)).await?;
    let steps = plan_deletion(&fan_out, &observed);
    let total = steps.len();
    let outcome = execute(ctx, source_ref.kind, reference, steps, None).await;
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: format!("releasing the copies of {source_ref}"),
            failed: outcome.failed as usize,
            total,
        });
    }
    write(&ctx.source_owners).remove(source_ref);
    info!(source = %source_ref, "sync: fan-out annotation removed, copies released");
    Ok(Action::await_change())
}
