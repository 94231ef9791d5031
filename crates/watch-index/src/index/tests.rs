//! Index tests in the linkerd2 style: feed objects, assert what the index answers.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::refs::{KUSTOMIZE_GROUP, Reference, ReferenceSet};

fn ks(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn hr(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn subst(items: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(k, n)| json!({"kind": k, "name": n}))
        .collect();
    json!({"postBuild": {"substituteFrom": items}})
}

struct Fixture {
    set: ReferenceSet,
    index: ReverseIndex,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            set: ReferenceSet::flux(),
            index: ReverseIndex::new(),
        }
    }

    fn apply(&mut self, obj: Value) {
        let r = self.set.extract(&obj).expect("a referrer");
        self.index.apply(r);
        self.index.check_invariants();
    }

    fn delete(&mut self, obj: &Value) -> bool {
        let r = self.set.extract(obj).expect("a referrer");
        let found = self.index.delete(&r.object);
        self.index.check_invariants();
        found
    }

    /// Referrers of `Kind/ns/name`, as sorted display strings.
    fn who(&self, key: &str) -> Vec<String> {
        let mut parts = key.splitn(3, '/');
        let (kind, ns, name) = (
            ConfigKind::from_kind(parts.next().unwrap()).unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let mut v: Vec<String> = self
            .index
            .referrers_of(kind, ns, name)
            .map(|o| o.to_string())
            .collect();
        v.sort();
        v
    }
}

const KS: &str = "Kustomization.kustomize.toolkit.fluxcd.io";

#[test]
fn add_update_move_delete() {
    let mut f = Fixture::new();
    f.apply(ks(
        "team",
        "app",
        json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]},
               "decryption": {"secretRef": {"name": "sops"}}}),
    ));
    assert_eq!(f.who("ConfigMap/team/vars"), [format!("{KS}/team/app")]);
    assert_eq!(f.who("Secret/team/sops"), [format!("{KS}/team/app")]);
    assert_eq!(
        f.who("Secret/team/vars"),
        Vec::<String>::new(),
        "kind is part of the key"
    );
    assert_eq!(
        f.who("ConfigMap/other/vars"),
        Vec::<String>::new(),
        "so is the namespace"
    );

    // The reference moves from vars to vars2; sops stays.
    f.apply(ks(
        "team",
        "app",
        json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars2"}]},
               "decryption": {"secretRef": {"name": "sops"}}}),
    ));
    assert_eq!(f.who("ConfigMap/team/vars"), Vec::<String>::new());
    assert_eq!(f.who("ConfigMap/team/vars2"), [format!("{KS}/team/app")]);
    assert_eq!(f.who("Secret/team/sops"), [format!("{KS}/team/app")]);
    assert_eq!(f.index.stats().keys, 2, "the old key was freed");

    assert!(f.delete(&ks("team", "app", json!({}))));
    assert!(
        !f.delete(&ks("team", "app", json!({}))),
        "second delete finds nothing"
    );
    assert!(f.index.is_empty());
}

#[test]
fn duplicate_references_count_once() {
    let mut f = Fixture::new();
    f.apply(hr(
        "apps",
        "web",
        json!({"valuesFrom": [{"kind": "Secret", "name": "s"}, {"kind": "Secret", "name": "s", "valuesKey": "b"}],
               "kubeConfig": {"secretRef": {"name": "s"}}}),
    ));
    assert_eq!(f.who("Secret/apps/s").len(), 1);
    assert_eq!(f.index.stats().edges, 1);
    // Dropping one of the three mentions keeps the edge.
    f.apply(hr(
        "apps",
        "web",
        json!({"kubeConfig": {"secretRef": {"name": "s"}}}),
    ));
    assert_eq!(f.who("Secret/apps/s").len(), 1);
}

#[test]
fn optional_references_are_indexed() {
    let mut f = Fixture::new();
    f.apply(hr(
        "apps",
        "web",
        json!({"valuesFrom": [{"kind": "ConfigMap", "name": "maybe", "optional": true}]}),
    ));
    assert_eq!(
        f.who("ConfigMap/apps/maybe"),
        ["HelmRelease.helm.toolkit.fluxcd.io/apps/web"]
    );
}

