//! The three ClusterPolicies of Kyverno's article "Reloading Secrets and ConfigMaps with Kyverno"
//! (`tests/kyverno/article-policies.yaml`) go through `conflux import kyverno`, and the output,
//! applied next to `conflux run --controllers copy,sync,protect,reload` (admission-policy mode) on
//! a real API server with kube-controller-manager, does what Kyverno did:
//! - the clone reaches existing and new namespaces, not system ones (nor Kyverno's);
//! - a deleted clone comes back;
//! - an admin's change reaches every clone;
//! - a tenant with `edit` in the source's namespace can neither change nor delete the source, and
//!   is told why, in the policy's words;
//! - a Deployment that reads the Secret through `secretKeyRef`, and carries no annotation, rolls
//!   once per change, while its neighbour that does not read it never rolls.
//!
//! The policies name fixed namespaces (`platform`, `kyverno`), so this binary holds one test.

mod fault_support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use conflux_tests::eventually;
use fault_support::Conflux;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, CustomResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-kyverno-article-test";
const ARTICLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/kyverno/article-policies.yaml"
);

async fn apply(client: &Client, object: &Value) {
    conflux_tests::objects::apply(client, MANAGER, object).await;
}

async fn install_crd<K: CustomResourceExt>(client: &Client) {
    let crd =
        serde_json::from_value(serde_json::to_value(K::crd()).expect("CRD JSON")).expect("a CRD");
    conflux_tests::objects::install_crd(client, MANAGER, &crd).await;
}

/// `conflux import kyverno` on the article: the objects it prints.
fn imported() -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(["import", "kyverno", ARTICLE])
        .output()
        .expect("conflux import runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML")
}

/// The Secret's data as text, by key (the test's own fake values).
async fn data(api: &Api<Secret>, name: &str) -> Option<BTreeMap<String, String>> {
    let secret = api.get_opt(name).await.ok()??;
    Some(
        secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect(),
    )
}

/// A Deployment `name` in `ns` whose container has `env`.
fn deployment(ns: &str, name: &str, env: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1", "env": env}]}}}})
}

/// How many ReplicaSets kube-controller-manager made for the Deployment `app` (one per rollout,
/// plus the first).
async fn replica_sets(client: &Client, ns: &str, app: &str) -> usize {
    Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list ReplicaSets")
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_articles_policies_imported_and_applied_do_what_kyverno_did() {
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    install_crd::<conflux_copy_core::ConfigSync>(&admin).await;
    install_crd::<conflux_copy_core::protect_crd::ProtectPolicy>(&admin).await;
    install_crd::<conflux_reloader::policy::ReloadPolicy>(&admin).await;
    let system = cluster.namespace(&admin, "kyverno-article-system").await;
    for ns in ["platform", "kyverno", "team-a"] {
        apply(
            &admin,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    // The tenant: Kubernetes' own `edit` role where the source lives.
    apply(
        &admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant-edit", "namespace": "platform"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]}),
    )
    .await;
    let secret = |value: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "blogsecret", "namespace": "platform"},
               "stringData": {"password": value}})
    };
    apply(&admin, &secret("first")).await;

    for object in imported() {
        apply(&admin, &object).await;
    }
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "kyverno-article",
        &[
            "--controllers=copy,sync,protect,reload",
            "--protect-mode=admission-policy",
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;

    // The clone reaches the existing namespace, and one made afterwards; not the system ones.
    let wait_clone = |ns: &'static str, value: &'static str| {
        let api = Api::<Secret>::namespaced(admin.clone(), ns);
        async move {
            eventually(
                &format!("{ns}/blogsecret holds {value}"),
                Duration::from_secs(60),
                || {
                    let api = api.clone();
                    async move {
                        (data(&api, "blogsecret").await?.get("password")? == value).then_some(())
                    }
                },
            )
            .await
        }
    };
    wait_clone("team-a", "first").await;
    apply(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}),
    )
    .await;
    wait_clone("team-b", "first").await;
    for ns in ["kube-system", "kube-public", "kyverno"] {
        let api = Api::<Secret>::namespaced(admin.clone(), ns);
        assert!(
            api.get_opt("blogsecret").await.expect("get").is_none(),
            "no clone in {ns}"
        );
    }

    // A deleted clone comes back.
    Api::<Secret>::namespaced(admin.clone(), "team-a")
        .delete("blogsecret", &DeleteParams::default())
        .await
        .expect("delete the clone");
    wait_clone("team-a", "first").await;

    // Two Deployments, neither annotated: one reads the Secret through secretKeyRef.
    apply(
        &admin,
        &deployment(
            "team-a",
            "reader",
            json!([{"name": "PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "blogsecret", "key": "password"}}}]),
        ),
    )
    .await;
    apply(
        &admin,
        &deployment(
            "team-a",
            "neighbour",
            json!([{"name": "MODE", "value": "plain"}]),
        ),
    )
    .await;
    for app in ["reader", "neighbour"] {
        eventually(
            &format!("{app}'s first ReplicaSet"),
            Duration::from_secs(60),
            || async { (replica_sets(&admin, "team-a", app).await == 1).then_some(()) },
        )
        .await;
    }
    eventually(
        "the reload controller follows the reader",
        Duration::from_secs(60),
        || {
            let metrics = conflux.metrics();
            async move {
                metrics
                    .lines()
                    .any(|l| l.starts_with("conflux_reload_workloads ") && l.ends_with(" 1"))
                    .then_some(())
            }
        },
    )
    .await;

    // The source is protected before anyone changes it.
    let sources = Api::<Secret>::namespaced(admin.clone(), "platform");
    eventually(
        "platform/blogsecret protected",
        Duration::from_secs(60),
        || async {
            let s = sources.get("blogsecret").await.ok()?;
            (s.metadata.labels?.get("protect.conflux.dev/protected")? == "true").then_some(())
        },
    )
    .await;

    // Two changes by an admin: each reaches every clone, and rolls the reader once.
    for (round, value) in [(2, "second"), (3, "third")] {
        apply(&admin, &secret(value)).await;
        wait_clone("team-a", value).await;
        wait_clone("team-b", value).await;
        eventually(
            &format!("the reader's rollout {round}"),
            Duration::from_secs(60),
            || async { (replica_sets(&admin, "team-a", "reader").await == round).then_some(()) },
        )
        .await;
        // Past the coalescing window (500 ms here): no second rollout follows.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(replica_sets(&admin, "team-a", "reader").await, round);
        assert_eq!(replica_sets(&admin, "team-a", "neighbour").await, 1);
    }

    // The tenant can neither change nor delete the source, and is told why.
    let tenant = Api::<Secret>::namespaced(
        conflux_tests::cluster().impersonating("tenant", &[]).await,
        "platform",
    );
    let changed = conflux_tests::refusal(
        tenant
            .patch(
                "blogsecret",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"password": "mine"}})),
            )
            .await,
    );
    let deleted =
        conflux_tests::refusal(tenant.delete("blogsecret", &DeleteParams::default()).await);
    for refused in [&changed, &deleted] {
        assert!(
            refused.contains("This Secret is protected and may not be altered or deleted."),
            "{refused}"
        );
    }
    assert_eq!(
        data(&sources, "blogsecret")
            .await
            .and_then(|d| d.get("password").cloned())
            .as_deref(),
        Some("third")
    );
    conflux.stop();
}
