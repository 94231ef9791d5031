//! The docs/design.md 4.2 behaviour table, one named test per row, plus convergence: executing a plan
//! and planning again gives nothing to do.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::config_sync::ConfigSyncSpec;
use crate::ownership::{CONFIG_SYNC_LABEL, MANAGED_BY_LABEL, Owner};
use crate::source::SourceKind;

/// A namespace: name, labels, terminating.
type Ns = (&'static str, &'static [(&'static str, &'static str)], bool);

const TENANT: &[(&str, &str)] = &[("role", "tenant")];
const PLAIN: &[(&str, &str)] = &[];

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn fan_out(extra: serde_json::Value) -> FanOut {
    let mut doc = serde_json::json!({
        "source": {"kind": "Secret", "namespace": "flux-system", "name": "tok"},
        "target": {
            "namespaceSelector": {"matchLabels": {"role": "tenant"}},
            "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
        },
    });
    if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
        doc.extend(extra.clone());
    }
    let spec: ConfigSyncSpec = serde_json::from_value(doc).unwrap();
    FanOut::from_config_sync("tok-sync", &spec).unwrap()
}

fn secret(ns: &str, name: &str, type_: &str, data: &[(&str, &str)]) -> ConfigObject {
    ConfigObject::Secret(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some(type_.to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    })
}

fn source(data: &[(&str, &str)]) -> ConfigObject {
    let mut s = secret("flux-system", "tok", "Opaque", data);
    s.metadata_mut().labels = Some(map(&[("reconcile.fluxcd.io/watch", "Enabled")]));
    s
}

/// Our copy in `ns` as a previous sync of `f` would have left it, for `source`.
fn our_copy(f: &FanOut, src: &ConfigObject, ns: &str) -> ConfigObject {
    fan_out_copy(src, f, ns)
}

fn foreign(ns: &str) -> ConfigObject {
    let mut s = secret(ns, "tok", "Opaque", &[("mine", "FOREIGN-DATA")]);
    s.metadata_mut().labels = Some(map(&[(MANAGED_BY_LABEL, "helm")]));
    s
}

fn views(namespaces: &[Ns]) -> Vec<(String, BTreeMap<String, String>, bool)> {
    namespaces
        .iter()
        .map(|(n, l, t)| ((*n).to_owned(), map(l), *t))
        .collect()
}

fn plan(
    f: &FanOut,
    src: Option<&ConfigObject>,
    namespaces: &[Ns],
    observed: &[ConfigObject],
) -> Vec<String> {
    let ns = views(namespaces);
    let steps = plan_sync(
        f,
        src,
        ns.iter()
            .map(|(n, l, t)| NamespaceView::new(n).labels(l).terminating(*t)),
        observed,
    );
    steps.iter().map(summary).collect()
}

/// A step as a short line: what, where, and the detail that matters.
fn summary(step: &Step) -> String {
    match step {
        Step::Create { object } => format!("create {}", object.namespace()),
        Step::Update { object, .. } => format!("update {}", object.namespace()),
        Step::Recreate { object, reason } => format!("recreate {} {reason:?}", object.namespace()),
        Step::Adopt { object, .. } => format!("adopt {}", object.namespace()),
        Step::InSync { namespace } => format!("in-sync {namespace}"),
        Step::Delete { namespace, name } => format!("delete {namespace}/{name}"),
        Step::Skip { namespace, .. } => format!("skip {namespace}"),
        Step::MarkOrphaned { object } => format!("orphan {}/{}", object.namespace(), object.name()),
        Step::Release {
            namespace, name, ..
        } => format!("release {namespace}/{name}"),
    }
}

/// Executes steps the way the API server would end up: create and re-create replace the object;
/// a (forced) server-side apply overlays our fields on what is there, so keys others added survive
/// unless the cleanup merge patch removes them; a release merge patch strips ownership labels.
fn execute(objects: &mut Vec<ConfigObject>, steps: &[Step]) {
    let key = |o: &ConfigObject| (o.namespace().to_owned(), o.name().to_owned());
    for step in steps {
        let (namespace, name) = match step {
            Step::Create { object }
            | Step::Update { object, .. }
            | Step::Recreate { object, .. }
            | Step::Adopt { object, .. }
            | Step::MarkOrphaned { object } => key(object),
            Step::Delete { namespace, name }
            | Step::Release {
                namespace, name, ..
            }
            | Step::Skip {
                namespace, name, ..
            } => (namespace.clone(), name.clone()),
            Step::InSync { .. } => continue,
        };
        let at = objects
            .iter()
            .position(|o| key(o) == (namespace.clone(), name.clone()));
        match (step, at) {
            (Step::Create { object } | Step::Recreate { object, .. }, _) => {
                objects.retain(|o| key(o) != key(object));
                objects.push(object.clone());
            }
            (Step::Update { object, cleanup } | Step::Adopt { object, cleanup }, Some(i)) => {
                objects[i] = server_side_apply(&objects[i], object, cleanup.as_ref());
            }
            (Step::MarkOrphaned { object }, Some(i)) => {
                objects[i] = server_side_apply(&objects[i], object, None);
            }
            (Step::Delete { .. }, Some(i)) => {
                objects.remove(i);
            }
            (Step::Release { .. }, Some(i)) => {
                if let Some(labels) = objects[i].metadata_mut().labels.as_mut() {
                    labels.retain(|k, _| k != MANAGED_BY_LABEL && k != CONFIG_SYNC_LABEL);
                }
            }
            (Step::Skip { .. }, _) => {}
            (step, None) => panic!("{step:?} on an object that does not exist"),
            (Step::InSync { .. }, _) => unreachable!(),
        }
    }
}

