//! The scale run: `conflux run` with all four controllers against a local control plane holding
//! ConfigMaps and Secrets of 1 KiB (every tenth ConfigMap labelled for Flux) and 200 opted-in
//! Deployments (plus a ConfigSync, pull copies and Kustomizations, so every controller has work).
//!
//! It grows the cluster in steps (by default 10,000 → 40,000 → 100,000 ConfigMaps + Secrets in
//! total, half of each, objects added between steps) and at each step starts conflux on the
//! populated cluster: time to ready, peak RSS (`VmHWM` until 3 s after ready) and, on the harness's
//! own cluster (where conflux then runs as the audited user), the requests it made until then,
//! from the API server's audit log, for each initial list strategy. Then it prints the memory per config (the slope of peak RSS between steps) and
//! the goals. At the last size it measures the watches conflux adds on the API server and change →
//! copy and change → rollout latency (p50, p99).
//!
//! ```text
//! cargo build --release -p conflux-operator
//! cargo bench -p conflux-benches --bench scale
//! ```
//!
//! `CONFLUX_BIN` names another binary (default `target/release/conflux`). Sizes:
//! `SCALE_TOTALS` (ConfigMaps + Secrets at each step, comma-separated, default
//! `10000,40000,100000`; the older `SCALE_CONFIGS=n` means one step of n of each kind),
//! `SCALE_NAMESPACES` (100), `SCALE_DEPLOYMENTS` (200), `SCALE_FANOUT` (ConfigSync target
//! namespaces, 50), `SCALE_CHANGES` (measured changes, 20), `SCALE_ROUNDS` (start-ups per strategy
//! and step, 2), `SCALE_STRATEGIES` (`list-watch,streaming-list`; the first is the one the goals
//! judge). `SCALE_KUBECONFIG` runs against a cluster already up (objects of
//! a step that exist already are not written again) instead of starting one.
//! Goals printed next to the numbers: at 100,000 configs peak RSS < 64 MB and ready < 3 s; one
//! watch per kind.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conflux_benches::{audit, env_usize, memory_kib, percentile, run_by_cargo_bench};
use conflux_tests::objects;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-scale";

/// The goals of issue 19 at 100,000 configs.
const GOAL_PEAK_MB: f64 = 64.0;
const GOAL_READY_S: f64 = 3.0;
const GOAL_AT: usize = 100_000;

/// Starts conflux with `--initial-list-strategy=strategy`, waits until it is ready and 3 s more,
/// stops it; returns the time to ready, the peak RSS (KiB) and, with `audit` (the audit log of the
/// API server, `kubeconfig` being its audited user's), the requests it made.
fn start_up(
    binary: &str,
    kubeconfig: &Path,
    strategy: &str,
    audit: Option<&Path>,
) -> (Duration, u64, Option<audit::Requests>) {
    let mut requests = audit.map(audit::AuditLog::at_end);
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
        .env("KUBECONFIG", kubeconfig)
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
    // The audit log is written as requests complete; give the last ones a moment.
    std::thread::sleep(Duration::from_secs(1));
    (ready, peak, requests.as_mut().map(audit::AuditLog::take))
}

/// One step's start-ups with the default strategy: the worst time to ready and peak RSS (KiB).
#[derive(Debug, Clone, Copy)]
struct Step {
    total: usize,
    ready: Duration,
    peak_kib: u64,
}

