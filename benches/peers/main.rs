//! Side by side with the peers: conflux and the programs users would run instead (Reloader, wave,
//! kopy, replicator, Flux Operator, and kustomize-controller with its config watchers on and off),
//! each started alone as its own process against the same local control plane, one after the
//! other, in one run. Scenarios (each one's table is printed when it ends):
//!
//! - **scale**: 20,000 and 100,000 ConfigMaps + Secrets (1 KiB), 2,000 opted-in Deployments, 1,000
//!   Kustomizations referencing configs: peak RSS, CPU seconds and time until settled, watches
//!   opened, requests during start-up and during a quiet period, rollouts made.
//! - **rollout**: 100 config changes, each to one workload: change → new ReplicaSet p50/p99, and
//!   the rollouts made.
//! - **storms**: a Secret flipping 10 times a second for 60 s; a restart with 1,000 opted-in
//!   workloads; Flux re-applying the workloads every minute: rollouts made against the ideal.
//! - **fan-out**: one Secret to 1,000 namespaces, then one update, then the source deleted: time
//!   until a watch sees every copy, requests, copies left behind.
//! - **watch-configs**: one labelled ConfigMap referenced by 1,000 Kustomizations changes: time until
//!   every Kustomization was asked to reconcile, requests, memory.
//! - **loadtest**: Reloader's own load-test scenarios S1–S13 (`loadtest.rs`), conflux against
//!   Reloader, each scenario and contender on a fresh cluster of its own: final values reached,
//!   rollouts against the settled states, requests, peak RSS, change → rollout p50/p99. Not in
//!   the default list; `PEERS_SCENARIOS=loadtest` runs it.
//!
//! ```text
//! benches/peers/build.sh                 # the peers (what builds here), cached
//! cargo build --release -p conflux-operator
//! cargo bench -p conflux-benches --bench peers
//! ```
//!
//! Every contender runs as the test cluster's `audited` user, so its requests are counted exactly
//! from the API server's audit log. Environment: `CONFLUX_BIN` (default `target/release/conflux`),
//! `CONFLUX_PEERS_CACHE` (default `/var/tmp/conflux-peers`, where `build.sh` writes `peers.env`),
//! `PEERS_SCENARIOS` (comma-separated, default all), `PEERS_SCALE_SIZES` (`20000,100000`),
//! `PEERS_WORKLOADS` (2000), `PEERS_KUSTOMIZATIONS` (1000), `PEERS_QUIET_SECS` (300),
//! `PEERS_CHANGES` (100), `PEERS_FLIP_SECS` (60), `PEERS_RESTART_WORKLOADS` (1000),
//! `PEERS_REAPPLY_ROUNDS` (3), `PEERS_FANOUT` (1000), `PEERS_FANOUT_TIMEOUT_SECS` (300), `PEERS_ONLY` (contender names, comma-separated).
//! The loadtest's: `PEERS_LOADTEST` (scenario ids, `S1,S4,...`, default all),
//! `PEERS_LOADTEST_DURATION_SECS` (60, Reloader's `--duration`), `PEERS_LOADTEST_WINDOW_MS` (2000,
//! the ideal reloader's coalescing window), `PEERS_LOADTEST_WINDOW_MAX_SECS` (300),
//! `PEERS_LOADTEST_SETTLE_SECS` (120), `PEERS_LOADTEST_SEED`, `PEERS_LOADTEST_OVERLAP` (0: one run
//! at a time; N: up to N earlier runs stay in their quiet period, cluster and contender running,
//! while the next one runs, and Reloader then runs in a network namespace of its own, because it
//! binds a fixed port: this needs root, `unshare` and `socat`).

mod loadtest;
mod scenarios;
mod world;

use std::path::PathBuf;
use std::time::Duration;

use conflux_benches::contender::Contender;
use conflux_benches::{env_usize, run_by_cargo_bench};

/// One contender slot: a program, or why it is missing here.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The contender's name.
    pub name: String,
    /// It, or why it could not be run.
    pub contender: Result<Contender, String>,
}

