//! The flux-trigger controller against a real API server: Flux's real CRDs, referrers, labelled
//! and unlabelled ConfigMaps/Secrets, and exactly which objects get a new `requestedAt`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::ConfigWatches;
use conflux_runtime::Runtime;
use conflux_tests::{Cluster, cluster, eventually};
use conflux_watch_index::runtime::flux_trigger::{self, FluxMetrics, FluxTriggerConfig};
use conflux_watch_index::selector::Selector;
use conflux_watch_index::trigger::Mode;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
const WATCH: (&str, &str) = ("reconcile.fluxcd.io/watch", "Enabled");

/// (group, version, kind, plural) of the Flux kinds the controller indexes.
const FLUX_KINDS: [(&str, &str, &str, &str); 3] = [
    (
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
        "kustomizations",
    ),
    (
        "helm.toolkit.fluxcd.io",
        "v2",
        "HelmRelease",
        "helmreleases",
    ),
    (
        "notification.toolkit.fluxcd.io",
        "v1",
        "Receiver",
        "receivers",
    ),
];

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Installs Flux's real CRDs of the three kinds once per test binary.
async fn install_flux_crds(client: &Client) {
    CRDS.get_or_init(|| async {
        for (group, _, _, plural) in FLUX_KINDS {
            let crd = conflux_tests::objects::flux_crd(group, plural);
            conflux_tests::objects::install_crd(client, "conflux-test", &crd).await;
        }
    })
    .await;
}

fn api_for(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version, kind, plural) = FLUX_KINDS
        .into_iter()
        .find(|k| k.2 == kind)
        .expect("a Flux kind");
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn create_flux_object(client: &Client, ns: &str, kind: &str, name: &str, spec: Value) {
    let (group, version, ..) = FLUX_KINDS.into_iter().find(|k| k.2 == kind).expect("kind");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("object");
    api_for(client, ns, kind)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
}

async fn requested_at(client: &Client, ns: &str, kind: &str, name: &str) -> Option<String> {
    let obj = api_for(client, ns, kind)
        .get(name)
        .await
        .expect("get referrer");
    obj.metadata
        .annotations
        .and_then(|a| a.get(REQUESTED_AT).cloned())
}

/// The requestedAt value of every referrer, by "Kind/name".
async fn snapshot(
    client: &Client,
    ns: &str,
    objects: &[(&str, &str)],
) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for (kind, name) in objects {
        out.insert(
            format!("{kind}/{name}"),
            requested_at(client, ns, kind, name).await,
        );
    }
    out
}

async fn apply_config_map(client: &Client, ns: &str, name: &str, labelled: bool, data: Value) {
    let labels = if labelled {
        json!({WATCH.0: WATCH.1})
    } else {
        json!({})
    };
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    });
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("conflux-test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap_or_else(|e| panic!("apply ConfigMap {name}: {e}"));
}

async fn apply_secret(client: &Client, ns: &str, name: &str, labelled: bool, token: &str) {
    let labels = if labelled {
        json!({WATCH.0: WATCH.1})
    } else {
        json!({})
    };
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": {"token": token, "leak": conflux_tests::leak::pem()},
    });
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("conflux-test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("apply Secret {name}: {e}"));
}

/// Starts the controller in-process, scoped to `ns`, and waits until it is ready.
async fn start_controller(cluster: &Cluster, ns: &str, mode: Mode) -> tokio::task::JoinHandle<()> {
    let client = cluster.client().await;
    let config = FluxTriggerConfig {
        config_selector: Selector::parse("reconcile.fluxcd.io/watch=Enabled").expect("selector"),
        object_selector: Selector::everything(),
        mode,
        namespace: Some(ns.to_owned()),
        concurrent: 4,
    };
    conflux_tests::leak::capture_logs();
    let runtime = Runtime::new(client);
    let configs = ConfigWatches::start(&runtime, Some(ns));
    let health = runtime.health().clone();
    let task = tokio::spawn(flux_trigger::run(
        runtime,
        configs,
        config,
        Arc::new(FluxMetrics::default()),
    ));
    eventually("flux-trigger ready", Duration::from_secs(60), || {
        let ready = health.is_ready();
        async move { ready.then_some(()) }
    })
    .await;
    task
}

/// The `requestedAt` of every referrer in [`REFERRERS`], as last seen by the test.
struct RequestedAt<'a> {
    client: &'a Client,
    ns: &'a str,
    last: BTreeMap<String, Option<String>>,
}

impl<'a> RequestedAt<'a> {
    /// Takes the first snapshot, which must be empty: starting the controller reconciles nothing.
    async fn after_start(client: &'a Client, ns: &'a str) -> Self {
        let last = snapshot(client, ns, &REFERRERS).await;
        assert!(
            last.values().all(Option::is_none),
            "start-up reconciles nothing: {last:?}"
        );
        Self { client, ns, last }
    }

