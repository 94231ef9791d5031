//! Decide: a batch of due workloads is planned (what each watches, from the metadata watches),
//! decided from memory where the configs kept their versions, and otherwise hashed from one read
//! of each config the batch needs, then decided and acted on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use conflux_runtime::ConfigWatches;
use conflux_runtime::queue::Next;
use conflux_runtime::sync::lock;
use conflux_watch_index::refs::{ConfigKind, ObjectRef};
use futures::StreamExt;
use tracing::debug;

use super::act::{self, Applied};
use super::cache::NamespaceView;
use super::context::Context;
use super::memory;
use super::plan::Plan;
use super::reads::{self, ConfigId};
use super::work::Causes;
use crate::hash::{ConfigHash, ContentHash, assemble, hash_config, hash_provider};
use crate::memory::Entry;
use crate::opt_in::{Watch, watch_with_providers};
use crate::patch::{Action, WorkloadState, baseline_value, decide, rebaseline};
use crate::source::SourceKind;

/// The versions the shared metadata watches hold now for every candidate config of `watch`.
fn versions_now(
    configs: &ConfigWatches,
    namespace: &str,
    watch: &Watch,
) -> Vec<(ConfigKind, String, Option<String>)> {
    watch
        .candidates
        .iter()
        .map(|c| {
            let c = &c.consumption;
            let rv = configs
                .stored(c.kind, namespace, &c.name)
                .map(|m| m.resource_version().to_owned());
            (c.kind, c.name.clone(), rv)
        })
        .collect()
}

/// Hashes, decides and acts on a batch of due workloads; each config the batch needs is read
/// once. Returns what comes next for each.
pub(super) async fn batch(
    ctx: &Arc<Context>,
    configs: &ConfigWatches,
    due: Vec<(ObjectRef, Causes)>,
) -> Vec<(ObjectRef, Causes, Next)> {
    let mut done = Vec::with_capacity(due.len());
    let mut plans: Vec<Plan> = Vec::new();
    // Baselines decided from memory, remembered once the state's lock is released.
    let mut from_memory: Vec<(ObjectRef, Entry)> = Vec::new();
    {
        let state = ctx.state();
        for (object, causes) in due {
            let planned = ctx
                .serves(&object.namespace)
                .then(|| {
                    let entry = state.index.get(&object)?;
                    let workload = state.workloads.get(&object)?.clone();
                    let view = NamespaceView::of(
                        configs,
                        &state.providers,
                        object.namespace.as_ref(),
                        entry,
                        &ctx.config.config_selector,
                    );
                    let watch = watch_with_providers(
                        &entry.consumers,
                        &entry.providers,
                        &entry.opt_in,
                        ctx.config.options,
                        &view,
                    );
                    let remembered = state
                        .memory
                        .get(&object, workload.uid())
                        .map(|e| e.baseline.clone());
                    // Typed for this line only: the batch keeps what it needs of it.
                    let ws = WorkloadState::of(workload.typed()?.workload())?
                        .with_remembered(remembered);
                    let mounts = watch
                        .providers
                        .iter()
                        .filter_map(|p| {
                            let objects = state.providers.latest(&object.namespace, &p.name)?;
                            Some((p.name.clone(), objects.to_vec()))
                        })
                        .collect();
                    Some((workload, watch, ws, mounts))
                })
                .flatten();
            let Some((workload, watch, ws, mounts)) = planned else {
                done.push((object, causes, Next::Done));
                continue;
            };
            // Decided from memory when no config moved since its digests were taken.
            let entry = state.memory.get(&object, workload.uid());
            if let Some(entry) = entry
                && watch.providers.is_empty()
            {
                let now = versions_now(configs, &object.namespace, &watch);
                let same = entry
                    .versions_match(now.iter().map(|(k, n, rv)| (*k, n.as_str(), rv.as_deref())));
                if same && let Some(baseline) = rebaseline(&entry.baseline, &watch) {
                    let changed = baseline != entry.baseline;
                    let entry = Entry {
                        baseline,
                        ..entry.clone()
                    };
                    done.push((object.clone(), causes, Next::Done));
                    if changed {
                        ctx.count("remember");
                        from_memory.push((object, entry));
                    } else {
                        ctx.count("none");
                    }
                    continue;
                }
            }
            plans.push(Plan {
                object,
                workload,
                watch,
                state: ws,
                mounts,
                causes,
                hashes: BTreeMap::new(),
                versions: BTreeMap::new(),
            });
        }
    }
    for (object, entry) in from_memory {
        memory::remember(ctx, &object, entry);
    }
    if plans.is_empty() {
        return done;
    }
    // Which plan reads which config, and how.
    let mut readers: BTreeMap<ConfigId, Vec<(usize, usize)>> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        for (j, c) in plan.watch.candidates.iter().enumerate() {
            let c = &c.consumption;
            readers
                .entry((c.kind, plan.object.namespace.to_string(), c.name.clone()))
                .or_default()
                .push((i, j));
        }
    }
    // Hashed from the cache where a config keeps the version it was read at (its watch says
    // so); the rest is read.
    let mut wanted: BTreeSet<ConfigId> = BTreeSet::new();
    {
        let cache = lock(&ctx.hashes);
        for (id, users) in &readers {
            let rv = configs
                .stored(id.0, &id.1, &id.2)
                .map(|m| m.resource_version().to_owned());
            let hits: Option<Vec<ConfigHash>> = rv.as_deref().and_then(|rv| {
                users
                    .iter()
                    .map(|(i, j)| {
                        let c = &plans[*i].watch.candidates.get(*j)?.consumption;
                        cache.get(&id.1, c, rv).cloned()
                    })
                    .collect()
            });
            let Some(hits) = hits else {
                wanted.insert(id.clone());
                continue;
            };
            for ((i, j), hash) in users.iter().zip(hits) {
                plans[*i].record(*j, hash, rv.as_deref());
            }
        }
    }
    let failed = reads::read(ctx, configs, &wanted, |id, data, rv| {
        let mut cache = lock(&ctx.hashes);
        for (i, j) in readers.get(id).into_iter().flatten() {
            let plan = &mut plans[*i];
            let Some(c) = plan.watch.candidates.get(*j) else {
                continue;
            };
            let hash = hash_config(&c.consumption, data);
            if let Some(rv) = rv {
                cache.put(&id.1, &c.consumption, rv, &hash);
            }
            plan.record(*j, hash, rv);
        }
    })
    .await;
    // `data` was dropped with each object: only hashes are left.
    let results: Vec<(ObjectRef, Causes, Next)> = futures::stream::iter(plans)
        .map(|plan| {
            let failure = plan.watch.candidates.iter().find_map(|c| {
                let c = &c.consumption;
                failed.get(&(c.kind, plan.object.namespace.to_string(), c.name.clone()))
            });
            let failure = failure.cloned();
            async move {
                match failure {
                    Some(err) => {
                        let next = act::fail(ctx, &plan, err).await;
                        (plan.object, plan.causes, next)
                    }
                    None => decide_and_act(ctx, plan).await,
                }
            }
        })
        .buffer_unordered(ctx.config.concurrent.max(1))
        .collect()
        .await;
    done.extend(results);
    done
}

