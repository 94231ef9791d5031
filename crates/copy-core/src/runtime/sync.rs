//! The `sync` controller: fan-out copies of one ConfigMap or Secret into many namespaces, from a
//! cluster-scoped `ConfigSync` or from a source annotated `kopy.kot-labs.com/sync` /
//! `flynshue.io/sync` in a namespace listed in `--sync-source-namespaces` (docs/design.md 4.2).
//!
//! Observe → decide → act → report:
//! - ConfigSyncs are the primary objects of a [`Controller`] (`--watch-label-selector` shards
//!   them), fed by shared informers. Namespaces come from a shared metadata watch, ConfigMaps and
//!   Secrets from the process's [`ConfigWatches`]; each event is mapped to the ConfigSyncs it
//!   concerns: a namespace event re-evaluates every selection; an event on a source, on one of our
//!   copies (found by its ownership labels) or on an object named like a target wakes the
//!   ConfigSyncs involved.
//! - A reconcile reads the source and the objects that matter (our copies, same-name objects),
//!   takes the namespaces from the shared store, asks [`plan_sync`] for the steps and executes them
//!   `--concurrent` at a time: server-side apply with field manager `conflux` and `force`, the
//!   cleanup merge patch, delete, or delete-and-create. Ownership is read back from labels every
//!   time, so a restarted operator converges from cluster state.
//! - The outcome becomes the ConfigSync's status (`Ready`, observedGeneration, counts, first
//!   failures) and Events (conflicts, missing source, failures; never data). Failures are retried
//!   with backoff. A finalizer on the ConfigSync (never on copies) applies the deletion policy.
//! - kopy-annotated sources are the primary objects of a second controller (one per kind); an
//!   annotation outside the trusted namespaces is refused with a Warning Event.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

use conflux_runtime::backoff::{KeyedBackoff, Policy};
use conflux_runtime::events::{Problems, publish, recorder};
use conflux_runtime::{Health, Informer, Runtime};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef as KubeObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};
use watch_index::runtime::configs::ConfigResource;
use watch_index::runtime::{ConfigWatches, sharded};
use watch_index::selector::Selector;

use super::copy::RESYNC_INTERVAL;
use super::executor::{
    apply, delete, get_object, list_objects, merge_patch, object_reference, recreate,
};
use super::{ApplyLabels, CopyMetrics, concurrency};
use crate::config_sync::FINALIZER;
use crate::fan_out::{KOPY_SYNC_ANNOTATION, KOPY_SYNC_ANNOTATION_LEGACY};
use crate::ownership::{
    CONFIG_SYNC_LABEL, FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, SOURCE_ANNOTATION,
    SOURCE_NAME_LABEL, parse_source_annotation,
};
use crate::status::SyncOutcome;
use crate::{
    ConfigSync, Error, FanOut, NamespaceView, SourceKind, SourceRef, Step, plan_deletion, plan_sync,
};
use conflux_runtime::sync::{read, write};

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// `--watch-label-selector`: only ConfigSyncs and kopy sources with matching labels are handled
    /// (sharding).
    pub object_selector: Selector,
    /// `--sync-source-namespaces`: namespaces whose kopy-annotated sources are trusted.
    pub sync_source_namespaces: Vec<String>,
    /// `--concurrent`: ConfigSyncs (and kopy sources) reconciled in parallel.
    pub concurrent: usize,
    /// `--fan-out-concurrency`: copies one fan-out writes in parallel. The API server serves a
    /// fan-out fastest with 16–32 writes in flight; one at a time per reconcile would make a
    /// 1,000-namespace fan-out several times slower.
    pub fan_out_concurrency: usize,
    /// Only kopy sources in this namespace (`--watch-all-namespaces=false`), or in all when `None`.
    /// ConfigSyncs are cluster-scoped and always handled.
    pub namespace: Option<String>,
}

