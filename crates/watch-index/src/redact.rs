//! `Debug` output for ConfigMap and Secret content that shows its shape and never a value.
//!
//! A derived `Debug` of a Secret prints its data (k8s-openapi's `ByteString` as a list of byte
//! values, `stringData` as text), and `{:?}` ends up in logs, panic messages and test output. The
//! wrappers here print what is needed to tell objects apart — kinds, names, namespaces, Secret
//! types, labels, data keys — and each value as its length only: `<redacted: 12 bytes>`.
//! ConfigMap values are redacted too: a ConfigMap may hold a copy of a Secret's data, and one rule
//! for both kinds cannot be got wrong.
//!
//! Annotation values are redacted as well: `kubectl.kubernetes.io/last-applied-configuration`
//! holds the whole object, data included.
//!
//! ```
//! use std::collections::BTreeMap;
//! use k8s_openapi::ByteString;
//! use k8s_openapi::api::core::v1::Secret;
//! use conflux_watch_index::redact::RedactedSecret;
//!
//! let mut secret = Secret::default();
//! secret.metadata.name = Some("db".into());
//! secret.data = Some(BTreeMap::from([("password".into(), ByteString(b"hunter2".to_vec()))]));
//! let shown = format!("{:?}", RedactedSecret(&secret));
//! assert!(shown.contains("\"password\": <redacted: 7 bytes>"));
//! assert!(!shown.contains("hunter2"));
//! ```

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// A hidden value, shown as its length in bytes: `<redacted: 12 bytes>` (also its `Display`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Redacted(pub usize);

impl Redacted {
    /// The placeholder of `value`.
    pub fn of(value: impl AsRef<[u8]>) -> Self {
        Redacted(value.as_ref().len())
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<redacted: {} bytes>", self.0)
    }
}

impl fmt::Display for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A data map (`data`, `binaryData`, `stringData`): its keys, each value as its length.
pub struct RedactedMap<'a, V>(pub &'a BTreeMap<String, V>);

impl fmt::Debug for RedactedMap<'_, String> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, Redacted::of(v))))
            .finish()
    }
}

impl fmt::Debug for RedactedMap<'_, ByteString> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, Redacted::of(&v.0))))
            .finish()
    }
}

/// An object's metadata: name, namespace, uid, resourceVersion, generation, timestamps, labels,
/// owner references and finalizers as they are, annotations with their values redacted. Fields
/// that are not set are left out, and so are `managedFields` (long, and they say nothing a reader
/// of a log needs).
pub struct RedactedMeta<'a>(pub &'a ObjectMeta);

impl fmt::Debug for RedactedMeta<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let meta = self.0;
        let mut d = f.debug_struct("ObjectMeta");
        if let Some(name) = &meta.name {
            d.field("name", name);
        }
        if let Some(generate_name) = &meta.generate_name {
            d.field("generate_name", generate_name);
        }
        if let Some(namespace) = &meta.namespace {
            d.field("namespace", namespace);
        }
        if let Some(uid) = &meta.uid {
            d.field("uid", uid);
        }
        if let Some(resource_version) = &meta.resource_version {
            d.field("resource_version", resource_version);
        }
        if let Some(generation) = &meta.generation {
            d.field("generation", generation);
        }
        if let Some(created) = &meta.creation_timestamp {
            d.field("creation_timestamp", created);
        }
        if let Some(deleted) = &meta.deletion_timestamp {
            d.field("deletion_timestamp", deleted);
        }
        if let Some(labels) = &meta.labels {
            d.field("labels", labels);
        }
        if let Some(annotations) = &meta.annotations {
            d.field("annotations", &RedactedMap(annotations));
        }
        if let Some(owners) = &meta.owner_references {
            d.field("owner_references", owners);
        }
        if let Some(finalizers) = &meta.finalizers {
            d.field("finalizers", finalizers);
        }
        d.finish_non_exhaustive()
    }
}

/// A Secret: [`RedactedMeta`], `type`, `immutable`, and the keys of `data` and `stringData` with
/// their values' lengths.
pub struct RedactedSecret<'a>(pub &'a Secret);

