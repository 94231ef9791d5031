//! Fan-out on the local API server: one ConfigMap → N namespaces (default 1,000) through a
//! ConfigSync, then one source update → all N copies updated, against the same writes issued
//! directly.
//!
//! ```text
//! cargo bench -p conflux-benches --bench fanout
//! ```
//!
//! conflux is its copy and sync controllers in-process (copy-core's runtime, on their own client),
//! with `--fan-out-concurrency` = `FANOUT_CONCURRENT` (default 16, the flag's default: copies one
//! fan-out writes in parallel) and `--concurrent=4`. Its time runs from the
//! creation of the ConfigSync (or the source update) until a watch has seen all N copies with the
//! new data.
//!
//! The baseline is the same N writes — server-side apply, forced, of a ConfigMap of the same shape
//! into each namespace, first a create, then an update — issued directly through
//! `futures::stream::buffer_unordered` with P requests in flight, for each P of
//! `FANOUT_BASELINE_PARALLELISM` (default `1,4,8,16,32`, plus `FANOUT_CONCURRENT`), with conflux
//! stopped. It is timed like conflux, until a watch has seen all N (the time of the last response
//! is printed too). conflux is compared with the baseline at its own parallelism and with the
//! fastest one; the goal is within 1.25× of the faster of the two.
//!
//! Where conflux's extra time goes: when a watch saw the trigger and the first copy; the baseline
//! at conflux's parallelism run once more while conflux runs idle (its watches receive every
//! write); and the API server's `apiserver_request_total` and `apiserver_request_duration_seconds`
//! by verb and resource from the trigger until the last copy was seen, then until the API server
//! is quiet (the follow-up reconciles).
//!
//! Everything is measured `FANOUT_ROUNDS` times (default 3) and the tables give medians, because a
//! shared 2-core machine is noisy. Each round has its own source, ConfigSync and object names,
//! restarts conflux, and deletes what it wrote before the next (the ConfigSync has
//! `deletionPolicy: Delete`), so every round sees the same cluster: conflux's reads list
//! ConfigMaps across all namespaces, and their cost grows with what the cluster holds.
//!
//! `FANOUT_NAMESPACES` (default 1000) changes the size. Setting up 1,000 namespaces and waiting
//! for kube-controller-manager to finish with them takes about 2.5 minutes on a 2-core machine, a
//! round about one more.

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use conflux_benches::apiserver::{self, RequestCounts};
use conflux_benches::fanout::{
    BENCH_MANAGER, Operator, apply_config_map, create_config_sync, install_crd,
};
use conflux_benches::{env_usize, percentile, run_by_cargo_bench, wait_for};
use conflux_copy_core::ConfigSync;
use conflux_copy_core::ownership::CONFIG_SYNC_LABEL;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The namespace label the ConfigSync selects (value: this run's shard).
const TENANT: &str = "conflux-bench/tenant";
/// How long the API server must serve no write to count as quiet.
const QUIET: Duration = Duration::from_secs(2);
/// How long to wait for anything before giving up (not a limit on the results).
const GIVE_UP: Duration = Duration::from_secs(900);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !run_by_cargo_bench("fanout") {
        return;
    }
    let n = env_usize("FANOUT_NAMESPACES", 1000).max(1);
    let concurrent = env_usize("FANOUT_CONCURRENT", 16).max(1);
    let rounds = env_usize("FANOUT_ROUNDS", 3).max(1);
    let levels = baseline_levels(concurrent);

    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    install_crd(&client)
        .await
        .expect("installing the ConfigSync CRD");
    let shard = format!("fanout-{}", std::process::id());
    let src = cluster.namespace(&client, "fanout-src").await;
    let setup = Instant::now();
    let namespaces = create_namespaces(&client, &shard, n).await;
    apiserver::settle(&client, QUIET, GIVE_UP)
        .await
        .expect("the cluster settles after creating the namespaces");
    println!(
        "fanout: {n} namespaces created and settled in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    let mut results = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        let result = run_round(
            cluster,
            &client,
            &shard,
            &src,
            &namespaces,
            concurrent,
            &levels,
            round,
        )
        .await;
        results.push(result);
    }
    report(n, concurrent, &levels, &results);
}

/// What one round measured.
struct Round {
    /// conflux: the ConfigSync's creation.
    create: Phase,
    /// conflux: one source update.
    update: Phase,
    /// The baseline at conflux's parallelism with conflux running idle.
    watched: Baseline,
    /// The baselines, conflux stopped, one per parallelism.
    baselines: Vec<Baseline>,
}