/// Our fields over the observed object; `cleanup` removes data keys first.
fn server_side_apply(
    observed: &ConfigObject,
    applied: &ConfigObject,
    cleanup: Option<&serde_json::Value>,
) -> ConfigObject {
    let removed = |field: &str, k: &str| cleanup.is_some_and(|c| c[field].get(k).is_some());
    let mut out = observed.clone();
    let (meta, applied_meta) = (out.metadata_mut(), applied.metadata());
    for (ours, theirs) in [
        (&applied_meta.labels, &mut meta.labels),
        (&applied_meta.annotations, &mut meta.annotations),
    ] {
        let ours = ours.clone().unwrap_or_default();
        let theirs = theirs.get_or_insert_with(BTreeMap::new);
        // Only conflux writes its own keys, always by apply: one it no longer applies goes.
        theirs.retain(|k, _| !k.starts_with("copy.conflux.dev/") || ours.contains_key(k));
        theirs.extend(ours);
    }
    match (&mut out, applied) {
        (ConfigObject::Secret(o), ConfigObject::Secret(a)) => {
            let data = o.data.get_or_insert_with(BTreeMap::new);
            data.retain(|k, _| !removed("data", k));
            data.extend(a.data.clone().unwrap_or_default());
            o.type_ = a.type_.clone();
        }
        (ConfigObject::ConfigMap(o), ConfigObject::ConfigMap(a)) => {
            let data = o.data.get_or_insert_with(BTreeMap::new);
            data.retain(|k, _| !removed("data", k));
            data.extend(a.data.clone().unwrap_or_default());
            let binary = o.binary_data.get_or_insert_with(BTreeMap::new);
            binary.retain(|k, _| !removed("binaryData", k));
            binary.extend(a.binary_data.clone().unwrap_or_default());
        }
        _ => panic!("kinds differ"),
    }
    out
}

const CLUSTER: &[Ns] = &[
    ("flux-system", PLAIN, false),
    ("team-a", TENANT, false),
    ("team-b", TENANT, false),
    ("team-c", TENANT, false),
    ("kube-system", TENANT, false),
    ("default", PLAIN, false),
];

#[test]
fn row_source_created_or_updated_every_selected_namespace_gets_an_identical_copy() {
    let f = fan_out(serde_json::json!({}));
    let old = source(&[("token", "v1")]);
    let new = source(&[("token", "v2")]);
    // Created: nothing exists yet.
    assert_eq!(
        plan(&f, Some(&new), CLUSTER, &[]),
        ["create team-a", "create team-b", "create team-c"]
    );
    // Updated: copies of the old content are patched, an up-to-date one is left alone.
    let observed = [
        our_copy(&f, &old, "team-a"),
        our_copy(&f, &new, "team-b"),
        our_copy(&f, &old, "team-c"),
    ];
    assert_eq!(
        plan(&f, Some(&new), CLUSTER, &observed),
        ["update team-a", "in-sync team-b", "update team-c"]
    );
    // Identical: every copy has exactly the source's content.
    let steps = plan_sync(
        &f,
        Some(&new),
        [NamespaceView::new("team-a").labels(&map(TENANT))],
        &[],
    );
    let Step::Create { object } = &steps[0] else {
        panic!("{steps:?}")
    };
    assert!(object.same_content(&new));
    assert_eq!(object.content_hash(), new.content_hash());
}

#[test]
fn row_namespace_created_or_newly_labelled_to_match_gets_a_copy() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v")]);
    let synced: Vec<_> = ["team-a", "team-b", "team-c"]
        .iter()
        .map(|ns| our_copy(&f, &src, ns))
        .collect();
    let mut cluster = CLUSTER.to_vec();
    cluster.push(("team-new", TENANT, false));
    cluster[5] = ("default", TENANT, false);
    assert_eq!(
        plan(&f, Some(&src), &cluster, &synced),
        [
            "create default",
            "in-sync team-a",
            "in-sync team-b",
            "in-sync team-c",
            "create team-new"
        ]
    );
}

#[test]
fn row_namespace_no_longer_matches_copy_deleted_when_prune() {
    let src = source(&[("token", "v")]);
    let mut cluster = CLUSTER.to_vec();
    cluster[3] = ("team-c", PLAIN, false);
    for (prune, want) in [
        (
            true,
            vec!["in-sync team-a", "in-sync team-b", "delete team-c/tok"],
        ),
        (false, vec!["in-sync team-a", "in-sync team-b"]),
    ] {
        let f = fan_out(serde_json::json!({"prune": prune}));
        let observed: Vec<_> = ["team-a", "team-b", "team-c"]
            .iter()
            .map(|ns| our_copy(&f, &src, ns))
            .collect();
        assert_eq!(
            plan(&f, Some(&src), &cluster, &observed),
            want,
            "prune: {prune}"
        );
    }
}

