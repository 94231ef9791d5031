//! Reloader's own load test, S1–S13, ported: stakater/Reloader `test/loadtest` at v1.4.21
//! (commit 392be733e05b8e52c94199263abfd0f7632faab1, `internal/scenarios/scenarios.go`), read and
//! rewritten here, nothing copied. Each scenario makes the objects Reloader's makes, in the same
//! counts, and changes them in the same pattern (the same ticker, targets and values); random
//! choices come from a seeded generator, so every contender gets the same sequence.
//!
//! Each scenario runs once per contender, each time on a fresh cluster (`hack/cluster.sh up`):
//! the contender starts, the scenario's objects are created, the API server goes quiet, the
//! changes run for the scenario's span, the bench waits until every workload's newest rollout
//! came after the last write of every config it reads (or `PEERS_LOADTEST_SETTLE_SECS` ran
//! out), and then the quiet period (`PEERS_QUIET_SECS`) passes with requests still counted.
//!
//! What differs from Reloader's harness, because no kubelet runs here: Reloader's waits for ready
//! Deployments can never end, so the bench waits for the API server to be quiet instead; and what
//! "the pods end up reading" is judged from the newest ReplicaSet (Deployments) or
//! ControllerRevision (StatefulSets, DaemonSets): see [`conflux_benches::rollouts`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use conflux_benches::audit::{self, AuditLog, Requests};
use conflux_benches::contender::Contender;
use conflux_benches::percentile;
use conflux_benches::rollouts::{self, Coalescing, Verdict, WriteKind};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::Slot;

/// The namespace Reloader's harness creates for its scenarios.
const NS: &str = "reloader-test";
/// Reloader's opt-in, the only annotation Reloader's workloads carry (conflux reads it).
const AUTO: &str = "reloader.stakater.com/auto";
/// What Reloader's annotations strategy writes on the pod template (S11 counts it).
const LAST_RELOADED: &str = "reloader.stakater.com/last-reloaded-from";

// ---------------------------------------------------------------------------------------------
// The scenarios, as Reloader defines them

/// A ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ConfigId {
    secret: bool,
    ns: String,
    name: String,
}

fn cm(ns: &str, name: impl Into<String>) -> ConfigId {
    ConfigId {
        secret: false,
        ns: ns.into(),
        name: name.into(),
    }
}

fn secret(ns: &str, name: impl Into<String>) -> ConfigId {
    ConfigId {
        secret: true,
        ns: ns.into(),
        name: name.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
        }
    }
}

/// How a workload's containers read its configs (Reloader's `createDeployment*` helpers).
#[derive(Debug, Clone)]
enum Reads {
    /// `envFrom` each, in one container (`createDeployment`, `…WithSecret`, `…WithBoth`).
    EnvFrom(Vec<ConfigId>),
    /// `createComplexDeployment`: an init container with `envFrom` the primary ConfigMap, a main
    /// container with `env[].valueFrom.configMapKeyRef` of its `key1` and `key2`, a sidecar
    /// mounting it as a volume, and a projected volume of its `key1` and the secondary's `key1`.
    Complex {
        primary: ConfigId,
        secondary: ConfigId,
    },
}

impl Reads {
    fn configs(&self) -> Vec<ConfigId> {
        match self {
            Reads::EnvFrom(configs) => configs.clone(),
            Reads::Complex { primary, secondary } => vec![primary.clone(), secondary.clone()],
        }
    }
}

#[derive(Debug, Clone)]
struct WorkloadSpec {
    kind: Kind,
    ns: String,
    name: String,
    reads: Reads,
    /// `deployment.reloader.stakater.com/pause-period` (S12).
    pause: Option<Duration>,
}

fn workload(kind: Kind, ns: &str, name: String, reads: Reads) -> WorkloadSpec {
    WorkloadSpec {
        kind,
        ns: ns.into(),
        name,
        reads,
        pause: None,
    }
}

/// A config and its first data.
type Config = (ConfigId, BTreeMap<String, String>);

/// The objects a scenario starts with.
#[derive(Debug, Clone, Default)]
struct Setup {
    /// Namespaces besides [`NS`] (S3).
    namespaces: Vec<String>,
    configs: Vec<Config>,
    workloads: Vec<WorkloadSpec>,
}

impl Setup {
    /// What the update loops pick from: the Secrets, then the ConfigMaps, when both exist (S10
    /// alternates); else the ConfigMaps.
    fn groups(&self) -> Vec<Vec<ConfigId>> {
        let (secrets, cms): (Vec<ConfigId>, Vec<ConfigId>) = self
            .configs
            .iter()
            .map(|(id, _)| id.clone())
            .partition(|id| id.secret);
        if secrets.is_empty() {
            vec![cms]
        } else {
            vec![secrets, cms]
        }
    }
}

/// A scenario's objects (each variant one of Reloader's setups).
#[derive(Debug, Clone, Copy)]
enum Objects {
    /// `n` ConfigMaps `<prefix>-cm-<i>` with `key: <value>`, each read (`envFrom`) by Deployment
    /// `<prefix>-deploy-<i>`, in [`NS`] and `extra_namespaces` more (`<NS>-<j>`).
    Pairs {
        prefix: &'static str,
        n: usize,
        value: &'static str,
        extra_namespaces: usize,
        pause_secs: u64,
    },
    /// One ConfigMap `name` with `key: initial`, read (`envFrom`) by the workloads listed: kind,
    /// name prefix, count.
    Shared {
        name: &'static str,
        key: &'static str,
        value: &'static str,
        workloads: &'static [(Kind, &'static str, usize)],
    },
    /// S8: 10 ConfigMaps `large-cm-<i>` with `large-key-1` and `large-key-2` of 100 KiB each.
    Large,
    /// S10: 5 Secrets, 5 ConfigMaps; 5 Deployments read a Secret, 3 a ConfigMap, 2 one of each.
    Mixed,
    /// S13: 5 ConfigMaps (`key1`, `key2`, `config`), 5 complex Deployments.
    Complex,
}

