//! The wiring of `conflux run` (flags, the library runtimes, metrics and health endpoints,
//! telemetry), as a library so tests can check the flags in-process.
//!
//! Decisions live in the pure halves of `watch-index`, `copy-core`, `postbuild-subst` and
//! `reloader`; watches, schedulers and executors in their `runtime` halves. This crate only wires.

pub mod metrics;
pub mod run;
pub mod telemetry;