#[test]
fn shared_key_keeps_other_referrers() {
    let mut f = Fixture::new();
    for n in ["a", "b", "c"] {
        f.apply(ks("team", n, subst(&[("ConfigMap", "cluster-vars")])));
    }
    assert_eq!(f.who("ConfigMap/team/cluster-vars").len(), 3);
    f.delete(&ks("team", "b", json!({})));
    assert_eq!(
        f.who("ConfigMap/team/cluster-vars"),
        [format!("{KS}/team/a"), format!("{KS}/team/c")]
    );
    f.apply(ks("team", "a", subst(&[("ConfigMap", "other")])));
    assert_eq!(
        f.who("ConfigMap/team/cluster-vars"),
        [format!("{KS}/team/c")]
    );
    f.apply(ks("team", "c", json!({})));
    assert_eq!(f.who("ConfigMap/team/cluster-vars"), Vec::<String>::new());
    assert_eq!(f.index.len(), 1, "a referrer without references is dropped");
}

#[test]
fn copies_index_cross_namespace() {
    let mut f = Fixture::new();
    let copy = |ns: &str, from: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "pull", "namespace": ns,
                            "annotations": {"fluxcd.controlplane.io/copyFrom": from}}})
    };
    f.apply(copy("team-a", "flux-system/pull"));
    f.apply(copy("team-b", "flux-system/pull"));
    assert_eq!(
        f.who("Secret/flux-system/pull"),
        ["Secret/team-a/pull", "Secret/team-b/pull"]
    );
    // The annotation is removed: no longer a copy.
    f.apply(json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "pull", "namespace": "team-a"}}));
    assert_eq!(f.who("Secret/flux-system/pull"), ["Secret/team-b/pull"]);
}

#[test]
fn queries_by_key_and_by_referrer() {
    let mut f = Fixture::new();
    f.apply(ks("ns", "k", subst(&[("ConfigMap", "x"), ("Secret", "y")])));
    let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "x");
    assert_eq!(f.index.referrers(&key).count(), 1);
    assert!(f.index.is_referenced(ConfigKind::Secret, "ns", "y"));
    assert!(!f.index.is_referenced(ConfigKind::Secret, "ns", "x"));
    let me = ObjectRef::new(KUSTOMIZE_GROUP, "Kustomization", "ns", "k");
    let mut mine: Vec<String> = f.index.references_of(&me).map(|k| k.to_string()).collect();
    mine.sort();
    assert_eq!(mine, ["ConfigMap/ns/x", "Secret/ns/y"]);
}

#[test]
fn emptied_index_holds_nothing() {
    let mut f = Fixture::new();
    for i in 0..200 {
        f.apply(ks(
            &format!("ns{}", i % 7),
            &format!("k{i}"),
            subst(&[("ConfigMap", "v"), ("Secret", &format!("s{i}"))]),
        ));
    }
    assert_eq!(f.index.stats().referrers, 200);
    for i in 0..200 {
        assert!(f.delete(&ks(&format!("ns{}", i % 7), &format!("k{i}"), json!({}))));
    }
    assert_eq!(f.index.stats(), IndexStats::default());
    assert_eq!(f.index.key_table.capacity(), 0);
    assert_eq!(f.index.referrer_table.capacity(), 0);
    assert_eq!(f.index.keys.slots.capacity(), 0);
}

#[test]
fn shareable_between_threads() {
    // The binary puts the index behind an RwLock shared by tasks.
    fn send_sync<T: Send + Sync>() {}
    send_sync::<ReverseIndex>();
    send_sync::<ReferenceSet>();
}

#[test]
fn compact_layout() {
    // The memory budget (< 150 B/edge) rests on these sizes.
    assert_eq!(std::mem::size_of::<RefSet>(), 24);
    assert_eq!(std::mem::size_of::<Option<KeySlot>>(), 64);
}

fn names(v: &[ObjectRef]) -> Vec<String> {
    v.iter()
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect()
}

#[test]
fn dependency_order_chain_and_unrelated() {
    let mut f = Fixture::new();
    let mut with_deps = |name: &str, deps: Value| {
        let mut spec = subst(&[("ConfigMap", "shared")]);
        spec["dependsOn"] = deps;
        f.apply(ks("team", name, spec));
    };
    with_deps("apps", json!([{"name": "infra"}]));
    with_deps("infra", json!([{"name": "crds"}, {"name": "outside"}]));
    with_deps("crds", json!([]));
    with_deps("zz-alone", json!([]));
    with_deps("a-cross", json!([{"name": "apps", "namespace": "team"}]));
    let key = ConfigKey::new(ConfigKind::ConfigMap, "team", "shared");
    let out = f.index.referrers_in_dependency_order(&key);
    assert!(out.cycles.is_empty());
    let order = names(&out.order);
    let pos = |n: &str| {
        order
            .iter()
            .position(|o| o == &format!("team/{n}"))
            .unwrap()
    };
    assert_eq!(order.len(), 5);
    assert!(pos("crds") < pos("infra"));
    assert!(pos("infra") < pos("apps"));
    assert!(pos("apps") < pos("a-cross"));
    // Depths: the writes of one depth may go in parallel.
    let depth = |n: &str| out.depths[pos(n)];
    assert_eq!(out.depths.len(), 5);
    assert_eq!(
        ["crds", "zz-alone", "infra", "apps", "a-cross"].map(depth),
        [0, 0, 1, 2, 3]
    );
    // Deterministic whatever the insertion order.
    assert_eq!(out, f.index.referrers_in_dependency_order(&key));
}

