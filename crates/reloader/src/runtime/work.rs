//! The controller's work, as keys of its one queue, and what a key carries.

use std::collections::BTreeSet;

use conflux_runtime::queue::Payload;
use conflux_watch_index::refs::ObjectRef;

use crate::source::SourceKind;

/// One piece of work, a key of the queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Work {
    /// Hash what a workload reads and decide.
    Evaluate(ObjectRef),
    /// An attempt at a Job's re-creation.
    Recreate(ObjectRef),
    /// The end of a Deployment's pause period.
    Resume(ObjectRef),
    /// Write the shards of the memory that changed.
    Save,
}

/// Why a workload is evaluated: the configs whose events scheduled it (names only, for the
/// `Reloaded` Event when the changes themselves are not known).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Causes(pub(crate) BTreeSet<(SourceKind, String)>);

impl Causes {
    /// One cause.
    pub(crate) fn of(kind: SourceKind, name: &str) -> Self {
        Causes(BTreeSet::from([(kind, name.to_owned())]))
    }
}

impl Payload for Causes {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_merge_and_work_sorts_evaluations_first() {
        let mut a = Causes::of(SourceKind::ConfigMap, "app");
        a.merge(Causes::of(SourceKind::Secret, "creds"));
        a.merge(Causes::of(SourceKind::ConfigMap, "app"));
        assert_eq!(a.0.len(), 2);
        let web = ObjectRef::new("apps", "Deployment", "ns", "web");
        let mut work = [
            Work::Save,
            Work::Resume(web.clone()),
            Work::Evaluate(web.clone()),
        ];
        work.sort();
        assert_eq!(work[0], Work::Evaluate(web));
    }
}
