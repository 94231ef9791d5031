//! Strategic-merge patches, where the built-in engine applies them exactly as kustomize does.
//! For kinds without an OpenAPI schema, which is every custom resource (Flux's Kustomizations
//! and HelmReleases above all), kustomize's strategic merge is a JSON merge patch (RFC 7386):
//! maps are merged, `null` deletes a key, a list is replaced whole (checked against kustomize
//! v5.8.2). Kubernetes' own kinds are merged with the schema's list keys, so a patch of one that
//! holds a list is refused (a `KustomizeUnsupported` finding), as are patch directives
//! (`$patch`, `$setElementOrder`, ...).

use serde_json::{Map, Value};

/// The API groups of Kubernetes' own kinds (kustomize merges them with the schema's list keys).
const BUILT_IN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// The API group of `apiVersion` (`""` for the core group).
pub(super) fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// `Err(why)` when `patch`, for objects of `group`, is not applied exactly by [`merge`].
pub(super) fn supported(patch: &Value, group: &str) -> Result<(), String> {
    if let Some(directive) = directive(patch) {
        return Err(format!(
            "the strategic-merge directive '{directive}' is not applied by the built-in kustomize"
        ));
    }
    if BUILT_IN_GROUPS.contains(&group) && has_list(patch) {
        return Err(
            "a strategic-merge patch with a list, on a Kubernetes kind, is not applied by the built-in kustomize (kustomize merges it with the schema's list keys)"
                .to_owned(),
        );
    }
    Ok(())
}

fn directive(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map.iter().find_map(|(key, value)| {
            if key.starts_with('$') {
                Some(key.clone())
            } else {
                directive(value)
            }
        }),
        Value::Array(list) => list.iter().find_map(directive),
        _ => None,
    }
}

fn has_list(value: &Value) -> bool {
    match value {
        Value::Array(_) => true,
        Value::Object(map) => map.values().any(has_list),
        _ => false,
    }
}

/// Merges `patch` into `target` (see the module docs).
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => merge_maps(target, patch),
        (target, patch) => *target = without_nulls(patch),
    }
}

fn merge_maps(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else if let Some(existing) = target.get_mut(key) {
            merge(existing, value);
        } else {
            target.insert(key.clone(), without_nulls(value));
        }
    }
}

fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}
