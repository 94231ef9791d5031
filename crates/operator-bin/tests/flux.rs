//! conflux beside the real Flux: source-, kustomize-, helm- and notification-controller and Flux
//! Operator, built from their Go modules and running with their real CRDs and default RBAC
//! (`hack/cluster.sh up --flux`), pulling from a real Git server on loopback.
//!
//! 1. The seed scenario (Flux's D2 reference architecture), with Flux's own config watchers off
//!    (conflux's flux-trigger alone) and on (both together).
//! 2. A HelmRelease's `valuesFrom` ConfigMap changes: the release is upgraded.
//! 3. A Receiver's token Secret changes: the Receiver reconciles and its webhook path changes.
//! 4. Flux Operator's ResourceSet copies beside conflux's copies: each side leaves the other's
//!    objects alone.
//!
//! Latencies are printed (`flux-latency:` lines) for docs/benchmarks.md; nothing asserts time.

mod flux_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flux_support::*;
use serde_json::{Value, json};

const KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io/v1";
const HELM: &str = "helm.toolkit.fluxcd.io/v2";
const NOTIFICATION: &str = "notification.toolkit.fluxcd.io/v1";
const RESOURCE_SET: &str = "fluxcd.controlplane.io/v1";
const COPY_FROM: &str = "fluxcd.controlplane.io/copyFrom";
const ALLOWED: &str = "copy.conflux.dev/allowed-namespaces";

/// The tenant application of the seed scenario: a Deployment that carries `${CLUSTER_NAME}`,
/// opts in to reloads and reads both copies of the platform's ConfigMap.
const TENANT_APP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  annotations:
    reloader.stakater.com/auto: "true"
    example.com/cluster: ${CLUSTER_NAME}
    example.com/region: "${CLUSTER_REGION:=eu-west-1}"
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: registry.invalid/app:1.0.0
        envFrom:
        - configMapRef: {name: flux-runtime-info}
        volumeMounts:
        - {name: info, mountPath: /etc/info}
      volumes:
      - name: info
        configMap: {name: runtime-info-sync}
"#;

