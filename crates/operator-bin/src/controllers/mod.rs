//! One module per controller of `conflux run`.

mod common;
pub mod copy;
pub mod flux_trigger;
pub mod reload;
pub mod sync;

use std::fmt;
use std::str::FromStr;

/// The controllers `--controllers` can name (DESIGN.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerName {
    /// Pull copies (`fluxcd.controlplane.io/copyFrom`).
    Copy,
    /// Fan-out sync (`ConfigSync`, kopy annotations).
    Sync,
    /// Workload rollouts on config change.
    Reload,
    /// `reconcile.fluxcd.io/requestedAt` on Flux objects whose referenced config changed.
    FluxTrigger,
}

impl ControllerName {
    /// Every controller, in the order `--help` lists them.
    pub const ALL: [ControllerName; 4] = [
        ControllerName::Copy,
        ControllerName::Sync,
        ControllerName::Reload,
        ControllerName::FluxTrigger,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::Copy => "copy",
            ControllerName::Sync => "sync",
            ControllerName::Reload => "reload",
            ControllerName::FluxTrigger => "flux-trigger",
        }
    }

    /// Whether this build of conflux can run the controller yet.
    pub fn is_implemented(self) -> bool {
        matches!(
            self,
            ControllerName::FluxTrigger
                | ControllerName::Copy
                | ControllerName::Sync
                | ControllerName::Reload
        )
    }
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ControllerName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ControllerName::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = ControllerName::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown controller '{s}', expected one of: {}",
                    names.join(", ")
                )
            })
    }
}
