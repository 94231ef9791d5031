//! Base-60 numbers (encode.go): quoted by the emitter although resolve.go reads them as strings.

/// encode.go `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
pub(super) fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    match b.first() {
        Some(b'+' | b'-' | b'0'..=b'9') if b.contains(&b':') => {}
        _ => return false,
    }
    let mut i = 0;
    if matches!(b[0], b'+' | b'-') {
        i = 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        // `[0-5]?[0-9]`: taking two digits when possible is never worse, since a group must be
        // followed by `:`, `.` or the end.
        match (b.get(i), b.get(i + 1)) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => i += 2,
            (Some(b'0'..=b'9'), _) => i += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}
