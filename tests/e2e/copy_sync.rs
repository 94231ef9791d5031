//! The copy and sync controllers against a real API server: every row of docs/design.md 4.2, and the
//! pull-copy (`fluxcd.controlplane.io/copyFrom`) behaviour of 4.1.
//!
//! Each test runs its own operator in-process, sharded with its own `sharding.fluxcd.io/key`
//! value, and works in its own namespaces (selected through a namespace label whose value is the
//! shard), so tests run in parallel without seeing each other. Secret values here are fake, and
//! assertions never print Secret data.

mod copy_support;

use std::collections::BTreeMap;
use std::time::Duration;

use conflux_tests::{cluster, eventually, label_namespace, unlabel_namespace};
use copy_support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const COPY_FROM: &str = "fluxcd.controlplane.io/copyFrom";
const ALLOWED: &str = "copy.conflux.dev/allowed-namespaces";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const OWNER: &str = "copy.conflux.dev/config-sync";
const SOURCE: &str = "copy.conflux.dev/source";
const ORPHANED: &str = "copy.conflux.dev/orphaned";

/// A copy target: an empty object annotated with `copyFrom`, in the test's shard.
fn target(kind: &str, name: &str, from: &str, shard: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "labels": {SHARD: shard}, "annotations": {COPY_FROM: from}},
    })
}

// ---------------------------------------------------------------------------------------------
// Pull copies (copyFrom)

/// Flux Operator's ResourceSets copy their own `copyFrom` targets: conflux leaves them alone (no
/// write, no Warning) unless `--copy-resourceset-targets` asks it to copy them too.
#[tokio::test]
async fn copy_from_targets_of_flux_operator_resource_sets_are_left_to_it() {
    let (client, shard) = setup("pull-resourceset").await;
    let c = cluster();
    let src = namespace(c, &client, "rs-src", &[]).await;
    let dst = namespace(c, &client, "rs-dst", &[]).await;
    let operator = Operator::start(c, &shard, &[], 4).await;
    // No consent on the source: a target conflux handled would get a CopyNotAllowed Warning.
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "runtime-info"}, "data": {"region": "eu-west-1"}}),
    )
    .await;
    let mut generated = target(
        "ConfigMap",
        "runtime-info",
        &format!("{src}/runtime-info"),
        &shard,
    );
    generated["metadata"]["labels"]["resourceset.fluxcd.controlplane.io/name"] = json!("tenants");
    generated["metadata"]["labels"]["resourceset.fluxcd.controlplane.io/namespace"] =
        json!("flux-system");
    generated["data"] = json!({"region": "written-by-flux-operator"});
    apply(&client, &dst, generated).await;
    // A plain target next to it shows the controller has looked at both.
    apply(
        &client,
        &dst,
        target(
            "ConfigMap",
            "control",
            &format!("{src}/runtime-info"),
            &shard,
        ),
    )
    .await;
    let reason = eventually("a Warning about the plain target", WAIT, || async {
        events_about(&client, &dst, "ConfigMap", "control")
            .await
            .into_iter()
            .find(|(t, _, _)| t == "Warning")
            .map(|(_, r, _)| r)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = config_map(&client, &dst, "runtime-info")
        .await
        .expect("target");
    assert_eq!(
        cm_data(&untouched).get("region").map(String::as_str),
        Some("written-by-flux-operator"),
        "the ResourceSet target keeps Flux Operator's data"
    );
    assert!(
        events_about(&client, &dst, "ConfigMap", "runtime-info")
            .await
            .is_empty(),
        "no Event about the ResourceSet target (the plain one got {reason})"
    );

    // Opted back in: conflux copies ResourceSet targets too.
    operator.kill();
    let consenting = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "runtime-info", "annotations": {ALLOWED: "*"}},
        "data": {"region": "eu-west-1"}});
    apply(&client, &src, consenting).await;
    let _operator = Operator::start_with(c, &shard, &[], 4, None, true).await;
    eventually("the ResourceSet target is copied", WAIT, || async {
        let cm = config_map(&client, &dst, "runtime-info").await?;
        (cm_data(&cm).get("region").map(String::as_str) == Some("eu-west-1")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn copy_from_copies_data_binary_data_and_secret_type_but_no_source_metadata() {
    let (client, shard) = setup("pull-content").await;
    let c = cluster();
    let src = namespace(c, &client, "pull-src", &[]).await;
    let dst = namespace(c, &client, "pull-dst", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    apply(
        &client,
        &src,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "registry", "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
                         "annotations": {ALLOWED: "pull-dst-*"}},
            "type": "kubernetes.io/basic-auth",
            "data": {"username": b64("fake-user"), "password": b64(conflux_tests::leak::marker())},
        }),
    )
    .await;
    apply(
        &client,
        &src,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "annotations": {ALLOWED: "*"}},
            "data": {"region": "eu-west-1"},
            "binaryData": {"logo.png": b64("\u{1}PNG")},
        }),
    )
    .await;
    // The Secret target is created without a type: the API server makes it Opaque, so conflux must
    // re-create it with the source's type.
    apply(
        &client,
        &dst,
        target("Secret", "registry", &format!("{src}/registry"), &shard),
    )
    .await;
    apply(
        &client,
        &dst,
        target("ConfigMap", "settings", &format!("{src}/settings"), &shard),
    )
    .await;
    let opaque_uid = secret(&client, &dst, "registry")
        .await
        .and_then(|s| s.metadata.uid);

    let copy = eventually(
        "the Secret copy gets the source's type and data",
        WAIT,
        || async {
            let s = secret(&client, &dst, "registry").await?;
            (s.type_.as_deref() == Some("kubernetes.io/basic-auth")).then_some(s)
        },
    )
    .await;
    assert!(
        secret_data(&copy)
            == bytes(&[
                ("password", conflux_tests::leak::marker()),
                ("username", "fake-user")
            ]),
        "the copy holds exactly the source's Secret data"
    );
    assert!(
        copy.string_data.is_none(),
        "data is copied as data, never stringData"
    );
    assert_ne!(
        copy.metadata.uid, opaque_uid,
        "type is immutable: the copy was re-created"
    );
    assert_eq!(
        label(&copy.metadata, "reconcile.fluxcd.io/watch"),
        None,
        "source labels are not copied"
    );
    assert_eq!(
        annotation(&copy.metadata, ALLOWED),
        None,
        "source annotations are not copied"
    );
    assert_eq!(
        annotation(&copy.metadata, COPY_FROM),
        Some(format!("{src}/registry").as_str()),
        "the copyFrom annotation stays on the target"
    );

    let cm = eventually(
        "the ConfigMap copy gets data and binaryData",
        WAIT,
        || async {
            let cm = config_map(&client, &dst, "settings").await?;
            cm.data.is_some().then_some(cm)
        },
    )
    .await;
    assert_eq!(cm_data(&cm), strings(&[("region", "eu-west-1")]));
    let binary = cm.binary_data.unwrap_or_default();
    assert_eq!(
        binary.get("logo.png").map(|b| b.0.clone()),
        Some(b"\x01PNG".to_vec())
    );
}

