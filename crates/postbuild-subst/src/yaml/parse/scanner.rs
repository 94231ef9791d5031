//! The go-yaml v2 reader and scanner (a libyaml port): text in, tokens out.
//!
//! The structure follows libyaml closely on purpose: error messages, the line an error is
//! reported on and even which input gets looked at before a document ends all depend on the
//! exact order in which tokens are fetched, so the fetch logic mirrors the original.

use std::collections::{HashMap, VecDeque};

use crate::yaml::scan::{Escape, escape, is_break, join_gap};

/// A position in the input. `index` counts characters, like go-yaml.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    pub index: usize,
    pub line: usize,
    pub column: usize,
}

/// Which stage failed; the line rule of go-yaml's `fail()` depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Reader,
    Scanner,
    Parser,
}

/// A reader, scanner or parser error with the marks go-yaml keeps.
#[derive(Debug, Clone)]
pub(crate) struct SyntaxError {
    pub kind: ErrorKind,
    pub problem: String,
    pub problem_mark: Mark,
    pub context_mark: Mark,
}

impl SyntaxError {
    /// The message of go-yaml v2 `parser.fail()`: `yaml: line N: problem`.
    pub fn message(&self) -> String {
        let mut line = 0;
        if self.problem_mark.line != 0 {
            line = self.problem_mark.line;
            // Scanner errors are reported one line further (upstream comment: the scanner
            // does not advance the line before returning the error).
            if self.kind == ErrorKind::Scanner {
                line += 1;
            }
        } else if self.context_mark.line != 0 {
            line = self.context_mark.line;
        }
        let problem = if self.problem.is_empty() {
            "unknown problem parsing YAML content"
        } else {
            &self.problem
        };
        if line != 0 {
            format!("yaml: line {line}: {problem}")
        } else {
            format!("yaml: {problem}")
        }
    }
}

pub(crate) type ScanResult<T> = Result<T, SyntaxError>;

/// Scalar styles as the scanner reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
    Folded,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    StreamStart,
    StreamEnd,
    VersionDirective { major: u32, minor: u32 },
    TagDirective { handle: String, prefix: String },
    DocumentStart,
    DocumentEnd,
    BlockSequenceStart,
    BlockMappingStart,
    BlockEnd,
    FlowSequenceStart,
    FlowSequenceEnd,
    FlowMappingStart,
    FlowMappingEnd,
    BlockEntry,
    FlowEntry,
    Key,
    Value,
    Alias(String),
    Anchor(String),
    Tag { handle: String, suffix: String },
    Scalar { value: String, style: ScalarStyle },
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub start: Mark,
    pub end: Mark,
}

#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    required: bool,
    token_number: usize,
    mark: Mark,
}

/// go-yaml reads its input in raw chunks of this many bytes and validates a whole chunk
/// when it decodes it, so a bad character is reported as soon as its chunk is needed.
const RAW_CHUNK: usize = 512;
const MAX_FLOW_LEVEL: usize = 10000;
const MAX_INDENTS: usize = 10000;

fn is_allowed_char(c: char) -> bool {
    let v = c as u32;
    v == 0x09
        || v == 0x0A
        || v == 0x0D
        || (0x20..=0x7E).contains(&v)
        || v == 0x85
        || (0xA0..=0xD7FF).contains(&v)
        || (0xE000..=0xFFFD).contains(&v)
        || (0x10000..=0x10FFFF).contains(&v)
}

/// Finds the first character index of the raw chunk holding the first disallowed
/// character, or `usize::MAX` when every character is allowed.
fn bad_chunk_start(text: &str, chars_start: usize) -> usize {
    let bytes_len = text.len();
    let mut chunk_start_char = 0usize;
    let mut chunk_end_byte = RAW_CHUNK.min(bytes_len);
    for (char_idx, (byte_idx, c)) in text.char_indices().enumerate() {
        // A character that does not fit completely in the chunk starts the next one.
        if byte_idx + c.len_utf8() > chunk_end_byte {
            chunk_start_char = char_idx;
            chunk_end_byte = (byte_idx + RAW_CHUNK).min(bytes_len);
        }
        if char_idx >= chars_start && !is_allowed_char(c) {
            return chunk_start_char.saturating_sub(chars_start);
        }
    }
    usize::MAX
}

