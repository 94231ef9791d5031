//! Reloader parity, against a real API server with kube-controller-manager: each test is written
//! from the Reloader end-to-end test it mirrors (stakater/Reloader `test/e2e`, named in each test's
//! comment), with Reloader's own observable: the pod template's
//! `reloader.stakater.com/last-reloaded-from` (or a `STAKATER_*` variable) changes, and a
//! ReplicaSet is created.
//!
//! Negative assertions wait for a barrier: the controller's evaluation counter moving past the
//! event (the workload was hashed and decided).

mod reload_support;

use std::collections::BTreeSet;
use std::time::Duration;

use conflux_reloader::filters::NamespaceFilter;
use conflux_reloader::opt_in::Options;
use conflux_reloader::patch::ReloadStrategy;
use conflux_reloader::runtime::ReloadConfig;
use conflux_reloader::{WorkloadKind, settings};
use conflux_tests::{cluster, eventually, label_namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use reload_support::*;
use serde_json::json;

/// Coalescing window used by these tests.
const WINDOW: Duration = Duration::from_millis(300);

/// A controller for `ns` with `options`.
fn config(ns: &str, options: Options) -> ReloadConfig {
    ReloadConfig {
        namespace: Some(ns.to_owned()),
        debounce: WINDOW,
        rate: 100.0,
        burst: 100,
        options,
        ..ReloadConfig::default()
    }
}

/// A pod spec reading the ConfigMap `cm` whole.
fn reads_cm(cm: &str) -> serde_json::Value {
    container(json!({"envFrom": [{"configMapRef": {"name": cm}}]}))
}

/// Applies a change and waits until the controller evaluated after it.
async fn then_evaluated<F: std::future::Future<Output = ()>>(
    conflux: &Running,
    what: &str,
    change: F,
) {
    let before = conflux.evaluations();
    change.await;
    conflux.evaluated_since(before, what).await;
}

/// The first flip case (Reloader's `resource_ignore_test.go` and `update_test.go`): a
/// ConfigMap's data changes in the same update that removes its `ignore` annotation. Reloader
/// reads the new annotations and rolls; so does conflux. Adding `ignore` with a change does not.
#[tokio::test]
async fn ignore_removed_together_with_a_change_rolls() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-flip-ignore").await;
    let ignore = json!({"reloader.stakater.com/ignore": "true"});
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), ignore.clone()).await;
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), reads_cm("cfg")),
    )
    .await;
    let conflux = start_with(cluster, config(&ns, Options::default())).await;
    wait_baseline(&client, &ns, "web").await;

    // While ignored, changes do not roll.
    then_evaluated(
        &conflux,
        "ignored change",
        apply_cm(&client, &ns, "cfg", json!({"k": "2"}), ignore.clone()),
    )
    .await;
    assert_eq!(last_reloaded_from(&client, &ns, "web").await, None);

    // ignore removed + data changed in one update: rolls, naming the config and the key.
    apply_cm(&client, &ns, "cfg", json!({"k": "3"}), json!({})).await;
    let source = wait_reloaded_from(&client, &ns, "web", None).await;
    assert_eq!(source["type"], "CONFIGMAP");
    assert_eq!(source["name"], "cfg");
    assert_eq!(source["namespace"], ns.as_str());
    assert_eq!(source["containerRefs"], json!(["app"]));
    wait_replica_sets(&client, &ns, "web", 2).await;
    let reloaded = events(&client, &ns, "web", "Reloaded").await;
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert!(
        reloaded[0].1.starts_with("ConfigMap cfg changed (keys k)"),
        "{reloaded:?}"
    );

    // ignore added + data changed in one update: no rollout.
    then_evaluated(
        &conflux,
        "ignore added with a change",
        apply_cm(&client, &ns, "cfg", json!({"k": "4"}), ignore),
    )
    .await;
    assert_eq!(replica_sets(&client, &ns, "web").await, 2);
    conflux.assert_rollouts(1).await;
}

/// The second flip case (Reloader's `search_match_test.go`): `match` is added to a
/// ConfigMap in the same update that changes its data, for a workload with `search`.
#[tokio::test]
async fn match_added_together_with_a_change_rolls() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-flip-match").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), json!({})).await;
    create_deployment(
        &client,
        &ns,
        &deployment(
            "web",
            json!({"reloader.stakater.com/search": "true"}),
            reads_cm("cfg"),
        ),
    )
    .await;
    let conflux = start_with(cluster, config(&ns, Options::default())).await;
    wait_baseline(&client, &ns, "web").await;

    // Without match: no rollout ("should NOT reload when workload has search but ConfigMap has
    // no match").
    then_evaluated(
        &conflux,
        "change without match",
        apply_cm(&client, &ns, "cfg", json!({"k": "2"}), json!({})),
    )
    .await;
    assert_eq!(replica_sets(&client, &ns, "web").await, 1);

    // match added with a change: rolls.
    apply_cm(
        &client,
        &ns,
        "cfg",
        json!({"k": "3"}),
        json!({"reloader.stakater.com/match": "true"}),
    )
    .await;
    wait_reloaded_from(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    conflux.assert_rollouts(1).await;
}

