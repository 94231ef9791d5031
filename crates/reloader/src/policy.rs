//! `ReloadPolicy` (`conflux.dev/v1alpha1`, cluster-scoped): opts workloads in without annotating
//! them. A policy selects ConfigMaps/Secrets (the shared [`ConfigSelector`] block) and workloads
//! (by kind, by their Namespace's labels, and optionally by how their pods read the config:
//! `Env`, `EnvFrom`, `Volume`); every selected workload whose pods read a selected config rolls
//! when that config's content changes.
//!
//! A policy goes through the very decision path of the annotations: it is one more opt-in rule
//! ([`OptIn::with_grant`](crate::opt_in::OptIn::with_grant)), evaluated after Reloader's and wave's
//! annotations, with the same hashing, debounce, storms and restart rules. What the policies grant
//! a workload is part of what it watches ([`Watch::spec`](crate::opt_in::Watch::spec)), so
//! creating, changing or deleting a policy only moves baselines, as adding or removing an
//! annotation does: it never rolls anything by itself.
//!
//! Precedence (docs/design.md section 5.3), for one config and one workload:
//! 1. `reloader.stakater.com/ignore: "true"` on the config, or `--resources-to-ignore`: never.
//! 2. `reloader.stakater.com/ignore: "true"` on the workload (its metadata or its pod template):
//!    no policy applies to it (its own opt-in annotations still do).
//! 3. The workload's own annotations, as Reloader reads them (the workload's map, or the pod
//!    template's when only it holds any): an `exclude` list naming the config means never; a
//!    `reload` list, `search` + `match`, a true `auto` or typed `auto` roll as they always do; an
//!    `auto` or typed `auto` set to a value (`"false"` included) means the workload decided for
//!    itself: no policy applies to that kind.
//! 4. Otherwise, a policy that selects the workload and the config (read through one of its
//!    `references`) rolls it ([`Reason::Policy`](crate::opt_in::Reason::Policy)). A `reload` list
//!    naming other configs does not stop it, as with `--auto-reload-all`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use conflux_watch_index::config_selector::{
    CompiledConfigSelector, ConfigSelector, label_selector,
};
use conflux_watch_index::refs::ConfigKind;
use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::opt_in::IGNORE;
use crate::workload::{Workload, WorkloadKind};
use crate::{Error, Result};

/// API group of `ReloadPolicy`.
pub const GROUP: &str = "conflux.dev";
/// API version of `ReloadPolicy`.
pub const VERSION: &str = "v1alpha1";
/// Kind of `ReloadPolicy`.
pub const KIND: &str = "ReloadPolicy";
/// Reason of `Ready=True`: the spec is valid and the policy in force.
pub const REASON_VALID: &str = "Valid";
/// Informational annotation: what a policy was imported from (for example a Kyverno rule).
pub const IMPORT_SOURCE_ANNOTATION: &str = "import.conflux.dev/source";

/// Roll every selected workload whose pods read a selected ConfigMap or Secret when it changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "kube",
    derive(kube_derive::CustomResource, schemars::JsonSchema),
    kube(
        group = "conflux.dev",
        version = "v1alpha1",
        kind = "ReloadPolicy",
        doc = "A ReloadPolicy rolls the selected workloads when a selected ConfigMap or Secret they read changes, without annotating them.",
        status = "ReloadPolicyStatus",
        shortname = "rpol",
        derive = "PartialEq",
        crates(kube_core = "::kube_core"),
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReloadPolicySpec {
    /// The ConfigMaps/Secrets whose changes roll workloads.
    #[serde(default)]
    pub configs: ConfigSelector,
    /// The workloads that roll.
    #[serde(default)]
    pub workloads: WorkloadSelector,
}

/// Which workloads a policy rolls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Workload kinds (`Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`, `Rollout`);
    /// empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// A label selector on the workload's Namespace (which is the config's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// How the pods must read the config: `Env` (`env[].valueFrom` key references), `EnvFrom`,
    /// `Volume` (volumes and projected sources); empty: any reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
}

/// What conflux reports on a policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReloadPolicyStatus {
    /// The `metadata.generation` the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` when the spec is valid and in force, `False` with a stable reason
    /// (`InvalidGlob`, `InvalidSelector`, `UnknownWorkloadKind`, `UnknownReference`) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// How a pod reads a ConfigMap/Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ReferenceKind {
    /// `env[].valueFrom.configMapKeyRef` / `secretKeyRef`.
    Env,
    /// `envFrom[].configMapRef` / `secretRef`.
    EnvFrom,
    /// `volumes[].configMap` / `secret`, and projected volumes' sources.
    Volume,
}

