//! The scenarios. Each prints a Markdown table (the ratio column is the peer against conflux).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conflux_benches::audit::{self, Requests};
use conflux_benches::contender::{Contender, metric_sum};
use conflux_benches::percentile;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::world::{self, World, ratio, secs};
use crate::{Settings, Slot};

const CONFIG_NAMESPACES: usize = 100;

fn cfg_ns(i: usize) -> String {
    format!("peers-cfg-{}", i % CONFIG_NAMESPACES)
}

fn selected<'a>(
    settings: &Settings,
    slots: &[&'a Slot],
) -> Vec<(&'a str, Result<&'a Contender, &'a str>)> {
    slots
        .iter()
        .filter(|s| settings.includes(&s.name))
        .map(|s| {
            (
                s.name.as_str(),
                s.contender.as_ref().map_err(String::as_str),
            )
        })
        .collect()
}

fn print_missing(table: &mut Vec<String>, name: &str, why: &str, columns: usize) {
    let mut row = format!("| {name} | not run: {why} |");
    for _ in 2..columns {
        row.push_str(" |");
    }
    table.push(row);
}

// ---------------------------------------------------------------------------------------------
// scale

/// Creates configs `0..n` (half ConfigMaps, half Secrets, 1 KiB each; every tenth ConfigMap
/// labelled for Flux's watchers) that do not exist yet.
async fn ensure_configs(client: &Client, from: usize, to: usize) {
    let payload = "x".repeat(1024);
    let mut objects = Vec::new();
    for i in from / 2..to / 2 {
        let ns = cfg_ns(i);
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
    world::apply_all(client, objects).await;
}

fn scale_workloads(n: usize) -> Vec<Value> {
    (0..n)
        .map(|d| {
            world::workload(
                &cfg_ns(d),
                &format!("app-{d}"),
                Some(&format!("cm-{d}")),
                Some(&format!("secret-{d}")),
                "scale",
            )
        })
        .collect()
}

/// Kustomizations `ks-k` referencing ConfigMap `cm-(10k)` (labelled) in their namespace, with a
/// source that does not exist and a 1 h retry, so kustomize-controller is quiet after its first
/// pass.
fn kustomization(namespace: &str, name: &str, cm: &str, scenario: &str) -> Value {
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace, "labels": {"peers/scenario": scenario}},
        "spec": {"interval": "1h", "retryInterval": "1h", "path": "./", "prune": true,
                 "sourceRef": {"kind": "GitRepository", "name": "absent"},
                 "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": cm}]}}})
}

