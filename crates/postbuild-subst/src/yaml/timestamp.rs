//! go-yaml's timestamps: which plain scalars are one (`resolve.go` `parseTimestamp`, Go's
//! `time.Parse` with four layouts; v2 and v3 share the code), and how Go writes one back as JSON
//! (`time.Time.MarshalJSON`: RFC 3339 with nanoseconds).
//!
//! The emitter and parser here only ask whether a text is a timestamp (to quote it, or to keep it
//! as text as `YAMLToJSON` does). kustomize also writes one back (go-yaml v3 into `time.Time`,
//! then `encoding/json`), which `conflux plan`'s built-in kustomize reproduces with
//! [`Timestamp::to_json_text`].

/// A timestamp as go-yaml reads it: the date and clock as written, and the zone offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    nanosecond: u32,
    /// East of UTC, in minutes: 0 for `Z`, for `±00:00` and without a zone (Go reads UTC).
    offset_minutes: i32,
}

/// Go's `time.Time.MarshalJSON` refuses an offset of 24 hours or more, which `time.Parse` takes
/// (up to `±24:60`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Time.MarshalJSON: timezone hour outside of range [0,23]")]
pub struct ZoneOutOfRange;

/// The layouts of go-yaml's `allowedTimestampFormats`, in its order.
#[derive(Clone, Copy)]
enum Layout {
    /// `2006-1-2T15:4:5.999999999Z07:00` (and with a lower-case `t`).
    Iso(u8),
    /// `2006-1-2 15:4:5.999999999`.
    Space,
    /// `2006-1-2`.
    Date,
}

impl Timestamp {
    /// go-yaml's `parseTimestamp`: the text starts with four digits and `-`, and Go's
    /// `time.Parse` accepts it with one of go-yaml's layouts. `None` where go-yaml keeps the
    /// text as a string (`2001-02-30`, `2001-12-14T21:59:43` without a zone, `… -5`).
    pub fn parse(text: &str) -> Option<Timestamp> {
        let b = text.as_bytes();
        let year_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        if year_digits != 4 || b.get(4) != Some(&b'-') {
            return None;
        }
        [
            Layout::Iso(b'T'),
            Layout::Iso(b't'),
            Layout::Space,
            Layout::Date,
        ]
        .into_iter()
        .find_map(|layout| go_time_parse(b, layout))
    }

    /// Go's `time.Time.MarshalJSON` without its quotes: `2001-12-14T21:59:43.1-05:00`, the
    /// fraction without trailing zeros (none when zero), `Z` for a zero offset.
    pub fn to_json_text(&self) -> Result<String, ZoneOutOfRange> {
        let mut out = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        );
        if self.nanosecond != 0 {
            let digits = format!("{:09}", self.nanosecond);
            out.push('.');
            out.push_str(digits.trim_end_matches('0'));
        }
        if self.offset_minutes == 0 {
            out.push('Z');
            return Ok(out);
        }
        let minutes = self.offset_minutes.unsigned_abs();
        if minutes / 60 >= 24 {
            return Err(ZoneOutOfRange);
        }
        let sign = if self.offset_minutes < 0 { '-' } else { '+' };
        out.push_str(&format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60));
        Ok(out)
    }
}

/// Go `getnum(s, false)`: one or two digits.
fn go_getnum(v: &[u8]) -> Option<(u32, &[u8])> {
    let d0 = *v.first().filter(|c| c.is_ascii_digit())?;
    match v.get(1) {
        Some(d1) if d1.is_ascii_digit() => {
            Some((u32::from(d0 - b'0') * 10 + u32::from(d1 - b'0'), &v[2..]))
        }
        _ => Some((u32::from(d0 - b'0'), &v[1..])),
    }
}