/// One round, with its own source, ConfigSync and object names: conflux creates and updates N
/// copies, then the baselines write the same.
#[allow(clippy::too_many_arguments)]
async fn run_round(
    cluster: &conflux_tests::Cluster,
    client: &Client,
    shard: &str,
    src: &str,
    namespaces: &[String],
    concurrent: usize,
    levels: &[usize],
    round: usize,
) -> Round {
    let n = namespaces.len();
    let source_name = format!("info-{round}");
    apply_config_map(client, src, BENCH_MANAGER, &source(&source_name, "one"))
        .await
        .expect("creating the source");
    let operator = Operator::start(cluster.client().await, shard, concurrent)
        .await
        .expect("starting conflux's copy and sync controllers");
    apiserver::settle(client, QUIET, GIVE_UP)
        .await
        .expect("the cluster settles after conflux started");

    // conflux: the ConfigSync's creation, then one source update.
    let name = format!("{shard}-{round}");
    let trigger = watch_first(
        Api::<ConfigSync>::all(client.clone()),
        &name,
        |_: &ConfigSync| true,
    );
    let spec = json!({
        "source": {"kind": "ConfigMap", "namespace": src, "name": source_name},
        "target": {"namespaceSelector": {"matchLabels": {TENANT: shard}}},
        "deletionPolicy": "Delete",
    });
    let create = conflux_phase(
        client,
        &name,
        "one",
        n,
        trigger,
        create_config_sync(client, &name, shard, spec),
    )
    .await;
    let trigger = watch_first(
        Api::<ConfigMap>::namespaced(client.clone(), src),
        &source_name,
        |cm: &ConfigMap| data_v(cm) == Some("two"),
    );
    let update = conflux_phase(
        client,
        &name,
        "two",
        n,
        trigger,
        apply_config_map(client, src, BENCH_MANAGER, &source(&source_name, "two")),
    )
    .await;
    println!(
        "fanout: round {round}: conflux create {:.2} s (first copy {:.0} ms), update {:.2} s (first copy {:.0} ms)",
        create.total.as_secs_f64(),
        create.first_copy.as_secs_f64() * 1e3,
        update.total.as_secs_f64(),
        update.first_copy.as_secs_f64() * 1e3,
    );

    // The baseline at conflux's parallelism while conflux runs idle (its watches receive every
    // write): what conflux's watches cost the writes.
    let watched = baseline(
        client,
        namespaces,
        &format!("direct-watched-{round}"),
        concurrent,
    )
    .await;
    // Every round starts from the same cluster: conflux deletes its copies with the ConfigSync
    // (`deletionPolicy: Delete`), the source goes too.
    delete_config_sync(client, &name).await;
    drop(operator);
    Api::<ConfigMap>::namespaced(client.clone(), src)
        .delete(&source_name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the source {source_name}: {e}"));
    apiserver::settle(client, QUIET, GIVE_UP)
        .await
        .expect("the cluster settles after conflux stopped");

    // The baselines: the same writes, directly, at each parallelism, conflux stopped.
    let mut baselines = Vec::with_capacity(levels.len());
    for &in_flight in levels {
        let name = format!("direct-{in_flight}-{round}");
        baselines.push(baseline(client, namespaces, &name, in_flight).await);
    }
    Round {
        create,
        update,
        watched,
        baselines,
    }
}

/// The parallelisms the baseline runs at: `FANOUT_BASELINE_PARALLELISM` and conflux's own.
fn baseline_levels(concurrent: usize) -> Vec<usize> {
    let list =
        std::env::var("FANOUT_BASELINE_PARALLELISM").unwrap_or_else(|_| "1,4,8,16,32".to_owned());
    let mut levels: Vec<usize> = list
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|v| *v > 0)
        .collect();
    levels.push(concurrent);
    levels.sort_unstable();
    levels.dedup();
    levels
}

/// The source ConfigMap `name` with `data.v = value`.
fn source(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

/// `data.v` of a ConfigMap.
fn data_v(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("v").map(String::as_str)
}

/// Creates `n` namespaces labelled for this run's ConfigSync, 16 at a time.
async fn create_namespaces(client: &Client, shard: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{shard}-{i}")).collect();
    let api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(&names)
        .map(|name| {
            let api = api.clone();
            async move {
                let ns: Namespace = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {TENANT: shard}},
                }))
                .expect("a Namespace object");
                api.create(&PostParams::default(), &ns)
                    .await
                    .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    names
}

