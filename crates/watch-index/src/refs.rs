//! References from Flux objects (and copies) to ConfigMaps and Secrets (docs/design.md 3.2).
//!
//! A [`ReferenceSet`] knows, per referrer kind, where references live in the object. Objects are
//! plain `serde_json::Value`s (a `DynamicObject` serialises to one), so no Flux CRD types are needed
//! and any API version of a group matches. [`ReferenceSet::flux`] is the default set:
//!
//! | referrer | ConfigMap | Secret |
//! |---|---|---|
//! | `Kustomization` | `spec.kubeConfig.configMapRef.name`, `spec.postBuild.substituteFrom[kind=ConfigMap].name` | `spec.decryption.secretRef.name`, `spec.kubeConfig.secretRef.name`, `spec.postBuild.substituteFrom[kind=Secret].name` |
//! | `HelmRelease` | `spec.kubeConfig.configMapRef.name`, `spec.valuesFrom[kind=ConfigMap].name` | `spec.kubeConfig.secretRef.name`, `spec.valuesFrom[kind=Secret].name` |
//! | `Receiver` | — | `spec.secretRef.name` |
//! | ConfigMap/Secret copy | `fluxcd.controlplane.io/copyFrom: ns/name` | same |
//!
//! Copies make ConfigMaps/Secrets (group `""`) referrers too: the copy controller wants them, a
//! controller that only wakes Flux objects skips referrers whose group is empty.
//!
//! Another controller extends a set with its own kinds, either with a field path
//! ([`ReferenceSet::register_path`]) or a closure ([`ReferenceSet::register_fn`]); see
//! `examples/third_party_refs.rs`.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use crate::{Error, Result};

/// API group of Flux Kustomizations.
pub const KUSTOMIZE_GROUP: &str = "kustomize.toolkit.fluxcd.io";
/// API group of Flux HelmReleases.
pub const HELM_GROUP: &str = "helm.toolkit.fluxcd.io";
/// API group of Flux Receivers.
pub const NOTIFICATION_GROUP: &str = "notification.toolkit.fluxcd.io";
/// Annotation that makes a ConfigMap/Secret a copy of `namespace/name` (Flux Operator).
pub const COPY_FROM_ANNOTATION: &str = "fluxcd.controlplane.io/copyFrom";

/// The two kinds of configuration objects: what a reference points at, what a copy copies, what
/// a pod consumes. The one kind type of every conflux crate.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
// Deliberately exhaustive, the one exception: Kubernetes has exactly these two config kinds, and
// embedders must be able to match both without a wildcard arm that could only be a panic.
pub enum ConfigKind {
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 Secret.
    Secret,
}

impl ConfigKind {
    /// The Kubernetes `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
        }
    }

    /// The kind of a `v1` object: `apiVersion: v1` and kind ConfigMap or Secret; anything else
    /// (another group, another kind) is `None`.
    pub fn of_object(api_version: &str, kind: &str) -> Option<Self> {
        if api_version != "v1" {
            return None;
        }
        Self::from_kind(kind)
    }

    /// Parses a Kubernetes `kind` string (exact, case-sensitive, as the API server spells it).
    pub fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            "ConfigMap" => Some(ConfigKind::ConfigMap),
            "Secret" => Some(ConfigKind::Secret),
            _ => None,
        }
    }
}

#[cfg(feature = "configs")]
impl From<ConfigKind> for conflux_runtime::configs::Kind {
    fn from(kind: ConfigKind) -> Self {
        match kind {
            ConfigKind::ConfigMap => conflux_runtime::configs::Kind::ConfigMap,
            ConfigKind::Secret => conflux_runtime::configs::Kind::Secret,
        }
    }
}

