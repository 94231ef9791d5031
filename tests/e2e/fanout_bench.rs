//! Fan-out benchmark on the local API server: one source → 1,000 namespaces through a ConfigSync,
//! against the same 1,000 writes issued directly by a plain client loop in the same run; then one
//! source update → all 1,000 copies updated, against 1,000 direct updates.
//!
//! Ignored by default (it creates 1,000 namespaces). Run it with
//!
//! ```text
//! cargo test -p conflux-tests --release --test fanout_bench -- --ignored --nocapture
//! ```
//!
//! `FANOUT_NAMESPACES` (default 1000) and `FANOUT_CONCURRENT` (default 4, conflux's
//! `--concurrent` default) change the size and the controller's parallelism.

mod copy_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use conflux_tests::cluster;
use copy_support::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const OWNER: &str = "copy.conflux.dev/config-sync";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until `n` distinct ConfigMaps matching `labels` have `data.v == value`, watching (not
/// polling) so the measurement does not load the API server.
fn converged(
    client: &Client,
    labels: String,
    value: &'static str,
    n: usize,
) -> tokio::task::JoinHandle<Instant> {
    let api: Api<ConfigMap> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut done: HashSet<(String, String)> = HashSet::new();
        let mut stream = watcher(api, watcher::Config::default().labels(&labels))
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Ok(Some(cm)) = stream.try_next().await {
            let key = (
                cm.metadata.namespace.clone().unwrap_or_default(),
                cm.metadata.name.clone().unwrap_or_default(),
            );
            if cm
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .map(String::as_str)
                == Some(value)
            {
                done.insert(key);
                if done.len() >= n {
                    return Instant::now();
                }
            }
        }
        panic!("watch ended before convergence");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: creates 1,000 namespaces; run with --ignored --nocapture"]
async fn fan_out_one_source_to_a_thousand_namespaces() {
    let n = env_usize("FANOUT_NAMESPACES", 1000);
    let concurrent = env_usize("FANOUT_CONCURRENT", 4);
    let c = cluster();
    let client = c.client().await;
    install_crd(&client).await;
    let shard = shard("bench");

    let src = namespace(c, &client, "bench-src", &[]).await;
    let namespaces: Vec<String> = (0..n).map(|i| format!("bench-{shard}-{i}")).collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(&namespaces)
        .map(|name| {
            let ns_api = ns_api.clone();
            let shard = shard.clone();
            async move {
                let ns: Namespace = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {TENANT: shard}},
                }))
                .expect("namespace");
                ns_api
                    .create(&PostParams::default(), &ns)
                    .await
                    .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"v": "one"}}),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[], concurrent).await;
    let name = format!("bench-{shard}");

    // 1. Fan-out creates, through conflux.
    let waiter = converged(&client, format!("{OWNER}={name}"), "one", n);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    create_config_sync(
        &client,
        &name,
        &shard,
        json!({
            "source": {"kind": "ConfigMap", "namespace": src, "name": "info"},
            "target": {"namespaceSelector": {"matchLabels": {TENANT: shard}}},
        }),
    )
    .await;
    let sync_create = waiter.await.expect("watch task").duration_since(start);

    // 2. The same creates, by a plain client loop.
    let start = Instant::now();
    for ns in &namespaces {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "direct", "labels": {"bench": "direct"}},
            "data": {"v": "one"},
        }))
        .expect("ConfigMap");
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("direct create in {ns}: {e}"));
    }
    let direct_create = start.elapsed();

    // 3. One source update, through conflux.
    let waiter = converged(&client, format!("{OWNER}={name}"), "two", n);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"v": "two"}}),
    )
    .await;
    let sync_update = waiter.await.expect("watch task").duration_since(start);

    // 4. The same updates, by a plain client loop.
    let start = Instant::now();
    for ns in &namespaces {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(
                "direct",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "two"}})),
            )
            .await
            .unwrap_or_else(|e| panic!("direct update in {ns}: {e}"));
    }
    let direct_update = start.elapsed();

    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!();
    println!("fan-out of one ConfigMap to {n} namespaces (conflux --concurrent={concurrent})");
    println!("| step | conflux | plain client loop | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| create {n} copies | {:.2} s | {:.2} s | {:.2} |",
        sync_create.as_secs_f64(),
        direct_create.as_secs_f64(),
        ratio(sync_create, direct_create)
    );
    println!(
        "| update {n} copies | {:.2} s | {:.2} s | {:.2} |",
        sync_update.as_secs_f64(),
        direct_update.as_secs_f64(),
        ratio(sync_update, direct_update)
    );

    // Leave the cluster lighter for whatever runs next in this binary.
    for ns in &namespaces {
        let _ = ns_api.delete(ns, &Default::default()).await;
    }
}
