//! Conformance of `JSONToYAML` (the go-yaml v2 emitter) against the vectors in `testdata/`:
//! every `j2y` line of `yaml-v2.jsonl`, and the `yaml_text` of every `resource` case of
//! `envsubst-upstream.jsonl` (see `testdata/README.md`).

use std::path::PathBuf;

use conflux_postbuild_subst::yaml::emit::{json_text_to_yaml, json_to_yaml};
use serde_json::Value;

/// Writes a summary line straight to stderr, past libtest's output capture, so CI logs show the
/// conformance counts even when the test passes.
macro_rules! summary {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The crate's `testdata/` directory.
fn conformance_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    assert!(
        dir.is_dir(),
        "conformance vectors not found at {} (see testdata/README.md)",
        dir.display()
    );
    dir
}

fn read_jsonl(name: &str) -> Vec<Value> {
    let path = conformance_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{name} line {}: {e}", i + 1))
        })
        .collect()
}

fn field<'a>(case: &'a Value, name: &str) -> Option<&'a str> {
    case.get(name).and_then(Value::as_str)
}

/// Prints at most this many failure details per suite.
const SHOWN: usize = 25;

#[test]
fn yaml_v2_j2y_vectors() {
    let cases: Vec<Value> = read_jsonl("yaml-v2.jsonl")
        .into_iter()
        .filter(|c| field(c, "layer") == Some("j2y"))
        .collect();
    assert_eq!(cases.len(), 881, "expected 881 j2y vectors");
    let mut failures = Vec::new();
    for case in &cases {
        let id = field(case, "id").unwrap_or("?");
        let input = field(case, "input").expect("j2y vector without input");
        let got = json_text_to_yaml(input).map_err(|e| e.to_string());
        let want = match (field(case, "output"), field(case, "error")) {
            (Some(out), _) => Ok(out.to_owned()),
            (None, Some(err)) => Err(err.to_owned()),
            (None, None) => panic!("{id}: neither output nor error"),
        };
        if got != want {
            failures.push(format!(
                "{id}\n  input: {input:?}\n  want:  {want:?}\n  got:   {got:?}"
            ));
        }
    }
    for f in failures.iter().take(SHOWN) {
        eprintln!("FAIL {f}");
    }
    summary!(
        "yaml j2y conformance: {} passed, {} failed",
        cases.len() - failures.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} j2y vectors failed", failures.len());
}

#[test]
fn envsubst_resource_yaml_text() {
    let cases: Vec<Value> = read_jsonl("envsubst-upstream.jsonl")
        .into_iter()
        .filter(|c| field(c, "layer") == Some("resource"))
        .collect();
    assert_eq!(cases.len(), 73, "expected 73 resource vectors");
    let mut failures = Vec::new();
    for case in &cases {
        let id = field(case, "id").unwrap_or("?");
        let input = field(case, "input").expect("resource vector without input");
        let want = field(case, "yaml_text").expect("resource vector without yaml_text");
        let value: Value = serde_json::from_str(input).expect("resource input is JSON");
        let got = json_to_yaml(&value).map_err(|e| e.to_string());
        // The text path must agree with the value path on these Go-encoded inputs.
        let got_text = json_text_to_yaml(input).map_err(|e| e.to_string());
        if got.as_deref() != Ok(want) || got_text.as_deref() != Ok(want) {
            failures.push(format!(
                "{id}\n  want: {want:?}\n  got:  {got:?}\n  text: {got_text:?}"
            ));
        }
    }
    for f in failures.iter().take(SHOWN) {
        eprintln!("FAIL {f}");
    }
    summary!(
        "yaml resource yaml_text conformance: {} passed, {} failed",
        cases.len() - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} resource vectors failed",
        failures.len()
    );
}
