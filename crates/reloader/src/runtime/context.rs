//! The controller's context: its client, settings, metrics, state and queue, and how work is
//! put on the queue.

use std::sync::{Arc, Mutex};

use conflux_runtime::events::{Problems, recorder};
use conflux_runtime::queue::{Limit, Window, WorkQueue};
use conflux_runtime::sync::lock;
use conflux_runtime::{Informer, PackedStore};
use conflux_watch_index::refs::ObjectRef;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::Client;
use kube::api::PartialObjectMeta;
use kube::runtime::events::Recorder;

use super::cache::{Cached, State};
use super::config::ReloadConfig;
use super::metrics::{DecisionLabels, ReloadMetrics};
use super::work::{Causes, Work};
use crate::hash::HashCache;
use crate::policy::Grant;
use crate::source::SourceKind;
use crate::{Workload, WorkloadKind};
use kube::api::DynamicObject;

/// A workload kind's shared watch: its objects kept as JSON text.
pub(super) type WorkloadInformer = Informer<DynamicObject, PackedStore<DynamicObject>>;

/// Shared state of the controller.
pub struct Context {
    pub(super) client: Client,
    pub(super) config: ReloadConfig,
    pub(super) metrics: Arc<ReloadMetrics>,
    pub(super) recorder: Recorder,
    /// Failures of each workload, each reported once.
    pub(super) problems: Problems,
    pub(super) state: Mutex<State>,
    /// The cluster-wide rollout rate (`--reload-rate`, `--reload-burst`); `None`: unlimited.
    pub(super) rollouts: Option<Limit>,
    /// The shared Namespace watch, when `--namespace-selector` needs namespace labels.
    pub(super) namespaces: Mutex<Option<Informer<PartialObjectMeta<Namespace>>>>,
    /// The queue, once [`run`](super::run) made it.
    pub(super) queue: Mutex<Option<WorkQueue<Work, Causes>>>,
    /// The workload watches, to apply a changed ReloadPolicy to every workload.
    pub(super) workload_informers: Mutex<Vec<(WorkloadKind, WorkloadInformer)>>,
    /// Config hashes by the version they were read at ([`HashCache`]).
    pub(super) hashes: Mutex<HashCache>,
}

/// Configs whose hashes [`Context::hashes`] keeps at most (a few hundred bytes each for a config
/// read with a few keys).
const HASHED_CONFIGS: usize = 4096;

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one controller instance.
    pub fn new(client: Client, config: ReloadConfig, metrics: Arc<ReloadMetrics>) -> Arc<Self> {
        Arc::new(Context {
            recorder: recorder(&client, "conflux"),
            problems: Problems::default(),
            state: Mutex::new(State::new(config.options)),
            rollouts: Limit::per_second_f64(config.rate, config.burst),
            namespaces: Mutex::new(None),
            queue: Mutex::new(None),
            workload_informers: Mutex::new(Vec::new()),
            hashes: Mutex::new(HashCache::new(HASHED_CONFIGS)),
            client,
            config,
            metrics,
        })
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The queue (before [`run`](super::run) made it, work is dropped: nothing can have been
    /// watched yet).
    pub(super) fn queue(&self) -> Option<WorkQueue<Work, Causes>> {
        lock(&self.queue).clone()
    }

    pub(super) fn update_gauges(&self, state: &State) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(queue) = self.queue() {
            self.metrics.pending.set(gauge(queue.len()));
        }
        self.metrics.workloads.set(gauge(state.index.len()));
    }

    /// Whether workloads of `namespace` are served (`--namespace-selector`,
    /// `--namespaces-to-ignore`).
    pub(super) fn serves(&self, namespace: &str) -> bool {
        let filter = &self.config.namespaces;
        if !filter.needs_labels() {
            return filter.allows(namespace, None);
        }
        let informer = lock(&self.namespaces).clone();
        let labels = informer
            .and_then(|i| {
                i.store()
                    .get(&kube::runtime::reflector::ObjectRef::new(namespace))
            })
            .and_then(|ns| ns.metadata.labels.clone());
        filter.allows(namespace, labels.as_ref())
    }

    /// What the ReloadPolicies in `state` grant `workload` (its Namespace's labels from the
    /// shared Namespace watch, which runs whenever ReloadPolicies are followed).
    pub(super) fn grant_of(&self, state: &State, workload: Workload<'_>) -> Grant {
        if state.policies.is_empty() {
            return Grant::default();
        }
        let labels = if state.policies.needs_namespace_labels() {
            let namespace = workload.metadata().namespace.as_deref().unwrap_or_default();
            lock(&self.namespaces)
                .clone()
                .and_then(|i| {
                    i.store()
                        .get(&kube::runtime::reflector::ObjectRef::new(namespace))
                })
                .and_then(|ns| ns.metadata.labels.clone())
        } else {
            None
        };
        state.policies.grant(workload, labels.as_ref())
    }

    pub(super) fn count(&self, action: &str) {
        self.metrics
            .decisions
            .get_or_create(&DecisionLabels {
                action: action.to_owned(),
            })
            .inc();
    }
}

impl Context {
    /// How long changes after a rollout of `workload` are coalesced: its own
    /// `conflux.dev/reload-debounce`, else `--reload-debounce`.
    pub(super) fn window_of(&self, object: &ObjectRef) -> std::time::Duration {
        self.state()
            .workloads
            .get(object)
            .and_then(|w| w.settings().debounce)
            .unwrap_or(self.config.debounce)
    }

    /// The debounce of a config change for `object` (see [`ReloadConfig`](super::ReloadConfig)).
    pub(super) fn window(&self, object: &ObjectRef) -> Window {
        let quiet = self.window_of(object);
        Window {
            settle: self.config.settle,
            quiet,
            deadline: self.config.debounce_max.max(quiet),
        }
    }

    /// Schedules the evaluation of `object` now (a workload event: what it reads, or its opt-in,
    /// changed).
    pub(super) fn evaluate_now(&self, object: ObjectRef) {
        if let Some(queue) = self.queue() {
            queue.add(Work::Evaluate(object), Causes::default());
        }
    }

    /// Schedules the evaluation of `objects` for a change of `cause`, debounced.
    pub(super) fn evaluate_changed(&self, objects: Vec<ObjectRef>, cause: (SourceKind, &str)) {
        let Some(queue) = self.queue() else {
            return;
        };
        for object in objects {
            let window = self.window(&object);
            queue.debounce(Work::Evaluate(object), Causes::of(cause.0, cause.1), window);
        }
    }

    /// Schedules `work` after `delay` at the latest.
    pub(super) fn later(&self, work: Work, delay: std::time::Duration) {
        if let Some(queue) = self.queue() {
            queue.add_after(work, Causes::default(), delay);
        }
    }

    /// Forgets every piece of work about `object` (it is gone).
    pub(super) fn forget(&self, object: &ObjectRef) {
        if let Some(queue) = self.queue() {
            queue.remove(&Work::Evaluate(object.clone()));
            queue.remove(&Work::Resume(object.clone()));
        }
    }
}

/// An Event target.
pub(super) fn reference_to(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: Option<String>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}

/// The Event target for a workload.
pub(super) fn reference(ctx: &Context, object: &ObjectRef, workload: &Cached) -> ObjectReference {
    let kind = workload.kind();
    let api_version = ctx
        .state()
        .resources
        .get(&kind)
        .map(|ar| ar.api_version.clone())
        .unwrap_or_else(|| kind.api_version().to_owned());
    reference_to(
        &api_version,
        &object.kind,
        &object.namespace,
        &object.name,
        workload.uid().map(str::to_owned),
    )
}
