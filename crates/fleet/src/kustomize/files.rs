//! The YAML files of one `conflux plan`, each read and parsed once: the fleet's files are all
//! read to find its clusters, and the built-in engine reads most of them again, several times
//! where bases and components are shared.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use super::{Marked, parse_yaml_text};
use crate::{Error, Result};

/// A file as [`parse_yaml_text`] read it: the text (mended where go-yaml reads an alias
/// differently) and its documents.
#[derive(Debug)]
struct Parsed {
    text: String,
    documents: Vec<Value>,
}

/// Parsed files by path, shared by the threads of one plan. Files do not change while a plan
/// runs; a file that fails to read or parse is not kept (that is rare, and cheap to meet again).
#[derive(Debug, Default)]
pub struct Files {
    parsed: Mutex<HashMap<PathBuf, Arc<Parsed>>>,
}

impl Files {
    /// The parsed file at `path`; I/O errors name it as `shown`.
    fn parsed(&self, path: &Path, shown: &str) -> Result<Arc<Parsed>> {
        let cached = self.lock().get(path).cloned();
        if let Some(parsed) = cached {
            return Ok(parsed);
        }
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(shown, e))?;
        let (text, documents) = parse_yaml_text(&text)?;
        let parsed = Arc::new(Parsed {
            text: text.into_owned(),
            documents,
        });
        self.lock().insert(path.to_owned(), Arc::clone(&parsed));
        Ok(parsed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<Parsed>>> {
        self.parsed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`super::read_documents`], through the cache.
    pub fn read_documents(&self, path: &Path) -> Result<Vec<Value>> {
        let parsed = self.parsed(path, &path.display().to_string())?;
        Ok(super::expanded(parsed.documents.iter().cloned()))
    }

    /// [`super::read_resources`] of the file at `path` (I/O errors name it as `shown`), through
    /// the cache.
    pub(super) fn read_resources(
        &self,
        path: &Path,
        shown: &str,
    ) -> Result<(Vec<Marked>, Vec<String>)> {
        let parsed = self.parsed(path, shown)?;
        super::resources_of(&parsed.text, parsed.documents.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_parsed_once_and_read_as_without_the_cache() {
        let dir = std::env::temp_dir().join(format!("conflux-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("list.yaml");
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n---\nx: &a 1\ny: *a\n";
        std::fs::write(&path, text).expect("write");
        let files = Files::default();
        let first = files.read_documents(&path).expect("reads");
        assert_eq!(first, super::super::read_documents(&path).expect("reads"));
        // A second read is the cache's, even with the file gone.
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(files.read_documents(&path).expect("cached"), first);
        let (resources, _) = files.read_resources(&path, "list.yaml").expect("cached");
        let objects: Vec<Value> = resources.into_iter().map(|(o, _)| o).collect();
        assert_eq!(
            objects,
            super::super::parse_resources(text).expect("parses").objects
        );
        assert!(matches!(
            Files::default().read_documents(&dir.join("missing.yaml")),
            Err(Error::Io { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
