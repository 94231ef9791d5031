//! go-yaml v2 `resolve.go` as the decoder uses it: explicit tags and their checks on top of
//! the shared implicit typing ([`crate::yaml::resolve`]), and `!!binary` decoding.

use crate::yaml::resolve::{
    self, BOOL_TAG, FLOAT_TAG, INT_TAG, NULL_TAG, Resolved, STR_TAG, TIMESTAMP_TAG,
};

/// `!!binary`: base64 text, decoded to bytes.
pub(crate) const BINARY_TAG: &str = "tag:yaml.org,2002:binary";
/// `!!merge`: the `<<` key of a merge.
pub(crate) const MERGE_TAG: &str = "tag:yaml.org,2002:merge";

/// The prefix `!!` stands for.
const LONG_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// `shortTag`: `tag:yaml.org,2002:int` becomes `!!int`.
pub(crate) fn short_tag(tag: &str) -> String {
    match tag.strip_prefix(LONG_TAG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_string(),
    }
}

/// `resolvableTag`: the tags `resolve` checks the text against; others keep the text.
fn resolvable(tag: &str) -> bool {
    matches!(
        tag,
        "" | STR_TAG | BOOL_TAG | INT_TAG | FLOAT_TAG | NULL_TAG | TIMESTAMP_TAG
    )
}

/// `resolve(tag, in)`: the resolved tag and value, or the `cannot decode` error message.
///
/// [`Resolved::Str`] and [`Resolved::Timestamp`] mean the input text itself, as do unknown tags
/// and `!!binary` (decoded by the caller).
pub(crate) fn resolve(tag: &str, input: &str) -> Result<(String, Resolved), String> {
    if !resolvable(tag) {
        return Ok((tag.to_string(), Resolved::Str));
    }
    let out = resolve_implicit(tag, input);
    let rtag = out.tag();
    if tag.is_empty() || tag == rtag || tag == STR_TAG || tag == BINARY_TAG {
        return Ok((rtag.to_string(), out));
    }
    if tag == FLOAT_TAG && rtag == INT_TAG {
        // Only Go `int`/`int64` results convert; a uint64 falls through to the error.
        if let Resolved::Int(i) = out {
            return Ok((FLOAT_TAG.to_string(), Resolved::Float(i as f64)));
        }
    }
    Err(format!(
        "yaml: cannot decode {} `{}` as a {}",
        short_tag(rtag),
        input,
        short_tag(tag)
    ))
}

/// `resolve`'s implicit typing under `tag`: `!!str` and `!!binary` take any text as it is,
/// other tags see what the text would resolve to (timestamps only when untagged or
/// `!!timestamp`), so that a mismatch can be reported.
fn resolve_implicit(tag: &str, input: &str) -> Resolved {
    if tag == STR_TAG || tag == BINARY_TAG {
        return Resolved::Str;
    }
    resolve::resolve_implicit(input, tag.is_empty() || tag == TIMESTAMP_TAG)
}

/// Go `base64.StdEncoding.DecodeString`, which skips `\r` and `\n`.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let input: Vec<u8> = s.bytes().filter(|&c| c != b'\r' && c != b'\n').collect();
    if !input.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let chunks = input.len() / 4;
    for (n, q) in input.chunks(4).enumerate() {
        let last = n + 1 == chunks;
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut acc = 0u32;
        for &c in &q[..4 - pad] {
            acc = (acc << 6) | value(c)?;
        }
        match pad {
            0 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            1 => {
                acc <<= 6;
                out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8]);
            }
            _ => {
                acc <<= 12;
                out.push((acc >> 16) as u8);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(
            resolve(INT_TAG, "abc").unwrap_err(),
            "yaml: cannot decode !!str `abc` as a !!int"
        );
    }

    #[test]
    fn explicit_tags_see_the_implicit_type() {
        assert_eq!(
            resolve(INT_TAG, "2001-12-14").unwrap_err(),
            "yaml: cannot decode !!str `2001-12-14` as a !!int"
        );
        assert_eq!(
            resolve(TIMESTAMP_TAG, "2001-12-14T21:59:43+25:00").unwrap_err(),
            "yaml: cannot decode !!str `2001-12-14T21:59:43+25:00` as a !!timestamp"
        );
        assert_eq!(
            resolve(FLOAT_TAG, "12").unwrap(),
            (FLOAT_TAG.to_string(), Resolved::Float(12.0))
        );
        assert_eq!(
            resolve(STR_TAG, "12").unwrap(),
            (STR_TAG.to_string(), Resolved::Str)
        );
    }

    #[test]
    fn base64() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert!(decode_base64("not-base64!").is_none());
    }
}
