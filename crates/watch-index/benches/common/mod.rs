//! The benchmark data set: 100k referrers × 4 references across 10k namespaces.
//!
//! Every namespace holds 5 Kustomizations and 5 HelmReleases. Each references two objects shared
//! in its namespace and two of its own, like a real cluster (a `cluster-vars` ConfigMap and a SOPS
//! key every Kustomization uses, plus per-app values and credentials). That gives 400k edges over
//! 230k distinct keys.

#![allow(dead_code)] // Each bench binary uses a different part.

use serde_json::{Value, json};

/// Namespaces in the data set.
pub const NAMESPACES: usize = 10_000;
/// Referrers per namespace.
pub const PER_NAMESPACE: usize = 10;
/// Total referrers.
pub const REFERRERS: usize = NAMESPACES * PER_NAMESPACE;

/// Namespace name of namespace `n`.
pub fn namespace(n: usize) -> String {
    format!("tenant-{n:05}")
}

/// Referrer `i` (0..PER_NAMESPACE) of namespace `n`; `version` renames its own two references, which
/// is how an update that moves references is simulated.
pub fn object(n: usize, i: usize, version: u32) -> Value {
    let ns = namespace(n);
    let name = format!("app-{i}");
    if i.is_multiple_of(2) {
        json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "12345"},
            "spec": {
                "interval": "10m",
                "path": format!("./apps/{name}"),
                "prune": true,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
                "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}},
                "postBuild": {"substituteFrom": [
                    {"kind": "ConfigMap", "name": "cluster-vars"},
                    {"kind": "ConfigMap", "name": format!("{name}-vars-v{version}")},
                    {"kind": "Secret", "name": format!("{name}-creds-v{version}"), "optional": true},
                ]},
            },
        })
    } else {
        json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "12345"},
            "spec": {
                "interval": "10m",
                "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
                "kubeConfig": {"secretRef": {"name": "remote-kubeconfig"}},
                "valuesFrom": [
                    {"kind": "ConfigMap", "name": "cluster-vars"},
                    {"kind": "ConfigMap", "name": format!("{name}-values-v{version}"), "valuesKey": "values.yaml"},
                    {"kind": "Secret", "name": format!("{name}-creds-v{version}")},
                ],
            },
        })
    }
}

/// All referrers, in namespace order.
pub fn objects() -> Vec<Value> {
    (0..NAMESPACES)
        .flat_map(|n| (0..PER_NAMESPACE).map(move |i| object(n, i, 0)))
        .collect()
}
