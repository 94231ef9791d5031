//! The Widget controller of `examples/widget_controller.rs` against a real API server: it is
//! reconciled once at first sight, again when its labelled Secret changes, and not when an
//! unlabelled Secret it references changes (Flux's `reconcile.fluxcd.io/watch` rule).

use std::collections::BTreeMap;
use std::time::Duration;

use conflux_examples::widget::{Widget, WidgetController, WidgetControllerConfig, WidgetStatus};
use conflux_tests::{cluster, eventually};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;

/// Generous: the machine running the tests may be busy compiling.
const TIMEOUT: Duration = Duration::from_secs(120);

async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Widget::crd();
    let name = crd.metadata.name.clone().expect("the CRD has a name");
    crds.patch(
        &name,
        &PatchParams::apply("conflux-examples-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply the Widget CRD");
    eventually("the Widget CRD to be established", TIMEOUT, || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let crd = crds.get(&name).await.ok()?;
            let conditions = crd.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        }
    })
    .await;
}

/// Creates or updates a Secret with one key and returns its resourceVersion.
async fn put_secret(secrets: &Api<Secret>, name: &str, watched: bool, value: &str) -> String {
    let labels = if watched {
        json!({"reconcile.fluxcd.io/watch": "Enabled"})
    } else {
        json!({})
    };
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
    }))
    .expect("secret object");
    let secret = Secret {
        data: Some(BTreeMap::from([
            ("token".to_owned(), ByteString(value.as_bytes().to_vec())),
            // The leak marker: checked in this process's captured log at the end.
            (
                "key.pem".to_owned(),
                ByteString(conflux_tests::leak::pem().into_bytes()),
            ),
        ])),
        ..secret
    };
    let written = secrets
        .patch(
            name,
            &PatchParams::apply("conflux-examples-test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("writing Secret {name}: {e}"));
    written
        .metadata
        .resource_version
        .expect("a written Secret has a resourceVersion")
}

async fn create_widget(widgets: &Api<Widget>, name: &str, secret: &str) {
    let widget: Widget = serde_json::from_value(json!({
        "apiVersion": "example.conflux.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"secretRef": {"name": secret}},
    }))
    .expect("widget object");
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap_or_else(|e| panic!("creating Widget {name}: {e}"));
}

/// Waits until Widget `name` has observed Secret version `version`, and returns its status.
async fn observed(widgets: &Api<Widget>, name: &str, version: &str) -> WidgetStatus {
    eventually(
        &format!("Widget {name} to observe Secret version {version}"),
        TIMEOUT,
        || async {
            let status = widgets.get(name).await.ok()?.status?;
            (status.observed_secret_version.as_deref() == Some(version)).then_some(status)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widgets_reconcile_when_their_watched_secret_changes() {
    conflux_tests::leak::capture_logs();
    let cluster = cluster();
    let client = cluster.client().await;
    install_crd(&client).await;
    let ns = cluster.namespace(&client, "widgets").await;

    // The controller, in-process, watching the test's namespace only.
    let config = WidgetControllerConfig {
        namespace: Some(ns.clone()),
        ..WidgetControllerConfig::default()
    };
    let controller = WidgetController::new(client.clone(), &config).expect("wiring");
    let health = controller.health();
    let running = tokio::spawn(controller.run());
    // Ready = Widgets, ConfigMaps and Secrets listed: from now on every Secret write is a change
    // after the baseline, not part of it.
    eventually("the controller to be ready", TIMEOUT, || async {
        health.is_ready().then_some(())
    })
    .await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let watched_v1 = put_secret(&secrets, "watched", true, "one").await;
    let unwatched_v1 = put_secret(&secrets, "unwatched", false, "one").await;
    create_widget(&widgets, "a", "watched").await;
    create_widget(&widgets, "b", "unwatched").await;

    // First sight: each Widget is reconciled against its Secret as it is.
    let a = observed(&widgets, "a", &watched_v1).await;
    assert_eq!(a.versions_seen, 1);
    let b = observed(&widgets, "b", &unwatched_v1).await;
    assert_eq!(b.versions_seen, 1);

    // The labelled Secret's data changes: Widget a is reconciled again.
    let watched_v2 = put_secret(&secrets, "watched", true, "two").await;
    let a = observed(&widgets, "a", &watched_v2).await;
    assert_eq!(a.versions_seen, 2);

    // The unlabelled Secret changes: nothing wakes Widget b (Flux's rule). Secret events are
    // judged in order, so once later changes of the labelled Secret have been acted on, the
    // unlabelled one was judged too; two rounds leave any reconcile of b time to finish.
    put_secret(&secrets, "unwatched", false, "two").await;
    let watched_v3 = put_secret(&secrets, "watched", true, "three").await;
    observed(&widgets, "a", &watched_v3).await;
    let watched_v4 = put_secret(&secrets, "watched", true, "four").await;
    let a = observed(&widgets, "a", &watched_v4).await;
    assert_eq!(a.versions_seen, 4);
    let b = widgets
        .get("b")
        .await
        .expect("get Widget b")
        .status
        .expect("Widget b has a status");
    assert_eq!(
        b.observed_secret_version.as_deref(),
        Some(unwatched_v1.as_str()),
        "a change of an unlabelled Secret must not reconcile its Widget"
    );
    assert_eq!(b.versions_seen, 1);

    running.abort();
    conflux_tests::leak::assert_log_clean();
}
