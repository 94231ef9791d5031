//! The reload controller against a real API server with kube-controller-manager: a rollout is a
//! new ReplicaSet, so "rolled once" and "did not roll" are read off the cluster itself.
//!
//! Negative assertions ("did not roll") wait for a barrier: the controller's evaluation counter
//! moving past the event (the workload was hashed and decided), or, where nothing is evaluated at
//! all (an opted-out workload), a bounded wait of several coalescing windows.

mod reload_support;

use std::time::Duration;

use conflux_tests::{cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use reload_support::*;
use serde_json::json;

/// Coalescing window used by these tests.
const WINDOW: Duration = Duration::from_millis(300);

/// Long enough for any evaluation the window could still trigger.
async fn quiet() {
    tokio::time::sleep(WINDOW * 4).await;
}

#[tokio::test]
async fn every_consumer_form_rolls_on_change_and_unread_keys_do_not() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-forms").await;
    apply_cm(
        &client,
        &ns,
        "env-cm",
        json!({"read": "1", "unread": "1"}),
        json!({}),
    )
    .await;
    apply_cm(&client, &ns, "envfrom-cm", json!({"a": "1"}), json!({})).await;
    apply_secret(&client, &ns, "vol-secret", json!({"tls.key": "k1"})).await;
    apply_cm(
        &client,
        &ns,
        "proj-cm",
        json!({"read": "1", "unread": "1"}),
        json!({}),
    )
    .await;
    let auto = json!({AUTO.0: AUTO.1});
    let forms = [
        (
            "env",
            container(
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "read"}}}]}),
            ),
        ),
        (
            "envfrom",
            container(json!({"envFrom": [{"configMapRef": {"name": "envfrom-cm"}}]})),
        ),
        ("volume", {
            let mut spec = container(json!({}));
            spec["volumes"] = json!([{"name": "tls", "secret": {"secretName": "vol-secret"}}]);
            spec
        }),
        ("projected", {
            let mut spec = container(json!({}));
            spec["volumes"] = json!([{"name": "p", "projected": {"sources": [
                {"configMap": {"name": "proj-cm", "items": [{"key": "read", "path": "read"}]}}
            ]}}]);
            spec
        }),
    ];
    for (name, spec) in &forms {
        create_deployment(&client, &ns, &deployment(name, auto.clone(), spec.clone())).await;
    }
    let conflux = start(cluster, &ns, WINDOW).await;
    for (name, _) in &forms {
        wait_baseline(&client, &ns, name).await;
    }
    for (name, _) in &forms {
        assert_eq!(
            template_hash(&client, &ns, name).await,
            None,
            "{name}: first sight does not roll"
        );
        assert_eq!(replica_sets(&client, &ns, name).await, 1, "{name}");
    }

    // Keys the pods do not read: evaluated, not rolled.
    let before = conflux.evaluations();
    apply_cm(
        &client,
        &ns,
        "env-cm",
        json!({"read": "1", "unread": "2"}),
        json!({}),
    )
    .await;
    apply_cm(
        &client,
        &ns,
        "proj-cm",
        json!({"read": "1", "unread": "2"}),
        json!({}),
    )
    .await;
    conflux
        .evaluated_since(before + 1, "both unread-key changes evaluated")
        .await;
    quiet().await;
    for name in ["env", "projected"] {
        assert_eq!(
            template_hash(&client, &ns, name).await,
            None,
            "{name}: unread key"
        );
        assert_eq!(replica_sets(&client, &ns, name).await, 1, "{name}");
    }
    assert_eq!(conflux.rollouts(), 0);

    // What they read: each rolls once, only its own Deployment.
    apply_cm(
        &client,
        &ns,
        "env-cm",
        json!({"read": "2", "unread": "2"}),
        json!({}),
    )
    .await;
    apply_cm(&client, &ns, "envfrom-cm", json!({"a": "2"}), json!({})).await;
    apply_secret(&client, &ns, "vol-secret", json!({"tls.key": "k2"})).await;
    apply_cm(
        &client,
        &ns,
        "proj-cm",
        json!({"read": "2", "unread": "2"}),
        json!({}),
    )
    .await;
    for (name, _) in &forms {
        wait_rolled(&client, &ns, name, None).await;
        wait_replica_sets(&client, &ns, name, 2).await;
    }
    quiet().await;
    assert_eq!(conflux.rollouts(), 4);
    let reloaded = events(&client, &ns, "envfrom", "Reloaded").await;
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert!(
        reloaded[0].1.contains("ConfigMap envfrom-cm changed"),
        "{reloaded:?}"
    );
    let secret_event = events(&client, &ns, "volume", "Reloaded").await;
    assert!(
        secret_event.iter().all(|(_, note)| !note.contains("k2")),
        "no data in Events"
    );
}

