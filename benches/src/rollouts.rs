//! Rollouts judged against the config writes that caused them, for benchmarks where no kubelet
//! runs: what the pods would read is judged from the newest rollout (a ReplicaSet, or a
//! ControllerRevision for StatefulSets and DaemonSets), and the rollouts are compared with the
//! "settled states", the rollouts an ideal reloader makes.
//!
//! Times are offsets from the start of a measurement; `rv` is the resourceVersion the API server
//! gave the write or the rollout. On the test ground one etcd backs the API server, so
//! resourceVersions are etcd revisions and totally ordered across objects: a rollout with a
//! higher `rv` than a write was created after that write was stored, and its pods (started from
//! it, after it) read the written data. The ordering is exact where wall-clock times from two
//! processes would not be.

use std::time::Duration;

/// A write of a ConfigMap or Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// Index of the config written (the caller's numbering).
    pub config: usize,
    /// When the API server answered it.
    pub at: Duration,
    /// The resourceVersion it produced.
    pub rv: u64,
    /// Its kind: only data changes ask for a rollout.
    pub kind: WriteKind,
}

/// What a write changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// The config's creation, before the changes measured: it sets the first value, asks for no
    /// rollout, and is the final value when nothing changes the config later.
    Create,
    /// A change of the data the workloads read.
    Data,
    /// A write that leaves the data alone (an annotation).
    NoOp,
}

/// A rollout seen by a watch: a new ReplicaSet or ControllerRevision (or a ControllerRevision
/// taken up again) of one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollout {
    /// Index of the workload.
    pub workload: usize,
    /// When the watch saw it.
    pub at: Duration,
    /// Its resourceVersion when first seen (its creation's, as a watch delivers every event).
    pub rv: u64,
}

/// A workload and what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The configs its pods read.
    pub reads: Vec<usize>,
    /// The resourceVersion of its creation: writes before it are not its changes.
    pub created_rv: u64,
    /// The resourceVersion of its deletion, when it was deleted during the measurement: it is
    /// then left out of the final values, and writes after it are not its changes. A DELETE
    /// answered with a `Status` carries none: take it from the watch's `DELETED` event.
    pub deleted_rv: Option<u64>,
    /// When it was deleted: a settled change whose rollout would come later needs none.
    pub deleted_at: Option<Duration>,
    /// Its `deployment.reloader.stakater.com/pause-period`.
    pub pause: Option<Duration>,
}

/// How an ideal reloader coalesces changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalescing {
    /// Changes closer together than this are one settled change (a trailing window: each change
    /// restarts it).
    pub window: Duration,
    /// A stream of changes is cut after this long from its first change.
    pub max: Duration,
}

/// The rollouts an ideal reloader makes for data changes at `times` (sorted) to one workload: one
/// per settled change, that is per run of changes each closer than `window` to the one before,
/// cut at `max` from the run's first. With a pause period, the workload is paused from its
/// rollout (the last change of the run plus `window`) for `pause`, and changes whose own rollout
/// would land before it resumes are in the same new ReplicaSet.
pub fn settled_states(times: &[Duration], coalescing: Coalescing, pause: Option<Duration>) -> u64 {
    ideal_rollouts(times, coalescing, pause).len() as u64
}

/// When the ideal reloader of [`settled_states`] rolls: the last change of each settled change
/// plus the window.
pub fn ideal_rollouts(
    times: &[Duration],
    coalescing: Coalescing,
    pause: Option<Duration>,
) -> Vec<Duration> {
    ideal_runs(times, coalescing, pause)
        .into_iter()
        .map(|(at, _)| at)
        .collect()
}

/// The settled changes of [`ideal_rollouts`]: when each rolls, and how many changes it holds.
pub fn ideal_runs(
    times: &[Duration],
    coalescing: Coalescing,
    pause: Option<Duration>,
) -> Vec<(Duration, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < times.len() {
        let first = times[i];
        let mut last = first;
        let start = i;
        i += 1;
        while i < times.len()
            && times[i].saturating_sub(last) < coalescing.window
            && times[i].saturating_sub(first) < coalescing.max
        {
            last = times[i];
            i += 1;
        }
        out.push((last + coalescing.window, i - start));
        if let Some(pause) = pause {
            let resumes = last + coalescing.window + pause;
            while i < times.len() && times[i] + coalescing.window <= resumes {
                i += 1;
            }
        }
    }
    out
}

