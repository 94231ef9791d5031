//! The reverse index: ConfigMap/Secret key to the objects that reference it (docs/design.md 3.3).
//!
//! [`ReverseIndex`] is a plain data structure in the linkerd2 policy-controller style: feed it
//! referrers with [`apply`](ReverseIndex::apply) / [`delete`](ReverseIndex::delete) as a watcher
//! sees them, ask it [`referrers`](ReverseIndex::referrers) of a key when a ConfigMap or Secret
//! changes. It does no I/O.
//!
//! # Layout and memory
//! Keys and referrers live in two slabs addressed by `u32` ids; two `hashbrown::HashTable`s of
//! (id, 32-bit hash) find an id from a key or a referrer, so each key and referrer is stored once
//! and tables resize without touching the slots. A referrer keeps
//! the sorted ids of its keys (the forward map), which is what lets an update diff old against new
//! references and touch only what moved. A key's referrer set is a single id inline (the common
//! case) or a vector. Namespace, group and kind strings are interned and shared. When a key loses
//! its last referrer its slot, table entry and strings are freed; tables and slabs shrink when
//! mostly empty, and an emptied index holds no entries at all.
//!
//! # Concurrency
//! Every mutation takes `&mut self`; queries take `&self` and are short (a hash lookup, then a copy
//! of a few ids). The intended use is one writer (the watch loop of the referrer kinds) and many
//! readers (the ConfigMap/Secret event handlers) sharing an `Arc<std::sync::RwLock<ReverseIndex>>`
//! and holding the read lock only while they copy the referrers out. An `arc-swap` snapshot was
//! rejected: publishing a snapshot means cloning a 100k-referrer index (milliseconds) on every
//! write, or a persistent map that costs more memory and slower lookups; with sub-microsecond writes
//! and lookups, lock hold times are far below anything a reader would notice.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::refs::{ConfigKey, ConfigKind, ObjectRef, Referrer, hash_key_parts};

type Id = u32;

/// The referrer ids of one key: one inline, or several.
#[derive(Debug)]
enum RefSet {
    One(Id),
    Many(Vec<Id>),
}

impl RefSet {
    fn as_slice(&self) -> &[Id] {
        match self {
            RefSet::One(id) => std::slice::from_ref(id),
            RefSet::Many(ids) => ids,
        }
    }

    fn insert(&mut self, id: Id) {
        match self {
            RefSet::Many(ids) if ids.is_empty() => *self = RefSet::One(id),
            RefSet::Many(ids) => ids.push(id),
            RefSet::One(first) => *self = RefSet::Many(vec![*first, id]),
        }
    }

    /// Removes `id`; true when the set is now empty.
    fn remove(&mut self, id: Id) -> bool {
        match self {
            RefSet::One(only) => *only == id,
            RefSet::Many(ids) => {
                if let Some(pos) = ids.iter().position(|&i| i == id) {
                    ids.swap_remove(pos);
                }
                match ids.as_slice() {
                    [] => true,
                    [last] => {
                        *self = RefSet::One(*last);
                        false
                    }
                    _ => {
                        if ids.len() * 4 < ids.capacity() {
                            ids.shrink_to(ids.len() * 2);
                        }
                        false
                    }
                }
            }
        }
    }
}

#[derive(Debug)]
struct KeySlot {
    key: ConfigKey,
    referrers: RefSet,
}

#[derive(Debug)]
struct ReferrerSlot {
    object: ObjectRef,
    /// Sorted, unique key ids: the forward map.
    keys: Box<[Id]>,
    depends_on: Box<[ObjectRef]>,
}

