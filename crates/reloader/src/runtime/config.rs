//! Settings of the reload controller.

use super::*;

/// Default of `--reload-debounce`.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(2);
/// Default of `--reload-debounce-max`.
pub const DEFAULT_DEBOUNCE_MAX: Duration = Duration::from_secs(300);

/// Settings of the controller (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// `--watch-label-selector`: which workloads are handled (sharding).
    pub object_selector: Selector,
    /// `--reload-debounce`: how long a config event waits for others before its workloads are
    /// evaluated; each further event restarts the wait.
    pub debounce: Duration,
    /// `--reload-debounce-max`: the longest a stream of events may postpone an evaluation,
    /// counted from the first event (at least `debounce`).
    pub debounce_max: Duration,
    /// `--reload-rate`: rollouts per second, cluster-wide.
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
    /// Where a Job's re-creation is written down ([`crate::job::Record`] Secrets) until its
    /// replacement exists, so that a restart finishes it (`--runtime-namespace` in `conflux
    /// run`; the controller needs `create` and `delete` on Secrets there). `None`: the
    /// replacement is kept in memory only.
    pub records_namespace: Option<String>,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            namespace: None,
            object_selector: Selector::everything(),
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
