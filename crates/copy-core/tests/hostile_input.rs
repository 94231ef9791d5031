//! Hostile input (issue 11): `copyFrom` values, consent annotations (namespace globs), kopy
//! selectors, reflector's and replicator's annotations (regex lists, selectors, booleans,
//! references) and whole object sets through the copy audit never panic, and Secret data never
//! shows up in what they report.
//!
//! Every property runs a fixed number of cases from a fixed seed and prints
//! `property <name>: <cases> cases, seed <n>` past libtest's capture, so CI logs show what ran
//! and a failure repeats. `CONFLUX_PROPTEST_SEED=<u64>` replaces every seed and
//! `CONFLUX_PROPTEST_SCALE=<n>` multiplies every case count, to explore further locally.

use std::collections::BTreeMap;

use conflux_copy_core::audit::{AuditOptions, audit};
use conflux_copy_core::consent::{ALLOWED_NAMESPACES_ANNOTATION, allows, check as consent_check};
use conflux_copy_core::copy_from::{COPY_FROM_ANNOTATION, CopyFrom, copy_source};
use conflux_copy_core::fan_out::{
    KOPY_SYNC_ANNOTATION, KOPY_SYNC_ANNOTATION_LEGACY, NamespaceView,
};
use conflux_copy_core::{FanOut, SourceKind, SourceRef, reflector, replicator};
use conflux_watch_index::glob::glob_match;
use proptest::prelude::*;
use serde_json::{Value, json};

use conflux_tests::props::check;

/// Any text: every Unicode scalar value, NUL and unassigned code points included.
fn any_text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max_chars).prop_map(String::from_iter)
}

/// Annotation values: slashes, commas, globs, whitespace, and anything at all.
fn annotation_value() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "a",
            "b",
            "ns",
            "team-",
            "flux-system",
            "/",
            "//",
            ",",
            ", ",
            " ",
            "\t",
            "\n",
            "*",
            "**",
            "?",
            "-",
            ".",
            "é",
            "\0",
            "app=web",
            "app in (a,b)",
            "!x",
        ][..],
    );
    prop_oneof![
        4 => prop::collection::vec(piece, 0..10).prop_map(|p| p.concat()),
        1 => any_text(16),
    ]
}

fn namespace_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&["a", "b", "ns", "team-a", "team-", "flux-system", "", "*", "é"][..])
            .prop_map(str::to_owned),
        1 => "[a-z*?-]{0,12}",
        1 => any_text(8),
    ]
}

/// The obvious recursive glob, to check the iterative one against (on short inputs).
fn glob_reference(p: &[u8], n: &[u8]) -> bool {
    match (p.first(), n.first()) {
        (None, _) => n.is_empty(),
        (Some(b'*'), _) => {
            glob_reference(&p[1..], n) || (!n.is_empty() && glob_reference(p, &n[1..]))
        }
        (Some(_), None) => false,
        (Some(&c), Some(&d)) => (c == b'?' || c == d) && glob_reference(&p[1..], &n[1..]),
    }
}

#[test]
fn copy_from_values_hostile() {
    check(
        "copy_from_values_hostile",
        80_000,
        0xc0b1_f0b0_0001,
        (
            annotation_value(),
            prop::sample::select(&["v1", "apps/v1", "", "v1beta1"][..]),
            prop::sample::select(&["ConfigMap", "Secret", "Pod", "configmap", ""][..]),
        ),
        |(value, api_version, kind)| {
            match CopyFrom::parse(&value) {
                Ok(parsed) => {
                    prop_assert_eq!(
                        format!("{}/{}", parsed.namespace, parsed.name),
                        value.clone()
                    );
                    prop_assert!(!parsed.namespace.is_empty() && !parsed.name.is_empty());
                    prop_assert!(!parsed.name.contains('/'));
                }
                Err(err) => {
                    // The message names the value, which is not data (an annotation).
                    prop_assert!(err.to_string().contains(COPY_FROM_ANNOTATION));
                }
            }
            let annotations = BTreeMap::from([(COPY_FROM_ANNOTATION.to_owned(), value.clone())]);
            let source = copy_source(api_version, kind, Some(&annotations));
            let is_target = api_version == "v1" && matches!(kind, "ConfigMap" | "Secret");
            match (is_target, CopyFrom::parse(&value), source) {
                (false, _, Ok(None)) => {}
                (true, Ok(parsed), Ok(Some(source))) => {
                    prop_assert_eq!(source.namespace, parsed.namespace);
                    prop_assert_eq!(source.name, parsed.name);
                }
                (true, Err(a), Err(b)) => prop_assert_eq!(a, b),
                (is_target, parsed, source) => {
                    prop_assert!(
                        false,
                        "target {is_target}: parsed {parsed:?}, source {source:?}"
                    )
                }
            }
            Ok(())
        },
    );
}

