//! Per-workload rollout settings, from the workload's own annotations: conflux's coalescing
//! window ([`RELOAD_DEBOUNCE`]), Reloader's `pause-period` for Deployments ([`PAUSE_PERIOD`]) and
//! Reloader's `rollout-strategy` ([`ROLLOUT_STRATEGY`]); and the pause decision, with the time
//! passed in.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use conflux_reloader::WorkloadKind;
//! use conflux_reloader::settings::{PAUSE_PERIOD, Pause, RELOAD_DEBOUNCE, WorkloadSettings};
//!
//! let annotations = BTreeMap::from([
//!     (RELOAD_DEBOUNCE.to_owned(), "30s".to_owned()),
//!     (PAUSE_PERIOD.to_owned(), "5m".to_owned()),
//! ]);
//! let settings = WorkloadSettings::parse(WorkloadKind::Deployment, Some(&annotations));
//! assert_eq!(settings.debounce, Some(Duration::from_secs(30)));
//! assert!(settings.problems.is_empty());
//! // Paused by conflux at 12:00:00 for 5 minutes: resume at 12:05:00.
//! let paused_at = "2026-11-26T12:00:00Z";
//! let now = 1_795_694_460; // 12:01:00
//! assert_eq!(
//!     settings.pause(now, true, Some(paused_at)),
//!     Pause::ResumeAt(1_795_694_700)
//! );
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Error, Result, WorkloadKind};

/// Workload annotation (conflux's): this workload's coalescing window, instead of
/// `--reload-debounce` (a Go duration; `0` evaluates at once). Reloader asks for it in #856.
pub const RELOAD_DEBOUNCE: &str = "conflux.dev/reload-debounce";
/// Deployment annotation (Reloader's): after a rollout, pause the Deployment this long, so
/// further changes in that time make one rollout when it resumes.
pub const PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";
/// Deployment annotation (Reloader's): when the pause began (RFC 3339); set with `spec.paused`,
/// removed on resume.
pub const PAUSED_AT: &str = "deployment.reloader.stakater.com/paused-at";
/// Workload annotation (Reloader's): `rollout` (default) or `restart` (Argo Rollouts only: set
/// `spec.restartAt` instead of changing the pod template). On other kinds `restart` is accepted
/// and ignored, as Reloader documents, with a problem reported once (a Warning Event).
pub const ROLLOUT_STRATEGY: &str = "reloader.stakater.com/rollout-strategy";

/// How a workload is rolled (Reloader's `rollout-strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RolloutStrategy {
    /// Change the pod template.
    #[default]
    Rollout,
    /// Restart the pods without changing the template (Argo Rollouts' `spec.restartAt`).
    Restart,
}

/// What a workload's own annotations say about its rollouts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// [`RELOAD_DEBOUNCE`], when set and valid.
    pub debounce: Option<Duration>,
    /// [`PAUSE_PERIOD`], when set, valid and positive, on a Deployment.
    pub pause_period: Option<Duration>,
    /// [`ROLLOUT_STRATEGY`].
    pub rollout_strategy: RolloutStrategy,
    /// Values that could not be read (each ignored, for a Warning Event).
    pub problems: Vec<Error>,
}

