//! ReloadPolicy against a real API server with kube-controller-manager: workloads that carry no
//! annotation roll once per change of a config a policy selects (a rollout is a new ReplicaSet),
//! on the very decision path of the annotations (adoption, restarts and policy changes only move
//! baselines), and a bad policy is `Ready=False` with one Warning Event.
//!
//! Policies are cluster-scoped and the tests of this binary share one cluster: each policy
//! selects only its own test's namespace.

mod reload_support;

use std::time::Duration;

use conflux_reloader::policy::ReloadPolicy;
use conflux_tests::{cluster, eventually};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, CustomResourceExt};
use reload_support::*;
use serde_json::{Value, json};

/// The tests of this binary run one at a time: policies are cluster-scoped, and every
/// controller follows (and reports on) every policy, so another test's controller would add its
/// own Warning Event to a bad policy.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Coalescing window used by these tests.
const WINDOW: Duration = Duration::from_millis(300);

/// Long enough for any evaluation the window could still trigger.
async fn quiet() {
    tokio::time::sleep(WINDOW * 4).await;
}

/// Installs the ReloadPolicy CRD (the controller follows policies only when it is served).
async fn install_crd(client: &Client) {
    let crd = serde_json::from_value(serde_json::to_value(ReloadPolicy::crd()).expect("CRD JSON"))
        .expect("a CRD");
    conflux_tests::objects::install_crd(client, TEST_MANAGER, &crd).await;
}

/// Server-side applies the ReloadPolicy `name` with `spec`.
async fn apply_policy(client: &Client, name: &str, spec: Value) {
    let policy = json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ReloadPolicy",
        "metadata": {"name": name,
            "annotations": {"import.conflux.dev/source": "kyverno.io/v1 ClusterPolicy restart-deployment-on-secret-change, rule reload-deployments"}},
        "spec": spec});
    Api::<ReloadPolicy>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap_or_else(|e| panic!("apply ReloadPolicy {name}: {e}"));
}

async fn delete_policy(client: &Client, name: &str) {
    Api::<ReloadPolicy>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete ReloadPolicy {name}: {e}"));
}

/// Waits until the policy's `Ready` condition has `status` for its current generation, and
/// returns (reason, message).
async fn wait_ready(client: &Client, name: &str, status: &str) -> (String, String) {
    let api = Api::<ReloadPolicy>::all(client.clone());
    eventually(
        &format!("ReloadPolicy {name} Ready={status}"),
        Duration::from_secs(30),
        || async {
            let p = api.get(name).await.ok()?;
            let s = p.status?;
            let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
            (c.status == status
                && s.observed_generation == p.metadata.generation
                && c.observed_generation == p.metadata.generation)
                .then(|| (c.reason.clone(), c.message.clone()))
        },
    )
    .await
}

