//! The reload controller's Reloader kinds against a real API server with
//! kube-controller-manager: Jobs (re-created; the Job controller makes their pods), Argo Rollouts
//! (the real Rollout CRD of github.com/argoproj/argo-rollouts; no Argo controller runs: conflux
//! only patches the Rollout, and what Argo would do with the patch is Argo's), and the
//! secrets-store CSI driver (the real SecretProviderClass and SecretProviderClassPodStatus CRDs
//! of sigs.k8s.io/secrets-store-csi-driver; no CSI driver or provider runs: the tests write the
//! SecretProviderClassPodStatus objects the driver would write when a pod mounts, or its rotation
//! finds a new version). The CRDs come from `hack/cluster/crds.sh`.
//!
//! Each test says which of Reloader's end-to-end tests (`test/e2e` upstream) it mirrors.
//! Negative assertions wait for a barrier, as in `reload.rs`: the evaluation counter, another
//! workload's rollout in the same window, or a bounded wait of several coalescing windows where
//! nothing is evaluated at all.

mod reload_support;

use std::time::Duration;

use conflux_reloader::WorkloadKind;
use conflux_reloader::patch::ReloadStrategy;
use conflux_reloader::runtime::{ReloadConfig, RolloutLabels};
use conflux_tests::objects::{install_crd, upstream_crd};
use conflux_tests::{cluster, eventually};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use reload_support::*;
use serde_json::{Value, json};

/// Coalescing window used by these tests.
const WINDOW: Duration = Duration::from_millis(300);

/// Long enough for any evaluation the window could still trigger.
async fn quiet() {
    tokio::time::sleep(WINDOW * 4).await;
}

/// The controller for `ns` with these kinds turned on.
fn config(ns: &str, argo: bool, csi: bool) -> ReloadConfig {
    let mut config = ReloadConfig {
        namespace: Some(ns.to_owned()),
        debounce: WINDOW,
        rate: 100.0,
        burst: 100,
        argo_rollouts: argo,
        ..ReloadConfig::default()
    };
    config.options.csi_integration = csi;
    config
}

/// Successful rollouts of `kind` so far.
fn rollouts_of(running: &Running, kind: WorkloadKind, result: &str) -> u64 {
    running
        .metrics
        .rollouts
        .get_or_create(&RolloutLabels {
            kind: kind.to_string(),
            result: result.into(),
        })
        .get()
}

/// Waits until the controller made at least `n` evaluations in all (a barrier for "did not
/// roll": the workloads were hashed and decided).
async fn wait_evaluations(running: &Running, n: u64, what: &str) {
    eventually(what, Duration::from_secs(30), || {
        let done = running.evaluations();
        async move { (done >= n).then_some(()) }
    })
    .await;
}

/// Server-side applies `manifest` into `ns` as the test manager.
async fn put(client: &Client, ns: &str, manifest: Value) {
    let mut manifest = manifest;
    manifest["metadata"]["namespace"] = json!(ns);
    conflux_tests::objects::apply(client, TEST_MANAGER, &manifest).await;
}

fn dynamic(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, conflux_tests::objects::plural(kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn pointer(obj: &DynamicObject, path: &str) -> Option<String> {
    obj.data
        .pointer(path)
        .and_then(Value::as_str)
        .map(String::from)
}

fn annotation(obj: &DynamicObject, key: &str) -> Option<String> {
    obj.metadata.annotations.as_ref()?.get(key).cloned()
}

// ---------------------------------------------------------------------------------------------
// Jobs

/// A Job reading through `container` (merged into its one container), with workload
/// `annotations`.
fn job(name: &str, annotations: Value, container: Value) -> Value {
    let mut c = json!({"name": "main", "image": "registry.invalid/job:1"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": annotations, "labels": {"app": name}},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"restartPolicy": "Never", "containers": [c]},
        }},
    })
}

async fn get_job(client: &Client, ns: &str, name: &str) -> Option<Job> {
    Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get Job {name}: {e}"))
}

async fn job_uid(client: &Client, ns: &str, name: &str) -> Option<String> {
    get_job(client, ns, name).await.and_then(|j| j.metadata.uid)
}

/// Waits until the Job `name` exists with a uid other than `old`, and returns it.
async fn wait_recreated(client: &Client, ns: &str, name: &str, old: &str) -> Job {
    eventually(
        &format!("Job {name} re-created"),
        Duration::from_secs(60),
        || async {
            get_job(client, ns, name)
                .await
                .filter(|j| j.metadata.uid.as_deref().is_some_and(|u| u != old))
        },
    )
    .await
}

async fn wait_job_baseline(client: &Client, ns: &str, name: &str) -> String {
    eventually(
        &format!("baseline of Job {name}"),
        Duration::from_secs(30),
        || async { remembered(client, ns, "batch", "Job", ns, name).await },
    )
    .await
}

/// Pods the Job controller made for the Job with uid `uid`.
async fn pods_of(client: &Client, ns: &str, uid: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .map(|l| l.items.len())
        .unwrap_or_default()
}

/// The ConfigMaps and Secrets the Jobs of `jobs_are_recreated_when_what_they_read_changes`
/// read, every value `value`.
async fn job_configs(client: &Client, ns: &str, value: &str) {
    apply_cm(
        client,
        ns,
        "job-cm",
        json!({"JOB_CONFIG": value}),
        json!({}),
    )
    .await;
    apply_cm(
        client,
        ns,
        "key-cm",
        json!({"config_key": value}),
        json!({}),
    )
    .await;
    apply_secret(client, ns, "job-secret", json!({"JOB_SECRET": value})).await;
    apply_secret(client, ns, "key-secret", json!({"secret_key": value})).await;
}

