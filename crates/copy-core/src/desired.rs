//! What a copy must look like (docs/design.md 4.1 and 4.2).
//!
//! The desired copy holds only the fields conflux owns — name, namespace, our labels and
//! annotations, `data`/`binaryData`/`type` — so the controller can server-side apply it as is with
//! field manager [`FIELD_MANAGER`](crate::ownership::FIELD_MANAGER): fields other managers own (the
//! `copyFrom` annotation, labels someone else set) stay untouched, and keys removed at the source
//! disappear from the copy because conflux owned them and no longer applies them.
//!
//! - ConfigMap: `data` is replaced wholesale by the source's; `binaryData` is copied when the source
//!   has some.
//! - Secret: `data` is copied as base64 `data`, never `stringData` (which the API server merges into
//!   `data`, so removed keys would linger).
//! - Secret `type`, see [`secret_type`]: the source's (`Opaque` when empty) unless the target has
//!   its own; a target of type `Opaque` whose source has another type is re-created; different
//!   non-`Opaque` types are an error on the target.
//! - No label or annotation of the source is copied (its `reconcile.fluxcd.io/watch` label in
//!   particular).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};
use watch_index::redact::RedactedJson;

use crate::fan_out::FanOut;
use crate::ownership::{SOURCE_ANNOTATION, TEMPLATE_HASH_ANNOTATION, source_annotation};
use crate::source::{ConfigObject, SECRET_TYPE_OPAQUE, effective_secret_type, hex};
use crate::{Error, Result};

/// How the controller writes a desired copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteMode {
    /// The target already has this content: write nothing.
    Unchanged,
    /// Server-side apply the object.
    Apply,
    /// Delete the target, then create the object: its Secret type must change (types are
    /// immutable) or it is `immutable: true` and its data must change.
    Recreate,
}

/// A desired copy and how to write it. `Debug` shows no data value (see [`ConfigObject`]).
#[derive(Clone, PartialEq)]
pub struct DesiredCopy {
    /// The object to apply (or to create after deleting the target, for [`WriteMode::Recreate`]).
    pub object: ConfigObject,
    /// How to write it.
    pub mode: WriteMode,
    /// With [`WriteMode::Apply`]: a JSON merge patch to send as well, removing `data`/`binaryData`
    /// keys the target has and the source does not ([`stray_keys_patch`]).
    pub cleanup: Option<serde_json::Value>,
}

/// By hand: the object is a copy of a Secret's data, and the cleanup patch is JSON, printed through
/// [`RedactedJson`] like every object body (it holds keys and `null`s only, and shows them).
impl fmt::Debug for DesiredCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DesiredCopy")
            .field("object", &self.object)
            .field("mode", &self.mode)
            .field("cleanup", &self.cleanup.as_ref().map(RedactedJson))
            .finish()
    }
}

/// The outcome of the Secret type rules for one source/target pair.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretType {
    /// Apply with this type (the target has none yet, or already has it).
    Apply(String),
    /// The target is `Opaque` and the source has this other type: re-create the target with it.
    Recreate(String),
    /// The target declares a different non-`Opaque` type: an error on the target.
    Conflict {
        /// The target's type.
        target: String,
        /// The source's type (`Opaque` when empty).
        source: String,
    },
}

/// The Secret type rules. `target_type` is `None` when the target does not exist yet or declares no
/// type; on a live cluster every Secret has one (the API server defaults it to `Opaque`).
pub fn secret_type(source_type: Option<&str>, target_type: Option<&str>) -> SecretType {
    let source = effective_secret_type(source_type).to_owned();
    match target_type {
        None | Some("") => SecretType::Apply(source),
        Some(target) if target == source => SecretType::Apply(source),
        Some(SECRET_TYPE_OPAQUE) => SecretType::Recreate(source),
        Some(target) => SecretType::Conflict {
            target: target.to_owned(),
            source,
        },
    }
}

