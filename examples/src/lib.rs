//! Examples of embedding the conflux library crates; each example is a `[[example]]` target of
//! this package (`cargo run -p conflux-examples --example NAME`).
