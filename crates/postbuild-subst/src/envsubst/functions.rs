//! The parameter expansion functions of fluxcd/pkg `envsubst` (`funcs.go`), on bytes, because Go
//! strings are bytes: lengths and offsets are byte counts.

use memchr::memmem;

use super::glob;
use super::text::{decode_rune, reverse_runes};

/// Go's `strconv.Atoi` (64-bit `int`): optional sign, ASCII digits, nothing else.
fn go_atoi(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse::<i64>().ok()
}

/// Go panicked on a negative substring length; the message Go's runtime would print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceOutOfRange {
    pub(crate) low: i64,
    pub(crate) high: i64,
}

impl std::fmt::Display for SliceOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.high < 0 {
            write!(f, "slice bounds out of range [:{}]", self.high)
        } else {
            write!(f, "slice bounds out of range [{}:{}]", self.low, self.high)
        }
    }
}

/// `${v:offset}` / `${v:offset:length}` (`toSubstr`). A non-numeric offset or length gives the
/// whole value; where Go would slice with `low > high` (a negative length) this is an error.
pub(crate) fn substring<'v>(
    value: &'v [u8],
    offset: &[u8],
    length: Option<&[u8]>,
) -> Result<&'v [u8], SliceOutOfRange> {
    let Some(mut pos) = go_atoi(offset) else {
        return Ok(value);
    };
    // A `Vec`/slice never exceeds `isize::MAX` bytes, so the length fits in an i64.
    let len = i64::try_from(value.len()).unwrap_or(i64::MAX);
    if pos < 0 {
        pos = (len + pos).max(0);
    }
    let rest = || {
        usize::try_from(pos)
            .ok()
            .and_then(|start| value.get(start..))
            .unwrap_or(&[])
    };
    let Some(length) = length else {
        return Ok(rest());
    };
    let Some(length) = go_atoi(length) else {
        return Ok(value);
    };
    // Go's `int` addition wraps; keep that, it decides which branch is taken.
    let end = pos.wrapping_add(length);
    if end >= len {
        return Ok(rest());
    }
    match (usize::try_from(pos), usize::try_from(end)) {
        (Ok(start), Ok(stop)) if start <= stop => Ok(&value[start..stop]),
        _ => Err(SliceOutOfRange {
            low: pos,
            high: end,
        }),
    }
}

/// Go's `strings.Replace(s, old, new, n)` with `n` = 1 (`first`) or -1.
pub(crate) fn replace(value: &[u8], old: &[u8], new: &[u8], first_only: bool, out: &mut Vec<u8>) {
    if old.is_empty() {
        // An empty pattern matches at the start and after every rune.
        out.extend_from_slice(new);
        if first_only {
            out.extend_from_slice(value);
            return;
        }
        let mut pos = 0;
        while let Some((_, width)) = decode_rune(value, pos) {
            out.extend_from_slice(&value[pos..pos + width]);
            out.extend_from_slice(new);
            pos += width;
        }
        return;
    }
    let mut copied = 0;
    while let Some(found) = find(&value[copied..], old) {
        out.extend_from_slice(&value[copied..copied + found]);
        out.extend_from_slice(new);
        copied += found + old.len();
        if first_only {
            break;
        }
    }
    out.extend_from_slice(&value[copied..]);
}