/// Mirrors Reloader's `test/e2e/advanced/job_reload_test.go` ("Job Workload Recreation Tests":
/// ConfigMap and Secret `envFrom` with the named `reload` annotations, `auto`, and
/// `valueFrom.configMapKeyRef` / `secretKeyRef`): each Job is re-created (a new uid) when what it
/// reads changes, and only then.
#[tokio::test]
async fn jobs_are_recreated_when_what_they_read_changes() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "kinds-jobs").await;
    job_configs(&client, &ns, "initial").await;
    let jobs = [
        job(
            "cm-envfrom",
            json!({"configmap.reloader.stakater.com/reload": "job-cm"}),
            json!({"envFrom": [{"configMapRef": {"name": "job-cm"}}]}),
        ),
        job(
            "secret-envfrom",
            json!({"secret.reloader.stakater.com/reload": "job-secret"}),
            json!({"envFrom": [{"secretRef": {"name": "job-secret"}}]}),
        ),
        job(
            "auto",
            json!({AUTO.0: AUTO.1}),
            json!({"envFrom": [{"configMapRef": {"name": "job-cm"}}]}),
        ),
        job(
            "cm-keyref",
            json!({"configmap.reloader.stakater.com/reload": "key-cm"}),
            json!({"env": [{"name": "MY_CONFIG",
                "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "config_key"}}}]}),
        ),
        job(
            "secret-keyref",
            json!({"secret.reloader.stakater.com/reload": "key-secret"}),
            json!({"env": [{"name": "MY_SECRET",
                "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "secret_key"}}}]}),
        ),
    ];
    let names: Vec<String> = jobs
        .iter()
        .map(|j| {
            j["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    for j in &jobs {
        put(&client, &ns, j.clone()).await;
    }
    let conflux = start_with(cluster, config(&ns, false, false)).await;
    let mut before = Vec::new();
    for name in &names {
        let baseline = wait_job_baseline(&client, &ns, name).await;
        let job = get_job(&client, &ns, name).await.expect("exists");
        let uid = job.metadata.uid.clone().expect("uid");
        // The Job controller runs it (its pods stay pending: the test ground has no nodes).
        eventually(
            &format!("pods of {name}"),
            Duration::from_secs(30),
            || async { (pods_of(&client, &ns, &uid).await > 0).then_some(()) },
        )
        .await;
        before.push((name.clone(), uid, baseline));
    }
    // First sight recorded baselines; nothing was re-created.
    quiet().await;
    for (name, uid, _) in &before {
        assert_eq!(
            job_uid(&client, &ns, name).await.as_ref(),
            Some(uid),
            "{name}"
        );
    }
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Job, "success"), 0);

    let evaluated = conflux.evaluations();
    job_configs(&client, &ns, "updated").await;
    for (name, old_uid, old_baseline) in &before {
        let new = wait_recreated(&client, &ns, name, old_uid).await;
        let annotations = new.metadata.annotations.clone().unwrap_or_default();
        assert_ne!(annotations.get(BASELINE), Some(old_baseline), "{name}");
        let spec = new.spec.clone().expect("spec");
        // The selector and its labels were generated again, for the new uid.
        let new_uid = new.metadata.uid.clone().expect("uid");
        let labels = spec
            .template
            .metadata
            .clone()
            .and_then(|m| m.labels)
            .unwrap_or_default();
        assert_eq!(
            labels.get("batch.kubernetes.io/controller-uid"),
            Some(&new_uid),
            "{name}"
        );
        assert_eq!(labels.get("app").map(String::as_str), Some(name.as_str()));
        let template_annotations = spec.template.metadata.and_then(|m| m.annotations);
        assert!(
            template_annotations.is_some_and(|a| a.contains_key(HASH)),
            "{name}: the replacement carries the rollout's template annotation"
        );
        // The old Job's pods go with it (background propagation).
        eventually(
            &format!("old pods of {name} collected"),
            Duration::from_secs(60),
            || async { (pods_of(&client, &ns, old_uid).await == 0).then_some(()) },
        )
        .await;
        let reloaded = eventually(
            &format!("Reloaded Event on {name}"),
            Duration::from_secs(30),
            || async { events(&client, &ns, name, "Reloaded").await.pop() },
        )
        .await;
        assert!(reloaded.1.contains("Job re-created"), "{reloaded:?}");
    }
    // Each re-created once: the replacements carry the new baselines, so seeing them decides
    // nothing.
    // Five rollouts, and five first sights of the replacements.
    wait_evaluations(&conflux, evaluated + 10, "the replacements' first sight").await;
    quiet().await;
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Job, "success"), 5);
    assert_eq!(
        Api::<Job>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .expect("list Jobs")
            .items
            .len(),
        5,
        "none doubled"
    );
}

/// A CronJob with `auto` and a Job it owns (as its schedule would create it), a standalone Job,
/// and a Deployment, all reading one ConfigMap.
async fn cronjob_world(client: &Client, ns: &str) -> String {
    apply_cm(client, ns, "shared", json!({"v": "1"}), json!({})).await;
    let read = json!({"envFrom": [{"configMapRef": {"name": "shared"}}]});
    put(
        client,
        ns,
        json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly", "annotations": {AUTO.0: AUTO.1}},
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {AUTO.0: AUTO.1}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "registry.invalid/job:1",
                     "envFrom": [{"configMapRef": {"name": "shared"}}]}]}}}}}}),
    )
    .await;
    let cron_uid = dynamic(client, ns, "batch/v1", "CronJob")
        .get("nightly")
        .await
        .expect("CronJob")
        .metadata
        .uid
        .expect("uid");
    // What the CronJob controller creates: the job template's annotations (here `auto` on the
    // pod template, which Reloader reads too), and a controller reference to the CronJob.
    let mut owned = job("nightly-manual", json!({}), read.clone());
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob",
        "name": "nightly", "uid": cron_uid, "controller": true, "blockOwnerDeletion": true}]);
    owned["spec"]["template"]["metadata"]["annotations"] = json!({AUTO.0: AUTO.1});
    put(client, ns, owned).await;
    put(
        client,
        ns,
        job("standalone", json!({AUTO.0: AUTO.1}), read.clone()),
    )
    .await;
    create_deployment(
        client,
        ns,
        &deployment("web", json!({AUTO.0: AUTO.1}), container(read)),
    )
    .await;
    job_uid(client, ns, "nightly-manual").await.expect("uid")
}

