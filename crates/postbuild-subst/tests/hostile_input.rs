//! Hostile input (issue 11): the `envsubst` engine, the go-yaml v2 parser and emitter and the
//! resource layer never panic and never overflow the stack, whatever the input.
//!
//! Every property runs a fixed number of cases from a fixed seed and prints
//! `property <name>: <cases> cases, seed <n>` past libtest's capture, so CI logs show what ran
//! and a failure repeats. `CONFLUX_PROPTEST_SEED=<u64>` replaces every seed and
//! `CONFLUX_PROPTEST_SCALE=<n>` multiplies every case count, to explore further locally.
//!
//! Deeply nested documents run on a thread with a 2 MiB stack (a tokio worker's default, and
//! libtest's), so passing here means the library does not rely on a big caller stack.

use std::collections::{BTreeMap, HashMap};

use conflux_postbuild_subst::envsubst::{self, Mode};
use conflux_postbuild_subst::resource::{
    ResourceOutcome, SubstitutionOptions, substitute_resource,
};
use conflux_postbuild_subst::vars::Variables;
use conflux_postbuild_subst::yaml::emit::{json_text_to_yaml, json_to_yaml};
use conflux_postbuild_subst::yaml::parse::{yaml_to_json, yaml_to_json_text};
use proptest::prelude::*;
use serde_json::Value;

use conflux_tests::props::check;

/// Any text: every Unicode scalar value, NUL and unassigned code points included. Built from
/// characters rather than with `any::<String>()`, whose regex-based generator is slow in debug
/// builds.
fn any_text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max_chars).prop_map(String::from_iter)
}

// ---------------------------------------------------------------------------------------------
// envsubst
// ---------------------------------------------------------------------------------------------

