//! The pure decision path of the reload controller at 5,000 workloads and 5,000 ConfigMaps: from a
//! config update to the patch decision (index lookup, watched set, content hash, decide), as the
//! controller runs it after fetching the changed config's data.
//!
//! Layout: 50 namespaces; ConfigMap `cm-i` (5 keys of 64 bytes) lives in namespace `ns-(i % 50)`;
//! Deployment `w-i` (opted in with `reloader.stakater.com/auto`) reads `cm-i` whole (`envFrom`) and
//! one key of `cm-(i+50)` (`configMapKeyRef`), so every config has two consumers.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::time::Duration;

use conflux_reloader::Workload;
use conflux_reloader::hash::{ConfigData, content_hash};
use conflux_reloader::index::ConsumerIndex;
use conflux_reloader::opt_in::{NamespaceConfigs, Options, watch};
use conflux_reloader::patch::{Action, WorkloadState, baseline_value, decide};
use conflux_watch_index::refs::{ConfigKind, ObjectRef};
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

const N: usize = 5_000;
const NAMESPACES: usize = 50;

/// Namespace → name → ConfigMap, so lookups borrow instead of building keys.
type Store = HashMap<String, HashMap<String, ConfigMap>>;

fn get<'a>(store: &'a Store, ns: &str, name: &str) -> Option<&'a ConfigMap> {
    store.get(ns)?.get(name)
}

fn config_map(i: usize, generation: usize) -> ConfigMap {
    let data: BTreeMap<String, String> = (0..5)
        .map(|k| (format!("key-{k}"), format!("{generation:064}")))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % NAMESPACES)},
        "data": data,
    }))
    .unwrap_or_default()
}

fn deployment(i: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": format!("w-{i}"), "namespace": format!("ns-{}", i % NAMESPACES),
                     "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{
            "name": "app",
            "envFrom": [{"configMapRef": {"name": format!("cm-{i}")}}],
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {
                "name": format!("cm-{}", (i + NAMESPACES) % N), "key": "key-0"}}}],
        }]}}},
    }))
    .unwrap_or_default()
}

/// One namespace of the store, as the opt-in rules read it (ConfigMaps only here).
struct Namespace<'a> {
    store: &'a Store,
    ns: &'a str,
}

impl NamespaceConfigs for Namespace<'_> {
    fn annotations(&self, _: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        get(self.store, self.ns, name).and_then(|cm| cm.metadata.annotations.as_ref())
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        Vec::new()
    }
}

/// Everything the controller would hold in memory.
struct World {
    index: ConsumerIndex,
    store: Store,
    states: HashMap<ObjectRef, WorkloadState>,
}

/// Lookup + watched set + hash + decide for one changed config; returns the number of rollouts.
fn on_config_update(world: &World, namespace: &str, name: &str) -> usize {
    let annotations =
        get(&world.store, namespace, name).and_then(|cm| cm.metadata.annotations.as_ref());
    let mut rollouts = 0;
    for hit in world
        .index
        .lookup(ConfigKind::ConfigMap, namespace, name, annotations)
    {
        let Some(entry) = world.index.get(hit.workload) else {
            continue;
        };
        let ns = &*hit.workload.namespace;
        let watched = watch(
            &entry.consumers,
            &entry.opt_in,
            Options::default(),
            &Namespace {
                store: &world.store,
                ns,
            },
        );
        let hash = content_hash(&watched, |_, n| {
            get(&world.store, ns, n).map(ConfigData::from_config_map)
        });
        let Some(state) = world.states.get(hit.workload) else {
            continue;
        };
        if let Action::Rollout(patch) = decide(state, &hash, Options::default()) {
            black_box(patch);
            rollouts += 1;
        }
    }
    rollouts
}

fn world() -> (World, Vec<Deployment>) {
    let deployments: Vec<Deployment> = (0..N).map(deployment).collect();
    let mut store = Store::new();
    let put = |store: &mut Store, i: usize, generation: usize| {
        store
            .entry(format!("ns-{}", i % NAMESPACES))
            .or_default()
            .insert(format!("cm-{i}"), config_map(i, generation));
    };
    for i in 0..N {
        put(&mut store, i, 0);
    }
    let mut index = ConsumerIndex::new(Options::default());
    let mut states = HashMap::new();
    for d in &deployments {
        let w = Workload::from(d);
        index.apply(w);
        let Some(mut state) = WorkloadState::of(w) else {
            continue;
        };
        // Baseline = the hash before any change, as recorded on first sight.
        let Some(entry) = w.object_ref().and_then(|o| index.get(&o)) else {
            continue;
        };
        let ns = state.namespace.clone();
        let watched = watch(&entry.consumers, &entry.opt_in, Options::default(), &());
        let hash = content_hash(&watched, |_, n| {
            get(&store, &ns, n).map(ConfigData::from_config_map)
        });
        state.remembered = Some(baseline_value(&hash));
        if let Some(o) = w.object_ref() {
            states.insert(o, state);
        }
    }
    assert_eq!(index.len(), N);
    assert_eq!(states.len(), N);
    // The update: every config changes its data once (generation 1).
    for i in 0..N {
        put(&mut store, i, 1);
    }
    (
        World {
            index,
            store,
            states,
        },
        deployments,
    )
}

fn benches(c: &mut Criterion) {
    let (world, deployments) = world();
    let changed: Vec<(String, String)> = (0..1024)
        .map(|j| {
            let i = (j * 7919) % N;
            (format!("ns-{}", i % NAMESPACES), format!("cm-{i}"))
        })
        .collect();
    // Every changed config rolls its two consumers.
    for (ns, name) in &changed {
        assert_eq!(on_config_update(&world, ns, name), 2);
    }

    let mut g = c.benchmark_group("decision");
    g.measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    let mut next = 0usize;
    g.bench_function("config_update_to_patch_decision", |b| {
        b.iter(|| {
            let (ns, name) = &changed[next % changed.len()];
            next += 1;
            black_box(on_config_update(&world, ns, name))
        })
    });
    g.bench_function("index_lookup_only", |b| {
        b.iter(|| {
            let (ns, name) = &changed[next % changed.len()];
            next += 1;
            black_box(
                world
                    .index
                    .lookup(ConfigKind::ConfigMap, ns, name, None)
                    .len(),
            )
        })
    });
    g.finish();

    let mut g = c.benchmark_group("build");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    g.bench_function("index_5000_workloads", |b| {
        b.iter(|| {
            let mut index = ConsumerIndex::new(Options::default());
            for d in &deployments {
                index.apply(Workload::from(d));
            }
            black_box(index.len())
        })
    });
    g.finish();
}

criterion_group!(decision, benches);
criterion_main!(decision);
