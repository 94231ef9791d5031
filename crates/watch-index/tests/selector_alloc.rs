//! `Selector::matches` must not allocate (docs/design.md 3.1). A counting global allocator sees every
//! allocation of this test binary; the workspace forbids `unsafe`, so the counting allocator
//! comes from `stats_alloc`. This file holds one test so no other test allocates meanwhile.

use std::alloc::System;
use std::collections::{BTreeMap, HashMap};

use conflux_watch_index::selector::{Labels, Selector};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Runs every selector against `labels` many times and returns how many allocations that made.
fn allocations_while_matching<L: Labels + ?Sized>(selectors: &[Selector], labels: &L) -> usize {
    let mut hits = 0usize;
    let region = Region::new(GLOBAL);
    for _ in 0..100 {
        for sel in selectors {
            hits += usize::from(sel.matches(labels));
        }
    }
    let change = region.change();
    // Keep the work observable so it is not optimised away.
    std::hint::black_box(hits);
    change.allocations + change.reallocations
}

#[test]
fn matching_does_not_allocate() {
    let inputs = [
        "",
        "app=web",
        "app==web",
        "app!=web",
        "app in (api,web,db)",
        "app notin (api,db)",
        "app",
        "!missing",
        "replicas>3",
        "replicas<10",
        "replicas>0",
        "bad>1",
        "example.com/team in (a,b),app,tier!=db,!legacy,replicas>2",
    ];
    let mut selectors: Vec<Selector> = inputs
        .iter()
        .map(|s| Selector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}")))
        .collect();
    selectors.push(Selector::nothing());
    selectors.push(Selector::everything());

    let pairs = [
        ("app", "web"),
        ("replicas", "+0007"),
        ("bad", "x"),
        ("example.com/team", "a"),
        ("tier", "api"),
    ];
    let btree: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let hash: HashMap<String, String> = btree.clone().into_iter().collect();
    let owned_pairs: Vec<(String, String)> = btree.clone().into_iter().collect();

    assert_eq!(
        allocations_while_matching(&selectors, &btree),
        0,
        "BTreeMap"
    );
    assert_eq!(allocations_while_matching(&selectors, &hash), 0, "HashMap");
    assert_eq!(
        allocations_while_matching(&selectors, &Some(&btree)),
        0,
        "Option<&BTreeMap>"
    );
    assert_eq!(
        allocations_while_matching(&selectors, &None::<&BTreeMap<String, String>>),
        0,
        "no labels"
    );
    assert_eq!(
        allocations_while_matching(&selectors, &pairs[..]),
        0,
        "&str pairs"
    );
    assert_eq!(
        allocations_while_matching(&selectors, &owned_pairs),
        0,
        "String pairs"
    );

    // The counter works: building a selector does allocate.
    let region = Region::new(GLOBAL);
    let built = Selector::parse("app in (a,b)");
    assert!(region.change().allocations > 0);
    drop(built);
}