/// Reloader v1.4 parses `auto` with Go's `strconv.ParseBool` (`auto_reload_test.go` uses
/// "true"; the released line also takes these forms).
#[tokio::test]
async fn auto_takes_reloaders_boolean_forms() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-bool").await;
    let forms = [("t-upper", "True"), ("one", "1"), ("typed", "T")];
    for (name, value) in forms {
        apply_cm(&client, &ns, name, json!({"k": "1"}), json!({})).await;
        let key = if name == "typed" {
            "configmap.reloader.stakater.com/auto"
        } else {
            "reloader.stakater.com/auto"
        };
        create_deployment(
            &client,
            &ns,
            &deployment(name, json!({key: value}), reads_cm(name)),
        )
        .await;
    }
    let conflux = start_with(cluster, config(&ns, Options::default())).await;
    for (name, _) in forms {
        wait_baseline(&client, &ns, name).await;
        apply_cm(&client, &ns, name, json!({"k": "2"}), json!({})).await;
    }
    for (name, _) in forms {
        wait_reloaded_from(&client, &ns, name, None).await;
        wait_replica_sets(&client, &ns, name, 2).await;
    }
    conflux.assert_rollouts(3).await;
    // No annotation problem is reported for these forms.
    for (name, _) in forms {
        assert!(
            events(&client, &ns, name, "InvalidAnnotation")
                .await
                .is_empty(),
            "{name}"
        );
    }
}

/// `flags/reload_on_create_test.go` and `flags/reload_on_delete_test.go`: a config named by a
/// `reload` annotation is created, then deleted. conflux rolls by default (its defaults are
/// `--reload-on-create=true`, `--reload-on-delete=true`); with both false (Reloader's defaults)
/// it does not.
#[tokio::test]
async fn named_configs_created_and_deleted_follow_the_flags() {
    let cluster = cluster();
    let client = cluster.client().await;
    for (label, on) in [("on", true), ("off", false)] {
        let ns = cluster
            .namespace(&client, &format!("compat-create-{label}"))
            .await;
        let named = json!({"configmap.reloader.stakater.com/reload": "later",
                           "secret.reloader.stakater.com/reload": "later-secret"});
        create_deployment(
            &client,
            &ns,
            &deployment("web", named, container(json!({}))),
        )
        .await;
        let options = Options {
            reload_on_create: on,
            reload_on_delete: on,
            ..Options::default()
        };
        let conflux = start_with(cluster, config(&ns, options)).await;
        wait_baseline(&client, &ns, "web").await;
        let steps = [
            "ConfigMap created",
            "Secret created",
            "ConfigMap deleted",
            "Secret deleted",
        ];
        for (i, what) in steps.iter().enumerate() {
            let before = last_reloaded_from(&client, &ns, "web").await;
            let change = async {
                match i {
                    0 => apply_cm(&client, &ns, "later", json!({"k": "v"}), json!({})).await,
                    1 => {
                        apply_secret(&client, &ns, "later-secret", json!({"password": "secret"}))
                            .await
                    }
                    2 => delete_cm(&client, &ns, "later").await,
                    _ => delete_secret(&client, &ns, "later-secret").await,
                }
            };
            if on {
                change.await;
                wait_reloaded_from(&client, &ns, "web", before.as_deref()).await;
                wait_replica_sets(&client, &ns, "web", i + 2).await;
            } else {
                then_evaluated(&conflux, what, change).await;
                assert_eq!(replica_sets(&client, &ns, "web").await, 1, "{what}");
            }
        }
        eprintln!("{label}: rollouts");
        conflux.assert_rollouts(if on { 4 } else { 0 }).await;
    }
}