/// The seed scenario. `flux_watchers`: whether the tenant Kustomization is reconciled by the
/// kustomize-controller shard with Flux's own config watchers (else by the shard without them,
/// so only conflux's flux-trigger asks for the reconcile).
async fn seed_scenario(flux_watchers: bool) {
    let (cluster, client) = setup().await;
    let mode = if flux_watchers {
        "watchers-on"
    } else {
        "watchers-off"
    };
    let platform = cluster
        .namespace(&client, &format!("platform-{mode}"))
        .await;
    let tenant = tenant_namespace(cluster, &client, &format!("tenant-{mode}")).await;

    // The platform's runtime info, watched, consenting to copies into the tenant.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "flux-runtime-info", "namespace": platform,
                            "labels": {WATCH.0: WATCH.1},
                            "annotations": {ALLOWED: tenant}},
               "data": {"CLUSTER_NAME": "staging-1", "CLUSTER_DOMAIN": "staging.example.com"}}),
    )
    .await;
    // Copy 1: a pull copy, labelled for Flux's and conflux's watchers.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "flux-runtime-info", "namespace": tenant,
                            "labels": {WATCH.0: WATCH.1},
                            "annotations": {COPY_FROM: format!("{platform}/flux-runtime-info")}}}),
    )
    .await;
    // Copy 2: a ConfigSync copy.
    apply(
        &client,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
               "metadata": {"name": format!("runtime-info-{tenant}")},
               "spec": {"source": {"kind": "ConfigMap", "namespace": platform, "name": "flux-runtime-info"},
                        "target": {"name": "runtime-info-sync", "namespaces": [tenant],
                                   "labels": {WATCH.0: WATCH.1}}}}),
    )
    .await;
    for name in ["flux-runtime-info", "runtime-info-sync"] {
        wait_data(&client, &tenant, name, "CLUSTER_NAME", "staging-1").await;
    }

    // The tenant's repository and Kustomization.
    let repo = format!("tenant-{tenant}");
    cluster.git_push(&repo, &[("app/deployment.yaml", TENANT_APP)]);
    git_repository(cluster, &client, &tenant, "tenant", &repo).await;
    let mut labels = serde_json::Map::new();
    if !flux_watchers {
        labels.insert(SHARD.into(), json!("nowatch"));
    }
    apply(
        &client,
        json!({"apiVersion": KUSTOMIZE, "kind": "Kustomization",
               "metadata": {"name": "tenant", "namespace": tenant, "labels": labels},
               "spec": {"interval": "10m", "path": "./app", "prune": true, "targetNamespace": tenant,
                        "sourceRef": {"kind": "GitRepository", "name": "tenant"},
                        "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "flux-runtime-info"}]}}}),
    )
    .await;
    ready(&client, KUSTOMIZE, "Kustomization", &tenant, "tenant").await;
    let deployment = wait_deployment_annotation(&client, &tenant, "staging-1").await;
    assert_eq!(
        str_at(
            &deployment,
            &["metadata", "annotations", "example.com/region"]
        ),
        Some("eu-west-1"),
        "the default of ${{CLUSTER_REGION:=eu-west-1}} is applied"
    );
    wait_replica_sets(&client, &tenant, 1).await;
    // Let conflux remember the workload's baseline (no rollout when it first sees a workload).
    conflux_tests::eventually("conflux's baseline of the workload", WAIT, || {
        conflux_tests::remembered_baseline(&client, RUNTIME_NAMESPACE, "Deployment", &tenant, "app")
    })
    .await;

    // Watch every version of the Deployment from here on, to count the applied changes.
    let seen = watch_annotation_values(&client, &tenant).await;

    // The platform changes its runtime info.
    let changed = Instant::now();
    merge(
        &client,
        "v1",
        "ConfigMap",
        Some(&platform),
        "flux-runtime-info",
        json!({"data": {"CLUSTER_NAME": "staging-2"}}),
    )
    .await;
    for name in ["flux-runtime-info", "runtime-info-sync"] {
        wait_data(&client, &tenant, name, "CLUSTER_NAME", "staging-2").await;
    }
    let copied = changed.elapsed();
    wait_deployment_annotation(&client, &tenant, "staging-2").await;
    let applied = changed.elapsed();
    wait_replica_sets(&client, &tenant, 2).await;
    let rolled = changed.elapsed();
    println!(
        "flux-latency: seed scenario, Flux watchers {}: copy {} ms, applied {} ms, new ReplicaSet {} ms",
        if flux_watchers { "on" } else { "off" },
        copied.as_millis(),
        applied.as_millis(),
        rolled.as_millis()
    );

    // A quiet period, then one more reconcile asked by hand: Flux re-applies the Deployment and
    // does not take conflux's rollout annotation away, so nothing rolls again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let asked = chrono_like_now();
    merge(
        &client,
        KUSTOMIZE,
        "Kustomization",
        Some(&tenant),
        "tenant",
        json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": asked}}}),
    )
    .await;
    conflux_tests::eventually("the requested reconcile is handled", WAIT, || async {
        let k = get(&client, KUSTOMIZE, "Kustomization", Some(&tenant), "tenant").await?;
        (str_at(&k, &["status", "lastHandledReconcileAt"]) == Some(asked.as_str())).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let sets = replica_sets(&client, &tenant, "app").await;
    assert_eq!(
        sets.len(),
        2,
        "exactly one rollout (watchers {mode}): {:?}\nconflux log:\n{}",
        sets.keys(),
        conflux_log()
    );
    // Flux's re-apply left conflux's rollout annotation where it was (no drift fight): its
    // manager still owns the field, and the template is the one of the second ReplicaSet.
    let deployment = get(&client, "apps/v1", "Deployment", Some(&tenant), "app")
        .await
        .expect("the Deployment");
    assert!(
        str_at(
            &deployment,
            &[
                "spec",
                "template",
                "metadata",
                "annotations",
                "conflux.dev/config-hash"
            ]
        )
        .is_some(),
        "conflux's rollout annotation survived Flux's re-apply"
    );
    conflux_tests::leak::assert_log_fields_clean("the conflux log", &conflux_log());
    let values = seen.stop().await;
    assert_eq!(
        values,
        vec!["staging-1".to_owned(), "staging-2".to_owned()],
        "the applied value changed once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_with_flux_watchers_off_conflux_alone() {
    seed_scenario(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_with_flux_watchers_on_both_together() {
    seed_scenario(true).await;
}

/// A chart that renders one ConfigMap from its values.
const CHART: &str = "apiVersion: v2\nname: greeter\nversion: 0.1.0\n";
const CHART_TEMPLATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-greeting
data:
  greeting: {{ .Values.greeting | quote }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_release_values_from_a_config_map_upgrades_the_release() {
    let (cluster, client) = setup().await;
    let ns = tenant_namespace(cluster, &client, "helm").await;
    let repo = format!("charts-{ns}");
    cluster.git_push(
        &repo,
        &[
            ("charts/greeter/Chart.yaml", CHART),
            ("charts/greeter/values.yaml", "greeting: default\n"),
            ("charts/greeter/templates/configmap.yaml", CHART_TEMPLATE),
        ],
    );
    git_repository(cluster, &client, &ns, "charts", &repo).await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "greeter-values", "namespace": ns, "labels": {WATCH.0: WATCH.1}},
               "data": {"values.yaml": "greeting: hello\n"}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": HELM, "kind": "HelmRelease",
               "metadata": {"name": "greeter", "namespace": ns},
               "spec": {"interval": "10m", "timeout": "2m",
                        "chart": {"spec": {"chart": "./charts/greeter", "interval": "10m",
                                           "sourceRef": {"kind": "GitRepository", "name": "charts"}}},
                        "valuesFrom": [{"kind": "ConfigMap", "name": "greeter-values"}]}}),
    )
    .await;
    ready(&client, HELM, "HelmRelease", &ns, "greeter").await;
    wait_data(&client, &ns, "greeter-greeting", "greeting", "hello").await;

    let changed = Instant::now();
    merge(
        &client,
        "v1",
        "ConfigMap",
        Some(&ns),
        "greeter-values",
        json!({"data": {"values.yaml": "greeting: bonjour\n"}}),
    )
    .await;
    wait_data(&client, &ns, "greeter-greeting", "greeting", "bonjour").await;
    println!(
        "flux-latency: HelmRelease valuesFrom change to upgraded release: {} ms",
        changed.elapsed().as_millis()
    );
    // helm-controller records the upgrade in its status after the release is written: wait for
    // the history to show it (it stayed Ready all along, so Ready alone says nothing), then
    // check it was one upgrade, not two.
    let deadline = Instant::now() + Duration::from_secs(60);
    let versions = loop {
        let release = ready(&client, HELM, "HelmRelease", &ns, "greeter").await;
        let versions: Vec<i64> = release["status"]["history"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["version"].as_i64())
            .collect();
        if versions.first().is_some_and(|v| *v >= 2) || Instant::now() >= deadline {
            break versions;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(versions.first(), Some(&2), "release history: {versions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_token_change_reconciles_the_receiver() {
    let (cluster, client) = setup().await;
    let ns = tenant_namespace(cluster, &client, "receiver").await;
    let repo = format!("hook-{ns}");
    cluster.git_push(&repo, &[("README.md", "receiver test\n")]);
    git_repository(cluster, &client, &ns, "hooked", &repo).await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "webhook-token", "namespace": ns, "labels": {WATCH.0: WATCH.1}},
               "stringData": {"token": "first-token"}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": NOTIFICATION, "kind": "Receiver",
               "metadata": {"name": "hook", "namespace": ns},
               "spec": {"type": "generic", "secretRef": {"name": "webhook-token"},
                        "resources": [{"apiVersion": "source.toolkit.fluxcd.io/v1",
                                       "kind": "GitRepository", "name": "hooked"}]}}),
    )
    .await;
    let receiver = ready(&client, NOTIFICATION, "Receiver", &ns, "hook").await;
    let first = str_at(&receiver, &["status", "webhookPath"])
        .expect("a webhook path")
        .to_owned();

    let changed = Instant::now();
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "webhook-token", "namespace": ns, "labels": {WATCH.0: WATCH.1}},
               "stringData": {"token": "second-token"}}),
    )
    .await;
    let second = conflux_tests::eventually("a new webhook path", WAIT, || async {
        let r = get(&client, NOTIFICATION, "Receiver", Some(&ns), "hook").await?;
        let path = str_at(&r, &["status", "webhookPath"])?;
        (path != first).then(|| path.to_owned())
    })
    .await;
    println!(
        "flux-latency: Receiver token change to new webhook path: {} ms",
        changed.elapsed().as_millis()
    );
    assert!(second.starts_with("/hook/"), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_operator_resource_set_copies_beside_conflux_copies() {
    let (cluster, client) = setup().await;
    let platform = cluster.namespace(&client, "op-platform").await;
    let tenant = tenant_namespace(cluster, &client, "op-tenant").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "runtime-info", "namespace": platform,
                            "annotations": {ALLOWED: tenant}},
               "data": {"CLUSTER_NAME": "prod-1"}}),
    )
    .await;
    // Flux Operator's copy: a ResourceSet whose resource carries copyFrom.
    apply(
        &client,
        json!({"apiVersion": RESOURCE_SET, "kind": "ResourceSet",
               "metadata": {"name": "tenant-info", "namespace": tenant},
               "spec": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "info-by-operator", "namespace": tenant,
                                                    "annotations": {COPY_FROM: format!("{platform}/runtime-info")}}}]}}),
    )
    .await;
    // conflux's copies: a pull copy and a ConfigSync copy.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "info-by-conflux", "namespace": tenant,
                            "annotations": {COPY_FROM: format!("{platform}/runtime-info")}}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
               "metadata": {"name": format!("op-{tenant}")},
               "spec": {"source": {"kind": "ConfigMap", "namespace": platform, "name": "runtime-info"},
                        "target": {"name": "info-by-sync", "namespaces": [tenant]}}}),
    )
    .await;
    ready(&client, RESOURCE_SET, "ResourceSet", &tenant, "tenant-info").await;
    let names = ["info-by-operator", "info-by-conflux", "info-by-sync"];
    for name in names {
        wait_data(&client, &tenant, name, "CLUSTER_NAME", "prod-1").await;
    }
    assert_conflux_never_wrote(&client, &tenant, "info-by-operator").await;

    // A quiet minute: nobody rewrites anybody's copy.
    let before = resource_versions(&client, &tenant, &names).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = resource_versions(&client, &tenant, &names).await;
    assert_eq!(before, after, "no copy was rewritten over a quiet minute");
    assert_conflux_never_wrote(&client, &tenant, "info-by-operator").await;
}

