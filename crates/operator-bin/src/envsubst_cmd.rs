//! `conflux envsubst`: like `flux envsubst`. The template is read from stdin, variables come
//! from the process environment, the result goes to stdout. On error the upstream message goes
//! to stderr and the exit code is 1.
//!
//! Unlike upstream, the whole input is one template (no 64 KiB line limit, no silent truncation,
//! expressions may span lines). Input bytes that are not UTF-8 are replaced by U+FFFD.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use conflux_postbuild_subst::envsubst::{self, Mode, VarFn};

/// Runs the subcommand on stdin/stdout.
pub fn run(strict: bool) -> anyhow::Result<ExitCode> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("reading stdin")?;
    let template = String::from_utf8_lossy(&input);
    let environment = VarFn(|name: &str| {
        std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
    });
    let mode = if strict {
        Mode::Strict
    } else {
        Mode::NonStrict
    };
    match envsubst::eval_bytes(&template, &environment, mode) {
        Ok(output) => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&output).context("writing stdout")?;
            stdout.flush().context("writing stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("{err}");
            Ok(ExitCode::FAILURE)
        }
    }
}
