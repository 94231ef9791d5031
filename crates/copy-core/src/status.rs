//! ConfigSync status from the outcome of a sync: the `Ready` condition and the counts.
//!
//! The controller executes a [plan](crate::steps), feeds each step's result into a [`SyncOutcome`]
//! and writes [`status`]'s answer. No clock is read here: the caller passes `now`.
//!
//! | outcome | `Ready` | reason |
//! |---|---|---|
//! | every target synced | `True` | `Synced` |
//! | some targets failed or were skipped | `False` | `PartialSync` |
//! | source missing | `False` | `SourceNotFound` |
//! | refused (untrusted kopy source, no consent, a Secret type never copied) | `False` | `Refused` |
//! | spec invalid (bad selector) | `False` | `InvalidSpec` |

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::Error;
use crate::config_sync::{ConfigSyncStatus, TargetFailure};
use crate::steps::Step;

/// Condition type conflux sets on ConfigSyncs.
pub const READY: &str = "Ready";
/// Reason: every target namespace has an up-to-date copy.
pub const REASON_SYNCED: &str = "Synced";
/// Reason: some target namespaces failed or were skipped.
pub const REASON_PARTIAL_SYNC: &str = "PartialSync";
/// Reason: the source does not exist (copies are kept and marked orphaned).
pub const REASON_SOURCE_NOT_FOUND: &str = "SourceNotFound";
/// Reason: the sync was refused (no consent, untrusted kopy source).
pub const REASON_REFUSED: &str = "Refused";
/// Reason: the spec cannot be acted on (for example a namespace selector that does not parse).
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// How many failures the status lists; `failedTargets` still counts all of them.
pub const MAX_REPORTED_FAILURES: usize = 10;

/// What one sync achieved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncOutcome {
    /// Digest of the source content copied ([`ConfigObject::content_hash`](crate::ConfigObject::content_hash)).
    pub source_hash: Option<String>,
    /// Target namespaces with an up-to-date copy.
    pub synced: u32,
    /// Target namespaces that failed, counted.
    pub failed: u32,
    /// The first [`MAX_REPORTED_FAILURES`] failures.
    pub failures: Vec<TargetFailure>,
    /// A failure of the whole sync (source missing, refused, invalid spec).
    pub problem: Option<Error>,
}

impl SyncOutcome {
    /// An outcome for a source with content digest `source_hash`, nothing recorded yet.
    pub fn new(source_hash: impl Into<Option<String>>) -> Self {
        SyncOutcome {
            source_hash: source_hash.into(),
            ..SyncOutcome::default()
        }
    }

    /// The outcome of a sync that could not start.
    pub fn failed_with(problem: Error) -> Self {
        SyncOutcome {
            problem: Some(problem),
            ..SyncOutcome::default()
        }
    }

    /// Records how executing `step` went. `result` is the API error's message on failure (it must
    /// not contain data; API server messages do not). A skipped conflict counts as a failed target.
    pub fn record(&mut self, step: &Step, result: Result<(), String>) {
        match (step, result) {
            (
                Step::Skip {
                    namespace, message, ..
                },
                _,
            ) => self.fail(namespace, message.clone()),
            (step, Ok(())) if step.is_target() => self.synced += 1,
            (_, Ok(())) => {}
            (step, Err(message)) => self.fail(step.namespace(), message),
        }
    }

    /// Records a failed target namespace.
    pub fn fail(&mut self, namespace: &str, message: String) {
        self.failed += 1;
        if self.failures.len() < MAX_REPORTED_FAILURES {
            self.failures.push(TargetFailure {
                namespace: namespace.to_owned(),
                message,
            });
        }
    }

    /// The `Ready` condition's status, reason and message.
    pub fn ready(&self) -> (&'static str, &'static str, String) {
        if let Some(problem) = &self.problem {
            let reason = match problem {
                Error::SourceUnavailable { .. } => REASON_SOURCE_NOT_FOUND,
                Error::Refused(_)
                | Error::UntrustedSyncSource { .. }
                | Error::UnsupportedSecretType { .. } => REASON_REFUSED,
                _ => REASON_INVALID_SPEC,
            };
            return ("False", reason, problem.to_string());
        }
        if self.failed == 0 {
            let message = format!("synced {} target namespace(s)", self.synced);
            return ("True", REASON_SYNCED, message);
        }
        let mut message = format!(
            "synced {} of {} target namespace(s); {} failed",
            self.synced,
            self.synced + self.failed,
            self.failed
        );
        if let Some(first) = self.failures.first() {
            message.push_str(&format!(", first: {}: {}", first.namespace, first.message));
        }
        ("False", REASON_PARTIAL_SYNC, message)
    }
}

/// The `Ready` condition for `outcome`. `lastTransitionTime` is kept from `previous` when the
/// status did not change (as apimachinery's `meta.SetStatusCondition` does), else `now`.
pub fn ready_condition(
    outcome: &SyncOutcome,
    generation: Option<i64>,
    now: Time,
    previous: &[Condition],
) -> Condition {
    let (status, reason, message) = outcome.ready();
    ready(status, reason, message, generation, now, previous)
}

