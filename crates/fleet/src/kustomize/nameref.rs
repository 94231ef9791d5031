//! kustomize's `configurations`: transformer configuration files. Fleets use them for one thing,
//! `nameReference` entries that tell kustomize where a custom resource names a ConfigMap or
//! Secret (a HelmRelease's `spec/valuesFrom/name`), so that a generated name with its hash suffix
//! reaches it. The built-in engine applies those; anything else in such a file is reported as
//! not applied.
//!
//! As kustomize does, every configuration read anywhere in a build (a base's, a component's)
//! applies to every object of the build, once, after the hash suffixes.

use conflux_postbuild_subst::json::pointer as json_at;
use std::collections::BTreeMap;

use serde_json::Value;

/// (kind, namespace, name before the build renamed it) → its name after.
pub(super) type Renamed = BTreeMap<(String, String, String), String>;

/// One field spec of a `nameReference` entry: where objects of a kind name a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NameRef {
    /// `ConfigMap` or `Secret`.
    referent: &'static str,
    /// The referring objects: each part matches any when absent.
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    /// The field's path, one entry per segment (`[]` dropped).
    path: Vec<String>,
}

/// The `nameReference` entries of one configuration file (its first document), added to `refs`;
/// the returned messages name what the built-in engine does not apply.
pub(super) fn read(config: &Value, file: &str, refs: &mut Vec<NameRef>) -> Vec<String> {
    let mut unapplied = Vec::new();
    let Some(map) = config.as_object() else {
        if !config.is_null() {
            unapplied.push(format!("{file}: not a transformer configuration"));
        }
        return unapplied;
    };
    for key in map.keys().filter(|k| *k != "nameReference") {
        unapplied.push(format!("{file}: {key} is not applied"));
    }
    let entries = map.get("nameReference").and_then(Value::as_array);
    for entry in entries.into_iter().flatten() {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let referent = match (text("group"), text("kind")) {
            ("", "ConfigMap") => "ConfigMap",
            ("", "Secret") => "Secret",
            (_, kind) => {
                unapplied.push(format!(
                    "{file}: a nameReference to {kind} is not applied (only to a ConfigMap or Secret)"
                ));
                continue;
            }
        };
        let specs = entry.get("fieldSpecs").and_then(Value::as_array);
        for spec in specs.into_iter().flatten() {
            let part = |key: &str| {
                spec.get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            let Some(path) = part("path") else {
                continue;
            };
            let path = match segments(&path) {
                Some(path) => path,
                None => {
                    unapplied.push(format!(
                        "{file}: the field path '{path}' selects list items, which is not applied"
                    ));
                    continue;
                }
            };
            refs.push(NameRef {
                referent,
                group: part("group"),
                version: part("version"),
                kind: part("kind"),
                path,
            });
        }
    }
    unapplied
}

/// A field spec's path split at unescaped slashes, with the `[]` that marks a list dropped;
/// `None` for a selector of list items (`[name=x]`), which the built-in engine does not follow.
fn segments(path: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.last_mut()?.push(next);
                }
            }
            '/' => out.push(String::new()),
            c => out.last_mut()?.push(c),
        }
    }
    out.into_iter()
        .map(|segment| {
            let segment = segment.strip_suffix("[]").unwrap_or(&segment).to_owned();
            (!segment.contains('[')).then_some(segment)
        })
        .collect()
}

/// Renames, in `object`, what `refs` say names a renamed ConfigMap or Secret. Returns the paths
/// where a map stands in the place of a name (kustomize reads its `name` and `namespace`; the
/// built-in engine leaves it and says so).
pub(super) fn apply(object: &mut Value, refs: &[NameRef], renamed: &Renamed) -> Vec<String> {
    let mut unapplied = Vec::new();
    if refs.is_empty() {
        return unapplied;
    }
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (group, version) = (group.to_owned(), version.to_owned());
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let namespace = json_at(object, "/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let matches = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    for r in refs {
        if matches(&r.kind, &kind) && matches(&r.group, &group) && matches(&r.version, &version) {
            let at = Name {
                referent: r.referent,
                namespace: &namespace,
                renamed,
            };
            if walk(object, &r.path, at) {
                unapplied.push(r.path.join("/"));
            }
        }
    }
    unapplied
}