#[test]
fn dependency_cycles_are_reported_not_looped() {
    let mut f = Fixture::new();
    let mut with_deps = |name: &str, deps: Value| {
        let mut spec = subst(&[("Secret", "s")]);
        spec["dependsOn"] = deps;
        f.apply(ks("ns", name, spec));
    };
    with_deps("x", json!([{"name": "y"}]));
    with_deps("y", json!([{"name": "x"}, {"name": "base"}]));
    with_deps("base", json!([]));
    with_deps("self", json!([{"name": "self"}]));
    with_deps("after", json!([{"name": "x"}]));
    let out = f
        .index
        .referrers_in_dependency_order(&ConfigKey::new(ConfigKind::Secret, "ns", "s"));
    let cycles: Vec<Vec<String>> = out.cycles.iter().map(|c| names(c)).collect();
    assert!(cycles.contains(&vec!["ns/x".to_owned(), "ns/y".to_owned()]));
    assert!(cycles.contains(&vec!["ns/self".to_owned()]));
    assert_eq!(cycles.len(), 2);
    let order = names(&out.order);
    assert_eq!(order.len(), 5, "cycle members are still returned");
    let pos = |n: &str| order.iter().position(|o| o == n).unwrap();
    assert!(pos("ns/base") < pos("ns/x"));
    assert!(pos("ns/x") < pos("ns/after"));
    let depth = |n: &str| out.depths[pos(n)];
    assert_eq!(
        ["ns/base", "ns/self", "ns/x", "ns/y", "ns/after"].map(depth),
        [0, 0, 1, 1, 2]
    );
}

#[test]
fn dependency_on_other_kind_with_same_name_does_not_count() {
    let mut f = Fixture::new();
    let mut spec = subst(&[("ConfigMap", "c")]);
    spec["dependsOn"] = json!([{"name": "web"}]);
    f.apply(ks("ns", "k", spec));
    f.apply(hr(
        "ns",
        "web",
        json!({"valuesFrom": [{"kind": "ConfigMap", "name": "c"}]}),
    ));
    let out =
        f.index
            .referrers_in_dependency_order(&ConfigKey::new(ConfigKind::ConfigMap, "ns", "c"));
    assert!(out.cycles.is_empty());
    assert_eq!(out.order.len(), 2);
}

#[test]
fn long_dependency_chain_does_not_recurse() {
    let mut f = Fixture::new();
    for i in 0..5000 {
        let mut spec = subst(&[("ConfigMap", "c")]);
        if i > 0 {
            spec["dependsOn"] = json!([{"name": format!("k{}", i - 1)}]);
        }
        f.index
            .apply(f.set.extract(&ks("ns", &format!("k{i}"), spec)).unwrap());
    }
    let out =
        f.index
            .referrers_in_dependency_order(&ConfigKey::new(ConfigKind::ConfigMap, "ns", "c"));
    let expect: Vec<String> = (0..5000).map(|i| format!("ns/k{i}")).collect();
    assert_eq!(names(&out.order), expect);
}

// ---- Property test: random apply/delete sequences equal a naive recomputation. ----

#[derive(Debug, Clone)]
enum Op {
    Apply(usize, Vec<(bool, usize, usize, bool)>),
    Delete(usize),
}

const NS: [&str; 2] = ["a", "b"];

fn referrer_ref(i: usize) -> ObjectRef {
    ObjectRef::new(
        KUSTOMIZE_GROUP,
        "Kustomization",
        NS[i % 2],
        format!("r{}", i / 2),
    )
}

