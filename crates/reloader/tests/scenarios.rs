//! The reload scenarios of issue 6, on the pure path: the index, the watched set, the hash and the
//! decision together, with configs held in memory the way the controller's caches hold them.

use std::collections::BTreeMap;

use conflux_reloader::Workload;
use conflux_reloader::hash::{ConfigData, content_hash};
use conflux_reloader::index::ConsumerIndex;
use conflux_reloader::opt_in::{NamespaceConfigs, Options, watch};
use conflux_reloader::patch::{Action, WorkloadState, decide};
use conflux_watch_index::refs::ConfigKind;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::{Value, json};

/// ConfigMaps and Secrets of namespace `ns`, by name.
#[derive(Default, Clone)]
struct Configs {
    config_maps: BTreeMap<String, ConfigMap>,
    secrets: BTreeMap<String, Secret>,
}

impl NamespaceConfigs for Configs {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        match kind {
            ConfigKind::ConfigMap => self.config_maps.get(name)?.metadata.annotations.as_ref(),
            ConfigKind::Secret => self.secrets.get(name)?.metadata.annotations.as_ref(),
        }
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        let cms = self
            .config_maps
            .keys()
            .map(|n| (ConfigKind::ConfigMap, n.as_str()));
        let secrets = self
            .secrets
            .keys()
            .map(|n| (ConfigKind::Secret, n.as_str()));
        cms.chain(secrets).collect()
    }
}

impl Configs {
    fn set_cm(&mut self, name: &str, data: &[(&str, &str)], annotations: &[(&str, &str)]) {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": map(annotations)},
            "data": map(data),
        }))
        .unwrap();
        self.config_maps.insert(name.into(), cm);
    }

    fn set_secret(&mut self, name: &str, data: &[(&str, &str)]) {
        let data = data
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect();
        let s = Secret {
            data: Some(data),
            ..Default::default()
        };
        self.secrets.insert(name.into(), s);
    }

    fn data(&self, kind: ConfigKind, name: &str) -> Option<ConfigData<'_>> {
        match kind {
            ConfigKind::ConfigMap => self.config_maps.get(name).map(ConfigData::from_config_map),
            ConfigKind::Secret => self.secrets.get(name).map(ConfigData::from_secret),
        }
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One workload under the controller, with its two annotations as the API server would hold them.
struct Harness {
    deployment: Deployment,
    index: ConsumerIndex,
    state: WorkloadState,
    options: Options,
}

impl Harness {
    fn new(annotations: &[(&str, &str)], pod_spec: Value) -> Self {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": map(annotations)},
            "spec": {"selector": {}, "template": {"spec": pod_spec}},
        }))
        .unwrap();
        let mut index = ConsumerIndex::new(Options::default());
        index.apply(Workload::from(&deployment));
        let state = WorkloadState::of(Workload::from(&deployment)).unwrap();
        Harness {
            deployment,
            index,
            state,
            options: Options::default(),
        }
    }

    /// The controller's reaction to an event of `changed` (kind, name): what it decides, after
    /// applying the patch to the in-memory state. `"none"` also when the index returns nothing.
    fn react(&mut self, configs: &Configs, changed: (ConfigKind, &str)) -> &'static str {
        let (kind, name) = changed;
        let hits = self
            .index
            .lookup(kind, "ns", name, configs.annotations(kind, name));
        if hits.is_empty() {
            return "not-watched";
        }
        let entry = self.index.get(hits[0].workload).unwrap();
        let watch = watch(&entry.consumers, &entry.opt_in, self.options, configs);
        let hash = content_hash(&watch, |k, n| configs.data(k, n));
        let action = decide(&self.state, &hash, self.options);
        match &action {
            Action::None => "none",
            Action::Remember(b) => {
                self.state.remembered = Some(b.clone());
                "baseline"
            }
            Action::Rollout(patch) => {
                self.state.remembered = Some(patch.baseline.clone());
                self.state.template_hash = patch.template_hash.clone();
                self.state.last_reloaded_from = patch.last_reloaded_from.clone();
                "rollout"
            }
            other => panic!("unexpected action {other:?}"),
        }
    }
}

use ConfigKind::{ConfigMap as Cm, Secret as Sec};

const AUTO: &[(&str, &str)] = &[("reloader.stakater.com/auto", "true")];

fn base_configs() -> Configs {
    let mut c = Configs::default();
    c.set_cm("cm", &[("read", "1"), ("unread", "1")], &[]);
    c.set_secret("sec", &[("read", "1"), ("unread", "1")]);
    c
}

