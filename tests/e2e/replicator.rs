//! replicator's (mittwald/kubernetes-replicator) documented examples, run by conflux against a
//! real API server: push by name (`replicate-to`) and by label (`replicate-to-matching`), pull with
//! the source's consent (`replication-allowed`, `replication-allowed-namespaces`,
//! `replicate-from`), the TLS and Docker registry special cases, `strip-labels`, switching over
//! from replicator, and the failures its users report (a copy blocked by an existing Secret that
//! never recovers, #356; an endless reconcile loop, #407; a replica re-applied empty that is not
//! filled again without `--sync-by-content`).
//!
//! The annotations are the README's, verbatim. The only additions are test plumbing: each test's
//! operator handles the objects labelled with its own shard (`sharding.fluxcd.io/key`), and
//! trusts the namespaces it pushes from (`--sync-source-namespaces`). Secret values are fake.

mod copy_support;

use conflux_tests::{cluster, eventually, label_namespace};
use copy_support::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
const ALLOWED: &str = "replicator.v1.mittwald.de/replication-allowed";
const ALLOWED_NAMESPACES: &str = "replicator.v1.mittwald.de/replication-allowed-namespaces";
const STRIP_LABELS: &str = "replicator.v1.mittwald.de/strip-labels";
const KEEP_OWNER_REFERENCES: &str = "replicator.v1.mittwald.de/keep-owner-references";
const REPLICATED_KEYS: &str = "replicator.v1.mittwald.de/replicated-keys";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// A Secret with fake data; the marker stands in for a real secret value.
fn secret_object(name: &str, labels: Value, annotations: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "data": data,
    })
}

async fn wait_gone(client: &Client, ns: &str, name: &str) {
    eventually(&format!("Secret {ns}/{name} is gone"), WAIT, || async {
        secret(client, ns, name).await.is_none().then_some(())
    })
    .await;
}

/// "Push-based replication", name-based: `replicate-to: "my-ns-1,namespace-[0-9]*"` on
/// `test-secret` copies it into `my-ns-1` and every `namespace-<digits>`, and into namespaces that
/// appear later; nowhere else.
#[tokio::test]
async fn readme_push_by_name() {
    let (client, shard) = setup("replicator-push-name").await;
    let my_ns_1 = named_namespace(&client, "my-ns-1", &[]).await;
    let numbered = named_namespace(&client, "namespace-7", &[]).await;
    let other = named_namespace(&client, "my-ns-12", &[]).await;
    let _operator = Operator::start(cluster(), &shard, &["default"], 4).await;
    apply(
        &client,
        "default",
        secret_object(
            "test-secret",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: "my-ns-1,namespace-[0-9]*"}),
            json!({"key1": b64(conflux_tests::leak::marker())}),
        ),
    )
    .await;
    let want = bytes(&[("key1", conflux_tests::leak::marker())]);
    for ns in [&my_ns_1, &numbered] {
        wait_secret(&client, ns, "test-secret", &want).await;
    }
    let later = named_namespace(&client, "namespace-8", &[]).await;
    wait_secret(&client, &later, "test-secret", &want).await;
    assert!(
        secret(&client, &other, "test-secret").await.is_none(),
        "my-ns-12 matches no entry as a whole"
    );
}

/// "Push-based replication", label-based: the README's selector
/// `my-label=value,my-other-label,my-other-label notin (foo,bar)` (written as a folded YAML
/// string, so with a trailing newline). A namespace whose labels stop matching loses its copy, as
/// the README says.
#[tokio::test]
async fn readme_push_by_label() {
    let (client, shard) = setup("replicator-push-label").await;
    let c = cluster();
    let src = namespace(c, &client, "push-src", &[]).await;
    let matching = namespace(
        c,
        &client,
        "push-match",
        &[("my-label", "value"), ("my-other-label", "baz")],
    )
    .await;
    let excluded = namespace(
        c,
        &client,
        "push-excluded",
        &[("my-label", "value"), ("my-other-label", "foo")],
    )
    .await;
    let _operator = Operator::start(c, &shard, &[&src], 4).await;
    apply(
        &client,
        &src,
        secret_object(
            "test-secret",
            json!({SHARD: shard}),
            json!({REPLICATE_TO_MATCHING: "my-label=value,my-other-label,my-other-label notin (foo,bar)\n"}),
            json!({"key1": b64("value")}),
        ),
    )
    .await;
    wait_secret(
        &client,
        &matching,
        "test-secret",
        &bytes(&[("key1", "value")]),
    )
    .await;
    assert!(secret(&client, &excluded, "test-secret").await.is_none());
    label_namespace(&client, &matching, &[("my-other-label", "bar")]).await;
    wait_gone(&client, &matching, "test-secret").await;
}

