//! Hostile input (issue 11): Reloader and wave annotations (any annotation map, `reload` lists
//! full of regex syntax) and whole workloads through the reload audit never panic, and the
//! decisions stay consistent. So do the secrets-store CSI driver's statuses and the Jobs the
//! controller re-creates.
//!
//! Every property runs a fixed number of cases from a fixed seed and prints
//! `property <name>: <cases> cases, seed <n>` past libtest's capture, so CI logs show what ran
//! and a failure repeats. `CONFLUX_PROPTEST_SEED=<u64>` replaces every seed and
//! `CONFLUX_PROPTEST_SCALE=<n>` multiplies every case count, to explore further locally.

use std::collections::BTreeMap;

use conflux_reloader::consumers::{Consumption, Keys};
use conflux_reloader::opt_in::{
    AUTO, CONFIGMAP_AUTO, CONFIGMAP_RELOAD, CONFIGMAPS_EXCLUDE, IGNORE, MATCH, NamePattern,
    NamespaceConfigs, OptIn, Options, SEARCH, SECRET_AUTO, SECRET_RELOAD, SECRETS_EXCLUDE,
    WAVE_UPDATE_ON_CONFIG_CHANGE, watched_configs,
};
use conflux_watch_index::refs::ConfigKind;
use proptest::prelude::*;
use serde_json::json;

use conflux_tests::props::check;

/// Any text: every Unicode scalar value, NUL and unassigned code points included.
fn any_text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max_chars).prop_map(String::from_iter)
}

const KEYS: &[&str] = &[
    AUTO,
    CONFIGMAP_AUTO,
    SECRET_AUTO,
    CONFIGMAP_RELOAD,
    SECRET_RELOAD,
    CONFIGMAPS_EXCLUDE,
    SECRETS_EXCLUDE,
    SEARCH,
    MATCH,
    IGNORE,
    WAVE_UPDATE_ON_CONFIG_CHANGE,
    "other",
];

/// Annotation values: the words that mean something, comma lists, and regex syntax valid and
/// not (unbalanced groups, huge repetitions, backreferences RE2 rejects, escapes).
fn annotation_value() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "true",
            "false",
            "TRUE",
            "",
            "a",
            "b",
            "app-config",
            "cfg",
            ",",
            ", ",
            " ",
            "\t",
            "\n",
            ".*",
            ".",
            "*",
            "+",
            "?",
            "(",
            ")",
            "[",
            "]",
            "[a-z]",
            "{",
            "}",
            "{2}",
            "{1000}{1000}",
            "(a|b)",
            "|",
            "^",
            "$",
            "\\",
            "\\d",
            "\\1",
            "(?i)",
            "(?P<n>x)",
            "é",
            "\0",
            "x{99999}",
            "[[:alpha:]]",
            "(?",
            "\\p{Greek}",
        ][..],
    );
    prop_oneof![
        5 => prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()),
        1 => any_text(12),
    ]
}

fn annotation_map() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    let key = prop_oneof![
        6 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => any_text(8),
    ];
    prop::option::of(prop::collection::btree_map(key, annotation_value(), 0..6))
}

fn config_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&["a", "b", "cfg", "app-config", "", ".*", "é"][..])
            .prop_map(str::to_owned),
        1 => any_text(8),
    ]
}

/// The configs of the workload's namespace, as the controller's cache would know them.
#[derive(Debug, Clone, Default)]
struct Configs(BTreeMap<(u8, String), Option<BTreeMap<String, String>>>);

fn kind_of(index: u8) -> ConfigKind {
    if index == 0 {
        ConfigKind::ConfigMap
    } else {
        ConfigKind::Secret
    }
}

impl NamespaceConfigs for Configs {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        let index = u8::from(kind == ConfigKind::Secret);
        self.0.get(&(index, name.to_owned()))?.as_ref()
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        self.0
            .keys()
            .map(|(kind, name)| (kind_of(*kind), name.as_str()))
            .collect()
    }
}

