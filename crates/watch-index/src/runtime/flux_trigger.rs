//! The flux-trigger executor: asks Kustomizations, HelmReleases and Receivers to reconcile when
//! a ConfigMap or Secret they reference changes, by merge-patching
//! `reconcile.fluxcd.io/requestedAt` (what `flux reconcile` does). For Flux < 2.7, or Flux 2.7+
//! with its own config watchers disabled.
//!
//! Flux kinds are watched as dynamic objects, so no Flux CRD is needed to start: discovery is
//! retried with backoff until it answers, and kinds whose CRD is missing are looked for again
//! every minute. Each found kind feeds the [`ReferrerIndex`]; the [`ConfigTrigger`] stream says
//! what to reconcile; each request gets an Event on the Flux object and a metric.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::events::{EventType, Recorder};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;
use tracing::{debug, info, warn};

use super::sharded;
use super::trigger::{ConfigTrigger, Fired, ReferrerIndex, TriggerMetrics};
use crate::refs::{
    ConfigKey, HELM_GROUP, KUSTOMIZE_GROUP, NOTIFICATION_GROUP, ObjectRef, ReferenceSet,
};
use crate::selector::Selector;
use crate::trigger::{Mode, Trigger};
use conflux_runtime::ConfigWatches;
use conflux_runtime::backoff::Policy;
use conflux_runtime::events::{publish, recorder};
use conflux_runtime::sync::{lock, read, write};
use conflux_runtime::{Change, Health, Informer, Probe, Runtime, Subscription, Tasks};

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
    /// Patches written in parallel.
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

struct Executor {
    client: kube::Client,
    /// The tasks of the runtime (the leadership term) this controller runs on.
    tasks: Tasks,
    config: FluxTriggerConfig,
    metrics: Arc<FluxMetrics>,
    recorder: Recorder,
    /// Resolved API resources of the Flux kinds, by (group, kind).
    resources: RwLock<HashMap<(String, String), ApiResource>>,
    /// Requests made per object, so a background retry knows when a newer request superseded it.
    generations: Mutex<HashMap<ObjectRef, u64>>,
    /// The digest of each referrer's configs as last requested (or found recorded on it): a
    /// change already requested is not requested again.
    observed: Mutex<HashMap<ObjectRef, String>>,
    configs: ConfigWatches,
    index: ReferrerIndex,
    /// Kinds whose start-up catch-up has not finished (readiness waits for it: a change made
    /// before it could be taken for the baseline).
    catching_up: std::sync::atomic::AtomicUsize,
}

