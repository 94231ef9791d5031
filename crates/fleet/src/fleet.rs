//! A Flux fleet repository read as Flux builds it, one cluster at a time, for `conflux plan`.
//!
//! A cluster starts where Flux starts on it: its `flux-system` Kustomization (the sync that
//! `flux bootstrap` writes) or a `FluxInstance`'s `spec.sync`. From there the Kustomization graph
//! is followed: every Flux `Kustomization` an applied Kustomization produces, whose source is the
//! cluster's own source, is built in turn with its `spec.path` relative to the repository root.
//! Each build is what kustomize-controller applies:
//! 1. a path without a `kustomization.yaml` gets Flux's generated one (fluxcd/pkg `kustomize`
//!    `scanManifests`): every `.yaml`/`.yml` file below it, except that a sub-directory with its
//!    own kustomization file is one resource and is not looked into;
//! 2. the kustomize build ([`crate::kustomize`]): the real `kustomize` binary when there is one,
//!    else the built-in subset, which reports what it does not do;
//! 3. the Kustomization's own `targetNamespace`, `namePrefix`/`nameSuffix`, `patches`,
//!    `components`, `images` and `commonMetadata`;
//! 4. `postBuild` substitution, with the variables of the objects found so far.
//!
//! Objects outside the cluster's source (other repositories, Terraform, External Secrets) are not
//! followed and are at most warnings. This module reads files and may run a process; the
//! decisions about the objects stay with the library crates' audits.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use conflux_postbuild_subst::json::{pointer as json_at, text};
use conflux_postbuild_subst::resource::{
    ResourceOutcome, SubstitutionOptions, substitute_resource,
};
use conflux_postbuild_subst::vars::{PostBuild, SourceKind, SourceLookup, load_variables};
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::Error;
use crate::kustomize::{Engine, Files, Memo, Object};
use crate::path::{join, normalize};

// Defined with what builds and names objects; still reachable here, where `conflux plan` and
// embedders look for them.
pub use crate::kustomize::FluxOverlay;
pub use crate::object::object_name;
pub use crate::path::{parent, relative};
pub use crate::problem::Problem;

/// What one Flux Kustomization applies.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The Kustomization, as its parent applies it.
    pub kustomization: Value,
    /// Its objects after the kustomize build and before `postBuild`.
    pub resources: Vec<Object>,
    /// The directory built, relative to the repository root.
    pub path: String,
}

/// One cluster: its entry point, what each Kustomization applies, and the reading problems.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// The cluster's directory, relative to the repository root (`clusters/staging`).
    pub name: String,
    /// Every object applied to the cluster, after `postBuild`, with its file.
    pub objects: Vec<Object>,
    /// What each Kustomization applies, in the order Flux reaches them.
    pub applied: Vec<Applied>,
    /// Problems found while reading.
    pub problems: Vec<Problem>,
    /// The objects (`Kind/namespace/name`) applied by a build that skipped a step kustomize
    /// applies, directly or through a parent: what is judged of them is judged on an
    /// approximation.
    pub approximate: BTreeSet<String>,
}

fn group(object: &Value) -> &str {
    text(object, "/apiVersion")
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
}

/// A Flux `Kustomization` (not a kustomize configuration file).
pub fn is_flux_kustomization(object: &Value) -> bool {
    group(object) == "kustomize.toolkit.fluxcd.io" && text(object, "/kind") == "Kustomization"
}

fn is_flux_instance(object: &Value) -> bool {
    group(object) == "fluxcd.controlplane.io" && text(object, "/kind") == "FluxInstance"
}

/// A cluster entry point: the Kustomization Flux starts with and the file declaring it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The root Kustomization (synthesised for a FluxInstance).
    pub kustomization: Value,
    /// Where it is declared.
    pub file: String,
    /// The source's root in the repository (`""`: the repository root; `kubernetes` when CI
    /// pushes that directory as the OCI artifact Flux syncs).
    pub root: String,
}

/// The directory, among `file`'s ancestors, under which `path` contains `file`: the root of the
/// source that the sync declared in `file` reads (`""` when none does).
fn source_root(file: &str, path: &str) -> String {
    let mut dir = parent(file);
    loop {
        let full = join(&dir, path);
        if full.is_empty() || file.starts_with(&format!("{full}/")) {
            return dir;
        }
        if dir.is_empty() {
            return String::new();
        }
        dir = parent(&dir);
    }
}

/// The sync Kustomization a FluxInstance makes: `flux-system` in its namespace, from the source
/// of the same name.
fn instance_sync(instance: &Value) -> Option<Value> {
    let path = json_at(instance, "/spec/sync/path")?.as_str()?;
    let namespace = match text(instance, "/metadata/namespace") {
        "" => "flux-system",
        namespace => namespace,
    };
    let kind = match text(instance, "/spec/sync/kind") {
        "" => "GitRepository",
        kind => kind,
    };
    Some(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "flux-system", "namespace": namespace},
        "spec": {"path": path, "sourceRef": {"kind": kind, "name": "flux-system"}},
    }))
}

