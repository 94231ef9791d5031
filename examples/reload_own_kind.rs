//! A controller that rolls its own workload kind, `TaskRunner` (a custom kind with a pod
//! template), with `reloader`'s pure API: what the template consumes, the Reloader/wave opt-in,
//! the content hash over exactly what the pods read, and the rollout decision. Offline: the
//! TaskRunner and its ConfigMaps/Secrets are in memory, and patches are applied in memory.
//!
//! Run: `cargo run -p conflux-examples --example reload_own_kind`

use conflux_examples::reload_own_kind::{
    Configs, Evaluation, Outcome, TaskRunner, demo_configs, demo_runner, evaluate,
};
use conflux_reloader::opt_in::Options;
use conflux_watch_index::refs::ConfigKind;

/// Evaluates, prints what happened, and applies any patch the way the API server would.
fn step(what: &str, runner: &mut TaskRunner, configs: &Configs) -> anyhow::Result<Evaluation> {
    let evaluation = evaluate(runner, configs, Options::default());
    println!("== {what}");
    println!("   watched: {}", evaluation.watched.join(", "));
    if let Some(hash) = &evaluation.hash {
        println!("   content hash: {}", hash.hex);
    }
    match &evaluation.outcome {
        Outcome::Rollout(patch) => {
            println!("   ROLLOUT: apply (field manager conflux-reloader):");
            println!("   {}", serde_json::to_string(&patch.body())?);
            patch.apply_to(runner);
        }
        Outcome::RecordBaseline(patch) => {
            println!("   baseline recorded, pods untouched:");
            println!("   {}", serde_json::to_string(&patch.body())?);
            patch.apply_to(runner);
        }
        Outcome::Unchanged { missing_required } if !missing_required.is_empty() => {
            println!("   held: required configs missing: {missing_required:?}");
        }
        Outcome::Unchanged { .. } => println!("   nothing to do"),
        Outcome::NotOptedIn => println!("   not opted in"),
        // `Outcome` is non-exhaustive; a newer outcome is only printed.
        other => println!("   {other:?}"),
    }
    Ok(evaluation)
}

fn main() -> anyhow::Result<()> {
    let mut runner = demo_runner()?;
    let mut configs = demo_configs()?;

    step("first sight", &mut runner, &configs)?;
    step("again, nothing changed", &mut runner, &configs)?;

    let settings = configs
        .config_map_mut("runner-settings")
        .ok_or_else(|| anyhow::anyhow!("the demo has runner-settings"))?;
    settings
        .data
        .get_or_insert_with(Default::default)
        .insert("batch-size".into(), "200".into());
    step(
        "a key the pods do not read changed (batch-size)",
        &mut runner,
        &configs,
    )?;

    let settings = configs
        .config_map_mut("runner-settings")
        .ok_or_else(|| anyhow::anyhow!("the demo has runner-settings"))?;
    settings
        .data
        .get_or_insert_with(Default::default)
        .insert("level".into(), "debug".into());
    step(
        "the key the pods read changed (level)",
        &mut runner,
        &configs,
    )?;
    step("after the rollout", &mut runner, &configs)?;

    configs.remove(ConfigKind::Secret, "runner-token");
    step("the required Secret was deleted", &mut runner, &configs)?;
    Ok(())
}