#[cfg(feature = "configs")]
impl From<conflux_runtime::configs::Kind> for ConfigKind {
    fn from(kind: conflux_runtime::configs::Kind) -> Self {
        match kind {
            conflux_runtime::configs::Kind::Secret => ConfigKind::Secret,
            // The runtime's kind is non-exhaustive; it has no other kind today.
            _ => ConfigKind::ConfigMap,
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A ConfigMap or Secret, by kind, namespace and name: the key of the reverse index.
///
/// Strings are `Arc<str>` so clones are a reference-count increment and the index can share one
/// namespace string among all keys of that namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConfigKey {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Namespace of the ConfigMap/Secret.
    pub namespace: Arc<str>,
    /// Name of the ConfigMap/Secret.
    pub name: Arc<str>,
}

impl ConfigKey {
    /// A key from its parts.
    pub fn new(
        kind: ConfigKind,
        namespace: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
    ) -> Self {
        ConfigKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// Hashes a key from borrowed parts; [`ConfigKey`]'s `Hash` uses the same function so the index can
/// be queried with `&str`s without building a key.
pub(crate) fn hash_key_parts<H: Hasher>(kind: ConfigKind, namespace: &str, name: &str, h: &mut H) {
    h.write_u8(kind as u8);
    namespace.hash(h);
    name.hash(h);
}

impl Hash for ConfigKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key_parts(self.kind, &self.namespace, &self.name, state);
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// An object that references ConfigMaps/Secrets: group (empty for core), kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// API group without version (`""` for core objects such as a copied ConfigMap).
    pub group: Arc<str>,
    /// Kind, e.g. `Kustomization`.
    pub kind: Arc<str>,
    /// Namespace of the referrer.
    pub namespace: Arc<str>,
    /// Name of the referrer.
    pub name: Arc<str>,
}

impl ObjectRef {
    /// A referrer from its parts.
    pub fn new(
        group: impl Into<Arc<str>>,
        kind: impl Into<Arc<str>>,
        namespace: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
    ) -> Self {
        ObjectRef {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        } else {
            write!(
                f,
                "{}.{}/{}/{}",
                self.kind, self.group, self.namespace, self.name
            )
        }
    }
}

/// One reference found in a referrer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// What is referenced.
    pub key: ConfigKey,
    /// `optional: true` on the reference; optional references are indexed like the others because
    /// the deletion of an optional source must still trigger (docs/design.md 3.2).
    pub optional: bool,
    /// Where the reference was found, e.g. `spec.valuesFrom[kind=ConfigMap].name` (for messages).
    pub path: Arc<str>,
}

/// Everything the index needs to know about one referrer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    /// The referrer itself.
    pub object: ObjectRef,
    /// Its references, in document order; duplicates are allowed (the index removes them).
    pub references: Vec<Reference>,
    /// Objects of the same group and kind it depends on (`spec.dependsOn` of a Kustomization), used
    /// to order referrers; empty for kinds without dependencies.
    pub depends_on: Vec<ObjectRef>,
}

/// A parsed field path such as `spec.valuesFrom[kind=ConfigMap].name`.
///
/// Grammar: segments separated by `.`; a segment is a field name, optionally followed by `[]`
/// (every element of a list) or `[field=value]` (elements whose string `field` equals `value`).
/// The last segment is a plain field holding the referenced name; the object holding it may carry
/// `optional: true`. Parsed once at registration, evaluated without allocation except the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: Arc<str>,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    field: String,
    list: Option<Option<(String, String)>>,
}