async fn cronjob_rolled(client: &Client, ns: &str) -> Option<String> {
    let cron = dynamic(client, ns, "batch/v1", "CronJob")
        .get("nightly")
        .await
        .ok()?;
    pointer(
        &cron,
        "/spec/jobTemplate/spec/template/metadata/annotations/conflux.dev~1config-hash",
    )
}

/// The decision about Jobs a CronJob owns (Reloader re-creates them; conflux does not: the
/// CronJob's job template rolls, so its next run reads the new config, and re-creating one of
/// its Jobs would run it again outside its schedule, finished history included), and Reloader's
/// `--ignored-workload-types`, mirroring `test/e2e/flags/ignored_workloads_test.go`
/// ("ignoreCronJobs", "both ignoreCronJobs and ignoreJobs": Deployments still reload).
#[tokio::test]
async fn jobs_of_a_cronjob_are_left_to_it_and_ignored_workload_types_are() {
    let cluster = cluster();
    let client = cluster.client().await;

    // Default: the CronJob's template rolls, the standalone Job is re-created, the CronJob's Job
    // is left alone.
    let ns = cluster.namespace(&client, "kinds-cron").await;
    let owned_uid = cronjob_world(&client, &ns).await;
    let standalone = job_uid(&client, &ns, "standalone").await.expect("uid");
    let conflux = start_with(cluster, config(&ns, false, false)).await;
    wait_job_baseline(&client, &ns, "standalone").await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "shared", json!({"v": "2"}), json!({})).await;
    wait_recreated(&client, &ns, "standalone", &standalone).await;
    eventually("CronJob rolled", Duration::from_secs(30), || {
        cronjob_rolled(&client, &ns)
    })
    .await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    quiet().await;
    let owned = get_job(&client, &ns, "nightly-manual").await.expect("kept");
    assert_eq!(owned.metadata.uid.as_deref(), Some(owned_uid.as_str()));
    assert!(
        !owned
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(BASELINE),
        "not even looked at"
    );
    drop(conflux);

    // --ignored-workload-types=jobs: Jobs are not watched; everything else rolls.
    let ns = cluster.namespace(&client, "kinds-nojobs").await;
    cronjob_world(&client, &ns).await;
    let standalone = job_uid(&client, &ns, "standalone").await.expect("uid");
    let mut only_jobs = config(&ns, false, false);
    only_jobs.ignored_kinds =
        conflux_reloader::filters::ignored_workload_types(&["jobs".into()]).expect("valid");
    let conflux = start_with(cluster, only_jobs).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "shared", json!({"v": "2"}), json!({})).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    eventually("CronJob rolled", Duration::from_secs(30), || {
        cronjob_rolled(&client, &ns)
    })
    .await;
    quiet().await;
    assert_eq!(job_uid(&client, &ns, "standalone").await, Some(standalone));
    drop(conflux);

    // --ignored-workload-types=jobs,cronjobs: only the Deployment rolls.
    let ns = cluster.namespace(&client, "kinds-nobatch").await;
    cronjob_world(&client, &ns).await;
    let standalone = job_uid(&client, &ns, "standalone").await.expect("uid");
    let mut neither = config(&ns, false, false);
    neither.ignored_kinds =
        conflux_reloader::filters::ignored_workload_types(&["jobs".into(), "cronjobs".into()])
            .expect("valid");
    let conflux = start_with(cluster, neither).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "shared", json!({"v": "2"}), json!({})).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    quiet().await;
    assert_eq!(cronjob_rolled(&client, &ns).await, None);
    assert_eq!(job_uid(&client, &ns, "standalone").await, Some(standalone));
    assert_eq!(conflux.rollouts(), 1);
}