fn data(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// 100 KiB of `a`…`z`, repeated (S8).
fn large_value() -> String {
    (0..100 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect()
}

impl Objects {
    fn build(self) -> Setup {
        let env_from = |configs: Vec<ConfigId>| Reads::EnvFrom(configs);
        let mut s = Setup::default();
        match self {
            Objects::Pairs {
                prefix,
                n,
                value,
                extra_namespaces,
                pause_secs,
            } => {
                s.namespaces = (0..extra_namespaces).map(|j| format!("{NS}-{j}")).collect();
                for ns in std::iter::once(NS.to_owned()).chain(s.namespaces.clone()) {
                    for i in 0..n {
                        let config = cm(&ns, format!("{prefix}-cm-{i}"));
                        s.configs
                            .push((config.clone(), data(&[("key", value.into())])));
                        let name = format!("{prefix}-deploy-{i}");
                        let mut w = workload(Kind::Deployment, &ns, name, env_from(vec![config]));
                        w.pause = (pause_secs > 0).then(|| Duration::from_secs(pause_secs));
                        s.workloads.push(w);
                    }
                }
            }
            Objects::Shared {
                name,
                key,
                value,
                workloads,
            } => {
                s.configs.push((cm(NS, name), data(&[(key, value.into())])));
                for &(kind, prefix, n) in workloads {
                    for i in 0..n {
                        let reads = env_from(vec![cm(NS, name)]);
                        s.workloads
                            .push(workload(kind, NS, format!("{prefix}-{i}"), reads));
                    }
                }
            }
            Objects::Large => {
                let large = large_value();
                for i in 0..10 {
                    let config = cm(NS, format!("large-cm-{i}"));
                    let d = data(&[
                        ("large-key-1", large.clone()),
                        ("large-key-2", large.clone()),
                    ]);
                    s.configs.push((config.clone(), d));
                    let name = format!("large-deploy-{i}");
                    s.workloads
                        .push(workload(Kind::Deployment, NS, name, env_from(vec![config])));
                }
            }
            Objects::Mixed => {
                let sec = |i: usize| secret(NS, format!("mixed-secret-{i}"));
                let map = |i: usize| cm(NS, format!("mixed-cm-{i}"));
                for i in 0..5 {
                    let password = format!("initial-secret-{i}");
                    s.configs.push((sec(i), data(&[("password", password)])));
                }
                for i in 0..5 {
                    let config = format!("initial-config-{i}");
                    s.configs.push((map(i), data(&[("config", config)])));
                }
                let reading = |name: String, configs: Vec<ConfigId>| {
                    workload(Kind::Deployment, NS, name, env_from(configs))
                };
                for i in 0..5 {
                    let name = format!("secret-only-deploy-{i}");
                    s.workloads.push(reading(name, vec![sec(i)]));
                }
                for i in 0..3 {
                    s.workloads
                        .push(reading(format!("cm-only-deploy-{i}"), vec![map(i)]));
                }
                for i in 0..2 {
                    let name = format!("mixed-deploy-{i}");
                    s.workloads.push(reading(name, vec![map(i), sec(i)]));
                }
            }
            Objects::Complex => {
                for i in 0..5 {
                    let d = data(&[
                        ("key1", format!("value1-{i}")),
                        ("key2", format!("value2-{i}")),
                        ("config", format!("config-{i}")),
                    ]);
                    s.configs.push((cm(NS, format!("complex-cm-{i}")), d));
                    let reads = Reads::Complex {
                        primary: cm(NS, format!("complex-cm-{i}")),
                        secondary: cm(NS, format!("complex-cm-{}", (i + 1) % 5)),
                    };
                    let name = format!("complex-deploy-{i}");
                    s.workloads
                        .push(workload(Kind::Deployment, NS, name, reads));
                }
            }
        }
        s
    }
}

/// What one tick of an update loop does.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Get a random config of the next group (groups take turns: S10's Secrets and ConfigMaps,
    /// each with its key), set `keys` to a new value, Update it.
    Data(&'static [&'static str]),
    /// S8: Get a random config, set `large-key-1` to the 100 KiB value with its last 10 bytes
    /// replaced by `-<n>`, Update it.
    Large,
    /// S4: Get a random ConfigMap, set a new annotation (`noop-counter`), Update it.
    NoOp,
    /// S5: create the next Deployment reading the ConfigMap, and once more than `keep` were
    /// created, delete the one created `keep` before.
    Churn { keep: usize },
}

/// An update loop (one of Reloader's goroutines with a ticker).
#[derive(Debug, Clone, Copy)]
struct Loop {
    every: Duration,
    /// Copies of it running at once (S7: 10).
    workers: usize,
    change: Change,
}

const fn every(ms: u64, change: Change) -> Loop {
    Loop {
        every: Duration::from_millis(ms),
        workers: 1,
        change,
    }
}

/// How long the updates run, from Reloader's `duration` (its `--duration`, default 60 s).
#[derive(Debug, Clone, Copy)]
enum Span {
    /// `duration - 5s` (most scenarios).
    Minus5,
    /// `max(duration - 5s, 30s)` (S3, S7).
    AtLeast30,
    /// `duration - 10s` (S11).
    Minus10,
}

impl Span {
    fn of(self, duration: Duration) -> Duration {
        match self {
            Span::Minus5 => duration.saturating_sub(Duration::from_secs(5)),
            Span::AtLeast30 => duration
                .saturating_sub(Duration::from_secs(5))
                .max(Duration::from_secs(30)),
            Span::Minus10 => duration.saturating_sub(Duration::from_secs(10)),
        }
    }
}

/// Reloader's expected reload actions (`ExpectedMetrics.ActionTotal`).
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// This many per successful data update.
    PerUpdate(u64),
    /// S10: Secret updates × (5/5 + 2/5) and ConfigMap updates × (3/5 + 2/5), each rounded down.
    Mixed,
    /// No number (S5, S6, S12).
    Nothing,
}

impl Expect {
    /// From the successful data updates of each group.
    fn of(self, updates: &[u64]) -> Option<u64> {
        match self {
            Expect::PerUpdate(k) => Some(updates.iter().sum::<u64>() * k),
            Expect::Mixed => {
                let secrets = updates.first().copied().unwrap_or(0) as f64;
                let cms = updates.get(1).copied().unwrap_or(0) as f64;
                Some((secrets * 1.4).floor() as u64 + cms.floor() as u64)
            }
            Expect::Nothing => None,
        }
    }
}

/// A scenario of Reloader's load test.
struct Scenario {
    /// Reloader's id (`S1` … `S13`).
    id: &'static str,
    /// Reloader's name for it.
    title: &'static str,
    /// What Reloader's scenario does and checks, for the table's heading.
    reloader: &'static str,
    objects: Objects,
    loops: &'static [Loop],
    span: Span,
    /// S6: the contender is restarted (SIGTERM, as a pod deletion) this long after the updates
    /// start.
    restart_after_secs: u64,
    expected: Expect,
    /// S11: Reloader also runs with its default strategy, `env-vars`.
    env_vars_too: bool,
}

const fn pairs(prefix: &'static str, n: usize, value: &'static str) -> Objects {
    Objects::Pairs {
        prefix,
        n,
        value,
        extra_namespaces: 0,
        pause_secs: 0,
    }
}

const KEY: Change = Change::Data(&["key"]);
const CONFIG: Change = Change::Data(&["config"]);

