//! The protect controller end to end: the real API server calls conflux's admission webhook
//! (HTTPS, its generated certificate, registered by conflux itself) for a tenant who has `edit`
//! in the source namespace, impersonated by the admin.
//!
//! Also measured (printed, never asserted): the webhook's latency as the API server's client sees
//! it (UPDATEs of a protected object, which call the webhook, against the same UPDATEs of an
//! unprotected one, which do not), and the webhook's own decision time from its histogram.

mod fault_support;

use std::time::{Duration, Instant};

use conflux_tests::{eventually, free_port};
use fault_support::Conflux;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-protect-test";
const PROTECTED: &str = "protect.conflux.dev/protected";
const ENABLED: &str = "protect.conflux.dev/enabled";
const DEPENDENTS: &str = "protect.conflux.dev/dependents";
const WHILE_COPIED: &str = "protect.conflux.dev/while-copied";

async fn apply(client: &Client, object: Value) {
    conflux_tests::objects::apply(client, MANAGER, &object).await;
}

async fn labels_of(api: &Api<Secret>, name: &str) -> std::collections::BTreeMap<String, String> {
    api.get(name)
        .await
        .expect("get")
        .metadata
        .labels
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_delete_or_rewrite_what_conflux_copies_from() {
    // One scenario at a time: both register the one ValidatingWebhookConfiguration.
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::config_sync_crd(),
    )
    .await;
    let system = cluster.namespace(&admin, "protect-system").await;
    let src = cluster.namespace(&admin, "protect-src").await;
    let dst = cluster.namespace(&admin, "protect-dst").await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": dst, "labels": {"protect-test": src}}}),
    )
    .await;
    // The tenant: Kubernetes' own `edit` role in the source namespace.
    apply(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit", "namespace": src},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
    )
    .await;

    let port = free_port();
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect",
        &[
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url=https://127.0.0.1:{port}/validate"),
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;

    // A ConfigSync source, a consenting copyFrom source (and its copy), an opted-in object, and
    // an object nobody protects.
    let secret = |name: &str, annotations: Value, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": src, "annotations": annotations, "labels": labels},
               "stringData": conflux_tests::leak::string_data()})
    };
    apply(&admin, secret("fanned", json!({}), json!({}))).await;
    apply(
        &admin,
        secret(
            "pulled",
            // Consent, and (the owner's choice) protection while copied.
            json!({"copy.conflux.dev/allowed-namespaces": dst, WHILE_COPIED: "true"}),
            json!({}),
        ),
    )
    .await;
    apply(
        &admin,
        secret("opted-in", json!({}), json!({ENABLED: "true"})),
    )
    .await;
    apply(&admin, secret("free", json!({}), json!({}))).await;
    let sync_name = format!("{src}-fan");
    apply(
        &admin,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
        "metadata": {"name": sync_name},
        "spec": {"source": {"kind": "Secret", "namespace": src, "name": "fanned"},
                 "target": {"namespaceSelector": {"matchLabels": {"protect-test": src}}}}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pulled", "namespace": dst,
                     "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{src}/pulled")}}}),
    )
    .await;

    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), &src);
    for name in ["fanned", "pulled"] {
        eventually(
            &format!("{name} labelled protected"),
            Duration::from_secs(60),
            || async {
                let s = admin_secrets.get(name).await.ok()?;
                (s.labels().get(PROTECTED).map(String::as_str) == Some("true")).then_some(())
            },
        )
        .await;
    }
    let fanned = admin_secrets.get("fanned").await.expect("fanned");
    assert_eq!(
        fanned.annotations().get(DEPENDENTS).map(String::as_str),
        Some(format!("ConfigSync/{sync_name}").as_str())
    );
    assert!(
        admin_secrets
            .get("free")
            .await
            .expect("free")
            .labels()
            .get(PROTECTED)
            .is_none()
    );

    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let secrets: Api<Secret> = Api::namespaced(alice.clone(), &src);
    let dp = DeleteParams::default();
    let pp = PatchParams::default();

    // Deletes: refused, saying why and how.
    let message = conflux_tests::refusal(secrets.delete("fanned", &dp).await);
    assert!(
        message.contains(&format!("ConfigSync/{sync_name}")),
        "{message}"
    );
    assert!(
        message.contains("Secret") && message.contains("fanned"),
        "{message}"
    );
    let message = conflux_tests::refusal(secrets.delete("pulled", &dp).await);
    assert!(
        message.contains(&format!("Secret/{dst}/pulled (copyFrom)")),
        "{message}"
    );
    let message = conflux_tests::refusal(secrets.delete("opted-in", &dp).await);
    assert!(message.contains(ENABLED), "{message}");
    conflux_tests::leak::assert_clean("a denial", &message);

    // Data, type and immutability: refused.
    let data = json!({"data": {"leak-raw": conflux_tests::leak::base64(b"changed")}});
    assert!(
        !conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&data)).await)
            .is_empty()
    );
    assert!(
        !conflux_tests::refusal(secrets.patch("opted-in", &pp, &Patch::Merge(&data)).await)
            .is_empty()
    );
    let immutable = json!({"immutable": true});
    assert!(
        !conflux_tests::refusal(
            secrets
                .patch("pulled", &pp, &Patch::Merge(&immutable))
                .await
        )
        .is_empty()
    );

    // Labels and annotations: allowed, except those that protect.
    let label = json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}});
    assert_eq!(
        conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&label)).await),
        ""
    );
    let strip = json!({"metadata": {"labels": {PROTECTED: null}}});
    assert!(
        !conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&strip)).await)
            .is_empty()
    );
    let strip = json!({"metadata": {"annotations": {DEPENDENTS: null}}});
    assert!(
        !conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&strip)).await)
            .is_empty()
    );
    // The owner's own label (no exemptions named): whoever may edit the object may remove it,
    // after which its content may change.
    let strip = json!({"metadata": {"labels": {ENABLED: null}}});
    assert_eq!(
        conflux_tests::refusal(secrets.patch("opted-in", &pp, &Patch::Merge(&strip)).await),
        ""
    );
    assert_eq!(
        labels_of(&admin_secrets, "fanned")
            .await
            .get("team")
            .map(String::as_str),
        Some("a")
    );

    // Unprotected objects: anything goes.
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), &src);
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "scratch", "namespace": src}, "data": {"a": "1"}}),
    )
    .await;
    assert_eq!(
        conflux_tests::refusal(
            cms.patch("scratch", &pp, &Patch::Merge(&json!({"data": {"a": "2"}})))
                .await
        ),
        ""
    );
    assert_eq!(conflux_tests::refusal(cms.delete("scratch", &dp).await), "");
    assert_eq!(
        conflux_tests::refusal(secrets.delete("free", &dp).await),
        ""
    );

    // Latency: the same label flip on a protected Secret (webhook called) and on an unprotected
    // ConfigMap (no webhook), 200 times each.
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "plain", "namespace": src}}),
    )
    .await;
    let mut with_webhook = Vec::new();
    let mut without = Vec::new();
    for i in 0..200 {
        let flip = json!({"metadata": {"labels": {"flip": format!("v{i}")}}});
        let t = Instant::now();
        secrets
            .patch("fanned", &pp, &Patch::Merge(&flip))
            .await
            .expect("allowed");
        with_webhook.push(t.elapsed());
        let t = Instant::now();
        cms.patch("plain", &pp, &Patch::Merge(&flip))
            .await
            .expect("allowed");
        without.push(t.elapsed());
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    eprintln!(
        "protect latency, client side, 200 UPDATEs each: with the webhook p50 {:?} p99 {:?}; without p50 {:?} p99 {:?}",
        pct(&mut with_webhook, 0.5),
        pct(&mut with_webhook, 0.99),
        pct(&mut without, 0.5),
        pct(&mut without, 0.99),
    );
    let metrics = conflux.metrics();
    let decisions: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("conflux_protect_webhook_duration_seconds"))
        .collect();
    eprintln!("protect webhook histogram:\n{}", decisions.join("\n"));

    // The admin may do anything; conflux's own writes pass: once the ConfigSync is gone, conflux
    // removes the protection, and the tenant may delete the object.
    let admin_patch = json!({"data": {"leak-raw": conflux_tests::leak::base64(b"rotated")}});
    admin_secrets
        .patch("opted-in", &pp, &Patch::Merge(&admin_patch))
        .await
        .expect("admin may");
    admin_secrets
        .delete("opted-in", &dp)
        .await
        .expect("admin may");
    let syncs: Api<conflux_copy_core::ConfigSync> = Api::all(admin.clone());
    syncs
        .delete(&sync_name, &dp)
        .await
        .expect("delete ConfigSync");
    eventually(
        "protection removed by conflux",
        Duration::from_secs(60),
        || async {
            let s = admin_secrets.get("fanned").await.ok()?;
            (!s.labels().contains_key(PROTECTED) && !s.annotations().contains_key(DEPENDENTS))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        conflux_tests::refusal(secrets.delete("fanned", &dp).await),
        ""
    );

    // conflux stopped: unprotected objects are never blocked; protected ones stay protected
    // (failurePolicy Fail), which is the trade-off.
    conflux.stop();
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "while-down", "namespace": src}}),
    )
    .await;
    assert_eq!(
        conflux_tests::refusal(
            cms.patch(
                "while-down",
                &pp,
                &Patch::Merge(&json!({"data": {"b": "1"}}))
            )
            .await
        ),
        ""
    );
    assert_eq!(
        conflux_tests::refusal(cms.delete("while-down", &dp).await),
        ""
    );
    let message = conflux_tests::refusal(secrets.delete("pulled", &dp).await);
    assert!(
        !message.is_empty(),
        "a protected object stays protected while conflux is down"
    );
    assert!(admin_secrets.get("pulled").await.is_ok());
}