impl fmt::Debug for RedactedSecret<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = self.0;
        let mut d = f.debug_struct("Secret");
        d.field("metadata", &RedactedMeta(&secret.metadata));
        if let Some(type_) = &secret.type_ {
            d.field("type", type_);
        }
        if let Some(immutable) = &secret.immutable {
            d.field("immutable", immutable);
        }
        if let Some(data) = &secret.data {
            d.field("data", &RedactedMap(data));
        }
        if let Some(string_data) = &secret.string_data {
            d.field("string_data", &RedactedMap(string_data));
        }
        d.finish()
    }
}

/// A ConfigMap: [`RedactedMeta`], `immutable`, and the keys of `data` and `binaryData` with their
/// values' lengths.
pub struct RedactedConfigMap<'a>(pub &'a ConfigMap);

impl fmt::Debug for RedactedConfigMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cm = self.0;
        let mut d = f.debug_struct("ConfigMap");
        d.field("metadata", &RedactedMeta(&cm.metadata));
        if let Some(immutable) = &cm.immutable {
            d.field("immutable", immutable);
        }
        if let Some(data) = &cm.data {
            d.field("data", &RedactedMap(data));
        }
        if let Some(binary_data) = &cm.binary_data {
            d.field("binary_data", &RedactedMap(binary_data));
        }
        d.finish()
    }
}

/// A Kubernetes object (or a patch) as JSON: every key, and in place of every string, number and
/// bool its length (the JSON text of numbers and bools), except what names the object: top-level
/// `apiVersion`, `kind` and `type`, `metadata.name`, `namespace`, `generateName`, `uid` and
/// `resourceVersion`, and label values. `null` is shown (a merge patch's "remove this key").
pub struct RedactedJson<'a>(pub &'a Value);

impl fmt::Debug for RedactedJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        JsonNode {
            value: self.0,
            place: Place::Root,
            shown: false,
        }
        .fmt(f)
    }
}

/// Where a JSON value sits, as far as [`RedactedJson`] cares.
#[derive(Clone, Copy)]
enum Place {
    /// The object itself.
    Root,
    /// `metadata`.
    Metadata,
    /// `metadata.labels`.
    Labels,
    /// Anywhere else: nothing is shown.
    Elsewhere,
}

impl Place {
    fn child(self, key: &str) -> Place {
        match (self, key) {
            (Place::Root, "metadata") => Place::Metadata,
            (Place::Metadata, "labels") => Place::Labels,
            _ => Place::Elsewhere,
        }
    }

    /// Whether the scalar under `key` names the object (and so is shown).
    fn shows(self, key: &str) -> bool {
        match self {
            Place::Root => matches!(key, "apiVersion" | "kind" | "type"),
            Place::Metadata => matches!(
                key,
                "name" | "namespace" | "generateName" | "uid" | "resourceVersion"
            ),
            Place::Labels => true,
            Place::Elsewhere => false,
        }
    }
}

struct JsonNode<'a> {
    value: &'a Value,
    place: Place,
    /// Whether a string here is shown as it is.
    shown: bool,
}

impl fmt::Debug for JsonNode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.value {
            Value::Null => f.write_str("null"),
            Value::String(s) if self.shown => fmt::Debug::fmt(s, f),
            Value::String(s) => Redacted::of(s).fmt(f),
            // A number or bool may be a value too (YAML turns `${PIN}` into a number).
            Value::Bool(_) | Value::Number(_) => Redacted(self.value.to_string().len()).fmt(f),
            Value::Array(items) => f
                .debug_list()
                .entries(items.iter().map(|value| JsonNode {
                    value,
                    place: Place::Elsewhere,
                    shown: false,
                }))
                .finish(),
            Value::Object(map) => f
                .debug_map()
                .entries(map.iter().map(|(key, value)| {
                    let node = JsonNode {
                        value,
                        place: self.place.child(key),
                        shown: self.place.shows(key),
                    };
                    (key, node)
                }))
                .finish(),
        }
    }
}