#[test]
fn consent_globs_hostile() {
    check(
        "consent_globs_hostile",
        120_000,
        0xc0b1_f0b0_0002,
        (
            annotation_value(),
            namespace_name(),
            "[ab*?-]{0,10}",
            "[ab-]{0,12}",
        ),
        |(list, namespace, pattern, name)| {
            let source = SourceRef::new(SourceKind::Secret, "src", "token");
            let annotations =
                BTreeMap::from([(ALLOWED_NAMESPACES_ANNOTATION.to_owned(), list.clone())]);
            let verdict = consent_check(&source, Some(&annotations), &namespace);
            prop_assert_eq!(
                verdict.is_ok(),
                namespace == "src" || allows(&list, &namespace)
            );
            if let Err(refusal) = verdict {
                let message = refusal.to_string();
                prop_assert!(message.contains(ALLOWED_NAMESPACES_ANNOTATION));
            }
            // The iterative matcher agrees with the recursive definition.
            prop_assert_eq!(
                glob_match(&pattern, &name),
                glob_reference(pattern.as_bytes(), name.as_bytes())
            );
            let _ = glob_match(&list, &namespace);
            Ok(())
        },
    );
}

#[test]
fn kopy_selectors_hostile() {
    check(
        "kopy_selectors_hostile",
        60_000,
        0xc0b1_f0b0_0003,
        (
            annotation_value(),
            any::<bool>(),
            prop::collection::btree_map("[a-c]{1,2}", "[a-c]{0,2}", 0..3),
        ),
        |(selector, legacy, labels)| {
            let source = SourceRef::new(SourceKind::ConfigMap, "flux-system", "cfg");
            let annotation = if legacy {
                KOPY_SYNC_ANNOTATION_LEGACY
            } else {
                KOPY_SYNC_ANNOTATION
            };
            let annotations = BTreeMap::from([(annotation.to_owned(), selector)]);
            for trusted in [&["flux-system"][..], &[][..]] {
                match FanOut::from_kopy(&source, Some(&annotations), trusted.iter().copied()) {
                    Ok(Some(fan_out)) => {
                        let view = NamespaceView::new("team-a").labels(&labels);
                        let _ = fan_out.selects(view);
                        prop_assert!(!fan_out.selects(NamespaceView::new("flux-system")));
                    }
                    Ok(None) => prop_assert!(false, "annotation not seen"),
                    Err(err) => {
                        prop_assert!(!err.to_string().is_empty());
                        if trusted.is_empty() {
                            prop_assert!(err.to_string().contains(annotation), "{}", err);
                        }
                    }
                }
            }
            Ok(())
        },
    );
}

/// Values of reflector's and replicator's annotations: regex fragments (valid, invalid, .NET-only,
/// huge repetitions), booleans in every spelling, selectors and references, and anything at all.
fn peer_value() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "a",
            "b",
            "team-",
            ".*",
            "[0-9]*",
            "(",
            ")",
            "[",
            "]",
            "|",
            "^",
            "$",
            "\\",
            "{1000}",
            "(?!kube-)",
            "(a+)+",
            ",",
            " ",
            "true",
            "True",
            "TRUE",
            "1",
            "t",
            "yes",
            "",
            "a/b",
            "/",
            "env=prod",
            "env in (a",
            "!x",
            "é",
            "\0",
        ][..],
    );
    prop_oneof![
        4 => prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()),
        1 => any_text(24),
    ]
}

