//! A generated corpus for comparing `conflux build` with what the real kustomize-controller
//! applies: variables with awkward values (YAML 1.1 words, numbers in every notation, quotes,
//! multi-line strings, `$$`, YAML indicators) in every place a variable can stand, and literal
//! values that the YAML readers on either side may resolve differently.
//!
//! Each case is one Flux Kustomization (one directory of the Git repository) applying one
//! `Sample` object (a test CRD that keeps any fields, so types survive), so a case that fails on
//! one side does not hide the others.

use serde_json::{Value, json};

/// The corpus kind: keeps whatever it is given.
pub const GROUP: &str = "corpus.conflux.dev";
/// Its version.
pub const VERSION: &str = "v1";

/// Variables with awkward values: (name, value).
pub const VARIABLES: &[(&str, &str)] = &[
    ("YES", "yes"),
    ("NO", "no"),
    ("ON", "on"),
    ("OFF", "Off"),
    ("TRUE_WORD", "true"),
    ("Y", "y"),
    ("OCTAL", "0644"),
    ("OCTAL_O", "0o17"),
    ("HEX", "0x1F"),
    ("SCI", "1e3"),
    ("FLOAT", "1.20"),
    ("PLUS", "+12"),
    ("INT", "42"),
    ("UNDERSCORE", "1_000"),
    ("SEXAGESIMAL", "1:20"),
    ("INF", ".inf"),
    ("NAN", ".NaN"),
    ("TILDE", "~"),
    ("NULL_WORD", "null"),
    ("EMPTY", ""),
    ("DATE", "2001-12-14"),
    ("MULTI", "line one\nline two"),
    ("NEWLINE_END", "ends with newline\n"),
    ("LEADING", "  leading spaces"),
    ("TRAILING", "trailing spaces  "),
    ("SQUOTE", "it's"),
    ("DQUOTE", "say \"hi\""),
    ("DOLLARS", "$$not-a-var"),
    ("HASH", "#not-a-comment"),
    ("COLON", "key: value"),
    ("DASH", "- item"),
    ("FLOW_SEQ", "[a, b]"),
    ("FLOW_MAP", "{a: b}"),
    ("STAR", "*alias"),
    ("AMP", "&anchor"),
    ("BANG", "!tag"),
    ("PIPE", "|"),
    ("PERCENT", "%directive"),
    ("BACKSLASH", "C:\\path\\x"),
    ("TAB", "a\tb"),
    ("UNICODE", "é ü ✓ 日本"),
];

/// Differences found by this corpus and not fixed yet: (the start of the difference's line, why).
/// Each is ours. None is left: the last, `literals: date` (kustomize writes a plain YAML
/// timestamp as Go's JSON, `"2001-12-14T00:00:00Z"`), is fixed in conflux build's reader.
pub const KNOWN: &[(&str, &str)] = &[];

/// One case of the corpus.
pub struct Case {
    /// The case's directory in the repository, and the name of its Kustomization and Sample.
    pub name: String,
    /// The manifest file, as committed.
    pub manifest: String,
}

/// A variable in every place it can stand, as one Sample's `spec`.
fn variable_case(namespace: &str, index: usize, name: &str) -> Case {
    let case = format!("v{index:02}");
    let manifest = format!(
        r#"apiVersion: {GROUP}/{VERSION}
kind: Sample
metadata:
  name: {case}
  namespace: {namespace}
  annotations:
    corpus/variable: {name}
spec:
  whole: ${{{name}}}
  double_quoted: "${{{name}}}"
  single_quoted: '${{{name}}}'
  embedded: pre-${{{name}}}-post
  spaced: before ${{{name}}} after
  braced_default: ${{UNDEFINED_{index}:=${{{name}}}}}
  dash_default: ${{UNDEFINED_{index}:-fallback}}
  escaped: $${{{name}}}
  literal_block: |
    first ${{{name}}}
    second
  folded_block: >
    folded ${{{name}}}
    text
  list:
  - ${{{name}}}
  - x${{{name}}}
  nested:
    deeper:
      value: ${{{name}}}
"#
    );
    Case {
        name: case,
        manifest,
    }
}

/// Literal values the two sides' YAML readers might resolve differently (no variable at all,
/// the object is still substituted, so it goes through the whole pipeline).
fn literal_case(namespace: &str) -> Case {
    let manifest = format!(
        r#"apiVersion: {GROUP}/{VERSION}
kind: Sample
metadata:
  name: literals
  namespace: {namespace}
spec:
  octal: 0644
  octal_o: 0o17
  hex: 0x1F
  sci: 1e3
  float: 1.20
  plus: +12
  underscore: 1_000
  sexagesimal: 1:20
  yes_word: yes
  no_word: no
  on_word: on
  y_word: y
  true_word: true
  tilde: ~
  null_word: null
  empty:
  date: 2001-12-14
  big: 12345678901234567890
  big_int: 12345678901234567
  big_negative: -9007199254740993
  int_max: 9223372036854775807
  negative_zero: -0
  quoted_octal: "0644"
  binary: 0b101
  string_with_dollar: $HOME
  lonely_dollar: $
  unicode: "\u00e9\t\u2713"
"#
    );
    Case {
        name: "literals".into(),
        manifest,
    }
}