/// The sync Kustomization of the `flux-instance` Helm chart: `spec.values.instance.sync`.
fn chart_instance_sync(release: &Value) -> Option<Value> {
    let sync = json_at(release, "/spec/values/instance/sync")?;
    let instance = json!({"metadata": {"namespace": text(release, "/metadata/namespace")},
                          "spec": {"sync": sync}});
    instance_sync(&instance)
}

/// Finds the cluster entry points among `documents` (objects with their files), one per cluster
/// directory:
/// - a Flux Kustomization whose `spec.path` contains its own file (the sync applies itself, as
///   `flux bootstrap` writes it); at the repository root only when it is named `flux-system`;
/// - a FluxInstance's `spec.sync.path`, or the same in the values of a HelmRelease of the
///   `flux-instance` chart;
/// - a directory with a `flux-system` sub-directory holding `gotk-components.yaml` (a bootstrap
///   layout whose sync file is not committed).
pub fn entries(documents: &[Object], files: &[String]) -> Vec<Entry> {
    let mut found: BTreeMap<String, Entry> = BTreeMap::new();
    for document in documents {
        let Some(file) = &document.file else { continue };
        let object = &document.object;
        let kustomization = if is_flux_instance(object) {
            instance_sync(object)
        } else if text(object, "/kind") == "HelmRelease" {
            chart_instance_sync(object)
        } else if object.get("kind").is_none() && json_at(object, "/instance/sync/path").is_some() {
            // A values file of the flux-instance chart (given to it by a generated ConfigMap).
            let values = json!({"spec": {"values": object}});
            chart_instance_sync(&values)
        } else if is_flux_kustomization(object) {
            let path = normalize(text(object, "/spec/path"));
            let name = text(object, "/metadata/name");
            let contains = if path.is_empty() {
                name == "flux-system"
            } else {
                file.starts_with(&format!("{path}/"))
            };
            contains.then(|| object.clone())
        } else {
            None
        };
        if let Some(kustomization) = kustomization {
            let path = normalize(text(&kustomization, "/spec/path"));
            let root = source_root(file, &path);
            let file = file.clone();
            found.entry(join(&root, &path)).or_insert(Entry {
                kustomization,
                file,
                root,
            });
        }
    }
    for file in files {
        let Some(cluster) = file.strip_suffix("/flux-system/gotk-components.yaml") else {
            continue;
        };
        let covered = found.keys().any(|path| path == cluster);
        if !covered {
            let kustomization = json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "flux-system", "namespace": "flux-system"},
                "spec": {"path": cluster,
                         "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
            });
            let (file, root) = (file.clone(), String::new());
            let entry = Entry {
                kustomization,
                file,
                root,
            };
            found.insert(cluster.to_owned(), entry);
        }
    }
    // A sync nested in another cluster's directory is that cluster's, not a cluster of its own.
    let paths: Vec<String> = found.keys().cloned().collect();
    found.retain(|path, _| {
        !paths.iter().any(|other| {
            other != path && !other.is_empty() && path.starts_with(&format!("{other}/"))
        })
    });
    found.into_values().collect()
}

/// Builds the cluster whose entry is `entry`: the Kustomization graph from it, every
/// Kustomization built as kustomize-controller builds it. `external` are objects that exist in
/// the cluster but not in the repository.
pub fn plan_cluster(root: &Path, entry: &Entry, engine: &Engine, external: &[Object]) -> Cluster {
    plan_cluster_with(root, entry, engine, external, &Memo::default())
}

/// [`plan_cluster`], reusing the builds of `memo` (shared by the clusters of one plan).
pub fn plan_cluster_with(
    root: &Path,
    entry: &Entry,
    engine: &Engine,
    external: &[Object],
    memo: &Memo,
) -> Cluster {
    let (first, missing) = traverse(root, entry, engine, external, memo, &Later::default());
    // The steady state: a substituteFrom source that a Kustomization reached later applies
    // exists in a running cluster. When one was looked for before it was applied, plan again
    // with what the first pass applied standing by (builds are memoised, so only what the
    // substitution changes is built again).
    let later = Later::of(&first, &missing);
    if later.sources.is_empty() {
        return first;
    }
    traverse(root, entry, engine, external, memo, &later).0
}

/// What a first pass applied, for the second: the substitution sources it looked for before
/// they were applied, each with the Kustomization that applies it, and what each Kustomization
/// `dependsOn`.
#[derive(Default)]
struct Later {
    sources: Vec<(Object, String)>,
    depends_on: BTreeMap<String, Vec<String>>,
}

