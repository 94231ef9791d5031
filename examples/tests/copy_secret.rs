//! The `copy_secret` example's logic: offline (consent, the desired copy, redaction) and against
//! a real API server (the executor's writes). Secret data is compared, never printed.

use std::collections::BTreeMap;

use conflux_copy_core::ConfigObject;
use conflux_copy_core::desired::WriteMode;
use conflux_examples::copy_secret::{demo_source, desired_copy, redacted, sync};
use conflux_tests::cluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[test]
fn a_new_copy_is_applied_with_the_source_data_and_type_only() {
    let source = demo_source().expect("demo source");
    let desired = desired_copy(&source, "team-a", None).expect("team-a is allowed");
    assert_eq!(desired.mode, WriteMode::Apply);
    let ConfigObject::Secret(copy) = &desired.object else {
        panic!("a Secret copy");
    };
    assert_eq!(copy.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(copy.metadata.name.as_deref(), Some("ghcr-auth"));
    assert_eq!(
        copy.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    assert!(copy.data == source.data, "the copy has the source's data");
    assert_eq!(copy.metadata.labels, None, "source labels are not copied");
    // Once the target holds it, nothing is written.
    let desired = desired_copy(&source, "team-a", Some(copy)).expect("allowed");
    assert_eq!(desired.mode, WriteMode::Unchanged);
}

#[test]
fn copies_need_the_source_s_consent() {
    let source = demo_source().expect("demo source");
    let err = desired_copy(&source, "default", None).expect_err("default is not allowed");
    assert_eq!(err.reason(), "Refused");
}

#[test]
fn redaction_hides_every_value() {
    let source = demo_source().expect("demo source");
    let shown =
        serde_json::to_string(&redacted(&source.clone().into()).expect("json")).expect("text");
    assert!(shown.contains("<redacted: 12 bytes>"));
    assert!(!shown.contains("eyJhdXRocyI6e319"), "no base64 data");
    assert!(!shown.contains("auths"), "no decoded data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_copies_cleans_up_and_refuses() {
    conflux_tests::leak::capture_logs();
    let cluster = cluster();
    let client = cluster.client().await;
    let source_ns = cluster.namespace(&client, "copy-src").await;
    let target_ns = cluster.namespace(&client, "copy-dst").await;
    let other_ns = cluster.namespace(&client, "copy-other").await;

    let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    };
    let source: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "labels": {"team": "platform"},
                     "annotations": {"copy.conflux.dev/allowed-namespaces": target_ns}},
        "type": "kubernetes.io/basic-auth",
    }))
    .expect("source object");
    let source = Secret {
        data: Some(data(&[
            ("username", "u"),
            ("password", conflux_tests::leak::marker()),
        ])),
        ..source
    };
    Api::<Secret>::namespaced(client.clone(), &source_ns)
        .create(&PostParams::default(), &source)
        .await
        .expect("create the source");

    let targets: Api<Secret> = Api::namespaced(client.clone(), &target_ns);
    let mode = sync(&client, &source_ns, "creds", &target_ns)
        .await
        .expect("first copy");
    assert_eq!(mode, WriteMode::Apply);
    let copy = targets.get("creds").await.expect("the copy exists");
    assert!(copy.data == source.data, "the copy has the source's data");
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert!(copy.metadata.labels.unwrap_or_default().is_empty());

    let mode = sync(&client, &source_ns, "creds", &target_ns)
        .await
        .expect("second sync");
    assert_eq!(mode, WriteMode::Unchanged);

    // A key added by hand is removed: the copy equals its source.
    targets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "eA=="}})),
        )
        .await
        .expect("edit the copy");
    let mode = sync(&client, &source_ns, "creds", &target_ns)
        .await
        .expect("re-sync");
    assert_eq!(mode, WriteMode::Apply);
    let copy = targets.get("creds").await.expect("the copy exists");
    let keys: Vec<&String> = copy.data.iter().flatten().map(|(k, _)| k).collect();
    assert_eq!(keys, ["password", "username"]);

    // No consent for another namespace: refused, nothing written.
    let err = sync(&client, &source_ns, "creds", &other_ns)
        .await
        .expect_err("not allowed");
    assert_eq!(err.reason(), "Refused");
    let written = Api::<Secret>::namespaced(client.clone(), &other_ns)
        .get_opt("creds")
        .await
        .expect("read");
    assert!(written.is_none());

    // A missing source is reported as Flux Operator words it.
    let err = sync(&client, &source_ns, "nope", &target_ns)
        .await
        .expect_err("missing source");
    assert_eq!(
        err.to_string(),
        "failed to copy data from Secret/".to_owned()
            + &source_ns
            + "/nope: secrets \"nope\" not found"
    );
    conflux_tests::leak::assert_log_clean();
}