/// Go `time.Parse` with one of go-yaml's layouts; `v` starts with four digits and `-`.
fn go_time_parse(v: &[u8], layout: Layout) -> Option<Timestamp> {
    // 2006: exactly four digits (checked by the caller).
    let year: u32 = v
        .get(..4)?
        .iter()
        .fold(0, |acc, d| acc * 10 + u32::from(d - b'0'));
    let mut v = &v[4..];
    let lit = |v: &mut &[u8], c: u8| -> Option<()> {
        let rest = v.strip_prefix(&[c])?;
        *v = rest;
        Some(())
    };
    lit(&mut v, b'-')?;
    let (month, rest) = go_getnum(v)?;
    v = rest;
    if !(1..=12).contains(&month) {
        return None;
    }
    lit(&mut v, b'-')?;
    let (day, rest) = go_getnum(v)?;
    v = rest;
    let mut stamp = Timestamp {
        year,
        month,
        day,
        hour: 0,
        minute: 0,
        second: 0,
        nanosecond: 0,
        offset_minutes: 0,
    };
    match layout {
        Layout::Date => {}
        Layout::Iso(_) | Layout::Space => {
            if let Layout::Iso(t) = layout {
                lit(&mut v, t)?;
            } else {
                // A space in a Go layout matches one or more spaces (or the end).
                if v.first().is_some_and(|c| *c != b' ') {
                    return None;
                }
                while v.first() == Some(&b' ') {
                    v = &v[1..];
                }
            }
            let (hour, rest) = go_getnum(v)?;
            v = rest;
            if hour >= 24 {
                return None;
            }
            lit(&mut v, b':')?;
            let (minute, rest) = go_getnum(v)?;
            v = rest;
            if minute >= 60 {
                return None;
            }
            lit(&mut v, b':')?;
            let (second, rest) = go_getnum(v)?;
            v = rest;
            if second >= 60 {
                return None;
            }
            (stamp.hour, stamp.minute, stamp.second) = (hour, minute, second);
            // .999999999: optional, `.` or `,` then any number of digits, of which Go keeps
            // nine (`parseNanoseconds`).
            if v.len() >= 2 && (v[0] == b'.' || v[0] == b',') && v[1].is_ascii_digit() {
                let n = v[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                let kept = &v[1..1 + n.min(9)];
                let digits = kept.iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0'));
                stamp.nanosecond = (kept.len()..9).fold(digits, |ns, _| ns * 10);
                v = &v[1 + n..];
            }
            if let Layout::Iso(_) = layout {
                // Z07:00
                if let Some(rest) = v.strip_prefix(b"Z") {
                    v = rest;
                } else {
                    stamp.offset_minutes = go_zone(v)?;
                    v = &v[6..];
                }
            }
        }
    }
    if !v.is_empty() {
        return None;
    }
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=days_in_month).contains(&day).then_some(stamp)
}

