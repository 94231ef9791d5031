//! End-to-end latency of the reload controller on the local cluster: from a ConfigMap update to
//! the new ReplicaSet kube-controller-manager creates for the rolled Deployment, over 100 changes.
//!
//! ```sh
//! cargo test -p conflux-tests --release --test reload_latency -- --ignored --nocapture
//! ```
//!
//! The coalescing window is 0 (`RELOAD_LATENCY_DEBOUNCE_MS` overrides it); the result line gives
//! p50, p99 and max. The clock starts before the ConfigMap write is sent and stops when the watch
//! on ReplicaSets reports the new one.

mod reload_support;

use std::time::{Duration, Instant};

use conflux_tests::cluster;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use reload_support::*;
use reloader::runtime::ReloadConfig;
use serde_json::json;

const CHANGES: usize = 100;

#[tokio::test]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn config_update_to_new_replica_set_latency() {
    let debounce = Duration::from_millis(
        std::env::var("RELOAD_LATENCY_DEBOUNCE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-latency").await;
    apply_cm(&client, &ns, "cfg", json!({"v": "0"}), json!({})).await;
    let manifest = deployment(
        "web",
        json!({AUTO.0: AUTO.1}),
        container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
    );
    create_deployment(&client, &ns, &manifest).await;
    let conflux = start_with(
        cluster,
        ReloadConfig {
            namespace: Some(ns.clone()),
            debounce,
            rate: 1000.0,
            burst: 1000,
            ..ReloadConfig::default()
        },
    )
    .await;
    wait_baseline(&client, &ns, "web").await;

    // New ReplicaSets as the watch sees them.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Option<String>)>();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut known = std::collections::HashSet::new();
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

    let mut latencies = Vec::with_capacity(CHANGES);
    let mut to_patch = Vec::with_capacity(CHANGES);
    for i in 1..=CHANGES {
        let start = Instant::now();
        apply_cm(&client, &ns, "cfg", json!({"v": i.to_string()}), json!({})).await;
        let (patched, hash) = tokio::time::timeout(Duration::from_secs(30), patched_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("change {i}: patch not seen"))
            .expect("Deployment watch ended");
        to_patch.push(patched.duration_since(start));
        // The ReplicaSet made from exactly this template (others are skipped).
        let created = loop {
            let (at, rs_hash) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("change {i}: no new ReplicaSet within 30 s"))
                .expect("ReplicaSet watch ended");
            if rs_hash.as_ref() == Some(&hash) {
                break at;
            }
        };
        latencies.push(created.duration_since(start));
    }
    watch.abort();
    deploy_watch.abort();
    assert_eq!(conflux.rollouts(), CHANGES as u64);

    let (first_min, min) = latencies
        .iter()
        .enumerate()
        .min_by_key(|(_, d)| **d)
        .map(|(i, d)| (i + 1, *d))
        .unwrap_or_default();
    println!(
        "fastest change: #{first_min} ({:.1} ms)",
        min.as_secs_f64() * 1e3
    );
    latencies.sort();
    to_patch.sort();
    let quantile =
        |v: &[Duration], q: f64| v[((v.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    let at = |q: f64| quantile(&latencies, q);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "of which ConfigMap update -> our template patch seen by a watch: p50 {:.1} ms, p99 {:.1} ms",
        ms(quantile(&to_patch, 0.50)),
        ms(quantile(&to_patch, 0.99)),
    );
    println!(
        "reload latency (ConfigMap update -> new ReplicaSet), {CHANGES} changes, debounce {} ms: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, min {:.1} ms",
        debounce.as_millis(),
        ms(at(0.50)),
        ms(at(0.99)),
        ms(latencies[latencies.len() - 1]),
        ms(latencies[0]),
    );
}
