//! The `flux-trigger` controller: when a ConfigMap or Secret changes, ask the Flux objects that
//! reference it to reconcile, by merge-patching `reconcile.fluxcd.io/requestedAt` (what
//! `flux reconcile` does). For Flux < 2.7, or Flux 2.7+ with its config watchers disabled.
//!
//! Observe → decide → act:
//! - Kustomizations, HelmReleases and Receivers are watched as dynamic objects (no Flux CRDs are
//!   needed to start; kinds whose CRD is missing are logged and looked for again every minute) and
//!   fed into a [`ReverseIndex`].
//! - ConfigMaps and Secrets are watched metadata-only. The first list is the baseline and fires
//!   nothing (a restart of conflux must not reconcile the whole cluster); after a watch gap the
//!   re-list is compared with what was known, so changes made during the gap are not lost.
//! - [`watch_index::trigger`] decides whether an event fires (Flux's exact rule, or data-hash).
//!   Data is fetched only in data-hash mode and only for objects that something references.
//! - Referrers are patched in `dependsOn` order, each with a Kubernetes Event saying why.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use chrono::{SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};
use watch_index::index::ReverseIndex;
use watch_index::refs::{
    ConfigKey, ConfigKind, HELM_GROUP, KUSTOMIZE_GROUP, NOTIFICATION_GROUP, ObjectRef, ReferenceSet,
};
use watch_index::selector::Selector;
use watch_index::trigger::{
    self, Decision, Event as ConfigEvent, Mode as TriggerMode, Observed, Trigger,
};

use super::common::{ConfigResource, WatchEvents, metadata_api, object_id, publish, recorder};
use crate::metrics::{ConfigEventLabels, Health, Metrics, RequestLabels};

/// The annotation Flux controllers watch for on-demand reconciliation.
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// Field manager of our patches (so `kubectl get --show-managed-fields` says who asked).
pub const FIELD_MANAGER: &str = "conflux";

/// The Flux kinds whose references are indexed.
const FLUX_KINDS: [(&str, &str); 3] = [
    (KUSTOMIZE_GROUP, "Kustomization"),
    (HELM_GROUP, "HelmRelease"),
    (NOTIFICATION_GROUP, "Receiver"),
];

/// How often kinds whose CRD was missing are looked for again.
const REDISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct FluxTriggerConfig {
    /// `--watch-configs-label-selector`: which ConfigMaps/Secrets may fire.
    pub config_selector: Selector,
    /// `--watch-label-selector`: which Flux objects are handled.
    pub object_selector: Selector,
    /// Flux-exact or data-hash firing.
    pub mode: TriggerMode,
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// Patches written in parallel.
    pub concurrent: usize,
}

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: FluxTriggerConfig,
    metrics: Arc<Metrics>,
    trigger: Trigger,
    recorder: Recorder,
    refs: ReferenceSet,
    /// One writer at a time (the referrer watchers), many readers (the config watchers); critical
    /// sections are short and never await.
    index: RwLock<ReverseIndex>,
    /// Resolved API resources of the Flux kinds, by (group, kind).
    resources: RwLock<HashMap<(String, String), ApiResource>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one controller instance.
    pub fn new(client: Client, config: FluxTriggerConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        let recorder = recorder(&client);
        Arc::new(Self {
            trigger: Trigger::new(config.config_selector.clone(), config.mode),
            client,
            config,
            metrics,
            recorder,
            refs: ReferenceSet::flux(),
            index: RwLock::new(ReverseIndex::new()),
            resources: RwLock::new(HashMap::new()),
        })
    }
}