/// "Pull-based replication": the source allows replication (`replication-allowed: "true"`,
/// `replication-allowed-namespaces: "my-ns-1,namespace-[0-9]*"`) and an empty replica asks for it
/// (`replicate-from: default/some-secret`). The replica keeps keys of its own, as replicator's
/// does, and loses a key once it is removed at the source. Without consent it is refused.
#[tokio::test]
async fn readme_pull_with_consent() {
    let (client, shard) = setup("replicator-pull").await;
    let allowed = named_namespace(&client, "namespace-3", &[]).await;
    let refused = namespace(cluster(), &client, "pull-refused", &[]).await;
    let _operator = Operator::start(cluster(), &shard, &[], 4).await;
    let source = |data: Value| {
        secret_object(
            "some-secret",
            json!({}),
            json!({ALLOWED: "true", ALLOWED_NAMESPACES: "my-ns-1,namespace-[0-9]*"}),
            data,
        )
    };
    apply(
        &client,
        "default",
        source(json!({"key1": b64(conflux_tests::leak::marker()), "key2": b64("two")})),
    )
    .await;
    let replica = |own: Value| {
        secret_object(
            "secret-replica",
            json!({SHARD: shard}),
            json!({REPLICATE_FROM: "default/some-secret"}),
            own,
        )
    };
    apply(&client, &allowed, replica(json!({"own": b64("mine")}))).await;
    apply(&client, &refused, replica(json!({}))).await;
    wait_secret(
        &client,
        &allowed,
        "secret-replica",
        &bytes(&[
            ("key1", conflux_tests::leak::marker()),
            ("key2", "two"),
            ("own", "mine"),
        ]),
    )
    .await;
    apply(
        &client,
        "default",
        source(json!({"key1": b64(conflux_tests::leak::marker())})),
    )
    .await;
    wait_secret(
        &client,
        &allowed,
        "secret-replica",
        &bytes(&[("key1", conflux_tests::leak::marker()), ("own", "mine")]),
    )
    .await;
    let note = expect_event(&client, &refused, "Secret", "secret-replica", "Refused").await;
    assert!(note.contains(ALLOWED_NAMESPACES), "{note}");
    assert!(
        !note.contains(conflux_tests::leak::marker()),
        "Events never carry data"
    );
    let untouched = secret(&client, &refused, "secret-replica")
        .await
        .expect("replica");
    assert!(secret_data(&untouched).is_empty());
}

/// "Special case: TLS secrets" and "Docker registry credentials": replicas declared with their
/// type and placeholder keys get the source's data. "Sync by Content": re-applied with the
/// placeholders (a Helm upgrade), they are filled again; conflux always compares content, no flag
/// needed.
#[tokio::test]
async fn readme_tls_and_docker_registry_replicas() {
    let (client, shard) = setup("replicator-special").await;
    let c = cluster();
    let src = namespace(c, &client, "special-src", &[]).await;
    let dst = namespace(c, &client, "special-dst", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let consent = json!({ALLOWED: "true", ALLOWED_NAMESPACES: "special-dst-.*"});
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "some-tls-secret", "annotations": consent},
               "type": "kubernetes.io/tls",
               "data": {"tls.crt": b64("cert"), "tls.key": b64(conflux_tests::leak::marker())}}),
    )
    .await;
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "some-docker-secret", "annotations": consent},
               "type": "kubernetes.io/dockerconfigjson",
               "data": {".dockerconfigjson": b64("{\"auths\":{\"ghcr.io\":{}}}")}}),
    )
    .await;
    let tls_replica = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tls-secret-replica", "labels": {SHARD: shard},
                     "annotations": {REPLICATE_FROM: format!("{src}/some-tls-secret")}},
        "type": "kubernetes.io/tls",
        "data": {"tls.key": "", "tls.crt": ""},
    });
    let docker_replica = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "docker-secret-replica", "labels": {SHARD: shard},
                     "annotations": {REPLICATE_FROM: format!("{src}/some-docker-secret")}},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "e30K"},
    });
    apply(&client, &dst, tls_replica.clone()).await;
    apply(&client, &dst, docker_replica.clone()).await;
    let tls = bytes(&[
        ("tls.crt", "cert"),
        ("tls.key", conflux_tests::leak::marker()),
    ]);
    let docker = bytes(&[(".dockerconfigjson", "{\"auths\":{\"ghcr.io\":{}}}")]);
    wait_secret(&client, &dst, "tls-secret-replica", &tls).await;
    wait_secret(&client, &dst, "docker-secret-replica", &docker).await;
    apply(&client, &dst, tls_replica).await;
    apply(&client, &dst, docker_replica).await;
    wait_secret(&client, &dst, "tls-secret-replica", &tls).await;
    wait_secret(&client, &dst, "docker-secret-replica", &docker).await;
}

