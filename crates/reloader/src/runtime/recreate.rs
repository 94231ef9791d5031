//! Jobs roll by being re-created, as Reloader does (a Job's pod template cannot change): the old
//! Job is deleted with background propagation (its pods go with it) and the same Job is created
//! again ([`crate::job::replacement`]), carrying the new baseline so it is not re-created again.
//!
//! Nothing is lost between the two calls: the replacement is built from a fresh read *before*
//! the delete and kept here until a create succeeds; every failure is retried with backoff
//! (250 ms doubling to 60 s), reported once as a `ReloadFailed` Warning. The delete carries a
//! precondition on the old Job's uid, so a Job created meanwhile under the same name by someone
//! else (Flux re-applying it, a user) is never deleted, and a create that finds such a Job
//! (`AlreadyExists` with another uid) takes it as the replacement instead of making a second
//! one. A Job deleted by someone else before conflux's delete is not re-created.
//!
//! A crash between the delete and the create loses nothing either: with a records namespace
//! ([`ReloadConfig::records_namespace`], `--runtime-namespace` in `conflux run`), the
//! replacement is written down as a [`Record`] Secret before the delete is sent, and the record
//! is deleted once the replacement exists (or once there is nothing to do). A starting
//! controller reads the records of its scope ([`recover`]) and finishes each: it deletes the old
//! Job if it is still there, and creates the replacement if no Job of that name exists. A
//! recovered Job found missing is taken as deleted by conflux (the record was written just
//! before the delete). No Job is ever doubled: the name is the lock. Without a records namespace
//! the replacement lives in memory only, and a crash in that window leaves the Job to be
//! re-applied (Flux does on its next reconcile).

use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::backoff::Policy;
use conflux_runtime::events::publish;
use conflux_runtime::queue::Next;
use conflux_watch_index::refs::ObjectRef;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::events::EventType;
use tracing::{debug, info, warn};

use super::cache::Recreation;
use super::context::{Context, reference_to};
use super::metrics::RolloutLabels;
use super::work::Work;
use crate::job::{RECORD_LABEL, Record};
use crate::patch::{FIELD_MANAGER, WorkloadPatch};
use crate::{Result, WorkloadKind};

/// How one attempt ended.
enum Outcome {
    /// The replacement was created.
    Created(Box<Job>),
    /// Nothing to do: the Job was deleted by someone else, or replaced by another Job of the
    /// same name (taken as the replacement).
    Settled(&'static str),
    /// The old Job is still being deleted (a finalizer holds it); try again later.
    Waiting,
    /// The re-creation was over and its record is now deleted.
    Forgotten,
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
        recorded: ctx.config.records_namespace.is_none(),
        finished: false,
        attempts: 0,
    };
    ctx.state().recreations.insert(object.clone(), recreation);
    ctx.later(Work::Recreate(object.clone()), Duration::ZERO);
    Ok(())
}

/// One attempt at the kept re-creation of `object`, and what follows from it: the `Reloaded`
/// Event on the new Job, or a report and a retry with backoff.
pub(super) async fn attempt(ctx: &Context, object: &ObjectRef) -> Next {
    let result = drive(ctx, object).await;
    let key = format!("{object} re-create");
    match result {
        Ok(Outcome::Created(job)) => {
            let why = ctx
                .state()
                .recreations
                .get(object)
                .map(|r| r.why.clone())
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
            finish(ctx, object).await
        }
        Ok(Outcome::Settled(what)) => {
            ctx.problems.resolve(&key);
            info!(workload = %object, "reload: Job not re-created: {what}");
            finish(ctx, object).await
        }
        Ok(Outcome::Forgotten) => {
            ctx.state().recreations.remove(object);
            ctx.problems.resolve(&key);
            Next::Done
        }
        Ok(Outcome::Waiting) => {
            let delay = retry_later(ctx, object);
            debug!(workload = %object, retry_in_seconds = delay.as_secs_f64(), "reload: old Job still being deleted; creating its replacement later");
            Next::After(delay)
        }
        Err(err) => {
            let delay = retry_later(ctx, object);
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
            Next::After(delay)
        }
    }
}

/// Ends the re-creation of `object`: deletes its record, then forgets it. A record that cannot be
/// deleted yet is retried with backoff (a stale record would re-create the Job after a restart
/// should it be deleted meanwhile).
async fn finish(ctx: &Context, object: &ObjectRef) -> Next {
    let recorded_uid = {
        let mut state = ctx.state();
        let Some(r) = state.recreations.get_mut(object) else {
            return Next::Done;
        };
        r.finished = true;
        r.recorded.then(|| r.old_uid.clone())
    };
    let result = match (&ctx.config.records_namespace, recorded_uid) {
        (Some(ns), Some(old_uid)) => delete_record(ctx, ns, object, &old_uid).await,
        _ => Ok(()),
    };
    match result {
        Ok(()) => {
            ctx.state().recreations.remove(object);
            Next::Done
        }
        Err(err) => {
            let delay = retry_later(ctx, object);
            warn!(workload = %object, reason = err.reason(), error = %err, retry_in_seconds = delay.as_secs_f64(), "reload: the Job's re-creation record could not be deleted; retrying");
            Next::After(delay)
        }
    }
}

/// The record of the re-creation `r` of `object`.
fn record_of(object: &ObjectRef, r: &Recreation) -> Record {
    Record {
        namespace: object.namespace.to_string(),
        name: object.name.to_string(),
        old_uid: r.old_uid.clone(),
        replacement: r.replacement.clone(),
        why: r.why.clone(),
    }
}

