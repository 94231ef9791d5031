//! What the end-to-end benchmarks share: percentiles, reading a process's memory, the API
//! server's request counts ([`apiserver`]), and conflux's controllers in-process with the few
//! cluster helpers each benchmark needs ([`fanout`], [`reload`]).
//!
//! The benchmarks themselves (`benches/*/main.rs`) are plain programs run by
//! `cargo bench -p conflux-benches`; none runs under `cargo test`.

pub mod apiserver;
pub mod audit;
pub mod contender;
pub mod fanout;
pub mod reload;
pub mod rollouts;

use std::future::Future;
use std::time::Duration;

/// The `p`-th percentile (0–100) of `samples`, nearest rank; `None` when empty.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// `VmHWM` (peak resident set) and `VmRSS` of process `pid`, in KiB.
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// Reads an environment variable as a number, with a default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// True when `cargo bench` started this benchmark (it passes `--bench`). A benchmark returns at
/// once otherwise, so `cargo test --all-targets` builds it but never starts a cluster.
pub fn run_by_cargo_bench(name: &str) -> bool {
    let by_bench = std::env::args().skip(1).any(|arg| arg == "--bench");
    if !by_bench {
        eprintln!("{name}: skipped (not run by `cargo bench -p conflux-benches --bench {name}`)");
    }
    by_bench
}

/// Polls `check` every 100 ms until it returns `Some`; fails naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let samples: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&samples, 50.0), Some(ms(50)));
        assert_eq!(percentile(&samples, 99.0), Some(ms(99)));
        assert_eq!(percentile(&[ms(7)], 99.0), Some(ms(7)));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
