//! Fault scenarios: the real `conflux run` binary, with all four controllers, against the real
//! API server, while faults happen: conflux SIGKILLed mid fan-out and restarted, SIGKILLed
//! between a Job's delete and its re-creation, the API server killed and restarted, connections
//! dropped and refused (from start-up on), and 5xx/429 answers injected on writes (the last two
//! through the fault proxy of the test support crate).
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

/// Two replicas with leader election; the leader SIGKILLed right after a change: the standby
/// takes over once the lease expires, and every copy, trigger and rollout ends as desired, none
/// doubled. Only the leader writes: the standby's log has no write of its own before it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkilled_mid_change_hands_over() {
    let _serial = serial().await;
    let mut rng = Seeded::new("leader_sigkilled_mid_change_hands_over");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "leader", 12).await;
    let ns = world.source_namespace().to_owned();
    // Short lease times keep the scenario quick; the defaults are Flux's (35s/30s/5s).
    let lease = Duration::from_secs(6);
    let args = [
        "--enable-leader-election",
        "--leader-election-lease-duration=6s",
        "--leader-election-renew-deadline=4s",
        "--leader-election-retry-period=1s",
    ];
    let start = |name: &'static str| {
        Conflux::start_with(
            cluster.kubeconfig(),
            name,
            &args,
            &[("RUNTIME_NAMESPACE", ns.as_str()), ("POD_NAME", name)],
        )
    };
    let mut a = start("leader-a");
    a.wait_ready().await;
    conflux_tests::eventually("replica a leads", Duration::from_secs(60), || async {
        a.is_leader().then_some(())
    })
    .await;
    let mut b = start("leader-b");
    b.wait_ready().await;
    assert!(!b.is_leader(), "one leader at a time");
    world.wait_baselines().await;
    world.change(1).await;
    world.wait_converged(1, Duration::from_secs(120)).await;
    assert!(!b.is_leader(), "the standby still waits");
    assert!(
        !b.log_text().contains("requesting reconciliation"),
        "the standby wrote nothing"
    );

    world.change(2).await;
    tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
    a.kill9();
    let killed = std::time::Instant::now();
    conflux_tests::eventually("replica b takes over", Duration::from_secs(120), || async {
        b.is_leader().then_some(())
    })
    .await;
    let handover = killed.elapsed();
    world.wait_converged(2, Duration::from_secs(120)).await;
    let converged = killed.elapsed();
    eprintln!(
        "leader_sigkilled_mid_change_hands_over: lease {}s, handover {:.1}s, converged {:.1}s after the kill",
        lease.as_secs(),
        handover.as_secs_f64(),
        converged.as_secs_f64()
    );
    world.change(3).await;
    world.wait_converged(3, Duration::from_secs(120)).await;
    world.assert_not_doubled(3).await;
    assert!(b.is_running());
    b.stop();
}

