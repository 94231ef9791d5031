//! One workload of an evaluation batch: what it watches, its state, and its configs' hashes as
//! the reads come in.

use std::collections::{BTreeMap, HashMap};

use conflux_watch_index::refs::{ConfigKind, ObjectRef};

use super::cache::Cached;
use super::work::Causes;
use crate::hash::ConfigHash;
use crate::opt_in::Watch;
use crate::patch::WorkloadState;
use crate::source::ProviderObject;

/// One workload of the batch, ready to be hashed.
pub(super) struct Plan {
    pub(super) object: ObjectRef,
    /// The informer's copy: the batch holds no typed copy; a rollout types it ([`Cached::typed`]).
    pub(super) workload: Cached,
    pub(super) watch: Watch,
    pub(super) state: WorkloadState,
    /// What its pods mounted from each SecretProviderClass it watches (CSI integration).
    pub(super) mounts: HashMap<String, Vec<ProviderObject>>,
    pub(super) causes: Causes,
    /// Each candidate config's hash, as its read comes in.
    pub(super) hashes: BTreeMap<(ConfigKind, String), ConfigHash>,
    /// Each candidate config's `resourceVersion` when read (`None`: absent).
    pub(super) versions: BTreeMap<(ConfigKind, String), Option<String>>,
}

impl Plan {
    /// The uid of the workload.
    pub(super) fn uid(&self) -> String {
        self.workload.uid().unwrap_or_default().to_owned()
    }

    /// Records the hash of its `j`th candidate config, read (or cached) at `version`.
    pub(super) fn record(&mut self, j: usize, hash: ConfigHash, version: Option<&str>) {
        let Some(c) = self.watch.candidates.get(j) else {
            return;
        };
        let id = (c.consumption.kind, c.consumption.name.clone());
        self.versions.insert(id.clone(), version.map(str::to_owned));
        self.hashes.insert(id, hash);
    }
}
