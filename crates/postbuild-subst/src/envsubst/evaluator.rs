//! One pass over the template that parses and evaluates at the same time.
//!
//! Upstream parses the whole template into a tree, then executes it. We do both in one left to
//! right pass with an explicit stack of open `${…}` expressions (no recursion, so nesting depth is
//! bounded by memory, not by the call stack). To keep upstream's error precedence — a parse
//! error anywhere wins over an evaluation error (strict mode, negative length) earlier in the
//! text — the first evaluation error is remembered, evaluation stops, and parsing continues to
//! the end.
//!
//! Argument text and the values of nested expressions live in one shared byte stack
//! (`arg_bytes`), so an expression costs no allocation beyond amortised buffer growth.

use std::borrow::Cow;

use memchr::memchr2;

use super::functions::{self, Trim};
use super::text::{
    decode_rune, is_ident_char, map_first_rune, map_runes, simple_lower, simple_upper,
};
use super::{Mode, SubstitutionErrorKind, UndefinedVariable, VarSource};
use crate::Error;

/// Which operator an open expression has; it decides how its arguments are scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    /// `:` offset and optional `:` length.
    Substring,
    /// `=`, `:=`, `:-`, `:?`, `:+`: default when empty or unset.
    Default,
    /// `/`, `//`, `/#`, `/%`.
    Replace(Replace),
    /// `#`, `##`, `%`, `%%`.
    Trim(Trim),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    First,
    All,
    Prefix,
    Suffix,
}

/// Where the scan of an open expression stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    SubstringOffset,
    AfterSubstringOffset,
    SubstringLength,
    DefaultWords,
    ReplacePattern,
    ReplaceDelimiter,
    ReplaceString,
    TrimPattern,
    Close,
}

/// An expression whose `}` has not been reached yet.
#[derive(Debug)]
struct OpenExpression {
    /// Offset of its `$`.
    start: usize,
    name_start: usize,
    name_end: usize,
    operator: Operator,
    stage: Stage,
    /// Where its arguments begin in `arg_bytes` / `arg_ends`.
    arg_bytes_base: usize,
    arg_ends_base: usize,
}

/// How an argument is scanned: which ASCII bytes end it, and whether `$$`, `\/`, `\\` escape.
#[derive(Debug, Clone, Copy)]
struct ArgScan {
    stop: [u8; 2],
    escapes: bool,
}

const NOT_COLON_OR_CLOSE: ArgScan = ArgScan {
    stop: [b':', b'}'],
    escapes: false,
};
const NOT_CLOSE: ArgScan = ArgScan {
    stop: [b'}', b'}'],
    escapes: false,
};
const NOT_SLASH_ESCAPED: ArgScan = ArgScan {
    stop: [b'/', b'/'],
    escapes: true,
};
const NOT_CLOSE_ESCAPED: ArgScan = ArgScan {
    stop: [b'}', b'}'],
    escapes: true,
};

pub(crate) struct Evaluator<'t, 'v, V: VarSource + ?Sized> {
    template: &'t str,
    src: &'t [u8],
    pos: usize,
    vars: &'v V,
    mode: Mode,
    out: Vec<u8>,
    open: Vec<OpenExpression>,
    arg_bytes: Vec<u8>,
    arg_ends: Vec<usize>,
    scratch: Vec<u8>,
    /// The first evaluation error; once set, nothing more is evaluated.
    eval_error: Option<Error>,
    /// When set, names looked up but not defined (outside default operators) are recorded.
    undefined: Option<Vec<UndefinedVariable>>,
    /// Recent lookups, so a name used many times is hashed by the caller's map once
    /// (a direct-mapped cache indexed by a cheap hash of the name).
    lookup_cache: Vec<Option<CachedLookup<'t, 'v>>>,
}

/// One remembered variable lookup.
struct CachedLookup<'t, 'v> {
    name: &'t [u8],
    value: Option<Cow<'v, str>>,
}