#[test]
fn row_copy_renamed_in_spec_old_copies_pruned() {
    let src = source(&[("token", "v")]);
    let old = fan_out(serde_json::json!({}));
    let renamed = {
        let mut f = old.clone();
        f.target_name = "tok-copy".to_owned();
        f
    };
    let observed = [our_copy(&old, &src, "team-a")];
    assert_eq!(
        plan(&renamed, Some(&src), &CLUSTER[..2], &observed),
        ["create team-a", "delete team-a/tok"]
    );
}

#[test]
fn row_copy_edited_or_deleted_by_someone_is_reverted_or_recreated() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v")]);
    let mut data_edited = our_copy(&f, &src, "team-a");
    if let ConfigObject::Secret(s) = &mut data_edited {
        s.data = Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(b"hacked".to_vec()),
        )]));
    }
    let mut label_removed = our_copy(&f, &src, "team-b");
    if let Some(labels) = label_removed.metadata_mut().labels.as_mut() {
        labels.remove("reconcile.fluxcd.io/watch");
    }
    let mut extra_label = our_copy(&f, &src, "team-c");
    if let Some(labels) = extra_label.metadata_mut().labels.as_mut() {
        labels.insert("someone".to_owned(), "else".to_owned());
    }
    // Labels others add (team-c) are theirs, not drift; our edited data or label is reverted.
    assert_eq!(
        plan(
            &f,
            Some(&src),
            CLUSTER,
            &[data_edited, label_removed, extra_label]
        ),
        ["update team-a", "update team-b", "in-sync team-c"]
    );
    let deleted = [our_copy(&f, &src, "team-a"), our_copy(&f, &src, "team-c")];
    assert_eq!(
        plan(&f, Some(&src), CLUSTER, &deleted),
        ["in-sync team-a", "create team-b", "in-sync team-c"]
    );
}

#[test]
fn row_template_change_reapplies_copies() {
    let src = source(&[("token", "v")]);
    let before = fan_out(serde_json::json!({}));
    let after = fan_out(
        serde_json::json!({"target": {"namespaceSelector": {"matchLabels": {"role": "tenant"}}}}),
    );
    let observed = [our_copy(&before, &src, "team-a")];
    // The watch label was removed from target.labels: a subset check alone would miss it.
    assert_eq!(
        plan(&after, Some(&src), &CLUSTER[..2], &observed),
        ["update team-a"]
    );
}

#[test]
fn row_same_name_object_not_ours_is_skipped_or_adopted() {
    let src = source(&[("token", "v")]);
    let mut other = fan_out(serde_json::json!({}));
    other.owner = Owner::ConfigSync {
        name: "other".to_owned(),
    };
    let other_sync = fan_out_copy(&src, &other, "team-b");
    let observed = [foreign("team-a"), other_sync];
    let skip = fan_out(serde_json::json!({}));
    assert_eq!(
        plan(&skip, Some(&src), CLUSTER, &observed),
        ["skip team-a", "skip team-b", "create team-c"]
    );
    let adopt = fan_out(serde_json::json!({"conflictPolicy": "Adopt"}));
    assert_eq!(
        plan(&adopt, Some(&src), CLUSTER, &observed),
        ["adopt team-a", "skip team-b", "create team-c"],
        "another conflux owner's copy is never adopted"
    );
    let steps = plan_sync(
        &skip,
        Some(&src),
        [NamespaceView::new("team-a").labels(&map(TENANT))],
        &observed,
    );
    let Step::Skip { message, .. } = &steps[0] else {
        panic!("{steps:?}")
    };
    assert_eq!(
        message,
        "Secret team-a/tok already exists and was left alone: it is not managed by conflux (conflictPolicy: Skip)"
    );
    assert!(!message.contains("FOREIGN-DATA"));
    // A foreign object outside the selection is never touched, even with prune.
    assert_eq!(
        plan(
            &adopt,
            Some(&src),
            &[("default", PLAIN, false)],
            &[foreign("default")]
        ),
        Vec::<String>::new()
    );
}

#[test]
fn row_source_deleted_copies_kept_and_marked_orphaned() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v")]);
    let mut objects = vec![
        our_copy(&f, &src, "team-a"),
        our_copy(&f, &src, "team-b"),
        foreign("team-c"),
    ];
    let steps = plan_sync(&f, None, views_of(CLUSTER).iter().map(view), &objects);
    assert_eq!(
        steps.iter().map(summary).collect::<Vec<_>>(),
        ["orphan team-a/tok", "orphan team-b/tok"]
    );
    // Kept: nothing is deleted, and the data stays (the apply carries it).
    for step in &steps {
        let Step::MarkOrphaned { object } = step else {
            panic!("{step:?}")
        };
        assert!(object.same_content(&src));
        assert!(f.owner.owns(object.metadata().labels.as_ref()));
        assert_eq!(
            object.metadata().annotations.as_ref().unwrap()[ORPHANED_ANNOTATION],
            "true"
        );
    }
    execute(&mut objects, &steps);
    // Marked once.
    assert_eq!(plan(&f, None, CLUSTER, &objects), Vec::<String>::new());
    // The source comes back: the mark goes.
    assert_eq!(
        plan(&f, Some(&src), CLUSTER, &objects),
        ["update team-a", "update team-b", "skip team-c"]
    );
}