/// Runs the controller until it fails; it only returns on errors it cannot retry.
pub async fn run(ctx: Arc<Context>, health: Arc<Health>) -> anyhow::Result<()> {
    let (ready_tx, mut ready_rx) = watch::channel(0usize);
    let ready_tx = Arc::new(ready_tx);
    let mut tasks = tokio::task::JoinSet::new();

    // Referrers first: the config watchers start once every found kind has listed, so the first
    // ConfigMap event after start-up already sees a warm index.
    let found = discover_and_watch(&ctx, &mut tasks, &ready_tx, &HashSet::new()).await?;
    let expected = found.len();
    while *ready_rx.borrow() < expected {
        if ready_rx.changed().await.is_err() {
            break;
        }
    }
    info!(kinds = expected, "flux-trigger: referrer index warm");

    let (cfg_ready_tx, mut cfg_ready_rx) = watch::channel(0usize);
    let cfg_ready_tx = Arc::new(cfg_ready_tx);
    {
        let (cm_ctx, ready) = (ctx.clone(), cfg_ready_tx.clone());
        tasks.spawn(async move {
            watch_configs::<ConfigMap>(cm_ctx, ConfigKind::ConfigMap, ready).await
        });
        let (secret_ctx, ready) = (ctx.clone(), cfg_ready_tx.clone());
        tasks.spawn(
            async move { watch_configs::<Secret>(secret_ctx, ConfigKind::Secret, ready).await },
        );
    }
    {
        let health = health.clone();
        tokio::spawn(async move {
            while *cfg_ready_rx.borrow() < 2 {
                if cfg_ready_rx.changed().await.is_err() {
                    return;
                }
            }
            health.set_ready(true);
            info!("flux-trigger: ready");
        });
    }

    // Look again, now and then, for Flux kinds whose CRDs were not installed at start.
    {
        let ctx = ctx.clone();
        let ready_tx = ready_tx.clone();
        tasks.spawn(async move {
            let mut found = found;
            let mut inner = tokio::task::JoinSet::new();
            loop {
                tokio::time::sleep(REDISCOVERY_INTERVAL).await;
                if found.len() == FLUX_KINDS.len() {
                    // Keep the watchers alive; nothing more to discover.
                    while let Some(res) = inner.join_next().await {
                        res.context("referrer watcher panicked")??;
                    }
                    return Ok(());
                }
                match discover_and_watch(&ctx, &mut inner, &ready_tx, &found).await {
                    Ok(more) => found.extend(more),
                    Err(err) => warn!(error = %format!("{err:#}"), "flux-trigger: discovery failed; will retry"),
                }
            }
        });
    }

    match tasks.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(join)) => Err(anyhow::anyhow!("flux-trigger task panicked: {join}")),
        None => Ok(()),
    }
}

/// Finds the Flux kinds served by the API server (skipping `already`), starts a watcher for each
/// and returns the (group, kind) pairs found.
async fn discover_and_watch(
    ctx: &Arc<Context>,
    tasks: &mut tokio::task::JoinSet<anyhow::Result<()>>,
    ready: &Arc<watch::Sender<usize>>,
    already: &HashSet<(String, String)>,
) -> anyhow::Result<HashSet<(String, String)>> {
    let groups: Vec<&str> = FLUX_KINDS.iter().map(|(g, _)| *g).collect();
    let discovery = Discovery::new(ctx.client.clone())
        .filter(&groups)
        .run()
        .await
        .context("API discovery failed")?;
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
        ctx.resources
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), ar.clone());
        found.insert(key);
        let ctx = ctx.clone();
        let ready = ready.clone();
        tasks.spawn(async move { watch_referrers(ctx, ar, ready).await });
    }
    Ok(found)
}

/// Keeps the index in step with one Flux kind.
async fn watch_referrers(
    ctx: Arc<Context>,
    ar: ApiResource,
    ready: Arc<watch::Sender<usize>>,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match &ctx.config.namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        None => Api::all_with(ctx.client.clone(), &ar),
    };
    let mut wc = watcher::Config::default();
    if !ctx.config.object_selector.is_empty() {
        wc = wc.labels(&ctx.config.object_selector.to_string());
    }
    let stream = watcher(api, wc);
    // Objects of this kind currently in the index, to find those deleted during a watch gap.
    let mut indexed: HashSet<ObjectRef> = HashSet::new();
    let mut listed: Option<HashSet<ObjectRef>> = None;
    let mut announced = false;
    let mut events = WatchEvents::new(stream, "flux-trigger", &ar.kind);
    loop {
        let event = events.next(&ctx.metrics).await?;
        match event {
            watcher::Event::Init => listed = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                let object = index_referrer(&ctx, &ar, obj);
                if let Some(seen) = listed.as_mut() {
                    seen.insert(object.clone());
                }
                indexed.insert(object);
            }
            watcher::Event::InitDone => {
                // Objects deleted while the watch was down are gone from the new list.
                if let Some(seen) = listed.take() {
                    let mut index = ctx.index.write().unwrap_or_else(|p| p.into_inner());
                    indexed.retain(|object| {
                        let keep = seen.contains(object);
                        if !keep {
                            index.delete(object);
                        }
                        keep
                    });
                }
                update_index_gauges(&ctx);
                if !announced {
                    announced = true;
                    ready.send_modify(|n| *n += 1);
                }
            }
            watcher::Event::Apply(obj) => {
                indexed.insert(index_referrer(&ctx, &ar, obj));
                update_index_gauges(&ctx);
            }
            watcher::Event::Delete(obj) => {
                let object = ObjectRef::new(
                    ar.group.as_str(),
                    ar.kind.as_str(),
                    obj.namespace().unwrap_or_default(),
                    obj.name_any(),
                );
                ctx.index
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .delete(&object);
                indexed.remove(&object);
                update_index_gauges(&ctx);
            }
        }
    }
}

