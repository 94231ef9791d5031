//! `JSONToYAML`: the go-yaml v2 emitter as sigs.k8s.io/yaml drives it.
//!
//! `sigs.k8s.io/yaml.JSONToYAML` parses the JSON with go-yaml v2 (so numbers are typed from their
//! literal and strings go through YAML double-quoted scalar rules), then marshals the resulting
//! `map[interface{}]interface{}` with the go-yaml v2 emitter. This module reproduces both halves
//! byte for byte:
//!
//! - a small reader for the JSON text that keeps number literals and folds raw line breaks the way
//!   the YAML scanner does ([`json_text_to_yaml`]), or a conversion of a parsed
//!   [`serde_json::Value`] that replays what Go's `json.Marshal` + that reader would do
//!   ([`json_to_yaml`]);
//! - YAML 1.1 resolution (`resolve.go`, shared with the parser in `yaml::resolve`), used to
//!   decide whether a string needs quotes, plus encode.go's base-60 rule;
//! - go-yaml's "natural" key order (`sorter.go`);
//! - the emitter (`emitterc.go`): style selection, quoting, escapes, literal blocks and folding at
//!   80 columns, with the same column bookkeeping.
//!
//! Everything is linear in the size of the input, apart from the key sort (`n log n` comparisons).

mod base60;
mod emitter;
mod json_text;
mod key_order;
pub(crate) mod kyaml;
mod unicode;
mod value;

use std::borrow::Cow;

use super::resolve::{Resolved, resolve_plain};
use crate::Error;
use emitter::emit_document;
use json_text::JsonReader;
use value::node_from_value;

/// `sigs.k8s.io/yaml.JSONToYAML` on a parsed value (what the resource layer uses).
///
/// The value is treated as Go would see it after `json.Marshal`: integers stay integers, and an
/// `f64` is written the way Go writes a `float64` (so `1.0` becomes the integer `1` and `1e21`
/// stays a float). Strings containing characters go-yaml's reader rejects (DEL, C1 controls,
/// U+FFFE, U+FFFF) give `yaml: control characters are not allowed`, and a raw NEL (U+0085) is
/// folded like a line break, exactly as in the Go pipeline.
///
/// Float values are taken as serde_json parsed them; without its `float_roundtrip` feature a
/// long literal can be one ULP off from Go's parse (`9007199254740993.0`).
pub fn json_to_yaml(value: &serde_json::Value) -> Result<String, Error> {
    let node = node_from_value(value)?;
    Ok(emit_document(&node))
}

/// The same on JSON text, keeping number literals as written (`1.0`, `1e3`, `-0`, `1e400`),
/// because go-yaml types numbers from their literal.
///
/// Errors carry go-yaml's message, e.g. `yaml: control characters are not allowed`. Input that
/// is not JSON is read leniently as go-yaml would where cheap (unquoted `yes` or `0x1F` resolve
/// as YAML 1.1 plain scalars), except that an unquoted timestamp stays text and a non-string
/// mapping key is an error.
pub fn json_text_to_yaml(json: &str) -> Result<String, Error> {
    let node = JsonReader::new(json).read_document()?;
    Ok(emit_document(&node))
}

/// Whether the plain (unquoted) scalar `s` resolves to something other than a string under
/// go-yaml v2's YAML 1.1 rules: null, bool, int, float or timestamp (`resolve.go`).
///
/// `yes`, `n`, `~`, `""`, `0755`, `0x1F`, `1e3`, `.5`, `+1`, `.inf` and `2001-12-14` do;
/// `inf`, `NaN`, `1e400`, `yEs` and `<<` do not. Base-60 numbers (`1:20`) are strings here; the
/// emitter quotes them separately.
pub fn resolves_to_non_string(s: &str) -> bool {
    !matches!(resolve_plain(s), Resolved::Str)
}

// ---------------------------------------------------------------------------------------------
// Data model
// ---------------------------------------------------------------------------------------------

