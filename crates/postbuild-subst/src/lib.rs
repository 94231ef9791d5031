//! Flux post-build variable substitution, byte-for-byte (docs/design.md section 2). Pure: no I/O.
//!
//! Layers, bottom up:
//! - [`envsubst`]: the `${VAR}` expression language of fluxcd/pkg `envsubst`, strict and not.
//! - [`yaml`]: the go-yaml v2 behaviour around it: `JSONToYAML` before, `YAMLToJSON` after.
//! - the resource layer: what kustomize-controller does for one built resource, and [`stream`]
//!   for a stream of them (`conflux build`).

#![doc = include_str!("../README.md")]

pub mod audit;
pub mod envsubst;
mod error;
pub mod json;
mod redact;
pub mod resource;
pub mod resource_set;
pub mod stream;
pub mod vars;
pub mod yaml;

pub use error::Error;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
