//! The wiring of `conflux run` (flags, the library runtimes, metrics and health endpoints,
//! telemetry), as a library so tests can check the flags in-process.
//!
//! Decisions live in the pure halves of `watch-index`, `copy-core`, `postbuild-subst` and
//! `reloader`; watches, schedulers and executors in their `runtime` halves. This crate only wires.

mod error;
pub mod fleet;
pub mod kustomize;
pub mod metrics;
pub mod run;
pub mod telemetry;

pub use error::{Error, Result};
