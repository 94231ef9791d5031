//! The go-yaml v2 event parser (`parserc.go`): tokens in, events out.

use super::scanner::{ErrorKind, Mark, ScalarStyle, ScanResult, Scanner, SyntaxError, TokenKind};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EventKind {
    StreamStart,
    StreamEnd,
    DocumentStart,
    DocumentEnd,
    Alias {
        anchor: String,
    },
    Scalar {
        anchor: Option<String>,
        tag: String,
        value: String,
        /// `plain_implicit`: plain without a tag, or tagged `!`.
        implicit: bool,
    },
    SequenceStart {
        anchor: Option<String>,
    },
    SequenceEnd,
    MappingStart {
        anchor: Option<String>,
    },
    MappingEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    StreamStart,
    ImplicitDocumentStart,
    DocumentStart,
    DocumentContent,
    DocumentEnd,
    BlockNode,
    BlockSequenceFirstEntry,
    BlockSequenceEntry,
    IndentlessSequenceEntry,
    BlockMappingFirstKey,
    BlockMappingKey,
    BlockMappingValue,
    FlowSequenceFirstEntry,
    FlowSequenceEntry,
    FlowSequenceEntryMappingKey,
    FlowSequenceEntryMappingValue,
    FlowSequenceEntryMappingEnd,
    FlowMappingFirstKey,
    FlowMappingKey,
    FlowMappingValue,
    FlowMappingEmptyValue,
    End,
}

/// The event parser.
pub(crate) struct Parser {
    scanner: Scanner,
    state: State,
    states: Vec<State>,
    marks: Vec<Mark>,
    tag_directives: Vec<(String, String)>,
}

fn parser_error<T>(problem: &str, problem_mark: Mark) -> ScanResult<T> {
    Err(SyntaxError {
        kind: ErrorKind::Parser,
        problem: problem.to_string(),
        problem_mark,
        context_mark: Mark::default(),
    })
}

fn parser_error_context<T>(context_mark: Mark, problem: &str, problem_mark: Mark) -> ScanResult<T> {
    Err(SyntaxError {
        kind: ErrorKind::Parser,
        problem: problem.to_string(),
        problem_mark,
        context_mark,
    })
}

impl Parser {
    /// A parser over `text`.
    pub fn new(text: &str) -> Self {
        Parser {
            scanner: Scanner::new(text),
            state: State::StreamStart,
            states: Vec::new(),
            marks: Vec::new(),
            tag_directives: Vec::new(),
        }
    }

    fn pop_state(&mut self) {
        self.state = self.states.pop().unwrap_or(State::End);
    }

    fn pop_mark(&mut self) -> Mark {
        self.marks.pop().unwrap_or_default()
    }

    /// The next event. After STREAM-END (or the end state) it keeps returning STREAM-END.
    pub fn next_event(&mut self) -> ScanResult<EventKind> {
        if self.scanner.stream_ended() || self.state == State::End {
            return Ok(EventKind::StreamEnd);
        }
        match self.state {
            State::StreamStart => self.parse_stream_start(),
            State::ImplicitDocumentStart => self.parse_document_start(true),
            State::DocumentStart => self.parse_document_start(false),
            State::DocumentContent => self.parse_document_content(),
            State::DocumentEnd => self.parse_document_end(),
            State::BlockNode => self.parse_node(true, false),
            State::BlockSequenceFirstEntry => self.parse_block_sequence_entry(true),
            State::BlockSequenceEntry => self.parse_block_sequence_entry(false),
            State::IndentlessSequenceEntry => self.parse_indentless_sequence_entry(),
            State::BlockMappingFirstKey => self.parse_block_mapping_key(true),
            State::BlockMappingKey => self.parse_block_mapping_key(false),
            State::BlockMappingValue => self.parse_block_mapping_value(),
            State::FlowSequenceFirstEntry => self.parse_flow_sequence_entry(true),
            State::FlowSequenceEntry => self.parse_flow_sequence_entry(false),
            State::FlowSequenceEntryMappingKey => self.parse_flow_sequence_entry_mapping_key(),
            State::FlowSequenceEntryMappingValue => self.parse_flow_sequence_entry_mapping_value(),
            State::FlowSequenceEntryMappingEnd => {
                self.scanner.peek()?;
                self.state = State::FlowSequenceEntry;
                Ok(EventKind::MappingEnd)
            }
            State::FlowMappingFirstKey => self.parse_flow_mapping_key(true),
            State::FlowMappingKey => self.parse_flow_mapping_key(false),
            State::FlowMappingValue => self.parse_flow_mapping_value(false),
            State::FlowMappingEmptyValue => self.parse_flow_mapping_value(true),
            State::End => Ok(EventKind::StreamEnd),
        }
    }

