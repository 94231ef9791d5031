//! The cluster, the contenders and the objects the scenarios share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use conflux_benches::audit::{AuditLog, Requests};
use conflux_benches::contender::{Contender, Running, Settled};
use conflux_tests::objects;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::Slot;

/// The field manager of the bench's own writes.
pub const MANAGER: &str = "conflux-peers-bench";

/// What every workload carries so that every reloader takes it: Reloader's and wave's opt-in
/// (conflux reads Reloader's).
pub fn opt_in() -> Value {
    json!({
        "reloader.stakater.com/auto": "true",
        "wave.pusher.com/update-on-config-change": "true",
    })
}

/// The running cluster.
pub struct World {
    pub cluster: &'static conflux_tests::Cluster,
    pub client: Client,
    pub audited: PathBuf,
}

impl World {
    /// Starts the local control plane and installs the CRDs the contenders need: Flux's and Flux
    /// Operator's real ones, and conflux's ConfigSync.
    pub async fn start() -> anyhow::Result<World> {
        let cluster = conflux_tests::cluster();
        let client = cluster.client().await;
        let mut crds = objects::flux_crds();
        crds.push(objects::config_sync_crd());
        for crd in &crds {
            objects::install_crd(&client, MANAGER, crd).await;
        }
        for ns in ["flux-system", "conflux-system"] {
            apply_all(
                &client,
                vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})],
            )
            .await;
        }
        let audited = cluster.kubeconfig_as("audited");
        Ok(World {
            cluster,
            client,
            audited,
        })
    }

    /// Starts `contender` as the audited user, logging to `target/peers/<tag>.log`.
    pub fn start_contender(&self, contender: &Contender, tag: &str) -> anyhow::Result<Running> {
        let dir = crate::target_dir("peers");
        let safe: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        contender.start(
            &self.audited,
            &dir.join(format!("{safe}.d")),
            &dir.join(format!("{safe}.log")),
        )
    }

    /// A reader of the audit log from now on.
    pub fn audit(&self) -> AuditLog {
        AuditLog::at_end(&self.cluster.audit_log())
    }
}

/// The contenders found on this machine.
pub struct Peers {
    pub conflux: Slot,
    pub reloader: Slot,
    pub wave: Slot,
    pub kopy: Slot,
    pub replicator: Slot,
    pub flux_operator: Slot,
    pub kustomize_watch: Slot,
    pub kustomize_nowatch: Slot,
}

impl Peers {
    /// conflux from `CONFLUX_BIN` (or `target/release/conflux`), Flux's from the test ground, the
    /// others from `$CONFLUX_PEERS_CACHE/peers.env` (written by `benches/peers/build.sh`).
    pub fn discover() -> anyhow::Result<Peers> {
        let root = conflux_tests::repo_root();
        let conflux_bin = std::env::var("CONFLUX_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target/release/conflux"));
        let conflux_version = env!("CARGO_PKG_VERSION").to_owned();
        let conflux = Slot {
            name: "conflux".into(),
            contender: if conflux_bin.exists() {
                Ok(conflux_contender(
                    &conflux_bin,
                    &conflux_version,
                    "conflux",
                    &[],
                ))
            } else {
                Err(format!(
                    "{} missing: run `cargo build --release -p conflux-operator`",
                    conflux_bin.display()
                ))
            },
        };
        let cache = std::env::var("CONFLUX_PEERS_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from("/var/tmp/conflux-peers"));
        let env = read_env(&cache.join("peers.env"));
        let flux_bin = flux_bin(&root)?;
        let versions = read_versions(&root.join("hack/cluster/versions.sh"));
        let version = |key: &str| versions.get(key).cloned().unwrap_or_default();

        let peer = |name: &str, key: &str, make: &dyn Fn(PathBuf, String) -> Contender| -> Slot {
            let contender = match env.get(&format!("PEER_{key}_BIN")) {
                Some(path) if Path::new(path).exists() => {
                    // The cache keeps each binary under `<peer>-<version>/`.
                    let version = Path::new(path)
                        .parent()
                        .and_then(|d| d.file_name())
                        .and_then(|d| d.to_str())
                        .and_then(|d| d.rsplit_once("-v"))
                        .map(|(_, v)| format!("v{v}"))
                        .unwrap_or_default();
                    Ok(make(PathBuf::from(path), version))
                }
                _ => Err(format!(
                    "not built here: the Go module proxy does not serve it (benches/peers/build.sh; PEER_{key}_BIN names a binary)"
                )),
            };
            Slot {
                name: name.into(),
                contender,
            }
        };
        let kc = flux_bin.join("bin/kustomize-controller");
        let fo = flux_bin.join("bin/flux-operator");
        Ok(Peers {
            conflux,
            reloader: peer("Reloader", "RELOADER", &reloader),
            wave: peer("wave", "WAVE", &wave),
            kopy: peer("kopy", "KOPY", &kopy),
            replicator: peer("replicator", "REPLICATOR", &replicator),
            flux_operator: Slot {
                name: "Flux Operator".into(),
                contender: Ok(flux_operator(fo, version("FLUX_OPERATOR_VERSION"))),
            },
            kustomize_watch: Slot {
                name: "kustomize-controller (watchers on)".into(),
                contender: Ok(kustomize_controller(
                    kc.clone(),
                    version("KUSTOMIZE_CONTROLLER_VERSION"),
                    true,
                )),
            },
            kustomize_nowatch: Slot {
                name: "kustomize-controller (watchers off)".into(),
                contender: Ok(kustomize_controller(
                    kc,
                    version("KUSTOMIZE_CONTROLLER_VERSION"),
                    false,
                )),
            },
        })
    }

