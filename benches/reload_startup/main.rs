//! What the reload controller costs when it meets a cluster full of workloads, measured from
//! outside: `conflux run --controllers=reload` (default flags) as its own process against the test
//! ground (kube-apiserver, etcd and kube-controller-manager), as the audited user, so its
//! requests are counted exactly from the API server's audit log.
//!
//! The world: `RELOAD_STARTUP_WORKLOADS` (1,040) opted-in Deployments spread over
//! `RELOAD_STARTUP_NAMESPACES` (20) namespaces, each reading its own ConfigMap (`envFrom`) and one
//! key of a Secret of its own (`secretKeyRef`), beside `RELOAD_STARTUP_UNREAD` (4,000) ConfigMaps
//! and Secrets nothing reads. Then:
//!
//! 1. **Start-up**: requests from start until ready + 10 s, writes to workloads, and ReplicaSets
//!    whose annotations kube-controller-manager rewrote meanwhile (from a watch).
//! 2. **A lone change rolls at once**: `RELOAD_STARTUP_CHANGES` (15) ConfigMap writes, each to
//!    another workload, 2 s apart, in the first minute after start: write → new ReplicaSet (from
//!    a watch), p50 and p90.
//! 3. **A label-only change** never rolls.
//! 4. **Restart**: conflux killed and started again: requests until ready + 10 s, workload writes.
//! 5. **A change made while conflux was down** rolls once when it is back.
//! 6. **A Secret flipping 10 times a second for `RELOAD_STARTUP_FLIP_SECS` (60) s**: rollouts of
//!    the one workload reading it (at most 2 wanted), and the last value rolled.
//!
//! `RELOAD_STARTUP_ARGS` adds flags to conflux's (space-separated).
//!
//! ```text
//! cargo build --release -p conflux-operator
//! cargo bench -p conflux-benches --bench reload_startup
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use conflux_benches::audit::{self, AuditLog, Requests};
use conflux_benches::contender::{Contender, Running};
use conflux_benches::{env_usize, percentile, run_by_cargo_bench, wait_for};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

const MANAGER: &str = "conflux-startup-bench";

/// What a watch of ReplicaSets saw: creations (per owner, with when), and annotation rewrites.
#[derive(Debug, Default)]
struct Seen {
    /// Owner Deployment → creation instants of its ReplicaSets (after the first list).
    created: HashMap<String, Vec<Instant>>,
    /// ReplicaSets whose annotations changed (namespace/name), with when.
    rewritten: Vec<(String, Instant)>,
    annotations: HashMap<String, BTreeMap<String, String>>,
}

fn owner(rs: &ReplicaSet) -> Option<String> {
    let ns = rs.metadata.namespace.clone()?;
    let owner = rs.metadata.owner_references.as_ref()?.first()?.name.clone();
    Some(format!("{ns}/{owner}"))
}

/// Watches ReplicaSets from now on.
fn watch_replica_sets(client: &Client) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let api: Api<ReplicaSet> = Api::all(client.clone());
    let out = seen.clone();
    tokio::spawn(async move {
        let mut listed = false;
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(event)) = stream.try_next().await {
            let mut seen = out.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                watcher::Event::InitApply(rs) => {
                    let key = format!(
                        "{}/{}",
                        rs.metadata.namespace.clone().unwrap_or_default(),
                        rs.metadata.name.clone().unwrap_or_default()
                    );
                    seen.annotations
                        .insert(key, rs.metadata.annotations.clone().unwrap_or_default());
                }
                watcher::Event::InitDone => listed = true,
                watcher::Event::Apply(rs) if listed => {
                    let key = format!(
                        "{}/{}",
                        rs.metadata.namespace.clone().unwrap_or_default(),
                        rs.metadata.name.clone().unwrap_or_default()
                    );
                    let annotations = rs.metadata.annotations.clone().unwrap_or_default();
                    match seen.annotations.insert(key.clone(), annotations.clone()) {
                        None => {
                            if let Some(owner) = owner(&rs) {
                                seen.created.entry(owner).or_default().push(Instant::now());
                            }
                        }
                        Some(before) if before != annotations => {
                            seen.rewritten.push((key, Instant::now()));
                        }
                        Some(_) => {}
                    }
                }
                _ => {}
            }
        }
    });
    seen
}