/// A namespaced Role for the reload controller bound to `user`: the verbs `conflux install
/// --export` grants the reload controller (checked against the export in
/// `crates/operator-bin/tests/install.rs`), with `extra` rules; `job_verbs` for Jobs.
async fn grant(client: &Client, ns: &str, user: &str, job_verbs: &[&str], extra: Value) {
    let mut rules = vec![
        json!({"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"],
               "verbs": ["list", "watch", "patch"]}),
        json!({"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["list", "watch", "patch"]}),
        json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": job_verbs}),
        json!({"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}),
        // Its memory and Job records, in its own namespace (here the test's).
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch", "delete"]}),
    ];
    if let Value::Array(more) = extra {
        rules.extend(more);
    }
    put(
        client,
        ns,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "reload"}, "rules": rules}),
    )
    .await;
    put(
        client,
        ns,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "reload"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reload"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await;
}

/// The install's verbs on Jobs, and the same without `create`.
const JOB_VERBS: [&str; 6] = ["get", "list", "watch", "patch", "create", "delete"];
const JOB_VERBS_NO_CREATE: [&str; 5] = ["get", "list", "watch", "patch", "delete"];

/// The ConfigMap `cfg` (`v: 1`) and the Job `migrate` that reads it (`auto`).
async fn migrate_job(client: &Client, ns: &str) {
    apply_cm(client, ns, "cfg", json!({"v": "1"}), json!({})).await;
    put(
        client,
        ns,
        job(
            "migrate",
            json!({AUTO.0: AUTO.1}),
            json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}),
        ),
    )
    .await;
}

/// Changes `cfg` and waits until the Job `migrate` is deleted.
async fn change_and_wait_deleted(client: &Client, ns: &str) {
    apply_cm(client, ns, "cfg", json!({"v": "2"}), json!({})).await;
    eventually("the old Job deleted", Duration::from_secs(30), || async {
        job_uid(client, ns, "migrate").await.is_none().then_some(())
    })
    .await;
}

/// "Nothing lost": the old Job is deleted but its replacement cannot be created (here RBAC
/// refuses the create). The replacement is kept, the failure is reported once and retried with
/// backoff, and once the create is allowed the Job comes back, once. (Reloader's
/// `ReCreateJobFromjob` returns the create's error; its retries list the Jobs again and no
/// longer find the deleted one: the Job stays gone.)
/// Also: with exactly the install's verbs, Jobs roll.
#[tokio::test]
async fn a_job_whose_create_is_refused_is_kept_and_created_once_allowed() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "kinds-jobretry").await;
    migrate_job(&client, &ns).await;
    let (all, no_create) = (JOB_VERBS, JOB_VERBS_NO_CREATE);
    grant(&client, &ns, "alice", &no_create, json!([])).await;
    let conflux = start_as(cluster.client_as("alice").await, config(&ns, false, false)).await;
    wait_job_baseline(&client, &ns, "migrate").await;
    let old = job_uid(&client, &ns, "migrate").await.expect("uid");

    change_and_wait_deleted(&client, &ns).await;
    let failed = eventually("ReloadFailed Event", Duration::from_secs(30), || async {
        events(&client, &ns, "migrate", "ReloadFailed").await.pop()
    })
    .await;
    assert_eq!(failed.0, "Warning");
    assert!(failed.1.contains("creating Job"), "{failed:?}");
    eventually("a retry", Duration::from_secs(30), || {
        let n = rollouts_of(&conflux, WorkloadKind::Job, "error");
        async move { (n >= 2).then_some(()) }
    })
    .await;
    assert_eq!(
        events(&client, &ns, "migrate", "ReloadFailed").await.len(),
        1,
        "reported once"
    );

    grant(&client, &ns, "alice", &all, json!([])).await;
    let new = wait_recreated(&client, &ns, "migrate", &old).await;
    let annotations = new.metadata.annotations.unwrap_or_default();
    assert!(annotations.contains_key(BASELINE));
    quiet().await;
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Job, "success"), 1);
    assert_eq!(
        job_uid(&client, &ns, "migrate").await,
        new.metadata.uid,
        "created once"
    );
}

/// The re-creation records in `ns`, by name.
async fn records(client: &Client, ns: &str) -> Vec<String> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("conflux.dev/pending=job-recreation"))
        .await
        .unwrap_or_else(|e| panic!("list Secrets: {e}"))
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect()
}

/// "Nothing lost", across a crash: the old Job is deleted, its replacement cannot be created
/// (RBAC refuses), and conflux is stopped (its task aborted, as a kill would: nothing of it
/// runs after). The replacement was written down before the delete, in a Secret of the records
/// namespace; the next conflux reads it and creates the Job, once, then deletes the record. A
/// record that is not readable gets one Warning Event and is left in place.
/// (Reloader, killed in the same window, leaves the Job deleted.)
#[tokio::test]
async fn a_job_whose_replacement_was_recorded_is_created_after_a_crash() {
    let cluster = cluster();
    let client = cluster.client().await;
    let ns = cluster.namespace(&client, "kinds-jobcrash").await;
    migrate_job(&client, &ns).await;
    // What `conflux install --export` grants in conflux's namespace for the records.
    let records_rule = json!([{"apiGroups": [""], "resources": ["secrets"],
                               "verbs": ["create", "patch", "delete"]}]);
    let (all, no_create) = (JOB_VERBS, JOB_VERBS_NO_CREATE);
    grant(&client, &ns, "alice", &no_create, records_rule.clone()).await;
    let mut with_records = config(&ns, false, false);
    with_records.records_namespace = Some(ns.clone());
    let first = start_as(cluster.client_as("alice").await, with_records.clone()).await;
    wait_job_baseline(&client, &ns, "migrate").await;
    let old = job_uid(&client, &ns, "migrate").await.expect("uid");

    change_and_wait_deleted(&client, &ns).await;
    eventually("the create refused", Duration::from_secs(30), || {
        let n = rollouts_of(&first, WorkloadKind::Job, "error");
        async move { (n >= 1).then_some(()) }
    })
    .await;
    let recorded = records(&client, &ns).await;
    assert_eq!(recorded.len(), 1, "one record: {recorded:?}");
    drop(first);

    // Something else labelled as a record, unreadable: reported, left alone.
    put(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "not-a-record",
                            "labels": {"conflux.dev/pending": "job-recreation"}},
               "stringData": {"job.json": "{ not json"}}),
    )
    .await;
    grant(&client, &ns, "alice", &all, records_rule).await;
    let second = start_as(cluster.client_as("alice").await, with_records).await;
    let new = wait_recreated(&client, &ns, "migrate", &old).await;
    assert!(
        new.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(BASELINE)
    );
    eventually("the record deleted", Duration::from_secs(30), || async {
        (records(&client, &ns).await == ["not-a-record"]).then_some(())
    })
    .await;
    let invalid = eventually(
        "InvalidJobRecord Event",
        Duration::from_secs(30),
        || async {
            events(&client, &ns, "not-a-record", "InvalidJobRecord")
                .await
                .pop()
        },
    )
    .await;
    assert_eq!(invalid.0, "Warning");
    assert!(!invalid.1.contains("not json"), "{invalid:?}");
    quiet().await;
    assert_eq!(rollouts_of(&second, WorkloadKind::Job, "success"), 1);
    assert_eq!(
        job_uid(&client, &ns, "migrate").await,
        new.metadata.uid,
        "created once"
    );
    assert_eq!(
        events(&client, &ns, "not-a-record", "InvalidJobRecord")
            .await
            .len(),
        1,
        "reported once"
    );
}

