//! go-yaml v2 `resolve.go`: YAML 1.1 implicit typing of plain scalars and tag checks.

pub(crate) const STR_TAG: &str = "tag:yaml.org,2002:str";
pub(crate) const BOOL_TAG: &str = "tag:yaml.org,2002:bool";
pub(crate) const INT_TAG: &str = "tag:yaml.org,2002:int";
pub(crate) const FLOAT_TAG: &str = "tag:yaml.org,2002:float";
pub(crate) const NULL_TAG: &str = "tag:yaml.org,2002:null";
pub(crate) const TIMESTAMP_TAG: &str = "tag:yaml.org,2002:timestamp";
pub(crate) const BINARY_TAG: &str = "tag:yaml.org,2002:binary";
pub(crate) const MERGE_TAG: &str = "tag:yaml.org,2002:merge";

const LONG_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// What a scalar resolves to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// The input text itself (strings, timestamps, unknown tags, `!!binary` before decoding).
    Text,
}

/// `shortTag`: `tag:yaml.org,2002:int` becomes `!!int`.
pub(crate) fn short_tag(tag: &str) -> String {
    match tag.strip_prefix(LONG_TAG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_string(),
    }
}

fn resolvable(tag: &str) -> bool {
    matches!(
        tag,
        "" | STR_TAG | BOOL_TAG | INT_TAG | FLOAT_TAG | NULL_TAG | TIMESTAMP_TAG
    )
}

fn lookup(input: &str) -> Option<(&'static str, Resolved)> {
    let r = match input {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            (BOOL_TAG, Resolved::Bool(true))
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            (BOOL_TAG, Resolved::Bool(false))
        }
        "" | "~" | "null" | "Null" | "NULL" => (NULL_TAG, Resolved::Null),
        ".nan" | ".NaN" | ".NAN" => (FLOAT_TAG, Resolved::Float(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            (FLOAT_TAG, Resolved::Float(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => (FLOAT_TAG, Resolved::Float(f64::NEG_INFINITY)),
        "<<" => (MERGE_TAG, Resolved::Text),
        _ => return None,
    };
    Some(r)
}

/// `resolve(tag, in)`: the resolved tag and value, or the `cannot decode` error message.
pub(crate) fn resolve(tag: &str, input: &str) -> Result<(String, Resolved), String> {
    if !resolvable(tag) {
        return Ok((tag.to_string(), Resolved::Text));
    }
    let (rtag, out) = resolve_implicit(tag, input);
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

fn resolve_implicit(tag: &str, input: &str) -> (&'static str, Resolved) {
    let hint = match input.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => 0,
    };
    if hint != 0 && tag != STR_TAG && tag != BINARY_TAG {
        if let Some(found) = lookup(input) {
            return found;
        }
        match hint {
            b'.' => {
                if let Some(f) = go_parse_float(input) {
                    return (FLOAT_TAG, Resolved::Float(f));
                }
            }
            b'D' | b'S' => {
                if (tag.is_empty() || tag == TIMESTAMP_TAG) && is_timestamp(input) {
                    return (TIMESTAMP_TAG, Resolved::Text);
                }
                let plain = input.replace('_', "");
                if let Some(i) = go_parse_int(&plain, 0) {
                    return (INT_TAG, Resolved::Int(i));
                }
                if let Some(u) = go_parse_uint(&plain, 0) {
                    return (INT_TAG, Resolved::Uint(u));
                }
                if is_yaml_float(&plain)
                    && let Some(f) = go_parse_float(&plain)
                {
                    return (FLOAT_TAG, Resolved::Float(f));
                }
                if let Some(rest) = plain.strip_prefix("0b") {
                    if let Some(i) = go_parse_int(rest, 2) {
                        return (INT_TAG, Resolved::Int(i));
                    }
                    if let Some(u) = go_parse_uint(rest, 2) {
                        return (INT_TAG, Resolved::Uint(u));
                    }
                } else if let Some(rest) = plain.strip_prefix("-0b")
                    && let Some(i) = go_parse_int(&format!("-{rest}"), 2)
                {
                    return (INT_TAG, Resolved::Int(i));
                }
            }
            _ => {}
        }
    }
    (STR_TAG, Resolved::Text)
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go `strconv.ParseFloat(s, 64)` for the decimal forms that can reach it here
/// (hint `.` or the float pattern). Overflow is an error, as in Go.
fn go_parse_float(s: &str) -> Option<f64> {
    // Go accepts only these shapes for a leading '.', and the pattern guarantees them
    // otherwise; Rust's parser would also take `inf`/`nan`, which Go-with-dot would not.
    if !is_yaml_float(s) {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    if f.is_infinite() { None } else { Some(f) }
}

/// Go `strconv.ParseUint(s, base, 64)` for base 0 (prefix detection) or 2.
pub(crate) fn go_parse_uint(s: &str, base: u32) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let b = s.as_bytes();
    let (base, digits) = if base == 0 {
        if b[0] == b'0' {
            let second = b.get(1).map(|c| c | 0x20);
            if b.len() >= 3 && second == Some(b'b') {
                (2, &b[2..])
            } else if b.len() >= 3 && second == Some(b'o') {
                (8, &b[2..])
            } else if b.len() >= 3 && second == Some(b'x') {
                (16, &b[2..])
            } else {
                (8, &b[1..])
            }
        } else {
            (10, b)
        }
    } else {
        (base, b)
    };
    let mut n: u64 = 0;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'a'..=b'z' | b'A'..=b'Z' => u32::from((c | 0x20) - b'a') + 10,
            _ => return None,
        };
        if d >= base {
            return None;
        }
        n = n.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
    }
    Some(n)
}

/// Go `strconv.ParseInt(s, base, 64)`.
pub(crate) fn go_parse_int(s: &str, base: u32) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    let (neg, rest) = match s.as_bytes()[0] {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let un = go_parse_uint(rest, base)?;
    if neg {
        if un > 1u64 << 63 {
            return None;
        }
        Some((un as i64).wrapping_neg())
    } else {
        i64::try_from(un).ok()
    }
}

/// `parseTimestamp`: whether Go's `time.Parse` accepts `s` in one of go-yaml's layouts.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits != 4 || digits == b.len() || b[4] != b'-' {
        return false;
    }
    parse_go_timestamp(b).is_some()
}