/// Writes the record of `r` in `ns`, replacing an older one for the same old Job.
async fn write_record(ctx: &Context, ns: &str, object: &ObjectRef, r: &Recreation) -> Result<()> {
    let record = record_of(object, r);
    let secret = record.to_secret(ns)?;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let what = || {
        format!(
            "writing the re-creation record of Job {object} (Secret {ns}/{})",
            record.secret_name()
        )
    };
    match api.create(&params, &secret).await {
        Ok(_) => Ok(()),
        // A record of an earlier decision about the same Job: replaced by this one.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            delete_record(ctx, ns, object, &r.old_uid).await?;
            api.create(&params, &secret)
                .await
                .map(|_| ())
                .map_err(|e| conflux_runtime::Error::api(what())(e).into())
        }
        Err(err) => Err(conflux_runtime::Error::api(what())(err).into()),
    }
}

/// Deletes the record of the re-creation of `object` replacing the Job with uid `old_uid` from
/// `ns` (gone already is fine).
async fn delete_record(ctx: &Context, ns: &str, object: &ObjectRef, old_uid: &str) -> Result<()> {
    let name = Record::secret_name_of(&object.namespace, &object.name, old_uid);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(conflux_runtime::Error::api(format!(
            "deleting the re-creation record of Job {object} (Secret {ns}/{name})"
        ))(err)
        .into()),
    }
}

/// Takes up the re-creations a previous process recorded in the records namespace: every
/// readable record of this controller's scope (its namespace, its `--watch-label-selector`) is
/// kept as a re-creation whose delete was sent, due now. Retried with backoff until the list
/// succeeds; an unreadable record is left in place and reported once (`InvalidJobRecord`).
pub(super) async fn recover(ctx: Arc<Context>) {
    let Some(ns) = ctx.config.records_namespace.clone() else {
        return;
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let params = ListParams::default().labels(&format!("{}={}", RECORD_LABEL.0, RECORD_LABEL.1));
    let mut backoff = Policy::STARTUP.backoff();
    let list = loop {
        match api.list(&params).await {
            Ok(list) => break list,
            Err(err) => {
                let err = conflux_runtime::Error::api(format!(
                    "listing the Job re-creation records in namespace {ns}"
                ))(err);
                warn!(reason = err.reason(), error = %err, "reload: cannot read the Job re-creation records; retrying");
                backoff.wait().await;
            }
        }
    };
    for secret in list.items {
        let record = match Record::from_secret(&secret) {
            Ok(record) => record,
            Err(err) => {
                let name = secret.metadata.name.clone().unwrap_or_default();
                let reference =
                    reference_to("v1", "Secret", &ns, &name, secret.metadata.uid.clone());
                ctx.problems
                    .report(
                        &ctx.recorder,
                        &reference,
                        &format!("{ns}/{name} record"),
                        err.reason(),
                        &format!("{err}; it is left in place"),
                        "Reload",
                        "reload: unreadable Job re-creation record",
                    )
                    .await;
                continue;
            }
        };
        let in_scope = ctx
            .config
            .namespace
            .as_deref()
            .is_none_or(|n| n == record.namespace)
            && ctx.config.object_selector.matches(
                &record
                    .replacement
                    .metadata
                    .labels
                    .clone()
                    .unwrap_or_default(),
            );
        if !in_scope {
            continue;
        }
        let object = ObjectRef::new(
            WorkloadKind::Job.group(),
            WorkloadKind::Job.as_str(),
            record.namespace.as_str(),
            record.name.as_str(),
        );
        let recreation = Recreation {
            old_uid: record.old_uid,
            replacement: record.replacement,
            why: record.why,
            delete_sent: true,
            recorded: true,
            finished: false,
            attempts: 0,
        };
        let taken = {
            let mut state = ctx.state();
            // A decision made since the start (the old Job still existed) has its own, newer
            // one.
            match state.recreations.entry(object.clone()) {
                std::collections::hash_map::Entry::Vacant(entry) => {
                    info!(workload = %entry.key(), "reload: taking up a recorded Job re-creation");
                    entry.insert(recreation);
                    true
                }
                std::collections::hash_map::Entry::Occupied(_) => false,
            }
        };
        if taken {
            ctx.later(Work::Recreate(object), Duration::ZERO);
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

/// The delay before the next attempt, with backoff.
fn retry_later(ctx: &Context, object: &ObjectRef) -> Duration {
    let mut state = ctx.state();
    let Some(r) = state.recreations.get_mut(object) else {
        return Duration::ZERO;
    };
    r.attempts = r.attempts.saturating_add(1);
    Policy::ROLLOUT.delay(r.attempts)
}

async fn drive(ctx: &Context, object: &ObjectRef) -> Result<Outcome> {
    let Some(r) = ctx.state().recreations.get(object).cloned() else {
        return Ok(Outcome::Forgotten);
    };
    if r.finished {
        if let Some(ns) = &ctx.config.records_namespace {
            delete_record(ctx, ns, object, &r.old_uid).await?;
        }
        return Ok(Outcome::Forgotten);
    }
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
            if let (false, Some(ns)) = (r.recorded, &ctx.config.records_namespace) {
                write_record(ctx, ns, object, &r).await?;
                if let Some(kept) = ctx.state().recreations.get_mut(object) {
                    kept.recorded = true;
                }
            }
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