/// `flags/ignore_resources_test.go`: with `--resources-to-ignore=secrets`, a Secret change does
/// not roll and a ConfigMap change still does.
#[tokio::test]
async fn resources_to_ignore_secrets() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-ignore-res").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), json!({})).await;
    apply_secret(&client, &ns, "sec", json!({"k": "1"})).await;
    let spec = container(
        json!({"envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec"}}]}),
    );
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), spec),
    )
    .await;
    let options = Options {
        ignore_secrets: true,
        ..Options::default()
    };
    let conflux = start_with(cluster, config(&ns, options)).await;
    wait_baseline(&client, &ns, "web").await;
    then_evaluated(
        &conflux,
        "Secret change",
        apply_secret(&client, &ns, "sec", json!({"k": "2"})),
    )
    .await;
    assert_eq!(replica_sets(&client, &ns, "web").await, 1);
    apply_cm(&client, &ns, "cfg", json!({"k": "2"}), json!({})).await;
    let source = wait_reloaded_from(&client, &ns, "web", None).await;
    assert_eq!(source["type"], "CONFIGMAP");
    conflux.assert_rollouts(1).await;
}

/// `flags/ignored_workloads_test.go`: with `--ignored-workload-types=cronjobs`, a CronJob is not
/// rolled and a Deployment still is.
#[tokio::test]
async fn ignored_workload_types_cronjobs() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-ignore-kind").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), json!({})).await;
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), reads_cm("cfg")),
    )
    .await;
    let mut job_spec = reads_cm("cfg");
    job_spec["restartPolicy"] = json!("OnFailure");
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "annotations": {AUTO.0: AUTO.1}},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {"spec": job_spec}}}}});
    let gvk = kube::api::GroupVersionKind::gvk("batch", "v1", "CronJob");
    let crons: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk_with_plural(&gvk, "cronjobs"),
    );
    crons
        .patch(
            "nightly",
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&cron),
        )
        .await
        .expect("apply CronJob");
    let mut cfg = config(&ns, Options::default());
    cfg.ignored_kinds = BTreeSet::from([WorkloadKind::CronJob]);
    let conflux = start_with(cluster, cfg).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "2"}), json!({})).await;
    wait_reloaded_from(&client, &ns, "web", None).await;
    let cron = crons.get("nightly").await.expect("CronJob");
    assert!(
        cron.metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("conflux.dev/")),
        "the CronJob is never touched"
    );
    conflux.assert_rollouts(1).await;
}

/// `flags/namespace_selector_test.go` and `flags/namespace_ignore_test.go`: a cluster-wide
/// controller with `--namespace-selector` rolls in matching namespaces only, and never in a
/// namespace named by `--namespaces-to-ignore`; a namespace labelled later is served from then on.
#[tokio::test]
async fn namespace_selector_and_namespaces_to_ignore() {
    let cluster = cluster();
    let client = cluster.client().await;
    let matching = cluster.namespace(&client, "compat-ns-match").await;
    let ignored = cluster.namespace(&client, "compat-ns-ignored").await;
    let other = cluster.namespace(&client, "compat-ns-other").await;
    // A label unique to this test, so the cluster-wide controller serves only its namespaces.
    let team = format!("t{}", std::process::id());
    for ns in [&matching, &ignored] {
        label_namespace(&client, ns, &[("conflux-test-team", &team)]).await;
    }
    for ns in [&matching, &ignored, &other] {
        apply_cm(&client, ns, "cfg", json!({"k": "1"}), json!({})).await;
        create_deployment(
            &client,
            ns,
            &deployment("web", json!({AUTO.0: AUTO.1}), reads_cm("cfg")),
        )
        .await;
    }
    let selector =
        conflux_reloader::filters::reloader_selector(&[format!("conflux-test-team:{team}")])
            .expect("selector");
    // Cluster-wide: its memory in the first namespace.
    let cfg = ReloadConfig {
        namespace: None,
        namespaces: NamespaceFilter::new(selector, [ignored.clone()]),
        records_namespace: Some(matching.clone()),
        ..config("", Options::default())
    };
    let remembered_of = |ns: String| {
        let (client, matching) = (client.clone(), matching.clone());
        async move { remembered(&client, &matching, "apps", "Deployment", &ns, "web").await }
    };
    let conflux = start_with(cluster, cfg).await;
    wait_baseline(&client, &matching, "web").await;
    for ns in [&matching, &ignored, &other] {
        apply_cm(&client, ns, "cfg", json!({"k": "2"}), json!({})).await;
    }
    wait_reloaded_from(&client, &matching, "web", None).await;
    wait_replica_sets(&client, &matching, "web", 2).await;
    // The others were never evaluated: no baseline either.
    tokio::time::sleep(WINDOW * 4).await;
    for ns in [&ignored, &other] {
        assert_eq!(remembered_of(ns.clone()).await, None, "{ns}");
        assert_eq!(replica_sets(&client, ns, "web").await, 1, "{ns}");
    }
    // `other` gains the label: served from now on (a baseline first, then changes roll).
    label_namespace(&client, &other, &[("conflux-test-team", &team)]).await;
    eventually("a baseline of other/web", Duration::from_secs(30), || {
        remembered_of(other.clone())
    })
    .await;
    apply_cm(&client, &other, "cfg", json!({"k": "3"}), json!({})).await;
    wait_reloaded_from(&client, &other, "web", None).await;
    conflux.assert_rollouts(2).await;
}

