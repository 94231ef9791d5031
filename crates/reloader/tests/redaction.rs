//! Secrets never leak through `Debug`: the data the reloader hashes prints its keys and lengths,
//! never a value.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use reloader::consumers::{Consumption, Keys};
use reloader::hash::{ConfigData, content_hash};
use watch_index::refs::ConfigKind;

/// The value every test hides.
const MARKER: &str = "conflux-leak-marker-7f3a";
/// `printf conflux-leak-marker-7f3a | base64`.
const MARKER_BASE64: &str = "Y29uZmx1eC1sZWFrLW1hcmtlci03ZjNh";
/// The marker as a PEM private key.
const PEM: &str =
    "-----BEGIN PRIVATE KEY-----\nconflux-leak-marker-7f3a\n-----END PRIVATE KEY-----";

/// What must never show: the marker raw, base64-encoded and as the byte list a derived `Debug`
/// of `ByteString` prints (`conflux`), and the PEM header.
const FORBIDDEN: [(&str, &str); 4] = [
    ("the raw marker", MARKER),
    ("the base64 marker", MARKER_BASE64),
    ("the marker's bytes", "99, 111, 110, 102, 108, 117, 120"),
    ("the PEM header", "-----BEGIN PRIVATE KEY-----"),
];

/// Asserts that `{:?}` and `{:#?}` of `value` show none of [`FORBIDDEN`] and every one of `shown`.
/// A failure prints the output with the marker forms masked, so the marker stays out of logs.
fn assert_redacted(what: &str, value: &impl Debug, shown: &[&str]) {
    for (format, text) in [
        ("{:?}", format!("{value:?}")),
        ("{:#?}", format!("{value:#?}")),
    ] {
        let masked = FORBIDDEN
            .iter()
            .fold(text.clone(), |t, (_, form)| t.replace(form, "<MARKER>"));
        for (form_name, form) in FORBIDDEN {
            assert!(
                !text.contains(form),
                "{what}: {format} shows {form_name}:\n{masked}"
            );
        }
        for name in shown {
            assert!(
                text.contains(name),
                "{what}: {format} lacks {name:?}:\n{masked}"
            );
        }
    }
}

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

fn secret() -> Secret {
    Secret {
        data: Some(BTreeMap::from([
            ("password".to_owned(), bytes(MARKER)),
            ("token".to_owned(), bytes(MARKER_BASE64)),
            ("tls.key".to_owned(), bytes(PEM)),
        ])),
        ..Secret::default()
    }
}

fn config_map() -> ConfigMap {
    ConfigMap {
        data: Some(BTreeMap::from([
            ("password".to_owned(), MARKER.to_owned()),
            ("token".to_owned(), MARKER_BASE64.to_owned()),
            ("tls.key".to_owned(), PEM.to_owned()),
        ])),
        binary_data: Some(BTreeMap::from([("blob".to_owned(), bytes(PEM))])),
        ..ConfigMap::default()
    }
}

#[test]
fn config_data_shows_keys_and_lengths() {
    let secret = secret();
    assert_redacted(
        "ConfigData::Secret",
        &ConfigData::from_secret(&secret),
        &[
            "Secret",
            "password",
            "token",
            "tls.key",
            "<redacted: 24 bytes>",
        ],
    );
    let cm = config_map();
    assert_redacted(
        "ConfigData::ConfigMap",
        &ConfigData::from_config_map(&cm),
        &["ConfigMap", "password", "token", "tls.key", "blob"],
    );
}

/// The hash of the data is all that comes out of hashing, and it shows no value either.
#[test]
fn content_hash_shows_no_value() {
    let secret = secret();
    let watched = [Consumption {
        kind: ConfigKind::Secret,
        name: "db-creds".to_owned(),
        keys: Keys::All,
        optional: false,
    }];
    let hash = content_hash(&watched, |_, _| Some(ConfigData::from_secret(&secret)));
    assert_redacted("ContentHash", &hash, &["hex"]);
}
