//! Paths inside a repository as Flux and kustomize name files: relative to the root,
//! `/`-separated, normalised.

use std::path::{Path, PathBuf};

pub use conflux_postbuild_subst::audit::normalize;

/// `dir` joined with a relative `entry`, normalised.
pub fn join(dir: &str, entry: &str) -> String {
    if dir.is_empty() {
        normalize(entry)
    } else {
        normalize(&format!("{dir}/{entry}"))
    }
}

/// `path` relative to `root`, with `/` separators.
pub fn relative(root: &Path, path: &Path) -> String {
    let relative: PathBuf = path.strip_prefix(root).unwrap_or(path).to_path_buf();
    relative.to_string_lossy().replace('\\', "/")
}

/// The directory of a file path (`a/b/c.yaml` → `a/b`).
pub fn parent(file: &str) -> String {
    file.rsplit_once('/')
        .map_or(String::new(), |(d, _)| d.to_owned())
}
