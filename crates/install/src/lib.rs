#![doc = include_str!("../README.md")]
//!
//! # What it holds
//!
//! The manifests of a conflux installation: what `conflux install --export` prints and the Helm
//! chart `charts/conflux` renders (its RBAC is generated from this), as multi-document YAML in the
//! order to apply them (like `flux install --export`).
//!
//! RBAC is least-privilege and per controller: each ClusterRole lists exactly the verbs that
//! controller's runtime code uses (`crates/*/src/runtime`), so a controller that is turned off
//! gets no rules. The default output is committed as `deploy/conflux.yaml`; a test fails when it
//! is stale.
//!

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub mod kyverno;

use conflux_copy_core::protect_policy;
use conflux_copy_core::runtime::protect;
use conflux_watch_index::refs::{HELM_GROUP, KUSTOMIZE_GROUP, NOTIFICATION_GROUP};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Namespace,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
    TopologySpreadConstraint,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResourceExt, Resource};
use serde::Serialize;

/// Name of the ServiceAccount, the Deployment and the prefix of every RBAC object.
pub const NAME: &str = "conflux";
/// Port of `/metrics` (`--metrics-addr`).
const METRICS_PORT: i32 = 8080;
/// Port of `/healthz` and `/readyz` (`--health-addr`).
const HEALTH_PORT: i32 = 9440;

/// A controller of `conflux run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Controller {
    /// Pull copies (`copyFrom`, `reflects`, `replicate-from`).
    Copy,
    /// Fan-out copies (ConfigSync and the peers' annotations).
    Sync,
    /// Rollouts when configuration changes.
    Reload,
    /// Reconcile requests to Flux.
    FluxTrigger,
    /// Protection of sources.
    Protect,
}

