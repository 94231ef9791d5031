//! kustomize's `replacements`: one field of one object copied into fields of others. Home-lab
//! fleets use it to give every Flux Kustomization of a directory the namespace the directory
//! creates (`spec.targetNamespace` from the `Namespace`'s name).
//!
//! Followed as kustomize's replacement filter does it: the source is the one object whose IDs
//! (now, or before a namespace, prefix or suffix changed them) its selector selects; a target's
//! fields are found by path (`a.b`, `[name=x]` list items, list indexes), created where
//! `create` says; a scalar target keeps its type and takes the source's text. What the built-in
//! engine does not follow exactly (`delimiter`, label selectors, `*`, a value whose type would
//! change on the way) is returned as a message, and that replacement is skipped.

use conflux_postbuild_subst::json::pointer as json_at;
use serde_json::{Map, Value, json};

/// One object a replacement may read or write, with the IDs it had earlier in the build.
pub(super) struct Candidate<'a> {
    /// The object.
    pub object: &'a mut Value,
    /// (namespace, name) pairs before a transformer changed them.
    pub earlier: &'a [(String, String)],
}

/// Where kustomize refuses the replacement, its message.
pub(super) type Refusal = String;

/// Applies `replacement` (one entry, already loaded from its file) to `candidates`. `Ok` carries
/// what was not applied (the replacement is then skipped whole).
pub(super) fn apply(
    replacement: &Value,
    candidates: &mut [Candidate<'_>],
) -> Result<Vec<String>, Refusal> {
    let Some(source) = replacement.get("source") else {
        return Err("a replacement has no source".to_owned());
    };
    let mut unapplied = Vec::new();
    for (place, options) in [("source", source.get("options"))]
        .into_iter()
        .chain(targets(replacement).map(|t| ("target", t.get("options"))))
    {
        if let Some(option) = options.and_then(Value::as_object).and_then(|o| {
            ["delimiter", "index"]
                .into_iter()
                .find(|k| o.get(*k).is_some_and(|v| v != &json!("") && v != &json!(0)))
        }) {
            unapplied.push(format!("a replacement {place}'s option '{option}'"));
        }
    }
    if let Some(path) = text(source, "fieldPath")
        && split(path).iter().any(|s| s == "*" || s.starts_with("[="))
    {
        unapplied.push(format!("the replacement source path '{path}'"));
    }
    for target in targets(replacement) {
        let selectors = std::iter::once(target.get("select")).chain(
            target
                .get("reject")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(Some),
        );
        for selector in selectors.flatten() {
            for key in ["labelSelector", "annotationSelector"] {
                if selector
                    .get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
                {
                    unapplied.push(format!("a replacement target's {key}"));
                }
            }
        }
        for path in field_paths(target) {
            if split(&path).iter().any(|s| s == "*" || s.starts_with("[=")) {
                unapplied.push(format!("the replacement field path '{path}'"));
            }
        }
    }
    if !unapplied.is_empty() {
        return Ok(unapplied);
    }
    let id = Id::of(source);
    let matches: Vec<usize> = (0..candidates.len())
        .filter(|&i| id.selects(&candidates[i]))
        .collect();
    let index = match matches.as_slice() {
        [one] => *one,
        [] => return Err(format!("nothing selected by {}", id.describe())),
        _ => return Err(format!("more than one match for source {}", id.describe())),
    };
    let field_path = text(source, "fieldPath").unwrap_or("metadata.name");
    let value = lookup(candidates[index].object, &split(field_path))
        .into_iter()
        .next()
        .cloned()
        .filter(|v| !v.is_null() && v != &json!({}) && v != &json!([]))
        .ok_or_else(|| {
            format!(
                "fieldPath `{field_path}` is missing for replacement source {}",
                id.describe()
            )
        })?;
    // Checked on every target before any is written: a replacement is applied whole or skipped.
    let mut writes = Vec::new();
    for target in targets(replacement) {
        let Some(select) = target.get("select") else {
            return Err("target must specify resources to select".to_owned());
        };
        let select = Id::of(select);
        let rejects: Vec<Id> = target
            .get("reject")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(Id::of)
            .filter(|r| !r.is_empty())
            .collect();
        let create = json_at(target, "/options/create").and_then(Value::as_bool) == Some(true);
        for (i, candidate) in candidates.iter().enumerate() {
            if select.selects(candidate) && !rejects.iter().any(|r| r.selects(candidate)) {
                for path in field_paths(target) {
                    writes.push((i, path, create));
                }
            }
        }
    }
    let mut staged: Vec<(usize, Value)> = Vec::new();
    for (i, path, create) in writes {
        let segments = split(&path);
        let mut object = staged
            .iter()
            .rev()
            .find(|(j, _)| *j == i)
            .map_or_else(|| candidates[i].object.clone(), |(_, o)| o.clone());
        match set(&mut object, &segments, &value, create) {
            Set::Done => staged.push((i, object)),
            Set::Missing => {
                let verb = if create { "find or create" } else { "find" };
                return Err(format!(
                    "unable to {verb} field \"{path}\" in replacement target"
                ));
            }
            Set::Inexact(why) => return Ok(vec![format!("the replacement into '{path}': {why}")]),
        }
    }
    for (i, object) in staged {
        *candidates[i].object = object;
    }
    Ok(Vec::new())
}

fn targets(replacement: &Value) -> impl Iterator<Item = &Value> {
    replacement
        .get("targets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A target's field paths; kustomize's default is the name.
fn field_paths(target: &Value) -> Vec<String> {
    let paths: Vec<String> = target
        .get("fieldPaths")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    if paths.is_empty() {
        vec!["metadata.name".to_owned()]
    } else {
        paths
    }
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A resource selector (kustomize's `ResId`): each part matches any when empty.
struct Id<'a> {
    group: Option<&'a str>,
    version: Option<&'a str>,
    kind: Option<&'a str>,
    name: Option<&'a str>,
    namespace: Option<&'a str>,
}

impl<'a> Id<'a> {
    fn of(value: &'a Value) -> Self {
        Id {
            group: text(value, "group"),
            version: text(value, "version"),
            kind: text(value, "kind"),
            name: text(value, "name"),
            namespace: text(value, "namespace"),
        }
    }

    fn is_empty(&self) -> bool {
        [
            self.group,
            self.version,
            self.kind,
            self.name,
            self.namespace,
        ]
        .iter()
        .all(Option::is_none)
    }

    fn describe(&self) -> String {
        let part = |p: Option<&'a str>| p.unwrap_or("~");
        format!(
            "{}.{}.{}/{}.{}",
            part(self.kind),
            part(self.version),
            part(self.group),
            part(self.name),
            part(self.namespace)
        )
    }

    /// kustomize's `IsSelectedBy` against the object's ID now or any earlier one; an empty
    /// namespace and `default` are the same.
    fn selects(&self, candidate: &Candidate<'_>) -> bool {
        let object = &*candidate.object;
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let part = |want: Option<&str>, have: &str| want.is_none_or(|w| w == have);
        if !(part(self.group, group) && part(self.version, version) && part(self.kind, kind)) {
            return false;
        }
        let now = (
            json_at(object, "/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            json_at(object, "/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        );
        let namespace = |ns: &str| if ns.is_empty() { "default" } else { ns }.to_owned();
        std::iter::once(&now)
            .chain(candidate.earlier)
            .any(|(ns, name)| {
                part(self.name, name)
                    && self
                        .namespace
                        .is_none_or(|want| namespace(want) == namespace(ns))
            })
    }
}

/// A field path split at the dots outside brackets (kyaml's `SmarterPathSplitter`).
fn split(path: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut depth = 0usize;
    for c in path.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        match out.last_mut() {
            Some(last) if c != '.' || depth > 0 => last.push(c),
            _ => out.push(String::new()),
        }
    }
    out
}

/// `[key=value]`.
fn item_selector(segment: &str) -> Option<(&str, &str)> {
    segment
        .strip_prefix('[')?
        .strip_suffix(']')?
        .split_once('=')
        .filter(|(key, _)| !key.is_empty())
}

fn matches_item(item: &Value, key: &str, want: &str) -> bool {
    match item.get(key) {
        Some(Value::String(s)) => s == want,
        Some(Value::Number(n)) => want.parse::<serde_json::Number>().is_ok_and(|w| &w == n),
        Some(Value::Bool(b)) => want.parse::<bool>() == Ok(*b),
        _ => false,
    }
}

/// The values at `path` (several where a `[key=value]` matches several items).
fn lookup<'v>(value: &'v Value, path: &[String]) -> Vec<&'v Value> {
    let Some((first, rest)) = path.split_first() else {
        return vec![value];
    };
    match value {
        Value::Object(map) => map
            .get(first.as_str())
            .map(|child| lookup(child, rest))
            .unwrap_or_default(),
        Value::Array(items) => {
            if let Some((key, want)) = item_selector(first) {
                items
                    .iter()
                    .filter(|item| matches_item(item, key, want))
                    .flat_map(|item| lookup(item, rest))
                    .collect()
            } else if let Ok(index) = first.parse::<usize>() {
                items
                    .get(index)
                    .map(|item| lookup(item, rest))
                    .unwrap_or_default()
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

enum Set {
    Done,
    Missing,
    Inexact(String),
}

/// Writes `value` at every field `path` reaches in `object`, creating the path where `create`
/// says (maps, and a `[key=value]` item appended), as kyaml's path matcher does.
fn set(object: &mut Value, path: &[String], value: &Value, create: bool) -> Set {
    let Some((first, rest)) = path.split_first() else {
        return write(object, value, false);
    };
    match object {
        Value::Object(map) => {
            if !map.contains_key(first.as_str()) {
                if !create {
                    return Set::Missing;
                }
                return create_at(map, first, rest, value);
            }
            match map.get_mut(first.as_str()) {
                Some(child) => set(child, rest, value, create),
                None => Set::Missing,
            }
        }
        Value::Array(items) => {
            if let Some((key, want)) = item_selector(first) {
                let mut found = false;
                for item in items
                    .iter_mut()
                    .filter(|item| matches_item(item, key, want))
                {
                    found = true;
                    match set(item, rest, value, create) {
                        Set::Done => {}
                        other => return other,
                    }
                }
                match (found, create) {
                    (true, _) => Set::Done,
                    (false, false) => Set::Missing,
                    (false, true) => {
                        let mut item = Map::new();
                        item.insert(key.to_owned(), Value::String(want.to_owned()));
                        let mut item = Value::Object(item);
                        let done = set(&mut item, rest, value, create);
                        if matches!(done, Set::Done) {
                            items.push(item);
                        }
                        done
                    }
                }
            } else if let Ok(index) = first.parse::<usize>() {
                match items.get_mut(index) {
                    Some(item) => set(item, rest, value, create),
                    None if create => Set::Inexact(format!("list index {index} would be created")),
                    None => Set::Missing,
                }
            } else {
                Set::Missing
            }
        }
        _ => Set::Missing,
    }
}

/// A missing `first` (and all of `rest`) created in `map`.
fn create_at(map: &mut Map<String, Value>, first: &str, rest: &[String], value: &Value) -> Set {
    let mut node = Value::Null;
    let mut cursor = &mut node;
    for segment in rest {
        if item_selector(segment).is_some() || segment.parse::<usize>().is_ok() {
            return Set::Inexact(format!("a list at '{segment}' would be created"));
        }
        let mut next = Map::new();
        next.insert(segment.clone(), Value::Null);
        *cursor = Value::Object(next);
        cursor = match cursor {
            Value::Object(next) => match next.get_mut(segment.as_str()) {
                Some(child) => child,
                None => return Set::Inexact("a created path".to_owned()),
            },
            _ => return Set::Inexact("a created path".to_owned()),
        };
    }
    match write(cursor, value, true) {
        Set::Done => {
            map.insert(first.to_owned(), node);
            Set::Done
        }
        other => other,
    }
}

/// kyaml's `setFieldValue`: a scalar target keeps its type and takes the source's text; anything
/// else (or a created field) takes the source node. A created scalar is written plain, so its
/// type is read again from its text.
fn write(target: &mut Value, value: &Value, created: bool) -> Set {
    let source_text = match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) if !n.is_f64() => Some(n.to_string()),
        Value::Number(_) => return Set::Inexact("a float source keeps its text".to_owned()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    };
    if created {
        if let Value::String(s) = value
            && conflux_postbuild_subst::yaml::emit::resolves_to_non_string(s)
        {
            return Set::Inexact(format!(
                "'{s}', written plain in a created field, is read back as another type"
            ));
        }
        *target = value.clone();
        return Set::Done;
    }
    let scalar = matches!(target, Value::String(_) | Value::Number(_) | Value::Bool(_));
    let Some(text) = source_text.filter(|_| scalar) else {
        if scalar || target.is_null() {
            return Set::Inexact("a scalar and a collection meet".to_owned());
        }
        *target = value.clone();
        return Set::Done;
    };
    match target {
        Value::String(s) => *s = text,
        Value::Number(_) => match text.parse::<i64>() {
            Ok(n) => *target = json!(n),
            Err(_) => return Set::Inexact(format!("'{text}' in a number")),
        },
        Value::Bool(_) => match text.as_str() {
            "true" => *target = json!(true),
            "false" => *target = json!(false),
            _ => return Set::Inexact(format!("'{text}' in a boolean")),
        },
        _ => return Set::Inexact("a scalar and a collection meet".to_owned()),
    }
    Set::Done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(replacement: Value, objects: &mut [Value]) -> Result<Vec<String>, Refusal> {
        let earlier: Vec<Vec<(String, String)>> = vec![Vec::new(); objects.len()];
        let mut candidates: Vec<Candidate<'_>> = objects
            .iter_mut()
            .zip(&earlier)
            .map(|(object, earlier)| Candidate { object, earlier })
            .collect();
        apply(&replacement, &mut candidates)
    }

    #[test]
    fn a_namespace_name_becomes_every_kustomization_s_target_namespace() {
        let mut objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
            json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                   "metadata": {"name": "a"}, "spec": {"path": "./a"}}),
            json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                   "metadata": {"name": "b"}, "spec": {"targetNamespace": "old"}}),
        ];
        let replacement = json!({
            "source": {"kind": "Namespace", "fieldPath": "metadata.name"},
            "targets": [{"select": {"kind": "Kustomization", "group": "kustomize.toolkit.fluxcd.io"},
                         "fieldPaths": ["spec.targetNamespace"], "options": {"create": true}}]});
        assert_eq!(run(replacement, &mut objects), Ok(Vec::new()));
        assert_eq!(objects[1]["spec"]["targetNamespace"], "team");
        assert_eq!(objects[2]["spec"]["targetNamespace"], "team");
    }

    #[test]
    fn list_items_types_and_refusals_follow_kyaml() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "side", "image": "busybox"},
                {"name": "app", "image": "nginx", "args": ["a", "b"]}]}}}});
        let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"}, "data": {"image": "x:1", "n": "3", "yes": "yes"}});
        let mut objects = vec![settings.clone(), deployment.clone()];
        let image = json!({"source": {"kind": "ConfigMap", "name": "settings", "fieldPath": "data.image"},
            "targets": [{"select": {"kind": "Deployment"}, "fieldPaths": [
                "spec.template.spec.containers.[name=app].image",
                "spec.template.spec.containers.1.args.1"]}]});
        assert_eq!(run(image, &mut objects), Ok(Vec::new()));
        let containers = &objects[1]["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[1]["image"], "x:1");
        assert_eq!(containers[1]["args"], json!(["a", "x:1"]));
        assert_eq!(containers[0]["image"], "busybox");
        // A number target keeps its type.
        let replicas = json!({"source": {"kind": "ConfigMap", "fieldPath": "data.n"},
            "targets": [{"select": {"kind": "Deployment"}, "fieldPaths": ["spec.replicas"]}]});
        assert_eq!(run(replicas, &mut objects), Ok(Vec::new()));
        assert_eq!(objects[1]["spec"]["replicas"], 3);
        // Missing without create: kustomize refuses.
        let missing = json!({"source": {"kind": "ConfigMap", "fieldPath": "data.n"},
            "targets": [{"select": {"kind": "Deployment"}, "fieldPaths": ["spec.nothing"]}]});
        let refused = run(missing, &mut objects).unwrap_err();
        assert!(refused.contains("unable to find field"), "{refused}");
        // Created from a text read back as a boolean: not followed, and nothing written.
        let before = objects.clone();
        let yes = json!({"source": {"kind": "ConfigMap", "fieldPath": "data.yes"},
            "targets": [{"select": {"kind": "Deployment"},
                         "fieldPaths": ["spec.a", "spec.b"], "options": {"create": true}}]});
        assert_eq!(run(yes, &mut objects).map(|m| m.len()), Ok(1));
        assert_eq!(objects, before);
        // The source must be one object.
        let two = json!({"source": {"fieldPath": "metadata.name"},
            "targets": [{"select": {"kind": "Deployment"}}]});
        assert!(
            run(two, &mut objects)
                .unwrap_err()
                .contains("more than one match")
        );
    }

    #[test]
    fn an_earlier_name_selects_and_a_reject_leaves_out() {
        let mut objects = [
            json!({"kind": "ConfigMap", "metadata": {"name": "p-src", "namespace": "x"},
                   "data": {"v": "1"}}),
            json!({"kind": "ConfigMap", "metadata": {"name": "keep"}, "data": {"v": "0"}}),
            json!({"kind": "ConfigMap", "metadata": {"name": "set"}, "data": {"v": "0"}}),
        ];
        let earlier = [
            vec![(String::new(), "src".to_owned())],
            Vec::new(),
            Vec::new(),
        ];
        let mut candidates: Vec<Candidate<'_>> = objects
            .iter_mut()
            .zip(&earlier)
            .map(|(object, earlier)| Candidate { object, earlier })
            .collect();
        let replacement = json!({"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.v"},
            "targets": [{"select": {"kind": "ConfigMap"},
                         "reject": [{"name": "keep"}, {"name": "src"}], "fieldPaths": ["data.v"]}]});
        assert_eq!(apply(&replacement, &mut candidates), Ok(Vec::new()));
        assert_eq!(objects[1]["data"]["v"], "0");
        assert_eq!(objects[2]["data"]["v"], "1");
        assert_eq!(objects[0]["data"]["v"], "1");
    }

    #[test]
    fn paths_split_outside_brackets() {
        assert_eq!(
            split("a.[name=x.y].b"),
            ["a", "[name=x.y]", "b"].map(str::to_owned)
        );
    }
}
