//! Secrets never leak through `Debug`: the `redact` wrappers show kinds, names, namespaces, types,
//! labels, keys and lengths, never a data or annotation value.

use std::collections::BTreeMap;

use conflux_tests::leak::{
    DEBUG_MARKER as MARKER, DEBUG_MARKER_BASE64 as MARKER_BASE64, DEBUG_PEM as PEM,
    assert_debug_redacted as assert_redacted,
};
use conflux_watch_index::redact::{
    Redacted, RedactedConfigMap, RedactedJson, RedactedMap, RedactedMeta, RedactedSecret,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

/// Metadata with the marker in an annotation, as `kubectl apply` leaves the whole object there.
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some("apps".to_owned()),
        resource_version: Some("4711".to_owned()),
        labels: Some(BTreeMap::from([("team".to_owned(), "payments".to_owned())])),
        annotations: Some(BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
            format!("{{\"stringData\":{{\"token\":\"{MARKER}\"}}}}"),
        )])),
        ..ObjectMeta::default()
    }
}

fn secret() -> Secret {
    Secret {
        metadata: meta("db-creds"),
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(BTreeMap::from([
            ("password".to_owned(), bytes(MARKER)),
            ("token".to_owned(), bytes(MARKER_BASE64)),
            ("tls.key".to_owned(), bytes(PEM)),
        ])),
        string_data: Some(BTreeMap::from([
            ("extra".to_owned(), MARKER.to_owned()),
            ("extra.pem".to_owned(), PEM.to_owned()),
        ])),
        ..Secret::default()
    }
}

fn config_map() -> ConfigMap {
    ConfigMap {
        metadata: meta("app-config"),
        data: Some(BTreeMap::from([
            ("password".to_owned(), MARKER.to_owned()),
            ("token".to_owned(), MARKER_BASE64.to_owned()),
            ("tls.key".to_owned(), PEM.to_owned()),
        ])),
        binary_data: Some(BTreeMap::from([("blob".to_owned(), bytes(MARKER))])),
        ..ConfigMap::default()
    }
}

#[test]
fn the_placeholder_is_the_length() {
    assert_eq!(
        format!("{:?}", Redacted::of(MARKER)),
        "<redacted: 24 bytes>"
    );
    assert_eq!(Redacted(0).to_string(), "<redacted: 0 bytes>");
}

#[test]
fn secret_shows_identity_type_and_keys() {
    assert_redacted(
        "RedactedSecret",
        &RedactedSecret(&secret()),
        &[
            "db-creds",
            "apps",
            "4711",
            "payments",
            "kubernetes.io/tls",
            "password",
            "token",
            "tls.key",
            "extra.pem",
            "kubectl.kubernetes.io/last-applied-configuration",
            "<redacted: 24 bytes>",
        ],
    );
}

#[test]
fn config_map_shows_identity_and_keys() {
    assert_redacted(
        "RedactedConfigMap",
        &RedactedConfigMap(&config_map()),
        &["app-config", "apps", "password", "token", "tls.key", "blob"],
    );
}

#[test]
fn maps_and_metadata_show_keys() {
    let secret = secret();
    let data = secret.data.as_ref().expect("data");
    assert_redacted("RedactedMap<ByteString>", &RedactedMap(data), &["password"]);
    let cm = config_map();
    let data = cm.data.as_ref().expect("data");
    assert_redacted("RedactedMap<String>", &RedactedMap(data), &["tls.key"]);
    assert_redacted(
        "RedactedMeta",
        &RedactedMeta(&secret.metadata),
        &["db-creds", "apps", "payments", "last-applied-configuration"],
    );
}

#[test]
fn json_shows_identity_and_keys() {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "db-creds", "namespace": "apps", "labels": {"team": "payments"},
                     "annotations": {"note": MARKER}},
        "data": {"password": MARKER_BASE64, "pin": 1234},
        "stringData": {"token": MARKER, "tls.key": PEM},
        "items": [MARKER, {"nested": PEM}],
    });
    assert_redacted(
        "RedactedJson",
        &RedactedJson(&secret),
        &[
            "\"Secret\"",
            "\"Opaque\"",
            "db-creds",
            "apps",
            "payments",
            "note",
            "password",
            "pin",
            "token",
            "tls.key",
            "nested",
        ],
    );
    // A merge patch's nulls ("remove this key") stay visible.
    let patch = json!({"data": {"stray": null}});
    assert_eq!(
        format!("{:?}", RedactedJson(&patch)),
        r#"{"data": {"stray": null}}"#
    );
}
