//! The built-in kustomize subset: resources, components, namespace, name prefix and suffix,
//! labels and annotations, ConfigMap and Secret generators with their hash suffixes and their
//! references in pod templates and where `configurations` name them ([`nameref`]), JSON 6902
//! `patches`, strategic-merge `patches` and `patchesStrategicMerge` where they are exact
//! ([`merge`]), and `replacements` ([`replace`]). Any other field (and any other strategic-merge
//! patch or replacement) is a `KustomizeUnsupported` problem.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use conflux_postbuild_subst::audit::CLUSTER_SCOPED_KINDS;
use conflux_postbuild_subst::json::{self, pointer as json_at};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::nameref::{self, NameRef, Renamed};
use super::replace::{self, Candidate};
use super::scalars::{self, Marks, Read};
use super::{
    Build, Files, FluxOverlay, Object, flux_kustomization, join, kustomization_file, merge,
    read_documents,
};
use crate::path::relative;
use crate::problem::Problem;
use crate::{Error, Result};

/// The fields of a kustomization the built-in engine applies.
const SUPPORTED: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "resources",
    "components",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "buildMetadata",
    "patches",
    "patchesStrategicMerge",
    "configurations",
    "replacements",
];

/// A built object with the names it had before prefixes, suffixes and hashes (kustomize's
/// previous names), for name references.
#[derive(Clone)]
struct Item {
    object: Object,
    original: String,
    generated: bool,
    hash: bool,
    /// Its annotations that a JSON 6902 patch would change (see [`scalars`]).
    marks: Marks,
    /// The (namespace, name) it had before a base's `namespace`, `namePrefix` or `nameSuffix`
    /// changed them: kustomize still matches a patch against those.
    earlier: Vec<(String, String)>,
}

pub(super) fn build(files: &Files, root: &Path, dir: &str, overlay: &FluxOverlay) -> Result<Build> {
    let mut build = Build::default();
    let (own, kustomization) = flux_kustomization(files, root, dir, overlay)?;
    let kustomization = Value::Object(kustomization);
    let kfile = own.map(|f| relative(root, &f));
    let mut items = Vec::new();
    let kfile = kfile.as_deref();
    let here = Here {
        files,
        root,
        dir,
        kfile,
    };
    let mut refs = Vec::new();
    accumulate(here, &kustomization, &mut items, &mut refs, &mut build, 0)?;
    finish(&mut items, &refs, &mut build);
    build.objects = items.into_iter().map(|i| i.object).collect();
    Ok(build)
}