/// A slab of slots addressed by id, reusing freed ids.
#[derive(Debug)]
struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<Id>,
    live: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<T> Slab<T> {
    fn get(&self, id: Id) -> Option<&T> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, id: Id) -> Option<&mut T> {
        self.slots.get_mut(id as usize).and_then(Option::as_mut)
    }

    fn insert(&mut self, value: T) -> Id {
        self.live += 1;
        // Ids past the end are stale after trimming; skip them.
        while let Some(id) = self.free.pop() {
            if let Some(slot @ None) = self.slots.get_mut(id as usize) {
                *slot = Some(value);
                return id;
            }
        }
        self.slots.push(Some(value));
        // More than u32::MAX live keys or referrers is far beyond any cluster (etcd holds ~millions
        // of objects); the ids are u32 to keep edges at 4 bytes.
        Id::try_from(self.slots.len() - 1).unwrap_or(Id::MAX)
    }

    fn remove(&mut self, id: Id) -> Option<T> {
        let value = self.slots.get_mut(id as usize)?.take()?;
        self.live -= 1;
        if self.live == 0 {
            *self = Slab::default();
            return Some(value);
        }
        if id as usize + 1 == self.slots.len() {
            while matches!(self.slots.last(), Some(None)) {
                self.slots.pop();
            }
        } else {
            self.free.push(id);
        }
        if self.slots.len() * 4 < self.slots.capacity() && self.slots.capacity() > 64 {
            self.slots.shrink_to(self.slots.len() * 2);
            self.free.retain(|&f| (f as usize) < self.slots.len());
            self.free.shrink_to_fit();
        }
        Some(value)
    }
}

/// Sizes of an index, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    /// Referrers with at least one reference.
    pub referrers: usize,
    /// Distinct ConfigMap/Secret keys referenced.
    pub keys: usize,
    /// (referrer, key) pairs, duplicates counted once.
    pub edges: usize,
    /// Distinct interned namespace/group/kind strings.
    pub interned_strings: usize,
    /// Slab slots allocated (live and free) for keys plus referrers.
    pub slots: usize,
}

/// Referrers in `dependsOn` order, and the dependency cycles found among them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DependencyOrder {
    /// Every referrer of the key, each after the referrers (of the same key) it depends on; members
    /// of a cycle come after their acyclic dependencies, sorted.
    pub order: Vec<ObjectRef>,
    /// Each cycle (a strongly connected component, or a self-dependency), sorted. Flux drops the
    /// whole event when there is one; a caller that wants that behaviour checks `cycles.is_empty()`.
    pub cycles: Vec<Vec<ObjectRef>>,
    /// The `dependsOn` depth of each object of `order`, by position: 0 for a referrer that
    /// depends on no other referrer of the key, else one more than the deepest it depends on
    /// (members of a cycle share one). Referrers of one depth have no order among themselves, so
    /// a caller may write them in parallel and keep only the depths in sequence.
    pub depths: Vec<usize>,
}

/// ConfigMap/Secret key → referrers, updated incrementally. See the [module docs](self).
#[derive(Debug, Default)]
pub struct ReverseIndex {
    /// foldhash with a per-index random seed: several times faster than SipHash on short keys,
    /// and seeded, so names chosen by tenants cannot be crafted to collide.
    hasher: DefaultHashBuilder,
    keys: Slab<KeySlot>,
    key_table: HashTable<Entry>,
    referrers: Slab<ReferrerSlot>,
    referrer_table: HashTable<Entry>,
    strings: HashTable<Arc<str>>,
    edges: usize,
}

/// A table entry: a slot id and its 32-bit hash, so growing or shrinking a table rehashes without
/// touching the slots (a cache miss each), and most mismatches are rejected without a deref.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: Id,
    hash: u32,
}

/// Folds a 64-bit hash to 32 bits and spreads it back over both halves: hashbrown takes the bucket
/// from the low bits and the tag from the top bits, and both must be recomputable from `Entry::hash`.
fn fold(h: u64) -> u64 {
    let h32 = ((h >> 32) ^ h) as u32;
    unfold(h32)
}

fn unfold(h32: u32) -> u64 {
    (u64::from(h32) << 32) | u64::from(h32)
}

fn hash_key_with(
    hasher: &DefaultHashBuilder,
    kind: ConfigKind,
    namespace: &str,
    name: &str,
) -> u64 {
    let mut h = hasher.build_hasher();
    hash_key_parts(kind, namespace, name, &mut h);
    fold(h.finish())
}

