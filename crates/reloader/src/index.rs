//! The consumer index: ConfigMap/Secret → the workloads that roll when it changes.
//!
//! Built on [`watch_index::index::ReverseIndex`]: each opted-in workload is a
//! [`Referrer`] whose references are the configs its pod template consumes plus the literal names
//! of its `reload` lists (Reloader rolls for a named config even when the pod does not consume
//! it). `reload` entries that are real regexes cannot be keys; such workloads are kept in a small
//! per-namespace list and matched at lookup. Next to the reverse index, each workload keeps what it
//! reads (its [`Consumption`]s) and its parsed [`OptIn`], so a lookup can apply the config's own
//! annotations (`ignore`, `match`) and say which keys each workload reads.
//!
//! Like watch-index, a plain data structure: feed it workloads with [`apply`](ConsumerIndex::apply)
//! and [`delete`](ConsumerIndex::delete) as the watcher sees them, and ask it
//! [`lookup`](ConsumerIndex::lookup) when a config changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use watch_index::index::ReverseIndex;
use watch_index::refs::{ConfigKey, ConfigKind, ObjectRef, Reference, Referrer};

use crate::consumers::{Consumption, Keys};
use crate::opt_in::{NamePattern, OptIn, Options, Reason};
use crate::workload::Workload;

/// What the index keeps per workload.
#[derive(Debug, Clone)]
pub struct IndexedWorkload {
    /// What its pod template consumes, sorted by (kind, name).
    pub consumers: Vec<Consumption>,
    /// Its opt-in.
    pub opt_in: OptIn,
}

impl IndexedWorkload {
    /// The consumption of one config, if the pod template consumes it.
    pub fn consumption(&self, kind: ConfigKind, name: &str) -> Option<&Consumption> {
        self.consumers
            .binary_search_by(|c| (c.kind, c.name.as_str()).cmp(&(kind, name)))
            .ok()
            .and_then(|i| self.consumers.get(i))
    }
}

/// A workload to re-hash because a config changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit<'a> {
    /// The workload (group, kind, namespace, name).
    pub workload: &'a ObjectRef,
    /// Why it watches the config; `None` when it references the config (or a `reload` regex
    /// matches it) but does not watch it now, e.g. the config says `ignore` or lacks `match`. Such
    /// workloads are still returned: the config may have *stopped* being watched, and re-hashing
    /// moves the baseline right away instead of at the next content change (see
    /// [`patch`](crate::patch)). Their re-hash is cheap and decides [`Action::None`] otherwise.
    ///
    /// [`Action::None`]: crate::patch::Action::None
    pub reason: Option<Reason>,
    /// The keys of the config it reads; `None` when only a `reload` list names the config (the
    /// whole object is hashed then).
    pub keys: Option<&'a Keys>,
}

/// Config → workloads to re-hash. See the [module docs](self).
#[derive(Debug, Default)]
pub struct ConsumerIndex {
    options: Options,
    references: ReverseIndex,
    workloads: HashMap<ObjectRef, IndexedWorkload>,
    /// Per namespace, the workloads whose `reload` lists hold a real regex.
    regex_named: BTreeMap<Arc<str>, BTreeSet<ObjectRef>>,
}

impl ConsumerIndex {
    /// An empty index; `options` are used for every opt-in decision.
    pub fn new(options: Options) -> Self {
        ConsumerIndex {
            options,
            ..Default::default()
        }
    }

    /// Adds or updates a workload (its add/update event). Returns whether it is indexed: workloads
    /// without a name, namespace or any opt-in are removed instead.
    pub fn apply(&mut self, workload: Workload<'_>) -> bool {
        let Some(object) = workload.object_ref() else {
            return false;
        };
        self.apply_parts(object, workload.consumers(), OptIn::of(workload))
    }

