//! A third-party controller embedding `watch-index`: it registers its own kind (`Widget` in
//! `apps.example.com`) next to Flux's default reference set, indexes objects as its watches deliver
//! them, and answers "who references ConfigMap X" when a ConfigMap event arrives.
//!
//! Run: `cargo run -p conflux-examples --example third_party_refs`

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use conflux_watch_index::index::ReverseIndex;
use conflux_watch_index::refs::{ConfigKey, ConfigKind, Reference, ReferenceSet};
use conflux_watch_index::trigger::{
    DEFAULT_WATCH_CONFIGS_SELECTOR, Event, Mode, Observed, Trigger,
};
use serde_json::{Value, json};

const GROUP: &str = "apps.example.com";

/// The reference set: Flux's defaults plus the Widget's own fields.
fn reference_set() -> Result<ReferenceSet, conflux_watch_index::Error> {
    let mut set = ReferenceSet::flux();
    // Paths are parsed once, here; a typo is a start-up error, not a silent miss.
    set.register_path(
        GROUP,
        "Widget",
        ConfigKind::ConfigMap,
        "spec.configs[].name",
    )?
    .register_path(
        GROUP,
        "Widget",
        ConfigKind::Secret,
        "spec.auth.secretRef.name",
    )?;
    // What a path cannot say (a reference into another namespace) a closure can.
    set.register_fn(GROUP, "Widget", |obj, _own_namespace, out| {
        let shared = obj.pointer("/spec/sharedConfig").and_then(Value::as_str);
        if let Some((ns, name)) = shared.and_then(|s| s.split_once('/')) {
            out.push(Reference {
                key: ConfigKey::new(ConfigKind::ConfigMap, ns, name),
                optional: false,
                path: "spec.sharedConfig".into(),
            });
        }
    });
    Ok(set)
}

fn widget(ns: &str, name: &str, configs: &[&str], shared: Option<&str>) -> Value {
    let configs: Vec<Value> = configs.iter().map(|c| json!({"name": c})).collect();
    json!({
        "apiVersion": "apps.example.com/v1beta1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configs": configs, "auth": {"secretRef": {"name": "widget-token"}},
                 "sharedConfig": shared},
    })
}

fn who(index: &RwLock<ReverseIndex>, kind: ConfigKind, ns: &str, name: &str) -> Vec<String> {
    // Readers hold the lock only while copying the answer out.
    let guard = index.read().unwrap_or_else(|e| e.into_inner());
    let mut found: Vec<String> = guard
        .referrers_of(kind, ns, name)
        .map(|r| r.to_string())
        .collect();
    found.sort();
    found
}

fn main() -> Result<(), conflux_watch_index::Error> {
    let set = reference_set()?;
    let index = Arc::new(RwLock::new(ReverseIndex::new()));

    // The watch loop (the single writer) feeds objects in.
    let objects = [
        widget("shop", "cart", &["shop-settings", "feature-flags"], None),
        widget(
            "shop",
            "checkout",
            &["shop-settings"],
            Some("platform/global-settings"),
        ),
        widget(
            "blog",
            "comments",
            &["feature-flags"],
            Some("platform/global-settings"),
        ),
        json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "shop", "namespace": "shop"},
            "spec": {"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "shop-settings"}]}},
        }),
    ];
    {
        let mut writer = index.write().unwrap_or_else(|e| e.into_inner());
        for obj in &objects {
            if let Some(referrer) = set.extract(obj) {
                writer.apply(referrer);
            }
        }
    }

    for (ns, name) in [
        ("shop", "shop-settings"),
        ("shop", "feature-flags"),
        ("platform", "global-settings"),
        ("shop", "unused"),
    ] {
        println!(
            "who references ConfigMap {ns}/{name}? {:?}",
            who(&index, ConfigKind::ConfigMap, ns, name)
        );
    }
    println!(
        "who references Secret blog/widget-token? {:?}",
        who(&index, ConfigKind::Secret, "blog", "widget-token")
    );

    // An update moves a reference: cart stops using feature-flags.
    if let Some(r) = set.extract(&widget("shop", "cart", &["shop-settings"], None)) {
        index.write().unwrap_or_else(|e| e.into_inner()).apply(r);
    }
    println!(
        "after cart's update, who references ConfigMap shop/feature-flags? {:?}",
        who(&index, ConfigKind::ConfigMap, "shop", "feature-flags")
    );

    // A ConfigMap event: the trigger decides, the index says whom to wake.
    let trigger = Trigger::from_flag(DEFAULT_WATCH_CONFIGS_SELECTOR, Mode::DataHash)?;
    let labels = BTreeMap::from([("reconcile.fluxcd.io/watch".to_owned(), "Enabled".to_owned())]);
    let (old_hash, new_hash) = (b"sha256:aaa".as_slice(), b"sha256:bbb".as_slice());
    let event = Event::Updated {
        old: Observed::new(&labels, "100").with_data_hash(old_hash),
        new: Observed::new(&labels, "101").with_data_hash(new_hash),
    };
    let referrers = who(&index, ConfigKind::ConfigMap, "platform", "global-settings");
    let decision = trigger.decide(&event, !referrers.is_empty());
    println!("ConfigMap platform/global-settings data changed: {decision:?}; wake {referrers:?}");
    let label_only = Event::Updated {
        old: Observed::new(&labels, "101").with_data_hash(new_hash),
        new: Observed::new(&labels, "102").with_data_hash(new_hash),
    };
    println!(
        "a label-only write to it: {:?}",
        trigger.decide(&label_only, true)
    );
    Ok(())
}