impl FieldPath {
    /// Parses a path; errors name the path and what is wrong.
    pub fn parse(path: &str) -> Result<Self> {
        let err = |reason| Error::FieldPath {
            path: path.to_owned(),
            reason,
        };
        let mut segments = Vec::new();
        let mut rest = path;
        loop {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let field = &rest[..end];
            if field.is_empty() || field.contains([']', '=']) {
                return Err(err("every segment needs a field name"));
            }
            rest = &rest[end..];
            let mut list = None;
            if let Some(after) = rest.strip_prefix('[') {
                let close = after.find(']').ok_or_else(|| err("missing ']'"))?;
                let inner = &after[..close];
                list = Some(if inner.is_empty() {
                    None
                } else {
                    let (k, v) = inner
                        .split_once('=')
                        .ok_or_else(|| err("a list filter is written [field=value]"))?;
                    if k.is_empty() || v.is_empty() || v.contains(['[', '=']) {
                        return Err(err("a list filter is written [field=value]"));
                    }
                    Some((k.to_owned(), v.to_owned()))
                });
                rest = &after[close + 1..];
            }
            segments.push(Segment {
                field: field.to_owned(),
                list,
            });
            if rest.is_empty() {
                break;
            }
            rest = rest
                .strip_prefix('.')
                .ok_or_else(|| err("expected '.' after ']'"))?;
        }
        if segments.last().is_some_and(|s| s.list.is_some()) {
            return Err(err("the last segment must be the field holding the name"));
        }
        Ok(FieldPath {
            text: path.into(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Calls `found(name, optional)` for every non-empty string the path reaches in `value`.
    pub fn visit<'v>(&self, value: &'v Value, found: &mut impl FnMut(&'v str, bool)) {
        visit_segments(&self.segments, value, found);
    }
}

impl std::str::FromStr for FieldPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        FieldPath::parse(s)
    }
}

fn visit_segments<'v>(segs: &[Segment], value: &'v Value, found: &mut impl FnMut(&'v str, bool)) {
    let Some((seg, rest)) = segs.split_first() else {
        return;
    };
    let Some(child) = value.get(&seg.field) else {
        return;
    };
    if rest.is_empty() {
        // The name field: its holder may say `optional: true`.
        if let Some(name) = child.as_str().filter(|n| !n.is_empty()) {
            let optional = value.get("optional").and_then(Value::as_bool) == Some(true);
            found(name, optional);
        }
        return;
    }
    match &seg.list {
        None => visit_segments(rest, child, found),
        Some(filter) => {
            for item in child.as_array().map(Vec::as_slice).unwrap_or_default() {
                let keep = filter
                    .as_ref()
                    .is_none_or(|(k, v)| item.get(k).and_then(Value::as_str) == Some(v.as_str()));
                if keep {
                    visit_segments(rest, item, found);
                }
            }
        }
    }
}

/// A closure extracting references from an object: gets the object and the referrer's namespace,
/// pushes what it finds.
pub type ExtractFn = dyn Fn(&Value, &Arc<str>, &mut Vec<Reference>) + Send + Sync;

#[derive(Clone)]
enum Extractor {
    Path { target: ConfigKind, path: FieldPath },
    Func(Arc<ExtractFn>),
}

#[derive(Clone)]
struct Rule {
    group: Arc<str>,
    kind: Arc<str>,
    extractor: Extractor,
}

/// Which kinds reference ConfigMaps/Secrets, and where. Cheap to clone (rules are shared).
#[derive(Clone, Default)]
pub struct ReferenceSet {
    rules: Vec<Rule>,
    depends_on: Vec<(Arc<str>, Arc<str>)>,
}

impl fmt::Debug for ReferenceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for r in &self.rules {
            match &r.extractor {
                Extractor::Path { target, path } => list.entry(&format_args!(
                    "{}.{} {} -> {}",
                    r.kind,
                    r.group,
                    path.as_str(),
                    target
                )),
                Extractor::Func(_) => list.entry(&format_args!("{}.{} <fn>", r.kind, r.group)),
            };
        }
        list.finish()
    }
}

impl ReferenceSet {
    /// A set that knows no kinds.
    pub fn new() -> Self {
        Self::default()
    }

    /// The default reference set of docs/design.md 3.2: Kustomization, HelmRelease, Receiver and copies,
    /// plus Kustomization `spec.dependsOn` for ordering.
    pub fn flux() -> Self {
        use ConfigKind::{ConfigMap, Secret};
        let paths: [(&str, &str, ConfigKind, &str); 10] = [
            (
                KUSTOMIZE_GROUP,
                "Kustomization",
                ConfigMap,
                "spec.kubeConfig.configMapRef.name",
            ),
            (
                KUSTOMIZE_GROUP,
                "Kustomization",
                ConfigMap,
                "spec.postBuild.substituteFrom[kind=ConfigMap].name",
            ),
            (
                KUSTOMIZE_GROUP,
                "Kustomization",
                Secret,
                "spec.decryption.secretRef.name",
            ),
            (
                KUSTOMIZE_GROUP,
                "Kustomization",
                Secret,
                "spec.kubeConfig.secretRef.name",
            ),
            (
                KUSTOMIZE_GROUP,
                "Kustomization",
                Secret,
                "spec.postBuild.substituteFrom[kind=Secret].name",
            ),
            (
                HELM_GROUP,
                "HelmRelease",
                ConfigMap,
                "spec.kubeConfig.configMapRef.name",
            ),
            (
                HELM_GROUP,
                "HelmRelease",
                ConfigMap,
                "spec.valuesFrom[kind=ConfigMap].name",
            ),
            (
                HELM_GROUP,
                "HelmRelease",
                Secret,
                "spec.kubeConfig.secretRef.name",
            ),
            (
                HELM_GROUP,
                "HelmRelease",
                Secret,
                "spec.valuesFrom[kind=Secret].name",
            ),
            (
                NOTIFICATION_GROUP,
                "Receiver",
                Secret,
                "spec.secretRef.name",
            ),
        ];
        let mut set = ReferenceSet::new();
        for (group, kind, target, path) in paths {
            // The paths above are literals covered by tests, so parsing cannot fail.
            if let Ok(path) = FieldPath::parse(path) {
                set.push_path(group, kind, target, path);
            }
        }
        set.register_fn("", "ConfigMap", copy_from);
        set.register_fn("", "Secret", copy_from);
        set.register_depends_on(KUSTOMIZE_GROUP, "Kustomization");
        set
    }

