//! The fan-out itself, shared by ConfigSyncs and annotated sources: plan, execute the steps
//! `--concurrent` at a time, and report.

use std::collections::{BTreeMap, HashSet};

use conflux_runtime::events::publish;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ListParams;
use kube::runtime::events::EventType;
use tracing::info;

use super::Context;
use super::config_sync::{problem_key, report};
use crate::runtime::ApplyLabels;
use crate::runtime::executor::{apply, delete, get_object, list_objects, merge_patch, recreate};
use crate::status::SyncOutcome;
use crate::{Error, FanOut, NamespaceView, SourceKind, Step, plan_sync};

/// Reads what the plan needs, plans, executes; the outcome says what happened.
pub(super) async fn fan_out_once(
    ctx: &Context,
    fan_out: &FanOut,
    reference: &ObjectReference,
) -> Result<SyncOutcome, Error> {
    let source_ref = &fan_out.source;
    let source = get_object(
        &ctx.client,
        source_ref.kind,
        &source_ref.namespace,
        &source_ref.name,
    )
    .await?;
    if let Some(source) = &source {
        // Refused before anything is planned: existing copies are left as they are.
        if let Err(problem) = crate::desired::check_copyable(source) {
            return Ok(SyncOutcome::failed_with(problem));
        }
    }
    let namespaces = ctx.namespaces()?;
    let views = namespaces.iter().map(|ns| {
        let mut view = NamespaceView::new(ns.metadata.name.as_deref().unwrap_or_default())
            .terminating(ns.metadata.deletion_timestamp.is_some());
        if let Some(labels) = &ns.metadata.labels {
            view = view.labels(labels);
        }
        view
    });
    let mut observed = list_objects(&ctx.client, source_ref.kind, &owner_list(fan_out)).await?;
    let same_name = ListParams::default().fields(&format!("metadata.name={}", fan_out.target_name));
    let mut seen: HashSet<(String, String)> = observed
        .iter()
        .map(|o| (o.namespace().to_owned(), o.name().to_owned()))
        .collect();
    for obj in list_objects(&ctx.client, source_ref.kind, &same_name).await? {
        if seen.insert((obj.namespace().to_owned(), obj.name().to_owned())) {
            observed.push(obj);
        }
    }
    let steps = plan_sync(fan_out, source.as_ref(), views, &observed);
    drop(observed);
    let outcome = match &source {
        Some(source) => SyncOutcome::new(Some(source.content_hash())),
        None => SyncOutcome::failed_with(source_ref.unavailable(format!(
            "{}s \"{}\" not found",
            source_ref.kind.as_str().to_lowercase(),
            source_ref.name
        ))),
    };
    drop(source);
    Ok(execute(ctx, source_ref.kind, reference, steps, Some(outcome)).await)
}

pub(super) fn owner_list(fan_out: &FanOut) -> ListParams {
    ListParams::default().labels(&fan_out.owner.selector())
}

/// Executes `steps`, `--concurrent` at a time, and records each result.
pub(super) async fn execute(
    ctx: &Context,
    kind: SourceKind,
    reference: &ObjectReference,
    steps: Vec<Step>,
    outcome: Option<SyncOutcome>,
) -> SyncOutcome {
    let mut outcome = outcome.unwrap_or_default();
    let results: Vec<(Step, Result<(), Error>)> = futures::stream::iter(steps)
        .map(|step| async move {
            let result = execute_step(ctx, kind, reference, &step).await;
            (step, result)
        })
        .buffer_unordered(ctx.config.fan_out_concurrency.max(1))
        .collect()
        .await;
    let mut written: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (step, result) in results {
        let label = match (&step, &result) {
            (_, Err(err)) => err.reason(),
            (Step::InSync { .. }, _) => "unchanged",
            (Step::Skip { .. }, _) => "skip",
            (Step::Create { .. }, _) => "create",
            (Step::Update { .. }, _) => "update",
            (Step::Recreate { .. }, _) => "recreate",
            (Step::Adopt { .. }, _) => "adopt",
            (Step::Delete { .. }, _) => "delete",
            (Step::MarkOrphaned { .. }, _) => "orphan",
            (Step::Release { .. }, _) => "release",
        };
        ctx.metrics
            .applies
            .get_or_create(&ApplyLabels {
                controller: "sync".to_owned(),
                result: label.to_owned(),
            })
            .inc();
        if let Err(err) = &result {
            report(
                ctx,
                reference,
                err,
                format!("namespace {}: {err}", step.namespace()),
            )
            .await;
        } else if !step.is_noop() {
            *written.entry(label).or_default() += 1;
        }
        outcome.record(&step, result.map_err(|e| e.to_string()));
    }
    if !written.is_empty() {
        let summary: Vec<String> = written
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect();
        let summary = summary.join(", ");
        info!(object = %problem_key(reference), writes = %summary, "sync: copies written");
        publish(
            &ctx.recorder,
            reference,
            EventType::Normal,
            "Synced",
            format!("copies written: {summary}"),
            "Sync",
        )
        .await;
    }
    outcome
}

pub(super) async fn execute_step(
    ctx: &Context,
    kind: SourceKind,
    reference: &ObjectReference,
    step: &Step,
) -> Result<(), Error> {
    let client = &ctx.client;
    match step {
        Step::Create { object } | Step::MarkOrphaned { object } => apply(client, object).await,
        Step::Update { object, cleanup } | Step::Adopt { object, cleanup } => {
            apply(client, object).await?;
            match cleanup {
                Some(patch) => {
                    merge_patch(
                        client,
                        object.kind(),
                        object.namespace(),
                        object.name(),
                        patch,
                    )
                    .await
                }
                None => Ok(()),
            }
        }
        Step::Recreate { object, .. } => recreate(client, object).await,
        Step::Delete { namespace, name } => delete(client, kind, namespace, name).await,
        Step::Release {
            namespace,
            name,
            patch,
        } => merge_patch(client, kind, namespace, name, patch).await,
        Step::InSync { .. } => Ok(()),
        Step::Skip { message, .. } => {
            ctx.problems
                .report(
                    &ctx.recorder,
                    reference,
                    &problem_key(reference),
                    "Conflict",
                    message,
                    "Sync",
                    "sync: target left alone",
                )
                .await;
            Ok(())
        }
    }
}
