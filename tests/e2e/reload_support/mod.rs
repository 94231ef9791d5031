//! What the reload end-to-end tests share: the controller in-process, scoped to one namespace, and
//! small writers and readers of Deployments, ReplicaSets and configs. (The latency benchmark has
//! its own copy in `benches/src`.)

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use conflux_reloader::runtime::{
    self as reload, Context, DecisionLabels, ReloadConfig, ReloadMetrics, RolloutLabels,
};
use conflux_runtime::ConfigWatches;
use conflux_runtime::Runtime;
use conflux_tests::{Cluster, eventually};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "conflux-test";
/// Pod-template annotation conflux sets to roll a workload.
pub const HASH: &str = "conflux.dev/config-hash";
/// Workload annotation holding conflux's baseline: written by older versions on every workload,
/// now only on a re-created Job and a restarted Argo Rollout.
pub const BASELINE: &str = "conflux.dev/config-hash-baseline";
/// Reloader's pod-template annotation naming the config behind the last rollout.
pub const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
/// `reloader.stakater.com/auto: "true"`.
pub const AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");

/// An in-process reload controller.
pub struct Running {
    /// Its task (abort it to "stop conflux").
    pub task: JoinHandle<()>,
    /// Its metrics.
    pub metrics: Arc<ReloadMetrics>,
}

impl Running {
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

    /// Asserts that exactly `n` Deployment rollouts succeeded. The test sees a rollout's write
    /// in the API server a moment before the controller counts it (it counts on the PATCH's
    /// answer), so the count is awaited up to `n` first; a count above `n` still fails.
    pub async fn assert_rollouts(&self, n: u64) {
        let what = format!("{n} rollouts counted");
        eventually(&what, Duration::from_secs(10), || async {
            (self.rollouts() >= n).then_some(())
        })
        .await;
        assert_eq!(self.rollouts(), n);
    }

    /// Evaluations that ended with `action` so far.
    pub fn decisions(&self, action: &str) -> u64 {
        self.metrics
            .decisions
            .get_or_create(&DecisionLabels {
                action: action.into(),
            })
            .get()
    }

    /// Every evaluation so far.
    pub fn evaluations(&self) -> u64 {
        ["none", "remember", "rollout", "held", "throttled"]
            .into_iter()
            .map(|a| self.decisions(a))
            .sum()
    }

    /// Waits until more than `before` evaluations happened (a barrier for "did not roll").
    pub async fn evaluated_since(&self, before: u64, what: &str) {
        eventually(what, Duration::from_secs(30), || {
            let now = self.evaluations();
            async move { (now > before).then_some(()) }
        })
        .await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
        conflux_tests::leak::assert_log_clean();
    }
}

/// Starts the controller for `ns` with coalescing window `debounce` and waits until it is ready.
pub async fn start(cluster: &Cluster, ns: &str, debounce: Duration) -> Running {
    start_with(
        cluster,
        ReloadConfig {
            namespace: Some(ns.to_owned()),
            debounce,
            rate: 100.0,
            burst: 100,
            ..ReloadConfig::default()
        },
    )
    .await
}

/// Starts the controller with `config` and waits until it is ready.
pub async fn start_with(cluster: &Cluster, config: ReloadConfig) -> Running {
    start_as(cluster.client().await, config).await
}

/// Starts the controller with `client` (e.g. a user with few permissions) and waits until it is
/// ready. Without a records namespace, the test's namespace keeps its memory (as
/// `--runtime-namespace` does for `conflux run`).
pub async fn start_as(client: Client, mut config: ReloadConfig) -> Running {
    conflux_tests::leak::capture_logs();
    if config.records_namespace.is_none() {
        config.records_namespace = config.namespace.clone();
    }
    let metrics = Arc::new(ReloadMetrics::default());
    let runtime = Runtime::new(client.clone());
    let configs = ConfigWatches::start(&runtime, config.namespace.as_deref());
    let health = runtime.health().clone();
    let ctx = Context::new(client, config, metrics.clone());
    let task = tokio::spawn(reload::run(runtime, configs, ctx));
    eventually("reload ready", Duration::from_secs(60), || {
        let ready = health.is_ready();
        async move { ready.then_some(()) }
    })
    .await;
    Running { task, metrics }
}

/// A Deployment manifest (selector `app: <name>`) with workload `annotations` and `pod_spec`.
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

/// A pod spec with one container and `extra` merged into the container.
pub fn container(extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "registry.invalid/app:1"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    json!({"containers": [c]})
}

/// Server-side applies a manifest as `manager`, forced.
pub async fn apply_as(client: &Client, ns: &str, manager: &str, manifest: &Value) {
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply(manager).force();
    match manifest["kind"].as_str() {
        Some("Deployment") => Api::<Deployment>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .map(drop),
        Some("ConfigMap") => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .map(drop),
        Some("Secret") => Api::<Secret>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .map(drop),
        other => panic!("apply_as: unexpected kind {other:?}"),
    }
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

/// Applies a Deployment as the test manager and waits for its first ReplicaSet.
pub async fn create_deployment(client: &Client, ns: &str, manifest: &Value) {
    apply_as(client, ns, TEST_MANAGER, manifest).await;
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    wait_replica_sets(client, ns, name, 1).await;
}

/// Applies a ConfigMap with `data` and `annotations`.
pub async fn apply_cm(client: &Client, ns: &str, name: &str, data: Value, annotations: Value) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations}, "data": data});
    apply_as(client, ns, TEST_MANAGER, &cm).await;
}

