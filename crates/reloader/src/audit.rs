//! Offline audit of a set of objects (a fleet repository, a cluster dump): which workloads roll
//! when which ConfigMap or Secret changes, and why (docs/design.md section 5).
//!
//! The same rules as the controller: a workload's opt-in ([`OptIn`]) decides, per config its pods
//! consume ([`consumers`](crate::consumers)) or its `reload` lists name, with the config's own
//! annotations (`ignore`, `match`) taken from the input. Findings use watch-index's
//! [`Finding`] shape.
//!
//! ```
//! use conflux_reloader::audit::audit;
//! use conflux_reloader::opt_in::Options;
//! use serde_json::json;
//!
//! let objects = [json!({
//!     "apiVersion": "apps/v1", "kind": "Deployment",
//!     "metadata": {"name": "web", "namespace": "team",
//!                  "annotations": {"reloader.stakater.com/auto": "true"}},
//!     "spec": {"selector": {}, "template": {"spec": {"containers": [
//!         {"name": "web", "envFrom": [{"configMapRef": {"name": "settings"}}]}]}}},
//! })];
//! let report = audit(&objects, Options::default());
//! assert_eq!(report.edges[0].config.to_string(), "ConfigMap/team/settings");
//! assert_eq!(report.edges[0].annotation(), "reloader.stakater.com/auto");
//! // The ConfigMap is not in the input and the pod needs it.
//! assert_eq!(report.findings[0].code, "ReloadConfigMissing");
//! ```

use std::collections::BTreeMap;

use conflux_watch_index::audit::{Finding, Severity, config_name, configs, metadata_map, name_of};
use conflux_watch_index::refs::{ConfigKey, ConfigKind, ObjectRef};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde_json::Value;

use crate::consumers::Keys;
use crate::opt_in::{
    AUTO, CONFIGMAP_AUTO, CONFIGMAP_RELOAD, MATCH, NamespaceConfigs, OptIn, Options, Reason,
    SEARCH, SECRET_AUTO, SECRET_RELOAD, WAVE_UPDATE_ON_CONFIG_CHANGE, watched_configs,
};
use crate::policy::{KIND, Policies, ReloadPolicySpec};
use crate::workload::{Rollout, Workload, WorkloadKind};

/// One config → workload edge: a change of `config` rolls `workload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadEdge {
    /// The ConfigMap/Secret.
    pub config: ConfigKey,
    /// The workload that rolls.
    pub workload: ObjectRef,
    /// Why.
    pub reason: Reason,
    /// The keys whose change rolls it (the whole object for `envFrom`, volumes without `items`
    /// and `reload` lists).
    pub keys: Keys,
    /// The pods start without the config.
    pub optional: bool,
    /// The config is among the audited objects.
    pub config_found: bool,
    /// The ReloadPolicy behind it, when [`reason`](Self::reason) is [`Reason::Policy`].
    pub policy: Option<String>,
}

impl ReloadEdge {
    /// The annotation (or flag) that makes the workload roll for this config.
    pub fn annotation(&self) -> &'static str {
        let configmap = self.config.kind == ConfigKind::ConfigMap;
        match self.reason {
            Reason::Named if configmap => CONFIGMAP_RELOAD,
            Reason::Named => SECRET_RELOAD,
            Reason::SearchMatch => SEARCH,
            Reason::Auto => AUTO,
            Reason::TypedAuto if configmap => CONFIGMAP_AUTO,
            Reason::TypedAuto => SECRET_AUTO,
            Reason::AutoReloadAll => "--auto-reload-all",
            Reason::Wave => WAVE_UPDATE_ON_CONFIG_CHANGE,
            Reason::Policy => crate::policy::KIND,
        }
    }

    /// Why, in words: the annotation and what it matched.
    pub fn why(&self) -> String {
        let keys = match &self.keys {
            Keys::All => String::new(),
            Keys::Only(keys) => {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                format!(", keys {}", keys.join(","))
            }
        };
        match self.reason {
            Reason::Named => format!("named in {}{keys}", self.annotation()),
            Reason::SearchMatch => format!("{SEARCH} + {MATCH} on the config{keys}"),
            Reason::Policy => format!(
                "ReloadPolicy {}, consumed by the pods{keys}",
                self.policy.as_deref().unwrap_or_default()
            ),
            _ => format!("{}, consumed by the pods{keys}", self.annotation()),
        }
    }
}

/// What [`audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadAudit {
    /// Every edge, sorted by config then workload.
    pub edges: Vec<ReloadEdge>,
    /// `InvalidReloadPattern` and `InvalidWorkload` (warnings): a `reload` entry that is no regex
    /// (compared literally), a workload that does not parse. `ReloadConfigMissing` (warning): an
    /// opted-in workload needs a config that is not in the input.
    pub findings: Vec<Finding>,
}

