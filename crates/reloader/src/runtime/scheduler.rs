//! When workloads are evaluated: the coalescing window and the cluster-wide rollout token bucket.
//! Plain data driven by the caller's clock (`now` is always passed in), so it is tested without
//! waiting.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use watch_index::refs::ObjectRef;

use crate::source::SourceKind;

/// Why a workload is waiting for evaluation, and when it is due.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) due: Instant,
    /// The configs whose events scheduled it (for the Event note; names only).
    pub(crate) causes: BTreeSet<(SourceKind, String)>,
    /// Whether a rollout may happen at evaluation: the change was first noticed at least one
    /// coalescing window before `due`. A workload event (added, updated) alone is evaluated at
    /// once, and a content change found then waits one window, like a config event.
    pub(crate) window_passed: bool,
    /// The latest `due` may move to: the first config event's time plus
    /// `--reload-debounce-max`, so a stream of events postpones the evaluation only that long.
    pub(crate) deadline: Instant,
}

/// Workloads waiting for evaluation.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    pending: HashMap<ObjectRef, Pending>,
}

impl Schedule {
    /// Schedules `object` for evaluation at `due`. A config event (`cause`) waits out its window:
    /// each further config event moves `due` later (a trailing window, so a burst or a flapping
    /// config is evaluated once, when it settles), but never past the `deadline` the first one
    /// set, so a stream of events cannot postpone a rollout forever. A workload event alone
    /// (`cause` `None`, due now) never pulls a config event's window in.
    pub(crate) fn schedule(
        &mut self,
        object: ObjectRef,
        due: Instant,
        deadline: Instant,
        cause: Option<(SourceKind, String)>,
    ) {
        match self.pending.entry(object) {
            std::collections::hash_map::Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                if cause.is_some() {
                    if !pending.window_passed {
                        pending.deadline = deadline;
                    }
                    pending.due = pending.due.max(due).min(pending.deadline.max(pending.due));
                    pending.window_passed = true;
                }
                pending.causes.extend(cause);
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Pending {
                    due,
                    window_passed: cause.is_some(),
                    causes: cause.into_iter().collect(),
                    deadline: deadline.max(due),
                });
            }
        }
    }

    /// Schedules `object` again at `due` after an evaluation (deferred, throttled or failed),
    /// keeping the causes; its coalescing window has passed by then. An entry made meanwhile by
    /// a new event keeps its time.
    pub(crate) fn reschedule(
        &mut self,
        object: ObjectRef,
        due: Instant,
        causes: &BTreeSet<(SourceKind, String)>,
    ) {
        let entry = self.pending.entry(object).or_insert_with(|| Pending {
            due,
            causes: BTreeSet::new(),
            window_passed: true,
            deadline: due,
        });
        entry.window_passed = true;
        entry.causes.extend(causes.iter().cloned());
    }

    /// Forgets `object`.
    pub(crate) fn remove(&mut self, object: &ObjectRef) {
        self.pending.remove(object);
    }

    /// How many workloads wait.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Takes the entries due at `now`, and says when the next one is.
    pub(crate) fn take_due(
        &mut self,
        now: Instant,
    ) -> (Vec<(ObjectRef, Pending)>, Option<Instant>) {
        let due_keys: Vec<ObjectRef> = self
            .pending
            .iter()
            .filter(|(_, p)| p.due <= now)
            .map(|(o, _)| o.clone())
            .collect();
        let due = due_keys
            .into_iter()
            .filter_map(|o| self.pending.remove(&o).map(|p| (o, p)))
            .collect();
        let next = self.pending.values().map(|p| p.due).min();
        (due, next)
    }

    #[cfg(test)]
    fn get(&self, object: &ObjectRef) -> Option<&Pending> {
        self.pending.get(object)
    }
}