/// Shared state of the controller.
pub struct Context {
    client: Client,
    config: SyncConfig,
    metrics: Arc<CopyMetrics>,
    recorder: Recorder,
    backoff: KeyedBackoff<String>,
    /// The problems of each ConfigSync and kopy source, so each is reported once.
    problems: Problems,
    /// kopy sources seen owning copies (from the copies' labels), so a source whose annotation was
    /// removed releases them. Rebuilt from the cluster on start; a hint, not the truth.
    kopy_owners: RwLock<HashSet<SourceRef>>,
    /// Every namespace (metadata), from the shared watch: the fan-out's targets.
    namespaces: RwLock<Option<Informer<PartialObjectMeta<Namespace>>>>,
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
    pub fn new(client: Client, config: SyncConfig, metrics: Arc<CopyMetrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client, "conflux"),
            client,
            config,
            metrics,
            backoff: KeyedBackoff::new(Policy::RECONCILE),
            problems: Problems::default(),
            kopy_owners: RwLock::new(HashSet::new()),
            namespaces: RwLock::new(None),
        })
    }

    /// Every namespace, once listed: an empty or partial list would prune every copy.
    fn namespaces(&self) -> Result<Vec<Arc<PartialObjectMeta<Namespace>>>, Error> {
        let informer = read(&self.namespaces).clone();
        match informer {
            Some(informer) if informer.has_listed() => Ok(informer.store().state()),
            _ => Err(Error::NotListed { what: "Namespaces" }),
        }
    }
}

/// Runs the controller (ConfigSyncs, and kopy sources of both kinds) until the process ends;
/// readiness is a `sync` part of the runtime's health. A missing ConfigSync CRD is retried with
/// backoff (and readiness says so) rather than ending the process.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("sync");
    let namespaces: Informer<PartialObjectMeta<Namespace>> = runtime.informer(
        Api::all(ctx.client.clone()),
        watcher::Config::default(),
        "Namespace",
        &health,
    );
    *write(&ctx.namespaces) = Some(namespaces.clone());
    let syncs: Informer<ConfigSync> = runtime.informer(
        Api::all(ctx.client.clone()),
        sharded(&ctx.config.object_selector),
        crate::config_sync::KIND,
        &health,
    );
    tokio::join!(
        run_config_syncs(ctx.clone(), &syncs, &namespaces, &configs),
        run_kopy::<ConfigMap>(ctx.clone(), &runtime, &namespaces, &configs, &health),
        run_kopy::<Secret>(ctx, &runtime, &namespaces, &configs, &health),
    );
}

// ---------------------------------------------------------------------------------------------
// ConfigSync

async fn run_config_syncs(
    ctx: Arc<Context>,
    syncs: &Informer<ConfigSync>,
    namespaces: &Informer<PartialObjectMeta<Namespace>>,
    configs: &ConfigWatches,
) {
    let store = syncs.store();
    let (all, cms, secrets) = (store.clone(), store.clone(), store.clone());
    let controller = Controller::for_shared_stream(syncs.subscribe("sync").touched(), store)
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(
            namespaces.subscribe("sync namespaces").touched(),
            move |_ns| every_sync(&all),
        )
        .watches_shared_stream(
            configs
                .informer::<ConfigMap>()
                .subscribe("sync ConfigMap")
                .touched(),
            move |meta| syncs_concerned(&cms, SourceKind::ConfigMap, &meta.metadata),
        )
        .watches_shared_stream(
            configs
                .informer::<Secret>()
                .subscribe("sync Secret")
                .touched(),
            move |meta| syncs_concerned(&secrets, SourceKind::Secret, &meta.metadata),
        );
    controller
        .run(reconcile_sync, sync_error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                debug!(error = %err, "sync: controller event");
            }
        })
        .await;
}

/// The ConfigSyncs a namespace event may concern: all but those whose current generation is
/// stuck on a problem no namespace can fix (an invalid spec, a missing or refused source). Those
/// wait for a change of their own or of their source, so that a bad ConfigSync costs no request
/// per namespace event.
fn every_sync(store: &Store<ConfigSync>) -> Vec<KubeObjectRef<ConfigSync>> {
    store
        .state()
        .iter()
        .filter(|cs| !stuck_on_input(cs))
        .map(|cs| KubeObjectRef::from_obj(&**cs))
        .collect()
}

