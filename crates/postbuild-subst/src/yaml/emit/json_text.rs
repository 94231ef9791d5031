//! JSON text to the emitter's nodes: go-yaml's view of JSON, a YAML flow document (number
//! literals kept, raw line breaks folded as the scanner does).

use std::borrow::Cow;
use std::collections::HashMap;

use super::{CONTROL_CHARS, MAX_DEPTH, Node, reader_allows, yaml_err};
use crate::Error;
use crate::yaml::resolve::{Resolved, resolve_plain};
use crate::yaml::scan::{Escape, escape, is_break, join_gap};

/// A container being read, with the key of the value being read for a mapping.
pub(super) enum ReadFrame<'a> {
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
pub(super) struct JsonReader<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> JsonReader<'a> {
    pub(super) fn new(src: &'a str) -> Self {
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

    pub(super) fn read_document(&mut self) -> Result<Node<'a>, Error> {
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
    pub(super) fn scan_string(&mut self) -> Result<Cow<'a, str>, Error> {
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
pub(super) fn insert_entry<'a>(
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
