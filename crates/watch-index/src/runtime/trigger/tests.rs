//! The watch-configs trigger fed by hand-made watch streams: the first list is a baseline, later
//! changes fire, and changes made during a watch gap fire once the re-list is diffed.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use super::*;
use crate::runtime::test_support::{
    config_informer, config_map, informer, kustomization, kustomizations, relist, send,
};
use crate::trigger::{Mode, Trigger};

async fn next(
    fired: &mut (impl Stream<Item = Fired> + Unpin),
) -> (String, &'static str, Vec<String>) {
    let f = tokio::time::timeout(Duration::from_secs(5), fired.next())
        .await
        .expect("a trigger in time")
        .expect("the stream goes on");
    let referrers = f.order.order.iter().map(|o| o.name.to_string()).collect();
    (f.source.name.to_string(), f.change.as_str(), referrers)
}

#[tokio::test]
async fn the_first_list_is_a_baseline_and_changes_during_a_gap_fire_after_the_relist() {
    let (cms, cm_informer) = config_informer::<ConfigMap>("ConfigMap");
    let (secrets, secret_informer) = config_informer::<Secret>("Secret");
    let (flux, ks_informer) = informer::<DynamicObject>(kustomizations(), "Kustomization");
    let configs = ConfigWatches::from_informers(cm_informer, secret_informer, None);
    let index = ReferrerIndex::new(ReferenceSet::flux());
    tokio::spawn(index.feed(
        &ks_informer,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
    ));
    let trigger = Trigger::from_flag("reconcile.fluxcd.io/watch=Enabled", Mode::Upstream)
        .expect("a valid selector");
    // No request is made in upstream mode.
    let client = conflux_runtime::client::from_fn(|_| std::future::pending());
    let mut fired = Box::pin(ConfigTrigger::new(trigger, index, client).stream(&configs));

    relist(&flux, vec![kustomization("apps")]);
    relist(&secrets, vec![]);
    // The baseline: `vars` and `other` exist when conflux starts; nothing fires for them.
    relist(
        &cms,
        vec![config_map("vars", "1"), config_map("other", "1")],
    );
    // A later change fires, with the referrer to reconcile.
    send(&cms, [Event::Apply(config_map("vars", "2"))]);
    assert_eq!(
        next(&mut fired).await,
        ("vars".to_owned(), "update", vec!["apps".to_owned()]),
        "the first trigger is the change, not the baseline"
    );
    // A change of a config nobody references fires nothing; the next trigger is the gap's.
    send(&cms, [Event::Apply(config_map("other", "2"))]);
    // The watch was down while `vars` changed: the re-list finds it.
    relist(
        &cms,
        vec![config_map("vars", "3"), config_map("other", "2")],
    );
    assert_eq!(
        next(&mut fired).await,
        ("vars".to_owned(), "update", vec!["apps".to_owned()])
    );
    // Deleted during another gap: the re-list says so, and the referrer is woken.
    relist(&cms, vec![config_map("other", "2")]);
    assert_eq!(
        next(&mut fired).await,
        ("vars".to_owned(), "delete", vec!["apps".to_owned()])
    );
}

/// `fired`, polled on a task of its own; what it yields.
fn driven(
    fired: impl Stream<Item = Fired> + Send + 'static,
) -> futures::channel::mpsc::UnboundedReceiver<Fired> {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        let mut fired = std::pin::pin!(fired);
        while let Some(f) = fired.next().await {
            if tx.unbounded_send(f).is_err() {
                return;
            }
        }
    });
    rx
}

/// An API server holding one ConfigMap `vars` whose data and resourceVersion the test sets,
/// answering GETs of it (as the data-hash trigger reads data).
fn api_with_vars(vars: Arc<Mutex<(String, String)>>) -> Client {
    use kube::client::Body;
    conflux_runtime::client::from_fn(move |request: http::Request<Body>| {
        let vars = vars.clone();
        async move {
            let (version, value) = lock(&vars).clone();
            let answer = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "vars", "namespace": "flux-system", "resourceVersion": version},
                "data": {"value": value},
            });
            assert!(
                request.uri().path().ends_with("/configmaps/vars"),
                "only vars is read: {}",
                request.uri()
            );
            http::Response::new(Body::from(answer.to_string().into_bytes()))
        }
    })
}

#[tokio::test]
async fn data_hash_a_change_read_while_recording_the_baseline_still_fires() {
    let (cms, cm_informer) = config_informer::<ConfigMap>("ConfigMap");
    let (secrets, secret_informer) = config_informer::<Secret>("Secret");
    let (flux, ks_informer) = informer::<DynamicObject>(kustomizations(), "Kustomization");
    let configs = ConfigWatches::from_informers(cm_informer, secret_informer, None);
    let metrics = Arc::new(TriggerMetrics::default());
    let index = ReferrerIndex::with_metrics(ReferenceSet::flux(), metrics.clone());
    tokio::spawn(index.feed(
        &ks_informer,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
    ));
    let trigger = Trigger::from_flag("reconcile.fluxcd.io/watch=Enabled", Mode::DataHash)
        .expect("a valid selector");
    // The first list has `vars` at version 1, but by the time the baseline reads its data it
    // was changed (version 2): the read holds the change.
    let vars = Arc::new(Mutex::new(("2".to_owned(), "new".to_owned())));
    let client = api_with_vars(vars.clone());
    // Driven on a task of its own: the test waits for decisions while nothing is yielded.
    let mut fired = driven(ConfigTrigger::new(trigger, index, client).stream(&configs));
    relist(&flux, vec![kustomization("apps")]);
    relist(&secrets, vec![]);
    relist(&cms, vec![config_map("vars", "1")]);
    // The change's own event comes after the first list: it must fire, although the data read
    // for the baseline is already its data.
    send(&cms, [Event::Apply(config_map("vars", "2"))]);
    assert_eq!(
        next(&mut fired).await,
        ("vars".to_owned(), "update", vec!["apps".to_owned()]),
        "the change after the first list fires"
    );
    // Metadata-only writes do not fire (the data of version 3 is the data of version 2); the
    // next data change does.
    *lock(&vars) = ("3".to_owned(), "new".to_owned());
    send(&cms, [Event::Apply(config_map("vars", "3"))]);
    let skipped = ConfigEventLabels {
        kind: "ConfigMap".to_owned(),
        event: "update".to_owned(),
        decision: "skip".to_owned(),
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while metrics.config_events.get_or_create(&skipped).get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the metadata-only write is decided");
    *lock(&vars) = ("4".to_owned(), "newer".to_owned());
    send(&cms, [Event::Apply(config_map("vars", "4"))]);
    assert_eq!(
        next(&mut fired).await,
        ("vars".to_owned(), "update", vec!["apps".to_owned()]),
        "the metadata-only write fired nothing; the data change did"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), fired.next())
            .await
            .is_err(),
        "nothing more fired"
    );
}
