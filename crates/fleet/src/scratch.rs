//! Scratch directories for builds and reviews, removed when dropped (their symbolic links are
//! removed, never followed).

use std::path::PathBuf;

use crate::{Error, Result};

/// A temporary directory (canonical path), removed when dropped.
#[derive(Debug)]
pub(crate) struct TempDir {
    pub(crate) path: PathBuf,
}

impl TempDir {
    /// A new, empty one under the system's temporary directory.
    pub(crate) fn new() -> Result<Self> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("conflux-plan-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| Error::io(path.display(), e))?;
        let path = path
            .canonicalize()
            .map_err(|e| Error::io(path.display(), e))?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
