#![doc = include_str!("../README.md")]

pub mod audit;
pub mod config_sync;
pub mod consent;
pub mod copy_from;
pub mod desired;
mod error;
pub mod fan_out;
pub mod ownership;
pub mod patterns;
pub mod protect;
pub mod protect_crd;
pub mod protect_policy;
pub mod reflector;
pub mod replicator;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod selection;
pub mod source;
pub mod status;
pub mod steps;

#[cfg(feature = "kube")]
pub use config_sync::ConfigSync;
pub use config_sync::{ConfigSyncSpec, ConfigSyncStatus};
pub use desired::{DesiredCopy, WriteMode};
pub use error::{ConflictingSources, Error, SecretTypeConflict};
pub use fan_out::{FanOut, Predecessor};
pub use ownership::Owner;
#[cfg(feature = "kube")]
pub use protect_crd::ProtectPolicy;
pub use selection::{NamespaceView, Selection};
pub use source::{ConfigObject, SourceKind, SourceRef};
pub use steps::{Step, plan_deletion, plan_sync};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the unit tests of this crate share.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;

    /// A label or annotation map from pairs.
    pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }
}