fn hash_object_with(hasher: &DefaultHashBuilder, o: &ObjectRef) -> u64 {
    let mut h = hasher.build_hasher();
    o.group.hash(&mut h);
    o.kind.hash(&mut h);
    o.namespace.hash(&mut h);
    o.name.hash(&mut h);
    fold(h.finish())
}

/// Shrinks a hash table when it is at most a quarter full (frees it when empty), so memory
/// follows deletions.
fn maybe_shrink<T>(table: &mut HashTable<T>, hasher: impl Fn(&T) -> u64) {
    if table.is_empty() {
        *table = HashTable::new();
    } else if table.len() * 4 < table.capacity() && table.capacity() > 64 {
        table.shrink_to(table.len() * 2, hasher);
    }
}

impl ReverseIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    fn find_key(&self, kind: ConfigKind, namespace: &str, name: &str) -> Option<Id> {
        self.find_key_hashed(
            hash_key_with(&self.hasher, kind, namespace, name),
            kind,
            namespace,
            name,
        )
    }

    fn find_key_hashed(
        &self,
        hash: u64,
        kind: ConfigKind,
        namespace: &str,
        name: &str,
    ) -> Option<Id> {
        let keys = &self.keys;
        self.key_table
            .find(hash, |e| {
                e.hash == hash as u32
                    && keys.get(e.id).is_some_and(|s| {
                        s.key.kind == kind && *s.key.name == *name && *s.key.namespace == *namespace
                    })
            })
            .map(|e| e.id)
    }

    fn find_referrer(&self, o: &ObjectRef) -> Option<Id> {
        let hash = hash_object_with(&self.hasher, o);
        let referrers = &self.referrers;
        self.referrer_table
            .find(hash, |e| {
                e.hash == hash as u32 && referrers.get(e.id).is_some_and(|s| s.object == *o)
            })
            .map(|e| e.id)
    }

    fn intern(&mut self, s: &Arc<str>) -> Arc<str> {
        let hash = self.hasher.hash_one(&**s);
        let found = self.strings.find(hash, |t| **t == **s);
        if let Some(t) = found {
            return t.clone();
        }
        // A fresh allocation, so the reference count only counts the index's own users (the
        // caller's Arc may be shared with a ReferenceSet or the caller's data).
        let fresh: Arc<str> = Arc::from(&**s);
        let hasher = &self.hasher;
        self.strings
            .insert_unique(hash, fresh.clone(), |t| hasher.hash_one(&**t));
        fresh
    }

    /// Drops the interner's copy once `s` (an interned string) has no other user.
    fn release(&mut self, s: Arc<str>) {
        // Two owners left: the interner and `s` itself.
        if Arc::strong_count(&s) > 2 {
            return;
        }
        let hash = self.hasher.hash_one(&*s);
        if let Ok(entry) = self.strings.find_entry(hash, |t| Arc::ptr_eq(t, &s)) {
            entry.remove();
        }
        let hasher = &self.hasher;
        maybe_shrink(&mut self.strings, |t| hasher.hash_one(&**t));
    }

    /// The id of `key`, inserting an empty slot when new (the caller adds a referrer right away).
    fn key_id_or_insert(&mut self, key: ConfigKey) -> Id {
        let hash = hash_key_with(&self.hasher, key.kind, &key.namespace, &key.name);
        if let Some(id) = self.find_key_hashed(hash, key.kind, &key.namespace, &key.name) {
            return id;
        }
        let key = ConfigKey {
            kind: key.kind,
            namespace: self.intern(&key.namespace),
            name: key.name,
        };
        let id = self.keys.insert(KeySlot {
            key,
            referrers: RefSet::Many(Vec::new()),
        });
        let entry = Entry {
            id,
            hash: hash as u32,
        };
        self.key_table
            .insert_unique(hash, entry, |e| unfold(e.hash));
        id
    }

    fn link(&mut self, key: Id, referrer: Id) {
        if let Some(slot) = self.keys.get_mut(key) {
            slot.referrers.insert(referrer);
            self.edges += 1;
        }
    }

    fn unlink(&mut self, key: Id, referrer: Id) {
        let Some(slot) = self.keys.get_mut(key) else {
            return;
        };
        self.edges -= 1;
        if !slot.referrers.remove(referrer) {
            return;
        }
        // Last referrer gone: free the key.
        let hash = hash_key_with(
            &self.hasher,
            slot.key.kind,
            &slot.key.namespace,
            &slot.key.name,
        );
        if let Ok(entry) = self.key_table.find_entry(hash, |e| e.id == key) {
            entry.remove();
        }
        if let Some(slot) = self.keys.remove(key) {
            self.release(slot.key.namespace);
        }
        maybe_shrink(&mut self.key_table, |e| unfold(e.hash));
    }

    /// Adds or updates a referrer: its references become exactly `referrer.references`
    /// (duplicates count once, optional ones included). References that moved are unlinked from the
    /// old key and linked to the new one; a referrer with no references is removed.
    pub fn apply(&mut self, referrer: Referrer) {
        let Referrer {
            object,
            references,
            depends_on,
        } = referrer;
        let existing = self.find_referrer(&object);
        if references.is_empty() {
            if let Some(id) = existing {
                self.remove_referrer(id);
            }
            return;
        }
        let mut new_keys: Vec<Id> = references
            .into_iter()
            .map(|r| self.key_id_or_insert(r.key))
            .collect();
        new_keys.sort_unstable();
        new_keys.dedup();

        let Some(rid) = existing else {
            let object = ObjectRef {
                group: self.intern(&object.group),
                kind: self.intern(&object.kind),
                namespace: self.intern(&object.namespace),
                name: object.name,
            };
            let hash = hash_object_with(&self.hasher, &object);
            let rid = self.referrers.insert(ReferrerSlot {
                object,
                keys: Box::default(),
                depends_on: depends_on.into_boxed_slice(),
            });
            let entry = Entry {
                id: rid,
                hash: hash as u32,
            };
            self.referrer_table
                .insert_unique(hash, entry, |e| unfold(e.hash));
            for &k in &new_keys {
                self.link(k, rid);
            }
            if let Some(slot) = self.referrers.get_mut(rid) {
                slot.keys = new_keys.into_boxed_slice();
            }
            return;
        };

        let Some(slot) = self.referrers.get_mut(rid) else {
            return;
        };
        if *slot.depends_on != *depends_on {
            slot.depends_on = depends_on.into_boxed_slice();
        }
        if *slot.keys == *new_keys {
            // Nothing moved (the common status-only update): no allocation kept, nothing touched.
            return;
        }
        let old = std::mem::take(&mut slot.keys);
        let new = &new_keys;
        // Merge walk over two sorted lists: unlink what left, link what came.
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            match (old.get(i), new.get(j)) {
                (Some(&a), Some(&b)) if a == b => {
                    i += 1;
                    j += 1;
                }
                (Some(&a), Some(&b)) if a < b => {
                    self.unlink(a, rid);
                    i += 1;
                }
                (Some(&a), None) => {
                    self.unlink(a, rid);
                    i += 1;
                }
                (_, Some(&b)) => {
                    self.link(b, rid);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        if let Some(slot) = self.referrers.get_mut(rid) {
            slot.keys = new_keys.into_boxed_slice();
        }
    }

    /// Removes a referrer (its delete event). Returns whether it was indexed.
    pub fn delete(&mut self, object: &ObjectRef) -> bool {
        match self.find_referrer(object) {
            Some(id) => {
                self.remove_referrer(id);
                true
            }
            None => false,
        }
    }

    fn remove_referrer(&mut self, rid: Id) {
        let Some(slot) = self.referrers.get(rid) else {
            return;
        };
        let hash = hash_object_with(&self.hasher, &slot.object);
        if let Ok(entry) = self.referrer_table.find_entry(hash, |e| e.id == rid) {
            entry.remove();
        }
        let Some(slot) = self.referrers.remove(rid) else {
            return;
        };
        for &k in slot.keys.iter() {
            self.unlink(k, rid);
        }
        let ReferrerSlot {
            object, depends_on, ..
        } = slot;
        drop(depends_on);
        self.release(object.group);
        self.release(object.kind);
        self.release(object.namespace);
        maybe_shrink(&mut self.referrer_table, |e| unfold(e.hash));
    }

    /// The referrers of a ConfigMap/Secret, in no particular order.
    pub fn referrers(&self, key: &ConfigKey) -> Referrers<'_> {
        self.referrers_of(key.kind, &key.namespace, &key.name)
    }

    /// [`referrers`](Self::referrers) from borrowed parts (no allocation: use it in event handlers).
    pub fn referrers_of(&self, kind: ConfigKind, namespace: &str, name: &str) -> Referrers<'_> {
        let ids = self
            .find_key(kind, namespace, name)
            .and_then(|id| self.keys.get(id))
            .map_or(&[][..], |s| s.referrers.as_slice());
        Referrers {
            ids: ids.iter(),
            slab: &self.referrers,
        }
    }

    /// Whether anything references this ConfigMap/Secret.
    pub fn is_referenced(&self, kind: ConfigKind, namespace: &str, name: &str) -> bool {
        self.find_key(kind, namespace, name).is_some()
    }

    /// The keys a referrer references (deduplicated), in no particular order.
    pub fn references_of(&self, object: &ObjectRef) -> impl Iterator<Item = &ConfigKey> + '_ {
        let ids = self
            .find_referrer(object)
            .and_then(|id| self.referrers.get(id))
            .map_or(&[][..], |s| &s.keys[..]);
        ids.iter().filter_map(|&k| self.keys.get(k).map(|s| &s.key))
    }

    /// The referrers of a key ordered by `dependsOn` (dependencies first), as Flux enqueues
    /// Kustomizations for one event. Only dependencies among these referrers count, as upstream.
    /// Cycles are returned as data; the walk is iterative and never loops.
    pub fn referrers_in_dependency_order(&self, key: &ConfigKey) -> DependencyOrder {
        let mut members: Vec<&ReferrerSlot> = self
            .find_key(key.kind, &key.namespace, &key.name)
            .and_then(|id| self.keys.get(id))
            .map_or(&[][..], |s| s.referrers.as_slice())
            .iter()
            .filter_map(|&r| self.referrers.get(r))
            .collect();
        // Sorted input makes the output deterministic whatever the slab order.
        members.sort_unstable_by(|a, b| a.object.cmp(&b.object));
        let position = |o: &ObjectRef| members.binary_search_by(|m| m.object.cmp(o)).ok();
        let edges: Vec<Vec<usize>> = members
            .iter()
            .map(|m| {
                let mut e: Vec<usize> = m.depends_on.iter().filter_map(&position).collect();
                e.sort_unstable();
                e.dedup();
                e
            })
            .collect();
        let mut out = DependencyOrder::default();
        // Tarjan yields each component after every component it reaches (dependencies first),
        // so the depths of a component's dependencies are known when it comes.
        let mut depth_of: Vec<Option<usize>> = vec![None; members.len()];
        for scc in tarjan(&edges) {
            let cyclic = scc.len() > 1 || edges[scc[0]].contains(&scc[0]);
            let depth = scc
                .iter()
                .flat_map(|&i| edges[i].iter())
                .filter_map(|&d| depth_of[d].map(|depth| depth + 1))
                .max()
                .unwrap_or(0);
            for &i in &scc {
                depth_of[i] = Some(depth);
            }
            let mut objs: Vec<ObjectRef> = scc.iter().map(|&i| members[i].object.clone()).collect();
            objs.sort_unstable();
            if cyclic {
                out.cycles.push(objs.clone());
            }
            out.depths.extend(std::iter::repeat_n(depth, objs.len()));
            out.order.extend(objs);
        }
        out
    }

    /// Number of referrers with at least one reference.
    pub fn len(&self) -> usize {
        self.referrers.live
    }

    /// Whether the index holds nothing.
    pub fn is_empty(&self) -> bool {
        self.referrers.live == 0
    }

    /// Counts of what the index holds.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            referrers: self.referrers.live,
            keys: self.keys.live,
            edges: self.edges,
            interned_strings: self.strings.len(),
            slots: self.keys.slots.len() + self.referrers.slots.len(),
        }
    }

    /// Releases spare capacity (after a bulk build, or many deletions).
    pub fn shrink_to_fit(&mut self) {
        let hasher = &self.hasher;
        self.key_table.shrink_to_fit(|e| unfold(e.hash));
        self.referrer_table.shrink_to_fit(|e| unfold(e.hash));
        self.strings.shrink_to_fit(|t| hasher.hash_one(&**t));
        self.keys.slots.shrink_to_fit();
        self.keys.free.shrink_to_fit();
        self.referrers.slots.shrink_to_fit();
        self.referrers.free.shrink_to_fit();
    }

    /// Checks that forward and reverse maps agree (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut edges = 0;
        for (rid, slot) in self.referrers.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            assert!(!slot.keys.is_empty(), "referrer without keys is stored");
            assert!(
                slot.keys.windows(2).all(|w| w[0] < w[1]),
                "forward keys sorted"
            );
            assert_eq!(self.find_referrer(&slot.object), Some(rid as Id));
            for &k in slot.keys.iter() {
                let ks = self.keys.get(k).expect("forward key exists");
                assert!(ks.referrers.as_slice().contains(&(rid as Id)));
            }
            edges += slot.keys.len();
        }
        let mut reverse = 0;
        for (kid, slot) in self.keys.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let ids = slot.referrers.as_slice();
            assert!(!ids.is_empty(), "empty key kept");
            assert!(!matches!(&slot.referrers, RefSet::Many(v) if v.len() < 2));
            assert_eq!(
                self.find_key(slot.key.kind, &slot.key.namespace, &slot.key.name),
                Some(kid as Id)
            );
            reverse += ids.len();
        }
        assert_eq!(edges, self.edges);
        assert_eq!(reverse, self.edges);
        assert_eq!(self.key_table.len(), self.keys.live);
        assert_eq!(self.referrer_table.len(), self.referrers.live);
    }
}

