//! Examples of embedding the conflux library crates; each example is a `[[example]]` target of
//! this package (`cargo run -p conflux-examples --example NAME`), and the logic it shows lives in
//! the module of the same name, so the tests in `examples/tests/` check it too.
//!
//! - [`widget`]: a controller for its own CRD that reconciles when a referenced Secret changes,
//!   with Flux's watch-configs behaviour from `conflux_watch_index::runtime` (example `widget_controller`).
//! - [`reload_own_kind`]: rolling a custom pod-template kind with `reloader`'s pure API.
//! - [`copy_secret`]: copying a Secret into a managed namespace with `copy-core`.
//! - [`render`]: Flux's `${VAR}` post-build substitution with `postbuild-subst`.

pub mod copy_secret;
pub mod reload_own_kind;
pub mod render;
pub mod widget;