    /// [`apply`](Self::apply) from parts, for callers that already extracted them.
    pub fn apply_parts(
        &mut self,
        object: ObjectRef,
        consumers: Vec<Consumption>,
        opt_in: OptIn,
    ) -> bool {
        self.forget_regex(&object);
        if !opt_in.is_enabled(self.options) {
            self.delete(&object);
            return false;
        }
        let path: Arc<str> = Arc::from("pod template");
        let mut references: Vec<Reference> = consumers
            .iter()
            .map(|c| Reference {
                key: ConfigKey::new(c.kind, object.namespace.clone(), c.name.as_str()),
                optional: c.optional,
                path: path.clone(),
            })
            .collect();
        let named_path: Arc<str> = Arc::from("reload annotation");
        for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
            for literal in opt_in
                .named_patterns(kind)
                .iter()
                .filter_map(NamePattern::as_literal)
            {
                references.push(Reference {
                    key: ConfigKey::new(kind, object.namespace.clone(), literal),
                    optional: true,
                    path: named_path.clone(),
                });
            }
        }
        if opt_in.has_regex_patterns() {
            self.regex_named
                .entry(object.namespace.clone())
                .or_default()
                .insert(object.clone());
        }
        // A workload without references stays in the map (a regex list may still match), and the
        // reverse index drops it by itself.
        self.references.apply(Referrer {
            object: object.clone(),
            references,
            depends_on: Vec::new(),
        });
        let mut consumers = consumers;
        consumers.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        self.workloads
            .insert(object, IndexedWorkload { consumers, opt_in });
        true
    }

    fn forget_regex(&mut self, object: &ObjectRef) {
        if let Some(set) = self.regex_named.get_mut(&object.namespace) {
            set.remove(object);
            if set.is_empty() {
                self.regex_named.remove(&object.namespace);
            }
        }
    }

    /// Removes a workload (its delete event). Returns whether it was indexed.
    pub fn delete(&mut self, object: &ObjectRef) -> bool {
        self.forget_regex(object);
        self.references.delete(object);
        self.workloads.remove(object).is_some()
    }

    /// The workloads to re-hash when the config `kind`/`namespace`/`name` changes (created, updated,
    /// deleted): those whose pods consume it or whose `reload` lists name it. `config_annotations`
    /// (its latest metadata; the last known on delete) only fill in [`Hit::reason`]. Sorted by
    /// workload.
    pub fn lookup(
        &self,
        kind: ConfigKind,
        namespace: &str,
        name: &str,
        config_annotations: Option<&BTreeMap<String, String>>,
    ) -> Vec<Hit<'_>> {
        let mut hits = Vec::new();
        let mut consider = |object: &ObjectRef| {
            let Some((object, entry)) = self.workloads.get_key_value(object) else {
                return;
            };
            let consumption = entry.consumption(kind, name);
            let reason = entry.opt_in.watches(
                kind,
                name,
                config_annotations,
                consumption.is_some(),
                self.options,
            );
            hits.push(Hit {
                workload: object,
                reason,
                keys: consumption.map(|c| &c.keys),
            });
        };
        for object in self.references.referrers_of(kind, namespace, name) {
            consider(object);
        }
        if let Some(regex) = self.regex_named.get(namespace) {
            for object in regex {
                // Already considered through the key (consumed, or named literally).
                let mut keyed = self.references.referrers_of(kind, namespace, name);
                let matches = self.workloads.get(object).is_some_and(|e| {
                    e.opt_in
                        .named_patterns(kind)
                        .iter()
                        .any(|p| p.matches(name))
                });
                if matches && !keyed.any(|o| o == object) {
                    consider(object);
                }
            }
        }
        hits.sort_by(|a, b| a.workload.cmp(b.workload));
        hits
    }

    /// What the index keeps about a workload.
    pub fn get(&self, object: &ObjectRef) -> Option<&IndexedWorkload> {
        self.workloads.get(object)
    }

    /// Number of indexed workloads.
    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    /// Whether no workload is indexed.
    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfigKind::{ConfigMap, Secret};
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::{Value, json};

    fn deployment(name: &str, annotations: Value, containers: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "spec": {"selector": {}, "template": {"spec": {"containers": containers}}},
        }))
        .unwrap()
    }

    fn envfrom_cm(name: &str) -> Value {
        json!([{"name": "c", "envFrom": [{"configMapRef": {"name": name}}]}])
    }

    /// The workloads that watch the config (reason given).
    fn names(hits: &[Hit<'_>]) -> Vec<String> {
        hits.iter()
            .filter(|h| h.reason.is_some())
            .map(|h| h.workload.name.to_string())
            .collect()
    }

    /// Every workload to re-hash.
    fn all(hits: &[Hit<'_>]) -> Vec<String> {
        hits.iter().map(|h| h.workload.name.to_string()).collect()
    }

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn dep_ref(name: &str) -> ObjectRef {
        ObjectRef::new("apps", "Deployment", "ns", name)
    }

    #[test]
    fn auto_workloads_map_consumed_configs_with_keys() {
        let mut index = ConsumerIndex::new(Options::default());
        let a = deployment(
            "a",
            json!({"reloader.stakater.com/auto": "true"}),
            json!([{"name": "c",
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}}]}]),
        );
        let b = deployment(
            "b",
            json!({"reloader.stakater.com/auto": "true"}),
            envfrom_cm("cm"),
        );
        let off = deployment("off", json!({}), envfrom_cm("cm"));
        assert!(index.apply((&a).into()));
        assert!(index.apply((&b).into()));
        assert!(!index.apply((&off).into()), "no opt-in, not indexed");
        let hits = index.lookup(ConfigMap, "ns", "cm", None);
        assert_eq!(names(&hits), ["a", "b"]);
        assert_eq!(
            hits[0].keys,
            Some(&Keys::Only(BTreeSet::from(["x".to_owned()])))
        );
        assert_eq!(hits[1].keys, Some(&Keys::All));
        assert_eq!(hits[0].reason, Some(Reason::Auto));
        assert!(index.lookup(ConfigMap, "other-ns", "cm", None).is_empty());
        assert!(index.lookup(Secret, "ns", "cm", None).is_empty());
        // ignore on the config: nobody watches it, both are re-hashed (it may have just been added).
        let ignored = ann(&[("reloader.stakater.com/ignore", "true")]);
        let hits = index.lookup(ConfigMap, "ns", "cm", Some(&ignored));
        assert!(names(&hits).is_empty());
        assert_eq!(all(&hits), ["a", "b"]);
    }

    #[test]
    fn updates_move_references_and_deletes_free_them() {
        let mut index = ConsumerIndex::new(Options::default());
        let auto = json!({"reloader.stakater.com/auto": "true"});
        index.apply((&deployment("a", auto.clone(), envfrom_cm("old"))).into());
        assert_eq!(names(&index.lookup(ConfigMap, "ns", "old", None)), ["a"]);
        index.apply((&deployment("a", auto.clone(), envfrom_cm("new"))).into());
        assert!(index.lookup(ConfigMap, "ns", "old", None).is_empty());
        assert_eq!(names(&index.lookup(ConfigMap, "ns", "new", None)), ["a"]);
        // Opting out removes it.
        index.apply(
            (&deployment(
                "a",
                json!({"reloader.stakater.com/auto": "false"}),
                envfrom_cm("new"),
            ))
                .into(),
        );
        assert!(index.lookup(ConfigMap, "ns", "new", None).is_empty());
        assert!(index.is_empty());
        index.apply((&deployment("a", auto, envfrom_cm("new"))).into());
        assert_eq!(index.len(), 1);
        assert!(index.delete(&dep_ref("a")));
        assert!(!index.delete(&dep_ref("a")));
        assert!(index.lookup(ConfigMap, "ns", "new", None).is_empty());
        assert!(index.is_empty());
    }

    #[test]
    fn named_configs_map_even_when_not_consumed() {
        let mut index = ConsumerIndex::new(Options::default());
        let w = deployment(
            "w",
            json!({"configmap.reloader.stakater.com/reload": "literal, app-.*", "secret.reloader.stakater.com/reload": "tok"}),
            json!([{"name": "c"}]),
        );
        assert!(index.apply((&w).into()));
        for (kind, name, want) in [
            (ConfigMap, "literal", true),
            (ConfigMap, "app-1", true),
            (ConfigMap, "app", false),
            (ConfigMap, "tok", false),
            (Secret, "tok", true),
            (Secret, "app-1", false),
        ] {
            let hits = index.lookup(kind, "ns", name, None);
            assert_eq!(!hits.is_empty(), want, "{kind}/{name}");
            if want {
                assert_eq!(hits[0].reason, Some(Reason::Named));
                assert_eq!(hits[0].keys, None, "not consumed");
            }
        }
        assert!(index.lookup(ConfigMap, "other", "app-1", None).is_empty());
        // Dropping the regex list forgets the workload for regex matches.
        let w = deployment(
            "w",
            json!({"configmap.reloader.stakater.com/reload": "literal"}),
            json!([{"name": "c"}]),
        );
        index.apply((&w).into());
        assert!(index.lookup(ConfigMap, "ns", "app-1", None).is_empty());
        assert_eq!(
            names(&index.lookup(ConfigMap, "ns", "literal", None)),
            ["w"]
        );
        index.delete(&dep_ref("w"));
        assert!(index.regex_named.is_empty());
    }

    #[test]
    fn regex_named_and_consumed_is_one_hit() {
        let mut index = ConsumerIndex::new(Options::default());
        let w = deployment(
            "w",
            json!({"configmap.reloader.stakater.com/reload": "app-.*"}),
            envfrom_cm("app-1"),
        );
        index.apply((&w).into());
        let hits = index.lookup(ConfigMap, "ns", "app-1", None);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].keys, Some(&Keys::All));
    }

    #[test]
    fn search_and_match() {
        let mut index = ConsumerIndex::new(Options::default());
        index.apply(
            (&deployment(
                "s",
                json!({"reloader.stakater.com/search": "true"}),
                envfrom_cm("cm"),
            ))
                .into(),
        );
        let hits = index.lookup(ConfigMap, "ns", "cm", None);
        assert!(names(&hits).is_empty(), "no match annotation");
        assert_eq!(all(&hits), ["s"], "re-hashed: match may have been removed");
        let matched = ann(&[("reloader.stakater.com/match", "true")]);
        let hits = index.lookup(ConfigMap, "ns", "cm", Some(&matched));
        assert_eq!(names(&hits), ["s"]);
        assert_eq!(hits[0].reason, Some(Reason::SearchMatch));
        assert!(
            index
                .lookup(ConfigMap, "ns", "unconsumed", Some(&matched))
                .is_empty()
        );
    }

    #[test]
    fn auto_reload_all_indexes_unannotated_workloads() {
        let mut index = ConsumerIndex::new(Options {
            auto_reload_all: true,
            ..Options::default()
        });
        assert!(index.apply((&deployment("a", json!({}), envfrom_cm("cm"))).into()));
        assert!(
            !index.apply(
                (&deployment(
                    "b",
                    json!({"reloader.stakater.com/auto": "false"}),
                    envfrom_cm("cm")
                ))
                    .into()
            )
        );
        assert_eq!(names(&index.lookup(ConfigMap, "ns", "cm", None)), ["a"]);
    }

    #[test]
    fn typed_auto_only_for_its_kind() {
        let mut index = ConsumerIndex::new(Options::default());
        let containers = json!([{"name": "c", "envFrom": [{"configMapRef": {"name": "x"}}, {"secretRef": {"name": "x"}}]}]);
        index.apply(
            (&deployment(
                "w",
                json!({"secret.reloader.stakater.com/auto": "true"}),
                containers,
            ))
                .into(),
        );
        assert!(names(&index.lookup(ConfigMap, "ns", "x", None)).is_empty());
        assert_eq!(names(&index.lookup(Secret, "ns", "x", None)), ["w"]);
        let entry = index.get(&dep_ref("w")).unwrap();
        assert!(entry.consumption(ConfigMap, "x").is_some());
        assert!(entry.consumption(Secret, "y").is_none());
    }

    /// A step of the property test: apply workload `w` with annotation set `ann` consuming the
    /// ConfigMaps and Secrets in the two bit masks, or delete it.
    #[derive(Debug, Clone)]
    enum Step {
        Apply {
            w: usize,
            ann: usize,
            cms: u8,
            secrets: u8,
        },
        Delete {
            w: usize,
        },
    }

    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    const ANNOTATIONS: [&[(&str, &str)]; 8] = [
        &[],
        &[("reloader.stakater.com/auto", "true")],
        &[("reloader.stakater.com/auto", "false")],
        &[("configmap.reloader.stakater.com/auto", "true")],
        &[("secret.reloader.stakater.com/reload", "a")],
        &[("configmap.reloader.stakater.com/reload", "b|c")],
        &[("reloader.stakater.com/search", "true")],
        &[("wave.pusher.com/update-on-config-change", "true")],
    ];

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..4usize, 0..ANNOTATIONS.len(), 0..16u8, 0..16u8).prop_map(
                |(w, ann, cms, secrets)| Step::Apply {
                    w,
                    ann,
                    cms,
                    secrets
                }
            ),
            (0..4usize).prop_map(|w| Step::Delete { w }),
        ]
    }

    fn refs(mask: u8, key: &str) -> Vec<Value> {
        (0..4)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| json!({key: {"name": NAMES[i]}}))
            .collect()
    }

    proptest::proptest! {
        /// After any sequence of applies and deletes, a lookup answers what a scan of the live
        /// workloads answers.
        #[test]
        fn lookup_equals_a_scan(steps in proptest::collection::vec(step(), 1..24)) {
            let mut index = ConsumerIndex::new(Options::default());
            let mut live: BTreeMap<String, Deployment> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Apply { w, ann, cms, secrets } => {
                        let mut env_from = refs(cms, "configMapRef");
                        env_from.extend(refs(secrets, "secretRef"));
                        let name = format!("w{w}");
                        let annotations: BTreeMap<&str, &str> = ANNOTATIONS[ann].iter().copied().collect();
                        let d = deployment(&name, json!(annotations), json!([{"name": "c", "envFrom": env_from}]));
                        index.apply((&d).into());
                        live.insert(name, d);
                    }
                    Step::Delete { w } => {
                        index.delete(&dep_ref(&format!("w{w}")));
                        live.remove(&format!("w{w}"));
                    }
                }
                let matched = ann(&[("reloader.stakater.com/match", "true")]);
                for kind in [ConfigMap, Secret] {
                    for name in NAMES {
                        for config_ann in [None, Some(&matched)] {
                            let got: Vec<(String, Option<Reason>)> = index
                                .lookup(kind, "ns", name, config_ann)
                                .into_iter()
                                .map(|h| (h.workload.name.to_string(), h.reason))
                                .collect();
                            let want: Vec<(String, Option<Reason>)> = live
                                .iter()
                                .filter_map(|(wname, d)| {
                                    let w = Workload::from(d);
                                    let opt_in = OptIn::of(w);
                                    if !opt_in.is_enabled(Options::default()) {
                                        return None;
                                    }
                                    let consumed = w.consumers().iter().any(|c| c.kind == kind && c.name == name);
                                    let named = opt_in.named_patterns(kind).iter().any(|p| p.matches(name));
                                    (consumed || named).then(|| {
                                        let reason = opt_in.watches(kind, name, config_ann, consumed, Options::default());
                                        (wname.clone(), reason)
                                    })
                                })
                                .collect();
                            proptest::prop_assert_eq!(got, want, "{}/{}", kind, name);
                        }
                    }
                }
            }
        }
    }
}
