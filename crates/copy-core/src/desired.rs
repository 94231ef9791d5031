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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use conflux_watch_index::redact::RedactedJson;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::copy_from::PullVia;
use crate::fan_out::FanOut;
use crate::ownership::{
    COPIED_KEYS_ANNOTATION, OWNERSHIP_LABELS, SOURCE_ANNOTATION, TEMPLATE_HASH_ANNOTATION,
    source_annotation,
};
use crate::replicator;
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
    pull_copy_as(source, target, PullVia::CopyFrom)
}

/// [`pull_copy`] for a target asking through `via`.
///
/// copyFrom and reflector's `reflects` replace the target's data with the source's. replicator's
/// `replicate-from` merges it: keys the target has of its own stay, keys copied earlier and since
/// removed at the source go. Which keys were copied earlier is read from
/// [`COPIED_KEYS_ANNOTATION`], which conflux sets on such targets (the applied object carries it),
/// and from replicator's own `replicated-keys`, so a key removed while switching from replicator
/// goes too.
pub fn pull_copy_as(
    source: &ConfigObject,
    target: &ConfigObject,
    via: PullVia,
) -> Result<DesiredCopy> {
    check_copyable(source)?;
    let mut recreate = false;
    let mut object = match (source, target) {
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
    // What the target holds once written, and the merge patch removing what must go.
    let (expected, cleanup, annotation) = if via.merges() {
        let stale = stale_keys(source, target);
        let copied = copied_keys(source);
        let expected = merged(&object, target, &stale);
        let cleanup = removal_patch(target, &object, &stale);
        object.metadata_mut().annotations = Some(BTreeMap::from([(
            COPIED_KEYS_ANNOTATION.to_owned(),
            copied.clone(),
        )]));
        (expected, cleanup, Some(copied))
    } else {
        let cleanup = stray_keys_patch(&object, target);
        (object.clone(), cleanup, None)
    };
    let recorded = target
        .metadata()
        .annotations
        .as_ref()
        .and_then(|a| a.get(COPIED_KEYS_ANNOTATION));
    let changed =
        !expected.same_content(target) || annotation.as_ref().is_some_and(|a| recorded != Some(a));
    recreate |= changed && target.is_immutable();
    if recreate {
        let mut whole = expected;
        let meta = whole.metadata_mut();
        meta.name = target.metadata().name.clone();
        meta.namespace = target.metadata().namespace.clone();
        meta.labels = target.metadata().labels.clone();
        meta.annotations = target.metadata().annotations.clone();
        if let Some(copied) = annotation {
            meta.annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(COPIED_KEYS_ANNOTATION.to_owned(), copied);
        }
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
    Ok(DesiredCopy {
        object,
        mode: WriteMode::Apply,
        cleanup,
    })
}

/// What `target` holds once the pull copy through `via` is written: its metadata and the content
/// [`pull_copy_as`] gives it (the source's, merged with the target's own keys for
/// replicate-from). For audits, which show the cluster as it would be.
pub fn pulled(source: &ConfigObject, target: &ConfigObject, via: PullVia) -> Result<ConfigObject> {
    let desired = pull_copy_as(source, target, via)?;
    let mut content = match desired.mode {
        WriteMode::Recreate => return Ok(desired.object),
        WriteMode::Unchanged => target.clone(),
        _ if via.merges() => merged(&desired.object, target, &stale_keys(source, target)),
        _ => desired.object,
    };
    *content.metadata_mut() = target.metadata().clone();
    Ok(content)
}

/// The [`COPIED_KEYS_ANNOTATION`] value for a copy of `source`: its keys, sorted, comma-separated
/// (keys cannot contain commas).
fn copied_keys(source: &ConfigObject) -> String {
    let keys: BTreeSet<&str> = source.keys().collect();
    keys.into_iter().collect::<Vec<_>>().join(",")
}

/// Keys copied into `target` earlier (by conflux or by replicator) that `source` no longer has.
fn stale_keys(source: &ConfigObject, target: &ConfigObject) -> BTreeSet<String> {
    let annotations = target.metadata().annotations.as_ref();
    let mut previous = replicator::replicated_keys(annotations);
    if let Some(list) = annotations.and_then(|a| a.get(COPIED_KEYS_ANNOTATION)) {
        previous.extend(list.split(',').filter(|k| !k.is_empty()).map(str::to_owned));
    }
    let current: BTreeSet<&str> = source.keys().collect();
    previous.retain(|k| !current.contains(k.as_str()));
    previous
}

/// `target`'s content with the `stale` keys removed and `copy`'s content laid over it (a key that
/// moves between ConfigMap `data` and `binaryData` leaves the other map).
fn merged(copy: &ConfigObject, target: &ConfigObject, stale: &BTreeSet<String>) -> ConfigObject {
    fn overlay<V: Clone>(
        own: &Option<BTreeMap<String, V>>,
        drop: impl Fn(&str) -> bool,
        copied: &Option<BTreeMap<String, V>>,
    ) -> Option<BTreeMap<String, V>> {
        let mut out: BTreeMap<String, V> = own
            .iter()
            .flatten()
            .filter(|(k, _)| !drop(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.extend(copied.iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
        Some(out)
    }
    let mut out = copy.clone();
    match (&mut out, target) {
        (ConfigObject::ConfigMap(c), ConfigObject::ConfigMap(t)) => {
            let in_binary = |k: &str| c.binary_data.as_ref().is_some_and(|b| b.contains_key(k));
            let in_data = |k: &str| c.data.as_ref().is_some_and(|d| d.contains_key(k));
            let data = overlay(&t.data, |k| stale.contains(k) || in_binary(k), &c.data);
            let binary = overlay(
                &t.binary_data,
                |k| stale.contains(k) || in_data(k),
                &c.binary_data,
            );
            c.data = data;
            c.binary_data = binary.filter(|b| !b.is_empty());
        }
        (ConfigObject::Secret(c), ConfigObject::Secret(t)) => {
            c.data = overlay(&t.data, |k| stale.contains(k), &c.data);
        }
        _ => {}
    }
    out
}

/// A JSON merge patch removing from `target` the `stale` keys and the keys `copy` puts in the other
/// ConfigMap map, or `None` when it has none of them.
fn removal_patch(
    target: &ConfigObject,
    copy: &ConfigObject,
    stale: &BTreeSet<String>,
) -> Option<serde_json::Value> {
    fn nulls<V, W>(
        own: &Option<BTreeMap<String, V>>,
        other: &Option<BTreeMap<String, W>>,
        stale: &BTreeSet<String>,
    ) -> serde_json::Map<String, serde_json::Value> {
        own.iter()
            .flatten()
            .filter(|(k, _)| {
                stale.contains(*k) || other.as_ref().is_some_and(|o| o.contains_key(*k))
            })
            .map(|(k, _)| (k.clone(), serde_json::Value::Null))
            .collect()
    }
    let none: Option<BTreeMap<String, String>> = None;
    let (data, binary_data) = match (target, copy) {
        (ConfigObject::ConfigMap(t), ConfigObject::ConfigMap(c)) => (
            nulls(&t.data, &c.binary_data, stale),
            nulls(&t.binary_data, &c.data, stale),
        ),
        (ConfigObject::Secret(t), _) => (nulls(&t.data, &none, stale), serde_json::Map::new()),
        _ => return None,
    };
    key_removal(data, binary_data)
}

/// The merge patch `{"data": {..}, "binaryData": {..}}` of the keys to null, without an empty
/// part; `None` when there is nothing to remove.
fn key_removal(
    data: serde_json::Map<String, serde_json::Value>,
    binary_data: serde_json::Map<String, serde_json::Value>,
) -> Option<serde_json::Value> {
    let mut patch = serde_json::Map::new();
    if !data.is_empty() {
        patch.insert("data".to_owned(), data.into());
    }
    if !binary_data.is_empty() {
        patch.insert("binaryData".to_owned(), binary_data.into());
    }
    (!patch.is_empty()).then(|| patch.into())
}

/// The copy of `source` that `fan_out` wants in `namespace`: the source's content, the fan-out's
/// extra labels and annotations, the owner labels, the source annotation and the template hash.
/// The Secret type is always the source's: conflux owns fan-out copies, so a type change is a
/// re-creation decided by the [plan](crate::steps).
pub fn fan_out_copy(source: &ConfigObject, fan_out: &FanOut, namespace: &str) -> ConfigObject {
    let mut labels = fan_out.labels.clone();
    // No other owner's labels (a replicator source that is itself a copy would pass its own on):
    // two owners of one copy would take turns pruning and re-creating it.
    labels.retain(|key, _| !OWNERSHIP_LABELS.contains(&key.as_str()));
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
    key_removal(data, binary_data)
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

    /// What the API server ends up with after `desired` is written over `target`: the applied keys
    /// over what is there, the cleanup's keys removed, conflux's annotations set (a sketch of
    /// server-side apply, enough for the keys and annotations pulled copies touch).
    fn written(target: &ConfigObject, desired: &DesiredCopy) -> ConfigObject {
        if desired.mode == WriteMode::Recreate {
            return desired.object.clone();
        }
        let mut out = target.clone();
        if desired.mode == WriteMode::Unchanged {
            return out;
        }
        let nulled = |field: &str, k: &str| {
            desired
                .cleanup
                .as_ref()
                .is_some_and(|c| c[field].get(k).is_some())
        };
        if let Some(annotations) = &desired.object.metadata().annotations {
            out.metadata_mut()
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(annotations.clone());
        }
        match (&mut out, &desired.object) {
            (ConfigObject::Secret(o), ConfigObject::Secret(a)) => {
                let data = o.data.get_or_insert_with(BTreeMap::new);
                data.retain(|k, _| !nulled("data", k));
                data.extend(a.data.clone().unwrap_or_default());
                o.type_ = a.type_.clone();
            }
            (ConfigObject::ConfigMap(o), ConfigObject::ConfigMap(a)) => {
                let data = o.data.get_or_insert_with(BTreeMap::new);
                data.retain(|k, _| !nulled("data", k));
                data.extend(a.data.clone().unwrap_or_default());
                let binary = o.binary_data.get_or_insert_with(BTreeMap::new);
                binary.retain(|k, _| !nulled("binaryData", k));
                binary.extend(a.binary_data.clone().unwrap_or_default());
            }
            _ => panic!("kinds differ"),
        }
        out
    }

    fn keys(object: &ConfigObject) -> Vec<String> {
        let mut keys: Vec<String> = object.keys().map(str::to_owned).collect();
        keys.sort();
        keys
    }

    /// replicate-from merges: the target's own keys stay, keys copied earlier and removed at the
    /// source go, and once written a second pull writes nothing (no reconcile loop).
    #[test]
    fn replicate_from_merges_and_settles() {
        let via = PullVia::ReplicateFrom;
        let mut target = target_secret(Some("Opaque"), &[("own", "mine")]);
        for (source_keys, want) in [
            (&[("a", "1"), ("b", "2")][..], &["a", "b", "own"][..]),
            (&[("a", "1")][..], &["a", "own"][..]),
            (&[("a", "10"), ("c", "3")][..], &["a", "c", "own"][..]),
            (&[][..], &["own"][..]),
        ] {
            let source = secret("src", None, source_keys);
            let desired = pull_copy_as(&source, &target, via).unwrap();
            target = written(&target, &desired);
            assert_eq!(keys(&target), want, "after copying {source_keys:?}");
            let again = pull_copy_as(&source, &target, via).unwrap();
            assert_eq!(
                again.mode,
                WriteMode::Unchanged,
                "settled after {source_keys:?}"
            );
            assert_eq!(pulled(&source, &target, via).unwrap(), target);
        }
        let ConfigObject::Secret(s) = &target else {
            panic!("kind")
        };
        assert_eq!(
            s.data.as_ref().unwrap()["own"].0,
            b"mine",
            "the target's own key is untouched"
        );
    }

    /// Switching from replicator: the keys it recorded as copied (`replicated-keys`) and the
    /// source no longer has go too; the applied object carries only the source's keys and
    /// conflux's record of them.
    #[test]
    fn replicate_from_honours_replicators_record() {
        let source = secret("src", None, &[("a", "1")]);
        let mut target = target_secret(Some("Opaque"), &[("a", "0"), ("gone", "x"), ("own", "y")]);
        target
            .metadata_mut()
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(replicator::REPLICATED_KEYS.to_owned(), "a,gone".to_owned());
        let desired = pull_copy_as(&source, &target, PullVia::ReplicateFrom).unwrap();
        assert_eq!(desired.mode, WriteMode::Apply);
        assert_eq!(
            desired.cleanup,
            Some(serde_json::json!({"data": {"gone": null}}))
        );
        let applied = desired.object.metadata();
        assert_eq!(
            applied.annotations.as_ref().unwrap()[COPIED_KEYS_ANNOTATION],
            "a"
        );
        assert_eq!(applied.labels, None);
        assert_eq!(keys(&written(&target, &desired)), ["a", "own"]);
        // copyFrom and reflects replace instead.
        for via in [PullVia::CopyFrom, PullVia::Reflects] {
            let desired = pull_copy_as(&source, &target, via).unwrap();
            assert_eq!(keys(&written(&target, &desired)), ["a"], "{via:?}");
        }
    }

    /// A merged ConfigMap key that moves between `data` and `binaryData` leaves the other map,
    /// and an immutable replica is re-created with the merged content.
    #[test]
    fn replicate_from_config_map_moves_and_immutable() {
        let via = PullVia::ReplicateFrom;
        let source = config_map("src", &[("k", "text")], None);
        let target = config_map("app", &[("own", "o")], Some(&[("k", &[1])]));
        let desired = pull_copy_as(&source, &target, via).unwrap();
        assert_eq!(
            desired.cleanup,
            Some(serde_json::json!({"binaryData": {"k": null}}))
        );
        let after = written(&target, &desired);
        let ConfigObject::ConfigMap(cm) = &after else {
            panic!("kind")
        };
        assert_eq!(cm.data.as_ref().unwrap()["k"], "text");
        assert!(cm.binary_data.as_ref().is_none_or(|b| b.is_empty()));
        let mut frozen = target_secret(Some("Opaque"), &[("own", "o"), ("a", "old")]);
        if let ConfigObject::Secret(s) = &mut frozen {
            s.immutable = Some(true);
        }
        let desired = pull_copy_as(&secret("src", None, &[("a", "new")]), &frozen, via).unwrap();
        assert_eq!(desired.mode, WriteMode::Recreate);
        assert_eq!(keys(&desired.object), ["a", "own"]);
        assert!(desired.object.is_immutable());
        assert_eq!(
            desired.object.metadata().annotations.as_ref().unwrap()[COPIED_KEYS_ANNOTATION],
            "a"
        );
        assert_eq!(desired.object.name(), "tok");
    }
}
