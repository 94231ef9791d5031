//! Index benchmarks at 100k referrers × 4 references across 10k namespaces (see `common`), against
//! the same lookups done by scanning a `Vec` of the objects, which is what a controller without an
//! index does on every ConfigMap/Secret event.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use conflux_watch_index::index::ReverseIndex;
use conflux_watch_index::refs::{ConfigKind, ReferenceSet, Referrer};
use conflux_watch_index::selector::Selector;
use conflux_watch_index::trigger::DEFAULT_WATCH_CONFIGS_SELECTOR;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

mod common;

fn build_index(referrers: Vec<Referrer>) -> ReverseIndex {
    let mut index = ReverseIndex::new();
    for r in referrers {
        index.apply(r);
    }
    index
}

fn benches(c: &mut Criterion) {
    let set = ReferenceSet::flux();
    let objects = common::objects();
    let referrers: Vec<Referrer> = objects.iter().filter_map(|o| set.extract(o)).collect();
    let index = build_index(referrers.clone());
    assert_eq!(index.stats().edges, 4 * common::REFERRERS);

    // Keys looked up: a shared one and an own one, spread over namespaces.
    let lookups: Vec<(ConfigKind, String, String)> = (0..1024)
        .map(|i| {
            let ns = common::namespace((i * 7919) % common::NAMESPACES);
            if i % 2 == 0 {
                (ConfigKind::ConfigMap, ns, "cluster-vars".to_owned())
            } else {
                (ConfigKind::Secret, ns, format!("app-{}-creds-v0", i % 10))
            }
        })
        .collect();

    let mut g = c.benchmark_group("build");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("index_100k_referrers", |b| {
        b.iter_batched(
            || referrers.clone(),
            |r| black_box(build_index(r)),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("extract_and_index_100k_objects", |b| {
        b.iter(|| {
            let mut index = ReverseIndex::new();
            for o in &objects {
                if let Some(r) = set.extract(o) {
                    index.apply(r);
                }
            }
            black_box(index)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("lookup");
    g.measurement_time(Duration::from_secs(3));
    // Find the key and count its referrers (the ids are counted, the referrers not touched).
    g.bench_function("index_count", |b| {
        let mut i = 0;
        b.iter(|| {
            let (kind, ns, name) = &lookups[i % lookups.len()];
            i += 1;
            black_box(index.referrers_of(*kind, ns, name).len())
        })
    });
    // What an event handler does under the read lock: copy the referrers out (10 for a shared key,
    // 1 for an own one).
    g.bench_function("index_collect", |b| {
        let mut i = 0;
        b.iter(|| {
            let (kind, ns, name) = &lookups[i % lookups.len()];
            i += 1;
            black_box(
                index
                    .referrers_of(*kind, ns, name)
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        })
    });
    g.bench_function("index_dependency_order", |b| {
        let key = conflux_watch_index::refs::ConfigKey::new(
            ConfigKind::ConfigMap,
            common::namespace(42),
            "cluster-vars",
        );
        b.iter(|| black_box(index.referrers_in_dependency_order(&key).order.len()))
    });
    g.sample_size(10);
    // A controller without an index: extract references from every cached object.
    g.bench_function("scan_objects", |b| {
        let mut i = 0;
        b.iter(|| {
            let (kind, ns, name) = &lookups[i % lookups.len()];
            i += 1;
            let hits = objects
                .iter()
                .filter(|o| {
                    set.references(o).iter().any(|r| {
                        r.key.kind == *kind && &*r.key.namespace == ns && &*r.key.name == name
                    })
                })
                .count();
            black_box(hits)
        })
    });
    // The generous variant: references already extracted, only compared.
    g.bench_function("scan_extracted_refs", |b| {
        let mut i = 0;
        b.iter(|| {
            let (kind, ns, name) = &lookups[i % lookups.len()];
            i += 1;
            let hits = referrers
                .iter()
                .filter(|r| {
                    r.references.iter().any(|r| {
                        r.key.kind == *kind && &*r.key.namespace == ns && &*r.key.name == name
                    })
                })
                .count();
            black_box(hits)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("update");
    g.measurement_time(Duration::from_secs(3));
    // Alternate one referrer between two versions whose own references differ: every apply
    // unlinks two keys (freeing them) and links two new ones.
    let moved: Vec<[Referrer; 2]> = (0..256)
        .map(|k| {
            let (n, i) = ((k * 37) % common::NAMESPACES, k % common::PER_NAMESPACE);
            [0, 1].map(|v| {
                set.extract(&common::object(n, i, v))
                    .unwrap_or_else(|| unreachable!())
            })
        })
        .collect();
    let mut index = build_index(referrers.clone());
    g.bench_function("apply_moving_refs", |b| {
        let mut k = 0usize;
        b.iter_batched(
            || {
                let (which, pass) = (k % moved.len(), k / moved.len());
                k += 1;
                // Pass 0 moves every referrer to version 1, pass 1 back to 0, and so on.
                moved[which][1 - pass % 2].clone()
            },
            |r| index.apply(r),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("apply_unchanged_refs", |b| {
        b.iter_batched(
            || moved[0][0].clone(),
            |r| index.apply(r),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("extract_one_object", |b| {
        let o = common::object(1, 1, 0);
        b.iter(|| black_box(set.extract(&o)))
    });
    g.finish();

    let mut g = c.benchmark_group("selector");
    g.measurement_time(Duration::from_secs(3));
    let selector =
        Selector::parse(DEFAULT_WATCH_CONFIGS_SELECTOR).unwrap_or_else(|e| panic!("{e}"));
    let labels: BTreeMap<String, String> = [
        ("app.kubernetes.io/name", "podinfo"),
        ("app.kubernetes.io/part-of", "apps"),
        ("kustomize.toolkit.fluxcd.io/name", "apps"),
        ("kustomize.toolkit.fluxcd.io/namespace", "flux-system"),
        ("reconcile.fluxcd.io/watch", "Enabled"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    g.bench_function("match_default", |b| {
        b.iter(|| black_box(selector.matches(black_box(&labels))))
    });
    let complex = Selector::parse("owner!=helm,app.kubernetes.io/part-of in (apps,infra),!skip")
        .unwrap_or_else(|e| panic!("{e}"));
    g.bench_function("match_three_requirements", |b| {
        b.iter(|| black_box(complex.matches(black_box(&labels))))
    });
    g.bench_function("parse_default", |b| {
        b.iter(|| black_box(Selector::parse(black_box(DEFAULT_WATCH_CONFIGS_SELECTOR))))
    });
    g.finish();
}

criterion_group!(index_benches, benches);
criterion_main!(index_benches);
