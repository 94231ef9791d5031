//! Copy and fan-out sync semantics for ConfigMaps and Secrets.
//!
//! This crate will hold the pure decisions behind conflux's `copy` and `sync` controllers
//! (DESIGN.md section 4): parsing `fluxcd.controlplane.io/copyFrom`, computing the desired copy,
//! the consent check, the fan-out namespace set and the create/update/delete plan. It does no I/O.
//! The capability is tracked by its own issue; the crate exists now so the workspace layout is final.

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {}