fn is_breakz(c: char) -> bool {
    is_break(c) || c == '\0'
}
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}
fn is_blankz(c: char) -> bool {
    is_blank(c) || is_breakz(c)
}
fn is_alpha(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The go-yaml v2 scanner.
pub(crate) struct Scanner {
    chars: Vec<char>,
    pos: usize,
    mark: Mark,
    bad_chunk: usize,
    tokens: VecDeque<Token>,
    tokens_parsed: usize,
    token_available: bool,
    stream_start_produced: bool,
    stream_end_produced: bool,
    indent: i64,
    indents: Vec<i64>,
    simple_key_allowed: bool,
    simple_keys: Vec<SimpleKey>,
    simple_keys_by_tok: HashMap<usize, usize>,
    flow_level: usize,
    error: Option<SyntaxError>,
}

impl Scanner {
    /// A scanner over `text` (go-yaml replaces an empty input by a single line break).
    pub fn new(text: &str) -> Self {
        let text = if text.is_empty() { "\n" } else { text };
        // go-yaml drops a UTF-8 byte order mark at the very start while detecting the encoding.
        let skip = usize::from(text.starts_with('\u{FEFF}'));
        let chars: Vec<char> = text.chars().skip(skip).collect();
        Scanner {
            bad_chunk: bad_chunk_start(text, skip),
            chars,
            pos: 0,
            mark: Mark::default(),
            tokens: VecDeque::new(),
            tokens_parsed: 0,
            token_available: false,
            stream_start_produced: false,
            stream_end_produced: false,
            indent: -1,
            indents: Vec::new(),
            simple_key_allowed: false,
            simple_keys: Vec::new(),
            simple_keys_by_tok: HashMap::new(),
            flow_level: 0,
            error: None,
        }
    }

    // ---- reader ----------------------------------------------------------------------

    /// `yaml_parser_update_buffer(length)`: makes `length` characters available, failing
    /// when that needs a chunk holding a disallowed character.
    fn need(&mut self, length: usize) -> ScanResult<()> {
        if self.pos + length > self.bad_chunk {
            return Err(SyntaxError {
                kind: ErrorKind::Reader,
                problem: "control characters are not allowed".into(),
                problem_mark: Mark::default(),
                context_mark: Mark::default(),
            });
        }
        Ok(())
    }

    fn at(&self, k: usize) -> char {
        self.chars.get(self.pos + k).copied().unwrap_or('\0')
    }
    fn ch(&self) -> char {
        self.at(0)
    }

    fn skip(&mut self) {
        self.pos += 1;
        self.mark.index += 1;
        self.mark.column += 1;
    }

    fn skip_line(&mut self) {
        if self.ch() == '\r' && self.at(1) == '\n' {
            self.pos += 2;
            self.mark.index += 2;
            self.mark.column = 0;
            self.mark.line += 1;
        } else if is_break(self.ch()) {
            self.pos += 1;
            self.mark.index += 1;
            self.mark.column = 0;
            self.mark.line += 1;
        }
    }

    fn read(&mut self, s: &mut String) {
        s.push(self.ch());
        self.skip();
    }

    /// Reads a line break, normalising CR, LF, CRLF and NEL to LF (LS and PS are kept).
    fn read_line(&mut self, s: &mut String) {
        let c = self.ch();
        if c == '\r' && self.at(1) == '\n' {
            s.push('\n');
            self.pos += 2;
            self.mark.index += 2;
        } else if c == '\r' || c == '\n' || c == '\u{85}' {
            s.push('\n');
            self.pos += 1;
            self.mark.index += 1;
        } else if c == '\u{2028}' || c == '\u{2029}' {
            s.push(c);
            self.pos += 1;
            self.mark.index += 1;
        } else {
            return;
        }
        self.mark.column = 0;
        self.mark.line += 1;
    }

    // ---- errors ----------------------------------------------------------------------

    fn scanner_error<T>(&mut self, context_mark: Mark, problem: &str) -> ScanResult<T> {
        let err = SyntaxError {
            kind: ErrorKind::Scanner,
            problem: problem.to_string(),
            problem_mark: self.mark,
            context_mark,
        };
        self.error = Some(err.clone());
        Err(err)
    }

    // ---- token queue -----------------------------------------------------------------

    fn insert_token(&mut self, pos: i64, token: Token) {
        // A negative position appends, exactly like `yaml_insert_token`.
        match usize::try_from(pos) {
            Ok(p) if p <= self.tokens.len() => self.tokens.insert(p, token),
            _ => self.tokens.push_back(token),
        }
    }

    fn push_token(&mut self, kind: TokenKind, start: Mark, end: Mark) {
        self.tokens.push_back(Token { kind, start, end });
    }

    /// `peek_token`: the next token, fetching more input as needed.
    pub fn peek(&mut self) -> ScanResult<&Token> {
        if !self.token_available {
            self.fetch_more_tokens()?;
        }
        match self.tokens.front() {
            Some(t) => Ok(t),
            // Unreachable: fetching stops only with a token queued; report it as an error
            // rather than panicking.
            None => Err(SyntaxError {
                kind: ErrorKind::Parser,
                problem: String::new(),
                problem_mark: self.mark,
                context_mark: Mark::default(),
            }),
        }
    }

    /// `skip_token`: consumes the token returned by [`Scanner::peek`].
    pub fn skip_token(&mut self) {
        self.token_available = false;
        self.tokens_parsed += 1;
        if let Some(t) = self.tokens.pop_front() {
            self.stream_end_produced = t.kind == TokenKind::StreamEnd;
        }
    }

    /// Whether the scanner has produced STREAM-END already.
    pub fn stream_ended(&self) -> bool {
        self.stream_end_produced
    }

    fn fetch_more_tokens(&mut self) -> ScanResult<()> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        loop {
            if !self.tokens.is_empty() {
                // A queued head token that may still become a simple key needs lookahead.
                match self.simple_keys_by_tok.get(&self.tokens_parsed).copied() {
                    None => break,
                    Some(idx) => {
                        if !self.simple_key_is_valid(idx)? {
                            break;
                        }
                    }
                }
            }
            self.fetch_next_token()?;
        }
        self.token_available = true;
        Ok(())
    }

    fn simple_key_is_valid(&mut self, idx: usize) -> ScanResult<bool> {
        let Some(key) = self.simple_keys.get(idx).copied() else {
            return Ok(false);
        };
        if !key.possible {
            return Ok(false);
        }
        if key.mark.line < self.mark.line || key.mark.index + 1024 < self.mark.index {
            if key.required {
                return self.scanner_error(key.mark, "could not find expected ':'");
            }
            self.simple_keys[idx].possible = false;
            return Ok(false);
        }
        Ok(true)
    }

    fn fetch_next_token(&mut self) -> ScanResult<()> {
        self.need(1)?;
        if !self.stream_start_produced {
            self.fetch_stream_start();
            return Ok(());
        }
        self.scan_to_next_token()?;
        self.unroll_indent(self.mark.column as i64);
        self.need(4)?;
        let c = self.ch();
        if c == '\0' {
            return self.fetch_stream_end();
        }
        if self.mark.column == 0 && c == '%' {
            return self.fetch_directive();
        }
        if self.mark.column == 0
            && ((c == '-' && self.at(1) == '-' && self.at(2) == '-')
                || (c == '.' && self.at(1) == '.' && self.at(2) == '.'))
            && is_blankz(self.at(3))
        {
            let kind = if c == '-' {
                TokenKind::DocumentStart
            } else {
                TokenKind::DocumentEnd
            };
            return self.fetch_document_indicator(kind);
        }
        let next = self.at(1);
        match c {
            '[' => return self.fetch_flow_collection_start(TokenKind::FlowSequenceStart),
            '{' => return self.fetch_flow_collection_start(TokenKind::FlowMappingStart),
            ']' => return self.fetch_flow_collection_end(TokenKind::FlowSequenceEnd),
            '}' => return self.fetch_flow_collection_end(TokenKind::FlowMappingEnd),
            ',' => return self.fetch_flow_entry(),
            '-' if is_blankz(next) => return self.fetch_block_entry(),
            '?' if self.flow_level > 0 || is_blankz(next) => return self.fetch_key(),
            ':' if self.flow_level > 0 || is_blankz(next) => return self.fetch_value(),
            '*' => return self.fetch_anchor(true),
            '&' => return self.fetch_anchor(false),
            '!' => return self.fetch_tag(),
            '|' if self.flow_level == 0 => return self.fetch_block_scalar(true),
            '>' if self.flow_level == 0 => return self.fetch_block_scalar(false),
            '\'' => return self.fetch_flow_scalar(true),
            '"' => return self.fetch_flow_scalar(false),
            _ => {}
        }
        let indicator = is_blankz(c)
            || matches!(
                c,
                '-' | '?'
                    | ':'
                    | ','
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '#'
                    | '&'
                    | '*'
                    | '!'
                    | '|'
                    | '>'
                    | '\''
                    | '"'
                    | '%'
                    | '@'
                    | '`'
            );
        if !indicator
            || (c == '-' && !is_blank(next))
            || (self.flow_level == 0 && (c == '?' || c == ':') && !is_blankz(next))
        {
            return self.fetch_plain_scalar();
        }
        let mark = self.mark;
        self.scanner_error(mark, "found character that cannot start any token")
    }

    // ---- simple keys and indentation -------------------------------------------------

    fn next_token_number(&self) -> usize {
        self.tokens_parsed + self.tokens.len()
    }

    fn save_simple_key(&mut self) -> ScanResult<()> {
        let required = self.flow_level == 0 && self.indent == self.mark.column as i64;
        if self.simple_key_allowed {
            let key = SimpleKey {
                possible: true,
                required,
                token_number: self.next_token_number(),
                mark: self.mark,
            };
            self.remove_simple_key()?;
            let idx = self.simple_keys.len() - 1;
            self.simple_keys[idx] = key;
            self.simple_keys_by_tok.insert(key.token_number, idx);
        }
        Ok(())
    }

    fn remove_simple_key(&mut self) -> ScanResult<()> {
        let idx = self.simple_keys.len() - 1;
        let key = self.simple_keys[idx];
        if key.possible {
            if key.required {
                return self.scanner_error(key.mark, "could not find expected ':'");
            }
            self.simple_keys[idx].possible = false;
            self.simple_keys_by_tok.remove(&key.token_number);
        }
        Ok(())
    }

    fn increase_flow_level(&mut self) -> ScanResult<()> {
        self.simple_keys.push(SimpleKey {
            possible: false,
            required: false,
            token_number: self.next_token_number(),
            mark: self.mark,
        });
        self.flow_level += 1;
        if self.flow_level > MAX_FLOW_LEVEL {
            let mark = self.mark;
            return self.scanner_error(mark, &format!("exceeded max depth of {MAX_FLOW_LEVEL}"));
        }
        Ok(())
    }

    fn decrease_flow_level(&mut self) {
        if self.flow_level > 0 {
            self.flow_level -= 1;
            if let Some(key) = self.simple_keys.pop() {
                self.simple_keys_by_tok.remove(&key.token_number);
            }
        }
    }

    fn roll_indent(
        &mut self,
        column: usize,
        number: Option<usize>,
        kind: TokenKind,
        mark: Mark,
    ) -> ScanResult<()> {
        if self.flow_level > 0 {
            return Ok(());
        }
        let column = column as i64;
        if self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
            if self.indents.len() > MAX_INDENTS {
                let mark = self.simple_keys.last().map(|k| k.mark).unwrap_or_default();
                return self.scanner_error(mark, &format!("exceeded max depth of {MAX_INDENTS}"));
            }
            let token = Token {
                kind,
                start: mark,
                end: mark,
            };
            match number {
                Some(n) => {
                    let pos = n as i64 - self.tokens_parsed as i64;
                    self.insert_token(pos, token);
                }
                None => self.tokens.push_back(token),
            }
        }
        Ok(())
    }

    fn unroll_indent(&mut self, column: i64) {
        if self.flow_level > 0 {
            return;
        }
        while self.indent > column {
            let mark = self.mark;
            self.push_token(TokenKind::BlockEnd, mark, mark);
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }

    // ---- fetchers ----------------------------------------------------------------------

    fn fetch_stream_start(&mut self) {
        self.indent = -1;
        self.simple_keys.push(SimpleKey::default());
        self.simple_key_allowed = true;
        self.stream_start_produced = true;
        let mark = self.mark;
        self.push_token(TokenKind::StreamStart, mark, mark);
    }

    fn fetch_stream_end(&mut self) -> ScanResult<()> {
        if self.mark.column != 0 {
            self.mark.column = 0;
            self.mark.line += 1;
        }
        self.unroll_indent(-1);
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        let mark = self.mark;
        self.push_token(TokenKind::StreamEnd, mark, mark);
        Ok(())
    }

    fn fetch_directive(&mut self) -> ScanResult<()> {
        self.unroll_indent(-1);
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_directive()?;
        self.tokens.push_back(token);
        Ok(())
    }

    fn fetch_document_indicator(&mut self, kind: TokenKind) -> ScanResult<()> {
        self.unroll_indent(-1);
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        let start = self.mark;
        self.skip();
        self.skip();
        self.skip();
        let end = self.mark;
        self.push_token(kind, start, end);
        Ok(())
    }

    fn fetch_flow_collection_start(&mut self, kind: TokenKind) -> ScanResult<()> {
        self.save_simple_key()?;
        self.increase_flow_level()?;
        self.simple_key_allowed = true;
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(kind, start, end);
        Ok(())
    }

    fn fetch_flow_collection_end(&mut self, kind: TokenKind) -> ScanResult<()> {
        self.remove_simple_key()?;
        self.decrease_flow_level();
        self.simple_key_allowed = false;
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(kind, start, end);
        Ok(())
    }

    fn fetch_flow_entry(&mut self) -> ScanResult<()> {
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(TokenKind::FlowEntry, start, end);
        Ok(())
    }

    fn fetch_block_entry(&mut self) -> ScanResult<()> {
        if self.flow_level == 0 {
            if !self.simple_key_allowed {
                let mark = self.mark;
                return self.scanner_error(
                    mark,
                    "block sequence entries are not allowed in this context",
                );
            }
            let mark = self.mark;
            self.roll_indent(mark.column, None, TokenKind::BlockSequenceStart, mark)?;
        }
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(TokenKind::BlockEntry, start, end);
        Ok(())
    }

    fn fetch_key(&mut self) -> ScanResult<()> {
        if self.flow_level == 0 {
            if !self.simple_key_allowed {
                let mark = self.mark;
                return self.scanner_error(mark, "mapping keys are not allowed in this context");
            }
            let mark = self.mark;
            self.roll_indent(mark.column, None, TokenKind::BlockMappingStart, mark)?;
        }
        self.remove_simple_key()?;
        self.simple_key_allowed = self.flow_level == 0;
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(TokenKind::Key, start, end);
        Ok(())
    }

    fn fetch_value(&mut self) -> ScanResult<()> {
        let idx = self.simple_keys.len() - 1;
        if self.simple_key_is_valid(idx)? {
            let key = self.simple_keys[idx];
            let pos = key.token_number as i64 - self.tokens_parsed as i64;
            self.insert_token(
                pos,
                Token {
                    kind: TokenKind::Key,
                    start: key.mark,
                    end: key.mark,
                },
            );
            self.roll_indent(
                key.mark.column,
                Some(key.token_number),
                TokenKind::BlockMappingStart,
                key.mark,
            )?;
            self.simple_keys[idx].possible = false;
            self.simple_keys_by_tok.remove(&key.token_number);
            self.simple_key_allowed = false;
        } else {
            if self.flow_level == 0 {
                if !self.simple_key_allowed {
                    let mark = self.mark;
                    return self
                        .scanner_error(mark, "mapping values are not allowed in this context");
                }
                let mark = self.mark;
                self.roll_indent(mark.column, None, TokenKind::BlockMappingStart, mark)?;
            }
            self.simple_key_allowed = self.flow_level == 0;
        }
        let start = self.mark;
        self.skip();
        let end = self.mark;
        self.push_token(TokenKind::Value, start, end);
        Ok(())
    }

    fn fetch_anchor(&mut self, alias: bool) -> ScanResult<()> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_anchor(alias)?;
        self.tokens.push_back(token);
        Ok(())
    }

    fn fetch_tag(&mut self) -> ScanResult<()> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_tag()?;
        self.tokens.push_back(token);
        Ok(())
    }

    fn fetch_block_scalar(&mut self, literal: bool) -> ScanResult<()> {
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        let token = self.scan_block_scalar(literal)?;
        self.tokens.push_back(token);
        Ok(())
    }

    fn fetch_flow_scalar(&mut self, single: bool) -> ScanResult<()> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_flow_scalar(single)?;
        self.tokens.push_back(token);
        Ok(())
    }

    fn fetch_plain_scalar(&mut self) -> ScanResult<()> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_plain_scalar()?;
        self.tokens.push_back(token);
        Ok(())
    }

    // ---- scanners ----------------------------------------------------------------------

    fn scan_to_next_token(&mut self) -> ScanResult<()> {
        loop {
            self.need(1)?;
            if self.mark.column == 0 && self.ch() == '\u{FEFF}' {
                self.skip();
            }
            self.need(1)?;
            // Tabs are whitespace only in flow context or where no simple key may start.
            while self.ch() == ' '
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.ch() == '\t')
            {
                self.skip();
                self.need(1)?;
            }
            if self.ch() == '#' {
                while !is_breakz(self.ch()) {
                    self.skip();
                    self.need(1)?;
                }
            }
            if is_break(self.ch()) {
                self.need(2)?;
                self.skip_line();
                if self.flow_level == 0 {
                    self.simple_key_allowed = true;
                }
            } else {
                return Ok(());
            }
        }
    }

    fn skip_comment_to_eol(&mut self) -> ScanResult<()> {
        self.need(1)?;
        while is_blank(self.ch()) {
            self.skip();
            self.need(1)?;
        }
        if self.ch() == '#' {
            while !is_breakz(self.ch()) {
                self.skip();
                self.need(1)?;
            }
        }
        Ok(())
    }

    fn scan_directive(&mut self) -> ScanResult<Token> {
        let start = self.mark;
        self.skip();
        let name = self.scan_directive_name(start)?;
        let kind = if name == "YAML" {
            let (major, minor) = self.scan_version_directive_value(start)?;
            TokenKind::VersionDirective { major, minor }
        } else if name == "TAG" {
            let (handle, prefix) = self.scan_tag_directive_value(start)?;
            TokenKind::TagDirective { handle, prefix }
        } else {
            return self.scanner_error(start, "found unknown directive name");
        };
        let end = self.mark;
        self.skip_comment_to_eol()?;
        if !is_breakz(self.ch()) {
            return self.scanner_error(start, "did not find expected comment or line break");
        }
        if is_break(self.ch()) {
            self.need(2)?;
            self.skip_line();
        }
        Ok(Token { kind, start, end })
    }

    fn scan_directive_name(&mut self, start: Mark) -> ScanResult<String> {
        self.need(1)?;
        let mut s = String::new();
        while is_alpha(self.ch()) {
            self.read(&mut s);
            self.need(1)?;
        }
        if s.is_empty() {
            return self.scanner_error(start, "could not find expected directive name");
        }
        if !is_blankz(self.ch()) {
            return self.scanner_error(start, "found unexpected non-alphabetical character");
        }
        Ok(s)
    }

    fn scan_version_directive_value(&mut self, start: Mark) -> ScanResult<(u32, u32)> {
        self.need(1)?;
        while is_blank(self.ch()) {
            self.skip();
            self.need(1)?;
        }
        let major = self.scan_version_directive_number(start)?;
        if self.ch() != '.' {
            return self.scanner_error(start, "did not find expected digit or '.' character");
        }
        self.skip();
        let minor = self.scan_version_directive_number(start)?;
        Ok((major, minor))
    }

    fn scan_version_directive_number(&mut self, start: Mark) -> ScanResult<u32> {
        self.need(1)?;
        let mut value = 0u32;
        let mut length = 0;
        while let Some(d) = self
            .ch()
            .to_digit(10)
            .filter(|_| self.ch().is_ascii_digit())
        {
            length += 1;
            if length > 2 {
                return self.scanner_error(start, "found extremely long version number");
            }
            value = value * 10 + d;
            self.skip();
            self.need(1)?;
        }
        if length == 0 {
            return self.scanner_error(start, "did not find expected version number");
        }
        Ok(value)
    }

    fn scan_tag_directive_value(&mut self, start: Mark) -> ScanResult<(String, String)> {
        self.need(1)?;
        while is_blank(self.ch()) {
            self.skip();
            self.need(1)?;
        }
        let handle = self.scan_tag_handle(true, start)?;
        self.need(1)?;
        if !is_blank(self.ch()) {
            return self.scanner_error(start, "did not find expected whitespace");
        }
        while is_blank(self.ch()) {
            self.skip();
            self.need(1)?;
        }
        let prefix = self.scan_tag_uri(None, start)?;
        self.need(1)?;
        if !is_blankz(self.ch()) {
            return self.scanner_error(start, "did not find expected whitespace or line break");
        }
        Ok((handle, prefix))
    }

    fn scan_anchor(&mut self, alias: bool) -> ScanResult<Token> {
        let start = self.mark;
        self.skip();
        self.need(1)?;
        let mut s = String::new();
        while is_alpha(self.ch()) {
            self.read(&mut s);
            self.need(1)?;
        }
        let end = self.mark;
        let c = self.ch();
        if s.is_empty()
            || !(is_blankz(c) || matches!(c, '?' | ':' | ',' | ']' | '}' | '%' | '@' | '`'))
        {
            return self.scanner_error(
                start,
                "did not find expected alphabetic or numeric character",
            );
        }
        let kind = if alias {
            TokenKind::Alias(s)
        } else {
            TokenKind::Anchor(s)
        };
        Ok(Token { kind, start, end })
    }

    fn scan_tag(&mut self) -> ScanResult<Token> {
        let start = self.mark;
        self.need(2)?;
        let (handle, suffix);
        if self.at(1) == '<' {
            self.skip();
            self.skip();
            suffix = self.scan_tag_uri(None, start)?;
            if self.ch() != '>' {
                return self.scanner_error(start, "did not find the expected '>'");
            }
            self.skip();
            handle = String::new();
        } else {
            let first = self.scan_tag_handle(false, start)?;
            if first.len() > 1 && first.starts_with('!') && first.ends_with('!') {
                handle = first;
                suffix = self.scan_tag_uri(None, start)?;
            } else {
                let rest = self.scan_tag_uri(Some(&first), start)?;
                if rest.is_empty() {
                    // The lone '!' tag: empty handle, suffix '!'.
                    handle = String::new();
                    suffix = "!".to_string();
                } else {
                    handle = "!".to_string();
                    suffix = rest;
                }
            }
        }
        self.need(1)?;
        if !is_blankz(self.ch()) {
            return self.scanner_error(start, "did not find expected whitespace or line break");
        }
        let end = self.mark;
        Ok(Token {
            kind: TokenKind::Tag { handle, suffix },
            start,
            end,
        })
    }

    fn scan_tag_handle(&mut self, directive: bool, start: Mark) -> ScanResult<String> {
        self.need(1)?;
        if self.ch() != '!' {
            return self.scanner_error(start, "did not find expected '!'");
        }
        let mut s = String::new();
        self.read(&mut s);
        self.need(1)?;
        while is_alpha(self.ch()) {
            self.read(&mut s);
            self.need(1)?;
        }
        if self.ch() == '!' {
            self.read(&mut s);
        } else if directive && s != "!" {
            return self.scanner_error(start, "did not find expected '!'");
        }
        Ok(s)
    }

    fn scan_tag_uri(&mut self, head: Option<&str>, start: Mark) -> ScanResult<String> {
        let mut bytes: Vec<u8> = Vec::new();
        let mut has_tag = head.is_some_and(|h| !h.is_empty());
        if let Some(h) = head
            && h.len() > 1
        {
            bytes.extend_from_slice(&h.as_bytes()[1..]);
        }
        self.need(1)?;
        loop {
            let c = self.ch();
            let uri_char = is_alpha(c)
                || matches!(
                    c,
                    ';' | '/'
                        | '?'
                        | ':'
                        | '@'
                        | '&'
                        | '='
                        | '+'
                        | '$'
                        | ','
                        | '.'
                        | '!'
                        | '~'
                        | '*'
                        | '\''
                        | '('
                        | ')'
                        | '['
                        | ']'
                        | '%'
                );
            if !uri_char {
                break;
            }
            if c == '%' {
                self.scan_uri_escapes(start, &mut bytes)?;
            } else {
                let mut buf = [0u8; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                self.skip();
            }
            self.need(1)?;
            has_tag = true;
        }
        if !has_tag {
            return self.scanner_error(start, "did not find expected tag URI");
        }
        // URI escapes are checked to form complete UTF-8 sequences, but not that they are
        // valid UTF-8 overall; keep whatever decodes.
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn scan_uri_escapes(&mut self, start: Mark, out: &mut Vec<u8>) -> ScanResult<()> {
        let mut width = 1024usize;
        while width > 0 {
            self.need(3)?;
            let (h, l) = (self.at(1), self.at(2));
            if !(self.ch() == '%' && h.is_ascii_hexdigit() && l.is_ascii_hexdigit()) {
                return self.scanner_error(start, "did not find URI escaped octet");
            }
            let octet = ((h.to_digit(16).unwrap_or(0) << 4) + l.to_digit(16).unwrap_or(0)) as u8;
            if width == 1024 {
                width = utf8_width(octet);
                if width == 0 {
                    return self.scanner_error(start, "found an incorrect leading UTF-8 octet");
                }
            } else if octet & 0xC0 != 0x80 {
                return self.scanner_error(start, "found an incorrect trailing UTF-8 octet");
            }
            out.push(octet);
            self.skip();
            self.skip();
            self.skip();
            width -= 1;
        }
        Ok(())
    }

    fn scan_block_scalar(&mut self, literal: bool) -> ScanResult<Token> {
        let start = self.mark;
        self.skip();
        self.need(1)?;
        let mut chomping = 0i32;
        let mut increment = 0usize;
        let c = self.ch();
        if c == '+' || c == '-' {
            chomping = if c == '+' { 1 } else { -1 };
            self.skip();
            self.need(1)?;
            if self.ch().is_ascii_digit() {
                if self.ch() == '0' {
                    return self.scanner_error(start, "found an indentation indicator equal to 0");
                }
                increment = self.ch() as usize - '0' as usize;
                self.skip();
            }
        } else if c.is_ascii_digit() {
            if c == '0' {
                return self.scanner_error(start, "found an indentation indicator equal to 0");
            }
            increment = c as usize - '0' as usize;
            self.skip();
            self.need(1)?;
            let c = self.ch();
            if c == '+' || c == '-' {
                chomping = if c == '+' { 1 } else { -1 };
                self.skip();
            }
        }
        self.skip_comment_to_eol()?;
        if !is_breakz(self.ch()) {
            return self.scanner_error(start, "did not find expected comment or line break");
        }
        if is_break(self.ch()) {
            self.need(2)?;
            self.skip_line();
        }
        let mut end = self.mark;
        let mut indent: i64 = 0;
        if increment > 0 {
            indent = if self.indent >= 0 {
                self.indent + increment as i64
            } else {
                increment as i64
            };
        }
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        self.scan_block_scalar_breaks(&mut indent, &mut trailing_breaks, start, &mut end)?;
        self.need(1)?;
        let mut leading_blank = false;
        while self.mark.column as i64 == indent && self.ch() != '\0' {
            let trailing_blank = is_blank(self.ch());
            if !literal && !leading_blank && !trailing_blank && leading_break.starts_with('\n') {
                if trailing_breaks.is_empty() {
                    s.push(' ');
                }
            } else {
                s.push_str(&leading_break);
            }
            leading_break.clear();
            s.push_str(&trailing_breaks);
            trailing_breaks.clear();
            leading_blank = is_blank(self.ch());
            while !is_breakz(self.ch()) {
                self.read(&mut s);
                self.need(1)?;
            }
            self.need(2)?;
            self.read_line(&mut leading_break);
            self.scan_block_scalar_breaks(&mut indent, &mut trailing_breaks, start, &mut end)?;
        }
        if chomping != -1 {
            s.push_str(&leading_break);
        }
        if chomping == 1 {
            s.push_str(&trailing_breaks);
        }
        let style = if literal {
            ScalarStyle::Literal
        } else {
            ScalarStyle::Folded
        };
        Ok(Token {
            kind: TokenKind::Scalar { value: s, style },
            start,
            end,
        })
    }

    fn scan_block_scalar_breaks(
        &mut self,
        indent: &mut i64,
        breaks: &mut String,
        start: Mark,
        end: &mut Mark,
    ) -> ScanResult<()> {
        *end = self.mark;
        let mut max_indent = 0i64;
        loop {
            self.need(1)?;
            while (*indent == 0 || (self.mark.column as i64) < *indent) && self.ch() == ' ' {
                self.skip();
                self.need(1)?;
            }
            if self.mark.column as i64 > max_indent {
                max_indent = self.mark.column as i64;
            }
            if (*indent == 0 || (self.mark.column as i64) < *indent) && self.ch() == '\t' {
                return self.scanner_error(
                    start,
                    "found a tab character where an indentation space is expected",
                );
            }
            if !is_break(self.ch()) {
                break;
            }
            self.need(2)?;
            self.read_line(breaks);
            *end = self.mark;
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        Ok(())
    }

    fn scan_flow_scalar(&mut self, single: bool) -> ScanResult<Token> {
        let start = self.mark;
        self.skip();
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        let mut whitespaces = String::new();
        loop {
            self.need(4)?;
            if self.mark.column == 0
                && ((self.at(0) == '-' && self.at(1) == '-' && self.at(2) == '-')
                    || (self.at(0) == '.' && self.at(1) == '.' && self.at(2) == '.'))
                && is_blankz(self.at(3))
            {
                return self.scanner_error(start, "found unexpected document indicator");
            }
            if self.ch() == '\0' {
                return self.scanner_error(start, "found unexpected end of stream");
            }
            let mut leading_blanks = false;
            while !is_blankz(self.ch()) {
                let c = self.ch();
                if single && c == '\'' && self.at(1) == '\'' {
                    s.push('\'');
                    self.skip();
                    self.skip();
                } else if (single && c == '\'') || (!single && c == '"') {
                    // The closing quote.
                    break;
                } else if !single && c == '\\' && is_break(self.at(1)) {
                    self.need(3)?;
                    self.skip();
                    self.skip_line();
                    leading_blanks = true;
                    break;
                } else if !single && c == '\\' {
                    let code_length = match escape(self.at(1)) {
                        Some(Escape::Char(ch)) => {
                            s.push(ch);
                            0
                        }
                        Some(Escape::Hex(n)) => n,
                        None => {
                            return self.scanner_error(start, "found unknown escape character");
                        }
                    };
                    self.skip();
                    self.skip();
                    if code_length > 0 {
                        self.need(code_length)?;
                        let mut value: u32 = 0;
                        for k in 0..code_length {
                            let Some(d) = self.at(k).to_digit(16).filter(|_| self.at(k).is_ascii())
                            else {
                                return self.scanner_error(
                                    start,
                                    "did not find expected hexdecimal number",
                                );
                            };
                            value = (value << 4) + d;
                        }
                        let Some(ch) = char::from_u32(value) else {
                            return self.scanner_error(
                                start,
                                "found invalid Unicode character escape code",
                            );
                        };
                        s.push(ch);
                        for _ in 0..code_length {
                            self.skip();
                        }
                    }
                } else {
                    self.read(&mut s);
                }
                self.need(2)?;
            }
            self.need(1)?;
            let c = self.ch();
            if (single && c == '\'') || (!single && c == '"') {
                break;
            }
            while is_blank(self.ch()) || is_break(self.ch()) {
                if is_blank(self.ch()) {
                    if leading_blanks {
                        self.skip();
                    } else {
                        self.read(&mut whitespaces);
                    }
                } else {
                    self.need(2)?;
                    if leading_blanks {
                        self.read_line(&mut trailing_breaks);
                    } else {
                        whitespaces.clear();
                        self.read_line(&mut leading_break);
                        leading_blanks = true;
                    }
                }
                self.need(1)?;
            }
            join_gap(
                &mut s,
                leading_blanks,
                &mut leading_break,
                &mut trailing_breaks,
                &mut whitespaces,
            );
        }
        self.skip();
        let end = self.mark;
        let style = if single {
            ScalarStyle::SingleQuoted
        } else {
            ScalarStyle::DoubleQuoted
        };
        Ok(Token {
            kind: TokenKind::Scalar { value: s, style },
            start,
            end,
        })
    }

    fn scan_plain_scalar(&mut self) -> ScanResult<Token> {
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        let mut whitespaces = String::new();
        let mut leading_blanks = false;
        let indent = self.indent + 1;
        let start = self.mark;
        let mut end = self.mark;
        loop {
            self.need(4)?;
            if self.mark.column == 0
                && ((self.at(0) == '-' && self.at(1) == '-' && self.at(2) == '-')
                    || (self.at(0) == '.' && self.at(1) == '.' && self.at(2) == '.'))
                && is_blankz(self.at(3))
            {
                break;
            }
            if self.ch() == '#' {
                break;
            }
            while !is_blankz(self.ch()) {
                let c = self.ch();
                if (c == ':' && is_blankz(self.at(1)))
                    || (self.flow_level > 0 && matches!(c, ',' | '?' | '[' | ']' | '{' | '}'))
                {
                    break;
                }
                if leading_blanks || !whitespaces.is_empty() {
                    join_gap(
                        &mut s,
                        leading_blanks,
                        &mut leading_break,
                        &mut trailing_breaks,
                        &mut whitespaces,
                    );
                    leading_blanks = false;
                }
                self.read(&mut s);
                end = self.mark;
                self.need(2)?;
            }
            if !(is_blank(self.ch()) || is_break(self.ch())) {
                break;
            }
            self.need(1)?;
            while is_blank(self.ch()) || is_break(self.ch()) {
                if is_blank(self.ch()) {
                    if leading_blanks && (self.mark.column as i64) < indent && self.ch() == '\t' {
                        return self.scanner_error(
                            start,
                            "found a tab character that violates indentation",
                        );
                    }
                    if leading_blanks {
                        self.skip();
                    } else {
                        self.read(&mut whitespaces);
                    }
                } else {
                    self.need(2)?;
                    if leading_blanks {
                        self.read_line(&mut trailing_breaks);
                    } else {
                        whitespaces.clear();
                        self.read_line(&mut leading_break);
                        leading_blanks = true;
                    }
                }
                self.need(1)?;
            }
            if self.flow_level == 0 && (self.mark.column as i64) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        Ok(Token {
            kind: TokenKind::Scalar {
                value: s,
                style: ScalarStyle::Plain,
            },
            start,
            end,
        })
    }
}

fn utf8_width(octet: u8) -> usize {
    if octet & 0x80 == 0 {
        1
    } else if octet & 0xE0 == 0xC0 {
        2
    } else if octet & 0xF0 == 0xE0 {
        3
    } else if octet & 0xF8 == 0xF0 {
        4
    } else {
        0
    }
}
