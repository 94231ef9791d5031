//! Structured logs with `tracing`, configured like Flux's `--log-level` and `--log-encoding`.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// Log encodings, as Flux names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogEncoding {
    /// One JSON object per line (the default, as in Flux's containers).
    Json,
    /// Human-readable lines.
    Console,
}

/// Installs the global subscriber. `level` is a Flux level (`debug`, `info`, `error`, `trace`) or
/// any `tracing` filter directive (`conflux=debug,kube=info`).
pub fn init(level: &str, encoding: LogEncoding) -> anyhow::Result<()> {
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid --log-level '{level}'"))?;
    // Logs go to stderr, as Flux's controllers write theirs; colour only on a terminal.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match encoding {
        LogEncoding::Json => builder.json().flatten_event(true).try_init(),
        LogEncoding::Console => builder.try_init(),
    };
    // A second init (in-process tests) keeps the first subscriber; that is fine.
    if let Err(err) = result {
        tracing::debug!(%err, "tracing subscriber already installed");
    }
    Ok(())
}
