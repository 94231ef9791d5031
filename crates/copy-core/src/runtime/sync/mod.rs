//! The `sync` controller: fan-out copies of one ConfigMap or Secret into many namespaces, from a
//! cluster-scoped `ConfigSync` or from a source annotated for fan-out (kopy's
//! `kopy.kot-labs.com/sync` / `flynshue.io/sync`, reflector's `reflection-auto-enabled`,
//! replicator's `replicate-to` / `replicate-to-matching`) in a namespace listed in
//! `--sync-source-namespaces` (docs/design.md 4.2).
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
//! - Annotated sources are the primary objects of a second controller (one per kind); an
//!   annotation outside the trusted namespaces is refused with a Warning Event.
//!
//! Files: `config_sync` (the ConfigSync controller), `annotated` (the annotated-source
//! controllers), `fan_out` (the fan-out both run); this one holds the settings, the shared context
//! and the wiring.
//!
//! [`Controller`]: kube::runtime::controller::Controller
//! [`plan_sync`]: crate::plan_sync

mod annotated;
mod config_sync;
mod fan_out;

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use conflux_runtime::ConfigWatches;
use conflux_runtime::backoff::{KeyedBackoff, Policy};
use conflux_runtime::events::{Problems, recorder};
use conflux_runtime::{Informer, Runtime};
use conflux_watch_index::runtime::sharded;
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::events::Recorder;

use super::CopyMetrics;
use crate::{ConfigSync, Error, SourceRef};
use annotated::run_annotated;
use config_sync::run_config_syncs;
use conflux_runtime::sync::{read, write};

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// `--watch-label-selector`: only ConfigSyncs and annotated sources with matching labels are
    /// handled (sharding).
    pub object_selector: Selector,
    /// `--sync-source-namespaces`: namespaces whose annotated sources (kopy, reflector, replicator)
    /// are trusted.
    pub sync_source_namespaces: Vec<String>,
    /// `--concurrent`: ConfigSyncs (and annotated sources) reconciled in parallel.
    pub concurrent: usize,
    /// `--fan-out-concurrency`: copies one fan-out writes in parallel. The API server serves a
    /// fan-out fastest with 16–32 writes in flight; one at a time per reconcile would make a
    /// 1,000-namespace fan-out several times slower.
    pub fan_out_concurrency: usize,
    /// Only annotated sources in this namespace (`--watch-all-namespaces=false`), or in all when
    /// `None`.
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
    /// The problems of each ConfigSync and annotated source, so each is reported once.
    problems: Problems,
    /// Annotated sources seen owning copies (from the copies' labels), so a source whose annotation
    /// was removed releases them. Rebuilt from the cluster on start; a hint, not the truth.
    source_owners: RwLock<HashSet<SourceRef>>,
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
            source_owners: RwLock::new(HashSet::new()),
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

/// Runs the controller (ConfigSyncs, and annotated sources of both kinds) until the process ends;
/// readiness is a `sync` part of the runtime's health. A missing ConfigSync CRD is retried with
/// backoff (and readiness says so) rather than ending the process.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("sync");
    let namespaces: Informer<PartialObjectMeta<Namespace>> = runtime.namespaces(&health);
    *write(&ctx.namespaces) = Some(namespaces.clone());
    let syncs: Informer<ConfigSync> = runtime.informer(
        Api::all(ctx.client.clone()),
        sharded(&ctx.config.object_selector),
        crate::config_sync::KIND,
        &health,
    );
    tokio::join!(
        run_config_syncs(ctx.clone(), &syncs, &namespaces, &configs),
        run_annotated::<ConfigMap>(ctx.clone(), &runtime, &namespaces, &configs, &health),
        run_annotated::<Secret>(ctx, &runtime, &namespaces, &configs, &health),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::{self, Store};
    use kube::runtime::watcher::Event as WatchEvent;

    use super::config_sync::syncs_concerned;
    use crate::SourceKind;
    use crate::ownership::CONFIG_SYNC_LABEL;

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
