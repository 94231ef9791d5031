//! Go formatting that leaks into the output: `strconv.FormatFloat` and `encoding/json` floats
//! (both directions: JSONToYAML retypes `json.Marshal`'s float text, YAMLToJSON writes it), and
//! for YAMLToJSON `encoding/json` string escaping and the `%#v` rendering of error messages.

/// The shortest round-trip decimal digits of a finite, non-zero-or-zero float and its
/// decimal point position: value = 0.d1d2d3... × 10^dp.
fn shortest_digits(sci: &str) -> (bool, Vec<u8>, i32) {
    // `sci` is Rust's `{:e}` rendering, e.g. `-1.2345e-7`, which uses shortest digits.
    let (neg, body) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci),
    };
    let (mant, exp) = body.split_once('e').unwrap_or((body, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    let mut digits = digits;
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    (neg, digits, exp + 1)
}

fn fmt_e(neg: bool, digits: &[u8], dp: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push(char::from(digits[0]));
    if digits.len() > 1 {
        s.push('.');
        s.extend(digits[1..].iter().map(|&d| char::from(d)));
    }
    let exp = if digits == [b'0'] { 0 } else { dp - 1 };
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    s
}

fn fmt_f(neg: bool, digits: &[u8], dp: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    let nd = digits.len() as i32;
    if dp > 0 {
        for i in 0..dp {
            s.push(if i < nd {
                char::from(digits[i as usize])
            } else {
                '0'
            });
        }
    } else {
        s.push('0');
    }
    if nd > dp.max(0) {
        s.push('.');
        for i in dp..nd {
            s.push(if i < 0 {
                '0'
            } else {
                char::from(digits[i as usize])
            });
        }
    }
    s
}

fn special(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" }.into())
    } else {
        None
    }
}

fn digits_of(f: f64, bits32: bool) -> (bool, Vec<u8>, i32) {
    if bits32 {
        shortest_digits(&format!("{:e}", f as f32))
    } else {
        shortest_digits(&format!("{f:e}"))
    }
}

/// `strconv.FormatFloat(f, 'g', -1, bits)`.
pub(crate) fn format_g(f: f64, bits32: bool) -> String {
    // A 32-bit rendering first rounds to float32, which may overflow to infinity.
    let rounded = if bits32 { f64::from(f as f32) } else { f };
    if let Some(s) = special(rounded) {
        return s;
    }
    let (neg, digits, dp) = digits_of(f, bits32);
    let exp = if digits == [b'0'] { 0 } else { dp - 1 };
    if !(-4..6).contains(&exp) {
        fmt_e(neg, &digits, dp)
    } else if digits == [b'0'] {
        if neg { "-0".into() } else { "0".into() }
    } else {
        fmt_f(neg, &digits, dp)
    }
}

/// Go `encoding/json` float64 rendering. The caller rejects NaN and infinities.
pub(crate) fn format_json_float(f: f64) -> String {
    let abs = f.abs();
    let (neg, digits, dp) = digits_of(f, false);
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let mut s = fmt_e(neg, &digits, dp);
        // Go cleans up `e-09` to `e-9`.
        let n = s.len();
        let b = s.as_bytes();
        if n >= 4 && b[n - 4] == b'e' && b[n - 3] == b'-' && b[n - 2] == b'0' {
            s.remove(n - 2);
        }
        s
    } else if digits == [b'0'] {
        if neg { "-0".into() } else { "0".into() }
    } else {
        fmt_f(neg, &digits, dp)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Go `encoding/json` string encoding with HTML escaping; invalid UTF-8 becomes `\ufffd`.
pub(crate) fn write_json_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b < 0x80 {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0C => out.extend_from_slice(b"\\f"),
                b'<' | b'>' | b'&' | 0..=0x1F => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xF)]);
                }
                _ => out.push(b),
            }
            i += 1;
            continue;
        }
        match decode_rune(&s[i..]) {
            None => {
                out.extend_from_slice(b"\\ufffd");
                i += 1;
            }
            Some((c, size)) => {
                if c == '\u{2028}' || c == '\u{2029}' {
                    out.extend_from_slice(if c == '\u{2028}' {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                } else {
                    out.extend_from_slice(&s[i..i + size]);
                }
                i += size;
            }
        }
    }
    out.push(b'"');
}