/// Warning Events about the policy `name` (cluster-scoped: its Events live in `default`), as
/// (reason, note).
async fn policy_events(client: &Client, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"))
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ReloadPolicy")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A pod spec reading the Secret `blogsecret`'s key `password` through `secretKeyRef`.
fn reads_blogsecret() -> Value {
    container(json!({"env": [{"name": "PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "blogsecret", "key": "password"}}}]}))
}

/// The policy of Kyverno's article, narrowed to the test's namespace.
fn article_policy(ns: &str) -> Value {
    json!({"configs": {"kinds": ["Secret"], "namespaces": [ns], "names": ["blogsecret"]},
           "workloads": {"kinds": ["Deployment"], "references": ["Env"]}})
}

/// Waits until the controller holds `n` opted-in workloads.
async fn workloads(conflux: &Running, n: i64) {
    eventually(
        &format!("{n} opted-in workload(s)"),
        Duration::from_secs(30),
        || {
            let now = conflux.metrics.workloads.get();
            async move { (now == n).then_some(()) }
        },
    )
    .await;
}

/// Adds an annotation to the Secret (a metadata-only write).
async fn annotate_secret(client: &Client, ns: &str, name: &str, value: &str) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate Secret {name}: {e}"));
}

#[tokio::test]
async fn a_policy_rolls_the_readers_once_per_change_and_nothing_else() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "rpol-roll").await;
    let policy = format!("restart-on-blogsecret-{ns}");
    apply_policy(&client, &policy, article_policy(&ns)).await;
    apply_secret(
        &client,
        &ns,
        "blogsecret",
        json!({"password": "one", "other": "a"}),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment("blog", json!({}), reads_blogsecret()),
    )
    .await;
    // A neighbour that does not read the Secret, and a reader that says `ignore`.
    create_deployment(
        &client,
        &ns,
        &deployment("neighbour", json!({}), container(json!({}))),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment(
            "ignored",
            json!({"reloader.stakater.com/ignore": "true"}),
            reads_blogsecret(),
        ),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    let (reason, _) = wait_ready(&client, &policy, "True").await;
    assert_eq!(reason, "Valid");

    // Adoption: a baseline, no rollout.
    wait_baseline(&client, &ns, "blog").await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);
    assert_eq!(conflux.rollouts(), 0);

    // A change of the key the pods read: one rollout of the reader.
    apply_secret(
        &client,
        &ns,
        "blogsecret",
        json!({"password": "two", "other": "a"}),
    )
    .await;
    let first = wait_rolled(&client, &ns, "blog", None).await;
    wait_replica_sets(&client, &ns, "blog", 2).await;
    quiet().await;
    assert_eq!(replica_sets(&client, &ns, "blog").await, 2);
    assert_eq!(conflux.rollouts(), 1);

    // A key the pods do not read, and a metadata-only write: no rollout.
    let before = conflux.evaluations();
    apply_secret(
        &client,
        &ns,
        "blogsecret",
        json!({"password": "two", "other": "b"}),
    )
    .await;
    conflux
        .evaluated_since(before, "unread key evaluated")
        .await;
    let before = conflux.evaluations();
    annotate_secret(&client, &ns, "blogsecret", "1").await;
    conflux
        .evaluated_since(before, "metadata write evaluated")
        .await;
    quiet().await;
    assert_eq!(
        template_hash(&client, &ns, "blog").await.as_deref(),
        Some(first.as_str())
    );

    // The next change rolls once more.
    apply_secret(
        &client,
        &ns,
        "blogsecret",
        json!({"password": "three", "other": "b"}),
    )
    .await;
    wait_rolled(&client, &ns, "blog", Some(&first)).await;
    wait_replica_sets(&client, &ns, "blog", 3).await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 2);
    for name in ["neighbour", "ignored"] {
        assert_eq!(template_hash(&client, &ns, name).await, None, "{name}");
        assert_eq!(replica_sets(&client, &ns, name).await, 1, "{name}");
    }
    drop(conflux);
    delete_policy(&client, &policy).await;
}

#[tokio::test]
async fn restarts_and_policy_changes_do_not_roll_and_a_change_while_down_rolls_once() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "rpol-restart").await;
    let policy = format!("restart-on-blogsecret-{ns}");
    apply_secret(&client, &ns, "blogsecret", json!({"password": "one"})).await;
    create_deployment(
        &client,
        &ns,
        &deployment("blog", json!({}), reads_blogsecret()),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;

    // The policy comes after the workload: adopted, not rolled.
    apply_policy(&client, &policy, article_policy(&ns)).await;
    wait_ready(&client, &policy, "True").await;
    let first = wait_baseline(&client, &ns, "blog").await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);
    assert_eq!(replica_sets(&client, &ns, "blog").await, 1);

    // Restart: nothing changed, nothing rolls.
    drop(conflux);
    let conflux = start(cluster, &ns, WINDOW).await;
    conflux
        .evaluated_since(0, "start-up evaluation of blog")
        .await;
    quiet().await;
    assert_eq!(conflux.decisions("rollout"), 0);
    assert_eq!(baseline(&client, &ns, "blog").await, Some(first));
    assert_eq!(replica_sets(&client, &ns, "blog").await, 1);

    // A change made while conflux is down rolls once when it is back.
    drop(conflux);
    apply_secret(&client, &ns, "blogsecret", json!({"password": "two"})).await;
    let conflux = start(cluster, &ns, WINDOW).await;
    let rolled = wait_rolled(&client, &ns, "blog", None).await;
    wait_replica_sets(&client, &ns, "blog", 2).await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 1);

    // Changing the policy (now only volumes), then deleting it, rolls nothing by itself; and a
    // change of the Secret no policy selects any more rolls nothing either.
    let mut narrowed = article_policy(&ns);
    narrowed["workloads"]["references"] = json!(["Volume"]);
    apply_policy(&client, &policy, narrowed).await;
    workloads(&conflux, 0).await;
    let before = conflux.evaluations();
    apply_policy(&client, &policy, article_policy(&ns)).await;
    workloads(&conflux, 1).await;
    conflux
        .evaluated_since(before, "policy change back evaluated")
        .await;
    delete_policy(&client, &policy).await;
    workloads(&conflux, 0).await;
    quiet().await;
    apply_secret(&client, &ns, "blogsecret", json!({"password": "three"})).await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, Some(rolled));
    assert_eq!(replica_sets(&client, &ns, "blog").await, 2);
    assert_eq!(conflux.rollouts(), 1);
}