/// The totals of the steps (ConfigMaps + Secrets), ascending.
fn totals() -> Vec<usize> {
    if let Ok(per_kind) = std::env::var("SCALE_CONFIGS")
        && let Ok(n) = per_kind.trim().parse::<usize>()
    {
        return vec![2 * n];
    }
    let spec = std::env::var("SCALE_TOTALS").unwrap_or_else(|_| "10000,40000,100000".to_owned());
    let mut totals: Vec<usize> = spec
        .split(',')
        .filter_map(|t| t.trim().replace('_', "").parse().ok())
        .filter(|&t: &usize| t >= 2)
        .collect();
    totals.sort_unstable();
    totals.dedup();
    assert!(!totals.is_empty(), "SCALE_TOTALS has no size: {spec:?}");
    totals
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !run_by_cargo_bench("scale") {
        return;
    }
    let totals = totals();
    let namespaces = env_usize("SCALE_NAMESPACES", 100).max(1);
    let deployments = env_usize("SCALE_DEPLOYMENTS", 200);
    let fanout = env_usize("SCALE_FANOUT", 50).max(1);
    let changes = env_usize("SCALE_CHANGES", 20).max(1);
    let rounds = env_usize("SCALE_ROUNDS", 2).max(1);
    let strategies: Vec<String> = std::env::var("SCALE_STRATEGIES")
        .unwrap_or_else(|_| "list-watch,streaming-list".to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let binary = std::env::var("CONFLUX_BIN").unwrap_or_else(|_| {
        conflux_tests::repo_root()
            .join("target/release/conflux")
            .display()
            .to_string()
    });
    assert!(
        std::path::Path::new(&binary).exists(),
        "{binary} missing: run `cargo build --release -p conflux-operator` first"
    );

    let kubeconfig: PathBuf = match std::env::var("SCALE_KUBECONFIG") {
        Ok(path) => PathBuf::from(path),
        Err(_) => conflux_tests::cluster().kubeconfig().to_path_buf(),
    };
    // On the harness's own cluster the start-ups run as its audited user, and their requests
    // are counted from the audit log.
    let audited: Option<(PathBuf, PathBuf)> =
        std::env::var("SCALE_KUBECONFIG").is_err().then(|| {
            let cluster = conflux_tests::cluster();
            (cluster.kubeconfig_as("audited"), cluster.audit_log())
        });
    let client = client_for(&kubeconfig).await;
    let started = Instant::now();
    populate_base(&client, namespaces, deployments, fanout).await;
    println!(
        "scale: created {namespaces} namespaces, {deployments} Deployments, a ConfigSync into {fanout} namespaces, {} pull copies, {} Kustomizations in {:.1} s",
        namespaces.min(20),
        namespaces.min(20),
        started.elapsed().as_secs_f64()
    );

    let mut steps: Vec<Step> = Vec::new();
    let mut per_kind_done = 0;
    for &total in &totals {
        let per_kind = total / 2;
        let started = Instant::now();
        populate_configs(&client, per_kind_done, per_kind, namespaces).await;
        per_kind_done = per_kind_done.max(per_kind);
        println!(
            "scale: {total} configs: {per_kind} ConfigMaps + {per_kind} Secrets (1 KiB) in {namespaces} namespaces ({:.1} s to add)",
            started.elapsed().as_secs_f64()
        );
        // Start-up with each initial-list strategy, alternating: time to ready and peak RSS
        // until 3 s after ready.
        let mut worst: Option<Step> = None;
        for round in 1..=rounds {
            for (i, strategy) in strategies.iter().enumerate() {
                let (ready, peak, requests) = match &audited {
                    Some((as_audited, log)) => start_up(&binary, as_audited, strategy, Some(log)),
                    None => start_up(&binary, &kubeconfig, strategy, None),
                };
                println!(
                    "scale: {total} configs, --initial-list-strategy={strategy} (round {round}): ready after {:.2} s, peak RSS {:.1} MiB{}",
                    ready.as_secs_f64(),
                    peak as f64 / 1024.0,
                    requests.map_or_else(String::new, |r| format!(
                        ", requests until 3 s after ready: {}",
                        audit::summary(&r)
                    ))
                );
                if i == 0 {
                    let w = worst.get_or_insert(Step {
                        total,
                        ready,
                        peak_kib: peak,
                    });
                    w.ready = w.ready.max(ready);
                    w.peak_kib = w.peak_kib.max(peak);
                }
            }
        }
        steps.extend(worst);
    }
    report_steps(&steps, strategies.first().map_or("", String::as_str));

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
        .env("KUBECONFIG", &kubeconfig)
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
    let total = totals.last().copied().unwrap_or_default();
    println!(
        "scale: {total} configs, with changes: ready after {:.2} s",
        ready_after.as_secs_f64()
    );
    println!(
        "scale: {total} configs, with changes: RSS at ready {:.1} MiB (peak so far {:.1} MiB); at the end {:.1} MiB; peak {:.1} MiB",
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

/// A client of the cluster behind `kubeconfig`.
async fn client_for(kubeconfig: &Path) -> Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// The per-step table, the memory per config (slope of peak RSS between steps) and the goals.
fn report_steps(steps: &[Step], strategy: &str) {
    let mb = |kib: u64| kib as f64 / 1024.0;
    println!("scale: start-up with --initial-list-strategy={strategy} (worst of the rounds):");
    println!("scale: | configs | ready | peak RSS | bytes per config since the step before |");
    for (i, step) in steps.iter().enumerate() {
        let slope = i.checked_sub(1).and_then(|j| steps.get(j)).map_or_else(
            || "—".to_owned(),
            |prev| format!("{:.0}", slope(prev, step)),
        );
        println!(
            "scale: | {} | {:.2} s | {:.1} MiB ({:.1} MB) | {slope} |",
            step.total,
            step.ready.as_secs_f64(),
            mb(step.peak_kib),
            step.peak_kib as f64 * 1024.0 / 1e6
        );
    }
    if let (Some(first), Some(last)) = (steps.first(), steps.last())
        && last.total > first.total
    {
        println!(
            "scale: memory per config (peak RSS slope {} → {} configs): {:.0} bytes",
            first.total,
            last.total,
            slope(first, last)
        );
    }
    match steps.iter().find(|s| s.total == GOAL_AT) {
        Some(step) => {
            let peak_mb = step.peak_kib as f64 * 1024.0 / 1e6;
            let ready = step.ready.as_secs_f64();
            let verdict = |met: bool| if met { "met" } else { "MISSED" };
            println!(
                "scale: goal at {GOAL_AT} configs: peak RSS {peak_mb:.1} MB < {GOAL_PEAK_MB} MB: {}",
                verdict(peak_mb < GOAL_PEAK_MB)
            );
            println!(
                "scale: goal at {GOAL_AT} configs: ready {ready:.2} s < {GOAL_READY_S} s: {}",
                verdict(ready < GOAL_READY_S)
            );
        }
        None => println!(
            "scale: goals (at {GOAL_AT} configs: peak RSS < {GOAL_PEAK_MB} MB, ready < {GOAL_READY_S} s) not judged: no step of {GOAL_AT}"
        ),
    }
}

/// Peak RSS growth per added config between two steps, in bytes.
fn slope(from: &Step, to: &Step) -> f64 {
    let configs = to.total.saturating_sub(from.total).max(1) as f64;
    (to.peak_kib as f64 - from.peak_kib as f64) * 1024.0 / configs
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

/// Creates everything but the ConfigMaps and Secrets of the steps, 32 writes in flight.
async fn populate_base(client: &Client, namespaces: usize, deployments: usize, fanout: usize) {
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

/// Creates ConfigMaps and Secrets `from..to` of each kind, 32 writes in flight; skipped when
/// the last of them exist already (a cluster from an earlier run).
async fn populate_configs(client: &Client, from: usize, to: usize, namespaces: usize) {
    if to <= from {
        return;
    }
    let last = to - 1;
    let last_ns = format!("scale-{}", last % namespaces);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &last_ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &last_ns);
    if matches!(
        cms.get_metadata_opt(&format!("cm-{last}")).await,
        Ok(Some(_))
    ) && matches!(
        secrets.get_metadata_opt(&format!("secret-{last}")).await,
        Ok(Some(_))
    ) {
        return;
    }
    let payload = "x".repeat(1024);
    let objects = (from..to).flat_map(|i| {
        let ns = format!("scale-{}", i % namespaces);
        // Every tenth ConfigMap carries Flux's watch label (as a real fleet's would).
        let labels = if i % 10 == 0 {
            json!({"reconcile.fluxcd.io/watch": "Enabled"})
        } else {
            json!({})
        };
        [
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": ns, "labels": labels},
                "data": {"payload": payload, "v": "0"}}),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("secret-{i}"), "namespace": ns},
                "stringData": {"payload": payload}}),
        ]
    });
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| async move { apply(client, &object).await })
        .await;
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