/// "Strip labels": pushed copies carry the source's labels (as replicator's do) unless
/// `strip-labels: "true"`; conflux's ownership labels win either way. `keep-owner-references` is
/// not supported: an ownerReference names an object in the source's namespace, and in another
/// namespace the garbage collector would delete the copy, so copies never get one.
#[tokio::test]
async fn readme_strip_labels_and_owner_references() {
    let (client, shard) = setup("replicator-labels").await;
    let c = cluster();
    let src = namespace(c, &client, "labels-src", &[]).await;
    let dst = namespace(c, &client, "labels-dst", &[]).await;
    let _operator = Operator::start(c, &shard, &[&src], 4).await;
    apply(
        &client,
        &src,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
    )
    .await;
    let owner_uid = config_map(&client, &src, "owner")
        .await
        .and_then(|cm| cm.metadata.uid)
        .expect("owner uid");
    let source = |name: &str, extra: Value| {
        let mut annotations = json!({REPLICATE_TO: dst.clone(), KEEP_OWNER_REFERENCES: "true"});
        if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": name,
                "labels": {SHARD: shard, MANAGED_BY: "strimzi-kafka-operator", "strimzi.io/cluster": "kafka"},
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}],
            },
            "type": "kubernetes.io/tls",
            "data": {"tls.key": b64(conflux_tests::leak::marker()), "tls.crt": b64("cert")},
        })
    };
    apply(
        &client,
        &src,
        source("cluster-ca-certs", json!({STRIP_LABELS: "true"})),
    )
    .await;
    apply(&client, &src, source("clients-ca-certs", json!({}))).await;
    let want = bytes(&[
        ("tls.crt", "cert"),
        ("tls.key", conflux_tests::leak::marker()),
    ]);
    wait_secret(&client, &dst, "cluster-ca-certs", &want).await;
    wait_secret(&client, &dst, "clients-ca-certs", &want).await;
    let stripped = secret(&client, &dst, "cluster-ca-certs")
        .await
        .expect("copy");
    assert_eq!(label(&stripped.metadata, "strimzi.io/cluster"), None);
    assert_eq!(label(&stripped.metadata, MANAGED_BY), Some("conflux"));
    let kept = secret(&client, &dst, "clients-ca-certs")
        .await
        .expect("copy");
    assert_eq!(label(&kept.metadata, "strimzi.io/cluster"), Some("kafka"));
    assert_eq!(
        label(&kept.metadata, MANAGED_BY),
        Some("conflux"),
        "ownership wins over the copied label"
    );
    for copy in [&stripped, &kept] {
        assert!(
            copy.metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty),
            "never an ownerReference across namespaces"
        );
    }
}

/// replicator #356: a Secret already in a target namespace blocks the copy, and deleting it does
/// not bring the copy until the source changes or replicator restarts. conflux skips it with a
/// Warning, and the copy arrives once the blocking Secret is deleted, with no other change.
#[tokio::test]
async fn existing_secret_blocks_the_copy_until_it_is_deleted() {
    let (client, shard) = setup("replicator-356").await;
    let c = cluster();
    let src = namespace(c, &client, "block-src", &[]).await;
    let dst = namespace(c, &client, "block-dst", &[]).await;
    apply(
        &client,
        &dst,
        secret_object(
            "test-secret-1",
            json!({}),
            json!({}),
            json!({"other": b64("x")}),
        ),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[&src], 4).await;
    apply(
        &client,
        &src,
        secret_object(
            "test-secret-1",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: dst.clone()}),
            json!({"key": b64("v")}),
        ),
    )
    .await;
    let note = expect_event(&client, &src, "Secret", "test-secret-1", "Conflict").await;
    assert!(note.contains(&dst), "{note}");
    assert_eq!(
        secret(&client, &dst, "test-secret-1")
            .await
            .map(|s| secret_data(&s)),
        Some(bytes(&[("other", "x")])),
        "the existing Secret is left alone"
    );
    Api::<Secret>::namespaced(client.clone(), &dst)
        .delete("test-secret-1", &DeleteParams::default())
        .await
        .expect("delete the blocking Secret");
    wait_secret(&client, &dst, "test-secret-1", &bytes(&[("key", "v")])).await;
}

