//! `YAMLToJSON`: the go-yaml v2 parser with YAML 1.1 resolution, then Go `json.Marshal`.
//!
//! This reproduces `sigs.k8s.io/yaml.YAMLToJSON` on `gopkg.in/yaml.v2` v2.4: the libyaml-derived
//! scanner and parser (`scanner`, `parser`), go-yaml's decoder into `interface{}` values
//! (`decode`, `resolve`), sigs.k8s.io/yaml's key conversion and Go's JSON encoder. Error messages
//! are upstream's, including go-yaml's line numbering rule.

mod decode;
mod parser;
mod scanner;
mod tags;

use std::collections::BTreeMap;

use super::gofmt;
use crate::redact::Redacted;
use decode::{GoVal, sharp_v};

/// A JSON-able value: what `convertToJSONableObject` returns, before `json.Marshal`.
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(Vec<u8>),
    Array(Vec<Json>),
    /// Keys sorted by bytes, as `encoding/json` writes them.
    Object(BTreeMap<Vec<u8>, Json>),
}

/// `convertToJSONableObject`: map keys become strings, or the conversion fails.
fn to_jsonable(v: GoVal) -> Result<Json, crate::Error> {
    Ok(match v {
        GoVal::Nil => Json::Null,
        GoVal::Bool(b) => Json::Bool(b),
        GoVal::Int(i) => Json::Int(i),
        GoVal::Uint(u) => Json::Uint(u),
        GoVal::Float(f) => Json::Float(f),
        GoVal::Str(s) => Json::Str(s),
        GoVal::Seq(items) => Json::Array(
            items
                .into_iter()
                .map(to_jsonable)
                .collect::<Result<_, _>>()?,
        ),
        GoVal::Map(map) => {
            let mut out = BTreeMap::new();
            for (k, v) in map.entries {
                let key: Vec<u8> = match &k {
                    GoVal::Str(s) => s.clone(),
                    GoVal::Int(i) => i.to_string().into_bytes(),
                    GoVal::Float(f) => {
                        let s = gofmt::format_g(*f, true);
                        match s.as_str() {
                            "+Inf" => ".inf".into(),
                            "-Inf" => "-.inf".into(),
                            "NaN" => ".nan".into(),
                            _ => s.into_bytes(),
                        }
                    }
                    GoVal::Bool(b) => b.to_string().into_bytes(),
                    GoVal::Nil | GoVal::Uint(_) | GoVal::Seq(_) | GoVal::Map(_) => {
                        let type_name = match &k {
                            GoVal::Nil => "%!s(<nil>)",
                            GoVal::Uint(_) => "uint64",
                            GoVal::Seq(_) => "[]interface {}",
                            _ => "map[interface {}]interface {}",
                        };
                        return Err(crate::Error::Yaml(format!(
                            "unsupported map key of type: {type_name}, key: {}, value: {}",
                            sharp_v(&k, true),
                            sharp_v(&v, true)
                        )));
                    }
                };
                out.insert(key, to_jsonable(v)?);
            }
            Json::Object(out)
        }
    })
}

fn unsupported_float(f: f64) -> crate::Error {
    crate::Error::Yaml(format!(
        "json: unsupported value: {}",
        gofmt::format_g(f, false)
    ))
}

/// Go `json.Marshal` (compact, HTML-escaped).
fn write_json(v: Json, out: &mut Vec<u8>) -> Result<(), crate::Error> {
    match v {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Json::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Json::Uint(u) => out.extend_from_slice(u.to_string().as_bytes()),
        Json::Float(f) => {
            if !f.is_finite() {
                return Err(unsupported_float(f));
            }
            out.extend_from_slice(gofmt::format_json_float(f).as_bytes());
        }
        Json::Str(s) => gofmt::write_json_string(out, &s),
        Json::Array(items) => {
            out.push(b'[');
            // Consumed as written, so that no deep value is dropped in one go afterwards.
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(item, out)?;
            }
            out.push(b']');
        }
        Json::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                gofmt::write_json_string(out, &k);
                out.push(b':');
                write_json(item, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// The first value `json.Marshal` would reject, in output order.
fn check_floats(v: &Json) -> Result<(), crate::Error> {
    match v {
        Json::Float(f) if !f.is_finite() => Err(unsupported_float(*f)),
        Json::Array(items) => items.iter().try_for_each(check_floats),
        Json::Object(map) => map.values().try_for_each(check_floats),
        _ => Ok(()),
    }
}

/// Converts to `serde_json`; floats are finite (see [`check_floats`]).
fn to_serde(v: Json) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(b),
        Json::Int(i) => Value::from(i),
        Json::Uint(u) => Value::from(u),
        Json::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Json::Str(s) => Value::String(gofmt::lossy_string(&s)),
        Json::Array(items) => Value::Array(items.into_iter().map(to_serde).collect()),
        Json::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, item)| (gofmt::lossy_string(&k), to_serde(item)))
                .collect(),
        ),
    }
}

