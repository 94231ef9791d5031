//! The Flux Kustomization's own fields that kustomize-controller lays over the directory's
//! kustomization ([`FluxOverlay`]): added to the kustomization it builds, and `commonMetadata`
//! set on every object after the build.

use conflux_postbuild_subst::json::pointer as json_at;
use serde_json::{Map, Value, json};

use super::Object;
use super::builtin::insert_all;

/// The fields of a Flux Kustomization that kustomize-controller adds to the kustomization it
/// builds (`targetNamespace`, `namePrefix`, `nameSuffix`, `patches`, `components`, `images`),
/// and `commonMetadata`, which it sets on every object after the build.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FluxOverlay {
    /// `spec.targetNamespace`.
    pub namespace: Option<String>,
    /// `spec.namePrefix`.
    pub name_prefix: Option<String>,
    /// `spec.nameSuffix`.
    pub name_suffix: Option<String>,
    /// `spec.patches`, as kustomize `patches` entries.
    pub patches: Vec<Value>,
    /// `spec.components`, relative to the path.
    pub components: Vec<String>,
    /// `spec.images`.
    pub images: Vec<Value>,
    /// `spec.commonMetadata`.
    pub common_metadata: Option<Value>,
}

impl FluxOverlay {
    /// The overlay of the Flux Kustomization `ks`.
    pub(crate) fn of(ks: &Value) -> Self {
        let string = |p: &str| json_at(ks, p).and_then(Value::as_str).map(str::to_owned);
        let list = |p: &str| {
            json_at(ks, p)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        FluxOverlay {
            namespace: string("/spec/targetNamespace").filter(|s| !s.is_empty()),
            name_prefix: string("/spec/namePrefix").filter(|s| !s.is_empty()),
            name_suffix: string("/spec/nameSuffix").filter(|s| !s.is_empty()),
            patches: list("/spec/patches"),
            components: list("/spec/components")
                .iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect(),
            images: list("/spec/images"),
            common_metadata: json_at(ks, "/spec/commonMetadata").cloned(),
        }
    }

    /// Whether kustomize has anything to add to the directory's own kustomization.
    pub fn is_empty(&self) -> bool {
        self.namespace.is_none()
            && self.name_prefix.is_none()
            && self.name_suffix.is_none()
            && self.patches.is_empty()
            && self.components.is_empty()
            && self.images.is_empty()
    }

    /// Edits the path's own kustomization as kustomize-controller's generator does
    /// (fluxcd/pkg/kustomize): `targetNamespace`, `namePrefix` and `nameSuffix` replace the
    /// kustomization's; `patches` and `components` are appended; each of `images` updates the
    /// entry of the same name (`newName`; `newTag` and `digest` together) or is appended.
    pub(super) fn add_to(&self, kustomization: &mut Map<String, Value>) {
        let strings = [
            ("namespace", &self.namespace),
            ("namePrefix", &self.name_prefix),
            ("nameSuffix", &self.name_suffix),
        ];
        for (key, value) in strings {
            if let Some(value) = value {
                kustomization.insert(key.into(), json!(value));
            }
        }
        let list = |kustomization: &mut Map<String, Value>, key: &str| {
            let entry = kustomization.entry(key).or_insert_with(|| json!([]));
            if !entry.is_array() {
                *entry = json!([]);
            }
            // Proven just above: the entry is an array.
            entry.as_array_mut().map(std::mem::take).unwrap_or_default()
        };
        if !self.patches.is_empty() {
            let mut patches = list(kustomization, "patches");
            patches.extend(self.patches.iter().cloned());
            kustomization.insert("patches".into(), Value::Array(patches));
        }
        if !self.components.is_empty() {
            let mut components = list(kustomization, "components");
            components.extend(self.components.iter().map(|c| json!(c)));
            kustomization.insert("components".into(), Value::Array(components));
        }
        if !self.images.is_empty() {
            let mut images = list(kustomization, "images");
            for image in &self.images {
                let field = |v: &Value, k: &str| {
                    v.get(k)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                };
                let name = field(image, "name");
                match images.iter_mut().find(|i| field(i, "name") == name) {
                    Some(existing) => {
                        if let (Some(new_name), Some(map)) =
                            (field(image, "newName"), existing.as_object_mut())
                        {
                            map.insert("newName".into(), json!(new_name));
                        }
                        let (tag, digest) = (field(image, "newTag"), field(image, "digest"));
                        if let (true, Some(map)) =
                            (tag.is_some() || digest.is_some(), existing.as_object_mut())
                        {
                            // One version: setting one clears the other.
                            for (key, value) in [("newTag", tag), ("digest", digest)] {
                                match value {
                                    Some(v) => map.insert(key.into(), json!(v)),
                                    None => map.remove(key),
                                };
                            }
                        }
                    }
                    None => images.push(image.clone()),
                }
            }
            kustomization.insert("images".into(), Value::Array(images));
        }
    }

    /// `spec.commonMetadata`: labels and annotations on every object (kustomize-controller's
    /// post-build step, which does not touch selectors).
    pub(crate) fn common_metadata(&self, objects: &mut [Object]) {
        let Some(common) = &self.common_metadata else {
            return;
        };
        for object in objects {
            for field in ["labels", "annotations"] {
                if let Some(extra) = common.get(field).and_then(Value::as_object) {
                    insert_all(&mut object.object, "/metadata", field, extra);
                }
            }
        }
    }
}
