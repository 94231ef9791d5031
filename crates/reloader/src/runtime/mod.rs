//! The reload controller, to embed (feature `runtime`): roll Deployments, StatefulSets,
//! DaemonSets, CronJobs, Jobs (re-created) and, with `--is-argo-rollouts`, Argo Rollouts whose
//! ConfigMaps/Secrets (and, with `--enable-csi-integration`, mounted SecretProviderClasses)
//! changed, once per change, without fighting Flux over fields (docs/design.md section 5). The
//! decisions are this crate's pure modules; this one observes, reads, applies and reports.
//!
//! Observe → decide → act, on conflux-runtime's one work queue:
//! - Workloads are watched through conflux-runtime's shared informers and kept, when they opt in,
//!   in a [`ConsumerIndex`](crate::index::ConsumerIndex) and a cache of the objects themselves
//!   (`cache`). ConfigMaps and Secrets come from the process's shared metadata-only watches
//!   ([`ConfigWatches`]): their annotations and names are all the index needs (`watches`).
//! - Each event becomes a key of the queue (`work`). A config change is debounced with a leading
//!   edge: the first change to a quiet workload is evaluated after a short settle
//!   ([`ReloadConfig::settle`], so a ConfigMap and a Secret applied together roll once), and
//!   changes that arrive in the window after a rollout ([`ReloadConfig::debounce`], or the
//!   workload's `conflux.dev/reload-debounce`) are coalesced into one more rollout once they stop,
//!   never later than [`ReloadConfig::debounce_max`]. A workload event is evaluated at once.
//! - Evaluations run in batches (`evaluate`): what each workload watches, then its memory
//!   (`memory`: the baseline and the `resourceVersion`s its digests came from, kept in a few
//!   Secrets of the controller's namespace, never on the workload). A workload whose configs kept
//!   their versions is decided from memory alone. The others' configs are read once per batch
//!   (`reads`: one GET each, or pages of a LIST when that takes fewer requests), hashed for every
//!   workload that reads them, and dropped: data is never cached or logged.
//! - [`decide`](crate::patch::decide) answers; a new baseline is only remembered (adoption,
//!   restarts and membership changes write nothing to workloads); a rollout is one server-side
//!   apply (`act`), field manager [`FIELD_MANAGER`](crate::patch::FIELD_MANAGER), forced, within
//!   a cluster-wide rate limit ([`ReloadConfig::rate`]). A Job rolls by being re-created
//!   (`recreate`); an Argo Rollout with `rollout-strategy: restart` by one merge patch of
//!   `spec.restartAt`.
//! - ReloadPolicies (when their CRD is served): each valid one is applied to every workload
//!   (`policies`), as one more opt-in rule of the same decision path ([`crate::policy`]).
//! - SecretProviderClasses (CSI integration): what a class "contains" is what its most recently
//!   written `SecretProviderClassPodStatus` in the namespace says (`providers`).
//! - Every rollout gets a `Reloaded` Event on the workload; failures get `ReloadFailed` (also for
//!   a rollout held because a required config is missing), a log line and a retry with backoff;
//!   the same failure is reported once until the workload rolls again. Annotation problems
//!   (`InvalidPattern`, `InvalidAnnotation`) are reported when the annotations change.
//!
//! Nothing here makes the process exit: discovery and the memory's first read are retried with
//! backoff, watches are the shared informers' (which ride out faults), and a re-list's changes
//! arrive as events. The queue starts once every watch delivered its initial state and the memory
//! is read, so the first decisions see complete caches.

mod act;
mod cache;
mod config;
mod context;
mod discovery;
mod evaluate;
mod memory;
mod metrics;
mod plan;
mod policies;
mod providers;
mod reads;
mod recreate;
#[cfg(test)]
mod tests;
mod watches;
mod work;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use conflux_runtime::backoff::Policy;
use conflux_runtime::queue::{Gate, Next, QueueConfig, WorkQueue};
use conflux_runtime::sync::lock;
use conflux_runtime::{ConfigWatches, Informer, Probe, Runtime};
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use tracing::{info, warn};

use crate::WorkloadKind;
use work::{Causes, Work};

pub use crate::settings::parse_duration;
pub use config::{DEFAULT_DEBOUNCE, DEFAULT_DEBOUNCE_MAX, DEFAULT_SETTLE, ReloadConfig};
pub use context::Context;
pub use metrics::{DecisionLabels, ReloadMetrics, RolloutLabels};

/// The largest batch of workloads evaluated at once: it bounds what an evaluation holds (one
/// digest per config a workload reads, never the data: about 100 bytes a workload). Each batch
/// pages through the configs it needs, so a smaller one repeats those pages: 1,040 workloads in
/// batches of 500 made 42 LISTs at start-up where one batch makes 14.
const BATCH: usize = 5_000;

/// The watcher configuration for objects sharded by `selector` (`--watch-label-selector`).
fn sharded(selector: &Selector) -> watcher::Config {
    let config = watcher::Config::default();
    if selector.is_empty() {
        config
    } else {
        config.labels(&selector.to_string())
    }
}

