//! What the flux-trigger's queue carries for one Flux object ([`Work`]), and how a fired change
//! goes through the queue ([`Wave`]): its referrers are added one `dependsOn` depth at a time,
//! each depth once every object of the one before it was handled, and when the last is handled
//! the wave is reported once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use conflux_runtime::queue::Payload;
use conflux_runtime::sync::lock;
use tokio::sync::mpsc;

use crate::refs::{ConfigKey, KUSTOMIZE_GROUP, ObjectRef};
use crate::runtime::trigger::{ConfigChange, Fired};

/// The work pending for one Flux object; merged when the object is added again.
#[derive(Debug, Default)]
pub(super) struct Work {
    /// The fired changes that ask for a reconcile request, by wave.
    asks: BTreeMap<u64, Arc<Ticket>>,
    /// Start-up: compare the digest recorded on the object with its configs now.
    catch_up: Option<Arc<Attempt>>,
    /// First sight while running: record the digest when the object has none.
    record: bool,
}

impl Payload for Work {
    fn merge(&mut self, other: Self) {
        self.asks.extend(other.asks);
        if self.catch_up.is_none() {
            self.catch_up = other.catch_up;
        }
        self.record |= other.record;
    }
}

impl Work {
    /// Asked for by one wave.
    pub(super) fn ask(ticket: Ticket) -> Self {
        Work {
            asks: BTreeMap::from([(ticket.wave.id, Arc::new(ticket))]),
            ..Work::default()
        }
    }

    /// The start-up comparison, counted in `pending` until attempted.
    pub(super) fn catch_up(pending: &Arc<AtomicUsize>) -> Self {
        pending.fetch_add(1, Ordering::AcqRel);
        Work {
            catch_up: Some(Arc::new(Attempt {
                pending: pending.clone(),
                done: AtomicBool::new(false),
            })),
            ..Work::default()
        }
    }

    /// A first-sight record.
    pub(super) fn record() -> Self {
        Work {
            record: true,
            ..Work::default()
        }
    }

    /// What a handler takes along (the queue lends the payload only while it hands it out).
    pub(super) fn view(&self) -> View {
        View {
            asks: self.asks.values().cloned().collect(),
            catch_up: self.catch_up.clone(),
            record: self.record,
        }
    }
}

/// A handler's copy of a [`Work`].
#[derive(Debug)]
pub(super) struct View {
    /// The waves asking for a request.
    pub(super) asks: Vec<Arc<Ticket>>,
    /// The start-up comparison, if pending.
    pub(super) catch_up: Option<Arc<Attempt>>,
    /// Whether a first-sight record is wanted.
    pub(super) record: bool,
}

impl View {
    /// Says how the handling of `object` went to every wave asking (once each) and ends the
    /// catch-up's attempt; the steps that follow for the waves.
    pub(super) fn finish(&self, object: &ObjectRef, outcome: Outcome) -> Vec<Step> {
        if let Some(attempt) = &self.catch_up {
            attempt.finish();
        }
        self.asks
            .iter()
            .filter_map(|ticket| ticket.finish(Some(object), outcome))
            .collect()
    }
}

/// One start-up comparison, counted until attempted once (readiness waits for them all; a
/// failed write is retried, but does not hold readiness).
#[derive(Debug)]
pub(super) struct Attempt {
    pending: Arc<AtomicUsize>,
    done: AtomicBool,
}

impl Attempt {
    fn finish(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.finish();
    }
}

/// How the handling of one object went, for the waves that asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The request was written.
    Requested,
    /// This state of its configs was requested before.
    Already,
    /// The write failed; it is retried with backoff.
    Failed,
    /// The object is gone (or being deleted).
    Gone,
}

/// What comes next for a wave, for the task that adds to the queue.
#[derive(Debug)]
pub(super) enum Step {
    /// Add the objects of depth `.1`.
    Depth(Arc<Wave>, usize),
    /// Every object was handled: report the wave.
    Done(Arc<Wave>),
}

/// One fired change on its way through the queue.
#[derive(Debug)]
pub(super) struct Wave {
    id: u64,
    /// The ConfigMap/Secret that changed.
    pub(super) source: ConfigKey,
    /// What happened to it.
    pub(super) change: ConfigChange,
    /// Its referrers: the Kustomizations depth by depth of their `dependsOn` order, then the
    /// other kinds (which have no order).
    depths: Vec<Vec<ObjectRef>>,
    progress: Mutex<Progress>,
    steps: mpsc::UnboundedSender<Step>,
}

/// Where a wave is, and what came of it so far.
#[derive(Debug, Default)]
struct Progress {
    /// The depth being handled, and how many of its objects are not yet.
    depth: usize,
    remaining: usize,
    /// The objects requested (the first [`NAMED`], for the report), and the counts.
    named: Vec<ObjectRef>,
    requested: usize,
    already: usize,
    failed: usize,
}