fn stuck_on_input(cs: &ConfigSync) -> bool {
    let Some(status) = &cs.status else {
        return false;
    };
    status.observed_generation == cs.metadata.generation
        && status.conditions.iter().any(|c| {
            c.type_ == crate::status::READY
                && c.status == "False"
                && [
                    crate::status::REASON_INVALID_SPEC,
                    crate::status::REASON_SOURCE_NOT_FOUND,
                    crate::status::REASON_REFUSED,
                ]
                .contains(&c.reason.as_str())
        })
}

/// The ConfigSyncs an event on a ConfigMap/Secret concerns ([`ConfigSyncSpec::concerns`]).
///
/// [`ConfigSyncSpec::concerns`]: crate::ConfigSyncSpec::concerns
fn syncs_concerned(
    store: &Store<ConfigSync>,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Vec<KubeObjectRef<ConfigSync>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let owner = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(CONFIG_SYNC_LABEL))
        .map(String::as_str);
    store
        .state()
        .iter()
        .filter(|cs| {
            cs.spec
                .concerns(&cs.name_any(), kind, namespace, name, owner)
        })
        .map(|cs| KubeObjectRef::from_obj(&**cs))
        .collect()
}

fn sync_error_policy(cs: Arc<ConfigSync>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("ConfigSync/{}", cs.name_any());
    if err.is_input_problem() || matches!(err, Error::SourceUnavailable { .. }) {
        // Retrying cannot help until the ConfigSync or its source changes, which the watches
        // see; the resync only guards against a missed event. (Reported once, by the reconcile.)
        debug!(config_sync = %key, reason = err.reason(), "sync: waiting for a change");
        return Action::requeue(RESYNC_INTERVAL);
    }
    let delay = ctx.backoff.next(key.clone());
    debug!(config_sync = %key, reason = err.reason(), retry_in_seconds = delay.as_secs_f64(), "sync: retrying with backoff");
    Action::requeue(delay)
}

/// The key under which an object's problems are remembered (and logged).
fn problem_key(reference: &ObjectReference) -> String {
    let kind = reference.kind.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    match reference.namespace.as_deref() {
        // ConfigSyncs are cluster-scoped; their reference names `default` only for Events.
        Some(namespace) if kind != crate::config_sync::KIND => {
            format!("{kind}/{namespace}/{name}")
        }
        _ => format!("{kind}/{name}"),
    }
}

/// Reports a problem of the object behind `reference` once (see [`Problems`]).
async fn report(ctx: &Context, reference: &ObjectReference, err: &Error, message: String) {
    ctx.problems
        .report(
            &ctx.recorder,
            reference,
            &problem_key(reference),
            err.reason(),
            &message,
            "Sync",
            "sync: not in sync",
        )
        .await;
}

async fn reconcile_sync(cs: Arc<ConfigSync>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<ConfigSync> = Api::all(ctx.client.clone());
    finalizer(&api, FINALIZER, cs, |event| async {
        match event {
            FinalizerEvent::Apply(cs) => apply_sync(&cs, &ctx).await,
            FinalizerEvent::Cleanup(cs) => cleanup_sync(&cs, &ctx).await,
        }
    })
    .await
    .map_err(finalizer_error)
}

/// The reconcile's own error, or what went wrong with the finalizer.
fn finalizer_error(err: kube::runtime::finalizer::Error<Error>) -> Error {
    use kube::runtime::finalizer::Error as F;
    match err {
        F::ApplyFailed(e) | F::CleanupFailed(e) => e,
        F::AddFinalizer(e) => {
            conflux_runtime::Error::api("adding the ConfigSync finalizer")(e).into()
        }
        F::RemoveFinalizer(e) => {
            conflux_runtime::Error::api("removing the ConfigSync finalizer")(e).into()
        }
        F::UnnamedObject => Error::Finalizer("object has no name"),
        _ => Error::Finalizer("invalid finalizer"),
    }
}

