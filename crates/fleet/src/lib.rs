#![doc = include_str!("../README.md")]
//!
//! A Flux fleet repository read as Flux builds it, for `conflux plan`: the clusters and their
//! Kustomization graphs ([`fleet`]), and each Kustomization's objects as kustomize-controller
//! builds them ([`kustomize`]: Flux's generator, the real kustomize or an exact built-in subset,
//! the Kustomization's own overlay, then postBuild). It reads files and may run the `kustomize`
//! binary. [`plan`] puts the library crates' `audit` modules together over what it finds: the
//! plan `conflux plan` renders; [`request`] turns its paths and flags into plans, and [`render`]
//! writes them as text, JSON or graphviz.

mod error;
pub mod fleet;
pub mod kustomize;
mod object;
mod path;
pub mod plan;
mod problem;
pub mod render;
pub mod request;
pub mod review;
mod scratch;
pub mod substitute_from;

pub use error::{Error, Result};