    fn peek_kind(&mut self) -> ScanResult<TokenKind> {
        Ok(self.scanner.peek()?.kind.clone())
    }

    fn peek_marks(&mut self) -> ScanResult<(TokenKind, Mark, Mark)> {
        let t = self.scanner.peek()?;
        Ok((t.kind.clone(), t.start, t.end))
    }

    fn parse_stream_start(&mut self) -> ScanResult<EventKind> {
        let (kind, start, _) = self.peek_marks()?;
        if kind != TokenKind::StreamStart {
            return parser_error("did not find expected <stream-start>", start);
        }
        self.state = State::ImplicitDocumentStart;
        self.scanner.skip_token();
        Ok(EventKind::StreamStart)
    }

    fn parse_document_start(&mut self, implicit: bool) -> ScanResult<EventKind> {
        let mut kind = self.peek_kind()?;
        if !implicit {
            while kind == TokenKind::DocumentEnd {
                self.scanner.skip_token();
                kind = self.peek_kind()?;
            }
        }
        let is_directive = matches!(
            kind,
            TokenKind::VersionDirective { .. } | TokenKind::TagDirective { .. }
        );
        if implicit
            && !is_directive
            && kind != TokenKind::DocumentStart
            && kind != TokenKind::StreamEnd
        {
            self.process_directives()?;
            self.states.push(State::DocumentEnd);
            self.state = State::BlockNode;
            Ok(EventKind::DocumentStart)
        } else if kind != TokenKind::StreamEnd {
            self.process_directives()?;
            let (kind, start, _) = self.peek_marks()?;
            if kind != TokenKind::DocumentStart {
                return parser_error("did not find expected <document start>", start);
            }
            self.states.push(State::DocumentEnd);
            self.state = State::DocumentContent;
            self.scanner.skip_token();
            Ok(EventKind::DocumentStart)
        } else {
            self.state = State::End;
            self.scanner.skip_token();
            Ok(EventKind::StreamEnd)
        }
    }

    fn parse_document_content(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if matches!(
            kind,
            TokenKind::VersionDirective { .. }
                | TokenKind::TagDirective { .. }
                | TokenKind::DocumentStart
                | TokenKind::DocumentEnd
                | TokenKind::StreamEnd
        ) {
            self.pop_state();
            return Ok(empty_scalar());
        }
        self.parse_node(true, false)
    }

    fn parse_document_end(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if kind == TokenKind::DocumentEnd {
            self.scanner.skip_token();
        }
        self.tag_directives.clear();
        self.state = State::DocumentStart;
        Ok(EventKind::DocumentEnd)
    }

    fn parse_node(&mut self, block: bool, indentless_sequence: bool) -> ScanResult<EventKind> {
        let (mut kind, mut start_mark, _) = self.peek_marks()?;
        if let TokenKind::Alias(anchor) = kind {
            self.pop_state();
            self.scanner.skip_token();
            return Ok(EventKind::Alias { anchor });
        }
        let mut anchor: Option<String> = None;
        let mut tag_parts: Option<(String, String)> = None;
        let mut tag_mark = Mark::default();
        if let TokenKind::Anchor(a) = &kind {
            anchor = Some(a.clone());
            self.scanner.skip_token();
            kind = self.peek_kind()?;
            if let TokenKind::Tag { handle, suffix } = &kind {
                tag_parts = Some((handle.clone(), suffix.clone()));
                tag_mark = self.scanner.peek()?.start;
                self.scanner.skip_token();
                kind = self.peek_kind()?;
            }
        } else if let TokenKind::Tag { handle, suffix } = &kind {
            tag_parts = Some((handle.clone(), suffix.clone()));
            tag_mark = start_mark;
            self.scanner.skip_token();
            kind = self.peek_kind()?;
            if let TokenKind::Anchor(a) = &kind {
                anchor = Some(a.clone());
                self.scanner.skip_token();
                kind = self.peek_kind()?;
            }
        }
        let mut tag = String::new();
        if let Some((handle, suffix)) = tag_parts {
            if handle.is_empty() {
                tag = suffix;
            } else {
                match self.tag_directives.iter().find(|(h, _)| *h == handle) {
                    Some((_, prefix)) => tag = format!("{prefix}{suffix}"),
                    None => {
                        return parser_error_context(
                            start_mark,
                            "found undefined tag handle",
                            tag_mark,
                        );
                    }
                }
                if tag.is_empty() {
                    return parser_error_context(
                        start_mark,
                        "found undefined tag handle",
                        tag_mark,
                    );
                }
            }
        }
        let token_start = self.scanner.peek()?.start;
        if anchor.is_none() && tag.is_empty() {
            start_mark = token_start;
        }
        if indentless_sequence && kind == TokenKind::BlockEntry {
            self.state = State::IndentlessSequenceEntry;
            return Ok(EventKind::SequenceStart { anchor });
        }
        if let TokenKind::Scalar { value, style } = kind {
            let implicit = (tag.is_empty() && style == ScalarStyle::Plain) || tag == "!";
            self.pop_state();
            self.scanner.skip_token();
            return Ok(EventKind::Scalar {
                anchor,
                tag,
                value,
                implicit,
            });
        }
        match kind {
            TokenKind::FlowSequenceStart => {
                self.state = State::FlowSequenceFirstEntry;
                return Ok(EventKind::SequenceStart { anchor });
            }
            TokenKind::FlowMappingStart => {
                self.state = State::FlowMappingFirstKey;
                return Ok(EventKind::MappingStart { anchor });
            }
            TokenKind::BlockSequenceStart if block => {
                self.state = State::BlockSequenceFirstEntry;
                return Ok(EventKind::SequenceStart { anchor });
            }
            TokenKind::BlockMappingStart if block => {
                self.state = State::BlockMappingFirstKey;
                return Ok(EventKind::MappingStart { anchor });
            }
            _ => {}
        }
        if anchor.is_some() || !tag.is_empty() {
            self.pop_state();
            let implicit = tag.is_empty();
            return Ok(EventKind::Scalar {
                anchor,
                tag,
                value: String::new(),
                implicit,
            });
        }
        parser_error_context(
            start_mark,
            "did not find expected node content",
            token_start,
        )
    }

