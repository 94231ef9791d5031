//! Jobs roll by being re-created, as Reloader does (a Job's pod template cannot change): the old
//! Job is deleted with background propagation (its pods go with it) and the same Job is created
//! again ([`crate::job::replacement`]), carrying the new baseline so it is not re-created again.
//!
//! Nothing is lost between the two calls while the process lives: the replacement is built from
//! a fresh read *before* the delete and kept here until a create succeeds; every failure is
//! retried with backoff (250 ms doubling to 60 s), reported once as a `ReloadFailed` Warning. The
//! delete carries a precondition on the old Job's uid, so a Job created meanwhile under the same
//! name by someone else (Flux re-applying it, a user) is never deleted, and a create that finds
//! such a Job (`AlreadyExists` with another uid) takes it as the replacement instead of making a
//! second one. A Job deleted by someone else before conflux's delete is not re-created.
//!
//! What remains: if the process is killed after the delete and before the create succeeds, the
//! Job is gone and the replacement was only in memory: a restarted conflux has nothing to
//! re-create it from (the old object is deleted, and its pods with it). Re-applying the Job's
//! manifest brings it back (Flux does on its next reconcile). No Job is ever doubled: the name is
//! the lock.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, PostParams, Preconditions, PropagationPolicy};

/// A Job being re-created.
#[derive(Debug, Clone)]
pub(super) struct Recreation {
    /// The uid of the Job being replaced.
    old_uid: String,
    /// The Job to create.
    replacement: Job,
    /// What the rollout answers (for its Event).
    why: String,
    /// Whether conflux has sent the delete (from then on, a missing Job is ours to create).
    delete_sent: bool,
    /// Failed or waiting attempts so far.
    attempts: u32,
    /// When to try again.
    pub(super) due: Instant,
}

