//! Proves the harness: a real kube-apiserver with server-side apply, conflicts, watches and a
//! controller-manager that finishes namespace deletion.

use std::time::Duration;

use conflux_tests::{cluster, eventually};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn config_map(name: &str, value: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name },
        "data": { "key": value },
    })
}

#[tokio::test]
async fn server_side_apply_conflicts_watch_and_namespace_deletion() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "harness").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // Server-side apply creates the object under our field manager.
    let applied = config_maps
        .patch(
            "settings",
            &PatchParams::apply("conflux-test"),
            &Patch::Apply(config_map("settings", "one")),
        )
        .await
        .expect("first apply");
    assert_eq!(
        applied
            .data
            .as_ref()
            .and_then(|d| d.get("key"))
            .map(String::as_str),
        Some("one")
    );
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["conflux-test".to_owned()]);

    // A second manager that changes the same field without forcing gets 409 Conflict.
    let conflict = config_maps
        .patch(
            "settings",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(config_map("settings", "two")),
        )
        .await
        .expect_err("a conflicting apply must fail");
    match conflict {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert_eq!(status.reason, "Conflict", "{status:?}");
        }
        other => panic!("expected an API conflict, got {other:?}"),
    }

    // A watcher sees the update made by the owning manager.
    let mut events = watcher(
        config_maps.clone(),
        watcher::Config::default().fields("metadata.name=settings"),
    )
    .applied_objects()
    .boxed();
    let first = tokio::time::timeout(Duration::from_secs(30), events.try_next())
        .await
        .expect("initial watch event in time")
        .expect("watch stream")
        .expect("an object");
    assert_eq!(
        first
            .data
            .as_ref()
            .and_then(|d| d.get("key"))
            .map(String::as_str),
        Some("one")
    );
    config_maps
        .patch(
            "settings",
            &PatchParams::apply("conflux-test"),
            &Patch::Apply(config_map("settings", "three")),
        )
        .await
        .expect("second apply by the owner");
    let updated = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let cm = events
                .try_next()
                .await
                .expect("watch stream")
                .expect("an object");
            if cm
                .data
                .as_ref()
                .and_then(|d| d.get("key"))
                .map(String::as_str)
                == Some("three")
            {
                return cm;
            }
        }
    })
    .await
    .expect("the update event in time");
    assert_eq!(updated.metadata.name.as_deref(), Some("settings"));

    // Deleting the namespace completes: kube-controller-manager empties and finalizes it.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    eventually(
        "namespace deletion to finish",
        Duration::from_secs(120),
        || {
            let namespaces = namespaces.clone();
            let ns = ns.clone();
            async move {
                match namespaces.get_opt(&ns).await {
                    Ok(None) => Some(()),
                    Ok(Some(_)) => None,
                    Err(e) => panic!("get namespace: {e}"),
                }
            }
        },
    )
    .await;
    assert!(
        config_maps
            .get_opt("settings")
            .await
            .expect("get")
            .is_none(),
        "the ConfigMap went with its namespace"
    );
}

#[tokio::test]
async fn cluster_has_the_system_namespaces() {
    let cluster = cluster();
    let client = cluster.client().await;
    let namespaces: Api<Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&Default::default())
        .await
        .expect("list namespaces")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for expected in ["default", "kube-system"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
}