impl WorkloadSettings {
    /// Reads the settings of a workload of `kind` from its metadata annotations.
    pub fn parse(kind: WorkloadKind, annotations: Option<&BTreeMap<String, String>>) -> Self {
        let mut settings = WorkloadSettings::default();
        let get = |key: &str| annotations.and_then(|a| a.get(key));
        let mut duration = |key: &'static str| -> Option<Duration> {
            let value = get(key)?;
            match parse_duration(value) {
                Ok(d) => Some(d),
                Err(_) => {
                    settings.problems.push(Error::InvalidAnnotation {
                        annotation: key,
                        value: value.chars().take(64).collect(),
                        expected: "a duration such as 30s, 5m or 1h30m",
                    });
                    None
                }
            }
        };
        let debounce = duration(RELOAD_DEBOUNCE);
        let pause = duration(PAUSE_PERIOD);
        settings.debounce = debounce;
        if let Some(period) = pause {
            if kind != WorkloadKind::Deployment {
                settings.problems.push(Error::InvalidAnnotation {
                    annotation: PAUSE_PERIOD,
                    value: get(PAUSE_PERIOD).cloned().unwrap_or_default(),
                    expected: "a Deployment (only Deployments can be paused)",
                });
            } else if period.is_zero() {
                settings.problems.push(Error::InvalidAnnotation {
                    annotation: PAUSE_PERIOD,
                    value: get(PAUSE_PERIOD).cloned().unwrap_or_default(),
                    expected: "a positive duration",
                });
            } else {
                settings.pause_period = Some(period);
            }
        }
        settings.rollout_strategy = match get(ROLLOUT_STRATEGY).map(String::as_str) {
            None | Some("rollout") => RolloutStrategy::Rollout,
            Some("restart") => {
                if kind != WorkloadKind::Rollout {
                    settings.problems.push(Error::InvalidAnnotation {
                        annotation: ROLLOUT_STRATEGY,
                        value: "restart".to_owned(),
                        expected: "an Argo Rollout (restart applies to Rollouts only; this \
                                   workload's pod template is rolled instead)",
                    });
                }
                RolloutStrategy::Restart
            }
            Some(other) => {
                // Reloader reads anything else as `rollout`, and so do we; but say so.
                settings.problems.push(Error::InvalidAnnotation {
                    annotation: ROLLOUT_STRATEGY,
                    value: other.chars().take(64).collect(),
                    expected: "rollout or restart",
                });
                RolloutStrategy::Rollout
            }
        };
        settings
    }

    /// What to do about a Deployment's pause at `now` (Unix seconds), given whether it is paused
    /// (`spec.paused`) and its [`PAUSED_AT`] annotation.
    pub fn pause(&self, now: i64, paused: bool, paused_at: Option<&str>) -> Pause {
        match (paused, paused_at) {
            (false, _) => Pause::NotPaused,
            // Paused by someone else: never ours to resume.
            (true, None) => Pause::PausedByOther,
            (true, Some(at)) => {
                let Some(start) = parse_rfc3339(at) else {
                    // Unreadable: resume now rather than stay paused forever (as Reloader).
                    return Pause::ResumeNow;
                };
                let Some(period) = self.pause_period else {
                    // The annotation was removed while paused: nothing holds the pause.
                    return Pause::ResumeNow;
                };
                let end = start.saturating_add(i64::try_from(period.as_secs()).unwrap_or(i64::MAX));
                if end <= now {
                    Pause::ResumeNow
                } else {
                    Pause::ResumeAt(end)
                }
            }
        }
    }
}

/// A Deployment's pause, as [`WorkloadSettings::pause`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pause {
    /// Not paused.
    NotPaused,
    /// Paused, without [`PAUSED_AT`]: by someone else; left alone.
    PausedByOther,
    /// Paused by conflux (or Reloader); resume at this time (Unix seconds).
    ResumeAt(i64),
    /// Paused by conflux (or Reloader), and the period is over.
    ResumeNow,
}

