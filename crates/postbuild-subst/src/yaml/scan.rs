//! Scalar text rules of go-yaml's scanner (`scannerc.go`), shared by the parser's scanner and
//! the emitter's JSON reader, which reads JSON strings as YAML double-quoted scalars.

/// A YAML line break: CR, LF, NEL, LS or PS (`is_break`).
#[inline]
pub(crate) fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// What a double-quoted escape `\c` stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Escape {
    /// A fixed character (`\n`, `\t`, `\N`, `\_`, ...).
    Char(char),
    /// A code point in this many hex digits (`\x`, `\u`, `\U`).
    Hex(usize),
}

/// The escape introduced by `\c`, or `None` for an unknown escape character.
pub(crate) fn escape(c: char) -> Option<Escape> {
    Some(match c {
        '0' => Escape::Char('\0'),
        'a' => Escape::Char('\u{07}'),
        'b' => Escape::Char('\u{08}'),
        // A raw tab after the backslash is accepted too, as libyaml does.
        't' | '\t' => Escape::Char('\t'),
        'n' => Escape::Char('\n'),
        'v' => Escape::Char('\u{0B}'),
        'f' => Escape::Char('\u{0C}'),
        'r' => Escape::Char('\r'),
        'e' => Escape::Char('\u{1B}'),
        ' ' => Escape::Char(' '),
        '"' => Escape::Char('"'),
        '\'' => Escape::Char('\''),
        '\\' => Escape::Char('\\'),
        'N' => Escape::Char('\u{85}'),
        '_' => Escape::Char('\u{A0}'),
        'L' => Escape::Char('\u{2028}'),
        'P' => Escape::Char('\u{2029}'),
        'x' => Escape::Hex(2),
        'u' => Escape::Hex(4),
        'U' => Escape::Hex(8),
        _ => return None,
    })
}

/// Appends the gap between two runs of a flow or plain scalar to `out` and empties the buffers
/// it used. Without a line break (`leading_blanks` false) the blanks stay as they are; otherwise
/// a single line break folds to a space and further breaks are kept, while a first break that
/// is LS or PS is kept with the rest.
pub(crate) fn join_gap(
    out: &mut String,
    leading_blanks: bool,
    leading_break: &mut String,
    trailing_breaks: &mut String,
    whitespaces: &mut String,
) {
    if leading_blanks {
        if leading_break.starts_with('\n') {
            if trailing_breaks.is_empty() {
                out.push(' ');
            } else {
                out.push_str(trailing_breaks);
            }
        } else {
            out.push_str(leading_break);
            out.push_str(trailing_breaks);
        }
        leading_break.clear();
        trailing_breaks.clear();
    } else {
        out.push_str(whitespaces);
        whitespaces.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding() {
        let join = |blanks: bool, lead: &str, trail: &str, ws: &str| {
            let mut out = String::from("a");
            let (mut l, mut t, mut w) = (lead.to_string(), trail.to_string(), ws.to_string());
            join_gap(&mut out, blanks, &mut l, &mut t, &mut w);
            assert!(l.is_empty() && t.is_empty() && (blanks || w.is_empty()));
            out
        };
        assert_eq!(join(false, "", "", " \t"), "a \t");
        assert_eq!(join(true, "\n", "", ""), "a ");
        assert_eq!(join(true, "\n", "\n\n", ""), "a\n\n");
        assert_eq!(join(true, "\u{2028}", "\n", ""), "a\u{2028}\n");
    }

    #[test]
    fn escapes() {
        assert_eq!(escape('N'), Some(Escape::Char('\u{85}')));
        assert_eq!(escape('u'), Some(Escape::Hex(4)));
        assert_eq!(escape('q'), None);
    }
}
