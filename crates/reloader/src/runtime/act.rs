//! Act: a rollout is one server-side apply of the pod template (or a Job's re-creation, or an
//! Argo Rollout's restart), with a Deployment's pause period around it; each gets an Event, each
//! failure a report (once) and a retry with backoff through the queue.

use std::collections::BTreeSet;
use std::time::Duration;

use conflux_runtime::events::publish;
use conflux_runtime::queue::Next;
use conflux_watch_index::refs::ObjectRef;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use tracing::{debug, info, warn};

use super::cache::{Cached, Owned};
use super::context::{Context, reference};
use super::metrics::RolloutLabels;
use super::plan::Plan;
use super::recreate::start_recreation;
use super::work::Work;
use crate::hash::ContentHash;
use crate::patch::{CONFIG_HASH_ANNOTATION, ConfigChange, FIELD_MANAGER, WorkloadPatch};
use crate::settings::{Pause, RolloutStrategy, WorkloadSettings};
use crate::source::SourceKind;
use crate::{Error, Result, WorkloadKind};

/// How a rollout went.
pub(super) enum Applied {
    /// The workload rolls.
    Rolled,
    /// A Job's re-creation started; its own work reports the outcome.
    Started,
    /// It failed; retried with backoff.
    Failed(Error),
}

/// Writes the rollout `patch` of a planned workload whose configs now hash to `current`.
pub(super) async fn rollout(
    ctx: &Context,
    plan: &Plan,
    patch: WorkloadPatch,
    current: &ContentHash,
) -> Applied {
    let patch = patch.reloaded_from(&plan.state, unix_now());
    let mut why = describe(&patch.changes, &plan.causes.0);
    let Some(workload) = plan.workload.typed() else {
        return Applied::Failed(Error::UnreadableWorkload {
            kind: plan.workload.kind(),
            name: plan.object.name.to_string(),
        });
    };
    if let Owned::Job(job) = &workload {
        // Re-created: `recreate` reports the outcome (its Event names the new Job).
        let uid = job.metadata.uid.as_deref();
        return match start_recreation(ctx, &plan.object, uid, &patch, why).await {
            Ok(()) => Applied::Started,
            Err(err) => Applied::Failed(err),
        };
    }
    let settings = workload.settings();
    let restart = matches!(&workload, Owned::Rollout(_))
        && settings.rollout_strategy == RolloutStrategy::Restart;
    let result = match pause(ctx, plan, &workload).await {
        Ok(_) if restart => {
            why.push_str("; restarted (spec.restartAt)");
            restart_rollout(ctx, plan, &patch).await
        }
        Ok(Some(period)) => {
            why.push_str(&format!("; paused for {}s", period.as_secs()));
            apply(ctx, plan, patch).await
        }
        Ok(None) => apply(ctx, plan, patch).await,
        Err(err) => Err(err),
    };
    ctx.metrics
        .rollouts
        .get_or_create(&RolloutLabels {
            kind: plan.object.kind.to_string(),
            result: if result.is_ok() { "success" } else { "error" }.to_owned(),
        })
        .inc();
    match result {
        Ok(()) => {
            ctx.problems.resolve(&plan.object.to_string());
            let short = &current.hex[..current.hex.len().min(12)];
            info!(workload = %plan.object, %why, hash = %short, "reload: rolled out");
            let reference = reference(ctx, &plan.object, &plan.workload);
            publish(
                &ctx.recorder,
                &reference,
                EventType::Normal,
                "Reloaded",
                format!("{why}; rolling out ({CONFIG_HASH_ANNOTATION}={short})"),
                "Reload",
            )
            .await;
            Applied::Rolled
        }
        Err(err) => Applied::Failed(err),
    }
}

/// A Deployment's `spec.paused` and its `paused-at` annotation.
pub(super) fn pause_state(d: &Deployment) -> (bool, Option<&str>) {
    let paused_at = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::settings::PAUSED_AT))
        .map(String::as_str);
    (d.spec.paused.unwrap_or(false), paused_at)
}

