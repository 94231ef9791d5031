//! Settings of the reload controller.

use std::collections::BTreeSet;
use std::time::Duration;

use conflux_watch_index::selector::Selector;

use crate::WorkloadKind;
use crate::filters::NamespaceFilter;
use crate::opt_in::Options;

/// Default of `--reload-debounce`.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(2);
/// Default of `--reload-debounce-max`.
pub const DEFAULT_DEBOUNCE_MAX: Duration = Duration::from_secs(300);
/// Default of `--reload-settle`: long enough for the ConfigMap and the Secret one Flux apply
/// writes (kustomize-controller applies them one after the other, milliseconds apart), short
/// enough that a lone change rolls at once.
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(100);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// `--watch-label-selector`: which workloads are handled (sharding).
    pub object_selector: Selector,
    /// `--reload-settle`: how long the first change to a quiet workload waits for its companions
    /// (configs written together roll once).
    pub settle: Duration,
    /// `--reload-debounce`: after a rollout, how long changes are coalesced into one more
    /// rollout, which comes once they stop for this long.
    pub debounce: Duration,
    /// `--reload-debounce-max`: the longest a stream of changes may postpone that rollout,
    /// counted from the first of them (at least `debounce`).
    pub debounce_max: Duration,
    /// `--reload-rate`: rollouts per second, cluster-wide (`0`: unlimited).
    pub rate: f64,
    /// `--reload-burst`: rollouts allowed at once before the rate applies.
    pub burst: u32,
    /// `--concurrent`: config reads and patches in flight.
    pub concurrent: usize,
    /// Reloader's global options (`--auto-reload-all`, `--reload-on-create`,
    /// `--reload-on-delete`, `--resources-to-ignore`, `--reload-strategy`).
    pub options: Options,
    /// `--namespace-selector` and `--namespaces-to-ignore`: the namespaces served.
    pub namespaces: NamespaceFilter,
    /// `--resource-label-selector`: only ConfigMaps/Secrets with matching labels are watched.
    pub config_selector: Selector,
    /// `--ignored-workload-types`: kinds not watched at all.
    pub ignored_kinds: BTreeSet<WorkloadKind>,
    /// `--is-argo-rollouts`: Argo Rollouts' Rollouts are watched and rolled too (their CRD and
    /// RBAC must exist). The CSI integration is [`Options::csi_integration`].
    pub argo_rollouts: bool,
    /// The controller's own namespace (`--runtime-namespace` in `conflux run`): where its memory
    /// ([`crate::memory`] Secrets) and a Job's re-creation ([`crate::job::Record`] Secrets) are
    /// kept; the controller needs `get`, `list`, `create`, `patch` and `delete` on Secrets
    /// there. `None`: both live in memory only, and a restart adopts every workload again.
    pub records_namespace: Option<String>,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            namespace: None,
            object_selector: Selector::everything(),
            settle: DEFAULT_SETTLE,
            debounce: DEFAULT_DEBOUNCE,
            debounce_max: DEFAULT_DEBOUNCE_MAX,
            rate: 5.0,
            burst: 10,
            concurrent: 4,
            options: Options::default(),
            namespaces: NamespaceFilter::default(),
            config_selector: Selector::everything(),
            ignored_kinds: BTreeSet::new(),
            argo_rollouts: false,
            records_namespace: None,
        }
    }
}