/// Per consumer form: first sight records a baseline, restart is quiet, an unread key is quiet
/// (where the form reads single keys), a read key rolls exactly once.
#[test]
fn every_consumer_form_rolls_on_what_it_reads() {
    let forms = [
        (
            "env configMapKeyRef",
            Cm,
            json!({"containers": [{"name": "a", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "read"}}}]}]}),
            true,
        ),
        (
            "env secretKeyRef",
            Sec,
            json!({"containers": [{"name": "a", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "read"}}}]}]}),
            true,
        ),
        (
            "envFrom",
            Cm,
            json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
            false,
        ),
        (
            "volume",
            Sec,
            json!({"containers": [{"name": "a"}], "volumes": [{"name": "v", "secret": {"secretName": "sec"}}]}),
            false,
        ),
        (
            "volume items",
            Cm,
            json!({"containers": [{"name": "a"}], "volumes": [{"name": "v", "configMap": {"name": "cm", "items": [{"key": "read", "path": "r"}]}}]}),
            true,
        ),
        (
            "projected",
            Sec,
            json!({"containers": [{"name": "a"}], "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "sec"}}]}}]}),
            false,
        ),
        (
            "projected items",
            Cm,
            json!({"containers": [{"name": "a"}], "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "cm", "items": [{"key": "read", "path": "r"}]}}]}}]}),
            true,
        ),
        (
            "init container",
            Cm,
            json!({"initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "cm"}}]}], "containers": [{"name": "a"}]}),
            false,
        ),
    ];
    for (what, kind, spec, key_level) in forms {
        let mut h = Harness::new(AUTO, spec);
        let name = if kind == Cm { "cm" } else { "sec" };
        let mut configs = base_configs();
        assert_eq!(
            h.react(&configs, (kind, name)),
            "baseline",
            "first sight: {what}"
        );
        assert_eq!(h.react(&configs, (kind, name)), "none", "restart: {what}");
        let edit = |c: &mut Configs, key: &str| match kind {
            Cm => c.set_cm("cm", &[("read", "1"), ("unread", "1"), (key, "2")], &[]),
            Sec => c.set_secret("sec", &[("read", "1"), ("unread", "1"), (key, "2")]),
        };
        edit(&mut configs, "unread");
        let want = if key_level { "none" } else { "rollout" };
        assert_eq!(h.react(&configs, (kind, name)), want, "unread key: {what}");
        edit(&mut configs, "read");
        assert_eq!(
            h.react(&configs, (kind, name)),
            "rollout",
            "read key: {what}"
        );
        assert_eq!(h.react(&configs, (kind, name)), "none", "once: {what}");
    }
}

#[test]
fn three_changes_in_one_window_are_one_rollout() {
    let spec = json!({"containers": [{"name": "a", "envFrom": [
        {"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}, {"configMapRef": {"name": "c"}}]}]});
    let mut h = Harness::new(AUTO, spec);
    let mut configs = Configs::default();
    for n in ["a", "b", "c"] {
        configs.set_cm(n, &[("k", "1")], &[]);
    }
    assert_eq!(h.react(&configs, (Cm, "a")), "baseline");
    for n in ["a", "b", "c"] {
        configs.set_cm(n, &[("k", "2")], &[]);
    }
    // The coalesced events are processed after the window: the first rolls, the others see the
    // same hash.
    let got: Vec<_> = ["a", "b", "c"].map(|n| h.react(&configs, (Cm, n))).into();
    assert_eq!(got, ["rollout", "none", "none"]);
}

#[test]
fn opt_out_and_ignore_are_respected() {
    let spec =
        json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
    let mut configs = base_configs();
    let mut h = Harness::new(&[("reloader.stakater.com/auto", "false")], spec.clone());
    assert_eq!(h.react(&configs, (Cm, "cm")), "not-watched");

    let mut h = Harness::new(AUTO, spec);
    let ignore: &[(&str, &str)] = &[("reloader.stakater.com/ignore", "true")];
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // ignore added: what is watched changes, the baseline moves, nothing rolls.
    configs.set_cm("cm", &[("read", "1")], ignore);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // Changes while ignored only move the baseline (the config is still hashed, unwatched).
    configs.set_cm("cm", &[("read", "2")], ignore);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    assert_eq!(h.react(&configs, (Cm, "cm")), "none");
    // ignore removed: watched again from here on; the change made meanwhile does not roll.
    configs.set_cm("cm", &[("read", "2")], &[]);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    configs.set_cm("cm", &[("read", "3")], &[]);
    assert_eq!(h.react(&configs, (Cm, "cm")), "rollout");
    // ignore added together with a change: not watched any more, no rollout (as Reloader, which
    // reads the new annotations).
    configs.set_cm("cm", &[("read", "4")], ignore);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // ignore removed together with a change: watched again, and the change rolls (as Reloader).
    configs.set_cm("cm", &[("read", "5")], &[]);
    assert_eq!(h.react(&configs, (Cm, "cm")), "rollout");
}

#[test]
fn search_gains_match_together_with_a_change_and_rolls() {
    let spec =
        json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
    let mut configs = base_configs();
    let mut h = Harness::new(&[("reloader.stakater.com/search", "true")], spec);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    let matched: &[(&str, &str)] = &[("reloader.stakater.com/match", "true")];
    // match added alone: membership, no rollout.
    configs.set_cm("cm", &[("read", "1"), ("unread", "1")], matched);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // match removed together with a change: no rollout.
    configs.set_cm("cm", &[("read", "2"), ("unread", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // match added together with a change: rolls.
    configs.set_cm("cm", &[("read", "3"), ("unread", "1")], matched);
    assert_eq!(h.react(&configs, (Cm, "cm")), "rollout");
}

#[test]
fn deleted_configs() {
    let spec = json!({"containers": [{"name": "a", "envFrom": [
        {"configMapRef": {"name": "opt", "optional": true}}, {"configMapRef": {"name": "req"}}]}]});
    let mut h = Harness::new(AUTO, spec);
    let mut configs = Configs::default();
    configs.set_cm("opt", &[("k", "1")], &[]);
    configs.set_cm("req", &[("k", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "opt")), "baseline");
    // An optional config deleted: pods start without it, so it rolls.
    configs.config_maps.remove("opt");
    assert_eq!(h.react(&configs, (Cm, "opt")), "rollout");
    // A required one deleted: held, pods could not start.
    configs.config_maps.remove("req");
    assert_eq!(h.react(&configs, (Cm, "req")), "none");
    // Recreated as it was: nothing to roll.
    configs.set_cm("req", &[("k", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "req")), "none");
}

#[test]
fn named_config_not_in_the_pod_spec() {
    let mut h = Harness::new(
        &[("configmap.reloader.stakater.com/reload", "feature-.*")],
        json!({"containers": [{"name": "a"}]}),
    );
    let mut configs = Configs::default();
    configs.set_cm("feature-x", &[("k", "1")], &[]);
    configs.set_cm("other", &[("k", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-x")), "baseline");
    assert_eq!(h.react(&configs, (Cm, "other")), "not-watched");
    configs.set_cm("feature-x", &[("k", "2")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-x")), "rollout");
    // A new config matching the regex: its creation rolls (--reload-on-create, on by default).
    configs.set_cm("feature-y", &[("k", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-y")), "rollout");
    configs.set_cm("feature-y", &[("k", "2")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-y")), "rollout");
    // Its deletion too (--reload-on-delete).
    configs.config_maps.remove("feature-y");
    assert_eq!(h.react(&configs, (Cm, "feature-y")), "rollout");
    // With Reloader's defaults, creation and deletion only move the baseline.
    h.options = Options {
        reload_on_create: false,
        reload_on_delete: false,
        ..Options::default()
    };
    configs.set_cm("feature-z", &[("k", "1")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-z")), "baseline");
    configs.config_maps.remove("feature-z");
    assert_eq!(h.react(&configs, (Cm, "feature-z")), "baseline");
    configs.set_cm("feature-x", &[("k", "3")], &[]);
    assert_eq!(h.react(&configs, (Cm, "feature-x")), "rollout");
}

#[test]
fn workload_changes_only_move_the_baseline() {
    let spec =
        json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
    let mut h = Harness::new(AUTO, spec);
    let configs = base_configs();
    assert_eq!(h.react(&configs, (Cm, "cm")), "baseline");
    // The pod spec now also reads the secret: its own change rolls it; we only re-baseline.
    let spec = json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "sec"}}]}]});
    let mut changed = h.deployment.clone();
    changed.spec.template.spec = serde_json::from_value(spec).unwrap();
    h.index.apply(Workload::from(&changed));
    assert_eq!(h.react(&configs, (Sec, "sec")), "baseline");
    assert_eq!(h.react(&configs, (Sec, "sec")), "none");
}
