//! reflector's (emberstack/kubernetes-reflector) documented examples, run by conflux against a real
//! API server: the README's source and mirror objects, its automatic mirrors, its cert-manager
//! `secretTemplate`, switching over from reflector, and the failures its users report (copies that
//! stop: a mirror re-applied empty, a namespace created later, a copy deleted by hand).
//!
//! The annotations are the README's, verbatim. The only additions are test plumbing: each test's
//! operator handles the objects labelled with its own shard (`sharding.fluxcd.io/key`), and
//! trusts the namespaces it fans out from (`--sync-source-namespaces`). Secret values are fake.

mod copy_support;

use conflux_tests::{cluster, eventually, unlabel_namespace};
use copy_support::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

const ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
const ALLOWED_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
const ALLOWED_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces-selector";
const AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
const AUTO_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces";
const AUTO_SELECTOR: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector";
const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
const AUTO_REFLECTS: &str = "reflector.v1.k8s.emberstack.com/auto-reflects";
const REFLECTED_VERSION: &str = "reflector.v1.k8s.emberstack.com/reflected-version";
const ORPHANED: &str = "copy.conflux.dev/orphaned";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The README's mirror: an object carrying `reflects`, in the test's shard.
fn mirror(kind: &str, name: &str, reflects: &str, shard: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "labels": {SHARD: shard}, "annotations": {REFLECTS: reflects}},
    })
}

async fn warnings(client: &Client, ns: &str, kind: &str, name: &str, reason: &str) -> usize {
    events_about(client, ns, kind, name)
        .await
        .into_iter()
        .filter(|(t, r, _)| t == "Warning" && r == reason)
        .count()
}

/// Usage 1 and 2 of reflector's README: the example source Secret and ConfigMap in `default`
/// (`reflection-allowed`, the namespace list with a regex, the label selector), and their mirrors
/// (`reflects: default/source-secret`, `default/source-config-map`). A mirror is filled in a
/// namespace the list names, one its regex matches, and one the selector matches; elsewhere it is
/// refused and left empty. "Done!": Secrets get `data` (and their type), ConfigMaps `data` and
/// `binaryData`, and every change of the source follows.
#[tokio::test]
async fn readme_source_and_mirror_objects() {
    let (client, shard) = setup("reflector-readme").await;
    let listed = named_namespace(&client, "namespace-1", &[]).await;
    let by_regex = named_namespace(&client, "namespace-42", &[]).await;
    let by_label = named_namespace(&client, "reflector-prod", &[("env", "production")]).await;
    let refused = named_namespace(&client, "reflector-dev", &[("env", "dev")]).await;
    let _operator = Operator::start(cluster(), &shard, &[], 4).await;
    let consent = json!({
        ALLOWED: "true",
        ALLOWED_NAMESPACES: "namespace-1,namespace-2,namespace-[0-9]*",
        ALLOWED_SELECTOR: "env=production",
    });
    apply(
        &client,
        "default",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "source-secret", "annotations": consent},
            "type": "kubernetes.io/basic-auth",
            "data": {"username": b64("fake-user"), "password": b64(conflux_tests::leak::marker())},
        }),
    )
    .await;
    apply(
        &client,
        "default",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "source-config-map", "annotations": consent},
            "data": {"region": "eu-west-1"},
            "binaryData": {"logo.png": b64("\u{1}PNG")},
        }),
    )
    .await;
    for ns in [&listed, &by_regex, &by_label, &refused] {
        apply(
            &client,
            ns,
            mirror("Secret", "mirror-secret", "default/source-secret", &shard),
        )
        .await;
        apply(
            &client,
            ns,
            mirror(
                "ConfigMap",
                "mirror-config-map",
                "default/source-config-map",
                &shard,
            ),
        )
        .await;
    }
    let secret_data_want = bytes(&[
        ("password", conflux_tests::leak::marker()),
        ("username", "fake-user"),
    ]);
    for ns in [&listed, &by_regex, &by_label] {
        wait_secret(&client, ns, "mirror-secret", &secret_data_want).await;
        wait_config_map(
            &client,
            ns,
            "mirror-config-map",
            &strings(&[("region", "eu-west-1")]),
        )
        .await;
        let s = secret(&client, ns, "mirror-secret").await.expect("mirror");
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        assert_eq!(
            annotation(&s.metadata, ALLOWED),
            None,
            "no source annotation copied"
        );
        let cm = config_map(&client, ns, "mirror-config-map")
            .await
            .expect("mirror");
        let binary = cm.binary_data.unwrap_or_default();
        assert_eq!(
            binary.get("logo.png").map(|b| b.0.clone()),
            Some(b"\x01PNG".to_vec())
        );
    }
    let note = expect_event(&client, &refused, "Secret", "mirror-secret", "Refused").await;
    assert!(note.contains(ALLOWED_NAMESPACES), "{note}");
    assert!(
        !note.contains(conflux_tests::leak::marker()),
        "Events never carry data"
    );
    let untouched = secret(&client, &refused, "mirror-secret")
        .await
        .expect("mirror");
    assert!(
        secret_data(&untouched).is_empty(),
        "nothing copied without consent"
    );

    // The source changes: every mirror follows (reflector tracks its version; conflux compares
    // content).
    apply(
        &client,
        "default",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "source-config-map", "annotations": consent},
            "data": {"region": "eu-central-1"},
        }),
    )
    .await;
    for ns in [&listed, &by_regex, &by_label] {
        wait_config_map(
            &client,
            ns,
            "mirror-config-map",
            &strings(&[("region", "eu-central-1")]),
        )
        .await;
    }
}