/// Reads 1 or 2 digits (Go `getnum(s, false)`).
fn getnum(b: &[u8], i: &mut usize) -> Option<u32> {
    let d0 = *b.get(*i)?;
    if !d0.is_ascii_digit() {
        return None;
    }
    *i += 1;
    let mut v = u32::from(d0 - b'0');
    if let Some(&d1) = b.get(*i)
        && d1.is_ascii_digit()
    {
        *i += 1;
        v = v * 10 + u32::from(d1 - b'0');
    }
    Some(v)
}

fn parse_go_timestamp(b: &[u8]) -> Option<()> {
    let year: u32 = std::str::from_utf8(&b[..4]).ok()?.parse().ok()?;
    let mut i = 5;
    let month = getnum(b, &mut i)?;
    if !(1..=12).contains(&month) {
        return None;
    }
    if b.get(i) != Some(&b'-') {
        return None;
    }
    i += 1;
    let day = getnum(b, &mut i)?;
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    let days_in = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day < 1 || day > days_in {
        return None;
    }
    if i == b.len() {
        return Some(());
    }
    let sep = b[i];
    let with_zone = sep == b'T' || sep == b't';
    if !with_zone && sep != b' ' {
        return None;
    }
    i += 1;
    let hour = getnum(b, &mut i)?;
    if b.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    let minute = getnum(b, &mut i)?;
    if b.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    let second = getnum(b, &mut i)?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Optional fractional seconds: a '.' or ',' followed by at least one digit.
    if matches!(b.get(i), Some(b'.' | b',')) && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if !with_zone {
        return (i == b.len()).then_some(());
    }
    match b.get(i) {
        Some(b'Z') => (i + 1 == b.len()).then_some(()),
        Some(b'+' | b'-') => {
            let z = &b[i + 1..];
            let ok = z.len() == 5
                && z[0].is_ascii_digit()
                && z[1].is_ascii_digit()
                && z[2] == b':'
                && z[3].is_ascii_digit()
                && z[4].is_ascii_digit();
            ok.then_some(())
        }
        _ => None,
    }
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
    fn ints() {
        assert_eq!(go_parse_int("0755", 0), Some(493));
        assert_eq!(go_parse_int("0x1F", 0), Some(31));
        assert_eq!(go_parse_int("0o17", 0), Some(15));
        assert_eq!(go_parse_int("-0", 0), Some(0));
        assert_eq!(go_parse_int("08", 0), None);
        assert_eq!(go_parse_int("9223372036854775808", 0), None);
        assert_eq!(go_parse_uint("9223372036854775808", 0), Some(1 << 63));
        assert_eq!(go_parse_int("-9223372036854775808", 0), Some(i64::MIN));
    }

    #[test]
    fn tags() {
        assert_eq!(
            resolve(INT_TAG, "abc").unwrap_err(),
            "yaml: cannot decode !!str `abc` as a !!int"
        );
        assert!(is_timestamp("2001-12-14"));
        assert!(is_timestamp("2001-12-14t21:59:43.10Z"));
        assert!(!is_timestamp("2001-02-30"));
    }

    #[test]
    fn base64() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert!(decode_base64("not-base64!").is_none());
    }
}