/// Watches ConfigMaps' metadata from now on, as conflux does (list, then watch): when each
/// change (namespace/name) arrived. A slow rollout is then told apart: late from the API server
/// (this watch saw the change late too) or late in conflux.
fn watch_config_maps(client: &Client) -> Arc<Mutex<HashMap<String, Vec<Instant>>>> {
    let seen = Arc::new(Mutex::new(HashMap::<String, Vec<Instant>>::new()));
    let api: Api<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::ConfigMap>> =
        Api::all(client.clone());
    let out = seen.clone();
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        let mut listed = false;
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                watcher::Event::InitDone => listed = true,
                watcher::Event::Apply(cm) if listed => {
                    let key = format!(
                        "{}/{}",
                        cm.metadata.namespace.clone().unwrap_or_default(),
                        cm.metadata.name.clone().unwrap_or_default()
                    );
                    let mut seen = out.lock().unwrap_or_else(|p| p.into_inner());
                    seen.entry(key).or_default().push(Instant::now());
                }
                _ => {}
            }
        }
    });
    seen
}

async fn apply(client: &Client, ns: Option<&str>, manifest: Value) -> anyhow::Result<()> {
    let name = manifest["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kind = manifest["kind"].as_str().unwrap_or_default().to_owned();
    let params = PatchParams::apply(MANAGER).force();
    let gvk = match kind.as_str() {
        "Namespace" => ("", "v1", "Namespace", "namespaces"),
        "ConfigMap" => ("", "v1", "ConfigMap", "configmaps"),
        "Secret" => ("", "v1", "Secret", "secrets"),
        "Deployment" => ("apps", "v1", "Deployment", "deployments"),
        other => anyhow::bail!("unexpected kind {other}"),
    };
    let ar = kube::api::ApiResource {
        group: gvk.0.into(),
        version: gvk.1.into(),
        api_version: if gvk.0.is_empty() {
            gvk.1.into()
        } else {
            format!("{}/{}", gvk.0, gvk.1)
        },
        kind: gvk.2.into(),
        plural: gvk.3.into(),
    };
    let api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(&name, &params, &Patch::Apply(&manifest))
        .await
        .with_context(|| format!("apply {kind} {name}"))?;
    Ok(())
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"value": value, "other": "x"}})
}

fn secret(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "stringData": {"token": value, "unread": "x"}})
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": "registry.invalid/app:1",
                    "envFrom": [{"configMapRef": {"name": format!("{name}-cm")}}],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": format!("{name}-s"), "key": "token"}}}],
                }]},
            },
        },
    })
}

