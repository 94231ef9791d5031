//! Runs every `y2j` vector of `testdata/yaml-v2.jsonl` through `yaml_to_json_text`
//! (exact bytes of Go's `json.Marshal`, or the exact upstream error) and `yaml_to_json`.

use std::path::PathBuf;

use conflux_postbuild_subst::yaml::parse::{yaml_to_json, yaml_to_json_text};

/// Writes a summary line straight to stderr, past libtest's output capture, so CI logs show the
/// conformance counts even when the test passes.
macro_rules! summary {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/yaml-v2.jsonl")
}

/// Value equality where a float and an integer with the same value are equal (Go's float64
/// `8` prints as `8`, which reads back as an integer), but integers compare exactly.
fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                x.as_f64() == y.as_f64()
            } else {
                x == y
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn yaml_y2j_conformance() {
    let path = vectors_path();
    let data = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "conformance vectors not found at {} ({e}); see testdata/README.md",
            path.display()
        )
    });
    let (mut passed, mut failed) = (0usize, 0usize);
    let (mut ok_cases, mut err_cases) = (0usize, 0usize);
    let mut failures = Vec::new();
    for line in data.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("valid JSON line");
        if case["layer"] != "y2j" {
            continue;
        }
        let id = case["id"].as_str().unwrap_or("?").to_string();
        let input = case["input"].as_str().expect("input string");
        let got = yaml_to_json_text(input);
        let verdict = match (case.get("output"), case.get("error")) {
            (Some(out), _) => {
                ok_cases += 1;
                let want = out.as_str().expect("output string");
                match &got {
                    Ok(text) if text == want => {
                        // The value API must agree with the text.
                        let value = yaml_to_json(input).expect("value API agrees");
                        let reparsed: serde_json::Value =
                            serde_json::from_str(want).expect("output is JSON");
                        if same_value(&value, &reparsed) {
                            Ok(())
                        } else {
                            Err(format!("value mismatch: {value}"))
                        }
                    }
                    other => Err(format!("want {want:?}, got {other:?}")),
                }
            }
            (None, Some(err)) => {
                err_cases += 1;
                let want = err.as_str().expect("error string");
                match &got {
                    Err(conflux_postbuild_subst::Error::Yaml(msg)) if msg == want => {
                        match yaml_to_json(input) {
                            Err(conflux_postbuild_subst::Error::Yaml(m)) if m == want => Ok(()),
                            other => Err(format!("value API: {other:?}")),
                        }
                    }
                    other => Err(format!("want error {want:?}, got {other:?}")),
                }
            }
            _ => Err("case has neither output nor error".to_string()),
        };
        match verdict {
            Ok(()) => passed += 1,
            Err(why) => {
                failed += 1;
                failures.push(format!("{id}: input {input:?}: {why}"));
            }
        }
    }
    for f in &failures {
        println!("FAIL {f}");
    }
    summary!(
        "yaml y2j conformance: {passed} passed, {failed} failed ({ok_cases} output cases, {err_cases} error cases)"
    );
    assert_eq!(passed + failed, 1472, "expected 1472 y2j vectors");
    assert_eq!(failed, 0, "{failed} y2j vectors failed");
}

mod never_panics {
    use proptest::prelude::*;

    use conflux_postbuild_subst::yaml::parse::yaml_to_json_text;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_text(s in any::<String>()) {
            let _ = yaml_to_json_text(&s);
        }

        #[test]
        fn yaml_like_text(s in "[ \\t\\n:\\-?\\[\\]{},#&*!|>'\"%@`a-c0-9.~<\\\\]{0,64}") {
            let _ = yaml_to_json_text(&s);
        }
    }
}