    /// Every slot, in table order.
    pub fn all(&self) -> Vec<&Slot> {
        vec![
            &self.conflux,
            &self.reloader,
            &self.wave,
            &self.kopy,
            &self.replicator,
            &self.flux_operator,
            &self.kustomize_watch,
            &self.kustomize_nowatch,
        ]
    }
}

/// conflux with `extra` flags after its defaults; `name` is its name in the tables.
pub fn conflux_contender(bin: &Path, version: &str, name: &str, extra: &[&str]) -> Contender {
    let mut args: Vec<String> = [
        "run",
        "--controllers=copy,sync,reload,flux-trigger",
        "--metrics-addr=127.0.0.1:{metrics}",
        "--health-addr=127.0.0.1:{health}",
        "--sync-source-namespaces=peers-fan-src",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    Contender {
        name: name.into(),
        version: version.into(),
        program: bin.to_path_buf(),
        args,
        env: vec![("RUNTIME_NAMESPACE".into(), "conflux-system".into())],
        readiness: Some("/readyz".into()),
    }
}

fn reloader(program: PathBuf, version: String) -> Contender {
    Contender {
        name: "Reloader".into(),
        version,
        program,
        // Reloader's chart defaults, with the annotations strategy its docs recommend for GitOps
        // (no env var added to the pod template, so Flux sees no drift).
        // It reads its kubeconfig from KUBECONFIG only, and serves metrics and `/live` on a fixed
        // :9090 (no flag), so no readiness is probed: it counts as settled when it goes quiet.
        args: vec!["--reload-strategy=annotations".into()],
        env: vec![],
        readiness: None,
    }
}

fn wave(program: PathBuf, version: String) -> Contender {
    Contender {
        name: "wave".into(),
        version,
        program,
        // Its chart's defaults; metrics on a fixed :8080, no health endpoint.
        args: vec![
            "--kubeconfig={kubeconfig}".into(),
            "--leader-election=false".into(),
            "--update-rate=1".into(),
            "--update-burst=100".into(),
        ],
        env: vec![],
        readiness: None,
    }
}

fn kopy(program: PathBuf, version: String) -> Contender {
    Contender {
        name: "kopy".into(),
        version,
        program,
        args: vec![
            "--kubeconfig={kubeconfig}".into(),
            "--leader-elect=false".into(),
            "--metrics-bind-address=127.0.0.1:{metrics}".into(),
            "--metrics-secure=false".into(),
            "--health-probe-bind-address=127.0.0.1:{health}".into(),
        ],
        env: vec![],
        readiness: Some("/readyz".into()),
    }
}

fn replicator(program: PathBuf, version: String) -> Contender {
    Contender {
        name: "replicator".into(),
        version,
        program,
        args: vec![
            "-kubeconfig={kubeconfig}".into(),
            "-status-addr=127.0.0.1:{health}".into(),
        ],
        env: vec![],
        readiness: Some("/readyz".into()),
    }
}

fn flux_operator(program: PathBuf, version: String) -> Contender {
    Contender {
        name: "Flux Operator".into(),
        version,
        program,
        args: vec![
            "--metrics-addr=127.0.0.1:{metrics}".into(),
            "--health-addr=127.0.0.1:{health}".into(),
            "--enable-leader-election=false".into(),
            "--storage-path={dir}".into(),
            "--web-server-port=0".into(),
            "--log-encoding=json".into(),
        ],
        // It refuses to start outside FIPS 140-3 mode.
        env: vec![
            ("GODEBUG".into(), "fips140=on".into()),
            ("RUNTIME_NAMESPACE".into(), "flux-system".into()),
        ],
        readiness: Some("/readyz".into()),
    }
}

fn kustomize_controller(program: PathBuf, version: String, watchers: bool) -> Contender {
    let mut args: Vec<String> = vec![
        "--metrics-addr=127.0.0.1:{metrics}".into(),
        "--health-addr=127.0.0.1:{health}".into(),
        "--enable-leader-election=false".into(),
        "--events-addr=".into(),
    ];
    if !watchers {
        args.push("--feature-gates=DisableConfigWatchers=true".into());
    }
    Contender {
        name: if watchers {
            "kustomize-controller (watchers on)"
        } else {
            "kustomize-controller (watchers off)"
        }
        .into(),
        version,
        program,
        args,
        env: vec![("RUNTIME_NAMESPACE".into(), "flux-system".into())],
        readiness: Some("/readyz".into()),
    }
}

fn flux_bin(root: &Path) -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(root.join("hack/cluster.sh"))
        .arg("flux-bin")
        .output()
        .context("hack/cluster.sh flux-bin")?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        .collect()
}

