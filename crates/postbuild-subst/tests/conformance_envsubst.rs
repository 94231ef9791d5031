//! Runs every vector of `testdata/envsubst-upstream.jsonl` (docs/design.md section 2):
//! the `envsubst` layer (`envsubst.Eval`), the `cli` layer (`flux envsubst`, the whole input as
//! one template) and the `resource` layer (`kustomize.SubstituteVariables` on one resource).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use conflux_postbuild_subst::envsubst::{self, Mode};
use conflux_postbuild_subst::resource::{self, ResourceOutcome, SubstitutionOptions};
use serde_json::Value;

/// Writes a summary line straight to stderr, past libtest's output capture, so CI logs show the
/// conformance counts even when the test passes.
macro_rules! summary {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/envsubst-upstream.jsonl")
}

/// Compares JSON values with numbers compared numerically (`1000` equals `1000.0`).
fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => {
            a == b || matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| json_equal(x, y)))
        }
        _ => left == right,
    }
}

fn string_field<'v>(case: &'v Value, field: &str) -> Option<&'v str> {
    case.get(field).and_then(Value::as_str)
}

fn vars_of(case: &Value) -> BTreeMap<String, String> {
    case.get("vars")
        .and_then(Value::as_object)
        .map(|vars| {
            vars.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks an outcome against the case; `Err(reason)` on mismatch.
fn check_text(case: &Value, actual: Result<String, String>) -> Result<(), String> {
    let go_panic = case
        .get("go_panic")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match (string_field(case, "error"), actual) {
        (Some(_), Err(_)) if go_panic => Ok(()),
        (Some(expected), Err(actual)) if actual == expected || actual.contains(expected) => Ok(()),
        (Some(expected), Err(actual)) => Err(format!("error {actual:?}, expected {expected:?}")),
        (Some(expected), Ok(output)) => {
            Err(format!("output {output:?}, expected error {expected:?}"))
        }
        (None, Err(actual)) => Err(format!("unexpected error {actual:?}")),
        (None, Ok(output)) => {
            let expected = string_field(case, "output").unwrap_or_default();
            if output == expected {
                Ok(())
            } else {
                Err(format!("output {output:?}, expected {expected:?}"))
            }
        }
    }
}

fn run_text_case(case: &Value) -> Result<(), String> {
    let input = string_field(case, "input").unwrap_or_default();
    let vars: HashMap<String, String> = vars_of(case).into_iter().collect();
    let strict = case.get("strict").and_then(Value::as_bool).unwrap_or(false);
    let mode = if strict {
        Mode::Strict
    } else {
        Mode::NonStrict
    };
    let actual = std::panic::catch_unwind(|| envsubst::eval(input, &vars, mode))
        .map_err(|_| "panicked".to_string())?
        .map_err(|err| err.to_string());
    check_text(case, actual)
}

fn run_resource_case(case: &Value) -> Result<(), String> {
    let input: Value = serde_json::from_str(string_field(case, "input").unwrap_or_default())
        .map_err(|err| format!("bad input JSON: {err}"))?;
    let options = SubstitutionOptions {
        strict: case.get("strict").and_then(Value::as_bool).unwrap_or(false),
        always: case.get("always").and_then(Value::as_bool).unwrap_or(false),
        ..SubstitutionOptions::default()
    };
    let vars = conflux_postbuild_subst::vars::Variables::from_merged(vars_of(case));
    let outcome =
        std::panic::catch_unwind(|| resource::substitute_resource(&input, &vars, &options))
            .map_err(|_| "panicked".to_string())?;
    match (string_field(case, "error"), outcome) {
        (Some(expected), Err(err)) => {
            let actual = err.to_string();
            if actual == expected || actual.contains(expected) {
                Ok(())
            } else {
                Err(format!("error {actual:?}, expected {expected:?}"))
            }
        }
        (Some(expected), Ok(_)) => Err(format!("succeeded, expected error {expected:?}")),
        (None, Err(err)) => Err(format!("unexpected error {err}")),
        (None, Ok(outcome)) => {
            let expected: Value =
                serde_json::from_str(string_field(case, "output").unwrap_or_default())
                    .map_err(|err| format!("bad output JSON: {err}"))?;
            let skipped = string_field(case, "skipped");
            let (actual, actual_skip) = match outcome {
                ResourceOutcome::Substituted(value) => (value, None),
                ResourceOutcome::Disabled => (input.clone(), Some("disabled")),
                ResourceOutcome::NoVariables => (input.clone(), Some("no vars")),
                other => return Err(format!("unexpected outcome {other:?}")),
            };
            if skipped != actual_skip {
                return Err(format!("skipped {actual_skip:?}, expected {skipped:?}"));
            }
            if json_equal(&actual, &expected) {
                Ok(())
            } else {
                Err(format!("output {actual}, expected {expected}"))
            }
        }
    }
}

#[test]
fn envsubst_upstream_vectors() {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "conformance vectors not found at {} ({err}); see testdata/README.md",
            path.display()
        )
    });
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
    {
        let case: Value =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("line {}: {err}", number + 1));
        let layer = string_field(&case, "layer").unwrap_or_default().to_owned();
        let result = match layer.as_str() {
            "envsubst" | "cli" => run_text_case(&case),
            "resource" => run_resource_case(&case),
            other => Err(format!("unknown layer {other}")),
        };
        let entry = counts.entry(layer).or_default();
        match result {
            Ok(()) => entry.0 += 1,
            Err(reason) => {
                entry.1 += 1;
                failures.push(format!(
                    "{}: {reason}",
                    string_field(&case, "id").unwrap_or("?")
                ));
            }
        }
    }
    for failure in &failures {
        eprintln!("FAIL {failure}");
    }
    let passed: usize = counts.values().map(|c| c.0).sum();
    let failed: usize = counts.values().map(|c| c.1).sum();
    for (layer, (ok, bad)) in &counts {
        summary!("  {layer}: {ok} passed, {bad} failed");
    }
    summary!("envsubst conformance: {passed} passed, {failed} failed");
    assert_eq!(passed + failed, 387, "expected 387 vectors");
    assert!(failures.is_empty(), "{failed} conformance failures");
}
