//! Fault scenarios: the real `conflux run` binary, with all four controllers, against the real
//! API server, while faults happen: conflux SIGKILLed mid fan-out and restarted, the API server
//! killed and restarted, connections dropped and refused (from start-up on), and 5xx/429 answers
//! injected on writes (the last two through the fault proxy of the test support crate).
//!
//! Every scenario ends with every copy, trigger and rollout exactly as desired:
//! - none lost: every fan-out copy and the pull copy hold the last value; the Deployment's pod
//!   template carries the hash of the last content; the Kustomization was asked to reconcile
//!   after the last change;
//! - none doubled: the Deployment rolled (its revision grew) at most once per change, and the
//!   Kustomization got at most one request per change.
//!
//! The scenarios share one cluster and run one at a time (one of them restarts the API server).
//! Random choices (kill timing, fault timing) come from a seed printed at the start of each
//! scenario; `CONFLUX_FAULT_SEED=<n>` repeats a run.

mod fault_support;

use std::time::Duration;

use conflux_tests::fault_proxy::FaultProxy;
use fault_support::*;

/// conflux SIGKILLed while it writes a fan-out, changes made while it is down, then restarted:
/// it converges from cluster state, and the restart rolls and triggers nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_fan_out_then_restart_converges() {
    let _serial = serial().await;
    let mut rng = Seeded::new("sigkill_mid_fan_out_then_restart_converges");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "kill", 24).await;
    let mut conflux = Conflux::start(cluster.kubeconfig(), "kill-1");
    conflux.wait_ready().await;
    world.wait_baselines().await;

    world.change(1).await;
    // Kill somewhere inside the fan-out of change 1 (24 namespaces, 4 writes at a time).
    tokio::time::sleep(Duration::from_millis(rng.below(600))).await;
    conflux.kill9();
    world.change(2).await;
    tokio::time::sleep(Duration::from_millis(rng.below(1_000))).await;

    let mut conflux = Conflux::start(cluster.kubeconfig(), "kill-2");
    conflux.wait_ready().await;
    world.wait_converged(2, Duration::from_secs(90)).await;
    world.assert_not_doubled(2).await;
    conflux.stop();
}

/// The API server is killed and restarted (same flags, same etcd) while conflux runs: conflux
/// does not exit, its watches come back, and changes made around the outage all land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_killed_and_restarted_loses_nothing() {
    let _serial = serial().await;
    let mut rng = Seeded::new("apiserver_killed_and_restarted_loses_nothing");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "restart", 6).await;
    let mut conflux = Conflux::start(cluster.kubeconfig(), "restart");
    conflux.wait_ready().await;
    world.wait_baselines().await;

    world.change(1).await;
    tokio::time::sleep(Duration::from_millis(rng.below(1_500))).await;
    kill_apiserver(cluster);
    tokio::time::sleep(Duration::from_millis(1_000 + rng.below(4_000))).await;
    assert!(
        conflux.is_running(),
        "conflux exited while the API server was down"
    );
    start_apiserver(cluster);
    let client = cluster.client().await;
    let world = world.with_client(client);
    world.change(2).await;
    world.wait_converged(2, Duration::from_secs(120)).await;
    world.assert_not_doubled(2).await;
    assert!(
        conflux.is_running(),
        "conflux exited after the API server came back"
    );
    conflux.stop();
}

/// conflux starts while the API server is down: it does not exit, says it is not ready, and
/// serves normally once the API server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_while_the_apiserver_is_down_waits_instead_of_exiting() {
    let _serial = serial().await;
    let mut rng = Seeded::new("start_while_the_apiserver_is_down_waits_instead_of_exiting");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "down", 3).await;
    kill_apiserver(cluster);
    let mut conflux = Conflux::start(cluster.kubeconfig(), "down");
    tokio::time::sleep(Duration::from_millis(2_000 + rng.below(3_000))).await;
    assert!(
        conflux.is_running(),
        "conflux exited while the API server was down"
    );
    let readyz = conflux.readyz();
    assert!(
        matches!(&readyz, Some((503, body)) if body.contains("not listed yet")),
        "not ready, and says why: {readyz:?}"
    );
    start_apiserver(cluster);
    conflux.wait_ready().await;
    let world = world.with_client(cluster.client().await);
    world.wait_baselines().await;
    world.change(1).await;
    world.wait_converged(1, Duration::from_secs(90)).await;
    world.assert_not_doubled(1).await;
    conflux.stop();
}

/// Connections refused at start-up, then dropped at random about every 1.5 s while changes are
/// made: conflux rides it out and everything converges once the network heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_refused_connections_from_start_up_on() {
    let _serial = serial().await;
    let mut rng = Seeded::new("dropped_and_refused_connections_from_start_up_on");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "drops", 6).await;
    let proxy = FaultProxy::start(cluster, rng.seed());
    proxy.set_refuse(true);
    proxy.set_drop_every(Some(Duration::from_millis(1_500)));
    let mut conflux = Conflux::start(proxy.kubeconfig(), "drops");
    tokio::time::sleep(Duration::from_millis(2_000 + rng.below(2_000))).await;
    assert!(
        conflux.is_running(),
        "conflux exited on refused connections"
    );
    proxy.set_refuse(false);
    world.wait_baselines().await;
    for v in 1..=3 {
        world.change(v).await;
        tokio::time::sleep(Duration::from_millis(500 + rng.below(1_500))).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.below(2_000))).await;
    proxy.heal();
    world.wait_converged(3, Duration::from_secs(120)).await;
    world.assert_not_doubled(3).await;
    let stats = proxy.stats();
    eprintln!("dropped_and_refused_connections_from_start_up_on: {stats:?}");
    assert!(
        stats.refused > 0 && stats.drops > 0,
        "faults were injected: {stats:?}"
    );
    assert!(conflux.is_running());
    conflux.stop();
}

/// 10% of writes answered with 429/500/503: failed writes are retried with backoff, none is
/// lost, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_on_writes_are_retried() {
    let _serial = serial().await;
    let mut rng = Seeded::new("injected_errors_on_writes_are_retried");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "errors", 12).await;
    let proxy = FaultProxy::start(cluster, rng.seed());
    proxy.set_error_rate(0.1, true);
    let mut conflux = Conflux::start(proxy.kubeconfig(), "errors");
    conflux.wait_ready().await;
    world.wait_baselines().await;
    for v in 1..=3 {
        world.change(v).await;
        tokio::time::sleep(Duration::from_millis(500 + rng.below(2_000))).await;
    }
    world.wait_converged(3, Duration::from_secs(120)).await;
    proxy.heal();
    world.assert_not_doubled(3).await;
    let stats = proxy.stats();
    eprintln!("injected_errors_on_writes_are_retried: {stats:?}");
    assert!(stats.injected > 0, "errors were injected: {stats:?}");
    conflux.stop();
}