impl Later {
    fn of(cluster: &Cluster, missing: &[Missing]) -> Self {
        let mut later = Later::default();
        for applied in &cluster.applied {
            let ks = &applied.kustomization;
            let namespace = text(ks, "/metadata/namespace");
            let depends = json_at(ks, "/spec/dependsOn").and_then(Value::as_array);
            let depends = depends.into_iter().flatten().map(|d| {
                let ns = match text(d, "/namespace") {
                    "" => namespace,
                    ns => ns,
                };
                format!("Kustomization/{ns}/{}", text(d, "/name"))
            });
            later.depends_on.insert(object_name(ks), depends.collect());
            for m in missing {
                if applied.resources.iter().any(|r| is_source(&r.object, m))
                    // As applied: after its own Kustomization's postBuild.
                    && let Some(object) = cluster.objects.iter().rev().find(|o| is_source(&o.object, m))
                {
                    later.sources.push((object.clone(), object_name(ks)));
                }
            }
        }
        later
    }

    /// Whether `ks` depends on `other`, directly or through other Kustomizations: then Flux
    /// applies `other` first, also on a new cluster.
    fn depends(&self, ks: &str, other: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![ks];
        while let Some(next) = stack.pop() {
            for d in self.depends_on.get(next).into_iter().flatten() {
                if d == other {
                    return true;
                }
                if seen.insert(d.as_str()) {
                    stack.push(d);
                }
            }
        }
        false
    }
}

/// Where each object of a cluster is: (kind, namespace, name) to the index of the last object
/// with those IDs in [`Cluster::objects`], so a lookup by IDs need not scan them all.
type Ids = std::collections::HashMap<(String, String, String), usize>;

/// Adds `objects`, which start at index `start` of the cluster's objects, to `ids`.
fn remember(ids: &mut Ids, objects: &[Object], start: usize) {
    for (i, o) in objects.iter().enumerate() {
        let key = (
            text(&o.object, "/kind").to_owned(),
            text(&o.object, "/metadata/namespace").to_owned(),
            text(&o.object, "/metadata/name").to_owned(),
        );
        ids.insert(key, start + i);
    }
}

/// The objects applied so far, with their [`Ids`].
struct Known<'a> {
    objects: &'a [Object],
    ids: &'a Ids,
}

impl<'a> Known<'a> {
    /// The last object applied with these IDs.
    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<&'a Object> {
        let key = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        self.ids.get(&key).and_then(|&i| self.objects.get(i))
    }
}

/// A substituteFrom reference not found when it was looked for: (kind, namespace, name).
type Missing = (String, String, String);

fn is_source(object: &Value, (kind, namespace, name): &Missing) -> bool {
    text(object, "/kind") == kind
        && text(object, "/metadata/namespace") == namespace
        && text(object, "/metadata/name") == name
}

/// One pass over the Kustomization graph from `entry`; `later` are sources applied further on
/// in plan's order (from an earlier pass). Returns the cluster and the sources looked for and not
/// found.
fn traverse(
    root: &Path,
    entry: &Entry,
    engine: &Engine,
    external: &[Object],
    memo: &Memo,
    later: &Later,
) -> (Cluster, Vec<Missing>) {
    let mut missing = Vec::new();
    let source = (
        text(&entry.kustomization, "/spec/sourceRef/name").to_owned(),
        match text(&entry.kustomization, "/metadata/namespace") {
            "" => "flux-system".to_owned(),
            namespace => namespace.to_owned(),
        },
    );
    let mut cluster = Cluster {
        name: join(&entry.root, text(&entry.kustomization, "/spec/path")),
        objects: external.to_vec(),
        ..Cluster::default()
    };
    let mut ids = Ids::new();
    remember(&mut ids, &cluster.objects, 0);
    let source_root = root.join(&entry.root);
    let root = source_root.as_path();
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([(entry.kustomization.clone(), Some(entry.file.clone()))]);
    // Level by level (what Flux reaches in one step from the one before): the builds, which
    // take the time, run in parallel; everything else runs in order, as Flux reaches them.
    while !queue.is_empty() {
        let level: Vec<(Value, Option<String>)> = queue
            .drain(..)
            .filter(|(ks, _)| seen.insert(object_name(ks)))
            .collect();
        let builds = build_level(root, &entry.root, &level, engine, memo);
        for ((ks, file), (built, problems)) in level.into_iter().zip(builds) {
            // A build that skipped a step kustomize applies, or that an approximate build
            // applied: what it applies is approximate too.
            let approximate = problems.iter().any(|p| p.code == "KustomizeUnsupported")
                || cluster.approximate.contains(&object_name(&ks));
            cluster.problems.extend(problems);
            let Some(resources) = built else {
                continue;
            };
            let before = cluster.objects.len();
            let context = Reach {
                entry,
                source: &source,
                later,
            };
            missing.extend(reach(
                &mut cluster,
                &mut queue,
                &context,
                ks,
                file,
                resources,
                &mut ids,
            ));
            if approximate {
                let applied = cluster.objects[before..]
                    .iter()
                    .map(|o| object_name(&o.object));
                let applied: Vec<String> = applied.collect();
                cluster.approximate.extend(applied);
            }
        }
    }
    // Files the source leaves out are still read here: say so rather than guess.
    let ignores = cluster.objects.iter().find(|o| {
        group(&o.object) == "source.toolkit.fluxcd.io"
            && text(&o.object, "/metadata/name") == source.0
            && text(&o.object, "/metadata/namespace") == source.1
            && json_at(&o.object, "/spec/ignore").is_some()
    });
    let how = match (ignores, root.join(".sourceignore").is_file()) {
        (Some(_), _) => Some("the source's spec.ignore"),
        (None, true) => Some("a .sourceignore file"),
        (None, false) => None,
    };
    if let Some(how) = how {
        cluster.problems.push(Problem {
            level: 0,
            code: "SourceIgnoreNotApplied",
            object: cluster.name.clone(),
            file: ignores
                .and_then(|o| o.file.clone())
                .or_else(|| Some(".sourceignore".to_owned())),
            line: None,
            message: format!(
                "{how} leaves files out of the artifact Flux builds from; plan does not apply it (only source-controller's defaults), so a path may be read with files Flux does not have"
            ),
        });
    }
    (cluster, missing)
}

