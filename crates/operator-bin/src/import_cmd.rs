//! `conflux import kyverno FILE...|-`: other tools' policies as conflux objects (YAML on stdout),
//! and what could not be converted, one line each on stderr (format in docs/migrate-kyverno.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

/// `conflux import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Where the policies come from.
    #[command(subcommand)]
    pub from: From,
}

/// The tools whose policies can be imported.
#[derive(Debug, Subcommand)]
pub enum From {
    /// Kyverno ClusterPolicies and Policies (`kyverno.io/v1`) and GeneratingPolicies,
    /// ValidatingPolicies and MutatingPolicies (`policies.kyverno.io`): clone rules become
    /// ConfigSyncs, deny rules on ConfigMaps/Secrets ProtectPolicies, and pod-template
    /// annotations on a config change ReloadPolicies.
    Kyverno {
        /// Files of policies (multi-document YAML), or `-` for stdin.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Exit 1 when any rule, or part of one, is not converted.
        #[arg(long)]
        fail_on_unconverted: bool,
    },
}

/// Prints the imported objects, and the findings on stderr.
pub fn run(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let From::Kyverno {
        files,
        fail_on_unconverted,
    } = &args.from;
    let mut documents = Vec::new();
    for file in files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?
        } else {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        };
        documents.extend(
            conflux_install::kyverno::parse(&text)
                .with_context(|| format!("parsing {}", file.display()))?,
        );
    }
    let import = conflux_install::kyverno::import(&documents);
    std::io::stdout()
        .lock()
        .write_all(import.to_yaml()?.as_bytes())
        .context("cannot write to stdout")?;
    let mut stderr = std::io::stderr().lock();
    for finding in &import.findings {
        writeln!(stderr, "{finding}").context("cannot write to stderr")?;
    }
    Ok(if *fail_on_unconverted && import.unconverted() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
