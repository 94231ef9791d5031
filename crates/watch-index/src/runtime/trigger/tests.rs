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