#[tokio::test]
async fn key_removed_at_source_disappears_from_the_copy_without_any_label_on_the_source() {
    let (client, shard) = setup("pull-keys").await;
    let c = cluster();
    let ns = namespace(c, &client, "pull-keys", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    // No reconcile.fluxcd.io/watch label on the source: copies follow it anyway.
    let source = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": data});
    apply(&client, &ns, source(json!({"a": "1", "b": "2"}))).await;
    apply(
        &client,
        &ns,
        target(
            "ConfigMap",
            "app-config-copy",
            &format!("{ns}/app-config"),
            &shard,
        ),
    )
    .await;
    eventually("the copy has both keys", WAIT, || async {
        let cm = config_map(&client, &ns, "app-config-copy").await?;
        (cm_data(&cm) == strings(&[("a", "1"), ("b", "2")])).then_some(())
    })
    .await;

    apply(&client, &ns, source(json!({"a": "10"}))).await;
    eventually(
        "key b is gone from the copy and a is updated",
        WAIT,
        || async {
            let cm = config_map(&client, &ns, "app-config-copy").await?;
            (cm_data(&cm) == strings(&[("a", "10")])).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn cross_namespace_copy_is_refused_without_consent_and_allowed_with_it() {
    let (client, shard) = setup("pull-consent").await;
    let c = cluster();
    let src = namespace(c, &client, "consent-src", &[]).await;
    let dst = namespace(c, &client, "consent-dst", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    let source = |annotations: serde_json::Value| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": annotations},
            "data": {"password": b64(conflux_tests::leak::marker())},
        })
    };
    apply(&client, &src, source(json!({}))).await;
    apply(
        &client,
        &dst,
        target("Secret", "db", &format!("{src}/db"), &shard),
    )
    .await;

    let note = expect_event(&client, &dst, "Secret", "db", "Refused").await;
    assert!(
        note.contains(ALLOWED),
        "the refusal names the consent annotation: {note}"
    );
    assert!(
        !note.contains(conflux_tests::leak::marker()),
        "Events never carry data"
    );
    let refused = secret(&client, &dst, "db").await.expect("target exists");
    assert!(
        secret_data(&refused).is_empty(),
        "nothing was copied without consent"
    );

    // The source consents (a glob naming the target namespace): the change of the source alone
    // brings the copy.
    apply(
        &client,
        &src,
        source(json!({ALLOWED: "other, consent-dst-*"})),
    )
    .await;
    eventually(
        "the copy arrives once the source consents",
        WAIT,
        || async {
            let s = secret(&client, &dst, "db").await?;
            (secret_data(&s) == bytes(&[("password", conflux_tests::leak::marker())])).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn missing_source_is_reported_then_healed_when_the_source_appears() {
    let (client, shard) = setup("pull-missing").await;
    let c = cluster();
    let ns = namespace(c, &client, "pull-missing", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    apply(
        &client,
        &ns,
        target("ConfigMap", "copy", &format!("{ns}/not-yet"), &shard),
    )
    .await;
    let note = expect_event(&client, &ns, "ConfigMap", "copy", "SourceNotFound").await;
    assert_eq!(
        note,
        format!(
            "failed to copy data from ConfigMap/{ns}/not-yet: configmaps \"not-yet\" not found"
        )
    );

    apply(&client, &ns, json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-yet"}, "data": {"k": "v"},
    }))
    .await;
    eventually("the copy heals once the source exists", WAIT, || async {
        let cm = config_map(&client, &ns, "copy").await?;
        (cm_data(&cm) == strings(&[("k", "v")])).then_some(())
    })
    .await;
}

#[tokio::test]
async fn malformed_copy_from_is_reported_with_flux_operators_message() {
    let (client, shard) = setup("pull-invalid").await;
    let c = cluster();
    let ns = namespace(c, &client, "pull-invalid", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    apply(&client, &ns, target("ConfigMap", "bad", "no-slash", &shard)).await;
    let note = expect_event(&client, &ns, "ConfigMap", "bad", "InvalidCopyFrom").await;
    assert_eq!(
        note,
        "invalid fluxcd.controlplane.io/copyFrom annotation value 'no-slash' must be in the format 'namespace/name'"
    );
}

#[tokio::test]
async fn watching_one_namespace_copies_only_targets_in_it() {
    let (client, shard) = setup("pull-scoped").await;
    let c = cluster();
    let src = namespace(c, &client, "scoped-src", &[]).await;
    let inside = namespace(c, &client, "scoped-in", &[]).await;
    let outside = namespace(c, &client, "scoped-out", &[]).await;
    let _operator = Operator::start_in(c, &shard, &[], 4, Some(&inside)).await;
    apply(
        &client,
        &src,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "annotations": {ALLOWED: "*"}}, "data": {"k": "v"},
        }),
    )
    .await;
    apply(
        &client,
        &outside,
        target("ConfigMap", "cfg", &format!("{src}/cfg"), &shard),
    )
    .await;
    apply(
        &client,
        &inside,
        target("ConfigMap", "cfg", &format!("{src}/cfg"), &shard),
    )
    .await;
    eventually(
        "the target in the watched namespace is copied",
        WAIT,
        || async {
            let cm = config_map(&client, &inside, "cfg").await?;
            (cm_data(&cm) == strings(&[("k", "v")])).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let untouched = config_map(&client, &outside, "cfg").await.expect("target");
    assert!(
        cm_data(&untouched).is_empty(),
        "targets elsewhere are not handled"
    );
}

// ---------------------------------------------------------------------------------------------
// Fan-out (ConfigSync), one test per row of docs/design.md 4.2

/// A ConfigSync spec copying `kind` `src/name` into the test's tenant namespaces.
fn sync_spec(kind: &str, src: &str, name: &str, shard: &str) -> serde_json::Value {
    json!({
        "source": {"kind": kind, "namespace": src, "name": name},
        "target": {
            "namespaceSelector": {"matchLabels": {TENANT: shard}},
            "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
        },
    })
}

async fn tenants(client: &Client, shard: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(namespace(cluster(), client, "tenant", &[(TENANT, shard)]).await);
    }
    out
}

async fn copy_in(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    config_map(client, ns, name).await
}

/// Waits until every namespace in `namespaces` holds a copy `name` with exactly `data`.
async fn wait_for_copies(
    what: &str,
    client: &Client,
    namespaces: &[String],
    name: &str,
    data: &BTreeMap<String, String>,
) {
    eventually(what, WAIT, || async {
        all_copies_have(client, namespaces, name, data)
            .await
            .then_some(())
    })
    .await;
}

async fn all_copies_have(
    client: &Client,
    namespaces: &[String],
    name: &str,
    data: &BTreeMap<String, String>,
) -> bool {
    for ns in namespaces {
        match copy_in(client, ns, name).await {
            Some(cm) if &cm_data(&cm) == data => {}
            _ => return false,
        }
    }
    true
}

#[tokio::test]
async fn source_created_or_updated_gives_every_selected_namespace_an_identical_copy() {
    let (client, shard) = setup("sync-fanout").await;
    let c = cluster();
    let src = namespace(c, &client, "sync-src", &[]).await;
    let targets = tenants(&client, &shard, 3).await;
    let outsider = namespace(c, &client, "outsider", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;

    let name = format!("fanout-{shard}");
    create_config_sync(
        &client,
        &name,
        &shard,
        sync_spec("Secret", &src, "ghcr-auth", &shard),
    )
    .await;
    // The source is created after the ConfigSync: its creation alone fans it out.
    apply(
        &client,
        &src,
        json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ghcr-auth"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64("{\"auths\":{}}")},
        }),
    )
    .await;

    for ns in &targets {
        let copy = eventually(&format!("a copy in {ns}"), WAIT, || async {
            secret(&client, ns, "ghcr-auth").await
        })
        .await;
        assert!(
            secret_data(&copy) == bytes(&[(".dockerconfigjson", "{\"auths\":{}}")]),
            "identical data"
        );
        assert_eq!(
            copy.type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
        assert_eq!(label(&copy.metadata, MANAGED_BY), Some("conflux"));
        assert_eq!(label(&copy.metadata, OWNER), Some(name.as_str()));
        assert_eq!(
            label(&copy.metadata, "reconcile.fluxcd.io/watch"),
            Some("Enabled")
        );
        assert_eq!(
            annotation(&copy.metadata, SOURCE),
            Some(format!("Secret/{src}/ghcr-auth").as_str())
        );
        assert_eq!(
            copy.metadata.finalizers, None,
            "never a finalizer on copies"
        );
        let managers: Vec<_> = copy
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert!(
            managers.iter().any(|m| m == "conflux"),
            "written by field manager conflux: {managers:?}"
        );
    }
    assert!(
        secret(&client, &outsider, "ghcr-auth").await.is_none(),
        "unselected namespaces get nothing"
    );
    let status = eventually("Ready=True with 3 synced", WAIT, || async {
        let cs = config_sync(&client, &name).await?;
        let status = cs.status.clone()?;
        (status.synced_targets == 3
            && status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"))
        .then_some((cs, status))
    })
    .await;
    assert_eq!(status.1.observed_generation, status.0.metadata.generation);
    assert_eq!(status.1.failed_targets, 0);
    assert!(
        status
            .1
            .source_hash
            .as_deref()
            .is_some_and(|h| h.starts_with("sha256:"))
    );
    assert!(
        status
            .0
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == conflux_copy_core::config_sync::FINALIZER),
        "the finalizer is on the ConfigSync"
    );

    let note = expect_event(&client, "default", "ConfigSync", &name, "Synced").await;
    assert!(note.starts_with("copies written: create"), "{note}");

    // Update the source: every copy follows.
    apply(
        &client,
        &src,
        json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ghcr-auth"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64("{\"auths\":{\"ghcr.io\":{}}}")},
        }),
    )
    .await;
    for ns in &targets {
        eventually(
            &format!("the copy in {ns} follows the update"),
            WAIT,
            || async {
                let s = secret(&client, ns, "ghcr-auth").await?;
                (secret_data(&s) == bytes(&[(".dockerconfigjson", "{\"auths\":{\"ghcr.io\":{}}}")]))
                    .then_some(())
            },
        )
        .await;
    }
}