/// The input's configs of one namespace, for [`watched_configs`].
#[derive(Default)]
struct InputConfigs {
    /// Per kind (ConfigMap, Secret), name → annotations.
    annotations: [BTreeMap<String, Option<BTreeMap<String, String>>>; 2],
    /// Per kind (ConfigMap, Secret), name → labels (for ReloadPolicies' `configs.selector`).
    labels: [BTreeMap<String, Option<BTreeMap<String, String>>>; 2],
}

fn kind_index(kind: ConfigKind) -> usize {
    match kind {
        ConfigKind::ConfigMap => 0,
        ConfigKind::Secret => 1,
    }
}

impl NamespaceConfigs for InputConfigs {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        self.annotations[kind_index(kind)].get(name)?.as_ref()
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        [ConfigKind::ConfigMap, ConfigKind::Secret]
            .into_iter()
            .flat_map(|kind| {
                self.annotations[kind_index(kind)]
                    .keys()
                    .map(move |name| (kind, name.as_str()))
            })
            .collect()
    }

    fn labels(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        self.labels[kind_index(kind)].get(name)?.as_ref()
    }
}

/// The ReloadPolicies among `objects` (`conflux.dev/v1alpha1`), compiled; an invalid one is an
/// `InvalidReloadPolicy` finding (warning) and is left out, as the controller leaves it out.
fn input_policies(objects: &[Value], findings: &mut Vec<Finding>) -> Policies {
    let mut policies = Policies::default();
    for object in objects {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str);
        if text("/apiVersion") != Some("conflux.dev/v1alpha1") || text("/kind") != Some(KIND) {
            continue;
        }
        let name = text("/metadata/name").unwrap_or_default();
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        let compiled = serde_json::from_value::<ReloadPolicySpec>(spec)
            .map_err(|e| format!("not a valid ReloadPolicy spec: {e}"))
            .and_then(|spec| {
                spec.compile(name)
                    .map_err(|e| format!("{e} ({})", e.reason()))
            });
        match compiled {
            Ok(policy) => {
                policies.insert(policy);
            }
            Err(message) => findings.push(Finding::new(
                Severity::Warning,
                "InvalidReloadPolicy",
                name_of(object),
                message,
            )),
        }
    }
    policies
}

/// Audits the workloads (Deployment, StatefulSet, DaemonSet, CronJob, Job, Rollout) among `objects` against the
/// ConfigMaps and Secrets among them (later objects with the same key win, see
/// [`conflux_watch_index::audit::configs`]), with the controller's `options` and the ReloadPolicies among
/// them (Namespaces among them give the labels their `namespaceSelector`s read).
pub fn audit(objects: &[Value], options: Options) -> ReloadAudit {
    let configs = configs(objects);
    let mut by_namespace: BTreeMap<&str, InputConfigs> = BTreeMap::new();
    for (key, object) in &configs {
        let input = by_namespace.entry(&key.namespace).or_default();
        input.annotations[kind_index(key.kind)]
            .insert(key.name.to_string(), metadata_map(object, "annotations"));
        input.labels[kind_index(key.kind)]
            .insert(key.name.to_string(), metadata_map(object, "labels"));
    }
    let namespace_labels: BTreeMap<&str, BTreeMap<String, String>> = objects
        .iter()
        .filter(|o| {
            o.get("apiVersion").and_then(Value::as_str) == Some("v1")
                && o.get("kind").and_then(Value::as_str) == Some("Namespace")
        })
        .filter_map(|o| {
            let name = o.pointer("/metadata/name")?.as_str()?;
            Some((name, metadata_map(o, "labels").unwrap_or_default()))
        })
        .collect();
    let empty = InputConfigs::default();
    let mut report = ReloadAudit::default();
    let policies = input_policies(objects, &mut report.findings);
    for object in objects {
        let parsed = match parse_workload(object) {
            None => continue,
            Some(Ok(parsed)) => parsed,
            Some(Err(err)) => {
                report.findings.push(Finding::new(
                    Severity::Warning,
                    "InvalidWorkload",
                    name_of(object),
                    format!("not a valid workload, reload not evaluated: {err}"),
                ));
                continue;
            }
        };
        let workload = parsed.workload();
        let Some(workload_ref) = workload.object_ref() else {
            continue;
        };
        if workload.is_controlled_job() {
            // A CronJob's (or another controller's) Job: never re-created.
            continue;
        }
        let grant = policies.grant(
            workload,
            namespace_labels.get(workload_ref.namespace.as_ref()),
        );
        let opt_in = OptIn::of(workload).with_grant(grant);
        for problem in opt_in.problems() {
            report.findings.push(Finding::new(
                Severity::Warning,
                "InvalidReloadPattern",
                name_of(object),
                format!("{problem} (compared literally)"),
            ));
        }
        if !opt_in.is_enabled(options) {
            continue;
        }
        let namespace_configs = by_namespace
            .get(workload_ref.namespace.as_ref())
            .unwrap_or(&empty);
        let consumers = workload.consumers();
        for watched in watched_configs(&consumers, &opt_in, options, namespace_configs) {
            let consumed = consumers
                .iter()
                .any(|c| c.kind == watched.kind && c.name == watched.name);
            let annotations = namespace_configs.annotations(watched.kind, &watched.name);
            let labels = namespace_configs.labels(watched.kind, &watched.name);
            let Some(reason) = opt_in.watches_labelled(
                watched.kind,
                &watched.name,
                annotations,
                labels,
                consumed,
                options,
            ) else {
                continue;
            };
            let policy = (reason == Reason::Policy)
                .then(|| opt_in.policy_for(watched.kind, &watched.name, labels))
                .flatten()
                .map(str::to_owned);
            let config = ConfigKey::new(
                watched.kind,
                workload_ref.namespace.clone(),
                watched.name.as_str(),
            );
            let config_found = configs.contains_key(&config);
            if !config_found && !watched.optional {
                report.findings.push(Finding::new(
                    Severity::Warning,
                    "ReloadConfigMissing",
                    name_of(object),
                    format!(
                        "its pods need {} (not optional), which is not in the input",
                        config_name(&config)
                    ),
                ));
            }
            report.edges.push(ReloadEdge {
                config,
                workload: workload_ref.clone(),
                reason,
                keys: watched.keys,
                optional: watched.optional,
                config_found,
                policy,
            });
        }
    }
    report
        .edges
        .sort_by(|a, b| (&a.config, &a.workload).cmp(&(&b.config, &b.workload)));
    report
}