impl ReferenceKind {
    /// Every reference kind.
    pub const ALL: [ReferenceKind; 3] = [
        ReferenceKind::Env,
        ReferenceKind::EnvFrom,
        ReferenceKind::Volume,
    ];

    /// The name used in `spec.workloads.references`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReferenceKind::Env => "Env",
            ReferenceKind::EnvFrom => "EnvFrom",
            ReferenceKind::Volume => "Volume",
        }
    }

    fn bit(self) -> u8 {
        match self {
            ReferenceKind::Env => 1,
            ReferenceKind::EnvFrom => 2,
            ReferenceKind::Volume => 4,
        }
    }
}

/// A set of [`ReferenceKind`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct References(u8);

impl References {
    /// Every reference kind.
    pub const ANY: References = References(7);

    /// Adds `kind`.
    pub fn insert(&mut self, kind: ReferenceKind) {
        self.0 |= kind.bit();
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: ReferenceKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// Whether the two sets share a kind.
    pub fn intersects(self, other: References) -> bool {
        self.0 & other.0 != 0
    }
}

/// How a pod spec reads each ConfigMap/Secret it consumes (init and regular containers, volumes
/// and projected sources; ephemeral containers skipped, as in [`crate::consumers`]).
pub fn pod_spec_references(spec: &PodSpec) -> BTreeMap<(ConfigKind, String), References> {
    let mut found: BTreeMap<(ConfigKind, String), References> = BTreeMap::new();
    let mut add = |kind: ConfigKind, name: Option<&str>, how: ReferenceKind| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            found
                .entry((kind, name.to_owned()))
                .or_default()
                .insert(how);
        }
    };
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let containers: Vec<&Container> = init.iter().chain(&spec.containers).collect();
    for c in containers {
        for env in c.env.as_deref().unwrap_or_default() {
            let Some(from) = &env.value_from else {
                continue;
            };
            if let Some(r) = &from.config_map_key_ref {
                add(ConfigKind::ConfigMap, Some(&r.name), ReferenceKind::Env);
            }
            if let Some(r) = &from.secret_key_ref {
                add(ConfigKind::Secret, Some(&r.name), ReferenceKind::Env);
            }
        }
        for from in c.env_from.as_deref().unwrap_or_default() {
            if let Some(r) = &from.config_map_ref {
                add(ConfigKind::ConfigMap, Some(&r.name), ReferenceKind::EnvFrom);
            }
            if let Some(r) = &from.secret_ref {
                add(ConfigKind::Secret, Some(&r.name), ReferenceKind::EnvFrom);
            }
        }
    }
    for volume in spec.volumes.as_deref().unwrap_or_default() {
        if let Some(cm) = &volume.config_map {
            add(ConfigKind::ConfigMap, Some(&cm.name), ReferenceKind::Volume);
        }
        if let Some(s) = &volume.secret {
            add(
                ConfigKind::Secret,
                s.secret_name.as_deref(),
                ReferenceKind::Volume,
            );
        }
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_deref());
        for source in sources.unwrap_or_default() {
            if let Some(cm) = &source.config_map {
                add(ConfigKind::ConfigMap, Some(&cm.name), ReferenceKind::Volume);
            }
            if let Some(s) = &source.secret {
                add(ConfigKind::Secret, Some(&s.name), ReferenceKind::Volume);
            }
        }
    }
    found
}

/// The workload kinds `spec.workloads.kinds` accepts, for error messages.
const WORKLOAD_KINDS: &str = "Deployment, StatefulSet, DaemonSet, CronJob, Job, Rollout";

/// A valid policy, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledPolicy {
    name: Arc<str>,
    configs: CompiledConfigSelector,
    /// Empty: every kind.
    kinds: BTreeSet<WorkloadKind>,
    namespace_selector: Option<Selector>,
    references: References,
}

