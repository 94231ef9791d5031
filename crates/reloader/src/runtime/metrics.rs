//! Metrics of the reload controller.

use super::*;

/// Labels of a rollout written by the reload controller.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// Workload kind (`Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`).
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels of a reload decision.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `none`, `baseline`, `rollout`, `held` (a required config is missing), `throttled` or
    /// `deferred` (a change found through a workload event waits one coalescing window).
    pub action: String,
}

/// Metrics of the reload controller.
#[derive(Debug, Default)]
pub struct ReloadMetrics {
    /// `reload_rollouts_total`.
    pub rollouts: Family<RolloutLabels, Counter>,
    /// `reload_decisions_total`.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `reload_pending`.
    pub pending: Gauge,
    /// `reload_workloads`.
    pub workloads: Gauge,
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
            "Reload evaluations by outcome (none, baseline, rollout, held, throttled, deferred)",
            self.decisions.clone(),
        );
        registry.register(
            "reload_pending",
            "Workloads waiting for evaluation (coalescing window, throttle or retry)",
            self.pending.clone(),
        );
        registry.register(
            "reload_workloads",
            "Opted-in workloads in the reload controller's index",
            self.workloads.clone(),
        );
    }
}