/// "Automatic mirror creation": `reflection-auto-enabled` with `reflection-auto-namespaces` (a
/// list) and its selector, both within `reflection-allowed-namespaces`. Then what reflector's users
/// report going wrong: a namespace created later gets its mirror (reflector #645: namespace events
/// during a watch restart were dropped), a mirror deleted by hand comes back (#324, #560), and a
/// conflicting object is skipped (as reflector does) but the mirror arrives once it is gone.
/// Differences on purpose: reflector deletes auto mirrors when the source or its annotation goes;
/// conflux keeps them (marked orphaned, or released).
#[tokio::test]
async fn readme_automatic_mirrors() {
    let (client, shard) = setup("reflector-auto").await;
    let c = cluster();
    let platform = namespace(c, &client, "reflector-platform", &[]).await;
    let team_a = named_namespace(&client, "reflector-team-a", &[]).await;
    let labelled = named_namespace(&client, "reflector-shop", &[("mirror", &shard)]).await;
    let not_allowed = named_namespace(&client, "reflector-other", &[("mirror", &shard)]).await;
    let _operator = Operator::start(c, &shard, &[&platform], 4).await;
    let source = |data: &str, annotations: Value| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "wildcard-tls", "labels": {SHARD: shard}, "annotations": annotations},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": b64(data), "tls.key": b64(conflux_tests::leak::marker())},
        })
    };
    let auto = json!({
        ALLOWED: "true",
        ALLOWED_NAMESPACES: "reflector-team-.*,reflector-shop",
        AUTO_ENABLED: "true",
        AUTO_NAMESPACES: "reflector-team-a,reflector-team-b",
        AUTO_SELECTOR: format!("mirror={shard}"),
    });
    apply(&client, &platform, source("cert-1", auto.clone())).await;
    let want = |crt: &str| bytes(&[("tls.crt", crt), ("tls.key", conflux_tests::leak::marker())]);
    for ns in [&team_a, &labelled] {
        wait_secret(&client, ns, "wildcard-tls", &want("cert-1")).await;
        let copy = secret(&client, ns, "wildcard-tls").await.expect("copy");
        assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(label(&copy.metadata, MANAGED_BY), Some("conflux"));
    }
    assert!(
        secret(&client, &not_allowed, "wildcard-tls")
            .await
            .is_none(),
        "selected for auto mirrors but not allowed: no mirror"
    );
    assert!(
        secret(&client, &platform, "wildcard-tls")
            .await
            .is_some_and(|s| secret_data(&s) == want("cert-1")),
        "the source itself is never a target"
    );

    // A namespace created later gets its mirror.
    let team_b = named_namespace(&client, "reflector-team-b", &[]).await;
    wait_secret(&client, &team_b, "wildcard-tls", &want("cert-1")).await;
    // A mirror deleted by hand comes back.
    Api::<Secret>::namespaced(client.clone(), &team_a)
        .delete("wildcard-tls", &DeleteParams::default())
        .await
        .expect("delete mirror");
    wait_secret(&client, &team_a, "wildcard-tls", &want("cert-1")).await;
    // The certificate is renewed: every mirror follows.
    apply(&client, &platform, source("cert-2", auto.clone())).await;
    for ns in [&team_a, &team_b, &labelled] {
        wait_secret(&client, ns, "wildcard-tls", &want("cert-2")).await;
    }

    // A conflicting object in a selected namespace is skipped (reflector skips it too), and the
    // mirror arrives once it is deleted, without a change of the source.
    let team_c = named_namespace(&client, "reflector-team-c", &[]).await;
    apply(
        &client,
        &team_c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wildcard-tls"},
               "data": {"mine": b64("someone else's")}}),
    )
    .await;
    let mut wider = auto.clone();
    wider[AUTO_NAMESPACES] = json!("reflector-team-.*");
    apply(&client, &platform, source("cert-2", wider.clone())).await;
    let note = expect_event(&client, &platform, "Secret", "wildcard-tls", "Conflict").await;
    assert!(note.contains(&team_c), "{note}");
    let theirs = secret(&client, &team_c, "wildcard-tls")
        .await
        .expect("theirs");
    assert_eq!(secret_data(&theirs), bytes(&[("mine", "someone else's")]));
    Api::<Secret>::namespaced(client.clone(), &team_c)
        .delete("wildcard-tls", &DeleteParams::default())
        .await
        .expect("delete the conflicting object");
    wait_secret(&client, &team_c, "wildcard-tls", &want("cert-2")).await;

    // A namespace leaving the selection loses its mirror (as in reflector).
    unlabel_namespace(&client, &labelled, "mirror").await;
    eventually(
        "the unselected namespace's mirror is pruned",
        WAIT,
        || async {
            secret(&client, &labelled, "wildcard-tls")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;

    // The source is deleted: reflector deletes its auto mirrors; conflux keeps them, marked
    // orphaned, so workloads using them keep running.
    Api::<Secret>::namespaced(client.clone(), &platform)
        .delete("wildcard-tls", &DeleteParams::default())
        .await
        .expect("delete source");
    for ns in [&team_a, &team_b, &team_c] {
        let kept = eventually(
            &format!("the mirror in {ns} is marked orphaned"),
            WAIT,
            || async {
                let s = secret(&client, ns, "wildcard-tls").await?;
                (annotation(&s.metadata, ORPHANED) == Some("true")).then_some(s)
            },
        )
        .await;
        assert_eq!(secret_data(&kept), want("cert-2"), "kept with its data");
    }
}

/// reflector's cert-manager example: a Certificate's `secretTemplate` puts `reflection-allowed:
/// "true"` and `reflection-allowed-namespaces: ""` (every namespace) on the TLS Secret, and a
/// mirror in any namespace reflects it. The mirror is the one reflector's issue #88 shows (a
/// `kubernetes.io/tls` Secret managed by Helm with placeholder keys). When Helm re-applies it, its
/// data goes back to the placeholders; reflector then skips it because its `reflected-version`
/// still matches the source (its README says to blank that annotation by hand). conflux compares
/// content, so the mirror is filled again.
#[tokio::test]
async fn readme_cert_manager_secret_template_and_reapplied_mirror() {
    let (client, shard) = setup("reflector-cert-manager").await;
    let c = cluster();
    let certs = namespace(c, &client, "certs", &[]).await;
    let app = namespace(c, &client, "app", &[]).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    apply(
        &client,
        &certs,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "letsencrypt-wildcard-cert", "annotations": {
                ALLOWED: "true",
                ALLOWED_NAMESPACES: "",
            }},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": b64("cert"), "tls.key": b64(conflux_tests::leak::marker())},
        }),
    )
    .await;
    let helm_mirror = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ingress-tls", "labels": {SHARD: shard}, "annotations": {
            REFLECTS: format!("{certs}/letsencrypt-wildcard-cert"),
        }},
        "type": "kubernetes.io/tls",
        "data": {"tls.key": "e30K", "tls.crt": "e30K"},
    });
    apply(&client, &app, helm_mirror.clone()).await;
    let want = bytes(&[
        ("tls.crt", "cert"),
        ("tls.key", conflux_tests::leak::marker()),
    ]);
    wait_secret(&client, &app, "ingress-tls", &want).await;
    let filled = secret(&client, &app, "ingress-tls").await.expect("mirror");

    // Helm upgrades the release: the mirror's data is the placeholders again.
    apply(&client, &app, helm_mirror).await;
    wait_secret(&client, &app, "ingress-tls", &want).await;
    let refilled = secret(&client, &app, "ingress-tls").await.expect("mirror");
    assert_eq!(
        filled.metadata.uid, refilled.metadata.uid,
        "the same object, patched"
    );
}