/// The Event reference of a ConfigSync. ConfigSyncs are cluster-scoped and their Events live in
/// `default`; Kubernetes before 1.22 rejects an Event whose `regarding.namespace` differs from its
/// own namespace, so the reference names `default` too.
fn config_sync_reference(cs: &ConfigSync) -> ObjectReference {
    let mut reference = cs.object_ref(&());
    reference.namespace = Some("default".to_owned());
    reference
}

async fn apply_sync(cs: &ConfigSync, ctx: &Context) -> Result<Action, Error> {
    let name = cs.name_any();
    let reference = config_sync_reference(cs);
    let outcome = match FanOut::from_config_sync(&name, &cs.spec) {
        Ok(fan_out) => match fan_out_once(ctx, &fan_out, &reference).await {
            Ok(outcome) => outcome,
            Err(err) => {
                // Reading the cluster failed: nothing was decided; say so and retry with backoff.
                report(ctx, &reference, &err, err.to_string()).await;
                return Err(err);
            }
        },
        Err(problem) => SyncOutcome::failed_with(problem),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = crate::status::status(&outcome, cs.metadata.generation, now, cs.status.as_ref());
    if cs.status.as_ref() != Some(&status) {
        let body = serde_json::json!({
            "apiVersion": format!("{}/{}", crate::config_sync::GROUP, crate::config_sync::VERSION),
            "kind": crate::config_sync::KIND,
            "status": status,
        });
        let api = Api::<ConfigSync>::all(ctx.client.clone());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_status(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(conflux_runtime::Error::api(format!(
                "writing status of ConfigSync {name}"
            )))?;
    }
    finish(ctx, &format!("ConfigSync/{name}"), &reference, &outcome).await
}

/// Reports a problem of the whole sync and turns an incomplete sync into an error (retried with
/// backoff); a complete one is checked again after [`RESYNC_INTERVAL`].
async fn finish(
    ctx: &Context,
    key: &str,
    reference: &ObjectReference,
    outcome: &SyncOutcome,
) -> Result<Action, Error> {
    if let Some(problem) = &outcome.problem {
        report(ctx, reference, problem, problem.to_string()).await;
        return Err(problem.clone());
    }
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: key.to_owned(),
            failed: outcome.failed as usize,
            total: (outcome.failed + outcome.synced) as usize,
        });
    }
    ctx.backoff.reset(key);
    if ctx.problems.resolve(&problem_key(reference)) {
        info!(object = %problem_key(reference), "sync: problem resolved");
    }
    Ok(Action::requeue(RESYNC_INTERVAL))
}

async fn cleanup_sync(cs: &ConfigSync, ctx: &Context) -> Result<Action, Error> {
    let name = cs.name_any();
    let fan_out = match FanOut::from_config_sync(&name, &cs.spec) {
        Ok(fan_out) => fan_out,
        Err(_) => {
            // The selector does not matter for deletion; only the owner and the policy do.
            let mut spec = cs.spec.clone();
            spec.target.namespace_selector = None;
            FanOut::from_config_sync(&name, &spec)?
        }
    };
    let observed = list_objects(&ctx.client, fan_out.source.kind, &owner_list(&fan_out)).await?;
    let steps = plan_deletion(&fan_out, &observed);
    let count = steps.len();
    let reference = config_sync_reference(cs);
    let outcome = execute(ctx, fan_out.source.kind, &reference, steps, None).await;
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: format!(
                "ConfigSync/{name} deletion policy {:?}",
                fan_out.deletion_policy
            ),
            failed: outcome.failed as usize,
            total: count,
        });
    }
    info!(config_sync = %name, copies = count, policy = fan_out.deletion_policy.as_str(), "sync: ConfigSync deleted, deletion policy applied");
    Ok(Action::await_change())
}

// ---------------------------------------------------------------------------------------------
// The fan-out itself, shared by ConfigSyncs and kopy sources.