/// Runs the flux-trigger until the process ends. Nothing here makes it exit: discovery and the
/// watches retry with backoff, and readiness (under a `flux-trigger` part) says when it serves.
pub async fn run(
    runtime: Runtime,
    configs: ConfigWatches,
    config: FluxTriggerConfig,
    metrics: Arc<FluxMetrics>,
) {
    let health = runtime.health().part("flux-trigger");
    let client = runtime.client();
    let index = ReferrerIndex::with_events(ReferenceSet::flux(), metrics.trigger.clone(), &runtime);
    let exec = Arc::new(Executor {
        recorder: recorder(&client, "conflux"),
        client: client.clone(),
        tasks: runtime.tasks().clone(),
        config,
        metrics,
        resources: RwLock::new(HashMap::new()),
        generations: Mutex::new(HashMap::new()),
        observed: Mutex::new(HashMap::new()),
        configs: configs.clone(),
        index: index.clone(),
        catching_up: std::sync::atomic::AtomicUsize::new(0),
    });
    let discovered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (exec, discovered) = (exec.clone(), discovered.clone());
        health.check("referrers", move || {
            if !discovered.load(std::sync::atomic::Ordering::Acquire) {
                Probe::not_ready("API discovery of the Flux kinds has not answered yet")
            } else if !exec.index.is_synced() {
                Probe::not_ready("Flux objects not listed yet")
            } else if exec.catching_up.load(std::sync::atomic::Ordering::Acquire) > 0 {
                Probe::not_ready("comparing Flux objects with changes made while not watching")
            } else {
                Probe::ok()
            }
        });
    }

    // Discovery: retried until it answers; a transient error at start-up is not fatal.
    let mut backoff = Policy::STARTUP.backoff();
    let mut found = loop {
        conflux_runtime::client::wait_apiserver_ready(&client, "flux-trigger").await;
        match discover(&runtime, &exec, &health, &HashSet::new()).await {
            Ok(found) => break found,
            Err(err) => {
                warn!(reason = err.reason(), error = %err, "flux-trigger: API discovery failed; retrying");
                backoff.wait().await;
            }
        }
    };
    discovered.store(true, std::sync::atomic::Ordering::Release);

    // Look again, now and then, for Flux kinds whose CRDs were not installed at start.
    {
        let (rt, exec, health) = (runtime.clone(), exec.clone(), health.clone());
        runtime.spawn(async move {
            while found.len() < FLUX_KINDS.len() {
                tokio::time::sleep(REDISCOVERY_INTERVAL).await;
                match discover(&rt, &exec, &health, &found).await {
                    Ok(more) => found.extend(more),
                    Err(err) => {
                        warn!(reason = err.reason(), error = %err, "flux-trigger: discovery failed; will retry")
                    }
                }
            }
        });
    }

    let trigger = Trigger::new(exec.config.config_selector.clone(), exec.config.mode);
    let fired = ConfigTrigger::new(trigger, index, client)
        .concurrent(exec.config.concurrent)
        .stream(&configs);
    let namespace = exec.config.namespace.clone();
    let fired = fired.filter(move |f| {
        let keep = namespace
            .as_deref()
            .is_none_or(|ns| ns == f.source.namespace.as_ref());
        async move { keep }
    });
    let mut fired = std::pin::pin!(fired);
    while let Some(f) = fired.next().await {
        exec.request_all(f).await;
    }
}

/// Finds the Flux kinds served (skipping `already`), starts an informer for each, feeds the index
/// and returns the (group, kind) pairs found.
async fn discover(
    runtime: &Runtime,
    exec: &Arc<Executor>,
    health: &Health,
    already: &HashSet<(String, String)>,
) -> crate::Result<HashSet<(String, String)>> {
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
        write(&exec.resources).insert(key.clone(), ar.clone());
        let api: Api<DynamicObject> = match &exec.config.namespace {
            Some(ns) => Api::namespaced_with(exec.client.clone(), ns, &ar),
            None => Api::all_with(exec.client.clone(), &ar),
        };
        let informer = runtime.informer_with(
            api,
            sharded(&exec.config.object_selector),
            ar.clone(),
            &ar.kind,
            health,
        );
        runtime.spawn(exec.index.feed(&informer, &ar.api_version, &ar.kind));
        // Once everything is listed, ask for what changed while conflux was not watching.
        exec.catching_up
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        runtime.spawn(record_new_referrers(
            exec.clone(),
            informer.subscribe(&format!("new {kind} baselines")),
            ar.clone(),
        ));
        let exec = exec.clone();
        runtime.spawn(async move {
            informer.wait_synced().await;
            exec.index.wait_synced().await;
            exec.configs.wait_synced().await;
            exec.catch_up(&informer, &ar).await;
            exec.catching_up
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
        found.insert(key);
    }
    Ok(found)
}

/// Records the digest of referrers created (or first given references) while conflux runs, as
/// the start-up catch-up does for those that existed before: without it, a change made while
/// conflux is down would be taken for the first sight of such a referrer, and missed.
async fn record_new_referrers(
    exec: Arc<Executor>,
    mut sub: Subscription<DynamicObject>,
    ar: ApiResource,
) {
    while let Some(change) = sub.recv().await {
        let Change::Applied(obj) = change else {
            continue;
        };
        let recorded = obj
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(OBSERVED_ANNOTATION));
        if recorded || obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Ok(mut value) = serde_json::to_value(&*obj) else {
            continue;
        };
        value["apiVersion"] = ar.api_version.as_str().into();
        value["kind"] = ar.kind.as_str().into();
        let keys = exec.index.references_in(&value);
        if keys.is_empty() {
            continue;
        }
        let object = ObjectRef::new(
            ar.group.as_str(),
            ar.kind.as_str(),
            obj.metadata.namespace.clone().unwrap_or_default(),
            obj.metadata.name.clone().unwrap_or_default(),
        );
        let digest = exec.digest_of(keys).await;
        if exec.claim(&object, &digest) {
            exec.record(&object, &ar, &digest).await;
        }
    }
}