fn read_versions(path: &Path) -> BTreeMap<String, String> {
    read_env(path)
}

/// CPU model and count, for the tables' heading.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |kib| kib as f64 / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {mem:.0} GiB")
}

/// Server-side applies every object, 32 at once.
pub async fn apply_all(client: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| async move {
            objects::apply(client, MANAGER, &object).await
        })
        .await;
}

/// Server-side applies every object as `manager`, 32 at once.
pub async fn apply_all_as(client: &Client, manager: &str, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| async move {
            objects::apply(client, manager, &object).await
        })
        .await;
}

/// Namespaces `names`, with `labels`.
pub async fn namespaces(client: &Client, names: &[String], labels: Value) {
    let objects = names
        .iter()
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}))
        .collect();
    apply_all(client, objects).await;
}

/// A Deployment (no replicas: no kubelet runs pods here; a rollout still makes a ReplicaSet)
/// reading ConfigMap `cm` and Secret `secret` whole, opted in for every reloader.
pub fn workload(
    namespace: &str,
    name: &str,
    cm: Option<&str>,
    secret: Option<&str>,
    scenario: &str,
) -> Value {
    let mut env_from = Vec::new();
    if let Some(cm) = cm {
        env_from.push(json!({"configMapRef": {"name": cm}}));
    }
    if let Some(secret) = secret {
        env_from.push(json!({"secretRef": {"name": secret}}));
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"peers/scenario": scenario},
                     "annotations": opt_in()},
        "spec": {"replicas": 0,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                       "envFrom": env_from}]}}}})
}

