//! What the fault scenarios share: the `conflux` process, a world of objects that exercises all
//! four controllers, the checks of "none lost, none doubled", and seeded randomness.

#![allow(dead_code)]

use conflux_tests::{free_port, http_get};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conflux_reloader::Workload;
use conflux_reloader::hash::{ConfigData, content_hash};
use conflux_reloader::index::ConsumerIndex;
use conflux_reloader::opt_in::{Options, watch};
use conflux_tests::{eventually, objects};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

/// Field manager of the scenarios' own writes.
const MANAGER: &str = "conflux-fault-test";
/// Label that selects a world's fan-out target namespaces.
const WORLD_LABEL: &str = "conflux-fault/world";

static SERIAL: Mutex<()> = Mutex::const_new(());

/// One scenario at a time: they share the cluster, and one restarts the API server.
pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// A small seeded generator (xorshift), so a failing run can be repeated with
/// `CONFLUX_FAULT_SEED`.
pub struct Seeded(u64);

impl Seeded {
    /// A generator for `scenario`, seeded from `CONFLUX_FAULT_SEED` or the clock; prints the seed.
    pub fn new(scenario: &str) -> Self {
        let seed = std::env::var("CONFLUX_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{scenario}: CONFLUX_FAULT_SEED={seed}");
        Seeded(seed.max(1))
    }

    /// The seed itself (for the fault proxy).
    pub fn seed(&self) -> u64 {
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % n.max(1)
    }
}

/// A `conflux run` process with every controller.
pub struct Conflux {
    child: Child,
    health_port: u16,
    metrics_port: u16,
    log: PathBuf,
}

/// conflux's own namespace (`RUNTIME_NAMESPACE`) unless a test gives another: where the reload
/// controller keeps its memory, as an installed conflux does. [`World::setup`] creates it.
pub fn runtime_namespace() -> String {
    format!("fault-conflux-{}", std::process::id())
}

impl Conflux {
    /// Starts conflux against `kubeconfig`; its log goes to `target/fault-logs/<name>.log`.
    pub fn start(kubeconfig: &Path, name: &str) -> Self {
        Conflux::start_with(kubeconfig, name, &[], &[])
    }

