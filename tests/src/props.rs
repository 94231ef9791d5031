//! Seeded property runs shared by the hostile-input tests of every crate: a fixed number of cases
//! from a fixed seed, with `property <name>: <cases> cases, seed <n>` printed past libtest's
//! capture so CI logs show what ran and a failure repeats. `CONFLUX_PROPTEST_SEED=<u64>` replaces
//! every seed and `CONFLUX_PROPTEST_SCALE=<n>` multiplies every case count.

use std::fmt::Debug;
use std::io::Write as _;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `test` on `cases` inputs drawn from `strategy` with the RNG seeded by `seed`, after
/// printing `property <name>: <cases> cases, seed <seed>` straight to stderr (past libtest's
/// capture, like the conformance summaries). Panics with the seed and the shrunk input on
/// the first failing case; a panic inside `test` is a failing case.
pub fn check<S>(
    name: &str,
    cases: u32,
    seed: u64,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let seed = env_number("CONFLUX_PROPTEST_SEED").unwrap_or(seed);
    let scale = env_number("CONFLUX_PROPTEST_SCALE").unwrap_or(1).max(1);
    let cases = u32::try_from(u64::from(cases).saturating_mul(scale)).unwrap_or(u32::MAX);
    let mut config = Config::with_cases(cases);
    config.rng_seed = RngSeed::Fixed(seed);
    config.failure_persistence = None;
    config.max_shrink_iters = 20_000;
    let _ = writeln!(
        std::io::stderr(),
        "property {name}: {cases} cases, seed {seed}"
    );
    match TestRunner::new(config).run(&strategy, test) {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => {
            panic!("property {name} failed (seed {seed}): {why}\nminimal input: {input:?}")
        }
        Err(TestError::Abort(why)) => panic!("property {name} aborted (seed {seed}): {why}"),
    }
}