/// Nesting up to this depth is converted on the caller's stack.
const INLINE_DEPTH: usize = 48;

/// Runs the recursive half of the conversion (decode, key conversion, `then`) on a thread
/// with a stack sized for the document when the document is deeply nested, so that hostile
/// input cannot overflow the caller's stack. Scanning and parsing are iterative.
fn convert<T: Send>(
    text: &str,
    then: impl FnOnce(Json) -> Result<T, crate::Error> + Send,
) -> Result<T, crate::Error> {
    let tree = decode::parse_tree(text)?;
    let depth = tree.as_ref().map_or(0, |t| t.depth);
    let work = move || then(to_jsonable(decode::decode_tree(tree.as_ref())?)?);
    if depth <= INLINE_DEPTH {
        return work();
    }
    // Generous for unoptimised builds, which use a few KiB per level.
    let stack = (1 << 20) + depth.saturating_mul(8 << 10);
    std::thread::scope(|scope| {
        match std::thread::Builder::new()
            .name("yaml-to-json".into())
            .stack_size(stack)
            .spawn_scoped(scope, work)
        {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err(crate::Error::Yaml(
                    "yaml: internal error while decoding".into(),
                ))
            }),
            Err(e) => Err(crate::Error::Yaml(format!(
                "yaml: document nested too deeply ({depth} levels): {e}"
            ))),
        }
    })
}

/// Hides the piece of the input that some of upstream's messages quote: an anchor name, a map key
/// or value, a scalar that does not fit its tag. Each becomes its length (`<redacted: 6 bytes>`);
/// the rest of the message, and every other message, is kept. For text that holds substituted
/// variables, whose values may come from Secrets. The shapes are the ones this parser writes;
/// the tests below make each of them.
pub(crate) fn redact_quoted_input(err: crate::Error) -> crate::Error {
    let crate::Error::Yaml(message) = err else {
        return err;
    };
    crate::Error::Yaml(redact_message(&message).unwrap_or(message))
}

fn redact_message(message: &str) -> Option<String> {
    let hidden = |piece: &str| Redacted(piece.len()).to_string();
    if let Some(rest) = message.strip_prefix("yaml: unknown anchor '") {
        let anchor = rest.strip_suffix("' referenced").unwrap_or(rest);
        return Some(format!(
            "yaml: unknown anchor '{}' referenced",
            hidden(anchor)
        ));
    }
    if let Some(rest) = message.strip_prefix("yaml: anchor '") {
        let anchor = rest.strip_suffix("' value contains itself").unwrap_or(rest);
        return Some(format!(
            "yaml: anchor '{}' value contains itself",
            hidden(anchor)
        ));
    }
    if let Some(key) = message.strip_prefix("yaml: invalid map key: ") {
        return Some(format!("yaml: invalid map key: {}", hidden(key)));
    }
    if let Some(rest) = message.strip_prefix("yaml: cannot decode ") {
        // `<resolved tag> `<scalar>` as a <wanted tag>`; the scalar may hold backticks.
        let Some((resolved, rest)) = rest.split_once(" `") else {
            return Some(format!("yaml: cannot decode {}", hidden(rest)));
        };
        let Some((scalar, wanted)) = rest.rsplit_once("` as a ") else {
            return Some(format!("yaml: cannot decode {resolved} `{}`", hidden(rest)));
        };
        return Some(format!(
            "yaml: cannot decode {resolved} `{}` as a {wanted}",
            hidden(scalar)
        ));
    }
    if let Some(rest) = message.strip_prefix("unsupported map key of type: ") {
        let Some((type_name, rest)) = rest.split_once(", key: ") else {
            return Some(format!("unsupported map key of type: {}", hidden(rest)));
        };
        let (key, value) = rest.split_once(", value: ").unwrap_or((rest, ""));
        return Some(format!(
            "unsupported map key of type: {type_name}, key: {}, value: {}",
            hidden(key),
            hidden(value)
        ));
    }
    None
}

/// sigs.k8s.io/yaml.YAMLToJSON: the first document of `text`, parsed with go-yaml v2 rules.
///
/// Errors are [`crate::Error::Yaml`] with upstream's message (without sigs.k8s.io/yaml's
/// `error converting YAML to JSON: ` prefix), e.g. `yaml: line 3: mapping values are not
/// allowed in this context` or `json: unsupported value: +Inf`.
///
/// Floats stay `f64` (Go's `8.0` is the number `8` in the text form) and integers are exact
/// `i64`/`u64`. Strings that `!!binary` decodes to invalid UTF-8 get U+FFFD per bad byte, as
/// Go's encoder does. The value nests as deeply as the document (go-yaml allows 10000 flow
/// and 10000 block levels); dropping a value thousands of levels deep needs a matching stack.
pub fn yaml_to_json(text: &str) -> Result<serde_json::Value, crate::Error> {
    convert(text, |json| {
        // json.Marshal fails on the first NaN/Inf in output order; check before converting.
        check_floats(&json)?;
        Ok(to_serde(json))
    })
}

