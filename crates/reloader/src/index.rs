//! The consumer index: ConfigMap/Secret → the workloads that roll when it changes.
//!
//! Built on [`conflux_watch_index::index::ReverseIndex`]: each opted-in workload is a
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

use conflux_watch_index::index::ReverseIndex;
use conflux_watch_index::refs::{ConfigKey, ConfigKind, ObjectRef, Reference, Referrer};

use crate::consumers::{Consumption, Keys};
use crate::opt_in::{NamePattern, OptIn, Options, Reason};
use crate::workload::Workload;

/// What the index keeps per workload.
#[derive(Debug, Clone)]
pub struct IndexedWorkload {
    /// What its pod template consumes, sorted by (kind, name).
    pub consumers: Vec<Consumption>,
    /// The SecretProviderClasses its pod template mounts, sorted (kept with the CSI
    /// integration only).
    pub providers: Vec<String>,
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
    /// CSI integration: (namespace, SecretProviderClass) → the workloads that mount it or name it
    /// literally in their `secretproviderclass` `reload` list.
    providers: HashMap<(Arc<str>, String), BTreeSet<ObjectRef>>,
    /// The keys of `providers` each workload is under, to take it out again.
    provider_keys: HashMap<ObjectRef, Vec<String>>,
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
        // An empty grant leaves the opt-in (and its fingerprint) as the annotations make it.
        self.apply_granted(workload, crate::policy::Grant::default())
    }

    /// [`apply`](Self::apply) with what ReloadPolicies grant the workload
    /// ([`Policies::grant`](crate::policy::Policies::grant)).
    pub fn apply_granted(&mut self, workload: Workload<'_>, grant: crate::policy::Grant) -> bool {
        let Some(object) = workload.object_ref() else {
            return false;
        };
        if workload.is_controlled_job() {
            // Rolled through its CronJob (or left to its controller), never re-created.
            self.delete(&object);
            return false;
        }
        let providers = if self.options.csi_integration {
            workload.provider_classes()
        } else {
            Vec::new()
        };
        let opt_in = OptIn::of(workload).with_grant(grant);
        self.apply_with_providers(object, workload.consumers(), providers, opt_in)
    }

    /// [`apply`](Self::apply) from parts, for callers that already extracted them.
    pub fn apply_parts(
        &mut self,
        object: ObjectRef,
        consumers: Vec<Consumption>,
        opt_in: OptIn,
    ) -> bool {
        self.apply_with_providers(object, consumers, Vec::new(), opt_in)
    }

    /// [`apply_parts`](Self::apply_parts) with the SecretProviderClasses the pod template mounts
    /// (used with the CSI integration only).
    pub fn apply_with_providers(
        &mut self,
        object: ObjectRef,
        consumers: Vec<Consumption>,
        providers: Vec<String>,
        opt_in: OptIn,
    ) -> bool {
        self.forget_regex(&object);
        self.forget_providers(&object);
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
        let mut providers = if self.options.csi_integration {
            providers
        } else {
            Vec::new()
        };
        providers.sort();
        providers.dedup();
        if self.options.csi_integration {
            let mut keys: Vec<String> = providers.clone();
            keys.extend(
                opt_in
                    .named_provider_patterns()
                    .iter()
                    .filter_map(NamePattern::as_literal)
                    .map(str::to_owned),
            );
            keys.sort();
            keys.dedup();
            for name in &keys {
                self.providers
                    .entry((object.namespace.clone(), name.clone()))
                    .or_default()
                    .insert(object.clone());
            }
            if !keys.is_empty() {
                self.provider_keys.insert(object.clone(), keys);
            }
        }
        self.workloads.insert(
            object,
            IndexedWorkload {
                consumers,
                providers,
                opt_in,
            },
        );
        true
    }

    fn forget_providers(&mut self, object: &ObjectRef) {
        for name in self.provider_keys.remove(object).unwrap_or_default() {
            let key = (object.namespace.clone(), name);
            if let Some(set) = self.providers.get_mut(&key) {
                set.remove(object);
                if set.is_empty() {
                    self.providers.remove(&key);
                }
            }
        }
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
        self.forget_providers(object);
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

    /// The workloads to re-hash when what the pods of `namespace` mounted from the
    /// SecretProviderClass `name` changes, or the class itself (its annotations) does: those that
    /// mount it, or whose `secretproviderclass` `reload` list names it. `annotations` (the
    /// class's, when known) only fill in [`Hit::reason`]. Empty without the CSI integration.
    /// Sorted by workload.
    pub fn lookup_provider(
        &self,
        namespace: &str,
        name: &str,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Vec<Hit<'_>> {
        if !self.options.csi_integration {
            return Vec::new();
        }
        let mut found: BTreeSet<&ObjectRef> = self
            .providers
            .get(&(Arc::from(namespace), name.to_owned()))
            .into_iter()
            .flatten()
            .collect();
        if let Some(regex) = self.regex_named.get(namespace) {
            found.extend(regex.iter().filter(|object| {
                self.workloads.get(*object).is_some_and(|e| {
                    e.opt_in
                        .named_provider_patterns()
                        .iter()
                        .any(|p| p.matches(name))
                })
            }));
        }
        found
            .into_iter()
            .filter_map(|object| {
                let (object, entry) = self.workloads.get_key_value(object)?;
                let consumed = entry.providers.iter().any(|p| p == name);
                Some(Hit {
                    workload: object,
                    reason: entry.opt_in.watches_provider(
                        name,
                        annotations,
                        consumed,
                        self.options,
                    ),
                    keys: None,
                })
            })
            .collect()
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
    #[test]
    fn secret_provider_classes_are_looked_up_with_the_csi_integration() {
        let csi = Options {
            csi_integration: true,
            ..Options::default()
        };
        let csi_volume = |class: &str| {
            json!({"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io",
                "volumeAttributes": {"secretProviderClass": class}}})
        };
        let with_volume = |name: &str, annotations: Value, class: &str| -> Deployment {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
                "spec": {"selector": {}, "template": {"spec": {
                    "containers": [{"name": "c"}], "volumes": [csi_volume(class)]}}},
            }))
            .unwrap()
        };
        let mut index = ConsumerIndex::new(csi);
        let auto = with_volume(
            "auto",
            json!({"reloader.stakater.com/auto": "true"}),
            "vault",
        );
        let typed = with_volume(
            "typed",
            json!({"secretproviderclass.reloader.stakater.com/auto": "true"}),
            "vault",
        );
        let named = deployment(
            "named",
            json!({"secretproviderclass.reloader.stakater.com/reload": "vault, az-.*"}),
            envfrom_cm("x"),
        );
        let other = with_volume(
            "other",
            json!({"reloader.stakater.com/auto": "true"}),
            "other",
        );
        for d in [&auto, &typed, &named, &other] {
            assert!(index.apply(d.into()), "{:?}", d.metadata.name);
        }
        assert_eq!(
            names(&index.lookup_provider("ns", "vault", None)),
            ["auto", "named", "typed"]
        );
        assert_eq!(names(&index.lookup_provider("ns", "az-1", None)), ["named"]);
        assert!(index.lookup_provider("elsewhere", "vault", None).is_empty());
        let ignored = BTreeMap::from([(IGNORE_KEY.to_owned(), "true".to_owned())]);
        let hits = index.lookup_provider("ns", "vault", Some(&ignored));
        assert_eq!(hits.len(), 3, "still returned, to move their baselines");
        assert!(hits.iter().all(|h| h.reason.is_none()));
        // Mounting another class moves the workload.
        let moved = with_volume(
            "auto",
            json!({"reloader.stakater.com/auto": "true"}),
            "moved",
        );
        index.apply((&moved).into());
        assert_eq!(
            names(&index.lookup_provider("ns", "vault", None)),
            ["named", "typed"]
        );
        index.delete(&moved_ref());
        assert!(index.lookup_provider("ns", "moved", None).is_empty());
        // Without the integration: nothing, and class-only opt-ins are not indexed.
        let mut off = ConsumerIndex::new(Options::default());
        assert!(!off.apply((&typed).into()));
        off.apply((&auto).into());
        assert!(off.lookup_provider("ns", "vault", None).is_empty());
    }

    const IGNORE_KEY: &str = "reloader.stakater.com/ignore";

    fn moved_ref() -> ObjectRef {
        ObjectRef::new("apps", "Deployment", "ns", "auto")
    }

    #[test]
    fn jobs_of_a_cronjob_are_not_indexed() {
        let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
            "metadata": {"name": "nightly-1", "namespace": "ns",
                "annotations": {"reloader.stakater.com/auto": "true"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                                     "uid": "u", "controller": true}]},
            "spec": {"template": {"spec": {"containers": envfrom_cm("app")}}},
        }))
        .unwrap();
        let mut index = ConsumerIndex::new(Options::default());
        assert!(!index.apply((&job).into()));
        let mut standalone = job.clone();
        standalone.metadata.owner_references = None;
        assert!(index.apply((&standalone).into()));
        assert_eq!(
            names(&index.lookup(ConfigKind::ConfigMap, "ns", "app", None)),
            ["nightly-1"]
        );
    }
}
