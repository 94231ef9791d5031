//! The flux-trigger controller: asks Kustomizations, HelmReleases and Receivers to reconcile when
//! a ConfigMap or Secret they reference changes, by merge-patching
//! `reconcile.fluxcd.io/requestedAt` (what `flux reconcile` does). For Flux < 2.7, or Flux 2.7+
//! with its own config watchers disabled.
//!
//! Flux kinds are watched as dynamic objects, so no Flux CRD is needed to start: discovery is
//! retried with backoff until it answers, and kinds whose CRD is missing are looked for again
//! every minute. Each found kind feeds the [`ReferrerIndex`]; the [`ConfigTrigger`] stream says
//! what to reconcile; the Flux objects go through one work queue ([`conflux_runtime::queue`]),
//! whose handler writes one merge patch per object: `requestedAt` and the digest of the
//! object's configs. Each fired change gets one Event on its ConfigMap/Secret naming what it
//! asked, each request a metric.
//!
//! Files: `work` (what the queue carries: a fired change's wave, the start-up catch-up, a first
//! sight), `request` (the handler); this one holds the settings, the metrics, discovery and the
//! feeds of the queue.

mod request;
mod work;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery::{Discovery, Scope};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::sharded;
use super::trigger::{ConfigTrigger, DataHashes, Fired, ReferrerIndex, TriggerMetrics};
use crate::refs::{HELM_GROUP, KUSTOMIZE_GROUP, NOTIFICATION_GROUP, ObjectRef, ReferenceSet};
use crate::selector::Selector;
use crate::trigger::{Mode, Trigger};
use conflux_runtime::ConfigWatches;
use conflux_runtime::backoff::Policy;
use conflux_runtime::events::recorder;
use conflux_runtime::queue::{Gate, Opening, QueueConfig, WorkQueue};
use conflux_runtime::sync::write;
use conflux_runtime::{Change, Health, Probe, Runtime, Subscription, Tasks};
use request::{Executor, FluxKind};
use work::{Step, Wave, Work};

/// The annotation Flux controllers watch for on-demand reconciliation.
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// Field manager of our patches (so `kubectl get --show-managed-fields` says who asked).
pub const FIELD_MANAGER: &str = "conflux";

/// The Flux kinds whose references are indexed.
pub const FLUX_KINDS: [(&str, &str); 3] = [
    (KUSTOMIZE_GROUP, "Kustomization"),
    (HELM_GROUP, "HelmRelease"),
    (NOTIFICATION_GROUP, "Receiver"),
];

/// Annotation on a Flux object: a digest of the referenced ConfigMaps/Secrets (resourceVersions, or
/// data hashes in data-hash mode) as of conflux's last request. It lets a restarted conflux ask
/// for the reconciliations it missed while it was down, and only those.
pub const OBSERVED_ANNOTATION: &str = "trigger.conflux.dev/observed-configs";

/// How often kinds whose CRD was missing are looked for again.
const REDISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

/// Settings of the flux-trigger (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct FluxTriggerConfig {
    /// `--watch-configs-label-selector`: which ConfigMaps/Secrets may fire.
    pub config_selector: Selector,
    /// `--watch-label-selector`: which Flux objects are handled.
    pub object_selector: Selector,
    /// Flux-exact or data-hash firing.
    pub mode: Mode,
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// Objects handled (patches written) at once.
    pub concurrent: usize,
}

/// Labels of a reconcile request written to a Flux object.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kind of the Flux object.
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Metrics of the flux-trigger.
#[derive(Debug, Default)]
pub struct FluxMetrics {
    /// The trigger's and index's metrics.
    pub trigger: Arc<TriggerMetrics>,
    /// `trigger_reconcile_requests_total`.
    pub reconcile_requests: Family<RequestLabels, Counter>,
}

impl FluxMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        self.trigger.register(registry);
        registry.register(
            "trigger_reconcile_requests",
            "reconcile.fluxcd.io/requestedAt patches written to Flux objects",
            self.reconcile_requests.clone(),
        );
    }
}