/// `flags/resource_selector_test.go`: with `--resource-label-selector=reload=true`, a labelled
/// ConfigMap's change rolls and an unlabelled one's does not; a ConfigMap labelled in the same
/// update that changes it rolls (it is now selected, as in Reloader, which reads the new labels).
#[tokio::test]
async fn resource_label_selector() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-res-sel").await;
    let labelled = |name: &str, data: serde_json::Value, labels: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "labels": labels}, "data": data})
    };
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &labelled("with", json!({"k": "1"}), json!({"reload": "true"})),
    )
    .await;
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &labelled("without", json!({"k": "1"}), json!({})),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment("a", json!({AUTO.0: AUTO.1}), reads_cm("with")),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment("b", json!({AUTO.0: AUTO.1}), reads_cm("without")),
    )
    .await;
    let mut cfg = config(&ns, Options::default());
    cfg.config_selector = conflux_reloader::filters::reloader_selector(&["reload:true".to_owned()])
        .expect("selector");
    let conflux = start_with(cluster, cfg).await;
    wait_baseline(&client, &ns, "a").await;
    wait_baseline(&client, &ns, "b").await;
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &labelled("with", json!({"k": "2"}), json!({"reload": "true"})),
    )
    .await;
    wait_reloaded_from(&client, &ns, "a", None).await;
    then_evaluated(
        &conflux,
        "unlabelled change",
        apply_as(
            &client,
            &ns,
            TEST_MANAGER,
            &labelled("without", json!({"k": "2"}), json!({})),
        ),
    )
    .await;
    assert_eq!(replica_sets(&client, &ns, "b").await, 1);
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &labelled("without", json!({"k": "3"}), json!({"reload": "true"})),
    )
    .await;
    wait_reloaded_from(&client, &ns, "b", None).await;
    conflux.assert_rollouts(2).await;
}

/// `--reload-strategy=env-vars` (Reloader's default strategy; `core/reference_methods_test.go`
/// waits for the `STAKATER_` variable): the variable appears in the container that reads the
/// config, changes on the next change, and a Flux-style re-apply of the manifest does not remove it.
#[tokio::test]
async fn env_vars_strategy() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-env").await;
    apply_cm(&client, &ns, "my-config", json!({"k": "1"}), json!({})).await;
    let spec = json!({"containers": [
        {"name": "side", "image": "registry.invalid/side:1"},
        {"name": "app", "image": "registry.invalid/app:1", "envFrom": [{"configMapRef": {"name": "my-config"}}]},
    ]});
    let manifest = deployment("web", json!({AUTO.0: AUTO.1}), spec);
    create_deployment(&client, &ns, &manifest).await;
    let options = Options {
        reload_strategy: ReloadStrategy::EnvVars,
        ..Options::default()
    };
    let conflux = start_with(cluster, config(&ns, options)).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "my-config", json!({"k": "2"}), json!({})).await;
    let first = eventually("STAKATER variable", Duration::from_secs(30), || async {
        let env = stakater_env(&client, &ns, "web").await;
        (!env.is_empty()).then_some(env)
    })
    .await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        (first[0].0.as_str(), first[0].1.as_str()),
        ("app", "STAKATER_MY_CONFIG_CONFIGMAP")
    );
    assert_eq!(
        template_hash(&client, &ns, "web").await,
        None,
        "no annotation with env-vars"
    );
    wait_replica_sets(&client, &ns, "web", 2).await;
    // The manifest applied again by its owner (as Flux does): the variable stays, no rollout. (An
    // apply that changes nothing writes nothing, so there is no evaluation to wait for.)
    apply_as(&client, &ns, TEST_MANAGER, &manifest).await;
    tokio::time::sleep(WINDOW * 4).await;
    assert_eq!(stakater_env(&client, &ns, "web").await, first);
    apply_cm(&client, &ns, "my-config", json!({"k": "3"}), json!({})).await;
    eventually(
        "STAKATER variable changed",
        Duration::from_secs(30),
        || async {
            let env = stakater_env(&client, &ns, "web").await;
            (env.len() == 1 && env[0].2 != first[0].2).then_some(())
        },
    )
    .await;
    wait_replica_sets(&client, &ns, "web", 3).await;
    conflux.assert_rollouts(2).await;
}