// ---------------------------------------------------------------------------------------------
// Argo Rollouts

async fn install_rollout_crd(client: &Client) {
    install_crd(
        client,
        TEST_MANAGER,
        &upstream_crd("argo-rollouts/rollout-crd.yaml"),
    )
    .await;
}

/// A Rollout as Reloader's `CreateRollout` makes it (one replica, a canary strategy), reading
/// `cfg` through `envFrom`, with workload `annotations`.
fn rollout(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"canary": {"steps": [{"setWeight": 100}]}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1",
                    "command": ["sh", "-c", "sleep 3600"],
                    "envFrom": [{"configMapRef": {"name": "cfg"}}]}]},
            },
        },
    })
}

async fn get_rollout(client: &Client, ns: &str, name: &str) -> DynamicObject {
    dynamic(client, ns, "argoproj.io/v1alpha1", "Rollout")
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get Rollout {name}: {e}"))
}

/// Mirrors Reloader's `test/e2e/argo/rollout_test.go`: the default strategy reloads through the
/// pod template's annotations (`last-reloaded-from`, and conflux's hash), and
/// `rollout-strategy: restart` sets `spec.restartAt` instead, leaving the template alone. Also:
/// with `--reload-strategy=env-vars` a Rollout still rolls through the annotation (its CRD may
/// mark `containers` atomic), a Rollout without a template is reported once, and `restart` on a
/// Deployment is accepted, ignored and reported once (as Reloader documents). With the install's
/// verbs for Rollouts only (list, watch, patch).
#[tokio::test]
async fn rollouts_roll_through_the_template_annotation_or_restart_at() {
    let cluster = cluster();
    let client = cluster.client().await;
    install_rollout_crd(&client).await;
    let ns = cluster.namespace(&client, "kinds-argo").await;
    apply_cm(&client, &ns, "cfg", json!({"key": "initial"}), json!({})).await;
    put(
        &client,
        &ns,
        rollout("default-strategy", json!({AUTO.0: AUTO.1})),
    )
    .await;
    put(
        &client,
        &ns,
        rollout(
            "restart",
            json!({AUTO.0: AUTO.1, "reloader.stakater.com/rollout-strategy": "restart"}),
        ),
    )
    .await;
    put(
        &client,
        &ns,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "by-ref", "annotations": {AUTO.0: AUTO.1}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "by-ref"}},
                     "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                     "strategy": {"canary": {}}}}),
    )
    .await;
    create_deployment(
        &client,
        &ns,
        &deployment(
            "deploy-restart",
            json!({AUTO.0: AUTO.1, "reloader.stakater.com/rollout-strategy": "restart"}),
            container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
        ),
    )
    .await;
    grant(
        &client,
        &ns,
        "bob",
        &["get", "list", "watch", "patch", "create", "delete"],
        json!([{"apiGroups": ["argoproj.io"], "resources": ["rollouts"],
                "verbs": ["list", "watch", "patch"]}]),
    )
    .await;
    let mut with_argo = config(&ns, true, false);
    with_argo.options.reload_strategy = ReloadStrategy::EnvVars;
    let conflux = start_as(cluster.client_as("bob").await, with_argo).await;
    for name in ["default-strategy", "restart"] {
        eventually(
            &format!("baseline of Rollout {name}"),
            Duration::from_secs(30),
            || async { remembered(&client, &ns, "argoproj.io", "Rollout", &ns, name).await },
        )
        .await;
    }
    wait_baseline(&client, &ns, "deploy-restart").await;
    let template_before =
        get_rollout(&client, &ns, "restart").await.data["spec"]["template"].clone();

    apply_cm(&client, &ns, "cfg", json!({"key": "updated"}), json!({})).await;
    // Default strategy: the template annotation (not a variable), the containers untouched.
    let rolled = eventually("Rollout rolled", Duration::from_secs(30), || async {
        let r = get_rollout(&client, &ns, "default-strategy").await;
        let template = "/spec/template/metadata/annotations";
        pointer(&r, &format!("{template}/conflux.dev~1config-hash"))?;
        pointer(
            &r,
            &format!("{template}/reloader.stakater.com~1last-reloaded-from"),
        )?;
        Some(r)
    })
    .await;
    assert_eq!(
        rolled.data["spec"]["template"]["spec"]["containers"],
        json!([{"name": "main", "image": "registry.invalid/app:1",
                "command": ["sh", "-c", "sleep 3600"],
                "envFrom": [{"configMapRef": {"name": "cfg"}}]}]),
        "no STAKATER_ variable, nothing else changed"
    );
    assert!(rolled.data["spec"]["restartAt"].is_null());
    // restart: spec.restartAt, and the template exactly as it was.
    let restarted = eventually("restartAt set", Duration::from_secs(30), || async {
        let r = get_rollout(&client, &ns, "restart").await;
        pointer(&r, "/spec/restartAt").map(|at| (r, at))
    })
    .await;
    assert!(
        conflux_reloader::settings::parse_rfc3339(&restarted.1).is_some(),
        "RFC 3339: {}",
        restarted.1
    );
    assert_eq!(restarted.0.data["spec"]["template"], template_before);
    // The Deployment with `restart` rolls its template (with the env-vars strategy: a variable).
    wait_replica_sets(&client, &ns, "deploy-restart", 2).await;
    let warning = eventually("restart ignored, said", Duration::from_secs(30), || async {
        events(&client, &ns, "deploy-restart", "InvalidAnnotation")
            .await
            .pop()
    })
    .await;
    assert!(warning.1.contains("Rollouts only"), "{warning:?}");
    let no_template = eventually("NoPodTemplate", Duration::from_secs(30), || async {
        events(&client, &ns, "by-ref", "NoPodTemplate").await.pop()
    })
    .await;
    assert!(no_template.1.contains("workloadRef"), "{no_template:?}");
    quiet().await;
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Rollout, "success"), 2);
    assert_eq!(
        events(&client, &ns, "deploy-restart", "InvalidAnnotation")
            .await
            .len(),
        1
    );
    assert_eq!(
        events(&client, &ns, "by-ref", "NoPodTemplate").await.len(),
        1
    );

    // Once more: each rolls again, once (restartAt moves on; the template hash changes).
    let hash = pointer(
        &rolled,
        "/spec/template/metadata/annotations/conflux.dev~1config-hash",
    );
    tokio::time::sleep(Duration::from_millis(1100)).await; // restartAt has second precision
    apply_cm(&client, &ns, "cfg", json!({"key": "again"}), json!({})).await;
    eventually("Rollout rolled again", Duration::from_secs(30), || async {
        let r = get_rollout(&client, &ns, "default-strategy").await;
        pointer(
            &r,
            "/spec/template/metadata/annotations/conflux.dev~1config-hash",
        )
        .filter(|h| Some(h) != hash.as_ref())
    })
    .await;
    eventually("restartAt moved", Duration::from_secs(30), || async {
        let r = get_rollout(&client, &ns, "restart").await;
        pointer(&r, "/spec/restartAt").filter(|at| *at != restarted.1)
    })
    .await;
    quiet().await;
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Rollout, "success"), 4);
}