#[tokio::test]
async fn namespace_newly_labelled_gets_a_copy_and_loses_it_when_it_no_longer_matches() {
    let (client, shard) = setup("sync-relabel").await;
    let c = cluster();
    let src = namespace(c, &client, "relabel-src", &[]).await;
    let first = tenants(&client, &shard, 1).await;
    let later = namespace(c, &client, "relabel", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    create_config_sync(
        &client,
        &format!("relabel-{shard}"),
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;
    let want = strings(&[("k", "v")]);
    wait_for_copies(
        "the first tenant has a copy",
        &client,
        &first,
        "info",
        &want,
    )
    .await;
    assert!(copy_in(&client, &later, "info").await.is_none());

    label_namespace(&client, &later, &[(TENANT, &shard)]).await;
    eventually("the newly labelled namespace gets a copy", WAIT, || async {
        copy_in(&client, &later, "info").await.map(drop)
    })
    .await;

    unlabel_namespace(&client, &later, TENANT).await;
    eventually(
        "the copy is pruned once the namespace no longer matches",
        WAIT,
        || async {
            copy_in(&client, &later, "info")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        all_copies_have(&client, &first, "info", &want).await,
        "the matching namespace keeps its copy"
    );

    // A brand-new namespace that matches gets a copy too.
    let fresh = tenants(&client, &shard, 1).await;
    wait_for_copies(
        "a namespace created with the label gets a copy",
        &client,
        &fresh,
        "info",
        &want,
    )
    .await;
}

#[tokio::test]
async fn copy_edited_or_deleted_by_someone_is_reverted_or_recreated() {
    let (client, shard) = setup("sync-revert").await;
    let c = cluster();
    let src = namespace(c, &client, "revert-src", &[]).await;
    let targets = tenants(&client, &shard, 1).await;
    let ns = &targets[0];
    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    create_config_sync(
        &client,
        &format!("revert-{shard}"),
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;
    let want = strings(&[("k", "v")]);
    wait_for_copies("a copy", &client, &targets, "info", &want).await;

    // Someone edits the copy: changes a value and adds a key.
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "info",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "hacked", "extra": "x"}})),
        )
        .await
        .expect("edit copy");
    wait_for_copies(
        "the edited copy is reverted, the added key removed",
        &client,
        &targets,
        "info",
        &want,
    )
    .await;

    let uid = copy_in(&client, ns, "info")
        .await
        .and_then(|c| c.metadata.uid);
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .delete("info", &DeleteParams::default())
        .await
        .expect("delete copy");
    let recreated = eventually("the deleted copy is re-created", WAIT, || async {
        let cm = copy_in(&client, ns, "info").await?;
        (cm.metadata.uid != uid && cm_data(&cm) == want).then_some(cm)
    })
    .await;
    assert_eq!(label(&recreated.metadata, MANAGED_BY), Some("conflux"));
}

