#![doc = include_str!("../README.md")]
//!
//! # Modules
//! - [`audit`]: offline, over a set of objects: which workloads roll for which config, and why.
//! - [`consumers`]: which ConfigMaps/Secrets a pod template consumes, and which keys it reads.
//! - [`filters`]: Reloader's namespace, config and workload-kind filters (its flags).
//! - [`settings`]: per-workload rollout settings (debounce, Reloader's pause-period and
//!   rollout-strategy).
//! - [`workload`]: Deployment, StatefulSet, DaemonSet, CronJob, Job and Argo Rollouts' Rollout as
//!   one [`Workload`].
//! - [`source`]: what a workload rolls for: ConfigMaps, Secrets and (secrets-store CSI driver)
//!   SecretProviderClasses.
//! - [`job`]: how a Job is re-created to roll it.
//! - [`opt_in`]: the Reloader and wave annotations, and the configs a workload watches.
//! - [`hash`]: the SHA-256 content hash over exactly what the pods read.
//! - [`patch`]: the rollout decision and its server-side-apply patch.
//! - [`memory`]: what the controller remembers of each workload (its baseline), kept out of the
//!   workloads.
//! - [`policy`]: `ReloadPolicy`, cluster-wide opt-in without annotations.
//! - [`index`]: config → workloads, on watch-index's reverse index.
//! - `runtime` (feature `runtime`): the controller itself, to embed: shared watches in, rollouts
//!   out, on conflux-runtime's work queue (a leading edge, a coalescing window, a cluster-wide
//!   rate limit).
//!
//! The crate does no I/O: no client, no clock, no tasks (docs/design.md section 1 and 5).

pub mod audit;
pub mod consumers;
mod error;
pub mod filters;
pub mod hash;
pub mod index;
pub mod job;
pub mod memory;
pub mod opt_in;
pub mod patch;
pub mod policy;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod settings;
pub mod source;
pub mod workload;

pub use error::{Error, Result};
pub use source::SourceKind;
pub use workload::{Rollout, Workload, WorkloadKind};