#[test]
fn row_config_sync_deleted_follows_the_deletion_policy() {
    let src = source(&[("token", "v")]);
    for (policy, want) in [
        ("Orphan", ["release team-a/tok", "release team-b/tok"]),
        ("Delete", ["delete team-a/tok", "delete team-b/tok"]),
    ] {
        let f = fan_out(serde_json::json!({"deletionPolicy": policy}));
        let observed = [
            our_copy(&f, &src, "team-a"),
            our_copy(&f, &src, "team-b"),
            foreign("team-c"),
        ];
        let steps = plan_deletion(&f, &observed);
        assert_eq!(
            steps.iter().map(summary).collect::<Vec<_>>(),
            want,
            "{policy}"
        );
        if let Step::Release { patch, .. } = &steps[0] {
            assert_eq!(patch, &release_patch());
        }
    }
    // The finalizer is on the ConfigSync only: copies never get one.
    let f = fan_out(serde_json::json!({}));
    assert_eq!(our_copy(&f, &src, "team-a").metadata().finalizers, None);
}

#[test]
fn row_secret_type_changed_or_target_immutable_copy_recreated() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v2")]);
    let mut tls = src.clone();
    if let ConfigObject::Secret(s) = &mut tls {
        s.type_ = Some("kubernetes.io/tls".to_owned());
    }
    let old_type = our_copy(&f, &src, "team-a");
    let mut immutable_stale = our_copy(&f, &source(&[("token", "v1")]), "team-b");
    let mut immutable_fresh = our_copy(&f, &tls, "team-c");
    for obj in [&mut immutable_stale, &mut immutable_fresh] {
        if let ConfigObject::Secret(s) = obj {
            s.immutable = Some(true);
        }
    }
    assert_eq!(
        plan(
            &f,
            Some(&tls),
            CLUSTER,
            &[old_type, immutable_stale, immutable_fresh.clone()]
        ),
        [
            "recreate team-a TypeChanged",
            "recreate team-b TypeChanged",
            "in-sync team-c"
        ]
    );
    let src_v3 = {
        let mut s = tls.clone();
        if let ConfigObject::Secret(s) = &mut s {
            s.data = Some(BTreeMap::from([(
                "tls.crt".to_owned(),
                ByteString(b"new".to_vec()),
            )]));
        }
        s
    };
    assert_eq!(
        plan(&f, Some(&src_v3), &CLUSTER[3..4], &[immutable_fresh]),
        ["recreate team-c Immutable"]
    );
    // A foreign object of another type is adopted by re-creation.
    let adopt = fan_out(serde_json::json!({"conflictPolicy": "Adopt"}));
    assert_eq!(
        plan(&adopt, Some(&tls), &CLUSTER[1..2], &[foreign("team-a")]),
        ["recreate team-a TypeChanged"]
    );
}

#[test]
fn row_namespace_terminating_is_skipped() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v2")]);
    let stale = our_copy(&f, &source(&[("token", "v1")]), "team-b");
    let cluster: &[Ns] = &[
        ("team-a", TENANT, true),
        ("team-b", TENANT, true),
        ("team-c", TENANT, false),
    ];
    // Nothing created, updated or pruned in a terminating namespace.
    assert_eq!(
        plan(&f, Some(&src), cluster, std::slice::from_ref(&stale)),
        ["create team-c"]
    );
    assert_eq!(plan(&f, None, cluster, &[stale]), Vec::<String>::new());
}

#[test]
fn row_operator_restarted_mid_way_converges_from_cluster_state() {
    let src = source(&[("token", "v")]);
    let cluster: Vec<Ns> = CLUSTER
        .iter()
        .copied()
        .chain([("team-d", TENANT, false), ("other", PLAIN, false)])
        .collect();
    // A previous process wrote two copies (one under an older source), then died. A fresh FanOut
    // built from the spec alone (no memory) finishes the job.
    let before_restart = fan_out(serde_json::json!({}));
    let mut objects = vec![
        our_copy(&before_restart, &src, "team-a"),
        our_copy(&before_restart, &source(&[("token", "old")]), "team-b"),
        our_copy(&before_restart, &src, "other"),
        foreign("team-d"),
    ];
    let f = fan_out(serde_json::json!({}));
    assert_eq!(
        plan(&f, Some(&src), &cluster, &objects),
        [
            "delete other/tok",
            "in-sync team-a",
            "update team-b",
            "create team-c",
            "skip team-d"
        ]
    );
    let steps = plan_sync(
        &f,
        Some(&src),
        views_of(&cluster).iter().map(view),
        &objects,
    );
    execute(&mut objects, &steps);
    assert_eq!(
        plan(&f, Some(&src), &cluster, &objects),
        [
            "in-sync team-a",
            "in-sync team-b",
            "in-sync team-c",
            "skip team-d"
        ],
        "a second pass has nothing to write"
    );
}