#[tokio::test]
async fn same_name_object_not_ours_is_left_alone_and_reported_unless_adopt() {
    let (client, shard) = setup("sync-conflict").await;
    let c = cluster();
    let src = namespace(c, &client, "conflict-src", &[]).await;
    let targets = tenants(&client, &shard, 2).await;
    let (free, taken) = (&targets[0], &targets[1]);
    apply(&client, taken, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info", "labels": {"owner": "team"}}, "data": {"mine": "yes"}})).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let name = format!("conflict-{shard}");
    create_config_sync(
        &client,
        &name,
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;

    wait_for_copies(
        "the free namespace gets a copy",
        &client,
        std::slice::from_ref(free),
        "info",
        &strings(&[("k", "v")]),
    )
    .await;
    let (status, reason, message) = eventually("Ready=False PartialSync", WAIT, || async {
        let r = ready(&client, &name).await?;
        (r.1 == "PartialSync").then_some(r)
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains(taken.as_str()),
        "the status names the namespace: {message}"
    );
    let cs = config_sync(&client, &name).await.expect("ConfigSync");
    let st = cs.status.expect("status");
    assert_eq!((st.synced_targets, st.failed_targets), (1, 1));
    assert_eq!(
        st.failures.first().map(|f| f.namespace.as_str()),
        Some(taken.as_str())
    );
    let note = expect_event(&client, "default", "ConfigSync", &name, "Conflict").await;
    assert!(note.contains("left alone"), "{note}");
    let foreign = copy_in(&client, taken, "info")
        .await
        .expect("foreign object");
    assert_eq!(
        cm_data(&foreign),
        strings(&[("mine", "yes")]),
        "the foreign object is untouched"
    );
    assert_eq!(label(&foreign.metadata, MANAGED_BY), None);
    let _ = reason;

    // conflictPolicy: Adopt takes it over.
    Api::<conflux_copy_core::ConfigSync>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"conflictPolicy": "Adopt"}})),
        )
        .await
        .expect("switch to Adopt");
    // Adopting is an apply and then the cleanup patch: wait for both, not just the label.
    let adopted = eventually(
        "the object is adopted with Adopt, without the previous owner's keys",
        WAIT,
        || async {
            let cm = copy_in(&client, taken, "info").await?;
            (label(&cm.metadata, OWNER) == Some(name.as_str())
                && cm_data(&cm) == strings(&[("k", "v")]))
            .then_some(cm)
        },
    )
    .await;
    assert_eq!(
        cm_data(&adopted),
        strings(&[("k", "v")]),
        "the previous owner's keys are gone"
    );
    eventually("Ready=True once adopted", WAIT, || async {
        let r = ready(&client, &name).await?;
        (r.0 == "True").then_some(())
    })
    .await;
}

