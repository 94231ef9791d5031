//! A tenant controller that puts a copy of a shared Secret (say `flux-system/ghcr-auth`) into each
//! namespace it manages, with copy-core's rules instead of its own:
//!
//! - consent: a copy into another namespace needs the source's
//!   `copy.conflux.dev/allowed-namespaces` annotation to allow it ([`consent::check`]);
//! - the desired copy ([`pull_copy`]): the source's data as base64 `data` (never `stringData`), its
//!   type, none of its labels or annotations, and how to write it: nothing, a server-side apply
//!   (plus a merge patch removing keys the source does not have), or delete-and-create when the
//!   Secret type or `immutable` forbids a patch;
//! - the writes ([`executor`]): server-side apply with field manager `conflux`, each request
//!   bounded in time, errors naming the object and never its data.
//!
//! [`desired_copy`] is pure; [`sync`] reads and writes through a client. [`redacted`] is the only
//! way this example shows a Secret: every data value is replaced by its length.

use conflux_copy_core::desired::{DesiredCopy, WriteMode, pull_copy};
use conflux_copy_core::runtime::executor;
use conflux_copy_core::{ConfigObject, SourceKind, SourceRef, consent};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use serde_json::{Value, json};

/// The desired copy of `source` in `target_namespace`, given what is there now (`observed`,
/// `None` when there is no Secret of that name yet).
///
/// Fails when the source does not consent to copies into `target_namespace`, or when an existing
/// target has another non-`Opaque` type.
pub fn desired_copy(
    source: &Secret,
    target_namespace: &str,
    observed: Option<&Secret>,
) -> conflux_copy_core::Result<DesiredCopy> {
    let source = ConfigObject::from(source.clone());
    let source_ref = source.source_ref();
    consent::check(
        &source_ref,
        source.metadata().annotations.as_ref(),
        target_namespace,
    )?;
    // With no target yet, the copy starts from an empty Secret of the same name: the type rules
    // then take the source's type.
    let target = match observed {
        Some(target) => ConfigObject::from(target.clone()),
        None => ConfigObject::from(Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(source_ref.name.clone()),
                namespace: Some(target_namespace.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }),
    };
    pull_copy(&source, &target)
}

/// Copies the Secret `source_namespace/name` into `target_namespace` on a cluster and says how it
/// was written. Secret data passes through memory only for this call.
pub async fn sync(
    client: &Client,
    source_namespace: &str,
    name: &str,
    target_namespace: &str,
) -> conflux_copy_core::Result<WriteMode> {
    let source_ref = SourceRef::new(SourceKind::Secret, source_namespace, name);
    let source = executor::get_object(client, SourceKind::Secret, source_namespace, name)
        .await?
        .ok_or_else(|| source_ref.unavailable(format!("secrets \"{name}\" not found")))?;
    let ConfigObject::Secret(source) = source else {
        return Err(source_ref.unavailable("not a Secret"));
    };
    let observed =
        match executor::get_object(client, SourceKind::Secret, target_namespace, name).await? {
            Some(ConfigObject::Secret(s)) => Some(s),
            _ => None,
        };
    let desired = desired_copy(&source, target_namespace, observed.as_ref())?;
    match desired.mode {
        WriteMode::Unchanged => {}
        WriteMode::Apply => {
            executor::apply(client, &desired.object).await?;
            // Keys someone else added to the copy are not ours to drop by apply; patch them away.
            if let Some(cleanup) = &desired.cleanup {
                executor::merge_patch(client, SourceKind::Secret, target_namespace, name, cleanup)
                    .await?;
            }
        }
        WriteMode::Recreate => executor::recreate(client, &desired.object).await?,
        // A write mode newer than this example: leave the copy as it is.
        _ => {}
    }
    Ok(desired.mode)
}

/// The object as JSON with every Secret data value replaced by `<redacted: N bytes>`, for
/// printing. ConfigMaps are returned as they are.
pub fn redacted(object: &ConfigObject) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(object)?;
    if let ConfigObject::Secret(secret) = object {
        for (key, bytes) in secret.data.iter().flatten() {
            value["data"][key] = json!(format!("<redacted: {} bytes>", bytes.0.len()));
        }
        if let Some(string_data) = value.get_mut("stringData").and_then(Value::as_object_mut) {
            for v in string_data.values_mut() {
                *v = json!("<redacted>");
            }
        }
    }
    Ok(value)
}

/// The demo's source: a registry credential in `flux-system` that consents to copies into
/// `team-*` namespaces. The data is a placeholder.
pub fn demo_source() -> Result<Secret, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "ghcr-auth", "namespace": "flux-system",
            "labels": {"reconcile.fluxcd.io/watch": "Enabled"},
            "annotations": {"copy.conflux.dev/allowed-namespaces": "team-*"},
        },
        "type": "kubernetes.io/dockerconfigjson",
        // `{"auths":{}}`, base64.
        "data": {".dockerconfigjson": "eyJhdXRocyI6e319"},
    }))
}
