//! `conflux run`: flags, start-up checks, and the controllers' lifetime.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, bail};
use prometheus_client::registry::Registry;
use tracing::{error, info};
use watch_index::selector::Selector;
use watch_index::trigger::Mode as TriggerMode;

use crate::controllers::ControllerName;
use crate::controllers::copy::{self, CopyConfig};
use crate::controllers::flux_trigger::{self, FluxTriggerConfig};
use crate::controllers::reload::{self, ReloadConfig};
use crate::controllers::sync::{self, SyncConfig};
use crate::metrics::{self, Endpoints, Health, Metrics};
use crate::telemetry::{self, LogEncoding};

/// Flux's default for `--watch-configs-label-selector`.
pub const DEFAULT_WATCH_CONFIGS_LABEL_SELECTOR: &str = "reconcile.fluxcd.io/watch=Enabled";

/// Flags of `conflux run`. Names follow Flux's controllers where Flux has the flag.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Controllers to run, comma-separated: copy, sync, reload, flux-trigger.
    #[arg(long, value_delimiter = ',', default_value = "copy,sync,reload")]
    pub controllers: Vec<ControllerName>,

    /// Only ConfigMaps/Secrets matching this label selector wake their referrers (flux-trigger).
    /// The empty string selects every ConfigMap and Secret.
    #[arg(long, default_value = DEFAULT_WATCH_CONFIGS_LABEL_SELECTOR)]
    pub watch_configs_label_selector: String,

    /// When the flux-trigger controller fires: `upstream` exactly like Flux 2.7 (every
    /// resourceVersion change of a matching object), `data-hash` only when the data changes or a
    /// source that referrers wait for is created.
    #[arg(long, value_enum, default_value = "upstream")]
    pub trigger_mode: TriggerModeArg,

    /// Only objects matching this label selector are handled (sharding, as in Flux): Flux objects,
    /// copy targets, ConfigSyncs and kopy sources.
    #[arg(long, default_value = "")]
    pub watch_label_selector: String,

    /// Watch every namespace; when false, only the namespace in RUNTIME_NAMESPACE.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_all_namespaces: bool,

    /// Namespace conflux runs in (used when --watch-all-namespaces=false).
    #[arg(long, env = "RUNTIME_NAMESPACE", default_value = "")]
    pub runtime_namespace: String,

    /// Reconcile requests written in parallel.
    #[arg(long, default_value_t = 4)]
    pub concurrent: usize,

    /// Namespaces whose ConfigMaps/Secrets may fan out with the kopy annotations
    /// (`kopy.kot-labs.com/sync`, `flynshue.io/sync`), comma-separated; elsewhere the annotation is
    /// refused with an Event.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub sync_source_namespaces: Vec<String>,

    /// Coalescing window of the reload controller: a ConfigMap/Secret change waits this long for
    /// others before its workloads are evaluated, so changes made together roll once (`0`, `300ms`,
    /// `2s`, ...).
    #[arg(long, default_value = "2s", value_parser = reload::parse_duration)]
    pub reload_debounce: std::time::Duration,

    /// Rollouts per second the reload controller may start, cluster-wide.
    #[arg(long, default_value_t = 5.0)]
    pub reload_rate: f64,

    /// Rollouts the reload controller may start at once before --reload-rate applies.
    #[arg(long, default_value_t = 10)]
    pub reload_burst: u32,

    /// Reload every workload for the configs it consumes unless it says
    /// `reloader.stakater.com/auto: "false"` (Reloader's `--auto-reload-all`).
    #[arg(long, default_value_t = false)]
    pub auto_reload_all: bool,

    /// Log level: trace, debug, info, error, or a tracing filter such as `conflux=debug`.
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// Log encoding.
    #[arg(long, value_enum, default_value = "json")]
    pub log_encoding: LogEncoding,

    /// Address of the Prometheus metrics endpoint (`0` disables it).
    #[arg(long, default_value = ":8080")]
    pub metrics_addr: String,

    /// Address of the /healthz and /readyz endpoints (`0` disables it).
    #[arg(long, default_value = ":9440")]
    pub health_addr: String,
}

/// `--trigger-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TriggerModeArg {
    /// Exactly Flux 2.7.
    Upstream,
    /// Data changes and awaited creations only.
    DataHash,
}

impl From<TriggerModeArg> for TriggerMode {
    fn from(value: TriggerModeArg) -> Self {
        match value {
            TriggerModeArg::Upstream => TriggerMode::Upstream,
            TriggerModeArg::DataHash => TriggerMode::DataHash,
        }
    }
}

/// Everything `conflux run` needs after its flags were checked.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// The controllers to start.
    pub controllers: BTreeSet<ControllerName>,
    /// Configuration of the flux-trigger controller.
    pub flux_trigger: FluxTriggerConfig,
    /// Configuration of the copy controller.
    pub copy: CopyConfig,
    /// Configuration of the sync controller.
    pub sync: SyncConfig,
    /// Configuration of the reload controller.
    pub reload: ReloadConfig,
}

