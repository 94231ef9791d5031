//! The labeller (the leader's): keeps [`PROTECTED_LABEL`], [`DEPENDENTS_ANNOTATION`] and
//! [`RULES_ANNOTATION`] on exactly the objects that the platform or their owner asked to protect:
//! the sources of ConfigSyncs, the objects a ProtectPolicy selects, and the sources of `copyFrom`
//! copies whose owner asked for it ([`WHILE_COPIED_ANNOTATION`] next to the consent). A plain
//! `copyFrom` never protects its source: a consumer in another namespace cannot freeze it.
//!
//! One controller shape ([`conflux_runtime::queue`]): each ConfigMap or Secret (kind, namespace,
//! name) is a key of a work queue. The watches of ConfigSyncs, ProtectPolicies, Namespaces,
//! ConfigMaps and Secrets keep who depends on which source ([`Sources`]) and the valid policies,
//! and add the objects a change concerns. The handler compares the object's label and
//! annotations with what protects it now and writes the difference (one server-side apply); a
//! failed write is retried with backoff. Nothing is handed out before the watches delivered their
//! initial state.
//!
//! The ConfigSync and ProtectPolicy CRDs are optional: when one is not installed, the labeller
//! logs it once (reason `CrdMissing`), sets `protect_crd_missing{kind}` to 1, protects everything
//! else, and looks for the CRD again every minute.
//!
//! A ProtectPolicy's status says whether it is used: `Ready=True` (reason `Applied`) with
//! `observedGeneration`, or `Ready=False` with the stable reason of its problem, one Warning
//! Event and one log line.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use conflux_runtime::configs::ConfigResource;
use conflux_runtime::events::{Problems, recorder};
use conflux_runtime::queue::{Gate, Next, Opening, QueueConfig, WorkQueue};
use conflux_runtime::sync::lock;
use conflux_runtime::{Change, ConfigWatches, Runtime, Subscription};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::discovery::Discovery;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::{FIELD_MANAGER, KindLabels, ProtectMetrics};
use crate::consent;
use crate::copy_from::copy_source;
use crate::protect::{
    DEPENDENTS_ANNOTATION, Dependent, PROTECTED_LABEL, RULES_ANNOTATION, RuleLine,
    WHILE_COPIED_ANNOTATION, dependents_annotation, rules_annotation,
};
use crate::protect_crd::{self, ValidPolicy};
use crate::{ConfigSync, ProtectPolicy};
use crate::{Error, SourceKind, SourceRef};

/// Sources labelled at once.
const CONCURRENCY: usize = 4;

/// How often a missing CRD is looked for again.
const REDISCOVERY: Duration = Duration::from_secs(60);

/// A ConfigMap or Secret: kind, namespace, name.
pub(super) type Key = (SourceKind, String, String);