/// Objects a wave's report names.
const NAMED: usize = 10;

impl Wave {
    /// A wave for `fired`, numbered `id`, reporting its steps on `steps`; `None` when it has no
    /// referrers.
    pub(super) fn new(id: u64, fired: Fired, steps: mpsc::UnboundedSender<Step>) -> Option<Self> {
        let mut depths: Vec<Vec<ObjectRef>> = Vec::new();
        let mut unordered = Vec::new();
        for (i, object) in fired.order.order.into_iter().enumerate() {
            if object.group.as_ref() == KUSTOMIZE_GROUP {
                let depth = fired.order.depths.get(i).copied().unwrap_or(i);
                if depths.len() <= depth {
                    depths.resize_with(depth + 1, Vec::new);
                }
                depths[depth].push(object);
            } else {
                unordered.push(object);
            }
        }
        depths.push(unordered);
        depths.retain(|d| !d.is_empty());
        let remaining = depths.first()?.len();
        Some(Wave {
            id,
            source: fired.source,
            change: fired.change,
            depths,
            progress: Mutex::new(Progress {
                remaining,
                ..Progress::default()
            }),
            steps,
        })
    }

    /// The objects of `depth`, each with its ticket.
    pub(super) fn depth(self: &Arc<Self>, depth: usize) -> Vec<(ObjectRef, Ticket)> {
        self.depths
            .get(depth)
            .map(|objects| {
                objects
                    .iter()
                    .map(|o| {
                        let ticket = Ticket {
                            wave: self.clone(),
                            done: AtomicBool::new(false),
                        };
                        (o.clone(), ticket)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many objects it asks for.
    pub(super) fn len(&self) -> usize {
        self.depths.iter().map(Vec::len).sum()
    }

    /// One object of the current depth was handled with `outcome`.
    fn handled(self: &Arc<Self>, object: Option<&ObjectRef>, outcome: Outcome) -> Option<Step> {
        let mut progress = lock(&self.progress);
        match outcome {
            Outcome::Requested => {
                progress.requested += 1;
                if let Some(object) = object
                    && progress.named.len() < NAMED
                {
                    progress.named.push(object.clone());
                }
            }
            Outcome::Already => progress.already += 1,
            Outcome::Failed => progress.failed += 1,
            Outcome::Gone => {}
        }
        progress.remaining = progress.remaining.saturating_sub(1);
        if progress.remaining > 0 {
            return None;
        }
        progress.depth += 1;
        match self.depths.get(progress.depth) {
            Some(next) => {
                progress.remaining = next.len();
                Some(Step::Depth(self.clone(), progress.depth))
            }
            None => Some(Step::Done(self.clone())),
        }
    }

    /// The wave's report (for its Event), or `None` when it requested nothing.
    pub(super) fn report(&self) -> Option<String> {
        let progress = lock(&self.progress);
        if progress.requested == 0 {
            return None;
        }
        let names: Vec<String> = progress
            .named
            .iter()
            .map(|o| format!("{}/{}", o.kind, o.name))
            .collect();
        let more = progress.requested.saturating_sub(names.len());
        let mut note = format!(
            "{} {}/{} was {}d; requested reconciliation of {}",
            self.source.kind,
            self.source.namespace,
            self.source.name,
            self.change.as_str(),
            names.join(", ")
        );
        if more > 0 {
            note.push_str(&format!(" and {more} more"));
        }
        if progress.already > 0 {
            note.push_str(&format!(
                " ({} had been requested for this state already)",
                progress.already
            ));
        }
        if progress.failed > 0 {
            note.push_str(&format!(" ({} failed and are retried)", progress.failed));
        }
        Some(note)
    }
}

/// One object's place in a wave: handled once, whatever the number of attempts.
#[derive(Debug)]
pub(super) struct Ticket {
    wave: Arc<Wave>,
    done: AtomicBool,
}

impl Ticket {
    /// The wave it belongs to.
    pub(super) fn wave(&self) -> &Arc<Wave> {
        &self.wave
    }

    /// Marks `object` handled for its wave (the first time only); the wave's next step when
    /// this was the last object of its depth.
    fn finish(&self, object: Option<&ObjectRef>, outcome: Outcome) -> Option<Step> {
        if self.done.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.wave.handled(object, outcome)
    }
}

impl Drop for Ticket {
    /// A ticket dropped unhandled (its queue went away) still counts, so the wave's later
    /// depths and report are not held forever; the step goes to the adding task, never to the
    /// queue directly (this may run while the queue is locked).
    fn drop(&mut self) {
        if let Some(step) = self.finish(None, Outcome::Gone) {
            let _ = self.wave.steps.send(step);
        }
    }
}
