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

use std::borrow::Cow;
use std::collections::HashMap;

use super::gofmt::{format_g, format_json_float};
use super::resolve::{Resolved, resolve_plain};
use super::scan::{Escape, escape, is_break, join_gap};
use crate::Error;

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
pub(crate) fn resolves_to_non_string(s: &str) -> bool {
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

// ---------------------------------------------------------------------------------------------
// serde_json::Value -> Node
// ---------------------------------------------------------------------------------------------

/// A container being converted, with the children still to visit.
enum ValueFrame<'v> {
    Seq(std::slice::Iter<'v, serde_json::Value>, Vec<Node<'v>>),
    Map(
        serde_json::map::Iter<'v>,
        Vec<(Cow<'v, str>, Node<'v>)>,
        Cow<'v, str>,
    ),
}

/// Converts iteratively: nesting depth is bounded by [`MAX_DEPTH`], not by the thread's stack.
fn node_from_value(root: &serde_json::Value) -> Result<Node<'_>, Error> {
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
fn string_through_go_json(s: &str) -> Result<Cow<'_, str>, Error> {
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
fn node_from_go_json_float(f: f64) -> Node<'static> {
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

// ---------------------------------------------------------------------------------------------
// JSON text -> Node (go-yaml's view of JSON: a YAML flow document)
// ---------------------------------------------------------------------------------------------

/// A container being read, with the key of the value being read for a mapping.
enum ReadFrame<'a> {
    Seq(Vec<Node<'a>>),
    Map(
        Vec<(Cow<'a, str>, Node<'a>)>,
        Option<HashMap<Cow<'a, str>, usize>>,
        Cow<'a, str>,
    ),
}