const SCENARIOS: &[Scenario] = &[
    Scenario {
        id: "S1",
        title: "burst updates",
        reloader: "10 ConfigMaps, 10 Deployments (one each, envFrom); every 100 ms a random ConfigMap gets a new value; expects one reload per update",
        objects: pairs("burst", 10, "initial-value"),
        loops: &[every(100, KEY)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(1),
        env_vars_too: false,
    },
    Scenario {
        id: "S2",
        title: "fan-out",
        reloader: "1 ConfigMap read by 50 Deployments; it gets a new value every 5 s; expects 50 reloads per update",
        objects: Objects::Shared {
            name: "shared-cm",
            key: "config",
            value: "initial",
            workloads: &[(Kind::Deployment, "fanout-deploy", 50)],
        },
        loops: &[every(5000, CONFIG)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(50),
        env_vars_too: false,
    },
    Scenario {
        id: "S3",
        title: "high cardinality",
        reloader: "11 namespaces with 20 ConfigMaps and 20 Deployments (one each) in each; every 200 ms a random ConfigMap in a random namespace gets a new value, for at least 30 s; expects one reload per update",
        objects: Objects::Pairs {
            prefix: "hc",
            n: 20,
            value: "value",
            extra_namespaces: 10,
            pause_secs: 0,
        },
        loops: &[every(200, KEY)],
        span: Span::AtLeast30,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(1),
        env_vars_too: false,
    },
    Scenario {
        id: "S4",
        title: "no-op updates",
        reloader: "10 ConfigMaps, 10 Deployments (one each); every 100 ms a random ConfigMap gets a new annotation, its data unchanged; expects no reload",
        objects: pairs("noop", 10, "static-value"),
        loops: &[every(100, Change::NoOp)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(0),
        env_vars_too: false,
    },
    Scenario {
        id: "S5",
        title: "workload churn",
        reloader: "1 ConfigMap; every 500 ms a new Deployment reading it is created and the one created 10 before is deleted; every 2 s the ConfigMap gets a new value; checks errors and goroutines, expects no number",
        objects: Objects::Shared {
            name: "churn-cm",
            key: "key",
            value: "value",
            workloads: &[],
        },
        loops: &[every(500, Change::Churn { keep: 10 }), every(2000, KEY)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::Nothing,
        env_vars_too: false,
    },
    Scenario {
        id: "S6",
        title: "controller restart",
        reloader: "20 ConfigMaps, 20 Deployments (one each); every 200 ms a random ConfigMap gets a new value; the controller's pod is deleted 20 s in; checks that its metrics survive, expects no number",
        objects: pairs("restart", 20, "initial"),
        loops: &[every(200, KEY)],
        span: Span::Minus5,
        restart_after_secs: 20,
        expected: Expect::Nothing,
        env_vars_too: false,
    },
    Scenario {
        id: "S7",
        title: "API pressure",
        reloader: "50 ConfigMaps, 50 Deployments (one each); 10 concurrent loops each give a random ConfigMap a new value every 100 ms, for at least 30 s; expects one reload per update",
        objects: pairs("api", 50, "value"),
        loops: &[Loop {
            every: Duration::from_millis(100),
            workers: 10,
            change: KEY,
        }],
        span: Span::AtLeast30,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(1),
        env_vars_too: false,
    },
    Scenario {
        id: "S8",
        title: "large objects",
        reloader: "10 ConfigMaps of two 100 KiB values, 10 Deployments (one each); every 2 s a random ConfigMap's first value changes in its last 10 bytes; expects one reload per update",
        objects: Objects::Large,
        loops: &[every(2000, Change::Large)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(1),
        env_vars_too: false,
    },
    Scenario {
        id: "S9",
        title: "all workload kinds",
        reloader: "1 ConfigMap read by 5 Deployments, 3 StatefulSets and 2 DaemonSets; it gets a new value every 5 s; expects 10 reloads per update",
        objects: Objects::Shared {
            name: "multi-type-cm",
            key: "config",
            value: "initial",
            workloads: &[
                (Kind::Deployment, "multi-deploy", 5),
                (Kind::StatefulSet, "multi-sts", 3),
                (Kind::DaemonSet, "multi-ds", 2),
            ],
        },
        loops: &[every(5000, CONFIG)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(10),
        env_vars_too: false,
    },
    Scenario {
        id: "S10",
        title: "Secrets and mixed",
        reloader: "5 Secrets, 5 ConfigMaps; 5 Deployments read a Secret, 3 a ConfigMap, 2 one of each; every 500 ms a random Secret and a random ConfigMap take turns getting a new value; expects 1.4 reloads per Secret update and 1 per ConfigMap update",
        objects: Objects::Mixed,
        loops: &[every(500, Change::Data(&["password", "config"]))],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::Mixed,
        env_vars_too: false,
    },
    Scenario {
        id: "S11",
        title: "annotation strategy",
        reloader: "a second Reloader with --reload-strategy=annotations beside the default one; 10 ConfigMaps, 10 Deployments (one each); every 500 ms a random ConfigMap gets a new value; expects one reload per update and counts the Deployments whose template carries last-reloaded-from",
        objects: pairs("annot", 10, "initial-value"),
        loops: &[every(500, KEY)],
        span: Span::Minus10,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(1),
        env_vars_too: true,
    },
    Scenario {
        id: "S12",
        title: "pause and resume",
        reloader: "10 ConfigMaps, 10 Deployments (one each) with pause-period 15s; every 2 s a random ConfigMap gets a new value; expects reloads well below updates",
        objects: Objects::Pairs {
            prefix: "pause",
            n: 10,
            value: "initial-value",
            extra_namespaces: 0,
            pause_secs: 15,
        },
        loops: &[every(2000, KEY)],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::Nothing,
        env_vars_too: false,
    },
    Scenario {
        id: "S13",
        title: "complex references",
        reloader: "5 ConfigMaps (key1, key2, config); 5 Deployments each read ConfigMap i (init container envFrom, env valueFrom key1 and key2, a volume, a projected key1) and ConfigMap i+1 (projected key1); every 2 s a random ConfigMap gets new key1 and config; expects 2 reloads per update",
        objects: Objects::Complex,
        loops: &[every(2000, Change::Data(&["key1", "config"]))],
        span: Span::Minus5,
        restart_after_secs: 0,
        expected: Expect::PerUpdate(2),
        env_vars_too: false,
    },
];

// ---------------------------------------------------------------------------------------------
// Manifests (Reloader's `createDeployment`, `createStatefulSet`, `createDaemonSet`,
// `createDeploymentWithPause`, `createComplexDeployment`)

fn resources() -> Value {
    json!({"requests": {"cpu": "1m", "memory": "4Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}})
}

fn container(name: &str, command: &str) -> Value {
    json!({"name": name, "image": "gcr.io/google-containers/busybox:1.27",
           "command": ["sh", "-c", command], "resources": resources()})
}

fn env_from(config: &ConfigId) -> Value {
    if config.secret {
        json!({"secretRef": {"name": config.name}})
    } else {
        json!({"configMapRef": {"name": config.name}})
    }
}

fn pod_spec(reads: &Reads) -> Value {
    match reads {
        Reads::EnvFrom(configs) => {
            let mut app = container("app", "sleep 999999999");
            app["envFrom"] = configs.iter().map(env_from).collect();
            json!({"terminationGracePeriodSeconds": 0, "containers": [app]})
        }
        Reads::Complex { primary, secondary } => {
            let mut init = container("init", "echo Init done");
            init["envFrom"] = json!([env_from(primary)]);
            let mut main = container("main", "sleep 999999999");
            let key_ref =
                |key: &str| json!({"configMapKeyRef": {"name": primary.name, "key": key}});
            main["env"] = json!([{"name": "CONFIG_KEY1", "valueFrom": key_ref("key1")},
                                 {"name": "CONFIG_KEY2", "valueFrom": key_ref("key2")}]);
            let mut sidecar = container("sidecar", "sleep 999999999");
            sidecar["volumeMounts"] = json!([{"name": "config-volume", "mountPath": "/etc/config"},
                                             {"name": "projected-volume", "mountPath": "/etc/projected"}]);
            let projection = |config: &ConfigId, path: &str| json!({"configMap": {"name": config.name, "items": [{"key": "key1", "path": path}]}});
            json!({"terminationGracePeriodSeconds": 0,
                   "initContainers": [init], "containers": [main, sidecar],
                   "volumes": [{"name": "config-volume", "configMap": {"name": primary.name}},
                               {"name": "projected-volume", "projected": {"sources": [
                                   projection(primary, "primary-key1"), projection(secondary, "secondary-key1")]}}]})
        }
    }
}

fn manifest(w: &WorkloadSpec) -> Value {
    let mut annotations = json!({AUTO: "true"});
    if let Some(pause) = w.pause {
        annotations["deployment.reloader.stakater.com/pause-period"] =
            json!(format!("{}s", pause.as_secs()));
    }
    let template = json!({"metadata": {"labels": {"app": w.name}}, "spec": pod_spec(&w.reads)});
    let selector = json!({"matchLabels": {"app": w.name}});
    let spec = match w.kind {
        Kind::Deployment => json!({"replicas": 1, "selector": selector, "template": template,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}}),
        Kind::StatefulSet => {
            json!({"replicas": 1, "serviceName": w.name, "selector": selector, "template": template})
        }
        Kind::DaemonSet => {
            let mut template = template;
            template["spec"]["tolerations"] = json!([
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}]);
            json!({"selector": selector, "template": template})
        }
    };
    json!({"apiVersion": "apps/v1", "kind": w.kind.name(),
           "metadata": {"name": w.name, "namespace": w.ns, "annotations": annotations},
           "spec": spec})
}

// ---------------------------------------------------------------------------------------------
// What happened: writes, workloads, rollouts

/// A seeded generator (splitmix64), so every contender gets the same choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

#[derive(Debug, Clone)]
struct WorkloadRecord {
    spec: WorkloadSpec,
    created_rv: u64,
    deleted_at: Option<Instant>,
}

/// Everything one measurement records, shared by its tasks.
struct Record {
    t0: Instant,
    configs: Vec<ConfigId>,
    writes: Mutex<Vec<rollouts::Write>>,
    /// Successful data writes per loop group (Reloader's update counters).
    data_writes: Vec<AtomicU64>,
    workloads: Mutex<Vec<WorkloadRecord>>,
    rollouts: Mutex<Vec<Seen>>,
    /// Pod template changes of the workloads (their creation first).
    templates: Mutex<Vec<Seen>>,
    /// The resourceVersion of each workload's deletion, from the watch's `DELETED` event: a
    /// Deployment's DELETE is answered with a `Status`, which carries none.
    deletions: Mutex<HashMap<(Kind, String, String), u64>>,
    counter: AtomicU64,
}

/// A rollout seen by a watch, by owner.
#[derive(Debug, Clone)]
struct Seen {
    kind: Kind,
    ns: String,
    name: String,
    at: Instant,
    rv: u64,
}

fn rv_of<K: Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl Record {
    fn new(configs: Vec<ConfigId>, groups: usize) -> Record {
        Record {
            t0: Instant::now(),
            configs,
            writes: Mutex::default(),
            data_writes: (0..groups.max(1)).map(|_| AtomicU64::new(0)).collect(),
            workloads: Mutex::default(),
            rollouts: Mutex::default(),
            templates: Mutex::default(),
            deletions: Mutex::default(),
            counter: AtomicU64::new(0),
        }
    }

    fn write(&self, config: &ConfigId, rv: u64, kind: WriteKind) {
        let Some(index) = self.configs.iter().position(|c| c == config) else {
            return;
        };
        let at = self.t0.elapsed();
        lock(&self.writes).push(rollouts::Write {
            config: index,
            at,
            rv,
            kind,
        });
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// The pure view of what happened, for [`rollouts::judge`].
    fn judge(&self, coalescing: Coalescing) -> Verdict {
        let workloads = lock(&self.workloads).clone();
        let index: HashMap<(Kind, &str, &str), usize> = workloads
            .iter()
            .enumerate()
            .map(|(i, w)| ((w.spec.kind, w.spec.ns.as_str(), w.spec.name.as_str()), i))
            .collect();
        let pure = |seen: &Mutex<Vec<Seen>>| -> Vec<rollouts::Rollout> {
            lock(seen)
                .iter()
                .filter_map(|s| {
                    let workload = *index.get(&(s.kind, s.ns.as_str(), s.name.as_str()))?;
                    Some(rollouts::Rollout {
                        workload,
                        at: s.at.saturating_duration_since(self.t0),
                        rv: s.rv,
                    })
                })
                .collect()
        };
        let deletions = lock(&self.deletions).clone();
        let reads = workloads
            .iter()
            .map(|w| rollouts::Workload {
                reads: w
                    .spec
                    .reads
                    .configs()
                    .iter()
                    .filter_map(|c| self.configs.iter().position(|x| x == c))
                    .collect(),
                created_rv: w.created_rv,
                // The watch's revision; if it never saw the deletion, every later write counts as
                // the deleted workload's.
                deleted_rv: w.deleted_at.map(|_| {
                    deletions
                        .get(&(w.spec.kind, w.spec.ns.clone(), w.spec.name.clone()))
                        .copied()
                        .unwrap_or(u64::MAX)
                }),
                deleted_at: w.deleted_at.map(|at| at.saturating_duration_since(self.t0)),
                pause: w.spec.pause,
            })
            .collect::<Vec<_>>();
        let writes = lock(&self.writes).clone();
        rollouts::judge(
            &reads,
            &writes,
            &pure(&self.rollouts),
            &pure(&self.templates),
            coalescing,
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Watches ReplicaSets (Deployments' rollouts) and ControllerRevisions (StatefulSets' and
/// DaemonSets'), recording each new one, and each ControllerRevision taken up again (a template
/// returning to an earlier one), by owner. Returns once both watches have listed.
async fn watch_rollouts(client: &Client, record: &Arc<Record>) -> Vec<tokio::task::JoinHandle<()>> {
    let listed = Arc::new(AtomicUsize::new(0));
    let owner =
        |refs: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.into_iter().flatten().find_map(|o| {
                let kind = match o.kind.as_str() {
                    "Deployment" => Kind::Deployment,
                    "StatefulSet" => Kind::StatefulSet,
                    "DaemonSet" => Kind::DaemonSet,
                    _ => return None,
                };
                Some((kind, o.name.clone()))
            })
        };
    let rs = {
        let (record, listed) = (record.clone(), listed.clone());
        let api: Api<ReplicaSet> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut known = HashSet::new();
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        listed.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(watcher::Event::Apply(rs) | watcher::Event::InitApply(rs)) => {
                        if !known.insert(rs.uid().unwrap_or_default()) {
                            continue;
                        }
                        if let Some((kind, name)) = owner(rs.metadata.owner_references.as_ref()) {
                            lock(&record.rollouts).push(Seen {
                                kind,
                                ns: rs.namespace().unwrap_or_default(),
                                name,
                                at: Instant::now(),
                                rv: rv_of(&rs),
                            });
                        }
                    }
                    _ => {}
                }
            }
        })
    };
    let cr = {
        let (record, listed) = (record.clone(), listed.clone());
        let api: Api<ControllerRevision> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut revisions: HashMap<String, Option<i64>> = HashMap::new();
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        listed.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(watcher::Event::Apply(cr) | watcher::Event::InitApply(cr)) => {
                        let uid = cr.uid().unwrap_or_default();
                        if revisions.insert(uid, cr.revision) == Some(cr.revision) {
                            continue;
                        }
                        if let Some((kind, name)) = owner(cr.metadata.owner_references.as_ref()) {
                            lock(&record.rollouts).push(Seen {
                                kind,
                                ns: cr.namespace().unwrap_or_default(),
                                name,
                                at: Instant::now(),
                                rv: rv_of(&cr),
                            });
                        }
                    }
                    _ => {}
                }
            }
        })
    };
    let templates = vec![
        watch_templates::<Deployment>(client, record, Kind::Deployment, &listed),
        watch_templates::<StatefulSet>(client, record, Kind::StatefulSet, &listed),
        watch_templates::<DaemonSet>(client, record, Kind::DaemonSet, &listed),
    ];
    while listed.load(Ordering::Relaxed) < 5 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut tasks = vec![rs, cr];
    tasks.extend(templates);
    tasks
}

/// Records each new pod template of the workloads of `kind` (a hash of `spec.template`), the
/// creation included; counts `listed` up once listed.
fn watch_templates<K>(
    client: &Client,
    record: &Arc<Record>,
    kind: Kind,
    listed: &Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let (record, listed) = (record.clone(), listed.clone());
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut templates: HashMap<String, u64> = HashMap::new();
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    listed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    let template = serde_json::to_value(&object)
                        .ok()
                        .and_then(|v| v.pointer("/spec/template").map(Value::to_string))
                        .unwrap_or_default();
                    let mut hasher = std::collections::hash_map::DefaultHasher::new();
                    std::hash::Hash::hash(&template, &mut hasher);
                    let hash = std::hash::Hasher::finish(&hasher);
                    let uid = object.meta().uid.clone().unwrap_or_default();
                    if templates.insert(uid, hash) == Some(hash) {
                        continue;
                    }
                    lock(&record.templates).push(Seen {
                        kind,
                        ns: object.meta().namespace.clone().unwrap_or_default(),
                        name: object.meta().name.clone().unwrap_or_default(),
                        at: Instant::now(),
                        rv: rv_of(&object),
                    });
                }
                // A DELETED event's object carries the deletion's revision.
                Ok(watcher::Event::Delete(object)) => {
                    let key = (
                        kind,
                        object.meta().namespace.clone().unwrap_or_default(),
                        object.meta().name.clone().unwrap_or_default(),
                    );
                    lock(&record.deletions).insert(key, rv_of(&object));
                }
                _ => {}
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Writing

async fn create<K>(client: &Client, ns: &str, object: Value) -> anyhow::Result<u64>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).context("manifest")?;
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let created = api.create(&PostParams::default(), &object).await?;
    Ok(rv_of(&created))
}

async fn create_config(
    client: &Client,
    id: &ConfigId,
    data: &BTreeMap<String, String>,
) -> anyhow::Result<u64> {
    let meta = json!({"name": id.name, "namespace": id.ns});
    if id.secret {
        create::<Secret>(
            client,
            &id.ns,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": data}),
        )
        .await
    } else {
        create::<ConfigMap>(
            client,
            &id.ns,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}),
        )
        .await
    }
}

