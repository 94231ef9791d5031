//! End-to-end latency of the reload controller on the local cluster: from a ConfigMap update to
//! the new ReplicaSet kube-controller-manager creates for the rolled Deployment, over 100 changes.
//!
//! ```text
//! cargo bench -p conflux-benches --bench reload_latency
//! ```
//!
//! conflux is its reload controller in-process, scoped to the benchmark's namespace, with a
//! coalescing window of 0 (`RELOAD_LATENCY_DEBOUNCE_MS` overrides it) and a rollout rate that
//! never throttles. The clock starts before the ConfigMap write is sent and stops when a watch on
//! ReplicaSets reports the one made from conflux's new pod template; the result lines give p50,
//! p99, max and min, and the share up to conflux's template patch as seen by a watch on
//! Deployments. `RELOAD_LATENCY_CHANGES` (default 100) changes the number of updates.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use conflux_benches::reload::{
    AUTO, HASH, Reloader, apply_config_map, container, create_deployment, deployment, wait_baseline,
};
use conflux_benches::{env_usize, percentile, run_by_cargo_bench};
use conflux_reloader::runtime::ReloadConfig;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// How long one change may take before the benchmark gives up (not a limit on the results).
const GIVE_UP: Duration = Duration::from_secs(30);

// A current-thread runtime, as the benchmark has always run (it was a `#[tokio::test]`).
#[tokio::main(flavor = "current_thread")]
async fn main() {
    if !run_by_cargo_bench("reload_latency") {
        return;
    }
    let changes = env_usize("RELOAD_LATENCY_CHANGES", 100).max(1);
    let debounce = Duration::from_millis(env_usize("RELOAD_LATENCY_DEBOUNCE_MS", 0) as u64);
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-latency").await;
    apply_config_map(&client, &ns, "cfg", json!({"v": "0"}))
        .await
        .expect("creating the ConfigMap");
    let manifest = deployment(
        "web",
        json!({AUTO.0: AUTO.1}),
        container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
    );
    create_deployment(&client, &ns, &manifest)
        .await
        .expect("creating the Deployment");
    let conflux = Reloader::start(
        cluster.client().await,
        ReloadConfig {
            namespace: Some(ns.clone()),
            debounce,
            rate: 1000.0,
            burst: 1000,
            ..ReloadConfig::default()
        },
    )
    .await
    .expect("starting conflux's reload controller");
    wait_baseline(&client, &ns, "web")
        .await
        .expect("conflux records its baseline");

    // New ReplicaSets as the watch sees them, with the template hash they were made from.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Option<String>)>();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let rs_watch = tokio::spawn(async move {
        let mut known = HashSet::new();
        let mut stream = watcher(rs_api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(rs)) = stream.next().await {
            let fresh = known.insert(rs.metadata.name.clone().unwrap_or_default());
            let hash = rs
                .spec
                .template
                .and_then(|t| t.metadata)
                .and_then(|m| m.annotations)
                .and_then(|a| a.get(HASH).cloned());
            if fresh && tx.send((Instant::now(), hash)).is_err() {
                return;
            }
        }
    });
    // Our patches as the watch on Deployments sees them (a new template hash).
    let (patched_tx, mut patched_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, String)>();
    let deploy_api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deploy_watch = tokio::spawn(async move {
        let mut last: Option<String> = None;
        let mut stream = watcher(deploy_api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(d)) = stream.next().await {
            let hash = d
                .spec
                .template
                .metadata
                .and_then(|m| m.annotations)
                .and_then(|a| a.get(HASH).cloned());
            if let Some(hash) = hash.filter(|h| Some(h) != last.as_ref()) {
                last = Some(hash.clone());
                if patched_tx.send((Instant::now(), hash)).is_err() {
                    return;
                }
            }
        }
    });

    let mut latencies = Vec::with_capacity(changes);
    let mut to_patch = Vec::with_capacity(changes);
    for i in 1..=changes {
        let start = Instant::now();
        apply_config_map(&client, &ns, "cfg", json!({"v": i.to_string()}))
            .await
            .unwrap_or_else(|e| panic!("change {i}: {e:#}"));
        let (patched, hash) = tokio::time::timeout(GIVE_UP, patched_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("change {i}: conflux's patch not seen within {GIVE_UP:?}"))
            .expect("the Deployment watch ended");
        to_patch.push(patched.duration_since(start));
        // The ReplicaSet made from exactly this template (others are skipped).
        let created = loop {
            let (at, rs_hash) = tokio::time::timeout(GIVE_UP, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("change {i}: no new ReplicaSet within {GIVE_UP:?}"))
                .expect("the ReplicaSet watch ended");
            if rs_hash.as_ref() == Some(&hash) {
                break at;
            }
        };
        latencies.push(created.duration_since(start));
    }
    rs_watch.abort();
    deploy_watch.abort();
    assert_eq!(
        conflux.rollouts(),
        changes as u64,
        "one rollout per ConfigMap change"
    );

    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let fastest = latencies
        .iter()
        .enumerate()
        .min_by_key(|(_, d)| **d)
        .map(|(i, d)| (i + 1, *d));
    if let Some((number, min)) = fastest {
        println!(
            "reload_latency: fastest change: #{number} ({:.1} ms)",
            ms(Some(min))
        );
    }
    println!(
        "reload_latency: of which ConfigMap update -> our template patch seen by a watch: p50 {:.1} ms, p99 {:.1} ms",
        ms(percentile(&to_patch, 50.0)),
        ms(percentile(&to_patch, 99.0)),
    );
    println!(
        "reload_latency: ConfigMap update -> new ReplicaSet, {changes} changes, debounce {} ms: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, min {:.1} ms",
        debounce.as_millis(),
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 99.0)),
        ms(percentile(&latencies, 100.0)),
        ms(percentile(&latencies, 0.0)),
    );
}