/// Hashes one planned workload from its configs' hashes, decides and acts.
async fn decide_and_act(ctx: &Context, mut plan: Plan) -> (ObjectRef, Causes, Next) {
    let object = plan.object.clone();
    let current: ContentHash = {
        let hashes = &mut plan.hashes;
        let mounts = &plan.mounts;
        assemble(&plan.watch, |kind, name| match kind {
            SourceKind::SecretProviderClass => {
                hash_provider(name, mounts.get(name).map(Vec::as_slice))
            }
            SourceKind::ConfigMap | SourceKind::Secret => {
                let config = if kind == SourceKind::Secret {
                    ConfigKind::Secret
                } else {
                    ConfigKind::ConfigMap
                };
                hashes
                    .remove(&(config, name.to_owned()))
                    // Not read: a candidate whose read failed is never decided (see above).
                    .unwrap_or_else(|| hash_provider(name, None))
            }
        })
    };
    let entry = Entry {
        uid: plan.uid(),
        baseline: baseline_value(&current),
        versions: std::mem::take(&mut plan.versions),
    };
    let next = match decide(&plan.state, &current, ctx.config.options) {
        Action::None => {
            let held = !current.missing_required.is_empty();
            ctx.count(if held { "held" } else { "none" });
            act::report_held(ctx, &plan, &current).await;
            if !held {
                // Same baseline; the versions its digests stand for may be newer (a
                // metadata-only write): kept, written with the shard's next change.
                memory::refresh(ctx, &object, entry);
            }
            Next::Done
        }
        Action::Remember(_) => {
            ctx.count("remember");
            debug!(workload = %object, "reload: baseline remembered");
            act::report_held(ctx, &plan, &current).await;
            memory::remember(ctx, &object, entry);
            Next::Done
        }
        Action::Rollout(patch) => {
            if let Some(Err(wait)) = ctx.rollouts.as_ref().map(|l| l.check()) {
                ctx.count("throttled");
                debug!(workload = %object, wait_seconds = wait.as_secs_f64(), "reload: rollout throttled");
                return (object, std::mem::take(&mut plan.causes), Next::After(wait));
            }
            ctx.count("rollout");
            match act::rollout(ctx, &plan, patch, &current).await {
                Applied::Rolled => {
                    memory::remember(ctx, &object, entry);
                    Next::Hold(ctx.window_of(&object))
                }
                Applied::Started => {
                    // A Job's re-creation goes on through its own work; what it rolls to is
                    // remembered now (the replacement carries it too).
                    memory::remember(ctx, &object, entry);
                    Next::Hold(ctx.window_of(&object))
                }
                Applied::Failed(err) => act::fail(ctx, &plan, err).await,
            }
        }
    };
    (object, plan.causes, next)
}
