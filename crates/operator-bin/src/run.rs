//! `conflux run`: flags, start-up checks, and the wiring of the library runtimes: one client, one
//! [`Runtime`], one shared watch of ConfigMaps and one of Secrets, and the controllers on them.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use conflux_copy_core::protect::Policy;
use conflux_copy_core::runtime::copy::{self, CopyConfig};
use conflux_copy_core::runtime::protect::{self, ProtectConfig};
use conflux_copy_core::runtime::protect_policy;
use conflux_copy_core::runtime::sync::{self, SyncConfig};
use conflux_reloader::filters::{
    NamespaceFilter, ignored_workload_types, reloader_selector, resources_to_ignore,
};
use conflux_reloader::patch::ReloadStrategy;
use conflux_reloader::runtime::{self as reload, ReloadConfig, parse_duration};
use conflux_runtime::ConfigWatches;
use conflux_runtime::admin::{Admin, Endpoints};
use conflux_runtime::lease::{self, LeaderElectionConfig};
use conflux_runtime::server::{Limits, Server};
use conflux_runtime::{InitialList, Runtime, shutdown};
use conflux_watch_index::runtime::flux_trigger::{self, FluxTriggerConfig};
use conflux_watch_index::selector::Selector;
use conflux_watch_index::trigger::Mode as TriggerMode;
use prometheus_client::registry::Registry;
use tracing::{error, info};

use crate::metrics::{self, Metrics};
use crate::telemetry::{self, LogEncoding};

/// `--initial-list-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum InitialListStrategy {
    /// A paginated LIST, then a WATCH.
    ListWatch,
    /// One WATCH streaming the existing objects first.
    StreamingList,
}

impl From<InitialListStrategy> for InitialList {
    fn from(strategy: InitialListStrategy) -> Self {
        match strategy {
            InitialListStrategy::ListWatch => InitialList::ListWatch,
            InitialListStrategy::StreamingList => InitialList::StreamingList,
        }
    }
}

/// The controllers `--controllers` can name (docs/design.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum ControllerName {
    /// Pull copies (`fluxcd.controlplane.io/copyFrom`, reflector's `reflects`, replicator's
    /// `replicate-from`).
    Copy,
    /// Fan-out sync (`ConfigSync`; kopy's, reflector's and replicator's annotations).
    Sync,
    /// Workload rollouts on config change.
    Reload,
    /// `reconcile.fluxcd.io/requestedAt` on Flux objects whose referenced config changed.
    FluxTrigger,
    /// Protects copied-from sources: a ValidatingAdmissionPolicy or an admission webhook
    /// (`--protect-mode`; off by default).
    Protect,
}

impl ControllerName {
    /// Every controller, in the order `--help` lists them.
    pub const ALL: [ControllerName; 5] = [
        ControllerName::Copy,
        ControllerName::Sync,
        ControllerName::Reload,
        ControllerName::FluxTrigger,
        ControllerName::Protect,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::Copy => "copy",
            ControllerName::Sync => "sync",
            ControllerName::Reload => "reload",
            ControllerName::FluxTrigger => "flux-trigger",
            ControllerName::Protect => "protect",
        }
    }
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Flux's default for `--watch-configs-label-selector`.
pub const DEFAULT_WATCH_CONFIGS_LABEL_SELECTOR: &str = "reconcile.fluxcd.io/watch=Enabled";

