//! What the copy/sync end-to-end tests share: the ConfigSync CRD from
//! `deploy/crds/configsync.yaml`, an in-process operator scoped to one test (a shard label), and
//! small readers of the cluster. (The fan-out benchmark has its own copy in `benches/src`.)

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use conflux_copy_core::ConfigSync;
use conflux_copy_core::runtime::copy::{self, CopyConfig};
use conflux_copy_core::runtime::sync::{self, SyncConfig};
use conflux_copy_core::runtime::{ApplyLabels, CopyMetrics};
use conflux_runtime::ConfigWatches;
use conflux_runtime::Runtime;
use conflux_tests::{Cluster, cluster, eventually, label_namespace};
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// The label that shards objects between operators, as Flux does; each test has its own value.
pub const SHARD: &str = "sharding.fluxcd.io/key";
/// The namespace label each test's ConfigSyncs select on (value: the test's shard).
pub const TENANT: &str = "conflux-test/tenant";
/// Field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "conflux-test";

static CRD: OnceCell<()> = OnceCell::const_new();

/// Installs the committed ConfigSync CRD (once per test binary) and waits until it is served.
pub async fn install_crd(client: &Client) {
    CRD.get_or_init(|| async {
        let crd = conflux_tests::objects::config_sync_crd();
        conflux_tests::objects::install_crd(client, TEST_MANAGER, &crd).await;
        // The CRD is established before its API is discoverable by every client: wait for a list.
        eventually("ConfigSyncs listable", Duration::from_secs(30), || {
            let api: Api<ConfigSync> = Api::all(client.clone());
            async move { api.list(&ListParams::default()).await.ok().map(drop) }
        })
        .await;
    })
    .await;
}

/// A test's own operator: the copy and sync controllers in-process, handling only objects labelled
/// with its shard. Dropping it stops them (as a killed process would).
pub struct Operator {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    metrics: Arc<CopyMetrics>,
}

impl Operator {
    /// Starts the copy and sync controllers for `shard`, trusting kopy sources in `trusted`.
    pub async fn start(
        cluster: &Cluster,
        shard: &str,
        trusted: &[&str],
        concurrent: usize,
    ) -> Self {
        Self::start_in(cluster, shard, trusted, concurrent, None).await
    }

    /// The same, handling copy targets and kopy sources in `namespace` only (as with
    /// `--watch-all-namespaces=false`).
    pub async fn start_in(
        cluster: &Cluster,
        shard: &str,
        trusted: &[&str],
        concurrent: usize,
        namespace: Option<&str>,
    ) -> Self {
        Self::start_with(cluster, shard, trusted, concurrent, namespace, false).await
    }

    /// The same, also copying Flux Operator ResourceSet targets when `resource_set_targets`
    /// (`--copy-resourceset-targets`).
    pub async fn start_with(
        cluster: &Cluster,
        shard: &str,
        trusted: &[&str],
        concurrent: usize,
        namespace: Option<&str>,
        resource_set_targets: bool,
    ) -> Self {
        conflux_tests::leak::capture_logs();
        let client = cluster.client().await;
        let selector = Selector::parse(&format!("{SHARD}={shard}")).expect("shard selector");
        let metrics = Arc::new(CopyMetrics::default());
        let runtime = Runtime::new(client.clone());
        let configs = ConfigWatches::start(&runtime, None);
        let copy_ctx = copy::Context::new(
            client.clone(),
            CopyConfig {
                object_selector: selector.clone(),
                concurrent,
                namespace: namespace.map(str::to_owned),
                resource_set_targets,
            },
            metrics.clone(),
        );
        let sync_ctx = sync::Context::new(
            client,
            SyncConfig {
                object_selector: selector,
                sync_source_namespaces: trusted.iter().map(|s| (*s).to_owned()).collect(),
                concurrent,
                fan_out_concurrency: concurrent,
                namespace: namespace.map(str::to_owned),
            },
            metrics.clone(),
        );
        let copy_task = tokio::spawn(copy::run(runtime.clone(), configs.clone(), copy_ctx));
        let sync_task = tokio::spawn(sync::run(runtime.clone(), configs, sync_ctx));
        let health = runtime.health().clone();
        drop(runtime);
        eventually("operator ready", Duration::from_secs(60), || {
            let ready = health.is_ready();
            async move { ready.then_some(()) }
        })
        .await;
        Operator {
            tasks: vec![copy_task, sync_task],
            metrics,
        }
    }

    /// `copy_applies_total{controller, result}`: how many times `controller` (`copy` or `sync`)
    /// wrote a copy (`apply`, `create`, ...), found one in sync (`unchanged`), or failed with a
    /// reason (`Refused`, `InvalidReference`, ...).
    pub fn applies(&self, controller: &str, result: &str) -> u64 {
        self.metrics
            .applies
            .get_or_create(&ApplyLabels {
                controller: controller.to_owned(),
                result: result.to_owned(),
            })
            .get()
    }

    /// Kills the controllers mid-work (their tasks are aborted; nothing is flushed).
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        conflux_tests::leak::assert_log_clean();
    }
}

/// How long a test waits for the operator to do something.
pub const WAIT: Duration = Duration::from_secs(45);