#[test]
fn kopy_copies_are_owned_by_their_source() {
    let src = source(&[("token", "v")]);
    let mut annotations = map(&[(crate::fan_out::KOPY_SYNC_ANNOTATION, "role=tenant")]);
    annotations.insert("x".to_owned(), "y".to_owned());
    let f = FanOut::from_kopy(&src.source_ref(), Some(&annotations), ["flux-system"])
        .unwrap()
        .expect("annotated");
    let steps = plan_sync(&f, Some(&src), views_of(CLUSTER).iter().map(view), &[]);
    assert_eq!(
        steps.iter().map(summary).collect::<Vec<_>>(),
        ["create team-a", "create team-b", "create team-c"]
    );
    let Step::Create { object } = &steps[0] else {
        panic!("{steps:?}")
    };
    let labels = object.metadata().labels.as_ref().unwrap();
    assert_eq!(labels["copy.conflux.dev/source-namespace"], "flux-system");
    assert_eq!(labels["copy.conflux.dev/source-name"], "tok");
    assert!(
        !labels.contains_key("reconcile.fluxcd.io/watch"),
        "kopy copies carry no source labels"
    );
}

#[test]
fn kopy_source_gone_copies_orphaned_then_released() {
    let src = source(&[("token", "v")]);
    let live = FanOut::kopy(
        &src.source_ref(),
        conflux_watch_index::selector::Selector::parse("role=tenant").unwrap(),
    );
    let mut objects = vec![our_copy(&live, &src, "team-a"), foreign("team-b")];
    // The source (or its annotation) is gone: only its identity is left.
    let gone = FanOut::kopy(
        &src.source_ref(),
        conflux_watch_index::selector::Selector::nothing(),
    );
    let steps = plan_sync(&gone, None, views_of(CLUSTER).iter().map(view), &objects);
    assert_eq!(
        steps.iter().map(summary).collect::<Vec<_>>(),
        ["orphan team-a/tok"]
    );
    execute(&mut objects, &steps);
    let steps = plan_deletion(&gone, &objects);
    assert_eq!(
        steps.iter().map(summary).collect::<Vec<_>>(),
        ["release team-a/tok"]
    );
}

#[test]
fn config_maps_are_planned_like_secrets() {
    let mut f = fan_out(serde_json::json!({}));
    f.source.kind = SourceKind::ConfigMap;
    let cm = ConfigObject::ConfigMap(ConfigMap {
        metadata: ObjectMeta {
            name: Some("tok".to_owned()),
            namespace: Some("flux-system".to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(map(&[("a", "1")])),
        ..ConfigMap::default()
    });
    // A Secret of the same name is another kind: ignored, the ConfigMap is created.
    assert_eq!(
        plan(
            &f,
            Some(&cm),
            &CLUSTER[1..2],
            &[our_copy(
                &fan_out(serde_json::json!({})),
                &source(&[]),
                "team-a"
            )]
        ),
        ["create team-a"]
    );
}

fn views_of(namespaces: &[Ns]) -> Vec<(String, BTreeMap<String, String>, bool)> {
    views(namespaces)
}

fn view(v: &(String, BTreeMap<String, String>, bool)) -> NamespaceView<'_> {
    NamespaceView::new(&v.0).labels(&v.1).terminating(v.2)
}

#[test]
fn row_copy_edited_key_added_by_hand_is_removed() {
    let f = fan_out(serde_json::json!({}));
    let src = source(&[("token", "v")]);
    let mut edited = our_copy(&f, &src, "team-a");
    if let ConfigObject::Secret(s) = &mut edited {
        s.data
            .get_or_insert_with(BTreeMap::new)
            .insert("added".to_owned(), ByteString(b"by hand".to_vec()));
    }
    let mut objects = vec![edited];
    let steps = plan_sync(
        &f,
        Some(&src),
        views_of(&CLUSTER[1..2]).iter().map(view),
        &objects,
    );
    let Step::Update { cleanup, .. } = &steps[0] else {
        panic!("{steps:?}")
    };
    assert_eq!(cleanup, &Some(serde_json::json!({"data": {"added": null}})));
    execute(&mut objects, &steps);
    assert!(objects[0].same_content(&src));
}

/// What a namespace holds before the sync, for the convergence property.
#[derive(Debug, Clone, Copy)]
enum Before {
    Nothing,
    Current,
    Stale,
    StaleWithExtraKey,
    OtherType,
    ImmutableStale,
    Orphaned,
    Foreign,
    OtherOwner,
}

const BEFORE: [Before; 9] = [
    Before::Nothing,
    Before::Current,
    Before::Stale,
    Before::StaleWithExtraKey,
    Before::OtherType,
    Before::ImmutableStale,
    Before::Orphaned,
    Before::Foreign,
    Before::OtherOwner,
];

fn before(f: &FanOut, src: &ConfigObject, ns: &str, what: Before) -> Option<ConfigObject> {
    let stale = source(&[("token", "old")]);
    let mut obj = match what {
        Before::Nothing => return None,
        Before::Current => our_copy(f, src, ns),
        Before::Stale | Before::StaleWithExtraKey | Before::ImmutableStale | Before::Orphaned => {
            our_copy(f, &stale, ns)
        }
        Before::OtherType => {
            let mut tls = src.clone();
            if let ConfigObject::Secret(s) = &mut tls {
                s.type_ = Some("kubernetes.io/tls".to_owned());
            }
            our_copy(f, &tls, ns)
        }
        Before::Foreign => foreign(ns),
        Before::OtherOwner => {
            let mut other = f.clone();
            other.owner = Owner::ConfigSync {
                name: "other".to_owned(),
            };
            our_copy(&other, src, ns)
        }
    };
    match (what, &mut obj) {
        (Before::StaleWithExtraKey, ConfigObject::Secret(s)) => {
            s.data
                .get_or_insert_with(BTreeMap::new)
                .insert("extra".to_owned(), ByteString(b"x".to_vec()));
        }
        (Before::ImmutableStale, ConfigObject::Secret(s)) => s.immutable = Some(true),
        (Before::Orphaned, o) => {
            o.metadata_mut()
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ORPHANED_ANNOTATION.to_owned(), "true".to_owned());
        }
        _ => {}
    }
    Some(obj)
}

