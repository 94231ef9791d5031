//! What gets copied: a ConfigMap or a Secret ([`ConfigObject`]) and how it is named ([`SourceRef`]).

use std::collections::BTreeMap;
use std::fmt;

use conflux_watch_index::redact::{RedactedConfigMap, RedactedSecret};
use conflux_watch_index::refs::{ConfigKey, ConfigKind};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The Secret type the API server defaults to, and what an empty source type becomes.
pub const SECRET_TYPE_OPAQUE: &str = "Opaque";

/// The kinds that can be copied (source and copy always have the same kind): watch-index's
/// [`ConfigKind`], the one kind type of every conflux crate, under the name this crate's API uses.
pub type SourceKind = ConfigKind;

/// A ConfigMap or Secret by kind, namespace and name (the `source` of a `ConfigSync`, the value of a
/// `copyFrom` annotation plus the target's kind).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct SourceRef {
    /// `ConfigMap` or `Secret`.
    pub kind: SourceKind,
    /// Namespace of the source.
    pub namespace: String,
    /// Name of the source.
    pub name: String,
}

impl SourceRef {
    /// A reference from its parts.
    pub fn new(kind: SourceKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        SourceRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of this source in watch-index's reverse index.
    pub fn config_key(&self) -> ConfigKey {
        ConfigKey::new(self.kind, self.namespace.as_str(), self.name.as_str())
    }
}

/// `Kind/namespace/name`, the form used in messages and in the copy's source annotation.
impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// A ConfigMap or a Secret: a source, an observed copy or a desired copy. Serialises as the object
/// itself (with `apiVersion` and `kind`), ready for a server-side apply body. `Debug` shows the
/// metadata, the Secret type and the data keys, never a value ([`conflux_watch_index::redact`]).
#[derive(Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ConfigObject {
    /// A ConfigMap.
    ConfigMap(ConfigMap),
    /// A Secret.
    Secret(Secret),
}

impl ConfigObject {
    /// ConfigMap or Secret.
    pub fn kind(&self) -> SourceKind {
        match self {
            ConfigObject::ConfigMap(_) => SourceKind::ConfigMap,
            ConfigObject::Secret(_) => SourceKind::Secret,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ConfigObject::ConfigMap(cm) => &cm.metadata,
            ConfigObject::Secret(s) => &s.metadata,
        }
    }

    /// The object's metadata, mutable.
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            ConfigObject::ConfigMap(cm) => &mut cm.metadata,
            ConfigObject::Secret(s) => &mut s.metadata,
        }
    }

    /// `metadata.namespace`, or `""`.
    pub fn namespace(&self) -> &str {
        self.metadata().namespace.as_deref().unwrap_or_default()
    }

    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// This object as a [`SourceRef`].
    pub fn source_ref(&self) -> SourceRef {
        SourceRef::new(self.kind(), self.namespace(), self.name())
    }

    /// `immutable: true`: the API server rejects any change to data, so a changed copy must be
    /// deleted and re-created.
    pub fn is_immutable(&self) -> bool {
        let immutable = match self {
            ConfigObject::ConfigMap(cm) => cm.immutable,
            ConfigObject::Secret(s) => s.immutable,
        };
        immutable == Some(true)
    }

    /// The Secret `type` with the API server's default applied (`Opaque` when unset or empty);
    /// `None` for a ConfigMap.
    pub fn secret_type(&self) -> Option<&str> {
        match self {
            ConfigObject::ConfigMap(_) => None,
            ConfigObject::Secret(s) => Some(effective_secret_type(s.type_.as_deref())),
        }
    }

    /// The keys of `data` and (ConfigMap) `binaryData`: the API server keeps them distinct.
    pub fn keys(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self {
            ConfigObject::ConfigMap(cm) => Box::new(
                cm.data
                    .iter()
                    .flatten()
                    .map(|(k, _)| k.as_str())
                    .chain(cm.binary_data.iter().flatten().map(|(k, _)| k.as_str())),
            ),
            ConfigObject::Secret(s) => Box::new(s.data.iter().flatten().map(|(k, _)| k.as_str())),
        }
    }

    /// True when `self` and `other` carry the same content: same kind, same `data`, same
    /// `binaryData`, same Secret type (absent maps and empty maps are the same).
    pub fn same_content(&self, other: &ConfigObject) -> bool {
        match (self, other) {
            (ConfigObject::ConfigMap(a), ConfigObject::ConfigMap(b)) => {
                same_map(&a.data, &b.data) && same_map(&a.binary_data, &b.binary_data)
            }
            (ConfigObject::Secret(a), ConfigObject::Secret(b)) => {
                same_map(&a.data, &b.data)
                    && effective_secret_type(a.type_.as_deref())
                        == effective_secret_type(b.type_.as_deref())
            }
            _ => false,
        }
    }

    /// A digest of the content (kind, Secret type, `data`, `binaryData`), `sha256:<hex>`. Labels and
    /// annotations do not count, so a label-only write does not change it. This is the ConfigSync
    /// status' `sourceHash`; it reveals nothing about Secret values beyond equality.
    pub fn content_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.kind().as_str());
        h.update([0]);
        match self {
            ConfigObject::ConfigMap(cm) => {
                hash_map(
                    &mut h,
                    b'd',
                    cm.data.iter().flatten().map(|(k, v)| (k, v.as_bytes())),
                );
                hash_map(
                    &mut h,
                    b'b',
                    cm.binary_data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k, v.0.as_slice())),
                );
            }
            ConfigObject::Secret(s) => {
                h.update(effective_secret_type(s.type_.as_deref()));
                h.update([0]);
                hash_map(
                    &mut h,
                    b'd',
                    s.data.iter().flatten().map(|(k, v)| (k, v.0.as_slice())),
                );
            }
        }
        format!("sha256:{}", hex(&h.finalize()))
    }
}