/// A literal that fails on its own, alone in its case: one with no JSON form (`.inf`, `.NaN`),
/// or a multi-line string led by a tab (kustomize's read-back with yaml.v3 refuses it).
fn non_finite_case(namespace: &str, name: &str, literal: &str) -> Case {
    let manifest = format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Sample\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  value: {literal}\n"
    );
    Case {
        name: name.into(),
        manifest,
    }
}

/// Every case of the corpus, for objects in `namespace` (the Kustomizations' `targetNamespace`:
/// kustomize sets it before substitution, so the inputs of `conflux build` carry it too).
pub fn cases(namespace: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = VARIABLES
        .iter()
        .enumerate()
        .map(|(i, (name, _))| variable_case(namespace, i, name))
        .collect();
    cases.push(literal_case(namespace));
    cases.push(non_finite_case(namespace, "literal-inf", ".inf"));
    cases.push(non_finite_case(namespace, "literal-nan", ".NaN"));
    cases.push(non_finite_case(
        namespace,
        "literal-tab",
        r#""\tfirst\nsecond""#,
    ));
    cases
}

/// The ConfigMap the Kustomizations substitute from (`substituteFrom`), holding every variable.
pub fn variables_config_map(namespace: &str) -> Value {
    let data: serde_json::Map<String, Value> = VARIABLES
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "corpus-vars", "namespace": namespace},
           "data": data})
}

/// The Flux Kustomization of one case.
pub fn kustomization(namespace: &str, case: &str) -> Value {
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
           "metadata": {"name": case, "namespace": namespace},
           "spec": {"interval": "10m", "path": format!("./cases/{case}"), "prune": true,
                    "targetNamespace": namespace,
                    "sourceRef": {"kind": "GitRepository", "name": "corpus"},
                    "postBuild": {"substitute": {"INLINE": "inline value"},
                                  "substituteFrom": [{"kind": "ConfigMap", "name": "corpus-vars"}]}}})
}

/// Two JSON values equal after normalising numbers (an integer and a float of the same value
/// are equal: the API server and serde_json may keep `1000` and `1000.0` apart).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        // Integers exactly (Flux rounds those beyond 2^53, which a float comparison would
        // hide); otherwise as floats (`1e3` may be read as 1000 on one side, 1000.0 on the other).
        (Value::Number(x), Value::Number(y)) => {
            let int = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (int(x), int(y), x.as_f64(), y.as_f64()) {
                (Some(a), Some(b), _, _) => a == b,
                (_, _, Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
                _ => x == y,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The fields of two objects' `spec` that differ, as `field: flux=... conflux=...` lines.
pub fn differences(flux: &Value, conflux: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    let f = flux.as_object().unwrap_or(&empty);
    let c = conflux.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = f.keys().chain(c.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (a, b) = (
            f.get(key).unwrap_or(&Value::Null),
            c.get(key).unwrap_or(&Value::Null),
        );
        if !same(a, b) {
            out.push(format!("{key}: flux={a} conflux={b}"));
        }
    }
    out
}

/// Judges one case: what kustomize-controller did (`flux`: the applied `spec`, or its failure)
/// against what `conflux build` made (`ours`). Differences not in [`KNOWN`] go to `report`;
/// `tag` starts each line printed. Returns whether both refused the case.
pub fn judge(
    tag: &str,
    case: &str,
    flux: &Result<Value, String>,
    ours: &Result<Value, String>,
    report: &mut Vec<String>,
) -> bool {
    match (flux, ours) {
        (Ok(f), Ok(c)) => {
            for line in differences(f, c) {
                let line = format!("{case}: {line}");
                match KNOWN.iter().find(|(known, _)| line.starts_with(known)) {
                    Some((_, why)) => println!("{tag}: known difference: {line} ({why})"),
                    None => report.push(line),
                }
            }
            false
        }
        (Err(f), Err(c)) => {
            println!(
                "{tag}: {case} refused by both: kustomize-controller: {}; conflux: {}",
                f.chars().take(160).collect::<String>(),
                c.chars().take(160).collect::<String>()
            );
            true
        }
        (Ok(f), Err(e)) => {
            report.push(format!("{case}: flux applied {f}, conflux failed: {e}"));
            false
        }
        (Err(e), Ok(c)) => {
            report.push(format!("{case}: flux failed ({e}), conflux built {c}"));
            false
        }
    }
}
