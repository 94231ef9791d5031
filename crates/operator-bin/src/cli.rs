//! Command-line interface: one subcommand per job.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// conflux: copy ConfigMaps/Secrets across namespaces, reconcile Flux objects when their config
/// changes, roll workloads whose config changed, and substitute Flux `${VAR}`s, exactly as Flux does.
#[derive(Debug, Parser)]
#[command(name = "conflux", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `conflux`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers against a Kubernetes cluster (copy, sync, reload, flux-trigger).
    Run(Box<conflux_operator::run::RunArgs>),
    /// Substitute `${VAR}` expressions in stdin with variables from the environment, like
    /// `flux envsubst`; the result goes to stdout.
    Envsubst {
        /// Fail on a variable that is used without a default and not set.
        #[arg(long)]
        strict: bool,
    },
    /// Run Flux's post-build substitution on a multi-document stream of built manifests, with
    /// variables from flags, ConfigMap/Secret files or a Flux Kustomization.
    Build(crate::build_cmd::BuildArgs),
    /// Show, offline and on directories of manifests or a cluster dump, what conflux would copy,
    /// which Flux objects reconcile and which workloads roll on a config change, and what Flux's
    /// substitution would break.
    Plan(crate::plan_cmd::PlanArgs),
    /// Print a CustomResourceDefinition conflux serves as YAML (ConfigSync by default).
    Crd {
        /// Which one: `configsync`, `protectpolicy` or `reloadpolicy`.
        #[arg(value_enum, default_value = "configsync")]
        name: crate::crd_cmd::CrdName,
    },
    /// Print every manifest conflux needs (Namespace, CRDs, least-privilege RBAC, Deployment)
    /// as YAML: `conflux install --export | kubectl apply -f -`.
    Install(crate::install_cmd::InstallArgs),
    /// Convert other tools' policies into conflux objects: `conflux import kyverno FILE...|-`
    /// prints YAML for `kubectl apply -f -`, and what it could not convert on stderr.
    Import(crate::import_cmd::ImportArgs),
}

/// Runs the chosen subcommand and returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run_controllers(*args),
        Command::Envsubst { strict } => crate::envsubst_cmd::run(strict),
        Command::Build(args) => crate::build_cmd::run(&args),
        Command::Plan(args) => crate::plan_cmd::run(&args),
        Command::Crd { name } => crate::crd_cmd::run(name),
        Command::Install(args) => crate::install_cmd::run(&args),
        Command::Import(args) => crate::import_cmd::run(&args),
    }
}

fn run_controllers(args: conflux_operator::run::RunArgs) -> anyhow::Result<ExitCode> {
    // Flag mistakes are reported before any runtime or client exists.
    args.plan()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(conflux_operator::run::run(args))?;
    Ok(ExitCode::SUCCESS)
}