const LOOKUP_CACHE_SLOTS: usize = 64;

/// A cheap multiplicative hash of a name, for the lookup cache only.
fn name_slot(name: &[u8]) -> usize {
    // The first and last (up to) eight bytes and the length: one multiplication.
    let word = |bytes: &[u8]| {
        let mut buf = [0u8; 8];
        buf[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(buf)
    };
    let head = word(&name[..name.len().min(8)]);
    let tail = word(&name[name.len().saturating_sub(8)..]);
    let length = u64::try_from(name.len()).unwrap_or(u64::MAX);
    let hash = (head ^ tail.rotate_left(29) ^ length).wrapping_mul(0x517c_c1b7_2722_0a95);
    // The cache has 64 slots: the top 6 bits of the hash pick one.
    usize::try_from(hash >> 58).unwrap_or(0)
}

fn parse_error(kind: SubstitutionErrorKind, offset: usize) -> Error {
    Error::Substitution { kind, offset }
}

impl<'t, 'v, V: VarSource + ?Sized> Evaluator<'t, 'v, V> {
    pub(crate) fn new(template: &'t str, vars: &'v V, mode: Mode) -> Self {
        Self {
            template,
            src: template.as_bytes(),
            pos: 0,
            vars,
            mode,
            out: Vec::with_capacity(template.len() + template.len() / 16),
            open: Vec::new(),
            arg_bytes: Vec::new(),
            arg_ends: Vec::new(),
            scratch: Vec::new(),
            eval_error: None,
            undefined: None,
            lookup_cache: Vec::new(),
        }
    }

    pub(crate) fn collect_undefined(mut self) -> Self {
        self.undefined = Some(Vec::new());
        self
    }

    /// Runs to the end; the output bytes (and the undefined names when collected).
    pub(crate) fn run(mut self) -> Result<(Vec<u8>, Vec<UndefinedVariable>), Error> {
        loop {
            let Some(top) = self.open.last() else {
                if !self.copy_text() {
                    break;
                }
                let start = self.pos;
                self.pos += 2;
                self.begin_expression(start)?;
                continue;
            };
            match top.stage {
                Stage::SubstringOffset => self.argument(NOT_COLON_OR_CLOSE)?,
                Stage::AfterSubstringOffset => match self.byte() {
                    Some(b'}') => {
                        self.pos += 1;
                        self.close_expression();
                    }
                    Some(b':') => {
                        while self.byte() == Some(b':') {
                            self.pos += 1;
                        }
                        self.set_stage(Stage::SubstringLength);
                    }
                    _ => return Err(self.error(SubstitutionErrorKind::BadSubstitution)),
                },
                Stage::SubstringLength | Stage::TrimPattern => self.argument(NOT_CLOSE)?,
                Stage::DefaultWords => {
                    if self.byte() == Some(b'}') {
                        self.pos += 1;
                        self.close_expression();
                    } else {
                        self.argument(NOT_CLOSE)?;
                    }
                }
                Stage::ReplacePattern => self.argument(NOT_SLASH_ESCAPED)?,
                Stage::ReplaceDelimiter => {
                    if self.byte() != Some(b'/') {
                        return Err(self.error(SubstitutionErrorKind::BadSubstitution));
                    }
                    while self.byte() == Some(b'/') {
                        self.pos += 1;
                    }
                    if self.byte() == Some(b'}') {
                        self.pos += 1;
                        self.close_expression();
                    } else {
                        self.set_stage(Stage::ReplaceString);
                    }
                }
                Stage::ReplaceString => self.argument(NOT_CLOSE_ESCAPED)?,
                Stage::Close => {
                    if self.byte() != Some(b'}') {
                        return Err(self.error(SubstitutionErrorKind::BadSubstitution));
                    }
                    self.pos += 1;
                    self.close_expression();
                }
            }
        }
        match self.eval_error {
            Some(err) => Err(err),
            None => Ok((self.out, self.undefined.unwrap_or_default())),
        }
    }

    fn byte(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn byte_at(&self, pos: usize) -> Option<u8> {
        self.src.get(pos).copied()
    }

    fn error(&self, kind: SubstitutionErrorKind) -> Error {
        parse_error(kind, self.pos)
    }

    fn set_stage(&mut self, stage: Stage) {
        if let Some(top) = self.open.last_mut() {
            top.stage = stage;
        }
    }

    /// Copies top-level text to the output, collapsing `$$` pairs, up to the next `${`. Returns
    /// false at the end of the template. A NUL byte ends the template, as upstream's scanner
    /// reads byte 0 as end of input (the rest is dropped).
    fn copy_text(&mut self) -> bool {
        /// After this many ordinary bytes in a row, switch from the byte loop to `memchr`.
        const SHORT_RUN: usize = 32;
        let src = self.src;
        let writing = self.eval_error.is_none();
        let mut pos = self.pos;
        loop {
            // Byte by byte while specials are close together (`$$`-dense text) ...
            let mut run = 0;
            while let Some(&byte) = src.get(pos) {
                if byte == b'$' || byte == 0 || run == SHORT_RUN {
                    break;
                }
                if writing {
                    self.out.push(byte);
                }
                pos += 1;
                run += 1;
            }
            // ... and with `memchr` and one copy over long ordinary runs.
            if run == SHORT_RUN {
                let rest = &src[pos..];
                let found = memchr2(b'$', 0, rest).unwrap_or(rest.len());
                if writing {
                    self.out.extend_from_slice(&rest[..found]);
                }
                pos += found;
            }
            match (src.get(pos), src.get(pos + 1)) {
                (None | Some(0), _) => {
                    self.pos = src.len();
                    return false;
                }
                (Some(b'$'), Some(b'{')) => {
                    self.pos = pos;
                    return true;
                }
                (Some(b'$'), Some(b'$')) => {
                    // `$$` is one `$`.
                    if writing {
                        self.out.push(b'$');
                    }
                    pos += 2;
                }
                (Some(&byte), _) => {
                    // A lone `$`, or an ordinary byte ending a long run.
                    if writing {
                        self.out.push(byte);
                    }
                    pos += 1;
                }
            }
        }
    }

    /// Scans a name (Unicode letters, digits, `_`) at the current position.
    fn name(&mut self) -> (usize, usize) {
        let start = self.pos;
        let ascii_len = self.src[start..]
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
            .unwrap_or(self.src.len() - start);
        self.pos += ascii_len;
        if self.byte().is_none_or(|b| b.is_ascii()) {
            return (start, self.pos);
        }
        while let Some((c, width)) = decode_rune(self.src, self.pos) {
            if !is_ident_char(c) {
                break;
            }
            self.pos += width;
        }
        (start, self.pos)
    }

    /// Just after `${` (its `$` at `start`): the name and the operator.
    fn begin_expression(&mut self, start: usize) -> Result<(), Error> {
        use SubstitutionErrorKind::{BadSubstitution, MissingClosingBrace, ParseVariableName};
        if self.byte() == Some(b'#') {
            // `${#name}`
            self.pos += 1;
            let (name_start, name_end) = self.name();
            if name_start == name_end || self.byte() != Some(b'}') {
                return Err(self.error(BadSubstitution));
            }
            self.pos += 1;
            self.immediate(start, name_start, name_end, Immediate::Length);
            return Ok(());
        }
        let (name_start, name_end) = self.name();
        if name_start == name_end {
            return Err(self.error(ParseVariableName));
        }
        let (operator, stage) = match self.byte() {
            Some(b':') => match decode_rune(self.src, self.pos + 1) {
                Some(('=' | '-' | '?' | '+', _)) => {
                    self.pos += 2;
                    (Operator::Default, Stage::DefaultWords)
                }
                // Upstream backs up by the width of the peeked rune: at the very end, or before a
                // multi-byte rune, its scanner lands on something that is not `:`.
                None => {
                    self.pos += 1;
                    return Err(self.error(BadSubstitution));
                }
                Some((_, width)) if width > 1 => return Err(self.error(BadSubstitution)),
                Some(_) => {
                    self.pos += 1;
                    (Operator::Substring, Stage::SubstringOffset)
                }
            },
            Some(b'=') => {
                self.pos += 1;
                (Operator::Default, Stage::DefaultWords)
            }
            Some(first @ (b',' | b'^')) => {
                self.pos += 1;
                let second = self.byte().filter(|b| matches!(b, b',' | b'^'));
                if second.is_some() {
                    self.pos += 1;
                }
                if self.byte() != Some(b'}') {
                    return Err(self.error(BadSubstitution));
                }
                self.pos += 1;
                let case = match (first, second) {
                    (b',', None) => Immediate::LowerFirst,
                    (b',', Some(b',')) => Immediate::Lower,
                    (b'^', None) => Immediate::UpperFirst,
                    (b'^', Some(b'^')) => Immediate::Upper,
                    // Mixed `^,` / `,^` parse but have no function: the value as is.
                    _ => Immediate::Value,
                };
                self.immediate(start, name_start, name_end, case);
                return Ok(());
            }
            Some(b'/') => {
                self.pos += 1;
                let kind = match self.byte() {
                    Some(b'/') => Replace::All,
                    Some(b'#') => Replace::Prefix,
                    Some(b'%') => Replace::Suffix,
                    _ => Replace::First,
                };
                if kind != Replace::First {
                    self.pos += 1;
                }
                (Operator::Replace(kind), Stage::ReplacePattern)
            }
            Some(sign @ (b'#' | b'%')) => {
                self.pos += 1;
                let longest = self.byte() == Some(sign);
                if longest {
                    self.pos += 1;
                }
                let kind = match (sign, longest) {
                    (b'#', false) => Trim::ShortestPrefix,
                    (b'#', true) => Trim::LongestPrefix,
                    (_, false) => Trim::ShortestSuffix,
                    (_, true) => Trim::LongestSuffix,
                };
                (Operator::Trim(kind), Stage::TrimPattern)
            }
            Some(b'}') => {
                self.pos += 1;
                self.immediate(start, name_start, name_end, Immediate::Value);
                return Ok(());
            }
            _ => return Err(self.error(MissingClosingBrace)),
        };
        self.open.push(OpenExpression {
            start,
            name_start,
            name_end,
            operator,
            stage,
            arg_bytes_base: self.arg_bytes.len(),
            arg_ends_base: self.arg_ends.len(),
        });
        Ok(())
    }

    /// Scans one argument: a nested `${…}` or a run of text.
    fn argument(&mut self, scan: ArgScan) -> Result<(), Error> {
        let first = match self.byte() {
            None | Some(0) => {
                return Err(self.error(SubstitutionErrorKind::ParseFunctionArgument));
            }
            Some(byte) => byte,
        };
        if first == b'$' && self.byte_at(self.pos + 1) == Some(b'{') {
            let start = self.pos;
            self.pos += 2;
            return self.begin_expression(start);
        }
        let escaped_first = scan.escapes && self.escape_at(self.pos).is_some();
        if !escaped_first && scan.stop.contains(&first) {
            return Err(self.error(SubstitutionErrorKind::ParseFunctionArgument));
        }
        let evaluating = self.eval_error.is_none();
        while let Some(byte) = self.byte() {
            if byte == 0 || scan.stop.contains(&byte) {
                break;
            }
            if byte == b'$' && self.byte_at(self.pos + 1) == Some(b'{') {
                break;
            }
            if scan.escapes
                && let Some(escaped) = self.escape_at(self.pos)
            {
                if evaluating {
                    self.arg_bytes.push(escaped);
                }
                self.pos += 2;
                continue;
            }
            // Only ASCII bytes are special, so runs of other bytes are copied as they are.
            let run_end = self.src[self.pos..]
                .iter()
                .position(|&b| b == 0 || b == b'$' || b == b'\\' || scan.stop.contains(&b))
                .map_or(self.src.len(), |offset| self.pos + offset.max(1));
            if evaluating {
                self.arg_bytes
                    .extend_from_slice(&self.src[self.pos..run_end]);
            }
            self.pos = run_end;
        }
        self.finish_argument();
        Ok(())
    }

    /// `$$` → `$`, `\/` → `/`, `\\` → `\` (arguments of the replace operator only).
    fn escape_at(&self, pos: usize) -> Option<u8> {
        match (self.byte_at(pos), self.byte_at(pos + 1)) {
            (Some(b'$'), Some(b'$')) => Some(b'$'),
            (Some(b'\\'), Some(next @ (b'/' | b'\\'))) => Some(next),
            _ => None,
        }
    }

    /// The argument just written to `arg_bytes` is complete: record it, advance the scan.
    fn finish_argument(&mut self) {
        self.arg_ends.push(self.arg_bytes.len());
        let Some(top) = self.open.last_mut() else {
            return;
        };
        top.stage = match top.stage {
            Stage::SubstringOffset => Stage::AfterSubstringOffset,
            Stage::DefaultWords => Stage::DefaultWords,
            Stage::ReplacePattern => Stage::ReplaceDelimiter,
            Stage::SubstringLength
            | Stage::ReplaceString
            | Stage::TrimPattern
            | Stage::AfterSubstringOffset
            | Stage::ReplaceDelimiter
            | Stage::Close => Stage::Close,
        };
    }

    /// The value of a variable, `None` when it is missing (in strict mode that is an error
    /// unless `tolerates_missing`; the error is recorded and evaluation stops).
    fn lookup(
        &mut self,
        start: usize,
        name_start: usize,
        name_end: usize,
        tolerates_missing: bool,
    ) -> Option<Cow<'v, str>> {
        let template: &'t str = self.template;
        let name = template.get(name_start..name_end).unwrap_or_default();
        let value = self.cached_lookup(name);
        if value.is_none() {
            if self.mode == Mode::Strict && !tolerates_missing {
                self.eval_error = Some(parse_error(
                    SubstitutionErrorKind::VariableNotSet(name.to_owned()),
                    start,
                ));
                return None;
            }
            if !tolerates_missing && let Some(undefined) = self.undefined.as_mut() {
                undefined.push(UndefinedVariable {
                    name: name.to_owned(),
                    offset: start,
                });
            }
        }
        Some(value.unwrap_or(Cow::Borrowed("")))
    }

    fn cached_lookup(&mut self, name: &'t str) -> Option<Cow<'v, str>> {
        let vars = self.vars;
        if self.lookup_cache.is_empty() {
            self.lookup_cache.resize_with(LOOKUP_CACHE_SLOTS, || None);
        }
        let slot = &mut self.lookup_cache[name_slot(name.as_bytes())];
        match slot {
            Some(cached) if cached.name == name.as_bytes() => cached.value.clone(),
            _ => {
                let value = vars.lookup(name);
                *slot = Some(CachedLookup {
                    name: name.as_bytes(),
                    value: value.clone(),
                });
                value
            }
        }
    }

    /// Where a finished value goes: the output at top level, else the enclosing argument.
    fn deliver(&mut self, value: &[u8]) {
        if self.open.is_empty() {
            self.out.extend_from_slice(value);
        } else {
            self.arg_bytes.extend_from_slice(value);
            self.finish_argument();
        }
    }

    /// An expression without arguments, complete at its `}`.
    fn immediate(&mut self, start: usize, name_start: usize, name_end: usize, kind: Immediate) {
        let top_level = self.open.is_empty();
        if self.eval_error.is_none()
            && let Some(value) = self.lookup(start, name_start, name_end, false)
        {
            let value = value.as_bytes();
            let sink = if top_level {
                &mut self.out
            } else {
                &mut self.arg_bytes
            };
            match kind {
                Immediate::Value => sink.extend_from_slice(value),
                Immediate::Length => sink.extend_from_slice(value.len().to_string().as_bytes()),
                Immediate::Upper => map_runes(value, simple_upper, sink),
                Immediate::Lower => map_runes(value, simple_lower, sink),
                Immediate::UpperFirst => map_first_rune(value, simple_upper, sink),
                Immediate::LowerFirst => map_first_rune(value, simple_lower, sink),
            }
        }
        if !top_level {
            self.finish_argument();
        }
    }

    /// The `}` of the innermost open expression was consumed: evaluate it.
    fn close_expression(&mut self) {
        let Some(expression) = self.open.pop() else {
            return;
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let tolerates_missing = expression.operator == Operator::Default;
        if self.eval_error.is_none()
            && let Some(value) = self.lookup(
                expression.start,
                expression.name_start,
                expression.name_end,
                tolerates_missing,
            )
            && let Err(err) = self.apply(&expression, value.as_bytes(), &mut scratch)
        {
            self.eval_error = Some(err);
        }
        self.arg_bytes.truncate(expression.arg_bytes_base);
        self.arg_ends.truncate(expression.arg_ends_base);
        self.deliver(&scratch);
        self.scratch = scratch;
    }

    fn argument_slice(&self, expression: &OpenExpression, index: usize) -> Option<&[u8]> {
        let slot = expression.arg_ends_base + index;
        let end = *self.arg_ends.get(slot)?;
        let begin = if index == 0 {
            expression.arg_bytes_base
        } else {
            self.arg_ends[slot - 1]
        };
        self.arg_bytes.get(begin..end)
    }

    fn apply(
        &self,
        expression: &OpenExpression,
        value: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let first = self.argument_slice(expression, 0);
        let second = self.argument_slice(expression, 1);
        match expression.operator {
            Operator::Default => {
                let has_words = self.arg_ends.len() > expression.arg_ends_base;
                if value.is_empty() && has_words {
                    out.extend_from_slice(&self.arg_bytes[expression.arg_bytes_base..]);
                } else {
                    out.extend_from_slice(value);
                }
            }
            Operator::Substring => {
                let offset = first.unwrap_or_default();
                match functions::substring(value, offset, second) {
                    Ok(part) => out.extend_from_slice(part),
                    Err(range) => {
                        return Err(parse_error(
                            SubstitutionErrorKind::NegativeSubstringLength(range.to_string()),
                            expression.start,
                        ));
                    }
                }
            }
            Operator::Trim(kind) => match first {
                Some(pattern) => functions::trim(value, pattern, kind, out),
                None => out.extend_from_slice(value),
            },
            Operator::Replace(kind) => {
                let pattern = first.unwrap_or_default();
                match (kind, second) {
                    (Replace::First | Replace::All, _) => {
                        let with = second.unwrap_or_default();
                        functions::replace(value, pattern, with, kind == Replace::First, out);
                    }
                    (Replace::Prefix, Some(with)) => {
                        functions::replace_prefix(value, pattern, with, out)
                    }
                    (Replace::Suffix, Some(with)) => {
                        functions::replace_suffix(value, pattern, with, out)
                    }
                    // `/#` and `/%` with an empty replacement leave the value unchanged upstream.
                    (Replace::Prefix | Replace::Suffix, None) => out.extend_from_slice(value),
                }
            }
        }
        Ok(())
    }
}

/// Expressions that take no argument.
#[derive(Debug, Clone, Copy)]
enum Immediate {
    Value,
    Length,
    Upper,
    Lower,
    UpperFirst,
    LowerFirst,
}
