//! Every case of `testdata/label-selectors.jsonl` (apimachinery v0.32.3 expectations;
//! the `v0_36_3` field is ignored).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use conflux_watch_index::selector::{
    Requirement, Selector, validate_key, validate_label_selector, validate_value,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/label-selectors.jsonl")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A requirement as the vectors write it: key, Go operator string, values.
type Req = (String, String, Vec<String>);

fn req_of(r: &Requirement) -> Req {
    (
        r.key().to_owned(),
        r.operator().as_str().to_owned(),
        r.values().to_vec(),
    )
}

fn expected_reqs(v: &Value) -> Vec<Req> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["key"].as_str().unwrap_or_default().to_owned(),
                r["operator"].as_str().unwrap_or_default().to_owned(),
                strings(&r["values"]),
            )
        })
        .collect()
}

/// Checks one case; `Err` describes the first mismatch.
fn check(case: &Value) -> Result<(), String> {
    let layer = case["layer"].as_str().unwrap_or_default();
    match layer {
        "validate-key" | "validate-value" => {
            let input = case["input"].as_str().ok_or("input is not a string")?;
            let got = if layer == "validate-key" {
                validate_key(input)
            } else {
                validate_value(input)
            };
            let want = strings(&case["errors"]);
            if got != want {
                return Err(format!("errors: got {got:?}, want {want:?}"));
            }
            if case["valid"].as_bool() != Some(got.is_empty()) {
                return Err("valid flag disagrees".to_owned());
            }
            Ok(())
        }
        "parse" => {
            let input = case["input"].as_str().ok_or("input is not a string")?;
            check_selector(case, Selector::parse(input))
        }
        "labelselector" => {
            let input: Option<LabelSelector> = serde_json::from_value(case["input"].clone())
                .map_err(|e| format!("bad input: {e}"))?;
            let got = validate_label_selector(input.as_ref(), "spec.selector");
            let mut want = strings(&case["validation_errors"]);
            let mut got_cmp = got.clone();
            if case["validation_errors_any_order"].as_bool() == Some(true) {
                want.sort();
                got_cmp.sort();
            }
            if got_cmp != want {
                return Err(format!("validation_errors: got {got:?}, want {want:?}"));
            }
            check_selector(case, Selector::from_label_selector(input.as_ref()))
        }
        other => Err(format!("unknown layer {other:?}")),
    }
}

fn check_selector(
    case: &Value,
    result: Result<Selector, conflux_watch_index::Error>,
) -> Result<(), String> {
    if let Some(want) = case["error"].as_str() {
        let allowed = match case.get("error_one_of") {
            Some(list) => strings(list),
            None => vec![want.to_owned()],
        };
        return match result {
            Ok(sel) => Err(format!("parsed as {sel:?}, want error {want:?}")),
            Err(e) if allowed.contains(&e.to_string()) => Ok(()),
            Err(e) => Err(format!("error:\n  got  {e}\n  want {want}")),
        };
    }
    let sel = result.map_err(|e| format!("unexpected error {e}"))?;
    let canonical = case["canonical"].as_str().ok_or("no canonical")?;
    let unstable = case["go_unstable_order"].as_bool() == Some(true);

    // Requirements (and so the canonical form) in Go's order; where Go's sort was unstable,
    // reorder ours into Go's order among equal keys before comparing.
    let mut ours: Vec<&Requirement> = sel.requirements().iter().collect();
    if let Some(want) = case.get("requirements") {
        let want = expected_reqs(want);
        if unstable {
            let mut pool = ours.clone();
            let mut reordered = Vec::new();
            for w in &want {
                let at = pool
                    .iter()
                    .position(|r| req_of(r) == *w)
                    .ok_or_else(|| format!("requirement {w:?} missing"))?;
                reordered.push(pool.remove(at));
            }
            let keys =
                |v: &[&Requirement]| v.iter().map(|r| r.key().to_owned()).collect::<Vec<_>>();
            if keys(&ours) != keys(&reordered) || !pool.is_empty() {
                return Err("requirements differ beyond equal-key order".to_owned());
            }
            ours = reordered;
        }
        let got: Vec<Req> = ours.iter().map(|r| req_of(r)).collect();
        if got != want {
            return Err(format!("requirements: got {got:?}, want {want:?}"));
        }
    }
    let got_canonical = if unstable {
        ours.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        sel.to_string()
    };
    if got_canonical != canonical {
        return Err(format!(
            "canonical: got {got_canonical:?}, want {canonical:?}"
        ));
    }
    if case["empty"].as_bool() != Some(sel.is_empty()) {
        return Err(format!("empty: got {}", sel.is_empty()));
    }
    if case["nothing"].as_bool().unwrap_or(false) != sel.is_nothing() {
        return Err(format!("nothing: got {}", sel.is_nothing()));
    }
    let sets = case["label_sets"].as_array().cloned().unwrap_or_default();
    let want_matches = case["matches"].as_array().cloned().unwrap_or_default();
    if sets.len() != want_matches.len() {
        return Err("label_sets and matches differ in length".to_owned());
    }
    for (set, want) in sets.iter().zip(&want_matches) {
        let labels: BTreeMap<String, String> =
            serde_json::from_value(set.clone()).map_err(|e| format!("bad label set: {e}"))?;
        if Some(sel.matches(&labels)) != want.as_bool() {
            return Err(format!("matches {set}: got {}", sel.matches(&labels)));
        }
    }
    // The canonical form parses back to itself, except where the vectors record otherwise.
    if !sel.is_nothing() {
        let reparsed = Selector::parse(&sel.to_string())
            .map_err(|e| format!("canonical does not reparse: {e}"))?
            .to_string();
        let want = case["canonical_reparsed"]
            .as_str()
            .map_or_else(|| sel.to_string(), str::to_owned);
        if reparsed != want {
            return Err(format!(
                "reparsed canonical: got {reparsed:?}, want {want:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn label_selector_conformance() {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "conformance vectors not found at {} ({e}); see testdata/README.md",
            path.display()
        )
    });
    let mut per_layer: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: not JSON: {e}", n + 1));
        let layer = case["layer"].as_str().unwrap_or("?").to_owned();
        let counts = per_layer.entry(layer).or_default();
        match check(&case) {
            Ok(()) => counts.0 += 1,
            Err(why) => {
                counts.1 += 1;
                failures.push(format!("{}: {why}", case["id"].as_str().unwrap_or("?")));
            }
        }
    }
    for f in failures.iter().take(40) {
        eprintln!("FAIL {f}");
    }
    // Written to stdout directly so the summary shows even when libtest captures output.
    let mut out = std::io::stdout().lock();
    for (layer, (pass, fail)) in &per_layer {
        let _ = writeln!(out, "  {layer}: {pass} passed, {fail} failed");
    }
    let passed: usize = per_layer.values().map(|c| c.0).sum();
    let _ = writeln!(
        out,
        "label selector conformance: {passed} passed, {} failed",
        failures.len()
    );
    drop(out);
    assert_eq!(
        passed + failures.len(),
        564,
        "the vector file should hold 564 cases"
    );
    assert!(
        failures.is_empty(),
        "{} conformance failures",
        failures.len()
    );
}