/// What [`reach`] reads of the pass: the cluster's entry and source, and the sources applied
/// further on.
struct Reach<'a> {
    entry: &'a Entry,
    source: &'a (String, String),
    later: &'a Later,
}

/// Takes in what the Kustomization `ks` (declared in `file`) applies, `resources` as built:
/// substitutes them, queues the Kustomizations among them that follow the cluster's source, and
/// records them in `cluster`.
fn reach(
    cluster: &mut Cluster,
    queue: &mut VecDeque<(Value, Option<String>)>,
    context: &Reach<'_>,
    ks: Value,
    file: Option<String>,
    mut resources: Vec<Object>,
    ids: &mut Ids,
) -> Vec<Missing> {
    let (entry, source) = (context.entry, context.source);
    // Files are reported relative to the repository, also when the source is a sub-directory.
    for resource in &mut resources {
        resource.file = match (resource.file.take(), entry.root.is_empty()) {
            (Some(f), false) if !f.starts_with("--") => Some(join(&entry.root, &f)),
            (file, _) => file,
        };
    }
    let applied = Known {
        objects: &cluster.objects,
        ids,
    };
    let sources = post_build(&ks, &resources, &applied, &context.later.sources);
    let substituted = sources.objects;
    let name = object_name(&ks);
    for (source, applier) in sources.later {
        // Ordered by dependsOn: it exists before this Kustomization runs, on any cluster.
        if context.later.depends(&name, &applier) {
            continue;
        }
        cluster.problems.push(Problem {
            level: 0,
            code: "SubstituteSourceAppliedLater",
            object: name.clone(),
            file: file.clone(),
            line: None,
            message: format!(
                "substituteFrom {source} is applied by {applier}, which this Kustomization does not depend on: planned as in a running cluster, where it exists; on a new cluster this Kustomization fails until it does (a dependsOn on {applier}, or the reference optional, avoids that)"
            ),
        });
    }
    for source in sources.own {
        cluster.problems.push(Problem {
            level: 0,
            code: "SubstituteSourceSelfApplied",
            object: object_name(&ks),
            file: file.clone(),
            line: None,
            message: format!(
                "substituteFrom {source} is applied by this Kustomization itself: planned as in a running cluster, where it exists; it exists only after a first successful reconcile, so a new cluster needs it made first (or the reference optional)"
            ),
        });
    }
    // What source_url and artifact_path look among: the sources and ArtifactGenerators, taken
    // once rather than scanned for among every object once per child.
    let known: Vec<&Object> = cluster
        .objects
        .iter()
        .chain(&substituted)
        .filter(|o| {
            group(&o.object) == "source.toolkit.fluxcd.io"
                || text(&o.object, "/kind") == "ArtifactGenerator"
        })
        .collect();
    let root_url = source_url(&known, &entry.kustomization);
    for object in &substituted {
        if is_flux_kustomization(&object.object) && object.object != ks {
            let same_url = root_url
                .as_deref()
                .is_some_and(|url| source_url(&known, &object.object).as_deref() == Some(url));
            let artifact = artifact_path(&known, &object.object, source);
            let follows = match (&artifact, same_url) {
                (Some(Ok(_)), _) | (None, true) => Ok(()),
                (Some(Err(why)), _) => Err(why.clone()),
                (None, false) => follows(&object.object, source),
            };
            match follows {
                Ok(()) => {
                    let mut child = object.object.clone();
                    if let (Some(Ok(path)), Some(spec)) = (&artifact, child.get_mut("spec")) {
                        spec["path"] = Value::String(path.clone());
                    }
                    queue.push_back((child, object.file.clone()));
                }
                Err(why) => cluster.problems.push(Problem {
                    level: 0,
                    code: "SourceNotFollowed",
                    object: object_name(&object.object),
                    file: object.file.clone(),
                    line: None,
                    message: why,
                }),
            }
        }
    }
    remember(ids, &substituted, cluster.objects.len());
    cluster.objects.extend(substituted);
    let path = join(&entry.root, &normalize(text(&ks, "/spec/path")));
    cluster.applied.push(Applied {
        kustomization: ks,
        resources,
        path,
    });
    sources.missing
}