/// Tarjan's strongly connected components, iterative. `edges[v]` are the nodes `v` depends on; an
/// SCC is emitted only after every SCC it depends on, which is the order referrers are enqueued in.
fn tarjan(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut index: Vec<Option<usize>> = vec![None; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for start in 0..n {
        if index[start].is_some() {
            continue;
        }
        index[start] = Some(next);
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        calls.push((start, 0));
        while let Some(&mut (v, ref mut ei)) = calls.last_mut() {
            if let Some(&w) = edges[v].get(*ei) {
                *ei += 1;
                match index[w] {
                    None => {
                        index[w] = Some(next);
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    }
                    Some(iw) if on_stack[w] => low[v] = low[v].min(iw),
                    Some(_) => {}
                }
                continue;
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u] = low[u].min(low[v]);
            }
            if Some(low[v]) == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(scc);
            }
        }
    }
    out
}

/// Iterator over the referrers of one key.
#[derive(Debug, Clone)]
pub struct Referrers<'a> {
    ids: std::slice::Iter<'a, Id>,
    slab: &'a Slab<ReferrerSlot>,
}

impl<'a> Iterator for Referrers<'a> {
    type Item = &'a ObjectRef;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let id = *self.ids.next()?;
            if let Some(slot) = self.slab.get(id) {
                return Some(&slot.object);
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.ids.len(), Some(self.ids.len()))
    }
}

/// Every id in a key's set names a live referrer (checked by the tests' `check_invariants`), so
/// the count is known without touching the referrers.
impl ExactSizeIterator for Referrers<'_> {}

#[cfg(test)]
mod tests;
