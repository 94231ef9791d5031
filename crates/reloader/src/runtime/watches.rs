//! Observe: the workload watches keep the consumer index and the workload cache current; the
//! config watches schedule the workloads that consume a changed ConfigMap or Secret; with the CSI
//! integration, the SecretProviderClassPodStatus and SecretProviderClass watches keep the
//! provider store current and schedule the workloads that mount a class whose content changed.

use super::*;

/// Keeps the index and the workload cache in step with one workload kind.
pub(super) async fn watch_workloads(
    ctx: Arc<Context>,
    kind: WorkloadKind,
    mut sub: conflux_runtime::Subscription<DynamicObject>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    while let Some(change) = sub.recv().await {
        match change {
            Change::Initial(obj) | Change::Applied(obj) => {
                on_workload(&ctx, kind, (*obj).clone()).await;
            }
            Change::Deleted(obj) => {
                let object = ObjectRef::new(
                    kind.group(),
                    kind.as_str(),
                    obj.namespace().unwrap_or_default(),
                    obj.name_any(),
                );
                forget_workload(&ctx, &object);
            }
            Change::InitDone => listed.add_permits(1),
            _ => {}
        }
    }
}

/// A workload was added or changed: index it and, when what the decision reads changed,
/// evaluate it now. Returns its reference.
pub(super) async fn on_workload(
    ctx: &Context,
    kind: WorkloadKind,
    obj: DynamicObject,
) -> Option<ObjectRef> {
    let name = obj.name_any();
    let owned = match Owned::from_dynamic(kind, obj) {
        Ok(owned) => Arc::new(owned),
        Err(err) => {
            warn!(%kind, %name, error = %err, "reload: cannot read workload");
            return None;
        }
    };
    let object = owned.workload().object_ref()?;
    let problems: Vec<(&'static str, String)> = {
        let mut state = ctx.state();
        // Our own patch's response may already be cached; a watch event from before it must not
        // bring back the state it replaced (that would roll a second time).
        if state
            .workloads
            .get(&object)
            .is_some_and(|cached| owned.is_older_than(cached))
        {
            return Some(object);
        }
        let unchanged = state
            .workloads
            .get(&object)
            .is_some_and(|old| old.same_for_decision(&owned));
        if unchanged {
            state.workloads.insert(object.clone(), owned);
            return Some(object);
        }
        let indexed = state.index.apply(owned.workload());
        let problems = if indexed {
            let settings = Context::settings(&owned);
            let mut problems: Vec<(&'static str, String)> = state
                .index
                .get(&object)
                .map(|e| {
                    e.opt_in
                        .problems()
                        .iter()
                        .map(|p| (p.reason(), p.to_string()))
                        .collect()
                })
                .unwrap_or_default();
            problems.extend(
                settings
                    .problems
                    .iter()
                    .map(|p| (p.reason(), p.to_string())),
            );
            if let Owned::Rollout(r) = &*owned
                && r.spec.template.is_none()
            {
                let err = Error::NoPodTemplate {
                    kind: WorkloadKind::Rollout,
                    name: object.name.to_string(),
                    hint: if r.spec.workload_ref.is_some() {
                        " (it uses spec.workloadRef: put the reload annotations on the \
                         referenced Deployment, whose template change Argo rolls out)"
                    } else {
                        ""
                    },
                };
                problems.push((err.reason(), err.to_string()));
            }
            state.workloads.insert(object.clone(), owned.clone());
            let now = Instant::now();
            state.pending.schedule(object.clone(), now, now, None);
            schedule_resume(&mut state, &object, &owned, &settings);
            problems
        } else {
            state.workloads.remove(&object);
            state.pending.remove(&object);
            // Not opted in; perhaps because an annotation meant to opt in is malformed.
            crate::opt_in::OptIn::of(owned.workload())
                .problems()
                .iter()
                .map(|p| (p.reason(), p.to_string()))
                .collect()
        };
        ctx.update_gauges(&state);
        problems
    };
    ctx.wake.notify_one();
    // Looked at when the annotations change, reported once per distinct problem.
    let key = format!("{object} annotations");
    match problems.first() {
        Some((reason, _)) => {
            let notes: Vec<&str> = problems.iter().map(|(_, note)| note.as_str()).collect();
            let note = format!("reload annotations: {}", notes.join("; "));
            let reference = reference(ctx, &object, &owned);
            ctx.problems
                .report(
                    &ctx.recorder,
                    &reference,
                    &key,
                    reason,
                    &note,
                    "Reload",
                    "reload: annotation problems",
                )
                .await;
        }
        None => {
            ctx.problems.resolve(&key);
        }
    }
    Some(object)
}

/// A Deployment conflux paused (`paused-at` and `spec.paused`): when to resume it.
pub(super) fn schedule_resume(
    state: &mut State,
    object: &ObjectRef,
    owned: &Owned,
    settings: &WorkloadSettings,
) {
    let Owned::Deployment(d) = owned else {
        return;
    };
    let (paused, paused_at) = pause_state(d);
    let now = unix_now();
    let due = match settings.pause(now, paused, paused_at) {
        Pause::ResumeAt(at) => {
            let wait = u64::try_from(at.saturating_sub(now)).unwrap_or_default();
            Instant::now() + Duration::from_secs(wait)
        }
        Pause::ResumeNow => Instant::now(),
        _ => {
            state.resumes.remove(object);
            return;
        }
    };
    state.resumes.insert(object.clone(), due);
}

/// Follows Namespaces (`--namespace-selector`): a namespace whose labels now select it gets its
/// workloads evaluated (their baselines recorded, changes made meanwhile rolled).
pub(super) async fn watch_namespaces(
    ctx: Arc<Context>,
    mut sub: conflux_runtime::Subscription<PartialObjectMeta<Namespace>>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    while let Some((change, previous)) = sub.recv_with_previous().await {
        match change {
            Change::InitDone => listed.add_permits(1),
            Change::Applied(ns) => {
                let name = ns.name_any();
                let was = previous.is_some_and(|p| {
                    ctx.config
                        .namespaces
                        .allows(&name, p.metadata.labels.as_ref())
                });
                if was || !ctx.serves(&name) {
                    continue;
                }
                let mut state = ctx.state();
                let now = Instant::now();
                let workloads: Vec<ObjectRef> = state
                    .workloads
                    .keys()
                    .filter(|o| *o.namespace == *name)
                    .cloned()
                    .collect();
                debug!(namespace = %name, workloads = workloads.len(), "reload: namespace now selected");
                for object in workloads {
                    state.pending.schedule(object, now, now, None);
                }
                ctx.update_gauges(&state);
                drop(state);
                ctx.wake.notify_one();
            }
            _ => {}
        }
    }
}

pub(super) fn forget_workload(ctx: &Context, object: &ObjectRef) {
    let mut state = ctx.state();
    state.resumes.remove(object);
    state.index.delete(object);
    state.workloads.remove(object);
    state.pending.remove(object);
    state.failures.remove(object);
    state.held.remove(object);
    ctx.update_gauges(&state);
}

/// Follows one of ConfigMaps/Secrets (the shared metadata watch) and schedules the workloads
/// that read them. The initial state is the baseline: workloads are evaluated on their own first
/// sight. Later changes (re-lists included) schedule evaluations. The previous version of each
/// object comes with its change (the controller keeps no copy of the configs).
pub(super) async fn watch_configs<K: ConfigResource>(
    ctx: Arc<Context>,
    mut sub: conflux_runtime::Subscription<PartialObjectMeta<K>>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    let kind = ConfigKind::from(K::KIND);
    while let Some((change, previous)) = sub.recv_with_previous().await {
        match change {
            Change::Initial(_) => {}
            Change::InitDone => listed.add_permits(1),
            Change::Applied(meta) => {
                let unchanged = previous
                    .is_some_and(|p| p.metadata.resource_version == meta.metadata.resource_version);
                if !unchanged {
                    on_config(&ctx, kind, &meta.metadata);
                }
            }
            Change::Deleted(meta) => on_config(&ctx, kind, &meta.metadata),
            _ => {}
        }
    }
}

/// A config was created, updated or deleted (`meta`: its latest metadata, the last known on
/// delete): schedule its workloads after the window.
pub(super) fn on_config(ctx: &Context, kind: ConfigKind, meta: &kube::api::ObjectMeta) {
    let (namespace, name) = object_id(meta);
    if !ctx.serves(&namespace) {
        return;
    }
    let mut state = ctx.state();
    let hits: Vec<ObjectRef> = state
        .index
        .lookup(kind, &namespace, &name, meta.annotations.as_ref())
        .into_iter()
        .map(|hit| hit.workload.clone())
        .collect();
    if hits.is_empty() {
        return;
    }
    debug!(%kind, %namespace, %name, workloads = hits.len(), "reload: config changed");
    schedule_after_window(ctx, &mut state, hits, (kind.into(), name));
    ctx.update_gauges(&state);
    drop(state);
    ctx.wake.notify_one();
}

/// Schedules, after their coalescing window, the workloads that mount (or name) the
/// SecretProviderClass `class` of `namespace`, whose content or annotations changed.
fn schedule_provider_consumers(ctx: &Context, state: &mut State, namespace: &str, class: &str) {
    if !ctx.serves(namespace) {
        return;
    }
    let annotations = state.providers.class_annotations(namespace, class).cloned();
    let hits: Vec<ObjectRef> = state
        .index
        .lookup_provider(namespace, class, annotations.as_ref())
        .into_iter()
        .map(|hit| hit.workload.clone())
        .collect();
    if hits.is_empty() {
        return;
    }
    debug!(%namespace, secret_provider_class = %class, workloads = hits.len(), "reload: SecretProviderClass changed");
    let cause = (SourceKind::SecretProviderClass, class.to_owned());
    schedule_after_window(ctx, state, hits, cause);
}

/// Schedules `hits` for evaluation after their coalescing window, for `cause`.
fn schedule_after_window(
    ctx: &Context,
    state: &mut State,
    hits: Vec<ObjectRef>,
    cause: (SourceKind, String),
) {
    let now = Instant::now();
    for object in hits {
        // The workload's own window (`conflux.dev/reload-debounce`), else the flag's.
        let debounce = state
            .workloads
            .get(&object)
            .and_then(|w| Context::settings(w).debounce)
            .unwrap_or(ctx.config.debounce);
        let due = now + debounce;
        let deadline = now + ctx.config.debounce_max.max(debounce);
        state
            .pending
            .schedule(object, due, deadline, Some(cause.clone()));
    }
}

/// A change of a dynamic watch as (object, deleted, part of the initial list); `None` for the
/// end of the initial list, which releases one `listed` permit.
fn split(
    change: Change<DynamicObject>,
    listed: &tokio::sync::Semaphore,
) -> Option<(Arc<DynamicObject>, bool, bool)> {
    match change {
        Change::Initial(obj) => Some((obj, false, true)),
        Change::Applied(obj) => Some((obj, false, false)),
        Change::Deleted(obj) => Some((obj, true, false)),
        Change::InitDone => {
            listed.add_permits(1);
            None
        }
        _ => None,
    }
}

/// Follows the CSI driver's SecretProviderClassPodStatuses (one per pod and class): what each
/// pod mounted. The initial list fills the store (the baseline: workloads are evaluated on their
/// own first sight); later writes that change a class's content schedule its workloads. A status
/// conflux cannot read is reported once (a Warning Event on it) and does not count.
pub(super) async fn watch_provider_statuses(
    ctx: Arc<Context>,
    mut sub: conflux_runtime::Subscription<DynamicObject>,
    ar: ApiResource,
    listed: Arc<tokio::sync::Semaphore>,
) {
    while let Some(change) = sub.recv().await {
        let Some((obj, deleted, initial)) = split(change, &listed) else {
            continue;
        };
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let key = format!("SecretProviderClassPodStatus {namespace}/{name}");
        let mount = if deleted {
            None
        } else {
            match crate::source::ProviderMount::from_status(&name, &obj.data) {
                Ok(mount) => {
                    ctx.problems.resolve(&key);
                    Some(mount)
                }
                Err(err) => {
                    let reference = reference_to(
                        &ar.api_version,
                        &ar.kind,
                        &namespace,
                        &name,
                        obj.metadata.uid.clone(),
                    );
                    ctx.problems
                        .report(
                            &ctx.recorder,
                            &reference,
                            &key,
                            err.reason(),
                            &format!("{err}; this pod's mount is not counted"),
                            "Reload",
                            "reload: unreadable SecretProviderClassPodStatus",
                        )
                        .await;
                    None
                }
            }
        };
        if deleted {
            ctx.problems.resolve(&key);
        }
        let rv = obj.metadata.resource_version.clone();
        let mut state = ctx.state();
        let changed = state.providers.changed_by(&namespace, |store| {
            store.apply_status(&namespace, &name, rv.as_deref(), mount)
        });
        if initial || changed.is_empty() {
            continue;
        }
        for class in &changed {
            schedule_provider_consumers(&ctx, &mut state, &namespace, class);
        }
        ctx.update_gauges(&state);
        drop(state);
        ctx.wake.notify_one();
    }
}

/// Follows SecretProviderClasses: their annotations (`ignore`, `match`) decide what is watched,
/// and their names what a `reload` regex matches. A change schedules the workloads that mount or
/// name the class (a membership change moves their baselines).
pub(super) async fn watch_provider_classes(
    ctx: Arc<Context>,
    mut sub: conflux_runtime::Subscription<DynamicObject>,
    listed: Arc<tokio::sync::Semaphore>,
) {
    while let Some((change, previous)) = sub.recv_with_previous().await {
        let Some((obj, deleted, initial)) = split(change, &listed) else {
            continue;
        };
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let mut state = ctx.state();
        let before = state
            .providers
            .class_annotations(&namespace, &name)
            .cloned();
        if deleted {
            state.providers.delete_class(&namespace, &name);
        } else {
            let annotations = obj.metadata.annotations.clone().unwrap_or_default();
            state.providers.apply_class(&namespace, &name, annotations);
        }
        let unchanged = !deleted
            && previous.is_some()
            && before
                == state
                    .providers
                    .class_annotations(&namespace, &name)
                    .cloned();
        if initial || unchanged {
            continue;
        }
        schedule_provider_consumers(&ctx, &mut state, &namespace, &name);
        ctx.update_gauges(&state);
        drop(state);
        ctx.wake.notify_one();
    }
}
