//! Who owns a copy. Ownership lives in labels and annotations on the copy itself (docs/design.md 4.2), not
//! in controller memory and not in `ownerReferences` (which cannot point across namespaces or at a
//! cluster-scoped object for garbage collection the way we need), so a restarted operator converges
//! from cluster state alone.
//!
//! Every label and annotation conflux writes on copies is defined here.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::source::{SourceKind, SourceRef, hex};

/// Field manager of every server-side apply conflux makes on copies.
pub const FIELD_MANAGER: &str = "conflux";

/// The recommended label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on copies.
pub const MANAGED_BY_VALUE: &str = "conflux";
/// Label naming the `ConfigSync` that owns a copy (see [`label_value`] for long names).
pub const CONFIG_SYNC_LABEL: &str = "copy.conflux.dev/config-sync";
/// Label naming the namespace of an annotated source that owns a copy.
pub const SOURCE_NAMESPACE_LABEL: &str = "copy.conflux.dev/source-namespace";
/// Label naming an annotated source that owns a copy.
pub const SOURCE_NAME_LABEL: &str = "copy.conflux.dev/source-name";
/// Every label that says who owns a copy: what a release strips, and what a copy never takes
/// from anywhere but its own owner.
pub const OWNERSHIP_LABELS: [&str; 4] = [
    MANAGED_BY_LABEL,
    CONFIG_SYNC_LABEL,
    SOURCE_NAMESPACE_LABEL,
    SOURCE_NAME_LABEL,
];
/// Annotation naming the source of a copy, `<Kind>/<namespace>/<name>` (always the full names).
pub const SOURCE_ANNOTATION: &str = "copy.conflux.dev/source";
/// Annotation set (value `"true"`) on copies whose source was deleted: they are kept so workloads
/// keep running, and marked so people can find them.
pub const ORPHANED_ANNOTATION: &str = "copy.conflux.dev/orphaned";
/// Annotation on replicator-style pull copies (`replicator.v1.mittwald.de/replicate-from`): the
/// keys conflux copied into the target, sorted and comma-separated. Those targets keep keys of
/// their own, so this is how a key removed at the source is told from one the target owns.
pub const COPIED_KEYS_ANNOTATION: &str = "copy.conflux.dev/copied-keys";
/// Annotation holding a digest of the copy's metadata template (target name, extra labels and
/// annotations), so that removing a label from a ConfigSync's `target.labels` re-applies the copies.
pub const TEMPLATE_HASH_ANNOTATION: &str = "copy.conflux.dev/template-hash";

/// The longest label value Kubernetes accepts.
const MAX_LABEL_VALUE: usize = 63;
/// Hex digits of SHA-256 kept when a long name is shortened into a label value.
const HASH_SUFFIX_LEN: usize = 10;

/// The owner of a fan-out copy: a `ConfigSync`, or a source annotated for fan-out (kopy,
/// reflector's auto mirrors, replicator's push), which owns its own copies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Owner {
    /// A cluster-scoped `ConfigSync`, by name.
    ConfigSync {
        /// `metadata.name` of the ConfigSync.
        name: String,
    },
    /// A source annotated for fan-out (`kopy.kot-labs.com/sync`, reflector's
    /// `reflection-auto-enabled`, replicator's `replicate-to`): it owns its own copies.
    Source {
        /// Namespace of the source.
        namespace: String,
        /// Name of the source.
        name: String,
    },
}

impl Owner {
    /// The owner of the copies of an annotated `source`.
    pub fn source(source: &SourceRef) -> Self {
        Owner::Source {
            namespace: source.namespace.clone(),
            name: source.name.clone(),
        }
    }