/// Switching from reflector: the auto mirrors reflector left (`auto-reflects: "True"`,
/// `reflects`, a stale `reflected-version`) are taken over and brought up to date, with no
/// Conflict; a direct mirror of the same source is a pull copy; a same-name object reflector did
/// not make is left alone.
#[tokio::test]
async fn switching_from_reflector_adopts_its_mirrors() {
    let (client, shard) = setup("reflector-switch").await;
    let c = cluster();
    let platform = namespace(c, &client, "switch-platform", &[]).await;
    let old = named_namespace(&client, "switch-team-a", &[]).await;
    let direct = named_namespace(&client, "switch-team-b", &[]).await;
    let foreign = named_namespace(&client, "switch-team-c", &[]).await;
    // What reflector left behind.
    apply(
        &client,
        &old,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "annotations": {
                AUTO_REFLECTS: "True",
                REFLECTS: format!("{platform}/cluster-info"),
                REFLECTED_VERSION: "12345",
            }},
            "data": {"region": "stale"},
        }),
    )
    .await;
    apply(
        &client,
        &direct,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "info-copy", "labels": {SHARD: shard}, "annotations": {
                REFLECTS: format!("{platform}/cluster-info"),
            }},
        }),
    )
    .await;
    apply(
        &client,
        &foreign,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"},
               "data": {"mine": "yes"}}),
    )
    .await;
    apply(
        &client,
        &platform,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "labels": {SHARD: shard}, "annotations": {
                ALLOWED: "true",
                ALLOWED_NAMESPACES: "switch-team-.*",
                AUTO_ENABLED: "true",
                AUTO_NAMESPACES: "switch-team-a,switch-team-c",
            }},
            "data": {"region": "eu-west-1"},
        }),
    )
    .await;
    let old_uid = config_map(&client, &old, "cluster-info")
        .await
        .and_then(|cm| cm.metadata.uid);
    let _operator = Operator::start(c, &shard, &[&platform], 4).await;
    let want = strings(&[("region", "eu-west-1")]);
    wait_config_map(&client, &old, "cluster-info", &want).await;
    wait_config_map(&client, &direct, "info-copy", &want).await;
    let adopted = config_map(&client, &old, "cluster-info")
        .await
        .expect("adopted");
    assert_eq!(
        adopted.metadata.uid, old_uid,
        "taken over in place, not re-created"
    );
    assert_eq!(label(&adopted.metadata, MANAGED_BY), Some("conflux"));
    let note = expect_event(&client, &platform, "ConfigMap", "cluster-info", "Conflict").await;
    assert!(
        note.contains(&foreign),
        "only the foreign object conflicts: {note}"
    );
    let theirs = config_map(&client, &foreign, "cluster-info")
        .await
        .expect("theirs");
    assert_eq!(cm_data(&theirs), strings(&[("mine", "yes")]));
}