/// By hand: a derived `Debug` would print Secret data (and ConfigMap data copied from Secrets) into
/// logs and panic messages.
impl fmt::Debug for ConfigObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigObject::ConfigMap(cm) => f
                .debug_tuple("ConfigMap")
                .field(&RedactedConfigMap(cm))
                .finish(),
            ConfigObject::Secret(s) => f.debug_tuple("Secret").field(&RedactedSecret(s)).finish(),
        }
    }
}

impl From<ConfigMap> for ConfigObject {
    fn from(cm: ConfigMap) -> Self {
        ConfigObject::ConfigMap(cm)
    }
}

impl From<Secret> for ConfigObject {
    fn from(s: Secret) -> Self {
        ConfigObject::Secret(s)
    }
}

/// The API server's defaulting: an unset or empty Secret type is `Opaque`.
pub(crate) fn effective_secret_type(t: Option<&str>) -> &str {
    match t {
        None | Some("") => SECRET_TYPE_OPAQUE,
        Some(t) => t,
    }
}

fn same_map<V: PartialEq>(
    a: &Option<BTreeMap<String, V>>,
    b: &Option<BTreeMap<String, V>>,
) -> bool {
    let empty = BTreeMap::new();
    a.as_ref().unwrap_or(&empty) == b.as_ref().unwrap_or(&empty)
}

/// Length-prefixed so that no two different maps feed the same bytes.
fn hash_map<'a>(h: &mut Sha256, tag: u8, entries: impl Iterator<Item = (&'a String, &'a [u8])>) {
    h.update([tag]);
    for (k, v) in entries {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v);
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(t: Option<&str>, data: &[(&str, &str)]) -> ConfigObject {
        ConfigObject::Secret(Secret {
            type_: t.map(str::to_owned),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        })
    }

    #[test]
    fn kinds_of_copy_targets() {
        let cases = [
            ("v1", "ConfigMap", Some(SourceKind::ConfigMap)),
            ("v1", "Secret", Some(SourceKind::Secret)),
            ("v1", "Service", None),
            ("apps/v1", "ConfigMap", None),
            ("v1", "configmap", None),
        ];
        for (api_version, kind, want) in cases {
            assert_eq!(
                SourceKind::of_object(api_version, kind),
                want,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn content_hash_sees_data_and_type_only() {
        let a = secret(None, &[("k", "v")]);
        let mut labelled = a.clone();
        labelled.metadata_mut().labels = Some(BTreeMap::from([("x".into(), "y".into())]));
        assert_eq!(a.content_hash(), labelled.content_hash());
        assert_eq!(
            a.content_hash(),
            secret(Some("Opaque"), &[("k", "v")]).content_hash()
        );
        assert_ne!(a.content_hash(), secret(None, &[("k", "w")]).content_hash());
        assert_ne!(
            a.content_hash(),
            secret(Some("kubernetes.io/tls"), &[("k", "v")]).content_hash()
        );
        assert!(a.content_hash().starts_with("sha256:"));
        assert_eq!(a.content_hash().len(), 7 + 64);
    }

    #[test]
    fn same_content_treats_absent_as_empty() {
        assert!(secret(None, &[]).same_content(&ConfigObject::Secret(Secret::default())));
        assert!(!secret(None, &[("k", "v")]).same_content(&secret(None, &[])));
        assert!(!ConfigObject::ConfigMap(ConfigMap::default()).same_content(&secret(None, &[])));
    }
}