/// The leader cut off from the API server (connections refused and dropped): it stops writing
/// before its lease can expire, the other replica takes over, and the cut-off one stays a
/// standby once the network heals. Changes made meanwhile converge, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_steps_down_before_another_takes_over() {
    let _serial = serial().await;
    let rng = Seeded::new("leader_cut_off_steps_down_before_another_takes_over");
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    let world = World::setup(&client, "partition", 6).await;
    let ns = world.source_namespace().to_owned();
    let proxy = FaultProxy::start(cluster, rng.seed());
    let args = [
        "--enable-leader-election",
        "--leader-election-lease-duration=6s",
        "--leader-election-renew-deadline=4s",
        "--leader-election-retry-period=1s",
    ];
    let env = |name: &'static str| [("RUNTIME_NAMESPACE", ns.clone()), ("POD_NAME", name.into())];
    let env_a = env("cut-a");
    let env_a: Vec<(&str, &str)> = env_a.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut a = Conflux::start_with(proxy.kubeconfig(), "cut-a", &args, &env_a);
    a.wait_ready().await;
    conflux_tests::eventually("replica a leads", Duration::from_secs(60), || async {
        a.is_leader().then_some(())
    })
    .await;
    let env_b = env("cut-b");
    let env_b: Vec<(&str, &str)> = env_b.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut b = Conflux::start_with(cluster.kubeconfig(), "cut-b", &args, &env_b);
    b.wait_ready().await;
    world.wait_baselines().await;

    proxy.set_refuse(true);
    proxy.drop_all();
    let cut = std::time::Instant::now();
    let (mut a_down, mut b_up) = (None, None);
    while a_down.is_none() || b_up.is_none() {
        assert!(cut.elapsed() < Duration::from_secs(120), "no handover");
        if a_down.is_none() && !a.is_leader() {
            a_down = Some(cut.elapsed());
        }
        if b_up.is_none() && b.is_leader() {
            b_up = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (a_down, b_up) = (a_down.unwrap_or_default(), b_up.unwrap_or_default());
    eprintln!(
        "leader_cut_off_steps_down_before_another_takes_over: a stopped writing {:.1}s after the cut, b leads {:.1}s after it",
        a_down.as_secs_f64(),
        b_up.as_secs_f64()
    );
    assert!(a_down <= b_up, "never two leaders: a stepped down first");
    world.change(1).await;
    world.wait_converged(1, Duration::from_secs(120)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!a.is_leader() && b.is_leader(), "b keeps the lease");
    world.change(2).await;
    world.wait_converged(2, Duration::from_secs(120)).await;
    world.assert_not_doubled(2).await;
    a.stop();
    b.stop();
}

/// conflux SIGKILLed between a Job's delete and its create: an admission policy refuses the
/// replacement, so conflux is caught in that window, and killed there. The next conflux reads
/// the record the first wrote in its namespace (`RUNTIME_NAMESPACE`) before the delete, creates
/// the Job once the policy is gone, and deletes the record: no Job lost, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_a_jobs_delete_and_create_loses_no_job() {
    use conflux_tests::eventually;
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    use serde_json::json;

    let _serial = serial().await;
    let cluster = conflux_tests::cluster();
    let client = cluster.client().await;
    install_crds(&client).await;
    let ns = cluster.namespace(&client, "jobkill").await;
    let records = cluster.namespace(&client, "jobkill-conflux").await;
    let apply = PatchParams::apply("faults").force();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let set_cfg = |v: &'static str| {
        let cms = cms.clone();
        let apply = apply.clone();
        async move {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cfg"}, "data": {"v": v}});
            cms.patch("cfg", &apply, &Patch::Apply(&cm))
                .await
                .expect("apply ConfigMap");
        }
    };
    set_cfg("1").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.invalid/job:1",
             "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}},
    }))
    .expect("Job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create Job");
    let old = jobs
        .get("migrate")
        .await
        .expect("Job")
        .metadata
        .uid
        .expect("uid");
    let env = [("RUNTIME_NAMESPACE", records.as_str())];
    let mut conflux = Conflux::start_with(cluster.kubeconfig(), "jobkill-1", &[], &env);
    conflux.wait_ready().await;
    let baseline = || async {
        conflux_tests::remembered_baseline(&client, &records, "Job", &ns, "migrate").await
    };
    eventually("the Job's baseline", Duration::from_secs(60), &baseline).await;

    // Refuse every Job create in the namespace, and wait until the API server enforces it.
    let policy_name = format!("{ns}-no-jobs");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": policy_name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"],
                     "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]}]},
                 "validations": [{"expression": "false", "message": "no Jobs now"}]},
    }))
    .expect("policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": policy_name},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels":
                     {"kubernetes.io/metadata.name": ns}}}},
    }))
    .expect("binding");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create policy");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    let mut probe = job.clone();
    probe.metadata.name = Some("probe".into());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refused = |want: bool| {
        let (jobs, probe, dry_run) = (jobs.clone(), probe.clone(), dry_run.clone());
        async move {
            let result = jobs.create(&dry_run, &probe).await;
            (result.is_err() == want).then_some(())
        }
    };
    eventually("Job creates refused", Duration::from_secs(30), || {
        refused(true)
    })
    .await;

    set_cfg("2").await;
    eventually("the old Job deleted", Duration::from_secs(60), || async {
        let uid = jobs
            .get_opt("migrate")
            .await
            .ok()?
            .and_then(|j| j.metadata.uid);
        (uid.as_deref() != Some(old.as_str())).then_some(())
    })
    .await;
    let recorded = || async {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &records);
        let params = ListParams::default().labels("conflux.dev/pending=job-recreation");
        secrets.list(&params).await.map(|l| l.items.len()).ok()
    };
    assert_eq!(recorded().await, Some(1), "the re-creation is recorded");
    assert!(
        jobs.get_opt("migrate").await.expect("get").is_none(),
        "the replacement was refused"
    );
    conflux.kill9();

    bindings
        .delete(&policy_name, &DeleteParams::default())
        .await
        .expect("delete binding");
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .expect("delete policy");
    eventually("Job creates allowed", Duration::from_secs(30), || {
        refused(false)
    })
    .await;
    let mut conflux = Conflux::start_with(cluster.kubeconfig(), "jobkill-2", &[], &env);
    conflux.wait_ready().await;
    let new = eventually("the Job re-created", Duration::from_secs(60), || async {
        let job = jobs.get_opt("migrate").await.ok()??;
        job.metadata.uid.filter(|uid| *uid != old)
    })
    .await;
    eventually("the record deleted", Duration::from_secs(30), || async {
        (recorded().await == Some(0)).then_some(())
    })
    .await;
    assert!(
        baseline().await.is_some(),
        "the new Job carries its baseline"
    );
    // Several coalescing windows: the new Job is neither re-created again nor doubled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = jobs.get("migrate").await.expect("Job").metadata.uid;
    assert_eq!(now.as_deref(), Some(new.as_str()), "created once");
    conflux.stop();
}
