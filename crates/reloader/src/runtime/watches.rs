//! Observe: the workload watches keep the consumer index and the workload cache current; the
//! config watches schedule the workloads that consume a changed ConfigMap or Secret; with the CSI
//! integration, the SecretProviderClassPodStatus and SecretProviderClass watches keep the
//! provider store current and schedule the workloads that mount a class whose content changed.
//! Each watch opens its part of the queue's start gate once its initial state is in.

use std::sync::Arc;

use conflux_runtime::client::object_id;
use conflux_runtime::configs::ConfigResource;
use conflux_runtime::queue::Opening;
use conflux_runtime::{Change, Subscription};
use conflux_watch_index::refs::{ConfigKind, ObjectRef};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, PartialObjectMeta};
use tracing::{debug, warn};

use super::act::schedule_resume;
use super::cache::{Cached, Owned, State};
use super::context::{Context, reference, reference_to};
use super::memory;
use crate::source::SourceKind;
use crate::{Error, WorkloadKind};

/// Keeps the index and the workload cache in step with one workload kind.
pub(super) async fn workloads(
    ctx: Arc<Context>,
    kind: WorkloadKind,
    mut sub: Subscription<DynamicObject>,
    mut listed: Opening,
) {
    while let Some(change) = sub.recv().await {
        match change {
            Change::Initial(obj) | Change::Applied(obj) => {
                on_workload(&ctx, kind, obj).await;
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
            Change::InitDone => listed.open(),
            _ => {}
        }
    }
}

/// A workload was added or changed: index it and, when what the decision reads changed,
/// evaluate it now. Returns its reference.
pub(super) async fn on_workload(
    ctx: &Context,
    kind: WorkloadKind,
    obj: Arc<DynamicObject>,
) -> Option<ObjectRef> {
    let name = obj.name_any();
    // Typed for the index and the checks below only; the cache keeps the packed copy.
    let (cached, owned) = match Cached::new(kind, &obj) {
        Ok((cached, owned)) => (cached, Arc::new(owned)),
        Err(err) => {
            warn!(%kind, %name, error = %err, "reload: cannot read workload");
            return None;
        }
    };
    drop(obj);
    let object = owned.workload().object_ref()?;
    let (problems, evaluate) = {
        let mut state = ctx.state();
        // Our own patch's response may already be cached; a watch event from before it must not
        // bring back the state it replaced (that would roll a second time).
        if state
            .workloads
            .get(&object)
            .is_some_and(|newer| cached.is_older_than(newer))
        {
            return Some(object);
        }
        let grant = ctx.grant_of(&state, owned.workload());
        let unchanged = state
            .workloads
            .get(&object)
            .is_some_and(|old| old.same_for_decision(&cached))
            && state
                .index
                .get(&object)
                .is_some_and(|e| *e.opt_in.grant() == grant);
        if unchanged {
            state.workloads.insert(object.clone(), cached.clone());
            return Some(object);
        }
        let indexed = state.index.apply_granted(owned.workload(), grant);
        let problems = if indexed {
            let settings = owned.settings();
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
            state.workloads.insert(object.clone(), cached.clone());
            schedule_resume(ctx, &object, &owned, &settings);
            problems
        } else {
            state.workloads.remove(&object);
            // Not opted in; perhaps because an annotation meant to opt in is malformed.
            crate::opt_in::OptIn::of(owned.workload())
                .problems()
                .iter()
                .map(|p| (p.reason(), p.to_string()))
                .collect()
        };
        ctx.update_gauges(&state);
        (problems, indexed)
    };
    if evaluate {
        ctx.evaluate_now(object.clone());
    } else {
        ctx.forget(&object);
        memory::forget(ctx, &object);
    }
    // Looked at when the annotations change, reported once per distinct problem.
    let key = format!("{object} annotations");
    match problems.first() {
        Some((reason, _)) => {
            let notes: Vec<&str> = problems.iter().map(|(_, note)| note.as_str()).collect();
            let note = format!("reload annotations: {}", notes.join("; "));
            let reference = reference(ctx, &object, &cached);
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

/// Follows Namespaces (`--namespace-selector`): a namespace whose labels now select it gets its
/// workloads evaluated (their baselines remembered, changes made meanwhile rolled).
pub(super) async fn namespaces(
    ctx: Arc<Context>,
    mut sub: Subscription<PartialObjectMeta<Namespace>>,
    mut listed: Opening,
) {
    while let Some((change, previous)) = sub.recv_with_previous().await {
        match change {
            Change::InitDone => listed.open(),
            Change::Applied(ns) => {
                let name = ns.name_any();
                let relabelled = previous
                    .as_ref()
                    .is_none_or(|p| p.metadata.labels != ns.metadata.labels);
                if relabelled && ctx.state().policies.needs_namespace_labels() {
                    // What ReloadPolicies grant its workloads may have changed (baselines move,
                    // nothing rolls).
                    super::policies::reapply(&ctx, Some(&name)).await;
                }
                let was = previous.is_some_and(|p| {
                    ctx.config
                        .namespaces
                        .allows(&name, p.metadata.labels.as_ref())
                });
                if was || !ctx.serves(&name) {
                    continue;
                }
                let workloads: Vec<ObjectRef> = ctx
                    .state()
                    .workloads
                    .keys()
                    .filter(|o| *o.namespace == *name)
                    .cloned()
                    .collect();
                debug!(namespace = %name, workloads = workloads.len(), "reload: namespace now selected");
                for object in workloads {
                    ctx.evaluate_now(object);
                }
            }
            _ => {}
        }
    }
}

/// Forgets a deleted workload: its cache entry, index entry, memory and pending work.
pub(super) fn forget_workload(ctx: &Context, object: &ObjectRef) {
    {
        let mut state: std::sync::MutexGuard<'_, State> = ctx.state();
        state.index.delete(object);
        state.workloads.remove(object);
        state.held.remove(object);
        ctx.update_gauges(&state);
    }
    ctx.forget(object);
    memory::forget(ctx, object);
}

/// Follows one of ConfigMaps/Secrets (the shared metadata watch) and schedules the workloads
/// that read them. The initial state is the baseline: workloads are evaluated on their own first
/// sight. Later changes (re-lists included) schedule evaluations. The previous version of each
/// object comes with its change (the controller keeps no copy of the configs).
pub(super) async fn configs<K: ConfigResource>(
    ctx: Arc<Context>,
    mut sub: Subscription<PartialObjectMeta<K>>,
    mut listed: Opening,
) {
    let kind = ConfigKind::from(K::KIND);
    while let Some((change, previous)) = sub.recv_with_previous().await {
        match change {
            Change::Initial(_) => {}
            Change::InitDone => listed.open(),
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
/// delete): schedule its workloads, debounced.
pub(super) fn on_config(ctx: &Context, kind: ConfigKind, meta: &kube::api::ObjectMeta) {
    let (namespace, name) = object_id(meta);
    if !ctx.serves(&namespace) {
        return;
    }
    let hits: Vec<ObjectRef> = ctx
        .state()
        .index
        .lookup(kind, &namespace, &name, meta.annotations.as_ref())
        .into_iter()
        .map(|hit| hit.workload.clone())
        .collect();
    if hits.is_empty() {
        return;
    }
    debug!(%kind, %namespace, %name, workloads = hits.len(), "reload: config changed");
    ctx.evaluate_changed(hits, (kind.into(), &name));
}

/// The workloads that mount (or name) the SecretProviderClass `class` of `namespace`.
fn provider_consumers(
    ctx: &Context,
    state: &State,
    namespace: &str,
    class: &str,
) -> Vec<ObjectRef> {
    if !ctx.serves(namespace) {
        return Vec::new();
    }
    let annotations = state.providers.class_annotations(namespace, class).cloned();
    state
        .index
        .lookup_provider(namespace, class, annotations.as_ref())
        .into_iter()
        .map(|hit| hit.workload.clone())
        .collect()
}

/// A change of a dynamic watch as (object, deleted, part of the initial list); `None` for the
/// end of the initial list, which opens `listed`.
fn split(
    change: Change<DynamicObject>,
    listed: &mut Opening,
) -> Option<(Arc<DynamicObject>, bool, bool)> {
    match change {
        Change::Initial(obj) => Some((obj, false, true)),
        Change::Applied(obj) => Some((obj, false, false)),
        Change::Deleted(obj) => Some((obj, true, false)),
        Change::InitDone => {
            listed.open();
            None
        }
        _ => None,
    }
}

/// Follows the CSI driver's SecretProviderClassPodStatuses (one per pod and class): what each
/// pod mounted. The initial list fills the store (the baseline: workloads are evaluated on their
/// own first sight); later writes that change a class's content schedule its workloads. A status
/// conflux cannot read is reported once (a Warning Event on it) and does not count.
pub(super) async fn provider_statuses(
    ctx: Arc<Context>,
    mut sub: Subscription<DynamicObject>,
    ar: ApiResource,
    mut listed: Opening,
) {
    while let Some(change) = sub.recv().await {
        let Some((obj, deleted, initial)) = split(change, &mut listed) else {
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
        let hits: Vec<(String, Vec<ObjectRef>)> = {
            let mut state = ctx.state();
            let changed = state.providers.changed_by(&namespace, |store| {
                store.apply_status(&namespace, &name, rv.as_deref(), mount)
            });
            if initial {
                continue;
            }
            changed
                .into_iter()
                .map(|class| {
                    let hits = provider_consumers(&ctx, &state, &namespace, &class);
                    (class, hits)
                })
                .collect()
        };
        for (class, objects) in hits {
            if !objects.is_empty() {
                debug!(%namespace, secret_provider_class = %class, workloads = objects.len(), "reload: SecretProviderClass changed");
                ctx.evaluate_changed(objects, (SourceKind::SecretProviderClass, &class));
            }
        }
    }
}

/// Follows SecretProviderClasses: their annotations (`ignore`, `match`) decide what is watched,
/// and their names what a `reload` regex matches. A change schedules the workloads that mount or
/// name the class (a membership change moves their baselines).
pub(super) async fn provider_classes(
    ctx: Arc<Context>,
    mut sub: Subscription<DynamicObject>,
    mut listed: Opening,
) {
    while let Some((change, previous)) = sub.recv_with_previous().await {
        let Some((obj, deleted, initial)) = split(change, &mut listed) else {
            continue;
        };
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let hits = {
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
            provider_consumers(&ctx, &state, &namespace, &name)
        };
        if !hits.is_empty() {
            ctx.evaluate_changed(hits, (SourceKind::SecretProviderClass, &name));
        }
    }
}