#[derive(Clone, Copy)]
struct Name<'a> {
    referent: &'static str,
    namespace: &'a str,
    renamed: &'a Renamed,
}

impl Name<'_> {
    fn rename(self, value: &mut Value) {
        rename(value, self.referent, self.namespace, self.renamed);
    }
}

/// `value`, a name of a `kind` in `namespace`, as the build renamed it (left when it was not).
pub(super) fn rename(value: &mut Value, kind: &str, namespace: &str, renamed: &Renamed) {
    if let Value::String(name) = value {
        let key = (kind.to_owned(), namespace.to_owned(), name.clone());
        if let Some(current) = renamed.get(&key) {
            *name = current.clone();
        }
    }
}

/// kustomize's field-spec walk: a list met on the way applies the rest of the path to each item;
/// at the end a name, or a list of names, is renamed. True when a map was found there instead.
fn walk(value: &mut Value, path: &[String], at: Name<'_>) -> bool {
    match (value, path.split_first()) {
        (Value::Array(items), _) if !path.is_empty() => {
            let mut left = false;
            for item in items {
                left |= walk(item, path, at);
            }
            left
        }
        (Value::Object(map), Some((first, rest))) => map
            .get_mut(first.as_str())
            .is_some_and(|child| walk(child, rest, at)),
        (Value::Array(items), None) => {
            items.iter_mut().for_each(|item| at.rename(item));
            false
        }
        (Value::Object(map), None) => map.contains_key("name"),
        (value, None) => {
            at.rename(value);
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn renamed() -> Renamed {
        Renamed::from([(
            (
                "ConfigMap".to_owned(),
                "apps".to_owned(),
                "values".to_owned(),
            ),
            "values-abc".to_owned(),
        )])
    }

    #[test]
    fn a_helm_release_s_values_from_gets_the_generated_name() {
        let config = json!({"nameReference": [{"kind": "ConfigMap", "version": "v1",
            "fieldSpecs": [{"path": "spec/valuesFrom/name", "kind": "HelmRelease"},
                           {"path": "spec/values/names[]", "kind": "HelmRelease",
                            "group": "helm.toolkit.fluxcd.io"}]}]});
        let mut refs = Vec::new();
        assert!(read(&config, "c.yaml", &mut refs).is_empty());
        let mut release = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "r", "namespace": "apps"},
            "spec": {"valuesFrom": [{"kind": "ConfigMap", "name": "values"},
                                    {"kind": "Secret", "name": "other"}],
                     "values": {"names": ["values", "kept"]}}});
        assert!(apply(&mut release, &refs, &renamed()).is_empty());
        assert_eq!(release["spec"]["valuesFrom"][0]["name"], "values-abc");
        assert_eq!(release["spec"]["valuesFrom"][1]["name"], "other");
        assert_eq!(
            release["spec"]["values"]["names"],
            json!(["values-abc", "kept"])
        );
        // Another namespace, another kind: untouched.
        let mut elsewhere = release.clone();
        elsewhere["metadata"]["namespace"] = json!("other");
        elsewhere["spec"]["valuesFrom"][0]["name"] = json!("values");
        apply(&mut elsewhere, &refs, &renamed());
        assert_eq!(elsewhere["spec"]["valuesFrom"][0]["name"], "values");
    }

    #[test]
    fn what_is_not_applied_is_named() {
        let config = json!({"commonLabels": [], "nameReference": [
            {"kind": "Service", "fieldSpecs": [{"path": "spec/service"}]},
            {"kind": "Secret", "fieldSpecs": [{"path": "spec/list[name=a]/name"},
                                              {"path": "spec/ref", "kind": "X"}]}]});
        let mut refs = Vec::new();
        let unapplied = read(&config, "c.yaml", &mut refs);
        assert_eq!(unapplied.len(), 3, "{unapplied:?}");
        assert_eq!(refs.len(), 1);
        let mut object = json!({"kind": "X", "spec": {"ref": {"name": "s"}}});
        assert_eq!(apply(&mut object, &refs, &Renamed::new()), ["spec/ref"]);
    }

    #[test]
    fn escaped_slashes_stay_in_a_segment() {
        assert_eq!(
            segments(r"metadata/annotations/a.io\/b").unwrap_or_default(),
            ["metadata", "annotations", "a.io/b"]
        );
    }
}