    fn parse_block_sequence_entry(&mut self, first: bool) -> ScanResult<EventKind> {
        if first {
            let start = self.scanner.peek()?.start;
            self.marks.push(start);
            self.scanner.skip_token();
        }
        let (kind, start, _) = self.peek_marks()?;
        if kind == TokenKind::BlockEntry {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if kind != TokenKind::BlockEntry && kind != TokenKind::BlockEnd {
                self.states.push(State::BlockSequenceEntry);
                return self.parse_node(true, false);
            }
            self.state = State::BlockSequenceEntry;
            return Ok(empty_scalar());
        }
        if kind == TokenKind::BlockEnd {
            self.pop_state();
            self.pop_mark();
            self.scanner.skip_token();
            return Ok(EventKind::SequenceEnd);
        }
        let context = self.pop_mark();
        parser_error_context(context, "did not find expected '-' indicator", start)
    }

    fn parse_indentless_sequence_entry(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if kind == TokenKind::BlockEntry {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if !matches!(
                kind,
                TokenKind::BlockEntry | TokenKind::Key | TokenKind::Value | TokenKind::BlockEnd
            ) {
                self.states.push(State::IndentlessSequenceEntry);
                return self.parse_node(true, false);
            }
            self.state = State::IndentlessSequenceEntry;
            return Ok(empty_scalar());
        }
        self.pop_state();
        Ok(EventKind::SequenceEnd)
    }

    fn parse_block_mapping_key(&mut self, first: bool) -> ScanResult<EventKind> {
        if first {
            let start = self.scanner.peek()?.start;
            self.marks.push(start);
            self.scanner.skip_token();
        }
        let (kind, start, _) = self.peek_marks()?;
        if kind == TokenKind::Key {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if !matches!(
                kind,
                TokenKind::Key | TokenKind::Value | TokenKind::BlockEnd
            ) {
                self.states.push(State::BlockMappingValue);
                return self.parse_node(true, true);
            }
            self.state = State::BlockMappingValue;
            return Ok(empty_scalar());
        }
        if kind == TokenKind::BlockEnd {
            self.pop_state();
            self.pop_mark();
            self.scanner.skip_token();
            return Ok(EventKind::MappingEnd);
        }
        let context = self.pop_mark();
        parser_error_context(context, "did not find expected key", start)
    }

    fn parse_block_mapping_value(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if kind == TokenKind::Value {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if !matches!(
                kind,
                TokenKind::Key | TokenKind::Value | TokenKind::BlockEnd
            ) {
                self.states.push(State::BlockMappingKey);
                return self.parse_node(true, true);
            }
        }
        self.state = State::BlockMappingKey;
        Ok(empty_scalar())
    }

    fn parse_flow_sequence_entry(&mut self, first: bool) -> ScanResult<EventKind> {
        if first {
            let start = self.scanner.peek()?.start;
            self.marks.push(start);
            self.scanner.skip_token();
        }
        let (mut kind, start, _) = self.peek_marks()?;
        if kind != TokenKind::FlowSequenceEnd {
            if !first {
                if kind == TokenKind::FlowEntry {
                    self.scanner.skip_token();
                    kind = self.peek_kind()?;
                } else {
                    let context = self.pop_mark();
                    return parser_error_context(
                        context,
                        "did not find expected ',' or ']'",
                        start,
                    );
                }
            }
            if kind == TokenKind::Key {
                self.state = State::FlowSequenceEntryMappingKey;
                self.scanner.skip_token();
                return Ok(EventKind::MappingStart { anchor: None });
            } else if kind != TokenKind::FlowSequenceEnd {
                self.states.push(State::FlowSequenceEntry);
                return self.parse_node(false, false);
            }
        }
        self.pop_state();
        self.pop_mark();
        self.scanner.skip_token();
        Ok(EventKind::SequenceEnd)
    }