/// A `Ready` condition with `status`, `reason` and `message`; `lastTransitionTime` is kept from
/// `previous` when the status did not change, else `now` (shared by ConfigSync's and
/// ProtectPolicy's status).
pub(crate) fn ready(
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Time,
    previous: &[Condition],
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == READY && c.status == status)
        .map_or(now, |c| c.last_transition_time.clone());
    Condition {
        type_: READY.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The whole status for `outcome`: the `Ready` condition (other condition types in `previous` are
/// kept), `observedGeneration`, the source hash (kept from `previous` when the source could not be
/// read) and the counts.
pub fn status(
    outcome: &SyncOutcome,
    generation: Option<i64>,
    now: Time,
    previous: Option<&ConfigSyncStatus>,
) -> ConfigSyncStatus {
    let previous_conditions = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let mut conditions: Vec<Condition> = previous_conditions
        .iter()
        .filter(|c| c.type_ != READY)
        .cloned()
        .collect();
    conditions.insert(
        0,
        ready_condition(outcome, generation, now, previous_conditions),
    );
    ConfigSyncStatus {
        conditions,
        observed_generation: generation,
        source_hash: outcome
            .source_hash
            .clone()
            .or_else(|| previous.and_then(|p| p.source_hash.clone())),
        synced_targets: outcome.synced,
        failed_targets: outcome.failed,
        failures: outcome.failures.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{SourceKind, SourceRef};
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    fn step_in(ns: &str) -> Step {
        Step::InSync {
            namespace: ns.to_owned(),
        }
    }

    #[test]
    fn ready_table() {
        let src = SourceRef::new(SourceKind::Secret, "flux-system", "tok");
        let mut partial = SyncOutcome::new(Some("sha256:x".to_owned()));
        partial.record(&step_in("a"), Ok(()));
        partial.record(&step_in("b"), Err("forbidden".to_owned()));
        let mut skipped = SyncOutcome::new(None);
        skipped.record(
            &Step::Skip {
                namespace: "c".into(),
                name: "tok".into(),
                message: "exists".into(),
            },
            Ok(()),
        );
        let mut synced = SyncOutcome::new(None);
        synced.record(&step_in("a"), Ok(()));
        synced.record(
            &Step::Delete {
                namespace: "z".into(),
                name: "tok".into(),
            },
            Ok(()),
        );
        let cases = [
            (
                "all synced",
                synced,
                "True",
                REASON_SYNCED,
                "synced 1 target namespace(s)".to_owned(),
            ),
            (
                "partial",
                partial,
                "False",
                REASON_PARTIAL_SYNC,
                "synced 1 of 2 target namespace(s); 1 failed, first: b: forbidden".to_owned(),
            ),
            (
                "skip is a failure",
                skipped,
                "False",
                REASON_PARTIAL_SYNC,
                "synced 0 of 1 target namespace(s); 1 failed, first: c: exists".to_owned(),
            ),
            (
                "source missing",
                SyncOutcome::failed_with(src.unavailable("secrets \"tok\" not found")),
                "False",
                REASON_SOURCE_NOT_FOUND,
                "failed to copy data from Secret/flux-system/tok: secrets \"tok\" not found"
                    .to_owned(),
            ),
            (
                "refused",
                SyncOutcome::failed_with(Error::UntrustedSyncSource {
                    source_ref: src.clone(),
                    annotation: "kopy.kot-labs.com/sync",
                }),
                "False",
                REASON_REFUSED,
                Error::UntrustedSyncSource {
                    source_ref: src.clone(),
                    annotation: "kopy.kot-labs.com/sync",
                }
                .to_string(),
            ),
            (
                "invalid spec",
                SyncOutcome::failed_with(Error::InvalidSelector {
                    context: "x".into(),
                    message: "y".into(),
                }),
                "False",
                REASON_INVALID_SPEC,
                "invalid namespace selector in x: y".to_owned(),
            ),
        ];
        for (case, outcome, status, reason, message) in cases {
            assert_eq!(outcome.ready(), (status, reason, message), "{case}");
        }
    }

    #[test]
    fn failures_are_bounded_but_counted() {
        let mut outcome = SyncOutcome::new(None);
        for i in 0..25 {
            outcome.fail(&format!("ns-{i}"), "boom".to_owned());
        }
        let s = status(&outcome, Some(3), at(10), None);
        assert_eq!(s.failed_targets, 25);
        assert_eq!(s.failures.len(), MAX_REPORTED_FAILURES);
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut ok = SyncOutcome::new(Some("sha256:a".to_owned()));
        ok.record(&step_in("a"), Ok(()));
        let first = status(&ok, Some(1), at(100), None);
        assert_eq!(first.conditions[0].last_transition_time, at(100));
        let again = status(&ok, Some(2), at(200), Some(&first));
        assert_eq!(again.conditions[0].last_transition_time, at(100));
        assert_eq!(again.conditions[0].observed_generation, Some(2));
        let missing = SyncOutcome::failed_with(
            SourceRef::new(SourceKind::Secret, "a", "b").unavailable("gone"),
        );
        let broken = status(&missing, Some(2), at(300), Some(&again));
        assert_eq!(broken.conditions[0].last_transition_time, at(300));
        assert_eq!(broken.conditions[0].reason, REASON_SOURCE_NOT_FOUND);
        assert_eq!(
            broken.source_hash.as_deref(),
            Some("sha256:a"),
            "last known hash kept"
        );
        assert_eq!(broken.conditions.len(), 1);
    }
}
