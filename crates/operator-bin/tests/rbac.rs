//! The RBAC of `conflux install --export`, proven on the real API server: the real `conflux run`
//! binary, authenticated as the installed ServiceAccount with its own token (TLS verified against
//! the cluster CA), does every controller's job end to end with leader election on, and the
//! ServiceAccount is denied what conflux never does.

mod fault_support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use conflux_tests::eventually;
use fault_support::{Conflux, World};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

/// The namespace `conflux install --export` puts conflux in by default.
const NS: &str = "conflux-system";
const MANAGER: &str = "conflux-rbac-test";
/// The RBAC kinds of the export.
const RBAC_KINDS: [&str; 7] = [
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The documents of `conflux install --export` with every controller, protect as a webhook.
fn export() -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args([
            "install",
            "--export",
            "--controllers=copy,sync,reload,flux-trigger,protect",
            // The webhook mode (its Service, certificate Secret and registration); the
            // admission-policy mode's RBAC is proven in protect_policy.rs.
            "--protect-mode=webhook",
        ])
        .output()
        .expect("run conflux install --export");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    serde_saphyr::from_multiple(&text).expect("multi-document YAML")
}

/// Server-side applies one exported document (kinds whose plural is `<kind>s`).
async fn apply(client: &Client, doc: &Value) {
    let kind = doc["kind"].as_str().expect("kind");
    let api_version = doc["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = format!("{}s", kind.to_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let name = doc["metadata"]["name"].as_str().expect("name");
    let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// Flux's real HelmRelease and Receiver CRDs (the world installs Kustomization's), so the
/// flux-trigger lists and watches all three Flux kinds.
async fn install_more_flux_crds(client: &Client) {
    for (group, plural) in [
        ("helm.toolkit.fluxcd.io", "helmreleases"),
        ("notification.toolkit.fluxcd.io", "receivers"),
    ] {
        let crd = conflux_tests::objects::flux_crd(group, plural);
        conflux_tests::objects::install_crd(client, "conflux-rbac-test", &crd).await;
    }
}

/// A `kubernetes.io/service-account-token` Secret for the ServiceAccount `conflux`, filled by the
/// controller-manager's token controller; returns the token (never printed).
async fn service_account_token(admin: &Client) -> String {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "conflux-rbac-test-token", "namespace": NS,
                     "annotations": {"kubernetes.io/service-account.name": "conflux"}},
        "type": "kubernetes.io/service-account-token",
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the token Secret");
    eventually(
        "the token controller to fill the ServiceAccount token",
        Duration::from_secs(60),
        || {
            let secrets = secrets.clone();
            async move {
                let secret = secrets.get("conflux-rbac-test-token").await.ok()?;
                let token = secret.data?.get("token")?.0.clone();
                String::from_utf8(token).ok().filter(|t| !t.is_empty())
            }
        },
    )
    .await
}

/// A kubeconfig for the ServiceAccount: the admin kubeconfig's server and CA (TLS verified), the
/// ServiceAccount's token. Written owner-only next to the cluster's own.
fn write_kubeconfig(cluster: &conflux_tests::Cluster, token: &str) -> PathBuf {
    let admin = Kubeconfig::read_from(cluster.kubeconfig()).expect("admin kubeconfig");
    let server = admin.clusters[0].cluster.as_ref().expect("cluster");
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "conflux-test", "cluster": {
            "server": server.server,
            "certificate-authority-data": server.certificate_authority_data,
        }}],
        "users": [{"name": "conflux-sa", "user": {"token": token}}],
        "contexts": [{"name": "conflux-sa", "context": {"cluster": "conflux-test", "user": "conflux-sa"}}],
        "current-context": "conflux-sa",
    });
    let path = cluster.dir().join("conflux-sa.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&kubeconfig).expect("JSON"))
        .expect("write kubeconfig");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    path
}

async fn client_from(kubeconfig: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("load kubeconfig");
    assert!(
        !config.accept_invalid_certs,
        "TLS must be verified against the cluster CA"
    );
    Client::try_from(config).expect("client")
}

/// What the ServiceAccount may do, asked of the API server as itself.
async fn allowed(client: &Client, attrs: (&str, &str, &str, Option<&str>, Option<&str>)) -> bool {
    allowed_named(client, attrs, None).await
}