/// Before a Deployment with a `pause-period` rolls: pauses it (`spec.paused`, and `paused-at`
/// so it is known to be ours) unless it is paused already, and schedules the resume. Returns the
/// period when it paused now.
async fn pause(ctx: &Context, plan: &Plan, workload: &Owned) -> Result<Option<Duration>> {
    let Owned::Deployment(d) = workload else {
        return Ok(None);
    };
    let Some(period) = workload.settings().pause_period else {
        return Ok(None);
    };
    if pause_state(d).0 {
        // Paused by us (its resume is scheduled) or by someone else (never ours to touch).
        return Ok(None);
    }
    let body = serde_json::json!({
        "spec": {"paused": true},
        "metadata": {"annotations": {crate::settings::PAUSED_AT: crate::settings::format_rfc3339(unix_now())}},
    });
    merge_patch(ctx, plan.workload.kind(), &plan.object, &body).await?;
    ctx.later(Work::Resume(plan.object.clone()), period);
    Ok(Some(period))
}

/// Resumes a Deployment whose pause period is over, if it is still paused by us.
pub(super) async fn resume(ctx: &Context, object: &ObjectRef) -> Next {
    let cached = ctx.state().workloads.get(object).cloned();
    let Some(workload) = cached.and_then(|c| c.typed()) else {
        return Next::Done;
    };
    let Owned::Deployment(d) = &workload else {
        return Next::Done;
    };
    let settings = workload.settings();
    let (paused, paused_at) = pause_state(d);
    match settings.pause(unix_now(), paused, paused_at) {
        Pause::ResumeNow => {}
        Pause::ResumeAt(_) => {
            // The cache is older than the pause: look again once it catches up.
            schedule_resume(ctx, object, &workload, &settings);
            return Next::Done;
        }
        _ => return Next::Done,
    }
    let body = serde_json::json!({
        "spec": {"paused": false},
        "metadata": {"annotations": {crate::settings::PAUSED_AT: null}},
    });
    match merge_patch(ctx, WorkloadKind::Deployment, object, &body).await {
        Ok(()) => {
            info!(workload = %object, "reload: pause period over, resumed");
            Next::Done
        }
        Err(err) => {
            warn!(workload = %object, reason = err.reason(), error = %err, "reload: cannot resume; retrying");
            Next::Retry
        }
    }
}

/// A JSON merge patch of a workload (field manager [`FIELD_MANAGER`]): the pause and its end,
/// which the server-side apply patches never carry.
async fn merge_patch(
    ctx: &Context,
    kind: WorkloadKind,
    object: &ObjectRef,
    body: &serde_json::Value,
) -> Result<()> {
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &object.namespace, &ar);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(&object.name, &params, &Patch::Merge(body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "patching {kind} {object}"
        )))?;
    Ok(())
}

/// Reloader's `rollout-strategy: restart` for an Argo Rollout: one JSON merge patch (field
/// manager [`FIELD_MANAGER`]) of `spec.restartAt` (now) and the baseline; the pod template is
/// left alone. The response is kept, like [`apply`]'s.
async fn restart_rollout(ctx: &Context, plan: &Plan, patch: &WorkloadPatch) -> Result<()> {
    let kind = WorkloadKind::Rollout;
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.object.namespace, &ar);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let body = patch.restart_body(&crate::settings::format_rfc3339(unix_now()));
    let written = api
        .patch(&plan.object.name, &params, &Patch::Merge(&body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "restarting Rollout {}",
            plan.object
        )))?;
    keep_written(ctx, &plan.object, kind, written);
    Ok(())
}

/// Server-side applies `patch` (field manager [`FIELD_MANAGER`], forced) and keeps the returned
/// object, so an evaluation before the watch catches up sees our write.
async fn apply(ctx: &Context, plan: &Plan, patch: WorkloadPatch) -> Result<()> {
    let kind = plan.workload.kind();
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    // The served version (a `batch/v1beta1` CronJob on Kubernetes < 1.21).
    let patch = patch.body_for(&ar.api_version);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.object.namespace, &ar);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&plan.object.name, &params, &Patch::Apply(&patch))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "applying {kind} {}",
            plan.object
        )))?;
    keep_written(ctx, &plan.object, kind, written);
    Ok(())
}

