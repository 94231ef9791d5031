//! What the real-Flux scenarios share: the cluster with Flux beside it (`hack/cluster.sh up
//! --flux`), one `conflux run` process with every controller but protect, and small readers and
//! writers of dynamic objects.

#![allow(dead_code)]

pub mod corpus;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use conflux_tests::{Cluster, flux_cluster, free_port, http_get, objects};
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

/// Field manager of the scenarios' own writes.
pub const MANAGER: &str = "conflux-flux-test";
/// How long to wait for anything Flux or conflux does.
pub const WAIT: Duration = Duration::from_secs(120);
/// The watch label both Flux and conflux select configs by.
pub const WATCH: (&str, &str) = ("reconcile.fluxcd.io/watch", "Enabled");
/// The label that puts a Kustomization on the kustomize-controller shard without Flux's own
/// config watchers (`--feature-gates=DisableConfigWatchers=true`).
pub const SHARD: &str = "sharding.fluxcd.io/key";

/// The shared conflux process.
pub struct Conflux {
    pub log: PathBuf,
    pub metrics_port: u16,
}

static CONFLUX: OnceLock<Conflux> = OnceLock::new();

/// conflux's own namespace (`--runtime-namespace`): where the reload controller keeps its memory.
pub const RUNTIME_NAMESPACE: &str = "conflux-system";

/// The cluster with Flux, with conflux's ConfigSync CRD installed.
pub async fn setup() -> (&'static Cluster, Client) {
    let cluster = flux_cluster();
    let client = cluster.client().await;
    objects::install_crd(&client, MANAGER, &objects::config_sync_crd()).await;
    let runtime = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": RUNTIME_NAMESPACE}});
    objects::apply(&client, MANAGER, &runtime).await;
    conflux();
    (cluster, client)
}

/// Starts `conflux run` (copy, sync, reload, flux-trigger) on first use; it is SIGKILLed when the
/// test process ends.
pub fn conflux() -> &'static Conflux {
    CONFLUX.get_or_init(|| {
        let cluster = flux_cluster();
        let (metrics_port, health_port) = (free_port(), free_port());
        let dir = conflux_tests::repo_root().join("target/flux-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("conflux-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_conflux"))
            .args([
                "run",
                "--controllers=copy,sync,reload,flux-trigger",
                "--log-encoding=json",
                "--log-level=debug",
                &format!("--runtime-namespace={RUNTIME_NAMESPACE}"),
                &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                &format!("--health-addr=127.0.0.1:{health_port}"),
            ])
            .env("KUBECONFIG", cluster.kubeconfig())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start conflux");
        conflux_tests::reap_with_this_process(child.id());
        std::mem::forget(child);
        for _ in 0..1_200 {
            if let Some((200, _)) = http_get(health_port, "/readyz") {
                return Conflux { log, metrics_port };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("conflux not ready after 120 s (log: {})", log.display());
    })
}

/// The API of `(apiVersion, kind)` in `ns` (cluster-wide when `None`).
pub fn api(client: &Client, api_version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = objects::plural(kind);
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Reads an object as JSON, `None` when it does not exist (or cannot be read).
pub async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    let object = api(client, api_version, kind, ns)
        .get_opt(name)
        .await
        .ok()??;
    serde_json::to_value(object).ok()
}

/// Merge-patches an object as the test.
pub async fn merge(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    patch: Value,
) {
    api(client, api_version, kind, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {kind} {name}: {e}"));
}

/// Server-side applies `object` as the test.
pub async fn apply(client: &Client, object: Value) {
    objects::apply(client, MANAGER, &object).await;
}

/// Waits until the Flux object's `Ready` condition is `True` for its current generation, and
/// returns the object. Panics with its conditions after [`WAIT`].
pub async fn ready(client: &Client, api_version: &str, kind: &str, ns: &str, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let object = get(client, api_version, kind, Some(ns), name).await;
        match object {
            Some(object) if is_ready(&object) => return object,
            _ if tokio::time::Instant::now() >= deadline => panic!(
                "timed out after {WAIT:?} waiting for {kind} {ns}/{name} Ready; status: {}",
                object.map(|o| o["status"].clone()).unwrap_or(Value::Null)
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `Ready=True` observed at the object's current generation.
pub fn is_ready(object: &Value) -> bool {
    let generation = object["metadata"]["generation"].as_i64();
    let ready = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True");
    // Flux keeps the observed generation in the status; Flux Operator on the condition.
    let observed = object["status"]["observedGeneration"]
        .as_i64()
        .or_else(|| ready.and_then(|c| c["observedGeneration"].as_i64()));
    ready.is_some() && (generation.is_none() || generation == observed)
}

/// The ReplicaSets a Deployment owns, by name, with their pod-template hash annotation.
pub async fn replica_sets(client: &Client, ns: &str, deployment: &str) -> BTreeMap<String, Value> {
    let list = api(client, "apps/v1", "ReplicaSet", Some(ns))
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing ReplicaSets: {e}"));
    list.items
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Deployment" && o.name == deployment)
        })
        .map(|rs| {
            let name = rs.metadata.name.clone().unwrap_or_default();
            (name, serde_json::to_value(rs).unwrap_or(Value::Null))
        })
        .collect()
}

/// A namespace labelled as a Flux tenant.
pub async fn tenant_namespace(cluster: &Cluster, client: &Client, prefix: &str) -> String {
    let ns = cluster.namespace(client, prefix).await;
    merge(
        client,
        "v1",
        "Namespace",
        None,
        &ns,
        json!({"metadata": {"labels": {"toolkit.fluxcd.io/tenant": ns}}}),
    )
    .await;
    ns
}

/// A GitRepository `name` in `ns` pulling `<git_url>/<repo>.git` (branch main, 10 minute
/// interval, so only what a test asks for reconciles it).
pub async fn git_repository(cluster: &Cluster, client: &Client, ns: &str, name: &str, repo: &str) {
    let url = format!("{}/{repo}.git", cluster.git_url().expect("git url"));
    apply(
        client,
        json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"url": url, "interval": "10m", "ref": {"branch": "main"}, "timeout": "60s"},
        }),
    )
    .await;
    ready(
        client,
        "source.toolkit.fluxcd.io/v1",
        "GitRepository",
        ns,
        name,
    )
    .await;
}

/// conflux's log so far (for failure messages).
pub fn conflux_log() -> String {
    std::fs::read_to_string(&conflux().log).unwrap_or_default()
}

/// A string field of a JSON object by path.
pub fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
}
