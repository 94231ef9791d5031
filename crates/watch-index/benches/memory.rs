//! Heap bytes per edge of the reverse index at 100k referrers × 4 references, measured with a
//! counting allocator. Run: `cargo bench -p conflux-watch-index --bench memory`.

use std::alloc::System;

use conflux_watch_index::index::ReverseIndex;
use conflux_watch_index::refs::{ReferenceSet, Referrer};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

mod common;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn net(region: &Region<'_, System>) -> isize {
    // stats_alloc already adds realloc growth to bytes_allocated (and shrinkage to
    // bytes_deallocated); bytes_reallocated would count it twice.
    let s = region.change();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn main() {
    let set = ReferenceSet::flux();
    let objects = common::objects();

    // The objects themselves, as a controller without an index caches them.
    let region = Region::new(GLOBAL);
    let copy = objects.clone();
    let objects_bytes = net(&region);
    drop(copy);

    // Everything allocated while extracting and indexing that is still alive afterwards is the
    // index (extraction temporaries are dropped, strings moved into the index are counted).
    let region = Region::new(GLOBAL);
    let mut index = ReverseIndex::new();
    for o in &objects {
        if let Some(r) = set.extract(o) {
            index.apply(r);
        }
    }
    let built = net(&region);
    index.shrink_to_fit();
    let shrunk = net(&region);

    let stats = index.stats();
    let edges = stats.edges as f64;
    println!(
        "referrers {} keys {} edges {} interned strings {}",
        stats.referrers, stats.keys, stats.edges, stats.interned_strings
    );
    println!(
        "index heap after build: {built} B = {:.1} B/edge",
        built as f64 / edges
    );
    println!(
        "index heap after shrink_to_fit: {shrunk} B = {:.1} B/edge",
        shrunk as f64 / edges
    );
    println!(
        "for comparison, the 100k objects as serde_json::Value: {objects_bytes} B = {:.1} B/edge",
        objects_bytes as f64 / edges
    );

    // Deleting everything gives the memory back.
    let region = Region::new(GLOBAL);
    let all: Vec<Referrer> = objects.iter().filter_map(|o| set.extract(o)).collect();
    for r in &all {
        index.delete(&r.object);
    }
    drop(all);
    println!(
        "after deleting every referrer: {} keys, heap change {} B",
        index.stats().keys,
        net(&region)
    );
}