    fn parse_flow_sequence_entry_mapping_key(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if !matches!(
            kind,
            TokenKind::Value | TokenKind::FlowEntry | TokenKind::FlowSequenceEnd
        ) {
            self.states.push(State::FlowSequenceEntryMappingValue);
            return self.parse_node(false, false);
        }
        // Upstream skips the token here even when it is ',' or ']' (a libyaml quirk).
        self.scanner.skip_token();
        self.state = State::FlowSequenceEntryMappingValue;
        Ok(empty_scalar())
    }

    fn parse_flow_sequence_entry_mapping_value(&mut self) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if kind == TokenKind::Value {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if kind != TokenKind::FlowEntry && kind != TokenKind::FlowSequenceEnd {
                self.states.push(State::FlowSequenceEntryMappingEnd);
                return self.parse_node(false, false);
            }
        }
        self.state = State::FlowSequenceEntryMappingEnd;
        Ok(empty_scalar())
    }

    fn parse_flow_mapping_key(&mut self, first: bool) -> ScanResult<EventKind> {
        if first {
            let start = self.scanner.peek()?.start;
            self.marks.push(start);
            self.scanner.skip_token();
        }
        let (mut kind, start, _) = self.peek_marks()?;
        if kind != TokenKind::FlowMappingEnd {
            if !first {
                if kind == TokenKind::FlowEntry {
                    self.scanner.skip_token();
                    kind = self.peek_kind()?;
                } else {
                    let context = self.pop_mark();
                    return parser_error_context(
                        context,
                        "did not find expected ',' or '}'",
                        start,
                    );
                }
            }
            if kind == TokenKind::Key {
                self.scanner.skip_token();
                let kind = self.peek_kind()?;
                if !matches!(
                    kind,
                    TokenKind::Value | TokenKind::FlowEntry | TokenKind::FlowMappingEnd
                ) {
                    self.states.push(State::FlowMappingValue);
                    return self.parse_node(false, false);
                }
                self.state = State::FlowMappingValue;
                return Ok(empty_scalar());
            } else if kind != TokenKind::FlowMappingEnd {
                self.states.push(State::FlowMappingEmptyValue);
                return self.parse_node(false, false);
            }
        }
        self.pop_state();
        self.pop_mark();
        self.scanner.skip_token();
        Ok(EventKind::MappingEnd)
    }

    fn parse_flow_mapping_value(&mut self, empty: bool) -> ScanResult<EventKind> {
        let kind = self.peek_kind()?;
        if empty {
            self.state = State::FlowMappingKey;
            return Ok(empty_scalar());
        }
        if kind == TokenKind::Value {
            self.scanner.skip_token();
            let kind = self.peek_kind()?;
            if kind != TokenKind::FlowEntry && kind != TokenKind::FlowMappingEnd {
                self.states.push(State::FlowMappingKey);
                return self.parse_node(false, false);
            }
        }
        self.state = State::FlowMappingKey;
        Ok(empty_scalar())
    }

    fn process_directives(&mut self) -> ScanResult<()> {
        let mut seen_version = false;
        loop {
            let (kind, start, _) = self.peek_marks()?;
            match kind {
                TokenKind::VersionDirective { major, minor } => {
                    if seen_version {
                        return parser_error("found duplicate %YAML directive", start);
                    }
                    if major != 1 || minor != 1 {
                        return parser_error("found incompatible YAML document", start);
                    }
                    seen_version = true;
                }
                TokenKind::TagDirective { handle, prefix } => {
                    if self.tag_directives.iter().any(|(h, _)| *h == handle) {
                        return parser_error("found duplicate %TAG directive", start);
                    }
                    self.tag_directives.push((handle, prefix));
                }
                _ => break,
            }
            self.scanner.skip_token();
        }
        for (handle, prefix) in [("!", "!"), ("!!", "tag:yaml.org,2002:")] {
            if !self.tag_directives.iter().any(|(h, _)| h == handle) {
                self.tag_directives
                    .push((handle.to_string(), prefix.to_string()));
            }
        }
        Ok(())
    }
}

fn empty_scalar() -> EventKind {
    EventKind::Scalar {
        anchor: None,
        tag: String::new(),
        value: String::new(),
        implicit: true,
    }
}
