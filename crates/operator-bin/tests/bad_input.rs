//! The bad-input catalogue: careless or hostile objects next to good ones, against the real
//! `conflux run` (every controller, log level debug) on the real API server.
//!
//! Each case checks that the bad object gets a Warning Event with a stable reason (and a `Ready`
//! condition where it has status), exactly one `warn` log line with that `reason`, no repeat of
//! either while conflux keeps retrying, a bounded number of API requests (counted in the API
//! server's audit log), and that the good objects beside it keep being served. Every Secret holds
//! the leak marker; every case ends with the leak check over the log, Events, metrics and
//! statuses (see `conflux_tests::leak`).
//!
//! All cases share one conflux process; each has namespaces of its own.

mod bad_input_support;

use bad_input_support::*;
use serde_json::{Value, json};

const COPY_FROM: &str = "fluxcd.controlplane.io/copyFrom";
const ALLOW: &str = "copy.conflux.dev/allowed-namespaces";
const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
const REFLECTION_ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
const REFLECTION_ALLOWED_NAMESPACES: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
const REFLECTION_AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";

/// The request path of a namespaced object (to find requests about it in the audit log).
fn at(ns: &str, plural: &str, name: &str) -> String {
    format!("/namespaces/{ns}/{plural}/{name}")
}

/// A Secret source that consents to copies into `*`, and a good copy of it in `ns`: the good
/// neighbour of a copyFrom case.
async fn good_copy_neighbour(case: &Case, ns: &str) {
    case.secret(ns, "good-src", json!({"k": "v"}), json!({}))
        .await;
    case.secret(
        ns,
        "good-copy",
        json!({}),
        json!({"annotations": {COPY_FROM: format!("{ns}/good-src")}}),
    )
    .await;
}

async fn assert_good_copy_served(case: &Case, ns: &str) {
    case.wait_for(
        "the good copy beside the bad one is served",
        ("v1", "Secret", Some(ns), "good-copy"),
        |s| s["data"]["k"] == conflux_tests::leak::base64(b"v"),
    )
    .await;
}

/// A ConfigMap target whose copyFrom value is malformed.
async fn malformed_copy_from(name: &str, value: &str) {
    let case = Case::new(name).await;
    let ns = case.ns.clone();
    good_copy_neighbour(&case, &ns).await;
    case.config_map(
        &ns,
        "bad",
        json!({}),
        json!({"annotations": {COPY_FROM: value}}),
    )
    .await;
    let note = case
        .expect_warning(&ns, "ConfigMap", "bad", "InvalidCopyFrom")
        .await;
    assert!(
        note.contains("must be in the format 'namespace/name'"),
        "{note}"
    );
    let requests = case
        .assert_reported_once(
            (&ns, "ConfigMap", "bad"),
            "InvalidCopyFrom",
            &format!("{ns}/bad"),
            &[at(&ns, "configmaps", "bad")],
        )
        .await;
    // Found without asking the API server: no retry at all.
    assert_eq!(requests, 0, "requests about a malformed copyFrom");
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_without_a_slash() {
    malformed_copy_from("cf-nope", "nope").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_with_a_path() {
    malformed_copy_from("cf-path", "../x/y/z").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_empty() {
    malformed_copy_from("cf-empty", "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_300_characters() {
    let value = format!("{}/{}", "n".repeat(150), "x".repeat(149));
    malformed_copy_from("cf-long", &value).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_itself() {
    let case = Case::new("cf-self").await;
    let ns = case.ns.clone();
    good_copy_neighbour(&case, &ns).await;
    case.secret(
        &ns,
        "me",
        json!({}),
        json!({"annotations": {COPY_FROM: format!("{ns}/me")}}),
    )
    .await;
    let note = case
        .expect_warning(&ns, "Secret", "me", "SelfReference")
        .await;
    assert!(note.contains("names the object itself"), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "Secret", "me"),
            "SelfReference",
            &format!("{ns}/me"),
            &[at(&ns, "secrets", "me")],
        )
        .await;
    assert_eq!(requests, 0);
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_a_source_of_the_other_kind() {
    let case = Case::new("cf-kind").await;
    let ns = case.ns.clone();
    good_copy_neighbour(&case, &ns).await;
    // A ConfigMap asking for `good-src`, which exists only as a Secret.
    case.config_map(
        &ns,
        "wrong-kind",
        json!({}),
        json!({"annotations": {COPY_FROM: format!("{ns}/good-src")}}),
    )
    .await;
    let note = case
        .expect_warning(&ns, "ConfigMap", "wrong-kind", "SourceNotFound")
        .await;
    assert!(note.contains("configmaps \"good-src\" not found"), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "ConfigMap", "wrong-kind"),
            "SourceNotFound",
            &format!("{ns}/wrong-kind"),
            &[
                at(&ns, "configmaps", "wrong-kind"),
                at(&ns, "configmaps", "good-src"),
            ],
        )
        .await;
    // One read of the source per retry: 1 s, 2 s and 4 s after the first failure, so 3 in the
    // window (4 allowed: a watch event of the object may add one reconcile).
    assert!(requests <= 4, "{requests} requests in {SETTLE:?}");
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_a_namespace_that_did_not_consent() {
    let case = Case::new("cf-consent").await;
    let ns = case.ns.clone();
    let other = case.namespace("other", json!({})).await;
    good_copy_neighbour(&case, &ns).await;
    case.secret(&other, "private", json!({}), json!({})).await;
    case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "steal", "namespace": ns,
                                   "annotations": {COPY_FROM: format!("{other}/private")}}}))
        .await;
    let note = case.expect_warning(&ns, "Secret", "steal", "Refused").await;
    assert!(note.contains(&other), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "Secret", "steal"),
            "Refused",
            &format!("{ns}/steal"),
            &[
                at(&ns, "secrets", "steal"),
                at(&other, "secrets", "private"),
            ],
        )
        .await;
    assert!(requests <= 4, "{requests} requests in {SETTLE:?}");
    // Nothing was copied.
    let stolen = case
        .get("v1", "Secret", Some(&ns), "steal")
        .await
        .expect("target");
    assert!(
        stolen["data"].get("leak-raw").is_none(),
        "data copied without consent"
    );
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns, &other]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_into_an_immutable_target_recreates_it() {
    let case = Case::new("cf-immutable").await;
    let ns = case.ns.clone();
    case.secret(&ns, "src", json!({"k": "v1"}), json!({})).await;
    case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "frozen", "namespace": ns,
                                   "annotations": {COPY_FROM: format!("{ns}/src")}},
                      "immutable": true, "stringData": {"k": "old"}}))
        .await;
    let copied = case
        .wait_for(
            "the immutable target recreated with the source's data",
            ("v1", "Secret", Some(&ns), "frozen"),
            |s| s["data"]["k"] == conflux_tests::leak::base64(b"v1"),
        )
        .await;
    assert_eq!(copied["immutable"], true, "still immutable");
    assert_eq!(
        copied["metadata"]["annotations"][COPY_FROM],
        format!("{ns}/src")
    );
    case.assert_no_warning(&ns, "Secret", "frozen").await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_target_deleted_between_read_and_write_is_not_resurrected() {
    let case = Case::new("cf-deleted").await;
    let ns = case.ns.clone();
    case.secret(&ns, "src", json!({"k": "v"}), json!({})).await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(case.client.clone(), &ns);
    // Targets deleted right after they are created, while conflux reads and writes them.
    for i in 0..30 {
        let name = format!("gone-{i}");
        case.secret(
            &ns,
            &name,
            json!({}),
            json!({"annotations": {COPY_FROM: format!("{ns}/src")}}),
        )
        .await;
        if i % 3 != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(i * 7)).await;
        }
        let _ = secrets.delete(&name, &Default::default()).await;
    }
    // And a source deleted while its copies are written.
    case.secret(&ns, "src2", json!({"k": "v"}), json!({})).await;
    for i in 0..10 {
        case.secret(
            &ns,
            &format!("orphan-{i}"),
            json!({}),
            json!({"annotations": {COPY_FROM: format!("{ns}/src2")}}),
        )
        .await;
    }
    let _ = secrets.delete("src2", &Default::default()).await;
    good_copy_neighbour(&case, &ns).await;
    assert_good_copy_served(&case, &ns).await;
    tokio::time::sleep(SETTLE).await;
    for i in 0..30 {
        let name = format!("gone-{i}");
        assert!(
            case.get("v1", "Secret", Some(&ns), &name).await.is_none(),
            "{name} was deleted but written again"
        );
    }
    case.assert_no_leak(&[&ns]).await;
}

