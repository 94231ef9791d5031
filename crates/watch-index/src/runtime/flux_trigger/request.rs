//! The flux-trigger's handler: what one Flux object gets when the queue hands it out. A
//! reconcile request is one merge patch of `reconcile.fluxcd.io/requestedAt` and the digest of
//! the object's configs ([`OBSERVED_ANNOTATION`]); a first sight records the digest alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use chrono::{SecondsFormat, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::Store;
use serde_json::json;
use tracing::{debug, info, warn};

use conflux_runtime::ConfigWatches;
use conflux_runtime::events::publish;
use conflux_runtime::queue::Next;
use conflux_runtime::sync::{lock, read};

use super::work::{Outcome, Step, View};
use super::{
    FIELD_MANAGER, FluxMetrics, FluxTriggerConfig, OBSERVED_ANNOTATION, REQUESTED_AT_ANNOTATION,
    RequestLabels,
};
use crate::refs::{ConfigKey, ObjectRef};
use crate::runtime::trigger::{DataHashes, ReferrerIndex};
use crate::trigger::Mode;

/// One watched Flux kind: how to reach it, and its informer's store.
#[derive(Clone)]
pub(super) struct FluxKind {
    pub(super) resource: ApiResource,
    pub(super) store: Store<DynamicObject>,
}

/// What the handler needs, shared by every handling.
pub(super) struct Executor {
    pub(super) client: kube::Client,
    pub(super) config: FluxTriggerConfig,
    pub(super) metrics: Arc<FluxMetrics>,
    pub(super) recorder: Recorder,
    /// The Flux kinds watched, by (group, kind).
    pub(super) kinds: RwLock<HashMap<(String, String), FluxKind>>,
    pub(super) configs: ConfigWatches,
    pub(super) index: ReferrerIndex,
    /// Data hashes by version (data-hash mode), so one version of a config is read once for all
    /// its referrers.
    pub(super) hashes: DataHashes,
    /// The digest each object was last asked to reconcile for (or found recorded on it at
    /// start-up): the same state is not requested twice.
    pub(super) requested: Mutex<HashMap<ObjectRef, String>>,
    /// The digest each object got recorded as its first sight. A first sight never stands for a
    /// request: a change that fired after the baseline is requested even when the record, made
    /// later, already holds it.
    pub(super) recorded: Mutex<HashMap<ObjectRef, String>>,
    /// Objects whose last write failed (their failure was reported; repeats are not).
    pub(super) failing: Mutex<HashSet<ObjectRef>>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

/// What the handling of one object does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Ask it to reconcile, for a fired change.
    RequestForChange,
    /// Ask it to reconcile: its configs changed while conflux was not watching.
    RequestForCatchUp,
    /// Record the digest (a first sight).
    Record,
    /// Nothing to write.
    Nothing,
}

impl Executor {
    /// Handles `object`: requests, records or does nothing, and says what comes next; the steps
    /// of the waves that asked for it go to `steps`.
    pub(super) async fn handle(
        self: Arc<Self>,
        object: ObjectRef,
        work: View,
        steps: tokio::sync::mpsc::UnboundedSender<Step>,
    ) -> Next {
        let (next, outcome) = self.handle_once(&object, &work).await;
        for step in work.finish(&object, outcome) {
            let _ = steps.send(step);
        }
        next
    }

