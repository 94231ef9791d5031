//! The `ConfigSync` custom resource (`conflux.dev/v1alpha1`, cluster-scoped): copy one ConfigMap or
//! Secret into many namespaces (docs/design.md 4.2).
//!
//! The spec and status structs are plain serde types, always available. With the `kube` feature the
//! spec also derives kube's `CustomResource`, which generates the `ConfigSync` type, its schema
//! (schemars) and `ConfigSync::crd()` (through `kube_core::CustomResourceExt`).
//!
//! ```
//! use conflux_copy_core::config_sync::{ConfigSyncSpec, ConflictPolicy, DeletionPolicy};
//!
//! let spec: ConfigSyncSpec = serde_json::from_value(serde_json::json!({
//!     "source": {"kind": "Secret", "namespace": "flux-system", "name": "ghcr-auth"},
//!     "target": {"namespaces": ["team-*"], "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
//! })).unwrap();
//! assert!(spec.prune);
//! assert_eq!(spec.deletion_policy, DeletionPolicy::Orphan);
//! assert_eq!(spec.conflict_policy, ConflictPolicy::Skip);
//! assert_eq!(spec.target_name(), "ghcr-auth");
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use serde::{Deserialize, Serialize};

use crate::source::SourceRef;

/// API group of `ConfigSync`.
pub const GROUP: &str = "conflux.dev";
/// API version of `ConfigSync`.
pub const VERSION: &str = "v1alpha1";
/// Kind of `ConfigSync`.
pub const KIND: &str = "ConfigSync";
/// Finalizer on ConfigSyncs (never on copies) so the deletion policy runs before the object goes.
pub const FINALIZER: &str = "copy.conflux.dev/finalizer";

/// Copy one ConfigMap or Secret into every selected namespace, and keep the copies in sync.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "kube",
    derive(kube_derive::CustomResource, schemars::JsonSchema),
    kube(
        group = "conflux.dev",
        version = "v1alpha1",
        kind = "ConfigSync",
        doc = "A ConfigSync copies one ConfigMap or Secret into every selected namespace and keeps the copies in sync.",
        status = "ConfigSyncStatus",
        shortname = "csync",
        derive = "PartialEq",
        crates(kube_core = "::kube_core"),
        printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.name"}"#,
        printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.syncedTargets"}"#,
        printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.failedTargets"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSyncSpec {
    /// The ConfigMap or Secret to copy.
    pub source: SourceRef,
    /// Where the copies go and what they look like.
    #[serde(default)]
    pub target: TargetSpec,
    /// Delete copies in namespaces that are no longer selected (default true).
    #[serde(default = "default_prune")]
    pub prune: bool,
    /// What happens to the copies when this ConfigSync is deleted: `Orphan` (default) keeps them and
    /// strips conflux's ownership labels, `Delete` deletes them.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What to do when a target namespace already has an object of that name not made by this
    /// ConfigSync: `Skip` (default) leaves it alone and reports it, `Adopt` takes it over.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
}

fn default_prune() -> bool {
    true
}

impl ConfigSyncSpec {
    /// The copies' name: `target.name`, or the source's name when unset or empty.
    pub fn target_name(&self) -> &str {
        match self.target.name.as_deref() {
            Some(name) if !name.is_empty() => name,
            _ => &self.source.name,
        }
    }

    /// Whether an event on the ConfigMap/Secret `kind` `namespace/name` (whose
    /// [`CONFIG_SYNC_LABEL`](crate::ownership::CONFIG_SYNC_LABEL) is `owner_label`) concerns the
    /// ConfigSync `sync_name` with this spec: it is the source, one of its copies, or named like
    /// its copies (a conflicting object may have appeared or gone).
    pub fn concerns(
        &self,
        sync_name: &str,
        kind: crate::SourceKind,
        namespace: &str,
        name: &str,
        owner_label: Option<&str>,
    ) -> bool {
        self.source.kind == kind
            && ((self.source.namespace == namespace && self.source.name == name)
                || self.target_name() == name
                || owner_label.is_some_and(|o| o == crate::ownership::label_value(sync_name)))
    }
}