/// Rollouts are Reloader's opt-in (`--is-Argo-Rollouts`, default false), and conflux's: without
/// the flag a Rollout is never read or written, whatever its annotations.
#[tokio::test]
async fn rollouts_are_left_alone_without_the_flag() {
    let cluster = cluster();
    let client = cluster.client().await;
    install_rollout_crd(&client).await;
    let ns = cluster.namespace(&client, "kinds-noargo").await;
    apply_cm(&client, &ns, "cfg", json!({"key": "initial"}), json!({})).await;
    put(&client, &ns, rollout("r", json!({AUTO.0: AUTO.1}))).await;
    create_deployment(
        &client,
        &ns,
        &deployment(
            "web",
            json!({AUTO.0: AUTO.1}),
            container(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
        ),
    )
    .await;
    let conflux = start_with(cluster, config(&ns, false, false)).await;
    wait_baseline(&client, &ns, "web").await;
    apply_cm(&client, &ns, "cfg", json!({"key": "updated"}), json!({})).await;
    wait_replica_sets(&client, &ns, "web", 2).await;
    quiet().await;
    let r = get_rollout(&client, &ns, "r").await;
    assert_eq!(annotation(&r, BASELINE), None);
    assert!(r.data["spec"]["template"]["metadata"]["annotations"].is_null());
    assert_eq!(rollouts_of(&conflux, WorkloadKind::Rollout, "success"), 0);
}

// ---------------------------------------------------------------------------------------------
// secrets-store CSI driver

async fn install_csi_crds(client: &Client) {
    for file in [
        "secrets-store/secretproviderclasses.yaml",
        "secrets-store/secretproviderclasspodstatuses.yaml",
    ] {
        install_crd(client, TEST_MANAGER, &upstream_crd(file)).await;
    }
}

/// A SecretProviderClass as Reloader's tests make one (Vault; nothing reads it here).
fn secret_provider_class(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClass",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"provider": "vault", "parameters": {
            "vaultAddress": "http://vault.vault:8200", "roleName": "test-role",
            "objects": "- objectName: \"api_key\"\n  secretPath: \"secret/data/test\"\n  secretKey: \"api_key\""}}})
}