/// conflux never wrote the ResourceSet-managed ConfigMap `ns/name`: none of its field managers.
async fn assert_conflux_never_wrote(client: &kube::Client, ns: &str, name: &str) {
    let copy = get(client, "v1", "ConfigMap", Some(ns), name)
        .await
        .expect("the operator's copy");
    let managers = field_managers(&copy);
    assert!(
        managers.iter().all(|m| !m.starts_with("conflux")),
        "conflux never writes a ResourceSet-managed target: {managers:?}"
    );
}

/// The field managers of an object.
fn field_managers(object: &Value) -> BTreeSet<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str().map(str::to_owned))
        .collect()
}

async fn resource_versions(client: &kube::Client, ns: &str, names: &[&str]) -> Vec<String> {
    let mut versions = Vec::new();
    for name in names {
        let object = get(client, "v1", "ConfigMap", Some(ns), name)
            .await
            .unwrap_or(Value::Null);
        versions.push(
            str_at(&object, &["metadata", "resourceVersion"])
                .unwrap_or_default()
                .to_owned(),
        );
    }
    versions
}

async fn wait_data(client: &kube::Client, ns: &str, name: &str, key: &str, value: &str) {
    conflux_tests::eventually(
        &format!("ConfigMap {ns}/{name} with {key}={value}"),
        WAIT,
        || async {
            let cm = get(client, "v1", "ConfigMap", Some(ns), name).await?;
            (str_at(&cm, &["data", key]) == Some(value)).then_some(())
        },
    )
    .await;
}

