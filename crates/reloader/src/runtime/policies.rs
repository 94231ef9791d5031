//! ReloadPolicies: follow them, report each one's `Ready` condition (one Warning Event and one
//! log line for a bad spec), and apply what they grant to every workload. A change of what a
//! workload is granted re-evaluates it, and the decision only moves its baseline (the grant is
//! part of what it watches, docs/design.md section 5.3): a policy never rolls anything by itself.

use std::sync::Arc;

use conflux_runtime::backoff::Policy;
use conflux_runtime::queue::Opening;
use conflux_runtime::sync::lock;
use conflux_runtime::{Change, Subscription};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tracing::{debug, warn};

use super::context::Context;
use super::watches::on_workload;
use crate::patch::FIELD_MANAGER;
use crate::policy::{CompiledPolicy, GROUP, KIND, ReloadPolicy, ReloadPolicyStatus, VERSION};

/// How many times a status write is tried before it waits for the policy's next change.
const STATUS_ATTEMPTS: usize = 5;

/// Follows ReloadPolicies. The initial list fills the policies without touching workloads; at
/// its end every workload is granted once, then the queue's `watch ReloadPolicy` part opens, so
/// the first decisions (and a restart's) see the policies as they are.
pub(super) async fn watch(
    ctx: Arc<Context>,
    mut sub: Subscription<ReloadPolicy>,
    mut listed: Opening,
) {
    let mut initialised = false;
    while let Some(change) = sub.recv().await {
        let changed = match change {
            Change::Initial(policy) | Change::Applied(policy) => on_policy(&ctx, &policy).await,
            Change::Deleted(policy) => {
                let name = policy.name_any();
                ctx.problems.resolve(&key(&name));
                ctx.state().policies.remove(&name)
            }
            Change::InitDone => {
                if !initialised {
                    initialised = true;
                    // Without a valid policy every grant is the empty one the workloads got.
                    let any = !ctx.state().policies.is_empty();
                    if any {
                        reapply(&ctx, None).await;
                    }
                    listed.open();
                }
                continue;
            }
            _ => continue,
        };
        if changed && initialised {
            reapply(&ctx, None).await;
        }
    }
}

fn key(name: &str) -> String {
    format!("{KIND}/{name}")
}

/// The Event target of a policy. Like ConfigSyncs' (cluster-scoped), its Events live in
/// `default`.
fn reference(policy: &ReloadPolicy) -> ObjectReference {
    let mut reference = policy.object_ref(&());
    reference.namespace = Some("default".to_owned());
    reference
}

/// Compiles a policy, reports it, writes its status; whether the policies in force changed.
async fn on_policy(ctx: &Context, policy: &ReloadPolicy) -> bool {
    let name = policy.name_any();
    let compiled = policy.spec.compile(&name);
    match &compiled {
        Ok(_) => {
            ctx.problems.resolve(&key(&name));
        }
        Err(err) => {
            ctx.problems
                .report(
                    &ctx.recorder,
                    &reference(policy),
                    &key(&name),
                    err.reason(),
                    &format!("{err}; the policy is not in force"),
                    "Reload",
                    "reload: invalid ReloadPolicy",
                )
                .await;
        }
    }
    write_status(ctx, policy, &compiled).await;
    let mut state = ctx.state();
    match compiled {
        Ok(p) => state.policies.insert(p),
        Err(_) => state.policies.remove(&name),
    }
}

/// Sets the policy's `Ready` condition and `observedGeneration` when they are not what they
/// should be (server-side apply of the status, retried a few times with backoff).
async fn write_status(
    ctx: &Context,
    policy: &ReloadPolicy,
    compiled: &crate::Result<CompiledPolicy>,
) {
    let name = policy.name_any();
    let generation = policy.metadata.generation;
    let previous = policy.status.as_ref();
    let old = previous.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let mut ready = crate::policy::ready_condition(
        compiled,
        generation,
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    if let Some(old) = old {
        if old.status == ready.status
            && old.reason == ready.reason
            && old.message == ready.message
            && old.observed_generation == ready.observed_generation
            && previous.is_some_and(|s| s.observed_generation == generation)
        {
            return;
        }
        if old.status == ready.status {
            // The condition did not flip: its transition time stays.
            ready.last_transition_time = old.last_transition_time.clone();
        }
    }
    let status = ReloadPolicyStatus {
        observed_generation: generation,
        conditions: vec![ready],
    };
    let body = serde_json::json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "status": status,
    });
    let api: Api<ReloadPolicy> = Api::all(ctx.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut backoff = Policy::ROLLOUT.backoff();
    for attempt in 1..=STATUS_ATTEMPTS {
        match api.patch_status(&name, &params, &Patch::Apply(&body)).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(err) => {
                let err =
                    conflux_runtime::Error::api(format!("writing status of {KIND} {name}"))(err);
                if attempt == STATUS_ATTEMPTS {
                    warn!(reason = err.reason(), error = %err, policy = %name, "reload: cannot write a ReloadPolicy's status; trying again at its next change");
                } else {
                    debug!(reason = err.reason(), error = %err, policy = %name, "reload: status write failed; retrying");
                    backoff.wait().await;
                }
            }
        }
    }
}

/// Grants every workload (of `namespace` only, when given) what the policies grant it now: a
/// workload whose grant changed is re-indexed and evaluated (its baseline moves, nothing rolls).
pub(super) async fn reapply(ctx: &Context, namespace: Option<&str>) {
    let informers = lock(&ctx.workload_informers).clone();
    for (kind, informer) in informers {
        let objects = informer.store().state();
        for obj in objects {
            if namespace.is_some_and(|ns| obj.metadata.namespace.as_deref() != Some(ns)) {
                continue;
            }
            on_workload(ctx, kind, obj).await;
        }
    }
}