// ---------------------------------------------------------------------------------------------
// ConfigSync

/// A ConfigSync (cluster-scoped) named `name` fanning `source` out to namespaces labelled
/// `tenant: <case namespace>`, with `extra` merged into its spec's target.
fn config_sync(
    name: &str,
    kind: &str,
    src_ns: &str,
    src: &str,
    tenant: &str,
    extra: Value,
) -> Value {
    let mut target = json!({"namespaceSelector": {"matchLabels": {"conflux-bad/tenant": tenant}}});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            target[k] = v.clone();
        }
    }
    json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
           "metadata": {"name": name},
           "spec": {"source": {"kind": kind, "namespace": src_ns, "name": src}, "target": target}})
}

/// Two tenant namespaces and a good ConfigSync fanning a Secret into them: the good neighbour.
async fn good_sync_neighbour(case: &Case) -> (String, Vec<String>) {
    let tenants = vec![
        case.namespace("t1", json!({"conflux-bad/tenant": case.ns}))
            .await,
        case.namespace("t2", json!({"conflux-bad/tenant": case.ns}))
            .await,
    ];
    case.secret(&case.ns, "shared", json!({"k": "v"}), json!({}))
        .await;
    let name = format!("{}-good", case.ns);
    case.apply(config_sync(
        &name,
        "Secret",
        &case.ns,
        "shared",
        &case.ns,
        json!({}),
    ))
    .await;
    (name, tenants)
}

async fn assert_fanned_out(case: &Case, tenants: &[String], name: &str) {
    for ns in tenants {
        case.wait_for(
            &format!("the copy of {name} in {ns}"),
            ("v1", "Secret", Some(ns), name),
            |s| s["data"]["k"] == conflux_tests::leak::base64(b"v"),
        )
        .await;
    }
}

async fn assert_sync_ready(case: &Case, name: &str) {
    case.wait_for(
        &format!("ConfigSync {name} Ready"),
        ("conflux.dev/v1alpha1", "ConfigSync", None, name),
        |cs| ready(cs).is_some_and(|(status, _)| status == "True"),
    )
    .await;
}