#[tokio::test]
async fn source_deleted_keeps_copies_and_marks_them_orphaned() {
    let (client, shard) = setup("sync-orphan").await;
    let c = cluster();
    let src = namespace(c, &client, "orphan-src", &[]).await;
    let targets = tenants(&client, &shard, 2).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    let name = format!("orphan-{shard}");
    create_config_sync(
        &client,
        &name,
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;
    let want = strings(&[("k", "v")]);
    wait_for_copies("copies", &client, &targets, "info", &want).await;

    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .delete("info", &DeleteParams::default())
        .await
        .expect("delete source");
    for ns in &targets {
        let copy = eventually(
            &format!("the copy in {ns} is marked orphaned"),
            WAIT,
            || async {
                let cm = copy_in(&client, ns, "info").await?;
                (annotation(&cm.metadata, ORPHANED) == Some("true")).then_some(cm)
            },
        )
        .await;
        assert_eq!(
            cm_data(&copy),
            want,
            "the orphaned copy keeps its data (apps keep running)"
        );
    }
    let (status, reason, _) = eventually("Ready=False SourceNotFound", WAIT, || async {
        let r = ready(&client, &name).await?;
        (r.1 == "SourceNotFound").then_some(r)
    })
    .await;
    assert_eq!(status, "False");
    assert_eq!(reason, "SourceNotFound");
}

#[tokio::test]
async fn config_sync_deleted_orphans_or_deletes_copies_per_deletion_policy() {
    let (client, shard) = setup("sync-delete").await;
    let c = cluster();
    let src = namespace(c, &client, "delete-src", &[]).await;
    let targets = tenants(&client, &shard, 2).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}, "data": {"k": "v"}})).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}, "data": {"k": "v"}})).await;
    let orphan = format!("orphan-policy-{shard}");
    let delete = format!("delete-policy-{shard}");
    create_config_sync(
        &client,
        &orphan,
        &shard,
        sync_spec("ConfigMap", &src, "kept", &shard),
    )
    .await;
    let mut spec = sync_spec("ConfigMap", &src, "gone", &shard);
    spec["deletionPolicy"] = json!("Delete");
    create_config_sync(&client, &delete, &shard, spec).await;
    let want = strings(&[("k", "v")]);
    eventually("copies of both", WAIT, || async {
        (all_copies_have(&client, &targets, "kept", &want).await
            && all_copies_have(&client, &targets, "gone", &want).await)
            .then_some(())
    })
    .await;

    let syncs: Api<conflux_copy_core::ConfigSync> = Api::all(client.clone());
    for name in [&orphan, &delete] {
        syncs
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete ConfigSync");
    }
    for name in [&orphan, &delete] {
        eventually(
            &format!("ConfigSync {name} is gone (finalizer released)"),
            WAIT,
            || async { config_sync(&client, name).await.is_none().then_some(()) },
        )
        .await;
    }
    for ns in &targets {
        let kept = copy_in(&client, ns, "kept")
            .await
            .expect("Orphan keeps the copy");
        assert_eq!(cm_data(&kept), want);
        assert_eq!(
            label(&kept.metadata, MANAGED_BY),
            None,
            "released: no ownership labels left"
        );
        assert_eq!(label(&kept.metadata, OWNER), None);
        assert!(
            copy_in(&client, ns, "gone").await.is_none(),
            "Delete deletes the copy"
        );
    }
}