fn conflux(bin: &std::path::Path) -> Contender {
    Contender {
        name: "conflux".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        program: bin.to_path_buf(),
        args: [
            "run",
            "--controllers=reload",
            "--metrics-addr=127.0.0.1:{metrics}",
            "--health-addr=127.0.0.1:{health}",
        ]
        .iter()
        .map(|s| s.to_string())
        // Extra flags, to compare settings (for example `--initial-list-strategy=...`).
        .chain(
            std::env::var("RELOAD_STARTUP_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned),
        )
        .collect(),
        env: vec![("RUNTIME_NAMESPACE".into(), "conflux-system".into())],
        readiness: Some("/readyz".into()),
    }
}

/// Starts conflux and waits until it is ready and 10 s more; what it asked meanwhile.
async fn start(
    contender: &Contender,
    audited: &std::path::Path,
    cluster: &conflux_tests::Cluster,
    tag: &str,
) -> anyhow::Result<(Running, Requests, Duration)> {
    let dir = conflux_tests::repo_root().join("target/reload-startup");
    std::fs::create_dir_all(&dir)?;
    let mut log = AuditLog::at_end(&cluster.audit_log());
    let mut running = contender.start(
        audited,
        &dir.join(format!("{tag}.d")),
        &dir.join(format!("{tag}.log")),
    )?;
    let started = Instant::now();
    let settled = running.settle(Duration::from_secs(300)).await?;
    let ready = settled.ready.unwrap_or(settled.settled);
    let until = ready + Duration::from_secs(10);
    tokio::time::sleep(until.saturating_sub(started.elapsed())).await;
    // The audit log is written asynchronously: give its last lines a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok((running, log.take(), ready))
}

fn workload_writes(requests: &Requests) -> u64 {
    requests
        .iter()
        .filter(|(k, _)| {
            let (verb, resource) = k.split_once(' ').unwrap_or_default();
            matches!(verb, "PATCH" | "UPDATE" | "CREATE" | "DELETE")
                && [
                    "deployments",
                    "statefulsets",
                    "daemonsets",
                    "cronjobs",
                    "jobs",
                ]
                .iter()
                .any(|r| resource.starts_with(r))
        })
        .map(|(_, n)| n)
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if !run_by_cargo_bench("reload_startup") {
        return Ok(());
    }
    let workloads = env_usize("RELOAD_STARTUP_WORKLOADS", 1040);
    let namespaces = env_usize("RELOAD_STARTUP_NAMESPACES", 20).max(1);
    let unread = env_usize("RELOAD_STARTUP_UNREAD", 4000);
    let changes = env_usize("RELOAD_STARTUP_CHANGES", 15);
    let flip = Duration::from_secs(env_usize("RELOAD_STARTUP_FLIP_SECS", 60) as u64);
    let bin = std::env::var("CONFLUX_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| conflux_tests::repo_root().join("target/release/conflux"));
    anyhow::ensure!(
        bin.exists(),
        "{} missing: cargo build --release -p conflux-operator",
        bin.display()
    );
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let audited = cluster.kubeconfig_as("audited");
    println!(
        "reload_startup: {workloads} workloads in {namespaces} namespaces, {unread} unread configs"
    );

    // The world.
    let started = Instant::now();
    apply(
        &client,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "conflux-system"}}),
    )
    .await?;
    let ns_of = |i: usize| format!("startup-{}", i % namespaces);
    for i in 0..namespaces {
        apply(
            &client,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_of(i)}}),
        )
        .await?;
    }
    let mut manifests: Vec<(String, Value)> = Vec::new();
    for i in 0..workloads {
        let name = format!("w{i:05}");
        manifests.push((ns_of(i), config_map(&format!("{name}-cm"), "1")));
        manifests.push((ns_of(i), secret(&format!("{name}-s"), "1")));
    }
    for i in 0..unread {
        let name = format!("unread{i:05}");
        let manifest = if i % 2 == 0 {
            config_map(&name, "1")
        } else {
            secret(&name, "1")
        };
        manifests.push((ns_of(i), manifest));
    }
    for i in 0..workloads {
        manifests.push((ns_of(i), deployment(&format!("w{i:05}"))));
    }
    futures::stream::iter(manifests)
        .map(|(ns, m)| {
            let client = client.clone();
            async move { apply(&client, Some(&ns), m).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let rs_api: Api<ReplicaSet> = Api::all(client.clone());
    wait_for(
        "a ReplicaSet per Deployment",
        Duration::from_secs(600),
        || {
            let rs_api = rs_api.clone();
            async move {
                let n = rs_api.list(&Default::default()).await.ok()?.items.len();
                (n >= workloads).then_some(())
            }
        },
    )
    .await?;
    // kube-controller-manager works through the world's Deployments at its own client rate
    // (20 requests a second by default) well after their ReplicaSets exist; a rollout measured
    // meanwhile waits in that backlog (the first change waited 31 s). Ready is when it has
    // caught up: every Deployment observed, with its ReplicaSet available.
    let deploy_api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::all(client.clone());
    wait_for(
        "kube-controller-manager to catch up with every Deployment",
        Duration::from_secs(600),
        || {
            let deploy_api = deploy_api.clone();
            async move {
                let list = deploy_api.list(&Default::default()).await.ok()?;
                let caught_up = list
                    .items
                    .iter()
                    .filter(|d| {
                        let status = d.status.as_ref();
                        status.and_then(|s| s.observed_generation) >= d.metadata.generation
                            && status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                                c.iter().any(|c| {
                                    c.type_.as_deref() == Some("Progressing")
                                        && c.reason.as_deref() == Some("NewReplicaSetAvailable")
                                })
                            })
                    })
                    .count();
                (caught_up >= workloads).then_some(())
            }
        },
    )
    .await?;
    println!(
        "reload_startup: world ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // 1. Start-up.
    let seen = watch_replica_sets(&client);
    let config_seen = watch_config_maps(&client);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let contender = conflux(&bin);
    let t0 = Instant::now();
    let (running, requests, ready) = start(&contender, &audited, cluster, "first").await?;
    let rewritten_first = {
        let s = seen.lock().unwrap_or_else(|p| p.into_inner());
        s.rewritten.iter().filter(|(_, at)| *at >= t0).count()
    };
    println!(
        "| start-up | {} requests until ready ({:.1} s) + 10 s | {} workload writes | {} ReplicaSets rewritten |",
        audit::total(&requests),
        ready.as_secs_f64(),
        workload_writes(&requests),
        rewritten_first
    );
    println!("  requests: {}", audit::summary(&requests));

    // 2. Lone changes.
    let mut latencies = Vec::new();
    for i in 0..changes.min(workloads) {
        let idx = (i * 37) % workloads;
        let name = format!("w{idx:05}");
        let ns = ns_of(idx);
        let key = format!("{ns}/{name}");
        let before = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .created
            .get(&key)
            .map_or(0, Vec::len);
        let wrote = Instant::now();
        apply(
            &client,
            Some(&ns),
            config_map(&format!("{name}-cm"), &format!("change-{i}")),
        )
        .await?;
        let answered = wrote.elapsed();
        if answered > Duration::from_secs(1) {
            // The clock starts before the write is sent: a slow answer to the bench's own write
            // is in the latency, and said here.
            println!(
                "  change {i} ({key}): the API server answered the write after {:.0} ms",
                answered.as_secs_f64() * 1000.0
            );
        }
        let at = wait_for("a new ReplicaSet", Duration::from_secs(60), || {
            let seen = seen.clone();
            let key = key.clone();
            async move {
                let s = seen.lock().unwrap_or_else(|p| p.into_inner());
                s.created.get(&key).and_then(|v| v.get(before).copied())
            }
        })
        .await?;
        let latency = at.saturating_duration_since(wrote);
        if latency > Duration::from_secs(1) {
            let cm_key = format!("{ns}/{name}-cm");
            let watched = config_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&cm_key)
                .and_then(|v| v.iter().find(|t| **t >= wrote).copied());
            println!(
                "  change {i} ({key}): new ReplicaSet after {:.0} ms; the bench's own ConfigMap watch saw the write after {}",
                latency.as_secs_f64() * 1000.0,
                watched.map_or("(never)".to_owned(), |t| format!(
                    "{:.0} ms",
                    t.saturating_duration_since(wrote).as_secs_f64() * 1000.0
                ))
            );
        }
        latencies.push(latency);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    println!(
        "| lone change → new ReplicaSet | p50 {:.0} ms | p90 {:.0} ms | max {:.0} ms | {} changes |",
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 90.0)),
        ms(latencies.iter().max().copied()),
        latencies.len()
    );

    // 3. A label-only change.
    let quiet_name = "w00001";
    let quiet_ns = ns_of(1);
    let quiet_key = format!("{quiet_ns}/{quiet_name}");
    let count = |key: &str| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .created
            .get(key)
            .map_or(0, Vec::len)
    };
    let before = count(&quiet_key);
    let mut labelled = config_map(&format!("{quiet_name}-cm"), "1");
    labelled["metadata"]["labels"] = json!({"team": "a"});
    // Same data as the world set, only a label.
    apply(&client, Some(&quiet_ns), labelled).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "| label-only change | {} rollouts |",
        count(&quiet_key) - before
    );

    // 4. Restart, and 5. a change made while conflux was down.
    let down_name = "w00002";
    let down_ns = ns_of(2);
    let down_key = format!("{down_ns}/{down_name}");
    running.kill();
    let before_down = count(&down_key);
    apply(
        &client,
        Some(&down_ns),
        config_map(&format!("{down_name}-cm"), "while-down"),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (running, requests, ready) = start(&contender, &audited, cluster, "restart").await?;
    println!(
        "| restart | {} requests until ready ({:.1} s) + 10 s | {} workload writes |",
        audit::total(&requests),
        ready.as_secs_f64(),
        workload_writes(&requests),
    );
    println!("  requests: {}", audit::summary(&requests));
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "| change made while down | {} rollouts (1 wanted) |",
        count(&down_key) - before_down
    );

    // 6. A Secret flipping.
    let flip_name = "w00003";
    let flip_ns = ns_of(3);
    let flip_key = format!("{flip_ns}/{flip_name}");
    let before_flip = count(&flip_key);
    let flip_started = Instant::now();
    let mut last = Instant::now();
    let mut i = 0u64;
    while flip_started.elapsed() < flip {
        apply(
            &client,
            Some(&flip_ns),
            // Every write a new value: the last one must reach the pods.
            secret(&format!("{flip_name}-s"), &format!("flip-{i}")),
        )
        .await?;
        last = Instant::now();
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (rollouts, final_rolled) = {
        let s = seen.lock().unwrap_or_else(|p| p.into_inner());
        let created = s.created.get(&flip_key).cloned().unwrap_or_default();
        let after: Vec<&Instant> = created.iter().skip(before_flip).collect();
        (after.len(), after.last().is_some_and(|at| **at >= last))
    };
    println!(
        "| Secret flipping 10/s for {} s ({i} writes) | {rollouts} rollouts | last value rolled: {final_rolled} |",
        flip.as_secs()
    );
    println!("| memory | peak RSS {:.1} MiB |", running.peak_rss_mib());
    drop(running);
    Ok(())
}
