//! Properties of the selector parser: it never panics, and the canonical form of anything it
//! accepts parses back to the same selector, which matches the same label sets.
//!
//! The one documented exception (conformance README, `canonical_reparsed`): a `LabelSelector`
//! with duplicate values prints them (`x in (a,a)`), and parsing that deduplicates (`x in (a)`).

use std::collections::BTreeMap;

use conflux_watch_index::selector::Selector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use proptest::prelude::*;

/// Pieces the lexer treats specially, plus keys, values, NUL and non-ASCII text, so generated
/// strings reach deep into the grammar instead of failing at the first byte.
const PIECES: &[&str] = &[
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
    "é",
    "日本",
    "example.com/",
    "/",
    "-",
    ".",
    "_",
    "\u{a0}",
    "🙂",
];

fn grammar_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..16).prop_map(|v| v.concat())
}

fn label_sets() -> impl Strategy<Value = Vec<BTreeMap<String, String>>> {
    let key = prop::sample::select(&["a", "b", "app", "x", "in", "example.com/a"][..]);
    let value = prop::sample::select(&["", "a", "b", "1", "007", "+3", "-1", "in", "web"][..]);
    let set = prop::collection::btree_map(
        key.prop_map(str::to_owned),
        value.prop_map(str::to_owned),
        0..4,
    );
    prop::collection::vec(set, 1..6)
}

fn label_selectors() -> impl Strategy<Value = LabelSelector> {
    let word = prop::sample::select(&["", "a", "b", "x", "in", "-a", "a b", "example.com/a"][..])
        .prop_map(str::to_owned);
    let operator = prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "in"][..])
        .prop_map(str::to_owned);
    let requirement = (
        word.clone(),
        operator,
        // Distinct values: apimachinery prints duplicates as given (`a in (,,)`), which neither
        // it nor we parse back, so a round trip is only promised for sets.
        prop::option::of(prop::collection::btree_set(word.clone(), 0..4)),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values: values.map(|v| v.into_iter().collect()),
        });
    (
        prop::option::of(prop::collection::btree_map(word.clone(), word, 0..3)),
        prop::option::of(prop::collection::vec(requirement, 0..4)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn check_round_trip(
    sel: &Selector,
    sets: &[BTreeMap<String, String>],
) -> Result<(), TestCaseError> {
    let canonical = sel.to_string();
    let reparsed = Selector::parse(&canonical);
    prop_assert!(
        reparsed.is_ok(),
        "canonical {canonical:?} does not parse: {reparsed:?}"
    );
    let reparsed = reparsed.unwrap();
    for set in sets {
        prop_assert_eq!(sel.matches(set), reparsed.matches(set), "on {:?}", set);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn parser_never_panics_on_any_string(chars in prop::collection::vec(any::<char>(), 0..32)) {
        // Any scalar value, NUL and unassigned code points included.
        let input: String = chars.into_iter().collect();
        let _ = Selector::parse(&input);
    }

    #[test]
    fn parser_never_panics_on_grammar_soup(input in grammar_soup()) {
        let _ = Selector::parse(&input);
    }

    #[test]
    fn parsed_canonical_form_round_trips(input in grammar_soup(), sets in label_sets()) {
        if let Ok(sel) = Selector::parse(&input) {
            let canonical = sel.to_string();
            check_round_trip(&sel, &sets)?;
            // Parsed values are already deduplicated, so the text is a fixed point.
            let again = Selector::parse(&canonical).map(|s| s.to_string());
            prop_assert_eq!(again.as_deref(), Ok(canonical.as_str()));
        }
    }

    #[test]
    fn label_selector_canonical_form_round_trips(ls in label_selectors(), sets in label_sets()) {
        if let Ok(sel) = Selector::from_label_selector(Some(&ls)) {
            check_round_trip(&sel, &sets)?;
            // The exception: duplicate values collapse on reparse, and only they.
            let canonical = sel.to_string();
            let has_duplicates = sel.requirements().iter().any(|r| {
                let mut v = r.values().to_vec();
                v.sort();
                v.windows(2).any(|w| w[0] == w[1])
            });
            let reparsed = Selector::parse(&canonical).map(|s| s.to_string()).unwrap_or_default();
            prop_assert_eq!(reparsed == canonical, !has_duplicates, "{} vs {}", canonical, reparsed);
        }
    }
}

#[test]
fn nul_bytes_follow_go() {
    // Go's lexer reads byte 0 as the end of input.
    assert!(Selector::parse("\u{0}app=web").unwrap().is_empty());
    assert_eq!(
        Selector::parse("app,\u{0}tier").unwrap().to_string(),
        "app,tier"
    );
    assert_eq!(
        Selector::parse("app\u{0}web").unwrap_err().to_string(),
        "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt"
    );
}