/// The same, rendered exactly as Go's json.Marshal would (compact, keys sorted by bytes, Go
/// escaping and float formatting).
pub fn yaml_to_json_text(text: &str) -> Result<String, crate::Error> {
    convert(text, |json| {
        let mut out = Vec::new();
        write_json(json, &mut out)?;
        // Every invalid byte was written as `\ufffd`, so the output is valid UTF-8.
        Ok(gofmt::lossy_string(&out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message that quotes the input, made by the parser, and what redaction leaves of it.
    #[test]
    fn quoted_input_is_redacted() {
        let cases = [
            (
                "a: *secret\n",
                "yaml: unknown anchor 'secret' referenced",
                "yaml: unknown anchor '<redacted: 6 bytes>' referenced",
            ),
            (
                "&secret [*secret]\n",
                "yaml: anchor 'secret' value contains itself",
                "yaml: anchor '<redacted: 6 bytes>' value contains itself",
            ),
            (
                "? [se, cret]\n: v\n",
                "yaml: invalid map key: []interface {}{\"se\", \"cret\"}",
                "yaml: invalid map key: <redacted: 28 bytes>",
            ),
            (
                "a: !!float sec`ret\n",
                "yaml: cannot decode !!str `sec`ret` as a !!float",
                "yaml: cannot decode !!str `<redacted: 7 bytes>` as a !!float",
            ),
            (
                "? ~\n: secret\n",
                "unsupported map key of type: %!s(<nil>), key: <nil>, value: \"secret\"",
                "unsupported map key of type: %!s(<nil>), key: <redacted: 5 bytes>, value: <redacted: 8 bytes>",
            ),
        ];
        for (input, upstream, redacted) in cases {
            let err = yaml_to_json(input).expect_err(input);
            assert_eq!(err.to_string(), upstream, "{input:?}");
            assert_eq!(redact_quoted_input(err).to_string(), redacted, "{input:?}");
        }
        let other = yaml_to_json("a: b: c\n").expect_err("not YAML");
        assert_eq!(redact_quoted_input(other.clone()), other);
    }

    fn ok(input: &str) -> String {
        yaml_to_json_text(input).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn basics() {
        assert_eq!(ok("k: yes\n"), r#"{"k":true}"#);
        assert_eq!(ok("k: 0755\n"), r#"{"k":493}"#);
        assert_eq!(ok(""), "null");
        assert_eq!(ok("a: [1, 2]\n"), r#"{"a":[1,2]}"#);
        assert_eq!(ok("a: 1\nb: 2\n"), r#"{"a":1,"b":2}"#);
        assert_eq!(
            ok("a: 1\n b: 2\n"),
            "ERR yaml: line 2: mapping values are not allowed in this context"
        );
    }

    #[test]
    fn reader_details() {
        // A BOM at the start is dropped, CRLF is a line break.
        assert_eq!(ok("\u{FEFF}a: 1\r\nb: 2\r\n"), r#"{"a":1,"b":2}"#);
        // The reader validates whole 512-byte chunks: a control character in the first
        // chunk fails even after the first document, one in a chunk never read does not.
        assert_eq!(
            ok("a: 1\n---\n\u{1}\n"),
            "ERR yaml: control characters are not allowed"
        );
        let far = format!("a: 1\n---\n{}\u{1}\n", "#".repeat(1000));
        assert_eq!(ok(&far), r#"{"a":1}"#);
        // Only the first document is parsed at all.
        assert_eq!(ok("a: 1\n---\n: ["), r#"{"a":1}"#);
        assert_eq!(ok("  a: 1\nb: 2"), r#"{"a":1}"#);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let n = 10_000;
        let flow = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(yaml_to_json_text(&flow).expect("deep flow parses"), flow);
        let too_deep = format!("{}{}", "[".repeat(n + 1), "]".repeat(n + 1));
        assert_eq!(
            yaml_to_json_text(&too_deep).unwrap_err().to_string(),
            "yaml: exceeded max depth of 10000"
        );
        let mut block = String::new();
        for i in 0..2000 {
            block.push_str(&" ".repeat(i));
            block.push_str("- ");
            block.push('\n');
        }
        assert!(yaml_to_json_text(&block).is_ok());
    }

    #[test]
    fn aliases_and_merges() {
        assert_eq!(
            ok("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  q: 3\n"),
            r#"{"a":{"p":1,"q":2},"b":{"p":1,"q":3}}"#
        );
        assert_eq!(
            ok("a: &x [*x]\n"),
            "ERR yaml: anchor 'x' value contains itself"
        );
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9u8 {
            let (p, c) = (char::from(b'a' + i - 1), char::from(b'a' + i));
            let refs = vec![format!("*{p}"); 10].join(", ");
            laughs.push_str(&format!("{c}: &{c} [{refs}]\n"));
        }
        assert_eq!(
            ok(&laughs),
            "ERR yaml: document contains excessive aliasing"
        );
    }
}
