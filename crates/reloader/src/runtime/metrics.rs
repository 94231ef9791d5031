//! Metrics of the reload controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a rollout written by the reload controller.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// Workload kind (`Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`, `Rollout`).
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels of a reload decision.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `none`, `remember` (a new baseline, remembered; nothing written to the workload),
    /// `rollout`, `held` (a required config is missing) or `throttled` (`--reload-rate`).
    pub action: String,
}

/// Labels of config reads.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// `get` (one object) or `list` (a page).
    pub how: String,
}

/// Metrics of the reload controller.
#[derive(Debug, Default)]
pub struct ReloadMetrics {
    /// `reload_rollouts_total`.
    pub rollouts: Family<RolloutLabels, Counter>,
    /// `reload_decisions_total`.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `reload_config_reads_total`: requests that read config data.
    pub reads: Family<ReadLabels, Counter>,
    /// `reload_pending`.
    pub pending: Gauge,
    /// `reload_workloads`.
    pub workloads: Gauge,
    /// `reload_memory_entries`: workloads whose baseline is remembered.
    pub memory_entries: Gauge,
    /// `reload_memory_unsaved`: workloads whose baseline is not written to the memory's Secrets
    /// (a write failing, or a shard full); a restart adopts them again.
    pub memory_unsaved: Gauge,
}

impl ReloadMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reload_rollouts",
            "Rollouts written by the reload controller (pod-template hash changed)",
            self.rollouts.clone(),
        );
        registry.register(
            "reload_decisions",
            "Reload evaluations by outcome (none, remember, rollout, held, throttled)",
            self.decisions.clone(),
        );
        registry.register(
            "reload_config_reads",
            "Requests that read ConfigMap/Secret data (get: one object, list: one page)",
            self.reads.clone(),
        );
        registry.register(
            "reload_pending",
            "Work waiting in the reload controller's queue",
            self.pending.clone(),
        );
        registry.register(
            "reload_workloads",
            "Opted-in workloads in the reload controller's index",
            self.workloads.clone(),
        );
        registry.register(
            "reload_memory_entries",
            "Workloads whose baseline the reload controller remembers",
            self.memory_entries.clone(),
        );
        registry.register(
            "reload_memory_unsaved",
            "Workloads whose baseline is not written to the memory's Secrets yet",
            self.memory_unsaved.clone(),
        );
    }
}
