//! Settings of the reload controller, and Go-style durations for its flags.

use super::*;

/// Default of `--reload-debounce`.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(2);
/// Default of `--reload-debounce-max`.
pub const DEFAULT_DEBOUNCE_MAX: Duration = Duration::from_secs(300);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// `--watch-label-selector`: which workloads are handled (sharding).
    pub object_selector: Selector,
    /// `--reload-debounce`: how long a config event waits for others before its workloads are
    /// evaluated; each further event restarts the wait.
    pub debounce: Duration,
    /// `--reload-debounce-max`: the longest a stream of events may postpone an evaluation,
    /// counted from the first event (at least `debounce`).
    pub debounce_max: Duration,
    /// `--reload-rate`: rollouts per second, cluster-wide.
    pub rate: f64,
    /// `--reload-burst`: rollouts allowed at once before the rate applies.
    pub burst: u32,
    /// `--concurrent`: config reads and patches in flight.
    pub concurrent: usize,
    /// Reloader's global options (`--auto-reload-all`).
    pub options: Options,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            namespace: None,
            object_selector: Selector::everything(),
            debounce: DEFAULT_DEBOUNCE,
            debounce_max: DEFAULT_DEBOUNCE_MAX,
            rate: 5.0,
            burst: 10,
            concurrent: 4,
            options: Options::default(),
        }
    }
}

/// Parses a Go-style duration as Flux flags take them: `0`, `300ms`, `2s`, `1.5s`, `1m`, `1m30s`.
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

    #[test]
    fn durations_parse_like_go() {
        for (input, want) in [
            ("0", Duration::ZERO),
            ("2s", Duration::from_secs(2)),
            ("300ms", Duration::from_millis(300)),
            ("1.5s", Duration::from_millis(1500)),
            ("1m30s", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
        for bad in ["", "2", "s", "2x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