/// Bad input: a malformed `reflects`, a regex that does not compile in the source's
/// `reflection-allowed-namespaces`, a non-boolean `reflection-auto-enabled`, and an auto source
/// outside the trusted namespaces. Each gets one Warning Event with a stable reason on the object
/// to fix, nothing is copied or pruned because of it, and Secret data never shows.
#[tokio::test]
async fn bad_annotations_are_reported_once_and_change_nothing() {
    let (client, shard) = setup("reflector-bad").await;
    let c = cluster();
    let src = namespace(c, &client, "bad-src", &[]).await;
    let dst = namespace(c, &client, "bad-dst", &[]).await;
    let untrusted = namespace(c, &client, "bad-untrusted", &[]).await;
    let operator = Operator::start(c, &shard, &[&src], 4).await;
    let secret_with = |name: &str, labels: Value, annotations: Value| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "data": {"token": b64(conflux_tests::leak::marker())},
        })
    };
    let objects = [
        (
            &src,
            secret_with(
                "bad-regex",
                json!({}),
                json!({ALLOWED: "true", ALLOWED_NAMESPACES: "bad-dst-[,("}),
            ),
        ),
        (
            &src,
            secret_with(
                "bad-bool",
                json!({SHARD: shard}),
                json!({ALLOWED: "true", AUTO_ENABLED: "yes"}),
            ),
        ),
        (
            &untrusted,
            secret_with(
                "planted",
                json!({SHARD: shard}),
                json!({ALLOWED: "true", AUTO_ENABLED: "true"}),
            ),
        ),
        (&dst, mirror("Secret", "malformed", "no-slash", &shard)),
        (
            &dst,
            mirror("Secret", "mirror", &format!("{src}/bad-regex"), &shard),
        ),
    ];
    for (ns, object) in objects {
        apply(&client, ns, object).await;
    }
    let cases = [
        (&dst, "malformed", "InvalidReference", REFLECTS),
        (&dst, "mirror", "InvalidPattern", ALLOWED_NAMESPACES),
        (&src, "bad-bool", "InvalidAnnotation", AUTO_ENABLED),
        (&untrusted, "planted", "Refused", "--sync-source-namespaces"),
    ];
    for (ns, name, reason, mentions) in cases {
        let note = expect_event(&client, ns, "Secret", name, reason).await;
        assert!(note.contains(mentions), "{name}: {note}");
        assert!(
            !note.contains(conflux_tests::leak::marker()),
            "{name}: no data"
        );
    }
    // Another change of each object is handled again, and reported no more.
    let seen = |op: &Operator| {
        (
            op.applies("copy", "InvalidReference"),
            op.applies("copy", "InvalidPattern"),
        )
    };
    let before = seen(&operator);
    for (ns, name, _, _) in cases {
        let mut touch = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name,
            "annotations": {"example.com/touched": "1"}}});
        touch["metadata"]["labels"] = json!({SHARD: shard});
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&touch),
            )
            .await
            .expect("touch");
    }
    eventually("both bad mirrors are reconciled again", WAIT, || async {
        let now = seen(&operator);
        (now.0 > before.0 && now.1 > before.1).then_some(())
    })
    .await;
    for (ns, name, reason, _) in cases {
        assert_eq!(
            warnings(&client, ns, "Secret", name, reason).await,
            1,
            "{name}: one Warning"
        );
    }
    let mirror = secret(&client, &dst, "mirror").await.expect("mirror");
    assert!(
        secret_data(&mirror).is_empty(),
        "nothing copied on a bad consent"
    );
    for ns in [&src, &dst] {
        assert!(
            secret(&client, ns, "planted").await.is_none(),
            "an untrusted auto source plants nothing"
        );
    }
    // The consent is fixed: the mirror is filled, from that change alone.
    apply(
        &client,
        &src,
        secret_with(
            "bad-regex",
            json!({}),
            json!({ALLOWED: "true", ALLOWED_NAMESPACES: "bad-dst-.*"}),
        ),
    )
    .await;
    wait_secret(
        &client,
        &dst,
        "mirror",
        &bytes(&[("token", conflux_tests::leak::marker())]),
    )
    .await;
}