impl ReloadPolicySpec {
    /// Checks the spec and parses it, for the policy `name`. The first problem is the error,
    /// with a stable [`Error::reason`]: `InvalidGlob`, `InvalidSelector`, `UnknownWorkloadKind`,
    /// `UnknownReference`.
    pub fn compile(&self, name: &str) -> Result<CompiledPolicy> {
        let configs = self
            .configs
            .compile("spec.configs")
            .map_err(Error::InvalidConfigSelector)?;
        let mut kinds = BTreeSet::new();
        for (index, value) in self.workloads.kinds.iter().enumerate() {
            let kind = WorkloadKind::ALL
                .into_iter()
                .find(|k| k.as_str() == value)
                .ok_or_else(|| Error::UnknownWorkloadKind {
                    index,
                    value: value.chars().take(64).collect(),
                    expected: WORKLOAD_KINDS,
                })?;
            kinds.insert(kind);
        }
        let namespace_selector = label_selector(
            self.workloads.namespace_selector.as_ref(),
            "spec.workloads.namespaceSelector",
        )
        .map_err(Error::InvalidConfigSelector)?;
        let mut references = References::default();
        for (index, value) in self.workloads.references.iter().enumerate() {
            let kind = ReferenceKind::ALL
                .into_iter()
                .find(|k| k.as_str() == value)
                .ok_or_else(|| Error::UnknownReference {
                    index,
                    value: value.chars().take(64).collect(),
                })?;
            references.insert(kind);
        }
        if references == References::default() {
            references = References::ANY;
        }
        Ok(CompiledPolicy {
            name: Arc::from(name),
            configs,
            kinds,
            namespace_selector,
            references,
        })
    }
}

impl CompiledPolicy {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the policy reads Namespace labels (a `namespaceSelector` on either side).
    pub fn needs_namespace_labels(&self) -> bool {
        self.namespace_selector.is_some() || self.configs.needs_namespace_labels()
    }

    /// Whether the policy selects workloads of `kind` in a namespace labelled `namespace_labels`
    /// (the config side's namespace parts included: configs are read in the workload's namespace).
    fn selects_workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&kind))
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(&namespace_labels))
            && self.configs.matches_namespace(namespace, namespace_labels)
    }
}

/// The valid policies in force.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    by_name: BTreeMap<Arc<str>, CompiledPolicy>,
}

impl Policies {
    /// Adds or replaces a policy; whether that changed anything.
    pub fn insert(&mut self, policy: CompiledPolicy) -> bool {
        if self.by_name.get(policy.name()) == Some(&policy) {
            return false;
        }
        self.by_name.insert(policy.name.clone(), policy);
        true
    }

    /// Removes the policy `name` (deleted, or now invalid); whether it was in force.
    pub fn remove(&mut self, name: &str) -> bool {
        self.by_name.remove(name).is_some()
    }

    /// Whether no policy is in force.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// How many policies are in force.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether some policy reads Namespace labels.
    pub fn needs_namespace_labels(&self) -> bool {
        self.by_name
            .values()
            .any(CompiledPolicy::needs_namespace_labels)
    }

    /// What the policies grant `workload`, whose Namespace carries `namespace_labels`: for each
    /// config its pods read, the policies that select the workload and the config (but for the
    /// config's own labels, which are the config's business and checked when it is evaluated).
    /// Empty for a workload with `reloader.stakater.com/ignore: "true"`.
    pub fn grant(
        &self,
        workload: Workload<'_>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Grant {
        let mut entries = Vec::new();
        if self.by_name.is_empty() || ignored(workload) {
            return Grant { entries };
        }
        let namespace = workload.metadata().namespace.as_deref().unwrap_or_default();
        let Some(spec) = workload.pod_template().and_then(|t| t.spec.as_ref()) else {
            return Grant { entries };
        };
        let applicable: Vec<&CompiledPolicy> = self
            .by_name
            .values()
            .filter(|p| p.selects_workload(workload.kind(), namespace, namespace_labels))
            .collect();
        if applicable.is_empty() {
            return Grant { entries };
        }
        for ((kind, name), how) in pod_spec_references(spec) {
            for policy in &applicable {
                if policy.references.intersects(how)
                    && policy.configs.matches_kind(kind)
                    && policy.configs.matches_name(&name)
                {
                    entries.push(GrantEntry {
                        kind,
                        name: name.clone(),
                        policy: policy.name.clone(),
                        configs: policy.configs.clone(),
                    });
                }
            }
        }
        Grant { entries }
    }
}