/// Secret types that are never copied (see [`Error::UnsupportedSecretType`]).
pub const UNCOPYABLE_SECRET_TYPES: &[&str] = &["kubernetes.io/service-account-token"];

/// Whether `source` may be copied at all: every ConfigMap, and every Secret except those of
/// [`UNCOPYABLE_SECRET_TYPES`].
pub fn check_copyable(source: &ConfigObject) -> Result<()> {
    let uncopyable = match source {
        ConfigObject::Secret(secret) => secret
            .type_
            .as_deref()
            .filter(|t| UNCOPYABLE_SECRET_TYPES.contains(t)),
        ConfigObject::ConfigMap(_) => None,
    };
    match uncopyable {
        Some(t) => Err(Error::UnsupportedSecretType {
            source_ref: source.source_ref(),
            secret_type: t.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The desired state of a pull copy: `target` (an object carrying `copyFrom`) filled from `source`.
///
/// For [`WriteMode::Apply`] and [`WriteMode::Unchanged`] the object has only the fields conflux
/// owns; the target's labels and annotations (`copyFrom` included) are left to their owners. For
/// [`WriteMode::Recreate`] the object is the whole target (its labels, annotations and
/// `immutable`) with the source's content, so that nothing but the content changes.
pub fn pull_copy(source: &ConfigObject, target: &ConfigObject) -> Result<DesiredCopy> {
    check_copyable(source)?;
    let mut recreate = false;
    let object = match (source, target) {
        (ConfigObject::ConfigMap(src), ConfigObject::ConfigMap(_)) => {
            ConfigObject::ConfigMap(config_map_content(src, identity(target.metadata())))
        }
        (ConfigObject::Secret(src), ConfigObject::Secret(tgt)) => {
            let type_ = match secret_type(src.type_.as_deref(), tgt.type_.as_deref()) {
                SecretType::Apply(t) => t,
                SecretType::Recreate(t) => {
                    recreate = true;
                    t
                }
                SecretType::Conflict {
                    target: t,
                    source: s,
                } => {
                    return Err(Error::SecretTypeConflict(Box::new(
                        crate::error::SecretTypeConflict {
                            source_ref: source.source_ref(),
                            namespace: target.namespace().to_owned(),
                            name: target.name().to_owned(),
                            target_type: t,
                            source_type: s,
                        },
                    )));
                }
            };
            ConfigObject::Secret(secret_content(src, type_, identity(target.metadata())))
        }
        _ => {
            return Err(Error::KindMismatch {
                source_ref: source.source_ref(),
                target_kind: target.kind().as_str(),
            });
        }
    };
    let changed = !object.same_content(target);
    recreate |= changed && target.is_immutable();
    if recreate {
        let mut whole = object;
        let meta = whole.metadata_mut();
        meta.labels = target.metadata().labels.clone();
        meta.annotations = target.metadata().annotations.clone();
        set_immutable(&mut whole, target.is_immutable());
        return Ok(DesiredCopy {
            object: whole,
            mode: WriteMode::Recreate,
            cleanup: None,
        });
    }
    if !changed {
        return Ok(DesiredCopy {
            object,
            mode: WriteMode::Unchanged,
            cleanup: None,
        });
    }
    let cleanup = stray_keys_patch(&object, target);
    Ok(DesiredCopy {
        object,
        mode: WriteMode::Apply,
        cleanup,
    })
}

/// The copy of `source` that `fan_out` wants in `namespace`: the source's content, the fan-out's
/// extra labels and annotations, the owner labels, the source annotation and the template hash.
/// The Secret type is always the source's: conflux owns fan-out copies, so a type change is a
/// re-creation decided by the [plan](crate::steps).
pub fn fan_out_copy(source: &ConfigObject, fan_out: &FanOut, namespace: &str) -> ConfigObject {
    let mut labels = fan_out.labels.clone();
    // Ownership labels last: a template label cannot disown the copy.
    labels.extend(fan_out.owner.labels());
    let mut annotations = fan_out.annotations.clone();
    annotations.insert(
        SOURCE_ANNOTATION.to_owned(),
        source_annotation(&fan_out.source),
    );
    annotations.insert(TEMPLATE_HASH_ANNOTATION.to_owned(), template_hash(fan_out));
    let meta = ObjectMeta {
        name: Some(fan_out.target_name.clone()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    match source {
        ConfigObject::ConfigMap(src) => ConfigObject::ConfigMap(config_map_content(src, meta)),
        ConfigObject::Secret(src) => {
            let type_ = effective_secret_type(src.type_.as_deref()).to_owned();
            ConfigObject::Secret(secret_content(src, type_, meta))
        }
    }
}

/// Digest of what the copies' metadata is made from, so a change to the template (a label removed
/// from `target.labels`) is seen on copies whose data did not change.
pub fn template_hash(fan_out: &FanOut) -> String {
    let mut h = Sha256::new();
    h.update(fan_out.target_name.as_bytes());
    for (tag, map) in [(b'l', &fan_out.labels), (b'a', &fan_out.annotations)] {
        h.update([0, tag]);
        for (k, v) in map {
            h.update((k.len() as u64).to_be_bytes());
            h.update(k.as_bytes());
            h.update((v.len() as u64).to_be_bytes());
            h.update(v.as_bytes());
        }
    }
    hex(&h.finalize()[..8])
}

/// A JSON merge patch removing the `data` (and ConfigMap `binaryData`) keys `observed` has and
/// `desired` does not, or `None` when there are none.
///
/// Server-side apply removes only keys conflux owned; a key someone else added (a `kubectl edit`,
/// the previous owner of an adopted object) survives every apply. A copy must equal its source, so
/// the controller sends this patch along with the apply.
pub fn stray_keys_patch(
    desired: &ConfigObject,
    observed: &ConfigObject,
) -> Option<serde_json::Value> {
    fn stray<V, W>(
        desired: &Option<BTreeMap<String, V>>,
        observed: &Option<BTreeMap<String, W>>,
    ) -> serde_json::Map<String, serde_json::Value> {
        observed
            .iter()
            .flatten()
            .filter(|(k, _)| !desired.as_ref().is_some_and(|d| d.contains_key(*k)))
            .map(|(k, _)| (k.clone(), serde_json::Value::Null))
            .collect()
    }
    let (data, binary_data) = match (desired, observed) {
        (ConfigObject::ConfigMap(d), ConfigObject::ConfigMap(o)) => (
            stray(&d.data, &o.data),
            stray(&d.binary_data, &o.binary_data),
        ),
        (ConfigObject::Secret(d), ConfigObject::Secret(o)) => {
            (stray(&d.data, &o.data), serde_json::Map::new())
        }
        _ => return None,
    };
    let mut patch = serde_json::Map::new();
    if !data.is_empty() {
        patch.insert("data".to_owned(), data.into());
    }
    if !binary_data.is_empty() {
        patch.insert("binaryData".to_owned(), binary_data.into());
    }
    (!patch.is_empty()).then(|| patch.into())
}

/// Name and namespace only: the identity of the object being applied.
fn identity(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        ..ObjectMeta::default()
    }
}

fn config_map_content(src: &ConfigMap, metadata: ObjectMeta) -> ConfigMap {
    ConfigMap {
        metadata,
        // Always present (possibly empty) so that applying it removes keys the source dropped.
        data: Some(src.data.clone().unwrap_or_default()),
        binary_data: src.binary_data.clone().filter(|b| !b.is_empty()),
        immutable: None,
    }
}

fn secret_content(src: &Secret, type_: String, metadata: ObjectMeta) -> Secret {
    Secret {
        metadata,
        data: Some(src.data.clone().unwrap_or_default()),
        string_data: None,
        type_: Some(type_),
        immutable: None,
    }
}

fn set_immutable(object: &mut ConfigObject, immutable: bool) {
    let value = immutable.then_some(true);
    match object {
        ConfigObject::ConfigMap(cm) => cm.immutable = value,
        ConfigObject::Secret(s) => s.immutable = value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy_from::COPY_FROM_ANNOTATION;
    use crate::ownership::{CONFIG_SYNC_LABEL, MANAGED_BY_LABEL};
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn meta(
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> ObjectMeta {
        let map = |p: &[(&str, &str)]| {
            (!p.is_empty()).then(|| {
                p.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            })
        };
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        }
    }

    fn secret(ns: &str, t: Option<&str>, data: &[(&str, &str)]) -> ConfigObject {
        ConfigObject::Secret(Secret {
            metadata: meta(
                ns,
                "tok",
                &[("reconcile.fluxcd.io/watch", "Enabled")],
                &[("note", "src")],
            ),
            type_: t.map(str::to_owned),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        })
    }

    fn target_secret(t: Option<&str>, data: &[(&str, &str)]) -> ConfigObject {
        let mut s = secret("app", t, data);
        *s.metadata_mut() = meta(
            "app",
            "tok",
            &[("team", "a")],
            &[(COPY_FROM_ANNOTATION, "src/tok")],
        );
        s
    }

    fn config_map(
        ns: &str,
        data: &[(&str, &str)],
        binary: Option<&[(&str, &[u8])]>,
    ) -> ConfigObject {
        ConfigObject::ConfigMap(ConfigMap {
            metadata: meta(ns, "cfg", &[("reconcile.fluxcd.io/watch", "Enabled")], &[]),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            binary_data: binary.map(|b| {
                b.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect()
            }),
            ..ConfigMap::default()
        })
    }

    #[test]
    fn secret_type_table() {
        use SecretType::*;
        let s = str::to_owned;
        let cases = [
            (None, None, Apply(s("Opaque"))),
            (Some(""), None, Apply(s("Opaque"))),
            (
                Some("kubernetes.io/tls"),
                None,
                Apply(s("kubernetes.io/tls")),
            ),
            (
                Some("kubernetes.io/tls"),
                Some(""),
                Apply(s("kubernetes.io/tls")),
            ),
            (None, Some("Opaque"), Apply(s("Opaque"))),
            (
                Some("kubernetes.io/tls"),
                Some("kubernetes.io/tls"),
                Apply(s("kubernetes.io/tls")),
            ),
            (
                Some("kubernetes.io/tls"),
                Some("Opaque"),
                Recreate(s("kubernetes.io/tls")),
            ),
            (
                Some("kubernetes.io/tls"),
                Some("kubernetes.io/dockerconfigjson"),
                Conflict {
                    target: s("kubernetes.io/dockerconfigjson"),
                    source: s("kubernetes.io/tls"),
                },
            ),
            (
                None,
                Some("kubernetes.io/tls"),
                Conflict {
                    target: s("kubernetes.io/tls"),
                    source: s("Opaque"),
                },
            ),
        ];
        for (source, target, want) in cases {
            assert_eq!(secret_type(source, target), want, "{source:?} → {target:?}");
        }
    }

    #[test]
    fn pull_secret_copies_data_as_data_only() {
        let source = secret(
            "src",
            Some("kubernetes.io/basic-auth"),
            &[("username", "u"), ("password", "p")],
        );
        let target = target_secret(None, &[("stale", "x")]);
        let desired = pull_copy(&source, &target).unwrap();
        assert_eq!(desired.mode, WriteMode::Apply);
        let ConfigObject::Secret(s) = &desired.object else {
            panic!("kind")
        };
        assert_eq!(
            s.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
            ["password", "username"]
        );
        assert_eq!(s.string_data, None);
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        // Only what we own: no labels or annotations, from the source or the target.
        assert_eq!(s.metadata, identity(target.metadata()));
        let json = serde_json::to_value(&desired.object).unwrap();
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["kind"], "Secret");
        assert_eq!(json["data"]["username"], "dQ==", "base64 on the wire");
    }

    #[test]
    fn pull_removes_keys_the_source_does_not_have() {
        let source = secret("src", None, &[("k", "v")]);
        let target = target_secret(Some("Opaque"), &[("k", "old"), ("added-by-hand", "x")]);
        let desired = pull_copy(&source, &target).unwrap();
        assert_eq!(desired.mode, WriteMode::Apply);
        assert_eq!(
            desired.cleanup,
            Some(serde_json::json!({"data": {"added-by-hand": null}}))
        );
        let cm_source = config_map("src", &[("a", "1")], None);
        let cm_target = config_map("app", &[("a", "1"), ("b", "2")], Some(&[("bin", &[1])]));
        assert_eq!(
            pull_copy(&cm_source, &cm_target).unwrap().cleanup,
            Some(serde_json::json!({"data": {"b": null}, "binaryData": {"bin": null}}))
        );
        let in_sync = target_secret(Some("Opaque"), &[("k", "v")]);
        assert_eq!(pull_copy(&source, &in_sync).unwrap().cleanup, None);
    }

    #[test]
    fn pull_unchanged_when_content_matches() {
        let source = secret("src", None, &[("k", "v")]);
        let target = target_secret(Some("Opaque"), &[("k", "v")]);
        assert_eq!(
            pull_copy(&source, &target).unwrap().mode,
            WriteMode::Unchanged
        );
    }

    #[test]
    fn pull_secret_type_change_recreates_whole_target() {
        let source = secret(
            "src",
            Some("kubernetes.io/tls"),
            &[("tls.crt", "c"), ("tls.key", "k")],
        );
        let target = target_secret(Some("Opaque"), &[]);
        let desired = pull_copy(&source, &target).unwrap();
        assert_eq!(desired.mode, WriteMode::Recreate);
        let ConfigObject::Secret(s) = &desired.object else {
            panic!("kind")
        };
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        // The re-created object keeps the target's own metadata, copyFrom included.
        assert_eq!(s.metadata.annotations, target.metadata().annotations);
        assert_eq!(s.metadata.labels, target.metadata().labels);
    }

    #[test]
    fn pull_secret_type_conflict_is_an_error_without_data() {
        let source = secret(
            "src",
            Some("kubernetes.io/tls"),
            &[("tls.key", "SECRET-VALUE")],
        );
        let target = target_secret(Some("kubernetes.io/dockerconfigjson"), &[]);
        let err = pull_copy(&source, &target).unwrap_err();
        let msg = err.to_string();
        assert_eq!(
            msg,
            "cannot copy Secret/src/tok into Secret app/tok: the target has type 'kubernetes.io/dockerconfigjson' but the source has type 'kubernetes.io/tls'"
        );
        assert!(!msg.contains("SECRET-VALUE"));
    }

    #[test]
    fn pull_immutable_target_recreated_only_when_content_differs() {
        let source = secret("src", None, &[("k", "v2")]);
        let mut target = target_secret(Some("Opaque"), &[("k", "v1")]);
        if let ConfigObject::Secret(s) = &mut target {
            s.immutable = Some(true);
        }
        let desired = pull_copy(&source, &target).unwrap();
        assert_eq!(desired.mode, WriteMode::Recreate);
        assert!(
            desired.object.is_immutable(),
            "the re-created target stays immutable"
        );
        let same = secret("src", None, &[("k", "v1")]);
        assert_eq!(
            pull_copy(&same, &target).unwrap().mode,
            WriteMode::Unchanged
        );
    }

    #[test]
    fn pull_config_map_data_and_binary_data() {
        let source = config_map("src", &[("a", "1")], Some(&[("bin", &[0, 1, 2])]));
        let target = config_map("app", &[("a", "0"), ("gone", "x")], None);
        let desired = pull_copy(&source, &target).unwrap();
        assert_eq!(desired.mode, WriteMode::Apply);
        let ConfigObject::ConfigMap(cm) = &desired.object else {
            panic!("kind")
        };
        assert_eq!(
            cm.data,
            Some(BTreeMap::from([("a".to_owned(), "1".to_owned())]))
        );
        assert_eq!(cm.binary_data.as_ref().unwrap()["bin"].0, [0, 1, 2]);
        assert_eq!(cm.metadata.labels, None, "source labels are not copied");
        // A source without binaryData leaves binaryData out of the apply.
        let plain = config_map("src", &[("a", "1")], None);
        let ConfigObject::ConfigMap(cm) = pull_copy(&plain, &target).unwrap().object else {
            panic!("kind")
        };
        assert_eq!(cm.binary_data, None);
        // Empty source data is an empty map, so every key of the target we own goes.
        let empty = config_map("src", &[], None);
        let ConfigObject::ConfigMap(cm) = pull_copy(&empty, &target).unwrap().object else {
            panic!("kind")
        };
        assert_eq!(cm.data, Some(BTreeMap::new()));
    }

    #[test]
    fn pull_kind_mismatch() {
        let err = pull_copy(&config_map("src", &[], None), &target_secret(None, &[])).unwrap_err();
        assert_eq!(err.reason(), "KindMismatch");
    }

    #[test]
    fn fan_out_copy_carries_template_and_ownership_only() {
        let spec: crate::config_sync::ConfigSyncSpec = serde_json::from_value(serde_json::json!({
            "source": {"kind": "Secret", "namespace": "src", "name": "tok"},
            "target": {
                "labels": {"reconcile.fluxcd.io/watch": "Enabled", MANAGED_BY_LABEL: "someone-else"},
                "annotations": {"team": "platform"},
            },
        }))
        .unwrap();
        let fan_out = FanOut::from_config_sync("tok-everywhere", &spec).unwrap();
        let copy = fan_out_copy(&secret("src", None, &[("k", "v")]), &fan_out, "team-a");
        let m = copy.metadata();
        assert_eq!(copy.namespace(), "team-a");
        assert_eq!(copy.name(), "tok");
        let labels = m.labels.as_ref().unwrap();
        assert_eq!(
            labels[MANAGED_BY_LABEL], "conflux",
            "ownership wins over template labels"
        );
        assert_eq!(labels[CONFIG_SYNC_LABEL], "tok-everywhere");
        assert_eq!(labels["reconcile.fluxcd.io/watch"], "Enabled");
        let annotations = m.annotations.as_ref().unwrap();
        assert_eq!(annotations[SOURCE_ANNOTATION], "Secret/src/tok");
        assert_eq!(annotations["team"], "platform");
        assert!(
            !annotations.contains_key("note"),
            "source annotations are not copied"
        );
        assert_eq!(copy.secret_type(), Some("Opaque"));
        assert!(copy.same_content(&secret("src", None, &[("k", "v")])));
    }

    #[test]
    fn template_hash_changes_with_template_only() {
        let spec = |labels: serde_json::Value| -> crate::config_sync::ConfigSyncSpec {
            serde_json::from_value(serde_json::json!({
                "source": {"kind": "ConfigMap", "namespace": "src", "name": "cfg"},
                "target": {"labels": labels},
            }))
            .unwrap()
        };
        let a = FanOut::from_config_sync("x", &spec(serde_json::json!({"a": "1"}))).unwrap();
        let b = FanOut::from_config_sync("x", &spec(serde_json::json!({}))).unwrap();
        let a2 = FanOut::from_config_sync("y", &spec(serde_json::json!({"a": "1"}))).unwrap();
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a), template_hash(&a2));
        assert_eq!(template_hash(&a).len(), 16);
    }
}