#[tokio::test]
async fn secret_type_change_or_immutable_copy_is_deleted_and_recreated() {
    let (client, shard) = setup("sync-recreate").await;
    let c = cluster();
    let src = namespace(c, &client, "recreate-src", &[]).await;
    let targets = tenants(&client, &shard, 1).await;
    let ns = &targets[0];
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let source = |type_: &str, value: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cred"}, "type": type_, "data": {"token": b64(value)}});
    apply(&client, &src, source("Opaque", "fake-1")).await;
    create_config_sync(
        &client,
        &format!("recreate-{shard}"),
        &shard,
        sync_spec("Secret", &src, "cred", &shard),
    )
    .await;
    let first = eventually("an Opaque copy", WAIT, || async {
        secret(&client, ns, "cred").await
    })
    .await;

    // The source's type changes (types are immutable, so the source is re-created).
    Api::<Secret>::namespaced(client.clone(), &src)
        .delete("cred", &DeleteParams::default())
        .await
        .expect("delete source");
    apply(&client, &src, source("example.com/token", "fake-2")).await;
    let second = eventually("the copy is re-created with the new type", WAIT, || async {
        let s = secret(&client, ns, "cred").await?;
        (s.type_.as_deref() == Some("example.com/token")
            && secret_data(&s) == bytes(&[("token", "fake-2")]))
        .then_some(s)
    })
    .await;
    assert_ne!(second.metadata.uid, first.metadata.uid, "a new object");

    // Someone makes the copy immutable; the next source change re-creates it.
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"immutable": true})),
        )
        .await
        .expect("make the copy immutable");
    apply(&client, &src, source("example.com/token", "fake-3")).await;
    let third = eventually(
        "the immutable copy is re-created with the new data",
        WAIT,
        || async {
            let s = secret(&client, ns, "cred").await?;
            (secret_data(&s) == bytes(&[("token", "fake-3")])).then_some(s)
        },
    )
    .await;
    assert_ne!(third.metadata.uid, second.metadata.uid, "a new object");
}