/// replicator #407 (and #21): an endless reconcile loop that keeps the API server busy. conflux
/// writes a copy only when its content or metadata differs, never a timestamp, and never writes
/// a source: after the copies converge, every further event (here, changes to the sources'
/// metadata only) is reconciled and writes nothing.
#[tokio::test]
async fn converged_copies_are_not_written_again() {
    let (client, shard) = setup("replicator-407").await;
    let c = cluster();
    let src = namespace(c, &client, "quiet-src", &[]).await;
    let dst = namespace(c, &client, "quiet-dst", &[]).await;
    let operator = Operator::start(c, &shard, &[&src], 4).await;
    apply(
        &client,
        &src,
        secret_object(
            "pushed",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: dst.clone()}),
            json!({"key": b64("v")}),
        ),
    )
    .await;
    apply(
        &client,
        &src,
        secret_object(
            "pulled",
            json!({}),
            json!({ALLOWED: "true", ALLOWED_NAMESPACES: dst.clone()}),
            json!({"key": b64("v")}),
        ),
    )
    .await;
    apply(
        &client,
        &dst,
        secret_object(
            "replica",
            json!({SHARD: shard}),
            json!({REPLICATE_FROM: format!("{src}/pulled")}),
            json!({}),
        ),
    )
    .await;
    let want = bytes(&[("key", "v")]);
    wait_secret(&client, &dst, "pushed", &want).await;
    wait_secret(&client, &dst, "replica", &want).await;
    let versions = || async {
        let mut out = Vec::new();
        for (ns, name) in [(&dst, "pushed"), (&dst, "replica")] {
            let s = secret(&client, ns, name).await.expect("copy");
            out.push(s.metadata.resource_version);
        }
        out
    };
    // Let the first write's own watch events settle before taking the baseline.
    eventually("the copies are seen in sync", WAIT, || async {
        (operator.applies("sync", "unchanged") > 0 && operator.applies("copy", "unchanged") > 0)
            .then_some(())
    })
    .await;
    let copies_before = versions().await;
    for round in 0..5 {
        let (sync_before, copy_before) = (
            operator.applies("sync", "unchanged"),
            operator.applies("copy", "unchanged"),
        );
        for name in ["pushed", "pulled"] {
            Api::<Secret>::namespaced(client.clone(), &src)
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"example.com/round": round.to_string()}}})),
                )
                .await
                .expect("touch the source");
        }
        eventually(&format!("round {round} is reconciled"), WAIT, || async {
            (operator.applies("sync", "unchanged") > sync_before
                && operator.applies("copy", "unchanged") > copy_before)
                .then_some(())
        })
        .await;
    }
    assert_eq!(versions().await, copies_before, "no copy was written again");
    for name in ["pushed", "pulled"] {
        let source = secret(&client, &src, name).await.expect("source");
        let managers: Vec<String> = source
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert!(
            !managers.iter().any(|m| m == "conflux"),
            "conflux never writes a source: {managers:?}"
        );
    }
    assert_eq!(
        operator.applies("sync", "update"),
        0,
        "no update of a converged copy"
    );
}

/// Switching from replicator: the copies it pushed (`replicated-keys` listing every key they
/// hold) are taken over in place and brought up to date; one holding a key replicator did not put
/// there is left alone and reported, so nothing anyone else wrote is lost. A replica of
/// replicator's (its own keys, `replicated-keys` naming the copied ones) keeps its own keys and
/// loses the key replicator copied that the source no longer has.
#[tokio::test]
async fn switching_from_replicator_loses_nothing() {
    let (client, shard) = setup("replicator-switch").await;
    let c = cluster();
    let src = namespace(c, &client, "from-src", &[]).await;
    let pure = namespace(c, &client, "from-pure", &[]).await;
    let mixed = namespace(c, &client, "from-mixed", &[]).await;
    // What replicator left behind.
    let pushed = |data: Value, keys: &str| {
        secret_object("shared", json!({}), json!({REPLICATED_KEYS: keys}), data)
    };
    apply(&client, &pure, pushed(json!({"a": b64("old")}), "a")).await;
    apply(
        &client,
        &mixed,
        pushed(json!({"a": b64("old"), "mine": b64("keep")}), "a"),
    )
    .await;
    apply(
        &client,
        &pure,
        secret_object(
            "replica",
            json!({SHARD: shard}),
            json!({REPLICATE_FROM: format!("{src}/shared"), REPLICATED_KEYS: "a,gone"}),
            json!({"a": b64("old"), "gone": b64("x"), "own": b64("o")}),
        ),
    )
    .await;
    let pure_uid = secret(&client, &pure, "shared")
        .await
        .and_then(|s| s.metadata.uid);
    apply(
        &client,
        &src,
        secret_object(
            "shared",
            json!({SHARD: shard}),
            json!({
                REPLICATE_TO: "from-pure-.*,from-mixed-.*",
                ALLOWED: "true",
                ALLOWED_NAMESPACES: "from-.*",
            }),
            json!({"a": b64("new")}),
        ),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[&src], 4).await;
    wait_secret(&client, &pure, "shared", &bytes(&[("a", "new")])).await;
    let adopted = secret(&client, &pure, "shared").await.expect("adopted");
    assert_eq!(adopted.metadata.uid, pure_uid, "taken over in place");
    assert_eq!(label(&adopted.metadata, MANAGED_BY), Some("conflux"));
    wait_secret(
        &client,
        &pure,
        "replica",
        &bytes(&[("a", "new"), ("own", "o")]),
    )
    .await;
    let note = expect_event(&client, &src, "Secret", "shared", "Conflict").await;
    assert!(note.contains(&mixed), "{note}");
    let left = secret(&client, &mixed, "shared").await.expect("left alone");
    assert_eq!(secret_data(&left), bytes(&[("a", "old"), ("mine", "keep")]));
}