async fn bad_selector(case_name: &str, selector: Value) {
    let case = Case::new(case_name).await;
    let (good, tenants) = good_sync_neighbour(&case).await;
    let name = format!("{}-bad", case.ns);
    case.secret(&case.ns, "bad-src", json!({}), json!({})).await;
    let mut cs = config_sync(&name, "Secret", &case.ns, "bad-src", &case.ns, json!({}));
    cs["spec"]["target"]["namespaceSelector"] = selector;
    case.apply(cs).await;
    let note = case
        .expect_warning("default", "ConfigSync", &name, "InvalidSelector")
        .await;
    assert!(note.contains("invalid namespace selector"), "{note}");
    case.wait_for(
        "Ready=False InvalidSpec",
        ("conflux.dev/v1alpha1", "ConfigSync", None, &name),
        |cs| ready(cs) == Some(("False".to_owned(), "InvalidSpec".to_owned())),
    )
    .await;
    let requests = case
        .assert_reported_once(
            ("default", "ConfigSync", &name),
            "InvalidSelector",
            &name,
            &[name.clone(), at(&case.ns, "secrets", "bad-src")],
        )
        .await;
    assert_eq!(requests, 0, "requests about an invalid selector");
    assert_fanned_out(&case, &tenants, "shared").await;
    assert_sync_ready(&case, &good).await;
    case.assert_no_leak(&[&case.ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_selector_with_an_invalid_operator() {
    bad_selector(
        "cs-operator",
        json!({"matchExpressions": [{"key": "team", "operator": "Near", "values": ["a"]}]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_selector_with_an_invalid_value() {
    bad_selector(
        "cs-value",
        json!({"matchLabels": {"team": "not a valid label value!"}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_source_that_does_not_exist() {
    let case = Case::new("cs-missing").await;
    let (good, tenants) = good_sync_neighbour(&case).await;
    let name = format!("{}-missing", case.ns);
    case.apply(config_sync(
        &name,
        "Secret",
        &case.ns,
        "nowhere",
        &case.ns,
        json!({}),
    ))
    .await;
    let note = case
        .expect_warning("default", "ConfigSync", &name, "SourceNotFound")
        .await;
    assert!(note.contains("\"nowhere\" not found"), "{note}");
    case.wait_for(
        "Ready=False SourceNotFound",
        ("conflux.dev/v1alpha1", "ConfigSync", None, &name),
        |cs| ready(cs) == Some(("False".to_owned(), "SourceNotFound".to_owned())),
    )
    .await;
    let requests = case
        .assert_reported_once(
            ("default", "ConfigSync", &name),
            "SourceNotFound",
            &name,
            &[name.clone(), at(&case.ns, "secrets", "nowhere")],
        )
        .await;
    // Waits for the source to appear (the watch sees it) instead of polling for it. The one
    // reconcile that its own status write (Ready=False) sets off reads the source once more and
    // lists its copies: on a loaded machine it can land after the first report (seen in a cold CI
    // run), so the bound is that one reconcile's two requests, never a retry loop.
    assert!(requests <= 2, "{requests} requests in {SETTLE:?}");
    assert_fanned_out(&case, &tenants, "shared").await;
    assert_sync_ready(&case, &good).await;
    // The source appears: served without any other change.
    case.secret(&case.ns, "nowhere", json!({"k": "v"}), json!({}))
        .await;
    assert_fanned_out(&case, &tenants, "nowhere").await;
    assert_sync_ready(&case, &name).await;
    case.assert_no_leak(&[&case.ns, &tenants[0], &tenants[1]])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_source_in_an_excluded_namespace() {
    let case = Case::new("cs-excluded").await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    // The source's own namespace is excluded (and selected): copies go everywhere else.
    case.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": case.ns, "labels": {"conflux-bad/tenant": case.ns}}}))
        .await;
    let name = format!("{}-excl", case.ns);
    case.secret(&case.ns, "excl", json!({"k": "v"}), json!({}))
        .await;
    case.apply(config_sync(
        &name,
        "Secret",
        &case.ns,
        "excl",
        &case.ns,
        json!({"name": "excl-copy", "excludeNamespaces": [case.ns]}),
    ))
    .await;
    assert_fanned_out(&case, &tenants, "excl-copy").await;
    assert_sync_ready(&case, &name).await;
    assert!(
        case.get("v1", "Secret", Some(&case.ns), "excl-copy")
            .await
            .is_none(),
        "no copy in an excluded namespace"
    );
    case.assert_no_warning("default", "ConfigSync", &name).await;
    case.assert_no_leak(&[&case.ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kopy_source_in_an_untrusted_namespace_is_refused() {
    let case = Case::new("kopy-untrusted").await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    case.secret(&case.ns, "kopy", json!({}), json!({"annotations": {"kopy.kot-labs.com/sync": format!("conflux-bad/tenant={}", case.ns)}}))
        .await;
    let note = case
        .expect_warning(&case.ns, "Secret", "kopy", "Refused")
        .await;
    assert!(note.contains("--sync-source-namespaces"), "{note}");
    let requests = case
        .assert_reported_once(
            (&case.ns, "Secret", "kopy"),
            "Refused",
            &format!("{}/kopy", case.ns),
            &[
                at(&case.ns, "secrets", "kopy"),
                "source-name%3Dkopy".to_owned(),
            ],
        )
        .await;
    assert_eq!(requests, 0);
    for ns in &tenants {
        assert!(
            case.get("v1", "Secret", Some(ns), "kopy").await.is_none(),
            "copied from an untrusted namespace"
        );
    }
    assert_fanned_out(&case, &tenants, "shared").await;
    case.assert_no_leak(&[&case.ns]).await;
}

/// A Secret target with a pull annotation (reflector's, replicator's) that is not
/// `namespace/name`, or two naming different sources: reported without asking the API server.
async fn malformed_pull(name: &str, annotations: Value, reason: &str, says: &str) {
    let case = Case::new(name).await;
    let ns = case.ns.clone();
    good_copy_neighbour(&case, &ns).await;
    case.secret(&ns, "bad", json!({}), json!({"annotations": annotations}))
        .await;
    let note = case.expect_warning(&ns, "Secret", "bad", reason).await;
    assert!(note.contains(says), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "Secret", "bad"),
            reason,
            &format!("{ns}/bad"),
            &[at(&ns, "secrets", "bad")],
        )
        .await;
    assert_eq!(requests, 0, "requests about a malformed pull annotation");
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflects_without_a_slash() {
    malformed_pull(
        "rf-nope",
        json!({REFLECTS: "nope"}),
        "InvalidReference",
        "which is not 'namespace/name'",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicate_from_with_a_path() {
    malformed_pull(
        "rp-path",
        json!({REPLICATE_FROM: "a/b/c"}),
        "InvalidReference",
        REPLICATE_FROM,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_annotations_naming_different_sources() {
    malformed_pull(
        "pull-two",
        json!({REFLECTS: "a/one", REPLICATE_FROM: "a/two"}),
        "ConflictingSources",
        "name different sources",
    )
    .await;
}

/// A mirror whose source consents with a reflector namespace list that does not compile: reported
/// on the mirror once, after the one read of the source, and nothing is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_consent_with_a_regex_that_does_not_compile() {
    let case = Case::new("rf-regex").await;
    let ns = case.ns.clone();
    let other = case.namespace("src", json!({})).await;
    good_copy_neighbour(&case, &ns).await;
    case.secret(
        &other,
        "cert",
        json!({}),
        json!({"annotations": {REFLECTION_ALLOWED: "true", REFLECTION_ALLOWED_NAMESPACES: "rf-regex-[,("}}),
    )
    .await;
    case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "mirror", "namespace": ns,
                                   "annotations": {REFLECTS: format!("{other}/cert")}}}))
        .await;
    let note = case
        .expect_warning(&ns, "Secret", "mirror", "InvalidPattern")
        .await;
    assert!(note.contains(REFLECTION_ALLOWED_NAMESPACES), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "Secret", "mirror"),
            "InvalidPattern",
            &format!("{ns}/mirror"),
            &[at(&ns, "secrets", "mirror"), at(&other, "secrets", "cert")],
        )
        .await;
    // An input problem: not retried until the source (or the mirror) changes.
    assert_eq!(requests, 0, "requests after the first report");
    let mirror = case
        .get("v1", "Secret", Some(&ns), "mirror")
        .await
        .expect("mirror");
    assert!(
        mirror.get("data").is_none(),
        "nothing copied on a bad consent"
    );
    assert_good_copy_served(&case, &ns).await;
    case.assert_no_leak(&[&ns, &other]).await;
}

/// A fan-out source (in the trusted namespace) whose reflector or replicator annotation is
/// malformed: reported on the source without asking the API server; nothing is copied, and the
/// good ConfigSync beside it keeps being served.
async fn malformed_fan_out(name: &str, annotations: Value, reason: &str, says: &str) {
    let case = Case::new(name).await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    let trusted = trusted_namespace();
    let source = format!("{name}-src");
    case.secret(
        &trusted,
        &source,
        json!({}),
        json!({"annotations": annotations}),
    )
    .await;
    let note = case
        .expect_warning(&trusted, "Secret", &source, reason)
        .await;
    assert!(note.contains(says), "{note}");
    let requests = case
        .assert_reported_once(
            (&trusted, "Secret", &source),
            reason,
            &format!("{trusted}/{source}"),
            &[
                at(&trusted, "secrets", &source),
                format!("source-name%3D{source}"),
            ],
        )
        .await;
    assert_eq!(requests, 0);
    for ns in &tenants {
        assert!(
            case.get("v1", "Secret", Some(ns), &source).await.is_none(),
            "copied from a malformed annotation"
        );
    }
    assert_fanned_out(&case, &tenants, "shared").await;
    case.assert_no_leak(&[&case.ns, &trusted]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicate_to_with_a_regex_that_does_not_compile() {
    malformed_fan_out(
        "rp-regex",
        json!({REPLICATE_TO: "conflux-bad-[,("}),
        "InvalidPattern",
        REPLICATE_TO,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicate_to_matching_with_a_bad_selector() {
    malformed_fan_out(
        "rp-selector",
        json!({REPLICATE_TO_MATCHING: "team in (a"}),
        "InvalidSelector",
        REPLICATE_TO_MATCHING,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_auto_enabled_maybe() {
    malformed_fan_out(
        "rf-maybe",
        json!({REFLECTION_ALLOWED: "true", REFLECTION_AUTO_ENABLED: "maybe"}),
        "InvalidAnnotation",
        REFLECTION_AUTO_ENABLED,
    )
    .await;
}

/// reflector's auto mirrors and replicator's push from a namespace the operator does not trust:
/// refused like kopy's, so no tenant plants objects in every namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_and_replicator_sources_in_an_untrusted_namespace_are_refused() {
    let case = Case::new("peers-untrusted").await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    let sources = [
        (
            "auto",
            json!({REFLECTION_ALLOWED: "true", REFLECTION_AUTO_ENABLED: "true"}),
        ),
        ("push", json!({REPLICATE_TO: ".*"})),
    ];
    for (name, annotations) in &sources {
        case.secret(
            &case.ns,
            name,
            json!({}),
            json!({"annotations": annotations}),
        )
        .await;
    }
    for (name, _) in &sources {
        let note = case
            .expect_warning(&case.ns, "Secret", name, "Refused")
            .await;
        assert!(note.contains("--sync-source-namespaces"), "{note}");
        let requests = case
            .assert_reported_once(
                (&case.ns, "Secret", name),
                "Refused",
                &format!("{}/{name}", case.ns),
                &[
                    at(&case.ns, "secrets", name),
                    format!("source-name%3D{name}"),
                ],
            )
            .await;
        assert_eq!(requests, 0);
        for ns in &tenants {
            assert!(
                case.get("v1", "Secret", Some(ns), name).await.is_none(),
                "copied from an untrusted namespace"
            );
        }
    }
    assert_fanned_out(&case, &tenants, "shared").await;
    case.assert_no_leak(&[&case.ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_with_10k_excluded_namespaces() {
    let case = Case::new("cs-10k").await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    let name = format!("{}-10k", case.ns);
    let mut exclude: Vec<String> = (0..10_000).map(|i| format!("nobody-{i}-*")).collect();
    exclude.push(tenants[1].clone());
    case.apply(config_sync(
        &name,
        "Secret",
        &case.ns,
        "shared",
        &case.ns,
        json!({"name": "many", "excludeNamespaces": exclude}),
    ))
    .await;
    assert_fanned_out(&case, &tenants[..1], "many").await;
    assert_sync_ready(&case, &name).await;
    assert!(
        case.get("v1", "Secret", Some(&tenants[1]), "many")
            .await
            .is_none(),
        "excluded"
    );
    case.assert_no_warning("default", "ConfigSync", &name).await;
    case.assert_no_leak(&[&case.ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_with_a_253_character_name() {
    let case = Case::new("cs-253").await;
    let (_, tenants) = good_sync_neighbour(&case).await;
    let prefix = format!("{}-", case.ns);
    let name = format!("{prefix}{}", "n".repeat(253 - prefix.len()));
    assert_eq!(name.len(), 253);
    case.apply(config_sync(
        &name,
        "Secret",
        &case.ns,
        "shared",
        &case.ns,
        json!({"name": "long"}),
    ))
    .await;
    assert_fanned_out(&case, &tenants, "long").await;
    assert_sync_ready(&case, &name).await;
    case.assert_no_warning("default", "ConfigSync", &name).await;
    // Deleting it applies its deletion policy (orphan by default) to the copies it owns.
    let api: kube::Api<conflux_copy_core::ConfigSync> = kube::Api::all(case.client.clone());
    api.delete(&name, &Default::default())
        .await
        .expect("delete");
    conflux_tests::eventually(
        "the long-named ConfigSync gone",
        std::time::Duration::from_secs(60),
        || async {
            api.get_opt(&name)
                .await
                .ok()
                .and_then(|o| o.is_none().then_some(()))
        },
    )
    .await;
    case.assert_no_leak(&[&case.ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sync_target_namespace_deleted_while_selected() {
    let case = Case::new("cs-nsgone").await;
    let (good, tenants) = good_sync_neighbour(&case).await;
    assert_fanned_out(&case, &tenants, "shared").await;
    case.delete_namespace(&tenants[1]).await;
    // A change after the deletion still reaches the namespace that remains.
    case.secret(&case.ns, "shared", json!({"k": "v2"}), json!({}))
        .await;
    case.wait_for(
        "the change reaches the remaining namespace",
        ("v1", "Secret", Some(&tenants[0]), "shared"),
        |s| s["data"]["k"] == conflux_tests::leak::base64(b"v2"),
    )
    .await;
    assert_sync_ready(&case, &good).await;
    tokio::time::sleep(SETTLE).await;
    case.assert_no_warning("default", "ConfigSync", &good).await;
    case.assert_no_leak(&[&case.ns]).await;
}

// ---------------------------------------------------------------------------------------------
// Reload annotations

/// A Deployment `name` reading ConfigMap `cm` through `envFrom`, with `annotations`.
fn deployment(ns: &str, name: &str, cm: &str, annotations: Value, env: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": ns, "annotations": annotations},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                          "envFrom": [{"configMapRef": {"name": cm}}],
                                                          "env": env}]}}}})
}

fn template_hash(d: &Value) -> Option<String> {
    d["spec"]["template"]["metadata"]["annotations"]["conflux.dev/config-hash"]
        .as_str()
        .map(str::to_owned)
}

/// A good opted-in Deployment and its ConfigMap; returns after its baseline is remembered.
async fn good_reload_neighbour(case: &Case) {
    case.config_map(&case.ns, "good-cfg", json!({"v": "1"}), json!({}))
        .await;
    case.apply(deployment(
        &case.ns,
        "good",
        "good-cfg",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    ))
    .await;
    case.wait_remembered(
        "the good Deployment's baseline",
        ("Deployment", &case.ns, "good"),
    )
    .await;
}

async fn assert_good_reload_served(case: &Case) {
    case.config_map(&case.ns, "good-cfg", json!({"v": "2"}), json!({}))
        .await;
    case.wait_for(
        "the good Deployment rolls",
        ("apps/v1", "Deployment", Some(&case.ns), "good"),
        |d| template_hash(d).is_some(),
    )
    .await;
}

async fn bad_reload_annotation(case_name: &str, annotations: Value, reason: &str, says: &str) {
    let case = Case::new(case_name).await;
    let ns = case.ns.clone();
    good_reload_neighbour(&case).await;
    case.config_map(&ns, "cfg", json!({"v": "1"}), json!({}))
        .await;
    case.apply(deployment(&ns, "bad", "cfg", annotations, json!([])))
        .await;
    let note = case.expect_warning(&ns, "Deployment", "bad", reason).await;
    assert!(note.contains(says), "{note}");
    let requests = case
        .assert_reported_once(
            (&ns, "Deployment", "bad"),
            reason,
            &format!("{ns}/bad"),
            &[at(&ns, "deployments", "bad")],
        )
        .await;
    assert!(requests <= 1, "{requests} requests in {SETTLE:?}");
    assert_good_reload_served(&case).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_list_with_a_regex_that_does_not_compile() {
    bad_reload_annotation(
        "rl-regex",
        json!({"configmap.reloader.stakater.com/reload": "cfg,bad-[(,other"}),
        "InvalidPattern",
        "bad-[(",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_auto_maybe() {
    bad_reload_annotation(
        "rl-maybe",
        json!({"reloader.stakater.com/auto": "maybe"}),
        "InvalidAnnotation",
        "\"maybe\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_debounce_that_is_not_a_duration() {
    bad_reload_annotation(
        "rl-debounce",
        json!({"reloader.stakater.com/auto": "true", "conflux.dev/reload-debounce": "soon"}),
        "InvalidAnnotation",
        "\"soon\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_pause_period_that_is_negative() {
    bad_reload_annotation(
        "rl-pause",
        json!({"reloader.stakater.com/auto": "true",
               "deployment.reloader.stakater.com/pause-period": "-5m"}),
        "InvalidAnnotation",
        "\"-5m\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_auto_with_odd_case_and_whitespace() {
    bad_reload_annotation(
        "rl-case",
        json!({"reloader.stakater.com/auto": " True "}),
        "InvalidAnnotation",
        "\" True \"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_consumer_of_a_missing_key_still_rolls() {
    let case = Case::new("rl-key").await;
    let ns = case.ns.clone();
    case.config_map(&ns, "cfg", json!({"present": "1"}), json!({}))
        .await;
    let env = json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "absent", "optional": true}}}]);
    case.apply(deployment(
        &ns,
        "web",
        "cfg",
        json!({"reloader.stakater.com/auto": "true"}),
        env,
    ))
    .await;
    case.wait_remembered("baseline", ("Deployment", &ns, "web"))
        .await;
    // The key appears: what the pod reads changed, so it rolls.
    case.config_map(
        &ns,
        "cfg",
        json!({"present": "1", "absent": "now"}),
        json!({}),
    )
    .await;
    case.wait_for("rolled", ("apps/v1", "Deployment", Some(&ns), "web"), |d| {
        template_hash(d).is_some()
    })
    .await;
    case.assert_no_warning(&ns, "Deployment", "web").await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_of_a_batch_v1_cron_job_whose_version_is_discovered() {
    // The served CronJob version (batch/v1 on current Kubernetes; batch/v1beta1 before 1.21) is
    // discovered, said once, and a CronJob rolls.
    let case = Case::new("rl-kind").await;
    let ns = case.ns.clone();
    good_reload_neighbour(&case).await;
    let lines = case.log_lines(|l| l["message"] == "reload: watching" && l["kind"] == "CronJob");
    assert_eq!(lines.len(), 1, "said once: {lines:?}");
    assert_eq!(lines[0]["version"], "v1");
    case.config_map(&ns, "job-cfg", json!({"v": "1"}), json!({}))
        .await;
    case.apply(json!({"apiVersion": "batch/v1", "kind": "CronJob",
                      "metadata": {"name": "nightly", "namespace": ns,
                                   "annotations": {"reloader.stakater.com/auto": "true"}},
                      "spec": {"schedule": "0 3 * * *", "suspend": true,
                               "jobTemplate": {"spec": {"template": {"spec": {
                                   "restartPolicy": "Never",
                                   "containers": [{"name": "job", "image": "registry.invalid/job:1",
                                                   "envFrom": [{"configMapRef": {"name": "job-cfg"}}]}]}}}}}}))
        .await;
    case.wait_remembered("the CronJob's baseline", ("CronJob", &ns, "nightly"))
        .await;
    case.config_map(&ns, "job-cfg", json!({"v": "2"}), json!({}))
        .await;
    case.wait_for("the CronJob rolls", ("batch/v1", "CronJob", Some(&ns), "nightly"), |c| {
        c["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"]["conflux.dev/config-hash"].is_string()
    })
    .await;
    case.assert_no_warning(&ns, "CronJob", "nightly").await;
    assert_good_reload_served(&case).await;
    case.assert_no_leak(&[&ns]).await;
}

// ---------------------------------------------------------------------------------------------
// flux-trigger

fn kustomization(ns: &str, name: &str, substitute_from: Value, annotations: Value) -> Value {
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
           "metadata": {"name": name, "namespace": ns, "annotations": annotations},
           "spec": {"interval": "10m", "path": "./", "prune": true,
                    "sourceRef": {"kind": "GitRepository", "name": "repo"},
                    "postBuild": {"substituteFrom": substitute_from}}})
}

fn requested_at(k: &Value) -> Option<String> {
    k["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
        .as_str()
        .map(str::to_owned)
}

/// A watched ConfigMap `vars` and a Kustomization `good` substituting from it; returns once the
/// baseline is recorded.
async fn good_trigger_neighbour(case: &Case, ns: &str) {
    case.config_map(
        ns,
        "vars",
        json!({"v": "1"}),
        json!({"labels": {"reconcile.fluxcd.io/watch": "Enabled"}}),
    )
    .await;
    case.apply(kustomization(
        ns,
        "good",
        json!([{"kind": "ConfigMap", "name": "vars"}]),
        json!({}),
    ))
    .await;
    case.wait_for(
        "the good Kustomization's baseline",
        (
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(ns),
            "good",
        ),
        |k| k["metadata"]["annotations"]["trigger.conflux.dev/observed-configs"].is_string(),
    )
    .await;
}

async fn assert_good_trigger_served(case: &Case, ns: &str) {
    case.config_map(
        ns,
        "vars",
        json!({"v": "2"}),
        json!({"labels": {"reconcile.fluxcd.io/watch": "Enabled"}}),
    )
    .await;
    case.wait_for(
        "the good Kustomization is asked to reconcile",
        (
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(ns),
            "good",
        ),
        |k| requested_at(k).is_some(),
    )
    .await;
}

/// Server-side applies `object` once and returns the API server's refusal (panics when it is
/// accepted).
async fn refused_by_the_api_server(case: &Case, object: &Value) -> String {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    );
    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(case.client.clone(), ns, &ar);
    match api
        .patch(
            name,
            &kube::api::PatchParams::apply(MANAGER),
            &kube::api::Patch::Apply(object),
        )
        .await
    {
        Ok(_) => panic!("the API server accepted {object}"),
        Err(err) => err.to_string(),
    }
}

// Flux's real Kustomization CRD validates `substituteFrom` (a list of objects with `kind`
// ConfigMap or Secret and a non-empty `name`), so malformed references never reach conflux on a
// cluster with Flux's CRDs; conflux's own parsing of them (InvalidReference) is covered by the
// hostile-input property tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomization_with_malformed_substitute_from_is_refused_by_fluxs_schema() {
    let case = Case::new("ft-malformed").await;
    let ns = case.ns.clone();
    good_trigger_neighbour(&case, &ns).await;
    for refs in [
        json!([{"kind": "ConfigMap"}]),
        json!([{"kind": "Pod", "name": "x"}]),
        json!([7]),
        json!([{"kind": "ConfigMap", "name": ""}]),
    ] {
        let message =
            refused_by_the_api_server(&case, &kustomization(&ns, "bad", refs.clone(), json!({})))
                .await;
        assert!(message.contains("substituteFrom"), "{refs}: {message}");
    }
    assert_good_trigger_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomization_with_substitute_from_not_a_list_is_refused_by_fluxs_schema() {
    let case = Case::new("ft-notlist").await;
    let ns = case.ns.clone();
    good_trigger_neighbour(&case, &ns).await;
    let object = kustomization(
        &ns,
        "bad",
        json!({"kind": "ConfigMap", "name": "vars"}),
        json!({}),
    );
    let message = refused_by_the_api_server(&case, &object).await;
    assert!(message.contains("substituteFrom"), "{message}");
    assert_good_trigger_served(&case, &ns).await;
    case.assert_no_leak(&[&ns]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_annotations_are_refused_by_the_api_server_or_served() {
    let case = Case::new("ft-huge").await;
    let ns = case.ns.clone();
    // 1 MiB: the API server refuses annotations over 256 KiB in all, before conflux sees them.
    let client = case.client.clone();
    let huge = kustomization(&ns, "huge", json!([]), json!({"blob": "x".repeat(1 << 20)}));
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    );
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client, &ns, &ar);
    let refused = api
        .patch(
            "huge",
            &kube::api::PatchParams::apply(MANAGER),
            &kube::api::Patch::Apply(&huge),
        )
        .await;
    assert!(
        refused.is_err(),
        "a 1 MiB annotation is refused by the API server"
    );
    // Just under the limit, on the Kustomization and on the watched ConfigMap: served.
    let blob = "y".repeat(250 * 1024);
    case.config_map(
        &ns,
        "vars",
        json!({"v": "1"}),
        json!({"labels": {"reconcile.fluxcd.io/watch": "Enabled"}, "annotations": {"blob": blob}}),
    )
    .await;
    case.apply(kustomization(
        &ns,
        "good",
        json!([{"kind": "ConfigMap", "name": "vars"}]),
        json!({"blob": blob}),
    ))
    .await;
    case.wait_for(
        "baseline",
        (
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(&ns),
            "good",
        ),
        |k| k["metadata"]["annotations"]["trigger.conflux.dev/observed-configs"].is_string(),
    )
    .await;
    case.config_map(
        &ns,
        "vars",
        json!({"v": "2"}),
        json!({"labels": {"reconcile.fluxcd.io/watch": "Enabled"}, "annotations": {"blob": blob}}),
    )
    .await;
    case.wait_for(
        "triggered",
        (
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(&ns),
            "good",
        ),
        |k| requested_at(k).is_some(),
    )
    .await;
    case.assert_no_warning(&ns, "Kustomization", "good").await;
    case.assert_no_leak(&[&ns]).await;
}

// ---------------------------------------------------------------------------------------------
// Data

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_binary_and_non_utf8_data_is_copied_byte_for_byte() {
    let case = Case::new("data-big").await;
    let ns = case.ns.clone();
    let tenant = case.namespace("t", json!({"conflux-bad/tenant": ns})).await;
    // Nearly 1 MiB of bytes that are not UTF-8 (every byte value), in a Secret and in a
    // ConfigMap's binaryData; the API server's limit is 1 MiB of data per object.
    let bytes: Vec<u8> = (0..1_000_000usize).map(|i| (i * 7 % 256) as u8).collect();
    let b64 = conflux_tests::leak::base64(&bytes);
    let mut secret_data = serde_json::Map::new();
    secret_data.insert("blob".into(), json!(b64));
    case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "big", "namespace": ns,
                                   "annotations": {ALLOW: "*"}},
                      "data": secret_data}))
        .await;
    case.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "big", "namespace": ns, "annotations": {ALLOW: "*"}},
                      "binaryData": {"blob": b64}, "data": {"text": "ünïcødé ✓"}}))
        .await;
    for (kind, name) in [("Secret", "big-copy"), ("ConfigMap", "big-copy")] {
        let mut target = json!({"apiVersion": "v1", "kind": kind,
                                "metadata": {"name": name, "namespace": tenant,
                                             "annotations": {COPY_FROM: format!("{ns}/big")}}});
        if kind == "Secret" {
            target["type"] = json!("Opaque");
        }
        case.apply(target).await;
    }
    case.apply(config_sync(
        &format!("{ns}-big"),
        "Secret",
        &ns,
        "big",
        &ns,
        json!({"name": "big-sync"}),
    ))
    .await;
    let field = |kind: &str| {
        if kind == "Secret" {
            "data"
        } else {
            "binaryData"
        }
    };
    for (kind, name) in [
        ("Secret", "big-copy"),
        ("ConfigMap", "big-copy"),
        ("Secret", "big-sync"),
    ] {
        case.wait_for(
            &format!("{kind} {name}: 1 MB copied exactly"),
            ("v1", kind, Some(&tenant), name),
            |o| o[field(kind)]["blob"] == json!(b64),
        )
        .await;
    }
    let cm = case
        .get("v1", "ConfigMap", Some(&tenant), "big-copy")
        .await
        .expect("copy");
    assert_eq!(cm["data"]["text"], "ünïcødé ✓");
    case.assert_no_warning(&tenant, "Secret", "big-copy").await;
    case.assert_no_leak(&[&ns, &tenant]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_every_built_in_type() {
    let case = Case::new("data-types").await;
    let ns = case.ns.clone();
    let tenant = case.namespace("t", json!({"conflux-bad/tenant": ns})).await;
    let pem = conflux_tests::leak::pem();
    let docker = json!({"auths": {"registry.invalid": {"auth": conflux_tests::leak::base64(format!("u:{}", conflux_tests::leak::marker()).as_bytes())}}}).to_string();
    let dockercfg =
        json!({"registry.invalid": {"auth": conflux_tests::leak::base64(b"u:p")}}).to_string();
    let types = [
        ("opaque", "Opaque", json!({"k": "v"})),
        (
            "basic",
            "kubernetes.io/basic-auth",
            json!({"username": "u", "password": conflux_tests::leak::marker()}),
        ),
        (
            "ssh",
            "kubernetes.io/ssh-auth",
            json!({"ssh-privatekey": pem}),
        ),
        (
            "tls",
            "kubernetes.io/tls",
            json!({"tls.crt": pem, "tls.key": pem}),
        ),
        (
            "docker",
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": docker}),
        ),
        (
            "dockercfg",
            "kubernetes.io/dockercfg",
            json!({".dockercfg": dockercfg}),
        ),
        (
            "bootstrap",
            "bootstrap.kubernetes.io/token",
            json!({"token-id": "abcdef", "token-secret": "0123456789abcdef"}),
        ),
    ];
    for (name, type_, data) in &types {
        case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": name, "namespace": ns, "annotations": {ALLOW: "*"}},
                          "type": type_, "stringData": data}))
            .await;
        case.apply(config_sync(
            &format!("{ns}-{name}"),
            "Secret",
            &ns,
            name,
            &ns,
            json!({}),
        ))
        .await;
        case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": format!("{name}-pull"), "namespace": tenant,
                                       "annotations": {COPY_FROM: format!("{ns}/{name}")}},
                          "type": type_, "stringData": data}))
            .await;
    }
    for (name, type_, _) in &types {
        for copy in [name.to_string(), format!("{name}-pull")] {
            case.wait_for(
                &format!("{type_} copy {copy}"),
                ("v1", "Secret", Some(&tenant), &copy),
                |s| s["type"] == *type_ && s["data"].as_object().is_some_and(|d| !d.is_empty()),
            )
            .await;
        }
        assert_sync_ready(&case, &format!("{ns}-{name}")).await;
    }
    // A ServiceAccount token is bound to its namespace's ServiceAccount: copying one is refused
    // up front, with a reason, instead of writing a Secret the API server rejects.
    case.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": ns}}))
        .await;
    case.apply(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "robot-token", "namespace": ns,
                                   "annotations": {"kubernetes.io/service-account.name": "robot", ALLOW: "*"}},
                      "type": "kubernetes.io/service-account-token"}))
        .await;
    let sa_sync = format!("{ns}-robot");
    case.apply(config_sync(
        &sa_sync,
        "Secret",
        &ns,
        "robot-token",
        &ns,
        json!({}),
    ))
    .await;
    let note = case
        .expect_warning("default", "ConfigSync", &sa_sync, "UnsupportedSecretType")
        .await;
    assert!(
        note.contains("kubernetes.io/service-account-token"),
        "{note}"
    );
    case.assert_reported_once(
        ("default", "ConfigSync", &sa_sync),
        "UnsupportedSecretType",
        &sa_sync,
        &[sa_sync.clone(), at(&ns, "secrets", "robot-token")],
    )
    .await;
    assert!(
        case.get("v1", "Secret", Some(&tenant), "robot-token")
            .await
            .is_none()
    );
    case.assert_no_leak(&[&ns, &tenant]).await;
}