    /// The labels every copy of this owner carries (managed-by plus the owner's name).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels =
            BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())]);
        for (key, value) in self.owner_labels() {
            labels.insert(key.to_owned(), value);
        }
        labels
    }

    /// The label selector string that lists this owner's copies (for a list call or a watch).
    pub fn selector(&self) -> String {
        let mut out = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
        for (key, value) in self.owner_labels() {
            out.push_str(&format!(",{key}={value}"));
        }
        out
    }

    /// True when `labels` mark an object as a copy owned by `self`.
    pub fn owns(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let Some(labels) = labels else {
            return false;
        };
        labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
            && self
                .owner_labels()
                .iter()
                .all(|(key, value)| labels.get(*key) == Some(value))
    }

    /// The owner-naming labels, values made label-safe.
    fn owner_labels(&self) -> Vec<(&'static str, String)> {
        match self {
            Owner::ConfigSync { name } => vec![(CONFIG_SYNC_LABEL, label_value(name))],
            Owner::Source { namespace, name } => vec![
                (SOURCE_NAMESPACE_LABEL, label_value(namespace)),
                (SOURCE_NAME_LABEL, label_value(name)),
            ],
        }
    }
}

/// A Kubernetes object name as a label value. Names up to 63 characters are already valid label
/// values and are kept; longer names (a ConfigSync name may have 253) become their first 52
/// characters, `-`, and 10 hex digits of their SHA-256, so distinct names stay distinct.
pub fn label_value(name: &str) -> String {
    if name.len() <= MAX_LABEL_VALUE {
        return name.to_owned();
    }
    let digest = hex(&Sha256::digest(name.as_bytes()));
    let keep = MAX_LABEL_VALUE - 1 - HASH_SUFFIX_LEN;
    // Names are ASCII (DNS subdomains), so a byte index is a char boundary; fall back to fewer
    // characters rather than panic on anything else.
    let mut prefix = name.get(..keep).unwrap_or_default();
    // A label value must end with an alphanumeric character before our `-`.
    prefix = prefix.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}-{}", &digest[..HASH_SUFFIX_LEN])
}

/// The [`SOURCE_ANNOTATION`] value for `source`.
pub fn source_annotation(source: &SourceRef) -> String {
    source.to_string()
}

/// The source named by a copy's [`SOURCE_ANNOTATION`] (`Kind/namespace/name`), if it parses.
pub fn parse_source_annotation(value: &str) -> Option<SourceRef> {
    let mut parts = value.splitn(3, '/');
    let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
    let kind = SourceKind::of_object("v1", kind)?;
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    Some(SourceRef::new(kind, namespace, name))
}

/// True when `labels` carry conflux's managed-by label (a copy of some owner, maybe not ours).
pub fn is_managed(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        == Some(MANAGED_BY_VALUE)
}

/// Label Flux Operator puts on every object a ResourceSet generates (with the ResourceSet's name).
pub const RESOURCE_SET_NAME_LABEL: &str = "resourceset.fluxcd.controlplane.io/name";
/// Label Flux Operator puts on every object a ResourceSet generates (its namespace).
pub const RESOURCE_SET_NAMESPACE_LABEL: &str = "resourceset.fluxcd.controlplane.io/namespace";

/// The ResourceSet (`namespace/name`) that generated an object, from Flux Operator's labels.
/// Flux Operator already copies the `fluxcd.controlplane.io/copyFrom` targets of its
/// ResourceSets; conflux leaves those to it rather than fight over their data.
pub fn resource_set_of(labels: Option<&BTreeMap<String, String>>) -> Option<String> {
    let labels = labels?;
    let name = labels.get(RESOURCE_SET_NAME_LABEL)?;
    let namespace = labels
        .get(RESOURCE_SET_NAMESPACE_LABEL)
        .map(String::as_str)
        .unwrap_or_default();
    Some(format!("{namespace}/{name}"))
}