/// Where copies go and what they look like.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TargetSpec {
    /// Name of the copies; defaults to the source's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespaces whose labels match are targets (ORed with `namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Namespace globs (`*`, `?`) that are targets (ORed with `namespaceSelector`). With neither,
    /// every namespace is a target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespace globs never targeted, on top of `kube-system`, `kube-public` and `kube-node-lease`
    /// (which are targeted only when listed by exact name in `namespaces`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_namespaces: Vec<String>,
    /// Labels added to every copy (for example `reconcile.fluxcd.io/watch: Enabled`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every copy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What happens to copies when their ConfigSync is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum DeletionPolicy {
    /// Keep the copies (apps keep running) and strip conflux's ownership labels.
    #[default]
    Orphan,
    /// Delete the copies.
    Delete,
}

impl DeletionPolicy {
    /// The name as written in a ConfigSync (`Orphan`, `Delete`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionPolicy::Orphan => "Orphan",
            DeletionPolicy::Delete => "Delete",
        }
    }
}

/// What to do with a same-name object in a target namespace that this ConfigSync did not create.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum ConflictPolicy {
    /// Leave it alone and report it.
    #[default]
    Skip,
    /// Take it over: overwrite it with the copy and label it as ours.
    Adopt,
}

/// Observed state of a ConfigSync.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConfigSyncStatus {
    /// `Ready` condition (reasons: `Synced`, `PartialSync`, `SourceNotFound`, `Refused`,
    /// `InvalidSpec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Digest of the source's content that was copied (`sha256:<hex>`), never the content itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_hash: Option<String>,
    /// Number of target namespaces whose copy is up to date.
    #[serde(default)]
    pub synced_targets: u32,
    /// Number of target namespaces whose copy could not be written (including skipped conflicts).
    #[serde(default)]
    pub failed_targets: u32,
    /// The first few failures, by namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<TargetFailure>,
}

/// One target namespace that could not be synced, and why (never containing data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct TargetFailure {
    /// The target namespace.
    pub namespace: String,
    /// What went wrong.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceKind;

    /// The YAML of docs/design.md 4.2, as JSON: every field lands where the design says.
    #[test]
    fn design_example_round_trips() {
        let doc = serde_json::json!({
            "source": {"kind": "Secret", "namespace": "flux-system", "name": "ghcr-auth"},
            "target": {
                "name": "ghcr-auth",
                "namespaceSelector": {"matchLabels": {"toolkit.fluxcd.io/role": "tenant"}},
                "namespaces": ["team-*"],
                "excludeNamespaces": ["sandbox-*"],
                "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
            },
            "prune": true,
            "deletionPolicy": "Orphan",
            "conflictPolicy": "Skip",
        });
        let spec: ConfigSyncSpec = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(
            spec.source,
            SourceRef::new(SourceKind::Secret, "flux-system", "ghcr-auth")
        );
        assert_eq!(spec.target.namespaces, ["team-*"]);
        assert_eq!(spec.target.exclude_namespaces, ["sandbox-*"]);
        assert!(spec.target.namespace_selector.is_some());
        assert_eq!(serde_json::to_value(&spec).unwrap(), doc);
    }

    #[test]
    fn defaults_and_policies() {
        let spec: ConfigSyncSpec = serde_json::from_value(serde_json::json!({
            "source": {"kind": "ConfigMap", "namespace": "a", "name": "cfg"},
            "target": {"name": ""},
            "prune": false,
            "deletionPolicy": "Delete",
            "conflictPolicy": "Adopt",
        }))
        .unwrap();
        assert_eq!(spec.target_name(), "cfg");
        assert!(!spec.prune);
        assert_eq!(spec.deletion_policy, DeletionPolicy::Delete);
        assert_eq!(spec.conflict_policy, ConflictPolicy::Adopt);
        let bad = serde_json::from_value::<ConfigSyncSpec>(serde_json::json!({
            "source": {"kind": "Pod", "namespace": "a", "name": "p"},
        }));
        assert!(bad.is_err());
    }

    #[cfg(feature = "kube")]
    #[test]
    fn crd_is_cluster_scoped_v1alpha1() {
        use kube_core::CustomResourceExt;
        let crd = ConfigSync::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("configsyncs.conflux.dev")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.kind, KIND);
        assert_eq!(crd.spec.versions[0].name, VERSION);
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["prune"]["default"], true);
        assert_eq!(
            spec["properties"]["source"]["required"],
            serde_json::json!(["kind", "name", "namespace"])
        );
        assert!(crd.spec.versions[0].subresources.is_some());
    }
}
