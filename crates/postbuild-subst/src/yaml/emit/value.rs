//! A parsed `serde_json::Value` to the emitter's nodes, replaying what Go's `json.Marshal` and
//! go-yaml's reader would make of it.

use std::borrow::Cow;

use super::json_text::JsonReader;
use super::{CONTROL_CHARS, MAX_DEPTH, Node, depth_error, reader_allows, yaml_err};
use crate::Error;
use crate::yaml::gofmt::format_json_float;
use crate::yaml::resolve::{Resolved, resolve_plain};

/// A container being converted, with the children still to visit.
pub(super) enum ValueFrame<'v> {
    Seq(std::slice::Iter<'v, serde_json::Value>, Vec<Node<'v>>),
    Map(
        serde_json::map::Iter<'v>,
        Vec<(Cow<'v, str>, Node<'v>)>,
        Cow<'v, str>,
    ),
}

/// Converts iteratively: nesting depth is bounded by [`MAX_DEPTH`], not by the thread's stack.
pub(super) fn node_from_value(root: &serde_json::Value) -> Result<Node<'_>, Error> {
    use serde_json::Value;
    let mut stack: Vec<ValueFrame<'_>> = Vec::new();
    // A finished node waiting to be attached to the innermost open container.
    let mut pending: Option<Node<'_>> = None;
    let mut next = Some(root);
    loop {
        if let Some(value) = next.take() {
            match value {
                Value::Null => pending = Some(Node::Null),
                Value::Bool(b) => pending = Some(Node::Bool(*b)),
                Value::Number(n) => {
                    pending = Some(if let Some(i) = n.as_i64() {
                        Node::Int(i)
                    } else if let Some(u) = n.as_u64() {
                        Node::Uint(u)
                    } else {
                        // Without arbitrary_precision every other number is an f64.
                        node_from_go_json_float(n.as_f64().unwrap_or(f64::NAN))
                    });
                }
                Value::String(s) => pending = Some(Node::Str(string_through_go_json(s)?)),
                Value::Array(items) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(depth_error());
                    }
                    stack.push(ValueFrame::Seq(
                        items.iter(),
                        Vec::with_capacity(items.len()),
                    ));
                }
                Value::Object(map) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(depth_error());
                    }
                    let entries = Vec::with_capacity(map.len());
                    stack.push(ValueFrame::Map(map.iter(), entries, Cow::Borrowed("")));
                }
            }
        }
        let Some(top) = stack.last_mut() else {
            // The root is complete (`pending` is always set here).
            return Ok(pending.unwrap_or(Node::Null));
        };
        match top {
            ValueFrame::Seq(rest, items) => {
                if let Some(node) = pending.take() {
                    items.push(node);
                }
                if let Some(value) = rest.next() {
                    next = Some(value);
                    continue;
                }
            }
            ValueFrame::Map(rest, entries, key) => {
                if let Some(node) = pending.take() {
                    entries.push((std::mem::take(key), node));
                }
                if let Some((k, value)) = rest.next() {
                    *key = string_through_go_json(k)?;
                    next = Some(value);
                    continue;
                }
            }
        }
        pending = stack.pop().map(|frame| match frame {
            ValueFrame::Seq(_, items) => Node::Seq(items),
            ValueFrame::Map(_, entries, _) => Node::Map(entries),
        });
    }
}

/// What a string becomes after Go's `json.Marshal` and go-yaml's double-quoted scalar scanner.
///
/// Go escapes quotes, backslashes, C0 controls and U+2028/U+2029 but leaves DEL, C1 controls and
/// U+FFFE/U+FFFF raw, which go-yaml's reader rejects; a raw NEL is a YAML line break and folds.
pub(super) fn string_through_go_json(s: &str) -> Result<Cow<'_, str>, Error> {
    // Fast path: every character of interest starts with one of these bytes.
    if !s.bytes().any(|b| b == 0x7F || b == 0xC2 || b == 0xEF) {
        return Ok(Cow::Borrowed(s));
    }
    let mut has_nel = false;
    for c in s.chars() {
        if c == '\u{85}' {
            has_nel = true;
        } else if !reader_allows(c) && (c as u32) >= 0x20 {
            return Err(yaml_err(CONTROL_CHARS));
        }
    }
    if !has_nel {
        return Ok(Cow::Borrowed(s));
    }
    // Rebuild the JSON string literal Go would write and scan it as go-yaml does.
    let mut lit = String::with_capacity(s.len() + 2);
    lit.push('"');
    for c in s.chars() {
        match c {
            '"' => lit.push_str("\\\""),
            '\\' => lit.push_str("\\\\"),
            '\u{2028}' => lit.push_str("\\u2028"),
            '\u{2029}' => lit.push_str("\\u2029"),
            c if (c as u32) < 0x20 => lit.push_str(&format!("\\u{:04x}", c as u32)),
            c => lit.push(c),
        }
    }
    lit.push('"');
    let mut reader = JsonReader::new(&lit);
    let scanned = reader.scan_string()?;
    Ok(Cow::Owned(scanned.into_owned()))
}

/// A Go `float64` as `json.Marshal` writes it, then typed again by go-yaml from that literal.
pub(super) fn node_from_go_json_float(f: f64) -> Node<'static> {
    if !f.is_finite() {
        // Not representable in serde_json; keep something sensible.
        return Node::Float(f);
    }
    let lit = format_json_float(f);
    match resolve_plain(&lit) {
        Resolved::Int(i) => Node::Int(i),
        Resolved::Uint(u) => Node::Uint(u),
        Resolved::Float(v) => Node::Float(v),
        _ => Node::Str(Cow::Owned(lit)),
    }
}