/// Shared state of the labeller.
pub struct Context {
    client: Client,
    metrics: Arc<ProtectMetrics>,
    excluded_namespaces: Vec<String>,
    /// Sources in excluded namespaces already warned about (once each).
    warned: Mutex<HashSet<Key>>,
    /// Who depends on which source, from the watches.
    sources: Mutex<Sources>,
    /// The valid ProtectPolicies, by name.
    policies: Mutex<BTreeMap<String, ValidPolicy>>,
    /// The Namespaces' labels (once ProtectPolicies are served).
    namespaces: OnceLock<Store<PartialObjectMeta<Namespace>>>,
    /// The sources labelled protected now (the gauge).
    protected: Mutex<HashSet<Key>>,
    /// Sources whose last write failed (reported once until it succeeds).
    failing: Mutex<HashSet<Key>>,
    /// Events on ProtectPolicies.
    recorder: Recorder,
    /// ProtectPolicy problems, each reported once.
    problems: Problems,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one labeller; `excluded_namespaces` are never protected (kube-system).
    pub fn new(
        client: Client,
        excluded_namespaces: Vec<String>,
        metrics: Arc<ProtectMetrics>,
    ) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client, "conflux"),
            client,
            metrics,
            excluded_namespaces,
            warned: Mutex::default(),
            sources: Mutex::default(),
            policies: Mutex::default(),
            namespaces: OnceLock::new(),
            protected: Mutex::default(),
            failing: Mutex::default(),
            problems: Problems::default(),
        })
    }

    /// Whether a valid policy selects the object.
    fn policy_selects(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        !self
            .matching_policies(kind, namespace, name, labels)
            .is_empty()
    }

    /// The rule lines of the valid policies that select the object, by policy name.
    fn matching_policies(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Vec<(String, RuleLine)> {
        let policies = lock(&self.policies);
        if policies.is_empty() {
            return Vec::new();
        }
        let namespace_labels = if policies.values().any(ValidPolicy::needs_namespace_labels) {
            self.namespaces.get().and_then(|store| {
                store
                    .get(&ObjectRef::new(namespace))
                    .map(|ns| ns.labels().clone())
            })
        } else {
            None
        };
        policies
            .values()
            .filter(|p| p.matches(kind, namespace, name, labels, namespace_labels.as_ref()))
            .map(|p| (p.name().to_owned(), p.rule_line()))
            .collect()
    }
}

/// Who depends on which source: ConfigSyncs (every one protects its source) and `copyFrom`
/// copies (each protects its source when the source consents to its namespace; the handler
/// checks, as the source's consent may change).
#[derive(Debug, Default)]
pub(super) struct Sources {
    /// Each dependent's source.
    of: HashMap<Dependent, Key>,
    /// Each source's dependents.
    dependents: HashMap<Key, BTreeSet<Dependent>>,
}

impl Sources {
    /// Sets `dependent`'s source (`None`: it depends on nothing, or is gone); the sources whose
    /// dependents changed.
    pub(super) fn set(&mut self, dependent: Dependent, source: Option<Key>) -> Vec<Key> {
        let old = self.of.remove(&dependent);
        if old == source {
            if let Some(source) = source {
                self.of.insert(dependent, source);
            }
            return Vec::new();
        }
        if let Some(old) = &old
            && let Some(set) = self.dependents.get_mut(old)
        {
            set.remove(&dependent);
            if set.is_empty() {
                self.dependents.remove(old);
            }
        }
        if let Some(source) = &source {
            self.of.insert(dependent.clone(), source.clone());
            self.dependents
                .entry(source.clone())
                .or_default()
                .insert(dependent);
        }
        old.into_iter().chain(source).collect()
    }

    /// Whether `key` has dependents.
    pub(super) fn is_source(&self, key: &Key) -> bool {
        self.dependents.contains_key(key)
    }

