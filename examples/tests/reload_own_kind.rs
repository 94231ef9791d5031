//! The `reload_own_kind` example's logic: a custom pod-template kind rolled with reloader's pure
//! API, on in-memory objects.

use conflux_examples::reload_own_kind::{
    Outcome, TaskRunnerPatch, demo_configs, demo_runner, evaluate,
};
use conflux_reloader::opt_in::Options;
use conflux_reloader::patch::{BASELINE_ANNOTATION, CONFIG_HASH_ANNOTATION};
use conflux_watch_index::refs::ConfigKind;

fn patch_of(outcome: &Outcome) -> &TaskRunnerPatch {
    match outcome {
        Outcome::RecordBaseline(p) | Outcome::Rollout(p) => p,
        other => panic!("expected a patch, got {other:?}"),
    }
}

fn set_level(configs: &mut conflux_examples::reload_own_kind::Configs, key: &str, value: &str) {
    configs
        .config_map_mut("runner-settings")
        .expect("demo config map")
        .data
        .get_or_insert_with(Default::default)
        .insert(key.to_owned(), value.to_owned());
}

#[test]
fn baseline_then_rollout_only_for_what_the_pods_read() {
    let mut runner = demo_runner().expect("demo runner");
    let mut configs = demo_configs().expect("demo configs");

    // First sight: baseline only, the template is left alone.
    let first = evaluate(&runner, &configs, Options::default());
    assert_eq!(
        first.watched,
        ["ConfigMap/runner-settings", "Secret/runner-token"],
        "the consumed configs, not `unrelated`"
    );
    let Outcome::RecordBaseline(baseline) = &first.outcome else {
        panic!("first sight records a baseline: {:?}", first.outcome);
    };
    assert_eq!(baseline.template_hash, None);
    assert!(baseline.body().get("spec").is_none(), "no template change");
    baseline.apply_to(&mut runner);
    assert_eq!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Unchanged {
            missing_required: vec![]
        }
    );

    // A key the pods do not read: nothing.
    set_level(&mut configs, "batch-size", "200");
    assert!(matches!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Unchanged { .. }
    ));

    // The key they read: a rollout, and only our two annotations in the apply body.
    set_level(&mut configs, "level", "debug");
    let rolled = evaluate(&runner, &configs, Options::default());
    let Outcome::Rollout(patch) = &rolled.outcome else {
        panic!("expected a rollout: {:?}", rolled.outcome);
    };
    let hash = rolled.hash.as_ref().expect("hashed").hex.clone();
    assert_eq!(patch.template_hash.as_deref(), Some(hash.as_str()));
    let body = patch.body();
    assert_eq!(body["kind"], "TaskRunner");
    assert_eq!(body["apiVersion"], "example.conflux.dev/v1");
    assert_eq!(
        body["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION],
        hash.as_str()
    );
    // The baseline records each config's digest (conflux_reloader::patch::baseline_value).
    assert!(
        body["metadata"]["annotations"][BASELINE_ANNOTATION]
            .as_str()
            .is_some_and(|b| b.starts_with("v2;") && b.contains("settings="))
    );
    assert_eq!(body["metadata"].as_object().map(|m| m.len()), Some(3));
    patch.apply_to(&mut runner);
    assert!(matches!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Unchanged { .. }
    ));

    // A required Secret disappears: the rollout is held, not made.
    configs.remove(ConfigKind::Secret, "runner-token");
    assert_eq!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Unchanged {
            missing_required: vec!["Secret/runner-token".to_owned()]
        }
    );
}

#[test]
fn runners_without_opt_in_are_left_alone() {
    let mut runner = demo_runner().expect("demo runner");
    runner.metadata.annotations = None;
    let configs = demo_configs().expect("demo configs");
    let evaluation = evaluate(&runner, &configs, Options::default());
    assert_eq!(evaluation.outcome, Outcome::NotOptedIn);
    assert!(evaluation.hash.is_none());
    // Reloader's --auto-reload-all opts every workload in.
    let all = Options {
        auto_reload_all: true,
        ..Options::default()
    };
    assert!(matches!(
        evaluate(&runner, &configs, all).outcome,
        Outcome::RecordBaseline(_)
    ));
}

#[test]
fn a_named_reload_list_watches_only_the_named_config() {
    let mut runner = demo_runner().expect("demo runner");
    runner.metadata.annotations = Some(
        [(
            "configmap.reloader.stakater.com/reload".to_owned(),
            "runner-settings".to_owned(),
        )]
        .into(),
    );
    let mut configs = demo_configs().expect("demo configs");
    let first = evaluate(&runner, &configs, Options::default());
    assert_eq!(first.watched, ["ConfigMap/runner-settings"]);
    patch_of(&first.outcome).apply_to(&mut runner);
    // The Secret is not in the list: deleting it changes nothing here.
    configs.remove(ConfigKind::Secret, "runner-token");
    assert!(matches!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Unchanged { .. }
    ));
    set_level(&mut configs, "level", "warn");
    assert!(matches!(
        evaluate(&runner, &configs, Options::default()).outcome,
        Outcome::Rollout(_)
    ));
}
