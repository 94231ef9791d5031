//! The scale run: `conflux run` with all four controllers against a local control plane holding
//! 10,000 ConfigMaps and 10,000 Secrets of 1 KiB and 200 opted-in Deployments (plus a ConfigSync,
//! pull copies and Kustomizations, so every controller has work). It reports peak RSS, time to
//! ready, the watches conflux adds on the API server, and change → copy and change → rollout
//! latency (p50, p99).
//!
//! ```text
//! cargo build --release -p operator-bin
//! cargo bench -p conflux-benches --bench scale
//! ```
//!
//! `CONFLUX_BIN` names another binary (default `target/release/conflux`). Sizes:
//! `SCALE_CONFIGS` (per kind, default 10000), `SCALE_NAMESPACES` (100), `SCALE_DEPLOYMENTS` (200),
//! `SCALE_FANOUT` (ConfigSync target namespaces, 50), `SCALE_CHANGES` (measured changes, 20).
//! Targets printed next to the numbers: peak RSS < 80 MB, one watch per kind, ready < 15 s.

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conflux_benches::{env_usize, memory_kib, percentile, run_by_cargo_bench};
use conflux_tests::objects;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-scale";

/// Starts conflux with `--initial-list-strategy=strategy`, waits until it is ready and 3 s more,
/// stops it; returns the time to ready and the peak RSS (KiB).
fn start_up(binary: &str, cluster: &conflux_tests::Cluster, strategy: &str) -> (Duration, u64) {
    let health_port = conflux_tests::free_port();
    let log = conflux_tests::repo_root().join(format!("target/scale-conflux-{strategy}.log"));
    let spawned = Instant::now();
    let mut child = Command::new(binary)
        .args([
            "run",
            "--controllers=copy,sync,reload,flux-trigger",
            "--log-encoding=console",
            "--metrics-addr=0",
            &format!("--health-addr=127.0.0.1:{health_port}"),
            &format!("--initial-list-strategy={strategy}"),
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start conflux");
    let pid = child.id();
    let ready = loop {
        if http_status(health_port, "/readyz") == Some(200) {
            break spawned.elapsed();
        }
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "conflux exited; see {}",
            log.display()
        );
        assert!(
            spawned.elapsed() < Duration::from_secs(600),
            "not ready in 10 min"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(3));
    let (peak, _) = memory_kib(pid).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    (ready, peak)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !run_by_cargo_bench("scale") {
        return;
    }
    let configs = env_usize("SCALE_CONFIGS", 10_000);
    let namespaces = env_usize("SCALE_NAMESPACES", 100).max(1);
    let deployments = env_usize("SCALE_DEPLOYMENTS", 200);
    let fanout = env_usize("SCALE_FANOUT", 50).max(1);
    let changes = env_usize("SCALE_CHANGES", 20).max(1);
    let binary = std::env::var("CONFLUX_BIN").unwrap_or_else(|_| {
        conflux_tests::repo_root()
            .join("target/release/conflux")
            .display()
            .to_string()
    });
    assert!(
        std::path::Path::new(&binary).exists(),
        "{binary} missing: run `cargo build --release -p operator-bin` first"
    );

    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let started = Instant::now();
    populate(&client, configs, namespaces, deployments, fanout).await;
    println!(
        "scale: created {configs} ConfigMaps + {configs} Secrets (1 KiB) in {namespaces} namespaces, {deployments} Deployments, a ConfigSync into {fanout} namespaces, {} pull copies, {} Kustomizations in {:.1} s",
        namespaces.min(20),
        namespaces.min(20),
        started.elapsed().as_secs_f64()
    );

    // Start-up with each initial-list strategy, alternating, two rounds each: time to ready and
    // peak RSS until 3 s after ready (the default is the better one).
    for round in 1..=2 {
        for strategy in ["list-watch", "streaming-list"] {
            let (ready, peak) = start_up(&binary, cluster, strategy);
            println!(
                "scale: --initial-list-strategy={strategy} (round {round}): ready after {:.2} s, peak RSS {:.1} MiB",
                ready.as_secs_f64(),
                peak as f64 / 1024.0
            );
        }
    }

    let watches_before = registered_watchers(&client).await;
    let (metrics_port, health_port) = (conflux_tests::free_port(), conflux_tests::free_port());
    let log = conflux_tests::repo_root().join("target/scale-conflux.log");
    let spawned = Instant::now();
    let mut child = Command::new(&binary)
        .args([
            "run",
            "--controllers=copy,sync,reload,flux-trigger",
            "--log-encoding=console",
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--health-addr=127.0.0.1:{health_port}"),
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start conflux");
    let pid = child.id();
    let peak = Arc::new(Mutex::new(0u64));
    {
        let peak = peak.clone();
        std::thread::spawn(move || {
            while let Some((hwm, _)) = memory_kib(pid) {
                *peak.lock().unwrap_or_else(|p| p.into_inner()) = hwm;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
    let ready_after = loop {
        if http_status(health_port, "/readyz") == Some(200) {
            break spawned.elapsed();
        }
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "conflux exited; see {}",
            log.display()
        );
        assert!(
            spawned.elapsed() < Duration::from_secs(600),
            "not ready in 10 min"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (hwm_ready, rss_ready) = memory_kib(pid).unwrap_or_default();
    // Let the first reconciles (every copy, every baseline) settle before measuring changes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let watches_after = registered_watchers(&client).await;

    let copy_latency = measure_copies(&client, fanout, changes).await;
    let rollout_latency = measure_rollouts(&client, deployments.min(changes)).await;
    let (hwm_end, rss_end) = memory_kib(pid).unwrap_or_default();
    let peak_kib = (*peak.lock().unwrap_or_else(|p| p.into_inner())).max(hwm_end);
    let _ = child.kill();
    let _ = child.wait();

    let mb = |kib: u64| kib as f64 / 1024.0;
    println!(
        "scale: ready after {:.2} s (target < 15 s)",
        ready_after.as_secs_f64()
    );
    println!(
        "scale: RSS at ready {:.1} MiB (peak so far {:.1} MiB); at the end {:.1} MiB; peak {:.1} MiB (target < 80 MB = 76.3 MiB)",
        mb(rss_ready),
        mb(hwm_ready),
        mb(rss_end),
        mb(peak_kib)
    );
    for kind in ["ConfigMap", "Secret"] {
        let before = watches_before.get(kind).copied().unwrap_or_default();
        let after = watches_after.get(kind).copied().unwrap_or_default();
        println!(
            "scale: apiserver watchers of {kind}: {before} before conflux, {after} with it: conflux adds {} (target 1)",
            after.saturating_sub(before)
        );
    }
    report("change → every copy (ConfigSync fan-out)", &copy_latency);
    report(
        "change → rollout (pod template updated; includes the 2 s --reload-debounce window)",
        &rollout_latency,
    );
}

fn report(what: &str, samples: &[Duration]) {
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    println!(
        "scale: {what}: n={} p50 {:.0} ms, p99 {:.0} ms",
        samples.len(),
        ms(percentile(samples, 50.0)),
        ms(percentile(samples, 99.0))
    );
}

/// Creates everything, 32 writes in flight.
async fn populate(
    client: &Client,
    configs: usize,
    namespaces: usize,
    deployments: usize,
    fanout: usize,
) {
    install_crds(client).await;
    let mut objects: Vec<Value> = Vec::new();
    for n in 0..namespaces.max(fanout) {
        let mut labels = BTreeMap::new();
        if n < fanout {
            labels.insert("scale/fanout", "yes");
        }
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": format!("scale-{n}"), "labels": labels}}));
    }
    apply_all(client, std::mem::take(&mut objects)).await;
    let payload = "x".repeat(1024);
    for i in 0..configs {
        let ns = format!("scale-{}", i % namespaces);
        // Every tenth ConfigMap carries Flux's watch label (as a real fleet's would).
        let labels = if i % 10 == 0 {
            json!({"reconcile.fluxcd.io/watch": "Enabled"})
        } else {
            json!({})
        };
        objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": ns, "labels": labels},
            "data": {"payload": payload, "v": "0"}}));
        objects.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("secret-{i}"), "namespace": ns},
            "stringData": {"payload": payload}}));
    }
    for d in 0..deployments {
        let ns = format!("scale-{}", d % namespaces);
        objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("app-{d}"), "namespace": ns,
                         "annotations": {"reloader.stakater.com/auto": "true"}},
            "spec": {"selector": {"matchLabels": {"app": format!("app-{d}")}},
                     "template": {"metadata": {"labels": {"app": format!("app-{d}")}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                            "envFrom": [{"configMapRef": {"name": format!("cm-{d}")}},
                                                        {"secretRef": {"name": format!("secret-{d}")}}]}]}}}}));
    }
    objects.push(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "fan-source", "namespace": "scale-0"}, "stringData": {"v": "0"}}));
    objects.push(json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
        "metadata": {"name": "scale"},
        "spec": {"source": {"kind": "Secret", "namespace": "scale-0", "name": "fan-source"},
                 "target": {"name": "fanned", "namespaceSelector": {"matchLabels": {"scale/fanout": "yes"}}}}}));
    for n in 0..namespaces.min(20) {
        let ns = format!("scale-{n}");
        objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pulled", "namespace": ns,
                         "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{ns}/cm-{n}")}}}));
        objects.push(json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": ns},
            "spec": {"interval": "10m", "path": "./", "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "fleet"},
                     "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": format!("cm-{n}")}]}}}));
    }
    apply_all(client, objects).await;
}

