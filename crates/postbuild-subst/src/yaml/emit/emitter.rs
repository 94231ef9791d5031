//! The emitter (go-yaml v2 encode.go and emitterc.go, for the events Marshal produces here):
//! style selection, quoting, escapes, literal blocks and folding at 80 columns.

use std::borrow::Cow;

use super::base60::is_base60_float;
use super::key_order::sorted_order;
use super::{Node, resolves_to_non_string};
use crate::yaml::gofmt::format_g;
use crate::yaml::scan::is_break;

pub(super) const BEST_WIDTH: usize = 80;
pub(super) const BEST_INDENT: isize = 2;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

#[derive(Debug, PartialEq)]
/// What `yaml_emitter_analyze_scalar` finds out about a scalar (flow-context flags omitted:
/// scalars are never written inside a flow collection here).
pub(super) struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

/// go-yaml's `is_printable`: LF, printable ASCII, and the BMP minus C1, surrogates, BOM,
/// U+FFFE and U+FFFF. Everything outside the BMP counts as non-printable.
pub(super) fn is_printable(c: char) -> bool {
    matches!(c as u32, 0x0A | 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD) && c != '\u{FEFF}'
}

pub(super) fn analyze_scalar(value: &str) -> Analysis {
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
pub(super) fn analyze_ascii(b: &[u8]) -> Analysis {
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
pub(super) fn finish_analysis(
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
pub(super) fn analyze_chars(value: &str, chars: impl Iterator<Item = char>) -> Analysis {
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
pub(super) fn requested_string_style(s: &str) -> Style {
    if s.contains('\n') {
        Style::Literal
    } else if !resolves_to_non_string(s) && !is_base60_float(s) {
        Style::Plain
    } else {
        Style::Double
    }
}

/// Characters in `s` (columns count characters, not bytes).
pub(super) fn char_count(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// Decimal text of `u` in `buf`, without allocating.
pub(super) fn u64_text(mut u: u64, buf: &mut [u8; 20]) -> &str {
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
pub(super) fn i64_text(i: i64, buf: &mut [u8; 20]) -> &str {
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
pub(super) enum EmitFrame<'n, 'a> {
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

pub(super) struct Emitter {
    out: String,
    /// Column in characters (an escape like `\U0001F600` counts its 10 characters).
    column: usize,
    indent: isize,
    whitespace: bool,
    indention: bool,
}

pub(super) fn emit_document(node: &Node<'_>) -> String {
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
