//! Writing test objects: server-side apply of JSON manifests of the kinds the tests and
//! benchmarks use, and the CRDs they need (the committed ConfigSync CRD, and Flux's and Flux
//! Operator's real CRDs from the versions `hack/cluster.sh build --flux` built), installed once
//! and waited for until established.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::{eventually, repo_root};

/// The resource (plural) of the kinds the tests and benchmarks write. Panics on another kind.
pub fn plural(kind: &str) -> &'static str {
    match kind {
        "Namespace" => "namespaces",
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        "Deployment" => "deployments",
        "ReplicaSet" => "replicasets",
        "ServiceAccount" => "serviceaccounts",
        "CronJob" => "cronjobs",
        "Job" => "jobs",
        "Rollout" => "rollouts",
        "SecretProviderClass" => "secretproviderclasses",
        "SecretProviderClassPodStatus" => "secretproviderclasspodstatuses",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "CustomResourceDefinition" => "customresourcedefinitions",
        "Kustomization" => "kustomizations",
        "GitRepository" => "gitrepositories",
        "HelmRelease" => "helmreleases",
        "Receiver" => "receivers",
        "ResourceSet" => "resourcesets",
        "ConfigSync" => "configsyncs",
        "ProtectPolicy" => "protectpolicies",
        "ReloadPolicy" => "reloadpolicies",
        "Sample" => "samples",
        other => panic!("no plural for {other}"),
    }
}

/// Server-side applies (forced) `object` as `manager`, retrying for up to 10 s: right after an
/// API server (re)start, writes can fail for a moment. Panics on a kind it has no plural for.
pub async fn apply(client: &Client, manager: &str, object: &Value) {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = plural(kind);
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let name = object["metadata"]["name"].as_str().expect("name");
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let params = PatchParams::apply(manager).force();
    for attempt in 0..50 {
        match api.patch(name, &params, &Patch::Apply(object)).await {
            Ok(_) => return,
            Err(err) if attempt < 49 => {
                eprintln!("apply {kind} {name}: {err}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("apply {kind} {name}: {err}"),
        }
    }
}

/// The committed ConfigSync CRD (`deploy/crds/configsync.yaml`).
pub fn config_sync_crd() -> CustomResourceDefinition {
    committed_crd("configsync")
}

/// The committed ProtectPolicy CRD (`deploy/crds/protectpolicy.yaml`).
pub fn protect_policy_crd() -> CustomResourceDefinition {
    committed_crd("protectpolicy")
}

/// The committed ReloadPolicy CRD (`deploy/crds/reloadpolicy.yaml`).
pub fn reload_policy_crd() -> CustomResourceDefinition {
    committed_crd("reloadpolicy")
}

/// The CRD of `deploy/crds/<file>.yaml` (what `conflux crd <file>` prints).
fn committed_crd(file: &str) -> CustomResourceDefinition {
    let path = repo_root().join(format!("deploy/crds/{file}.yaml"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Flux's real Kustomization CRD (`kustomize.toolkit.fluxcd.io`), from the kustomize-controller
/// module the test ground builds.
pub fn kustomization_crd() -> CustomResourceDefinition {
    flux_crd("kustomize.toolkit.fluxcd.io", "kustomizations")
}

/// A real CRD of Flux or Flux Operator, `<plural>.<group>`, as shipped in the module version that
/// `hack/cluster.sh build --flux` builds (it is built first if it is not cached yet).
///
/// # Panics
/// When the Flux build fails or the CRD is not among those shipped.
pub fn flux_crd(group: &str, plural: &str) -> CustomResourceDefinition {
    let path = flux_manifests().join(format!("crds/{group}_{plural}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is a CRD: {e}", path.display()))
}

/// Every CRD of Flux (source, kustomize, helm, notification) and Flux Operator that the test ground
/// installs with `hack/cluster.sh up --flux`.
pub fn flux_crds() -> Vec<CustomResourceDefinition> {
    let dir = flux_manifests().join("crds");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is a CRD: {e}", path.display()))
        })
        .collect()
}

/// A CRD shipped by an upstream Go module, fetched by `hack/cluster/crds.sh` (versions pinned in
/// `hack/cluster/versions.sh`): `argo-rollouts/rollout-crd.yaml` (Argo Rollouts' Rollout), or
/// `secrets-store/secretproviderclasses.yaml` and
/// `secrets-store/secretproviderclasspodstatuses.yaml` (the secrets-store CSI driver's).
///
/// # Panics
/// When the download fails or the file is not among those fetched.
pub fn upstream_crd(file: &str) -> CustomResourceDefinition {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let script = repo_root().join("hack/cluster/crds.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(out.status.success(), "`{}` failed", script.display());
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is a CRD: {e}", path.display()))
}

/// The cached directory of the Flux build (`bin/`, `crds/`, `rbac/`), built on first use.
fn flux_manifests() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = repo_root().join("hack/cluster.sh");
        let build = std::process::Command::new("bash")
            .arg(&script)
            .args(["build", "--flux"])
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            build.success(),
            "`{} build --flux` failed",
            script.display()
        );
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("flux-bin")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// A namespaced CRD that accepts any fields, with a status subresource.
pub fn minimal_crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural,
                      "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{"name": version, "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                          "subresources": {"status": {}}}],
        },
    }))
    .expect("a CRD")
}

/// Server-side applies `crd` as `manager` and waits (60 s at most) until it is established.
pub async fn install_crd(client: &Client, manager: &str, crd: &CustomResourceDefinition) {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap_or_else(|e| panic!("installing the CRD {name}: {e}"));
    eventually(
        &format!("CRD {name} established"),
        Duration::from_secs(60),
        || {
            let (crds, name) = (crds.clone(), name.clone());
            async move {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        },
    )
    .await;
}