/// What one Kustomization applies before postBuild (`None`: it cannot be built), and the
/// problems found building it.
type Built = (Option<Vec<Object>>, Vec<Problem>);

/// Builds each Kustomization of `level` ([`build_one`]), in parallel, results in order.
fn build_level(
    root: &Path,
    prefix: &str,
    level: &[(Value, Option<String>)],
    engine: &Engine,
    memo: &Memo,
) -> Vec<Built> {
    level
        .par_iter()
        .map(|(ks, file)| {
            let build = || build_one(root, prefix, ks, file.as_deref(), engine, memo);
            // A build that panicked (a bug) has no result: its Kustomization says so rather
            // than take the whole plan down.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)).unwrap_or_else(|_| {
                let problem = Problem {
                    level: 2,
                    code: "BuildFailed",
                    object: object_name(ks),
                    file: file.clone(),
                    line: None,
                    message: "the build stopped unexpectedly (a bug in conflux plan)".to_owned(),
                };
                (None, vec![problem])
            })
        })
        .collect()
}

/// The URL of a Kustomization's source (`spec.url` of the GitRepository/OCIRepository/Bucket
/// it names, among `objects`), without a trailing `.git` or `/`.
fn source_url(objects: &[&Object], ks: &Value) -> Option<String> {
    let name = text(ks, "/spec/sourceRef/name");
    let kind = text(ks, "/spec/sourceRef/kind");
    let namespace = match text(ks, "/spec/sourceRef/namespace") {
        "" => text(ks, "/metadata/namespace"),
        namespace => namespace,
    };
    let source = objects.iter().rev().find(|o| {
        group(&o.object) == "source.toolkit.fluxcd.io"
            && text(&o.object, "/kind") == kind
            && text(&o.object, "/metadata/name") == name
            && text(&o.object, "/metadata/namespace") == namespace
    })?;
    let url = text(&source.object, "/spec/url");
    let url = url.trim_end_matches('/');
    let url = url.strip_suffix(".git").unwrap_or(url);
    (!url.is_empty()).then(|| url.to_owned())
}

/// For a Kustomization whose source is an `ExternalArtifact` of an `ArtifactGenerator` (Flux
/// source-watcher) copying from the cluster's own source: its path in the repository. The copy
/// rule whose destination holds `spec.path` maps it (`from: "@repo/apps/staging/**"` or
/// `"@repo/apps/staging/"`, `to:
/// "@artifact/staging/"`); relative references inside are read from the repository, so they
/// must keep the repository's layout. `None` when the source is not an ExternalArtifact.
fn artifact_path(
    objects: &[&Object],
    ks: &Value,
    (root_source, _): &(String, String),
) -> Option<Result<String, String>> {
    if text(ks, "/spec/sourceRef/kind") != "ExternalArtifact" {
        return None;
    }
    let name = text(ks, "/spec/sourceRef/name");
    let namespace = match text(ks, "/spec/sourceRef/namespace") {
        "" => text(ks, "/metadata/namespace"),
        namespace => namespace,
    };
    let path = normalize(text(ks, "/spec/path"));
    let not_followed = |why: &str| {
        Some(Err(format!(
            "its source ExternalArtifact/{namespace}/{name} {why}: what it applies is not planned"
        )))
    };
    let generators = objects.iter().map(|o| &o.object).filter(|o| {
        text(o, "/kind") == "ArtifactGenerator" && text(o, "/metadata/namespace") == namespace
    });
    for generator in generators {
        let Some(artifact) = json_at(generator, "/spec/artifacts")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|a| text(a, "/name") == name))
        else {
            continue;
        };
        let sources = json_at(generator, "/spec/sources").and_then(Value::as_array);
        let own = |alias: &str| {
            sources
                .into_iter()
                .flatten()
                .any(|s| text(s, "/alias") == alias && text(s, "/name") == root_source)
        };
        let copies = artifact.get("copy").and_then(Value::as_array);
        for copy in copies.into_iter().flatten() {
            let (from, to) = (text(copy, "/from"), text(copy, "/to"));
            let Some(to) = to.strip_prefix("@artifact/").map(normalize) else {
                continue;
            };
            let Some((alias, from)) = from.strip_prefix('@').and_then(|f| f.split_once('/')) else {
                continue;
            };
            // `dir/**` and `dir/` both copy the directory's contents.
            let Some(from) = from.strip_suffix("/**").or_else(|| from.strip_suffix('/')) else {
                continue;
            };
            let inside = to.is_empty() || path == to || path.starts_with(&format!("{to}/"));
            if !inside {
                continue;
            }
            if !own(alias) {
                return not_followed("copies from another source");
            }
            let rest = path.strip_prefix(&to).unwrap_or(&path);
            return Some(Ok(join(from, rest.trim_start_matches('/'))));
        }
        return not_followed(
            "has no plain copy rule (`@source/dir/**` or `@source/dir/`) holding its path",
        );
    }
    not_followed("is made by no ArtifactGenerator found in the repository")
}