/// A watch started before a phase: `ready` fires once it has listed, `done` gives its result.
struct Watch<T> {
    ready: oneshot::Receiver<()>,
    done: JoinHandle<Option<T>>,
}

impl<T> Watch<T> {
    /// Waits until the watch has listed (so it sees everything that happens next).
    async fn listed(&mut self, what: &str) {
        tokio::time::timeout(Duration::from_secs(60), &mut self.ready)
            .await
            .unwrap_or_else(|_| panic!("{what}: the watch did not list"))
            .unwrap_or_else(|_| panic!("{what}: the watch ended before listing"));
    }

    /// The result.
    async fn result(self, what: &str) -> T {
        tokio::time::timeout(GIVE_UP, self.done)
            .await
            .unwrap_or_else(|_| panic!("{what}: not seen after {GIVE_UP:?}"))
            .unwrap_or_else(|e| panic!("{what}: watch task failed: {e}"))
            .unwrap_or_else(|| panic!("{what}: the watch ended"))
    }
}

/// When a watch on `api` first sees an event (after its initial list) about the object `name`
/// for which `matches` holds.
fn watch_first<K>(api: Api<K>, name: &str, matches: fn(&K) -> bool) -> Watch<Instant>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (ready_tx, ready) = oneshot::channel();
    let done = tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(object)) if matches(&object) => {
                    return Some(Instant::now());
                }
                Err(e) => eprintln!("fanout: watch error (retried): {e}"),
                _ => {}
            }
        }
        None
    });
    Watch { ready, done }
}

/// When a watch first saw a ConfigMap matching `labels` with `data.v == value`, and when it had
/// seen `n` distinct ones.
fn watch_copies(
    client: &Client,
    labels: &str,
    value: &'static str,
    n: usize,
) -> Watch<(Instant, Instant)> {
    let api: Api<ConfigMap> = Api::all(client.clone());
    let config = watcher::Config::default().labels(labels);
    let (ready_tx, ready) = oneshot::channel();
    let done = tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut first = None;
        let mut seen: HashSet<(String, String)> = HashSet::new();
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let cm = match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => cm,
                Err(e) => {
                    eprintln!("fanout: watch error (retried): {e}");
                    continue;
                }
                _ => continue,
            };
            if data_v(&cm) != Some(value) {
                continue;
            }
            let now = Instant::now();
            let first = *first.get_or_insert(now);
            seen.insert((
                cm.metadata.namespace.unwrap_or_default(),
                cm.metadata.name.unwrap_or_default(),
            ));
            if seen.len() >= n {
                return Some((first, now));
            }
        }
        None
    });
    Watch { ready, done }
}

/// One fan-out through conflux, as seen from outside.
struct Phase {
    /// Trigger sent → a watch has seen all copies with the new data.
    total: Duration,
    /// Trigger sent → a watch saw the trigger (what conflux's own watch waits for, at least).
    trigger_seen: Duration,
    /// Trigger sent → a watch saw the first copy with the new data.
    first_copy: Duration,
    /// Requests served from the trigger until the last copy was seen (read right after).
    during: RequestCounts,
    /// Requests served after that, until the API server was quiet (follow-up reconciles).
    after: RequestCounts,
}

/// Runs one fan-out: starts the watches, sends `trigger`, waits for all `n` copies of
/// `config_sync` to show `value`, and reads the API server's counts around it.
async fn conflux_phase(
    client: &Client,
    config_sync: &str,
    value: &'static str,
    n: usize,
    mut trigger_watch: Watch<Instant>,
    trigger: impl Future<Output = anyhow::Result<()>>,
) -> Phase {
    let mut copies = watch_copies(
        client,
        &format!("{CONFIG_SYNC_LABEL}={config_sync}"),
        value,
        n,
    );
    trigger_watch.listed("the trigger").await;
    copies.listed("the copies").await;
    let before = apiserver::request_counts(client)
        .await
        .expect("reading the API server's request counts");
    let start = Instant::now();
    trigger.await.expect("sending the trigger");
    let (first, last) = copies.result(&format!("{n} copies with v={value}")).await;
    let converged = apiserver::request_counts(client)
        .await
        .expect("reading the API server's request counts");
    let seen = trigger_watch.result("the trigger").await;
    let quiet = apiserver::settle(client, QUIET, GIVE_UP)
        .await
        .expect("the cluster settles after the fan-out");
    Phase {
        total: last.duration_since(start),
        trigger_seen: seen.saturating_duration_since(start),
        first_copy: first.saturating_duration_since(start),
        during: apiserver::difference(&before, &converged),
        after: apiserver::difference(&converged, &quiet),
    }
}