/// The queue's name (in metrics and readiness).
const QUEUE: &str = "flux-trigger";

/// Runs the flux-trigger until the process ends. Nothing here makes it exit: discovery and the
/// watches retry with backoff, and readiness (under a `flux-trigger` part) says when it serves.
///
/// One controller shape ([`conflux_runtime::queue`]): each Flux object is a key of one work
/// queue. A fired change adds its referrers (one `dependsOn` depth at a time); the initial list
/// of each Flux kind adds every object for the start-up catch-up; an object seen for the first
/// time adds it for its first-sight record. The handler writes at most one merge patch per
/// object; failures are retried by the queue with backoff. Nothing is handed out before the
/// Flux kinds found at start are listed and the trigger's baselines are recorded.
pub async fn run(
    runtime: Runtime,
    configs: ConfigWatches,
    config: FluxTriggerConfig,
    metrics: Arc<FluxMetrics>,
) {
    let health = runtime.health().part("flux-trigger");
    let client = runtime.client();
    let index = ReferrerIndex::with_events(ReferenceSet::flux(), metrics.trigger.clone(), &runtime);
    let gate = Gate::new();
    let mut discovery = gate.part("discovery");
    let queue: WorkQueue<ObjectRef, Work> = runtime.queue(
        QueueConfig {
            retry: Policy::BACKGROUND,
            ..QueueConfig::new(QUEUE, config.concurrent)
        },
        gate.clone(),
    );
    queue.report(&health);
    let exec = Arc::new(Executor {
        recorder: recorder(&client, "conflux"),
        client: client.clone(),
        config,
        metrics,
        kinds: RwLock::new(HashMap::new()),
        configs: configs.clone(),
        index: index.clone(),
        hashes: DataHashes::default(),
        requested: Mutex::default(),
        recorded: Mutex::default(),
        failing: Mutex::default(),
    });
    let catching_up = Arc::new(AtomicUsize::new(0));
    let discovered = Arc::new(AtomicBool::new(false));
    {
        let (index, catching_up, discovered) =
            (index.clone(), catching_up.clone(), discovered.clone());
        health.check("referrers", move || {
            if !discovered.load(Ordering::Acquire) {
                Probe::not_ready("API discovery of the Flux kinds has not answered yet")
            } else if !index.is_synced() {
                Probe::not_ready("Flux objects not listed yet")
            } else if catching_up.load(Ordering::Acquire) > 0 {
                Probe::not_ready("comparing Flux objects with changes made while not watching")
            } else {
                Probe::ok()
            }
        });
    }
    // The trigger subscribes now, so its baselines are parts of the gate from the start.
    let trigger = Trigger::new(exec.config.config_selector.clone(), exec.config.mode);
    let fired = ConfigTrigger::new(trigger, index, client.clone())
        .concurrent(exec.config.concurrent)
        .with_gate(&gate)
        .stream(&configs);
    let feeds = Feeds {
        runtime: runtime.clone(),
        exec: exec.clone(),
        queue: queue.clone(),
        health: health.clone(),
        catching_up,
    };

    // Discovery: retried until it answers; a transient error at start-up is not fatal.
    let mut backoff = Policy::STARTUP.backoff();
    let mut found = loop {
        conflux_runtime::client::wait_apiserver_ready(&client, "flux-trigger").await;
        match feeds.discover(&HashSet::new(), Some(&gate)).await {
            Ok(found) => break found,
            Err(err) => {
                warn!(reason = err.reason(), error = %err, "flux-trigger: API discovery failed; retrying");
                backoff.wait().await;
            }
        }
    };
    discovered.store(true, Ordering::Release);
    discovery.open();

    // Look again, now and then, for Flux kinds whose CRDs were not installed at start.
    {
        let feeds = feeds.clone();
        runtime.spawn(async move {
            while found.len() < FLUX_KINDS.len() {
                tokio::time::sleep(REDISCOVERY_INTERVAL).await;
                match feeds.discover(&found, None).await {
                    Ok(more) => found.extend(more),
                    Err(err) => {
                        warn!(reason = err.reason(), error = %err, "flux-trigger: discovery failed; will retry")
                    }
                }
            }
        });
    }

    let (steps_tx, steps) = mpsc::unbounded_channel();
    runtime.spawn(handle_queue(queue.clone(), exec.clone(), steps_tx.clone()));
    let namespace = exec.config.namespace.clone();
    let fired = fired.filter(move |f| {
        let keep = namespace
            .as_deref()
            .is_none_or(|ns| ns == f.source.namespace.as_ref());
        async move { keep }
    });
    add_waves(runtime.tasks(), &exec, &queue, fired, (steps_tx, steps)).await;
}