#[tokio::test]
async fn three_configs_changed_in_one_window_roll_once() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-burst").await;
    apply_cm(&client, &ns, "a", json!({"v": "1"}), json!({})).await;
    apply_cm(&client, &ns, "b", json!({"v": "1"}), json!({})).await;
    apply_secret(&client, &ns, "c", json!({"v": "1"})).await;
    let spec = container(json!({"envFrom": [
        {"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}, {"secretRef": {"name": "c"}}
    ]}));
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), spec),
    )
    .await;
    // A wider window than the other tests: the three writes must land within it even on a
    // loaded CI machine.
    let window = Duration::from_secs(1);
    let conflux = start(cluster, &ns, window).await;
    wait_baseline(&client, &ns, "web").await;

    apply_cm(&client, &ns, "a", json!({"v": "2"}), json!({})).await;
    apply_cm(&client, &ns, "b", json!({"v": "2"}), json!({})).await;
    apply_secret(&client, &ns, "c", json!({"v": "2"})).await;
    wait_rolled(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    tokio::time::sleep(window * 2).await;
    assert_eq!(
        replica_sets(&client, &ns, "web").await,
        2,
        "one new ReplicaSet"
    );
    assert_eq!(conflux.rollouts(), 1, "one rollout");
    let reloaded = events(&client, &ns, "web", "Reloaded").await;
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert!(
        reloaded[0].1.contains(
            "ConfigMap a changed (keys v); ConfigMap b changed (keys v); Secret c changed (keys v)"
        ),
        "{reloaded:?}"
    );
}

#[tokio::test]
async fn first_opt_in_and_restarts_do_not_roll() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-restart").await;
    apply_cm(&client, &ns, "cfg", json!({"v": "1"}), json!({})).await;
    let spec = container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}));
    create_deployment(&client, &ns, &deployment("web", json!({}), spec.clone())).await;
    let conflux = start(cluster, &ns, WINDOW).await;

    // First opt-in: a baseline on the workload's metadata, the template is untouched.
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &deployment("web", json!({AUTO.0: AUTO.1}), spec.clone()),
    )
    .await;
    let first = wait_baseline(&client, &ns, "web").await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "web").await, None);
    assert_eq!(replica_sets(&client, &ns, "web").await, 1);

    // Restart twice (abort the task, start again): nothing changed, nothing rolls.
    drop(conflux);
    let conflux = start(cluster, &ns, WINDOW).await;
    conflux
        .evaluated_since(0, "start-up evaluation of web")
        .await;
    assert!(conflux.decisions("none") >= 1, "unchanged at restart");
    assert_eq!(conflux.decisions("rollout"), 0);
    drop(conflux);
    let conflux = start(cluster, &ns, WINDOW).await;
    conflux
        .evaluated_since(0, "start-up evaluation of web")
        .await;
    quiet().await;
    assert_eq!(baseline(&client, &ns, "web").await, Some(first));
    assert_eq!(template_hash(&client, &ns, "web").await, None);
    assert_eq!(replica_sets(&client, &ns, "web").await, 1);
    assert_eq!(conflux.rollouts(), 0);

    // Still working after the restarts: a change rolls once.
    apply_cm(&client, &ns, "cfg", json!({"v": "2"}), json!({})).await;
    wait_rolled(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;

    // A change made while conflux is down rolls once when it is back.
    let hash = template_hash(&client, &ns, "web").await;
    drop(conflux);
    apply_cm(&client, &ns, "cfg", json!({"v": "3"}), json!({})).await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_rolled(&client, &ns, "web", hash.as_deref()).await;
    wait_replica_sets(&client, &ns, "web", 3).await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 1);
}

