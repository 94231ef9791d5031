//! The controllers of `conflux run` and what they share (telemetry, metrics, health), as a
//! library so the end-to-end tests can run them in-process against a real API server.
//!
//! The decisions live in the pure crates (`watch-index`, `copy-core`, `postbuild-subst`,
//! `reloader`); this crate observes the cluster, asks them, applies the difference and reports.

pub mod controllers;
pub mod metrics;
pub mod run;
pub mod telemetry;
