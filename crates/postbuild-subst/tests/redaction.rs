//! Secrets never leak through `Debug`: every public type that can hold a variable value or a
//! ConfigMap/Secret object prints its names and keys, never a value, and errors do not quote
//! values either.

use conflux_postbuild_subst::audit::Document;
use conflux_postbuild_subst::resource::{
    ResourceOutcome, SubstitutionOptions, substitute_resource,
};
use conflux_postbuild_subst::resource_set::{Expansion, expand};
use conflux_postbuild_subst::vars::{
    PostBuild, SourceKind, SourceLookup, Variables, load_variables, source_data,
};
use conflux_tests::leak::{
    DEBUG_MARKER as MARKER, DEBUG_MARKER_BASE64 as MARKER_BASE64, DEBUG_PEM as PEM,
    assert_debug_redacted as assert_redacted,
};
use serde_json::{Value, json};

/// A Secret as the API returns it, the marker in `data` (base64, as the API carries it) and in
/// `stringData` (raw and as PEM).
fn secret_json() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "db-creds", "namespace": "apps",
                     "labels": {"team": "payments"},
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": MARKER}},
        "data": {"password": MARKER_BASE64},
        "stringData": {"token": MARKER, "tls.key": PEM},
    })
}

fn variables() -> Variables {
    Variables::from_merged([
        ("password".to_owned(), MARKER.to_owned()),
        ("token".to_owned(), MARKER_BASE64.to_owned()),
        ("tls_key".to_owned(), PEM.to_owned()),
    ])
}

#[test]
fn variables_show_names_not_values() {
    assert_redacted(
        "Variables",
        &variables(),
        &["password", "token", "tls_key", "<redacted: 24 bytes>"],
    );
}

#[test]
fn variables_loaded_from_a_secret_show_names_not_values() {
    let post_build = PostBuild::from_kustomization(&json!({"spec": {"postBuild": {
        "substituteFrom": [{"kind": "Secret", "name": "db-creds"}]
    }}}))
    .expect("a valid postBuild");
    let vars = load_variables(&post_build, |_| SourceLookup::Found(secret_json()))
        .expect("the Secret loads");
    assert_eq!(vars.get("password"), Some(MARKER));
    assert_redacted("loaded Variables", &vars, &["password", "token", "tls.key"]);
}

#[test]
fn post_build_shows_inline_names_not_values() {
    let post_build = PostBuild::from_kustomization(&json!({"spec": {"postBuild": {
        "substitute": {"password": MARKER, "token": MARKER_BASE64, "tls_key": PEM},
        "substituteFrom": [{"kind": "Secret", "name": "db-creds", "optional": true}]
    }}}))
    .expect("a valid postBuild");
    assert_redacted(
        "PostBuild",
        &post_build,
        &["password", "token", "tls_key", "db-creds", "Secret"],
    );
}

#[test]
fn found_source_shows_identity_and_keys_not_data() {
    let lookup = SourceLookup::Found(secret_json());
    assert_redacted(
        "SourceLookup::Found",
        &lookup,
        &[
            "Found",
            "\"Secret\"",
            "\"Opaque\"",
            "db-creds",
            "apps",
            "payments",
            "password",
            "token",
            "tls.key",
            "kubectl.kubernetes.io/last-applied-configuration",
        ],
    );
    // The data itself is intact: only `Debug` hides it.
    let data = source_data(&SourceKind::Secret, &secret_json()).expect("valid base64");
    assert_eq!(data.get("password").map(String::as_str), Some(MARKER));
}

#[test]
fn substituted_resource_shows_identity_and_keys_not_values() {
    let resource = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": "apps"},
        "data": {"password": "${password}", "token": "${token}", "tls.key": "${tls_key}"},
    });
    let typed = SubstitutionOptions {
        typed: true,
        ..SubstitutionOptions::default()
    };
    let outcome = substitute_resource(&resource, &variables(), &typed).expect("substitutes");
    assert_redacted(
        "ResourceOutcome (typed)",
        &outcome,
        &["Substituted", "app-config", "password", "tls.key"],
    );
    let outcome = substitute_resource(&resource, &variables(), &SubstitutionOptions::default())
        .expect("substitutes");
    assert_redacted(
        "ResourceOutcome",
        &outcome,
        &["Substituted", "app-config", "password", "tls.key"],
    );
    assert_redacted(
        "ResourceOutcome (built)",
        &ResourceOutcome::Substituted(secret_json()),
        &["db-creds", "password", "tls.key"],
    );
}

#[test]
fn expansion_shows_identity_and_keys_not_values() {
    let resource_set = json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
        "metadata": {"name": "creds", "namespace": "flux-system"},
        "spec": {
            "inputs": [{"password": MARKER, "token": MARKER_BASE64}],
            "resources": [{"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "generated", "namespace": "apps"},
                           "stringData": {"password": "<< inputs.password >>",
                                          "token": "<< inputs.token >>"}}],
        },
    });
    let expansion = expand(&resource_set);
    assert_eq!(expansion.objects.len(), 1, "{:?}", expansion.findings);
    assert_redacted("Expansion", &expansion, &["generated", "password", "token"]);
    let built = Expansion {
        objects: vec![secret_json()],
        findings: Vec::new(),
    };
    assert_redacted("Expansion (built)", &built, &["db-creds", "tls.key"]);
}

#[test]
fn document_shows_identity_and_keys_not_values() {
    let secret = secret_json();
    let document = Document {
        object: &secret,
        file: Some("apps/db-creds.yaml"),
    };
    assert_redacted(
        "Document",
        &document,
        &["db-creds", "apps/db-creds.yaml", "password", "tls.key"],
    );
}

/// A value that breaks the YAML (upstream quotes the offending scalar or anchor in its message):
/// the message names the resource, not the value.
#[test]
fn substitution_errors_do_not_quote_values() {
    let resource = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"replicas": "${replicas}"},
    });
    for value in [
        format!("!!float {MARKER}"),
        format!("*{MARKER}"),
        format!("!!int {MARKER_BASE64}"),
    ] {
        let vars = Variables::from_merged([("replicas".to_owned(), value)]);
        let err = substitute_resource(&resource, &vars, &SubstitutionOptions::default())
            .expect_err("the value breaks the YAML");
        assert_redacted("substitution error", &err, &["YamlToJson"]);
        assert_redacted(
            "substitution error (Display)",
            &err.to_string(),
            &["yaml: "],
        );
    }
}

/// A Secret value that is not base64: the decoder's message would quote the offending character.
#[test]
fn invalid_secret_data_errors_do_not_quote_values() {
    let secret = json!({"metadata": {"name": "db-creds"}, "data": {"tls.key": PEM}});
    let err = source_data(&SourceKind::Secret, &secret).expect_err("not base64");
    assert_redacted("InvalidSecretData", &err, &["db-creds", "tls.key"]);
    assert!(!err.to_string().contains("45"), "{err}"); // `-`, the first character
}