async fn apply_all(client: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| async move { apply(client, &object).await })
        .await;
}

async fn apply(client: &Client, object: &Value) {
    objects::apply(client, MANAGER, object).await;
}

async fn install_crds(client: &Client) {
    for crd in [objects::config_sync_crd(), objects::kustomization_crd()] {
        objects::install_crd(client, MANAGER, &crd).await;
    }
    // Established is not yet listable everywhere; give the API a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// `apiserver_registered_watchers` for core ConfigMaps and Secrets.
async fn registered_watchers(client: &Client) -> HashMap<String, u64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client
        .request_text(request)
        .await
        .expect("apiserver metrics");
    let mut out = HashMap::new();
    for line in text.lines() {
        if !line.starts_with("apiserver_registered_watchers{") || !line.contains("group=\"\"") {
            continue;
        }
        for kind in ["ConfigMap", "Secret"] {
            if line.contains(&format!("kind=\"{kind}\"")) {
                let value = line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_default();
                out.insert(kind.to_owned(), value as u64);
            }
        }
    }
    out
}

/// Updates the ConfigSync source `changes` times; for each, the time until each copy shows it.
async fn measure_copies(client: &Client, fanout: usize, changes: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    let secrets: Api<Secret> = Api::all(client.clone());
    let stream = watcher(
        secrets,
        watcher::Config::default().fields("metadata.name=fanned"),
    )
    .default_backoff()
    .applied_objects();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(s)) = stream.try_next().await {
            let v = s
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            let _ = tx.send((ns, v, Instant::now()));
        }
    });
    for round in 1..=changes {
        let value = round.to_string();
        let start = Instant::now();
        apply(
            client,
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "fan-source", "namespace": "scale-0"},
                    "stringData": {"v": value}}),
        )
        .await;
        let mut seen = std::collections::HashSet::new();
        let deadline = start + Duration::from_secs(120);
        while seen.len() < fanout && Instant::now() < deadline {
            let Ok(Some((ns, v, at))) =
                tokio::time::timeout(Duration::from_secs(5), rx.recv()).await
            else {
                continue;
            };
            if v.as_deref() == Some(value.as_str()) && seen.insert(ns) {
                samples.push(at.saturating_duration_since(start));
            }
        }
        assert_eq!(seen.len(), fanout, "round {round}: not every copy updated");
    }
    task.abort();
    samples
}

