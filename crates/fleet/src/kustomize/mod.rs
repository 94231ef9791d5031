//! The kustomize build of one Flux Kustomization path, as kustomize-controller runs it
//! (fluxcd/pkg `kustomize`: `LoadRestrictionsNone`, built-in plugins only).
//!
//! Two engines:
//! - [`Engine::Binary`]: the real `kustomize` (found on `PATH`, or `conflux plan --kustomize
//!   PATH`), exact by construction. A temporary kustomization lists the path (or, for a path
//!   without a kustomization file, the resources Flux's generator lists) and carries the Flux
//!   Kustomization's own fields; `buildMetadata: [originAnnotations]` gives each object its file.
//! - [`Engine::BuiltIn`]: the common subset, exact for what it does (proven against the binary by
//!   `tests/kustomize.rs`): `resources` (files and directories), `components`,
//!   `namespace`, `namePrefix`/`nameSuffix`, `commonLabels`, `labels`, `commonAnnotations`,
//!   `configMapGenerator`/`secretGenerator` (`literals`, `files`, `envs`, options, hash suffixes)
//!   with their name references in workloads, JSON 6902 `patches` (`add`, `remove`, `replace`). Every other field is a `KustomizeUnsupported`
//!   warning naming it, and the objects are taken as they are without it.
//!
//! YAML is read as kustomize reads it (go-yaml v3): YAML 1.2 booleans, but `0644` is the octal
//! 420. A resource is also written back as kustomize writes it ([`parse_resources`]): a plain
//! YAML timestamp `2001-12-14` is `"2001-12-14T00:00:00Z"`.

mod binary;
mod builtin;
mod files;
mod merge;
mod nameref;
mod overlay;
mod replace;
mod scalars;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::path::relative;
use crate::problem::Problem;
use crate::{Error, Result};

pub use files::Files;

pub use crate::object::Object;
pub use crate::path::{join, normalize};
pub use builtin::hash_suffix;
pub use overlay::FluxOverlay;

/// What a build gives: the objects and the problems worth a finding.
#[derive(Debug, Clone, Default)]
pub struct Build {
    /// The objects, in kustomize's output order.
    pub objects: Vec<Object>,
    /// What the build could not do exactly.
    pub problems: Vec<Problem>,
}

/// How kustomize builds are run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Engine {
    /// The real kustomize binary at this path, for every build.
    Binary(PathBuf),
    /// The built-in subset.
    BuiltIn,
    /// The built-in subset where it builds the path exactly (no [`Problem`] at all), the binary
    /// at this path for the rest: what `conflux plan --kustomize PATH` uses. A kustomize process
    /// costs tens of milliseconds and a fleet has hundreds of paths, most of them plain
    /// `resources` lists; `tests/kustomize.rs` proves the subset equal to the binary.
    Auto(PathBuf),
}

/// The names kustomize recognises as a kustomization file, in its order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Parses a multi-document YAML file as kustomize does; `List` kinds are expanded, non-objects
/// dropped.
pub fn read_documents(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path.display(), e))?;
    parse_documents(&text)
}

/// [`read_documents`] on text.
pub fn parse_documents(text: &str) -> Result<Vec<Value>> {
    Ok(expanded(parse_yaml(text)?))
}

/// The objects of parsed documents: `List` kinds expanded, non-objects dropped.
fn expanded(documents: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for document in documents {
        push(document, &mut out);
    }
    out
}

/// The objects of a resource file as kustomize writes them, and what the built-in subset cannot
/// follow exactly.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// The objects, as [`parse_documents`] reads them and then as kustomize writes them: a plain
    /// YAML timestamp as Go's JSON has it (`2001-12-14` → `"2001-12-14T00:00:00Z"`), every
    /// annotation as its text (`1` → `"1"`).
    pub objects: Vec<Value>,
    /// Fields kustomize writes as one text but selects and names by another (a timestamp as a
    /// name, namespace or label), one sentence each.
    pub inexact: Vec<String>,
}

/// A resource file's text as kustomize reads it and writes it back: what `kustomize build` gives
/// for a file listed in `resources` (see `scalars.rs` for the rules and their evidence). A
/// timestamp kustomize cannot write back (a map key, an offset of a day) is
/// [`Error::Unwritable`], as kustomize fails too.
pub fn parse_resources(text: &str) -> Result<Resources> {
    let (objects, inexact) = read_resources(text)?;
    let objects = objects.into_iter().map(|(object, _)| object).collect();
    Ok(Resources { objects, inexact })
}