proptest::proptest! {
    /// Whatever the cluster looks like, executing the plan once leaves nothing to do: a second plan
    /// only reports in-sync copies and skipped conflicts. Foreign objects are only written with
    /// `Adopt`, never deleted, and terminating namespaces are never written.
    #[test]
    fn one_plan_converges(
        rows in proptest::collection::vec((proptest::bool::ANY, proptest::bool::ANY, 0..BEFORE.len()), 0..10),
        prune in proptest::bool::ANY,
        adopt in proptest::bool::ANY,
        source_exists in proptest::bool::ANY,
    ) {
        let f = fan_out(serde_json::json!({
            "prune": prune,
            "conflictPolicy": if adopt { "Adopt" } else { "Skip" },
        }));
        let src = source(&[("token", "v"), ("user", "u")]);
        let names: Vec<String> = (0..rows.len()).map(|i| format!("ns-{i}")).collect();
        let tenant = map(TENANT);
        let plain = map(PLAIN);
        let namespaces: Vec<NamespaceView<'_>> = rows
            .iter()
            .zip(&names)
            .map(|((selected, terminating, _), name)| {
                NamespaceView::new(name)
                    .labels(if *selected { &tenant } else { &plain })
                    .terminating(*terminating)
            })
            .collect();
        let mut objects: Vec<ConfigObject> = rows
            .iter()
            .zip(&names)
            .filter_map(|((_, _, what), ns)| before(&f, &src, ns, BEFORE[*what]))
            .collect();
        let initial = objects.clone();
        let source_obj = source_exists.then_some(&src);

        let steps = plan_sync(&f, source_obj, namespaces.iter().copied(), &objects);
        for step in &steps {
            let ns = step.namespace();
            let i: usize = ns.trim_start_matches("ns-").parse().unwrap();
            proptest::prop_assert!(!rows[i].1 || step.is_noop(), "wrote in terminating {ns}: {step:?}");
            let was = initial.iter().find(|o| o.namespace() == ns);
            let foreign = was.is_some_and(|o| !f.owner.owns(o.metadata().labels.as_ref()));
            if foreign {
                let allowed = matches!(step, Step::Skip { .. })
                    || (adopt && matches!(step, Step::Adopt { .. } | Step::Recreate { .. }));
                proptest::prop_assert!(allowed, "touched a foreign object: {step:?}");
            }
        }
        execute(&mut objects, &steps);

        let again = plan_sync(&f, source_obj, namespaces.iter().copied(), &objects);
        proptest::prop_assert!(again.iter().all(Step::is_noop), "second plan: {:?}", again.iter().map(summary).collect::<Vec<_>>());
        if source_exists {
            for ns in namespaces.iter().filter(|ns| f.selects(**ns)) {
                let copy = objects.iter().find(|o| o.namespace() == ns.name);
                let ok = copy.is_some_and(|c| c.same_content(&src) && f.owner.owns(c.metadata().labels.as_ref()));
                let conflict = again.iter().any(|s| matches!(s, Step::Skip { namespace, .. } if namespace == ns.name));
                proptest::prop_assert!(ok || conflict, "{} has no identical copy", ns.name);
            }
        } else {
            proptest::prop_assert_eq!(objects.len(), initial.len(), "nothing is deleted while the source is gone");
        }
    }
}

/// A source annotated for reflector's auto mirrors and replicator's push, trusted.
fn annotated_fan_out(src: &ConfigObject, annotations: &[(&str, &str)]) -> FanOut {
    FanOut::from_annotations(
        &src.source_ref(),
        src.metadata().labels.as_ref(),
        Some(&map(annotations)),
        ["flux-system"],
    )
    .unwrap()
    .expect("annotated")
}

/// What a peer left in a namespace before conflux took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    Kopy,
    ReflectorAuto,
    ReflectorAutoOfAnother,
    ReflectorDirect,
    Replicator,
    ReplicatorWithOwnKey,
}

