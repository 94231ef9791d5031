//! Metrics of the shared watch layer. Registered by the embedding binary into its registry (the
//! `conflux` binary registers them under the `conflux_` prefix).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming a watched resource.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The watched kind (`ConfigMap`, `Secret`, `ConfigSync`, `Deployment`, ...).
    pub resource: String,
}

impl ResourceLabels {
    /// Labels for `resource`.
    pub fn new(resource: &str) -> Self {
        ResourceLabels {
            resource: resource.to_owned(),
        }
    }
}

/// What every informer reports.
#[derive(Debug, Default)]
pub struct WatchMetrics {
    /// `watch_errors_total`: watch errors, each retried with backoff.
    pub errors: Family<ResourceLabels, Counter>,
    /// `watch_events_total`: events received (list items included).
    pub events: Family<ResourceLabels, Counter>,
    /// `watch_last_event_timestamp_seconds`: when the last event arrived (`time() - x` is its age).
    pub last_event: Family<ResourceLabels, Gauge<f64, AtomicU64>>,
    /// `watch_synced`: 1 when the kind is listed and its watch is healthy.
    pub synced: Family<ResourceLabels, Gauge>,
    /// `watch_objects`: objects in the shared store.
    pub objects: Family<ResourceLabels, Gauge>,
    /// `watch_relists_total`: re-lists after the first (410 Gone, restarts), each diffed.
    pub relists: Family<ResourceLabels, Counter>,
}

impl WatchMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "watch_errors",
            "Errors of the shared watches (each is retried with backoff)",
            self.errors.clone(),
        );
        registry.register(
            "watch_events",
            "Events received by the shared watches, list items included",
            self.events.clone(),
        );
        registry.register(
            "watch_last_event_timestamp_seconds",
            "Unix time of the last event of each shared watch",
            self.last_event.clone(),
        );
        registry.register(
            "watch_synced",
            "1 when the kind is listed and its watch is healthy",
            self.synced.clone(),
        );
        registry.register(
            "watch_objects",
            "Objects held by each shared watch",
            self.objects.clone(),
        );
        registry.register(
            "watch_relists",
            "Re-lists after the first one (410 Gone, apiserver restarts), each diffed against the store",
            self.relists.clone(),
        );
    }
}