fn configs() -> impl Strategy<Value = Configs> {
    prop::collection::btree_map((0..2u8, config_name()), annotation_map(), 0..5).prop_map(Configs)
}

fn consumers() -> impl Strategy<Value = Vec<Consumption>> {
    prop::collection::vec((0..2u8, config_name(), any::<bool>()), 0..4).prop_map(|items| {
        let mut out: Vec<Consumption> = items
            .into_iter()
            .map(|(kind, name, optional)| Consumption {
                kind: kind_of(kind),
                name,
                keys: Keys::All,
                optional,
            })
            .collect();
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        out.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
        out
    })
}

#[test]
fn reloader_annotations_hostile() {
    check(
        "reloader_annotations_hostile",
        60_000,
        0x5e10_ade5_0001,
        (
            annotation_map(),
            annotation_map(),
            configs(),
            consumers(),
            any::<bool>(),
        ),
        |(workload, template, configs, consumers, auto_reload_all)| {
            let options = Options {
                auto_reload_all,
                ..Options::default()
            };
            let opt_in = OptIn::parse(workload.as_ref(), template.as_ref());
            for problem in opt_in.problems() {
                prop_assert!(!problem.to_string().is_empty());
            }
            let enabled = opt_in.is_enabled(options);
            let _ = opt_in.has_regex_patterns();
            for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
                for pattern in opt_in.named_patterns(kind) {
                    if let Some(literal) = pattern.as_literal() {
                        prop_assert!(pattern.matches(literal));
                    }
                    let _ = matches!(pattern, NamePattern::Regex(_));
                }
            }
            let watched = watched_configs(&consumers, &opt_in, options, &configs);
            // Nothing rolls a workload that is not enabled; every watched config is decided by
            // `watches` with the config's own annotations.
            if !enabled {
                prop_assert!(watched.is_empty(), "disabled but watches {:?}", watched);
            }
            for config in &watched {
                let consumed = consumers
                    .iter()
                    .any(|c| c.kind == config.kind && c.name == config.name);
                let annotations = configs.annotations(config.kind, &config.name);
                prop_assert!(
                    opt_in
                        .watches(config.kind, &config.name, annotations, consumed, options)
                        .is_some(),
                    "{:?} is watched without a reason",
                    config
                );
            }
            prop_assert!(
                watched
                    .windows(2)
                    .all(|w| (w[0].kind, &w[0].name) < (w[1].kind, &w[1].name)),
                "not sorted and unique"
            );
            Ok(())
        },
    );
}

/// Workloads of every kind with hostile annotations and pod specs of the right shape or not.
fn workload_objects() -> impl Strategy<Value = Vec<serde_json::Value>> {
    let kind = prop::sample::select(
        &[
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("batch/v1", "CronJob"),
            ("batch/v1", "Job"),
            ("argoproj.io/v1alpha1", "Rollout"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
        ][..],
    );
    let name = config_name();
    let volume_name = prop_oneof![
        config_name().prop_map(serde_json::Value::String),
        Just(serde_json::Value::Null),
        any::<i64>().prop_map(serde_json::Value::from),
    ];
    let object = (kind, name, annotation_map(), annotation_map(), volume_name).prop_map(
        |((api_version, kind), name, annotations, template_annotations, volume)| {
            let pod = json!({
                "metadata": {"annotations": template_annotations},
                "spec": {
                    "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": volume}}]}],
                    "volumes": [{"name": "v", "secret": {"secretName": volume}}],
                },
            });
            let spec = if kind == "CronJob" {
                json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": pod}}})
            } else {
                json!({"selector": {}, "template": pod})
            };
            let mut object = json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            });
            if matches!(kind, "ConfigMap" | "Secret") {
                object["data"] = json!({"k": "djE="});
            } else {
                object["spec"] = spec;
            }
            object
        },
    );
    prop::collection::vec(object, 0..6)
}