/// Bad input: a malformed `replicate-from`, a regex that does not compile in `replicate-to`, a
/// selector that does not parse in `replicate-to-matching`, a non-boolean `replication-allowed`,
/// a push from an untrusted namespace. One Warning with a stable reason each, on the object to
/// fix; nothing is copied, and existing copies are not pruned because of a typo.
#[tokio::test]
async fn bad_annotations_are_reported_and_prune_nothing() {
    let (client, shard) = setup("replicator-bad").await;
    let c = cluster();
    let src = namespace(c, &client, "typo-src", &[]).await;
    let dst = namespace(c, &client, "typo-dst", &[]).await;
    let untrusted = namespace(c, &client, "typo-untrusted", &[]).await;
    let _operator = Operator::start(c, &shard, &[&src], 4).await;
    let data = json!({"key": b64(conflux_tests::leak::marker())});
    apply(
        &client,
        &src,
        secret_object(
            "pushed",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: "typo-dst-.*"}),
            data.clone(),
        ),
    )
    .await;
    let want = bytes(&[("key", conflux_tests::leak::marker())]);
    wait_secret(&client, &dst, "pushed", &want).await;
    // A typo in the list: reported, and the existing copy stays. And other bad annotations.
    let objects = [
        (
            &src,
            "pushed",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: "typo-dst-[.*"}),
        ),
        (
            &src,
            "by-label",
            json!({SHARD: shard}),
            json!({REPLICATE_TO_MATCHING: "team in (a"}),
        ),
        (
            &src,
            "maybe",
            json!({}),
            json!({ALLOWED: "yes", ALLOWED_NAMESPACES: ".*"}),
        ),
        (
            &untrusted,
            "planted",
            json!({SHARD: shard}),
            json!({REPLICATE_TO: ".*"}),
        ),
    ];
    for (ns, name, labels, annotations) in objects {
        apply(
            &client,
            ns,
            secret_object(name, labels, annotations, data.clone()),
        )
        .await;
    }
    let replicas = [
        ("malformed", "a/b/c".to_owned()),
        ("asks-maybe", format!("{src}/maybe")),
    ];
    for (name, from) in replicas {
        apply(
            &client,
            &dst,
            secret_object(
                name,
                json!({SHARD: shard}),
                json!({REPLICATE_FROM: from}),
                json!({}),
            ),
        )
        .await;
    }
    let cases = [
        (&src, "pushed", "InvalidPattern", REPLICATE_TO),
        (&src, "by-label", "InvalidSelector", REPLICATE_TO_MATCHING),
        (&untrusted, "planted", "Refused", "--sync-source-namespaces"),
        (&dst, "malformed", "InvalidReference", REPLICATE_FROM),
        (&dst, "asks-maybe", "InvalidAnnotation", ALLOWED),
    ];
    for (ns, name, reason, mentions) in cases {
        let note = expect_event(&client, ns, "Secret", name, reason).await;
        assert!(note.contains(mentions), "{name}: {note}");
        assert!(
            !note.contains(conflux_tests::leak::marker()),
            "{name}: no data"
        );
    }
    assert_eq!(
        secret(&client, &dst, "pushed")
            .await
            .map(|s| secret_data(&s)),
        Some(want),
        "a typo prunes nothing"
    );
    assert!(secret(&client, &dst, "planted").await.is_none());
    let replica = secret(&client, &dst, "asks-maybe").await.expect("replica");
    assert!(secret_data(&replica).is_empty());
}
