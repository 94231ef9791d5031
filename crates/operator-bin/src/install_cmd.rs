//! `conflux install --export`: every manifest conflux needs, as multi-document YAML in the order
//! to apply them (like `flux install --export`), from the `conflux-install` crate. Apply with
//! `conflux install --export | kubectl apply -f -`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use conflux_install::Install;
use conflux_operator::run::{ControllerName, ProtectModeArg};

/// Flags of `conflux install`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    /// Print the manifests to stdout (the only mode: apply them with
    /// `conflux install --export | kubectl apply -f -`).
    #[arg(long)]
    pub export: bool,

    /// Controllers to run and grant RBAC for, comma-separated: copy, sync, reload, flux-trigger,
    /// protect.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,sync,reload,flux-trigger"
    )]
    pub controllers: Vec<ControllerName>,

    /// How the protect controller enforces, when it runs (`conflux run --protect-mode`):
    /// `admission-policy` (RBAC for ValidatingAdmissionPolicies, no webhook Service or port) or
    /// `webhook` (RBAC for the ValidatingWebhookConfiguration and its certificate Secret, the
    /// Service conflux-webhook and port 9443).
    #[arg(long, value_enum, default_value = "admission-policy")]
    pub protect_mode: ProtectModeArg,

    /// Namespace conflux runs in (created by the manifests).
    #[arg(long, default_value = "conflux-system")]
    pub namespace: String,

    /// Container image (default: `ghcr.io/conflux-dev/conflux:v` followed by this version).
    #[arg(long)]
    pub image: Option<String>,

    /// Extra argument for `conflux run` in the container; repeatable
    /// (`--arg=--reload-debounce=5s --arg=--log-level=debug`).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub extra_args: Vec<String>,
}

/// Writes the manifests to stdout; without `--export` a usage error (exit status 2).
pub fn run(args: &InstallArgs) -> anyhow::Result<ExitCode> {
    if !args.export {
        eprintln!(
            "error: conflux install: only --export is supported; applying needs kubectl:\n  \
             conflux install --export | kubectl apply -f -"
        );
        return Ok(ExitCode::from(2));
    }
    let yaml = conflux_install::manifests(&args.install())?;
    std::io::stdout()
        .lock()
        .write_all(yaml.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

impl InstallArgs {
    /// The installation these flags describe.
    fn install(&self) -> Install {
        Install {
            controllers: self.controllers.iter().map(|c| (*c).into()).collect(),
            protect_mode: self.protect_mode.into(),
            namespace: self.namespace.clone(),
            image: self.image.clone(),
            extra_args: self.extra_args.clone(),
        }
    }
}