/// A workload of one of the kinds, owned.
enum Parsed {
    Deployment(Box<Deployment>),
    StatefulSet(Box<StatefulSet>),
    DaemonSet(Box<DaemonSet>),
    CronJob(Box<CronJob>),
    Job(Box<Job>),
    Rollout(Box<Rollout>),
}

impl Parsed {
    fn workload(&self) -> Workload<'_> {
        match self {
            Parsed::Deployment(w) => w.as_ref().into(),
            Parsed::StatefulSet(w) => w.as_ref().into(),
            Parsed::DaemonSet(w) => w.as_ref().into(),
            Parsed::CronJob(w) => w.as_ref().into(),
            Parsed::Job(w) => w.as_ref().into(),
            Parsed::Rollout(w) => w.as_ref().into(),
        }
    }
}

/// `None` for other kinds; an error for a workload of a known kind that does not deserialise.
fn parse_workload(object: &Value) -> Option<Result<Parsed, serde_json::Error>> {
    let text = |p: &str| object.get(p).and_then(Value::as_str).unwrap_or_default();
    let group = text("apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
    let kind = WorkloadKind::from_group_kind(group, text("kind"))?;
    let value = object.clone();
    Some(match kind {
        WorkloadKind::Deployment => {
            serde_json::from_value(value).map(|w| Parsed::Deployment(Box::new(w)))
        }
        WorkloadKind::StatefulSet => {
            serde_json::from_value(value).map(|w| Parsed::StatefulSet(Box::new(w)))
        }
        WorkloadKind::DaemonSet => {
            serde_json::from_value(value).map(|w| Parsed::DaemonSet(Box::new(w)))
        }
        WorkloadKind::CronJob => {
            serde_json::from_value(value).map(|w| Parsed::CronJob(Box::new(w)))
        }
        WorkloadKind::Job => serde_json::from_value(value).map(|w| Parsed::Job(Box::new(w))),
        WorkloadKind::Rollout => {
            serde_json::from_value(value).map(|w| Parsed::Rollout(Box::new(w)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(name: &str, annotations: Value, containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
               "spec": {"selector": {}, "template": {"spec": {"containers": containers}}}})
    }

    fn cm(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns", "annotations": annotations}})
    }

    fn rows(report: &ReloadAudit) -> Vec<(String, String, &'static str)> {
        report
            .edges
            .iter()
            .map(|e| {
                (
                    e.config.to_string(),
                    e.workload.name.to_string(),
                    e.annotation(),
                )
            })
            .collect()
    }

    fn row(config: &str, workload: &str, why: &'static str) -> (String, String, &'static str) {
        (config.to_owned(), workload.to_owned(), why)
    }

    #[test]
    fn every_opt_in_with_its_reason() {
        let env_from =
            |name: &str| json!([{"name": "c", "envFrom": [{"configMapRef": {"name": name}}]}]);
        let objects = [
            deployment(
                "auto",
                json!({"reloader.stakater.com/auto": "true"}),
                env_from("a"),
            ),
            deployment(
                "named",
                json!({"configmap.reloader.stakater.com/reload": "feature-.*, b"}),
                json!([{"name": "c"}]),
            ),
            deployment(
                "search",
                json!({"reloader.stakater.com/search": "true"}),
                env_from("m"),
            ),
            deployment(
                "wave",
                json!({"wave.pusher.com/update-on-config-change": "true"}),
                json!([{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "x"}}}]}]),
            ),
            deployment("off", json!({}), env_from("a")),
            deployment(
                "ignored",
                json!({"reloader.stakater.com/auto": "true"}),
                env_from("quiet"),
            ),
            cm("a", json!({})),
            cm("b", json!({})),
            cm("feature-x", json!({})),
            cm("m", json!({"reloader.stakater.com/match": "true"})),
            cm("quiet", json!({"reloader.stakater.com/ignore": "true"})),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}),
        ];
        let report = audit(&objects, Options::default());
        assert_eq!(
            rows(&report),
            [
                row("ConfigMap/ns/a", "auto", "reloader.stakater.com/auto"),
                row(
                    "ConfigMap/ns/b",
                    "named",
                    "configmap.reloader.stakater.com/reload"
                ),
                row(
                    "ConfigMap/ns/feature-x",
                    "named",
                    "configmap.reloader.stakater.com/reload"
                ),
                row("ConfigMap/ns/m", "search", "reloader.stakater.com/search"),
                row(
                    "Secret/ns/s",
                    "wave",
                    "wave.pusher.com/update-on-config-change"
                ),
            ]
        );
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert_eq!(
            report.edges[4].why(),
            "wave.pusher.com/update-on-config-change, consumed by the pods, keys x"
        );
        let all = audit(
            &objects,
            Options {
                auto_reload_all: true,
                ..Options::default()
            },
        );
        assert!(rows(&all).contains(&row("ConfigMap/ns/a", "off", "--auto-reload-all")));
    }

    #[test]
    fn findings() {
        let objects = [
            deployment(
                "bad-pattern",
                json!({"configmap.reloader.stakater.com/reload": "a[", "reloader.stakater.com/auto": "true"}),
                json!([{"name": "c", "envFrom": [{"configMapRef": {"name": "missing"}},
                                                 {"secretRef": {"name": "opt", "optional": true}}]}]),
            ),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "broken", "namespace": "ns"},
                   "spec": "nonsense"}),
        ];
        let report = audit(&objects, Options::default());
        let codes: Vec<(&str, &str)> = report
            .findings
            .iter()
            .map(|f| (f.code, f.object.as_str()))
            .collect();
        assert_eq!(
            codes,
            [
                ("InvalidReloadPattern", "Deployment/ns/bad-pattern"),
                ("ReloadConfigMissing", "Deployment/ns/bad-pattern"),
                ("InvalidWorkload", "StatefulSet/ns/broken"),
            ]
        );
        assert!(report.edges.iter().all(|e| !e.config_found));
        // The missing ones are still edges; so is the literal `a[` of the broken pattern.
        assert_eq!(report.edges.len(), 3);
    }

    #[test]
    fn reload_policies_make_edges_with_their_name() {
        let reader = |name: &str, annotations: Value| {
            deployment(
                name,
                annotations,
                json!([{"name": "c", "env": [{"name": "P", "valueFrom":
                    {"secretKeyRef": {"name": "blogsecret", "key": "password"}}}]}]),
            )
        };
        let objects = [
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ReloadPolicy",
                   "metadata": {"name": "restart-on-blogsecret"},
                   "spec": {"configs": {"kinds": ["Secret"], "names": ["blogsecret"]},
                            "workloads": {"kinds": ["Deployment"], "references": ["Env"]}}}),
            json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ReloadPolicy",
                   "metadata": {"name": "broken"},
                   "spec": {"workloads": {"kinds": ["Pod"]}}}),
            reader("web", json!({})),
            reader("ignored", json!({"reloader.stakater.com/ignore": "true"})),
            deployment("neighbour", json!({}), json!([{"name": "c"}])),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "blogsecret", "namespace": "ns"}}),
        ];
        let report = audit(&objects, Options::default());
        assert_eq!(
            rows(&report),
            [row("Secret/ns/blogsecret", "web", "ReloadPolicy")]
        );
        assert_eq!(
            report.edges[0].policy.as_deref(),
            Some("restart-on-blogsecret")
        );
        assert_eq!(
            report.edges[0].why(),
            "ReloadPolicy restart-on-blogsecret, consumed by the pods, keys password"
        );
        let codes: Vec<&str> = report.findings.iter().map(|f| f.code).collect();
        assert_eq!(codes, ["InvalidReloadPolicy"]);
        assert!(report.findings[0].message.contains("UnknownWorkloadKind"));
    }
}