/// An object of a resource file, with its annotations' [`scalars::Marks`].
type Marked = (Value, scalars::Marks);

/// [`parse_resources`], each object with its marks.
fn read_resources(text: &str) -> Result<(Vec<Marked>, Vec<String>)> {
    let (text, documents) = parse_yaml_text(text)?;
    resources_of(&text, documents)
}

/// [`read_resources`] on a file already parsed: its (mended) text and documents.
fn resources_of(text: &str, mut documents: Vec<Value>) -> Result<(Vec<Marked>, Vec<String>)> {
    let rewritten = scalars::rewrite(text, &mut documents, scalars::Read::Resource)?;
    let mut objects = Vec::new();
    for (document, marks) in documents.into_iter().zip(rewritten.marks) {
        let mut expanded = Vec::new();
        push(document, &mut expanded);
        // A `List` has no marks (its items went through JSON), so the first object may take them.
        let mut marks = Some(marks);
        objects.extend(
            expanded
                .into_iter()
                .map(|object| (object, marks.take().unwrap_or_default())),
        );
    }
    Ok((objects, rewritten.inexact))
}

/// Every non-null document of `text`, read as kustomize reads YAML.
fn parse_yaml(text: &str) -> Result<Vec<Value>> {
    parse_yaml_text(text).map(|(_, documents)| documents)
}

/// [`parse_yaml`], and the text it read: go-yaml ends an alias name at the first character that
/// is not a letter, digit, `_` or `-`, so `*app: x` is the alias `app` as a key, where YAML 1.2
/// (serde-saphyr) reads the alias `app:`. A line the parser refuses for an unknown anchor gets a
/// space before such a colon, and the text is read again.
pub(super) fn parse_yaml_text(text: &str) -> Result<(std::borrow::Cow<'_, str>, Vec<Value>)> {
    let mut text = std::borrow::Cow::Borrowed(text);
    // Each round mends one line; a file has only so many.
    for _ in 0..256 {
        let options = serde_saphyr::options! { strict_booleans: true, legacy_octal_numbers: true };
        let err = match serde_saphyr::from_multiple_with_options(&text, options) {
            Ok(documents) => return Ok((text, documents)),
            Err(err) => err,
        };
        let line = err
            .location()
            .and_then(|l| usize::try_from(l.line()).ok())
            .filter(|_| err.to_string().contains("unknown anchor"));
        let Some(mended) = line.and_then(|line| go_alias_key(&text, line)) else {
            return Err(yaml_error(err));
        };
        text = std::borrow::Cow::Owned(mended);
    }
    Err(Error::Yaml {
        message: "too many aliases followed by a colon".to_owned(),
        line: None,
    })
}

/// `text` with a space between each alias and a colon that ends it on line `line` (1-based), as
/// go-yaml reads them; `None` when the line has none.
fn go_alias_key(text: &str, line: usize) -> Option<String> {
    let go_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut out = String::with_capacity(text.len() + 8);
    let mut mended = false;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n + 1 != line {
            out.push_str(l);
            continue;
        }
        let mut previous = ' ';
        let mut chars = l.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            out.push(c);
            if c != '*' || !(previous.is_whitespace() || matches!(previous, '-' | '[' | '{' | ','))
            {
                previous = c;
                continue;
            }
            let mut name = 0;
            while let Some(&(_, c)) = chars.peek().filter(|(_, c)| go_name(*c)) {
                out.push(c);
                chars.next();
                name += 1;
            }
            if name > 0 && chars.peek().is_some_and(|(_, c)| *c == ':') {
                out.push(' ');
                mended = true;
            }
            previous = 'x';
        }
    }
    mended.then_some(out)
}

/// A YAML parser error as [`Error::Yaml`]: its first line, and its line.
pub(crate) fn yaml_error(e: serde_saphyr::Error) -> Error {
    let line = e
        .location()
        .and_then(|l| usize::try_from(l.line()).ok())
        .filter(|l| *l > 0);
    Error::Yaml {
        message: e.to_string().lines().next().unwrap_or_default().to_owned(),
        line,
    }
}