/// Flags of `conflux run`. Names follow Flux's controllers where Flux has the flag.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Controllers to run, comma-separated: copy, sync, reload, flux-trigger, protect.
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

    /// Namespace conflux runs in: the one watched when --watch-all-namespaces=false, and where
    /// the reload controller records Job re-creations until the new Job exists.
    #[arg(long, env = "RUNTIME_NAMESPACE", default_value = "")]
    pub runtime_namespace: String,

    /// Reconcile requests written in parallel.
    #[arg(long, default_value_t = 4)]
    pub concurrent: usize,

    /// Copies one ConfigSync (or annotated source) writes in parallel when it fans out.
    #[arg(long, default_value_t = 16)]
    pub fan_out_concurrency: usize,

    /// Namespaces whose ConfigMaps/Secrets may fan out with kopy's (`kopy.kot-labs.com/sync`,
    /// `flynshue.io/sync`), reflector's (`reflection-auto-enabled`) or replicator's (`replicate-to`,
    /// `replicate-to-matching`) annotations, comma-separated; elsewhere the annotation is refused
    /// with an Event.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub sync_source_namespaces: Vec<String>,

    /// How long the first ConfigMap/Secret change to a quiet workload waits for its companions
    /// before it is evaluated (configs applied together roll once; a lone change rolls at once).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub reload_settle: Duration,

    /// Coalescing window of the reload controller: after a rollout, further ConfigMap/Secret
    /// changes to the workload are coalesced into one more rollout, made once they stop for this
    /// long, so a burst or a config flapping back and forth rolls at most twice (`0`, `300ms`,
    /// `2s`, ...).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub reload_debounce: Duration,

    /// The longest a stream of ConfigMap/Secret changes may postpone that rollout, from the
    /// first change of the stream.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub reload_debounce_max: Duration,

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

    /// Roll a workload when a config it watches is created (Reloader's flag; Reloader's default
    /// is false, conflux's true: the pods read what now exists).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub reload_on_create: bool,

    /// Roll a workload when a config it watches is deleted, unless its pods need it to start
    /// (Reloader's flag; Reloader's default is false, conflux's true).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub reload_on_delete: bool,

    /// How a rollout changes the pod template: `annotations` (conflux.dev/config-hash) or
    /// `env-vars` (Reloader's `STAKATER_<NAME>_<KIND>` variables, Reloader's default).
    #[arg(long, value_enum, default_value = "annotations")]
    pub reload_strategy: ReloadStrategyArg,

    /// Never reload for `configmaps` or for `secrets` (one of them; Reloader's flag).
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub resources_to_ignore: Vec<String>,

    /// Workload kinds the reload controller leaves alone: `cronjobs`, `jobs` (Reloader's flag).
    /// Jobs are rolled by re-creating them, as Reloader does; Jobs a CronJob owns never are.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub ignored_workload_types: Vec<String>,

    /// Roll Argo Rollouts' Rollouts too (Reloader's `--is-Argo-Rollouts`, also accepted). Needs
    /// the Rollout CRD, and RBAC for argoproj.io rollouts (`conflux install
    /// --arg=--is-argo-rollouts` grants it).
    #[arg(
        long,
        alias = "is-Argo-Rollouts",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub is_argo_rollouts: bool,

    /// Roll workloads whose pods mount a SecretProviderClass (secrets-store CSI driver) when the
    /// mounted object versions change, as the driver records them in SecretProviderClassPodStatus
    /// (Reloader's flag). Needs RBAC for both kinds (`conflux install
    /// --arg=--enable-csi-integration` grants it).
    #[arg(
        long,
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub enable_csi_integration: bool,

    /// Reload only in namespaces with these labels (a label selector; Reloader's `key:value` and
    /// `key=*` forms are read too).
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub namespace_selector: Vec<String>,

    /// Namespaces the reload controller leaves alone, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub namespaces_to_ignore: Vec<String>,

    /// Reload only for ConfigMaps/Secrets with these labels (a label selector; Reloader's
    /// `key:value` and `key=*` forms are read too).
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub resource_label_selector: Vec<String>,

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

    /// Liveness (`/healthz`) fails when a controller has left watch events unread this long: it
    /// is wedged, and a restart helps. An unreachable API server only makes it not ready.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub liveness_stall_timeout: Duration,

    /// How each watch gets the objects that exist when it starts: `streaming-list` (one WATCH
    /// that streams them first: the API server's WatchList, on by default in Kubernetes 1.32 and
    /// from 1.34; fewer requests and less memory, see docs/benchmarks.md; an API server that
    /// refuses it, as 1.33 does by default, gets a LIST instead, once per process, as client-go
    /// does) or `list-watch` (a paginated LIST, then a WATCH: for API servers older than 1.27).
    #[arg(long, value_enum, default_value = "streaming-list")]
    pub initial_list_strategy: InitialListStrategy,

    /// Also copy `fluxcd.controlplane.io/copyFrom` targets generated by a Flux Operator
    /// ResourceSet. Off by default: Flux Operator copies those itself.
    #[arg(long, default_value_t = false)]
    pub copy_resourceset_targets: bool,

    /// Elect a leader on a Lease in RUNTIME_NAMESPACE: every replica keeps its watches warm, only
    /// the leader writes.
    #[arg(long, default_value_t = false)]
    pub enable_leader_election: bool,

    /// How long a lease stays valid after its last renewal.
    #[arg(long, default_value = "35s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// How long the leader keeps writing without a confirmed lease before it steps down.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// How often the leader renews the lease and the others try to acquire it.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,

    /// How the protect controller enforces: `admission-policy`, a ValidatingAdmissionPolicy the
    /// API server evaluates itself (Kubernetes 1.30 or later; no webhook to serve), or `webhook`,
    /// an HTTPS admission webhook every replica answers (any Kubernetes; the --webhook-* flags).
    #[arg(long, value_enum, default_value = "admission-policy")]
    pub protect_mode: ProtectModeArg,

    /// Address of the protect controller's HTTPS admission webhook (--protect-mode=webhook only;
    /// `:9443` when not set).
    #[arg(long)]
    pub webhook_addr: Option<String>,

    /// URL the API server calls the webhook at (--protect-mode=webhook only; `https://host:port`:
    /// the webhook's path, /validate, is added when the URL has none, and no other path is
    /// accepted); by default the
    /// Service conflux-webhook in RUNTIME_NAMESPACE.
    #[arg(long)]
    pub webhook_url: Option<String>,

    /// Directory with the webhook's tls.crt and tls.key (and ca.crt) (--protect-mode=webhook
    /// only); by default a self-signed certificate is kept in the Secret conflux-webhook-cert and
    /// rotated.
    #[arg(long)]
    pub webhook_cert_dir: Option<std::path::PathBuf>,

    /// Groups allowed to delete or change protected objects, comma-separated (besides
    /// system:masters and conflux itself).
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub protect_allow_groups: Vec<String>,

    /// Users allowed to delete or change protected objects, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub protect_allow_users: Vec<String>,
}

