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
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use operator_bin::controllers::reload::ReloadConfig;
use reload_support::*;
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
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut known = std::collections::HashSet::new();
        let mut stream = watcher(rs_api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(rs)) = stream.next().await {
            let fresh = known.insert(rs.metadata.name.clone().unwrap_or_default());
            if fresh && tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    // The initial ReplicaSet.
    let _ = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;

    let mut latencies = Vec::with_capacity(CHANGES);
    for i in 1..=CHANGES {
        let start = Instant::now();
        apply_cm(&client, &ns, "cfg", json!({"v": i.to_string()}), json!({})).await;
        let created = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("change {i}: no new ReplicaSet within 30 s"))
            .expect("ReplicaSet watch ended");
        latencies.push(created.duration_since(start));
    }
    watch.abort();
    assert_eq!(conflux.rollouts(), CHANGES as u64);

    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
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
