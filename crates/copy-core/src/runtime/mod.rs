//! The copy and fan-out controllers, to embed (feature `runtime`): the async kube glue around the
//! pure modules, on conflux-runtime's shared watches (docs/design.md section 4).
//!
//! - [`copy`]: pull copies (`fluxcd.controlplane.io/copyFrom`, `reflects`, `replicate-from`).
//! - [`sync`]: fan-out copies (`ConfigSync`, and sources annotated by kopy, reflector, replicator).
//! - [`executor`]: the reads and writes of copies, each bounded in time.
//! - [`protect`]: the admission webhook that protects sources, and the labeller that marks them.
//! - [`protect_policy`]: the same protection as a ValidatingAdmissionPolicy the API server
//!   enforces (`--protect-mode=admission-policy`).
//!
//! Both controllers take the process's [`ConfigWatches`](conflux_runtime::ConfigWatches):
//! no watch of their own on ConfigMaps or Secrets.

pub mod copy;
pub mod executor;
pub mod protect;
pub mod protect_policy;
pub mod sync;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of a write (or decision not to write) made by the copy and sync controllers.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplyLabels {
    /// `copy` or `sync`.
    pub controller: String,
    /// What happened: `apply`, `recreate`, `create`, `update`, `delete`, `unchanged`, or the
    /// reason of a failure (`SourceNotFound`, `Refused`, `Conflict`, ...).
    pub result: String,
}

/// Metrics of the copy and sync controllers.
#[derive(Debug, Default)]
pub struct CopyMetrics {
    /// `copy_applies_total`.
    pub applies: Family<ApplyLabels, Counter>,
}

impl CopyMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "copy_applies",
            "Copies written (or found in sync, or failed) by the copy and sync controllers",
            self.applies.clone(),
        );
    }
}

/// `--concurrent` as a kube controller's limit.
fn concurrency(concurrent: usize) -> u16 {
    u16::try_from(concurrent.max(1)).unwrap_or(u16::MAX)
}

/// The requeue of an object whose reconcile failed: the resync interval when retrying cannot
/// help (`wait`: its next change is seen by the watch; the resync only guards against a missed
/// event), else the object's next backoff delay. Logged at debug, `controller` first.
fn requeue_after_error(
    backoff: &conflux_runtime::backoff::KeyedBackoff<String>,
    key: String,
    err: &crate::Error,
    wait: bool,
    controller: &str,
) -> kube::runtime::controller::Action {
    use kube::runtime::controller::Action;
    if wait {
        tracing::debug!(object = %key, reason = err.reason(), "{controller}: waiting for a change");
        return Action::requeue(copy::RESYNC_INTERVAL);
    }
    let delay = backoff.next(key.clone());
    tracing::debug!(object = %key, reason = err.reason(), retry_in_seconds = delay.as_secs_f64(), "{controller}: retrying with backoff");
    Action::requeue(delay)
}

/// [`requeue_after_error`] for a ConfigMap or Secret of `kind` (keyed `Kind/namespace/name`).
fn requeue_object<K: kube::ResourceExt>(
    backoff: &conflux_runtime::backoff::KeyedBackoff<String>,
    kind: crate::SourceKind,
    obj: &K,
    err: &crate::Error,
    wait: bool,
    controller: &str,
) -> kube::runtime::controller::Action {
    let namespace = obj.namespace().unwrap_or_default();
    let key = format!("{kind}/{namespace}/{}", obj.name_any());
    requeue_after_error(backoff, key, err, wait, controller)
}