#[tokio::test]
async fn opt_out_and_ignore_are_respected() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-optout").await;
    apply_cm(&client, &ns, "out-cfg", json!({"v": "1"}), json!({})).await;
    apply_cm(&client, &ns, "ign-cfg", json!({"v": "1"}), json!({})).await;
    let out_spec = container(json!({"envFrom": [{"configMapRef": {"name": "out-cfg"}}]}));
    let ign_spec = container(json!({"envFrom": [{"configMapRef": {"name": "ign-cfg"}}]}));
    create_deployment(
        &client,
        &ns,
        &deployment("out", json!({AUTO.0: AUTO.1}), out_spec.clone()),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment("ign", json!({AUTO.0: AUTO.1}), ign_spec),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_baseline(&client, &ns, "out").await;
    wait_baseline(&client, &ns, "ign").await;

    // `ignore` on the config (with a data change in the same write), then another data change.
    let before = conflux.evaluations();
    apply_cm(
        &client,
        &ns,
        "ign-cfg",
        json!({"v": "2"}),
        json!({"reloader.stakater.com/ignore": "true"}),
    )
    .await;
    conflux.evaluated_since(before, "ignore evaluated").await;
    let before = conflux.evaluations();
    apply_cm(
        &client,
        &ns,
        "ign-cfg",
        json!({"v": "3"}),
        json!({"reloader.stakater.com/ignore": "true"}),
    )
    .await;
    conflux
        .evaluated_since(before, "ignored change evaluated")
        .await;

    // Opt-out: `auto: "false"`, then a change of its config.
    apply_as(
        &client,
        &ns,
        TEST_MANAGER,
        &deployment(
            "out",
            json!({"reloader.stakater.com/auto": "false"}),
            out_spec,
        ),
    )
    .await;
    eventually("opt-out seen", Duration::from_secs(30), || {
        let n = conflux.metrics.workloads.get();
        async move { (n == 1).then_some(()) }
    })
    .await;
    apply_cm(&client, &ns, "out-cfg", json!({"v": "2"}), json!({})).await;
    quiet().await;
    for name in ["out", "ign"] {
        assert_eq!(template_hash(&client, &ns, name).await, None, "{name}");
        assert_eq!(replica_sets(&client, &ns, name).await, 1, "{name}");
    }
    assert_eq!(conflux.rollouts(), 0);
}

#[tokio::test]
async fn flux_apply_keeps_our_annotation_and_does_not_roll_again() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-flux").await;
    apply_cm(&client, &ns, "cfg", json!({"v": "1"}), json!({})).await;
    let manifest = deployment(
        "web",
        json!({AUTO.0: AUTO.1}),
        container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
    );
    // Flux's kustomize-controller owns the Deployment.
    apply_as(&client, &ns, "kustomize-controller", &manifest).await;
    wait_replica_sets(&client, &ns, "web", 1).await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "cfg", json!({"v": "2"}), json!({})).await;
    let hash = wait_rolled(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    let generation = get_deployment(&client, &ns, "web")
        .await
        .metadata
        .generation;

    // Flux applies the same manifest again, forced, without our annotations.
    apply_as(&client, &ns, "kustomize-controller", &manifest).await;
    let after = get_deployment(&client, &ns, "web").await;
    assert_eq!(
        after.metadata.generation, generation,
        "the template did not change"
    );
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "web").await, Some(hash));
    assert!(baseline(&client, &ns, "web").await.is_some());
    assert_eq!(replica_sets(&client, &ns, "web").await, 2);
    assert_eq!(conflux.rollouts(), 1);
    let managers: Vec<String> = get_deployment(&client, &ns, "web")
        .await
        .metadata
        .managed_fields
        .into_iter()
        .flatten()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == "conflux-reloader"),
        "{managers:?}"
    );
}