fn load_kustomization(files: &Files, root: &Path, dir: &str) -> Result<(String, Value)> {
    let file = kustomization_file(&root.join(dir))
        .ok_or_else(|| Error::Build(format!("no kustomization file in '{dir}'")))?;
    let documents = files
        .read_documents(&file)
        .map_err(|e| super::in_file(&relative(root, &file), e))?;
    let kustomization = documents.into_iter().next().unwrap_or_else(|| json!({}));
    Ok((relative(root, &file), kustomization))
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// One kustomization (or component) applied to `items`: resources, generators, components, then
/// transformers, in kustomize's order (its output with `--reorder none`, as kustomize-controller
/// builds).
fn accumulate(
    here: Here<'_>,
    kustomization: &Value,
    items: &mut Vec<Item>,
    refs: &mut Vec<NameRef>,
    build: &mut Build,
    depth: usize,
) -> Result<()> {
    let Here { root, dir, .. } = here;
    let kustomization = &canonical(kustomization);
    if depth > 32 {
        return Err(Error::Build(format!(
            "'{dir}': resources nest more than 32 levels"
        )));
    }
    let fields: Vec<&str> = kustomization
        .as_object()
        .map(|m| {
            m.keys()
                .map(String::as_str)
                .filter(|k| !SUPPORTED.contains(k))
                .collect()
        })
        .unwrap_or_default();
    if !fields.is_empty() {
        unsupported(
            build,
            here,
            format!(
                "the built-in kustomize does not apply {}; the objects are taken without it (put the kustomize binary on PATH or pass --kustomize for an exact build)",
                fields.join(", ")
            ),
        );
    }
    configurations(here, kustomization, refs, build)?;
    let mut own = Vec::new();
    for resource in strings(kustomization.get("resources")) {
        if resource.contains("://") || resource.starts_with("github.com/") {
            unsupported(
                build,
                here,
                format!("remote resource '{resource}' is not fetched"),
            );
            continue;
        }
        let path = join(dir, &resource);
        let absolute = root.join(&path);
        if absolute.is_dir() {
            let (file, child) = load_kustomization(here.files, root, &path)?;
            // kustomize refuses a Component listed as a resource.
            if kustomization_kind(&child) == "Component" {
                return Err(Error::Build(format!(
                    "accumulating resources from '{resource}': expected kind != 'Component' for path '{path}' (a Component belongs under components)"
                )));
            }
            let mut sub = Vec::new();
            let here = Here {
                dir: &path,
                kfile: Some(&file),
                ..here
            };
            accumulate(here, &child, &mut sub, refs, build, depth + 1)?;
            own.extend(sub);
        } else if absolute.is_file() {
            let (objects, inexact) = (here.files)
                .read_resources(&absolute, &path)
                .map_err(|e| super::in_file(&path, e))?;
            for why in inexact {
                let message =
                    format!("{path}: {why}; the built-in subset matches the written text");
                unsupported(build, here, message);
            }
            for (object, marks) in objects {
                if json_at(&object, "/metadata/name")
                    .and_then(Value::as_str)
                    .is_none()
                {
                    return Err(Error::Build(format!(
                        "failed to decode Kubernetes YAML from {path}: missing metadata.name"
                    )));
                }
                let original = name_of(&object);
                own.push(Item {
                    object: Object {
                        object,
                        file: Some(path.clone()),
                    },
                    original,
                    generated: false,
                    hash: false,
                    marks,
                    earlier: Vec::new(),
                });
            }
        } else {
            return Err(Error::Build(format!(
                "'{path}' (a resource of '{dir}') does not exist"
            )));
        }
    }
    items.extend(own);
    // The kustomization's own generators before its components, as kustomize orders them (a
    // component's patch or `behavior: merge` may then reach a generated object).
    generators(here, kustomization, items, build)?;
    for component in strings(kustomization.get("components")) {
        let path = join(dir, &component);
        let (file, child) = load_kustomization(here.files, root, &path)?;
        let kind = kustomization_kind(&child);
        if kind != "Component" {
            return Err(Error::Build(format!(
                "accumulating components: expected kind 'Component' for path '{path}' but got '{kind}'"
            )));
        }
        let here = Here {
            dir: &path,
            kfile: Some(&file),
            ..here
        };
        accumulate(here, &child, items, refs, build, depth + 1)?;
    }
    // kustomize runs `patchesStrategicMerge` before `patches`.
    let entries = strategic_merge_entries(kustomization);
    patches(here, &entries, items, build)?;
    let entries = kustomization.get("patches").and_then(Value::as_array);
    patches(here, entries.map_or(&[], Vec::as_slice), items, build)?;
    transform(kustomization, items);
    replacements(here, kustomization, items, build)
}

/// `replacements` (see [`replace`]), after the other transformers as kustomize runs them: each
/// entry inline, or a file holding one or a list.
fn replacements(
    here: Here<'_>,
    kustomization: &Value,
    items: &mut [Item],
    build: &mut Build,
) -> Result<()> {
    let Here { root, dir, .. } = here;
    let entries = kustomization.get("replacements").and_then(Value::as_array);
    for entry in entries.into_iter().flatten() {
        let loaded = match entry.get("path").and_then(Value::as_str) {
            Some(_) if entry.get("source").is_some() || entry.get("targets").is_some() => {
                return Err(Error::Build(format!(
                    "a replacement in '{dir}': cannot specify both path and inline replacement"
                )));
            }
            Some(file) => {
                let path = join(dir, file);
                let text =
                    std::fs::read_to_string(root.join(&path)).map_err(|e| Error::io(&path, e))?;
                let (_, documents) =
                    super::parse_yaml_text(&text).map_err(|e| super::in_file(&path, e))?;
                match documents.into_iter().next() {
                    Some(Value::Array(list)) => list,
                    Some(one @ Value::Object(_)) => vec![one],
                    _ => {
                        return Err(Error::Build(format!(
                            "unsupported replacement type encountered within replacement path '{path}'"
                        )));
                    }
                }
            }
            None => vec![entry.clone()],
        };
        for replacement in &loaded {
            let mut candidates: Vec<Candidate<'_>> = items
                .iter_mut()
                .map(|item| Candidate {
                    object: &mut item.object.object,
                    earlier: &item.earlier,
                })
                .collect();
            match replace::apply(replacement, &mut candidates) {
                Ok(unapplied) => {
                    for what in unapplied {
                        let message = format!(
                            "{what} is not applied by the built-in kustomize; that replacement is skipped"
                        );
                        unsupported(build, here, message);
                    }
                }
                Err(refusal) => {
                    return Err(Error::Build(format!("a replacement in '{dir}': {refusal}")));
                }
            }
        }
    }
    Ok(())
}

/// kustomize reads its file with Go's JSON decoding, which takes a field name in any case
/// (`apiversion` is `apiVersion`); the exact name wins where both are written.
fn canonical(kustomization: &Value) -> Value {
    let Some(map) = kustomization.as_object() else {
        return kustomization.clone();
    };
    let mut out = map.clone();
    for (key, value) in map {
        let Some(field) = SUPPORTED
            .iter()
            .find(|field| **field != key && field.eq_ignore_ascii_case(key))
        else {
            continue;
        };
        out.remove(key);
        if !map.contains_key(*field) {
            out.insert((*field).to_owned(), value.clone());
        }
    }
    Value::Object(out)
}

/// The `nameReference` entries of the kustomization's `configurations` files, added to `refs`.
fn configurations(
    here: Here<'_>,
    kustomization: &Value,
    refs: &mut Vec<NameRef>,
    build: &mut Build,
) -> Result<()> {
    for file in strings(kustomization.get("configurations")) {
        if file.contains("://") {
            unsupported(
                build,
                here,
                format!("remote configuration '{file}' is not fetched"),
            );
            continue;
        }
        let path = join(here.dir, &file);
        let documents =
            read_documents(&here.root.join(&path)).map_err(|e| super::in_file(&path, e))?;
        let config = documents.into_iter().next().unwrap_or(Value::Null);
        for message in nameref::read(&config, &path, refs) {
            unsupported(build, here, message);
        }
    }
    Ok(())
}

/// A kustomization file's kind; kustomize reads none as `Kustomization`.
fn kustomization_kind(kustomization: &Value) -> &str {
    match kustomization.get("kind").and_then(Value::as_str) {
        None | Some("") => "Kustomization",
        Some(kind) => kind,
    }
}

fn name_of(object: &Value) -> String {
    json_at(object, "/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Where a kustomization is: the repository root, its directory and its file (none for Flux's
/// generated one).
#[derive(Clone, Copy)]
struct Here<'a> {
    files: &'a Files,
    root: &'a Path,
    dir: &'a str,
    kfile: Option<&'a str>,
}

/// A `KustomizeUnsupported` problem of the kustomization `here`.
fn unsupported(build: &mut Build, here: Here<'_>, message: String) {
    build.problems.push(Problem {
        level: 1,
        code: "KustomizeUnsupported",
        object: here.dir.to_owned(),
        file: here.kfile.map(str::to_owned),
        line: None,
        message,
    });
}

/// `configMapGenerator` and `secretGenerator` (behaviour `create`).
fn generators(
    here: Here<'_>,
    kustomization: &Value,
    items: &mut Vec<Item>,
    build: &mut Build,
) -> Result<()> {
    let Here {
        root, dir, kfile, ..
    } = here;
    let global = kustomization.get("generatorOptions");
    for (field, kind) in [
        ("configMapGenerator", "ConfigMap"),
        ("secretGenerator", "Secret"),
    ] {
        let Some(list) = kustomization.get(field).and_then(Value::as_array) else {
            continue;
        };
        for generator in list {
            let name = generator
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::Build(format!("{field} in '{dir}' without a name")))?;
            let behavior = generator.get("behavior").and_then(Value::as_str);
            if behavior.is_some_and(|b| b != "create") {
                return Err(Error::Build(format!(
                    "{field} '{name}' in '{dir}': behavior '{}' is not built in",
                    behavior.unwrap_or_default()
                )));
            }
            // Bytes: a file need not be text (kustomize puts what is not UTF-8 in binaryData).
            let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            for literal in strings(generator.get("literals")) {
                let (key, value) = literal.split_once('=').unwrap_or((&literal, ""));
                data.insert(key.to_owned(), unquote(value).as_bytes().to_vec());
            }
            for file in strings(generator.get("files")) {
                let (key, path) = match file.split_once('=') {
                    Some((key, path)) => (key.to_owned(), path.to_owned()),
                    None => {
                        let key = file.rsplit('/').next().unwrap_or(&file).to_owned();
                        (key, file.clone())
                    }
                };
                if path.contains("://") {
                    unsupported(
                        build,
                        here,
                        format!(
                            "{field} '{name}': remote file '{path}' is not fetched; key '{key}' is left out"
                        ),
                    );
                    continue;
                }
                let path = join(dir, &path);
                let bytes = std::fs::read(root.join(&path))
                    .map_err(|e| Error::io(format!("{field} '{name}': {path}"), e))?;
                data.insert(key, bytes);
            }
            let mut envs = strings(generator.get("envs"));
            envs.extend(
                generator
                    .get("env")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            );
            for env in envs {
                let path = join(dir, &env);
                let text = std::fs::read_to_string(root.join(&path))
                    .map_err(|e| Error::io(format!("{field} '{name}': {path}"), e))?;
                for line in text.lines() {
                    let line = line.trim_start();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    if let Some((key, value)) = line.split_once('=') {
                        data.insert(key.to_owned(), value.as_bytes().to_vec());
                    }
                }
            }
            let options = |key: &str| {
                json_at(generator, &format!("/options/{key}"))
                    .or_else(|| global.and_then(|g| g.get(key)))
            };
            let merged = |key: &str| {
                let mut map = Map::new();
                for source in [
                    global.and_then(|g| g.get(key)),
                    json_at(generator, &format!("/options/{key}")),
                ] {
                    if let Some(m) = source.and_then(Value::as_object) {
                        map.extend(m.clone());
                    }
                }
                map
            };
            let mut metadata = Map::new();
            metadata.insert("name".into(), json!(name));
            if let Some(namespace) = generator.get("namespace").and_then(Value::as_str) {
                metadata.insert("namespace".into(), json!(namespace));
            }
            for key in ["labels", "annotations"] {
                let map = merged(key);
                if !map.is_empty() {
                    metadata.insert(key.into(), Value::Object(map));
                }
            }
            let mut object = json!({"apiVersion": "v1", "kind": kind, "metadata": metadata});
            if kind == "Secret" {
                let encoded: Map<String, Value> = data
                    .iter()
                    .map(|(k, v)| {
                        let v = base64::engine::general_purpose::STANDARD.encode(v);
                        (k.clone(), Value::String(v))
                    })
                    .collect();
                object["data"] = Value::Object(encoded);
                let kind = generator
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("Opaque");
                object["type"] = json!(kind);
            } else {
                let (mut text, mut binary) = (Map::new(), Map::new());
                for (key, bytes) in data {
                    match String::from_utf8(bytes) {
                        Ok(value) => text.insert(key, Value::String(value)),
                        Err(err) => binary.insert(
                            key,
                            Value::String(
                                base64::engine::general_purpose::STANDARD.encode(err.into_bytes()),
                            ),
                        ),
                    };
                }
                if !text.is_empty() {
                    object["data"] = Value::Object(text);
                }
                if !binary.is_empty() {
                    object["binaryData"] = Value::Object(binary);
                }
            }
            if let Some(immutable) = options("immutable").and_then(Value::as_bool).filter(|i| *i) {
                object["immutable"] = json!(immutable);
            }
            let hash = !options("disableNameSuffixHash")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            items.push(Item {
                object: Object {
                    object,
                    file: kfile.map(str::to_owned),
                },
                original: name.to_owned(),
                generated: true,
                hash,
                marks: Marks::new(),
                earlier: Vec::new(),
            });
        }
    }
    Ok(())
}

/// kustomize strips one pair of matching quotes around a literal's value.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

fn kind_of(object: &Value) -> &str {
    object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The workload kinds whose templates kustomize's label and annotation transformers reach, with
/// the pointers to the templates' metadata and to the selector.
type Templated = (&'static str, &'static [&'static str], Option<&'static str>);
const TEMPLATED: &[Templated] = &[
    (
        "Deployment",
        &["/spec/template/metadata"],
        Some("/spec/selector"),
    ),
    (
        "StatefulSet",
        &["/spec/template/metadata"],
        Some("/spec/selector"),
    ),
    (
        "DaemonSet",
        &["/spec/template/metadata"],
        Some("/spec/selector"),
    ),
    (
        "ReplicaSet",
        &["/spec/template/metadata"],
        Some("/spec/selector"),
    ),
    ("Job", &["/spec/template/metadata"], None),
    (
        "CronJob",
        &[
            "/spec/jobTemplate/metadata",
            "/spec/jobTemplate/spec/template/metadata",
        ],
        None,
    ),
];

/// Adds `pairs` to the map `field` of the object at `pointer_parent` (created when absent).
pub(crate) fn insert_all(
    target: &mut Value,
    pointer_parent: &str,
    field: &str,
    pairs: &Map<String, Value>,
) {
    let Some(parent) = ensure(target, pointer_parent) else {
        return;
    };
    let map = parent
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(map) = map.as_object_mut() {
        map.extend(pairs.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// The object at `pointer`, created as empty maps along the way.
fn ensure<'v>(value: &'v mut Value, pointer: &str) -> Option<&'v mut Map<String, Value>> {
    let mut current = value;
    for part in pointer.split('/').skip(1) {
        let map = current.as_object_mut()?;
        current = map.entry(part).or_insert_with(|| Value::Object(Map::new()));
    }
    current.as_object_mut()
}

fn as_strings(value: Option<&Value>) -> Map<String, Value> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), Value::String(v))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The deprecated `patchesStrategicMerge` as `patches` entries without a target: each is a
/// file, or the patch itself (kustomize first tries the text as YAML objects; a path never is one).
fn strategic_merge_entries(kustomization: &Value) -> Vec<Value> {
    strings(kustomization.get("patchesStrategicMerge"))
        .into_iter()
        .map(|entry| {
            let inline = entry.contains('\n') || entry.trim_start().starts_with('{');
            if inline {
                json!({ "patch": entry })
            } else {
                json!({ "path": entry })
            }
        })
        .collect()
}

/// `patches` entries: a JSON 6902 operation list (`add`, `remove`, `replace`) applied to the
/// objects their `target` selects, or strategic-merge patches where exact (see
/// [`strategic_merge`]); another operation is a `KustomizeUnsupported` problem and is skipped.
/// They run before the other transformers.
fn patches(
    here: Here<'_>,
    entries: &[Value],
    items: &mut Vec<Item>,
    build: &mut Build,
) -> Result<()> {
    let Here { root, dir, .. } = here;
    for entry in entries {
        let text = match (
            entry.get("patch").and_then(Value::as_str),
            entry.get("path"),
        ) {
            (Some(text), _) => text.to_owned(),
            (None, Some(Value::String(path))) => {
                let path = join(dir, path);
                std::fs::read_to_string(root.join(&path)).map_err(|e| Error::io(&path, e))?
            }
            _ => {
                return Err(Error::Build(format!(
                    "a patch in '{dir}' has neither patch nor path"
                )));
            }
        };
        let (text, mut documents) = super::parse_yaml_text(&text)?;
        let target = entry.get("target").cloned().unwrap_or(Value::Null);
        // Several strategic-merge patches in one file, as kustomize allows: each is applied.
        if documents.len() > 1 && documents.iter().all(Value::is_object) {
            let rewritten = scalars::rewrite(&text, &mut documents, Read::Patch)?;
            for why in rewritten.inexact {
                let message =
                    format!("a patch: {why}; the built-in subset matches the written text");
                unsupported(build, here, message);
            }
            for (patch, marks) in documents.iter().zip(rewritten.marks) {
                strategic_merge(here, (patch, &marks), &target, items, build)?;
            }
            continue;
        }
        let mut patch = documents.into_iter().next().unwrap_or(Value::Null);
        let operations = match patch {
            // A JSON 6902 patch goes through JSON (sigs.k8s.io/yaml): its timestamps stay text.
            Value::Array(operations) => operations,
            Value::Object(_) => {
                // A strategic-merge patch is merged as nodes, and written with the resource.
                let rewritten =
                    scalars::rewrite(&text, std::slice::from_mut(&mut patch), Read::Patch)?;
                for why in rewritten.inexact {
                    let message =
                        format!("a patch: {why}; the built-in subset matches the written text");
                    unsupported(build, here, message);
                }
                let marks = rewritten.marks.into_iter().next().unwrap_or_default();
                strategic_merge(here, (&patch, &marks), &target, items, build)?;
                continue;
            }
            _ => {
                return Err(Error::Build(format!(
                    "a patch in '{dir}' is neither a strategic-merge patch nor a JSON 6902 list"
                )));
            }
        };
        let unknown = operations.iter().find_map(|o| {
            let op = o.get("op").and_then(Value::as_str).unwrap_or_default();
            (!matches!(op, "add" | "remove" | "replace")).then(|| op.to_owned())
        });
        if let Some(op) = unknown {
            unsupported(
                build,
                here,
                format!(
                    "JSON 6902 operation '{op}' is not applied by the built-in kustomize; that patch is skipped"
                ),
            );
            continue;
        }
        let selector = Target::of(&target)?;
        for item in items.iter_mut() {
            if selector.selects(&item.object.object) {
                // kustomize applies it to the object written as JSON and read back.
                if !scalars::through_json(&mut item.object.object, &mut item.marks)? {
                    let message = format!(
                        "a JSON 6902 patch on {} writes its number, boolean or null annotations as Go's JSON, which the built-in kustomize does not reproduce",
                        name_of(&item.object.object)
                    );
                    unsupported(build, here, message);
                }
                for operation in &operations {
                    apply_operation(&mut item.object.object, operation).map_err(|e| {
                        Error::Build(format!(
                            "a patch in '{dir}' on {}: {e}",
                            name_of(&item.object.object)
                        ))
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// A strategic-merge `patch` (see [`merge`]): on what `target` selects, or without a target on
/// the one object it names (group, kind, name and namespace, none being none), which must
/// exist.
fn strategic_merge(
    here: Here<'_>,
    (patch, marks): (&Value, &Marks),
    target: &Value,
    items: &mut Vec<Item>,
    build: &mut Build,
) -> Result<()> {
    let text = |v: &Value, p: &str| json::text(v, p).to_owned();
    let (kind, name, namespace) = (
        text(patch, "/kind"),
        text(patch, "/metadata/name"),
        text(patch, "/metadata/namespace"),
    );
    let api_version = text(patch, "/apiVersion");
    let named = |item: &Item| {
        let object = &item.object.object;
        let now = (
            text(object, "/metadata/namespace"),
            text(object, "/metadata/name"),
        );
        text(object, "/kind") == kind
            && (now == (namespace.clone(), name.clone())
                || item
                    .earlier
                    .iter()
                    .any(|(ns, n)| *ns == namespace && *n == name))
            && merge::group_of(&text(object, "/apiVersion")) == merge::group_of(&api_version)
    };
    let selector = (!target.is_null())
        .then(|| Target::of(target))
        .transpose()?;
    let mut selected = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let chosen = match &selector {
            None => named(item),
            Some(selector) => selector.selects(&item.object.object),
        };
        if chosen {
            selected.push(index);
        }
    }
    if target.is_null() && selected.is_empty() {
        return Err(Error::Build(format!(
            "no resource matches strategic merge patch \"{kind}/{name}\" in '{}'",
            here.dir
        )));
    }
    // The patch's own name and namespace say what it is for; they never rename.
    let mut body = patch.clone();
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("name");
        metadata.remove("namespace");
    }
    for &index in &selected {
        let object = &items[index].object.object;
        if let Err(why) = merge::supported(&body, merge::group_of(&text(object, "/apiVersion"))) {
            unsupported(build, here, format!("{why}; that patch is skipped"));
            return Ok(());
        }
    }
    if merge::deletes(&body) {
        // kustomize drops every object a `$patch: delete` patch selects.
        let mut index = 0;
        items.retain(|_| {
            index += 1;
            !selected.contains(&(index - 1))
        });
        return Ok(());
    }
    for index in selected {
        let item = &mut items[index];
        // The patch's annotations replace the object's, marks included; a null deletes.
        match json_at(patch, "/metadata/annotations") {
            Some(Value::Object(set)) => {
                item.marks.retain(|key, _| !set.contains_key(key));
                item.marks.extend(marks.clone());
            }
            Some(Value::Null) => item.marks.clear(),
            _ => {}
        }
        let object = &mut item.object.object;
        merge::merge(object, &body);
        // kustomize rebuilds annotations after the merge, and an empty map goes.
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
            && metadata
                .get("annotations")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
        {
            metadata.remove("annotations");
        }
    }
    Ok(())
}

/// A patch `target`, compiled once: each field a regular expression matching all of the value,
/// label and annotation selectors as Kubernetes parses them.
struct Target {
    fields: Vec<(&'static str, regex::Regex)>,
    selectors: Vec<(&'static str, conflux_watch_index::selector::Selector)>,
}

impl Target {
    fn of(target: &Value) -> Result<Target> {
        let mut fields = Vec::new();
        for field in ["group", "version", "kind", "name", "namespace"] {
            let Some(pattern) = target
                .get(field)
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            let regex = regex::Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| Error::Build(format!("patch target {field} '{pattern}': {e}")))?;
            fields.push((field, regex));
        }
        let mut selectors = Vec::new();
        for (field, metadata) in [
            ("labelSelector", "labels"),
            ("annotationSelector", "annotations"),
        ] {
            let Some(selector) = target.get(field).and_then(Value::as_str) else {
                continue;
            };
            let selector = conflux_watch_index::selector::Selector::parse(selector)
                .map_err(|e| Error::Build(format!("patch target {field} '{selector}': {e}")))?;
            selectors.push((metadata, selector));
        }
        Ok(Target { fields, selectors })
    }

    /// Whether it selects `object`.
    fn selects(&self, object: &Value) -> bool {
        let text = |p: &str| json::text(object, p);
        let api_version = text("/apiVersion");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let value = |field: &str| match field {
            "group" => group,
            "version" => version,
            "kind" => text("/kind"),
            "name" => text("/metadata/name"),
            _ => text("/metadata/namespace"),
        };
        if !self
            .fields
            .iter()
            .all(|(f, regex)| regex.is_match(value(f)))
        {
            return false;
        }
        self.selectors.iter().all(|(metadata, selector)| {
            let map: BTreeMap<String, String> = json_at(object, &format!("/metadata/{metadata}"))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            selector.matches(&map)
        })
    }
}

/// One JSON 6902 `add`, `remove` or `replace` (RFC 6902, as evanphx/json-patch applies it).
fn apply_operation(object: &mut Value, operation: &Value) -> std::result::Result<(), String> {
    let op = operation
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let path = operation
        .get("path")
        .and_then(Value::as_str)
        .ok_or("an operation without path")?;
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid path '{path}'"))?;
    let last = last.replace("~1", "/").replace("~0", "~");
    let container = object
        .pointer_mut(parent)
        .ok_or_else(|| format!("{op} operation does not apply: doc is missing path: {path}"))?;
    let value = || operation.get("value").cloned().unwrap_or(Value::Null);
    match (op, container) {
        ("add", Value::Object(map)) => {
            map.insert(last, value());
        }
        ("add", Value::Array(list)) => {
            let index = if last == "-" {
                list.len()
            } else {
                last.parse()
                    .map_err(|_| format!("invalid index in '{path}'"))?
            };
            if index > list.len() {
                return Err(format!(
                    "add operation does not apply: index out of range in '{path}'"
                ));
            }
            list.insert(index, value());
        }
        ("remove" | "replace", Value::Object(map)) => {
            if !map.contains_key(&last) {
                return Err(format!(
                    "{op} operation does not apply: doc is missing key: {path}"
                ));
            }
            if op == "remove" {
                map.remove(&last);
            } else {
                map.insert(last, value());
            }
        }
        ("remove" | "replace", Value::Array(list)) => {
            let index: usize = last
                .parse()
                .map_err(|_| format!("invalid index in '{path}'"))?;
            if index >= list.len() {
                return Err(format!(
                    "{op} operation does not apply: index out of range in '{path}'"
                ));
            }
            if op == "remove" {
                list.remove(index);
            } else {
                list[index] = value();
            }
        }
        _ => return Err(format!("{op} operation does not apply at '{path}'")),
    }
    Ok(())
}

/// Keeps `item`'s (namespace, name) before a transformer changes it.
fn remember(item: &mut Item) {
    let object = &item.object.object;
    let text = |p: &str| json::text(object, p).to_owned();
    let id = (text("/metadata/namespace"), text("/metadata/name"));
    if !item.earlier.contains(&id) {
        item.earlier.push(id);
    }
}

/// namespace, namePrefix/nameSuffix, labels and annotations, in kustomize's transformer order.
fn transform(kustomization: &Value, items: &mut [Item]) {
    if let Some(namespace) = kustomization.get("namespace").and_then(Value::as_str) {
        for item in items.iter_mut() {
            let kind = kind_of(&item.object.object);
            if kind == "Namespace" {
                // kustomize's namespace transformer renames Namespace objects too (a
                // replacement may still select one by its earlier name).
                remember(item);
                if let Some(metadata) = ensure(&mut item.object.object, "/metadata") {
                    metadata.insert("name".into(), json!(namespace));
                }
                continue;
            }
            if CLUSTER_SCOPED_KINDS.contains(&kind) {
                continue;
            }
            remember(item);
            if let Some(metadata) = ensure(&mut item.object.object, "/metadata") {
                metadata.insert("namespace".into(), json!(namespace));
            }
        }
    }
    let prefix = kustomization
        .get("namePrefix")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let suffix = kustomization
        .get("nameSuffix")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !prefix.is_empty() || !suffix.is_empty() {
        for item in items.iter_mut() {
            let kind = kind_of(&item.object.object);
            if matches!(kind, "Namespace" | "CustomResourceDefinition") {
                continue;
            }
            let name = name_of(&item.object.object);
            remember(item);
            if let Some(metadata) = ensure(&mut item.object.object, "/metadata") {
                metadata.insert("name".into(), json!(format!("{prefix}{name}{suffix}")));
            }
        }
    }
    let common = as_strings(kustomization.get("commonLabels"));
    if !common.is_empty() {
        for item in items.iter_mut() {
            labels(&mut item.object.object, &common, true, true);
        }
    }
    if let Some(list) = kustomization.get("labels").and_then(Value::as_array) {
        for entry in list {
            let pairs = as_strings(entry.get("pairs"));
            let selectors = entry.get("includeSelectors").and_then(Value::as_bool) == Some(true);
            let templates = entry.get("includeTemplates").and_then(Value::as_bool) == Some(true);
            for item in items.iter_mut() {
                labels(
                    &mut item.object.object,
                    &pairs,
                    selectors,
                    selectors || templates,
                );
            }
        }
    }
    let annotations = as_strings(kustomization.get("commonAnnotations"));
    if !annotations.is_empty() {
        for item in items.iter_mut() {
            item.marks.retain(|key, _| !annotations.contains_key(key));
            insert_all(
                &mut item.object.object,
                "/metadata",
                "annotations",
                &annotations,
            );
            let kind = kind_of(&item.object.object).to_owned();
            if let Some((_, templates, _)) = TEMPLATED.iter().find(|(k, _, _)| *k == kind) {
                for template in *templates {
                    insert_all(
                        &mut item.object.object,
                        template,
                        "annotations",
                        &annotations,
                    );
                }
            }
        }
    }
}

fn labels(object: &mut Value, pairs: &Map<String, Value>, selectors: bool, templates: bool) {
    insert_all(object, "/metadata", "labels", pairs);
    let kind = kind_of(object).to_owned();
    if let Some((_, paths, selector)) = TEMPLATED.iter().find(|(k, _, _)| *k == kind) {
        if templates {
            for template in *paths {
                insert_all(object, template, "labels", pairs);
            }
        }
        if let (true, Some(selector)) = (selectors, selector) {
            insert_all(object, selector, "matchLabels", pairs);
        }
    }
    if selectors && kind == "Service" {
        insert_all(object, "/spec", "selector", pairs);
    }
}

/// The last steps of a build: hash suffixes on generated objects, then references to renamed
/// ConfigMaps/Secrets in pod templates and where `configurations` say (kustomize's
/// `addHashesToNames` and nameReference).
fn finish(items: &mut [Item], refs: &[NameRef], build: &mut Build) {
    for item in items.iter_mut().filter(|i| i.generated && i.hash) {
        let suffix = hash_suffix(&item.object.object);
        let name = name_of(&item.object.object);
        if let Some(metadata) = ensure(&mut item.object.object, "/metadata") {
            metadata.insert("name".into(), json!(format!("{name}-{suffix}")));
        }
    }
    // (kind, namespace, original name) → current name, for names that changed.
    let mut renamed = BTreeMap::new();
    for item in items.iter() {
        let object = &item.object.object;
        let kind = kind_of(object);
        let current = name_of(object);
        if matches!(kind, "ConfigMap" | "Secret") && current != item.original {
            let namespace = json_at(object, "/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            renamed.insert((kind.to_owned(), namespace, item.original.clone()), current);
        }
    }
    if renamed.is_empty() {
        return;
    }
    for item in items.iter_mut() {
        let Object { object, file } = &mut item.object;
        let namespace = json_at(object, "/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let kind = kind_of(object).to_owned();
        let spec = match kind.as_str() {
            "Pod" => object.pointer_mut("/spec"),
            "CronJob" => object.pointer_mut("/spec/jobTemplate/spec/template/spec"),
            _ if TEMPLATED.iter().any(|(k, _, _)| *k == kind) => {
                object.pointer_mut("/spec/template/spec")
            }
            _ => None,
        };
        if let Some(spec) = spec {
            rename_in_pod(spec, &namespace, &renamed);
        }
        for path in nameref::apply(object, refs, &renamed) {
            build.problems.push(Problem {
                level: 1,
                code: "KustomizeUnsupported",
                object: format!("{kind}/{}", name_of(object)),
                file: file.clone(),
                line: None,
                message: format!(
                    "a map at '{path}' stands for a renamed ConfigMap or Secret; the built-in kustomize does not rename it"
                ),
            });
        }
    }
}

/// Where a pod spec names ConfigMaps and Secrets: (list in a container, pointer in an item, kind).
const CONTAINER_REFS: [(&str, &str, &str); 4] = [
    ("env", "/valueFrom/configMapKeyRef/name", "ConfigMap"),
    ("env", "/valueFrom/secretKeyRef/name", "Secret"),
    ("envFrom", "/configMapRef/name", "ConfigMap"),
    ("envFrom", "/secretRef/name", "Secret"),
];
/// The same in a volume and in a projected volume's source: (pointer, kind).
const VOLUME_REFS: [(&str, &str); 2] = [
    ("/configMap/name", "ConfigMap"),
    ("/secret/secretName", "Secret"),
];
const PROJECTED_REFS: [(&str, &str); 2] =
    [("/configMap/name", "ConfigMap"), ("/secret/name", "Secret")];

fn rename_in_pod(spec: &mut Value, namespace: &str, renamed: &Renamed) {
    for containers in ["containers", "initContainers"] {
        let Some(list) = spec.get_mut(containers).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in list {
            for (field, pointer, kind) in CONTAINER_REFS {
                let items = container.get_mut(field).and_then(Value::as_array_mut);
                for item in items.into_iter().flatten() {
                    if let Some(name) = item.pointer_mut(pointer) {
                        nameref::rename(name, kind, namespace, renamed);
                    }
                }
            }
        }
    }
    let volumes = spec.get_mut("volumes").and_then(Value::as_array_mut);
    for volume in volumes.into_iter().flatten() {
        for (pointer, kind) in VOLUME_REFS {
            if let Some(name) = volume.pointer_mut(pointer) {
                nameref::rename(name, kind, namespace, renamed);
            }
        }
        let sources = volume
            .pointer_mut("/projected/sources")
            .and_then(Value::as_array_mut);
        for source in sources.into_iter().flatten() {
            for (pointer, kind) in PROJECTED_REFS {
                if let Some(name) = source.pointer_mut(pointer) {
                    nameref::rename(name, kind, namespace, renamed);
                }
            }
        }
    }
}

/// kustomize's name hash (api/hasher): SHA-256 of Go's `json.Marshal` of the kind, an empty
/// name (kustomize looks the name up as a field literally called `metadata/name`, so it is always
/// empty), `data` (the empty string when absent), `binaryData` when it is a map, and for Secrets
/// `type` and `stringData`; then the first ten hex digits with `0 1 3 a e` replaced by `g h k m t`.
pub fn hash_suffix(object: &Value) -> String {
    let kind = kind_of(object);
    let field = |key: &str| object.get(key).cloned().unwrap_or_else(|| json!(""));
    let mut encoded = BTreeMap::new();
    encoded.insert("kind", json!(kind));
    encoded.insert("name", json!(""));
    encoded.insert("data", field("data"));
    let optional = if kind == "Secret" {
        encoded.insert("type", field("type"));
        "stringData"
    } else {
        "binaryData"
    };
    if let Some(map) = object.get(optional).filter(|m| m.is_object()) {
        encoded.insert(optional, map.clone());
    }
    let json = serde_json::to_string(&encoded).unwrap_or_default();
    // Go's encoder escapes these inside strings (they appear nowhere else in the text).
    let json = json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let digest = Sha256::digest(json.as_bytes());
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    hex.chars()
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            c => c,
        })
        .collect()
}