/// Whether a child Kustomization's source is the cluster's own (the repository being read); `Err`
/// says why not, for a `SourceNotFollowed` finding (not an error: what it applies is elsewhere).
fn follows(ks: &Value, (name, namespace): &(String, String)) -> Result<(), String> {
    let source = text(ks, "/spec/sourceRef/name");
    let source_namespace = match text(ks, "/spec/sourceRef/namespace") {
        "" => text(ks, "/metadata/namespace"),
        namespace => namespace,
    };
    if source == name && (source_namespace == namespace || source_namespace.is_empty()) {
        return Ok(());
    }
    let kind = text(ks, "/spec/sourceRef/kind");
    Err(format!(
        "its source {kind}/{source_namespace}/{source} is not this repository's ({namespace}/{name}): what it applies is not planned"
    ))
}

/// The objects one Kustomization applies before postBuild (`None` when it cannot be built),
/// and the problems found building it.
fn build_one(
    root: &Path,
    prefix: &str,
    ks: &Value,
    file: Option<&str>,
    engine: &Engine,
    memo: &Memo,
) -> Built {
    let mut problems = Vec::new();
    let built = build_into(root, prefix, ks, file, (engine, memo), &mut problems);
    (built, problems)
}

fn build_into(
    root: &Path,
    prefix: &str,
    ks: &Value,
    file: Option<&str>,
    (engine, memo): (&Engine, &Memo),
    problems: &mut Vec<Problem>,
) -> Option<Vec<Object>> {
    let name = object_name(ks);
    let path = text(ks, "/spec/path");
    let mut problem = |level, code, message: String| {
        problems.push(Problem {
            level,
            code,
            object: name.clone(),
            file: file.map(str::to_owned),
            line: None,
            message,
        });
    };
    if path.contains("${") {
        problem(
            2,
            "PathNotFound",
            format!("spec.path '{path}' still holds a variable after substitution"),
        );
        return None;
    }
    let dir = normalize(path);
    let absolute = root.join(&dir);
    if !absolute.is_dir() {
        problem(
            2,
            "PathNotFound",
            format!(
                "spec.path '{path}' does not exist in the repository: kustomize-controller fails with 'kustomization path not found'"
            ),
        );
        return None;
    }
    let overlay = FluxOverlay::of(ks);
    let fallback = file.map(str::to_owned);
    match memo.build(engine, root, &dir, &overlay) {
        Ok(build) => {
            for p in build.problems {
                let file = p.file.map(|f| join(prefix, &f));
                problems.push(Problem {
                    object: name.clone(),
                    file: file.or_else(|| fallback.clone()),
                    ..p
                });
            }
            let mut objects = build.objects;
            overlay.common_metadata(&mut objects);
            Some(objects)
        }
        Err(err) => {
            // Name the file that failed, where the engine says which, not the Kustomization.
            let (file, line) = match &err {
                Error::InFile { file, line, .. } => (Some(join(prefix, file)), *line),
                _ => (file.map(str::to_owned), None),
            };
            problems.push(Problem {
                level: 2,
                code: "BuildFailed",
                object: name,
                file,
                line,
                message: format!("kustomize build of '{dir}' fails: {err}"),
            });
            None
        }
    }
}

/// A Secret encrypted with SOPS (a top-level `sops` key): its values are never decoded.
pub fn is_sops(object: &Value) -> bool {
    text(object, "/kind") == "Secret" && object.get("sops").is_some_and(Value::is_object)
}

/// The Kustomization's resources after postBuild, substituted with the variables of the objects
/// known so far (kustomize-controller's order: parents first). Resources that cannot be
/// substituted are kept as built; the substitution audit reports them.
/// What [`post_build`] made of one Kustomization's resources.
struct PostBuilt {
    /// The resources, substituted.
    objects: Vec<Object>,
    /// Sources (`Kind/namespace/name`) found among the Kustomization's own resources.
    own: Vec<String>,
    /// Sources found only among those applied further on, with the Kustomization applying each.
    later: Vec<(String, String)>,
    /// Sources not found at all.
    missing: Vec<Missing>,
}