/// The Deployments of `scenario`.
pub async fn workloads(client: &Client, scenario: &str) -> Vec<Deployment> {
    let api: Api<Deployment> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("peers/scenario={scenario}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The Deployment's rollout count: `deployment.kubernetes.io/revision` − 1. The deployment
/// controller raises the revision on every pod template change, a return to an earlier template
/// included. (`metadata.generation` would also count metadata annotation changes, which roll
/// nothing.)
pub fn revision_rollouts(d: &Deployment) -> u64 {
    d.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("deployment.kubernetes.io/revision"))
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(1)
        .saturating_sub(1)
}

/// Annotations a contender left on the Deployment: on its metadata (a baseline, a hash) or its
/// pod template (what a rollout writes). The bench's own workloads carry only the opt-ins there.
fn contender_annotations(d: &Deployment) -> (Vec<String>, bool) {
    let opt_in = opt_in();
    let meta: Vec<String> = d
        .metadata
        .annotations
        .iter()
        .flat_map(|a| a.keys())
        .filter(|k| *k != "deployment.kubernetes.io/revision" && opt_in.get(k.as_str()).is_none())
        .cloned()
        .collect();
    let template = d
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .is_some_and(|a| !a.is_empty());
    (meta, template)
}

/// Rollouts made to the Deployments of `scenario` (see [`revision_rollouts`]).
pub async fn rollouts(client: &Client, scenario: &str) -> u64 {
    workloads(client, scenario)
        .await
        .iter()
        .map(revision_rollouts)
        .sum()
}

/// Removes what contenders wrote on the Deployments of `scenario` (their metadata annotations,
/// every pod template annotation), so the next contender starts from the same state; returns how
/// many were changed. Removing a template annotation is one more rollout, made by the bench
/// between contenders: rollouts are counted as differences within one contender's phase. conflux's
/// reload memory goes too: with it, the next conflux's start would be a restart.
pub async fn reset_workloads(client: &Client, scenario: &str, _fresh: &[Value]) -> usize {
    let touched: Vec<(String, String, Value)> = workloads(client, scenario)
        .await
        .iter()
        .filter_map(|d| {
            let (meta, template) = contender_annotations(d);
            if meta.is_empty() && !template {
                return None;
            }
            let nulls: serde_json::Map<String, Value> =
                meta.into_iter().map(|k| (k, Value::Null)).collect();
            let mut patch = json!({"metadata": {"annotations": nulls}});
            if template {
                patch["spec"] = json!({"template": {"metadata": {"annotations": null}}});
            }
            Some((
                d.metadata.namespace.clone().unwrap_or_default(),
                d.metadata.name.clone().unwrap_or_default(),
                patch,
            ))
        })
        .collect();
    let n = touched.len();
    futures::stream::iter(touched)
        .for_each_concurrent(32, |(ns, name, patch)| async move {
            let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            let _ = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        })
        .await;
    // What an earlier conflux remembered would make the next one's start a restart.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(client.clone());
    let memory = kube::api::ListParams::default().labels("conflux.dev/memory=reload");
    if let Ok(list) = secrets.list(&memory).await {
        for secret in list.items {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
            let _ = api.delete(&name, &Default::default()).await;
        }
    }
    n
}

/// Waits until the API server has served no write for 3 s (the controller-manager done).
pub async fn quiet(client: &Client) {
    let _ = conflux_benches::apiserver::settle(
        client,
        Duration::from_secs(3),
        Duration::from_secs(600),
    )
    .await;
}

/// One contender's start-up, measured.
pub struct Start {
    pub running: Running,
    pub settled: Settled,
    pub requests: Requests,
}

/// Starts `contender` and waits until it settles; its start-up requests from the audit log.
pub async fn start_measured(
    world: &World,
    contender: &Contender,
    tag: &str,
) -> anyhow::Result<Start> {
    let mut audit = world.audit();
    let mut running = world.start_contender(contender, tag)?;
    let settled = running.settle(Duration::from_secs(900)).await?;
    // The audit log is written as requests complete; give the last ones a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = audit.take();
    Ok(Start {
        running,
        settled,
        requests,
    })
}

/// Formats an optional duration in seconds.
pub fn secs(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.2}", d.as_secs_f64()))
}

/// `peer / conflux`, as `×N.N`.
pub fn ratio(peer: f64, conflux: f64) -> String {
    if conflux <= 0.0 || !peer.is_finite() || !conflux.is_finite() {
        "–".into()
    } else {
        let r = peer / conflux;
        if r >= 10.0 {
            format!("×{r:.0}")
        } else if r >= 0.1 {
            format!("×{r:.1}")
        } else {
            format!("×{r:.3}")
        }
    }
}