/// Decodes one UTF-8 character like Go's `utf8.DecodeRune`: `None` for an invalid byte.
fn decode_rune(s: &[u8]) -> Option<(char, usize)> {
    let len = match s.first()? {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let chunk = s.get(..len)?;
    let c = std::str::from_utf8(chunk).ok()?.chars().next()?;
    Some((c, len))
}

/// Go's lossy view of bytes as a string: every invalid byte becomes U+FFFD.
pub(crate) fn lossy_string(s: &[u8]) -> String {
    if let Ok(valid) = std::str::from_utf8(s) {
        return valid.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match decode_rune(&s[i..]) {
            Some((c, size)) => {
                out.push(c);
                i += size;
            }
            None => {
                out.push('\u{FFFD}');
                i += 1;
            }
        }
    }
    out
}

/// An approximation of Go's `unicode.IsPrint` for non-ASCII characters: control, format,
/// separator (other than U+0020), surrogate and private-use characters are not printable.
fn go_is_print(c: char) -> bool {
    let v = c as u32;
    if v < 0x80 {
        return (0x20..0x7F).contains(&v);
    }
    !matches!(v,
        0x80..=0xA0
        | 0xAD
        | 0x600..=0x605
        | 0x61C
        | 0x6DD
        | 0x70F
        | 0x1680
        | 0x180E
        | 0x2000..=0x200F
        | 0x2028..=0x202F
        | 0x205F..=0x2064
        | 0x2066..=0x206F
        | 0x3000
        | 0xE000..=0xF8FF
        | 0xFEFF
        | 0xFFF9..=0xFFFB
        | 0xFFFE
        | 0xFFFF
        | 0xE0001
        | 0xE0020..=0xE007F
        | 0xF0000..=0x10FFFF
    )
}

/// Go `strconv.Quote`.
pub(crate) fn go_quote(s: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut i = 0;
    while i < s.len() {
        let Some((c, size)) = decode_rune(&s[i..]) else {
            out.push_str(&format!("\\x{:02x}", s[i]));
            i += 1;
            continue;
        };
        i += size;
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if go_is_print(c) => out.push(c),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0C' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0B' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7F' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(format_json_float(1.5e-7), "1.5e-7");
        assert_eq!(format_json_float(1e21), "1e+21");
        assert_eq!(format_json_float(1e20), "100000000000000000000");
        assert_eq!(format_json_float(0.000001), "0.000001");
        assert_eq!(format_json_float(-0.0), "-0");
        assert_eq!(format_json_float(1.2), "1.2");
        assert_eq!(format_json_float(123456789.123), "123456789.123");
        assert_eq!(format_g(std::f64::consts::PI, true), "3.1415927");
        assert_eq!(format_g(16777217.0, true), "1.6777216e+07");
        assert_eq!(format_g(1e6, false), "1e+06");
        assert_eq!(format_g(0.0001, false), "0.0001");
        assert_eq!(format_g(0.00001, false), "1e-05");
        assert_eq!(format_g(1.5, false), "1.5");
        assert_eq!(format_g(100.0, false), "100");
    }

    #[test]
    fn strings() {
        let mut out = Vec::new();
        write_json_string(&mut out, b"<a&b>\x01\xff\xe2\x80\xa8\x7f");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"\\u003ca\\u0026b\\u003e\\u0001\\ufffd\\u2028\x7f\""
        );
        assert_eq!(go_quote(b"a\"b\n"), "\"a\\\"b\\n\"");
    }
}
