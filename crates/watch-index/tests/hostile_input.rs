//! Hostile input (issue 11): label selectors (string syntax and `LabelSelector`), field paths
//! and reference extraction never panic, whatever the input, and what they accept behaves.
//!
//! Every property runs a fixed number of cases from a fixed seed and prints
//! `property <name>: <cases> cases, seed <n>` past libtest's capture, so CI logs show what ran
//! and a failure repeats. `CONFLUX_PROPTEST_SEED=<u64>` replaces every seed and
//! `CONFLUX_PROPTEST_SCALE=<n>` multiplies every case count, to explore further locally.

use std::collections::BTreeMap;

use conflux_watch_index::refs::{FieldPath, ReferenceSet, parse_copy_from};
use conflux_watch_index::selector::{
    Selector, validate_key, validate_label_selector, validate_value,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use proptest::prelude::*;
use serde_json::{Value, json};

use conflux_tests::props::check;

/// Any text: every Unicode scalar value, NUL and unassigned code points included.
fn any_text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max_chars).prop_map(String::from_iter)
}

/// What the selector lexer treats specially, keys and values valid and not, numbers at the
/// edges of `i64`, whitespace Go's lexer skips and characters it does not.
const SELECTOR_PIECES: &[&str] = &[
    "a",
    "b",
    "app",
    "x",
    "in",
    "notin",
    "IN",
    "=",
    "==",
    "!=",
    "!",
    "(",
    ")",
    ",",
    ">",
    "<",
    " ",
    "\t",
    "\n",
    "\r",
    "\u{0}",
    "\u{b}",
    "1",
    "007",
    "-1",
    "+3",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "é",
    "日本",
    "example.com/",
    "a.b-c_d/",
    "/",
    "-",
    ".",
    "_",
    "\u{a0}",
    "🙂",
    "\\",
    "\"",
    "'",
    "*",
];

fn selector_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(SELECTOR_PIECES), 0..24).prop_map(|v| v.concat())
}

/// Label sets with keys and values drawn from the same pieces as the selectors, so requirements
/// often find their label.
fn label_sets() -> impl Strategy<Value = Vec<BTreeMap<String, String>>> {
    let word = prop_oneof![
        3 => prop::sample::select(&["a", "b", "app", "x", "in", "example.com/a", "", "1", "007", "-1", "+3", "é"][..])
            .prop_map(str::to_owned),
        1 => any_text(6),
    ];
    prop::collection::vec(prop::collection::btree_map(word.clone(), word, 0..5), 1..4)
}

/// A selector that parsed: its canonical form parses to a selector with the same canonical
/// form, which matches exactly the same label sets.
fn canonical_round_trip(
    sel: &Selector,
    sets: &[BTreeMap<String, String>],
) -> Result<(), TestCaseError> {
    let canonical = sel.to_string();
    let reparsed = Selector::parse(&canonical);
    prop_assert!(
        reparsed.is_ok(),
        "canonical {canonical:?} does not parse: {reparsed:?}"
    );
    if let Ok(reparsed) = reparsed {
        for set in sets {
            prop_assert_eq!(sel.matches(set), reparsed.matches(set), "on {:?}", set);
        }
    }
    Ok(())
}

#[test]
fn selector_grammar_soup() {
    check(
        "selector_grammar_soup",
        150_000,
        0x5e1e_c701_0001,
        (selector_soup(), label_sets()),
        |(input, sets)| {
            match Selector::parse(&input) {
                Ok(sel) => {
                    canonical_round_trip(&sel, &sets)?;
                    // Parsed values are already deduplicated, so the text is a fixed point.
                    let canonical = sel.to_string();
                    let again = Selector::parse(&canonical).map(|s| s.to_string());
                    prop_assert_eq!(again.as_deref(), Ok(canonical.as_str()));
                }
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
            let _ = validate_key(&input);
            let _ = validate_value(&input);
            Ok(())
        },
    );
}

#[test]
fn selector_any_text() {
    check(
        "selector_any_text",
        60_000,
        0x5e1e_c701_0002,
        (any_text(48), label_sets()),
        |(input, sets)| {
            if let Ok(sel) = Selector::parse(&input) {
                canonical_round_trip(&sel, &sets)?;
            }
            let _ = validate_key(&input);
            let _ = validate_value(&input);
            Ok(())
        },
    );
}

fn label_selector() -> impl Strategy<Value = LabelSelector> {
    let word = prop_oneof![
        4 => prop::sample::select(SELECTOR_PIECES).prop_map(str::to_owned),
        2 => selector_soup(),
        1 => any_text(12),
    ];
    let operator = prop_oneof![
        4 => prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "in", ""][..])
            .prop_map(str::to_owned),
        1 => any_text(6),
    ];
    let requirement = (
        word.clone(),
        operator,
        prop::option::of(prop::collection::vec(word.clone(), 0..4)),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values,
        });
    (
        prop::option::of(prop::collection::btree_map(word.clone(), word, 0..4)),
        prop::option::of(prop::collection::vec(requirement, 0..4)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

#[test]
fn label_selector_hostile() {
    check(
        "label_selector_hostile",
        60_000,
        0x5e1e_c701_0003,
        (label_selector(), label_sets()),
        |(ls, sets)| {
            let _ = validate_label_selector(&ls, "spec.selector");
            if let Ok(sel) = Selector::from_label_selector(&ls) {
                for set in &sets {
                    let _ = sel.matches(set);
                }
                // Printing never panics; what it prints parses unless it holds a duplicate
                // value (the documented exception, see selector_props.rs).
                let canonical = sel.to_string();
                let has_duplicates = sel.requirements().iter().any(|r| {
                    let mut v = r.values().to_vec();
                    v.sort();
                    v.windows(2).any(|w| w[0] == w[1])
                });
                if !has_duplicates {
                    prop_assert!(
                        Selector::parse(&canonical).is_ok(),
                        "canonical {:?} does not parse",
                        canonical
                    );
                }
            }
            Ok(())
        },
    );
}

/// Field path text: segment separators, list filters and stray brackets.
fn field_path_soup() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "spec",
            "name",
            "a",
            ".",
            ".",
            "[",
            "]",
            "[]",
            "=",
            "[kind=ConfigMap]",
            "kind",
            "ConfigMap",
            "é",
            " ",
            "\0",
        ][..],
    );
    prop_oneof![
        4 => prop::collection::vec(piece, 0..12).prop_map(|p| p.concat()),
        1 => any_text(16),
    ]
}

