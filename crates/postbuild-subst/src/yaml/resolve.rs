//! go-yaml v2 `resolve.go`: YAML 1.1 implicit typing of plain scalars, with the Go `strconv`
//! behaviour it relies on (`time.Parse` is in [`super::timestamp`]).
//!
//! One implementation serves both directions: the emitter asks whether a string would read back
//! as something else (and so needs quotes), the parser turns plain scalars into values. What is
//! specific to one side stays there: base-60 quoting in the emitter, explicit tags (`!!int`,
//! `!!binary`, ...) and their errors in the parser.

use std::borrow::Cow;

use super::timestamp::Timestamp;

// The tags implicit resolution reports (`yaml_*_TAG` in go-yaml).

/// `!!str`.
pub(crate) const STR_TAG: &str = "tag:yaml.org,2002:str";
/// `!!bool`.
pub(crate) const BOOL_TAG: &str = "tag:yaml.org,2002:bool";
/// `!!int`.
pub(crate) const INT_TAG: &str = "tag:yaml.org,2002:int";
/// `!!float`.
pub(crate) const FLOAT_TAG: &str = "tag:yaml.org,2002:float";
/// `!!null`.
pub(crate) const NULL_TAG: &str = "tag:yaml.org,2002:null";
/// `!!timestamp`.
pub(crate) const TIMESTAMP_TAG: &str = "tag:yaml.org,2002:timestamp";

/// What a plain scalar resolves to under go-yaml v2's implicit typing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Resolved {
    /// `~`, `null`, `Null`, `NULL` or the empty string.
    Null,
    /// YAML 1.1 booleans: `y`, `yes`, `on`, `true`, `n`, `no`, `off`, `false` in three spellings.
    Bool(bool),
    /// An integer that fits in int64.
    Int(i64),
    /// An integer above int64's range that fits in uint64.
    Uint(u64),
    /// A float, `.inf`/`.nan` included.
    Float(f64),
    /// A timestamp (`2001-12-14`, `2001-12-14T21:59:43.10-05:00`, ...).
    Timestamp,
    /// Anything else: the text itself, as a string.
    Str,
}

impl Resolved {
    /// The tag `resolve` reports with this value.
    pub(crate) fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => NULL_TAG,
            Resolved::Bool(_) => BOOL_TAG,
            Resolved::Int(_) | Resolved::Uint(_) => INT_TAG,
            Resolved::Float(_) => FLOAT_TAG,
            Resolved::Timestamp => TIMESTAMP_TAG,
            Resolved::Str => STR_TAG,
        }
    }
}

/// go-yaml v2's `resolve("", s)` for a plain scalar.
pub(crate) fn resolve_plain(s: &str) -> Resolved {
    resolve_implicit(s, true)
}

/// The implicit half of `resolve`, for a tag that is neither `!!str` nor `!!binary`.
///
/// go-yaml only tries timestamps for an untagged scalar or an explicit `!!timestamp`
/// (`timestamps`); under another tag, `2001-12-14` fails as a string instead.
pub(crate) fn resolve_implicit(s: &str, timestamps: bool) -> Resolved {
    let hint = match s.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => return Resolved::Str,
    };
    if let Some(r) = resolve_map(s) {
        return r;
    }
    match hint {
        b'.' => match go_parse_float(s) {
            Some(f) => Resolved::Float(f),
            None => Resolved::Str,
        },
        b'D' | b'S' => {
            if timestamps && is_go_timestamp(s) {
                return Resolved::Timestamp;
            }
            let plain: Cow<'_, str> = if s.contains('_') {
                Cow::Owned(s.replace('_', ""))
            } else {
                Cow::Borrowed(s)
            };
            if let Some(i) = go_parse_int(&plain, 0) {
                return Resolved::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain, 0) {
                return Resolved::Uint(u);
            }
            if is_yaml_style_float(&plain)
                && let Some(f) = go_parse_float(&plain)
            {
                return Resolved::Float(f);
            }
            if let Some(rest) = plain.strip_prefix("0b") {
                if let Some(i) = go_parse_int(rest, 2) {
                    return Resolved::Int(i);
                }
                if let Some(u) = go_parse_uint(rest, 2) {
                    return Resolved::Uint(u);
                }
            } else if let Some(rest) = plain.strip_prefix("-0b")
                && let Some(i) = go_parse_int(&format!("-{rest}"), 2)
            {
                return Resolved::Int(i);
            }
            Resolved::Str
        }
        _ => Resolved::Str,
    }
}

/// The fixed table of `resolve.go` (`resolveMap`).
fn resolve_map(s: &str) -> Option<Resolved> {
    Some(match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        _ => return None,
    })
}