/// Reads JSON text the way go-yaml v2 scans it as YAML flow content: strings are double-quoted
/// scalars (YAML escapes, raw line breaks fold), and unquoted tokens are plain scalars resolved
/// with YAML 1.1 rules. Anything beyond JSON gets a best-effort go-yaml-style error.
struct JsonReader<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> JsonReader<'a> {
    fn new(src: &'a str) -> Self {
        JsonReader { src, pos: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.src.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.pos).copied()
    }

    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    /// 0-based line of a byte position, counting line breaks as go-yaml's marks do.
    fn line_of(&self, pos: usize) -> usize {
        let text = &self.src[..pos.min(self.src.len())];
        let mut line = 0;
        let mut prev_cr = false;
        for c in text.chars() {
            match c {
                '\n' if prev_cr => {}
                c if is_break(c) => line += 1,
                _ => {}
            }
            prev_cr = c == '\r';
        }
        line
    }

    /// A scanner error: go-yaml prints the 1-based line when it is not the first one.
    fn scanner_error(&self, pos: usize, msg: &str) -> Error {
        let line = self.line_of(pos);
        if line != 0 {
            yaml_err(format!("yaml: line {}: {msg}", line + 1))
        } else {
            yaml_err(format!("yaml: {msg}"))
        }
    }

    /// A parser error: go-yaml prints the 0-based line of the mark (sic), unless it is 0.
    fn parser_error(&self, pos: usize, msg: &str) -> Error {
        let line = self.line_of(pos);
        if line != 0 {
            yaml_err(format!("yaml: line {line}: {msg}"))
        } else {
            yaml_err(format!("yaml: {msg}"))
        }
    }

    fn read_document(&mut self) -> Result<Node<'a>, Error> {
        if !self.src.chars().all(reader_allows) {
            return Err(yaml_err(CONTROL_CHARS));
        }
        if self.src.starts_with('\u{FEFF}') {
            self.pos = '\u{FEFF}'.len_utf8();
        }
        self.skip_space();
        if self.pos >= self.src.len() {
            // An empty document unmarshals to nil.
            return Ok(Node::Null);
        }
        let node = self.read_value()?;
        self.skip_space();
        if self.pos < self.src.len() {
            return Err(self.parser_error(self.pos, "did not find expected <document start>"));
        }
        Ok(node)
    }

    fn skip_space(&mut self) {
        while let Some(b) = self.peek() {
            if matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// Reads one value iteratively, so nesting is bounded by [`MAX_DEPTH`] and not by the stack.
    fn read_value(&mut self) -> Result<Node<'a>, Error> {
        let mut stack: Vec<ReadFrame<'a>> = Vec::new();
        // A finished node waiting to be attached to the innermost open container.
        let mut pending: Option<Node<'a>> = None;
        loop {
            if pending.is_none() {
                // At the start of a value, spaces skipped.
                match self.peek() {
                    Some(open @ (b'[' | b'{')) => {
                        if stack.len() >= MAX_DEPTH {
                            let msg = format!("exceeded max depth of {MAX_DEPTH}");
                            return Err(self.scanner_error(self.pos, &msg));
                        }
                        self.pos += 1;
                        self.skip_space();
                        if open == b'[' {
                            if self.peek() == Some(b']') {
                                self.pos += 1;
                                pending = Some(Node::Seq(Vec::new()));
                            } else {
                                stack.push(ReadFrame::Seq(Vec::new()));
                                continue;
                            }
                        } else if self.peek() == Some(b'}') {
                            self.pos += 1;
                            pending = Some(Node::Map(Vec::new()));
                        } else {
                            let key = self.read_key()?;
                            stack.push(ReadFrame::Map(Vec::new(), None, key));
                            continue;
                        }
                    }
                    Some(b'"') => pending = Some(Node::Str(self.scan_string()?)),
                    _ => pending = Some(self.read_plain()?),
                }
            }
            let Some(top) = stack.last_mut() else {
                // The root is complete (`pending` is always set here).
                return Ok(pending.unwrap_or(Node::Null));
            };
            let node = pending.take().unwrap_or(Node::Null);
            self.skip_space();
            match top {
                ReadFrame::Seq(items) => {
                    items.push(node);
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            self.skip_space();
                            if self.peek() == Some(b']') {
                                self.pos += 1;
                            } else {
                                continue;
                            }
                        }
                        Some(b']') => self.pos += 1,
                        _ => {
                            return Err(
                                self.parser_error(self.pos, "did not find expected ',' or ']'")
                            );
                        }
                    }
                }
                ReadFrame::Map(entries, index, key) => {
                    insert_entry(entries, index, std::mem::take(key), node);
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            self.skip_space();
                            if self.peek() == Some(b'}') {
                                self.pos += 1;
                            } else {
                                *key = self.read_key()?;
                                continue;
                            }
                        }
                        Some(b'}') => self.pos += 1,
                        _ => {
                            return Err(
                                self.parser_error(self.pos, "did not find expected ',' or '}'")
                            );
                        }
                    }
                }
            }
            pending = stack.pop().map(|frame| match frame {
                ReadFrame::Seq(items) => Node::Seq(items),
                ReadFrame::Map(entries, _, _) => Node::Map(entries),
            });
        }
    }

    /// A mapping key and its `:`, leaving the reader at the start of the value.
    fn read_key(&mut self) -> Result<Cow<'a, str>, Error> {
        match self.peek() {
            Some(b'"') => {}
            Some(_) => {
                return Err(self.parser_error(self.pos, "map keys must be quoted JSON strings"));
            }
            None => return Err(self.parser_error(self.pos, "did not find expected ',' or '}'")),
        }
        let key = self.scan_string()?;
        self.skip_space();
        if self.peek() != Some(b':') {
            return Err(self.parser_error(self.pos, "did not find expected ',' or '}'"));
        }
        self.pos += 1;
        self.skip_space();
        Ok(key)
    }

    /// An unquoted token (`123`, `-0`, `1e400`, `true`, `null`): a plain scalar, resolved.
    fn read_plain(&mut self) -> Result<Node<'a>, Error> {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if matches!(
                b,
                b' ' | b'\t'
                    | b'\r'
                    | b'\n'
                    | b','
                    | b':'
                    | b'['
                    | b']'
                    | b'{'
                    | b'}'
                    | b'"'
                    | b'#'
            ) {
                break;
            }
            self.pos += 1;
        }
        // Stopped at an ASCII byte, so this is a char boundary.
        let token = &self.src[start..self.pos];
        if token.is_empty() {
            return Err(self.parser_error(start, "did not find expected node content"));
        }
        Ok(match resolve_plain(token) {
            Resolved::Null => Node::Null,
            Resolved::Bool(b) => Node::Bool(b),
            Resolved::Int(i) => Node::Int(i),
            Resolved::Uint(u) => Node::Uint(u),
            Resolved::Float(f) => Node::Float(f),
            // go-yaml would decode a timestamp to time.Time; JSON never contains one unquoted.
            Resolved::Timestamp | Resolved::Str => Node::Str(Cow::Borrowed(token)),
        })
    }

    /// A double-quoted scalar at `self.pos` (on the opening quote), as
    /// `yaml_parser_scan_flow_scalar` reads it.
    fn scan_string(&mut self) -> Result<Cow<'a, str>, Error> {
        self.pos += 1; // opening quote
        let bytes = self.bytes();
        // Fast path: no escapes, no blanks or breaks that could fold.
        let mut i = self.pos;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    let s = &self.src[self.pos..i];
                    self.pos = i + 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' | b'\r' | b'\n' | b'\t' | 0xC2 | 0xE2 => break,
                _ => i += 1,
            }
        }
        self.scan_string_slow()
    }

    fn scan_string_slow(&mut self) -> Result<Cow<'a, str>, Error> {
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        let mut whitespaces = String::new();
        let mut at_line_start = false;
        loop {
            // Document indicators at the start of a line end the scalar with an error.
            if at_line_start {
                let rest = &self.bytes()[self.pos..];
                if rest.len() >= 3
                    && (rest.starts_with(b"---") || rest.starts_with(b"..."))
                    && self.src[self.pos + 3..]
                        .chars()
                        .next()
                        .is_none_or(|c| c == ' ' || c == '\t' || c == '\0' || is_break(c))
                {
                    return Err(self.scanner_error(self.pos, "found unexpected document indicator"));
                }
            }
            at_line_start = false;
            let Some(mut c) = self.peek_char() else {
                return Err(self.scanner_error(self.pos, "found unexpected end of stream"));
            };
            // Consume non-blank characters.
            let mut leading_blanks = false;
            while !(c == ' ' || c == '\t' || c == '\0' || is_break(c)) {
                if c == '"' {
                    break;
                }
                if c == '\\' {
                    let next = self.src[self.pos + 1..].chars().next();
                    match next {
                        Some(n) if is_break(n) => {
                            // An escaped line break: skip it and fold what follows.
                            self.pos += 1;
                            self.skip_line();
                            at_line_start = true;
                            leading_blanks = true;
                            break;
                        }
                        _ => self.scan_escape(&mut s)?,
                    }
                } else {
                    s.push(c);
                    self.pos += c.len_utf8();
                }
                match self.peek_char() {
                    Some(n) => c = n,
                    None => {
                        return Err(self.scanner_error(self.pos, "found unexpected end of stream"));
                    }
                }
            }
            if self.peek() == Some(b'"') {
                break;
            }
            // Consume blank characters and line breaks.
            while let Some(c) = self.peek_char() {
                if c == ' ' || c == '\t' {
                    if !leading_blanks {
                        whitespaces.push(c);
                    }
                    self.pos += 1;
                    at_line_start = false;
                } else if is_break(c) {
                    if !leading_blanks {
                        whitespaces.clear();
                        self.read_line(&mut leading_break);
                        leading_blanks = true;
                    } else {
                        self.read_line(&mut trailing_breaks);
                    }
                    at_line_start = true;
                } else {
                    break;
                }
            }
            // Join the whitespaces or fold line breaks.
            join_gap(
                &mut s,
                leading_blanks,
                &mut leading_break,
                &mut trailing_breaks,
                &mut whitespaces,
            );
        }
        self.pos += 1; // closing quote
        Ok(Cow::Owned(s))
    }

    /// Consumes one line break (CR LF counts as one), as `skip_line` does.
    fn skip_line(&mut self) {
        let mut scratch = String::new();
        self.read_line(&mut scratch);
    }

    /// Consumes one line break and appends its normalised form: CR, LF, CR LF and NEL become
    /// `\n`, while LS and PS are kept (`read_line`).
    fn read_line(&mut self, out: &mut String) {
        let rest = &self.src[self.pos..];
        if rest.starts_with("\r\n") {
            out.push('\n');
            self.pos += 2;
        } else if let Some(c) = rest.chars().next() {
            match c {
                '\r' | '\n' | '\u{85}' => out.push('\n'),
                c => out.push(c),
            }
            self.pos += c.len_utf8();
        }
    }

    /// One escape sequence at `self.pos` (on the backslash), YAML double-quoted rules.
    fn scan_escape(&mut self, s: &mut String) -> Result<(), Error> {
        let Some(e) = self.src[self.pos + 1..].chars().next() else {
            return Err(self.scanner_error(self.pos, "found unexpected end of stream"));
        };
        let code_length = match escape(e) {
            Some(Escape::Char(c)) => {
                s.push(c);
                0
            }
            Some(Escape::Hex(n)) => n,
            None => return Err(self.scanner_error(self.pos, "found unknown escape character")),
        };
        self.pos += 1 + e.len_utf8();
        if code_length > 0 {
            let digits = self.bytes().get(self.pos..self.pos + code_length);
            let mut value: u32 = 0;
            match digits {
                Some(d) if d.iter().all(u8::is_ascii_hexdigit) => {
                    for &h in d {
                        // Hex digit checked above.
                        value = (value << 4) | (h as char).to_digit(16).unwrap_or(0);
                    }
                }
                _ => {
                    return Err(
                        self.scanner_error(self.pos, "did not find expected hexdecimal number")
                    );
                }
            }
            match char::from_u32(value) {
                Some(c) => s.push(c),
                None => {
                    return Err(
                        self.scanner_error(self.pos, "found invalid Unicode character escape code")
                    );
                }
            }
            self.pos += code_length;
        }
        Ok(())
    }
}