/// Variables whose values are themselves hostile: multi-byte characters (so substrings split
/// them), `${…}` and `$$` (never re-expanded), YAML structure, numbers at the edges of `i64`.
fn hostile_vars() -> HashMap<String, String> {
    [
        ("a", "héllo"),
        ("b", ""),
        ("n", "-3"),
        ("big", "9223372036854775807"),
        ("p", "/path/to/file.txt"),
        ("é", "${a}$$"),
        ("y", "a: [b, {c: d}]\n- e"),
        ("emoji", "😀x😀"),
        ("_", "}"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The pieces the envsubst grammar cares about, with numbers at the edges of Go's `int`.
const ENVSUBST_PIECES: &[&str] = &[
    "$",
    "$",
    "$",
    "${",
    "${",
    "${",
    "}",
    "}",
    "{",
    "$$",
    ":",
    ":",
    "=",
    ":=",
    ":-",
    ":+",
    ":?",
    "-",
    "+",
    "?",
    "#",
    "##",
    "%",
    "%%",
    "/",
    "//",
    "/#",
    "/%",
    "^",
    "^^",
    ",",
    ",,",
    "\\",
    "\\/",
    "*",
    "[",
    "]",
    "!",
    "0",
    "1",
    "-1",
    "007",
    "99999999999999999999",
    "-9223372036854775808",
    "9223372036854775807",
    "a",
    "b",
    "n",
    "big",
    "p",
    "é",
    "y",
    "emoji",
    "_",
    "x",
    "A_1",
    " ",
    "\n",
    "\t",
    "\0",
    "€",
    "😀",
    "\u{FFFD}",
];

/// Templates: mostly grammar pieces, some raw bytes (invalid UTF-8 becomes U+FFFD, as
/// `conflux envsubst` reads stdin).
fn envsubst_template() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        8 => prop::sample::select(ENVSUBST_PIECES).prop_map(|p| p.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..4),
    ];
    prop::collection::vec(piece, 0..48)
        .prop_map(|parts| String::from_utf8_lossy(&parts.concat()).into_owned())
}

/// Properties every template has, whatever it is:
/// - [`envsubst::eval`] is [`envsubst::eval_bytes`] with invalid bytes replaced;
/// - strict succeeds exactly when [`envsubst::undefined_variables`] finds nothing, and then
///   agrees with non-strict;
/// - [`envsubst::undefined_variables`] fails exactly when non-strict does, with its error.
fn envsubst_invariants(text: &str, vars: &HashMap<String, String>) -> Result<(), TestCaseError> {
    let lax_bytes = envsubst::eval_bytes(text, vars, Mode::NonStrict);
    let lax = envsubst::eval(text, vars, Mode::NonStrict);
    let lossy = lax_bytes
        .as_ref()
        .ok()
        .map(|b| String::from_utf8_lossy(b).into_owned());
    prop_assert_eq!(
        lax.as_ref().ok(),
        lossy.as_ref(),
        "eval and eval_bytes disagree"
    );
    let strict = envsubst::eval(text, vars, Mode::Strict);
    let undefined = envsubst::undefined_variables(text, vars);
    prop_assert_eq!(
        strict.is_ok(),
        matches!(&undefined, Ok(found) if found.is_empty()),
        "strict {:?}, undefined {:?}",
        strict,
        undefined
    );
    if let Ok(strict) = &strict {
        prop_assert_eq!(Some(strict), lax.as_ref().ok());
    }
    match (&lax, &undefined) {
        (Ok(_), Ok(_)) => {}
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        (a, b) => prop_assert!(false, "non-strict {:?}, undefined {:?}", a, b),
    }
    Ok(())
}

#[test]
fn envsubst_grammar_soup() {
    let vars = hostile_vars();
    let empty = HashMap::new();
    check(
        "envsubst_grammar_soup",
        150_000,
        0x0e57_0b57_0001,
        envsubst_template(),
        |text| {
            envsubst_invariants(&text, &vars)?;
            envsubst_invariants(&text, &empty)
        },
    );
}

#[test]
fn envsubst_arbitrary_strings() {
    let vars = hostile_vars();
    check(
        "envsubst_arbitrary_strings",
        50_000,
        0x0e57_0b57_0002,
        any_text(64),
        |text| envsubst_invariants(&text, &vars),
    );
}

#[test]
fn envsubst_arbitrary_bytes() {
    // Nothing but `$`, `{`, `}`, `:` and a few others, which maximises nesting and operators.
    let vars = hostile_vars();
    check(
        "envsubst_arbitrary_bytes",
        50_000,
        0x0e57_0b57_0003,
        prop::collection::vec(
            prop::sample::select(&b"${}{}$:=-+?#%/^,a0\\\0\xff"[..]),
            0..96,
        ),
        |bytes| envsubst_invariants(&String::from_utf8_lossy(&bytes), &vars),
    );
}

// ---------------------------------------------------------------------------------------------
// YAML parser (YAMLToJSON)
// ---------------------------------------------------------------------------------------------

/// Value equality where a float and an integer with the same value are equal (Go's float64
/// `8` prints as `8`, which reads back as an integer), but integers compare exactly.
fn same_value(a: &Value, b: &Value) -> bool {
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

/// The text and the value API agree: both fail with the same message, or the text is the
/// JSON of the value.
fn yaml_invariants(text: &str) -> Result<(), TestCaseError> {
    let as_text = yaml_to_json_text(text);
    let as_value = yaml_to_json(text);
    match (&as_text, &as_value) {
        (Ok(json), Ok(value)) => {
            let reparsed: Result<Value, _> = serde_json::from_str(json);
            prop_assert!(reparsed.is_ok(), "output is not JSON: {json:?}");
            if let Ok(reparsed) = reparsed {
                prop_assert!(same_value(&reparsed, value), "{json} vs {value}");
            }
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        (a, b) => prop_assert!(false, "text API {:?}, value API {:?}", a, b),
    }
    Ok(())
}

/// The pieces of YAML syntax: indicators, indentation, tags, anchors, directives, scalars that
/// YAML 1.1 resolves, and characters the reader rejects.
const YAML_PIECES: &[&str] = &[
    "- ",
    "-",
    "? ",
    ": ",
    ":",
    "[",
    "]",
    "{",
    "}",
    ", ",
    ",",
    "\n",
    "\n",
    "\n  ",
    "\n    ",
    "\r\n",
    " ",
    "  ",
    "\t",
    "# c",
    "#",
    "---",
    "---\n",
    "...",
    "%YAML 1.1\n",
    "%TAG ! !x\n",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "<<: ",
    "!!str ",
    "!!int ",
    "!!binary ",
    "!!map ",
    "!!seq ",
    "!!float ",
    "!x ",
    "!",
    "|",
    "|-",
    "|+2",
    ">",
    ">-",
    "'",
    "''",
    "\"",
    "\\",
    "\\u00e9",
    "\\x",
    "a",
    "key",
    "b",
    "1",
    "0755",
    "0x1F",
    "1e3",
    "-.inf",
    ".nan",
    "~",
    "null",
    "yes",
    "No",
    "on",
    "2001-12-14",
    "1:20",
    "=",
    "é",
    "😀",
    "\u{FEFF}",
    "\u{85}",
    "\u{1}",
    "\u{7f}",
    "\0",
    "@",
    "`",
];

fn yaml_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(YAML_PIECES), 0..40).prop_map(|p| p.concat())
}

#[test]
fn yaml_grammar_soup() {
    check(
        "yaml_grammar_soup",
        120_000,
        0x0e57_0b57_0004,
        yaml_soup(),
        |text| yaml_invariants(&text),
    );
}

#[test]
fn yaml_arbitrary_text() {
    check(
        "yaml_arbitrary_text",
        40_000,
        0x0e57_0b57_0005,
        any_text(64),
        |text| yaml_invariants(&text),
    );
}

// ---------------------------------------------------------------------------------------------
// YAML emitter (JSONToYAML) and the round trip
// ---------------------------------------------------------------------------------------------

/// Strings go-yaml must quote or fold: indicators, YAML 1.1 scalars, leading and trailing
/// spaces, line breaks, long lines, non-ASCII. Characters the reader rejects (DEL, C1, U+FFFE)
/// and NEL (which folds) are left out: they do not round-trip upstream either.
fn yaml_hostile_string() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "a",
            "key",
            " ",
            "  ",
            ": ",
            ":",
            "- ",
            "-",
            "? ",
            "#",
            " #",
            "[",
            "]",
            "{",
            "}",
            ",",
            "&",
            "*",
            "!",
            "|",
            ">",
            "'",
            "\"",
            "%",
            "@",
            "`",
            "\n",
            "\n\n",
            "\r\n",
            "\t",
            "\\",
            "yes",
            "no",
            "~",
            "null",
            "1",
            "0755",
            "0x1F",
            "1e3",
            ".inf",
            "1:20",
            "2001-12-14",
            "---",
            "...",
            "<<",
            "é",
            "😀",
            "\u{2028}",
            "\u{a0}",
            "\u{1}",
            "\0",
        ][..],
    );
    prop_oneof![
        4 => prop::collection::vec(piece, 0..12).prop_map(|p| p.concat()),
        1 => "[ -~]{60,120}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::num::f64::NORMAL.prop_map(Value::from),
        prop::sample::select(&[0.0, -0.0, 0.5, 1.0, 1e21, 1e-7, 123456789.0][..])
            .prop_map(Value::from),
        yaml_hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(yaml_hostile_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Whether a mapping has the key `<<`. go-yaml v2 writes it plain (`resolve` gives `!!str` for
/// it) and reads a plain `<<` key back as a merge, so upstream does not round-trip it either:
/// `{"<<": null}` becomes `<<: null`, which fails with `map merge requires map or sequence of
/// maps as the value`.
fn has_merge_key(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(has_merge_key),
        Value::Object(map) => map.contains_key("<<") || map.values().any(has_merge_key),
        _ => false,
    }
}

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

#[test]
fn json_yaml_round_trip() {
    check(
        "json_yaml_round_trip",
        40_000,
        0x0e57_0b57_0006,
        json_value(),
        |value| {
            let yaml = json_to_yaml(&value);
            prop_assert!(yaml.is_ok(), "JSONToYAML failed: {yaml:?}");
            let yaml = yaml.unwrap_or_default();
            if has_merge_key(&value) {
                return Ok(());
            }
            let back = yaml_to_json(&yaml);
            prop_assert!(back.is_ok(), "YAMLToJSON failed on {yaml:?}: {back:?}");
            let back = back.unwrap_or_default();
            prop_assert!(same_value(&value, &back), "{value} -> {yaml:?} -> {back}");
            // The text entry point reads the same JSON the same way (float literals aside: it
            // keeps them as written, the value API writes them as Go would). Go's encoder
            // escapes U+2028/U+2029, serde_json does not; raw, they are YAML line breaks.
            if !has_float(&value) {
                let text = serde_json::to_string(&value)
                    .unwrap_or_default()
                    .replace('\u{2028}', "\\u2028")
                    .replace('\u{2029}', "\\u2029");
                let from_text = json_text_to_yaml(&text);
                prop_assert_eq!(from_text.as_deref(), Ok(yaml.as_str()));
            }
            Ok(())
        },
    );
}

/// JSON-ish text: brackets, quotes, escapes and plain scalars in any order.
fn json_soup() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(
        &[
            "{", "}", "[", "]", ",", ":", "\"", "\"a\"", "\"k\":", "\"<<\":", "\\", "\\u",
            "\\ud800", "\\u00e9", "\\n", "1", "-0", "1.5e400", "1e3", "true", "yes", "null",
            "0x1F", " ", "\n", "\r", "\t", "#", "- ", "é", "\u{85}", "\u{7f}", "\0",
        ][..],
    );
    prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}

#[test]
fn json_text_to_yaml_soup() {
    check(
        "json_text_to_yaml_soup",
        60_000,
        0x0e57_0b57_0007,
        prop_oneof![4 => json_soup(), 1 => any_text(64)],
        |text| {
            // Whatever the reader accepts, the emitter writes YAML the parser reads back, with
            // two upstream exceptions: infinities and NaN are YAML but not JSON, and a `<<` key
            // is written plain and read back as a merge key (see `has_merge_key`).
            if let Ok(yaml) = json_text_to_yaml(&text) {
                let back = yaml_to_json_text(&yaml).map_err(|e| e.to_string());
                prop_assert!(
                    back.is_ok()
                        || back.as_ref().is_err_and(|e| {
                            e.contains("json: unsupported value")
                                || e.contains("map merge requires")
                        }),
                    "emitted {yaml:?} does not parse: {back:?}"
                );
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The resource layer
// ---------------------------------------------------------------------------------------------

/// A resource whose string values are templates, and variables whose values are YAML.
fn resource_case() -> impl Strategy<Value = (Value, BTreeMap<String, String>, u8)> {
    let template = prop_oneof![envsubst_template(), yaml_hostile_string()];
    let data = prop::collection::btree_map("[a-z]{1,3}", template, 0..4);
    let resource = (
        data,
        prop::option::of(prop::sample::select(&["disabled", "x"][..])),
    )
        .prop_map(|(data, label)| {
            let mut object = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "ns"},
                "data": data,
            });
            if let Some(label) = label {
                object["metadata"]["labels"] =
                    serde_json::json!({"kustomize.toolkit.fluxcd.io/substitute": label});
            }
            object
        });
    let names = prop::sample::select(&["a", "b", "y", "_x", "1bad", "é", "a-b", ""][..]);
    let values = prop_oneof![yaml_hostile_string(), yaml_soup()];
    let vars = prop::collection::btree_map(names.prop_map(str::to_owned), values, 0..4);
    (resource, vars, any::<u8>())
}

#[test]
fn substitute_resource_hostile() {
    check(
        "substitute_resource_hostile",
        40_000,
        0x0e57_0b57_0008,
        resource_case(),
        |(resource, vars, flags)| {
            let vars = Variables::from_merged(vars);
            let options = SubstitutionOptions {
                strict: flags & 1 != 0,
                always: flags & 2 != 0,
                typed: flags & 4 != 0,
            };
            let outcome = substitute_resource(&resource, &vars, &options);
            let lint = conflux_postbuild_subst::resource::undefined_variables_in_resource(
                &resource, &vars, &options,
            );
            // Typed mode substitutes string by string, so it cannot fail on YAML.
            if let (true, Err(err)) = (options.typed, &outcome) {
                let message = err.to_string();
                prop_assert!(!message.contains("yaml"), "typed mode: {message}");
            }
            // Whatever substituted, the lint reads too; in strict mode it then finds nothing.
            if let Ok(ResourceOutcome::Substituted(_)) = &outcome {
                prop_assert!(lint.is_ok(), "substituted, but the lint fails: {lint:?}");
                if options.strict {
                    prop_assert_eq!(lint.map(|found| found.len()).ok(), Some(0));
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Deep nesting
// ---------------------------------------------------------------------------------------------

/// Runs `work` on a thread with a 2 MiB stack (a tokio worker's, libtest's default).
fn on_small_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(work)
        .expect("thread starts")
        .join()
        .expect("no panic")
}

/// The YAML parser on documents nested far beyond go-yaml's 10,000 levels, in every shape:
/// an error naming the depth, never a crash.
#[test]
fn yaml_deep_nesting_shapes() {
    on_small_stack(|| {
        let n = 200_000;
        let shapes: Vec<(&str, String)> = vec![
            ("[ x200k", "[".repeat(n)),
            (
                "[ x200k closed",
                format!("{}{}", "[".repeat(n), "]".repeat(n)),
            ),
            ("{ x200k", "{".repeat(n)),
            (
                "{ x200k closed",
                format!("{}{}", "{".repeat(n), "}".repeat(n)),
            ),
            ("flow maps {a: x100k", "{a: ".repeat(n / 2)),
            ("flow maps in sequences", "[{a: ".repeat(n / 2)),
            ("flow keys {? x100k", "{? ".repeat(n / 2)),
            ("- - - - x200k", "- ".repeat(n)),
            ("? ? ? ? x200k", "? ".repeat(n)),
            ("a: a: ... on one line", "a: ".repeat(n)),
            ("- a: - a: x50k", "- a: ".repeat(n / 4)),
            ("anchored [ x200k", "&a [".repeat(n)),
            ("tagged [ x200k", "!!seq [".repeat(n)),
        ];
        for (shape, text) in &shapes {
            let result = yaml_to_json_text(text);
            assert!(result.is_err(), "{shape}: accepted");
            let value = yaml_to_json(text);
            assert!(value.is_err(), "{shape}: value API accepted");
        }
        // Block nesting by indentation: each level one column deeper (the text is quadratic,
        // so fewer levels), as sequences, mappings and both.
        let levels = 3_000;
        let mut seqs = String::new();
        let mut maps = String::new();
        let mut mixed = String::new();
        for i in 0..levels {
            seqs.push_str(&" ".repeat(i));
            seqs.push_str("-\n");
            maps.push_str(&" ".repeat(i));
            maps.push_str("a:\n");
            mixed.push_str(&" ".repeat(2 * i));
            mixed.push_str(if i % 2 == 0 { "- a:\n" } else { "  - \n" });
        }
        for (shape, text) in [
            ("block seqs", &seqs),
            ("block maps", &maps),
            ("mixed", &mixed),
        ] {
            // Within go-yaml's limits: parses, and the deep value is converted off this stack.
            let result = yaml_to_json_text(text);
            assert!(result.is_ok(), "{shape}: {result:?}");
        }
    });
}

/// The emitter and JSON reader: deep JSON text is refused, not recursed into.
#[test]
fn json_to_yaml_deep_nesting() {
    on_small_stack(|| {
        let n = 200_000;
        for text in [
            "[".repeat(n),
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
            "{\"a\":".repeat(n),
            format!("{}1{}", "{\"a\":[".repeat(n / 2), "]}".repeat(n / 2)),
        ] {
            let result = json_text_to_yaml(&text);
            assert!(result.is_err(), "accepted {} bytes", text.len());
        }
        // Exactly at go-yaml's limit it works; one deeper is an error.
        let limit = 10_000;
        let ok = format!("{}{}", "[".repeat(limit), "]".repeat(limit));
        assert!(json_text_to_yaml(&ok).is_ok());
        let over = format!("{}{}", "[".repeat(limit + 1), "]".repeat(limit + 1));
        assert_eq!(
            json_text_to_yaml(&over).map_err(|e| e.to_string()),
            Err("yaml: exceeded max depth of 10000".to_owned())
        );
    });
}

/// A value nested as deep as the parser allows survives the whole resource pipeline (emit,
/// substitute, parse) on a small stack, and so does dropping it.
#[test]
fn resource_pipeline_at_the_depth_limit() {
    on_small_stack(|| {
        let depth = 9_990;
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let resource = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "${v}"},
        });
        let vars = Variables::from_merged([("v".to_owned(), nested)]);
        let outcome = substitute_resource(&resource, &vars, &SubstitutionOptions::default());
        assert!(outcome.is_ok(), "{outcome:?}");
        let value = yaml_to_json(&format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)));
        assert!(value.is_ok());
        drop(value);
        drop(outcome);
    });
}

/// 100,000 nested `${`, closed and unclosed, with every operator: a result or an error, never a
/// crash (the evaluator keeps an explicit stack).
#[test]
fn envsubst_deep_nesting() {
    on_small_stack(|| {
        let n = 100_000;
        let empty: HashMap<String, String> = HashMap::new();
        for open in [
            "${", "${x:=", "${x:-", "${x/", "${x:", "${x#", "${x//a/", "${x:1:",
        ] {
            let unclosed = open.repeat(n);
            assert!(
                envsubst::eval(&unclosed, &empty, Mode::NonStrict).is_err(),
                "{open}"
            );
            let closed = format!("{}v{}", open.repeat(n), "}".repeat(n));
            let _ = envsubst::eval(&closed, &empty, Mode::Strict);
            let _ = envsubst::undefined_variables(&closed, &empty);
        }
        assert_eq!(
            envsubst::eval(&"${".repeat(n), &empty, Mode::NonStrict).map_err(|e| e.to_string()),
            Err("unable to parse variable name".to_owned())
        );
    });
}
