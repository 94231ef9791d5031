//! The ConfigSync controller: a cluster-scoped `ConfigSync` fans one ConfigMap or Secret out
//! to the namespaces it selects; its status, Events and finalizer (deletion policy).

use std::sync::Arc;

use conflux_runtime::{ConfigWatches, Informer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef as KubeObjectRef, Store};
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use super::Context;
use super::fan_out::{execute, fan_out_once, owner_list};
use crate::config_sync::FINALIZER;
use crate::ownership::{CONFIG_SYNC_LABEL, FIELD_MANAGER};
use crate::runtime::copy::RESYNC_INTERVAL;
use crate::runtime::executor::list_objects;
use crate::runtime::{concurrency, requeue_after_error};
use crate::status::SyncOutcome;
use crate::{ConfigSync, Error, FanOut, SourceKind, plan_deletion};

pub(super) async fn run_config_syncs(
    ctx: Arc<Context>,
    syncs: &Informer<ConfigSync>,
    namespaces: &Informer<PartialObjectMeta<Namespace>>,
    configs: &ConfigWatches,
) {
    let store = syncs.store();
    let (all, cms, secrets) = (store.clone(), store.clone(), store.clone());
    let controller = Controller::for_shared_stream(syncs.subscribe("sync").touched(), store)
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(
            namespaces.subscribe("sync namespaces").touched(),
            move |_ns| every_sync(&all),
        )
        .watches_shared_stream(
            configs
                .informer::<ConfigMap>()
                .subscribe("sync ConfigMap")
                .touched(),
            move |meta| syncs_concerned(&cms, SourceKind::ConfigMap, &meta.metadata),
        )
        .watches_shared_stream(
            configs
                .informer::<Secret>()
                .subscribe("sync Secret")
                .touched(),
            move |meta| syncs_concerned(&secrets, SourceKind::Secret, &meta.metadata),
        );
    controller
        .run(reconcile_sync, sync_error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                debug!(error = %err, "sync: controller event");
            }
        })
        .await;
}

/// The ConfigSyncs a namespace event may concern: all but those whose current generation is
/// stuck on a problem no namespace can fix (an invalid spec, a missing or refused source). Those
/// wait for a change of their own or of their source, so that a bad ConfigSync costs no request
/// per namespace event.
pub(super) fn every_sync(store: &Store<ConfigSync>) -> Vec<KubeObjectRef<ConfigSync>> {
    store
        .state()
        .iter()
        .filter(|cs| !stuck_on_input(cs))
        .map(|cs| KubeObjectRef::from_obj(&**cs))
        .collect()
}

pub(super) fn stuck_on_input(cs: &ConfigSync) -> bool {
    let Some(status) = &cs.status else {
        return false;
    };
    status.observed_generation == cs.metadata.generation
        && status.conditions.iter().any(|c| {
            c.type_ == crate::status::READY
                && c.status == "False"
                && [
                    crate::status::REASON_INVALID_SPEC,
                    crate::status::REASON_SOURCE_NOT_FOUND,
                    crate::status::REASON_REFUSED,
                ]
                .contains(&c.reason.as_str())
        })
}

/// The ConfigSyncs an event on a ConfigMap/Secret concerns ([`ConfigSyncSpec::concerns`]).
///
/// [`ConfigSyncSpec::concerns`]: crate::ConfigSyncSpec::concerns
pub(super) fn syncs_concerned(
    store: &Store<ConfigSync>,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Vec<KubeObjectRef<ConfigSync>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let owner = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(CONFIG_SYNC_LABEL))
        .map(String::as_str);
    store
        .state()
        .iter()
        .filter(|cs| {
            cs.spec
                .concerns(&cs.name_any(), kind, namespace, name, owner)
        })
        .map(|cs| KubeObjectRef::from_obj(&**cs))
        .collect()
}

pub(super) fn sync_error_policy(cs: Arc<ConfigSync>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("ConfigSync/{}", cs.name_any());
    // Retrying cannot help until the ConfigSync or its source changes, which the watches see.
    // (Reported once, by the reconcile.)
    let wait = err.is_input_problem() || matches!(err, Error::SourceUnavailable { .. });
    requeue_after_error(&ctx.backoff, key, err, wait, "sync")
}

/// The key under which an object's problems are remembered (and logged).
pub(super) fn problem_key(reference: &ObjectReference) -> String {
    let kind = reference.kind.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    match reference.namespace.as_deref() {
        // ConfigSyncs are cluster-scoped; their reference names `default` only for Events.
        Some(namespace) if kind != crate::config_sync::KIND => {
            format!("{kind}/{namespace}/{name}")
        }
        _ => format!("{kind}/{name}"),
    }
}

/// Reports a problem of the object behind `reference` once (see [`Problems`](conflux_runtime::events::Problems)).
pub(super) async fn report(
    ctx: &Context,
    reference: &ObjectReference,
    err: &Error,
    message: String,
) {
    ctx.problems
        .report(
            &ctx.recorder,
            reference,
            &problem_key(reference),
            err.reason(),
            &message,
            "Sync",
            "sync: not in sync",
        )
        .await;
}