/// What the CSI driver writes when `pod` mounts `class` (or its rotation finds new versions):
/// `<pod>-<namespace>-<class>`, with the mounted objects' ids and versions.
async fn mount(client: &Client, ns: &str, pod: &str, class: &str, version: &str) {
    put(
        client,
        ns,
        json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
            "metadata": {"name": format!("{pod}-{ns}-{class}"),
                         "labels": {"internal.secrets-store.csi.k8s.io/node-name": "node-1"}},
            "status": {"podName": pod, "secretProviderClassName": class, "mounted": true,
                "targetPath": format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/secrets-store/mount"),
                "objects": [{"id": "secret/data/test/api_key", "version": version}]}}),
    )
    .await;
}

async fn unmount(client: &Client, ns: &str, pod: &str, class: &str) {
    dynamic(
        client,
        ns,
        "secrets-store.csi.x-k8s.io/v1",
        "SecretProviderClassPodStatus",
    )
    .delete(&format!("{pod}-{ns}-{class}"), &DeleteParams::default())
    .await
    .unwrap_or_else(|e| panic!("delete SecretProviderClassPodStatus: {e}"));
}

/// A pod spec mounting the SecretProviderClass `class` through the CSI driver (Reloader's
/// `WithCSIVolume`), plus `extra` merged into its container.
fn csi_pod(class: &str, extra: Value) -> Value {
    let mut spec = container(extra);
    spec["containers"][0]["volumeMounts"] =
        json!([{"name": "csi-secrets-store", "mountPath": "/mnt/secrets-store", "readOnly": true}]);
    spec["volumes"] = json!([{"name": "csi-secrets-store", "csi": {
        "driver": "secrets-store.csi.k8s.io", "readOnly": true,
        "volumeAttributes": {"secretProviderClass": class}}}]);
    spec
}