/// Keeps a patch response as the cached workload, unless the cache already holds a newer one.
fn keep_written(ctx: &Context, object: &ObjectRef, kind: WorkloadKind, mut written: DynamicObject) {
    written.types = None;
    super::cache::trim_kind(kind)(&mut written);
    // Only what reads as its kind is cached (what `Cached::typed` relies on).
    let Ok((written, _)) = Cached::new(kind, &written) else {
        return;
    };
    let mut state = ctx.state();
    let newer = state
        .workloads
        .get(object)
        .is_some_and(|cached| !written.is_older_than(cached));
    if newer {
        state.workloads.insert(object.clone(), written);
    }
}

/// The seconds since the Unix epoch (Reloader's `observedAt`).
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// What a rollout answers, for its Event and log line: the changed configs and the keys that
/// changed, or the configs whose events scheduled it when the changes are not known.
fn describe(changes: &[ConfigChange], causes: &BTreeSet<(SourceKind, String)>) -> String {
    if !changes.is_empty() {
        let parts: Vec<String> = changes.iter().map(ToString::to_string).collect();
        return parts.join("; ");
    }
    if causes.is_empty() {
        return "watched configuration changed".to_owned();
    }
    let names: Vec<String> = causes.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{} changed", names.join(", "))
}

/// Warns once per missing set when a required config holds a rollout.
pub(super) async fn report_held(ctx: &Context, plan: &Plan, hash: &ContentHash) {
    let changed = {
        let mut state = ctx.state();
        if hash.missing_required.is_empty() {
            state.held.remove(&plan.object);
            false
        } else if state.held.get(&plan.object) == Some(&hash.missing_required) {
            false
        } else {
            state
                .held
                .insert(plan.object.clone(), hash.missing_required.clone());
            true
        }
    };
    if !changed {
        return;
    }
    let names: Vec<String> = hash
        .missing_required
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let note = format!(
        "rollout held: required {} missing; new pods could not start",
        names.join(", ")
    );
    warn!(workload = %plan.object, %note, "reload: rollout held");
    let reference = reference(ctx, &plan.object, &plan.workload);
    publish(
        &ctx.recorder,
        &reference,
        EventType::Warning,
        "ReloadFailed",
        note,
        "Reload",
    )
    .await;
}

/// Logs and records an Event (once per distinct failure); the queue retries with backoff.
pub(super) async fn fail(ctx: &Context, plan: &Plan, err: Error) -> Next {
    debug!(workload = %plan.object, reason = err.reason(), "reload: retrying with backoff");
    let reference = reference(ctx, &plan.object, &plan.workload);
    ctx.problems
        .report(
            &ctx.recorder,
            &reference,
            &plan.object.to_string(),
            "ReloadFailed",
            &format!("{err}; retrying with backoff"),
            "Reload",
            "reload: failed, will retry",
        )
        .await;
    Next::Retry
}

/// A Deployment conflux paused (`paused-at` and `spec.paused`): when to resume it.
pub(super) fn schedule_resume(
    ctx: &Context,
    object: &ObjectRef,
    owned: &Owned,
    settings: &WorkloadSettings,
) {
    let Owned::Deployment(d) = owned else {
        return;
    };
    let (paused, paused_at) = pause_state(d);
    let now = unix_now();
    let delay = match settings.pause(now, paused, paused_at) {
        Pause::ResumeAt(at) => {
            Duration::from_secs(u64::try_from(at.saturating_sub(now)).unwrap_or_default())
        }
        Pause::ResumeNow => Duration::ZERO,
        _ => return,
    };
    ctx.later(Work::Resume(object.clone()), delay);
}
