//! Which workloads consume which ConfigMaps and Secrets, content hashes and rollout patches.
//!
//! This crate will hold the pure decisions behind conflux's `reload` controller (DESIGN.md
//! section 5). It does no I/O. The capability is tracked by its own issue; the crate exists now so
//! the workspace layout is final.

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {}
