//! Kubernetes label selectors, Flux reference extraction and a reverse index of ConfigMap/Secret
//! referrers (docs/design.md section 3). Pure: no I/O, no `kube::Client`.
#![doc = include_str!("../README.md")]

pub mod audit;
pub mod config_selector;
mod error;
pub mod glob;
pub mod index;
pub mod redact;
pub mod refs;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod selector;
pub mod trigger;

pub use error::Error;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
