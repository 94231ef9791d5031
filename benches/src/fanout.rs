//! What the fan-out benchmark needs: the ConfigSync CRD from `deploy/crds/configsync.yaml`, and
//! conflux's copy and sync controllers in-process, scoped to one shard label (as in the copy/sync
//! end-to-end tests, whose helpers stay in `tests/e2e/copy_support`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use conflux_copy_core::ConfigSync;
use conflux_copy_core::runtime::CopyMetrics;
use conflux_copy_core::runtime::copy::{self, CopyConfig};
use conflux_copy_core::runtime::sync::{self, SyncConfig};
use conflux_runtime::ConfigWatches;
use conflux_runtime::Runtime;
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::wait_for;

/// The label that shards objects between operators, as Flux does.
pub const SHARD: &str = "sharding.fluxcd.io/key";
/// Field manager of the benchmark's own writes.
pub const BENCH_MANAGER: &str = "conflux-bench";

/// Installs the committed ConfigSync CRD and waits until ConfigSyncs can be listed.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crd = conflux_tests::objects::config_sync_crd();
    conflux_tests::objects::install_crd(client, BENCH_MANAGER, &crd).await;
    // Established is not enough: wait until the API is discoverable and serves a list.
    wait_for("ConfigSyncs listable", Duration::from_secs(60), || {
        let api: Api<ConfigSync> = Api::all(client.clone());
        async move { api.list(&ListParams::default()).await.ok().map(drop) }
    })
    .await
}

/// conflux's copy and sync controllers, in-process, handling only objects labelled
/// `sharding.fluxcd.io/key=<shard>`. Dropping it stops them.
pub struct Operator {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

impl Operator {
    /// Starts both controllers on `client` (give them their own, as a separate process would have)
    /// with `--fan-out-concurrency=<fan_out>` and the default `--concurrent=4`, and waits until
    /// they are ready.
    pub async fn start(client: Client, shard: &str, fan_out: usize) -> anyhow::Result<Self> {
        let concurrent = 4;
        let selector = Selector::parse(&format!("{SHARD}={shard}"))
            .map_err(|e| anyhow::anyhow!("shard selector: {e}"))?;
        let metrics = Arc::new(CopyMetrics::default());
        let runtime = Runtime::new(client.clone());
        let configs = ConfigWatches::start(&runtime, None);
        let copy_ctx = copy::Context::new(
            client.clone(),
            CopyConfig {
                object_selector: selector.clone(),
                concurrent,
                namespace: None,
                resource_set_targets: false,
            },
            metrics.clone(),
        );
        let sync_ctx = sync::Context::new(
            client,
            SyncConfig {
                object_selector: selector,
                sync_source_namespaces: Vec::new(),
                concurrent,
                fan_out_concurrency: fan_out,
                namespace: None,
            },
            metrics,
        );
        let operator = Operator {
            tasks: vec![
                tokio::spawn(copy::run(runtime.clone(), configs.clone(), copy_ctx)),
                tokio::spawn(sync::run(runtime.clone(), configs, sync_ctx)),
            ],
        };
        let health = runtime.health().clone();
        drop(runtime);
        wait_for("conflux ready", Duration::from_secs(120), || {
            let ready = health.is_ready();
            async move { ready.then_some(()) }
        })
        .await?;
        Ok(operator)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Creates a ConfigSync from its spec, labelled with `shard`.
pub async fn create_config_sync(
    client: &Client,
    name: &str,
    shard: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let cs: ConfigSync = serde_json::from_value(json!({
        "apiVersion": "conflux.dev/v1alpha1",
        "kind": "ConfigSync",
        "metadata": {"name": name, "labels": {SHARD: shard}},
        "spec": spec,
    }))
    .context("ConfigSync object")?;
    Api::<ConfigSync>::all(client.clone())
        .create(&PostParams::default(), &cs)
        .await
        .with_context(|| format!("creating ConfigSync {name}"))?;
    Ok(())
}

/// Server-side applies a ConfigMap manifest in `ns` as `manager`, forced (a create when it does
/// not exist yet, an update otherwise).
pub async fn apply_config_map(
    client: &Client,
    ns: &str,
    manager: &str,
    manifest: &Value,
) -> anyhow::Result<()> {
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(manifest),
        )
        .await
        .with_context(|| format!("applying ConfigMap {ns}/{name}"))?;
    Ok(())
}