#[test]
fn reload_audit_hostile() {
    check(
        "reload_audit_hostile",
        30_000,
        0x5e10_ade5_0002,
        (workload_objects(), any::<bool>()),
        |(objects, auto_reload_all)| {
            let report = conflux_reloader::audit::audit(
                &objects,
                Options {
                    auto_reload_all,
                    ..Options::default()
                },
            );
            for edge in &report.edges {
                let _ = edge.why();
                let _ = edge.annotation();
            }
            for finding in &report.findings {
                prop_assert!(!finding.message.contains("djE="), "data in {:?}", finding);
            }
            Ok(())
        },
    );
}

/// A `reload` list with a hundred thousand entries, and entries that are huge regexes: parsed
/// (compiled or refused by the regex size limit), never a crash.
#[test]
fn reload_lists_huge_inputs() {
    let many = (0..100_000)
        .map(|i| format!("cfg-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let huge = [
        "a{1000}{1000}{1000}",
        &"(".repeat(100_000),
        &"(a)".repeat(50_000),
    ]
    .join(",");
    for value in [many, huge] {
        let annotations = BTreeMap::from([(CONFIGMAP_RELOAD.to_owned(), value)]);
        let opt_in = OptIn::parse(Some(&annotations), None);
        let _ = opt_in.watches(
            ConfigKind::ConfigMap,
            "cfg-99999",
            None,
            false,
            Options::default(),
        );
        let _ = opt_in.problems();
    }
}

/// Any JSON, shallow, with the keys a SecretProviderClassPodStatus and a Job have.
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any_text(8).prop_map(Value::from),
    ];
    let key = prop::sample::select(
        &[
            "status",
            "secretProviderClassName",
            "objects",
            "id",
            "version",
            "spec",
            "template",
            "selector",
            "manualSelector",
            "metadata",
            "labels",
            "controller-uid",
            "x",
        ][..],
    )
    .prop_map(String::from);
    leaf.prop_recursive(4, 32, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn provider_statuses_and_job_replacements_hostile() {
    use conflux_reloader::job::{GENERATED_LABELS, Record, replacement};
    use conflux_reloader::patch::{WorkloadPatch, WorkloadState};
    use conflux_reloader::source::ProviderMount;
    check(
        "provider_statuses_and_job_replacements_hostile",
        20_000,
        0x5e10_ade5_0004,
        (any_json(), any_json(), annotation_map()),
        |(status, spec, labels)| {
            // A status of any shape: read or refused with its stable reason, never a panic.
            for object in [status.clone(), json!({"status": status})] {
                match ProviderMount::from_status("s", &object) {
                    Ok(mount) => {
                        prop_assert!(!mount.class.is_empty());
                        prop_assert!(mount.objects.windows(2).all(|w| w[0] <= w[1]));
                    }
                    Err(err) => prop_assert_eq!(err.reason(), "InvalidProviderStatus"),
                }
            }
            // A Job of any shape that deserialises: its replacement keeps nothing generated.
            let object = json!({"metadata": {"name": "j", "namespace": "ns", "uid": "u",
                "resourceVersion": "1", "labels": labels}, "spec": spec, "status": {"active": 1}});
            let Ok(job) = serde_json::from_value::<k8s_openapi::api::batch::v1::Job>(object) else {
                return Ok(());
            };
            let Some(state) = WorkloadState::of((&job).into()) else {
                return Ok(());
            };
            match replacement(&job, &WorkloadPatch::keep(&state, "v2;x")) {
                Ok(new) => {
                    prop_assert!(new.metadata.uid.is_none() && new.status.is_none());
                    let spec = new.spec.as_ref().expect("a replacement has a spec");
                    if spec.manual_selector != Some(true) {
                        prop_assert!(spec.selector.is_none());
                        let labels = new.metadata.labels.clone().unwrap_or_default();
                        prop_assert!(GENERATED_LABELS.iter().all(|l| !labels.contains_key(*l)));
                    }
                }
                Err(err) => prop_assert_eq!(err.reason(), "JobNotRecreatable"),
            }
            // A re-creation record of it reads back as written; one whose data is the hostile
            // JSON is read or refused with its stable reason, never a panic.
            if let Ok(new) = replacement(&job, &WorkloadPatch::keep(&state, "v2;x")) {
                let record = Record {
                    namespace: "ns".into(),
                    name: "j".into(),
                    old_uid: "u".into(),
                    replacement: new,
                    why: String::new(),
                };
                let secret = record.to_secret("conflux-system").expect("serializes");
                prop_assert_eq!(Record::from_secret(&secret).expect("reads back"), record);
                let mut garbled = secret;
                garbled.data = Some(BTreeMap::from([(
                    "job.json".to_owned(),
                    k8s_openapi::ByteString(spec.to_string().into_bytes()),
                )]));
                if let Err(err) = Record::from_secret(&garbled) {
                    prop_assert_eq!(err.reason(), "InvalidJobRecord");
                }
            }
            Ok(())
        },
    );
}

/// Words a ReloadPolicy spec list may hold: the valid ones, near misses and hostile text.
fn policy_word() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        prop::sample::select(
            &[
                "Deployment",
                "StatefulSet",
                "Pod",
                "Env",
                "EnvFrom",
                "Volume",
                "Mount",
                "Secret",
                "ConfigMap",
                "*",
                "team-*",
                "ns",
                "c?g",
                "",
                "Bad/Name",
                "kube-system",
            ][..],
        )
        .prop_map(serde_json::Value::from),
        any_text(12).prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
    ]
}