/// The baseline at one parallelism.
struct Baseline {
    in_flight: usize,
    create: Direct,
    update: Direct,
}

/// The times of one round of direct writes, from the first request.
#[derive(Clone, Copy)]
struct Direct {
    /// Until the last response.
    responded: Duration,
    /// Until a watch had seen every object with the new data (conflux's stop condition).
    seen: Duration,
}

/// Creates, then updates, the ConfigMap `name` in every namespace directly, `in_flight` at a time.
async fn baseline(
    client: &Client,
    namespaces: &[String],
    name: &str,
    in_flight: usize,
) -> Baseline {
    let create = direct_writes(client, namespaces, name, "one", in_flight).await;
    let update = direct_writes(client, namespaces, name, "two", in_flight).await;
    println!(
        "fanout: baseline {name}, {in_flight} in flight: create {:.2} s (last response {:.2} s), update {:.2} s (last response {:.2} s)",
        create.seen.as_secs_f64(),
        create.responded.as_secs_f64(),
        update.seen.as_secs_f64(),
        update.responded.as_secs_f64()
    );
    delete_everywhere(client, namespaces, name).await;
    apiserver::settle(client, QUIET, GIVE_UP)
        .await
        .expect("the cluster settles after a baseline");
    Baseline {
        in_flight,
        create,
        update,
    }
}

/// Deletes the ConfigMap `name` from every namespace, 32 at a time.
async fn delete_everywhere(client: &Client, namespaces: &[String], name: &str) {
    futures::stream::iter(namespaces)
        .map(|ns| async move {
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .delete(name, &DeleteParams::default())
                .await
                .map(drop)
                .unwrap_or_else(|e| panic!("deleting ConfigMap {ns}/{name}: {e}"));
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Deletes a ConfigSync and waits until conflux has applied its deletion policy and released
/// its finalizer.
async fn delete_config_sync(client: &Client, name: &str) {
    let api: Api<ConfigSync> = Api::all(client.clone());
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting ConfigSync {name}: {e}"));
    wait_for(&format!("ConfigSync {name} gone"), GIVE_UP, || {
        let api = api.clone();
        async move {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await
    .expect("conflux finishes deleting the ConfigSync");
}

/// Server-side applies (forced) the ConfigMap `name` with `data.v = value` into every namespace,
/// `in_flight` requests at a time. The object has the shape of a copy: two labels, two
/// annotations, the source's data. A watch, started first, tells when all are visible.
async fn direct_writes(
    client: &Client,
    namespaces: &[String],
    name: &str,
    value: &'static str,
    in_flight: usize,
) -> Direct {
    let manifest = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "conflux-bench",
                "bench.conflux.dev/direct": name,
            },
            "annotations": {
                "bench.conflux.dev/source": format!("ConfigMap/fanout-src/{name}"),
                "bench.conflux.dev/template-hash": "0123456789abcdef",
            },
        },
        "data": {"v": value},
    });
    let manifest = &manifest;
    let mut watch = watch_copies(
        client,
        &format!("bench.conflux.dev/direct={name}"),
        value,
        namespaces.len(),
    );
    watch.listed("the direct writes").await;
    let start = Instant::now();
    futures::stream::iter(namespaces)
        .map(|ns| apply_config_map(client, ns, BENCH_MANAGER, manifest))
        .buffer_unordered(in_flight)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|e| panic!("direct writes of {name}, {in_flight} in flight: {e:#}"));
    let responded = start.elapsed();
    let (_, last) = watch.result(&format!("direct writes of {name}")).await;
    Direct {
        responded,
        seen: last.duration_since(start),
    }
}

/// The two measured steps of a round.
#[derive(Clone, Copy)]
enum Step {
    /// The ConfigSync's creation: N copies created.
    Create,
    /// One source update: N copies updated.
    Update,
}

impl Step {
    const ALL: [Step; 2] = [Step::Create, Step::Update];

    /// conflux's side of the step.
    fn phase(self, round: &Round) -> &Phase {
        match self {
            Step::Create => &round.create,
            Step::Update => &round.update,
        }
    }

    /// A baseline's side of the step.
    fn direct(self, baseline: &Baseline) -> Direct {
        match self {
            Step::Create => baseline.create,
            Step::Update => baseline.update,
        }
    }

    /// What triggers the step.
    fn trigger(self) -> &'static str {
        match self {
            Step::Create => "create (ConfigSync created)",
            Step::Update => "update (source updated)",
        }
    }

    /// The step, short.
    fn name(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Update => "update",
        }
    }
}