/// A JSON merge patch that strips conflux's ownership from a copy (labels and annotations), leaving
/// data and everything else in place: what the `Orphan` deletion policy does. A merge patch, not an
/// apply, because an apply that drops our fields would drop the data we own as well.
pub fn release_patch() -> serde_json::Value {
    let labels: serde_json::Map<String, serde_json::Value> = OWNERSHIP_LABELS
        .into_iter()
        .map(|k| (k.to_owned(), serde_json::Value::Null))
        .collect();
    let annotations: serde_json::Map<String, serde_json::Value> = [
        SOURCE_ANNOTATION,
        ORPHANED_ANNOTATION,
        TEMPLATE_HASH_ANNOTATION,
    ]
    .into_iter()
    .map(|k| (k.to_owned(), serde_json::Value::Null))
    .collect();
    serde_json::json!({"metadata": {"labels": labels, "annotations": annotations}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_set_targets_are_recognised_by_flux_operator_labels() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let generated = labels(&[
            (RESOURCE_SET_NAME_LABEL, "tenants"),
            (RESOURCE_SET_NAMESPACE_LABEL, "flux-system"),
        ]);
        assert_eq!(
            resource_set_of(Some(&generated)).as_deref(),
            Some("flux-system/tenants")
        );
        assert_eq!(resource_set_of(Some(&labels(&[("app", "x")]))), None);
        assert_eq!(resource_set_of(None), None);
    }
    use conflux_watch_index::selector::{Selector, validate_value};

    #[test]
    fn label_values_are_valid_and_distinct() {
        let long_a = format!("{}a", "x".repeat(70));
        let long_b = format!("{}b", "x".repeat(70));
        let dotted = format!("{}.{}", "y".repeat(51), "z".repeat(40));
        let cases = [
            ("ghcr-auth", "ghcr-auth".to_owned()),
            (&"n".repeat(63) as &str, "n".repeat(63)),
        ];
        for (name, want) in cases {
            assert_eq!(label_value(name), want);
        }
        for name in [&long_a, &long_b, &dotted] {
            let v = label_value(name);
            assert!(v.len() <= 63, "{v}");
            assert_eq!(validate_value(&v), Vec::<String>::new(), "{v}");
        }
        assert_ne!(label_value(&long_a), label_value(&long_b));
    }

    #[test]
    fn owner_labels_selector_and_ownership_agree() {
        let owners = [
            Owner::ConfigSync {
                name: "ghcr-auth".into(),
            },
            Owner::ConfigSync {
                name: "s".repeat(100),
            },
            Owner::Source {
                namespace: "flux-system".into(),
                name: "registry".into(),
            },
        ];
        for owner in &owners {
            let labels = owner.labels();
            assert!(owner.owns(Some(&labels)), "{owner:?}");
            assert!(is_managed(Some(&labels)));
            let selector = Selector::parse(&owner.selector()).unwrap();
            assert!(selector.matches(&labels), "{owner:?}");
            for other in owners.iter().filter(|o| *o != owner) {
                assert!(
                    !other.owns(Some(&labels)),
                    "{other:?} owns {owner:?}'s copy"
                );
                assert!(!selector.matches(&other.labels()));
            }
        }
        let mut foreign = owners[0].labels();
        foreign.insert(MANAGED_BY_LABEL.into(), "helm".into());
        assert!(!owners[0].owns(Some(&foreign)));
        assert!(!owners[0].owns(None));
    }

    #[test]
    fn release_patch_nulls_every_ownership_key() {
        let patch = release_patch();
        for key in [
            MANAGED_BY_LABEL,
            CONFIG_SYNC_LABEL,
            SOURCE_NAMESPACE_LABEL,
            SOURCE_NAME_LABEL,
        ] {
            assert!(patch["metadata"]["labels"][key].is_null());
            assert!(patch["metadata"]["labels"].get(key).is_some());
        }
        for key in [
            SOURCE_ANNOTATION,
            ORPHANED_ANNOTATION,
            TEMPLATE_HASH_ANNOTATION,
        ] {
            assert!(patch["metadata"]["annotations"].get(key).is_some());
        }
    }
}

#[cfg(test)]
mod source_annotation_tests {
    use super::*;

    #[test]
    fn source_annotation_round_trips_and_rejects_junk() {
        let source = SourceRef::new(SourceKind::Secret, "flux-system", "ghcr");
        assert_eq!(
            parse_source_annotation(&source_annotation(&source)),
            Some(source)
        );
        for bad in [
            "",
            "Secret",
            "Secret/ns",
            "Pod/ns/x",
            "Secret//x",
            "Secret/ns/",
        ] {
            assert_eq!(parse_source_annotation(bad), None, "{bad}");
        }
    }
}