/// Puts one referrer into the index (or removes it when it no longer references anything).
fn index_referrer(ctx: &Context, ar: &ApiResource, mut obj: DynamicObject) -> ObjectRef {
    // List items carry no apiVersion/kind; the extractor needs them.
    obj.types = Some(kube::api::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    let object = ObjectRef::new(
        ar.group.as_str(),
        ar.kind.as_str(),
        obj.namespace().unwrap_or_default(),
        obj.name_any(),
    );
    let value = match serde_json::to_value(&obj) {
        Ok(v) => v,
        Err(err) => {
            warn!(object = %object, error = %err, "flux-trigger: cannot read object");
            return object;
        }
    };
    let mut index = ctx.index.write().unwrap_or_else(|p| p.into_inner());
    match ctx.refs.extract(&value) {
        Some(referrer) => index.apply(referrer),
        None => {
            index.delete(&object);
        }
    }
    object
}

fn update_index_gauges(ctx: &Context) {
    let stats = ctx.index.read().unwrap_or_else(|p| p.into_inner()).stats();
    ctx.metrics.index_referrers.set(stats.referrers as i64);
    ctx.metrics.index_keys.set(stats.keys as i64);
}

/// What is remembered of one ConfigMap/Secret between events: enough to tell create from update,
/// to apply the selector to a deletion seen only through a re-list, and (data-hash mode) whether
/// the data changed. Never the data itself.
#[derive(Debug, Clone)]
struct Seen {
    resource_version: String,
    matched_selector: bool,
    data_hash: Option<DataHash>,
}

/// SHA-256 of what a ConfigMap/Secret holds.
type DataHash = [u8; 32];

/// Watches one of ConfigMaps/Secrets, metadata only, and fires referrers.
async fn watch_configs<K: ConfigResource>(
    ctx: Arc<Context>,
    kind: ConfigKind,
    ready: Arc<watch::Sender<usize>>,
) -> anyhow::Result<()> {
    let api = metadata_api::<K>(&ctx.client, ctx.config.namespace.as_deref());
    let stream = watcher(api, watcher::Config::default());
    let mut known: HashMap<(String, String), Seen> = HashMap::new();
    let mut relist: Option<HashSet<(String, String)>> = None;
    let mut baseline_done = false;
    let mut events = WatchEvents::new(stream, "flux-trigger", kind.as_str());
    loop {
        let event = events.next(&ctx.metrics).await?;
        match event {
            watcher::Event::Init => relist = Some(HashSet::new()),
            watcher::Event::InitApply(meta) => {
                let id = object_id(&meta.metadata);
                if let Some(seen) = relist.as_mut() {
                    seen.insert(id.clone());
                }
                if baseline_done {
                    // A re-list after a watch gap: what changed meanwhile is an update or create.
                    on_apply(&ctx, kind, &mut known, meta).await;
                } else {
                    let matched = ctx.config.config_selector.matches(&meta.metadata.labels);
                    known.insert(
                        id,
                        Seen {
                            resource_version: meta
                                .metadata
                                .resource_version
                                .clone()
                                .unwrap_or_default(),
                            matched_selector: matched,
                            data_hash: None,
                        },
                    );
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = relist.take()
                    && baseline_done
                {
                    let gone: Vec<(String, String)> = known
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for id in gone {
                        if let Some(seen) = known.remove(&id) {
                            let decision = gap_deletion_decision(seen.matched_selector);
                            on_delete(&ctx, kind, &id, decision).await;
                        }
                    }
                }
                if !baseline_done {
                    baseline_done = true;
                    if ctx.config.mode == TriggerMode::DataHash {
                        record_baseline_hashes(&ctx, kind, &mut known).await;
                    }
                    ready.send_modify(|n| *n += 1);
                    debug!(%kind, objects = known.len(), "flux-trigger: baseline recorded");
                }
            }
            watcher::Event::Apply(meta) => on_apply(&ctx, kind, &mut known, meta).await,
            watcher::Event::Delete(meta) => {
                let id = object_id(&meta.metadata);
                let last = known.remove(&id);
                let rv = last.map(|s| s.resource_version).unwrap_or_default();
                let decision = ctx.trigger.decide(
                    &ConfigEvent::Deleted(Observed::new(&meta.metadata.labels, &rv)),
                    referenced(&ctx, kind, &id),
                );
                on_delete(&ctx, kind, &id, decision).await;
            }
        }
    }
}

fn referenced(ctx: &Context, kind: ConfigKind, id: &(String, String)) -> bool {
    ctx.index
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .is_referenced(kind, &id.0, &id.1)
}

async fn on_apply<K: Resource>(
    ctx: &Context,
    kind: ConfigKind,
    known: &mut HashMap<(String, String), Seen>,
    meta: PartialObjectMeta<K>,
) {
    let id = object_id(&meta.metadata);
    let matched = ctx.config.config_selector.matches(&meta.metadata.labels);
    let new_rv = meta.metadata.resource_version.clone().unwrap_or_default();
    let previous = known.get(&id).cloned();
    let has_referrers = referenced(ctx, kind, &id);

    // Data is read only when it can matter: data-hash mode, a matching object, and referrers.
    let data_hash = if ctx.config.mode == TriggerMode::DataHash && matched && has_referrers {
        match fetch_data_hash(ctx, kind, &id).await {
            Ok(hash) => hash,
            Err(err) => {
                warn!(%kind, namespace = %id.0, name = %id.1, error = %format!("{err:#}"), "flux-trigger: cannot read data");
                None
            }
        }
    } else {
        None
    };
    let new_observed = match &data_hash {
        Some(hash) => Observed::new(&meta.metadata.labels, &new_rv).with_data_hash(hash),
        None => Observed::new(&meta.metadata.labels, &new_rv),
    };
    let decision = match &previous {
        None => ctx
            .trigger
            .decide(&ConfigEvent::Created(new_observed), has_referrers),
        Some(old) => {
            // The old labels do not matter to the rule (the new ones decide); the old
            // resourceVersion and data hash do.
            let no_labels: Option<&std::collections::BTreeMap<String, String>> = None;
            let mut old_observed = Observed::new(&no_labels, &old.resource_version);
            if let Some(hash) = &old.data_hash {
                old_observed = old_observed.with_data_hash(hash);
            }
            ctx.trigger.decide(
                &ConfigEvent::Updated {
                    old: old_observed,
                    new: new_observed,
                },
                has_referrers,
            )
        }
    };
    let event_name = if previous.is_none() {
        "create"
    } else {
        "update"
    };
    known.insert(
        id.clone(),
        Seen {
            resource_version: new_rv.clone(),
            matched_selector: matched,
            data_hash: data_hash.or(previous.and_then(|p| p.data_hash)),
        },
    );
    let fire = decision.fires();
    record_and_fire(ctx, kind, &id, event_name, fire).await;
}

async fn on_delete(ctx: &Context, kind: ConfigKind, id: &(String, String), decision: Decision) {
    record_and_fire(ctx, kind, id, "delete", decision.fires()).await;
}

/// The decision for a deletion seen only through a re-list, where the last labels are gone but
/// whether they matched the selector was remembered: the selector is the only condition a
/// deletion has ([`Trigger::decide`]).
fn gap_deletion_decision(matched_selector: bool) -> Decision {
    if matched_selector {
        Decision::Fire(watch_index::trigger::Why::Deleted)
    } else {
        Decision::Skip(watch_index::trigger::WhyNot::SelectorMismatch)
    }
}

async fn record_and_fire(
    ctx: &Context,
    kind: ConfigKind,
    id: &(String, String),
    event: &str,
    fire: bool,
) {
    let order = if fire {
        let key = ConfigKey::new(kind, id.0.as_str(), id.1.as_str());
        Some(
            ctx.index
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .referrers_in_dependency_order(&key),
        )
    } else {
        None
    };
    let fired = order.as_ref().is_some_and(|o| !o.order.is_empty());
    ctx.metrics
        .config_events
        .get_or_create(&ConfigEventLabels {
            kind: kind.as_str().to_owned(),
            event: event.to_owned(),
            decision: if fired { "fire" } else { "skip" }.to_owned(),
        })
        .inc();
    let Some(order) = order.filter(|o| !o.order.is_empty()) else {
        return;
    };
    for cycle in &order.cycles {
        let names: Vec<String> = cycle.iter().map(ToString::to_string).collect();
        warn!(cycle = %names.join(" -> "), "flux-trigger: dependsOn cycle among referrers; requesting all of them");
    }
    let source = format!("{kind} {}/{}", id.0, id.1);
    info!(source = %source, event, referrers = order.order.len(), "flux-trigger: requesting reconciliation");
    // Kustomizations are written one after the other in dependsOn order, so Flux's queue sees
    // them in that order; other kinds have no order and are written in parallel.
    let (ordered, unordered): (Vec<ObjectRef>, Vec<ObjectRef>) = order
        .order
        .into_iter()
        .partition(|o| o.group.as_ref() == KUSTOMIZE_GROUP);
    for object in &ordered {
        request_reconcile(ctx, object, &source, event).await;
    }
    futures::stream::iter(unordered)
        .for_each_concurrent(ctx.config.concurrent, |object| {
            let source = source.clone();
            async move { request_reconcile(ctx, &object, &source, event).await }
        })
        .await;
}

/// Merge-patches `reconcile.fluxcd.io/requestedAt` on one referrer and records an Event.
async fn request_reconcile(ctx: &Context, object: &ObjectRef, source: &str, event: &str) {
    let ar = ctx
        .resources
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(object.group.to_string(), object.kind.to_string()))
        .cloned();
    let Some(ar) = ar else {
        return;
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &object.namespace, &ar);
    let patch = json!({"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: rfc3339_nano_now()}}});
    let result = api
        .patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let labels = RequestLabels {
        kind: object.kind.to_string(),
        result: if result.is_ok() { "success" } else { "error" }.to_owned(),
    };
    ctx.metrics.reconcile_requests.get_or_create(&labels).inc();
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
        Err(err) => {
            warn!(object = %object, error = %err, "flux-trigger: cannot request reconciliation");
            (
                EventType::Warning,
                "ReconcileRequestFailed",
                format!("{source} was {event}d but requesting reconciliation failed: {err}"),
            )
        }
    };
    publish(
        &ctx.recorder,
        &reference,
        type_,
        reason,
        note,
        "RequestReconcile",
    )
    .await;
}

/// Go's `time.RFC3339Nano` of now (trailing zeros of the fraction trimmed), as `flux reconcile`.
fn rfc3339_nano_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Hashes of the data of every referenced object, taken once the baseline list is complete.
async fn record_baseline_hashes(
    ctx: &Context,
    kind: ConfigKind,
    known: &mut HashMap<(String, String), Seen>,
) {
    let wanted: Vec<(String, String)> = known
        .iter()
        .filter(|(id, seen)| seen.matched_selector && referenced(ctx, kind, id))
        .map(|(id, _)| id.clone())
        .collect();
    let hashes: Vec<_> = futures::stream::iter(wanted)
        .map(|id| async move {
            let hash = fetch_data_hash(ctx, kind, &id).await.ok().flatten();
            (id, hash)
        })
        .buffer_unordered(ctx.config.concurrent.max(1))
        .collect()
        .await;
    for (id, hash) in hashes {
        if let Some(seen) = known.get_mut(&id) {
            seen.data_hash = hash;
        }
    }
}

/// Reads one object and hashes its data; `None` when it no longer exists. The data itself is
/// dropped right after hashing and never logged.
async fn fetch_data_hash(
    ctx: &Context,
    kind: ConfigKind,
    id: &(String, String),
) -> anyhow::Result<Option<DataHash>> {
    match kind {
        ConfigKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &id.0);
            Ok(api.get_opt(&id.1).await?.map(|cm| {
                let text = cm.data.unwrap_or_default();
                let binary = cm.binary_data.unwrap_or_default();
                trigger::data_hash(
                    "",
                    text.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
                    binary.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())),
                )
            }))
        }
        ConfigKind::Secret => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &id.0);
            Ok(api.get_opt(&id.1).await?.map(|secret| {
                let data = secret.data.unwrap_or_default();
                trigger::data_hash(
                    secret.type_.as_deref().unwrap_or("Opaque"),
                    data.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())),
                    std::iter::empty(),
                )
            }))
        }
    }
}
