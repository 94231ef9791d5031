//! Placeholder; filled in with the decision benchmark.
fn main() {}