    /// [`Conflux::start`] with more flags and environment variables.
    pub fn start_with(
        kubeconfig: &Path,
        name: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let (metrics_port, health_port) = (free_port(), free_port());
        let dir = conflux_tests::repo_root().join("target/fault-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("{name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_conflux"))
            .args([
                "run",
                "--controllers=copy,sync,reload,flux-trigger",
                "--log-encoding=console",
                "--log-level=debug",
                "--reload-debounce=500ms",
                "--sync-source-namespaces=",
                &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                &format!("--health-addr=127.0.0.1:{health_port}"),
            ])
            .args(extra_args)
            .env("RUNTIME_NAMESPACE", runtime_namespace())
            .envs(env.iter().copied())
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start conflux");
        Conflux {
            child,
            health_port,
            metrics_port,
            log,
        }
    }

    /// A conflux process started otherwise (from the image, in a chroot), serving its metrics and
    /// health endpoints on these ports of 127.0.0.1, logging to `log`.
    pub fn adopt(child: Child, metrics_port: u16, health_port: u16, log: PathBuf) -> Self {
        Conflux {
            child,
            health_port,
            metrics_port,
            log,
        }
    }

    /// Waits (bounded) until `/readyz` answers 200.
    pub async fn wait_ready(&mut self) {
        let port = self.health_port;
        for _ in 0..1_200 {
            if let Some((200, _)) = http_get(port, "/readyz") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // The log's end says why; CI keeps only the test's output.
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                panic!(
                    "conflux exited early: {status} (log: {}):\n{tail}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let body = http_get(port, "/readyz").map(|r| r.1).unwrap_or_default();
        panic!(
            "conflux not ready after 120 s: {body} (log: {})",
            self.log.display()
        );
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, as an OOM kill or a node loss would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait; first, the Secret leak check over its metrics and its whole log (debug
    /// level) so far.
    pub fn stop(&mut self) {
        conflux_tests::leak::assert_clean("metrics", &self.metrics());
        conflux_tests::leak::assert_clean("the conflux log", &self.log_text());
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }

    /// Whether `conflux_leader_election_master_status` says this replica leads.
    pub fn is_leader(&self) -> bool {
        self.metrics()
            .lines()
            .any(|l| l.trim() == "conflux_leader_election_master_status 1")
    }

    /// The log written so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/readyz`: status and body.
    pub fn readyz(&self) -> Option<(u16, String)> {
        http_get(self.health_port, "/readyz")
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
            .map(|r| r.1)
            .unwrap_or_default()
    }
}

impl Drop for Conflux {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The objects one scenario watches converge: in `<id>-src`, a labelled ConfigMap `settings`
/// (source of a pull copy, referenced by a Kustomization, consumed by an opted-in Deployment)
/// and a Secret `fan` fanned out by a ConfigSync into `fan_out` namespaces; in the first of
/// those, a ConfigMap `copy` pulling from `settings`.
#[derive(Clone)]
pub struct World {
    client: Client,
    id: String,
    src: String,
    targets: Vec<String>,
}

impl World {
    /// The namespace of the sources (also the runtime namespace of leader election tests).
    pub fn source_namespace(&self) -> &str {
        &self.src
    }

    /// Creates the world (and the CRDs it needs) and returns once everything exists.
    pub async fn setup(client: &Client, prefix: &str, fan_out: usize) -> Self {
        install_crds(client).await;
        let id = format!("{prefix}-{}", std::process::id());
        let src = format!("{id}-src");
        namespace(client, &src, &[]).await;
        namespace(client, &runtime_namespace(), &[]).await;
        let mut targets = Vec::new();
        for i in 0..fan_out {
            let ns = format!("{id}-t{i}");
            namespace(client, &ns, &[(WORLD_LABEL, &id)]).await;
            targets.push(ns);
        }
        let world = World {
            client: client.clone(),
            id,
            src,
            targets,
        };
        world.write_sources(0).await;
        apply(
            client,
            &json!({
                "apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
                "metadata": {"name": world.id},
                "spec": {
                    "source": {"kind": "Secret", "namespace": world.src, "name": "fan"},
                    "target": {"namespaceSelector": {"matchLabels": {WORLD_LABEL: world.id}}},
                },
            }),
        )
        .await;
        apply(
            client,
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "copy", "namespace": world.targets[0],
                             "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{}/settings", world.src)}},
            }),
        )
        .await;
        apply(
            client,
            &json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "app", "namespace": world.src},
                "spec": {"interval": "10m", "path": "./", "prune": true,
                         "sourceRef": {"kind": "GitRepository", "name": "repo"},
                         "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "settings"}]}},
            }),
        )
        .await;
        apply(
            client,
            &json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": world.src,
                             "annotations": {"reloader.stakater.com/auto": "true"}},
                "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{
                            "name": "app", "image": "registry.invalid/app:1",
                            "envFrom": [{"configMapRef": {"name": "settings"}}],
                        }]},
                    },
                },
            }),
        )
        .await;
        // Rollouts are counted as revisions after the first: the controller-manager must have
        // made revision 1 before any fault, or a change rolled while it was catching up after
        // an API server restart would be counted as no rollout at all.
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &world.src);
        let first = eventually_revision(&deployments).await;
        assert_eq!(first, 1, "the Deployment starts at revision 1");
        world
    }

    /// The same world seen through another client (after an API server restart).
    pub fn with_client(&self, client: Client) -> Self {
        World {
            client,
            ..self.clone()
        }
    }

    async fn write_sources(&self, v: u32) {
        apply(
            &self.client,
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": self.src,
                             "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
                             "annotations": {"copy.conflux.dev/allowed-namespaces": format!("{}-*", self.id)}},
                "data": {"v": v.to_string()},
            }),
        )
        .await;
        apply(
            &self.client,
            &json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "fan", "namespace": self.src},
                "stringData": secret_data(v),
            }),
        )
        .await;
    }

    /// Waits until conflux has recorded the baselines: the Deployment's, remembered (first sight
    /// never rolls, so a change made before that would not roll either), and the Kustomization's
    /// digest of its configs (likewise for reconcile requests).
    pub async fn wait_baselines(&self) {
        eventually(
            "Kustomization digest recorded",
            Duration::from_secs(120),
            || async {
                let ar = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
                    "kustomizations",
                );
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &self.src, &ar);
                let k = api.get("app").await.ok()?;
                k.metadata
                    .annotations?
                    .contains_key("trigger.conflux.dev/observed-configs")
                    .then_some(())
            },
        )
        .await;
        // In conflux's namespace: the default one, the sources' (leader election tests), or the
        // chart's (the image test installs conflux there).
        eventually(
            "Deployment baseline remembered",
            Duration::from_secs(60),
            || async {
                for records in [
                    runtime_namespace(),
                    self.src.clone(),
                    "conflux-system".into(),
                ] {
                    let found = conflux_tests::remembered_baseline(
                        &self.client,
                        &records,
                        "Deployment",
                        &self.src,
                        "web",
                    )
                    .await;
                    if found.is_some() {
                        return Some(());
                    }
                }
                None
            },
        )
        .await;
    }

    /// Sets both sources to `v`, remembering when the Kustomization was last asked to reconcile.
    pub async fn change(&self, v: u32) {
        self.write_sources(v).await;
    }

    /// Waits until every copy, trigger and rollout reflects `v`, or panics with what is missing.
    pub async fn wait_converged(&self, v: u32, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let missing = self.missing(v).await;
            if missing.is_empty() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("not converged to {v} after {timeout:?}: {missing:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What does not reflect `v` yet.
    async fn missing(&self, v: u32) -> Vec<String> {
        let want = v.to_string();
        let mut missing = Vec::new();
        for ns in &self.targets {
            let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
            let got = secrets
                .get_opt("fan")
                .await
                .ok()
                .flatten()
                .and_then(|s| s.data?.get("v").map(|b| b.0.clone()));
            if got.as_deref() != Some(want.as_bytes()) {
                missing.push(format!("fan-out copy in {ns}"));
            }
        }
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.targets[0]);
        let copy = cms.get_opt("copy").await.ok().flatten();
        if copy.and_then(|c| c.data?.get("v").cloned()).as_deref() != Some(want.as_str()) {
            missing.push("pull copy".to_owned());
        }
        match self.expected_template_hash().await {
            Some((expected, current)) if Some(&expected) == current.as_ref() => {}
            other => missing.push(format!("rollout (expected, template): {other:?}")),
        }
        if !self.requested_after_last_change().await {
            missing.push("Kustomization requestedAt after the last change".to_owned());
        }
        missing
    }

    /// The hash the Deployment's template should carry for the current ConfigMap, and what it
    /// carries.
    async fn expected_template_hash(&self) -> Option<(String, Option<String>)> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.src);
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.src);
        let d = deployments.get("web").await.ok()?;
        let cm = cms.get("settings").await.ok()?;
        let mut index = ConsumerIndex::new(Options::default());
        index.apply(Workload::from(&d));
        let object = Workload::from(&d).object_ref()?;
        let entry = index.get(&object)?;
        let watch = watch(&entry.consumers, &entry.opt_in, Options::default(), &());
        let hash = content_hash(&watch, |_, name| {
            (name == "settings").then(|| ConfigData::from_config_map(&cm))
        });
        let current = d
            .spec
            .template
            .metadata?
            .annotations?
            .get("conflux.dev/config-hash")
            .cloned();
        Some((hash.hex, current))
    }

    /// Whether the Kustomization's `requestedAt` is later than the ConfigMap's last write.
    async fn requested_after_last_change(&self) -> bool {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.src);
        let Ok(cm) = cms.get("settings").await else {
            return false;
        };
        let written = cm
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f.manager.as_deref() == Some(MANAGER))
            .filter_map(|f| f.time.map(|t| t.0))
            .max();
        let Some(requested) = self.requested_at().await else {
            return false;
        };
        let Ok(requested) = requested.parse::<k8s_openapi::jiff::Timestamp>() else {
            return false;
        };
        // managedFields times have second precision: compare at that precision.
        written.is_some_and(|w| requested.as_second() >= w.as_second())
    }

    async fn requested_at(&self) -> Option<String> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
            "kustomizations",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.src, &ar);
        let k = api.get("app").await.ok()?;
        k.metadata
            .annotations?
            .get("reconcile.fluxcd.io/requestedAt")
            .cloned()
    }

    /// None doubled: at most one rollout and one reconcile request per change (and at least one).
    pub async fn assert_not_doubled(&self, changes: u32) {
        self.assert_no_leak_in_events().await;
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.src);
        let d = deployments.get("web").await.expect("Deployment");
        // The controller-manager counts template changes; only conflux changes the template.
        let revision: u32 = eventually_revision(&deployments).await;
        let rollouts = revision.saturating_sub(1);
        assert!(
            (1..=changes).contains(&rollouts),
            "{rollouts} rollouts for {changes} changes (revision {revision}, {:?})",
            d.metadata.annotations
        );
        // At least one request is proven by `wait_converged` (requestedAt after the last change);
        // Events may be fewer than requests when their own writes fail, never more. A fired
        // change that requested the Kustomization (its only referrer) is one Event on the
        // ConfigMap; a request of the start-up catch-up is one on the Kustomization.
        let requests = self.events("ConfigMap", "settings", "ConfigChanged").await
            + self.events("Kustomization", "app", "ConfigChanged").await;
        assert!(
            requests <= changes,
            "{requests} reconcile requests for {changes} changes"
        );
    }

    /// The Secret leak check over every Event of the world's namespaces.
    async fn assert_no_leak_in_events(&self) {
        for ns in std::iter::once(&self.src).chain(&self.targets) {
            let events: Api<Event> = Api::namespaced(self.client.clone(), ns);
            let list = events
                .list(&ListParams::default())
                .await
                .expect("list events");
            let text = serde_json::to_string(&list.items).expect("JSON");
            conflux_tests::leak::assert_clean(&format!("Events in {ns}"), &text);
        }
    }

    /// Occurrences of Events with `reason` about one object (series counted).
    async fn events(&self, kind: &str, name: &str, reason: &str) -> u32 {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.src);
        let list = events
            .list(&ListParams::default())
            .await
            .expect("list events");
        list.items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u32))
            .sum()
    }
}

