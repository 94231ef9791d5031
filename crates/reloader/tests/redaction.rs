//! Secrets never leak through `Debug`: the data the reloader hashes prints its keys and lengths,
//! never a value.

use std::collections::BTreeMap;

use conflux_reloader::consumers::{Consumption, Keys};
use conflux_reloader::hash::{ConfigData, content_hash};
use conflux_tests::leak::{
    DEBUG_MARKER as MARKER, DEBUG_MARKER_BASE64 as MARKER_BASE64, DEBUG_PEM as PEM,
    assert_debug_redacted as assert_redacted,
};
use conflux_watch_index::refs::ConfigKind;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

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
    let opt_in = conflux_reloader::opt_in::OptIn::parse(
        Some(&[("reloader.stakater.com/auto".to_owned(), "true".to_owned())].into()),
        None,
    );
    let watch = conflux_reloader::opt_in::watch(&watched, &opt_in, Default::default(), &());
    let hash = content_hash(&watch, |_, _| Some(ConfigData::from_secret(&secret)));
    assert_redacted("ContentHash", &hash, &["hex", "db-creds"]);
}