    /// Waits until exactly the `expected` referrers have a new requestedAt.
    async fn expect_changed(&mut self, expected: &[&str], what: &str) {
        let before = &self.last;
        // Only a wait: the first trigger of a cold test run (fresh machine, first cluster of the
        // binary) once took over 30 s.
        let after = eventually(what, Duration::from_secs(90), || async {
            let now = snapshot(self.client, self.ns, &REFERRERS).await;
            let all_expected = expected.iter().all(|k| now.get(*k) != before.get(*k));
            all_expected.then_some(now)
        })
        .await;
        let changed: Vec<&str> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(v))
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            changed, expected,
            "{what}: exactly these referrers were asked to reconcile"
        );
        self.last = after;
    }
}

const REFERRERS: [(&str, &str); 5] = [
    ("HelmRelease", "app"),
    ("Kustomization", "apps"),
    ("Kustomization", "infra"),
    ("Kustomization", "unrelated"),
    ("Receiver", "github"),
];

async fn create_referrers(client: &Client, ns: &str) {
    create_flux_object(
        client,
        ns,
        "Kustomization",
        "infra",
        json!({
            "interval": "10m", "path": "./infra", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            "postBuild": {"substituteFrom": [
                {"kind": "ConfigMap", "name": "cluster-vars"},
                {"kind": "Secret", "name": "cluster-secrets", "optional": true}
            ]}
        }),
    )
    .await;
    create_flux_object(
        client,
        ns,
        "Kustomization",
        "apps",
        json!({
            "interval": "10m", "path": "./apps", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            "dependsOn": [{"name": "infra"}],
            "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "cluster-vars"}]}
        }),
    )
    .await;
    create_flux_object(
        client,
        ns,
        "Kustomization",
        "unrelated",
        json!({
            "interval": "10m", "path": "./other", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "other-vars"}]}
        }),
    )
    .await;
    create_flux_object(client, ns, "HelmRelease", "app", json!({
        "interval": "10m",
        "chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}},
        "valuesFrom": [{"kind": "ConfigMap", "name": "app-values"}, {"kind": "Secret", "name": "app-secret-values"}]
    })).await;
    create_flux_object(
        client,
        ns,
        "Receiver",
        "github",
        json!({
            "type": "github", "events": ["push"],
            "secretRef": {"name": "webhook-token"},
            "resources": [{"kind": "GitRepository", "name": "flux-system"}]
        }),
    )
    .await;
}

#[tokio::test]
async fn upstream_mode_fires_exactly_like_flux() {
    let cluster = cluster();
    let client = cluster.client().await;
    install_flux_crds(&client).await;
    let ns = cluster.namespace(&client, "trigger-upstream").await;
    create_referrers(&client, &ns).await;
    apply_config_map(&client, &ns, "cluster-vars", true, json!({"region": "eu"})).await;
    apply_config_map(&client, &ns, "app-values", false, json!({"replicas": "1"})).await;
    apply_secret(&client, &ns, "webhook-token", true, "t1").await;
    apply_config_map(&client, &ns, "other-vars", true, json!({"x": "1"})).await;

    let controller = start_controller(cluster, &ns, Mode::Upstream).await;
    let mut requested = RequestedAt::after_start(&client, &ns).await;

    // A labelled ConfigMap changes: both Kustomizations that read it, nothing else.
    apply_config_map(&client, &ns, "cluster-vars", true, json!({"region": "us"})).await;
    requested
        .expect_changed(
            &["Kustomization/apps", "Kustomization/infra"],
            "cluster-vars data change",
        )
        .await;

    // An unlabelled ConfigMap changes: nothing (the selector decides). Then a labelled one whose
    // event comes after it on the same watch proves the first was processed.
    apply_config_map(&client, &ns, "app-values", false, json!({"replicas": "2"})).await;
    apply_config_map(&client, &ns, "other-vars", true, json!({"x": "2"})).await;
    requested
        .expect_changed(
            &["Kustomization/unrelated"],
            "unlabelled app-values, then other-vars",
        )
        .await;

    // A labelled Secret: the Receiver.
    apply_secret(&client, &ns, "webhook-token", true, "t2").await;
    requested
        .expect_changed(&["Receiver/github"], "webhook-token change")
        .await;

    // Upstream rule: a label-only edit changes the resourceVersion, so it fires too.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.patch(
        "cluster-vars",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("label edit");
    requested
        .expect_changed(
            &["Kustomization/apps", "Kustomization/infra"],
            "label-only edit (upstream fires)",
        )
        .await;

    // Labelling a ConfigMap that was not watched makes its next changes count.
    apply_config_map(&client, &ns, "app-values", true, json!({"replicas": "3"})).await;
    requested
        .expect_changed(&["HelmRelease/app"], "app-values now labelled")
        .await;

    // Creation of an (optional) source that a referrer waits for fires.
    apply_secret(&client, &ns, "cluster-secrets", true, "s").await;
    requested
        .expect_changed(&["Kustomization/infra"], "cluster-secrets created")
        .await;

    // Deleting a labelled source fires.
    cms.delete("cluster-vars", &DeleteParams::default())
        .await
        .expect("delete");
    requested
        .expect_changed(
            &["Kustomization/apps", "Kustomization/infra"],
            "cluster-vars deleted",
        )
        .await;

    controller.abort();
    conflux_tests::leak::assert_log_clean();
}