/// The fanned-out Secret's data: the value `v` and the leak marker in all its shapes.
fn secret_data(v: u32) -> Value {
    let mut data: serde_json::Map<String, Value> = conflux_tests::leak::string_data()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    data.insert("v".to_owned(), Value::String(v.to_string()));
    Value::Object(data)
}

/// The Deployment's revision once the controller-manager has caught up with its template. After
/// an API server restart the controller-manager reconnects with its own backoff, which on a
/// loaded 2-core machine took over 30 s once: the bound is generous, it only waits.
async fn eventually_revision(deployments: &Api<Deployment>) -> u32 {
    eventually(
        "Deployment revision observed",
        Duration::from_secs(120),
        || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("web").await.ok()?;
                let observed = d.status.as_ref()?.observed_generation? >= d.metadata.generation?;
                let revision = d
                    .metadata
                    .annotations?
                    .get("deployment.kubernetes.io/revision")?
                    .parse()
                    .ok()?;
                observed.then_some(revision)
            }
        },
    )
    .await
}

async fn namespace(client: &Client, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    apply(
        client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await;
}

/// Server-side applies `object` as this suite's field manager.
async fn apply(client: &Client, object: &Value) {
    conflux_tests::objects::apply(client, MANAGER, object).await;
}

/// The ConfigSync CRD (committed in deploy/) and a minimal Kustomization CRD, once per binary.
pub async fn install_crds(client: &Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        for crd in [objects::config_sync_crd(), objects::kustomization_crd()] {
            objects::install_crd(client, MANAGER, &crd).await;
        }
    })
    .await;
}

