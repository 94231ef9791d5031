//! `conflux`: Flux-compatible copy, sync, trigger and reload controllers, and the offline tools
//! around them (`envsubst`, `build`, `plan`).

mod build_cmd;
mod cli;
mod crd_cmd;
mod envsubst_cmd;
mod import_cmd;
mod install_cmd;
mod plan_cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("conflux: {err:#}");
            ExitCode::FAILURE
        }
    }
}