/// Prints the results as Markdown tables: medians over the rounds (with the range when there
/// are several), the ratios of the medians, and the request counts of the last round.
fn report(n: usize, concurrent: usize, levels: &[usize], rounds: &[Round]) {
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let millis = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let median = |v: &[Duration]| percentile(v, 50.0).unwrap_or_default();
    // "median (min–max)" when there are several rounds.
    let spread = |v: &[Duration]| {
        let m = secs(median(v));
        match (v.iter().min(), v.iter().max()) {
            (Some(lo), Some(hi)) if v.len() > 1 => format!("{m} ({}–{})", secs(*lo), secs(*hi)),
            _ => m,
        }
    };
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    // One value per round.
    let of = |pick: &dyn Fn(&Round) -> Duration| rounds.iter().map(pick).collect::<Vec<_>>();
    // The baseline at parallelism `p`, one value per round.
    let level = |p: usize, step: Step| {
        rounds
            .iter()
            .filter_map(|r| r.baselines.iter().find(|b| b.in_flight == p))
            .map(|b| step.direct(b).seen)
            .collect::<Vec<_>>()
    };

    println!();
    println!(
        "## fan-out of one ConfigMap to {n} namespaces, conflux --fan-out-concurrency={concurrent} (in-process), {} round(s)",
        rounds.len()
    );
    println!();
    println!(
        "Baseline: the same {n} writes (server-side apply, forced) issued directly with \
         buffer_unordered(P), timed until a watch saw all {n}; median (min–max) over the rounds:"
    );
    println!();
    println!("| P in flight | create {n} | update {n} |");
    println!("|---|---|---|");
    for &p in levels {
        println!(
            "| {p} | {} | {} |",
            spread(&level(p, Step::Create)),
            spread(&level(p, Step::Update))
        );
    }
    println!(
        "| {concurrent}, conflux running idle | {} | {} |",
        spread(&of(&|r| r.watched.create.seen)),
        spread(&of(&|r| r.watched.update.seen))
    );
    println!();
    println!(
        "| step | conflux | baseline at P={concurrent} | fastest baseline | conflux / same P | conflux / fastest (goal ≤ 1.25) |"
    );
    println!("|---|---|---|---|---|---|");
    for step in Step::ALL {
        let conflux = of(&|r| step.phase(r).total);
        let (best_p, best) = levels
            .iter()
            .map(|&p| (p, median(&level(p, step))))
            .min_by_key(|(_, d)| *d)
            .unwrap_or_default();
        let same = median(&level(concurrent, step));
        let verdict = if ratio(median(&conflux), best) <= 1.25 {
            "met"
        } else {
            "missed"
        };
        println!(
            "| {} {n} copies | {} | {} | {} (P={best_p}) | {:.2} | {:.2} ({verdict}) |",
            step.name(),
            spread(&conflux),
            secs(same),
            secs(best),
            ratio(median(&conflux), same),
            ratio(median(&conflux), best),
        );
    }
    println!();
    println!("Where conflux's time goes (medians; the clock starts when the trigger is sent):");
    println!();
    println!(
        "| step | trigger seen by a watch | first copy seen | first → last copy | last copy seen | baseline P={concurrent}, conflux stopped | baseline P={concurrent}, conflux idle |"
    );
    println!("|---|---|---|---|---|---|---|");
    for step in Step::ALL {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            step.trigger(),
            millis(median(&of(&|r| step.phase(r).trigger_seen))),
            millis(median(&of(&|r| step.phase(r).first_copy))),
            secs(median(&of(&|r| step
                .phase(r)
                .total
                .saturating_sub(step.phase(r).first_copy)))),
            secs(median(&of(&|r| step.phase(r).total))),
            secs(median(&level(concurrent, step))),
            secs(median(&of(&|r| step.direct(&r.watched).seen))),
        );
    }
    if let Some(last) = rounds.last() {
        println!();
        println!(
            "API requests in the last round (apiserver_request_total, server-wide: includes the \
             benchmark's one trigger write and kube-controller-manager; WATCH and /metrics left out):"
        );
        for step in Step::ALL {
            let phase = step.phase(last);
            println!(
                "- {}, trigger → last copy seen: {}",
                step.name(),
                apiserver::summary(&phase.during)
            );
            println!(
                "- {}, then until quiet: {}",
                step.name(),
                apiserver::summary(&phase.after)
            );
        }
    }
}