fn peer_copy(ns: &str, peer: Peer) -> ConfigObject {
    let mut copy = secret(ns, "tok", "Opaque", &[("token", "old")]);
    let meta = copy.metadata_mut();
    match peer {
        Peer::Kopy => {
            meta.labels = Some(map(&[(
                crate::fan_out::KOPY_ORIGIN_NAMESPACE_LABEL,
                "flux-system",
            )]));
        }
        Peer::ReflectorAuto | Peer::ReflectorAutoOfAnother | Peer::ReflectorDirect => {
            let from = if peer == Peer::ReflectorAutoOfAnother {
                "elsewhere/tok"
            } else {
                "flux-system/tok"
            };
            let mut annotations = map(&[(crate::reflector::REFLECTS, from)]);
            if peer != Peer::ReflectorDirect {
                annotations.insert(
                    crate::reflector::AUTO_REFLECTS.to_owned(),
                    "True".to_owned(),
                );
            }
            meta.annotations = Some(annotations);
        }
        Peer::Replicator | Peer::ReplicatorWithOwnKey => {
            meta.annotations = Some(map(&[(crate::replicator::REPLICATED_KEYS, "token")]));
        }
    }
    if peer == Peer::ReplicatorWithOwnKey
        && let ConfigObject::Secret(s) = &mut copy
    {
        s.data
            .get_or_insert_with(BTreeMap::new)
            .insert("mine".to_owned(), ByteString(b"kept".to_vec()));
    }
    copy
}

/// Switching over: the copies kopy, reflector (automatic mirrors) and replicator (copies holding
/// only replicated keys) made of this very source are adopted, whatever the conflict policy;
/// anything else of that name is left alone and reported.
#[test]
fn predecessors_copies_are_adopted_and_nothing_else() {
    let src = source(&[("token", "v")]);
    let f = annotated_fan_out(
        &src,
        &[
            ("kopy.kot-labs.com/sync", "role=tenant"),
            (crate::reflector::ALLOWED, "true"),
            (crate::reflector::AUTO_ENABLED, "true"),
            (crate::replicator::REPLICATE_TO, "team-.*"),
        ],
    );
    let cases = [
        (Peer::Kopy, "adopt team-a"),
        (Peer::ReflectorAuto, "adopt team-a"),
        (Peer::Replicator, "adopt team-a"),
        (Peer::ReflectorAutoOfAnother, "skip team-a"),
        (Peer::ReflectorDirect, "skip team-a"),
        (Peer::ReplicatorWithOwnKey, "skip team-a"),
    ];
    let cluster: &[Ns] = &[("flux-system", PLAIN, false), ("team-a", TENANT, false)];
    for (peer, want) in cases {
        let mut objects = vec![peer_copy("team-a", peer)];
        let steps = plan(&f, Some(&src), cluster, &objects);
        assert_eq!(steps, [want], "{peer:?}");
        let ns = views(cluster);
        let steps = plan_sync(
            &f,
            Some(&src),
            ns.iter()
                .map(|(n, l, t)| NamespaceView::new(n).labels(l).terminating(*t)),
            &objects,
        );
        execute(&mut objects, &steps);
        if want.starts_with("adopt") {
            assert!(
                objects[0].same_content(&src),
                "{peer:?}: the copy follows the source"
            );
            assert!(
                f.owner.owns(objects[0].metadata().labels.as_ref()),
                "{peer:?}"
            );
            assert_eq!(
                plan(&f, Some(&src), cluster, &objects),
                ["in-sync team-a"],
                "{peer:?}: adopted once, then in sync"
            );
        } else {
            assert_eq!(objects[0], peer_copy("team-a", peer), "{peer:?}: untouched");
        }
    }
}

/// A copy another conflux owner made is never adopted, even when it carries a predecessor's
/// marks: two owners taking turns would flap.
#[test]
fn predecessor_marks_do_not_override_another_conflux_owner() {
    let src = source(&[("token", "v")]);
    let f = annotated_fan_out(&src, &[(crate::replicator::REPLICATE_TO, "team-a")]);
    let mut other = peer_copy("team-a", Peer::Replicator);
    other.metadata_mut().labels = Some(
        Owner::ConfigSync {
            name: "other".to_owned(),
        }
        .labels(),
    );
    let cluster: &[Ns] = &[("flux-system", PLAIN, false), ("team-a", PLAIN, false)];
    assert_eq!(plan(&f, Some(&src), cluster, &[other]), ["skip team-a"]);
}

/// replicator's push copies carry the source's labels (unless `strip-labels`), under conflux's
/// ownership labels; reflector's auto mirrors carry none, as in reflector.
#[test]
fn replicator_copies_carry_the_source_labels_reflector_copies_do_not() {
    let mut src = source(&[("token", "v")]);
    src.metadata_mut().labels = Some(map(&[
        ("app", "kafka"),
        (MANAGED_BY_LABEL, "strimzi-user-operator"),
    ]));
    let cluster: &[Ns] = &[("flux-system", PLAIN, false), ("team-a", PLAIN, false)];
    let labels_of = |f: &FanOut| {
        let steps = plan_sync(
            f,
            Some(&src),
            views(cluster)
                .iter()
                .map(|(n, l, t)| NamespaceView::new(n).labels(l).terminating(*t))
                .collect::<Vec<_>>(),
            &[],
        );
        let Step::Create { object } = &steps[0] else {
            panic!("{steps:?}")
        };
        object.metadata().labels.clone().unwrap_or_default()
    };
    let pushed = labels_of(&annotated_fan_out(
        &src,
        &[(crate::replicator::REPLICATE_TO, "team-a")],
    ));
    assert_eq!(pushed["app"], "kafka");
    assert_eq!(pushed[MANAGED_BY_LABEL], "conflux", "ownership wins");
    let stripped = labels_of(&annotated_fan_out(
        &src,
        &[
            (crate::replicator::REPLICATE_TO, "team-a"),
            (crate::replicator::STRIP_LABELS, "true"),
        ],
    ));
    assert!(!stripped.contains_key("app"));
    let mirrored = labels_of(&annotated_fan_out(
        &src,
        &[
            (crate::reflector::ALLOWED, "true"),
            (crate::reflector::AUTO_ENABLED, "true"),
        ],
    ));
    assert!(!mirrored.contains_key("app"));
}

