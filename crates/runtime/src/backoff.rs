//! One backoff policy for every retry: exponential, from the maintained `backon` crate (the one
//! kube's own watcher uses), without jitter so delays are predictable in logs and tests.
//!
//! - [`Backoff`] is a running sequence of delays for one loop (start-up steps, a background
//!   retry): [`Backoff::wait`] sleeps the next delay.
//! - [`KeyedBackoff`] counts consecutive failures per key (an object) for controllers that
//!   requeue instead of sleeping, and forgets a key on success.
//!
//! The presets are the delays conflux has always used for each kind of retry.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

use crate::sync::lock;

/// An exponential policy: the first delay, doubled after each failure up to the longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    first: Duration,
    max: Duration,
}

impl Policy {
    /// Start-up steps that must not make the process exit (discovery, first reads, the lease
    /// manager): 0.5 s doubling to 30 s.
    pub const STARTUP: Policy = Policy::new(Duration::from_millis(500), Duration::from_secs(30));
    /// A write retried in the background until it lands: 1 s doubling to 60 s.
    pub const BACKGROUND: Policy = Policy::new(Duration::from_secs(1), Duration::from_secs(60));
    /// A reconcile requeued after an API error: 1 s doubling to 5 minutes.
    pub const RECONCILE: Policy = Policy::new(Duration::from_secs(1), Duration::from_secs(300));
    /// A rollout retried after a failed evaluation or patch: 250 ms doubling to 60 s.
    pub const ROLLOUT: Policy = Policy::new(Duration::from_millis(250), Duration::from_secs(60));

    /// A policy from `first` doubling to `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Policy { first, max }
    }

    /// The delay after `failures` consecutive failures (the first delay after one).
    pub fn delay(&self, failures: u32) -> Duration {
        // After 64 doublings every policy is at its maximum; bound the walk.
        let n = usize::try_from(failures.clamp(1, 64)).unwrap_or(64);
        self.delays().nth(n - 1).unwrap_or(self.max)
    }

    /// The sequence of delays, endless.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            policy: *self,
            delays: self.delays(),
        }
    }

    fn delays(&self) -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
            .build()
    }
}

/// A running sequence of delays of one [`Policy`].
#[derive(Debug)]
pub struct Backoff {
    policy: Policy,
    delays: ExponentialBackoff,
}

impl Default for Backoff {
    /// The [`Policy::STARTUP`] sequence.
    fn default() -> Self {
        Policy::STARTUP.backoff()
    }
}

impl Backoff {
    /// The next delay (the policy's longest once the sequence is past it).
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.policy.max)
    }

    /// Sleeps the next delay.
    pub async fn wait(&mut self) {
        let delay = self.next_delay();
        tokio::time::sleep(delay).await;
    }

    /// Starts the sequence again (after a success).
    pub fn reset(&mut self) {
        self.delays = self.policy.delays();
    }
}

/// Consecutive failures per key, and the delay they earn.
#[derive(Debug)]
pub struct KeyedBackoff<K> {
    policy: Policy,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> KeyedBackoff<K> {
    /// Failures counted against `policy`.
    pub fn new(policy: Policy) -> Self {
        KeyedBackoff {
            policy,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one more failure of `key`; the delay before its retry.
    pub fn next(&self, key: K) -> Duration {
        let mut failures = lock(&self.failures);
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        self.policy.delay(*n)
    }

    /// Forgets the failures of `key` (it succeeded).
    pub fn reset<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        lock(&self.failures).remove(key);
    }

    /// Keys with failures.
    pub fn len(&self) -> usize {
        lock(&self.failures).len()
    }

    /// Whether no key has failures.
    pub fn is_empty(&self) -> bool {
        lock(&self.failures).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(delays: impl Iterator<Item = Duration>) -> Vec<f64> {
        delays.map(|d| d.as_secs_f64()).collect()
    }

    #[test]
    fn the_presets_keep_their_delays() {
        let mut startup = Policy::STARTUP.backoff();
        assert_eq!(
            secs((0..9).map(|_| startup.next_delay())),
            [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
        );
        startup.reset();
        assert_eq!(startup.next_delay(), Duration::from_millis(500));
        assert_eq!(
            secs((1..=8).map(|n| Policy::BACKGROUND.delay(n))),
            [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
        );
        assert_eq!(
            secs((1..=10).map(|n| Policy::ROLLOUT.delay(n))),
            [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
        );
        assert_eq!(Policy::ROLLOUT.delay(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn keyed_backoff_doubles_per_key_up_to_its_maximum_and_resets_on_success() {
        let backoff = KeyedBackoff::new(Policy::RECONCILE);
        let delays: Vec<u64> = (0..12)
            .map(|_| backoff.next("ConfigMap/a/b".to_owned()).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(
            backoff.next("Secret/a/b".to_owned()).as_secs(),
            1,
            "per key"
        );
        backoff.reset("ConfigMap/a/b");
        assert_eq!(backoff.next("ConfigMap/a/b".to_owned()).as_secs(), 1);
        assert_eq!(backoff.len(), 2);
    }
}