fn post_build(
    ks: &Value,
    resources: &[Object],
    known: &Known<'_>,
    later: &[(Object, String)],
) -> PostBuilt {
    let Ok(post_build) = PostBuild::from_kustomization(ks) else {
        return PostBuilt {
            objects: resources.to_vec(),
            own: Vec::new(),
            later: Vec::new(),
            missing: Vec::new(),
        };
    };
    let namespace = text(ks, "/metadata/namespace");
    let matches = |o: &&Object, kind: &str, namespace: &str, name: &str| {
        text(&o.object, "/kind") == kind
            && text(&o.object, "/metadata/name") == name
            && text(&o.object, "/metadata/namespace") == namespace
    };
    // The steady state: what the Kustomization applies itself exists once it has reconciled
    // (the cluster settings ConfigMap often lives under the path that uses it), and so does what
    // a Kustomization reached later applies.
    let mut own = Vec::new();
    let mut applied_later = Vec::new();
    let mut missing = Vec::new();
    // Where a source is: applied before, by this Kustomization, or further on (and by whom).
    let locate = |kind: &str, namespace: &str, name: &str| {
        if let Some(found) = known.get(kind, namespace, name) {
            return (Some(found), None);
        }
        if let Some(found) = resources.iter().find(|o| matches(o, kind, namespace, name)) {
            return (Some(found), Some(None));
        }
        match later
            .iter()
            .find(|(o, _)| matches(&o, kind, namespace, name))
        {
            Some((found, applier)) => (Some(found), Some(Some(applier))),
            None => (None, None),
        }
    };
    let find = |kind: &str, namespace: &str, name: &str| locate(kind, namespace, name).0;
    let copy_source = |o: &Object| {
        text(
            &o.object,
            "/metadata/annotations/fluxcd.controlplane.io~1copyFrom",
        )
        .split_once('/')
        .map(|(ns, name)| (ns.to_owned(), name.to_owned()))
    };
    // Every source is looked up first (substitution stops at the first one missing): what is
    // missing is what a second pass may find.
    for reference in &post_build.substitute_from {
        if matches!(reference.kind, SourceKind::Other(_)) {
            continue;
        }
        let kind = reference.kind.as_str();
        let direct = locate(kind, namespace, &reference.name);
        let mut wanted = vec![((namespace.to_owned(), reference.name.clone()), direct)];
        // A pull copy's source too, looked up once.
        if let Some((ns, name)) = direct.0.and_then(copy_source) {
            let located = locate(kind, &ns, &name);
            wanted.push(((ns, name), located));
        }
        for ((ns, name), located) in wanted {
            let label = format!("{kind}/{ns}/{name}");
            match located {
                (None, _) => missing.push((kind.to_owned(), ns, name)),
                (Some(_), Some(None)) => own.push(label),
                (Some(_), Some(Some(applier))) => applied_later.push((label, applier.clone())),
                (Some(_), None) => {}
            }
        }
    }
    let vars = load_variables(&post_build, |reference| {
        let kind = reference.kind.as_str();
        let mut found = find(kind, namespace, &reference.name);
        // A pull copy holds its source's data once copied.
        if let Some((source_namespace, source_name)) = found.and_then(copy_source) {
            found = find(kind, &source_namespace, &source_name).or(found);
        }
        match found {
            Some(o) if is_sops(&o.object) => SourceLookup::Found(sops_placeholder(&o.object)),
            Some(o) => SourceLookup::Found(o.object.clone()),
            None => SourceLookup::NotFound,
        }
    });
    own.dedup();
    applied_later.dedup();
    let objects = match vars {
        Ok(vars) => {
            let options = SubstitutionOptions::default();
            resources
                .par_iter()
                .map(|resource| Object {
                    // A failure is the substitution audit's to report (SubstitutionFailed); the
                    // object stays as built.
                    object: match substitute_resource(&resource.object, &vars, &options) {
                        Ok(ResourceOutcome::Substituted(value)) => value,
                        _ => resource.object.clone(),
                    },
                    file: resource.file.clone(),
                })
                .collect()
        }
        Err(_) => resources.to_vec(),
    };
    PostBuilt {
        objects,
        own,
        later: applied_later,
        missing,
    }
}

/// A SOPS-encrypted Secret with its values replaced: the keys (variable names) stay, each value
/// is the text `ENCRYPTED`, never the ciphertext or a decoded value.
pub fn sops_placeholder(secret: &Value) -> Value {
    let mut copy = secret.clone();
    let mut keys = BTreeSet::new();
    for field in ["data", "stringData"] {
        if let Some(map) = secret.get(field).and_then(Value::as_object) {
            keys.extend(map.keys().cloned());
        }
    }
    if let Some(object) = copy.as_object_mut() {
        object.remove("stringData");
        object.remove("sops");
        let data = keys
            .into_iter()
            .map(|k| (k, Value::String("RU5DUllQVEVE".to_owned())))
            .collect();
        object.insert("data".to_owned(), Value::Object(data));
    }
    copy
}

/// Reads every YAML document below `root` (for entry-point discovery and the flat mode), with
/// its file relative to `root`. Hidden directories are skipped.
pub fn read_tree(root: &Path, problems: &mut Vec<Problem>) -> Vec<Object> {
    read_tree_in(root, problems, &Files::default())
}

/// [`read_tree`], parsing through `files` (a [`Memo`]'s, so that the builds find them parsed).
pub fn read_tree_in(root: &Path, problems: &mut Vec<Problem>, files: &Files) -> Vec<Object> {
    // Files are parsed in parallel, and taken in their sorted order.
    let read: Vec<_> = yaml_files(root)
        .par_iter()
        .map(|path| (relative(root, path), files.read_documents(path)))
        .collect();
    let mut out = Vec::new();
    for (relative, documents) in read {
        match documents {
            Ok(documents) => out.extend(documents.into_iter().map(|object| Object {
                object,
                file: Some(relative.clone()),
            })),
            Err(err) => problems.push(Problem {
                level: 1,
                code: "InvalidInput",
                object: relative.clone(),
                file: Some(relative),
                line: None,
                message: err.to_string(),
            }),
        }
    }
    out
}

