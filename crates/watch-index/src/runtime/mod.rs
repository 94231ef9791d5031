//! The watch-configs runtime (feature `runtime`): Flux's behaviour on a live cluster, on the
//! process machinery of `conflux-runtime` (its [`Runtime`](conflux_runtime::Runtime), informers
//! and health).
//!
//! - [`trigger`]: Flux's watch-configs behaviour as a stream: config change → the referrers to
//!   reconcile, with the first-list baseline and both trigger modes.
//! - [`flux_trigger`]: the flux-trigger controller (`reconcile.fluxcd.io/requestedAt` on Flux
//!   objects).

pub mod flux_trigger;
#[cfg(test)]
mod test_support;
pub mod trigger;

use kube::runtime::watcher;

/// The watcher configuration for objects sharded by `selector` (`--watch-label-selector`).
pub fn sharded(selector: &crate::selector::Selector) -> watcher::Config {
    let wc = watcher::Config::default();
    if selector.is_empty() {
        wc
    } else {
        wc.labels(&selector.to_string())
    }
}