#[tokio::test]
async fn a_bad_policy_is_not_ready_with_one_warning_event() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "rpol-bad").await;
    let bad_kind = format!("bad-kind-{ns}");
    let bad_glob = format!("bad-glob-{ns}");
    let bad_reference = format!("bad-reference-{ns}");
    let bad_selector = format!("bad-selector-{ns}");
    apply_policy(
        &client,
        &bad_kind,
        json!({"configs": {"namespaces": [ns]}, "workloads": {"kinds": ["Pod"]}}),
    )
    .await;
    apply_policy(
        &client,
        &bad_glob,
        json!({"configs": {"namespaces": [ns], "names": ["Blog/Secret"]}}),
    )
    .await;
    apply_policy(
        &client,
        &bad_reference,
        json!({"configs": {"namespaces": [ns]}, "workloads": {"references": ["Mount"]}}),
    )
    .await;
    apply_policy(
        &client,
        &bad_selector,
        json!({"configs": {"namespaces": [ns],
            "selector": {"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}}}),
    )
    .await;
    // A reader in the namespace: a bad policy opts nothing in.
    apply_secret(&client, &ns, "blogsecret", json!({"password": "one"})).await;
    create_deployment(
        &client,
        &ns,
        &deployment("blog", json!({}), reads_blogsecret()),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    for (name, want) in [
        (&bad_kind, "UnknownWorkloadKind"),
        (&bad_glob, "InvalidGlob"),
        (&bad_reference, "UnknownReference"),
        (&bad_selector, "InvalidSelector"),
    ] {
        let (reason, message) = wait_ready(&client, name, "False").await;
        assert_eq!(reason, want, "{name}: {message}");
        let events = eventually(
            &format!("Warning Event on {name}"),
            Duration::from_secs(30),
            || {
                let client = client.clone();
                async move {
                    let events = policy_events(&client, name).await;
                    (!events.is_empty()).then_some(events)
                }
            },
        )
        .await;
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        assert_eq!(events[0].0, want);
    }
    apply_secret(&client, &ns, "blogsecret", json!({"password": "two"})).await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);
    assert_eq!(conflux.rollouts(), 0);
    // Fixed: Ready=True for the new generation, and the reader is opted in (adopted, no
    // rollout).
    apply_policy(
        &client,
        &bad_kind,
        json!({"configs": {"namespaces": [ns]}, "workloads": {"kinds": ["Deployment"]}}),
    )
    .await;
    wait_ready(&client, &bad_kind, "True").await;
    wait_baseline(&client, &ns, "blog").await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 0);
    assert_eq!(
        policy_events(&client, &bad_kind).await.len(),
        1,
        "no Event repeated"
    );
    drop(conflux);
    for name in [bad_kind, bad_glob, bad_reference, bad_selector] {
        delete_policy(&client, &name).await;
    }
}

/// Labels the Namespace `ns` with `labels` (a merge patch; `null` removes a label).
async fn label_namespace(client: &Client, ns: &str, labels: Value) {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label Namespace {ns}: {e}"));
}

#[tokio::test]
async fn a_namespace_selector_follows_the_namespaces_labels_without_rolling() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "rpol-nssel").await;
    let policy = format!("tenants-{ns}");
    apply_policy(
        &client,
        &policy,
        json!({"configs": {"namespaces": [ns]},
               "workloads": {"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}}),
    )
    .await;
    apply_secret(&client, &ns, "blogsecret", json!({"password": "one"})).await;
    create_deployment(
        &client,
        &ns,
        &deployment("blog", json!({}), reads_blogsecret()),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_ready(&client, &policy, "True").await;
    // Not a tenant yet: not opted in, a change rolls nothing.
    workloads(&conflux, 0).await;
    apply_secret(&client, &ns, "blogsecret", json!({"password": "two"})).await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);

    // Labelled a tenant: opted in (adopted), not rolled.
    label_namespace(&client, &ns, json!({"tenant": "yes"})).await;
    workloads(&conflux, 1).await;
    wait_baseline(&client, &ns, "blog").await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);
    assert_eq!(replica_sets(&client, &ns, "blog").await, 1);

    // Now a change rolls once.
    apply_secret(&client, &ns, "blogsecret", json!({"password": "three"})).await;
    let rolled = wait_rolled(&client, &ns, "blog", None).await;
    wait_replica_sets(&client, &ns, "blog", 2).await;

    // The label removed: out again, without a rollout; a change rolls nothing.
    label_namespace(&client, &ns, json!({"tenant": null})).await;
    workloads(&conflux, 0).await;
    apply_secret(&client, &ns, "blogsecret", json!({"password": "four"})).await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, Some(rolled));
    assert_eq!(replica_sets(&client, &ns, "blog").await, 2);
    assert_eq!(conflux.rollouts(), 1);
    drop(conflux);
    delete_policy(&client, &policy).await;
}

/// Labels the Secret (a metadata-only write).
async fn label_secret(client: &Client, ns: &str, name: &str, labels: Value) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label Secret {name}: {e}"));
}