/// `annotations/pause_period_test.go`: a Deployment with `pause-period` is paused after a reload
/// (`paused-at` set), several changes during the pause make one rollout when it resumes, and a
/// controller restarted during the pause still resumes it.
#[tokio::test]
async fn pause_period_pauses_then_resumes_once() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-pause").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), json!({})).await;
    let annotations =
        json!({"configmap.reloader.stakater.com/reload": "cfg", settings::PAUSE_PERIOD: "4s"});
    create_deployment(
        &client,
        &ns,
        &deployment("web", annotations, reads_cm("cfg")),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment(
            "plain",
            json!({"configmap.reloader.stakater.com/reload": "cfg"}),
            reads_cm("cfg"),
        ),
    )
    .await;
    let conflux = start_with(cluster, config(&ns, Options::default())).await;
    wait_baseline(&client, &ns, "web").await;
    wait_baseline(&client, &ns, "plain").await;

    apply_cm(&client, &ns, "cfg", json!({"k": "2"}), json!({})).await;
    wait_reloaded_from(&client, &ns, "web", None).await;
    let first = last_reloaded_from(&client, &ns, "web").await;
    let paused = get_deployment(&client, &ns, "web").await;
    assert_eq!(paused.spec.paused, Some(true), "paused after the reload");
    assert!(
        paused
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(settings::PAUSED_AT)
    );
    // Without pause-period: not paused ("should NOT pause Deployment without pause-period").
    wait_reloaded_from(&client, &ns, "plain", None).await;
    let plain = get_deployment(&client, &ns, "plain").await;
    assert_ne!(plain.spec.paused, Some(true));
    assert!(
        !plain
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(settings::PAUSED_AT)
    );

    // Another change during the pause, and a restart of the controller.
    apply_cm(&client, &ns, "cfg", json!({"k": "3"}), json!({})).await;
    wait_reloaded_from(&client, &ns, "web", first.as_deref()).await;
    drop(conflux);
    let _conflux = start_with(cluster, config(&ns, Options::default())).await;
    // Resumed after the period, by the restarted controller; while paused, no ReplicaSet came.
    eventually("resumed", Duration::from_secs(60), || async {
        let d = get_deployment(&client, &ns, "web").await;
        let annotations = d.metadata.annotations.unwrap_or_default();
        (d.spec.paused != Some(true) && !annotations.contains_key(settings::PAUSED_AT))
            .then_some(())
    })
    .await;
    // One rollout for both changes.
    wait_replica_sets(&client, &ns, "web", 2).await;
    tokio::time::sleep(WINDOW * 4).await;
    assert_eq!(replica_sets(&client, &ns, "web").await, 2);
}

/// conflux's per-workload coalescing window (Reloader's issue #856): after a rollout, a workload
/// with `conflux.dev/reload-debounce: "0s"` rolls on the next change at once, while one under
/// the controller's ten-minute window coalesces it (a lone first change rolls both at once).
#[tokio::test]
async fn per_workload_debounce() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "compat-debounce").await;
    apply_cm(&client, &ns, "cfg", json!({"k": "1"}), json!({})).await;
    let fast = json!({AUTO.0: AUTO.1, settings::RELOAD_DEBOUNCE: "0s"});
    create_deployment(&client, &ns, &deployment("fast", fast, reads_cm("cfg"))).await;
    create_deployment(
        &client,
        &ns,
        &deployment("slow", json!({AUTO.0: AUTO.1}), reads_cm("cfg")),
    )
    .await;
    let mut cfg = config(&ns, Options::default());
    cfg.debounce = Duration::from_secs(600);
    cfg.debounce_max = Duration::from_secs(600);
    let conflux = start_with(cluster, cfg).await;
    wait_baseline(&client, &ns, "fast").await;
    wait_baseline(&client, &ns, "slow").await;
    // The first change: a leading edge, both roll at once.
    apply_cm(&client, &ns, "cfg", json!({"k": "2"}), json!({})).await;
    wait_replica_sets(&client, &ns, "fast", 2).await;
    wait_replica_sets(&client, &ns, "slow", 2).await;
    // The next one: `fast` rolls again at once, `slow` waits out its ten minutes.
    apply_cm(&client, &ns, "cfg", json!({"k": "3"}), json!({})).await;
    wait_replica_sets(&client, &ns, "fast", 3).await;
    eventually("slow still pending", Duration::from_secs(30), || {
        let pending = conflux.metrics.pending.get();
        async move { (pending == 1).then_some(()) }
    })
    .await;
    assert_eq!(replica_sets(&client, &ns, "slow").await, 2);
    conflux.assert_rollouts(3).await;
}