/// Reads what the plan needs, plans, executes; the outcome says what happened.
async fn fan_out_once(
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

fn owner_list(fan_out: &FanOut) -> ListParams {
    ListParams::default().labels(&fan_out.owner.selector())
}

/// Executes `steps`, `--concurrent` at a time, and records each result.
async fn execute(
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

async fn execute_step(
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

// ---------------------------------------------------------------------------------------------
// kopy-annotated sources

async fn run_kopy<K: ConfigResource>(
    ctx: Arc<Context>,
    runtime: &Runtime,
    namespaces: &Informer<PartialObjectMeta<Namespace>>,
    configs: &ConfigWatches,
    health: &Health,
) {
    let kind = SourceKind::from(K::KIND);
    let informer = configs.informer::<K>();
    let store = informer.store();
    let trusted = ctx.config.sync_source_namespaces.clone();
    let source_ctx = ctx.clone();
    // Sources: kopy-annotated ones in this shard, and those known to own copies (so removing the
    // annotation releases them). Deletions come through too; the controller answers them with
    // `ObjectNotFound`, handled below.
    let sources = informer
        .subscribe(&format!("kopy sources {kind}"))
        .touched()
        .filter(move |meta| {
            let m = &meta.metadata;
            let in_scope = source_ctx.config.object_selector.matches(&m.labels)
                && source_ctx
                    .config
                    .namespace
                    .as_ref()
                    .is_none_or(|ns| Some(ns) == m.namespace.as_ref());
            let keep = in_scope
                && (kopy_annotation(m.annotations.as_ref())
                    || read(&source_ctx.kopy_owners).contains(&SourceRef::new(
                        kind,
                        m.namespace.clone().unwrap_or_default(),
                        m.name.clone().unwrap_or_default(),
                    )));
            async move { keep }
        });
    let owners_ctx = ctx.clone();
    let copies = informer
        .subscribe(&format!("kopy copies {kind}"))
        .touched()
        .filter(|meta| {
            let labels = meta.metadata.labels.as_ref();
            let ours = labels.is_some_and(|l| {
                l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
                    && l.contains_key(SOURCE_NAME_LABEL)
            });
            async move { ours }
        });
    let controller = Controller::for_shared_stream(sources, store.clone())
        .with_config(controller::Config::default().concurrency(concurrency(ctx.config.concurrent)))
        .watches_shared_stream(
            namespaces
                .subscribe(&format!("kopy namespaces {kind}"))
                .touched(),
            move |_ns| kopy_sources(&store, &trusted),
        )
        .watches_shared_stream(copies, move |meta| {
            kopy_owner_of(&owners_ctx, kind, &meta.metadata)
        });
    let _ = health;
    let orphan_ctx = ctx.clone();
    let tasks = runtime.tasks().clone();
    controller
        .run(
            move |obj, ctx| reconcile_kopy(obj, ctx, kind),
            move |obj, err, ctx| kopy_error_policy(obj, err, ctx, kind),
            ctx,
        )
        .for_each(|result| {
            let (ctx, tasks) = (orphan_ctx.clone(), tasks.clone());
            async move {
                match result {
                    // A kopy source (or the owner named by a copy) that no longer exists.
                    Err(controller::Error::ObjectNotFound(gone)) => {
                        let source = SourceRef::new(
                            kind,
                            gone.namespace.clone().unwrap_or_default(),
                            gone.name.clone(),
                        );
                        tasks.spawn(async move { orphan_kopy_copies(&ctx, source).await });
                    }
                    Err(err) => debug!(error = %err, "sync: kopy controller event"),
                    Ok(_) => {}
                }
            }
        })
        .await;
}

/// A kopy source is gone: its copies are kept (workloads keep running) and marked orphaned, and
/// an Event says so.
async fn orphan_kopy_copies(ctx: &Context, source: SourceRef) {
    let result: Result<usize, Error> = async {
        if get_object(&ctx.client, source.kind, &source.namespace, &source.name)
            .await?
            .is_some()
        {
            return Ok(0);
        }
        let fan_out = FanOut::kopy(&source, Selector::nothing());
        let observed = list_objects(&ctx.client, source.kind, &owner_list(&fan_out)).await?;
        let steps = plan_sync(&fan_out, None, std::iter::empty(), &observed);
        let count = steps.len();
        if count > 0 {
            let reference = ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some(source.kind.as_str().to_owned()),
                namespace: Some(source.namespace.clone()),
                name: Some(source.name.clone()),
                ..ObjectReference::default()
            };
            execute(ctx, source.kind, &reference, steps, None).await;
            publish(
                &ctx.recorder,
                &reference,
                EventType::Warning,
                crate::status::REASON_SOURCE_NOT_FOUND,
                format!("{source} was deleted; its {count} copies are kept and marked orphaned"),
                "Sync",
            )
            .await;
        }
        Ok(count)
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(count) => {
            info!(source = %source, copies = count, "sync: kopy source deleted, copies marked orphaned")
        }
        Err(err) => {
            warn!(source = %source, error = %err, "sync: cannot mark the copies of a deleted kopy source")
        }
    }
}

fn kopy_annotation(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        a.contains_key(KOPY_SYNC_ANNOTATION) || a.contains_key(KOPY_SYNC_ANNOTATION_LEGACY)
    })
}