/// `±hh:mm` at the start of `v` as minutes east of UTC; Go takes hours up to 24 and minutes up
/// to 60 ("some people do write offsets of 24 hours or 60 minutes").
fn go_zone(v: &[u8]) -> Option<i32> {
    if v.len() < 6 || v[3] != b':' {
        return None;
    }
    let two = |p: &[u8]| -> Option<i32> {
        (p[0].is_ascii_digit() && p[1].is_ascii_digit())
            .then(|| i32::from(p[0] - b'0') * 10 + i32::from(p[1] - b'0'))
    };
    let (hh, mm) = (two(&v[1..3])?, two(&v[4..6])?);
    if hh > 24 || mm > 60 {
        return None;
    }
    match v[0] {
        b'+' => Some(hh * 60 + mm),
        b'-' => Some(-(hh * 60 + mm)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Option<Result<String, ZoneOutOfRange>> {
        Timestamp::parse(text).map(|t| t.to_json_text())
    }

    /// Plain scalars in a resource and what kustomize v5.8.2 (`kustomize build`, Go's
    /// `MarshalJSON`) wrote for them; `None`: kept as the string.
    #[test]
    fn kustomize_v5_8_2_vectors() {
        let vectors: &[(&str, Option<&str>)] = &[
            ("2001-12-14", Some("2001-12-14T00:00:00Z")),
            ("2001-2-3", Some("2001-02-03T00:00:00Z")),
            ("2000-02-29", Some("2000-02-29T00:00:00Z")),
            ("0000-01-01", Some("0000-01-01T00:00:00Z")),
            (
                "2001-12-14T21:59:43.10-05:00",
                Some("2001-12-14T21:59:43.1-05:00"),
            ),
            ("2001-12-14t21:59:43.10Z", Some("2001-12-14T21:59:43.1Z")),
            ("2001-12-14t21:59:43Z", Some("2001-12-14T21:59:43Z")),
            ("2001-12-14 21:59:43.10", Some("2001-12-14T21:59:43.1Z")),
            ("2001-12-14 21:59:43", Some("2001-12-14T21:59:43Z")),
            (
                "2001-12-14  21:59:43.123456789",
                Some("2001-12-14T21:59:43.123456789Z"),
            ),
            (
                "2001-12-14T21:59:43.1234567891234Z",
                Some("2001-12-14T21:59:43.123456789Z"),
            ),
            (
                "2001-12-14T21:59:43.1234567890123456789Z",
                Some("2001-12-14T21:59:43.123456789Z"),
            ),
            ("2001-12-14T21:59:43.000Z", Some("2001-12-14T21:59:43Z")),
            (
                "2001-12-14T21:59:43.100000000Z",
                Some("2001-12-14T21:59:43.1Z"),
            ),
            (
                "2001-12-14T21:59:43.000000001Z",
                Some("2001-12-14T21:59:43.000000001Z"),
            ),
            ("2001-12-14T21:59:43,5Z", Some("2001-12-14T21:59:43.5Z")),
            ("2001-12-14T1:2:3Z", Some("2001-12-14T01:02:03Z")),
            ("2001-1-2T3:4:5Z", Some("2001-01-02T03:04:05Z")),
            ("2001-12-14T21:59:43+00:00", Some("2001-12-14T21:59:43Z")),
            ("2001-12-14T21:59:43-00:00", Some("2001-12-14T21:59:43Z")),
            (
                "2001-12-14T21:59:43+05:30",
                Some("2001-12-14T21:59:43+05:30"),
            ),
            (
                "2001-12-14T21:59:43.5+05:30",
                Some("2001-12-14T21:59:43.5+05:30"),
            ),
            (
                "2001-12-14T21:59:43+23:59",
                Some("2001-12-14T21:59:43+23:59"),
            ),
            (
                "2001-12-14T21:59:43+00:60",
                Some("2001-12-14T21:59:43+01:00"),
            ),
            (
                "2001-12-14T21:59:43-00:60",
                Some("2001-12-14T21:59:43-01:00"),
            ),
            (
                "1999-12-31T23:59:59-00:01",
                Some("1999-12-31T23:59:59-00:01"),
            ),
            (
                "9999-12-31T23:59:59-01:00",
                Some("9999-12-31T23:59:59-01:00"),
            ),
            (
                "0000-01-01T00:00:00+01:00",
                Some("0000-01-01T00:00:00+01:00"),
            ),
            (
                "0000-01-01T00:00:00-01:00",
                Some("0000-01-01T00:00:00-01:00"),
            ),
            ("2001-12-14 21:59:43.10 -5", None),
            ("2001-02-30", None),
            ("1900-02-29", None),
            ("2001-12-14T21:59:60Z", None),
            ("2001-12-14T24:00:00Z", None),
            ("2001-12-14T21:59:43", None),
            ("2001-12-14T21:59:43.Z", None),
            ("2001-12-14T21:59:43z", None),
            ("2001-12-14T21:59:43+0530", None),
            ("2001-12-14T21:59:43+05", None),
            ("2001-12-14T21:59:43 Z", None),
            ("2001-12-14 21:59", None),
            ("20011-12-14", None),
        ];
        for (text, written) in vectors {
            let ours = json(text).map(|r| r.expect("a zone in range"));
            assert_eq!(ours.as_deref(), *written, "{text}");
        }
    }

    /// kustomize v5.8.2 fails on these (`json: error calling MarshalJSON for type time.Time:
    /// Time.MarshalJSON: timezone hour outside of range [0,23]`): Go parses them.
    #[test]
    fn offsets_of_a_day_fail_to_write() {
        for text in ["2001-12-14T21:59:43+23:60", "2001-12-14T21:59:43-24:00"] {
            assert_eq!(json(text), Some(Err(ZoneOutOfRange)), "{text}");
        }
        assert_eq!(
            ZoneOutOfRange.to_string(),
            "Time.MarshalJSON: timezone hour outside of range [0,23]"
        );
        // Beyond 24:60, time.Parse already refuses: a string.
        assert_eq!(json("2001-12-14T1:2:3-24:61"), None);
    }
}
