//! An object read or built from the repository, with the file it came from, and how findings
//! name it.

use serde_json::Value;

/// A built object and the file it came from, relative to the repository root.
#[derive(Clone, PartialEq)]
pub struct Object {
    /// The object.
    pub object: Value,
    /// Its file (for generated objects: the kustomization file that generated it).
    pub file: Option<String>,
}

/// By hand: the object may be a Secret.
impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("object", &object_name(&self.object))
            .field("file", &self.file)
            .finish()
    }
}

/// `Kind/namespace/name` (`Kind/name` without a namespace).
pub fn object_name(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (kind, name) = (text("/kind"), text("/metadata/name"));
    match text("/metadata/namespace") {
        "" => format!("{kind}/{name}"),
        namespace => format!("{kind}/{namespace}/{name}"),
    }
}