    async fn handle_once(&self, object: &ObjectRef, work: &View) -> (Next, Outcome) {
        let Some((kind, current)) = self.current(object) else {
            self.forget(object);
            return (Next::Done, Outcome::Gone);
        };
        if current.metadata.deletion_timestamp.is_some() {
            return (Next::Done, Outcome::Gone);
        }
        let keys = self.references(&kind.resource, &current);
        let digest = self.digest_of(keys.clone()).await;
        let recorded = current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OBSERVED_ANNOTATION));
        let already = lock(&self.requested).get(object) == Some(&digest);
        let first_seen =
            || !keys.is_empty() && !already && lock(&self.recorded).get(object) != Some(&digest);
        let action = if !work.asks.is_empty() && !already {
            Action::RequestForChange
        } else if work.catch_up.is_some() {
            match recorded {
                Some(r) if *r == digest => {
                    lock(&self.requested).insert(object.clone(), digest.clone());
                    Action::Nothing
                }
                Some(_) if !already => Action::RequestForCatchUp,
                None if first_seen() => Action::Record,
                _ => Action::Nothing,
            }
        } else if work.record && recorded.is_none() && first_seen() {
            Action::Record
        } else {
            Action::Nothing
        };
        match action {
            Action::Nothing => {
                if !work.asks.is_empty() {
                    debug!(object = %object, "flux-trigger: this change was requested already");
                }
                (Next::Done, Outcome::Already)
            }
            Action::Record => self.record(object, &kind.resource, &digest).await,
            Action::RequestForChange | Action::RequestForCatchUp => {
                let catch_up = action == Action::RequestForCatchUp;
                self.request(object, &kind.resource, digest, catch_up, work)
                    .await
            }
        }
    }

    /// The object as its informer has it now, with its kind.
    pub(super) fn current(&self, object: &ObjectRef) -> Option<(FluxKind, Arc<DynamicObject>)> {
        let kind = read(&self.kinds)
            .get(&(object.group.to_string(), object.kind.to_string()))
            .cloned()?;
        let key =
            kube::runtime::reflector::ObjectRef::new_with(&object.name, kind.resource.clone())
                .within(&object.namespace);
        let current = kind.store.get(&key)?;
        Some((kind, current))
    }

    /// Forgets what was remembered of `object` (it is gone).
    pub(super) fn forget(&self, object: &ObjectRef) {
        lock(&self.requested).remove(object);
        lock(&self.recorded).remove(object);
        lock(&self.failing).remove(object);
    }

    /// The configs `object` references, read from the object itself.
    pub(super) fn references(&self, ar: &ApiResource, object: &DynamicObject) -> Vec<ConfigKey> {
        let Ok(mut value) = serde_json::to_value(object) else {
            return Vec::new();
        };
        value["apiVersion"] = ar.api_version.as_str().into();
        value["kind"] = ar.kind.as_str().into();
        self.index.references_in(&value)
    }

    /// A digest of configs as they are now: per config its resourceVersion (upstream mode) or
    /// data hash (data-hash mode) when it matches the watch selector, `-` otherwise.
    pub(super) async fn digest_of(&self, mut keys: Vec<ConfigKey>) -> String {
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
                (Some(m), _) => {
                    let rv = m.resource_version.as_deref().unwrap_or_default();
                    match self.hashes.get_or_read(&self.client, &key, rv).await {
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

    /// Records the digest on an object without asking it to reconcile.
    async fn record(&self, object: &ObjectRef, ar: &ApiResource, digest: &str) -> (Next, Outcome) {
        let patch = json!({"metadata": {"annotations": {OBSERVED_ANNOTATION: digest}}});
        let action = format!("recording observed configs on {object}");
        match self.patch(object, ar, &patch, action).await {
            Ok(()) => {
                lock(&self.failing).remove(object);
                lock(&self.recorded).insert(object.clone(), digest.to_owned());
                (Next::Done, Outcome::Already)
            }
            Err(err) if err.is_not_found() => (Next::Done, Outcome::Gone),
            Err(err) => {
                self.failed(object, &err, "cannot record the observed configs");
                (Next::Retry, Outcome::Failed)
            }
        }
    }

    /// Asks an object to reconcile: one merge patch of `requestedAt` and the digest. A failure
    /// is reported once (a Warning Event and a log line) and retried with backoff by the queue
    /// until written or the object is gone; a retry writes the configs' state at its time, so a
    /// newer change never waits for an older one and is never asked twice.
    async fn request(
        &self,
        object: &ObjectRef,
        ar: &ApiResource,
        digest: String,
        catch_up: bool,
        work: &View,
    ) -> (Next, Outcome) {
        let patch = json!({"metadata": {"annotations": {
            REQUESTED_AT_ANNOTATION: rfc3339_nano_now(),
            OBSERVED_ANNOTATION: digest,
        }}});
        let result = self
            .patch(
                object,
                ar,
                &patch,
                format!("requesting reconciliation of {object}"),
            )
            .await;
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
        let cause = match (catch_up, work.asks.first()) {
            (false, Some(ticket)) => {
                let wave = ticket.wave();
                format!(
                    "{} {}/{} was {}d",
                    wave.source.kind,
                    wave.source.namespace,
                    wave.source.name,
                    wave.change.as_str()
                )
            }
            _ => "a referenced ConfigMap/Secret changed while conflux was not watching".to_owned(),
        };
        match result {
            Ok(()) => {
                if lock(&self.failing).remove(object) {
                    info!(object = %object, "flux-trigger: reconciliation requested after retrying");
                }
                lock(&self.requested).insert(object.clone(), digest);
                lock(&self.recorded).remove(object);
                debug!(object = %object, cause = %cause, "flux-trigger: requested reconciliation");
                // A fired change is reported once for all its referrers, on the config
                // (`Step::Done`); a catch-up has no one config to name, so its Event is here.
                if catch_up {
                    let note = format!("{cause}; requested reconciliation");
                    self.config_changed(&reference, note).await;
                }
                (Next::Done, Outcome::Requested)
            }
            Err(err) if err.is_not_found() => {
                debug!(object = %object, "flux-trigger: referrer gone; nothing to request");
                self.forget(object);
                (Next::Done, Outcome::Gone)
            }
            Err(err) => {
                if self.failed(object, &err, "cannot request reconciliation") {
                    let note =
                        format!("{cause} but requesting reconciliation failed: {err}; retrying");
                    publish(
                        &self.recorder,
                        &reference,
                        EventType::Warning,
                        "ReconcileRequestFailed",
                        note,
                        "RequestReconcile",
                    )
                    .await;
                }
                (Next::Retry, Outcome::Failed)
            }
        }
    }

    /// Notes a failed write of `object` (`what` failed): a `warn` line the first time, `debug`
    /// while it keeps failing; `true` the first time (to report it once).
    fn failed(&self, object: &ObjectRef, err: &conflux_runtime::Error, what: &str) -> bool {
        let first = lock(&self.failing).insert(object.clone());
        if first {
            warn!(object = %object, reason = err.reason(), error = %err, "flux-trigger: {what}; retrying with backoff");
        } else {
            debug!(object = %object, reason = err.reason(), error = %err, "flux-trigger: retry failed");
        }
        first
    }

    /// One merge patch of `object`'s annotations, with [`FIELD_MANAGER`].
    async fn patch(
        &self,
        object: &ObjectRef,
        ar: &ApiResource,
        patch: &serde_json::Value,
        action: String,
    ) -> Result<(), conflux_runtime::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, ar);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        api.patch(&object.name, &params, &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(conflux_runtime::Error::api(action))
    }

    /// Publishes a finished wave's Event on its ConfigMap/Secret (when it requested anything).
    pub(super) async fn report(&self, wave: &super::work::Wave) {
        let Some(note) = wave.report() else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some(wave.source.kind.as_str().to_owned()),
            namespace: Some(wave.source.namespace.to_string()),
            name: Some(wave.source.name.to_string()),
            ..Default::default()
        };
        self.config_changed(&reference, note).await;
    }

    /// The one Normal `ConfigChanged` Event a request is reported by.
    async fn config_changed(&self, reference: &ObjectReference, note: String) {
        publish(
            &self.recorder,
            reference,
            EventType::Normal,
            "ConfigChanged",
            note,
            "RequestReconcile",
        )
        .await;
    }
}

/// Go's `time.RFC3339Nano` of now (trailing zeros of the fraction trimmed), as `flux reconcile`.
pub(super) fn rfc3339_nano_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::AutoSi, true)
}