impl RunArgs {
    /// Checks the flags; every mistake is reported here, before anything starts.
    pub fn plan(&self) -> anyhow::Result<RunPlan> {
        let controllers: BTreeSet<ControllerName> = self.controllers.iter().copied().collect();
        if controllers.is_empty() {
            bail!("--controllers names no controller");
        }
        let missing: Vec<&str> = controllers
            .iter()
            .filter(|c| !c.is_implemented())
            .map(|c| c.as_str())
            .collect();
        if !missing.is_empty() {
            bail!(
                "controller(s) {} not implemented yet in this build; run with --controllers=flux-trigger",
                missing.join(", ")
            );
        }
        let config_selector = Selector::parse(&self.watch_configs_label_selector).map_err(|e| {
            anyhow::anyhow!(
                "invalid --watch-configs-label-selector '{}': {e}",
                self.watch_configs_label_selector
            )
        })?;
        let object_selector = Selector::parse(&self.watch_label_selector).map_err(|e| {
            anyhow::anyhow!(
                "invalid --watch-label-selector '{}': {e}",
                self.watch_label_selector
            )
        })?;
        let namespace = if self.watch_all_namespaces {
            None
        } else if self.runtime_namespace.is_empty() {
            bail!("--watch-all-namespaces=false needs --runtime-namespace or RUNTIME_NAMESPACE");
        } else {
            Some(self.runtime_namespace.clone())
        };
        if self.concurrent == 0 {
            bail!("--concurrent must be at least 1");
        }
        if !(self.reload_rate.is_finite() && self.reload_rate > 0.0) {
            bail!("--reload-rate must be a positive number of rollouts per second");
        }
        if self.reload_burst == 0 {
            bail!("--reload-burst must be at least 1");
        }
        metrics::parse_bind_addr("--metrics-addr", &self.metrics_addr)?;
        metrics::parse_bind_addr("--health-addr", &self.health_addr)?;
        let sync_source_namespaces: Vec<String> = self
            .sync_source_namespaces
            .iter()
            .map(|ns| ns.trim().to_owned())
            .filter(|ns| !ns.is_empty())
            .collect();
        Ok(RunPlan {
            controllers,
            copy: CopyConfig {
                object_selector: object_selector.clone(),
                concurrent: self.concurrent,
                namespace: namespace.clone(),
            },
            sync: SyncConfig {
                object_selector: object_selector.clone(),
                sync_source_namespaces,
                concurrent: self.concurrent,
                namespace: namespace.clone(),
            },
            reload: ReloadConfig {
                namespace: namespace.clone(),
                object_selector: object_selector.clone(),
                debounce: self.reload_debounce,
                rate: self.reload_rate,
                burst: self.reload_burst,
                concurrent: self.concurrent,
                options: reloader::opt_in::Options {
                    auto_reload_all: self.auto_reload_all,
                },
            },
            flux_trigger: FluxTriggerConfig {
                config_selector,
                object_selector,
                mode: self.trigger_mode.into(),
                namespace,
                concurrent: self.concurrent,
            },
        })
    }
}

/// Runs the controllers until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let plan = args.plan()?;
    telemetry::init(&args.log_level, args.log_encoding)?;
    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;

    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let registry = Arc::new(registry);
    if let Some(addr) = metrics::parse_bind_addr("--metrics-addr", &args.metrics_addr)? {
        let bound =
            metrics::serve(addr, Endpoints::Metrics, registry.clone(), health.clone()).await?;
        info!(addr = %bound, "serving metrics");
    }
    if let Some(addr) = metrics::parse_bind_addr("--health-addr", &args.health_addr)? {
        let bound =
            metrics::serve(addr, Endpoints::Health, registry.clone(), health.clone()).await?;
        info!(addr = %bound, "serving health probes");
    }

    let controllers: Vec<&str> = plan.controllers.iter().map(|c| c.as_str()).collect();
    info!(controllers = %controllers.join(","), "starting controllers");
    let mut tasks = tokio::task::JoinSet::new();
    if plan.controllers.contains(&ControllerName::FluxTrigger) {
        let ctx =
            flux_trigger::Context::new(client.clone(), plan.flux_trigger.clone(), metrics.clone());
        let health = health.part();
        tasks.spawn(async move { flux_trigger::run(ctx, health).await });
    }
    if plan.controllers.contains(&ControllerName::Copy) {
        let ctx = copy::Context::new(client.clone(), plan.copy.clone(), metrics.clone());
        let health = health.part();
        tasks.spawn(async move { copy::run(ctx, health).await });
    }
    if plan.controllers.contains(&ControllerName::Sync) {
        let ctx = sync::Context::new(client.clone(), plan.sync.clone(), metrics.clone());
        let health = health.part();
        tasks.spawn(async move { sync::run(ctx, health).await });
    }

    if plan.controllers.contains(&ControllerName::Reload) {
        let ctx = reload::Context::new(client.clone(), plan.reload.clone(), metrics.clone());
        let health = health.part();
        tasks.spawn(async move { reload::run(ctx, health).await });
    }

    tokio::select! {
        () = shutdown_signal() => {
            info!("shutdown signal received, stopping");
            tasks.abort_all();
            Ok(())
        }
        Some(result) = tasks.join_next() => {
            let err = match result {
                Ok(Ok(())) => anyhow::anyhow!("a controller stopped unexpectedly"),
                Ok(Err(err)) => err,
                Err(join) => anyhow::anyhow!("a controller panicked: {join}"),
            };
            error!(error = %format!("{err:#}"), "controller failed");
            Err(err)
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