/// Runs the reload controller until the process ends, on `runtime`'s shared watches: the configs
/// of `configs`, and one informer per workload kind served. Readiness (a `reload` part) turns
/// true once every list is in and the memory is read; nothing here exits on an API error.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("reload");
    let discovered = Arc::new(AtomicBool::new(false));
    {
        let discovered = discovered.clone();
        health.check("discovery", move || {
            if discovered.load(Ordering::Acquire) {
                Probe::ok()
            } else {
                Probe::not_ready("API discovery of the workload kinds has not answered yet")
            }
        });
    }
    let mut backoff = Policy::STARTUP.backoff();
    let served = loop {
        conflux_runtime::client::wait_apiserver_ready(&ctx.client, "reload").await;
        match discovery::discover(&ctx.client, &ctx.config).await {
            Ok(found) => break found,
            Err(err) => {
                warn!(reason = err.reason(), error = %err, "reload: API discovery failed; retrying");
                backoff.wait().await;
            }
        }
    };
    discovered.store(true, Ordering::Release);
    let resources: HashMap<WorkloadKind, ApiResource> = served
        .workloads
        .into_iter()
        .filter(|(kind, _)| {
            let ignored = ctx.config.ignored_kinds.contains(kind);
            if ignored {
                info!(kind = %kind, "reload: kind ignored (--ignored-workload-types), not watching");
            }
            !ignored
        })
        .collect();
    ctx.state().resources = resources.clone();
    let gate = Gate::new();
    let queue: WorkQueue<Work, Causes> = runtime.queue(
        QueueConfig {
            retry: Policy::ROLLOUT,
            ..QueueConfig::new("reload", 1)
        },
        gate.clone(),
    );
    queue.report(&health);
    *lock(&ctx.queue) = Some(queue.clone());

    // ReloadPolicies' namespaceSelectors read Namespace labels too.
    if ctx.config.namespaces.needs_labels() || served.policies {
        let informer = runtime.namespaces(&health);
        *lock(&ctx.namespaces) = Some(informer.clone());
        let sub = informer.subscribe("reload namespaces");
        runtime.spawn(watches::namespaces(
            ctx.clone(),
            sub,
            gate.part("watch Namespace"),
        ));
    }
    runtime.spawn(watches::configs::<ConfigMap>(
        ctx.clone(),
        configs
            .informer::<ConfigMap>()
            .subscribe("reload ConfigMap"),
        gate.part("watch ConfigMap"),
    ));
    runtime.spawn(watches::configs::<Secret>(
        ctx.clone(),
        configs.informer::<Secret>().subscribe("reload Secret"),
        gate.part("watch Secret"),
    ));
    let api = |ar: &ApiResource| -> Api<DynamicObject> {
        match &ctx.config.namespace {
            Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, ar),
            None => Api::all_with(ctx.client.clone(), ar),
        }
    };
    if let Some((statuses, classes)) = served.providers {
        let informer: Informer<DynamicObject> = runtime.informer_with(
            api(&statuses),
            watcher::Config::default(),
            statuses.clone(),
            "SecretProviderClassPodStatus",
            &health,
        );
        runtime.spawn(watches::provider_statuses(
            ctx.clone(),
            informer.subscribe("reload"),
            statuses,
            gate.part("watch SecretProviderClassPodStatus"),
        ));
        let informer: Informer<DynamicObject> = runtime.informer_with(
            api(&classes),
            watcher::Config::default(),
            classes.clone(),
            "SecretProviderClass",
            &health,
        );
        runtime.spawn(watches::provider_classes(
            ctx.clone(),
            informer.subscribe("reload"),
            gate.part("watch SecretProviderClass"),
        ));
    }
    for (kind, ar) in resources {
        let informer = runtime.informer_packed_with(
            api(&ar),
            sharded(&ctx.config.object_selector),
            kind.as_str(),
            &health,
            cache::trim_kind(kind),
        );
        lock(&ctx.workload_informers).push((kind, informer.clone()));
        runtime.spawn(watches::workloads(
            ctx.clone(),
            kind,
            informer.subscribe("reload"),
            gate.part(&format!("watch {kind}")),
        ));
    }
    if served.policies {
        let informer: Informer<crate::policy::ReloadPolicy> = runtime.informer(
            Api::all(ctx.client.clone()),
            watcher::Config::default(),
            crate::policy::KIND,
            &health,
        );
        runtime.spawn(policies::watch(
            ctx.clone(),
            informer.subscribe("reload"),
            gate.part("watch ReloadPolicy"),
        ));
    }
    runtime.spawn(memory::load(ctx.clone(), gate.part("memory")));
    runtime.spawn(recreate::recover(ctx.clone()));
    {
        let ctx = ctx.clone();
        let gate = gate.clone();
        runtime.spawn(async move {
            gate.opened().await;
            let workloads = ctx.state().index.len();
            info!(workloads, "reload: caches warm");
            memory::prune(&ctx);
        });
    }
    let handler = {
        let ctx = ctx.clone();
        move |batch| {
            let ctx = ctx.clone();
            let configs = configs.clone();
            async move { handle(&ctx, &configs, batch).await }
        }
    };
    queue.run_batches(BATCH, handler).await;
}

/// Does one batch of due work: the evaluations together (they share their reads), the rest one
/// by one.
async fn handle(
    ctx: &Arc<Context>,
    configs: &ConfigWatches,
    batch: Vec<(Work, Causes)>,
) -> Vec<(Work, Causes, Next)> {
    let mut done = Vec::with_capacity(batch.len());
    let mut evaluations = Vec::new();
    for (work, causes) in batch {
        let next = match &work {
            Work::Evaluate(object) => {
                evaluations.push((object.clone(), causes));
                continue;
            }
            Work::Recreate(object) => recreate::attempt(ctx, object).await,
            Work::Resume(object) => act::resume(ctx, object).await,
            Work::Save => memory::save(ctx).await,
        };
        done.push((work, causes, next));
    }
    if !evaluations.is_empty() {
        done.extend(
            evaluate::batch(ctx, configs, evaluations)
                .await
                .into_iter()
                .map(|(object, causes, next)| (Work::Evaluate(object), causes, next)),
        );
    }
    {
        let state = ctx.state();
        ctx.update_gauges(&state);
    }
    done
}