/// The certificate from `--webhook-cert-dir` (made here with openssl) is served and its CA
/// injected; a generated one about to expire is renewed at start; a source in kube-system is
/// said to be unprotectable, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_from_a_directory_or_renewed_and_kube_system_left_alone() {
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::config_sync_crd(),
    )
    .await;
    let system = cluster.namespace(&admin, "protect-certs").await;
    let src = cluster.namespace(&admin, "protect-certs-src").await;

    // A generated certificate 10 days from expiry: replaced at start.
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "conflux-webhook-cert", "namespace": system,
                     "annotations": {"protect.conflux.dev/not-after": "2000-01-01T00:00:00Z",
                                     "protect.conflux.dev/dns-names": "127.0.0.1"}},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "stale", "tls.key": "stale"}}),
    )
    .await;
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}/validate");
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-renew",
        &[
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url={url}"),
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;
    let certs: Api<Secret> = Api::namespaced(admin.clone(), &system);
    let renewed = certs
        .get("conflux-webhook-cert")
        .await
        .expect("cert Secret");
    let not_after = renewed
        .annotations()
        .get("protect.conflux.dev/not-after")
        .cloned()
        .unwrap_or_default();
    assert!(not_after.as_str() > "2026-01-01", "renewed: {not_after}");
    conflux.stop();

    // A certificate directory, as cert-manager would mount it.
    let dir = cluster.dir().join(format!("webhook-certs-{port}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=conflux-test",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success(), "openssl req");
    let port = free_port();
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-dir",
        &[
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url=https://127.0.0.1:{port}/validate"),
            &format!("--webhook-cert-dir={}", dir.display()),
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "guarded", "namespace": src, "labels": {ENABLED: "true"}},
        "stringData": conflux_tests::leak::string_data()}),
    )
    .await;
    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let secrets: Api<Secret> = Api::namespaced(alice, &src);
    // alice has no rights here; the webhook answers first only if RBAC allows, so grant edit.
    apply(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit", "namespace": src},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
    )
    .await;
    let message = conflux_tests::refusal(secrets.delete("guarded", &DeleteParams::default()).await);
    assert!(
        message.contains(ENABLED),
        "served with the directory's certificate: {message}"
    );

    // A ConfigSync source in kube-system: never labelled, said once.
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{src}-sys"), "namespace": "kube-system"}}),
    )
    .await;
    let sync_name = format!("{src}-sys");
    apply(
        &admin,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
        "metadata": {"name": sync_name},
        "spec": {"source": {"kind": "ConfigMap", "namespace": "kube-system", "name": sync_name},
                 "target": {"namespaceSelector": {"matchLabels": {"nobody": "here"}}}}}),
    )
    .await;
    eventually("NotProtected logged", Duration::from_secs(60), || {
        let log = conflux.log_text();
        async move { log.contains("NotProtected").then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = conflux.log_text();
    let said = log
        .lines()
        .filter(|l| l.contains("NotProtected") && l.contains(&sync_name))
        .count();
    assert_eq!(said, 1, "said once");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-system");
    let cm = cms.get(&sync_name).await.expect("source");
    assert!(
        !cm.labels().contains_key(PROTECTED),
        "kube-system is never protected"
    );
    let syncs: Api<conflux_copy_core::ConfigSync> = Api::all(admin.clone());
    syncs
        .delete(&sync_name, &DeleteParams::default())
        .await
        .expect("delete");
    conflux.stop();
}

/// The sum of `conflux_protect_webhook_requests_total` over its labels: reviews the webhook has
/// answered.
fn webhook_requests(conflux: &Conflux) -> f64 {
    conflux
        .metrics()
        .lines()
        .filter(|l| l.starts_with("conflux_protect_webhook_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// kube-system objects labelled for protection never reach the webhook: its namespaceSelector
/// spares them (the webhook's request counter does not move while a tenant changes and deletes
/// them), while the same object in another namespace is refused through the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_system_objects_never_reach_the_webhook() {
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::config_sync_crd(),
    )
    .await;
    let system = cluster.namespace(&admin, "protect-ks-system").await;
    let other = cluster.namespace(&admin, "protect-ks").await;
    let port = free_port();
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-kube-system",
        &[
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url=https://127.0.0.1:{port}/validate"),
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;
    let binding = format!("alice-edit-{}", std::process::id());
    for ns in ["kube-system", other.as_str()] {
        apply(
            &admin,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": binding, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
        )
        .await;
    }
    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let (pp, dp) = (PatchParams::default(), DeleteParams::default());
    let name = format!("guarded-{}", std::process::id());
    // Labelled by hand, without conflux's dependents annotation: the labeller only unlabels what
    // it labelled, so none of its writes reaches the webhook while the requests are counted.
    for ns in [other.as_str(), "kube-system"] {
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": ns,
                                "labels": {PROTECTED: "true", ENABLED: "true"}},
                   "data": {"a": "1"}}),
        )
        .await;
        let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), ns);
        let before = webhook_requests(&conflux);
        let data = json!({"data": {"a": "2"}});
        let changed = conflux_tests::refusal(cms.patch(&name, &pp, &Patch::Merge(&data)).await);
        let deleted = conflux_tests::refusal(cms.delete(&name, &dp).await);
        let after = webhook_requests(&conflux);
        if ns == "kube-system" {
            assert_eq!(changed, "", "kube-system is never protected");
            assert_eq!(deleted, "", "kube-system is never protected");
            assert_eq!(before, after, "the webhook was not called for kube-system");
        } else {
            assert!(changed.contains("is protected"), "{changed}");
            assert!(deleted.contains("is protected"), "{deleted}");
            assert!(
                after >= before + 2.0,
                "the webhook answered: {before} → {after}"
            );
        }
    }
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), "kube-system")
        .delete(&binding, &dp)
        .await
        .expect("clean up");
    conflux.stop();
}