impl Controller {
    /// Its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Controller::Copy => "copy",
            Controller::Sync => "sync",
            Controller::Reload => "reload",
            Controller::FluxTrigger => "flux-trigger",
            Controller::Protect => "protect",
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the protect controller enforces (`conflux run --protect-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProtectMode {
    /// A ValidatingAdmissionPolicy the API server evaluates.
    #[default]
    AdmissionPolicy,
    /// An HTTPS admission webhook served by every replica.
    Webhook,
}

impl ProtectMode {
    /// Its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtectMode::AdmissionPolicy => "admission-policy",
            ProtectMode::Webhook => "webhook",
        }
    }
}

/// What to install (the options of `conflux install`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// Controllers to run and grant RBAC for.
    pub controllers: BTreeSet<Controller>,
    /// How the protect controller enforces, when it runs.
    pub protect_mode: ProtectMode,
    /// Namespace conflux runs in (created by the manifests).
    pub namespace: String,
    /// Container image; `None` for [`default_image`].
    pub image: Option<String>,
    /// Extra arguments of `conflux run` in the container.
    pub extra_args: Vec<String>,
}

impl Default for Install {
    /// The default of `conflux install --export`: copy, sync, reload and flux-trigger in
    /// `conflux-system`.
    fn default() -> Self {
        Install {
            controllers: [
                Controller::Copy,
                Controller::Sync,
                Controller::Reload,
                Controller::FluxTrigger,
            ]
            .into(),
            protect_mode: ProtectMode::default(),
            namespace: "conflux-system".to_owned(),
            image: None,
            extra_args: Vec::new(),
        }
    }
}

/// What can be wrong with an [`Install`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No controller is named.
    #[error("--controllers names no controller")]
    NoControllers,
    /// The namespace is not a DNS label.
    #[error("invalid --namespace '{namespace}': expected a DNS label (lowercase a-z, 0-9 and '-')")]
    InvalidNamespace {
        /// The namespace as given.
        namespace: String,
    },
    /// The image is empty.
    #[error("--image must not be empty")]
    EmptyImage,
    /// `--protect-mode` was given as an extra argument, which would not grant its RBAC.
    #[error(
        "--arg={arg}: use `conflux install --protect-mode=...`, which also grants that mode's RBAC"
    )]
    ProtectModeInArgs {
        /// The argument.
        arg: String,
    },
    /// An object could not be rendered (never expected: the objects are built here).
    #[error("cannot render a manifest: {0}")]
    Render(String),
    /// The input of `conflux import` is not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
}

impl Error {
    /// A stable reason for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NoControllers => "NoControllers",
            Error::InvalidNamespace { .. } => "InvalidNamespace",
            Error::EmptyImage => "EmptyImage",
            Error::ProtectModeInArgs { .. } => "ProtectModeInArgs",
            Error::Render(_) => "Render",
            Error::Yaml(_) => "InvalidYaml",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The image installed when none is given: this version's release.
pub fn default_image() -> String {
    format!("ghcr.io/conflux-dev/conflux:v{}", env!("CARGO_PKG_VERSION"))
}

/// The ConfigSync CRD as a JSON value (also part of [`manifests`]).
pub fn configsync_crd() -> Result<serde_json::Value> {
    serde_json::to_value(conflux_copy_core::ConfigSync::crd())
        .map_err(|e| Error::Render(e.to_string()))
}

/// The ConfigSync CRD as YAML, in go-yaml's style (sorted keys): what `conflux crd` prints.
pub fn configsync_crd_yaml() -> Result<String> {
    to_yaml(&configsync_crd()?)
}

/// The ReloadPolicy CRD as a JSON value (also part of [`manifests`]).
pub fn reloadpolicy_crd() -> Result<serde_json::Value> {
    serde_json::to_value(conflux_reloader::policy::ReloadPolicy::crd())
        .map_err(|e| Error::Render(e.to_string()))
}

/// The ReloadPolicy CRD as YAML, in go-yaml's style (sorted keys): what `conflux crd
/// reloadpolicy` prints.
pub fn reloadpolicy_crd_yaml() -> Result<String> {
    to_yaml(&reloadpolicy_crd()?)
}

/// The ProtectPolicy CRD as a JSON value (also part of [`manifests`]).
pub fn protectpolicy_crd() -> Result<serde_json::Value> {
    serde_json::to_value(conflux_copy_core::ProtectPolicy::crd())
        .map_err(|e| Error::Render(e.to_string()))
}

/// The ProtectPolicy CRD as YAML, in go-yaml's style (sorted keys): what `conflux crd
/// protectpolicy` prints.
pub fn protectpolicy_crd_yaml() -> Result<String> {
    to_yaml(&protectpolicy_crd()?)
}

/// Every manifest, as multi-document YAML with sorted keys (deterministic), in dependency order:
/// Namespace, CRDs, ServiceAccount, ClusterRoles and their bindings, the leader election Role and
/// its binding, the metrics Service, the Deployment and its PodDisruptionBudget.
pub fn manifests(args: &Install) -> Result<String> {
    let controllers = &args.controllers;
    if controllers.is_empty() {
        return Err(Error::NoControllers);
    }
    let ns = args.namespace.as_str();
    if !is_dns_label(ns) {
        return Err(Error::InvalidNamespace {
            namespace: ns.to_owned(),
        });
    }
    let image = match &args.image {
        Some(image) if image.trim().is_empty() => return Err(Error::EmptyImage),
        Some(image) => image.clone(),
        None => default_image(),
    };
    if let Some(arg) = args
        .extra_args
        .iter()
        .find(|a| a.starts_with("--protect-mode"))
    {
        return Err(Error::ProtectModeInArgs { arg: arg.clone() });
    }
    // The webhook's Service, port, certificate Secret and registration exist only in webhook mode.
    let webhook =
        controllers.contains(&Controller::Protect) && args.protect_mode == ProtectMode::Webhook;

    let mut docs = vec![to_doc(&Namespace {
        metadata: meta(None, ns),
        ..Namespace::default()
    })?];
    // The CRDs stay whatever controllers run: dropping one would delete every object of its kind.
    docs.push(to_doc(&configsync_crd()?)?);
    docs.push(to_doc(&protectpolicy_crd()?)?);
    docs.push(to_doc(&reloadpolicy_crd()?)?);
    docs.push(to_doc(&ServiceAccount {
        metadata: meta(Some(ns), NAME),
        ..ServiceAccount::default()
    })?);
    let mut roles: Vec<(String, Vec<PolicyRule>)> =
        vec![(format!("{NAME}-common"), common_rules())];
    for c in controllers {
        roles.push((
            format!("{NAME}-{c}"),
            controller_rules(*c, args.protect_mode),
        ));
    }
    if controllers.contains(&Controller::Reload) {
        roles.extend(reload_flag_roles(&args.extra_args));
    }
    for (name, rules) in &roles {
        docs.push(to_doc(&ClusterRole {
            metadata: meta(None, name),
            rules: Some(rules.clone()),
            ..ClusterRole::default()
        })?);
    }
    for (name, _) in &roles {
        let (role_ref, subjects) = binding("ClusterRole", name, ns);
        let metadata = meta(None, name);
        docs.push(to_doc(&ClusterRoleBinding {
            metadata,
            role_ref,
            subjects,
        })?);
    }
    let election = format!("{NAME}-leader-election");
    let leases = rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "patch"],
    );
    // kube-lease-manager reads, creates and patches the Lease (conflux-runtime's lease).
    // The reload controller keeps what it remembers of workloads in a few Secrets here (applied,
    // server-side) and writes down each Job re-creation in a Secret here until the new Job
    // exists; the protect webhook keeps its generated certificate in a Secret here.
    let mut election_rules = vec![leases];
    if controllers.contains(&Controller::Reload) {
        election_rules.push(rule("", &["secrets"], &["create", "patch", "delete"]));
    }
    if webhook {
        election_rules.push(rule("", &["secrets"], &["create", "update"]));
    }
    docs.push(to_doc(&Role {
        metadata: meta(Some(ns), &election),
        rules: Some(election_rules),
    })?);
    let (role_ref, subjects) = binding("Role", &election, ns);
    let metadata = meta(Some(ns), &election);
    docs.push(to_doc(&RoleBinding {
        metadata,
        role_ref,
        subjects,
    })?);
    let metrics_name = format!("{NAME}-metrics");
    docs.push(to_doc(&service(
        ns,
        &metrics_name,
        "metrics",
        METRICS_PORT,
    ))?);
    if webhook {
        // The API server calls the webhook through this Service (protect::SERVICE), port 443.
        docs.push(to_doc(&service(ns, protect::SERVICE, "webhook", 443))?);
    }
    docs.push(to_doc(&deployment(
        ns,
        &image,
        controllers,
        args.protect_mode,
        &args.extra_args,
    ))?);
    docs.push(to_doc(&PodDisruptionBudget {
        metadata: meta(Some(ns), NAME),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(selector()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })?);

    let mut out = format!(
        "# Generated by `conflux install --export` (conflux v{}); do not edit.\n",
        env!("CARGO_PKG_VERSION")
    );
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&doc);
    }
    Ok(out)
}

