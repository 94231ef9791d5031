//! The lexer and recursive-descent parser of `labels.Parse` (apimachinery v0.32.3).
//!
//! The lexer works on bytes like Go's: byte 0 doubles as the end-of-input marker, so a NUL
//! either ends the selector (where a token may start) or is swallowed (right after an
//! identifier or an operator). Tokens are slices of the input, which stays valid UTF-8 because
//! every token boundary is an ASCII byte.

use std::collections::BTreeSet;

use super::{Operator, Requirement};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn special_token(ch: u8) -> Tok {
    match ch {
        b'=' => Tok::Equals,
        b'!' => Tok::DoesNotExist,
        b'(' => Tok::OpenPar,
        b')' => Tok::ClosedPar,
        b',' => Tok::Comma,
        b'>' => Tok::GreaterThan,
        // Only called for special bytes; '<' is the last one.
        _ => Tok::LessThan,
    }
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    /// Go's `read`: the next byte, or 0 at the end (without moving).
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn lex(&mut self) -> (Tok, &'a str) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Tok::End, "");
        }
        // Unread: the scanners start at this byte.
        self.pos -= 1;
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_id_or_keyword()
        }
    }

    fn scan_id_or_keyword(&mut self) -> (Tok, &'a str) {
        let start = self.pos;
        let end = loop {
            let at = self.pos;
            let ch = self.read();
            if ch == 0 {
                // A NUL is consumed; at the real end nothing moved.
                break at;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.pos -= 1;
                break at;
            }
        };
        let lit = &self.s[start..end];
        let tok = match lit {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Identifier,
        };
        (tok, lit)
    }

    /// Longest match over the operator table: only `==` and `!=` have two bytes. Like Go, a NUL
    /// read while looking for a longer operator is consumed.
    fn scan_special(&mut self) -> (Tok, &'a str) {
        let start = self.pos;
        let first = self.read();
        let mut tok = special_token(first);
        let mut len = 1;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.pos -= 1;
                break;
            }
            let two = match (len, first, ch) {
                (1, b'=', b'=') => Some(Tok::DoubleEquals),
                (1, b'!', b'=') => Some(Tok::NotEquals),
                _ => None,
            };
            match two {
                Some(t) => {
                    tok = t;
                    len = 2;
                }
                None => {
                    self.pos -= 1;
                    break;
                }
            }
        }
        (tok, &self.s[start..start + len])
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    items: Vec<(Tok, &'a str)>,
    position: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        let mut lexer = Lexer { s: input, pos: 0 };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            items.push(item);
            if item.0 == Tok::End {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, ctx: Context) -> (Tok, &'a str) {
        // The parser never reads past the final End item: every path that meets End stops.
        let (tok, lit) = self.items.get(index).copied().unwrap_or((Tok::End, ""));
        match (ctx, tok) {
            (Context::Values, Tok::In | Tok::NotIn) => (Tok::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Context) -> (Tok, &'a str) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Tok, &'a str) {
        self.position += 1;
        self.item(self.position - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Tok::End => return Ok(requirements),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!("found '{l}', expected: ',' or 'end of string'"));
                        }
                    }
                }
                Tok::End => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return Requirement::new(key.to_owned(), op, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        // sets.String.List(): sorted by bytes, deduplicated.
        Requirement::new(
            key.to_owned(),
            operator,
            values.into_iter().map(str::to_owned).collect(),
        )
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(&'a str, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut literal) = self.consume(Context::Values);
        if tok == Tok::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, literal) = self.consume(Context::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errs = super::validation::is_qualified_name(literal);
        if !errs.is_empty() {
            // The parser's field path is nil, which Go prints as `<nil>`.
            return Err(super::validation::invalid(
                "<nil>",
                literal,
                &errs.join("; "),
            ));
        }
        let (next, _) = self.lookahead(Context::Values);
        if (next == Tok::End || next == Tok::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                // parse_identifiers_list only succeeds with ')' next.
                if self.consume(Context::Values).0 != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([""]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Tok::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Tok::Comma => {}
                        Tok::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    // "(," and ",)" and ",," each stand for the empty value.
                    if set.is_empty() {
                        set.insert("");
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Tok::ClosedPar {
                        set.insert("");
                        return Ok(set);
                    }
                    if tok2 == Tok::Comma {
                        self.consume(Context::Values);
                        set.insert("");
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Tok::End || tok == Tok::Comma {
            return Ok(BTreeSet::from([""]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Tok::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `labels.Parse` up to (not including) the sort by key.
pub(super) fn parse(input: &str) -> Result<Vec<Requirement>, String> {
    Parser::new(input).parse()
}