async fn wait_deployment_annotation(client: &kube::Client, ns: &str, value: &str) -> Value {
    conflux_tests::eventually(
        &format!("the applied Deployment carries example.com/cluster={value}"),
        WAIT,
        || async {
            let d = get(client, "apps/v1", "Deployment", Some(ns), "app").await?;
            (str_at(&d, &["metadata", "annotations", "example.com/cluster"]) == Some(value))
                .then_some(d)
        },
    )
    .await
}

async fn wait_replica_sets(client: &kube::Client, ns: &str, count: usize) {
    conflux_tests::eventually(&format!("{count} ReplicaSet(s)"), WAIT, || async {
        (replica_sets(client, ns, "app").await.len() >= count).then_some(())
    })
    .await;
}

/// An RFC 3339 timestamp of now, as `flux reconcile` writes in `requestedAt`.
fn chrono_like_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("conflux-test-{now}")
}

/// The distinct values of the Deployment's `example.com/cluster` annotation, in the order a watch
/// saw them, until `stop`.
struct AnnotationWatch {
    task: tokio::task::JoinHandle<Vec<String>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl AnnotationWatch {
    async fn stop(self) -> Vec<String> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn watch_annotation_values(client: &kube::Client, ns: &str) -> AnnotationWatch {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let deployments = api(client, "apps/v1", "Deployment", Some(ns));
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut values: Vec<String> = Vec::new();
        let stream = watcher::watcher(
            deployments,
            watcher::Config::default().fields("metadata.name=app"),
        );
        futures::pin_mut!(stream);
        loop {
            tokio::select! {
                _ = &mut stopped => return values,
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d))) => {
                        let value = d.metadata.annotations.as_ref()
                            .and_then(|a| a.get("example.com/cluster")).cloned().unwrap_or_default();
                        if values.last() != Some(&value) {
                            values.push(value);
                        }
                    }
                    Some(_) => {}
                    None => return values,
                }
            }
        }
    });
    AnnotationWatch { task, stop }
}