#[tokio::test]
async fn deleted_configs_behave_as_documented() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-delete").await;
    apply_cm(&client, &ns, "opt", json!({"v": "1"}), json!({})).await;
    apply_cm(&client, &ns, "req", json!({"v": "1"}), json!({})).await;
    let spec = container(json!({"envFrom": [
        {"configMapRef": {"name": "opt", "optional": true}}, {"configMapRef": {"name": "req"}}
    ]}));
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), spec),
    )
    .await;
    let conflux = start(cluster, &ns, WINDOW).await;
    wait_baseline(&client, &ns, "web").await;

    // An optional config deleted: pods start without it, so it rolls.
    delete_cm(&client, &ns, "opt").await;
    let hash = wait_rolled(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;

    // A required one deleted: held (pods could not start), with a Warning Event.
    delete_cm(&client, &ns, "req").await;
    let warning = eventually("held warning", Duration::from_secs(30), || async {
        events(&client, &ns, "web", "ReloadFailed").await.pop()
    })
    .await;
    assert_eq!(warning.0, "Warning");
    assert!(warning.1.contains("ConfigMap req"), "{warning:?}");
    assert_eq!(conflux.decisions("held"), 1);
    assert_eq!(template_hash(&client, &ns, "web").await, Some(hash.clone()));

    // Back with the same content: nothing to roll. With new content: rolls once.
    let before = conflux.evaluations();
    apply_cm(&client, &ns, "req", json!({"v": "1"}), json!({})).await;
    conflux
        .evaluated_since(before, "recreation evaluated")
        .await;
    quiet().await;
    assert_eq!(template_hash(&client, &ns, "web").await, Some(hash.clone()));
    apply_cm(&client, &ns, "req", json!({"v": "2"}), json!({})).await;
    wait_rolled(&client, &ns, "web", Some(&hash)).await;
    wait_replica_sets(&client, &ns, "web", 3).await;
    // The optional one created again: its content is read again, so it rolls.
    let hash = template_hash(&client, &ns, "web").await;
    apply_cm(&client, &ns, "opt", json!({"v": "1"}), json!({})).await;
    wait_rolled(&client, &ns, "web", hash.as_deref()).await;
    quiet().await;
    assert_eq!(conflux.rollouts(), 3);
}

#[tokio::test]
async fn statefulsets_daemonsets_and_cronjobs_roll_too() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-kinds").await;
    apply_cm(&client, &ns, "shared", json!({"v": "1"}), json!({})).await;
    let template = json!({"metadata": {"labels": {"app": "x"}},
        "spec": container(json!({"envFrom": [{"configMapRef": {"name": "shared"}}]}))});
    let mut cron_template = template.clone();
    cron_template["spec"]["restartPolicy"] = json!("OnFailure");
    let objects = [
        (
            "StatefulSet",
            "apps/v1",
            "statefulsets",
            json!({"serviceName": "x", "selector": {"matchLabels": {"app": "x"}}, "template": template}),
        ),
        (
            "DaemonSet",
            "apps/v1",
            "daemonsets",
            json!({"selector": {"matchLabels": {"app": "x"}}, "template": template}),
        ),
        (
            "CronJob",
            "batch/v1",
            "cronjobs",
            json!({"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": cron_template}}}),
        ),
    ];
    let api = |api_version: &str, kind: &str, plural: &str| {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
    };
    for (kind, api_version, plural, spec) in &objects {
        let obj = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "w", "annotations": {AUTO.0: AUTO.1}}, "spec": spec});
        api(api_version, kind, plural)
            .patch(
                "w",
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {kind}: {e}"));
    }
    let conflux = start(cluster, &ns, WINDOW).await;
    let read = |obj: &kube::api::DynamicObject, pointer: &str| {
        obj.data
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .map(String::from)
    };
    let template_pointer = |kind: &str| match kind {
        "CronJob" => {
            "/spec/jobTemplate/spec/template/metadata/annotations/conflux.dev~1config-hash"
        }
        _ => "/spec/template/metadata/annotations/conflux.dev~1config-hash",
    };
    for (kind, api_version, _, _) in &objects {
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        eventually(
            &format!("{kind} baseline"),
            Duration::from_secs(30),
            || async { remembered(&client, &ns, group, kind, &ns, "w").await },
        )
        .await;
    }
    apply_cm(&client, &ns, "shared", json!({"v": "2"}), json!({})).await;
    for (kind, api_version, plural, _) in &objects {
        let api = api(api_version, kind, plural);
        eventually(
            &format!("{kind} rolled"),
            Duration::from_secs(30),
            || async {
                let obj = api.get("w").await.ok()?;
                read(&obj, template_pointer(kind))
            },
        )
        .await;
    }
    let _ = conflux;
    // Deployments are not involved here.
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(false)
    );
}

