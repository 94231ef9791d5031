//! `YAMLToJSON`: the go-yaml v2 parser with YAML 1.1 resolution, then Go `json.Marshal`.
//!
//! This reproduces `sigs.k8s.io/yaml.YAMLToJSON` on `gopkg.in/yaml.v2` v2.4: the libyaml-derived
//! scanner and parser (`scanner`, `parser`), go-yaml's decoder into `interface{}` values
//! (`decode`, `resolve`), sigs.k8s.io/yaml's key conversion and Go's JSON encoder. Error messages
//! are upstream's, including go-yaml's line numbering rule.

mod decode;
mod gofmt;
mod parser;
mod resolve;
mod scanner;

use std::collections::BTreeMap;

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
fn write_json(v: &Json, out: &mut Vec<u8>) -> Result<(), crate::Error> {
    match v {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Json::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Json::Uint(u) => out.extend_from_slice(u.to_string().as_bytes()),
        Json::Float(f) => {
            if !f.is_finite() {
                return Err(unsupported_float(*f));
            }
            out.extend_from_slice(gofmt::format_json_float(*f).as_bytes());
        }
        Json::Str(s) => gofmt::write_json_string(out, s),
        Json::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(item, out)?;
            }
            out.push(b']');
        }
        Json::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                gofmt::write_json_string(out, k);
                out.push(b':');
                write_json(item, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn to_serde(v: Json) -> Result<serde_json::Value, crate::Error> {
    use serde_json::Value;
    Ok(match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(b),
        Json::Int(i) => Value::from(i),
        Json::Uint(u) => Value::from(u),
        Json::Float(f) => match serde_json::Number::from_f64(f) {
            Some(n) => Value::Number(n),
            None => return Err(unsupported_float(f)),
        },
        Json::Str(s) => Value::String(gofmt::lossy_string(&s)),
        Json::Array(items) => {
            Value::Array(items.into_iter().map(to_serde).collect::<Result<_, _>>()?)
        }
        Json::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, item) in map {
                out.insert(gofmt::lossy_string(&k), to_serde(item)?);
            }
            Value::Object(out)
        }
    })
}

fn convert(text: &str) -> Result<Json, crate::Error> {
    to_jsonable(decode::unmarshal(text)?)
}

/// sigs.k8s.io/yaml.YAMLToJSON: the first document of `text`, parsed with go-yaml v2 rules.
///
/// Errors are [`crate::Error::Yaml`] with upstream's message (without sigs.k8s.io/yaml's
/// `error converting YAML to JSON: ` prefix), e.g. `yaml: line 3: mapping values are not
/// allowed in this context` or `json: unsupported value: +Inf`.
pub fn yaml_to_json(text: &str) -> Result<serde_json::Value, crate::Error> {
    to_serde(convert(text)?)
}

/// The same, rendered exactly as Go's json.Marshal would (compact, keys sorted by bytes, Go
/// escaping and float formatting).
pub fn yaml_to_json_text(text: &str) -> Result<String, crate::Error> {
    let json = convert(text)?;
    let mut out = Vec::new();
    write_json(&json, &mut out)?;
    // Every invalid byte was written as `\ufffd`, so the output is valid UTF-8.
    Ok(gofmt::lossy_string(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