/// Applies a Secret with `string_data`.
pub async fn apply_secret(client: &Client, ns: &str, name: &str, string_data: Value) {
    // Every Secret also holds the leak marker (checked in the captured log when the controller
    // stops).
    let mut data: serde_json::Map<String, Value> = conflux_tests::leak::string_data()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    if let Value::Object(given) = string_data {
        data.extend(given);
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "stringData": data});
    apply_as(client, ns, TEST_MANAGER, &secret).await;
}

/// Deletes a ConfigMap.
pub async fn delete_cm(client: &Client, ns: &str, name: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete ConfigMap {name}: {e}"));
}

/// The Deployment as stored.
pub async fn get_deployment(client: &Client, ns: &str, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get Deployment {name}: {e}"))
}

/// A pod-template annotation of the Deployment, if set.
pub async fn template_annotation(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
) -> Option<String> {
    get_deployment(client, ns, name)
        .await
        .spec
        .template
        .metadata?
        .annotations?
        .get(key)
        .cloned()
}

/// The pod-template hash annotation conflux set, if any.
pub async fn template_hash(client: &Client, ns: &str, name: &str) -> Option<String> {
    template_annotation(client, ns, name, HASH).await
}

/// The baseline annotation conflux recorded, if any.
pub async fn baseline(client: &Client, ns: &str, name: &str) -> Option<String> {
    remembered(client, ns, "apps", "Deployment", ns, name).await
}

/// The baseline the reload controller remembers of the workload `kind` `ns`/`name`, from its
/// memory Secrets in `records_ns` (written a moment after it changes).
pub async fn remembered(
    client: &Client,
    records_ns: &str,
    _group: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<String> {
    conflux_tests::remembered_baseline(client, records_ns, kind, ns, name).await
}

/// Waits until conflux remembers a baseline of the Deployment.
pub async fn wait_baseline(client: &Client, ns: &str, name: &str) -> String {
    eventually(
        &format!("baseline on {name}"),
        Duration::from_secs(30),
        || async { baseline(client, ns, name).await },
    )
    .await
}

/// ReplicaSets owned by the Deployment `name`.
pub async fn replica_sets(client: &Client, ns: &str, name: &str) -> usize {
    Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap_or_else(|e| panic!("list ReplicaSets: {e}"))
        .items
        .iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Deployment" && o.name == name)
        })
        .count()
}

/// Waits until the Deployment `name` has exactly `n` ReplicaSets.
pub async fn wait_replica_sets(client: &Client, ns: &str, name: &str, n: usize) {
    eventually(
        &format!("{n} ReplicaSet(s) of {name}"),
        Duration::from_secs(30),
        || async { (replica_sets(client, ns, name).await == n).then_some(()) },
    )
    .await;
}

/// Waits until the template hash of `name` differs from `before` and returns it.
pub async fn wait_rolled(client: &Client, ns: &str, name: &str, before: Option<&str>) -> String {
    eventually(
        &format!("rollout of {name}"),
        Duration::from_secs(30),
        || async {
            template_hash(client, ns, name)
                .await
                .filter(|h| Some(h.as_str()) != before)
        },
    )
    .await
}

/// Events with `reason` about the object `name`, as (type, note).
pub async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"))
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|e| (e.type_.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Reloader's `last-reloaded-from` on the Deployment's pod template, if any.
pub async fn last_reloaded_from(client: &Client, ns: &str, name: &str) -> Option<String> {
    template_annotation(client, ns, name, LAST_RELOADED_FROM).await
}

/// Waits until `last-reloaded-from` of `name` differs from `before` (how Reloader's own e2e tests
/// see a reload) and returns it, parsed.
pub async fn wait_reloaded_from(
    client: &Client,
    ns: &str,
    name: &str,
    before: Option<&str>,
) -> Value {
    let raw = eventually(
        &format!("last-reloaded-from of {name}"),
        Duration::from_secs(30),
        || async {
            last_reloaded_from(client, ns, name)
                .await
                .filter(|v| Some(v.as_str()) != before)
        },
    )
    .await;
    serde_json::from_str(&raw).unwrap_or_else(|e| panic!("last-reloaded-from {raw}: {e}"))
}

/// The `STAKATER_*` variables of the Deployment's containers, as (container, name, value).
pub async fn stakater_env(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    let d = get_deployment(client, ns, name).await;
    let spec = d.spec.template.spec.unwrap_or_default();
    spec.containers
        .iter()
        .flat_map(|c| {
            c.env
                .iter()
                .flatten()
                .filter(|e| e.name.starts_with("STAKATER_"))
                .map(|e| {
                    (
                        c.name.clone(),
                        e.name.clone(),
                        e.value.clone().unwrap_or_default(),
                    )
                })
        })
        .collect()
}

/// Deletes a Secret.
pub async fn delete_secret(client: &Client, ns: &str, name: &str) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Secret {name}: {e}"));
}