pub(super) async fn reconcile_sync(
    cs: Arc<ConfigSync>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let api: Api<ConfigSync> = Api::all(ctx.client.clone());
    finalizer(&api, FINALIZER, cs, |event| async {
        match event {
            FinalizerEvent::Apply(cs) => apply_sync(&cs, &ctx).await,
            FinalizerEvent::Cleanup(cs) => cleanup_sync(&cs, &ctx).await,
        }
    })
    .await
    .map_err(finalizer_error)
}

/// The reconcile's own error, or what went wrong with the finalizer.
pub(super) fn finalizer_error(err: kube::runtime::finalizer::Error<Error>) -> Error {
    use kube::runtime::finalizer::Error as F;
    match err {
        F::ApplyFailed(e) | F::CleanupFailed(e) => e,
        F::AddFinalizer(e) => {
            conflux_runtime::Error::api("adding the ConfigSync finalizer")(e).into()
        }
        F::RemoveFinalizer(e) => {
            conflux_runtime::Error::api("removing the ConfigSync finalizer")(e).into()
        }
        F::UnnamedObject => Error::Finalizer("object has no name"),
        _ => Error::Finalizer("invalid finalizer"),
    }
}

/// The Event reference of a ConfigSync. ConfigSyncs are cluster-scoped and their Events live in
/// `default`; Kubernetes before 1.22 rejects an Event whose `regarding.namespace` differs from its
/// own namespace, so the reference names `default` too.
pub(super) fn config_sync_reference(cs: &ConfigSync) -> ObjectReference {
    let mut reference = cs.object_ref(&());
    reference.namespace = Some("default".to_owned());
    reference
}

pub(super) async fn apply_sync(cs: &ConfigSync, ctx: &Context) -> Result<Action, Error> {
    let name = cs.name_any();
    let reference = config_sync_reference(cs);
    let outcome = match FanOut::from_config_sync(&name, &cs.spec) {
        Ok(fan_out) => match fan_out_once(ctx, &fan_out, &reference).await {
            Ok(outcome) => outcome,
            Err(err) => {
                // Reading the cluster failed: nothing was decided; say so and retry with backoff.
                report(ctx, &reference, &err, err.to_string()).await;
                return Err(err);
            }
        },
        Err(problem) => SyncOutcome::failed_with(problem),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = crate::status::status(&outcome, cs.metadata.generation, now, cs.status.as_ref());
    if cs.status.as_ref() != Some(&status) {
        let body = serde_json::json!({
            "apiVersion": format!("{}/{}", crate::config_sync::GROUP, crate::config_sync::VERSION),
            "kind": crate::config_sync::KIND,
            "status": status,
        });
        let api = Api::<ConfigSync>::all(ctx.client.clone());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_status(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(conflux_runtime::Error::api(format!(
                "writing status of ConfigSync {name}"
            )))?;
    }
    finish(ctx, &format!("ConfigSync/{name}"), &reference, &outcome).await
}

/// Reports a problem of the whole sync and turns an incomplete sync into an error (retried with
/// backoff); a complete one is checked again after [`RESYNC_INTERVAL`].
pub(super) async fn finish(
    ctx: &Context,
    key: &str,
    reference: &ObjectReference,
    outcome: &SyncOutcome,
) -> Result<Action, Error> {
    if let Some(problem) = &outcome.problem {
        report(ctx, reference, problem, problem.to_string()).await;
        return Err(problem.clone());
    }
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: key.to_owned(),
            failed: outcome.failed as usize,
            total: (outcome.failed + outcome.synced) as usize,
        });
    }
    ctx.backoff.reset(key);
    if ctx.problems.resolve(&problem_key(reference)) {
        info!(object = %problem_key(reference), "sync: problem resolved");
    }
    Ok(Action::requeue(RESYNC_INTERVAL))
}

pub(super) async fn cleanup_sync(cs: &ConfigSync, ctx: &Context) -> Result<Action, Error> {
    let name = cs.name_any();
    let fan_out = match FanOut::from_config_sync(&name, &cs.spec) {
        Ok(fan_out) => fan_out,
        Err(_) => {
            // The selector does not matter for deletion; only the owner and the policy do.
            let mut spec = cs.spec.clone();
            spec.target.namespace_selector = None;
            FanOut::from_config_sync(&name, &spec)?
        }
    };
    let observed = list_objects(&ctx.client, fan_out.source.kind, &owner_list(&fan_out)).await?;
    let steps = plan_deletion(&fan_out, &observed);
    let count = steps.len();
    let reference = config_sync_reference(cs);
    let outcome = execute(ctx, fan_out.source.kind, &reference, steps, None).await;
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: format!(
                "ConfigSync/{name} deletion policy {:?}",
                fan_out.deletion_policy
            ),
            failed: outcome.failed as usize,
            total: count,
        });
    }
    info!(config_sync = %name, copies = count, policy = fan_out.deletion_policy.as_str(), "sync: ConfigSync deleted, deletion policy applied");
    Ok(Action::await_change())
}