/// The trimmed, non-empty entries of a comma-separated flag.
fn non_empty(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Name of the leader election Lease.
pub const LEADER_ELECTION_LEASE: &str = "conflux-leader-election";

/// The webhook's address when `--webhook-addr` is not set.
pub const DEFAULT_WEBHOOK_ADDR: &str = ":9443";

/// `--protect-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
#[non_exhaustive]
pub enum ProtectModeArg {
    /// A ValidatingAdmissionPolicy the API server evaluates (Kubernetes 1.30 or later).
    AdmissionPolicy,
    /// An HTTPS admission webhook served by every replica.
    Webhook,
}

impl ProtectModeArg {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtectModeArg::AdmissionPolicy => "admission-policy",
            ProtectModeArg::Webhook => "webhook",
        }
    }
}

impl From<ControllerName> for conflux_install::Controller {
    fn from(name: ControllerName) -> Self {
        match name {
            ControllerName::Copy => conflux_install::Controller::Copy,
            ControllerName::Sync => conflux_install::Controller::Sync,
            ControllerName::Reload => conflux_install::Controller::Reload,
            ControllerName::FluxTrigger => conflux_install::Controller::FluxTrigger,
            ControllerName::Protect => conflux_install::Controller::Protect,
        }
    }
}

impl From<ProtectModeArg> for conflux_install::ProtectMode {
    fn from(mode: ProtectModeArg) -> Self {
        match mode {
            ProtectModeArg::AdmissionPolicy => conflux_install::ProtectMode::AdmissionPolicy,
            ProtectModeArg::Webhook => conflux_install::ProtectMode::Webhook,
        }
    }
}