    /// Registers a field path of `kind` in `group` (any version) that names a `target` in the
    /// referrer's own namespace, e.g. `("example.com", "Widget", ConfigMap, "spec.configRef.name")`.
    pub fn register_path(
        &mut self,
        group: &str,
        kind: &str,
        target: ConfigKind,
        path: &str,
    ) -> Result<&mut Self> {
        let path = FieldPath::parse(path)?;
        self.push_path(group, kind, target, path);
        Ok(self)
    }

    fn push_path(&mut self, group: &str, kind: &str, target: ConfigKind, path: FieldPath) {
        self.rules.push(Rule {
            group: group.into(),
            kind: kind.into(),
            extractor: Extractor::Path { target, path },
        });
    }

    /// Registers a closure for references a path cannot express (another namespace, a name built
    /// from several fields). It receives the object and the referrer's namespace.
    pub fn register_fn(
        &mut self,
        group: &str,
        kind: &str,
        f: impl Fn(&Value, &Arc<str>, &mut Vec<Reference>) + Send + Sync + 'static,
    ) -> &mut Self {
        self.rules.push(Rule {
            group: group.into(),
            kind: kind.into(),
            extractor: Extractor::Func(Arc::new(f)),
        });
        self
    }

    /// Makes `spec.dependsOn[]` (`name`, optional `namespace` defaulting to the referrer's) of this
    /// kind count for [`ReverseIndex::referrers_in_dependency_order`](crate::index::ReverseIndex::referrers_in_dependency_order).
    pub fn register_depends_on(&mut self, group: &str, kind: &str) -> &mut Self {
        self.depends_on.push((group.into(), kind.into()));
        self
    }

    /// Whether objects of this group and kind are referrers in this set.
    pub fn knows(&self, group: &str, kind: &str) -> bool {
        self.rules
            .iter()
            .any(|r| &*r.group == group && &*r.kind == kind)
    }

    /// Extracts the referrer and its references from an object. `None` when the kind is not in the
    /// set or the object has no `kind`, `apiVersion`, `metadata.name` or `metadata.namespace`.
    pub fn extract(&self, obj: &Value) -> Option<Referrer> {
        let kind = obj.get("kind")?.as_str()?;
        let api_version = obj.get("apiVersion")?.as_str()?;
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let meta = obj.get("metadata")?;
        let name = meta.get("name")?.as_str()?;
        let namespace: Arc<str> = meta.get("namespace")?.as_str()?.into();
        let mut rules = self
            .rules
            .iter()
            .filter(|r| &*r.group == group && &*r.kind == kind)
            .peekable();
        let first = rules.peek()?;
        let object = ObjectRef {
            group: first.group.clone(),
            kind: first.kind.clone(),
            namespace: namespace.clone(),
            name: name.into(),
        };
        let mut references = Vec::new();
        for rule in rules {
            match &rule.extractor {
                Extractor::Path { target, path } => path.visit(obj, &mut |name, optional| {
                    references.push(Reference {
                        key: ConfigKey {
                            kind: *target,
                            namespace: namespace.clone(),
                            name: name.into(),
                        },
                        optional,
                        path: path.text.clone(),
                    })
                }),
                Extractor::Func(f) => f(obj, &namespace, &mut references),
            }
        }
        let mut depends_on = Vec::new();
        if self
            .depends_on
            .iter()
            .any(|(g, k)| **g == *object.group && **k == *object.kind)
        {
            let deps = obj.pointer("/spec/dependsOn").and_then(Value::as_array);
            for dep in deps.map(Vec::as_slice).unwrap_or_default() {
                let Some(dep_name) = dep.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let dep_ns = match dep.get("namespace").and_then(Value::as_str) {
                    Some(ns) if !ns.is_empty() => ns.into(),
                    _ => namespace.clone(),
                };
                depends_on.push(ObjectRef {
                    group: object.group.clone(),
                    kind: object.kind.clone(),
                    namespace: dep_ns,
                    name: dep_name.into(),
                });
            }
        }
        Some(Referrer {
            object,
            references,
            depends_on,
        })
    }