#[tokio::test]
async fn a_config_selector_follows_the_configs_labels() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "rpol-cfgsel").await;
    let policy = format!("labelled-{ns}");
    apply_policy(
        &client,
        &policy,
        json!({"configs": {"namespaces": [ns], "selector": {"matchLabels": {"rotate": "yes"}}}}),
    )
    .await;
    apply_secret(&client, &ns, "blogsecret", json!({"password": "one"})).await;
    create_deployment(
        &client,
        &ns,
        &deployment("blog", json!({}), reads_blogsecret()),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_ready(&client, &policy, "True").await;
    // A candidate (its labels could select it): adopted, not rolled.
    wait_baseline(&client, &ns, "blog").await;

    // Unlabelled: a change rolls nothing.
    let before = conflux.evaluations();
    apply_secret(&client, &ns, "blogsecret", json!({"password": "two"})).await;
    conflux
        .evaluated_since(before, "unselected change evaluated")
        .await;
    // Labelled (metadata only): selected now, nothing rolls.
    let before = conflux.evaluations();
    label_secret(&client, &ns, "blogsecret", json!({"rotate": "yes"})).await;
    conflux.evaluated_since(before, "label evaluated").await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "blog").await, None);
    assert_eq!(replica_sets(&client, &ns, "blog").await, 1);

    // Selected: a change rolls once.
    apply_secret(&client, &ns, "blogsecret", json!({"password": "three"})).await;
    wait_rolled(&client, &ns, "blog", None).await;
    wait_replica_sets(&client, &ns, "blog", 2).await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 1);
    drop(conflux);
    delete_policy(&client, &policy).await;
}