    /// The dependents of `key`.
    pub(super) fn dependents(&self, key: &Key) -> Vec<Dependent> {
        self.dependents
            .get(key)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Keeps [`PROTECTED_LABEL`], [`DEPENDENTS_ANNOTATION`] and [`RULES_ANNOTATION`] on exactly the
/// objects that are protected (see this module's docs); readiness (under `protect/labels`)
/// waits for the watches.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("protect").part("labels");
    let gate = Gate::new();
    let queue: WorkQueue<Key, ()> =
        runtime.queue(QueueConfig::new("protect", CONCURRENCY), gate.clone());
    queue.report(&health);
    let syncs_listed = gate.part("watch ConfigSync");
    let policies_listed = gate.part("watch ProtectPolicy");
    let namespaces_listed = gate.part("watch Namespace");
    runtime.spawn(feed_configs::<ConfigMap>(
        &configs,
        ctx.clone(),
        queue.clone(),
        gate.part("watch ConfigMap"),
    ));
    runtime.spawn(feed_configs::<Secret>(
        &configs,
        ctx.clone(),
        queue.clone(),
        gate.part("watch Secret"),
    ));
    {
        let (rt, ctx, queue, health) =
            (runtime.clone(), ctx.clone(), queue.clone(), health.clone());
        runtime.spawn(when_served(
            runtime.clone(),
            ctx.clone(),
            crate::config_sync::KIND,
            "the sources of ConfigSyncs are not protected",
            vec![syncs_listed],
            move |mut openings| {
                let syncs = rt.informer(
                    Api::<ConfigSync>::all(rt.client()),
                    Default::default(),
                    "ConfigSync",
                    &health,
                );
                let listed = openings.pop();
                rt.spawn(feed_syncs(
                    syncs.subscribe("protect ConfigSyncs"),
                    ctx,
                    queue,
                    listed,
                ));
            },
        ));
    }
    {
        let (rt, ctx, queue, health, configs) = (
            runtime.clone(),
            ctx.clone(),
            queue.clone(),
            health.clone(),
            configs.clone(),
        );
        runtime.spawn(when_served(
            runtime.clone(),
            ctx.clone(),
            protect_crd::KIND,
            "no ProtectPolicy protects anything",
            vec![policies_listed, namespaces_listed],
            move |mut openings| {
                let namespaces_listed = openings.pop();
                let policies_listed = openings.pop();
                let namespaces = rt.namespaces(&health);
                let _ = ctx.namespaces.set(namespaces.store());
                rt.spawn(feed_namespaces(
                    namespaces.subscribe("protect Namespaces"),
                    ctx.clone(),
                    queue.clone(),
                    configs.clone(),
                    namespaces_listed,
                ));
                let policies = rt.informer(
                    Api::<ProtectPolicy>::all(rt.client()),
                    Default::default(),
                    "ProtectPolicy",
                    &health,
                );
                rt.spawn(feed_policies(
                    policies.subscribe("protect ProtectPolicies"),
                    ctx,
                    queue,
                    configs,
                    policies_listed,
                ));
            },
        ));
    }
    queue
        .run(move |key, _: &()| handle(ctx.clone(), configs.clone(), key))
        .await;
}

/// Whether the API server serves `kind` of `conflux.dev`.
async fn served(client: &Client, kind: &str) -> Result<bool, Error> {
    let discovery = Discovery::new(client.clone())
        .filter(&[crate::config_sync::GROUP])
        .run()
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "API discovery of {kind}"
        )))?;
    Ok(discovery
        .get(crate::config_sync::GROUP)
        .and_then(|g| g.recommended_kind(kind))
        .is_some())
}