    /// Only the references of an object (empty when its kind is not in the set).
    pub fn references(&self, obj: &Value) -> Vec<Reference> {
        self.extract(obj).map(|r| r.references).unwrap_or_default()
    }
}

/// What is malformed in a Flux object's lists of config references: a Kustomization's
/// `spec.postBuild.substituteFrom` or a HelmRelease's `spec.valuesFrom` that is not a list, or an
/// entry that is not an object, lacks a `name` string or names a kind other than ConfigMap or
/// Secret. Flux rejects such objects at admission when its CRDs validate; without that (or with
/// older CRDs), the malformed entries reference nothing, and the controller says so. Empty for
/// well-formed objects and for other kinds.
pub fn flux_reference_problems(obj: &Value) -> Vec<String> {
    let (field, pointer) = match (
        obj.get("apiVersion").and_then(Value::as_str),
        obj.get("kind").and_then(Value::as_str),
    ) {
        (Some(v), Some("Kustomization")) if v.starts_with("kustomize.toolkit.fluxcd.io/") => (
            "spec.postBuild.substituteFrom",
            "/spec/postBuild/substituteFrom",
        ),
        (Some(v), Some("HelmRelease")) if v.starts_with("helm.toolkit.fluxcd.io/") => {
            ("spec.valuesFrom", "/spec/valuesFrom")
        }
        _ => return Vec::new(),
    };
    let Some(list) = obj.pointer(pointer).filter(|v| !v.is_null()) else {
        return Vec::new();
    };
    let Some(entries) = list.as_array() else {
        return vec![format!("{field} is not a list")];
    };
    let mut problems = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some(entry) = entry.as_object() else {
            problems.push(format!("{field}[{i}] is not an object"));
            continue;
        };
        match entry.get("kind").and_then(Value::as_str) {
            Some("ConfigMap" | "Secret") => {}
            Some(other) => problems.push(format!(
                "{field}[{i}].kind is {:?}, not ConfigMap or Secret",
                other.chars().take(64).collect::<String>()
            )),
            None => problems.push(format!("{field}[{i}].kind is missing or not a string")),
        }
        if entry
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            problems.push(format!("{field}[{i}].name is missing or not a string"));
        }
    }
    problems
}

/// Parses a `fluxcd.controlplane.io/copyFrom` value: exactly `namespace/name`, a valid namespace
/// name and a valid object name.
pub fn parse_copy_from(value: &str) -> Option<(&str, &str)> {
    let (ns, name) = value.split_once('/')?;
    // Names the API server would refuse are refused here, so that a value like `../x` or 300
    // characters is reported as malformed instead of being sent in a request path.
    (is_dns1123_label(ns) && is_dns1123_subdomain(name)).then_some((ns, name))
}

/// A namespace name: at most 63 lowercase alphanumerics or `-`, alphanumeric at both ends.
fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A ConfigMap or Secret name: at most 253 characters, dot-separated labels of lowercase
/// alphanumerics or `-` (each label alphanumeric at both ends; labels may exceed 63 here, as
/// apimachinery's `IsDNS1123Subdomain` allows).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