pub async fn scale(
    world: &World,
    peers: &crate::world::Peers,
    settings: &Settings,
) -> anyhow::Result<()> {
    let client = &world.client;
    let nss: Vec<String> = (0..CONFIG_NAMESPACES).map(cfg_ns).collect();
    world::namespaces(client, &nss, json!({})).await;
    // conflux with the reload controller alone: what compares with Reloader.
    let reload_only = Slot {
        name: "conflux (reload only)".into(),
        contender: peers.conflux.contender.clone().map(|mut c| {
            c.name = "conflux (reload only)".into();
            for arg in c.args.iter_mut() {
                if arg.starts_with("--controllers=") {
                    *arg = "--controllers=reload".into();
                }
            }
            c
        }),
    };
    let slots = [
        &peers.conflux,
        &reload_only,
        &peers.reloader,
        &peers.wave,
        &peers.replicator,
        &peers.kopy,
        &peers.flux_operator,
        &peers.kustomize_watch,
        &peers.kustomize_nowatch,
    ];
    let contenders = selected(settings, &slots);
    let mut have = 0;
    for &size in &settings.scale_sizes {
        let t = Instant::now();
        ensure_configs(client, have, size).await;
        have = have.max(size);
        let fresh = scale_workloads(settings.workloads);
        world::apply_all(client, fresh.clone()).await;
        let ks: Vec<Value> = (0..settings.kustomizations)
            .map(|k| {
                let i = (k * 10) % (size / 2).max(1);
                kustomization(&cfg_ns(i), &format!("ks-{k}"), &format!("cm-{i}"), "scale")
            })
            .collect();
        world::apply_all(client, ks).await;
        world::quiet(client).await;
        println!(
            "peers: scale {size}: {size} configs, {} Deployments, {} Kustomizations ready in {:.0} s",
            settings.workloads,
            settings.kustomizations,
            t.elapsed().as_secs_f64()
        );
        let mut table = vec![
            format!(
                "#### {size} ConfigMaps + Secrets, {} opted-in Deployments, {} Kustomizations",
                settings.workloads, settings.kustomizations
            ),
            String::new(),
            format!(
                "| contender | peak RSS MiB | ratio | CPU s to settled | settled after s | ready after s | watches opened | requests at start-up | requests in {} s quiet | rollouts made (ideal 0) |",
                settings.quiet.as_secs()
            ),
            "|---|---|---|---|---|---|---|---|---|---|".into(),
        ];
        let mut conflux_rss = f64::NAN;
        for (name, contender) in &contenders {
            let contender = match contender {
                Ok(c) => *c,
                Err(why) => {
                    print_missing(&mut table, name, why, 10);
                    continue;
                }
            };
            world::reset_workloads(client, "scale", &fresh).await;
            world::quiet(client).await;
            let before = world::rollouts(client, "scale").await;
            let tag = format!("scale-{size}-{name}");
            let start = match world::start_measured(world, contender, &tag).await {
                Ok(s) => s,
                Err(err) => {
                    print_missing(&mut table, name, &format!("{err:#}"), 10);
                    continue;
                }
            };
            let mut audit = world.audit();
            tokio::time::sleep(settings.quiet).await;
            let quiet_requests = audit.take();
            let rss = start.running.peak_rss_mib();
            let rolled = world::rollouts(client, "scale")
                .await
                .saturating_sub(before);
            start.running.kill();
            if *name == "conflux" {
                conflux_rss = rss;
            }
            let row = format!(
                "| {name} | {rss:.1} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {rolled} |",
                if *name == "conflux" {
                    "1".into()
                } else {
                    ratio(rss, conflux_rss)
                },
                start.settled.cpu_seconds,
                start.settled.settled.as_secs_f64(),
                secs(start.settled.ready),
                watches(&start.requests),
                audit::summary(&start.requests),
                audit::summary(&quiet_requests),
            );
            println!("peers: scale {size}: {row}");
            table.push(row);
        }
        print_table(&table);
    }
    Ok(())
}

fn watches(requests: &Requests) -> String {
    let mut by: Vec<String> = requests
        .iter()
        .filter(|(k, _)| k.starts_with("WATCH "))
        .map(|(k, n)| format!("{} {n}", k.trim_start_matches("WATCH ")))
        .collect();
    by.sort();
    format!(
        "{} ({})",
        audit::with_verb(requests, "WATCH"),
        by.join(", ")
    )
}