/// A label selector, valid or not (keys, operators and values from hostile text).
fn label_selector() -> impl Strategy<Value = serde_json::Value> {
    let operator = prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "x"][..]);
    let expression = (
        any_text(8),
        operator,
        prop::collection::vec(any_text(6), 0..3),
    )
        .prop_map(
            |(key, operator, values)| json!({"key": key, "operator": operator, "values": values}),
        );
    prop_oneof![
        Just(serde_json::Value::Null),
        (annotation_map(), prop::collection::vec(expression, 0..3)).prop_map(
            |(labels, expressions)| json!({"matchLabels": labels, "matchExpressions": expressions})
        ),
    ]
}

fn reload_policy() -> impl Strategy<Value = serde_json::Value> {
    let list = || prop::collection::vec(policy_word(), 0..3);
    (
        (list(), list(), list()),
        (list(), list()),
        (label_selector(), label_selector(), label_selector()),
        config_name(),
    )
        .prop_map(
            |(
                (kinds, namespaces, names),
                (workload_kinds, references),
                (ns, own, workload_ns),
                name,
            )| {
                json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ReloadPolicy",
                    "metadata": {"name": name},
                    "spec": {
                        "configs": {"kinds": kinds, "namespaces": namespaces, "names": names,
                                    "namespaceSelector": ns, "selector": own},
                        "workloads": {"kinds": workload_kinds, "references": references,
                                      "namespaceSelector": workload_ns}}})
            },
        )
}

#[test]
fn reload_policies_hostile() {
    check(
        "reload_policies_hostile",
        10_000,
        0x5e10_ade5_0005,
        (
            prop::collection::vec(reload_policy(), 0..3),
            workload_objects(),
        ),
        |(policies, mut objects)| {
            for policy in &policies {
                // The spec alone: compiled or refused with a stable reason, never a panic.
                if let Ok(spec) = serde_json::from_value::<conflux_reloader::policy::ReloadPolicySpec>(
                    policy["spec"].clone(),
                ) && let Err(err) = spec.compile("p")
                {
                    prop_assert!(!err.reason().is_empty());
                    prop_assert!(err.to_string().len() < 1_000, "quoted short: {err}");
                }
            }
            objects.extend(policies);
            let report = conflux_reloader::audit::audit(&objects, Options::default());
            for edge in &report.edges {
                let _ = edge.why();
                if edge.reason == conflux_reloader::opt_in::Reason::Policy {
                    prop_assert!(edge.policy.is_some(), "{edge:?}");
                }
            }
            for finding in &report.findings {
                prop_assert!(!finding.message.contains("djE="), "data in {:?}", finding);
            }
            Ok(())
        },
    );
}