static APISERVER_ARGV: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// SIGKILLs the cluster's kube-apiserver, remembering its exact command line.
pub fn kill_apiserver(cluster: &conflux_tests::Cluster) {
    let pid_file = cluster.dir().join("kube-apiserver.pid");
    let pid = std::fs::read_to_string(&pid_file).expect("apiserver pid file");
    let pid = pid.trim();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("apiserver cmdline");
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    *APISERVER_ARGV.lock().expect("argv") = argv;
    let status = Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -KILL {pid}");
    // Wait until it is gone, so the port is free for the restart.
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts kube-apiserver again with the same command line (same port, certs and etcd) and waits
/// until it answers `/readyz`.
pub fn start_apiserver(cluster: &conflux_tests::Cluster) {
    let argv = APISERVER_ARGV.lock().expect("argv").clone();
    assert!(!argv.is_empty(), "kill_apiserver first");
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(cluster.dir().join("kube-apiserver.log"))
        .expect("apiserver log");
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("restart kube-apiserver");
    // `cluster.sh down` stops what the pid file names.
    std::fs::write(
        cluster.dir().join("kube-apiserver.pid"),
        child.id().to_string(),
    )
    .expect("pid file");
    std::mem::forget(child);
    let port = argv
        .iter()
        .position(|a| a == "--secure-port")
        .and_then(|i| argv.get(i + 1))
        .expect("--secure-port")
        .clone();
    for _ in 0..600 {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "--cacert"])
            .arg(cluster.dir().join("certs/ca.crt"))
            .arg(format!("https://127.0.0.1:{port}/livez"))
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("kube-apiserver did not come back");
}