impl Executor {
    /// Requests reconciliation of every referrer of one fired change.
    async fn request_all(self: &Arc<Self>, fired: Fired) {
        for cycle in &fired.order.cycles {
            let names: Vec<String> = cycle.iter().map(ToString::to_string).collect();
            warn!(cycle = %names.join(" -> "), "flux-trigger: dependsOn cycle among referrers; requesting all of them");
        }
        let source = format!(
            "{} {}/{}",
            fired.source.kind, fired.source.namespace, fired.source.name
        );
        let event = fired.change.as_str();
        info!(source = %source, event, referrers = fired.order.order.len(), "flux-trigger: requesting reconciliation");
        // Kustomizations are written in dependsOn order, so Flux's queue sees every dependency
        // before its dependents: depth by depth, each depth in parallel (its members have no
        // order among themselves). Other kinds have no order and are written in parallel.
        let mut depths: std::collections::BTreeMap<usize, Vec<ObjectRef>> = Default::default();
        let mut unordered = Vec::new();
        for (i, object) in fired.order.order.into_iter().enumerate() {
            if object.group.as_ref() == KUSTOMIZE_GROUP {
                let depth = fired.order.depths.get(i).copied().unwrap_or(i);
                depths.entry(depth).or_default().push(object);
            } else {
                unordered.push(object);
            }
        }
        for batch in depths.into_values().chain(std::iter::once(unordered)) {
            futures::stream::iter(batch)
                .for_each_concurrent(self.config.concurrent.max(1), |object| {
                    let source = source.clone();
                    async move { self.request_if_new(&object, &source, event).await }
                })
                .await;
        }
    }

    /// Requests reconciliation unless this state of the referrer's configs was requested already.
    async fn request_if_new(self: &Arc<Self>, object: &ObjectRef, source: &str, event: &str) {
        let digest = self.digest(object).await;
        if !self.claim(object, &digest) {
            debug!(object = %object, "flux-trigger: this change was requested already");
            return;
        }
        self.request(object, source, event, digest).await;
    }

    /// Records `digest` as requested for `object`; `false` when it already was. Claimed before
    /// the request is sent, so two paths (a change event and the start-up catch-up) never both
    /// send it.
    fn claim(&self, object: &ObjectRef, digest: &str) -> bool {
        let mut observed = lock(&self.observed);
        if observed.get(object).map(String::as_str) == Some(digest) {
            return false;
        }
        observed.insert(object.clone(), digest.to_owned());
        true
    }

    /// A digest of the referrer's configs as they are now: per config its resourceVersion
    /// (upstream mode) or data hash (data-hash mode) when it matches the watch selector, `-`
    /// otherwise.
    async fn digest(&self, object: &ObjectRef) -> String {
        let keys: Vec<ConfigKey> = self.index.read().references_of(object).cloned().collect();
        self.digest_of(keys).await
    }