/// Adds a map entry; a repeated key replaces the earlier value, as Go's map assignment does.
/// Small maps are scanned linearly; from 16 entries on a hash index keeps this linear overall.
fn insert_entry<'a>(
    entries: &mut Vec<(Cow<'a, str>, Node<'a>)>,
    index: &mut Option<HashMap<Cow<'a, str>, usize>>,
    key: Cow<'a, str>,
    value: Node<'a>,
) {
    if let Some(idx) = index {
        if let Some(&i) = idx.get(&key) {
            entries[i].1 = value;
        } else {
            idx.insert(key.clone(), entries.len());
            entries.push((key, value));
        }
        return;
    }
    if let Some(slot) = entries.iter_mut().find(|(k, _)| *k == key) {
        slot.1 = value;
        return;
    }
    entries.push((key, value));
    if entries.len() >= 16 {
        *index = Some(
            entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect(),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Base-60 numbers (encode.go): quoted by the emitter although resolve.go reads them as strings
// ---------------------------------------------------------------------------------------------

/// encode.go `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    match b.first() {
        Some(b'+' | b'-' | b'0'..=b'9') if b.contains(&b':') => {}
        _ => return false,
    }
    let mut i = 0;
    if matches!(b[0], b'+' | b'-') {
        i = 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        // `[0-5]?[0-9]`: taking two digits when possible is never worse, since a group must be
        // followed by `:`, `.` or the end.
        match (b.get(i), b.get(i + 1)) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => i += 2,
            (Some(b'0'..=b'9'), _) => i += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

// ---------------------------------------------------------------------------------------------
// Key order (go-yaml v2 sorter.go, string keys)
// ---------------------------------------------------------------------------------------------

/// `keyList.Less` for two string keys: letters by code point, non-letters before letters, and
/// digit runs compared as numbers.
fn go_key_less(a: &str, b: &str) -> bool {
    let mut ai = a.char_indices();
    let mut bi = b.char_indices();
    loop {
        let (ia, ca, cb) = match (ai.next(), bi.next()) {
            (Some((ia, ca)), Some((_, cb))) => (ia, ca, cb),
            (None, Some(_)) => return true,
            (_, None) => return false,
        };
        if ca == cb {
            continue;
        }
        let al = is_go_letter(ca);
        let bl = is_go_letter(cb);
        if al && bl {
            return ca < cb;
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ca == '0' || cb == '0' {
            // The prefix before this point is the same in both keys.
            for c in a[..ia].chars().rev() {
                if !is_go_digit(c) {
                    break;
                }
                if c != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let run = |s: &str, mut n: i64| -> (i64, usize) {
            let mut len = 0;
            for c in s.chars() {
                if !is_go_digit(c) {
                    break;
                }
                // Go: int64 arithmetic that wraps, with `r - '0'` on runes.
                n = n
                    .wrapping_mul(10)
                    .wrapping_add(i64::from(c as u32) - i64::from(b'0'));
                len += 1;
            }
            (n, len)
        };
        let (an, alen) = run(&a[ia..], an);
        let (bn, blen) = run(&b[ia..], bn);
        if an != bn {
            return an < bn;
        }
        if alen != blen {
            return alen < blen;
        }
        return ca < cb;
    }
}

/// Sorts map entries with [`go_key_less`]. A hand-written merge sort: the order is not a total
/// order for some key sets, and std's sorts may panic on such comparators.
fn sorted_order(keys: &[&str]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    if keys.len() < 2 {
        return idx;
    }
    let mut buf = idx.clone();
    merge_sort(&mut idx, &mut buf, keys);
    idx
}

fn merge_sort(v: &mut [usize], buf: &mut [usize], keys: &[&str]) {
    let n = v.len();
    if n <= 12 {
        // Insertion sort, as Go's pdqsort does for short slices.
        for i in 1..n {
            let mut j = i;
            while j > 0 && go_key_less(keys[v[j]], keys[v[j - 1]]) {
                v.swap(j, j - 1);
                j -= 1;
            }
        }
        return;
    }
    let mid = n / 2;
    {
        let (lo, hi) = v.split_at_mut(mid);
        let (blo, bhi) = buf.split_at_mut(mid);
        merge_sort(lo, blo, keys);
        merge_sort(hi, bhi, keys);
    }
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        if go_key_less(keys[v[j]], keys[v[i]]) {
            buf[k] = v[j];
            j += 1;
        } else {
            buf[k] = v[i];
            i += 1;
        }
        k += 1;
    }
    buf[k..k + (mid - i)].copy_from_slice(&v[i..mid]);
    k += mid - i;
    buf[k..k + (n - j)].copy_from_slice(&v[j..n]);
    v.copy_from_slice(&buf[..n]);
}

/// Go `unicode.IsLetter` (Unicode 15.0, as in Go 1.21 to 1.24).
fn is_go_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(c as u32, LETTER_RANGES)
}

/// Go `unicode.IsDigit`: category Nd.
fn is_go_digit(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(c as u32, DIGIT_RANGES)
}

fn in_ranges(cp: u32, ranges: &[(u32, u32)]) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

// ---------------------------------------------------------------------------------------------
// Emitter (go-yaml v2 encode.go + emitterc.go, for the events Marshal produces here)
// ---------------------------------------------------------------------------------------------

const BEST_WIDTH: usize = 80;
const BEST_INDENT: isize = 2;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

#[derive(Debug, PartialEq)]
/// What `yaml_emitter_analyze_scalar` finds out about a scalar (flow-context flags omitted:
/// scalars are never written inside a flow collection here).
struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

/// go-yaml's `is_printable`: LF, printable ASCII, and the BMP minus C1, surrogates, BOM,
/// U+FFFE and U+FFFF. Everything outside the BMP counts as non-printable.
fn is_printable(c: char) -> bool {
    matches!(c as u32, 0x0A | 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD) && c != '\u{FEFF}'
}

fn analyze_scalar(value: &str) -> Analysis {
    if value.is_empty() {
        return Analysis {
            multiline: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    if value.is_ascii() {
        analyze_ascii(value.as_bytes())
    } else {
        analyze_chars(value, value.chars())
    }
}

/// [`analyze_chars`] for non-empty ASCII text, on bytes (the common case, kept tight).
fn analyze_ascii(b: &[u8]) -> Analysis {
    let n = b.len();
    let is_break = |c: u8| c == b'\n' || c == b'\r';
    let printable = |c: u8| c == b'\n' || (0x20..=0x7E).contains(&c);
    let c0 = b[0];
    let followed_by_whitespace_0 = n == 1 || b[1] == b' ' || b[1] == b'\t';
    let mut block_indicators = b.starts_with(b"---")
        || b.starts_with(b"...")
        || matches!(
            c0,
            b'#' | b','
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'&'
                | b'*'
                | b'!'
                | b'|'
                | b'>'
                | b'\''
                | b'"'
                | b'%'
                | b'@'
                | b'`'
        )
        || (matches!(c0, b'?' | b':' | b'-') && followed_by_whitespace_0);
    let mut line_breaks = is_break(c0);
    let mut special_characters = !printable(c0);
    let (mut break_space, mut space_break) = (false, false);
    let mut prev = c0;
    for i in 1..n {
        let c = b[i];
        match c {
            b' ' => break_space |= is_break(prev),
            b'\n' | b'\r' => {
                line_breaks = true;
                space_break |= prev == b' ';
                special_characters |= c == b'\r';
            }
            b':' => {
                if i + 1 == n || b[i + 1] == b' ' || b[i + 1] == b'\t' {
                    block_indicators = true;
                }
            }
            b'#' => block_indicators |= matches!(prev, b' ' | b'\t' | b'\r' | b'\n' | 0),
            0x21..=0x7E => {}
            _ => special_characters = true,
        }
        prev = c;
    }
    let last = b[n - 1];
    let trailing_space = last == b' ';
    finish_analysis(
        line_breaks,
        special_characters,
        block_indicators,
        c0 == b' ' || is_break(c0) || trailing_space || is_break(last),
        trailing_space,
        break_space,
        space_break,
    )
}

/// The flag combination at the end of `yaml_emitter_analyze_scalar`.
fn finish_analysis(
    line_breaks: bool,
    special_characters: bool,
    block_indicators: bool,
    leading_or_trailing_blank: bool,
    trailing_space: bool,
    break_space: bool,
    space_break: bool,
) -> Analysis {
    let mut a = Analysis {
        multiline: line_breaks,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_or_trailing_blank {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special_characters {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// `yaml_emitter_analyze_scalar` on non-empty text.
fn analyze_chars(value: &str, chars: impl Iterator<Item = char>) -> Analysis {
    let mut block_indicators = value.starts_with("---") || value.starts_with("...");
    let (mut line_breaks, mut special_characters) = (false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;

    let mut chars = chars.peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let last = next.is_none();
        let followed_by_whitespace = matches!(next, None | Some(' ' | '\t'));
        if first {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special_characters = true;
        }
        if c == ' ' {
            leading_space |= first;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= first;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = matches!(c, ' ' | '\t' | '\0') || is_break(c);
        first = false;
    }

    finish_analysis(
        line_breaks,
        special_characters,
        block_indicators,
        leading_space || leading_break || trailing_space || trailing_break,
        trailing_space,
        break_space,
        space_break,
    )
}

/// The style encode.go asks for: literal for text with `\n`, plain if the plain text would read
/// back as the same string, double-quoted otherwise.
fn requested_string_style(s: &str) -> Style {
    if s.contains('\n') {
        Style::Literal
    } else if !resolves_to_non_string(s) && !is_base60_float(s) {
        Style::Plain
    } else {
        Style::Double
    }
}

/// Characters in `s` (columns count characters, not bytes).
fn char_count(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// Decimal text of `u` in `buf`, without allocating.
fn u64_text(mut u: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[i..]).unwrap_or("0")
}

/// Decimal text of `i` in `buf` (the sign goes in front of the digits).
fn i64_text(i: i64, buf: &mut [u8; 20]) -> &str {
    let len = u64_text(i.unsigned_abs(), buf).len();
    if i >= 0 {
        return std::str::from_utf8(&buf[20 - len..]).unwrap_or("0");
    }
    // |i64::MIN| has 19 digits, so there is room for the sign.
    let start = 20 - len - 1;
    buf[start] = b'-';
    std::str::from_utf8(&buf[start..]).unwrap_or("0")
}

/// A collection being emitted: the children still to write and the indent to restore.
enum EmitFrame<'n, 'a> {
    Seq {
        items: std::slice::Iter<'n, Node<'a>>,
        saved: isize,
    },
    Map {
        entries: &'n [(Cow<'a, str>, Node<'a>)],
        order: std::vec::IntoIter<usize>,
        saved: isize,
    },
}

struct Emitter {
    out: String,
    /// Column in characters (an escape like `\U0001F600` counts its 10 characters).
    column: usize,
    indent: isize,
    whitespace: bool,
    indention: bool,
}

fn emit_document(node: &Node<'_>) -> String {
    let mut e = Emitter {
        out: String::with_capacity(256),
        column: 0,
        indent: -1,
        whitespace: true,
        indention: true,
    };
    e.emit_root(node);
    // DOCUMENT-END (implicit): a final line break unless the output already ends a line.
    e.write_indent();
    e.out
}

impl Emitter {
    /// Writes an ASCII character (a `put` in emitterc.go).
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    /// Copies one character of a value (a `write`): one column whatever its width.
    fn write(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.out.push(c);
            self.column = 0;
        }
    }

    fn write_indicator(
        &mut self,
        indicator: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in indicator.chars() {
            self.write(c);
        }
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0) as usize;
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    /// `yaml_emitter_increase_indent`; returns the previous indent for the caller to restore.
    fn increase_indent(&mut self, flow: bool, indentless: bool) -> isize {
        let saved = self.indent;
        if self.indent < 0 {
            self.indent = if flow { BEST_INDENT } else { 0 };
        } else if !indentless {
            self.indent += BEST_INDENT;
        }
        saved
    }

    /// Emits a whole tree with an explicit stack, so nesting depth does not use the call stack.
    fn emit_root(&mut self, root: &Node<'_>) {
        let mut stack: Vec<EmitFrame<'_, '_>> = Vec::new();
        // The next node to emit, and whether it is a mapping value.
        let mut next = Some((root, false));
        loop {
            if let Some((node, mapping_value)) = next.take() {
                match node {
                    Node::Seq(items) if !items.is_empty() => {
                        // A sequence that is a mapping value sits at the key's indentation.
                        let saved = self.increase_indent(false, mapping_value && !self.indention);
                        stack.push(EmitFrame::Seq {
                            items: items.iter(),
                            saved,
                        });
                    }
                    Node::Map(entries) if !entries.is_empty() => {
                        let saved = self.increase_indent(false, false);
                        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
                        let order = sorted_order(&keys).into_iter();
                        stack.push(EmitFrame::Map {
                            entries,
                            order,
                            saved,
                        });
                    }
                    leaf => self.emit_leaf(leaf),
                }
            }
            let Some(top) = stack.last_mut() else {
                return;
            };
            match top {
                EmitFrame::Seq { items, .. } => {
                    if let Some(item) = items.next() {
                        self.write_indent();
                        self.write_indicator("-", true, false, true);
                        next = Some((item, false));
                        continue;
                    }
                }
                EmitFrame::Map { entries, order, .. } => {
                    let entries: &[(Cow<'_, str>, Node<'_>)] = entries;
                    if let Some((key, value)) = order.next().and_then(|i| entries.get(i)) {
                        self.emit_key(key);
                        next = Some((value, true));
                        continue;
                    }
                }
            }
            // The innermost collection is complete.
            if let Some(EmitFrame::Seq { saved, .. } | EmitFrame::Map { saved, .. }) = stack.pop() {
                self.indent = saved;
            }
        }
    }

    /// A mapping key and its `:`: simple when on one line and at most 128 bytes, else `? key`.
    fn emit_key(&mut self, key: &str) {
        self.write_indent();
        let analysis = analyze_scalar(key);
        let style = requested_string_style(key);
        if !analysis.multiline && key.len() <= 128 {
            self.emit_scalar(key, &analysis, style, true);
            self.write_indicator(":", false, false, false);
        } else {
            self.write_indicator("?", true, false, true);
            self.emit_scalar(key, &analysis, style, false);
            self.write_indent();
            self.write_indicator(":", true, false, true);
        }
    }

    /// Scalars and empty collections.
    fn emit_leaf(&mut self, node: &Node<'_>) {
        match node {
            Node::Null => self.emit_simple_plain("null"),
            Node::Bool(b) => self.emit_simple_plain(if *b { "true" } else { "false" }),
            Node::Int(i) => self.emit_simple_plain(i64_text(*i, &mut [0; 20])),
            Node::Uint(u) => self.emit_simple_plain(u64_text(*u, &mut [0; 20])),
            Node::Float(f) => {
                let text = if f.is_nan() {
                    ".nan".to_owned()
                } else if f.is_infinite() {
                    if *f > 0.0 { ".inf" } else { "-.inf" }.to_owned()
                } else {
                    format_g(*f, false)
                };
                self.emit_simple_plain(&text);
            }
            Node::Str(s) => {
                let analysis = analyze_scalar(s);
                self.emit_scalar(s, &analysis, requested_string_style(s), false);
            }
            Node::Seq(_) => self.emit_empty_flow("[", "]"),
            Node::Map(_) => self.emit_empty_flow("{", "}"),
        }
    }

    /// An empty sequence or mapping: go-yaml switches to flow style (`[]`, `{}`).
    fn emit_empty_flow(&mut self, open: &str, close: &str) {
        self.write_indicator(open, true, true, false);
        self.write_indicator(close, false, false, false);
    }

    /// null, booleans and numbers: always plain, never containing spaces or breaks.
    fn emit_simple_plain(&mut self, text: &str) {
        if !self.whitespace {
            self.put(' ');
        }
        self.write_run(text);
        self.whitespace = false;
        self.indention = false;
    }

    /// Writes characters that need no per-character decisions, in one go.
    fn write_run(&mut self, run: &str) {
        self.out.push_str(run);
        self.column += char_count(run);
    }

    /// Whether folding cannot happen while writing `value` from the current column: a break is
    /// only considered at a space once the column is past the best width.
    fn fits_without_folding(&self, value: &str) -> bool {
        self.column + char_count(value) <= BEST_WIDTH + 1
    }

    /// `yaml_emitter_select_scalar_style` + `yaml_emitter_process_scalar`.
    fn emit_scalar(&mut self, value: &str, a: &Analysis, requested: Style, simple_key: bool) {
        let mut style = requested;
        if simple_key && a.multiline {
            style = Style::Double;
        }
        if style == Style::Plain && (!a.block_plain_allowed || (value.is_empty() && simple_key)) {
            style = Style::Single;
        }
        if style == Style::Single && !a.single_quoted_allowed {
            style = Style::Double;
        }
        if style == Style::Literal && (!a.block_allowed || simple_key) {
            style = Style::Double;
        }
        let saved = self.increase_indent(true, false);
        let allow_breaks = !simple_key;
        match style {
            Style::Plain => self.write_plain(value, allow_breaks),
            Style::Single => self.write_single_quoted(value, allow_breaks),
            Style::Double => self.write_double_quoted(value, allow_breaks),
            Style::Literal => self.write_literal(value),
        }
        self.indent = saved;
    }

    fn write_plain(&mut self, value: &str, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        // Plain scalars never contain line breaks (the analysis rules them out), so without a
        // possible fold the text goes out as is.
        if !allow_breaks || !value.contains(' ') || self.fits_without_folding(value) {
            self.write_run(value);
            self.whitespace = false;
            self.indention = false;
            return;
        }
        // Word by word: a single space (not part of a run) past the best width becomes a break.
        let mut spaces = false;
        let mut rest = value;
        while !rest.is_empty() {
            match rest.find(' ') {
                Some(0) => {
                    if !spaces && self.column > BEST_WIDTH && rest.as_bytes().get(1) != Some(&b' ')
                    {
                        self.write_indent();
                    } else {
                        self.put(' ');
                    }
                    spaces = true;
                    rest = &rest[1..];
                }
                found => {
                    let end = found.unwrap_or(rest.len());
                    self.write_run(&rest[..end]);
                    self.indention = false;
                    spaces = false;
                    rest = &rest[end..];
                }
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn write_single_quoted(&mut self, value: &str, allow_breaks: bool) {
        self.write_indicator("'", true, false, false);
        if !value.contains(['\'', '\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'])
            && (!allow_breaks || !value.contains(' ') || self.fits_without_folding(value))
        {
            self.write_run(value);
            self.write_indicator("'", false, false, false);
            self.whitespace = false;
            self.indention = false;
            return;
        }
        let bytes = value.as_bytes();
        let (mut spaces, mut breaks) = (false, false);
        for (i, c) in value.char_indices() {
            if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < bytes.len()
                    && bytes[i + 1] != b' '
                {
                    self.write_indent();
                } else {
                    self.write(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.put('\'');
                }
                self.write(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.write_indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_double_quoted(&mut self, value: &str, allow_breaks: bool) {
        self.write_indicator("\"", true, false, false);
        // go-yaml's is_bom looks at the start of the value, not at the current character, so a
        // value starting with a BOM has every character escaped.
        let bom_start = value.starts_with('\u{FEFF}');
        if !bom_start
            && value
                .chars()
                .all(|c| is_printable(c) && !is_break(c) && c != '"' && c != '\\')
            && (!allow_breaks || !value.contains(' ') || self.fits_without_folding(value))
        {
            self.write_run(value);
            self.write_indicator("\"", false, false, false);
            self.whitespace = false;
            self.indention = false;
            return;
        }
        let bytes = value.as_bytes();
        let mut spaces = false;
        for (i, c) in value.char_indices() {
            if bom_start || !is_printable(c) || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                match c {
                    '\0' => self.put('0'),
                    '\u{07}' => self.put('a'),
                    '\u{08}' => self.put('b'),
                    '\t' => self.put('t'),
                    '\n' => self.put('n'),
                    '\u{0B}' => self.put('v'),
                    '\u{0C}' => self.put('f'),
                    '\r' => self.put('r'),
                    '\u{1B}' => self.put('e'),
                    '"' => self.put('"'),
                    '\\' => self.put('\\'),
                    '\u{85}' => self.put('N'),
                    '\u{A0}' => self.put('_'),
                    '\u{2028}' => self.put('L'),
                    '\u{2029}' => self.put('P'),
                    c => {
                        let v = c as u32;
                        let (letter, width) = if v <= 0xFF {
                            ('x', 2)
                        } else if v <= 0xFFFF {
                            ('u', 4)
                        } else {
                            ('U', 8)
                        };
                        self.put(letter);
                        for k in (0..width).rev() {
                            let digit = (v >> (4 * k)) & 0xF;
                            // A nibble is always a valid hex digit.
                            let h = char::from_digit(digit, 16)
                                .unwrap_or('0')
                                .to_ascii_uppercase();
                            self.put(h);
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < bytes.len()
                {
                    self.write_indent();
                    if bytes[i + 1] == b' ' {
                        self.put('\\');
                    }
                } else {
                    self.write(c);
                }
                spaces = true;
            } else {
                self.write(c);
                spaces = false;
            }
        }
        self.write_indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_literal(&mut self, value: &str) {
        self.write_indicator("|", true, false, false);
        // Indentation indicator when the text starts with a space or a break.
        if value.starts_with(|c: char| c == ' ' || is_break(c)) {
            let hint = char::from_digit(BEST_INDENT as u32, 10).unwrap_or('2');
            self.write_indicator(hint.encode_utf8(&mut [0; 4]), false, false, false);
        }
        // Chomping: `-` without a final break, `+` when the text is one break or ends with two.
        let mut rev = value.chars().rev();
        let chomp = match (rev.next(), rev.next()) {
            (Some(last), _) if !is_break(last) => Some("-"),
            (Some(_), None) => Some("+"),
            (Some(_), Some(prev)) if is_break(prev) => Some("+"),
            (None, _) => Some("-"),
            _ => None,
        };
        if let Some(chomp) = chomp {
            self.write_indicator(chomp, false, false, false);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        let mut rest = value;
        while let Some(c) = rest.chars().next() {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
                rest = &rest[c.len_utf8()..];
            } else {
                if breaks {
                    self.write_indent();
                }
                // Literal blocks never fold: the whole line goes out at once.
                let end = rest.find(is_break).unwrap_or(rest.len());
                self.write_run(&rest[..end]);
                self.indention = false;
                breaks = false;
                rest = &rest[end..];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Unicode tables for the key order: Go's unicode.IsLetter (L) and unicode.IsDigit (Nd),
// Unicode 15.0.0 (Go 1.21 to 1.24). Generated from the Unicode Character Database.
// ---------------------------------------------------------------------------------------------

#[rustfmt::skip]
const LETTER_RANGES: &[(u32, u32)] = &[
    (0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xB5, 0xB5), (0xBA, 0xBA), (0xC0, 0xD6),
    (0xD8, 0xF6), (0xF8, 0x2C1), (0x2C6, 0x2D1), (0x2E0, 0x2E4), (0x2EC, 0x2EC), (0x2EE, 0x2EE),
    (0x370, 0x374), (0x376, 0x377), (0x37A, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A),
    (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556),
    (0x559, 0x559), (0x560, 0x588), (0x5D0, 0x5EA), (0x5EF, 0x5F2), (0x620, 0x64A), (0x66E, 0x66F),
    (0x671, 0x6D3), (0x6D5, 0x6D5), (0x6E5, 0x6E6), (0x6EE, 0x6EF), (0x6FA, 0x6FC), (0x6FF, 0x6FF),
    (0x710, 0x710), (0x712, 0x72F), (0x74D, 0x7A5), (0x7B1, 0x7B1), (0x7CA, 0x7EA), (0x7F4, 0x7F5),
    (0x7FA, 0x7FA), (0x800, 0x815), (0x81A, 0x81A), (0x824, 0x824), (0x828, 0x828), (0x840, 0x858),
    (0x860, 0x86A), (0x870, 0x887), (0x889, 0x88E), (0x8A0, 0x8C9), (0x904, 0x939), (0x93D, 0x93D),
    (0x950, 0x950), (0x958, 0x961), (0x971, 0x980), (0x985, 0x98C), (0x98F, 0x990), (0x993, 0x9A8),
    (0x9AA, 0x9B0), (0x9B2, 0x9B2), (0x9B6, 0x9B9), (0x9BD, 0x9BD), (0x9CE, 0x9CE), (0x9DC, 0x9DD),
    (0x9DF, 0x9E1), (0x9F0, 0x9F1), (0x9FC, 0x9FC), (0xA05, 0xA0A), (0xA0F, 0xA10), (0xA13, 0xA28),
    (0xA2A, 0xA30), (0xA32, 0xA33), (0xA35, 0xA36), (0xA38, 0xA39), (0xA59, 0xA5C), (0xA5E, 0xA5E),
    (0xA72, 0xA74), (0xA85, 0xA8D), (0xA8F, 0xA91), (0xA93, 0xAA8), (0xAAA, 0xAB0), (0xAB2, 0xAB3),
    (0xAB5, 0xAB9), (0xABD, 0xABD), (0xAD0, 0xAD0), (0xAE0, 0xAE1), (0xAF9, 0xAF9), (0xB05, 0xB0C),
    (0xB0F, 0xB10), (0xB13, 0xB28), (0xB2A, 0xB30), (0xB32, 0xB33), (0xB35, 0xB39), (0xB3D, 0xB3D),
    (0xB5C, 0xB5D), (0xB5F, 0xB61), (0xB71, 0xB71), (0xB83, 0xB83), (0xB85, 0xB8A), (0xB8E, 0xB90),
    (0xB92, 0xB95), (0xB99, 0xB9A), (0xB9C, 0xB9C), (0xB9E, 0xB9F), (0xBA3, 0xBA4), (0xBA8, 0xBAA),
    (0xBAE, 0xBB9), (0xBD0, 0xBD0), (0xC05, 0xC0C), (0xC0E, 0xC10), (0xC12, 0xC28), (0xC2A, 0xC39),
    (0xC3D, 0xC3D), (0xC58, 0xC5A), (0xC5D, 0xC5D), (0xC60, 0xC61), (0xC80, 0xC80), (0xC85, 0xC8C),
    (0xC8E, 0xC90), (0xC92, 0xCA8), (0xCAA, 0xCB3), (0xCB5, 0xCB9), (0xCBD, 0xCBD), (0xCDD, 0xCDE),
    (0xCE0, 0xCE1), (0xCF1, 0xCF2), (0xD04, 0xD0C), (0xD0E, 0xD10), (0xD12, 0xD3A), (0xD3D, 0xD3D),
    (0xD4E, 0xD4E), (0xD54, 0xD56), (0xD5F, 0xD61), (0xD7A, 0xD7F), (0xD85, 0xD96), (0xD9A, 0xDB1),
    (0xDB3, 0xDBB), (0xDBD, 0xDBD), (0xDC0, 0xDC6), (0xE01, 0xE30), (0xE32, 0xE33), (0xE40, 0xE46),
    (0xE81, 0xE82), (0xE84, 0xE84), (0xE86, 0xE8A), (0xE8C, 0xEA3), (0xEA5, 0xEA5), (0xEA7, 0xEB0),
    (0xEB2, 0xEB3), (0xEBD, 0xEBD), (0xEC0, 0xEC4), (0xEC6, 0xEC6), (0xEDC, 0xEDF), (0xF00, 0xF00),
    (0xF40, 0xF47), (0xF49, 0xF6C), (0xF88, 0xF8C), (0x1000, 0x102A), (0x103F, 0x103F),
    (0x1050, 0x1055), (0x105A, 0x105D), (0x1061, 0x1061), (0x1065, 0x1066), (0x106E, 0x1070),
    (0x1075, 0x1081), (0x108E, 0x108E), (0x10A0, 0x10C5), (0x10C7, 0x10C7), (0x10CD, 0x10CD),
    (0x10D0, 0x10FA), (0x10FC, 0x1248), (0x124A, 0x124D), (0x1250, 0x1256), (0x1258, 0x1258),
    (0x125A, 0x125D), (0x1260, 0x1288), (0x128A, 0x128D), (0x1290, 0x12B0), (0x12B2, 0x12B5),
    (0x12B8, 0x12BE), (0x12C0, 0x12C0), (0x12C2, 0x12C5), (0x12C8, 0x12D6), (0x12D8, 0x1310),
    (0x1312, 0x1315), (0x1318, 0x135A), (0x1380, 0x138F), (0x13A0, 0x13F5), (0x13F8, 0x13FD),
    (0x1401, 0x166C), (0x166F, 0x167F), (0x1681, 0x169A), (0x16A0, 0x16EA), (0x16F1, 0x16F8),
    (0x1700, 0x1711), (0x171F, 0x1731), (0x1740, 0x1751), (0x1760, 0x176C), (0x176E, 0x1770),
    (0x1780, 0x17B3), (0x17D7, 0x17D7), (0x17DC, 0x17DC), (0x1820, 0x1878), (0x1880, 0x1884),
    (0x1887, 0x18A8), (0x18AA, 0x18AA), (0x18B0, 0x18F5), (0x1900, 0x191E), (0x1950, 0x196D),
    (0x1970, 0x1974), (0x1980, 0x19AB), (0x19B0, 0x19C9), (0x1A00, 0x1A16), (0x1A20, 0x1A54),
    (0x1AA7, 0x1AA7), (0x1B05, 0x1B33), (0x1B45, 0x1B4C), (0x1B83, 0x1BA0), (0x1BAE, 0x1BAF),
    (0x1BBA, 0x1BE5), (0x1C00, 0x1C23), (0x1C4D, 0x1C4F), (0x1C5A, 0x1C7D), (0x1C80, 0x1C88),
    (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1CE9, 0x1CEC), (0x1CEE, 0x1CF3), (0x1CF5, 0x1CF6),
    (0x1CFA, 0x1CFA), (0x1D00, 0x1DBF), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC), (0x2071, 0x2071), (0x207F, 0x207F), (0x2090, 0x209C), (0x2102, 0x2102),
    (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124),
    (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2139), (0x213C, 0x213F),
    (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2CE4), (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3), (0x2D00, 0x2D25), (0x2D27, 0x2D27), (0x2D2D, 0x2D2D), (0x2D30, 0x2D67),
    (0x2D6F, 0x2D6F), (0x2D80, 0x2D96), (0x2DA0, 0x2DA6), (0x2DA8, 0x2DAE), (0x2DB0, 0x2DB6),
    (0x2DB8, 0x2DBE), (0x2DC0, 0x2DC6), (0x2DC8, 0x2DCE), (0x2DD0, 0x2DD6), (0x2DD8, 0x2DDE),
    (0x2E2F, 0x2E2F), (0x3005, 0x3006), (0x3031, 0x3035), (0x303B, 0x303C), (0x3041, 0x3096),
    (0x309D, 0x309F), (0x30A1, 0x30FA), (0x30FC, 0x30FF), (0x3105, 0x312F), (0x3131, 0x318E),
    (0x31A0, 0x31BF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0xA48C), (0xA4D0, 0xA4FD),
    (0xA500, 0xA60C), (0xA610, 0xA61F), (0xA62A, 0xA62B), (0xA640, 0xA66E), (0xA67F, 0xA69D),
    (0xA6A0, 0xA6E5), (0xA717, 0xA71F), (0xA722, 0xA788), (0xA78B, 0xA7CA), (0xA7D0, 0xA7D1),
    (0xA7D3, 0xA7D3), (0xA7D5, 0xA7D9), (0xA7F2, 0xA801), (0xA803, 0xA805), (0xA807, 0xA80A),
    (0xA80C, 0xA822), (0xA840, 0xA873), (0xA882, 0xA8B3), (0xA8F2, 0xA8F7), (0xA8FB, 0xA8FB),
    (0xA8FD, 0xA8FE), (0xA90A, 0xA925), (0xA930, 0xA946), (0xA960, 0xA97C), (0xA984, 0xA9B2),
    (0xA9CF, 0xA9CF), (0xA9E0, 0xA9E4), (0xA9E6, 0xA9EF), (0xA9FA, 0xA9FE), (0xAA00, 0xAA28),
    (0xAA40, 0xAA42), (0xAA44, 0xAA4B), (0xAA60, 0xAA76), (0xAA7A, 0xAA7A), (0xAA7E, 0xAAAF),
    (0xAAB1, 0xAAB1), (0xAAB5, 0xAAB6), (0xAAB9, 0xAABD), (0xAAC0, 0xAAC0), (0xAAC2, 0xAAC2),
    (0xAADB, 0xAADD), (0xAAE0, 0xAAEA), (0xAAF2, 0xAAF4), (0xAB01, 0xAB06), (0xAB09, 0xAB0E),
    (0xAB11, 0xAB16), (0xAB20, 0xAB26), (0xAB28, 0xAB2E), (0xAB30, 0xAB5A), (0xAB5C, 0xAB69),
    (0xAB70, 0xABE2), (0xAC00, 0xD7A3), (0xD7B0, 0xD7C6), (0xD7CB, 0xD7FB), (0xF900, 0xFA6D),
    (0xFA70, 0xFAD9), (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFB1D, 0xFB1D), (0xFB1F, 0xFB28),
    (0xFB2A, 0xFB36), (0xFB38, 0xFB3C), (0xFB3E, 0xFB3E), (0xFB40, 0xFB41), (0xFB43, 0xFB44),
    (0xFB46, 0xFBB1), (0xFBD3, 0xFD3D), (0xFD50, 0xFD8F), (0xFD92, 0xFDC7), (0xFDF0, 0xFDFB),
    (0xFE70, 0xFE74), (0xFE76, 0xFEFC), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0xFF66, 0xFFBE),
    (0xFFC2, 0xFFC7), (0xFFCA, 0xFFCF), (0xFFD2, 0xFFD7), (0xFFDA, 0xFFDC), (0x10000, 0x1000B),
    (0x1000D, 0x10026), (0x10028, 0x1003A), (0x1003C, 0x1003D), (0x1003F, 0x1004D),
    (0x10050, 0x1005D), (0x10080, 0x100FA), (0x10280, 0x1029C), (0x102A0, 0x102D0),
    (0x10300, 0x1031F), (0x1032D, 0x10340), (0x10342, 0x10349), (0x10350, 0x10375),
    (0x10380, 0x1039D), (0x103A0, 0x103C3), (0x103C8, 0x103CF), (0x10400, 0x1049D),
    (0x104B0, 0x104D3), (0x104D8, 0x104FB), (0x10500, 0x10527), (0x10530, 0x10563),
    (0x10570, 0x1057A), (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595),
    (0x10597, 0x105A1), (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC),
    (0x10600, 0x10736), (0x10740, 0x10755), (0x10760, 0x10767), (0x10780, 0x10785),
    (0x10787, 0x107B0), (0x107B2, 0x107BA), (0x10800, 0x10805), (0x10808, 0x10808),
    (0x1080A, 0x10835), (0x10837, 0x10838), (0x1083C, 0x1083C), (0x1083F, 0x10855),
    (0x10860, 0x10876), (0x10880, 0x1089E), (0x108E0, 0x108F2), (0x108F4, 0x108F5),
    (0x10900, 0x10915), (0x10920, 0x10939), (0x10980, 0x109B7), (0x109BE, 0x109BF),
    (0x10A00, 0x10A00), (0x10A10, 0x10A13), (0x10A15, 0x10A17), (0x10A19, 0x10A35),
    (0x10A60, 0x10A7C), (0x10A80, 0x10A9C), (0x10AC0, 0x10AC7), (0x10AC9, 0x10AE4),
    (0x10B00, 0x10B35), (0x10B40, 0x10B55), (0x10B60, 0x10B72), (0x10B80, 0x10B91),
    (0x10C00, 0x10C48), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x10D00, 0x10D23),
    (0x10E80, 0x10EA9), (0x10EB0, 0x10EB1), (0x10F00, 0x10F1C), (0x10F27, 0x10F27),
    (0x10F30, 0x10F45), (0x10F70, 0x10F81), (0x10FB0, 0x10FC4), (0x10FE0, 0x10FF6),
    (0x11003, 0x11037), (0x11071, 0x11072), (0x11075, 0x11075), (0x11083, 0x110AF),
    (0x110D0, 0x110E8), (0x11103, 0x11126), (0x11144, 0x11144), (0x11147, 0x11147),
    (0x11150, 0x11172), (0x11176, 0x11176), (0x11183, 0x111B2), (0x111C1, 0x111C4),
    (0x111DA, 0x111DA), (0x111DC, 0x111DC), (0x11200, 0x11211), (0x11213, 0x1122B),
    (0x1123F, 0x11240), (0x11280, 0x11286), (0x11288, 0x11288), (0x1128A, 0x1128D),
    (0x1128F, 0x1129D), (0x1129F, 0x112A8), (0x112B0, 0x112DE), (0x11305, 0x1130C),
    (0x1130F, 0x11310), (0x11313, 0x11328), (0x1132A, 0x11330), (0x11332, 0x11333),
    (0x11335, 0x11339), (0x1133D, 0x1133D), (0x11350, 0x11350), (0x1135D, 0x11361),
    (0x11400, 0x11434), (0x11447, 0x1144A), (0x1145F, 0x11461), (0x11480, 0x114AF),
    (0x114C4, 0x114C5), (0x114C7, 0x114C7), (0x11580, 0x115AE), (0x115D8, 0x115DB),
    (0x11600, 0x1162F), (0x11644, 0x11644), (0x11680, 0x116AA), (0x116B8, 0x116B8),
    (0x11700, 0x1171A), (0x11740, 0x11746), (0x11800, 0x1182B), (0x118A0, 0x118DF),
    (0x118FF, 0x11906), (0x11909, 0x11909), (0x1190C, 0x11913), (0x11915, 0x11916),
    (0x11918, 0x1192F), (0x1193F, 0x1193F), (0x11941, 0x11941), (0x119A0, 0x119A7),
    (0x119AA, 0x119D0), (0x119E1, 0x119E1), (0x119E3, 0x119E3), (0x11A00, 0x11A00),
    (0x11A0B, 0x11A32), (0x11A3A, 0x11A3A), (0x11A50, 0x11A50), (0x11A5C, 0x11A89),
    (0x11A9D, 0x11A9D), (0x11AB0, 0x11AF8), (0x11C00, 0x11C08), (0x11C0A, 0x11C2E),
    (0x11C40, 0x11C40), (0x11C72, 0x11C8F), (0x11D00, 0x11D06), (0x11D08, 0x11D09),
    (0x11D0B, 0x11D30), (0x11D46, 0x11D46), (0x11D60, 0x11D65), (0x11D67, 0x11D68),
    (0x11D6A, 0x11D89), (0x11D98, 0x11D98), (0x11EE0, 0x11EF2), (0x11F02, 0x11F02),
    (0x11F04, 0x11F10), (0x11F12, 0x11F33), (0x11FB0, 0x11FB0), (0x12000, 0x12399),
    (0x12480, 0x12543), (0x12F90, 0x12FF0), (0x13000, 0x1342F), (0x13441, 0x13446),
    (0x14400, 0x14646), (0x16800, 0x16A38), (0x16A40, 0x16A5E), (0x16A70, 0x16ABE),
    (0x16AD0, 0x16AED), (0x16B00, 0x16B2F), (0x16B40, 0x16B43), (0x16B63, 0x16B77),
    (0x16B7D, 0x16B8F), (0x16E40, 0x16E7F), (0x16F00, 0x16F4A), (0x16F50, 0x16F50),
    (0x16F93, 0x16F9F), (0x16FE0, 0x16FE1), (0x16FE3, 0x16FE3), (0x17000, 0x187F7),
    (0x18800, 0x18CD5), (0x18D00, 0x18D08), (0x1AFF0, 0x1AFF3), (0x1AFF5, 0x1AFFB),
    (0x1AFFD, 0x1AFFE), (0x1B000, 0x1B122), (0x1B132, 0x1B132), (0x1B150, 0x1B152),
    (0x1B155, 0x1B155), (0x1B164, 0x1B167), (0x1B170, 0x1B2FB), (0x1BC00, 0x1BC6A),
    (0x1BC70, 0x1BC7C), (0x1BC80, 0x1BC88), (0x1BC90, 0x1BC99), (0x1D400, 0x1D454),
    (0x1D456, 0x1D49C), (0x1D49E, 0x1D49F), (0x1D4A2, 0x1D4A2), (0x1D4A5, 0x1D4A6),
    (0x1D4A9, 0x1D4AC), (0x1D4AE, 0x1D4B9), (0x1D4BB, 0x1D4BB), (0x1D4BD, 0x1D4C3),
    (0x1D4C5, 0x1D505), (0x1D507, 0x1D50A), (0x1D50D, 0x1D514), (0x1D516, 0x1D51C),
    (0x1D51E, 0x1D539), (0x1D53B, 0x1D53E), (0x1D540, 0x1D544), (0x1D546, 0x1D546),
    (0x1D54A, 0x1D550), (0x1D552, 0x1D6A5), (0x1D6A8, 0x1D6C0), (0x1D6C2, 0x1D6DA),
    (0x1D6DC, 0x1D6FA), (0x1D6FC, 0x1D714), (0x1D716, 0x1D734), (0x1D736, 0x1D74E),
    (0x1D750, 0x1D76E), (0x1D770, 0x1D788), (0x1D78A, 0x1D7A8), (0x1D7AA, 0x1D7C2),
    (0x1D7C4, 0x1D7CB), (0x1DF00, 0x1DF1E), (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D),
    (0x1E100, 0x1E12C), (0x1E137, 0x1E13D), (0x1E14E, 0x1E14E), (0x1E290, 0x1E2AD),
    (0x1E2C0, 0x1E2EB), (0x1E4D0, 0x1E4EB), (0x1E7E0, 0x1E7E6), (0x1E7E8, 0x1E7EB),
    (0x1E7ED, 0x1E7EE), (0x1E7F0, 0x1E7FE), (0x1E800, 0x1E8C4), (0x1E900, 0x1E943),
    (0x1E94B, 0x1E94B), (0x1EE00, 0x1EE03), (0x1EE05, 0x1EE1F), (0x1EE21, 0x1EE22),
    (0x1EE24, 0x1EE24), (0x1EE27, 0x1EE27), (0x1EE29, 0x1EE32), (0x1EE34, 0x1EE37),
    (0x1EE39, 0x1EE39), (0x1EE3B, 0x1EE3B), (0x1EE42, 0x1EE42), (0x1EE47, 0x1EE47),
    (0x1EE49, 0x1EE49), (0x1EE4B, 0x1EE4B), (0x1EE4D, 0x1EE4F), (0x1EE51, 0x1EE52),
    (0x1EE54, 0x1EE54), (0x1EE57, 0x1EE57), (0x1EE59, 0x1EE59), (0x1EE5B, 0x1EE5B),
    (0x1EE5D, 0x1EE5D), (0x1EE5F, 0x1EE5F), (0x1EE61, 0x1EE62), (0x1EE64, 0x1EE64),
    (0x1EE67, 0x1EE6A), (0x1EE6C, 0x1EE72), (0x1EE74, 0x1EE77), (0x1EE79, 0x1EE7C),
    (0x1EE7E, 0x1EE7E), (0x1EE80, 0x1EE89), (0x1EE8B, 0x1EE9B), (0x1EEA1, 0x1EEA3),
    (0x1EEA5, 0x1EEA9), (0x1EEAB, 0x1EEBB), (0x20000, 0x2A6DF), (0x2A700, 0x2B739),
    (0x2B740, 0x2B81D), (0x2B820, 0x2CEA1), (0x2CEB0, 0x2EBE0), (0x2F800, 0x2FA1D),
    (0x30000, 0x3134A), (0x31350, 0x323AF),
];

#[rustfmt::skip]
const DIGIT_RANGES: &[(u32, u32)] = &[
    (0x30, 0x39), (0x660, 0x669), (0x6F0, 0x6F9), (0x7C0, 0x7C9), (0x966, 0x96F), (0x9E6, 0x9EF),
    (0xA66, 0xA6F), (0xAE6, 0xAEF), (0xB66, 0xB6F), (0xBE6, 0xBEF), (0xC66, 0xC6F), (0xCE6, 0xCEF),
    (0xD66, 0xD6F), (0xDE6, 0xDEF), (0xE50, 0xE59), (0xED0, 0xED9), (0xF20, 0xF29),
    (0x1040, 0x1049), (0x1090, 0x1099), (0x17E0, 0x17E9), (0x1810, 0x1819), (0x1946, 0x194F),
    (0x19D0, 0x19D9), (0x1A80, 0x1A89), (0x1A90, 0x1A99), (0x1B50, 0x1B59), (0x1BB0, 0x1BB9),
    (0x1C40, 0x1C49), (0x1C50, 0x1C59), (0xA620, 0xA629), (0xA8D0, 0xA8D9), (0xA900, 0xA909),
    (0xA9D0, 0xA9D9), (0xA9F0, 0xA9F9), (0xAA50, 0xAA59), (0xABF0, 0xABF9), (0xFF10, 0xFF19),
    (0x104A0, 0x104A9), (0x10D30, 0x10D39), (0x11066, 0x1106F), (0x110F0, 0x110F9),
    (0x11136, 0x1113F), (0x111D0, 0x111D9), (0x112F0, 0x112F9), (0x11450, 0x11459),
    (0x114D0, 0x114D9), (0x11650, 0x11659), (0x116C0, 0x116C9), (0x11730, 0x11739),
    (0x118E0, 0x118E9), (0x11950, 0x11959), (0x11C50, 0x11C59), (0x11D50, 0x11D59),
    (0x11DA0, 0x11DA9), (0x11F50, 0x11F59), (0x16A60, 0x16A69), (0x16AC0, 0x16AC9),
    (0x16B50, 0x16B59), (0x1D7CE, 0x1D7FF), (0x1E140, 0x1E149), (0x1E2F0, 0x1E2F9),
    (0x1E4F0, 0x1E4F9), (0x1E950, 0x1E959), (0x1FBF0, 0x1FBF9),
];

#[cfg(test)]
mod tests {
    use super::*;

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