fn key_of(secret: bool, ns: usize, name: usize) -> ConfigKey {
    let kind = if secret {
        ConfigKind::Secret
    } else {
        ConfigKind::ConfigMap
    };
    ConfigKey::new(kind, NS[ns], format!("c{name}"))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..8usize, prop::collection::vec((any::<bool>(), 0..2usize, 0..4usize, any::<bool>()), 0..6))
            .prop_map(|(r, refs)| Op::Apply(r, refs)),
        1 => (0..8usize).prop_map(Op::Delete),
    ]
}

proptest! {
    #[test]
    fn matches_naive_recomputation(ops in prop::collection::vec(op(), 0..60)) {
        let mut index = ReverseIndex::new();
        let mut model: BTreeMap<ObjectRef, BTreeSet<ConfigKey>> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Apply(r, refs) => {
                    let object = referrer_ref(*r);
                    let references: Vec<Reference> = refs
                        .iter()
                        .map(|&(secret, ns, name, optional)| Reference {
                            key: key_of(secret, ns, name),
                            optional,
                            path: "spec.x".into(),
                        })
                        .collect();
                    let keys: BTreeSet<ConfigKey> = references.iter().map(|r| r.key.clone()).collect();
                    if keys.is_empty() { model.remove(&object); } else { model.insert(object.clone(), keys); }
                    index.apply(Referrer { object, references, depends_on: vec![] });
                }
                Op::Delete(r) => {
                    let object = referrer_ref(*r);
                    let was = model.remove(&object).is_some();
                    prop_assert_eq!(index.delete(&object), was);
                }
            }
            index.check_invariants();
            for secret in [false, true] {
                for ns in 0..2 {
                    for name in 0..4 {
                        let key = key_of(secret, ns, name);
                        let want: BTreeSet<&ObjectRef> =
                            model.iter().filter(|(_, ks)| ks.contains(&key)).map(|(o, _)| o).collect();
                        let got: BTreeSet<&ObjectRef> = index.referrers(&key).collect();
                        prop_assert_eq!(got, want);
                    }
                }
            }
            let edges: usize = model.values().map(BTreeSet::len).sum();
            prop_assert_eq!(index.stats().edges, edges);
            prop_assert_eq!(index.len(), model.len());
        }
        for r in 0..8 {
            index.delete(&referrer_ref(r));
        }
        prop_assert_eq!(index.stats(), IndexStats::default());
    }
}

// ---- Property test: dependsOn order against naive reachability. ----

proptest! {
    #[test]
    fn dependency_order_respects_edges_and_reports_every_cycle(
        deps in prop::collection::vec(prop::collection::vec(0..7usize, 0..3), 1..7)
    ) {
        let n = deps.len();
        let obj = |i: usize| ObjectRef::new(KUSTOMIZE_GROUP, "Kustomization", "ns", format!("k{i}"));
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "c");
        let mut index = ReverseIndex::new();
        for (i, d) in deps.iter().enumerate() {
            index.apply(Referrer {
                object: obj(i),
                references: vec![Reference { key: key.clone(), optional: false, path: "p".into() }],
                // Targets >= n are outside the found set and must be ignored.
                depends_on: d.iter().map(|&j| obj(j)).collect(),
            });
        }
        // reach[a][b]: a depends on b, transitively, through members only.
        let mut reach = vec![vec![false; n]; n];
        for (a, d) in deps.iter().enumerate() {
            for &b in d.iter().filter(|&&b| b < n) {
                reach[a][b] = true;
            }
        }
        for k in 0..n { for a in 0..n { for b in 0..n {
            if reach[a][k] && reach[k][b] { reach[a][b] = true; }
        }}}
        let out = index.referrers_in_dependency_order(&key);
        let pos: BTreeMap<ObjectRef, usize> =
            out.order.iter().cloned().enumerate().map(|(i, o)| (o, i)).collect();
        prop_assert_eq!(pos.len(), n, "each referrer exactly once");
        for a in 0..n {
            for b in 0..n {
                if reach[a][b] && !reach[b][a] {
                    prop_assert!(pos[&obj(b)] < pos[&obj(a)], "k{} depends on k{}", a, b);
                }
            }
        }
        // Cycles: the nodes that reach themselves, grouped by mutual reachability.
        let mut want: BTreeSet<Vec<ObjectRef>> = BTreeSet::new();
        for a in (0..n).filter(|&a| reach[a][a]) {
            let mut scc: Vec<ObjectRef> =
                (0..n).filter(|&b| reach[a][b] && reach[b][a]).map(obj).collect();
            scc.sort();
            want.insert(scc);
        }
        let got: BTreeSet<Vec<ObjectRef>> = out.cycles.into_iter().collect();
        prop_assert_eq!(got, want);
    }
}