fn print_table(lines: &[String]) {
    println!();
    for line in lines {
        println!("{line}");
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// rollout

/// conflux with `--reload-debounce=0`: no coalescing window (the latency a peer without one has,
/// and the storms it lets through).
fn conflux_without_debounce(peers: &crate::world::Peers) -> Slot {
    let mut slot = peers.conflux.clone();
    slot.name = "conflux --reload-debounce=0".into();
    if let Ok(c) = &mut slot.contender {
        c.name = slot.name.clone();
        c.args.push("--reload-debounce=0".into());
    }
    slot
}

/// When new ReplicaSets were seen, by owning Deployment.
type Seen = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

/// Records, per Deployment, when a watch first saw a ReplicaSet of it created after `since`.
fn watch_new_replicasets(client: &Client, namespace: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Default::default();
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let out = seen.clone();
    let handle = tokio::spawn(async move {
        let mut known = std::collections::HashSet::new();
        let mut first = true;
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::InitApply(rs) => {
                    known.insert(rs.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::InitDone => first = false,
                watcher::Event::Apply(rs) if !first => {
                    let name = rs.metadata.name.clone().unwrap_or_default();
                    if known.insert(name) {
                        let owner = rs
                            .metadata
                            .owner_references
                            .as_ref()
                            .and_then(|o| o.first())
                            .map(|o| o.name.clone())
                            .unwrap_or_default();
                        out.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(owner)
                            .or_default()
                            .push(Instant::now());
                    }
                }
                _ => {}
            }
        }
    });
    (seen, handle)
}

pub async fn rollout(
    world: &World,
    peers: &crate::world::Peers,
    settings: &Settings,
) -> anyhow::Result<()> {
    let client = &world.client;
    let ns = "peers-roll".to_owned();
    world::namespaces(client, std::slice::from_ref(&ns), json!({})).await;
    let n = settings.changes;
    let configs: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("roll-{i}"), "namespace": ns}, "data": {"v": "0"}})
        })
        .collect();
    let fresh: Vec<Value> = (0..n)
        .map(|i| {
            world::workload(
                &ns,
                &format!("roll-{i}"),
                Some(&format!("roll-{i}")),
                None,
                "rollout",
            )
        })
        .collect();
    world::apply_all(client, fresh.clone()).await;
    let conflux_fast = conflux_without_debounce(peers);
    let slots = [&peers.conflux, &conflux_fast, &peers.reloader, &peers.wave];
    let contenders = selected(settings, &slots);
    let mut table = vec![
        format!("#### {n} config changes, each to one workload (one every 300 ms)"),
        String::new(),
        "| contender | p50 ms | p99 ms | ratio p99 | changes seen rolled | rollouts made (ideal {n}) |".replace("{n}", &n.to_string()),
        "|---|---|---|---|---|---|".into(),
    ];
    let mut conflux_p99 = f64::NAN;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (round, (name, contender)) in contenders.iter().enumerate() {
        let contender = match contender {
            Ok(c) => *c,
            Err(why) => {
                print_missing(&mut table, name, why, 6);
                continue;
            }
        };
        // Fresh values each round, so every contender starts from configs it has never seen change.
        world::apply_all(client, configs.clone()).await;
        world::reset_workloads(client, "rollout", &fresh).await;
        world::quiet(client).await;
        let start = match world::start_measured(world, contender, &format!("rollout-{name}")).await
        {
            Ok(s) => s,
            Err(err) => {
                print_missing(&mut table, name, &format!("{err:#}"), 6);
                continue;
            }
        };
        // Steady state: what the contender wrote at start (conflux's baselines on every opted-in
        // workload, which the deployment controller then copies onto each one's ReplicaSet) is
        // worked off before the changes, so the latency is the change's alone.
        world::quiet(client).await;
        let before = world::rollouts(client, "rollout").await;
        let (seen, watch) = watch_new_replicasets(client, &ns);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut changed_at = Vec::with_capacity(n);
        for i in 0..n {
            let patch = json!({"data": {"v": format!("{}-{i}", round + 1)}});
            changed_at.push(Instant::now());
            cms.patch(
                &format!("roll-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Wait for all, 60 s at most after the last change.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let done = seen.lock().unwrap_or_else(|p| p.into_inner()).len();
            if done >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        watch.abort();
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let latencies: Vec<Duration> = (0..n)
            .filter_map(|i| {
                seen.get(&format!("roll-{i}"))
                    .and_then(|t| t.first())
                    .map(|t| t.duration_since(changed_at[i]))
            })
            .collect();
        let rolled = world::rollouts(client, "rollout")
            .await
            .saturating_sub(before);
        start.running.kill();
        let ms = |p| percentile(&latencies, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        let p99 = ms(99.0);
        if *name == "conflux" {
            conflux_p99 = p99;
        }
        let row = format!(
            "| {name} | {:.0} | {p99:.0} | {} | {}/{n} | {rolled} |",
            ms(50.0),
            if *name == "conflux" {
                "1".into()
            } else {
                ratio(p99, conflux_p99)
            },
            latencies.len()
        );
        println!("peers: rollout: {row}");
        table.push(row);
    }
    print_table(&table);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// storms

pub async fn storms(
    world: &World,
    peers: &crate::world::Peers,
    settings: &Settings,
) -> anyhow::Result<()> {
    let client = &world.client;
    let fast = conflux_without_debounce(peers);
    let slots = [&peers.conflux, &fast, &peers.reloader, &peers.wave];
    let contenders = selected(settings, &slots);
    let flip_writes = (settings.flip.as_secs() * 10) as usize | 1; // odd: ends on the other value
    let mut table = vec![
        "#### Storms: rollouts made (ideal in the heading)".into(),
        String::new(),
        format!(
            "| contender | flipping Secret, {flip_writes} writes in {} s (ideal 1) | first start with {} workloads (ideal 0) | restart (SIGKILL) with {n} workloads (ideal 0) | Flux re-applies 100 workloads every 60 s × {} after 1 change (ideal 1) |",
            settings.flip.as_secs(),
            settings.restart_workloads,
            settings.reapply_rounds,
            n = settings.restart_workloads,
        ),
        "|---|---|---|---|---|".into(),
    ];
    // The objects: one flipping Secret and its workload; restart workloads; re-applied workloads.
    let nss: Vec<String> = ["peers-flip", "peers-restart", "peers-reapply"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    world::namespaces(client, &nss, json!({})).await;
    let flip_fresh = vec![world::workload(
        "peers-flip",
        "flip",
        None,
        Some("flip"),
        "flip",
    )];
    let restart_configs: Vec<Value> = (0..settings.restart_workloads)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("r-{i}"), "namespace": "peers-restart"}, "data": {"v": "0"}}))
        .collect();
    world::apply_all(client, restart_configs).await;
    let restart_fresh: Vec<Value> = (0..settings.restart_workloads)
        .map(|i| {
            world::workload(
                "peers-restart",
                &format!("r-{i}"),
                Some(&format!("r-{i}")),
                None,
                "restart",
            )
        })
        .collect();
    let reapply_configs: Vec<Value> = (0..100)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("f-{i}"), "namespace": "peers-reapply"}, "data": {"v": "0"}}))
        .collect();
    world::apply_all(client, reapply_configs).await;
    let reapply_fresh: Vec<Value> = (0..100)
        .map(|i| {
            world::workload(
                "peers-reapply",
                &format!("f-{i}"),
                Some(&format!("f-{i}")),
                None,
                "reapply",
            )
        })
        .collect();
    // As Flux would: created and re-applied by kustomize-controller's field manager.
    world::apply_all_as(client, "kustomize-controller", reapply_fresh.clone()).await;
    world::apply_all(client, flip_fresh.clone()).await;
    world::apply_all(client, restart_fresh.clone()).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "peers-flip");
    let cms_reapply: Api<ConfigMap> = Api::namespaced(client.clone(), "peers-reapply");

    for (round, (name, contender)) in contenders.iter().enumerate() {
        let contender = match contender {
            Ok(c) => *c,
            Err(why) => {
                print_missing(&mut table, name, why, 5);
                continue;
            }
        };
        world::apply_all(
            client,
            vec![json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "flip", "namespace": "peers-flip"}, "stringData": {"v": "a"}})],
        )
        .await;
        world::reset_workloads(client, "flip", &flip_fresh).await;
        world::reset_workloads(client, "restart", &restart_fresh).await;
        world::reset_workloads(client, "reapply", &reapply_fresh).await;
        world::quiet(client).await;

        // First start, then the flipping Secret.
        let tag = format!("storms-{name}");
        let start = world::start_measured(world, contender, &tag).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let first_start = world::rollouts(client, "restart").await;
        let flip_before = world::rollouts(client, "flip").await;
        let interval = Duration::from_millis(100);
        let t0 = Instant::now();
        for i in 0..flip_writes {
            let v = if i % 2 == 0 { "b" } else { "a" };
            let patch = json!({"stringData": {"v": v}});
            let _ = secrets
                .patch("flip", &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let next = interval * (i as u32 + 1);
            if let Some(wait) = next.checked_sub(t0.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        let flip = world::rollouts(client, "flip")
            .await
            .saturating_sub(flip_before);

        // Restart: SIGKILL, start again, settle, 10 s more.
        let before_restart = world::rollouts(client, "restart").await;
        start.running.kill();
        let again = world::start_measured(world, contender, &format!("{tag}-again")).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let restart = world::rollouts(client, "restart")
            .await
            .saturating_sub(before_restart);

        // Flux re-applies every 60 s after one real change.
        let reapply_before = world::rollouts(client, "reapply").await;
        let patch = json!({"data": {"v": format!("{}", round + 1)}});
        cms_reapply
            .patch("f-0", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        for _ in 0..settings.reapply_rounds {
            tokio::time::sleep(Duration::from_secs(60)).await;
            world::apply_all_as(client, "kustomize-controller", reapply_fresh.clone()).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let reapply = world::rollouts(client, "reapply")
            .await
            .saturating_sub(reapply_before);
        again.running.kill();
        let row = format!("| {name} | {flip} | {first_start} | {restart} | {reapply} |");
        println!("peers: storms: {row}");
        table.push(row);
    }
    print_table(&table);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// fan-out

/// How a contender is asked to fan one Secret out: annotations on the source, and objects to
/// create beside it.
struct FanOut {
    name: String,
    contender: Result<Contender, String>,
    annotations: Value,
    extra: Vec<Value>,
    /// The copies' name (ResourceSet copies may be named otherwise).
    copy_name: String,
}

pub async fn fanout(
    world: &World,
    peers: &crate::world::Peers,
    settings: &Settings,
) -> anyhow::Result<()> {
    let client = &world.client;
    let n = settings.fanout;
    let targets: Vec<String> = (0..n).map(|i| format!("peers-fan-{i}")).collect();
    world::namespaces(client, &targets, json!({"peers/fanout": "yes"})).await;
    world::namespaces(client, &["peers-fan-src".to_owned()], json!({})).await;
    world::quiet(client).await;

    let contender = |slot: &Slot| slot.contender.clone();
    let mut variants = vec![
        FanOut {
            name: "conflux (ConfigSync)".into(),
            contender: contender(&peers.conflux),
            annotations: json!({}),
            extra: vec![
                json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
                "metadata": {"name": "peers-fan"},
                "spec": {"source": {"kind": "Secret", "namespace": "peers-fan-src", "name": "fan-source"},
                         "target": {"name": "fan-source", "namespaceSelector": {"matchLabels": {"peers/fanout": "yes"}}}}}),
            ],
            copy_name: "fan-source".into(),
        },
        FanOut {
            name: "conflux (kopy annotation)".into(),
            contender: contender(&peers.conflux),
            annotations: json!({"kopy.kot-labs.com/sync": "peers/fanout=yes"}),
            extra: vec![],
            copy_name: "fan-source".into(),
        },
        FanOut {
            name: "kopy".into(),
            contender: contender(&peers.kopy),
            annotations: json!({"kopy.kot-labs.com/sync": "peers/fanout=yes"}),
            extra: vec![],
            copy_name: "fan-source".into(),
        },
        FanOut {
            name: "replicator".into(),
            contender: contender(&peers.replicator),
            annotations: json!({"replicator.v1.mittwald.de/replicate-to-matching": "peers/fanout=yes"}),
            extra: vec![],
            copy_name: "fan-source".into(),
        },
    ];
    // Flux Operator: a ResourceSet with one input per namespace, each a Secret copied from the
    // source.
    let inputs: Vec<Value> = targets.iter().map(|t| json!({"ns": t})).collect();
    variants.push(FanOut {
        name: "Flux Operator (ResourceSet)".into(),
        contender: contender(&peers.flux_operator),
        annotations: json!({}),
        extra: vec![json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": "peers-fan", "namespace": "flux-system"},
            "spec": {"inputs": inputs,
                     "resourcesTemplate": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: fan-source\n  namespace: << inputs.ns >>\n  annotations:\n    fluxcd.controlplane.io/copyFrom: peers-fan-src/fan-source\n"}})],
        copy_name: "fan-source".into(),
    });
    let mut table = vec![
        format!("#### One Secret to {n} namespaces"),
        String::new(),
        "| contender | all copies seen after s | ratio | update seen everywhere after s | requests (create + update) | copies left 30 s after the source is deleted |".into(),
        "|---|---|---|---|---|---|".into(),
    ];
    let mut conflux_time = f64::NAN;
    for v in variants.iter().filter(|v| settings.includes(&v.name)) {
        let contender = match &v.contender {
            Ok(c) => c,
            Err(why) => {
                print_missing(&mut table, &v.name, why, 6);
                continue;
            }
        };
        let start =
            match world::start_measured(world, contender, &format!("fanout-{}", v.name)).await {
                Ok(s) => s,
                Err(err) => {
                    print_missing(&mut table, &v.name, &format!("{err:#}"), 6);
                    continue;
                }
            };
        let mut audit = world.audit();
        let t0 = Instant::now();
        let source = |value: &str| {
            json!({"apiVersion": "v1", "kind": "Secret",
            // Labelled for Flux's watchers: Flux Operator re-copies a watched source at once
            // (otherwise hourly); the others ignore the label.
            "metadata": {"name": "fan-source", "namespace": "peers-fan-src", "annotations": v.annotations,
                         "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
            "stringData": {"v": value}})
        };
        let timeout = settings.fanout_timeout;
        world::apply_all(client, vec![source("one")]).await;
        world::apply_all(client, v.extra.clone()).await;
        let created = copies_reach(client, &v.copy_name, n, "one", t0, timeout).await;
        let t1 = Instant::now();
        world::apply_all(client, vec![source("two")]).await;
        let updated = copies_reach(client, &v.copy_name, n, "two", t1, timeout).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let requests = audit.take();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "peers-fan-src");
        let _ = secrets.delete("fan-source", &DeleteParams::default()).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        let left = count_copies(client, &v.copy_name).await;
        start.running.kill();
        let created_s = created.as_ref().ok().map(|d| d.as_secs_f64());
        if v.name == "conflux (ConfigSync)" {
            conflux_time = created_s.unwrap_or(f64::NAN);
        }
        let shown = |r: &Result<Duration, usize>| match r {
            Ok(d) => format!("{:.2}", d.as_secs_f64()),
            Err(seen) => format!("{seen}/{n} after {} s", timeout.as_secs()),
        };
        let row = format!(
            "| {} | {} | {} | {} | {} | {left} |",
            v.name,
            shown(&created),
            if v.name == "conflux (ConfigSync)" {
                "1".into()
            } else {
                ratio(created_s.unwrap_or(f64::NAN), conflux_time)
            },
            shown(&updated),
            audit::summary(&requests),
        );
        println!("peers: fanout: {row}");
        table.push(row);
        // Clean up for the next one: the extra objects, then every copy.
        for extra in &v.extra {
            delete_dynamic(client, extra).await;
        }
        delete_copies(client, &v.copy_name).await;
    }
    print_table(&table);
    Ok(())
}

/// Waits until `n` Secrets named `name` outside the source namespace carry `v = value`: the time
/// since `since`, or how many did when `timeout` ran out.
async fn copies_reach(
    client: &Client,
    name: &str,
    n: usize,
    value: &str,
    since: Instant,
    timeout: Duration,
) -> Result<Duration, usize> {
    let api: Api<Secret> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut have: BTreeMap<String, bool> = BTreeMap::new();
    let want = value.as_bytes();
    let deadline = tokio::time::Instant::from_std(since) + timeout;
    loop {
        let seen = have.values().filter(|ok| **ok).count();
        let Ok(Some(next)) = tokio::time::timeout_at(deadline, stream.next()).await else {
            return Err(seen);
        };
        let Ok(event) = next else { continue };
        let mut apply = |s: &Secret| {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            if ns == "peers-fan-src" {
                return;
            }
            let ok = s
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .is_some_and(|v| v.0 == want);
            have.insert(ns, ok);
        };
        match &event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => apply(s),
            watcher::Event::Delete(s) => {
                have.remove(&s.metadata.namespace.clone().unwrap_or_default());
            }
            _ => {}
        }
        if have.values().filter(|ok| **ok).count() >= n {
            return Ok(since.elapsed());
        }
    }
}

async fn count_copies(client: &Client, name: &str) -> usize {
    let api: Api<Secret> = Api::all(client.clone());
    api.list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|s| s.metadata.namespace.as_deref() != Some("peers-fan-src"))
                .count()
        })
        .unwrap_or(0)
}