/// The copy rule: a ConfigMap/Secret annotated `copyFrom: ns/name` references the source of the same
/// kind, possibly in another namespace. Invalid values are not references (copy-core reports them).
fn copy_from(obj: &Value, _namespace: &Arc<str>, out: &mut Vec<Reference>) {
    let Some(kind) = obj
        .get("kind")
        .and_then(Value::as_str)
        .and_then(ConfigKind::from_kind)
    else {
        return;
    };
    let value = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(COPY_FROM_ANNOTATION))
        .and_then(Value::as_str);
    if let Some((ns, name)) = value.and_then(parse_copy_from) {
        out.push(Reference {
            key: ConfigKey::new(kind, ns, name),
            optional: false,
            path: Arc::from("metadata.annotations[fluxcd.controlplane.io/copyFrom]"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(set: &ReferenceSet, obj: &Value) -> Vec<(String, bool)> {
        set.references(obj)
            .into_iter()
            .map(|r| (r.key.to_string(), r.optional))
            .collect()
    }

    fn s(k: &str) -> (String, bool) {
        (k.to_owned(), false)
    }

    #[test]
    fn malformed_flux_reference_lists_are_named() {
        let k = |post_build: Value| {
            serde_json::json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                               "spec": {"postBuild": post_build}})
        };
        assert!(flux_reference_problems(&k(serde_json::json!({"substituteFrom": [
            {"kind": "ConfigMap", "name": "a"}, {"kind": "Secret", "name": "b", "optional": true}
        ]})))
        .is_empty());
        assert!(flux_reference_problems(&k(serde_json::json!({}))).is_empty());
        assert_eq!(
            flux_reference_problems(&k(serde_json::json!({"substituteFrom": "vars"}))),
            ["spec.postBuild.substituteFrom is not a list"]
        );
        assert_eq!(
            flux_reference_problems(&k(serde_json::json!({"substituteFrom": [
                7, {"kind": "Pod", "name": "x"}, {"kind": "ConfigMap"}, {"name": 3}
            ]}))),
            [
                "spec.postBuild.substituteFrom[0] is not an object",
                "spec.postBuild.substituteFrom[1].kind is \"Pod\", not ConfigMap or Secret",
                "spec.postBuild.substituteFrom[2].name is missing or not a string",
                "spec.postBuild.substituteFrom[3].kind is missing or not a string",
                "spec.postBuild.substituteFrom[3].name is missing or not a string",
            ]
        );
        let hr = serde_json::json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                                    "spec": {"valuesFrom": {"kind": "Secret"}}});
        assert_eq!(
            flux_reference_problems(&hr),
            ["spec.valuesFrom is not a list"]
        );
        let other =
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "spec": {"valuesFrom": 1}});
        assert!(flux_reference_problems(&other).is_empty());
    }

    #[test]
    fn kustomization_every_default_path() {
        let ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {
                "kubeConfig": {"configMapRef": {"name": "kc-cm"}, "secretRef": {"name": "kc-sec"}},
                "decryption": {"provider": "sops", "secretRef": {"name": "sops"}},
                "postBuild": {"substituteFrom": [
                    {"kind": "ConfigMap", "name": "vars"},
                    {"kind": "Secret", "name": "secret-vars", "optional": true},
                    {"kind": "Other", "name": "ignored"},
                ]},
            },
        });
        assert_eq!(
            keys(&ReferenceSet::flux(), &ks),
            vec![
                s("ConfigMap/team/kc-cm"),
                s("ConfigMap/team/vars"),
                s("Secret/team/sops"),
                s("Secret/team/kc-sec"),
                ("Secret/team/secret-vars".to_owned(), true),
            ]
        );
    }

    #[test]
    fn helmrelease_any_version_and_receiver() {
        let set = ReferenceSet::flux();
        let hr = json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2beta1",
            "kind": "HelmRelease",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {
                "kubeConfig": {"secretRef": {"name": "remote"}},
                "valuesFrom": [
                    {"kind": "ConfigMap", "name": "values", "valuesKey": "a.yaml"},
                    {"kind": "Secret", "name": "creds", "optional": true},
                    {"kind": "ConfigMap", "name": "values"},
                ],
            },
        });
        assert_eq!(
            keys(&set, &hr),
            vec![
                s("ConfigMap/apps/values"),
                s("ConfigMap/apps/values"),
                s("Secret/apps/remote"),
                ("Secret/apps/creds".to_owned(), true),
            ]
        );
        let rcv = json!({
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "gh", "namespace": "flux-system"},
            "spec": {"type": "github", "secretRef": {"name": "token"}},
        });
        assert_eq!(keys(&set, &rcv), vec![s("Secret/flux-system/token")]);
        // Some receiver types have no secret.
        let rcv = json!({
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "gh", "namespace": "flux-system"},
            "spec": {"type": "generic"},
        });
        assert_eq!(keys(&set, &rcv), vec![]);
        assert!(
            set.extract(&rcv).is_some(),
            "still a referrer, with no references"
        );
    }

    #[test]
    fn copies_are_cross_namespace_and_validated() {
        let set = ReferenceSet::flux();
        let copy = |kind: &str, value: &str| {
            json!({
                "apiVersion": "v1", "kind": kind,
                "metadata": {"name": "t", "namespace": "dst",
                             "annotations": {COPY_FROM_ANNOTATION: value}},
            })
        };
        assert_eq!(
            keys(&set, &copy("ConfigMap", "src/cfg")),
            vec![s("ConfigMap/src/cfg")]
        );
        assert_eq!(
            keys(&set, &copy("Secret", "src/tok")),
            vec![s("Secret/src/tok")]
        );
        for bad in ["", "noslash", "/x", "x/", "a/b/c"] {
            assert_eq!(keys(&set, &copy("Secret", bad)), vec![], "{bad:?}");
        }
        let r = set.extract(&copy("Secret", "src/tok")).unwrap();
        assert_eq!(r.object, ObjectRef::new("", "Secret", "dst", "t"));
    }

    #[test]
    fn unknown_kinds_and_broken_objects_are_not_referrers() {
        let set = ReferenceSet::flux();
        for obj in [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "namespace": "b"}}),
            json!({"apiVersion": "other.io/v1", "kind": "Kustomization", "metadata": {"name": "a", "namespace": "b"}}),
            json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "metadata": {"name": "a"}}),
            json!({"kind": "Kustomization"}),
            json!("not an object"),
        ] {
            assert!(set.extract(&obj).is_none(), "{obj}");
        }
    }

    #[test]
    fn wrong_json_shapes_are_ignored() {
        let ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {
                "kubeConfig": {"configMapRef": {"name": 7}, "secretRef": "oops"},
                "decryption": {"secretRef": {"name": ""}},
                "postBuild": {"substituteFrom": {"kind": "ConfigMap", "name": "x"}},
            },
        });
        assert_eq!(keys(&ReferenceSet::flux(), &ks), vec![]);
    }

    #[test]
    fn depends_on_defaults_to_own_namespace() {
        let ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {"dependsOn": [{"name": "infra"}, {"name": "crds", "namespace": "flux-system"}, {}]},
        });
        let r = ReferenceSet::flux().extract(&ks).unwrap();
        let deps: Vec<String> = r.depends_on.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            deps,
            [
                "Kustomization.kustomize.toolkit.fluxcd.io/team/infra",
                "Kustomization.kustomize.toolkit.fluxcd.io/flux-system/crds"
            ]
        );
    }

    #[test]
    fn field_path_grammar() {
        for good in [
            "a",
            "a.b",
            "a[].b",
            "a[k=v].b.c",
            "spec.x[kind=Secret].y[].name",
        ] {
            assert_eq!(FieldPath::parse(good).unwrap().as_str(), good);
        }
        for bad in [
            "", ".a", "a.", "a..b", "a[", "a[]", "a[k].b", "a[=v].b", "a[k=].b", "a[]b", "a]",
        ] {
            assert!(
                matches!(FieldPath::parse(bad), Err(Error::FieldPath { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn registered_kinds_extend_the_set() {
        let mut set = ReferenceSet::flux();
        set.register_path(
            "example.com",
            "Widget",
            ConfigKind::ConfigMap,
            "spec.sources[].configMap",
        )
        .unwrap();
        set.register_fn("example.com", "Widget", |obj, _ns, out| {
            if let Some(s) = obj.pointer("/spec/globalSecret").and_then(Value::as_str) {
                out.push(Reference {
                    key: ConfigKey::new(ConfigKind::Secret, "shared", s),
                    optional: false,
                    path: "spec.globalSecret".into(),
                });
            }
        });
        let w = json!({
            "apiVersion": "example.com/v1alpha1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"sources": [{"configMap": "a"}, {"configMap": "b", "optional": true}, {}],
                     "globalSecret": "g"},
        });
        assert!(set.knows("example.com", "Widget"));
        assert_eq!(
            keys(&set, &w),
            vec![
                s("ConfigMap/ns/a"),
                ("ConfigMap/ns/b".to_owned(), true),
                s("Secret/shared/g")
            ]
        );
        assert_eq!(
            set.references(&w)[0].path.as_ref(),
            "spec.sources[].configMap"
        );
    }

    #[test]
    fn key_hash_matches_borrowed_parts() {
        use std::hash::BuildHasher;
        let rs = std::hash::RandomState::new();
        let k = ConfigKey::new(ConfigKind::Secret, "ns", "n");
        let mut h = rs.build_hasher();
        hash_key_parts(ConfigKind::Secret, "ns", "n", &mut h);
        assert_eq!(rs.hash_one(&k), h.finish());
    }
}