fn last_reloaded_type(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<String> {
    let source = d
        .spec
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get("reloader.stakater.com/last-reloaded-from")?
        .clone();
    let value: Value = serde_json::from_str(&source).ok()?;
    value["type"].as_str().map(String::from)
}

/// Mirrors Reloader's `test/e2e/csi/csi_test.go` ("should reload when Vault secret changes",
/// "should handle multiple Vault secret updates", "should reload only SPC changes with
/// secretproviderclass auto annotation, not ConfigMap", "should reload for both ConfigMap and SPC
/// when using combined auto=true") and the CSI case of `advanced/job_reload_test.go` ("should
/// recreate Job when Vault secret changes"), with the driver's writes played by the test. Also
/// what conflux promises beyond them: new pods' mounts, scaling to zero and back, a restart of
/// conflux (a change made while it was down rolls once), `ignore` on the class, and a malformed
/// status (reported once, the rest keeps working). With the install's verbs (list and watch of
/// both kinds).
#[tokio::test]
async fn secret_provider_class_versions_roll_what_mounts_them() {
    let cluster = cluster();
    let client = cluster.client().await;
    install_csi_crds(&client).await;
    let ns = cluster.namespace(&client, "kinds-csi").await;
    apply_cm(&client, &ns, "cfg", json!({"key": "initial"}), json!({})).await;
    put(&client, &ns, secret_provider_class("vault-db", json!({}))).await;
    let read_cm = json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]});
    let workloads = [
        (
            "reload-annotation",
            json!({"secretproviderclass.reloader.stakater.com/reload": "vault-db"}),
            csi_pod("vault-db", json!({})),
        ),
        (
            "typed-auto",
            json!({"secretproviderclass.reloader.stakater.com/auto": "true"}),
            csi_pod("vault-db", read_cm.clone()),
        ),
        (
            "combined",
            json!({AUTO.0: AUTO.1}),
            csi_pod("vault-db", read_cm.clone()),
        ),
    ];
    for (name, annotations, spec) in &workloads {
        create_deployment(
            &client,
            &ns,
            &deployment(name, annotations.clone(), spec.clone()),
        )
        .await;
    }
    let mut vault_job = job(
        "vault-job",
        json!({"secretproviderclass.reloader.stakater.com/reload": "vault-db"}),
        json!({}),
    );
    vault_job["spec"]["template"]["spec"] = csi_pod("vault-db", json!({}));
    vault_job["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    put(&client, &ns, vault_job).await;
    // The driver recorded the first pods' mounts (version 1).
    for pod in ["reload-annotation-1", "typed-auto-1", "combined-1"] {
        mount(&client, &ns, pod, "vault-db", "1").await;
    }
    grant(
        &client,
        &ns,
        "bob",
        &["get", "list", "watch", "patch", "create", "delete"],
        json!([{"apiGroups": ["secrets-store.csi.x-k8s.io"],
                "resources": ["secretproviderclasspodstatuses", "secretproviderclasses"],
                "verbs": ["list", "watch"]}]),
    )
    .await;
    let csi = config(&ns, false, true);
    let conflux = start_as(cluster.client_as("bob").await, csi.clone()).await;
    for (name, _, _) in &workloads {
        wait_baseline(&client, &ns, name).await;
    }
    wait_job_baseline(&client, &ns, "vault-job").await;
    let job_before = job_uid(&client, &ns, "vault-job").await.expect("uid");

    // A ConfigMap change: `auto` covers it, the typed class annotation does not.
    let evaluated = conflux.evaluations();
    apply_cm(&client, &ns, "cfg", json!({"key": "updated"}), json!({})).await;
    wait_replica_sets(&client, &ns, "combined", 2).await;
    wait_evaluations(&conflux, evaluated + 2, "typed-auto evaluated").await;
    quiet().await;
    assert_eq!(replica_sets(&client, &ns, "typed-auto").await, 1);
    assert_eq!(replica_sets(&client, &ns, "reload-annotation").await, 1);

    // Rotation: the driver writes version 2 into one pod's status. Every workload mounting the
    // class rolls once, and the Job is re-created.
    mount(&client, &ns, "combined-1", "vault-db", "2").await;
    wait_replica_sets(&client, &ns, "reload-annotation", 2).await;
    wait_replica_sets(&client, &ns, "typed-auto", 2).await;
    wait_replica_sets(&client, &ns, "combined", 3).await;
    wait_recreated(&client, &ns, "vault-job", &job_before).await;
    let d = get_deployment(&client, &ns, "typed-auto").await;
    assert_eq!(
        last_reloaded_type(&d).as_deref(),
        Some("SECRETPROVIDERCLASS")
    );
    let reloaded = events(&client, &ns, "typed-auto", "Reloaded").await;
    assert!(
        reloaded.iter().any(|(_, note)| note
            .contains("SecretProviderClass vault-db changed (objects secret/data/test/api_key)")),
        "{reloaded:?}"
    );

    // The rollout's new pods mount version 2 while the old pods' statuses still exist (and the
    // driver's rotation brings them to version 2 too): nothing more rolls.
    for pod in [
        "reload-annotation-2",
        "typed-auto-2",
        "combined-2",
        "vault-job-2",
    ] {
        mount(&client, &ns, pod, "vault-db", "2").await;
    }
    mount(&client, &ns, "typed-auto-1", "vault-db", "2").await;
    quiet().await;
    // The old pods go, and their statuses with them.
    for pod in ["reload-annotation-1", "typed-auto-1", "combined-1"] {
        unmount(&client, &ns, pod, "vault-db").await;
    }
    quiet().await;
    let counts = [("reload-annotation", 2), ("typed-auto", 2), ("combined", 3)];
    for (name, n) in counts {
        assert_eq!(replica_sets(&client, &ns, name).await, n, "{name}");
    }

    // Scaled to zero (no status left), the secret rotates meanwhile, and the first new pod
    // mounts version 3: it already has the new version, so nothing rolls.
    for pod in [
        "reload-annotation-2",
        "typed-auto-2",
        "combined-2",
        "vault-job-2",
    ] {
        unmount(&client, &ns, pod, "vault-db").await;
    }
    quiet().await;
    mount(&client, &ns, "combined-3", "vault-db", "3").await;
    quiet().await;
    for (name, n) in counts {
        assert_eq!(replica_sets(&client, &ns, name).await, n, "{name}");
    }

    // Multiple updates: each rotation rolls again, once.
    mount(&client, &ns, "combined-3", "vault-db", "4").await;
    wait_replica_sets(&client, &ns, "typed-auto", 3).await;
    wait_replica_sets(&client, &ns, "reload-annotation", 3).await;
    wait_replica_sets(&client, &ns, "combined", 4).await;

    // conflux restarts: nothing rolls for what it already saw; a rotation made while it was
    // down rolls once when it is back (the content is read from the statuses, not remembered).
    drop(conflux);
    let conflux = start_as(cluster.client_as("bob").await, csi.clone()).await;
    conflux.evaluated_since(0, "start-up evaluations").await;
    quiet().await;
    assert_eq!(replica_sets(&client, &ns, "typed-auto").await, 3);
    drop(conflux);
    mount(&client, &ns, "combined-3", "vault-db", "5").await;
    let conflux = start_as(cluster.client_as("bob").await, csi.clone()).await;
    wait_replica_sets(&client, &ns, "typed-auto", 4).await;
    wait_replica_sets(&client, &ns, "combined", 5).await;
    quiet().await;
    assert_eq!(replica_sets(&client, &ns, "typed-auto").await, 4);

    // `ignore` on the class: its rotations roll nothing (its membership change moves baselines).
    put(
        &client,
        &ns,
        secret_provider_class("vault-db", json!({"reloader.stakater.com/ignore": "true"})),
    )
    .await;
    quiet().await;
    mount(&client, &ns, "combined-3", "vault-db", "6").await;
    quiet().await;
    conflux.evaluated_since(0, "evaluations").await;
    assert_eq!(replica_sets(&client, &ns, "typed-auto").await, 4);
    assert_eq!(replica_sets(&client, &ns, "combined").await, 5);

    // A status conflux cannot read: reported once on it, not counted; the rest keeps working.
    put(&client, &ns, secret_provider_class("vault-db", json!({}))).await;
    put(
        &client,
        &ns,
        json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
            "metadata": {"name": "broken"},
            "status": {"podName": "x", "objects": [{"id": "a", "version": "1"}]}}),
    )
    .await;
    let broken = eventually("InvalidProviderStatus", Duration::from_secs(30), || async {
        events(&client, &ns, "broken", "InvalidProviderStatus")
            .await
            .pop()
    })
    .await;
    assert_eq!(broken.0, "Warning");
    apply_cm(&client, &ns, "cfg", json!({"key": "last"}), json!({})).await;
    wait_replica_sets(&client, &ns, "combined", 6).await;
    assert_eq!(
        events(&client, &ns, "broken", "InvalidProviderStatus")
            .await
            .len(),
        1
    );
    let _ = conflux;
}