async fn delete_copies(client: &Client, name: &str) {
    let api: Api<Secret> = Api::all(client.clone());
    let Ok(list) = api
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
    else {
        return;
    };
    futures::stream::iter(list.items)
        .for_each_concurrent(32, |s| async move {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            // Copies with finalizers (kopy's) would stay; drop them first.
            let _ = api
                .patch(
                    &s.metadata.name.clone().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = api
                .delete(
                    &s.metadata.name.clone().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        })
        .await;
    world::quiet(client).await;
}

async fn delete_dynamic(client: &Client, object: &Value) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        conflux_tests::objects::plural(kind),
    );
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let _ = api.delete(name, &DeleteParams::default()).await;
}

// ---------------------------------------------------------------------------------------------
// watch-configs

pub async fn watch_configs(
    world: &World,
    peers: &crate::world::Peers,
    settings: &Settings,
) -> anyhow::Result<()> {
    let client = &world.client;
    let ns = "peers-watch".to_owned();
    let n = settings.kustomizations;
    world::namespaces(client, std::slice::from_ref(&ns), json!({})).await;
    world::apply_all(
        client,
        vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared-vars", "namespace": ns,
                     "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
        "data": {"v": "0"}})],
    )
    .await;
    let ks: Vec<Value> = (0..n)
        .map(|k| kustomization(&ns, &format!("w-{k}"), "shared-vars", "watch"))
        .collect();
    world::apply_all(client, ks).await;
    world::quiet(client).await;
    let mut trigger = peers.conflux.clone();
    if let Ok(c) = &peers.conflux.contender {
        let mut c = c.clone();
        c.name = "conflux (flux-trigger only)".into();
        for arg in c.args.iter_mut() {
            if arg.starts_with("--controllers=") {
                *arg = "--controllers=flux-trigger".into();
            }
        }
        trigger.name = c.name.clone();
        trigger.contender = Ok(c);
    }
    let slots = [&trigger, &peers.kustomize_watch, &peers.kustomize_nowatch];
    let contenders = selected(settings, &slots);
    let mut table = vec![
        format!("#### One labelled ConfigMap referenced by {n} Kustomizations changes"),
        String::new(),
        "| contender | every Kustomization asked after s | ratio | requests | CPU s: contender, API server, etcd | peak RSS MiB | RSS after s MiB |".into(),
        "|---|---|---|---|---|---|---|".into(),
    ];
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    );
    let kss: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let mut conflux_time = f64::NAN;
    for (round, (name, contender)) in contenders.iter().enumerate() {
        let contender = match contender {
            Ok(c) => *c,
            Err(why) => {
                print_missing(&mut table, name, why, 6);
                continue;
            }
        };
        let start = match world::start_measured(world, contender, &format!("watch-{name}")).await {
            Ok(s) => s,
            Err(err) => {
                print_missing(&mut table, name, &format!("{err:#}"), 6);
                continue;
            }
        };
        let is_conflux = name.starts_with("conflux");
        // conflux is seen asking through a watch of the Kustomizations (polling them with LISTs
        // would load the API server it is measured against).
        let asked_watch = if is_conflux {
            Some(asked_by_watch(kss.clone(), n).await)
        } else {
            None
        };
        let cpu_before = cpu_now(world, &start.running);
        let reconciles_before = start
            .running
            .metrics_text()
            .map(|t| metric_sum(&t, "controller_runtime_reconcile_total", &[]))
            .unwrap_or(0.0);
        let mut audit = world.audit();
        let t0 = Instant::now();
        let patch = json!({"data": {"v": format!("{}", round + 1)}});
        cms.patch(
            "shared-vars",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        // With its watchers off kustomize-controller does not react: it is here for its memory
        // (the watchers' cost is the difference); a short wait shows it.
        let wait = if name.contains("watchers off") {
            15
        } else {
            120
        };
        let deadline = Instant::now() + Duration::from_secs(wait);
        let mut asked = None;
        match asked_watch {
            Some(all_asked) => {
                asked = tokio::time::timeout_at(deadline.into(), all_asked)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|at: Instant| at.saturating_duration_since(t0));
            }
            None => {
                while Instant::now() < deadline {
                    let r = start
                        .running
                        .metrics_text()
                        .map(|t| metric_sum(&t, "controller_runtime_reconcile_total", &[]))
                        .unwrap_or(0.0);
                    if (r - reconciles_before).max(0.0) as usize >= n {
                        asked = Some(t0.elapsed());
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        let cpu_after = cpu_now(world, &start.running);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let requests = audit.take();
        let secs_asked = asked.map(|d| d.as_secs_f64());
        if is_conflux {
            conflux_time = secs_asked.unwrap_or(f64::NAN);
        }
        let cpu: Vec<String> = cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|(b, a)| format!("{:.2}", a - b))
            .collect();
        let row = format!(
            "| {name} | {} | {} | {} | {} | {:.1} | {:.1} |",
            secs_asked.map_or(format!("not asked within {wait} s"), |s| format!("{s:.2}")),
            if is_conflux {
                "1".into()
            } else {
                ratio(secs_asked.unwrap_or(f64::NAN), conflux_time)
            },
            audit::summary(&requests),
            cpu.join(", "),
            start.running.peak_rss_mib(),
            start.running.rss_mib(),
        );
        println!("peers: watch-configs: {row}");
        table.push(row);
        start.running.kill();
    }
    print_table(&table);
    Ok(())
}

/// Watches the Kustomizations of `api` (from a list made now) and resolves to the instant the
/// `reconcile.fluxcd.io/requestedAt` of `n` of them changed.
async fn asked_by_watch(
    api: Api<DynamicObject>,
    n: usize,
) -> tokio::sync::oneshot::Receiver<Instant> {
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let requested = |o: &DynamicObject| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("reconcile.fluxcd.io/requestedAt"))
                .cloned()
                .unwrap_or_default()
        };
        let mut before: HashMap<String, String> = HashMap::new();
        let mut changed: std::collections::HashSet<String> = Default::default();
        let mut listed_tx = Some(listed_tx);
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::InitApply(o)) => {
                    before.insert(o.metadata.name.clone().unwrap_or_default(), requested(&o));
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(o)) => {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    if before.get(&name) != Some(&requested(&o)) {
                        changed.insert(name);
                    }
                    if changed.len() >= n {
                        let _ = done_tx.send(Instant::now());
                        return;
                    }
                }
                _ => {}
            }
        }
    });
    let _ = listed.await;
    done
}

/// CPU seconds so far of the contender, the API server and etcd (NaN when unknown).
fn cpu_now(world: &World, running: &conflux_benches::contender::Running) -> [f64; 3] {
    let of = |name: &str| {
        std::fs::read_to_string(world.cluster.dir().join(format!("{name}.pid")))
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
            .and_then(conflux_benches::contender::cpu_seconds)
            .unwrap_or(f64::NAN)
    };
    [running.cpu_seconds(), of("kube-apiserver"), of("etcd")]
}