/// The verdict on one measurement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Workloads (not deleted) whose newest rollout came after the last write of every config they
    /// read.
    pub final_reached: usize,
    /// Workloads not deleted.
    pub final_of: usize,
    /// Rollouts made: every rollout of a workload but the one its creation made.
    pub rollouts: u64,
    /// The rollouts an ideal reloader makes ([`settled_states`] of each workload's changes).
    pub settled: u64,
    /// Workloads rolled more often than their settled states.
    pub workloads_over: usize,
    /// What a reloader with a leading edge may make, as issue 26 asks: a lone change rolls at
    /// once, a burst once more when it settles, so 1 per settled change of one change and 2 per
    /// settled change of several.
    pub bound: u64,
    /// Workloads rolled more often than that bound.
    pub workloads_over_bound: usize,
    /// Those workloads, with their changes and rollouts, to read why.
    pub over_bound: Vec<OverBound>,
    /// For each data change and each workload reading it: until the workload's first rollout
    /// created after the change.
    pub latencies: Vec<Duration>,
    /// Data changes (per workload reading them) that no rollout followed.
    pub never_rolled: usize,
    /// As `latencies`, until the workload's first pod template change after the change (what
    /// the reloader writes; paused Deployments and a busy kube-controller-manager roll later).
    pub template_latencies: Vec<Duration>,
}

/// A workload rolled more often than the leading-edge bound, with what happened to it.
#[derive(Debug, Clone, PartialEq)]
pub struct OverBound {
    /// Index of the workload.
    pub workload: usize,
    /// Its bound.
    pub bound: u64,
    /// When its changes were written.
    pub changes: Vec<Duration>,
    /// When its rollouts were seen (its creation's left out).
    pub rollouts: Vec<Duration>,
    /// When it was deleted, if it was.
    pub deleted_at: Option<Duration>,
}