/// Every `.yaml`/`.yml` file below `root`, sorted; hidden directories are skipped.
pub fn yaml_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let (path, name) = (entry.path(), entry.file_name());
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if name.ends_with(".yaml") || name.ends_with(".yml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(file: &str, object: Value) -> Object {
        Object {
            object,
            file: Some(file.to_owned()),
        }
    }

    #[test]
    fn entry_points_are_the_syncs_flux_starts_with() {
        let documents = [
            // The bootstrap sync applies the directory holding it.
            at(
                "clusters/a/flux-system/gotk-sync.yaml",
                json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                       "metadata": {"name": "flux-system", "namespace": "flux-system"},
                       "spec": {"path": "./clusters/a", "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}}),
            ),
            // A child Kustomization is no entry point.
            at(
                "clusters/a/apps.yaml",
                json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                       "metadata": {"name": "apps", "namespace": "flux-system"},
                       "spec": {"path": "./apps"}}),
            ),
            at(
                "clusters/b/flux-system/instance.yaml",
                json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "FluxInstance",
                       "metadata": {"name": "flux", "namespace": "flux-system"},
                       "spec": {"sync": {"kind": "OCIRepository", "path": "clusters/b"}}}),
            ),
            // A flux-instance chart values file, the path relative to the pushed directory.
            at(
                "k8s/clusters/c/flux-system/instance/values.yaml",
                json!({"instance": {"sync": {"path": "./clusters/c"}}}),
            ),
        ];
        let files = ["clusters/d/flux-system/gotk-components.yaml".to_owned()];
        let found = entries(&documents, &files);
        let names: Vec<(String, &str)> = found
            .iter()
            .map(|e| {
                let path = text(&e.kustomization, "/spec/path");
                (
                    join(&e.root, path),
                    text(&e.kustomization, "/spec/sourceRef/kind"),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("clusters/a".to_owned(), "GitRepository"),
                ("clusters/b".to_owned(), "OCIRepository"),
                ("clusters/d".to_owned(), "GitRepository"),
                ("k8s/clusters/c".to_owned(), "GitRepository"),
            ]
        );
        assert_eq!(found[3].root, "k8s");
    }

    #[test]
    fn an_external_artifact_of_the_own_source_maps_into_the_repository() {
        let generator = at(
            "clusters/a/artifacts.yaml",
            json!({"apiVersion": "source.extensions.fluxcd.io/v1beta1", "kind": "ArtifactGenerator",
                   "metadata": {"name": "g", "namespace": "flux-system"},
                   "spec": {"sources": [{"alias": "repo", "kind": "GitRepository", "name": "flux-system"},
                                        {"alias": "other", "kind": "GitRepository", "name": "other"}],
                            "artifacts": [
                                {"name": "apps", "copy": [
                                    {"from": "@repo/apps/base/**", "to": "@artifact/base/"},
                                    {"from": "@repo/apps/staging/", "to": "@artifact/staging/"}]},
                                {"name": "elsewhere", "copy": [{"from": "@other/x/**", "to": "@artifact/"}]}]}}),
        );
        let objects = [&generator];
        let source = ("flux-system".to_owned(), "flux-system".to_owned());
        let ks = |artifact: &str, path: &str| {
            json!({"kind": "Kustomization", "metadata": {"name": "k", "namespace": "flux-system"},
                   "spec": {"path": path, "sourceRef": {"kind": "ExternalArtifact", "name": artifact}}})
        };
        let path =
            |artifact: &str, path: &str| artifact_path(&objects, &ks(artifact, path), &source);
        assert_eq!(
            path("apps", "./staging"),
            Some(Ok("apps/staging".to_owned()))
        );
        assert_eq!(path("apps", "./base/x"), Some(Ok("apps/base/x".to_owned())));
        assert!(matches!(path("elsewhere", "./"), Some(Err(_))));
        assert!(matches!(path("unknown", "./"), Some(Err(_))));
        let git =
            json!({"kind": "Kustomization", "spec": {"sourceRef": {"kind": "GitRepository"}}});
        assert_eq!(artifact_path(&objects, &git, &source), None);
    }

    #[test]
    fn sops_secrets_keep_their_keys_and_never_their_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "flux-system"},
            "stringData": {"TOKEN": "ENC[AES256_GCM,data:abc,type:str]"},
            "data": {"KEY": "ENC[AES256_GCM,data:def,type:str]"},
            "sops": {"version": "3.9.0"}});
        assert!(is_sops(&secret));
        let placeholder = sops_placeholder(&secret);
        assert_eq!(
            placeholder["data"],
            json!({"KEY": "RU5DUllQVEVE", "TOKEN": "RU5DUllQVEVE"})
        );
        assert!(!placeholder.to_string().contains("ENC["));
    }
}