/// Hands the queue's objects to the handler, forever.
async fn handle_queue(
    queue: WorkQueue<ObjectRef, Work>,
    exec: Arc<Executor>,
    steps: mpsc::UnboundedSender<Step>,
) {
    queue
        .run(move |object, work: &Work| exec.clone().handle(object, work.view(), steps.clone()))
        .await;
}

/// Adds each fired change's referrers to the queue, one depth at a time (the next once every
/// object of the one before was handled), and reports each finished change on `tasks`, until
/// `fired` ends.
async fn add_waves(
    tasks: &Tasks,
    exec: &Arc<Executor>,
    queue: &WorkQueue<ObjectRef, Work>,
    fired: impl futures::Stream<Item = Fired>,
    (steps_tx, mut steps): (mpsc::UnboundedSender<Step>, mpsc::UnboundedReceiver<Step>),
) {
    let mut fired = std::pin::pin!(fired);
    let mut waves = 0u64;
    loop {
        tokio::select! {
            Some(f) = fired.next() => {
                waves += 1;
                start_wave(queue, f, waves, &steps_tx);
            }
            Some(step) = steps.recv() => match step {
                Step::Depth(wave, depth) => {
                    for (object, ticket) in wave.depth(depth) {
                        queue.add(object, Work::ask(ticket));
                    }
                }
                Step::Done(wave) => {
                    let exec = exec.clone();
                    tasks.spawn(async move { exec.report(&wave).await });
                }
            },
            else => return,
        }
    }
}

/// Adds the first depth of a fired change's referrers to the queue.
fn start_wave(
    queue: &WorkQueue<ObjectRef, Work>,
    fired: Fired,
    id: u64,
    steps: &mpsc::UnboundedSender<Step>,
) {
    for cycle in &fired.order.cycles {
        let names: Vec<String> = cycle.iter().map(ToString::to_string).collect();
        warn!(cycle = %names.join(" -> "), "flux-trigger: dependsOn cycle among referrers; requesting all of them");
    }
    let source = format!(
        "{} {}/{}",
        fired.source.kind, fired.source.namespace, fired.source.name
    );
    let event = fired.change.as_str();
    let Some(wave) = Wave::new(id, fired, steps.clone()) else {
        return;
    };
    info!(source = %source, event, referrers = wave.len(), "flux-trigger: requesting reconciliation");
    // Kustomizations are asked in dependsOn order, so Flux's queue sees every dependency
    // before its dependents: depth by depth, each depth in parallel (its members have no order
    // among themselves). Other kinds have no order and come last, in parallel.
    let wave = Arc::new(wave);
    for (object, ticket) in wave.depth(0) {
        queue.add(object, Work::ask(ticket));
    }
}

/// What the watches of the Flux kinds feed, and where.
#[derive(Clone)]
struct Feeds {
    runtime: Runtime,
    exec: Arc<Executor>,
    queue: WorkQueue<ObjectRef, Work>,
    health: Arc<Health>,
    /// Start-up comparisons not attempted yet.
    catching_up: Arc<AtomicUsize>,
}

