//! An object read or built from the repository, with the file it came from, and how findings
//! name it.

use serde_json::Value;

/// `Kind/namespace/name` (`Kind/name` without a namespace): findings name objects as every
/// audit does.
pub use conflux_watch_index::audit::name_of as object_name;

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
