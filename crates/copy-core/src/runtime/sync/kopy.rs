//! kopy-annotated sources (`kopy.kot-labs.com/sync`, `flynshue.io/sync`) in a trusted namespace,
//! the primary objects of a controller per kind; their copies are orphaned when they go.

use super::*;

pub(super) async fn run_kopy<K: ConfigResource>(
    ctx: Arc<Context>,
    runtime: &Runtime,
    namespaces: &Informer<PartialObjectMeta<Namespace>>,
    configs: &ConfigWatches,
    health: &Health,
) {
    let kind = SourceKind::from(K::KIND);
    let informer = configs.informer::<K>();
    let trusted = ctx.config.sync_source_namespaces.clone();
    let source_ctx = ctx.clone();
    // Sources: kopy-annotated ones in this shard, and those known to own copies (so removing the
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
            && (kopy_annotation(m.annotations.as_ref())
                || read(&source_ctx.kopy_owners).contains(&SourceRef::new(
                    kind,
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default(),
                )))
    });
    let keep = wanted.clone();
    let (store, sources) = informer
        .subscribe(&format!("kopy sources {kind}"))
        .touched_keeping(move |meta: &PartialObjectMeta<K>| keep(meta));
    let sources = sources.filter(move |meta| {
        let keep = wanted(meta);
        async move { keep }
    });
    let owners_ctx = ctx.clone();
    let copies = informer
        .subscribe(&format!("kopy copies {kind}"))
        .touched()
        .filter(|meta| {
            let labels = meta.metadata.labels.as_ref();
            let ours = labels.is_some_and(|l| {
                l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
                    && l.contains_key(SOURCE_NAME_LABEL)
            });
            async move { ours }
        });
    let controller = Controller::for_shared_stream(sources, store.clone())
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(
            namespaces
                .subscribe(&format!("kopy namespaces {kind}"))
                .touched(),
            move |_ns| kopy_sources(&store, &trusted),
        )
        .watches_shared_stream(copies, move |meta| {
            kopy_owner_of(&owners_ctx, kind, &meta.metadata)
        });
    let _ = health;
    let orphan_ctx = ctx.clone();
    let tasks = runtime.tasks().clone();
    controller
        .run(
            move |obj, ctx| reconcile_kopy(obj, ctx, kind),
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
                    // A kopy source (or the owner named by a copy) that no longer exists.
                    Err(controller::Error::ObjectNotFound(gone)) => {
                        let source = SourceRef::new(
                            kind,
                            gone.namespace.clone().unwrap_or_default(),
                            gone.name.clone(),
                        );
                        tasks.spawn(async move { orphan_kopy_copies(&ctx, source).await });
                    }
                    Err(err) => debug!(error = %err, "sync: kopy controller event"),
                    Ok(_) => {}
                }
            }
        })
        .await;
}

/// A kopy source is gone: its copies are kept (workloads keep running) and marked orphaned, and
/// an Event says so.
pub(super) async fn orphan_kopy_copies(ctx: &Context, source: SourceRef) {
    let result: Result<usize, Error> = async {
        if let Some(object) =
            get_object(&ctx.client, source.kind, &source.namespace, &source.name).await?
        {
            // It exists, without the kopy annotation (the controller keeps only annotated
            // sources): release the copies it owned, if it owned any.
            if !kopy_annotation(object.metadata().annotations.as_ref()) {
                let reference = object_reference(source.kind, object.metadata());
                release_kopy(ctx, &source, &reference).await?;
            }
            return Ok(0);
        }
        let fan_out = FanOut::kopy(&source, Selector::nothing());
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
            info!(source = %source, copies = count, "sync: kopy source deleted, copies marked orphaned")
        }
        Err(err) => {
            warn!(source = %source, error = %err, "sync: cannot mark the copies of a deleted kopy source")
        }
    }
}

pub(super) fn kopy_annotation(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        a.contains_key(KOPY_SYNC_ANNOTATION) || a.contains_key(KOPY_SYNC_ANNOTATION_LEGACY)
    })
}

pub(super) fn kopy_sources<K: ConfigResource>(
    store: &Store<PartialObjectMeta<K>>,
    trusted: &[String],
) -> Vec<KubeObjectRef<PartialObjectMeta<K>>> {
    store
        .state()
        .iter()
        .filter(|m| kopy_annotation(m.metadata.annotations.as_ref()))
        .filter(|m| {
            trusted
                .iter()
                .any(|t| Some(t.as_str()) == m.metadata.namespace.as_deref())
        })
        .map(|m| KubeObjectRef::from_obj(&**m))
        .collect()
}

/// The kopy source owning a copy, from the copy's source annotation; remembered so that removing
/// the annotation from the source releases its copies.
pub(super) fn kopy_owner_of<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Option<KubeObjectRef<PartialObjectMeta<K>>> {
    let value = meta.annotations.as_ref()?.get(SOURCE_ANNOTATION)?;
    let source = parse_source_annotation(value).filter(|s| s.kind == kind)?;
    let reference = KubeObjectRef::new(&source.name).within(&source.namespace);
    write(&ctx.kopy_owners).insert(source);
    Some(reference)
}

pub(super) async fn reconcile_kopy<K: ConfigResource>(
    meta: Arc<PartialObjectMeta<K>>,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Result<Action, Error> {
    let source_ref = SourceRef::new(kind, meta.namespace().unwrap_or_default(), meta.name_any());
    let key = source_ref.to_string();
    let reference = object_reference(kind, &meta.metadata);
    let annotations = meta.metadata.annotations.as_ref();
    let trusted = ctx.config.sync_source_namespaces.iter().map(String::as_str);
    let fan_out = match FanOut::from_kopy(&source_ref, annotations, trusted) {
        Ok(None) => return release_kopy(&ctx, &source_ref, &reference).await,
        Err(refused) => {
            // Refused or unparsable: reported once, not retried (a change of the source is).
            report(&ctx, &reference, &refused, refused.to_string()).await;
            return Ok(Action::await_change());
        }
        Ok(Some(fan_out)) => fan_out,
    };
    let outcome = fan_out_once(&ctx, &fan_out, &reference).await?;
    if outcome.failed == 0 && outcome.problem.is_none() {
        write(&ctx.kopy_owners).insert(source_ref);
    }
    finish(&ctx, &key, &reference, &outcome).await
}

/// A source without (or no longer with) a kopy annotation: release the copies it owned.
pub(super) async fn release_kopy(
    ctx: &Context,
    source_ref: &SourceRef,
    reference: &ObjectReference,
) -> Result<Action, Error> {
    let known = read(&ctx.kopy_owners).contains(source_ref);
    if !known {
        return Ok(Action::await_change());
    }
    let fan_out = FanOut::kopy(source_ref, Selector::nothing());
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
    write(&ctx.kopy_owners).remove(source_ref);
    info!(source = %source_ref, "sync: kopy annotation removed, copies released");
    Ok(Action::await_change())
}