/// `--reload-strategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReloadStrategyArg {
    /// The pod-template annotation conflux.dev/config-hash.
    Annotations,
    /// Reloader's `STAKATER_<NAME>_<KIND>` variables.
    EnvVars,
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
    /// The namespace of the shared ConfigMap/Secret watches, or `None` for all. Cluster-wide when
    /// the copy controller runs (sources may be anywhere) or every namespace is watched.
    pub configs_namespace: Option<String>,
    /// The leader election, when enabled.
    pub leader_election: Option<LeaderElectionConfig>,
    /// The protect webhook, when the protect controller runs with `--protect-mode=webhook`.
    pub protect: Option<ProtectConfig>,
    /// Who may change protected objects, when the protect controller runs with
    /// `--protect-mode=admission-policy` (the leader applies the policy).
    pub protect_policy: Option<Policy>,
}

impl RunArgs {
    /// Checks the flags; every mistake is reported here, before anything starts.
    pub fn plan(&self) -> anyhow::Result<RunPlan> {
        let controllers: BTreeSet<ControllerName> = self.controllers.iter().copied().collect();
        if controllers.is_empty() {
            bail!("--controllers names no controller");
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
        if self.fan_out_concurrency == 0 {
            bail!("--fan-out-concurrency must be at least 1");
        }
        if !(self.reload_rate.is_finite() && self.reload_rate > 0.0) {
            bail!("--reload-rate must be a positive number of rollouts per second");
        }
        if self.reload_burst == 0 {
            bail!("--reload-burst must be at least 1");
        }
        if self.liveness_stall_timeout < Duration::from_secs(1) {
            bail!("--liveness-stall-timeout must be at least 1s");
        }
        metrics::parse_bind_addr("--metrics-addr", &self.metrics_addr)?;
        metrics::parse_bind_addr("--health-addr", &self.health_addr)?;
        let sync_source_namespaces = non_empty(&self.sync_source_namespaces);
        let leader_election = if self.enable_leader_election {
            if self.runtime_namespace.is_empty() {
                bail!("--enable-leader-election needs --runtime-namespace or RUNTIME_NAMESPACE");
            }
            let config = LeaderElectionConfig {
                lease_duration: self.leader_election_lease_duration,
                renew_deadline: self.leader_election_renew_deadline,
                retry_period: self.leader_election_retry_period,
                ..LeaderElectionConfig::new(&self.runtime_namespace, LEADER_ELECTION_LEASE)
            };
            config.validate()?;
            Some(config)
        } else {
            None
        };
        let policy = Policy {
            allow_users: non_empty(&self.protect_allow_users),
            allow_groups: non_empty(&self.protect_allow_groups),
            ..Policy::default()
        };
        let (protect, protect_policy) = match (
            controllers.contains(&ControllerName::Protect),
            self.protect_mode,
        ) {
            (false, _) => (None, None),
            (true, ProtectModeArg::AdmissionPolicy) => {
                let webhook_flags = [
                    ("--webhook-addr", self.webhook_addr.is_some()),
                    ("--webhook-url", self.webhook_url.is_some()),
                    ("--webhook-cert-dir", self.webhook_cert_dir.is_some()),
                ];
                if let Some((flag, _)) = webhook_flags.iter().find(|(_, set)| *set) {
                    bail!(
                        "{flag} is only used with --protect-mode=webhook; with --protect-mode=admission-policy (the default) the API server enforces the protection itself and no webhook is served: remove {flag}, or add --protect-mode=webhook"
                    );
                }
                (None, Some(policy))
            }
            (true, ProtectModeArg::Webhook) => {
                if self.webhook_url.is_none() && self.runtime_namespace.is_empty() {
                    bail!(
                        "--protect-mode=webhook needs --webhook-url, or RUNTIME_NAMESPACE (for the Service conflux-webhook)"
                    );
                }
                let addr = self.webhook_addr.as_deref().unwrap_or(DEFAULT_WEBHOOK_ADDR);
                let addr = metrics::parse_bind_addr("--webhook-addr", addr)?
                    .context("--webhook-addr cannot be 0 when the protect webhook runs")?;
                if self.webhook_cert_dir.is_none() && self.runtime_namespace.is_empty() {
                    bail!(
                        "the protect webhook keeps its generated certificate in the Secret {} in the runtime namespace: set RUNTIME_NAMESPACE (or --runtime-namespace), or give --webhook-cert-dir",
                        protect::CERT_SECRET
                    )
                }
                let url = match &self.webhook_url {
                    None => None,
                    Some(url) => Some(protect::webhook_url(url).with_context(|| {
                        format!(
                            "invalid --webhook-url '{url}': conflux serves the webhook on {} (leave the path out, or give exactly that one)",
                            protect::PATH
                        )
                    })?),
                };
                let config = ProtectConfig {
                    addr,
                    url,
                    cert_dir: self.webhook_cert_dir.clone(),
                    namespace: self.runtime_namespace.clone(),
                    policy,
                };
                (Some(config), None)
            }
        };
        let (ignore_config_maps, ignore_secrets) = resources_to_ignore(&self.resources_to_ignore)?;
        let configs_namespace = if controllers.contains(&ControllerName::Copy) {
            None
        } else {
            namespace.clone()
        };
        Ok(RunPlan {
            configs_namespace,
            leader_election,
            protect,
            protect_policy,
            controllers,
            copy: CopyConfig {
                object_selector: object_selector.clone(),
                concurrent: self.concurrent,
                namespace: namespace.clone(),
                resource_set_targets: self.copy_resourceset_targets,
            },
            sync: SyncConfig {
                object_selector: object_selector.clone(),
                sync_source_namespaces,
                concurrent: self.concurrent,
                fan_out_concurrency: self.fan_out_concurrency,
                namespace: namespace.clone(),
            },
            reload: ReloadConfig {
                namespace: namespace.clone(),
                object_selector: object_selector.clone(),
                settle: self.reload_settle,
                debounce: self.reload_debounce,
                debounce_max: self.reload_debounce_max,
                rate: self.reload_rate,
                burst: self.reload_burst,
                concurrent: self.concurrent,
                options: conflux_reloader::opt_in::Options {
                    auto_reload_all: self.auto_reload_all,
                    reload_on_create: self.reload_on_create,
                    reload_on_delete: self.reload_on_delete,
                    ignore_config_maps,
                    ignore_secrets,
                    reload_strategy: match self.reload_strategy {
                        ReloadStrategyArg::Annotations => ReloadStrategy::Annotations,
                        ReloadStrategyArg::EnvVars => ReloadStrategy::EnvVars,
                    },
                    csi_integration: self.enable_csi_integration,
                },
                namespaces: NamespaceFilter::new(
                    reloader_selector(&non_empty(&self.namespace_selector))
                        .map_err(|e| anyhow::anyhow!("--namespace-selector: {e}"))?,
                    non_empty(&self.namespaces_to_ignore),
                ),
                config_selector: reloader_selector(&non_empty(&self.resource_label_selector))
                    .map_err(|e| anyhow::anyhow!("--resource-label-selector: {e}"))?,
                ignored_kinds: ignored_workload_types(&self.ignored_workload_types)?,
                argo_rollouts: self.is_argo_rollouts,
                records_namespace: (!self.runtime_namespace.is_empty())
                    .then(|| self.runtime_namespace.clone()),
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

/// Runs the controllers until SIGTERM or SIGINT. An unreachable API server is not a reason to
/// exit: every watch and start-up step retries with backoff, and `/readyz` says what is missing.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let plan = args.plan()?;
    telemetry::init(&args.log_level, args.log_encoding)?;
    // Building the client reads the kubeconfig or the in-cluster files; no request is made yet.
    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let runtime = Runtime::new(client)
        .with_stall_after(args.liveness_stall_timeout)
        .with_initial_list(args.initial_list_strategy.into());

    let metrics = Metrics::default();
    let mut registry = Registry::default();
    metrics.register(&runtime, &mut registry);
    let registry = Arc::new(registry);
    let health = runtime.health().clone();
    for (flag, value, endpoints) in [
        ("--metrics-addr", &args.metrics_addr, Endpoints::Metrics),
        ("--health-addr", &args.health_addr, Endpoints::Health),
    ] {
        let Some(addr) = metrics::parse_bind_addr(flag, value)? else {
            continue;
        };
        // One request per connection, as probes and scrapes make them: nothing lingers.
        let server = Server::bind(addr).await?.with_limits(Limits {
            keep_alive: false,
            ..Limits::default()
        });
        info!(addr = %server.local_addr(), endpoints = endpoints.paths(), "serving admin endpoints");
        let admin = Admin::new(endpoints, registry.clone(), health.clone());
        runtime.spawn(server.serve(admin, runtime.tasks().token().clone().cancelled_owned()));
    }

    let names: Vec<&str> = plan.controllers.iter().map(|c| c.as_str()).collect();
    info!(controllers = %names.join(","), "starting controllers");
    // The shared ConfigMap/Secret watches belong to the process, not to a leadership term: they
    // stay warm on replicas that do not lead.
    let configs = ConfigWatches::start(&runtime, plan.configs_namespace.as_deref());
    // The webhook answers on every replica (its decisions read only the object).
    if let Some(config) = plan.protect.clone() {
        runtime.spawn(protect::serve(
            runtime.clone(),
            config,
            metrics.protect.clone(),
        ));
    }
    let Some(election) = plan.leader_election.clone() else {
        let mut tasks = start_controllers(&plan, &runtime, &configs, &metrics);
        let result = tokio::select! {
            () = shutdown::signal() => {
                info!("shutdown signal received, stopping");
                Ok(())
            }
            err = supervise(&mut tasks) => Err(err),
        };
        tasks.shutdown().await;
        stop(&runtime).await;
        return result;
    };
    info!(lease = %election.name, identity = %election.identity, "leader election: waiting for the lease");
    let leader_metrics = metrics.leader.clone();
    lease::run_elected(
        runtime.clone(),
        election,
        leader_metrics,
        shutdown::signal(),
        |term| {
            let mut tasks = start_controllers(&plan, &term, &configs, &metrics);
            async move {
                // A controller that stops ends the term; the next one starts them afresh.
                let _ = supervise(&mut tasks).await;
            }
        },
    )
    .await;
    stop(&runtime).await;
    info!("shutdown signal received, stopped");
    Ok(())
}

/// How long the process's tasks (servers draining, retries) may take to stop.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Cancels the process's tasks and waits for them (servers finish the requests in flight).
async fn stop(runtime: &Runtime) {
    if !runtime.end(STOP_BOUND).await {
        tracing::warn!(
            seconds = STOP_BOUND.as_secs(),
            "some tasks did not stop in time"
        );
    }
}

/// Starts every planned controller on `runtime` (the process's, or a leadership term's).
fn start_controllers(
    plan: &RunPlan,
    runtime: &Runtime,
    configs: &ConfigWatches,
    metrics: &Metrics,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    let client = runtime.client();
    for controller in &plan.controllers {
        let (rt, configs) = (runtime.clone(), configs.clone());
        match controller {
            ControllerName::FluxTrigger => {
                let (config, m) = (plan.flux_trigger.clone(), metrics.flux.clone());
                tasks.spawn(flux_trigger::run(rt, configs, config, m));
            }
            ControllerName::Copy => {
                let ctx =
                    copy::Context::new(client.clone(), plan.copy.clone(), metrics.copy.clone());
                tasks.spawn(copy::run(rt, configs, ctx));
            }
            ControllerName::Sync => {
                let ctx =
                    sync::Context::new(client.clone(), plan.sync.clone(), metrics.copy.clone());
                tasks.spawn(sync::run(rt, configs, ctx));
            }
            ControllerName::Reload => {
                let ctx = reload::Context::new(
                    client.clone(),
                    plan.reload.clone(),
                    metrics.reload.clone(),
                );
                tasks.spawn(reload::run(rt, configs, ctx));
            }
            ControllerName::Protect => {
                let excluded = Policy::default().excluded_namespaces;
                let ctx = protect::Context::new(client.clone(), excluded, metrics.protect.clone());
                tasks.spawn(protect::run(rt.clone(), configs, ctx));
                // The leader applies the admission policy, or (webhook mode) removes one left
                // from the other mode.
                match plan.protect_policy.clone() {
                    Some(policy) => tasks.spawn(protect_policy::run(rt, policy)),
                    None => tasks.spawn(protect_policy::remove(rt)),
                };
            }
        }
    }
    tasks
}

/// Waits until a controller stops. Controllers run until the process ends; one that stops is a
/// bug (a panic), logged and returned.
async fn supervise(tasks: &mut tokio::task::JoinSet<()>) -> anyhow::Error {
    let err = match tasks.join_next().await {
        Some(Ok(())) | None => anyhow::anyhow!("a controller stopped unexpectedly"),
        Some(Err(join)) => anyhow::anyhow!("a controller panicked: {join}"),
    };
    error!(error = %format!("{err:#}"), "controller failed");
    err
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The plan of `conflux run` with `args`, without RUNTIME_NAMESPACE unless given.
    fn plan(args: &[&str]) -> anyhow::Result<RunPlan> {
        let mut argv = vec!["conflux"];
        if !args.iter().any(|a| a.starts_with("--runtime-namespace")) {
            argv.push("--runtime-namespace=");
        }
        argv.extend_from_slice(args);
        Args::try_parse_from(argv)?.run.plan()
    }

    #[test]
    fn a_webhook_url_without_a_path_is_served_and_another_path_is_refused_at_start() {
        let with = |url: &str| {
            plan(&[
                "--controllers=sync,protect",
                "--protect-mode=webhook",
                "--webhook-url",
                url,
                "--runtime-namespace=conflux-system",
            ])
        };
        let planned = with("https://127.0.0.1:9443").expect("valid");
        let url = planned.protect.and_then(|p| p.url);
        assert_eq!(url.as_deref(), Some("https://127.0.0.1:9443/validate"));
        let err = with("https://127.0.0.1:9443/hook").expect_err("refused");
        assert!(format!("{err:#}").contains("/validate"), "{err:#}");
    }

    #[test]
    fn protect_without_a_runtime_namespace_says_what_is_missing_at_start() {
        let err = plan(&[
            "--controllers=sync,protect",
            "--protect-mode=webhook",
            "--webhook-url=https://127.0.0.1:9443",
        ])
        .expect_err("refused");
        let message = format!("{err:#}");
        assert!(message.contains("RUNTIME_NAMESPACE"), "{message}");
        assert!(message.contains("--webhook-cert-dir"), "{message}");
        // A certificate directory needs no Secret, so no namespace.
        let planned = plan(&[
            "--controllers=sync,protect",
            "--protect-mode=webhook",
            "--webhook-url=https://127.0.0.1:9443",
            "--webhook-cert-dir=/certs",
        ]);
        assert!(
            planned.is_ok(),
            "{:#}",
            planned.err().map(|e| e.to_string()).unwrap_or_default()
        );
    }

    #[test]
    fn argo_rollouts_and_csi_flags_take_reloaders_forms() {
        let reload = |args: &[&str]| plan(args).expect("valid").reload;
        let off = reload(&[]);
        assert!(
            !off.argo_rollouts && !off.options.csi_integration,
            "off by default"
        );
        for args in [
            &["--is-argo-rollouts"][..],
            &["--is-argo-rollouts=true"],
            &["--is-Argo-Rollouts=true"],
            &["--is-Argo-Rollouts", "true"],
        ] {
            assert!(reload(args).argo_rollouts, "{args:?}");
        }
        assert!(!reload(&["--is-Argo-Rollouts=false"]).argo_rollouts);
        for args in [
            &["--enable-csi-integration"][..],
            &["--enable-csi-integration=true"],
        ] {
            assert!(reload(args).options.csi_integration, "{args:?}");
        }
        assert!(
            reload(&["--ignored-workload-types=jobs"])
                .ignored_kinds
                .contains(&conflux_reloader::WorkloadKind::Job)
        );
    }
}