/// Judges `rollouts` against `writes` for `workloads`. `templates` are the pod template changes
/// seen by a watch of the workloads themselves (the first of each being its creation): what the
/// reloader wrote, before kube-controller-manager turns it into a rollout.
pub fn judge(
    workloads: &[Workload],
    writes: &[Write],
    rollouts: &[Rollout],
    templates: &[Rollout],
    coalescing: Coalescing,
) -> Verdict {
    let mut verdict = Verdict::default();
    for (index, workload) in workloads.iter().enumerate() {
        let mut own: Vec<&Rollout> = rollouts.iter().filter(|r| r.workload == index).collect();
        own.sort_by_key(|r| r.rv);
        // The first one is the workload's creation.
        let made = own.get(1..).unwrap_or_default();
        verdict.rollouts += made.len() as u64;
        // Its changes: data writes its current pods did not read, that is after its first
        // ReplicaSet (or its creation, when it has none), and before its deletion.
        let since = own.first().map_or(workload.created_rv, |r| r.rv);
        let changes: Vec<&Write> = writes
            .iter()
            .filter(|w| {
                w.kind == WriteKind::Data
                    && workload.reads.contains(&w.config)
                    && w.rv > since
                    && workload.deleted_rv.is_none_or(|d| w.rv < d)
            })
            .collect();
        let mut times: Vec<Duration> = changes.iter().map(|w| w.at).collect();
        times.sort();
        let all_runs = ideal_runs(&times, coalescing, workload.pause);
        let before_deletion = |at: &Duration| workload.deleted_at.is_none_or(|gone| *at < gone);
        let settled = all_runs
            .iter()
            .filter(|(at, _)| before_deletion(at))
            .count() as u64;
        // Every run here began before the deletion (its changes are), so a leading edge rolls its
        // first change at once; only a trailing rollout that would follow the deletion is owed
        // none.
        let bound: u64 = all_runs
            .iter()
            .map(|(at, n)| if *n > 1 && before_deletion(at) { 2 } else { 1 })
            .sum();
        verdict.settled += settled;
        verdict.bound += bound;
        if made.len() as u64 > settled {
            verdict.workloads_over += 1;
        }
        if made.len() as u64 > bound {
            verdict.workloads_over_bound += 1;
            verdict.over_bound.push(OverBound {
                workload: index,
                bound,
                changes: times.clone(),
                rollouts: made.iter().map(|r| r.at).collect(),
                deleted_at: workload.deleted_at,
            });
        }
        let mut written: Vec<&Rollout> = templates.iter().filter(|t| t.workload == index).collect();
        written.sort_by_key(|t| t.rv);
        let written = written.get(1..).unwrap_or_default();
        for change in &changes {
            match made.iter().find(|r| r.rv > change.rv) {
                Some(r) => verdict.latencies.push(r.at.saturating_sub(change.at)),
                None if workload.deleted_rv.is_some() => {}
                None => verdict.never_rolled += 1,
            }
            if let Some(t) = written.iter().find(|t| t.rv > change.rv) {
                verdict
                    .template_latencies
                    .push(t.at.saturating_sub(change.at));
            }
        }
        if workload.deleted_rv.is_some() {
            continue;
        }
        verdict.final_of += 1;
        let last_write = writes
            .iter()
            .filter(|w| w.kind != WriteKind::NoOp && workload.reads.contains(&w.config))
            .map(|w| w.rv)
            .max()
            .unwrap_or(0);
        if own.last().is_some_and(|r| r.rv > last_write) {
            verdict.final_reached += 1;
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    const TWO: Coalescing = Coalescing {
        window: Duration::from_secs(2),
        max: Duration::from_secs(300),
    };

    #[test]
    fn a_settled_change_knows_how_many_changes_it_holds() {
        let runs = ideal_runs(&[s(0.0), s(0.5), s(1.0), s(5.0)], TWO, None);
        let sizes: Vec<usize> = runs.iter().map(|(_, n)| *n).collect();
        assert_eq!(sizes, [3, 1], "a burst of 3, then a lone change");
    }

    #[test]
    fn a_burst_inside_the_window_is_one_settled_change() {
        let burst: Vec<Duration> = (0..10).map(|i| s(i as f64 * 0.1)).collect();
        assert_eq!(settled_states(&burst, TWO, None), 1);
        assert_eq!(settled_states(&[s(0.0), s(2.5), s(5.0)], TWO, None), 3);
        assert_eq!(settled_states(&[], TWO, None), 0);
        // Each change restarts the window, up to max.
        let stream: Vec<Duration> = (0..700).map(|i| s(i as f64)).collect();
        assert_eq!(settled_states(&stream, TWO, None), 3);
    }

    #[test]
    fn a_pause_folds_the_changes_before_the_resume() {
        let p = Some(s(15.0));
        // Rolled at 2 s, resumed at 17 s: the change at 14 s (its rollout at 16 s) is folded in,
        // the one at 16 s (rollout at 18 s) is not.
        assert_eq!(settled_states(&[s(0.0), s(6.0), s(14.0)], TWO, p), 1);
        assert_eq!(settled_states(&[s(0.0), s(6.0), s(16.0)], TWO, p), 2);
    }

    fn write(config: usize, at: f64, rv: u64, kind: WriteKind) -> Write {
        Write {
            config,
            at: s(at),
            rv,
            kind,
        }
    }

    fn rollout(workload: usize, at: f64, rv: u64) -> Rollout {
        Rollout {
            workload,
            at: s(at),
            rv,
        }
    }

    fn reads(configs: &[usize], created_rv: u64) -> Workload {
        Workload {
            reads: configs.to_vec(),
            created_rv,
            deleted_rv: None,
            deleted_at: None,
            pause: None,
        }
    }

    #[test]
    fn final_values_latencies_and_extra_rollouts() {
        let workloads = [reads(&[0], 10), reads(&[1], 11), reads(&[0, 1], 12)];
        let writes = [
            write(0, 0.0, 1, WriteKind::Create),
            write(1, 0.0, 2, WriteKind::Create),
            write(0, 5.0, 100, WriteKind::Data),
            write(0, 5.1, 101, WriteKind::Data),
            write(1, 6.0, 102, WriteKind::NoOp),
            write(1, 9.0, 103, WriteKind::Data),
        ];
        let rollouts = [
            // creations
            rollout(0, 0.1, 20),
            rollout(1, 0.1, 21),
            rollout(2, 0.1, 22),
            // workload 0: one per write (one more than settled), the last after the last write
            rollout(0, 5.05, 99),
            rollout(0, 5.2, 110),
            // workload 1: nothing after its change at rv 103
            // workload 2: one rollout after both configs' changes
            rollout(2, 11.0, 120),
        ];
        // Template changes: creations, then workload 2's written at 10.5 s.
        let templates = [
            rollout(0, 0.0, 15),
            rollout(1, 0.0, 16),
            rollout(2, 0.0, 17),
            rollout(2, 10.5, 119),
        ];
        let v = judge(&workloads, &writes, &rollouts, &templates, TWO);
        let mut written: Vec<u128> = v
            .template_latencies
            .iter()
            .map(Duration::as_millis)
            .collect();
        written.sort();
        assert_eq!(written, [1500, 5400, 5500]);
        assert_eq!((v.final_reached, v.final_of), (2, 3));
        assert_eq!(v.rollouts, 3);
        // 0: one burst; 1: one change; 2: the burst and, 3.9 s later, the change of config 1.
        assert_eq!(v.settled, 1 + 1 + 2);
        assert_eq!(v.workloads_over, 1);
        assert_eq!(v.never_rolled, 1);
        let mut ms: Vec<u128> = v.latencies.iter().map(Duration::as_millis).collect();
        ms.sort();
        // 0: 5.0 → 5.2 (rv 110: the one at rv 99 was made before the write), 5.1 → 5.2;
        // 2: 5.0 → 11, 5.1 → 11, 9 → 11.
        assert_eq!(ms, [100, 200, 2000, 5900, 6000]);
    }

    #[test]
    fn a_workload_deleted_before_its_ideal_rollout_needs_none() {
        let mut gone = reads(&[0], 10);
        gone.deleted_rv = Some(50);
        gone.deleted_at = Some(s(2.5));
        let writes = [
            write(0, 0.0, 1, WriteKind::Create),
            write(0, 1.0, 40, WriteKind::Data),
        ];
        let v = judge(&[gone], &writes, &[rollout(0, 0.5, 11)], &[], TWO);
        assert_eq!((v.settled, v.rollouts, v.final_of), (0, 0, 0));
    }

    #[test]
    fn a_deleted_workload_owes_a_leading_edge_for_changes_before_its_deletion_only() {
        let mut gone = reads(&[0], 10);
        gone.deleted_rv = Some(50);
        gone.deleted_at = Some(s(4.0));
        let writes = [
            write(0, 0.0, 1, WriteKind::Create),
            // Its life: a lone change settled (rolls at 2.5 s), then one whose trailing rollout
            // (at 5.5 s) would follow the deletion: a leading edge still rolls it at 3.5 s.
            write(0, 0.5, 20, WriteKind::Data),
            write(0, 3.5, 40, WriteKind::Data),
            // After the deletion: not its changes, however many.
            write(0, 4.5, 60, WriteKind::Data),
            write(0, 7.0, 70, WriteKind::Data),
            write(0, 9.5, 80, WriteKind::Data),
        ];
        let rollouts = [
            rollout(0, 0.1, 11),
            rollout(0, 0.6, 21),
            rollout(0, 3.6, 41),
        ];
        let v = judge(&[gone], &writes, &rollouts, &[], TWO);
        assert_eq!((v.rollouts, v.settled, v.bound), (2, 1, 2));
        assert_eq!((v.workloads_over, v.workloads_over_bound), (1, 0));
    }

    #[test]
    fn deleted_and_late_workloads() {
        let mut gone = reads(&[0], 10);
        gone.deleted_rv = Some(50);
        gone.deleted_at = Some(s(3.5));
        let late = reads(&[0], 60);
        let writes = [
            write(0, 0.0, 1, WriteKind::Create),
            write(0, 1.0, 40, WriteKind::Data),
            write(0, 2.0, 70, WriteKind::Data),
        ];
        // The late workload's only ReplicaSet is its creation, after the last write: its pods read
        // it, no rollout is needed.
        let rollouts = [rollout(0, 0.5, 11), rollout(1, 2.5, 71)];
        let v = judge(&[gone, late], &writes, &rollouts, &[], TWO);
        assert_eq!((v.final_reached, v.final_of), (1, 1));
        assert_eq!(v.rollouts, 0);
        // The deleted one had one change in its life and went 2.5 s later, after its ideal
        // rollout: a settled state, and not a lost value when it went first.
        assert_eq!(v.settled, 1);
        assert_eq!(v.never_rolled, 0);
        assert_eq!(v.workloads_over, 0);
    }
}