#[tokio::test]
async fn rollouts_are_rate_limited_cluster_wide() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-rate").await;
    apply_cm(&client, &ns, "shared", json!({"v": "1"}), json!({})).await;
    let spec = container(json!({"envFrom": [{"configMapRef": {"name": "shared"}}]}));
    for name in ["one", "two", "three"] {
        create_deployment(
            &client,
            &ns,
            &deployment(name, json!({AUTO.0: AUTO.1}), spec.clone()),
        )
        .await;
    }
    let conflux = start_with(
        cluster,
        conflux_reloader::runtime::ReloadConfig {
            namespace: Some(ns.clone()),
            debounce: WINDOW,
            rate: 2.0,
            burst: 1,
            ..Default::default()
        },
    )
    .await;
    for name in ["one", "two", "three"] {
        wait_baseline(&client, &ns, name).await;
    }
    let start = std::time::Instant::now();
    apply_cm(&client, &ns, "shared", json!({"v": "2"}), json!({})).await;
    for name in ["one", "two", "three"] {
        wait_rolled(&client, &ns, name, None).await;
    }
    // One token at once, then one every 500 ms: the third rollout is at least ~1 s after the
    // change (the leading edge rolls the first at once, so the window adds nothing; the bound
    // was WINDOW + 900 ms, which a run without config reads met only by luck: 1.19 s once).
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(conflux.decisions("throttled") >= 2);
    assert_eq!(conflux.rollouts(), 3);
}

/// Applies a Role for the reload controller in `ns`, bound to `user`; `patch` says whether it may
/// write workloads.
async fn grant(client: &kube::Client, ns: &str, user: &str, patch: bool) {
    let workload_verbs = if patch {
        json!(["get", "list", "watch", "patch"])
    } else {
        json!(["get", "list", "watch"])
    };
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "reload", "namespace": ns},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"], "verbs": workload_verbs},
            {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            // Its memory, in its own namespace (here the test's), as the install grants it.
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch", "delete"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reload", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reload"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    let params = PatchParams::apply(TEST_MANAGER).force();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), ns)
        .patch("reload", &params, &Patch::Apply(&role))
        .await
        .expect("apply Role");
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), ns)
        .patch("reload", &params, &Patch::Apply(&binding))
        .await
        .expect("apply RoleBinding");
}

#[tokio::test]
async fn failed_rollouts_are_reported_and_retried() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "reload-retry").await;
    apply_cm(&client, &ns, "cfg", json!({"v": "1"}), json!({})).await;
    let spec = container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}));
    create_deployment(
        &client,
        &ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), spec),
    )
    .await;
    grant(&client, &ns, "alice", true).await;
    let conflux = start_as(
        cluster.client_as("alice").await,
        conflux_reloader::runtime::ReloadConfig {
            namespace: Some(ns.clone()),
            debounce: WINDOW,
            ..Default::default()
        },
    )
    .await;
    wait_baseline(&client, &ns, "web").await;

    // Writes to workloads are forbidden for a while: the rollout fails, is reported, retried.
    grant(&client, &ns, "alice", false).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    apply_cm(&client, &ns, "cfg", json!({"v": "2"}), json!({})).await;
    let failed = eventually("ReloadFailed event", Duration::from_secs(30), || async {
        events(&client, &ns, "web", "ReloadFailed").await.pop()
    })
    .await;
    assert_eq!(failed.0, "Warning");
    assert!(failed.1.contains("retrying"), "{failed:?}");
    assert_eq!(template_hash(&client, &ns, "web").await, None);
    let errors = || {
        conflux
            .metrics
            .rollouts
            .get_or_create(&conflux_reloader::runtime::RolloutLabels {
                kind: "Deployment".into(),
                result: "error".into(),
            })
            .get()
    };
    eventually("a retry", Duration::from_secs(30), || {
        let n = errors();
        async move { (n >= 2).then_some(()) }
    })
    .await;

    // Allowed again: the next retry rolls, once.
    grant(&client, &ns, "alice", true).await;
    wait_rolled(&client, &ns, "web", None).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    assert_eq!(conflux.rollouts(), 1);
}
