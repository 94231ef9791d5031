//! What a workload's pods read that conflux watches: a ConfigMap, a Secret, or, with the
//! secrets-store CSI integration (Reloader's `--enable-csi-integration`), a SecretProviderClass.
//!
//! ConfigMaps and Secrets are [`ConfigKind`]s, shared with every crate of the workspace (the
//! watch index, copies, Flux triggers). A SecretProviderClass is this crate's alone: no other
//! controller reads it, and what its pods mount is not in the object but in the
//! `SecretProviderClassPodStatus` objects the CSI driver writes per pod
//! ([`ProviderObject`]). So this kind is local: [`SourceKind`] is [`ConfigKind`] plus it.

use std::fmt;

use conflux_watch_index::refs::ConfigKind;

use crate::{Error, Result};

/// A kind of source a workload can roll for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SourceKind {
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 Secret.
    Secret,
    /// A `secrets-store.csi.x-k8s.io/v1` SecretProviderClass, mounted through the secrets-store
    /// CSI driver.
    SecretProviderClass,
}

impl SourceKind {
    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
            SourceKind::SecretProviderClass => "SecretProviderClass",
        }
    }

    /// The upper-case name Reloader uses for it (`last-reloaded-from`'s `type`, the suffix of
    /// the env-vars strategy's variables).
    pub fn reloader_type(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "CONFIGMAP",
            SourceKind::Secret => "SECRET",
            SourceKind::SecretProviderClass => "SECRETPROVIDERCLASS",
        }
    }

    /// The [`ConfigKind`], for a ConfigMap or a Secret.
    pub fn config_kind(self) -> Option<ConfigKind> {
        match self {
            SourceKind::ConfigMap => Some(ConfigKind::ConfigMap),
            SourceKind::Secret => Some(ConfigKind::Secret),
            SourceKind::SecretProviderClass => None,
        }
    }
}

impl From<ConfigKind> for SourceKind {
    fn from(kind: ConfigKind) -> Self {
        match kind {
            ConfigKind::ConfigMap => SourceKind::ConfigMap,
            ConfigKind::Secret => SourceKind::Secret,
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// API group of the secrets-store CSI driver's kinds.
pub const SECRETS_STORE_GROUP: &str = "secrets-store.csi.x-k8s.io";
/// `volumes[].csi.volumeAttributes` key naming the SecretProviderClass a CSI volume mounts.
pub const SECRET_PROVIDER_CLASS_ATTRIBUTE: &str = "secretProviderClass";

/// One object a SecretProviderClass mounted into a pod, as the CSI driver records it in
/// `SecretProviderClassPodStatus.status.objects[]`: the provider's id of the object and its
/// version. Ids and versions only: the driver never writes secret data there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProviderObject {
    /// `id`.
    pub id: String,
    /// `version`.
    pub version: String,
}

/// What one `SecretProviderClassPodStatus` says: which SecretProviderClass one pod mounted, and
/// the objects it mounted, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderMount {
    /// `status.secretProviderClassName`.
    pub class: String,
    /// `status.objects`, sorted by id (empty when absent).
    pub objects: Vec<ProviderObject>,
}

impl ProviderMount {
    /// Reads a `SecretProviderClassPodStatus` (as JSON). A status without a class name, or
    /// objects that are not `{id, version}` strings, is refused with
    /// [`Error::InvalidProviderStatus`] (naming `name`, never a value).
    pub fn from_status(name: &str, object: &serde_json::Value) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidProviderStatus {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        let status = object
            .get("status")
            .filter(|s| !s.is_null())
            .ok_or_else(|| bad("no status"))?;
        let class = status
            .get("secretProviderClassName")
            .and_then(serde_json::Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| bad("status.secretProviderClassName is missing or not a string"))?
            .to_owned();
        let mut objects = Vec::new();
        match status.get("objects") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(items)) => {
                for item in items {
                    let field = |f: &str| item.get(f).and_then(serde_json::Value::as_str);
                    let (Some(id), Some(version)) = (field("id"), field("version")) else {
                        return Err(bad("status.objects[] must be {id, version} strings"));
                    };
                    objects.push(ProviderObject {
                        id: id.to_owned(),
                        version: version.to_owned(),
                    });
                }
            }
            Some(_) => return Err(bad("status.objects is not a list")),
        }
        objects.sort();
        Ok(ProviderMount { class, objects })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn provider_statuses_are_read_or_refused() {
        let mount = ProviderMount::from_status(
            "p",
            &json!({"status": {"podName": "web-1", "secretProviderClassName": "vault",
                "mounted": true, "objects": [{"id": "b", "version": "2"}, {"id": "a", "version": "1"}]}}),
        )
        .unwrap();
        assert_eq!(mount.class, "vault");
        let ids: Vec<&str> = mount.objects.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "sorted");
        let empty = ProviderMount::from_status(
            "p",
            &json!({"status": {"secretProviderClassName": "vault"}}),
        )
        .unwrap();
        assert!(empty.objects.is_empty());
        for bad in [
            json!({}),
            json!({"status": null}),
            json!({"status": {"objects": []}}),
            json!({"status": {"secretProviderClassName": 3}}),
            json!({"status": {"secretProviderClassName": "v", "objects": {"id": "a"}}}),
            json!({"status": {"secretProviderClassName": "v", "objects": [{"id": "a"}]}}),
            json!({"status": {"secretProviderClassName": "v", "objects": [{"id": 1, "version": "1"}]}}),
        ] {
            let err = ProviderMount::from_status("p", &bad).unwrap_err();
            assert_eq!(err.reason(), "InvalidProviderStatus", "{bad}");
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(
            SourceKind::from(ConfigKind::Secret).reloader_type(),
            "SECRET"
        );
        assert_eq!(
            SourceKind::SecretProviderClass.to_string(),
            "SecretProviderClass"
        );
        assert_eq!(SourceKind::SecretProviderClass.config_kind(), None);
        assert!(SourceKind::Secret < SourceKind::SecretProviderClass);
        assert!(SourceKind::ConfigMap < SourceKind::Secret);
    }
}