async fn create_workload(client: &Client, w: &WorkloadSpec) -> anyhow::Result<u64> {
    let m = manifest(w);
    match w.kind {
        Kind::Deployment => create::<Deployment>(client, &w.ns, m).await,
        Kind::StatefulSet => create::<StatefulSet>(client, &w.ns, m).await,
        Kind::DaemonSet => create::<DaemonSet>(client, &w.ns, m).await,
    }
}

/// Reloader's update: Get, change, Update (a conflict counts as a failed update, as there).
async fn update(client: &Client, id: &ConfigId, keys: &[&str], value: &str) -> anyhow::Result<u64> {
    if id.secret {
        let api: Api<Secret> = Api::namespaced(client.clone(), &id.ns);
        let mut s = api.get(&id.name).await?;
        s.string_data = Some(
            keys.iter()
                .map(|k| (k.to_string(), value.to_owned()))
                .collect(),
        );
        Ok(rv_of(
            &api.replace(&id.name, &PostParams::default(), &s).await?,
        ))
    } else {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &id.ns);
        let mut c = api.get(&id.name).await?;
        let data = c.data.get_or_insert_with(Default::default);
        for key in keys {
            data.insert(key.to_string(), value.to_owned());
        }
        Ok(rv_of(
            &api.replace(&id.name, &PostParams::default(), &c).await?,
        ))
    }
}

