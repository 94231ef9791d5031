//! Byte-level text helpers that reproduce Go's view of strings: a Go string is a byte sequence,
//! decoded rune by rune with invalid bytes read as U+FFFD of width 1, and Go's `unicode` package
//! uses simple (one-to-one) case mapping. Every function here is total: no input panics.

use std::sync::LazyLock;

use regex::Regex;

/// Decodes the rune starting at `bytes[pos]` the way Go's `utf8.DecodeRune` does: a valid UTF-8
/// sequence gives its char and width; anything else gives `(U+FFFD, 1)`. `None` at the end.
pub(crate) fn decode_rune(bytes: &[u8], pos: usize) -> Option<(char, usize)> {
    let first = *bytes.get(pos)?;
    if first < 0x80 {
        return Some((char::from(first), 1));
    }
    let width = match first {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return Some((char::REPLACEMENT_CHARACTER, 1)),
    };
    let candidate = bytes.get(pos..pos + width);
    match candidate.and_then(|slice| std::str::from_utf8(slice).ok()) {
        Some(text) => text
            .chars()
            .next()
            .map(|c| (c, width))
            .or(Some((char::REPLACEMENT_CHARACTER, 1))),
        None => Some((char::REPLACEMENT_CHARACTER, 1)),
    }
}

/// Converts bytes to a `String` the way Go's `encoding/json` prints a Go string: valid UTF-8 is
/// kept, every byte of an invalid sequence becomes one U+FFFD. Only byte-offset substrings
/// (`${v:1:1}` on a multi-byte value) can produce such bytes.
pub(crate) fn into_string_go_lossy(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let bytes = err.into_bytes();
            let mut text = String::with_capacity(bytes.len() + 8);
            let mut pos = 0;
            while let Some((c, width)) = decode_rune(&bytes, pos) {
                text.push(c);
                pos += width;
            }
            text
        }
    }
}

/// Appends `c` UTF-8 encoded.
pub(crate) fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// Go's `unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_'`: general category L or Nd.
pub(crate) fn is_ident_char(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    static LETTER_OR_DIGIT: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^[\p{L}\p{Nd}]$").ok());
    let mut buf = [0u8; 4];
    // The pattern is a constant that compiles; `None` would only mean a broken regex build, in
    // which case no non-ASCII name parses (a conservative, non-panicking fallback).
    LETTER_OR_DIGIT
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut buf)))
}

/// Go's `unicode.ToUpper`: the simple (one-to-one) uppercase mapping.
pub(crate) fn simple_upper(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    let mut full = c.to_uppercase();
    match (full.next(), full.next()) {
        (Some(single), None) => single,
        // Characters whose full mapping expands (SpecialCasing.txt). Only the Greek letters with
        // ypogegrammeni have a different simple mapping (to their titlecase form); all others
        // (ß, ŉ, ǰ, ligatures, …) map to themselves in UnicodeData.txt.
        _ => match u32::from(c) {
            0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => {
                char::from_u32(u32::from(c) + 8).unwrap_or(c)
            }
            0x1FB3 => '\u{1FBC}',
            0x1FC3 => '\u{1FCC}',
            0x1FF3 => '\u{1FFC}',
            _ => c,
        },
    }
}

/// Go's `unicode.ToLower`: the simple (one-to-one) lowercase mapping.
pub(crate) fn simple_lower(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut full = c.to_lowercase();
    match (full.next(), full.next()) {
        (Some(single), None) => single,
        // Only U+0130 (İ) expands when lowercased; its simple mapping is `i`.
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// Go's `strings.ToUpper` / `strings.ToLower` on a string: maps every rune, invalid bytes become
/// U+FFFD.
pub(crate) fn map_runes(value: &[u8], map: fn(char) -> char, out: &mut Vec<u8>) {
    if value.is_ascii() {
        out.extend(
            value
                .iter()
                .map(|&b| u8::try_from(u32::from(map(char::from(b)))).unwrap_or(b)),
        );
        return;
    }
    let mut pos = 0;
    while let Some((c, width)) = decode_rune(value, pos) {
        push_char(out, map(c));
        pos += width;
    }
}

/// Go's `string(f(firstRune)) + s[n:]`.
pub(crate) fn map_first_rune(value: &[u8], map: fn(char) -> char, out: &mut Vec<u8>) {
    if let Some((c, width)) = decode_rune(value, 0) {
        push_char(out, map(c));
        out.extend_from_slice(&value[width..]);
    }
}

/// Go's `string([]rune(s))` reversed: runes in reverse order, invalid bytes as U+FFFD.
pub(crate) fn reverse_runes(value: &[u8]) -> Vec<u8> {
    let mut runes = Vec::with_capacity(value.len());
    let mut pos = 0;
    while let Some((c, width)) = decode_rune(value, pos) {
        runes.push(c);
        pos += width;
    }
    let mut out = Vec::with_capacity(value.len() + 4);
    for &c in runes.iter().rev() {
        push_char(&mut out, c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_matches_go() {
        assert_eq!(decode_rune(b"a", 0), Some(('a', 1)));
        assert_eq!(decode_rune("é".as_bytes(), 0), Some(('é', 2)));
        assert_eq!(decode_rune(&[0xC3], 0), Some(('\u{FFFD}', 1)));
        assert_eq!(decode_rune(&[0xED, 0xA0, 0x80], 0), Some(('\u{FFFD}', 1)));
        assert_eq!(decode_rune(b"", 0), None);
    }

    #[test]
    fn lossy_is_per_byte() {
        assert_eq!(
            into_string_go_lossy(vec![b'h', 0xE2, 0x82]),
            "h\u{FFFD}\u{FFFD}"
        );
    }

    #[test]
    fn simple_case_mapping() {
        assert_eq!(simple_upper('ß'), 'ß');
        assert_eq!(simple_upper('é'), 'É');
        assert_eq!(simple_upper('\u{1F80}'), '\u{1F88}');
        assert_eq!(simple_lower('\u{130}'), 'i');
        assert_eq!(simple_lower('Σ'), 'σ');
        assert!(is_ident_char('é'));
        assert!(is_ident_char('٣'));
        assert!(!is_ident_char('\u{2160}'));
    }
}
