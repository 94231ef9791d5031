//! The writes of copies, and the reads they need: server-side apply with field manager `conflux`
//! and `force`, the cleanup merge patch, delete, and delete-and-create where a field is immutable.
//! Every request is bounded in time (by the runtime's client); errors name the object and the
//! action, never data.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::ownership::FIELD_MANAGER;
use crate::{ConfigObject, Result, SourceKind};

/// Reads a ConfigMap or Secret with its data; `None` when it does not exist.
pub async fn get_object(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
) -> Result<Option<ConfigObject>> {
    let action = format!("reading {kind} {namespace}/{name}");
    Ok(match kind {
        SourceKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(ConfigObject::from)
        }
        SourceKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(ConfigObject::from)
        }
    })
}

/// Lists ConfigMaps or Secrets in every namespace, with their data (for one reconcile only).
pub async fn list_objects(
    client: &Client,
    kind: SourceKind,
    params: &ListParams,
) -> Result<Vec<ConfigObject>> {
    let action = format!("listing {kind}s");
    Ok(match kind {
        SourceKind::ConfigMap => {
            let api = Api::<ConfigMap>::all(client.clone());
            api.list(params)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .items
                .into_iter()
                .map(ConfigObject::from)
                .collect()
        }
        SourceKind::Secret => {
            let api = Api::<Secret>::all(client.clone());
            api.list(params)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .items
                .into_iter()
                .map(ConfigObject::from)
                .collect()
        }
    })
}

/// Server-side applies `object` with field manager `conflux` and `force`.
pub async fn apply(client: &Client, object: &ConfigObject) -> Result<()> {
    apply_returning_meta(client, object).await.map(drop)
}

/// [`apply`], returning the metadata of the object written (a uid other than the one read means
/// the apply created the object anew).
pub async fn apply_returning_meta(
    client: &Client,
    object: &ConfigObject,
) -> Result<kube::api::ObjectMeta> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let (namespace, name) = (object.namespace(), object.name());
    let action = format!("applying {} {namespace}/{name}", object.kind());
    Ok(match object {
        ConfigObject::ConfigMap(cm) => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(cm))
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .metadata
        }
        ConfigObject::Secret(s) => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(s))
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .metadata
        }
    })
}

/// Sends a JSON merge patch (cleanup of stray keys, release of ownership).
pub async fn merge_patch(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let action = format!("patching {kind} {namespace}/{name}");
    match kind {
        SourceKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
        SourceKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
    }
    Ok(())
}

/// Deletes an object; a missing one is fine.
pub async fn delete(client: &Client, kind: SourceKind, namespace: &str, name: &str) -> Result<()> {
    delete_with(client, kind, namespace, name, DeleteParams::default()).await
}

/// Deletes the object with uid `uid` (and no other object of that name); a missing one is fine.
pub async fn delete_uid(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<()> {
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    delete_with(client, kind, namespace, name, dp).await
}

async fn delete_with(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    dp: DeleteParams,
) -> Result<()> {
    let action = format!("deleting {kind} {namespace}/{name}");
    let result = match kind {
        SourceKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            api.delete(name, &dp)
                .await
                .map_err(conflux_runtime::Error::api(action))
                .map(drop)
        }
        SourceKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.delete(name, &dp)
                .await
                .map_err(conflux_runtime::Error::api(action))
                .map(drop)
        }
    };
    match result {
        Err(conflux_runtime::Error::Api { source, .. }) if source.is_not_found() => Ok(()),
        other => Ok(other?),
    }
}

/// Deletes the object and creates `object` in its place (Secret `type` and `immutable` data cannot
/// be patched).
pub async fn recreate(client: &Client, object: &ConfigObject) -> Result<()> {
    let (namespace, name) = (object.namespace(), object.name());
    delete(client, object.kind(), namespace, name).await?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let action = format!("creating {} {namespace}/{name}", object.kind());
    match object {
        ConfigObject::ConfigMap(cm) => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            api.create(&params, cm)
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
        ConfigObject::Secret(s) => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.create(&params, s)
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
    }
    Ok(())
}

/// The reference of a ConfigMap/Secret for an Event.
pub fn object_reference(kind: SourceKind, meta: &kube::api::ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some(kind.as_str().to_owned()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..ObjectReference::default()
    }
}