/// A value as go-yaml v2 holds it after `yaml.Unmarshal` into `interface{}`.
#[derive(Debug, Clone, PartialEq)]
enum Node<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(Cow<'a, str>),
    Seq(Vec<Node<'a>>),
    /// Keys are always strings here: JSON object keys are quoted.
    Map(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Drop for Node<'_> {
    /// Drops nested collections with an explicit stack: the default recursive drop could
    /// overflow the stack at the nesting depths go-yaml accepts.
    fn drop(&mut self) {
        let is_collection = |n: &Node<'_>| matches!(n, Node::Seq(_) | Node::Map(_));
        let mut stack: Vec<Node<'_>> = match self {
            Node::Seq(items) if items.iter().any(is_collection) => std::mem::take(items),
            Node::Map(entries) if entries.iter().any(|(_, v)| is_collection(v)) => {
                std::mem::take(entries)
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect()
            }
            _ => return,
        };
        while let Some(mut node) = stack.pop() {
            match &mut node {
                Node::Seq(items) => stack.append(items),
                Node::Map(entries) => stack.extend(entries.drain(..).map(|(_, v)| v)),
                _ => {}
            }
            // `node` is now childless, so its own drop returns at once.
        }
    }
}

/// go-yaml v2 stops at this nesting depth (`max_flow_level`); it also keeps our recursion bounded.
const MAX_DEPTH: usize = 10_000;

fn yaml_err(msg: impl Into<String>) -> Error {
    Error::Yaml(msg.into())
}

fn depth_error() -> Error {
    yaml_err(format!("yaml: exceeded max depth of {MAX_DEPTH}"))
}

const CONTROL_CHARS: &str = "yaml: control characters are not allowed";

/// Characters go-yaml's reader accepts in its input (`yaml_parser_update_buffer`).
fn reader_allows(c: char) -> bool {
    matches!(c as u32,
        0x09 | 0x0A | 0x0D | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::base60::is_base60_float;
    use super::emitter::{analyze_ascii, analyze_chars};
    use super::key_order::{is_go_digit, is_go_letter, sorted_order};
    use crate::yaml::gofmt::{format_g, format_json_float};

    fn j2y(json: &str) -> String {
        json_text_to_yaml(json).unwrap_or_else(|e| format!("ERR {e}"))
    }

    fn v2y(value: serde_json::Value) -> String {
        json_to_yaml(&value).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn resolution_table() {
        for s in [
            "",
            "~",
            "null",
            "yes",
            "N",
            "on",
            "OFF",
            "0755",
            "0x1F",
            "0o17",
            "0b101",
            "-0b1",
            "0b+1",
            "1_000",
            "08",
            "1e3",
            "5.",
            ".5",
            "+1",
            "-0",
            ".inf",
            "-.Inf",
            ".NaN",
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10",
            "9223372036854775808",
            ".5_5",
        ] {
            assert!(
                resolves_to_non_string(s),
                "{s:?} should resolve to a non-string"
            );
        }
        for s in [
            "inf",
            "NaN",
            "nan",
            "1e400",
            "yEs",
            "<<",
            "a",
            "0x",
            "1:20",
            "._5",
            ".5_",
            "2001-02-30",
            "2001-13-01",
            "2001-12-14T21:59:43",
            "99999-01-01",
            "0b",
            "1e",
            "+.5e",
            "0x10000000000000000",
            "2001-12-14 ",
            "12:30",
        ] {
            assert!(!resolves_to_non_string(s), "{s:?} should stay a string");
        }
        assert_eq!(resolve_plain("0755"), Resolved::Int(493));
        assert_eq!(
            resolve_plain("18446744073709551615"),
            Resolved::Uint(u64::MAX)
        );
        assert_eq!(resolve_plain("08"), Resolved::Float(8.0));
        assert_eq!(
            resolve_plain("2001-12-14T21:59:43+24:00"),
            Resolved::Timestamp
        );
        assert_eq!(resolve_plain("2001-12-14T21:59:43+25:00"), Resolved::Str);
    }

    #[test]
    fn base60() {
        for s in [
            "1:20",
            "12:30:45",
            "-1:20",
            "+1:20",
            "1:20.5",
            "1_0:20",
            "190:20:30",
            "1:2",
        ] {
            assert!(is_base60_float(s), "{s}");
        }
        for s in ["1:60", "a:1", ":1:2", "1:", "1:2a", "1::2", "1:123"] {
            assert!(!is_base60_float(s), "{s}");
        }
    }

    #[test]
    fn go_float_formatting() {
        let g = |f: f64| format_g(f, false);
        assert_eq!(g(1.0), "1");
        assert_eq!(g(1e6), "1e+06");
        assert_eq!(g(123456.7), "123456.7");
        assert_eq!(g(1.5e-7), "1.5e-07");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(-0.0), "-0");
        assert_eq!(g(1.5e300), "1.5e+300");
        assert_eq!(g(5e-324), "5e-324");
        assert_eq!(
            format_json_float(1152921504606846976.0),
            "1152921504606847000"
        );
        assert_eq!(g(1e-7), "1e-07");
    }

    #[test]
    fn value_numbers_follow_go_json_then_yaml() {
        use serde_json::json;
        // A float64 goes through json.Marshal first: integral values below 1e21 become ints.
        assert_eq!(v2y(json!({"a": 1.0})), "a: 1\n");
        assert_eq!(v2y(json!({"a": 123456789.0})), "a: 123456789\n");
        assert_eq!(
            v2y(json!({"a": 1152921504606846976.0_f64})),
            "a: 1152921504606847000\n"
        );
        assert_eq!(v2y(json!({"a": 1e20})), "a: 1e+20\n");
        assert_eq!(v2y(json!({"a": 1e21})), "a: 1e+21\n");
        assert_eq!(v2y(json!({"a": 1e-7})), "a: 1e-07\n");
        assert_eq!(v2y(json!({"a": -0.0})), "a: 0\n");
        assert_eq!(v2y(json!({"a": 0.5})), "a: 0.5\n");
        assert_eq!(
            v2y(json!({"a": u64::MAX, "b": i64::MIN})),
            "a: 18446744073709551615\nb: -9223372036854775808\n"
        );
    }

    #[test]
    fn value_strings_follow_go_json_then_yaml() {
        use serde_json::json;
        assert_eq!(v2y(json!({"k": "a\u{85}b"})), "k: a b\n");
        assert_eq!(v2y(json!({"k": "a\u{85}\u{85}b"})), "k: |-\n  a\n  b\n");
        assert_eq!(v2y(json!({"k": " \u{85} "})), "k: ' '\n");
        assert_eq!(v2y(json!({"k": "\"q\"\u{85}\\"})), "k: '\"q\" \\'\n");
        assert_eq!(
            v2y(json!({"k": "a\u{7f}"})),
            "ERR yaml: control characters are not allowed"
        );
        assert_eq!(
            v2y(json!({"a\u{9f}": 1})),
            "ERR yaml: control characters are not allowed"
        );
        assert_eq!(
            v2y(json!({"k": "\u{fffe}"})),
            "ERR yaml: control characters are not allowed"
        );
        assert_eq!(v2y(json!({"k": "\t\u{1}\u{2028}"})), "k: \"\\t\\x01\\L\"\n");
        assert_eq!(v2y(json!("\u{feff}a b")), "\"\\uFEFF\\x61\\x20\\x62\"\n");
    }

    #[test]
    fn text_reader_edges() {
        assert_eq!(j2y(""), "null\n");
        assert_eq!(j2y("  \n"), "null\n");
        assert_eq!(j2y("{\"a\":1,\"a\":2}"), "a: 2\n");
        assert_eq!(
            j2y("{ \"b\" : [ 1 , 2 ] ,\n \"a\" : {} }"),
            "a: {}\nb:\n- 1\n- 2\n"
        );
        assert_eq!(j2y("\"a\\/b\""), "ERR yaml: found unknown escape character");
        assert_eq!(
            j2y("\"\\ud83d\\ude00\""),
            "ERR yaml: found invalid Unicode character escape code"
        );
        assert_eq!(
            j2y("\"\\u12\""),
            "ERR yaml: did not find expected hexdecimal number"
        );
        assert_eq!(j2y("\"abc"), "ERR yaml: found unexpected end of stream");
        assert_eq!(j2y("[1,2"), "ERR yaml: did not find expected ',' or ']'");
        assert_eq!(
            j2y("{\"a\":1} x"),
            "ERR yaml: did not find expected <document start>"
        );
        assert_eq!(j2y("\"a\\U0001F600\""), "\"a\\U0001F600\"\n");
        // Plain tokens resolve as YAML would.
        assert_eq!(
            j2y("[yes, 0x1F, .inf, -.inf, .nan, ~, abc]"),
            "- true\n- 31\n- .inf\n- -.inf\n- .nan\n- null\n- abc\n"
        );
        // Many keys, with a duplicate beyond the linear-scan threshold.
        let mut json = String::from("{");
        for i in 0..40 {
            json.push_str(&format!("\"k{i}\":{i},"));
        }
        json.push_str("\"k3\":\"x\"}");
        let out = j2y(&json);
        assert!(
            out.starts_with("k0: 0\nk1: 1\nk2: 2\nk3: x\nk4: 4\n"),
            "{out}"
        );
        assert_eq!(out.lines().count(), 40);
    }

    #[test]
    fn key_order() {
        let mut keys = vec![
            "a10", "a2", "a1", "b", "B", "_", "1", "01", "001", "a", "Z", "é", "~a",
        ];
        let order = sorted_order(&keys);
        keys = order.iter().map(|&i| keys[i]).collect();
        assert_eq!(
            keys,
            [
                "_", "~a", "1", "01", "001", "B", "Z", "a", "a1", "a2", "a10", "b", "é"
            ]
        );
        // A non-transitive set must not panic.
        let keys = [
            "a10a", "a1b", "a2a", "a10a0", "a1b1", "a2a2", "x", "a", "b", "c", "d", "e", "f", "g",
        ];
        assert_eq!(sorted_order(&keys).len(), keys.len());
    }

    #[test]
    fn ascii_analysis_matches_generic() {
        let alphabet = b"a :#-?.,'\"|>!\n\r\t\x00\x7f";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 1 + (seed % 7) as usize;
            let text: String = (0..len)
                .map(|k| alphabet[((seed >> (8 * k)) % alphabet.len() as u64) as usize] as char)
                .collect();
            assert_eq!(
                analyze_ascii(text.as_bytes()),
                analyze_chars(&text, text.chars()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn unicode_classes() {
        assert!(is_go_letter('é') && is_go_letter('ß') && is_go_letter('日') && is_go_letter('ª'));
        assert!(!is_go_letter('1') && !is_go_letter('😀') && !is_go_letter('\u{301}'));
        assert!(is_go_digit('٣') && is_go_digit('9') && !is_go_digit('²') && !is_go_digit('a'));
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let depth = MAX_DEPTH;
        let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let handle = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || json_text_to_yaml(&json).map(|s| s.len()))
            .expect("spawn");
        assert_eq!(
            handle.join().expect("no stack overflow"),
            Ok(2 * (depth - 1) + 3)
        );
        let json = format!("{}{}", "[".repeat(depth + 1), "]".repeat(depth + 1));
        assert_eq!(
            j2y(&json),
            format!("ERR yaml: exceeded max depth of {MAX_DEPTH}")
        );
    }

    /// About 1 MB of manifests; prints the time so regressions are visible (`--nocapture`).
    #[test]
    fn large_stream_is_linear() {
        let mut docs = Vec::new();
        for i in 0..400 {
            let mut env = Vec::new();
            for j in 0..20 {
                env.push(serde_json::json!({"name": format!("VAR_{j}"), "value": format!("value ${{VAR_{j}}} for item {i} with some words to fold maybe later on the line and more")}));
            }
            docs.push(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("app-{i}"), "labels": {"app": "x", "version": "1.0"}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.25", "env": env,
                    "command": ["sh", "-c", "echo hello\nexec nginx -g 'daemon off;'\n"]}]}}}
            }));
        }
        let total: usize = docs.iter().map(|d| d.to_string().len()).sum();
        let start = std::time::Instant::now();
        let mut out = 0;
        for d in &docs {
            out += json_to_yaml(d).map(|s| s.len()).unwrap_or(0);
        }
        let elapsed = start.elapsed();
        eprintln!("emitted {total} bytes of JSON as {out} bytes of YAML in {elapsed:?}");
        assert!(total > 1_000_000);
    }
}