#[tokio::test]
async fn terminating_namespace_is_skipped() {
    let (client, shard) = setup("sync-terminating").await;
    let c = cluster();
    let src = namespace(c, &client, "term-src", &[]).await;
    let targets = tenants(&client, &shard, 2).await;
    let (live, dying) = (&targets[0], &targets[1]);
    // A finalizer on an object inside keeps the namespace terminating until the test releases it.
    apply(&client, dying, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hold", "finalizers": ["conflux-test/hold"]}})).await;
    Api::<Namespace>::all(client.clone())
        .delete(dying, &DeleteParams::default())
        .await
        .expect("delete namespace");
    eventually("the namespace is terminating", WAIT, || async {
        let ns = Api::<Namespace>::all(client.clone())
            .get(dying)
            .await
            .ok()?;
        ns.metadata.deletion_timestamp.map(drop)
    })
    .await;

    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    let name = format!("terminating-{shard}");
    create_config_sync(
        &client,
        &name,
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;
    wait_for_copies(
        "the live namespace gets a copy",
        &client,
        std::slice::from_ref(live),
        "info",
        &strings(&[("k", "v")]),
    )
    .await;
    let (status, _, _) = eventually("Ready", WAIT, || async { ready(&client, &name).await }).await;
    assert_eq!(status, "True", "a terminating namespace is not a failure");
    assert!(
        copy_in(&client, dying, "info").await.is_none(),
        "nothing is written in a terminating namespace"
    );

    Api::<ConfigMap>::namespaced(client.clone(), dying)
        .patch(
            "hold",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the namespace");
}

#[tokio::test]
async fn operator_killed_mid_fan_out_converges_after_restart() {
    let (client, shard) = setup("sync-restart").await;
    let c = cluster();
    let src = namespace(c, &client, "restart-src", &[]).await;
    let targets = tenants(&client, &shard, 120).await;
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v"}})).await;
    let name = format!("restart-{shard}");
    let copies = || async {
        Api::<ConfigMap>::all(client.clone())
            .list_metadata(&ListParams::default().labels(&format!("{OWNER}={name}")))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    };

    // One write at a time, so the fan-out is still under way when the operator is killed.
    let operator = Operator::start(c, &shard, &[], 1).await;
    create_config_sync(
        &client,
        &name,
        &shard,
        sync_spec("ConfigMap", &src, "info", &shard),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while copies().await < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fan-out never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    operator.kill();
    let at_kill = copies().await;
    assert!(
        at_kill < targets.len(),
        "killed mid fan-out ({at_kill} of {} copies)",
        targets.len()
    );

    // While it is down: the source changes and one target stops matching.
    apply(&client, &src, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "info"}, "data": {"k": "v2"}})).await;
    let (gone, kept) = targets.split_first().expect("targets");
    unlabel_namespace(&client, gone, TENANT).await;

    let _operator = Operator::start(c, &shard, &[], 4).await;
    let want = strings(&[("k", "v2")]);
    eventually(
        "every remaining target converges to the new data",
        Duration::from_secs(90),
        || async {
            all_copies_have(&client, kept, "info", &want)
                .await
                .then_some(())
        },
    )
    .await;
    eventually(
        "the unmatched namespace's copy (if any was made) is pruned",
        WAIT,
        || async { copy_in(&client, gone, "info").await.is_none().then_some(()) },
    )
    .await;
    assert_eq!(
        copies().await,
        kept.len(),
        "exactly one copy per target, nothing duplicated"
    );
    eventually("status counts every target", WAIT, || async {
        let st = config_sync(&client, &name).await?.status?;
        (st.synced_targets as usize == kept.len() && st.failed_targets == 0).then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// kopy compatibility

#[tokio::test]
async fn kopy_annotation_syncs_from_trusted_namespaces_and_is_refused_elsewhere() {
    let (client, shard) = setup("kopy").await;
    let c = cluster();
    let trusted = namespace(c, &client, "kopy-trusted", &[]).await;
    let untrusted = namespace(c, &client, "kopy-untrusted", &[]).await;
    let targets = tenants(&client, &shard, 2).await;
    let _operator = Operator::start(c, &shard, &[&trusted], 4).await;
    let source = |name: &str, annotation: &str| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {SHARD: shard}, "annotations": {annotation: format!("{TENANT}={shard}")}},
            "data": {"k": "v"},
        })
    };
    apply(
        &client,
        &trusted,
        source("shared", "kopy.kot-labs.com/sync"),
    )
    .await;
    apply(&client, &untrusted, source("planted", "flynshue.io/sync")).await;

    wait_for_copies(
        "the trusted source is copied into every selected namespace",
        &client,
        &targets,
        "shared",
        &strings(&[("k", "v")]),
    )
    .await;
    let copy = copy_in(&client, &targets[0], "shared").await.expect("copy");
    assert_eq!(
        label(&copy.metadata, "copy.conflux.dev/source-namespace"),
        Some(trusted.as_str())
    );
    let note = expect_event(&client, &untrusted, "ConfigMap", "planted", "Refused").await;
    assert!(note.contains("--sync-source-namespaces"), "{note}");
    for ns in &targets {
        assert!(
            copy_in(&client, ns, "planted").await.is_none(),
            "an untrusted source plants nothing"
        );
    }

    // The trusted source is deleted: its copies stay, marked orphaned.
    Api::<ConfigMap>::namespaced(client.clone(), &trusted)
        .delete("shared", &DeleteParams::default())
        .await
        .expect("delete kopy source");
    for ns in &targets {
        let copy = eventually(
            &format!("the copy in {ns} is marked orphaned"),
            WAIT,
            || async {
                let cm = copy_in(&client, ns, "shared").await?;
                (annotation(&cm.metadata, ORPHANED) == Some("true")).then_some(cm)
            },
        )
        .await;
        assert_eq!(cm_data(&copy), strings(&[("k", "v")]), "kept with its data");
    }
}
