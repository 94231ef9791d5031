//! Strategic-merge patches, where the built-in engine applies them exactly as kustomize does.
//! For kinds without an OpenAPI schema, which is every custom resource (Flux's Kustomizations
//! and HelmReleases above all), kustomize's strategic merge is a JSON merge patch (RFC 7386):
//! maps are merged, `null` deletes a key, a list is replaced whole (checked against kustomize
//! v5.8.2). Kubernetes' own kinds are merged with the schema's list keys, so a patch of one that
//! holds a list is refused (a `KustomizeUnsupported` finding). Of the patch directives, `$patch`
//! on a map is applied (`delete` removes the field, `replace` replaces it whole, `merge` is the
//! default), and `$patch: delete` on the whole patch deletes the objects it selects; the others
//! (`$patch` in a list, `$setElementOrder`, `$retainKeys`, ...) are refused.

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

/// `Err(why)` when `patch`, for objects of `group`, is not applied exactly by [`merge`] (or, for
/// a `$patch: delete` patch, by deleting the objects).
pub(super) fn supported(patch: &Value, group: &str) -> Result<(), String> {
    if let Some(directive) = directive(patch, Place::Top) {
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

/// Where a map of the patch is.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Top,
    Map,
    List,
}

/// The first directive [`merge`] does not apply.
fn directive(value: &Value, place: Place) -> Option<String> {
    match value {
        Value::Object(map) => map.iter().find_map(|(key, value)| {
            let applied = key == PATCH
                && matches!(
                    (place, value.as_str()),
                    (Place::Top, Some("delete" | "merge"))
                        | (Place::Map, Some("delete" | "replace" | "merge"))
                );
            if applied {
                None
            } else if key.starts_with('$') {
                Some(key.clone())
            } else if place == Place::List {
                directive(value, Place::List)
            } else {
                directive(value, Place::Map)
            }
        }),
        Value::Array(list) => list.iter().find_map(|v| directive(v, Place::List)),
        _ => None,
    }
}

/// The strategic-merge directive key.
const PATCH: &str = "$patch";

/// Whether `patch` as a whole says `$patch: delete`: the objects it selects are deleted.
pub(super) fn deletes(patch: &Value) -> bool {
    patch.get(PATCH).and_then(Value::as_str) == Some("delete")
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
        if key == PATCH {
            continue;
        }
        match value.get(PATCH).and_then(Value::as_str) {
            Some("delete") => {
                target.remove(key);
                continue;
            }
            Some("replace") => {
                let mut fresh = Value::Object(Map::new());
                merge(&mut fresh, value);
                target.insert(key.clone(), fresh);
                continue;
            }
            _ => {}
        }
        if value.is_null() {
            target.remove(key);
        } else if let Some(existing) = target.get_mut(key) {
            merge(existing, value);
        } else if value.is_object() {
            let mut fresh = Value::Object(Map::new());
            merge(&mut fresh, value);
            target.insert(key.clone(), fresh);
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
