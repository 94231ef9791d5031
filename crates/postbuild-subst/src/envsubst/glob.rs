//! The glob matcher behind `#`, `##`, `%` and `%%`: drone/envsubst's fork of Go's `path.Match`
//! (as of Go 1.8), where `*` and `?` also match `/`. Reproduced behaviour, including its quirks:
//! `*` skips bytes (not runes), `?` and classes consume one rune, and a malformed pattern is
//! reported only when matching reaches the malformed part with input left to match.

use super::text::decode_rune;

/// The pattern is malformed (Go's `path.ErrBadPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadPattern;

/// Whether `name` matches the whole `pattern`.
pub(crate) fn matches(mut pattern: &[u8], mut name: &[u8]) -> Result<bool, BadPattern> {
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = split_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches everything that is left (the fork drops Go's `/` rule).
            return Ok(true);
        }
        let at_start = match_chunk(chunk, name);
        if let Ok(Some(remaining)) = at_start
            && (remaining.is_empty() || !pattern.is_empty())
        {
            name = remaining;
            continue;
        }
        at_start?;
        if star {
            for skip in 0..name.len() {
                match match_chunk(chunk, &name[skip + 1..])? {
                    Some(remaining) if pattern.is_empty() && !remaining.is_empty() => continue,
                    Some(remaining) => {
                        name = remaining;
                        continue 'chunks;
                    }
                    None => {}
                }
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off the next chunk: leading stars, then everything up to the next star outside `[…]`.
fn split_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while let [b'*', rest @ ..] = pattern {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut index = 0;
    while index < pattern.len() {
        match pattern[index] {
            b'\\' if index + 1 < pattern.len() => index += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        index += 1;
    }
    (star, &pattern[..index], &pattern[index..])
}

/// Matches one star-free chunk at the start of `text`; `Some(rest)` on success.
fn match_chunk<'t>(mut chunk: &[u8], mut text: &'t [u8]) -> Result<Option<&'t [u8]>, BadPattern> {
    while let Some(&head) = chunk.first() {
        if text.is_empty() {
            return Ok(None);
        }
        match head {
            b'[' => {
                let (rune, width) = decode_rune(text, 0).unwrap_or(('\u{FFFD}', 1));
                text = &text[width..];
                chunk = &chunk[1..];
                let mut negated = false;
                if let [b'^', rest @ ..] = chunk {
                    negated = true;
                    chunk = rest;
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if ranges > 0
                        && let [b']', rest @ ..] = chunk
                    {
                        chunk = rest;
                        break;
                    }
                    let (low, rest) = class_char(chunk)?;
                    chunk = rest;
                    let mut high = low;
                    if let [b'-', rest @ ..] = chunk {
                        let (upper, rest) = class_char(rest)?;
                        high = upper;
                        chunk = rest;
                    }
                    if low <= rune && rune <= high {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    return Ok(None);
                }
            }
            b'?' => {
                let width = decode_rune(text, 0).map_or(1, |(_, width)| width);
                text = &text[width..];
                chunk = &chunk[1..];
            }
            _ => {
                if head == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(BadPattern);
                    }
                }
                if chunk[0] != text[0] {
                    return Ok(None);
                }
                text = &text[1..];
                chunk = &chunk[1..];
            }
        }
    }
    Ok(Some(text))
}

/// Reads one possibly escaped character of a class; the rest of the chunk must not be empty.
fn class_char(chunk: &[u8]) -> Result<(char, &[u8]), BadPattern> {
    let chunk = match chunk {
        [] | [b'-', ..] | [b']', ..] => return Err(BadPattern),
        [b'\\', rest @ ..] => rest,
        _ => chunk,
    };
    let (c, width) = decode_rune(chunk, 0).ok_or(BadPattern)?;
    let invalid = c == '\u{FFFD}' && width == 1;
    let rest = &chunk[width..];
    if invalid || rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_basics() {
        assert_eq!(matches(b"*.", b"bash."), Ok(true));
        assert_eq!(matches(b"*/", b"path/to/"), Ok(true));
        assert_eq!(matches(b"[a-z]*.", b"bash."), Ok(true));
        assert_eq!(matches(b"?", b"a"), Ok(true));
        assert_eq!(matches(b"\\a", b"a"), Ok(true));
        assert_eq!(matches(b"t]z-a[", b"txt"), Ok(false));
        assert_eq!(matches(b"t]z-a[", b"t"), Ok(false));
        assert_eq!(matches(b"[", b"t"), Err(BadPattern));
        assert_eq!(matches(b"a", b""), Ok(false));
    }
}