/// `err`, from reading `file` (relative to the directory built from), as an [`Error::InFile`].
pub(crate) fn in_file(file: &str, err: Error) -> Error {
    let line = match &err {
        Error::Yaml { line, .. } | Error::Unwritable { line, .. } => *line,
        _ => None,
    };
    Error::InFile {
        file: file.to_owned(),
        line,
        source: Box::new(err),
    }
}

fn push(document: Value, out: &mut Vec<Value>) {
    let is_list = document
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    match document {
        Value::Object(mut map) if is_list && map.get("items").is_some_and(Value::is_array) => {
            if let Some(Value::Array(items)) = map.remove("items") {
                items.into_iter().for_each(|i| push(i, out));
            }
        }
        Value::Object(_) => out.push(document),
        _ => {}
    }
}

/// The kustomization file of a directory, if it has one.
pub fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

/// What source-controller leaves out of every artifact (fluxcd/pkg `sourceignore`: `ExcludeVCS`,
/// `ExcludeCI`, `ExcludeExtra`; the excluded extensions are never manifests): directories and
/// file names, matched at any depth.
const EXCLUDED_DIRS: [&str; 3] = [".git", ".github", ".circleci"];
const EXCLUDED_FILES: [&str; 10] = [
    ".travis.yml",
    ".gitlab-ci.yml",
    "appveyor.yml",
    ".drone.yml",
    "cloudbuild.yaml",
    "codeship-services.yml",
    "codeship-steps.yml",
    ".goreleaser.yml",
    ".sops.yaml",
    ".flux.yaml",
];

/// Flux's generator (fluxcd/pkg `kustomize` `scanManifests`): the resources of a directory
/// without a kustomization file, relative to the root. A sub-directory with a kustomization file
/// is one resource and is not looked into; other files count only as `.yaml`/`.yml`; what
/// source-controller excludes from artifacts (`.github/`, `.sops.yaml`…) is not there to scan.
pub fn generated_resources(root: &Path, dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    scan(root, &root.join(dir), &mut found);
    found.sort();
    found
}

fn scan(root: &Path, dir: &Path, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if path.is_dir() && EXCLUDED_DIRS.contains(&name.as_str()) {
            continue;
        }
        if EXCLUDED_FILES.contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            if kustomization_file(&path).is_some() {
                found.push(relative(root, &path));
            } else {
                scan(root, &path, found);
            }
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            found.push(relative(root, &path));
        }
    }
}

impl Engine {
    /// The engine to use: `flag` (`builtin` for the built-in one; a path for that binary, with
    /// the built-in subset where it is exact), else `kustomize` on `PATH` the same way, else the
    /// built-in one.
    pub fn pick(flag: Option<&Path>) -> Engine {
        match flag {
            Some(path) if path == Path::new("builtin") => Engine::BuiltIn,
            Some(path) => Engine::Auto(path.to_path_buf()),
            None => std::env::var_os("PATH")
                .and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join("kustomize"))
                        .find(|candidate| candidate.is_file())
                })
                .map_or(Engine::BuiltIn, Engine::Auto),
        }
    }

    /// What kustomize-controller applies for the path `dir` (relative to `root`) with the Flux
    /// Kustomization's own fields `overlay`.
    ///
    /// When the binary fails to fetch a remote resource (`plan` runs offline), the built-in
    /// subset builds the local part and says so (`RemoteResourceUnavailable`).
    pub fn build(&self, root: &Path, dir: &str, overlay: &FluxOverlay) -> Result<Build> {
        self.build_in(&Files::default(), root, dir, overlay)
    }

    /// [`Engine::build`], reading files through `files`.
    pub fn build_in(
        &self,
        files: &Files,
        root: &Path,
        dir: &str,
        overlay: &FluxOverlay,
    ) -> Result<Build> {
        match self {
            Engine::Auto(binary) => match builtin::build(files, root, dir, overlay) {
                Ok(build) if build.problems.is_empty() => Ok(build),
                // Anything the subset cannot do exactly goes to the binary.
                Ok(_) => Engine::Binary(binary.clone()).build_in(files, root, dir, overlay),
                // So does every failure, for kustomize's own words; where kustomize fails too,
                // the file (and line) the subset found at fault goes with them: kustomize's
                // message names no file.
                Err(ours) => {
                    match Engine::Binary(binary.clone()).build_in(files, root, dir, overlay) {
                        Err(theirs) => Err(match ours {
                            Error::InFile { file, line, .. } => Error::InFile {
                                file,
                                line,
                                source: Box::new(theirs),
                            },
                            _ => theirs,
                        }),
                        built => built,
                    }
                }
            },
            Engine::Binary(binary) => match binary::build(files, binary, root, dir, overlay) {
                Err(Error::Kustomize(err)) if binary::is_remote_failure(&err) => {
                    let mut build = builtin::build(files, root, dir, overlay)?;
                    build.problems.push(Problem {
                        level: 1,
                        code: "RemoteResourceUnavailable",
                        object: dir.to_owned(),
                        file: None,
                        line: None,
                        message: format!(
                            "kustomize could not fetch a remote resource ({err}); the local resources are built with the built-in subset"
                        ),
                    });
                    Ok(build)
                }
                other => other,
            },
            Engine::BuiltIn => builtin::build(files, root, dir, overlay),
        }
    }
}