fn kopy_sources<K: ConfigResource>(
    store: &Store<PartialObjectMeta<K>>,
    trusted: &[String],
) -> Vec<KubeObjectRef<PartialObjectMeta<K>>> {
    store
        .state()
        .iter()
        .filter(|m| kopy_annotation(m.metadata.annotations.as_ref()))
        .filter(|m| {
            trusted
                .iter()
                .any(|t| Some(t.as_str()) == m.metadata.namespace.as_deref())
        })
        .map(|m| KubeObjectRef::from_obj(&**m))
        .collect()
}

/// The kopy source owning a copy, from the copy's source annotation; remembered so that removing
/// the annotation from the source releases its copies.
fn kopy_owner_of<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    meta: &kube::api::ObjectMeta,
) -> Option<KubeObjectRef<PartialObjectMeta<K>>> {
    let value = meta.annotations.as_ref()?.get(SOURCE_ANNOTATION)?;
    let source = parse_source_annotation(value).filter(|s| s.kind == kind)?;
    let reference = KubeObjectRef::new(&source.name).within(&source.namespace);
    write(&ctx.kopy_owners).insert(source);
    Some(reference)
}

fn kopy_error_policy<K: ConfigResource>(
    obj: Arc<PartialObjectMeta<K>>,
    err: &Error,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Action {
    let key = format!(
        "{kind}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    if err.is_input_problem() || matches!(err, Error::SourceUnavailable { .. }) {
        debug!(source = %key, reason = err.reason(), "sync: waiting for a change");
        return Action::requeue(RESYNC_INTERVAL);
    }
    let delay = ctx.backoff.next(key.clone());
    debug!(source = %key, reason = err.reason(), retry_in_seconds = delay.as_secs_f64(), "sync: retrying with backoff");
    Action::requeue(delay)
}

async fn reconcile_kopy<K: ConfigResource>(
    meta: Arc<PartialObjectMeta<K>>,
    ctx: Arc<Context>,
    kind: SourceKind,
) -> Result<Action, Error> {
    let source_ref = SourceRef::new(kind, meta.namespace().unwrap_or_default(), meta.name_any());
    let key = source_ref.to_string();
    let reference = object_reference(kind, &meta.metadata);
    let annotations = meta.metadata.annotations.as_ref();
    let trusted = ctx.config.sync_source_namespaces.iter().map(String::as_str);
    let fan_out = match FanOut::from_kopy(&source_ref, annotations, trusted) {
        Ok(None) => return release_kopy(&ctx, &source_ref, &reference).await,
        Err(refused) => {
            // Refused or unparsable: reported once, not retried (a change of the source is).
            report(&ctx, &reference, &refused, refused.to_string()).await;
            return Ok(Action::await_change());
        }
        Ok(Some(fan_out)) => fan_out,
    };
    let outcome = fan_out_once(&ctx, &fan_out, &reference).await?;
    if outcome.failed == 0 && outcome.problem.is_none() {
        write(&ctx.kopy_owners).insert(source_ref);
    }
    finish(&ctx, &key, &reference, &outcome).await
}

/// A source without (or no longer with) a kopy annotation: release the copies it owned.
async fn release_kopy(
    ctx: &Context,
    source_ref: &SourceRef,
    reference: &ObjectReference,
) -> Result<Action, Error> {
    let known = read(&ctx.kopy_owners).contains(source_ref);
    if !known {
        return Ok(Action::await_change());
    }
    let fan_out = FanOut::kopy(source_ref, Selector::nothing());
    let observed = list_objects(&ctx.client, source_ref.kind, &owner_list(&fan_out)).await?;
    let steps = plan_deletion(&fan_out, &observed);
    let total = steps.len();
    let outcome = execute(ctx, source_ref.kind, reference, steps, None).await;
    if outcome.failed > 0 {
        return Err(Error::Incomplete {
            what: format!("releasing the copies of {source_ref}"),
            failed: outcome.failed as usize,
            total,
        });
    }
    write(&ctx.kopy_owners).remove(source_ref);
    info!(source = %source_ref, "sync: kopy annotation removed, copies released");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event as WatchEvent;

    fn store(syncs: &[(&str, serde_json::Value)]) -> Store<ConfigSync> {
        let (reader, mut writer) = reflector::store();
        for (name, spec) in syncs {
            let cs: ConfigSync = serde_json::from_value(serde_json::json!({
                "apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
                "metadata": {"name": name}, "spec": spec,
            }))
            .expect("ConfigSync");
            writer.apply_watcher_event(&WatchEvent::Apply(cs));
        }
        reader
    }

    fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            namespace: Some(ns.to_owned()),
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..kube::api::ObjectMeta::default()
        }
    }

    /// An event on a ConfigMap/Secret wakes the ConfigSyncs it is the source of, a copy of, or
    /// named like a copy of; nothing else.
    #[test]
    fn events_map_to_the_config_syncs_they_concern() {
        let store = store(&[
            (
                "auth",
                serde_json::json!({"source": {"kind": "Secret", "namespace": "flux-system", "name": "ghcr"}}),
            ),
            (
                "info",
                serde_json::json!({
                    "source": {"kind": "ConfigMap", "namespace": "platform", "name": "info"},
                    "target": {"name": "cluster-info"},
                }),
            ),
        ]);
        let woken = |kind, m: kube::api::ObjectMeta| -> Vec<String> {
            let mut names: Vec<String> = syncs_concerned(&store, kind, &m)
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort();
            names
        };
        let cases: [(&str, SourceKind, kube::api::ObjectMeta, &[&str]); 6] = [
            (
                "the source",
                SourceKind::Secret,
                meta("flux-system", "ghcr", &[]),
                &["auth"],
            ),
            (
                "same name, other kind",
                SourceKind::ConfigMap,
                meta("flux-system", "ghcr", &[]),
                &[],
            ),
            (
                "a copy, by target name",
                SourceKind::ConfigMap,
                meta("team-a", "cluster-info", &[]),
                &["info"],
            ),
            (
                "a renamed copy, by owner label",
                SourceKind::ConfigMap,
                meta("team-a", "old", &[(CONFIG_SYNC_LABEL, "info")]),
                &["info"],
            ),
            (
                "a same-name object in any namespace",
                SourceKind::Secret,
                meta("team-b", "ghcr", &[]),
                &["auth"],
            ),
            (
                "unrelated",
                SourceKind::Secret,
                meta("team-a", "other", &[]),
                &[],
            ),
        ];
        for (case, kind, m, want) in cases {
            assert_eq!(woken(kind, m), want, "{case}");
        }
    }
}