/// Objects shaped like the referrers of [`ReferenceSet::flux`], with hostile values where the
/// references live (wrong types, empty names, lists of non-objects, copyFrom values).
fn referrer_object() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        prop::sample::select(
            &[
                "",
                "a",
                "ns/name",
                "/",
                "a/",
                "/b",
                "a/b/c",
                "ConfigMap",
                "Secret"
            ][..]
        )
        .prop_map(str::to_owned),
        any_text(8),
    ];
    let scalar = prop_oneof![
        text.clone().prop_map(Value::String),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
    ];
    let field = scalar.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(
                    &[
                        "name",
                        "kind",
                        "optional",
                        "namespace",
                        "configMapRef",
                        "secretRef"
                    ][..]
                )
                .prop_map(str::to_owned),
                inner,
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let kind = prop::sample::select(
        &[
            "Kustomization",
            "HelmRelease",
            "Receiver",
            "ConfigMap",
            "Secret",
            "Other",
        ][..],
    );
    let api_version = prop::sample::select(
        &[
            "kustomize.toolkit.fluxcd.io/v1",
            "helm.toolkit.fluxcd.io/v2",
            "notification.toolkit.fluxcd.io/v1",
            "v1",
            "",
            "/",
        ][..],
    );
    (kind, api_version, text, field.clone(), field.clone(), field).prop_map(
        |(kind, api_version, copy_from, spec, values_from, depends_on)| {
            json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {
                    "name": "n",
                    "namespace": "ns",
                    "annotations": {"fluxcd.controlplane.io/copyFrom": copy_from},
                },
                "spec": {
                    "kubeConfig": spec.clone(),
                    "decryption": {"secretRef": spec.clone()},
                    "secretRef": spec,
                    "valuesFrom": values_from.clone(),
                    "postBuild": {"substituteFrom": values_from},
                    "dependsOn": depends_on,
                },
            })
        },
    )
}

#[test]
fn field_paths_and_references_hostile() {
    let flux = ReferenceSet::flux();
    check(
        "field_paths_and_references_hostile",
        60_000,
        0x5e1e_c701_0004,
        (field_path_soup(), referrer_object(), any_text(12)),
        |(path, object, copy_from)| {
            if let Ok(parsed) = FieldPath::parse(&path) {
                prop_assert_eq!(parsed.as_str(), path.as_str());
                let mut found = 0usize;
                parsed.visit(&object, &mut |name, _| {
                    found += usize::from(!name.is_empty());
                });
            }
            let _ = flux.extract(&object);
            let _ = flux.references(&object);
            for value in [copy_from.as_str(), path.as_str()] {
                if let Some((namespace, name)) = parse_copy_from(value) {
                    prop_assert_eq!(format!("{namespace}/{name}"), value);
                    prop_assert!(!namespace.is_empty() && !name.is_empty() && !name.contains('/'));
                }
            }
            Ok(())
        },
    );
}

/// Deeply nested and very long selectors: linear, no recursion.
#[test]
fn selector_huge_inputs() {
    let n = 200_000;
    for input in [
        "(".repeat(n),
        format!("a in {}", "(".repeat(n)),
        format!("a in ({})", "b,".repeat(n)),
        "!".repeat(n),
        ",".repeat(n),
        "a,".repeat(n),
        "a=b,".repeat(n / 4),
        format!("a>{}", "9".repeat(n)),
    ] {
        if let Ok(sel) = Selector::parse(&input) {
            let _ = sel.matches(&BTreeMap::<String, String>::new());
            let _ = sel.to_string();
        }
    }
    assert!(FieldPath::parse(&".".repeat(n)).is_err());
    assert!(FieldPath::parse(&"a[]".repeat(n)).is_err());
    assert!(FieldPath::parse(&"a.".repeat(n)).is_err());
}
