//! `Debug` helpers that show the shape of variables and manifests and never a value: variable
//! values may come from Secrets, and substituted manifests carry them.
//!
//! The same rules as `conflux_watch_index::redact`, kept apart on purpose: depending on watch-index would
//! pull k8s-openapi (and its version feature) into this text-only crate.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// A hidden value, shown as its length in bytes: `<redacted: 12 bytes>`.
#[derive(Clone, Copy)]
pub(crate) struct Redacted(pub(crate) usize);

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

/// Variable names (or data keys), each value as its length.
pub(crate) struct RedactedMap<'a>(pub(crate) &'a BTreeMap<String, String>);

impl fmt::Debug for RedactedMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, Redacted(v.len()))))
            .finish()
    }
}

/// A manifest as JSON: every key, and in place of every string, number and bool its length,
/// except what names the object: top-level `apiVersion`, `kind` and `type`, `metadata.name`,
/// `namespace`, `generateName`, `uid` and `resourceVersion`, and label values. `null` is shown.
pub(crate) struct RedactedJson<'a>(pub(crate) &'a Value);

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
            Value::String(s) => Redacted(s.len()).fmt(f),
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