/// A client of this binary's cluster with the ConfigSync CRD installed, and a shard for `test`.
pub async fn setup(test: &str) -> (Client, String) {
    let client = cluster().client().await;
    install_crd(&client).await;
    (client, shard(test))
}

/// `s` base64-encoded, as Secret `data` holds it.
pub fn b64(s: &str) -> String {
    conflux_tests::leak::base64(s.as_bytes())
}

/// Secret data (decoded) from pairs.
pub fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// ConfigMap data from pairs.
pub fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Waits until the Secret `ns/name` holds exactly `want`.
pub async fn wait_secret(client: &Client, ns: &str, name: &str, want: &BTreeMap<String, Vec<u8>>) {
    eventually(
        &format!("Secret {ns}/{name} holds the expected data"),
        WAIT,
        || async {
            let s = secret(client, ns, name).await?;
            (&secret_data(&s) == want).then_some(())
        },
    )
    .await;
}

/// Waits until the ConfigMap `ns/name` holds exactly `want`.
pub async fn wait_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    want: &BTreeMap<String, String>,
) {
    eventually(
        &format!("ConfigMap {ns}/{name} holds the expected data"),
        WAIT,
        || async {
            let cm = config_map(client, ns, name).await?;
            (&cm_data(&cm) == want).then_some(())
        },
    )
    .await;
}

/// A unique shard value for one test.
pub fn shard(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

/// Creates a namespace for a test with extra labels.
pub async fn namespace(
    cluster: &Cluster,
    client: &Client,
    prefix: &str,
    labels: &[(&str, &str)],
) -> String {
    let name = cluster.namespace(client, prefix).await;
    if !labels.is_empty() {
        label_namespace(client, &name, labels).await;
    }
    name
}

/// Creates a namespace with exactly this name (the peers' documented examples name theirs) and
/// labels; one that exists already is labelled.
pub async fn named_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> String {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }))
    .expect("namespace object");
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let pairs: Vec<(&str, &str)> = labels.into_iter().collect();
            label_namespace(client, name, &pairs).await;
        }
        Err(e) => panic!("create namespace {name}: {e}"),
    }
    name.to_owned()
}

/// Server-side applies a ConfigMap or Secret as the test's own field manager.
pub async fn apply(client: &Client, ns: &str, object: Value) {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let params = PatchParams::apply(TEST_MANAGER).force();
    let result = match kind.as_str() {
        "ConfigMap" => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(&name, &params, &Patch::Apply(&object))
            .await
            .map(drop),
        "Secret" => Api::<Secret>::namespaced(client.clone(), ns)
            .patch(&name, &params, &Patch::Apply(&object))
            .await
            .map(drop),
        other => panic!("apply: unexpected kind {other}"),
    };
    result.unwrap_or_else(|e| panic!("apply {kind} {ns}/{name}: {e}"));
}

/// A ConfigMap, or `None`.
pub async fn config_map(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get ConfigMap {ns}/{name}: {e}"))
}

/// A Secret, or `None`.
pub async fn secret(client: &Client, ns: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get Secret {ns}/{name}: {e}"))
}

/// The data of a ConfigMap as `key → value`.
pub fn cm_data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// The data of a Secret as `key → decoded value`.
pub fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// A label or annotation value of an object's metadata.
pub fn label<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// An annotation value.
pub fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Creates a ConfigSync from its spec, labelled with `shard`.
pub async fn create_config_sync(client: &Client, name: &str, shard: &str, spec: Value) {
    let cs: ConfigSync = serde_json::from_value(json!({
        "apiVersion": "conflux.dev/v1alpha1",
        "kind": "ConfigSync",
        "metadata": {"name": name, "labels": {SHARD: shard}},
        "spec": spec,
    }))
    .expect("ConfigSync object");
    Api::<ConfigSync>::all(client.clone())
        .create(&PostParams::default(), &cs)
        .await
        .unwrap_or_else(|e| panic!("create ConfigSync {name}: {e}"));
}

/// A ConfigSync, or `None`.
pub async fn config_sync(client: &Client, name: &str) -> Option<ConfigSync> {
    Api::<ConfigSync>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get ConfigSync {name}: {e}"))
}

/// The `Ready` condition of a ConfigSync as (status, reason, message).
pub async fn ready(client: &Client, name: &str) -> Option<(String, String, String)> {
    let cs = config_sync(client, name).await?;
    let status = cs.status?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((
        ready.status.clone(),
        ready.reason.clone(),
        ready.message.clone(),
    ))
}

/// The Events (events.k8s.io/v1) about one object, as (type, reason, note).
pub async fn events_about(
    client: &Client,
    events_ns: &str,
    kind: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    let events = Api::<Event>::namespaced(client.clone(), events_ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list events in {events_ns}: {e}"));
    events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits for an Event about an object with `reason`, and returns its note.
pub async fn expect_event(
    client: &Client,
    events_ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> String {
    eventually(
        &format!("a {reason} Event about {kind} {events_ns}/{name}"),
        Duration::from_secs(30),
        || async {
            events_about(client, events_ns, kind, name)
                .await
                .into_iter()
                .find(|(_, r, _)| r == reason)
                .map(|(_, _, note)| note)
        },
    )
    .await
}