/// A cluster-wide token bucket for rollouts.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: if rate > 0.0 { rate } else { f64::INFINITY },
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token, or says how long until one is free.
    pub(crate) fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.rate;
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.try_take(start), Ok(()));
        }
        let wait = bucket.try_take(start).unwrap_err();
        assert!(wait <= Duration::from_millis(500) && wait > Duration::ZERO);
        assert_eq!(bucket.try_take(start + Duration::from_millis(500)), Ok(()));
        assert!(bucket.try_take(start + Duration::from_millis(500)).is_err());
    }

    /// `schedule` with a config cause, as `on_config` calls it: due after `window`, deadline
    /// `max` after the event.
    fn config_event(
        schedule: &mut Schedule,
        object: &ObjectRef,
        at: Instant,
        window: Duration,
        max: Duration,
        name: &str,
    ) {
        schedule.schedule(
            object.clone(),
            at + window,
            at + max,
            Some((SourceKind::ConfigMap, name.into())),
        );
    }

    #[test]
    fn later_config_events_move_the_window_and_workload_events_never_pull_it_in() {
        let mut schedule = Schedule::default();
        let object = ObjectRef::new("apps", "Deployment", "ns", "web");
        let (window, max) = (Duration::from_secs(2), Duration::from_secs(300));
        let t0 = Instant::now();
        config_event(&mut schedule, &object, t0, window, max, "a");
        config_event(
            &mut schedule,
            &object,
            t0 + Duration::from_secs(1),
            window,
            max,
            "b",
        );
        let pending = schedule.get(&object).unwrap();
        assert_eq!(pending.due, t0 + Duration::from_secs(3), "trailing window");
        assert_eq!(pending.causes.len(), 2);
        // A workload event (no cause, due now) does not pull a config event's window in...
        let earlier = t0 - Duration::from_secs(1);
        schedule.schedule(object.clone(), earlier, earlier, None);
        assert_eq!(
            schedule.get(&object).unwrap().due,
            t0 + Duration::from_secs(3)
        );
        // ...and a config event joining a workload event's entry gets its window.
        let other = ObjectRef::new("apps", "Deployment", "ns", "api");
        schedule.schedule(other.clone(), t0, t0, None);
        config_event(&mut schedule, &other, t0, window, max, "a");
        assert_eq!(schedule.get(&other).unwrap().due, t0 + window);
        let (due, next) = schedule.take_due(t0 + window);
        assert_eq!(due.len(), 1, "only `api` is due at t0 + window");
        assert_eq!(next, Some(t0 + Duration::from_secs(3)));
    }

    #[test]
    fn a_burst_of_config_changes_is_evaluated_once_when_it_settles_with_every_cause() {
        let mut schedule = Schedule::default();
        let web = ObjectRef::new("apps", "Deployment", "ns", "web");
        let (window, max) = (Duration::from_secs(2), Duration::from_secs(300));
        let t0 = Instant::now();
        // Ten changes of two configs, 150 ms apart (a Secret flipping back and forth).
        for i in 0..10u64 {
            let at = t0 + Duration::from_millis(150 * i);
            let config = if i % 2 == 0 { "a" } else { "b" };
            config_event(&mut schedule, &web, at, window, max, config);
        }
        assert_eq!(schedule.len(), 1, "coalesced into one entry");
        let settled = t0 + Duration::from_millis(150 * 9) + window;
        let (due, next) = schedule.take_due(settled - Duration::from_millis(1));
        assert!(
            due.is_empty(),
            "nothing before the last change's window has passed"
        );
        assert_eq!(next, Some(settled), "the last change decides the time");
        let (due, next) = schedule.take_due(settled);
        assert_eq!(due.len(), 1, "evaluated once");
        let (object, pending) = &due[0];
        assert_eq!(object, &web);
        assert!(pending.window_passed);
        let causes: Vec<&str> = pending.causes.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(causes, ["a", "b"]);
        assert_eq!(next, None);
    }

    #[test]
    fn a_stream_of_changes_postpones_an_evaluation_only_to_the_deadline_and_a_retry_keeps_its_causes()
     {
        let mut schedule = Schedule::default();
        let web = ObjectRef::new("apps", "Deployment", "ns", "web");
        let t0 = Instant::now();
        let (window, max) = (Duration::from_secs(2), Duration::from_secs(30));
        // Changes keep coming every second, for a minute.
        for i in 0..60u64 {
            let at = t0 + Duration::from_secs(i);
            config_event(&mut schedule, &web, at, window, max, "s");
        }
        let (due, _) = schedule.take_due(t0 + max - Duration::from_millis(1));
        assert!(due.is_empty(), "postponed while the changes go on");
        let (due, _) = schedule.take_due(t0 + max);
        assert_eq!(due.len(), 1, "due at the deadline, not postponed further");
        // A throttled (or failed) evaluation comes back later with its causes.
        let (object, pending) = due.into_iter().next().expect("one");
        schedule.reschedule(object.clone(), t0 + max + window, &pending.causes);
        let (due, next) = schedule.take_due(t0 + max + Duration::from_millis(1));
        assert!(due.is_empty());
        assert_eq!(next, Some(t0 + max + window));
        let (due, _) = schedule.take_due(t0 + max + window);
        assert_eq!(due[0].1.causes, pending.causes);
    }
}