/// [`allowed`] for the object `name` (rules restricted by `resourceNames`).
async fn allowed_named(
    client: &Client,
    attrs: (&str, &str, &str, Option<&str>, Option<&str>),
    name: Option<&str>,
) -> bool {
    let (group, resource, verb, namespace, subresource) = attrs;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                verb: Some(verb.to_owned()),
                namespace: namespace.map(str::to_owned),
                subresource: subresource.map(str::to_owned),
                name: name.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_rbac_lets_every_controller_work_and_denies_the_rest() {
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;

    // The whole export, in its order (Namespace and CRD first), PodDisruptionBudget (policy/v1)
    // included; its Deployment's pods stay pending (the test ground has no nodes), the conflux
    // under test runs as a process with the ServiceAccount's token.
    let docs = export();
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in RBAC_KINDS
        .iter()
        .chain(&["Deployment", "PodDisruptionBudget"])
    {
        assert!(kinds.contains(kind), "the export has a {kind}: {kinds:?}");
    }
    for doc in &docs {
        apply(&admin, doc).await;
    }
    install_more_flux_crds(&admin).await;

    let token = service_account_token(&admin).await;
    let kubeconfig = write_kubeconfig(cluster, &token);
    let sa = client_from(&kubeconfig).await;

    // Every controller's path, end to end, with conflux running as the ServiceAccount: a pull
    // copy, a ConfigSync fan-out into two namespaces, a Kustomization `requestedAt` and a
    // Deployment rollout (World, shared with the fault scenarios).
    let world = World::setup(&admin, "rbac", 2).await;
    let port = conflux_tests::free_port();
    let mut conflux = Conflux::start_with(
        &kubeconfig,
        "rbac",
        &[
            "--enable-leader-election",
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url=https://127.0.0.1:{port}/validate"),
        ],
        &[("RUNTIME_NAMESPACE", NS), ("POD_NAME", "conflux-rbac-0")],
    );
    conflux.wait_ready().await;
    eventually("the replica to lead", Duration::from_secs(120), || {
        let leading = conflux.is_leader();
        async move { leading.then_some(()) }
    })
    .await;
    world.wait_baselines().await;
    world.change(1).await;
    world.wait_converged(1, Duration::from_secs(180)).await;
    world.change(2).await;
    world.wait_converged(2, Duration::from_secs(180)).await;

    // Events were recorded as the ServiceAccount (the flux-trigger's, about the ConfigMap that
    // changed).
    let events: Api<Event> = Api::namespaced(admin.clone(), world.source_namespace());
    eventually("a ConfigChanged Event", Duration::from_secs(60), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("ConfigChanged"))
                .then_some(())
        }
    })
    .await;
    // The protect controller: its certificate Secret, its webhook registration, and the label on
    // the ConfigSync's source.
    let fan: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(admin.clone(), world.source_namespace());
    eventually(
        "the fanned-out source labelled protected",
        Duration::from_secs(60),
        || {
            let fan = fan.clone();
            async move {
                let s = fan.get("fan").await.ok()?;
                let labels = s.metadata.labels?;
                (labels
                    .get("protect.conflux.dev/protected")
                    .map(String::as_str)
                    == Some("true"))
                .then_some(())
            }
        },
    )
    .await;
    let certs: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(admin.clone(), NS);
    assert!(
        certs
            .get_opt("conflux-webhook-cert")
            .await
            .expect("read")
            .is_some()
    );
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(admin.clone());
    assert!(
        webhooks
            .get_opt("conflux-protect")
            .await
            .expect("read")
            .is_some()
    );
    // The reload controller follows ReloadPolicies and writes their status (reloadpolicies and
    // reloadpolicies/status).
    let policies_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("conflux.dev", "v1alpha1", "ReloadPolicy"),
        "reloadpolicies",
    );
    let policies: Api<DynamicObject> = Api::all_with(admin.clone(), &policies_ar);
    let policy_name = format!("rbac-{}", std::process::id());
    let policy = json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ReloadPolicy",
        "metadata": {"name": policy_name},
        "spec": {"configs": {"namespaces": ["rbac-selects-nothing"]}}});
    policies
        .patch(
            &policy_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&policy),
        )
        .await
        .expect("apply a ReloadPolicy");
    eventually(
        "ReloadPolicy status: Ready=True",
        Duration::from_secs(60),
        || {
            let (policies, name) = (policies.clone(), policy_name.clone());
            async move {
                let p = policies.get(&name).await.ok()?;
                (p.data["status"]["conditions"][0]["status"] == "True").then_some(())
            }
        },
    )
    .await;
    let log = conflux.log_text();
    assert!(
        !log.contains("forbidden"),
        "conflux was refused something (log in target/fault-logs/rbac-*.log)"
    );
    let ready = conflux.readyz();
    assert!(
        ready.as_ref().is_some_and(|(status, _)| *status == 200),
        "still ready: {ready:?}"
    );
    // The sync status (configsyncs/status) and the leader election Lease were written too.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("conflux.dev", "v1alpha1", "ConfigSync"),
        "configsyncs",
    );
    let syncs: Api<DynamicObject> = Api::all_with(admin.clone(), &ar);
    let name = format!("rbac-{}", std::process::id());
    eventually(
        "ConfigSync status: 2 synced",
        Duration::from_secs(60),
        || {
            let (syncs, name) = (syncs.clone(), name.clone());
            async move {
                let cs = syncs.get(&name).await.ok()?;
                (cs.data["status"]["syncedTargets"] == 2).then_some(())
            }
        },
    )
    .await;
    conflux.stop();
    let lease = Api::<Lease>::namespaced(admin.clone(), NS)
        .get_opt("conflux-leader-election")
        .await
        .expect("read the Lease");
    assert!(lease.is_some(), "the Lease was created in {NS}");

    // Every rule the export grants is in effect for the ServiceAccount.
    for doc in &docs {
        let namespace = doc["metadata"]["namespace"].as_str();
        let role = doc["kind"].as_str().unwrap_or_default();
        if role != "ClusterRole" && role != "Role" {
            continue;
        }
        for rule in doc["rules"].as_array().expect("rules") {
            for group in rule["apiGroups"].as_array().expect("groups") {
                for resource in rule["resources"].as_array().expect("resources") {
                    for verb in rule["verbs"].as_array().expect("verbs") {
                        let (group, verb) =
                            (group.as_str().expect("group"), verb.as_str().expect("verb"));
                        let resource = resource.as_str().expect("resource");
                        let (resource, sub) = match resource.split_once('/') {
                            Some((r, s)) => (r, Some(s)),
                            None => (resource, None),
                        };
                        // A rule restricted to names is checked for each of them.
                        let names: Vec<Option<&str>> = match rule["resourceNames"].as_array() {
                            Some(names) => names.iter().map(Value::as_str).collect(),
                            None => vec![None],
                        };
                        for name in names {
                            assert!(
                                allowed_named(&sa, (group, resource, verb, namespace, sub), name)
                                    .await,
                                "{role} grants {verb} {group}/{resource} {name:?}, but the ServiceAccount may not"
                            );
                        }
                    }
                }
            }
        }
    }

    // And nothing more: reads of pods and nodes, namespace deletion, workload creation and
    // deletion, RBAC escalation, impersonation, Leases outside its namespace.
    let denied = [
        ("", "pods", "get", Some("default"), None),
        ("", "pods", "list", None, None),
        ("", "pods", "create", Some("default"), Some("exec")),
        ("", "nodes", "get", None, None),
        ("", "nodes", "list", None, None),
        ("", "namespaces", "delete", None, None),
        ("", "namespaces", "create", None, None),
        ("apps", "deployments", "create", Some("default"), None),
        ("apps", "deployments", "delete", Some("default"), None),
        ("apps", "deployments", "update", Some("default"), None),
        (
            "rbac.authorization.k8s.io",
            "clusterroles",
            "escalate",
            None,
            None,
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterroles",
            "bind",
            None,
            None,
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "create",
            None,
            None,
        ),
        (
            "rbac.authorization.k8s.io",
            "roles",
            "escalate",
            Some(NS),
            None,
        ),
        ("", "users", "impersonate", None, None),
        ("", "groups", "impersonate", None, None),
        ("", "serviceaccounts", "impersonate", Some(NS), None),
        ("", "serviceaccounts", "create", Some(NS), Some("token")),
        ("", "secrets", "update", Some("default"), None),
        ("", "secrets", "deletecollection", Some("default"), None),
        (
            "coordination.k8s.io",
            "leases",
            "get",
            Some("default"),
            None,
        ),
        ("conflux.dev", "configsyncs", "create", None, None),
        // The admission-policy mode's objects: deleted by name only.
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            "delete",
            None,
            None,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            "create",
            None,
            None,
        ),
        ("conflux.dev", "configsyncs", "delete", None, None),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "create",
            None,
            None,
        ),
    ];
    for attrs in denied {
        assert!(
            !allowed(&sa, attrs).await,
            "the ServiceAccount may {attrs:?}"
        );
    }
    // The same, as real requests.
    let pods = Api::<Pod>::all(sa.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&pods, Err(kube::Error::Api(s)) if s.code == 403),
        "listing pods: {:?}",
        pods.map(|l| l.items.len())
    );
    let nodes = Api::<Node>::all(sa.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&nodes, Err(kube::Error::Api(s)) if s.code == 403),
        "listing nodes: {:?}",
        nodes.map(|l| l.items.len())
    );
}