/// Every annotation of reflector's and replicator's that conflux reads, and copyFrom.
const PEER_KEYS: [&str; 15] = [
    reflector::ALLOWED,
    reflector::ALLOWED_NAMESPACES,
    reflector::ALLOWED_NAMESPACES_SELECTOR,
    reflector::AUTO_ENABLED,
    reflector::AUTO_NAMESPACES,
    reflector::AUTO_NAMESPACES_SELECTOR,
    reflector::REFLECTS,
    reflector::AUTO_REFLECTS,
    replicator::REPLICATION_ALLOWED,
    replicator::REPLICATION_ALLOWED_NAMESPACES,
    replicator::REPLICATE_FROM,
    replicator::REPLICATE_TO,
    replicator::REPLICATE_TO_MATCHING,
    replicator::STRIP_LABELS,
    COPY_FROM_ANNOTATION,
];

#[test]
fn peer_annotations_hostile() {
    check(
        "peer_annotations_hostile",
        60_000,
        0xc0b1_f0b0_0007,
        (
            prop::collection::btree_map(
                prop::sample::select(&PEER_KEYS[..]).prop_map(str::to_owned),
                peer_value(),
                0..6,
            ),
            prop::collection::btree_map("[a-c]{1,2}", "[a-c]{0,2}", 0..3),
            prop::sample::select(&["flux-system", "team-a", "kube-system", "a"][..]),
        ),
        |(annotations, labels, namespace)| {
            let source = SourceRef::new(SourceKind::Secret, "flux-system", "cfg");
            let view = NamespaceView::new(namespace).labels(&labels);
            match FanOut::from_annotations(
                &source,
                Some(&labels),
                Some(&annotations),
                ["flux-system"],
            ) {
                Ok(Some(fan_out)) => {
                    let _ = fan_out.selects(view);
                    prop_assert!(
                        !fan_out.selects(NamespaceView::new("flux-system")),
                        "the source is never its own target"
                    );
                }
                Ok(None) => {}
                Err(err) => {
                    let message = err.to_string();
                    prop_assert!(!message.is_empty() && !err.reason().is_empty());
                    // Values are shortened in messages: a 256 KiB annotation never becomes an Event.
                    prop_assert!(
                        message.chars().count() < 2_000,
                        "{} chars",
                        message.chars().count()
                    );
                }
            }
            for via in [
                conflux_copy_core::copy_from::PullVia::CopyFrom,
                conflux_copy_core::copy_from::PullVia::Reflects,
                conflux_copy_core::copy_from::PullVia::ReplicateFrom,
            ] {
                match conflux_copy_core::consent::decide(&source, Some(&annotations), view, via) {
                    Ok(_) => {}
                    Err(err) => prop_assert!(err.to_string().chars().count() < 2_000),
                }
            }
            let _ = conflux_copy_core::copy_from::pull(
                "v1",
                "Secret",
                namespace,
                "cfg",
                Some(&annotations),
            );
            Ok(())
        },
    );
}

/// A marker that only ever appears inside Secret data./// A marker that only ever appears inside Secret data.
const SECRET_MARKER: &str = "s3cr3t-MARKER-do-not-print";