/// Whether the workload says `reloader.stakater.com/ignore: "true"` (metadata or pod template).
fn ignored(workload: Workload<'_>) -> bool {
    [workload.annotations(), workload.template_annotations()]
        .into_iter()
        .flatten()
        .any(|m| m.get(IGNORE).is_some_and(|v| v == "true"))
}

/// One config a policy opts one workload in for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GrantEntry {
    kind: ConfigKind,
    name: String,
    policy: Arc<str>,
    /// For the config's own labels (its `selector`).
    configs: CompiledConfigSelector,
}

/// What the policies opt one workload in for, by config (see [`Policies::grant`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// Sorted by (kind, name), then policy name.
    entries: Vec<GrantEntry>,
}

impl Grant {
    /// Whether no policy opts the workload in.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a policy opts it in for some config of `kind`.
    pub fn covers_kind(&self, kind: ConfigKind) -> bool {
        self.entries.iter().any(|e| e.kind == kind)
    }

    /// The first policy (by name) that opts the workload in for the config `kind`/`name`, whose
    /// own labels are `labels`; with `labels` `None`, whether one could, were the config's labels
    /// different.
    pub fn policy_for(
        &self,
        kind: ConfigKind,
        name: &str,
        labels: Option<Option<&BTreeMap<String, String>>>,
    ) -> Option<&str> {
        self.entries
            .iter()
            .filter(|e| e.kind == kind && e.name == name)
            .find(|e| labels.is_none_or(|l| e.configs.matches_labels(l)))
            .map(|e| &*e.policy)
    }

    /// Whether a policy opting the workload in for `kind`/`name` reads the config's labels.
    pub fn reads_labels(&self, kind: ConfigKind, name: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.kind == kind && e.name == name && e.configs.has_label_selector())
    }

    /// Adds what decides watching to `h`: the configs, the policies' names and their label
    /// selectors. Nothing when empty, so that workloads no policy selects keep their digests.
    pub(crate) fn fingerprint_into(&self, h: &mut Sha256) {
        if self.entries.is_empty() {
            return;
        }
        let lp = |h: &mut Sha256, bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        lp(h, b"conflux.dev/reload-policies/v1");
        h.update((self.entries.len() as u64).to_be_bytes());
        for e in &self.entries {
            h.update([u8::from(e.kind == ConfigKind::Secret)]);
            lp(h, e.name.as_bytes());
            lp(h, e.policy.as_bytes());
            lp(h, format!("{:?}", e.configs).as_bytes());
        }
    }
}