/// What every controller needs: the shared metadata watches of ConfigMaps and Secrets, reads of
/// the few objects whose data matters (copy sources and targets, consumed configs, data-hash
/// triggers), and Events (kube's recorder creates them, and patches a repeated one).
fn common_rules() -> Vec<PolicyRule> {
    vec![
        rule("", &["configmaps", "secrets"], &["get", "list", "watch"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

/// The rules of one controller beyond [`common_rules`], verb by verb what its runtime does.
fn controller_rules(controller: Controller, protect_mode: ProtectMode) -> Vec<PolicyRule> {
    // Copies are server-side applied, merge-patched (cleanup), deleted, and re-created where a
    // field is immutable (copy-core runtime::executor).
    let copies = || {
        rule(
            "",
            &["configmaps", "secrets"],
            &["create", "patch", "delete"],
        )
    };
    let lwp = ["list", "watch", "patch"];
    match controller {
        // Namespaces (metadata): reflector's consent may select target namespaces by label.
        Controller::Copy => vec![copies(), rule("", &["namespaces"], &["list", "watch"])],
        Controller::Sync => {
            let plural = conflux_copy_core::ConfigSync::plural(&()).into_owned();
            vec![
                copies(),
                // Every namespace, metadata only, to find the targets.
                rule("", &["namespaces"], &["list", "watch"]),
                // The finalizer is a JSON patch; status is server-side applied.
                rule(conflux_copy_core::config_sync::GROUP, &[&plural], &lwp),
                rule(
                    conflux_copy_core::config_sync::GROUP,
                    &[&format!("{plural}/status")],
                    &["patch"],
                ),
            ]
        }
        // One informer per workload kind, and server-side applied template annotations (a
        // pause-period's pause and resume are merge patches); Namespaces (metadata) for
        // --namespace-selector and ReloadPolicies' namespaceSelectors; ReloadPolicies, and
        // their status (server-side applied).
        Controller::Reload => vec![
            rule("apps", &["deployments", "statefulsets", "daemonsets"], &lwp),
            rule("batch", &["cronjobs"], &lwp),
            rule("", &["namespaces"], &["list", "watch"]),
            rule(
                conflux_reloader::policy::GROUP,
                &["reloadpolicies"],
                &["list", "watch"],
            ),
            rule(
                conflux_reloader::policy::GROUP,
                &["reloadpolicies/status"],
                &["patch"],
            ),
            // Jobs are re-created to roll (read fresh, deleted, created again; baselines are
            // server-side applied).
            rule(
                "batch",
                &["jobs"],
                &["get", "list", "watch", "patch", "create", "delete"],
            ),
        ],
        // Flux objects are watched and merge-patched (`requestedAt`, observed-configs digest).
        Controller::FluxTrigger => vec![
            rule(KUSTOMIZE_GROUP, &["kustomizations"], &lwp),
            rule(HELM_GROUP, &["helmreleases"], &lwp),
            rule(NOTIFICATION_GROUP, &["receivers"], &lwp),
        ],
        // Sources are labelled (server-side apply of metadata). The webhook registers itself, or
        // the leader applies the admission policy; each mode deletes, by name only, what the
        // other mode left.
        Controller::Protect => {
            let mut rules = vec![
                rule("", &["configmaps", "secrets"], &["patch"]),
                rule(
                    conflux_copy_core::config_sync::GROUP,
                    &[&conflux_copy_core::ConfigSync::plural(&())],
                    &["list", "watch"],
                ),
                // ProtectPolicies are watched and their status written; a namespaceSelector
                // reads Namespace labels.
                rule(
                    conflux_copy_core::config_sync::GROUP,
                    &[&conflux_copy_core::ProtectPolicy::plural(&())],
                    &["list", "watch"],
                ),
                rule(
                    conflux_copy_core::config_sync::GROUP,
                    &[&format!(
                        "{}/status",
                        conflux_copy_core::ProtectPolicy::plural(&())
                    )],
                    &["patch"],
                ),
                rule("", &["namespaces"], &["list", "watch"]),
            ];
            let group = "admissionregistration.k8s.io";
            let webhooks = "validatingwebhookconfigurations";
            let (policies, bindings) = (
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            );
            match protect_mode {
                ProtectMode::Webhook => {
                    rules.push(rule(group, &[webhooks], &["get", "create", "patch"]));
                    rules.push(named(
                        group,
                        &[policies],
                        &["delete"],
                        &[protect_policy::POLICY_NAME],
                    ));
                    rules.push(named(
                        group,
                        &[bindings],
                        &["delete"],
                        &[
                            protect_policy::SOURCES_BINDING,
                            protect_policy::LABELLED_BINDING,
                        ],
                    ));
                }
                // An apply creates or patches; conflux's own identity comes from a
                // SelfSubjectReview, which every authenticated user may create.
                _ => {
                    rules.push(rule(group, &[policies, bindings], &["create", "patch"]));
                    rules.push(named(
                        group,
                        &[webhooks],
                        &["delete"],
                        &[protect::WEBHOOK_CONFIGURATION],
                    ));
                }
            }
            rules
        }
    }
}

/// The reload controller's rules that exist only when its flag is passed with `--arg`:
/// `--is-argo-rollouts` (Rollouts watched, server-side applied, and merge-patched for
/// `restartAt`) and `--enable-csi-integration` (the secrets-store CSI driver's kinds, watched).
fn reload_flag_roles(extra_args: &[String]) -> Vec<(String, Vec<PolicyRule>)> {
    let on = |flag: &str| {
        extra_args.iter().any(|a| {
            let a = a.as_str();
            a == flag || a == format!("{flag}=true") || a == format!("{flag}=True")
        })
    };
    let mut roles = Vec::new();
    if on("--is-argo-rollouts") || on("--is-Argo-Rollouts") {
        roles.push((
            format!("{NAME}-reload-argo-rollouts"),
            vec![rule(
                "argoproj.io",
                &["rollouts"],
                &["list", "watch", "patch"],
            )],
        ));
    }
    if on("--enable-csi-integration") {
        roles.push((
            format!("{NAME}-reload-csi"),
            vec![rule(
                "secrets-store.csi.x-k8s.io",
                &["secretproviderclasspodstatuses", "secretproviderclasses"],
                &["list", "watch"],
            )],
        ));
    }
    roles
}

/// [`rule`] restricted to objects of these names.
fn named(group: &str, resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: Some(names.iter().map(|n| (*n).to_owned()).collect()),
        ..rule(group, resources, verbs)
    }
}

fn deployment(
    ns: &str,
    image: &str,
    controllers: &BTreeSet<Controller>,
    protect_mode: ProtectMode,
    extra_args: &[String],
) -> Deployment {
    let names: Vec<&str> = controllers.iter().map(|c| c.as_str()).collect();
    let protects = controllers.contains(&Controller::Protect);
    let webhook = protects && protect_mode == ProtectMode::Webhook;
    let mut args = vec![
        "run".to_owned(),
        format!("--controllers={}", names.join(",")),
        "--enable-leader-election".to_owned(),
        format!("--metrics-addr=:{METRICS_PORT}"),
        format!("--health-addr=:{HEALTH_PORT}"),
    ];
    if protects {
        args.push(format!("--protect-mode={}", protect_mode.as_str()));
    }
    args.extend(extra_args.iter().cloned());
    let env_from_field = |name: &str, path: &str| EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("healthz".to_owned()),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    };
    let port = |name: &str, port: i32| ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    let container = Container {
        name: NAME.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        args: Some(args),
        env: Some(vec![
            env_from_field("RUNTIME_NAMESPACE", "metadata.namespace"),
            env_from_field("POD_NAME", "metadata.name"),
        ]),
        ports: Some(
            [
                ("metrics", METRICS_PORT),
                ("healthz", HEALTH_PORT),
                ("webhook", 9443),
            ]
            .into_iter()
            .filter(|(name, _)| *name != "webhook" || webhook)
            .map(|(name, p)| port(name, p))
            .collect(),
        ),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(probe("/healthz")),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("100m", "64Mi")),
            limits: Some(quantities("1000m", "512Mi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let mut pod_labels = part_of();
    pod_labels.extend(selector().match_labels.unwrap_or_default());
    Deployment {
        metadata: meta(Some(ns), NAME),
        spec: DeploymentSpec {
            replicas: Some(2),
            selector: selector(),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.to_owned()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        run_as_group: Some(65532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    // The replicas on different nodes where there are several.
                    topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                        label_selector: Some(selector()),
                        max_skew: 1,
                        topology_key: "kubernetes.io/hostname".to_owned(),
                        when_unsatisfiable: "ScheduleAnyway".to_owned(),
                        ..TopologySpreadConstraint::default()
                    }]),
                    containers: vec![container],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// A ClusterIP Service `name` in front of the container port named `port_name`.
fn service(ns: &str, name: &str, port_name: &str, port: i32) -> Service {
    Service {
        metadata: meta(Some(ns), name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: selector().match_labels,
            ports: Some(vec![ServicePort {
                name: Some(port_name.to_owned()),
                port,
                protocol: Some("TCP".to_owned()),
                target_port: Some(IntOrString::String(port_name.to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

/// The role reference and subjects (the ServiceAccount) of a binding of role `name`.
fn binding(kind: &str, name: &str, ns: &str) -> (RoleRef, Option<Vec<Subject>>) {
    let role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".to_owned()),
        kind: kind.to_owned(),
        name: name.to_owned(),
    };
    let subject = Subject {
        kind: "ServiceAccount".to_owned(),
        name: NAME.to_owned(),
        namespace: Some(ns.to_owned()),
        ..Subject::default()
    };
    (role_ref, Some(vec![subject]))
}

/// The label on every object (`kubectl get -A -l app.kubernetes.io/part-of=conflux ...`).
fn part_of() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/part-of".to_owned(), NAME.to_owned())])
}

fn selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_owned(),
            NAME.to_owned(),
        )])),
        ..LabelSelector::default()
    }
}

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(part_of()),
        ..ObjectMeta::default()
    }
}

/// One object as YAML in go-yaml's style (sorted keys), like `conflux crd`.
fn to_doc<T: Serialize>(object: &T) -> Result<String> {
    let value = serde_json::to_value(object).map_err(|e| Error::Render(e.to_string()))?;
    to_yaml(&value)
}

/// A JSON value as YAML in go-yaml's style (sorted keys).
fn to_yaml(value: &serde_json::Value) -> Result<String> {
    conflux_postbuild_subst::yaml::emit::json_to_yaml(value)
        .map_err(|e| Error::Render(e.to_string()))
}

/// RFC 1123 label: what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len())
        && s.chars().all(|c| ok(c) || c == '-')
        && s.starts_with(ok)
        && s.ends_with(ok)
}