    /// The digest of `keys` (see [`Executor::digest`]).
    async fn digest_of(&self, mut keys: Vec<ConfigKey>) -> String {
        use sha2::{Digest, Sha256};
        keys.sort();
        keys.dedup();
        let mut hasher = Sha256::new();
        for key in keys {
            let meta = self.configs.meta(key.kind, &key.namespace, &key.name);
            let matching = meta
                .as_ref()
                .filter(|m| self.config.config_selector.matches(&m.labels));
            let state = match (matching, self.config.mode) {
                (None, _) => "-".to_owned(),
                (Some(m), Mode::Upstream) => m.resource_version.clone().unwrap_or_default(),
                (Some(_), _) => {
                    let id = (key.namespace.to_string(), key.name.to_string());
                    match super::trigger::fetch_data_hash(&self.client, key.kind, &id).await {
                        Ok(Some(hash)) => crate::trigger::hex(&hash),
                        Ok(None) => "-".to_owned(),
                        // Unknown: a value that never matches, so a later request is not skipped.
                        Err(_) => format!("?{}", rfc3339_nano_now()),
                    }
                }
            };
            hasher.update(format!("{key}={state}\n").as_bytes());
        }
        crate::trigger::hex(&hasher.finalize()[..16])
    }

    /// After a (re)start: every referrer of one kind whose recorded digest differs from its
    /// configs now is asked to reconcile (a change made while conflux was down); one with no
    /// digest yet gets it recorded, without a request (first sight never triggers).
    async fn catch_up(self: &Arc<Self>, informer: &Informer<DynamicObject>, ar: &ApiResource) {
        let mut requested = 0usize;
        for obj in informer.store().state() {
            let object = ObjectRef::new(
                ar.group.as_str(),
                ar.kind.as_str(),
                obj.metadata.namespace.clone().unwrap_or_default(),
                obj.metadata.name.clone().unwrap_or_default(),
            );
            let recorded = obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(OBSERVED_ANNOTATION))
                .cloned();
            let digest = self.digest(&object).await;
            match recorded {
                Some(recorded) if recorded == digest => {
                    self.claim(&object, &digest);
                }
                Some(_) => {
                    if self.claim(&object, &digest) {
                        requested += 1;
                        let source = "a referenced ConfigMap/Secret";
                        self.request(&object, source, "change", digest).await;
                    }
                }
                None => {
                    if self.claim(&object, &digest) {
                        self.record(&object, ar, &digest).await;
                    }
                }
            }
        }
        info!(kind = %ar.kind, requested, "flux-trigger: caught up with changes made while not watching");
    }

    /// Records the digest on a referrer without asking it to reconcile. A failed write is retried
    /// in the background with backoff (1 s doubling to 60 s) until written, the object is gone,
    /// or a request (which records the digest too) supersedes it: a referrer without a recorded
    /// digest would take a change made while conflux is down for its first sight, and miss it.
    async fn record(self: &Arc<Self>, object: &ObjectRef, ar: &ApiResource, digest: &str) {
        // Not a new generation: a record must never cancel a request's retries.
        let generation = self.current_generation(object);
        if self.try_record(object, ar, digest, true).await {
            return;
        }
        let (this, object, ar, digest) =
            (self.clone(), object.clone(), ar.clone(), digest.to_owned());
        self.tasks.spawn(async move {
            let mut backoff = Policy::BACKGROUND.backoff();
            loop {
                backoff.wait().await;
                if this.current_generation(&object) != generation
                    || this.try_record(&object, &ar, &digest, false).await
                {
                    return;
                }
            }
        });
    }

    /// One attempt at recording a digest; `true` when done (written, or the object is gone).
    async fn try_record(
        &self,
        object: &ObjectRef,
        ar: &ApiResource,
        digest: &str,
        first: bool,
    ) -> bool {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, ar);
        let patch = json!({"metadata": {"annotations": {OBSERVED_ANNOTATION: digest}}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let action = format!("recording observed configs on {object}");
        match api
            .patch(&object.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(conflux_runtime::Error::api(action))
        {
            Ok(_) => true,
            Err(err) if err.is_not_found() => true,
            Err(err) => {
                if first {
                    warn!(object = %object, reason = err.reason(), error = %err, "flux-trigger: cannot record the observed configs; retrying with backoff");
                } else {
                    debug!(object = %object, reason = err.reason(), error = %err, "flux-trigger: retry failed");
                }
                false
            }
        }
    }

    /// Merge-patches `reconcile.fluxcd.io/requestedAt` on one referrer and records an Event. A
    /// failed request is retried in the background with backoff (1 s doubling to 60 s) until it
    /// succeeds, the object is gone, or a newer request for the same object supersedes it: a
    /// trigger is never lost to a transient error, and never doubled by its own retries.
    async fn request(
        self: &Arc<Self>,
        object: &ObjectRef,
        source: &str,
        event: &str,
        digest: String,
    ) {
        let generation = self.next_generation(object);
        if self.try_request(object, source, event, &digest, true).await {
            return;
        }
        let (this, object) = (self.clone(), object.clone());
        let (source, event) = (source.to_owned(), event.to_owned());
        self.tasks.spawn(async move {
            let mut backoff = Policy::BACKGROUND.backoff();
            loop {
                backoff.wait().await;
                if this.current_generation(&object) != generation {
                    return;
                }
                if this
                    .try_request(&object, &source, &event, &digest, false)
                    .await
                {
                    return;
                }
            }
        });
    }

    fn next_generation(&self, object: &ObjectRef) -> u64 {
        let mut generations = lock(&self.generations);
        let n = generations.entry(object.clone()).or_insert(0);
        *n += 1;
        *n
    }

    fn current_generation(&self, object: &ObjectRef) -> u64 {
        lock(&self.generations)
            .get(object)
            .copied()
            .unwrap_or_default()
    }

    /// One attempt; `true` when done (written, or the object is gone). The Warning Event and log
    /// line of a failure are written on the first attempt only.
    async fn try_request(
        &self,
        object: &ObjectRef,
        source: &str,
        event: &str,
        digest: &str,
        first: bool,
    ) -> bool {
        let ar = read(&self.resources)
            .get(&(object.group.to_string(), object.kind.to_string()))
            .cloned();
        let Some(ar) = ar else {
            return true;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, &ar);
        let patch = json!({"metadata": {"annotations": {
            REQUESTED_AT_ANNOTATION: rfc3339_nano_now(),
            OBSERVED_ANNOTATION: digest,
        }}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let result = api
            .patch(&object.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(conflux_runtime::Error::api(format!(
                "requesting reconciliation of {object}"
            )));
        let labels = RequestLabels {
            kind: object.kind.to_string(),
            result: if result.is_ok() { "success" } else { "error" }.to_owned(),
        };
        self.metrics.reconcile_requests.get_or_create(&labels).inc();
        let reference = ObjectReference {
            api_version: Some(ar.api_version.clone()),
            kind: Some(ar.kind.clone()),
            namespace: Some(object.namespace.to_string()),
            name: Some(object.name.to_string()),
            ..Default::default()
        };
        let (type_, reason, note) = match &result {
            Ok(_) => (
                EventType::Normal,
                "ConfigChanged",
                format!("{source} was {event}d; requested reconciliation"),
            ),
            Err(err) if err.is_not_found() => {
                debug!(object = %object, "flux-trigger: referrer gone; nothing to request");
                return true;
            }
            Err(err) if !first => {
                debug!(object = %object, reason = err.reason(), error = %err, "flux-trigger: retry failed");
                return false;
            }
            Err(err) => {
                warn!(object = %object, reason = err.reason(), error = %err, "flux-trigger: cannot request reconciliation; retrying with backoff");
                (
                    EventType::Warning,
                    "ReconcileRequestFailed",
                    format!(
                        "{source} was {event}d but requesting reconciliation failed: {err}; retrying"
                    ),
                )
            }
        };
        publish(
            &self.recorder,
            &reference,
            type_,
            reason,
            note,
            "RequestReconcile",
        )
        .await;
        result.is_ok()
    }
}

/// Go's `time.RFC3339Nano` of now (trailing zeros of the fraction trimmed), as `flux reconcile`.
fn rfc3339_nano_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests;