/// Changes the ConfigMap of `n` Deployments one at a time; the time until its template changes.
async fn measure_rollouts(client: &Client, n: usize) -> Vec<Duration> {
    let namespaces = env_usize("SCALE_NAMESPACES", 100).max(1);
    let mut samples = Vec::new();
    for d in 0..n {
        let ns = format!("scale-{}", d % namespaces);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let template_hash = |dep: &Deployment| {
            dep.spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get("conflux.dev/config-hash"))
                .cloned()
        };
        let before = template_hash(&deployments.get(&format!("app-{d}")).await.expect("get"));
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let start = Instant::now();
        cms.patch(
            &format!("cm-{d}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": format!("changed-{d}")}})),
        )
        .await
        .expect("change ConfigMap");
        let mut stream = std::pin::pin!(
            watcher(
                deployments.clone(),
                watcher::Config::default().fields(&format!("metadata.name=app-{d}")),
            )
            .default_backoff()
            .applied_objects()
        );
        let deadline = start + Duration::from_secs(60);
        loop {
            let next = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await;
            if let Ok(Ok(Some(dep))) = next
                && template_hash(&dep) != before
            {
                samples.push(start.elapsed());
                break;
            }
            assert!(Instant::now() < deadline, "app-{d} did not roll");
        }
    }
    samples
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}