/// Go `strconv.ParseUint(s, base, 64)` for base 0, 2, 8, 10 or 16, without underscores (the
/// callers have removed them, and Go rejects them for an explicit base).
fn go_parse_uint(s: &str, base: u32) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let b = s.as_bytes();
    let (base, digits) = if base == 0 {
        if b[0] == b'0' {
            match b.get(1).map(u8::to_ascii_lowercase) {
                Some(b'b') if b.len() >= 3 => (2, &b[2..]),
                Some(b'o') if b.len() >= 3 => (8, &b[2..]),
                Some(b'x') if b.len() >= 3 => (16, &b[2..]),
                _ => (8, &b[1..]),
            }
        } else {
            (10, b)
        }
    } else {
        (base, b)
    };
    let mut n: u64 = 0;
    for &c in digits {
        let d = (c as char).to_digit(36)?;
        if d >= base {
            return None;
        }
        n = n.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
    }
    Some(n)
}

/// Go `strconv.ParseInt(s, base, 64)`: an optional sign, then [`go_parse_uint`].
fn go_parse_int(s: &str, base: u32) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let un = go_parse_uint(rest, base)?;
    const CUTOFF: u64 = 1 << 63;
    if (!neg && un >= CUTOFF) || (neg && un > CUTOFF) {
        return None;
    }
    // un <= 2^63 here; the cast wraps 2^63 to i64::MIN, which negates to itself.
    let v = un as i64;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Go `strconv.ParseFloat(s, 64)` for decimal syntax (underscores between digits allowed), and
/// `None` when Go reports an error (bad syntax, or overflow to infinity).
///
/// Hexadecimal floats and `inf`/`nan` spellings are not needed: go-yaml only calls ParseFloat on
/// text starting with `.` or matching its decimal float pattern.
fn go_parse_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut neg = false;
    if let Some(&c) = b.first()
        && (c == b'+' || c == b'-')
    {
        neg = c == b'-';
        i = 1;
    }
    let mut int_digits = String::new();
    let mut frac_digits = String::new();
    let mut saw_dot = false;
    let mut saw_digits = false;
    let mut underscores = false;
    while i < b.len() {
        match b[i] {
            b'_' => underscores = true,
            b'.' if !saw_dot => saw_dot = true,
            c @ b'0'..=b'9' => {
                saw_digits = true;
                if saw_dot {
                    frac_digits.push(c as char);
                } else {
                    int_digits.push(c as char);
                }
            }
            _ => break,
        }
        i += 1;
    }
    if !saw_digits {
        return None;
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let mut esign = 1;
        match b.get(i) {
            Some(b'+') => i += 1,
            Some(b'-') => {
                esign = -1;
                i += 1;
            }
            _ => {}
        }
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            if b[i] == b'_' {
                underscores = true;
            } else if exp < 100_000 {
                exp = exp * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        exp *= esign;
    }
    if i != b.len() || (underscores && !go_underscore_ok(s)) {
        return None;
    }
    let text = format!(
        "{}{}.{}e{}",
        if neg { "-" } else { "" },
        if int_digits.is_empty() {
            "0"
        } else {
            &int_digits
        },
        if frac_digits.is_empty() {
            "0"
        } else {
            &frac_digits
        },
        exp
    );
    let f: f64 = text.parse().ok()?;
    // Go reports overflow as an error; underflow to zero is fine.
    f.is_finite().then_some(f)
}

/// Go `strconv.underscoreOK`: underscores only between digits (or after a base prefix).
fn go_underscore_ok(s: &str) -> bool {
    let mut b = s.as_bytes();
    if matches!(b.first(), Some(b'+' | b'-')) {
        b = &b[1..];
    }
    // saw: b'^' start, b'0' digit or prefix, b'_' underscore, b'!' other.
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$` (resolve.go `yamlStyleFloat`).
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
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

/// resolve.go `parseTimestamp` (see [`Timestamp::parse`]).
fn is_go_timestamp(s: &str) -> bool {
    Timestamp::parse(s).is_some()
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
    fn timestamps() {
        assert!(is_go_timestamp("2001-12-14"));
        assert!(is_go_timestamp("2001-12-14t21:59:43.10Z"));
        assert!(!is_go_timestamp("2001-02-30"));
    }

    #[test]
    fn go_edge_cases() {
        // strconv.ParseFloat takes underscores between digits, after a leading dot too.
        assert_eq!(resolve_plain(".5_5"), Resolved::Float(0.55));
        assert_eq!(resolve_plain("._5"), Resolved::Str);
        // In a time.Parse layout a space matches a run of spaces; zone offsets go up to 24:60.
        assert_eq!(resolve_plain("2001-12-14  1:02:03"), Resolved::Timestamp);
        assert_eq!(resolve_plain("2001-12-14T1:2:3-24:60"), Resolved::Timestamp);
        assert_eq!(resolve_plain("2001-12-14T1:2:3-24:61"), Resolved::Str);
        // Only untagged or `!!timestamp` scalars are tried as timestamps.
        assert_eq!(resolve_implicit("2001-12-14", false), Resolved::Str);
    }
}
