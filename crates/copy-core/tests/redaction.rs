//! Secrets never leak through `Debug`: the objects copy-core handles (sources, desired copies,
//! plan steps, audit reports) print kinds, names, namespaces, types and data keys, never a value.

use std::collections::BTreeMap;

use conflux_copy_core::audit::{AuditOptions, audit};
use conflux_copy_core::desired::{WriteMode, pull_copy};
use conflux_copy_core::fan_out::{FanOut, NamespaceView};
use conflux_copy_core::steps::{Step, plan_deletion, plan_sync};
use conflux_copy_core::{ConfigObject, ConfigSyncSpec};
use conflux_tests::leak::{
    DEBUG_MARKER as MARKER, DEBUG_MARKER_BASE64 as MARKER_BASE64, DEBUG_PEM as PEM,
    assert_debug_redacted as assert_redacted,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    }
}

/// The source: the marker raw, base64 and PEM in `data`, raw in `stringData` and in the
/// last-applied annotation `kubectl apply` leaves.
fn secret(namespace: &str, name: &str) -> ConfigObject {
    let mut metadata = meta(namespace, name);
    metadata.annotations = Some(BTreeMap::from([(
        "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
        format!("{{\"stringData\":{{\"token\":\"{MARKER}\"}}}}"),
    )]));
    ConfigObject::Secret(Secret {
        metadata,
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(BTreeMap::from([
            ("password".to_owned(), bytes(MARKER)),
            ("token".to_owned(), bytes(MARKER_BASE64)),
            ("tls.key".to_owned(), bytes(PEM)),
        ])),
        string_data: Some(BTreeMap::from([("extra".to_owned(), MARKER.to_owned())])),
        ..Secret::default()
    })
}

fn config_map(namespace: &str, name: &str) -> ConfigObject {
    ConfigObject::ConfigMap(ConfigMap {
        metadata: meta(namespace, name),
        data: Some(BTreeMap::from([
            ("password".to_owned(), MARKER.to_owned()),
            ("token".to_owned(), MARKER_BASE64.to_owned()),
            ("tls.key".to_owned(), PEM.to_owned()),
        ])),
        binary_data: Some(BTreeMap::from([("blob".to_owned(), bytes(MARKER))])),
        ..ConfigMap::default()
    })
}

/// `object` with one more data key holding the marker (a key someone added by hand).
fn with_stray_key(mut object: ConfigObject) -> ConfigObject {
    match &mut object {
        ConfigObject::Secret(s) => {
            s.data
                .get_or_insert_default()
                .insert("added".to_owned(), bytes(MARKER));
        }
        ConfigObject::ConfigMap(cm) => {
            cm.data
                .get_or_insert_default()
                .insert("added".to_owned(), MARKER.to_owned());
        }
        _ => {}
    }
    object
}

fn fan_out() -> FanOut {
    let spec: ConfigSyncSpec = serde_json::from_value(json!({
        "source": {"kind": "Secret", "namespace": "flux-system", "name": "tls"},
        "target": {"namespaces": ["team-*"]},
        "conflictPolicy": "Adopt",
    }))
    .expect("a valid spec");
    FanOut::from_config_sync("tls-sync", &spec).expect("a valid fan-out")
}

#[test]
fn config_objects_show_identity_type_and_keys() {
    assert_redacted(
        "ConfigObject::Secret",
        &secret("flux-system", "tls"),
        &[
            "Secret",
            "flux-system",
            "tls",
            "kubernetes.io/tls",
            "password",
            "token",
            "tls.key",
            "extra",
            "last-applied-configuration",
            "<redacted: 24 bytes>",
        ],
    );
    assert_redacted(
        "ConfigObject::ConfigMap",
        &config_map("flux-system", "settings"),
        &["ConfigMap", "settings", "password", "tls.key", "blob"],
    );
}

#[test]
fn desired_copies_show_identity_and_keys() {
    for (source, target) in [
        (secret("flux-system", "tls"), secret("apps", "tls")),
        (
            config_map("flux-system", "settings"),
            config_map("apps", "settings"),
        ),
    ] {
        // The target has a key the source lacks: the desired copy carries a cleanup patch.
        let mut target = with_stray_key(target);
        if let ConfigObject::Secret(s) = &mut target {
            s.data.get_or_insert_default().remove("password");
        }
        let desired = pull_copy(&source, &target).expect("copyable");
        assert_eq!(desired.mode, WriteMode::Apply);
        assert!(desired.cleanup.is_some());
        assert_redacted(
            "DesiredCopy",
            &desired,
            &["apps", "tls.key", "Apply", "added"],
        );
    }
}

#[test]
fn plan_steps_show_identity_and_keys() {
    let fan_out = fan_out();
    let source = secret("flux-system", "tls");
    let namespaces = ["team-a", "team-b", "team-c"];
    let ours = conflux_copy_core::desired::fan_out_copy(&source, &fan_out, "team-b");
    let observed = [
        with_stray_key(ours),
        with_stray_key(secret("team-c", "tls")),
    ];
    let steps = plan_sync(
        &fan_out,
        Some(&source),
        namespaces.iter().map(|n| NamespaceView::new(n)),
        &observed,
    );
    assert!(steps.iter().any(|s| matches!(s, Step::Create { .. })));
    assert!(steps.iter().any(|s| matches!(s, Step::Update { .. })));
    assert!(steps.iter().any(|s| matches!(s, Step::Adopt { .. })));
    for step in &steps {
        assert_redacted("Step", step, &[step.namespace(), "tls.key"]);
    }
    let orphaned = plan_sync(
        &fan_out,
        None,
        namespaces.iter().map(|n| NamespaceView::new(n)),
        &observed,
    );
    assert!(
        orphaned
            .iter()
            .any(|s| matches!(s, Step::MarkOrphaned { .. }))
    );
    for step in orphaned.iter().chain(&plan_deletion(&fan_out, &observed)) {
        assert_redacted("Step", step, &[step.namespace()]);
    }
}

#[test]
fn copy_audit_shows_written_copies_without_data() {
    let objects = [
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "tls", "namespace": "flux-system",
                            "annotations": {"copy.conflux.dev/allowed-namespaces": "team-*"}},
               "data": {"password": MARKER_BASE64},
               "stringData": {"token": MARKER, "tls.key": PEM}}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "tls", "namespace": "team-a",
                            "annotations": {"fluxcd.controlplane.io/copyFrom": "flux-system/tls"}}}),
    ];
    let report = audit(&objects, &AuditOptions::default());
    assert!(!report.written.is_empty(), "{:?}", report.findings);
    assert_redacted(
        "CopyAudit",
        &report,
        &["team-a", "flux-system", "password", "\"Secret\""],
    );
}