/// How one attempt ended.
enum Outcome {
    /// The replacement was created.
    Created(Box<Job>),
    /// Nothing to do: the Job was deleted by someone else, or replaced by another Job of the
    /// same name (taken as the replacement).
    Settled(&'static str),
    /// The old Job is still being deleted (a finalizer holds it); try again later.
    Waiting,
}

fn jobs(ctx: &Context, object: &ObjectRef) -> Api<Job> {
    Api::namespaced(ctx.client.clone(), &object.namespace)
}

/// Starts re-creating the Job `object` (cached with uid `cached_uid`) for `patch`: reads it
/// fresh, builds and keeps the replacement, then makes the first attempt. An error (the read
/// failed, or the Job cannot be re-created) is the caller's to report and retry.
pub(super) async fn start_recreation(
    ctx: &Context,
    object: &ObjectRef,
    cached_uid: Option<&str>,
    patch: &WorkloadPatch,
    why: String,
) -> Result<()> {
    let fresh = jobs(ctx, object)
        .get_opt(&object.name)
        .await
        .map_err(conflux_runtime::Error::api(format!("reading Job {object}")))?;
    let Some(fresh) = fresh else {
        debug!(workload = %object, "reload: Job deleted before its re-creation; nothing to do");
        return Ok(());
    };
    if fresh.metadata.uid.as_deref() != cached_uid || fresh.metadata.deletion_timestamp.is_some() {
        debug!(workload = %object, "reload: Job replaced or being deleted meanwhile; not re-created");
        return Ok(());
    }
    let replacement = crate::job::replacement(&fresh, patch)?;
    let recreation = Recreation {
        old_uid: fresh.metadata.uid.clone().unwrap_or_default(),
        replacement,
        why,
        delete_sent: false,
        attempts: 0,
        due: Instant::now(),
    };
    ctx.state().recreations.insert(object.clone(), recreation);
    attempt(ctx, object).await;
    Ok(())
}

/// One attempt at the kept re-creation of `object`, and what follows from it: the `Reloaded`
/// Event on the new Job, or a report and a retry with backoff.
pub(super) async fn attempt(ctx: &Context, object: &ObjectRef) {
    let result = drive(ctx, object).await;
    let key = format!("{object} re-create");
    match result {
        Ok(Outcome::Created(job)) => {
            let why = lock(&ctx.state)
                .recreations
                .remove(object)
                .map(|r| r.why)
                .unwrap_or_default();
            ctx.problems.resolve(&key);
            ctx.problems.resolve(&object.to_string());
            count_rollout(ctx, "success");
            info!(workload = %object, %why, "reload: Job re-created");
            let reference = job_reference(object, job.metadata.uid.clone());
            publish(
                &ctx.recorder,
                &reference,
                EventType::Normal,
                "Reloaded",
                format!("{why}; Job re-created"),
                "Reload",
            )
            .await;
        }
        Ok(Outcome::Settled(what)) => {
            ctx.state().recreations.remove(object);
            ctx.problems.resolve(&key);
            info!(workload = %object, "reload: Job not re-created: {what}");
        }
        Ok(Outcome::Waiting) => {
            let delay = retry_later(ctx, object);
            debug!(workload = %object, retry_in_seconds = delay.as_secs_f64(), "reload: old Job still being deleted; creating its replacement later");
        }
        Err(err) => {
            retry_later(ctx, object);
            count_rollout(ctx, "error");
            let reference = job_reference(object, None);
            ctx.problems
                .report(
                    &ctx.recorder,
                    &reference,
                    &key,
                    "ReloadFailed",
                    &format!("{err}; re-creating the Job is retried with backoff"),
                    "Reload",
                    "reload: Job re-creation failed, will retry",
                )
                .await;
        }
    }
}

/// The Event target for the Job `object` (the new one when `uid` is given).
fn job_reference(object: &ObjectRef, uid: Option<String>) -> ObjectReference {
    reference_to("batch/v1", "Job", &object.namespace, &object.name, uid)
}

fn count_rollout(ctx: &Context, result: &str) {
    ctx.metrics
        .rollouts
        .get_or_create(&RolloutLabels {
            kind: WorkloadKind::Job.to_string(),
            result: result.to_owned(),
        })
        .inc();
}

/// Schedules the next attempt with backoff; returns the delay.
fn retry_later(ctx: &Context, object: &ObjectRef) -> Duration {
    let mut state = ctx.state();
    let Some(r) = state.recreations.get_mut(object) else {
        return Duration::ZERO;
    };
    r.attempts = r.attempts.saturating_add(1);
    let delay = Policy::ROLLOUT.delay(r.attempts);
    r.due = Instant::now() + delay;
    drop(state);
    ctx.wake.notify_one();
    delay
}

/// The re-creations due at `now`.
pub(super) fn due_recreations(state: &State, now: Instant) -> Vec<ObjectRef> {
    state
        .recreations
        .iter()
        .filter(|(_, r)| r.due <= now)
        .map(|(o, _)| o.clone())
        .collect()
}

/// When the next re-creation is due.
pub(super) fn next_recreation(state: &State) -> Option<Instant> {
    state.recreations.values().map(|r| r.due).min()
}

async fn drive(ctx: &Context, object: &ObjectRef) -> Result<Outcome> {
    let Some(r) = ctx.state().recreations.get(object).cloned() else {
        return Ok(Outcome::Settled("no re-creation pending"));
    };
    let api = jobs(ctx, object);
    let name = object.name.as_ref();
    let current = api
        .get_opt(name)
        .await
        .map_err(conflux_runtime::Error::api(format!("reading Job {object}")))?;
    match current {
        Some(job) if job.metadata.uid.as_deref() != Some(r.old_uid.as_str()) => {
            return Ok(Outcome::Settled(
                "another Job of that name exists (created meanwhile); it is the replacement",
            ));
        }
        Some(job) if job.metadata.deletion_timestamp.is_some() && !r.delete_sent => {
            return Ok(Outcome::Settled("someone else is deleting it"));
        }
        // Our delete is waiting on a finalizer: the create below says AlreadyExists.
        Some(job) if job.metadata.deletion_timestamp.is_some() => {}
        Some(_) => {
            if let Some(kept) = ctx.state().recreations.get_mut(object) {
                kept.delete_sent = true;
            }
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: Some(Preconditions {
                    uid: Some(r.old_uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 && !r.delete_sent => {
                    return Ok(Outcome::Settled("deleted by someone else"));
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                // The uid precondition failed: the name belongs to another Job now.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Ok(Outcome::Settled(
                        "another Job of that name exists (created meanwhile); it is the replacement",
                    ));
                }
                Err(err) => {
                    return Err(
                        conflux_runtime::Error::api(format!("deleting Job {object}"))(err).into(),
                    );
                }
            }
        }
        None if !r.delete_sent => return Ok(Outcome::Settled("deleted by someone else")),
        None => {}
    }
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&params, &r.replacement).await {
        Ok(created) => Ok(Outcome::Created(Box::new(created))),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Outcome::Waiting),
        Err(err) => Err(conflux_runtime::Error::api(format!("creating Job {object}"))(err).into()),
    }
}