/// The `Ready` condition of a policy: `True` (`Valid`) or `False` with the problem's reason.
pub fn ready_condition(
    result: &Result<CompiledPolicy>,
    generation: Option<i64>,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Condition {
    let (status, reason, message) = match result {
        Ok(_) => ("True", REASON_VALID, "the policy is in force".to_owned()),
        Err(err) => ("False", err.reason(), err.to_string()),
    };
    Condition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opt_in::{OptIn, Options, Reason, watch};
    use ConfigKind::{ConfigMap, Secret};
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use serde_json::{Value, json};

    fn policies(specs: &[(&str, Value)]) -> Policies {
        let mut p = Policies::default();
        for (name, spec) in specs {
            let spec: ReloadPolicySpec = serde_json::from_value(spec.clone()).unwrap();
            assert!(p.insert(spec.compile(name).unwrap()));
        }
        p
    }

    /// A Deployment in `ns` reading Secret `blogsecret` through `secretKeyRef`, ConfigMap
    /// `settings` through `envFrom` and Secret `tls` through a projected volume.
    fn deployment(ns: &str, annotations: Value, template_annotations: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": ns, "annotations": annotations},
            "spec": {"selector": {}, "template": {
                "metadata": {"annotations": template_annotations},
                "spec": {
                "containers": [{"name": "c",
                    "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "blogsecret", "key": "password"}}}],
                    "envFrom": [{"configMapRef": {"name": "settings"}}]}],
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "tls"}}]}}]}}}
        }))
        .unwrap()
    }

    fn plain(ns: &str) -> Deployment {
        deployment(ns, json!({}), json!({}))
    }

    struct Config<'a> {
        kind: ConfigKind,
        name: &'a str,
        labels: Option<BTreeMap<String, String>>,
        annotations: Option<BTreeMap<String, String>>,
    }

    fn secret(name: &str) -> Config<'_> {
        Config {
            kind: Secret,
            name,
            labels: None,
            annotations: None,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn decide_for(
        policies: &Policies,
        workload: Workload<'_>,
        namespace_labels: Option<&BTreeMap<String, String>>,
        config: &Config<'_>,
    ) -> Option<Reason> {
        let opt_in = OptIn::of(workload).with_grant(policies.grant(workload, namespace_labels));
        let consumed = workload
            .consumers()
            .iter()
            .any(|c| c.kind == config.kind && c.name == config.name);
        opt_in.watches_labelled(
            config.kind,
            config.name,
            config.annotations.as_ref(),
            config.labels.as_ref(),
            consumed,
            Options::default(),
        )
    }

    fn rolls(policies: &Policies, d: &Deployment, config: &Config<'_>) -> bool {
        decide_for(policies, d.into(), None, config) == Some(Reason::Policy)
    }

    #[test]
    fn the_kyverno_article_policy() {
        let p = policies(&[(
            "restart-on-blogsecret",
            json!({"configs": {"kinds": ["Secret"], "names": ["blogsecret"]},
                   "workloads": {"kinds": ["Deployment"], "references": ["Env"]}}),
        )]);
        let d = plain("blog");
        assert!(rolls(&p, &d, &secret("blogsecret")));
        // Not selected: another name, another kind, a config the pods do not read.
        assert!(!rolls(&p, &d, &secret("tls")));
        assert!(!rolls(
            &p,
            &d,
            &Config {
                kind: ConfigMap,
                ..secret("settings")
            }
        ));
        assert!(!rolls(&p, &d, &secret("unread")));
        let opt_in = OptIn::of((&d).into()).with_grant(p.grant((&d).into(), None));
        assert_eq!(
            opt_in.policy_for(Secret, "blogsecret", None),
            Some("restart-on-blogsecret")
        );
        assert!(opt_in.is_enabled(Options::default()));
    }

    #[test]
    fn workload_kinds() {
        let p = policies(&[("p", json!({"workloads": {"kinds": ["StatefulSet"]}}))]);
        assert!(!rolls(&p, &plain("a"), &secret("blogsecret")));
        let d = plain("a");
        let sts: StatefulSet = serde_json::from_value(json!({
            "metadata": d.metadata, "spec": {"serviceName": "x", "selector": {},
                "template": serde_json::to_value(&d.spec.template).unwrap()}
        }))
        .unwrap();
        assert_eq!(
            decide_for(&p, (&sts).into(), None, &secret("blogsecret")),
            Some(Reason::Policy)
        );
        // Empty kinds: every kind.
        let all = policies(&[("p", json!({}))]);
        assert!(rolls(&all, &d, &secret("blogsecret")));
    }

    #[test]
    fn namespaces_and_namespace_selectors() {
        let p = policies(&[("p", json!({"configs": {"namespaces": ["team-*"]}}))]);
        assert!(rolls(&p, &plain("team-a"), &secret("blogsecret")));
        assert!(!rolls(&p, &plain("platform"), &secret("blogsecret")));
        // The control plane's namespaces only by exact name.
        let every = policies(&[("p", json!({}))]);
        assert!(!rolls(&every, &plain("kube-system"), &secret("blogsecret")));
        let exact = policies(&[("p", json!({"configs": {"namespaces": ["kube-system"]}}))]);
        assert!(rolls(&exact, &plain("kube-system"), &secret("blogsecret")));
        // namespaceSelector on either side reads the one Namespace's labels.
        let tenant = map(&[("tenant", "yes")]);
        for spec in [
            json!({"configs": {"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}}),
            json!({"workloads": {"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}}),
        ] {
            let p = policies(&[("p", spec)]);
            let d = plain("a");
            let with = decide_for(&p, (&d).into(), tenant.as_ref(), &secret("blogsecret"));
            assert_eq!(with, Some(Reason::Policy));
            assert_eq!(
                decide_for(&p, (&d).into(), None, &secret("blogsecret")),
                None
            );
        }
        // Both namespace parts are ANDed.
        let both = policies(&[(
            "p",
            json!({"configs": {"namespaces": ["team-*"],
                               "namespaceSelector": {"matchLabels": {"tenant": "yes"}}}}),
        )]);
        let d = plain("platform");
        assert_eq!(
            decide_for(&both, (&d).into(), tenant.as_ref(), &secret("blogsecret")),
            None
        );
    }

    #[test]
    fn names_and_config_labels() {
        let p = policies(&[(
            "p",
            json!({"configs": {"names": ["blog*"], "selector": {"matchLabels": {"rotate": "yes"}}}}),
        )]);
        let d = plain("a");
        let labelled = Config {
            labels: map(&[("rotate", "yes")]),
            ..secret("blogsecret")
        };
        assert!(rolls(&p, &d, &labelled));
        assert!(!rolls(&p, &d, &secret("blogsecret")));
        // Without its labels known, the config could be selected: it is a candidate.
        let opt_in = OptIn::of((&d).into()).with_grant(p.grant((&d).into(), None));
        assert_eq!(
            opt_in.watches(Secret, "blogsecret", None, true, Options::default()),
            Some(Reason::Policy)
        );
        assert!(opt_in.grant().reads_labels(Secret, "blogsecret"));
    }

    #[test]
    fn references() {
        let only = |r: &str| policies(&[("p", json!({"workloads": {"references": [r]}}))]);
        let d = plain("a");
        let settings = Config {
            kind: ConfigMap,
            ..secret("settings")
        };
        assert!(rolls(&only("Env"), &d, &secret("blogsecret")));
        assert!(!rolls(&only("Env"), &d, &settings));
        assert!(!rolls(&only("Env"), &d, &secret("tls")));
        assert!(rolls(&only("EnvFrom"), &d, &settings));
        assert!(!rolls(&only("EnvFrom"), &d, &secret("blogsecret")));
        assert!(rolls(&only("Volume"), &d, &secret("tls")));
        assert!(!rolls(&only("Volume"), &d, &secret("blogsecret")));
        let spec: PodSpec = serde_json::from_value(json!({"containers": [{"name": "c",
            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]}],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "x"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "x"}}, {"name": "w", "secret": {}}]}))
        .unwrap();
        let found = pod_spec_references(&spec);
        assert_eq!(found.len(), 1, "an unnamed secret volume reads nothing");
        assert_eq!(found[&(ConfigMap, "x".to_owned())], References::ANY);
    }

    #[test]
    fn the_workloads_own_annotations_win() {
        let p = policies(&[("p", json!({}))]);
        let case = |annotations: Value, template: Value| {
            decide_for(
                &p,
                (&deployment("a", annotations, template)).into(),
                None,
                &secret("blogsecret"),
            )
        };
        // ignore on the workload, or on its pod template: no policy applies.
        assert_eq!(
            case(json!({"reloader.stakater.com/ignore": "true"}), json!({})),
            None
        );
        assert_eq!(
            case(json!({}), json!({"reloader.stakater.com/ignore": "true"})),
            None
        );
        // auto or the typed auto set to false: the workload decided.
        assert_eq!(
            case(json!({"reloader.stakater.com/auto": "false"}), json!({})),
            None
        );
        assert_eq!(
            case(
                json!({"secret.reloader.stakater.com/auto": "false"}),
                json!({})
            ),
            None
        );
        // ... for that kind only.
        let settings = Config {
            kind: ConfigMap,
            ..secret("settings")
        };
        let d = deployment(
            "a",
            json!({"secret.reloader.stakater.com/auto": "false"}),
            json!({}),
        );
        assert!(rolls(&p, &d, &settings));
        // An exclude list naming the config.
        assert_eq!(
            case(
                json!({"secrets.exclude.reloader.stakater.com/reload": "blogsecret"}),
                json!({})
            ),
            None
        );
        // Their own opt-in rolls with its own reason.
        assert_eq!(
            case(json!({"reloader.stakater.com/auto": "true"}), json!({})),
            Some(Reason::Auto)
        );
        assert_eq!(
            case(
                json!({"secret.reloader.stakater.com/reload": "blogsecret"}),
                json!({})
            ),
            Some(Reason::Named)
        );
        // A reload list naming another config does not stop the policy.
        assert_eq!(
            case(
                json!({"secret.reloader.stakater.com/reload": "other"}),
                json!({})
            ),
            Some(Reason::Policy)
        );
        // ignore on the config: never.
        let ignored = Config {
            annotations: map(&[("reloader.stakater.com/ignore", "true")]),
            ..secret("blogsecret")
        };
        assert!(!rolls(&p, &plain("a"), &ignored));
    }

    #[test]
    fn a_policy_moves_the_baseline_and_never_rolls_by_itself() {
        let d = plain("a");
        let w: Workload<'_> = (&d).into();
        let none = Policies::default();
        let p = policies(&[("p", json!({}))]);
        let plain_watch = watch(&w.consumers(), &OptIn::of(w), Options::default(), &());
        let empty = OptIn::of(w).with_grant(none.grant(w, None));
        let granted = OptIn::of(w).with_grant(p.grant(w, None));
        // No policy: the digest every earlier version recorded.
        assert_eq!(
            watch(&w.consumers(), &empty, Options::default(), &()).spec,
            plain_watch.spec
        );
        let with = watch(&w.consumers(), &granted, Options::default(), &());
        assert_ne!(
            with.spec, plain_watch.spec,
            "the grant is part of what it watches"
        );
        assert_eq!(with.watched().count(), 3);
        assert!(plain_watch.candidates.is_empty());
        // Changing the policy so that it selects other configs moves the digest too.
        let narrower = policies(&[("p", json!({"configs": {"names": ["tls"]}}))]);
        let other = OptIn::of(w).with_grant(narrower.grant(w, None));
        assert_ne!(
            watch(&w.consumers(), &other, Options::default(), &()).spec,
            with.spec
        );
        // The same policy under another name is another opt-in (its name is reported).
        let renamed = policies(&[("q", json!({}))]);
        let renamed = OptIn::of(w).with_grant(renamed.grant(w, None));
        assert_ne!(
            watch(&w.consumers(), &renamed, Options::default(), &()).spec,
            with.spec
        );
    }

    #[test]
    fn bad_specs_have_stable_reasons() {
        let reason = |spec: Value| {
            serde_json::from_value::<ReloadPolicySpec>(spec)
                .unwrap()
                .compile("bad")
                .unwrap_err()
                .reason()
        };
        assert_eq!(
            reason(json!({"configs": {"names": ["Blog/Secret"]}})),
            "InvalidGlob"
        );
        assert_eq!(
            reason(json!({"configs": {"namespaces": [""]}})),
            "InvalidGlob"
        );
        assert_eq!(
            reason(
                json!({"configs": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}})
            ),
            "InvalidSelector"
        );
        assert_eq!(
            reason(json!({"workloads": {"namespaceSelector": {"matchLabels": {"-bad": "x"}}}})),
            "InvalidSelector"
        );
        assert_eq!(
            reason(json!({"workloads": {"kinds": ["Pod"]}})),
            "UnknownWorkloadKind"
        );
        assert_eq!(
            reason(json!({"workloads": {"references": ["Mount"]}})),
            "UnknownReference"
        );
        let err = serde_json::from_value::<ReloadPolicySpec>(
            json!({"workloads": {"references": ["Env", "x".repeat(500)]}}),
        )
        .unwrap()
        .compile("bad")
        .unwrap_err();
        assert!(
            err.to_string().starts_with("spec.workloads.references[1]"),
            "{err}"
        );
        assert!(err.to_string().len() < 200, "values are quoted short");
        let ok: Result<CompiledPolicy> = ReloadPolicySpec::default().compile("ok");
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default());
        let ready = ready_condition(&ok, Some(3), now.clone());
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Valid")
        );
        assert_eq!(ready.observed_generation, Some(3));
        let bad =
            serde_json::from_value::<ReloadPolicySpec>(json!({"workloads": {"kinds": ["Pod"]}}))
                .unwrap()
                .compile("bad");
        let cond = ready_condition(&bad, Some(1), now);
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("False", "UnknownWorkloadKind")
        );
    }

    #[test]
    fn policies_set() {
        let mut p = policies(&[("a", json!({}))]);
        let same = ReloadPolicySpec::default().compile("a").unwrap();
        assert!(!p.insert(same), "an unchanged policy changes nothing");
        assert!(!p.needs_namespace_labels());
        let spec: ReloadPolicySpec = serde_json::from_value(
            json!({"workloads": {"namespaceSelector": {"matchLabels": {"x": "y"}}}}),
        )
        .unwrap();
        assert!(p.insert(spec.compile("b").unwrap()));
        assert!(p.needs_namespace_labels());
        assert_eq!(p.len(), 2);
        assert!(p.remove("a") && !p.remove("a"));
    }
}