/// Scenario 5: every case of the generated corpus, applied by the real kustomize-controller and
/// built by `conflux build` from the same inputs; the applied objects' `spec` and the built ones
/// must be equal (after normalising numbers), or both sides must fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflux_build_matches_what_kustomize_controller_applies() {
    use flux_support::corpus;
    let (cluster, client) = setup().await;
    let crd =
        conflux_tests::objects::minimal_crd(corpus::GROUP, corpus::VERSION, "Sample", "samples");
    conflux_tests::objects::install_crd(&client, MANAGER, &crd).await;
    let ns = cluster.namespace(&client, "corpus").await;
    let cases = corpus::cases(&ns);
    let files: Vec<(String, String)> = cases
        .iter()
        .map(|c| (format!("cases/{}/sample.yaml", c.name), c.manifest.clone()))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let repo = format!("corpus-{ns}");
    cluster.git_push(&repo, &refs);
    git_repository(cluster, &client, &ns, "corpus", &repo).await;
    let vars = corpus::variables_config_map(&ns);
    apply(&client, vars.clone()).await;
    for case in &cases {
        apply(&client, corpus::kustomization(&ns, &case.name)).await;
    }

    // What kustomize-controller did with each case: the applied spec, or its failure.
    let mut flux: Vec<Result<Value, String>> = Vec::new();
    for case in &cases {
        let outcome = conflux_tests::eventually(
            &format!("Kustomization {} reconciled", case.name),
            WAIT,
            || async {
                let k = get(&client, KUSTOMIZE, "Kustomization", Some(&ns), &case.name).await?;
                let ready = k["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready")?
                    .clone();
                match ready["status"].as_str()? {
                    "True" => Some(Ok(())),
                    "False" if ready["reason"] != "Progressing" => Some(Err(ready["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned())),
                    _ => None,
                }
            },
        )
        .await;
        flux.push(match outcome {
            Ok(()) => {
                let api_version = format!("{}/{}", corpus::GROUP, corpus::VERSION);
                get(&client, &api_version, "Sample", Some(&ns), &case.name)
                    .await
                    .map(|s| s["spec"].clone())
                    .ok_or_else(|| "applied, but no Sample".to_owned())
            }
            Err(message) => Err(message),
        });
    }

    // What `conflux build` makes of the same inputs.
    let dir = conflux_tests::repo_root().join(format!("target/flux-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("corpus dir");
    let vars_file = dir.join("vars.yaml");
    std::fs::write(&vars_file, serde_json::to_string(&vars).expect("json")).expect("vars file");
    let mut report = Vec::new();
    for (case, flux) in cases.iter().zip(&flux) {
        let input = dir.join(format!("{}.yaml", case.name));
        std::fs::write(&input, &case.manifest).expect("input");
        let kfile = dir.join(format!("{}.kustomization.yaml", case.name));
        let k = corpus::kustomization(&ns, &case.name);
        std::fs::write(&kfile, serde_json::to_string(&k).expect("json")).expect("k file");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_conflux"))
            .arg("build")
            .arg(&input)
            .arg("--kustomization")
            .arg(&kfile)
            .arg("--substitute-from")
            .arg(&vars_file)
            .output()
            .expect("conflux build");
        let ours: Result<Value, String> = if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            serde_saphyr::from_multiple::<Value>(&text)
                .map_err(|e| format!("unreadable output: {e}"))
                .and_then(|docs| {
                    docs.into_iter()
                        .find(|d| d["kind"] == "Sample")
                        .map(|d| d["spec"].clone())
                        .ok_or_else(|| "no Sample in the output".to_owned())
                })
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        };
        corpus::judge("corpus", &case.name, flux, &ours, &mut report);
    }
    let refused: Vec<&str> = cases
        .iter()
        .zip(&flux)
        .filter(|(_, f)| f.is_err())
        .map(|(c, _)| c.name.as_str())
        .collect();
    println!(
        "corpus: {} cases, {} refused by kustomize-controller ({refused:?}), {} differences",
        cases.len(),
        refused.len(),
        report.len()
    );
    assert!(report.is_empty(), "differences:\n{}", report.join("\n"));
}