/// Object sets for the copy audit: namespaces, ConfigMaps and Secrets with hostile copyFrom,
/// consent and kopy annotations, and ConfigSyncs with hostile specs.
fn object_set() -> impl Strategy<Value = Vec<Value>> {
    let ns = prop::sample::select(&["a", "b", "flux-system", ""][..]);
    let name = prop::sample::select(&["x", "y", ""][..]);
    let annotations = prop::collection::btree_map(
        prop::sample::select(
            [
                ALLOWED_NAMESPACES_ANNOTATION,
                KOPY_SYNC_ANNOTATION,
                KOPY_SYNC_ANNOTATION_LEGACY,
                replicator::REPLICATED_KEYS,
                "other",
            ]
            .into_iter()
            .chain(PEER_KEYS)
            .collect::<Vec<_>>(),
        )
        .prop_map(str::to_owned),
        // Often meaningful (valid references, consent to the namespaces in play), so copies
        // get far enough to be refused, allowed, conflict or fail.
        prop_oneof![
            2 => prop::sample::select(
                &["a/x", "b/y", "flux-system/x", "a/y", "*", "a", "b, a", "", "!nope", "x in (a)", "true", "True", ".*", "a|b", "[", "k"][..]
            )
            .prop_map(str::to_owned),
            1 => annotation_value(),
        ],
        0..4,
    );
    let config = (
        prop::sample::select(&["ConfigMap", "Secret"][..]),
        ns.clone(),
        name.clone(),
        annotations,
        prop::option::of(prop::sample::select(
            &["Opaque", "kubernetes.io/tls", ""][..],
        )),
    )
        .prop_map(|(kind, ns, name, annotations, secret_type)| {
            let mut object = json!({
                "apiVersion": "v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            });
            if kind == "Secret" {
                // base64 of the marker, and the marker itself under stringData.
                object["data"] = json!({"k": "czNjcjN0LU1BUktFUi1kby1ub3QtcHJpbnQ="});
                object["stringData"] = json!({"k": SECRET_MARKER});
                if let Some(t) = secret_type {
                    object["type"] = json!(t);
                }
            } else {
                object["data"] = json!({"k": SECRET_MARKER});
            }
            object
        });
    let hostile = prop_oneof![
        annotation_value().prop_map(Value::String),
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        prop::collection::vec(annotation_value().prop_map(Value::String), 0..3)
            .prop_map(Value::Array),
    ];
    let config_sync = (ns.clone(), hostile.clone(), hostile.clone(), hostile).prop_map(
        |(ns, source_name, namespaces, selector)| {
            json!({
                "apiVersion": "copy.conflux.dev/v1alpha1",
                "kind": "ConfigSync",
                "metadata": {"name": "sync", "namespace": ns},
                "spec": {
                    "source": {"kind": "Secret", "namespace": "a", "name": source_name},
                    "target": {
                        "namespaces": namespaces,
                        "namespaceSelector": {"matchExpressions": [{"key": selector, "operator": "In", "values": ["v"]}]},
                    },
                },
            })
        },
    );
    let namespace = (ns, prop::collection::btree_map("[a-c]", annotation_value(), 0..3)).prop_map(
        |(name, labels)| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    );
    prop::collection::vec(
        prop_oneof![4 => config, 1 => config_sync, 1 => namespace],
        0..8,
    )
}

#[test]
fn copy_audit_hostile() {
    check(
        "copy_audit_hostile",
        30_000,
        0xc0b1_f0b0_0004,
        (object_set(), any::<bool>()),
        |(objects, trust)| {
            let options = AuditOptions {
                sync_source_namespaces: if trust {
                    vec!["a".to_owned(), "flux-system".to_owned()]
                } else {
                    Vec::new()
                },
                ..AuditOptions::default()
            };
            let report = audit(&objects, &options);
            for finding in &report.findings {
                prop_assert!(
                    !finding.message.contains(SECRET_MARKER)
                        && !finding.message.contains("czNjcjN0"),
                    "Secret data in a finding: {:?}",
                    finding
                );
            }
            for copy in &report.copies {
                let detail = copy.verdict.detail();
                prop_assert!(!detail.contains(SECRET_MARKER) && !detail.contains("czNjcjN0"));
            }
            Ok(())
        },
    );
}

/// Very long consent lists and globs stay linear: many stars against a long name.
#[test]
fn consent_huge_inputs() {
    let n = 100_000;
    let name = "a".repeat(n);
    assert!(!glob_match(&format!("{}b", "*a".repeat(64)), &name));
    assert!(glob_match(&"*".repeat(n), &name));
    let list = format!("{}team-*", "x,".repeat(n));
    assert!(allows(&list, "team-a"));
    assert!(!allows(&",".repeat(n), "team-a"));
    assert!(CopyFrom::parse(&"/".repeat(n)).is_err());
}