async fn annotate(client: &Client, id: &ConfigId, n: u64) -> anyhow::Result<u64> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &id.ns);
    let mut c = api.get(&id.name).await?;
    c.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("noop-counter".into(), n.to_string());
    Ok(rv_of(
        &api.replace(&id.name, &PostParams::default(), &c).await?,
    ))
}

/// Runs one loop until `end` (each tick checks the time first, as Reloader's `for
/// time.Now().Before(endTime)`; missed ticks are skipped, as a Go ticker drops them).
async fn run_loop(
    client: Client,
    record: Arc<Record>,
    groups: Vec<Vec<ConfigId>>,
    l: Loop,
    worker: usize,
    seed: u64,
    end: Instant,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + l.every, l.every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut rng = Rng::new(seed ^ ((worker as u64 + 1) << 32));
    let large = large_value();
    let mut turn = 0usize;
    let mut created = 0usize;
    while Instant::now() < end {
        ticker.tick().await;
        let g = turn % groups.len();
        turn += 1;
        let Some(id) = groups[g].get(rng.below(groups[g].len())) else {
            continue;
        };
        let n = record.next();
        match l.change {
            Change::Data(keys) => {
                // With groups taking turns, each group has its key (S10: Secrets `password`,
                // ConfigMaps `config`); otherwise every key is set.
                let keys = if groups.len() > 1 {
                    &keys[g.min(keys.len() - 1)..=g.min(keys.len() - 1)]
                } else {
                    keys
                };
                if let Ok(rv) = update(&client, id, keys, &format!("update-{worker}-{n}")).await {
                    record.write(id, rv, WriteKind::Data);
                    record.data_writes[g].fetch_add(1, Ordering::Relaxed);
                }
            }
            Change::Large => {
                let value = format!("{}-{n}", &large[..large.len() - 10]);
                if let Ok(rv) = update(&client, id, &["large-key-1"], &value).await {
                    record.write(id, rv, WriteKind::Data);
                    record.data_writes[g].fetch_add(1, Ordering::Relaxed);
                }
            }
            Change::NoOp => {
                if let Ok(rv) = annotate(&client, id, n).await {
                    record.write(id, rv, WriteKind::NoOp);
                }
            }
            Change::Churn { keep } => {
                let reads = Reads::EnvFrom(vec![id.clone()]);
                let spec = workload(
                    Kind::Deployment,
                    NS,
                    format!("churn-deploy-{created}"),
                    reads,
                );
                if let Ok(rv) = create_workload(&client, &spec).await {
                    lock(&record.workloads).push(WorkloadRecord {
                        spec,
                        created_rv: rv,
                        deleted_at: None,
                    });
                    created += 1;
                }
                if created > keep {
                    let name = format!("churn-deploy-{}", created - keep);
                    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
                    if api.delete(&name, &DeleteParams::default()).await.is_ok()
                        && let Some(w) = lock(&record.workloads)
                            .iter_mut()
                            .find(|w| w.spec.name == name)
                    {
                        w.deleted_at = Some(Instant::now());
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running

/// The loadtest's settings (environment, see `main.rs`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Scenario ids to run, in order.
    pub scenarios: Vec<String>,
    /// Reloader's `--duration`.
    pub duration: Duration,
    /// The quiet period after the changes settle.
    pub quiet: Duration,
    /// The ideal reloader's coalescing.
    pub coalescing: Coalescing,
    /// How long after the last change the bench waits for every final value (plus the pause).
    pub settle: Duration,
    /// Seed of the random choices.
    pub seed: u64,
    /// How many earlier runs may still be in their quiet period while the next one runs (0: one
    /// run at a time). See [`isolate`].
    pub overlap: usize,
}

impl Options {
    pub fn from_env(quiet: Duration) -> Options {
        let ids = std::env::var("PEERS_LOADTEST").unwrap_or_default();
        let scenarios = if ids.trim().is_empty() || ids.trim() == "all" {
            SCENARIOS.iter().map(|s| s.id.to_owned()).collect()
        } else {
            ids.split(',')
                .map(|s| s.trim().to_uppercase())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let num = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Options {
            scenarios,
            duration: Duration::from_secs(num("PEERS_LOADTEST_DURATION_SECS", 60)),
            quiet,
            coalescing: Coalescing {
                window: Duration::from_millis(num("PEERS_LOADTEST_WINDOW_MS", 2000)),
                max: Duration::from_secs(num("PEERS_LOADTEST_WINDOW_MAX_SECS", 300)),
            },
            settle: Duration::from_secs(num("PEERS_LOADTEST_SETTLE_SECS", 120)),
            seed: num("PEERS_LOADTEST_SEED", 20_260_807),
            overlap: num("PEERS_LOADTEST_OVERLAP", 0) as usize,
        }
    }
}

/// One measurement's numbers.
struct Row {
    name: String,
    verdict: Verdict,
    data_writes: u64,
    expected: Option<u64>,
    last_reloaded: Option<(usize, usize)>,
    requests: [Requests; 3],
    peak_rss: f64,
    cpu: f64,
}

/// The contenders of a scenario: conflux with the reload controller alone, Reloader with the
/// annotations strategy, and (S11) Reloader with its default strategy too.
fn contenders(peers: &crate::world::Peers, scenario: &Scenario) -> Vec<Slot> {
    let mut conflux = peers.conflux.clone();
    if let Ok(c) = &mut conflux.contender {
        c.args
            .retain(|a| !a.starts_with("--sync-source-namespaces"));
        for arg in &mut c.args {
            if arg.starts_with("--controllers=") {
                *arg = "--controllers=reload".into();
            }
        }
    }
    let mut reloader = peers.reloader.clone();
    reloader.name = "Reloader (annotations)".into();
    if let Ok(c) = &mut reloader.contender {
        c.name = reloader.name.clone();
    }
    let mut slots = vec![conflux, reloader];
    if scenario.env_vars_too {
        let mut env = peers.reloader.clone();
        env.name = "Reloader (env-vars)".into();
        if let Ok(c) = &mut env.contender {
            c.name = env.name.clone();
            c.args.retain(|a| !a.starts_with("--reload-strategy"));
        }
        slots.push(env);
    }
    slots
}

fn safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

async fn measure(
    scenario: &'static Scenario,
    contender: Contender,
    name: String,
    options: Options,
    active: OwnedSemaphorePermit,
) -> anyhow::Result<Row> {
    let dir = crate::target_dir("peers/loadtest").join(format!("{}-{}", scenario.id, safe(&name)));
    let cluster = {
        let cluster_dir = dir.join("cluster");
        tokio::task::spawn_blocking(move || conflux_tests::fresh_cluster(&cluster_dir))
            .await?
            .map_err(|e| anyhow::anyhow!(e))?
    };
    let result = async {
        // Reloader binds a fixed port, so with runs overlapping it gets a network of its own.
        let (contender, isolated) = if options.overlap > 0 && name.starts_with("Reloader") {
            let (wrapped, isolated) = isolate(&contender, &cluster, &dir).await?;
            (wrapped, Some(isolated))
        } else {
            (contender, None)
        };
        let row = measure_on(
            &cluster, &dir, scenario, &contender, &name, &options, active,
        )
        .await;
        drop(isolated);
        row
    }
    .await;
    cluster.down();
    // The cluster's logs stay; its etcd data goes.
    let _ = std::fs::remove_dir_all(cluster.dir().join("etcd-data"));
    result
}

/// A contender in a network namespace of its own, reaching the API server through a Unix socket.
///
/// Reloader serves its metrics on a fixed `:9090` (no flag) and exits when the port is taken, so
/// when runs overlap (`PEERS_LOADTEST_OVERLAP`, one run's quiet period beside the next runs) two
/// Reloaders could not run at once. Inside `unshare -n` only loopback exists: `socat` there listens
/// on the API server's loopback port and forwards to a Unix socket in the run's directory, where a
/// second `socat` outside forwards to the API server. TLS and the token pass through untouched, so
/// the audit log counts the same requests; the process is still the contender's own (`unshare` and
/// `sh` exec it), so its RSS and CPU are read as before.
struct Isolated {
    forwarder: std::process::Child,
    socket: PathBuf,
}

/// Run inside the new network namespace: loopback up, the forwarder listening, then the contender.
const INSIDE: &str = r#"sock=$1; port=$2; shift 2
ip link set lo up || exit 1
socat TCP-LISTEN:"$port",bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$sock" &
i=0
until socat -u /dev/null TCP:127.0.0.1:"$port" 2>/dev/null; do
  i=$((i+1)); [ "$i" -gt 200 ] && { echo "isolate: no forwarder on $port" >&2; exit 1; }
  sleep 0.05
done
exec "$@""#;

async fn isolate(
    contender: &Contender,
    cluster: &conflux_tests::Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<(Contender, Isolated)> {
    let kubeconfig = std::fs::read_to_string(cluster.kubeconfig())?;
    let port: u16 = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .and_then(|p| p.trim().parse().ok())
        .context("no loopback API server port in the cluster's kubeconfig")?;
    let socket = dir.join("api.sock");
    let _ = std::fs::remove_file(&socket);
    let forwarder = std::process::Command::new("socat")
        .arg(format!("UNIX-LISTEN:{},fork", socket.display()))
        .arg(format!("TCP:127.0.0.1:{port}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting socat (PEERS_LOADTEST_OVERLAP needs socat and unshare)")?;
    conflux_tests::reap_with_this_process(forwarder.id());
    let isolated = Isolated {
        forwarder,
        socket: socket.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "socat made no {}",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut args: Vec<String> = ["-n", "--", "sh", "-c", INSIDE, "sh"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.push(socket.display().to_string());
    args.push(port.to_string());
    args.push(contender.program.display().to_string());
    args.extend(contender.args.iter().cloned());
    let wrapped = Contender {
        program: "unshare".into(),
        args,
        ..contender.clone()
    };
    Ok((wrapped, isolated))
}

impl Drop for Isolated {
    fn drop(&mut self) {
        let _ = self.forwarder.kill();
        let _ = self.forwarder.wait();
        // The forwarder inside outlives the contender it was started beside.
        let _ = std::process::Command::new("pkill")
            .arg("-f")
            .arg(format!("UNIX-CONNECT:{}", self.socket.display()))
            .status();
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn measure_on(
    cluster: &conflux_tests::Cluster,
    dir: &std::path::Path,
    scenario: &Scenario,
    contender: &Contender,
    name: &str,
    options: &Options,
    active: OwnedSemaphorePermit,
) -> anyhow::Result<Row> {
    let client = cluster.client().await;
    let setup = scenario.objects.build();
    let groups = setup.groups();
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in ["conflux-system", NS] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("namespace {ns}"))?;
    }
    let record = Arc::new(Record::new(
        setup.configs.iter().map(|(id, _)| id.clone()).collect(),
        groups.len(),
    ));
    let watches = watch_rollouts(&client, &record).await;

    // Start-up, then the scenario's objects, created one by one as Reloader's scenarios do.
    let audited = cluster.kubeconfig_as("audited");
    let mut audit = AuditLog::at_end(&cluster.audit_log());
    let start = |tag: &str| {
        contender.start(
            &audited,
            &dir.join(format!("{tag}.d")),
            &dir.join(format!("{tag}.log")),
        )
    };
    let mut running = start("contender")?;
    running.settle(Duration::from_secs(300)).await?;
    let startup = audit.take();
    for ns in &setup.namespaces {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("namespace {ns}"))?;
    }
    for (id, data) in &setup.configs {
        let rv = create_config(&client, id, data)
            .await
            .with_context(|| format!("creating {id:?}"))?;
        record.write(id, rv, WriteKind::Create);
    }
    for spec in &setup.workloads {
        let rv = create_workload(&client, spec)
            .await
            .with_context(|| format!("creating {} {}", spec.kind.name(), spec.name))?;
        lock(&record.workloads).push(WorkloadRecord {
            spec: spec.clone(),
            created_rv: rv,
            deleted_at: None,
        });
    }
    crate::world::quiet(&client).await;

    // The changes.
    let span = scenario.span.of(options.duration);
    let end = Instant::now() + span;
    let seed = options.seed
        ^ scenario
            .id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    let mut tasks = Vec::new();
    for (i, l) in scenario.loops.iter().enumerate() {
        for worker in 0..l.workers {
            tasks.push(tokio::spawn(run_loop(
                client.clone(),
                record.clone(),
                groups.clone(),
                *l,
                worker + 100 * i,
                seed,
                end,
            )));
        }
    }
    let mut peak_rss = 0f64;
    let mut cpu = 0f64;
    if scenario.restart_after_secs > 0 {
        tokio::time::sleep(Duration::from_secs(scenario.restart_after_secs)).await;
        cpu += running.cpu_seconds();
        // A pod deletion: SIGTERM, 30 s of grace; then the replacement starts.
        peak_rss = peak_rss.max(running.terminate(Duration::from_secs(30)).await);
        running = start("contender-restarted")?;
    }
    for task in tasks {
        let _ = task.await;
    }

    // Until every final value is reached and no rollout came for 5 s, or the settle time is out.
    let max_pause = setup
        .workloads
        .iter()
        .filter_map(|w| w.pause)
        .max()
        .unwrap_or_default();
    let deadline = Instant::now() + options.settle + max_pause;
    let mut last_count = usize::MAX;
    let mut stable_since = Instant::now();
    while Instant::now() < deadline {
        running.check_alive()?;
        let count = lock(&record.rollouts).len();
        if count != last_count {
            last_count = count;
            stable_since = Instant::now();
        }
        let v = record.judge(options.coalescing);
        if v.final_reached == v.final_of && stable_since.elapsed() >= Duration::from_secs(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let changes = audit.take();
    // The next run may start now: this one only waits and counts.
    drop(active);
    tokio::time::sleep(options.quiet).await;
    running.check_alive()?;
    let quiet = audit.take();
    peak_rss = peak_rss.max(running.peak_rss_mib());
    cpu += running.cpu_seconds();
    running.kill();
    for w in watches {
        w.abort();
    }

    // S11's own check: Deployments whose template carries `last-reloaded-from`.
    let last_reloaded = if scenario.env_vars_too {
        let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let list = api.list(&Default::default()).await?;
        let with = list
            .items
            .iter()
            .filter(|d| {
                d.spec
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.as_ref())
                    .is_some_and(|a| a.contains_key(LAST_RELOADED))
            })
            .count();
        Some((with, list.items.len()))
    } else {
        None
    };
    let per_group: Vec<u64> = record
        .data_writes
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let data_writes = lock(&record.writes)
        .iter()
        .filter(|w| w.kind == WriteKind::Data)
        .count() as u64;
    Ok(Row {
        name: name.to_owned(),
        verdict: record.judge(options.coalescing),
        data_writes,
        expected: scenario.expected.of(&per_group),
        last_reloaded,
        requests: [startup, changes, quiet],
        peak_rss,
        cpu,
    })
}

fn ms(samples: &[Duration], p: f64) -> String {
    percentile(samples, p).map_or("–".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
}

fn row_line(row: &Row) -> String {
    let v = &row.verdict;
    let [start, changes, quiet] = &row.requests;
    let mut expected = row.expected.map_or("–".into(), |e| e.to_string());
    if let Some((with, of)) = row.last_reloaded {
        expected.push_str(&format!("; `last-reloaded-from` on {with}/{of}"));
    }
    format!(
        "| {} | {}/{} | {} | {} | {} | {} | {} | {} ({} · {} · {}) | {:.1} | {:.1} | {} / {} | {} / {} |",
        row.name,
        v.final_reached,
        v.final_of,
        v.rollouts,
        v.settled,
        v.bound,
        expected,
        row.data_writes,
        audit::total(start) + audit::total(changes) + audit::total(quiet),
        audit::total(start),
        audit::total(changes),
        audit::total(quiet),
        row.peak_rss,
        row.cpu,
        ms(&v.latencies, 50.0),
        ms(&v.latencies, 99.0),
        ms(&v.template_latencies, 50.0),
        ms(&v.template_latencies, 99.0),
    )
}

/// One line of a scenario's table: ready, or a run still going.
enum Line {
    Text(String),
    Run(
        String,
        tokio::task::JoinHandle<(anyhow::Result<Row>, Duration)>,
    ),
}

impl Line {
    fn is_finished(&self) -> bool {
        match self {
            Line::Text(_) => true,
            Line::Run(_, handle) => handle.is_finished(),
        }
    }
}

/// Runs the selected scenarios; prints each one's table when its runs end and appends it to
/// `target/peers/loadtest.md`.
///
/// Runs change one at a time. With `PEERS_LOADTEST_OVERLAP=N`, up to N earlier runs may still be
/// in their quiet period (their contender running and counted, their cluster up) while the next
/// one runs, so a 5-minute quiet period costs the whole run minutes instead of hours.
pub async fn run(peers: &crate::world::Peers, settings: &crate::Settings) -> anyhow::Result<()> {
    let options = Options::from_env(settings.quiet);
    let out: PathBuf = crate::target_dir("peers").join("loadtest.md");
    let mut doc = vec![format!(
        "Reloader's load test (S1–S13) on {}: duration {} s, quiet {} s, coalescing window {} ms, seed {}, overlap {}",
        crate::world::machine(),
        options.duration.as_secs(),
        options.quiet.as_secs(),
        options.coalescing.window.as_millis(),
        options.seed,
        options.overlap,
    )];
    let active = Arc::new(Semaphore::new(1));
    let in_flight = Arc::new(Semaphore::new(1 + options.overlap));
    let mut pending: std::collections::VecDeque<(&'static Scenario, Vec<Line>)> =
        Default::default();
    for id in &options.scenarios {
        let Some(scenario) = SCENARIOS.iter().find(|s| s.id == id.as_str()) else {
            anyhow::bail!("unknown loadtest scenario {id} (S1 … S13)");
        };
        let mut lines = Vec::new();
        for slot in contenders(peers, scenario) {
            if !settings.includes(&slot.name) {
                continue;
            }
            let contender = match slot.contender {
                Ok(c) => c,
                Err(why) => {
                    lines.push(Line::Text(format!(
                        "| {} | not run: {why} ||||||||||",
                        slot.name
                    )));
                    continue;
                }
            };
            let slot_permit = in_flight.clone().acquire_owned().await?;
            let active_permit = active.clone().acquire_owned().await?;
            println!(
                "peers: loadtest {} {}: {} (load average {})",
                scenario.id,
                slot.name,
                contender.command_line(),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            let (name, run_options) = (slot.name.clone(), options.clone());
            let handle = tokio::spawn(async move {
                let started = Instant::now();
                let row = measure(scenario, contender, name, run_options, active_permit).await;
                drop(slot_permit);
                (row, started.elapsed())
            });
            lines.push(Line::Run(slot.name, handle));
            while pending
                .front()
                .is_some_and(|(_, lines)| lines.iter().all(Line::is_finished))
            {
                if let Some((done, lines)) = pending.pop_front() {
                    finish(done, lines, &options, &mut doc, &out).await?;
                }
            }
        }
        pending.push_back((scenario, lines));
    }
    while let Some((scenario, lines)) = pending.pop_front() {
        finish(scenario, lines, &options, &mut doc, &out).await?;
    }
    println!("peers: loadtest tables in {}", out.display());
    Ok(())
}

/// Waits for a scenario's runs, prints its table and writes it to `out` with those before it.
async fn finish(
    scenario: &Scenario,
    lines: Vec<Line>,
    options: &Options,
    doc: &mut Vec<String>,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let span = scenario.span.of(options.duration);
    let mut table = vec![
        format!("#### {} {} ({} s of changes)", scenario.id, scenario.title, span.as_secs()),
        String::new(),
        format!("Reloader's {}: {}.", scenario.id, scenario.reloader),
        String::new(),
        "| contender | final values reached | rollouts | settled states | leading-edge bound | Reloader's expected reloads | data changes | requests (start-up · changes · quiet) | peak RSS MiB | CPU s | change → rollout p50 / p99 ms | change → template p50 / p99 ms |".into(),
        "|---|---|---|---|---|---|---|---|---|---|---|---|".into(),
    ];
    for line in lines {
        let (name, handle) = match line {
            Line::Text(text) => {
                table.push(text);
                continue;
            }
            Line::Run(name, handle) => (name, handle),
        };
        let (result, took) = match handle.await {
            Ok(done) => done,
            Err(err) => (
                Err(anyhow::anyhow!("the run's task failed: {err}")),
                Duration::ZERO,
            ),
        };
        match result {
            Ok(row) => {
                let line = row_line(&row);
                println!(
                    "peers: loadtest {}: {line} ({:.0} s)",
                    scenario.id,
                    took.as_secs_f64()
                );
                for (phase, r) in ["start-up", "changes", "quiet"].iter().zip(&row.requests) {
                    println!(
                        "peers: loadtest {} {} requests {phase}: {}",
                        scenario.id,
                        row.name,
                        audit::summary(r)
                    );
                }
                println!(
                    "peers: loadtest {} {}: {} workloads over their settled states, {} over the leading-edge bound, {} changes never rolled",
                    scenario.id,
                    row.name,
                    row.verdict.workloads_over,
                    row.verdict.workloads_over_bound,
                    row.verdict.never_rolled
                );
                // The first few over the bound, to read why (times in seconds from the start).
                let secs = |ts: &[Duration]| {
                    ts.iter()
                        .map(|t| format!("{:.2}", t.as_secs_f64()))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                for over in row.verdict.over_bound.iter().take(3) {
                    println!(
                        "peers: loadtest {} {}: workload {} over its bound {}: changes [{}], rollouts [{}], deleted at {}",
                        scenario.id,
                        row.name,
                        over.workload,
                        over.bound,
                        secs(&over.changes),
                        secs(&over.rollouts),
                        over.deleted_at
                            .map_or("-".to_owned(), |d| format!("{:.2}", d.as_secs_f64()))
                    );
                }
                table.push(line);
            }
            Err(err) => {
                println!("peers: loadtest {} {name}: failed: {err:#}", scenario.id);
                table.push(format!("| {name} | failed: {err:#} |||||||||||"));
            }
        }
    }
    println!();
    for line in &table {
        println!("{line}");
    }
    println!();
    doc.push(String::new());
    doc.extend(table);
    std::fs::write(out, doc.join("\n") + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