/// The run's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Totals of ConfigMaps + Secrets of the scale scenario, in order.
    pub scale_sizes: Vec<usize>,
    /// Opted-in Deployments of the scale scenario.
    pub workloads: usize,
    /// Kustomizations of the scale and watch-configs scenarios.
    pub kustomizations: usize,
    /// The quiet period after start-up.
    pub quiet: Duration,
    /// Config changes of the rollout scenario.
    pub changes: usize,
    /// How long the Secret flips.
    pub flip: Duration,
    /// Opted-in workloads of the restart storm.
    pub restart_workloads: usize,
    /// Minutes of Flux re-applying.
    pub reapply_rounds: usize,
    /// Target namespaces of the fan-out.
    pub fanout: usize,
    /// How long the fan-out waits for every copy (created, then updated).
    pub fanout_timeout: Duration,
    /// Contenders to run (name prefixes), all when `None`.
    pub only: Option<Vec<String>>,
}

impl Settings {
    fn from_env() -> Settings {
        let sizes = std::env::var("PEERS_SCALE_SIZES").unwrap_or_else(|_| "20000,100000".into());
        Settings {
            scale_sizes: sizes
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect(),
            workloads: env_usize("PEERS_WORKLOADS", 2000),
            kustomizations: env_usize("PEERS_KUSTOMIZATIONS", 1000),
            quiet: Duration::from_secs(env_usize("PEERS_QUIET_SECS", 300) as u64),
            changes: env_usize("PEERS_CHANGES", 100),
            flip: Duration::from_secs(env_usize("PEERS_FLIP_SECS", 60) as u64),
            restart_workloads: env_usize("PEERS_RESTART_WORKLOADS", 1000),
            reapply_rounds: env_usize("PEERS_REAPPLY_ROUNDS", 3),
            fanout: env_usize("PEERS_FANOUT", 1000),
            fanout_timeout: Duration::from_secs(env_usize("PEERS_FANOUT_TIMEOUT_SECS", 300) as u64),
            only: std::env::var("PEERS_ONLY")
                .ok()
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect()),
        }
    }

    /// True when contender `name` takes part (`PEERS_ONLY` matches a prefix of its name).
    pub fn includes(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| name.starts_with(o.as_str())))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if !run_by_cargo_bench("peers") {
        return Ok(());
    }
    let settings = Settings::from_env();
    let scenarios = std::env::var("PEERS_SCENARIOS")
        .unwrap_or_else(|_| "scale,rollout,storms,fanout,watch-configs".into());
    let peers = world::Peers::discover()?;
    println!("peers: machine: {}", world::machine());
    for slot in peers.all() {
        match &slot.contender {
            Ok(c) => println!(
                "peers: {} {}: {} {}",
                slot.name,
                c.version,
                c.program.display(),
                c.command_line()
            ),
            Err(why) => println!("peers: {}: not run: {why}", slot.name),
        }
    }
    // The shared cluster, for the scenarios that use it (the loadtest starts its own).
    let mut shared = None;
    for scenario in scenarios.split(',').map(str::trim) {
        let started = std::time::Instant::now();
        if scenario == "loadtest" {
            loadtest::run(&peers, &settings).await?;
            println!(
                "peers: scenario {scenario} took {:.0} s",
                started.elapsed().as_secs_f64()
            );
            continue;
        }
        if shared.is_none() {
            shared = Some(world::World::start().await?);
        }
        let Some(world) = shared.as_ref() else {
            continue;
        };
        match scenario {
            "scale" => scenarios::scale(world, &peers, &settings).await?,
            "rollout" => scenarios::rollout(world, &peers, &settings).await?,
            "storms" => scenarios::storms(world, &peers, &settings).await?,
            "fanout" => scenarios::fanout(world, &peers, &settings).await?,
            "watch-configs" => scenarios::watch_configs(world, &peers, &settings).await?,
            other => anyhow::bail!("unknown scenario {other}"),
        }
        println!(
            "peers: scenario {scenario} took {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `target/<dir>` of the repository, created.
pub fn target_dir(dir: &str) -> PathBuf {
    let path = conflux_tests::repo_root().join("target").join(dir);
    let _ = std::fs::create_dir_all(&path);
    path
}