/// Calls `start` with `openings` once the API server serves `kind`. Until then the openings are
/// open (nothing of that kind exists, so nothing waits for it), the absence is logged once with
/// the reason `CrdMissing` and counted in `protect_crd_missing`, and discovery is asked again
/// every minute.
async fn when_served(
    runtime: Runtime,
    ctx: Arc<Context>,
    kind: &'static str,
    consequence: &'static str,
    mut openings: Vec<Opening>,
    start: impl FnOnce(Vec<Opening>) + Send + 'static,
) {
    // The family's guard is not Send: looked up at each use, never held across an await.
    let missing = |value: i64| {
        ctx.metrics
            .crd_missing
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .set(value);
    };
    let mut warned = false;
    let mut failing = false;
    loop {
        match served(&runtime.client(), kind).await {
            Ok(true) => {
                missing(0);
                if warned {
                    info!(kind, "protect: the CRD is installed now; watching it");
                }
                start(openings);
                return;
            }
            Ok(false) => {
                missing(1);
                if !warned {
                    warn!(
                        kind,
                        reason = "CrdMissing",
                        "protect: the CRD of {kind} is not installed: {consequence} until it is (everything else is protected); looking again every minute"
                    );
                    warned = true;
                }
                for opening in &mut openings {
                    opening.open();
                }
                tokio::time::sleep(REDISCOVERY).await;
            }
            Err(err) => {
                if !failing {
                    warn!(kind, reason = err.reason(), error = %err, "protect: API discovery failed; retrying");
                    failing = true;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// Keeps the ConfigSyncs' sources, adding each source whose ConfigSyncs changed.
async fn feed_syncs(
    mut sub: Subscription<ConfigSync>,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    mut listed: Option<Opening>,
) {
    while let Some(change) = sub.recv().await {
        let (cs, gone) = match change {
            Change::Initial(cs) | Change::Applied(cs) => (cs, false),
            Change::Deleted(cs) => (cs, true),
            Change::InitDone => {
                if let Some(listed) = &mut listed {
                    listed.open();
                }
                continue;
            }
            _ => continue,
        };
        let dependent = Dependent::ConfigSync {
            name: cs.name_any(),
        };
        let source = (!gone && cs.metadata.deletion_timestamp.is_none()).then(|| {
            let s = &cs.spec.source;
            (s.kind, s.namespace.clone(), s.name.clone())
        });
        let changed = lock(&ctx.sources).set(dependent, source);
        for key in changed {
            queue.add(key, ());
        }
    }
}

/// Adds every ConfigMap and Secret a valid policy selects, and every one labelled now: after a
/// policy changed, those are the objects whose protection may change.
fn add_policy_candidates(ctx: &Context, configs: &ConfigWatches, queue: &WorkQueue<Key, ()>) {
    let mut keys: HashSet<Key> = lock(&ctx.protected).iter().cloned().collect();
    for (kind, objects) in [
        (
            SourceKind::ConfigMap,
            configs.informer::<ConfigMap>().store().state(),
        ),
        (
            SourceKind::Secret,
            configs.informer::<Secret>().store().state(),
        ),
    ] {
        for object in objects {
            let labelled = object.label(PROTECTED_LABEL) == Some("true");
            if labelled
                || ctx.policy_selects(
                    kind,
                    object.namespace(),
                    object.name(),
                    object.labels().as_ref(),
                )
            {
                keys.insert((
                    kind,
                    object.namespace().to_owned(),
                    object.name().to_owned(),
                ));
            }
        }
    }
    for key in keys {
        queue.add(key, ());
    }
}

/// Keeps the valid ProtectPolicies and their status; after the initial list, each change adds
/// the objects it may concern.
async fn feed_policies(
    mut sub: Subscription<ProtectPolicy>,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    configs: ConfigWatches,
    mut listed: Option<Opening>,
) {
    let mut initial_done = false;
    while let Some(change) = sub.recv().await {
        let (policy, gone) = match change {
            Change::Initial(p) | Change::Applied(p) => (p, false),
            Change::Deleted(p) => (p, true),
            Change::InitDone => {
                if let Some(listed) = &mut listed {
                    listed.open();
                }
                initial_done = true;
                add_policy_candidates(&ctx, &configs, &queue);
                continue;
            }
            _ => continue,
        };
        let name = policy.name_any();
        let key = format!("ProtectPolicy/{name}");
        let changed = if gone || policy.metadata.deletion_timestamp.is_some() {
            ctx.problems.resolve(&key);
            lock(&ctx.policies).remove(&name).is_some()
        } else {
            let result = protect_crd::validate(&name, &policy.spec);
            let valid = result.as_ref().map(|_| ()).map_err(|e| e.clone());
            write_status(&ctx, &policy, valid.as_ref().map(|_| ())).await;
            match result {
                Ok(valid) => {
                    if ctx.problems.resolve(&key) {
                        info!(object = %key, "protect: ProtectPolicy is valid again");
                    }
                    lock(&ctx.policies).insert(name, valid);
                    true
                }
                Err(err) => {
                    let reference = policy.object_ref(&());
                    ctx.problems
                        .report(
                            &ctx.recorder,
                            &reference,
                            &key,
                            err.reason(),
                            &err.to_string(),
                            "Validate",
                            "protect: ProtectPolicy not used",
                        )
                        .await;
                    lock(&ctx.policies).remove(&name).is_some()
                }
            }
        };
        if initial_done && changed {
            add_policy_candidates(&ctx, &configs, &queue);
        }
    }
}

/// Writes a ProtectPolicy's status when it differs from the one it has; failures are logged
/// (the next change of the policy, or the next start, writes it again).
async fn write_status(ctx: &Context, policy: &ProtectPolicy, result: Result<(), &Error>) {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = protect_crd::status(
        result,
        policy.metadata.generation,
        now,
        policy.status.as_ref(),
    );
    if policy.status.as_ref() == Some(&status) {
        return;
    }
    let name = policy.name_any();
    let body = serde_json::json!({
        "apiVersion": format!("{}/{}", crate::config_sync::GROUP, crate::config_sync::VERSION),
        "kind": protect_crd::KIND,
        "status": status,
    });
    let api = Api::<ProtectPolicy>::all(ctx.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(err) = api
        .patch_status(&name, &params, &Patch::Apply(&body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "writing status of ProtectPolicy {name}"
        )))
    {
        warn!(object = %format!("ProtectPolicy/{name}"), reason = err.reason(), error = %err, "protect: cannot write the status");
    }
}

/// Keeps the gate's Namespace part, and adds the objects of a Namespace whose labels changed
/// when a policy reads Namespace labels.
async fn feed_namespaces(
    mut sub: Subscription<PartialObjectMeta<Namespace>>,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    configs: ConfigWatches,
    mut listed: Option<Opening>,
) {
    while let Some(change) = sub.recv().await {
        let namespace = match change {
            Change::Applied(ns) => ns.name_any(),
            Change::InitDone => {
                if let Some(listed) = &mut listed {
                    listed.open();
                }
                continue;
            }
            _ => continue,
        };
        let reads_labels = lock(&ctx.policies)
            .values()
            .any(ValidPolicy::needs_namespace_labels);
        if reads_labels {
            for (kind, name) in configs.names(&namespace) {
                queue.add((kind.into(), namespace.clone(), name), ());
            }
        }
    }
}

/// Keeps the `copyFrom` copies' sources of one kind, adding each source whose copies changed,
/// and each object of the kind that is a source, is labelled or a policy selects (its consent,
/// labels or protection may have changed).
fn feed_configs<K: ConfigResource>(
    configs: &ConfigWatches,
    ctx: Arc<Context>,
    queue: WorkQueue<Key, ()>,
    mut listed: Opening,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let kind: SourceKind = K::KIND.into();
    let mut sub = configs
        .informer::<K>()
        .subscribe(&format!("protect {}", kind.as_str()));
    async move {
        while let Some(change) = sub.recv().await {
            let (meta, gone): (Arc<PartialObjectMeta<K>>, bool) = match change {
                Change::Initial(meta) | Change::Applied(meta) => (meta, false),
                Change::Deleted(meta) => (meta, true),
                Change::InitDone => {
                    listed.open();
                    continue;
                }
                _ => continue,
            };
            let namespace = meta.metadata.namespace.clone().unwrap_or_default();
            let name = meta.metadata.name.clone().unwrap_or_default();
            let dependent = Dependent::CopyFrom {
                kind: kind.as_str().to_owned(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let source = match copy_source("v1", kind.as_str(), meta.metadata.annotations.as_ref())
            {
                Ok(Some(source)) if !gone => Some((source.kind, source.namespace, source.name)),
                _ => None,
            };
            let key = (kind, namespace, name);
            let (changed, concerned) = {
                let mut sources = lock(&ctx.sources);
                // Only copies are remembered: the set is as small as their number.
                let changed = if source.is_some() || sources.of.contains_key(&dependent) {
                    sources.set(dependent, source)
                } else {
                    Vec::new()
                };
                let labelled =
                    meta.metadata.labels.as_ref().is_some_and(|l| {
                        l.get(PROTECTED_LABEL).map(String::as_str) == Some("true")
                    });
                (changed, sources.is_source(&key) || labelled)
            };
            let concerned = concerned
                || ctx.policy_selects(kind, &key.1, &key.2, meta.metadata.labels.as_ref());
            for source in changed {
                queue.add(source, ());
            }
            if concerned && !gone {
                queue.add(key, ());
            } else if gone {
                lock(&ctx.protected).remove(&key);
            }
        }
    }
}

/// What protects one object now: the value of [`DEPENDENTS_ANNOTATION`] and of
/// [`RULES_ANNOTATION`]; `None` when nothing does.
pub(super) fn protection(
    syncs: &[Dependent],
    copies: &[Dependent],
    policies: &[(String, RuleLine)],
) -> Option<(String, String)> {
    let mut dependents: Vec<Dependent> = syncs.iter().chain(copies).cloned().collect();
    dependents.extend(
        policies
            .iter()
            .map(|(name, _)| Dependent::ProtectPolicy { name: name.clone() }),
    );
    if dependents.is_empty() {
        return None;
    }
    let mut lines = Vec::new();
    for (kind, list) in [("sync", syncs), ("copy", copies)] {
        if !list.is_empty() {
            lines.push(RuleLine {
                kind: kind.to_owned(),
                who: dependents_annotation(list),
                operations: String::new(),
                users: String::new(),
                groups: String::new(),
                message: String::new(),
            });
        }
    }
    lines.extend(policies.iter().map(|(_, line)| line.clone()));
    Some((dependents_annotation(&dependents), rules_annotation(&lines)))
}

/// Labels one object (or unlabels what is no longer protected), from what protects it now.
async fn handle(ctx: Arc<Context>, configs: ConfigWatches, key: Key) -> Next {
    let (kind, namespace, name) = &key;
    let Some(meta) = configs.stored(*kind, namespace, name) else {
        set_protected(&ctx, &key, false);
        return Next::Done;
    };
    let labelled = meta.label(PROTECTED_LABEL) == Some("true");
    let current = (
        meta.annotation(DEPENDENTS_ANNOTATION).map(str::to_owned),
        meta.annotation(RULES_ANNOTATION).map(str::to_owned),
    );
    let annotations = meta.annotations();
    let source = SourceRef::new(*kind, namespace.clone(), name.clone());
    let (syncs, copies): (Vec<Dependent>, Vec<Dependent>) = lock(&ctx.sources)
        .dependents(&key)
        .into_iter()
        .partition(|d| matches!(d, Dependent::ConfigSync { .. }));
    // A copy protects its source only when the source's owner asked for it, and consents to it.
    let while_copied = meta.annotation(WHILE_COPIED_ANNOTATION) == Some("true");
    let copies: Vec<Dependent> = copies
        .into_iter()
        .filter(|d| match d {
            Dependent::CopyFrom { namespace, .. } => {
                while_copied && consent::check(&source, annotations.as_ref(), namespace).is_ok()
            }
            _ => false,
        })
        .collect();
    let policies = ctx.matching_policies(*kind, namespace, name, meta.labels().as_ref());
    let wanted = match protection(&syncs, &copies, &policies) {
        None => None,
        Some((dependents, _)) if ctx.excluded_namespaces.contains(namespace) => {
            if lock(&ctx.warned).insert(key.clone()) {
                warn!(object = %format!("{kind}/{namespace}/{name}"), dependents = %dependents, reason = "NotProtected", "protect: objects in this namespace are never protected");
            }
            None
        }
        Some(wanted) => Some(wanted),
    };
    set_protected(&ctx, &key, wanted.is_some());
    let result = match (&wanted, labelled) {
        (Some((dependents, rules)), true)
            if current.0.as_ref() == Some(dependents) && current.1.as_ref() == Some(rules) =>
        {
            return Next::Done;
        }
        (Some((dependents, rules)), _) => {
            label(
                &ctx.client,
                *kind,
                namespace,
                name,
                Some((dependents, rules)),
            )
            .await
        }
        // Only what conflux labelled (it set the annotation too) is unlabelled.
        (None, true) if current.0.is_some() => {
            label(&ctx.client, *kind, namespace, name, None).await
        }
        (None, _) => return Next::Done,
    };
    let object = format!("{kind}/{namespace}/{name}");
    match result {
        Ok(()) => {
            lock(&ctx.failing).remove(&key);
            info!(object = %object, protected = wanted.is_some(), "protect: labels updated");
            Next::Done
        }
        Err(err) => {
            if lock(&ctx.failing).insert(key.clone()) {
                warn!(object = %object, reason = err.reason(), error = %err, "protect: cannot update labels; retrying with backoff");
            } else {
                debug!(object = %object, reason = err.reason(), error = %err, "protect: retry failed");
            }
            Next::Retry
        }
    }
}

/// Counts `key` as protected now (or not), for the gauge.
fn set_protected(ctx: &Context, key: &Key, protected: bool) {
    let mut set = lock(&ctx.protected);
    if protected {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
    ctx.metrics
        .protected
        .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
}

/// Applies (with [`FIELD_MANAGER`]) the protection label and annotations, or nothing, which
/// removes the ones this manager set.
pub(super) async fn label(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    protection: Option<(&String, &String)>,
) -> Result<(), Error> {
    let mut metadata = serde_json::json!({"name": name, "namespace": namespace});
    if let Some((dependents, rules)) = protection {
        metadata["labels"] = serde_json::json!({PROTECTED_LABEL: "true"});
        metadata["annotations"] =
            serde_json::json!({DEPENDENTS_ANNOTATION: dependents, RULES_ANNOTATION: rules});
    }
    let body = serde_json::json!({"apiVersion": "v1", "kind": kind.as_str(), "metadata": metadata});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let action = format!("labelling {kind} {namespace}/{name}");
    match kind {
        SourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
        SourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (SourceKind::ConfigMap, "apps".to_owned(), name.to_owned())
    }

    fn copy(name: &str) -> Dependent {
        Dependent::CopyFrom {
            kind: "ConfigMap".to_owned(),
            namespace: "team".to_owned(),
            name: name.to_owned(),
        }
    }

    #[test]
    fn sources_say_which_sources_a_dependents_change_concerns() {
        let mut sources = Sources::default();
        assert_eq!(sources.set(copy("a"), Some(key("s1"))), [key("s1")]);
        assert_eq!(sources.set(copy("b"), Some(key("s1"))), [key("s1")]);
        assert_eq!(
            sources.set(copy("a"), Some(key("s1"))),
            Vec::<Key>::new(),
            "unchanged"
        );
        assert_eq!(sources.dependents(&key("s1")), [copy("a"), copy("b")]);
        // `a` now copies s2: both sources are concerned.
        assert_eq!(
            sources.set(copy("a"), Some(key("s2"))),
            [key("s1"), key("s2")]
        );
        assert_eq!(sources.set(copy("b"), None), [key("s1")]);
        assert!(!sources.is_source(&key("s1")), "no dependents left");
        assert_eq!(sources.set(copy("c"), None), Vec::<Key>::new());
        assert!(sources.of.len() == 1 && sources.dependents.len() == 1);
    }

    #[test]
    fn protection_lists_what_protects_an_object_and_its_rules() {
        assert_eq!(protection(&[], &[], &[]), None);
        let syncs = [Dependent::ConfigSync {
            name: "fan".to_owned(),
        }];
        let policy = RuleLine::parse("policy;ProtectPolicy/p;DELETE;alice;;No.");
        let (dependents, rules) =
            protection(&syncs, &[copy("a")], &[("p".to_owned(), policy)]).expect("protected");
        assert_eq!(
            dependents,
            "ConfigSync/fan, ConfigMap/team/a (copyFrom), ProtectPolicy/p"
        );
        assert_eq!(
            rules,
            "sync;ConfigSync/fan;;;;\ncopy;ConfigMap/team/a (copyFrom);;;;\npolicy;ProtectPolicy/p;DELETE;alice;;No."
        );
    }
}