/// The first occurrence of a non-empty `needle`. Short haystacks (typical variable values) are
/// searched directly; building a `memmem` searcher only pays off on long ones.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if haystack.len() > 256 {
        return memmem::find(haystack, needle);
    }
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(offset) = memchr::memchr(first, &haystack[from..]) {
        let at = from + offset;
        if haystack[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `${v/#pattern/string}`: replace a literal prefix.
pub(crate) fn replace_prefix(value: &[u8], prefix: &[u8], new: &[u8], out: &mut Vec<u8>) {
    match value.strip_prefix(prefix) {
        Some(rest) => {
            out.extend_from_slice(new);
            out.extend_from_slice(rest);
        }
        None => out.extend_from_slice(value),
    }
}

/// `${v/%pattern/string}`: replace a literal suffix.
pub(crate) fn replace_suffix(value: &[u8], suffix: &[u8], new: &[u8], out: &mut Vec<u8>) {
    match value.strip_suffix(suffix) {
        Some(rest) => {
            out.extend_from_slice(rest);
            out.extend_from_slice(new);
        }
        None => out.extend_from_slice(value),
    }
}

fn is_literal_pattern(pattern: &[u8]) -> bool {
    !pattern
        .iter()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

/// The common glob shapes whose prefix matches can be found in linear time. For these the
/// upstream matcher (`path.Match` on every prefix, quadratic) provably answers the same:
/// `lit*` matches a prefix starting with `lit`, `*lit` one ending with it, `*lit*` one
/// containing it, `*` any. `lit` holds no `*`, `?`, `[` or a backslash, so no error is possible.
#[derive(Debug, Clone, Copy)]
enum SimpleGlob<'p> {
    Any,
    StartsWith(&'p [u8]),
    EndsWith(&'p [u8]),
    Contains(&'p [u8]),
}

fn simple_glob(pattern: &[u8]) -> Option<SimpleGlob<'_>> {
    let leading = pattern.iter().take_while(|&&b| b == b'*').count();
    let rest = &pattern[leading..];
    let trailing = rest.iter().rev().take_while(|&&b| b == b'*').count();
    let literal = &rest[..rest.len() - trailing];
    if !is_literal_pattern(literal) {
        return None;
    }
    match (leading > 0, trailing > 0, literal.is_empty()) {
        (_, _, true) if leading + trailing > 0 => Some(SimpleGlob::Any),
        (false, true, false) => Some(SimpleGlob::StartsWith(literal)),
        (true, false, false) => Some(SimpleGlob::EndsWith(literal)),
        (true, true, false) => Some(SimpleGlob::Contains(literal)),
        _ => None,
    }
}

/// Length of the shortest (or longest) non-empty prefix of `value` that `glob` matches.
fn simple_glob_prefix(value: &[u8], glob: SimpleGlob<'_>, longest: bool) -> Option<usize> {
    if value.is_empty() {
        return None;
    }
    match glob {
        SimpleGlob::Any => Some(if longest { value.len() } else { 1 }),
        SimpleGlob::StartsWith(literal) => {
            value
                .starts_with(literal)
                .then_some(if longest { value.len() } else { literal.len() })
        }
        SimpleGlob::EndsWith(literal) if longest => {
            memmem::rfind(value, literal).map(|at| at + literal.len())
        }
        SimpleGlob::EndsWith(literal) => memmem::find(value, literal).map(|at| at + literal.len()),
        SimpleGlob::Contains(literal) => {
            let first = memmem::find(value, literal)?;
            Some(if longest {
                value.len()
            } else {
                first + literal.len()
            })
        }
    }
}

/// `trimShortest`: remove the shortest non-empty prefix matching the glob. A malformed pattern
/// met while matching leaves the value unchanged.
fn trim_shortest(value: &[u8], pattern: &[u8]) -> Vec<u8> {
    if is_literal_pattern(pattern) {
        return match value.strip_prefix(pattern) {
            Some(rest) if !pattern.is_empty() => rest.to_vec(),
            _ => value.to_vec(),
        };
    }
    if let Some(glob) = simple_glob(pattern) {
        let cut = simple_glob_prefix(value, glob, false).unwrap_or(0);
        return value[cut..].to_vec();
    }
    let mut shortest = 0;
    for end in (1..=value.len()).rev() {
        match glob::matches(pattern, &value[..end]) {
            Err(glob::BadPattern) => return value.to_vec(),
            Ok(true) => shortest = end,
            Ok(false) => {}
        }
    }
    value[shortest..].to_vec()
}

/// `trimLongest`: remove the longest non-empty prefix matching the glob.
fn trim_longest(value: &[u8], pattern: &[u8]) -> Vec<u8> {
    if is_literal_pattern(pattern) {
        return trim_shortest(value, pattern);
    }
    if let Some(glob) = simple_glob(pattern) {
        let cut = simple_glob_prefix(value, glob, true).unwrap_or(0);
        return value[cut..].to_vec();
    }
    for end in (1..=value.len()).rev() {
        match glob::matches(pattern, &value[..end]) {
            Err(glob::BadPattern) => break,
            Ok(true) => return value[end..].to_vec(),
            Ok(false) => {}
        }
    }
    value.to_vec()
}

/// Which of the four glob trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trim {
    /// `#`
    ShortestPrefix,
    /// `##`
    LongestPrefix,
    /// `%`
    ShortestSuffix,
    /// `%%`
    LongestSuffix,
}

/// Applies a trim. Suffix forms reverse value and pattern (by runes) and trim a prefix, exactly
/// as upstream, so a character class in a suffix pattern is reversed too.
pub(crate) fn trim(value: &[u8], pattern: &[u8], kind: Trim, out: &mut Vec<u8>) {
    match kind {
        Trim::ShortestPrefix => out.extend_from_slice(&trim_shortest(value, pattern)),
        Trim::LongestPrefix => out.extend_from_slice(&trim_longest(value, pattern)),
        Trim::ShortestSuffix | Trim::LongestSuffix => {
            let reversed = reverse_runes(value);
            let reversed_pattern = reverse_runes(pattern);
            let trimmed = if kind == Trim::ShortestSuffix {
                trim_shortest(&reversed, &reversed_pattern)
            } else {
                trim_longest(&reversed, &reversed_pattern)
            };
            out.extend_from_slice(&reverse_runes(&trimmed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_like_go() {
        let v = b"abcdEFGH28ij";
        assert_eq!(
            substring(v, b"1", Some(b"-1")),
            Err(SliceOutOfRange { low: 1, high: 0 })
        );
        assert_eq!(
            substring(v, b"0", Some(b"-3")).map_err(|e| e.to_string()),
            Err("slice bounds out of range [:-3]".into())
        );
        assert_eq!(substring(v, b"20", Some(b"-1")), Ok(&b""[..]));
        assert_eq!(substring(v, b"10", Some(b"5")), Ok(&b"ij"[..]));
        assert_eq!(substring(v, b"-3", None), Ok(&b"8ij"[..]));
        assert!(substring(v, b"9223372036854775807", Some(b"1")).is_err());
        assert_eq!(substring(v, b"x", None), Ok(&v[..]));
    }

    /// The linear fast paths agree with the upstream algorithm (matching every prefix).
    #[test]
    fn simple_globs_agree_with_prefix_matching() {
        let values: [&[u8]; 6] = [
            b"bash.string.txt",
            b"/path/to/file",
            b"",
            b"a",
            "h\u{e9}llo.\u{e9}".as_bytes(),
            b"...",
        ];
        let patterns: [&[u8]; 9] = [
            b"*", b"**", b"*.", b".*", b"*.*", b"*/", b"/*", b"*\xc3*", b"ba*",
        ];
        for value in values {
            for pattern in patterns {
                assert!(simple_glob(pattern).is_some());
                for longest in [false, true] {
                    let mut expected = None;
                    for end in 1..=value.len() {
                        if glob::matches(pattern, &value[..end]) == Ok(true)
                            && (longest || expected.is_none())
                        {
                            expected = Some(end);
                        }
                    }
                    let glob = simple_glob(pattern).unwrap();
                    assert_eq!(
                        simple_glob_prefix(value, glob, longest),
                        expected,
                        "{value:?} {pattern:?} {longest}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn simple_globs_agree_on_random_input(
            value in "[a./é]{0,12}",
            stars in (0usize..3, 0usize..3),
            literal in "[a./é]{0,3}",
        ) {
            let pattern = format!("{}{}{}", "*".repeat(stars.0), literal, "*".repeat(stars.1));
            let (value, pattern) = (value.as_bytes(), pattern.as_bytes());
            if let Some(glob) = simple_glob(pattern) {
                for longest in [false, true] {
                    let mut expected = None;
                    for end in 1..=value.len() {
                        if glob::matches(pattern, &value[..end]) == Ok(true) && (longest || expected.is_none()) {
                            expected = Some(end);
                        }
                    }
                    proptest::prop_assert_eq!(simple_glob_prefix(value, glob, longest), expected);
                }
            }
        }
    }

    #[test]
    fn replace_like_go() {
        let mut out = Vec::new();
        replace(b"abc", b"", b"-", false, &mut out);
        assert_eq!(out, b"-a-b-c-");
        out.clear();
        replace(b"aaa", b"aa", b"b", false, &mut out);
        assert_eq!(out, b"ba");
    }
}