#[tokio::test]
async fn data_hash_mode_ignores_metadata_only_writes() {
    let cluster = cluster();
    let client = cluster.client().await;
    install_flux_crds(&client).await;
    let ns = cluster.namespace(&client, "trigger-datahash").await;
    create_referrers(&client, &ns).await;
    apply_config_map(&client, &ns, "cluster-vars", true, json!({"region": "eu"})).await;
    apply_config_map(&client, &ns, "other-vars", true, json!({"x": "1"})).await;
    apply_secret(&client, &ns, "webhook-token", true, "t1").await;

    let controller = start_controller(cluster, &ns, Mode::DataHash).await;
    let mut requested = RequestedAt::after_start(&client, &ns).await;

    // Label-only and annotation-only edits: nothing. The data change to other-vars afterwards
    // proves the earlier events were processed.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.patch(
        "cluster-vars",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}})),
    )
    .await
    .expect("label edit");
    apply_config_map(&client, &ns, "other-vars", true, json!({"x": "2"})).await;
    requested
        .expect_changed(
            &["Kustomization/unrelated"],
            "metadata-only edit ignored, data change fires",
        )
        .await;

    // A data change fires both Kustomizations.
    apply_config_map(&client, &ns, "cluster-vars", true, json!({"region": "us"})).await;
    requested
        .expect_changed(
            &["Kustomization/apps", "Kustomization/infra"],
            "cluster-vars data change",
        )
        .await;

    // Re-applying identical data (no change at all) fires nothing; a Secret data change fires.
    apply_config_map(&client, &ns, "cluster-vars", true, json!({"region": "us"})).await;
    apply_secret(&client, &ns, "webhook-token", true, "t2").await;
    requested
        .expect_changed(&["Receiver/github"], "webhook-token data change")
        .await;

    // A source the HelmRelease waits for appears: fires. An unreferenced labelled one: nothing.
    apply_config_map(&client, &ns, "nobody-reads-this", true, json!({"a": "b"})).await;
    apply_config_map(&client, &ns, "app-values", true, json!({"replicas": "1"})).await;
    requested
        .expect_changed(&["HelmRelease/app"], "awaited app-values created")
        .await;

    controller.abort();
    conflux_tests::leak::assert_log_clean();
}

/// Streaming lists are consistent reads on the real API server: the runtime asks for the
/// initial state with no resourceVersion (kube-runtime asks from `resourceVersion=0`, which the
/// API server answers from its watch cache without first catching up with etcd, so a first list
/// could miss what was written just before it: the flux-trigger's baseline then raced a change
/// made right after start), and the API server accepts that and ends the list.
#[tokio::test]
async fn streaming_lists_are_consistent_reads() {
    let cluster = cluster();
    let admin = cluster.client().await;
    let ns = cluster.namespace(&admin, "trigger-streaming").await;
    apply_config_map(&admin, &ns, "written-before", true, json!({"a": "b"})).await;
    let runtime = Runtime::new(cluster.client_as("audited").await)
        .with_initial_list(conflux_runtime::InitialList::StreamingList);
    let configs = ConfigWatches::start(&runtime, Some(&ns));
    tokio::time::timeout(Duration::from_secs(60), configs.wait_synced())
        .await
        .expect("both kinds listed");
    assert!(
        configs
            .names(&ns)
            .iter()
            .any(|(_, name)| name == "written-before"),
        "the first list holds what was written before it"
    );
    let path = format!("/api/v1/namespaces/{ns}/configmaps?");
    let watches: Vec<String> = std::fs::read_to_string(cluster.audit_log())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == "audited" && e["verb"] == "watch")
        .filter_map(|e| e["requestURI"].as_str().map(str::to_owned))
        .filter(|uri| uri.starts_with(&path) && uri.contains("sendInitialEvents=true"))
        .collect();
    assert!(!watches.is_empty(), "a streaming list was made");
    assert!(
        watches.iter().all(|uri| !uri.contains("resourceVersion=0")),
        "every streaming list is a consistent read: {watches:?}"
    );
    runtime.end(Duration::from_secs(5)).await;
}