/// `paused-at` as Reloader writes it (RFC 3339, seconds), for a time in Unix seconds.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Parses an RFC 3339 time (`2026-11-26T12:00:00Z`, with fractions or an offset) into Unix
/// seconds.
pub fn parse_rfc3339(value: &str) -> Option<i64> {
    let b = value.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        value.get(r)?.parse::<u32>().ok().map(i64::from)
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &value[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = rest[1..].split_once(':')?;
            if oh.len() != 2 || om.len() != 2 {
                return None;
            }
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Parses a Go-style duration as Flux flags and Reloader's annotations take them: `0`, `300ms`,
/// `2s`, `1.5s`, `1m`, `1m30s`, `1h`. Negative durations are refused.
pub fn parse_duration(input: &str) -> Result<Duration> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || Error::InvalidDuration {
        input: input.to_owned(),
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_len);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn durations_parse_like_go() {
        for (input, want) in [
            ("0", Duration::ZERO),
            ("2s", Duration::from_secs(2)),
            ("300ms", Duration::from_millis(300)),
            ("1.5s", Duration::from_millis(1500)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
            ("1500us", Duration::from_micros(1500)),
        ] {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
        for bad in ["", "2", "s", "2x", "-1s", "1..2s", "5 m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_from_annotations() {
        let s = WorkloadSettings::parse(
            WorkloadKind::Deployment,
            Some(&map(&[(PAUSE_PERIOD, "5m"), (ROLLOUT_STRATEGY, "rollout")])),
        );
        assert_eq!(s.pause_period, Some(Duration::from_secs(300)));
        assert_eq!(s.rollout_strategy, RolloutStrategy::Rollout);
        assert!(s.problems.is_empty());
        let restart = map(&[(ROLLOUT_STRATEGY, "restart")]);
        let s = WorkloadSettings::parse(WorkloadKind::Rollout, Some(&restart));
        assert_eq!(s.rollout_strategy, RolloutStrategy::Restart);
        assert!(s.problems.is_empty());
        // Accepted and ignored elsewhere, as Reloader documents, but said once.
        for kind in [WorkloadKind::Deployment, WorkloadKind::Job] {
            let s = WorkloadSettings::parse(kind, Some(&restart));
            assert_eq!(s.problems.len(), 1, "{kind}");
            assert!(s.problems[0].to_string().contains("Rollouts only"));
        }
        let s = WorkloadSettings::parse(
            WorkloadKind::StatefulSet,
            Some(&map(&[
                (PAUSE_PERIOD, "5m"),
                (RELOAD_DEBOUNCE, "soon"),
                (ROLLOUT_STRATEGY, "Restart"),
            ])),
        );
        assert_eq!(s.pause_period, None, "Deployments only");
        assert_eq!(s.debounce, None);
        assert_eq!(s.rollout_strategy, RolloutStrategy::Rollout);
        let reasons: Vec<&str> = s.problems.iter().map(Error::reason).collect();
        assert_eq!(reasons, ["InvalidAnnotation"; 3]);
        let zero =
            WorkloadSettings::parse(WorkloadKind::Deployment, Some(&map(&[(PAUSE_PERIOD, "0")])));
        assert_eq!(zero.pause_period, None);
        assert_eq!(zero.problems.len(), 1);
        assert_eq!(
            WorkloadSettings::parse(WorkloadKind::Deployment, None),
            WorkloadSettings::default()
        );
    }

    #[test]
    fn pauses() {
        let five = WorkloadSettings {
            pause_period: Some(Duration::from_secs(300)),
            ..WorkloadSettings::default()
        };
        let at = "2026-11-26T12:00:00Z";
        let start = parse_rfc3339(at).unwrap();
        assert_eq!(format_rfc3339(start), at);
        assert_eq!(five.pause(start, false, Some(at)), Pause::NotPaused);
        assert_eq!(five.pause(start, true, None), Pause::PausedByOther);
        assert_eq!(
            five.pause(start + 60, true, Some(at)),
            Pause::ResumeAt(start + 300)
        );
        assert_eq!(five.pause(start + 300, true, Some(at)), Pause::ResumeNow);
        assert_eq!(five.pause(start, true, Some("yesterday")), Pause::ResumeNow);
        let gone = WorkloadSettings::default();
        assert_eq!(gone.pause(start, true, Some(at)), Pause::ResumeNow);
    }

    #[test]
    fn rfc3339_round_trips_and_reads_offsets() {
        for unix in [0, 951_782_400, 1_795_262_400, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&format_rfc3339(unix)), Some(unix));
        }
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2026-11-26T13:00:00.123+01:00"),
            parse_rfc3339("2026-11-26T12:00:00Z")
        );
        for bad in [
            "",
            "2026-11-26",
            "2026-13-01T00:00:00Z",
            "2026-11-26T12:00:00",
            "2026-11-26T12:00:00+0100",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