impl Feeds {
    /// Finds the Flux kinds served (skipping `already`), starts an informer for each, feeds the
    /// index and the queue and returns the (group, kind) pairs found. With a `gate`, the queue
    /// waits for each kind found to be listed.
    async fn discover(
        &self,
        already: &HashSet<(String, String)>,
        gate: Option<&Gate>,
    ) -> crate::Result<HashSet<(String, String)>> {
        let exec = &self.exec;
        let groups: Vec<&str> = FLUX_KINDS.iter().map(|(g, _)| *g).collect();
        let discovery = Discovery::new(exec.client.clone())
            .filter(&groups)
            .run()
            .await
            .map_err(conflux_runtime::Error::api(
                "API discovery of the Flux kinds",
            ))?;
        let mut found = HashSet::new();
        for (group, kind) in FLUX_KINDS {
            let key = (group.to_owned(), kind.to_owned());
            if already.contains(&key) {
                continue;
            }
            let resolved = discovery
                .get(group)
                .and_then(|g| g.recommended_kind(kind))
                .filter(|(_, caps)| caps.scope == Scope::Namespaced);
            let Some((ar, _)) = resolved else {
                if already.is_empty() {
                    info!(
                        group,
                        kind,
                        "flux-trigger: CRD not installed, not watching this kind (looking again every minute)"
                    );
                }
                continue;
            };
            info!(group, kind, version = %ar.version, "flux-trigger: watching");
            let api: Api<DynamicObject> = match &exec.config.namespace {
                Some(ns) => Api::namespaced_with(exec.client.clone(), ns, &ar),
                None => Api::all_with(exec.client.clone(), &ar),
            };
            let informer = self.runtime.informer_with(
                api,
                sharded(&exec.config.object_selector),
                ar.clone(),
                &ar.kind,
                &self.health,
            );
            write(&exec.kinds).insert(
                key.clone(),
                FluxKind {
                    resource: ar.clone(),
                    store: informer.store(),
                },
            );
            self.runtime
                .spawn(exec.index.feed(&informer, &ar.api_version, &ar.kind));
            let listed = gate.map(|g| g.part(&format!("watch {}", ar.kind)));
            let subscription = informer.subscribe(&format!("flux-trigger {}", ar.kind));
            self.runtime
                .spawn(self.clone().feed(subscription, ar, listed));
            found.insert(key);
        }
        Ok(found)
    }

    /// Adds the objects of one Flux kind to the queue: each of the initial state for the
    /// start-up catch-up (a change made while conflux was not watching is requested; a first
    /// sight gets its digest recorded), and each one seen later without a recorded digest for
    /// its first-sight record (without it, a change made while conflux is down would be taken
    /// for the first sight of such an object, and missed). Opens `listed` once the initial state
    /// is in.
    async fn feed(
        self,
        mut sub: Subscription<DynamicObject>,
        ar: ApiResource,
        mut listed: Option<Opening>,
    ) {
        let object_ref = |obj: &DynamicObject| {
            ObjectRef::new(
                ar.group.as_str(),
                ar.kind.as_str(),
                obj.metadata.namespace.clone().unwrap_or_default(),
                obj.metadata.name.clone().unwrap_or_default(),
            )
        };
        while let Some(change) = sub.recv().await {
            match change {
                Change::Initial(obj) => {
                    self.queue
                        .add(object_ref(&obj), Work::catch_up(&self.catching_up));
                }
                Change::InitDone => {
                    if let Some(mut listed) = listed.take() {
                        listed.open();
                    }
                }
                Change::Applied(obj) => {
                    let recorded = obj
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(OBSERVED_ANNOTATION));
                    if recorded || obj.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    if !self.exec.references(&ar, &obj).is_empty() {
                        self.queue.add(object_ref(&obj), Work::record());
                    }
                }
                Change::Deleted(obj) => self.exec.forget(&object_ref(&obj)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