/// The kustomization kustomize-controller builds `dir` (relative to `root`) with: the
/// directory's own, with its file, or without one Flux's generator's (every manifest and
/// sub-kustomization of the directory), edited in place with the Flux Kustomization's fields
/// ([`FluxOverlay`]).
pub(crate) fn flux_kustomization(
    files: &Files,
    root: &Path,
    dir: &str,
    overlay: &FluxOverlay,
) -> Result<(Option<PathBuf>, Map<String, Value>)> {
    let own = kustomization_file(&root.join(dir));
    let mut kustomization = match &own {
        Some(file) => match files
            .read_documents(file)
            .map_err(|e| in_file(&relative(root, file), e))?
            .into_iter()
            .next()
        {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        },
        None => {
            let resources: Vec<String> = generated_resources(root, dir)
                .iter()
                .map(|r| r.strip_prefix(&format!("{dir}/")).unwrap_or(r).to_owned())
                .collect();
            let mut map = Map::new();
            map.insert(
                "apiVersion".into(),
                json!("kustomize.config.k8s.io/v1beta1"),
            );
            map.insert("kind".into(), json!("Kustomization"));
            map.insert("resources".into(), json!(resources));
            map
        }
    };
    overlay.add_to(&mut kustomization);
    Ok((own, kustomization))
}

/// Builds already made in one `conflux plan`, so that a path built with the same Flux fields
/// for several Kustomizations or clusters (a shared `infrastructure/controllers`) is built once.
/// Shared by the threads that build.
#[derive(Debug, Default)]
pub struct Memo {
    builds: std::sync::Mutex<std::collections::HashMap<String, Build>>,
    files: Files,
}

impl Memo {
    /// The files read so far, parsed: what [`Memo::build`] reads goes through them.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// [`Engine::build`], or the same build made before.
    pub fn build(
        &self,
        engine: &Engine,
        root: &Path,
        dir: &str,
        overlay: &FluxOverlay,
    ) -> Result<Build> {
        let key = format!("{}\0{dir}\0{overlay:?}", root.display());
        let cached = self
            .builds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(build) = cached {
            return Ok(build);
        }
        // Failures are not kept: they are rare and cheap to meet again.
        let build = engine.build_in(&self.files, root, dir, overlay)?;
        self.builds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, build.clone());
        Ok(build)
    }
}

/// Cuts `text` to `max` characters, saying how much was cut.
pub fn shorten(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} more characters)", count - max)
}

/// The last `max` characters of `text`, saying how much was cut.
fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(count - max).collect();
    format!("…{kept}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// go-yaml (kustomize, Flux) ends an alias at the colon: `*app: x` is a key named by the
    /// anchor (a common app-template idiom); a block scalar's text is left as it is.
    #[test]
    fn an_alias_followed_by_a_colon_is_a_key_as_in_go_yaml() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: &app ipmi\ndata:\n  \
                    *app: x\n  script: |\n    echo *app: y\n";
        let documents = parse_documents(text).expect("kustomize builds it");
        assert_eq!(
            documents[0]["data"],
            json!({"ipmi": "x", "script": "echo *app: y\n"})
        );
        let resources = parse_resources(text).expect("kustomize builds it");
        assert_eq!(resources.objects[0]["data"]["ipmi"], json!("x"));
        // An alias nothing defines is still an error, with its line.
        let err = parse_documents("a: *nothing: x\n").expect_err("unknown anchor");
        assert!(err.to_string().contains("unknown anchor"), "{err}");
    }
}
