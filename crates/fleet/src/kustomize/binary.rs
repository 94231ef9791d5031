//! The real `kustomize` binary, called as kustomize-controller calls it: on the path's own
//! kustomization, edited in place with the Flux Kustomization's fields (or, without a
//! kustomization file there, the one Flux's generator writes). The edit is made in a scratch
//! mirror of the repository (symbolic links to every file and directory, real directories only
//! on the way to the path), so relative references resolve as in the repository and the
//! repository is never written. `buildMetadata: [originAnnotations]` gives each object its file.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::{
    Build, Files, FluxOverlay, KUSTOMIZATION_FILES, Object, flux_kustomization, normalize,
    parse_documents, tail,
};
use crate::scratch::TempDir;
use crate::{Error, Result};

/// Runs the real kustomize on the path's own kustomization, edited (see the module docs).
pub(super) fn build(
    files: &Files,
    binary: &Path,
    root: &Path,
    dir: &str,
    overlay: &FluxOverlay,
) -> Result<Build> {
    let root = root
        .canonicalize()
        .map_err(|e| Error::io(root.display(), e))?;
    let temp = TempDir::new()?;
    let (own, mut kustomization) = flux_kustomization(files, &root, dir, overlay)?;
    let file_name = own.as_ref().and_then(|f| f.file_name()).map_or_else(
        || KUSTOMIZATION_FILES[0].to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    mirror(&root, dir, &temp.path, &file_name)?;
    let metadata = kustomization
        .entry("buildMetadata")
        .or_insert_with(|| json!([]));
    if let Some(list) = metadata.as_array_mut()
        && !list.iter().any(|m| m == "originAnnotations")
    {
        list.push(json!("originAnnotations"));
    }
    let built_dir = temp.path.join(dir);
    // A map of strings and lists: it always serialises.
    let text = Value::Object(kustomization).to_string();
    std::fs::write(built_dir.join(&file_name), text)
        .map_err(|e| Error::io(built_dir.display(), e))?;
    let output = Command::new(binary)
        // kustomize-controller builds with an empty `Reorder` option, which sorts nothing (only
        // a kustomization's own `sortOptions` do); the CLI's default is the legacy sort.
        .args([
            "build",
            "--load-restrictor",
            "LoadRestrictionsNone",
            "--reorder",
            "none",
        ])
        .arg(&built_dir)
        .output()
        .map_err(|source| Error::Run {
            program: binary.display().to_string(),
            source,
        })?;
    let (root_text, temp_text) = (root.to_string_lossy(), temp.path.to_string_lossy());
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr = stderr
            .replace(&format!("{temp_text}/"), "")
            .replace(&format!("{root_text}/"), "");
        let stderr = stderr.trim().trim_start_matches("Error: ");
        // kustomize nests its errors: the cause is at the end.
        return Err(Error::Kustomize(tail(stderr, 240)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut build = Build::default();
    for mut object in parse_documents(&stdout)? {
        let file = take_origin(&mut object).map(|origin| {
            // Relative to the directory built: back into the repository, through the mirror
            // or, where kustomize followed a link, the repository itself.
            let path = if origin.starts_with('/') {
                normalize(&origin)
            } else {
                normalize(&format!("{}/{origin}", built_dir.to_string_lossy()))
            };
            [&*temp_text, &*root_text]
                .iter()
                .find_map(|prefix| {
                    path.strip_prefix(&format!("{}/", normalize(prefix)))
                        .map(str::to_owned)
                })
                .unwrap_or(path)
        });
        build.objects.push(Object { object, file });
    }
    Ok(build)
}

/// Mirrors `root` in `into` for a build of `dir`: each entry a symbolic link to the original,
/// except the directories on the way to `dir` (real, mirrored in turn) and `dir`'s `own`
/// kustomization file (left for the edited one).
fn mirror(root: &Path, dir: &str, into: &Path, own: &str) -> Result<()> {
    let steps: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    let (mut from, mut to) = (root.to_path_buf(), into.to_path_buf());
    for depth in 0..=steps.len() {
        let next = steps.get(depth).copied();
        let entries = std::fs::read_dir(&from).map_err(|e| Error::io(from.display(), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if Some(&*name) == next || (next.is_none() && name == own) {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), to.join(&*name))
                .map_err(|e| Error::io(to.join(&*name).display(), e))?;
        }
        let Some(next) = next else { break };
        from = from.join(next);
        to = to.join(next);
        std::fs::create_dir_all(&to).map_err(|e| Error::io(to.display(), e))?;
    }
    Ok(())
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
