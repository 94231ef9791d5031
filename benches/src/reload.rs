//! What the reload latency benchmark needs: conflux's reload controller in-process, scoped to one
//! namespace, and writers and readers of Deployments and ConfigMaps (as in the reload end-to-end
//! tests, whose helpers stay in `tests/e2e/reload_support`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use conflux_reloader::runtime::{
    self as reload, Context, ReloadConfig, ReloadMetrics, RolloutLabels,
};
use conflux_runtime::ConfigWatches;
use conflux_runtime::Runtime;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::wait_for;

/// Field manager of the benchmark's own writes.
pub const BENCH_MANAGER: &str = "conflux-bench";
/// Pod-template annotation conflux sets to roll a workload.
pub const HASH: &str = "conflux.dev/config-hash";
/// `reloader.stakater.com/auto: "true"`.
pub const AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");

/// The reload controller, in-process; dropping it stops it.
pub struct Reloader {
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<ReloadMetrics>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("rollouts", &self.rollouts())
            .finish()
    }
}

impl Reloader {
    /// Starts the controller on `client` with `config` and waits until it is ready. Without a
    /// records namespace, its memory is kept in its own namespace.
    pub async fn start(client: Client, mut config: ReloadConfig) -> anyhow::Result<Self> {
        if config.records_namespace.is_none() {
            config.records_namespace = config.namespace.clone();
        }
        let metrics = Arc::new(ReloadMetrics::default());
        let runtime = Runtime::new(client.clone());
        let configs = ConfigWatches::start(&runtime, config.namespace.as_deref());
        let health = runtime.health().clone();
        let ctx = Context::new(client, config, metrics.clone());
        let reloader = Reloader {
            task: tokio::spawn(reload::run(runtime, configs, ctx)),
            metrics,
        };
        wait_for("reload controller ready", Duration::from_secs(60), || {
            let ready = health.is_ready();
            async move { ready.then_some(()) }
        })
        .await?;
        Ok(reloader)
    }

    /// Successful rollouts of Deployments so far.
    pub fn rollouts(&self) -> u64 {
        self.metrics
            .rollouts
            .get_or_create(&RolloutLabels {
                kind: "Deployment".into(),
                result: "success".into(),
            })
            .get()
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Deployment manifest (selector `app: <name>`, one replica) with workload `annotations` and
/// `pod_spec`.
pub fn deployment(name: &str, annotations: Value, pod_spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    })
}

/// A pod spec with one container, `extra` merged into the container.
pub fn container(extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "registry.invalid/app:1"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    json!({"containers": [c]})
}

/// Server-side applies a Deployment or ConfigMap manifest in `ns` as the benchmark, forced.
pub async fn apply(client: &Client, ns: &str, manifest: &Value) -> anyhow::Result<()> {
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply(BENCH_MANAGER).force();
    let kind = manifest["kind"].as_str().unwrap_or_default();
    match kind {
        "Deployment" => Api::<Deployment>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .map(drop),
        "ConfigMap" => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .map(drop),
        other => anyhow::bail!("apply: unexpected kind {other:?}"),
    }
    .with_context(|| format!("applying {kind} {ns}/{name}"))
}

/// Applies a ConfigMap with `data`.
pub async fn apply_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    data: Value,
) -> anyhow::Result<()> {
    let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": data});
    apply(client, ns, &manifest).await
}

/// Applies a Deployment and waits for its first ReplicaSet.
pub async fn create_deployment(client: &Client, ns: &str, manifest: &Value) -> anyhow::Result<()> {
    apply(client, ns, manifest).await?;
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let labels = format!("app={name}");
    wait_for(
        &format!("the first ReplicaSet of {ns}/{name}"),
        Duration::from_secs(60),
        || {
            let (replica_sets, labels) = (replica_sets.clone(), labels.clone());
            async move {
                let list = replica_sets
                    .list(&ListParams::default().labels(&labels))
                    .await
                    .ok()?;
                (!list.items.is_empty()).then_some(())
            }
        },
    )
    .await
}

/// Waits until conflux remembers a baseline of the Deployment (in its memory Secrets in `ns`,
/// written a moment after it changes), and returns it.
pub async fn wait_baseline(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    wait_for(
        &format!("conflux's baseline of {ns}/{name}"),
        Duration::from_secs(30),
        || conflux_tests::remembered_baseline(client, ns, "Deployment", ns, name),
    )
    .await
}
