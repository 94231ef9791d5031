//! The real `kustomize` binary: a temporary kustomization lists the path (or, without a
//! kustomization file there, what Flux's generator lists) with the Flux Kustomization's fields,
//! and `buildMetadata: [originAnnotations]` gives each object its file.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value, json};

use super::{
    Build, FluxOverlay, Object, generated_resources, join, kustomization_file, normalize,
    parse_documents, tail,
};
use crate::problem::Problem;
use crate::{Error, Result};

/// Runs the real kustomize on a temporary kustomization that lists `dir` (see the module docs).
pub(super) fn build(binary: &Path, root: &Path, dir: &str, overlay: &FluxOverlay) -> Result<Build> {
    let root = root
        .canonicalize()
        .map_err(|e| Error::io(root.display(), e))?;
    let temp = TempDir::new()?;
    // From the temporary directory to the filesystem root, then down to the repository.
    let depth = temp.path.components().count().saturating_sub(1);
    let up = "../".repeat(depth);
    let to = |relative_to_root: &str| {
        let absolute = root.join(relative_to_root);
        let absolute = absolute.to_string_lossy();
        format!("{up}{}", absolute.trim_start_matches('/'))
    };
    let own = kustomization_file(&root.join(dir)).is_some();
    let resources: Vec<String> = if own {
        vec![to(dir)]
    } else {
        generated_resources(&root, dir)
            .iter()
            .map(|r| to(r))
            .collect()
    };
    let mut kustomization = Map::new();
    kustomization.insert(
        "apiVersion".into(),
        json!("kustomize.config.k8s.io/v1beta1"),
    );
    kustomization.insert("kind".into(), json!("Kustomization"));
    kustomization.insert("resources".into(), json!(resources));
    kustomization.insert("buildMetadata".into(), json!(["originAnnotations"]));
    overlay.add_to(&mut kustomization);
    if !overlay.components.is_empty() {
        let components = overlay.components.iter().map(|c| to(&join(dir, c)));
        kustomization.insert("components".into(), json!(components.collect::<Vec<_>>()));
    }
    // A map of strings and lists: it always serialises.
    let text = Value::Object(kustomization).to_string();
    std::fs::write(temp.path.join("kustomization.yaml"), text)
        .map_err(|e| Error::io(temp.path.display(), e))?;
    let output = Command::new(binary)
        .args(["build", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(&temp.path)
        .output()
        .map_err(|source| Error::Run {
            program: binary.display().to_string(),
            source,
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let root_text = root.to_string_lossy();
        let stderr = stderr
            .replace(&format!("{up}{}/", root_text.trim_start_matches('/')), "")
            .replace(&format!("{root_text}/"), "");
        let stderr = stderr.trim().trim_start_matches("Error: ");
        // kustomize nests its errors: the cause is at the end.
        return Err(Error::Kustomize(tail(stderr, 240)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut build = Build::default();
    for mut object in parse_documents(&stdout)? {
        let file = take_origin(&mut object).map(|origin| {
            let path = normalize(&origin.replacen(&up, "", 1));
            let root = normalize(&root.to_string_lossy());
            path.strip_prefix(&format!("{root}/"))
                .map_or(path.clone(), str::to_owned)
        });
        build.objects.push(Object { object, file });
    }
    if own && (overlay.name_prefix.is_some() || overlay.name_suffix.is_some()) {
        build.problems.push(Problem {
            level: 0,
            code: "KustomizeApproximated",
            object: dir.to_owned(),
            file: None,
            line: None,
            message: "spec.namePrefix/nameSuffix were applied on top of the path's kustomization (kustomize-controller replaces its namePrefix/nameSuffix)".to_owned(),
        });
    }
    Ok(build)
}

/// Whether kustomize failed on a remote resource (a Git or HTTP fetch).
pub(super) fn is_remote_failure(message: &str) -> bool {
    [
        "git fetch",
        "https://",
        "http://",
        "no such host",
        "unable to access",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

/// Removes kustomize's `config.kubernetes.io/origin` annotation and returns its path (or, for a
/// generated object, the kustomization file that configured it).
fn take_origin(object: &mut Value) -> Option<String> {
    let metadata = object.get_mut("metadata")?.as_object_mut()?;
    let annotations = metadata.get_mut("annotations")?.as_object_mut()?;
    let origin = annotations.remove("config.kubernetes.io/origin")?;
    if annotations.is_empty() {
        metadata.remove("annotations");
    }
    let origin = origin.as_str()?;
    origin.lines().find_map(|line| {
        line.strip_prefix("path: ")
            .or_else(|| line.strip_prefix("configuredIn: "))
            .map(str::to_owned)
    })
}

/// A temporary directory, removed when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Result<Self> {
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