const PEERS: [Option<Peer>; 7] = [
    None,
    Some(Peer::Kopy),
    Some(Peer::ReflectorAuto),
    Some(Peer::ReflectorAutoOfAnother),
    Some(Peer::ReflectorDirect),
    Some(Peer::Replicator),
    Some(Peer::ReplicatorWithOwnKey),
];

proptest::proptest! {
    /// Switching from a peer converges in one plan too, never writes a key someone else put
    /// there (objects it does not adopt are left exactly as they were), and never deletes one.
    #[test]
    fn switching_from_a_peer_converges_and_loses_nothing(
        rows in proptest::collection::vec((proptest::bool::ANY, 0..PEERS.len()), 0..8),
    ) {
        let src = source(&[("token", "v"), ("user", "u")]);
        let f = annotated_fan_out(
            &src,
            &[
                ("kopy.kot-labs.com/sync", "role=tenant"),
                (crate::reflector::ALLOWED, "true"),
                (crate::reflector::AUTO_ENABLED, "true"),
                (crate::reflector::AUTO_NAMESPACES_SELECTOR, "role=tenant"),
                (crate::replicator::REPLICATE_TO_MATCHING, "role=tenant"),
            ],
        );
        let names: Vec<String> = (0..rows.len()).map(|i| format!("ns-{i}")).collect();
        let tenant = map(TENANT);
        let plain = map(PLAIN);
        let namespaces: Vec<NamespaceView<'_>> = rows
            .iter()
            .zip(&names)
            .map(|((selected, _), name)| {
                NamespaceView::new(name).labels(if *selected { &tenant } else { &plain })
            })
            .collect();
        let mut objects: Vec<ConfigObject> = rows
            .iter()
            .zip(&names)
            .filter_map(|((_, peer), ns)| PEERS[*peer].map(|p| peer_copy(ns, p)))
            .collect();
        let initial = objects.clone();
        let steps = plan_sync(&f, Some(&src), namespaces.iter().copied(), &objects);
        for step in &steps {
            proptest::prop_assert!(!matches!(step, Step::Delete { .. }), "deleted a peer's object: {step:?}");
        }
        execute(&mut objects, &steps);
        let again = plan_sync(&f, Some(&src), namespaces.iter().copied(), &objects);
        proptest::prop_assert!(again.iter().all(Step::is_noop), "second plan: {:?}", again.iter().map(summary).collect::<Vec<_>>());
        for was in &initial {
            let now = objects.iter().find(|o| o.namespace() == was.namespace());
            let adopted = now.is_some_and(|n| f.owner.owns(n.metadata().labels.as_ref()));
            if !adopted {
                proptest::prop_assert_eq!(now, Some(was), "an object not adopted is untouched");
            }
        }
    }
}

/// A replicator source is deleted: its copies are orphaned with their data and with the source
/// labels they carry (the owner, gone with the source, no longer knows them).
#[test]
fn orphaned_copies_keep_the_labels_they_carry() {
    let mut src = source(&[("token", "v")]);
    src.metadata_mut().labels = Some(map(&[("app", "kafka")]));
    let live = annotated_fan_out(&src, &[(crate::replicator::REPLICATE_TO, "team-a")]);
    let objects = vec![our_copy(&live, &src, "team-a")];
    let gone = FanOut::of_source(&src.source_ref(), crate::Selection::nothing());
    let steps = plan_sync(&gone, None, views_of(CLUSTER).iter().map(view), &objects);
    let [Step::MarkOrphaned { object }] = &steps[..] else {
        panic!("{steps:?}")
    };
    let labels = object.metadata().labels.as_ref().unwrap();
    assert_eq!(labels["app"], "kafka");
    assert!(gone.owner.owns(Some(labels)));
    assert!(object.same_content(&src), "the data stays");
}

/// A replicator source that is itself a copy (of a ConfigSync) passes its labels on, but not its
/// owner's: the ConfigSync must not see the pushed copies as its own and prune them.
#[test]
fn pushed_copies_never_take_another_owners_labels() {
    let sync = fan_out(serde_json::json!({}));
    let mut src = our_copy(&sync, &source(&[("token", "v")]), "flux-system");
    src.metadata_mut()
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("app".to_owned(), "kafka".to_owned());
    let pushed = annotated_fan_out(&src, &[(crate::replicator::REPLICATE_TO, "team-a")]);
    let steps = plan_sync(&pushed, Some(&src), views_of(CLUSTER).iter().map(view), &[]);
    let [Step::Create { object }] = &steps[..] else {
        panic!("{steps:?}")
    };
    let labels = object.metadata().labels.as_ref();
    assert_eq!(labels.unwrap()["app"], "kafka");
    assert!(pushed.owner.owns(labels));
    assert!(
        !sync.owner.owns(labels),
        "the ConfigSync does not own the pushed copy"
    );
}
