//! What `conflux plan PATH…` is asked to plan ([`Request`]) and the plans it gets: one per
//! cluster when PATH is a fleet repository (every entry point found below it, or the `--cluster`
//! directories asked for), else one of every manifest read flat. Objects made outside the
//! repository (`--external`) join every plan, and each finding gets the line of its object in its
//! file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use conflux_postbuild_subst::json::pointer as json_at;
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::fleet::{self, Entry};
use crate::kustomize::{Engine, Object, read_documents};
use crate::path::{join, normalize};
use crate::plan::{Input, Options, Plan, plan_cluster, plan_flat, row};
use crate::{Error, Result};

/// The paths and flags of `conflux plan`.
#[derive(Debug, Clone)]
pub struct Request {
    /// Directories (searched recursively for `*.yaml` and `*.yml`), files, or `-` for stdin.
    pub paths: Vec<PathBuf>,
    /// `--cluster`: the directories of the clusters to plan (relative to the one PATH, or
    /// existing below it); empty plans every entry point found.
    pub clusters: Vec<PathBuf>,
    /// `--kustomize`: the kustomize binary (`builtin`: the built-in subset); `None` picks
    /// `kustomize` on `PATH`, else the built-in subset ([`Engine::pick`]).
    pub kustomize: Option<PathBuf>,
    /// `--external`: manifests of objects that exist in the cluster but not in the repository.
    pub external: Vec<PathBuf>,
    /// `--substitute-from`: substitution sources from outside Git
    /// ([`crate::substitute_from`]), for building and auditing.
    pub substitute_from: Vec<String>,
    /// What the audits take from the flags.
    pub options: Options,
}

impl Request {
    /// The plans, each finding with the line of its object when a single directory was given.
    /// An error is the request's own (an `--external` file that cannot be read, a `--cluster`
    /// that cannot be found); unreadable input is a finding of the plan instead.
    pub fn plans(&self) -> Result<Vec<Plan>> {
        let mut plans = self.plan()?;
        if let [root] = self.paths.as_slice() {
            locate(root, &mut plans);
        }
        Ok(plans)
    }

    fn plan(&self) -> Result<Vec<Plan>> {
        let mut external = Vec::new();
        for file in &self.external {
            let objects = read_documents(file).map_err(|e| Error::External {
                file: file.display().to_string(),
                source: Box::new(e),
            })?;
            let name = format!("--external {}", file.display());
            external.extend(objects.into_iter().map(|object| at(object, &name)));
        }
        for spec in &self.substitute_from {
            external.extend(crate::substitute_from::objects(spec)?);
        }
        let root = match self.paths.as_slice() {
            [root] if root.is_dir() => Some(root.as_path()),
            _ => None,
        };
        let mut outside_rows = Vec::new();
        if root.is_none() && !self.clusters.is_empty() {
            return Err(Error::ClusterWithoutRoot);
        }
        if let Some(root) = root {
            let mut problems = Vec::new();
            // The builds read most files again: one memo, whose parsed files they share.
            let memo = crate::kustomize::Memo::default();
            let documents = fleet::read_tree_in(root, &mut problems, memo.files());
            let files: Vec<String> = fleet::yaml_files(root)
                .iter()
                .map(|f| fleet::relative(root, f))
                .collect();
            let mut entries = fleet::entries(&documents, &files);
            if self.clusters.is_empty() {
                // A sync whose path is not below the directory given (PATH is a part of the
                // repository): its cluster cannot be built from here.
                let (inside, outside): (Vec<_>, Vec<_>) = entries
                    .into_iter()
                    .partition(|e| root.join(&e.root).join(normalize(sync_path(e))).is_dir());
                entries = inside;
                for entry in outside.iter().filter(|_| entries.is_empty()) {
                    let mut r = row(
                        0,
                        "fleet",
                        "EntryOutsideInput",
                        fleet::object_name(&entry.kustomization),
                        format!(
                            "syncs '{}', which is not below {}: read as flat manifests (give the repository's root to plan per cluster)",
                            sync_path(entry),
                            root.display()
                        ),
                    );
                    r.file = Some(entry.file.clone());
                    outside_rows.push(r);
                }
            } else {
                entries = clusters(root, &self.clusters, entries)?;
            }
            if !entries.is_empty() {
                let engine = Engine::pick(self.kustomize.as_deref());
                // Clusters are independent: built in parallel.
                let built: Vec<fleet::Cluster> = entries
                    .par_iter()
                    .map(|entry| {
                        let plan =
                            || fleet::plan_cluster_with(root, entry, &engine, &external, &memo);
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(plan))
                            .unwrap_or_else(|_| stopped(entry))
                    })
                    .collect();
                let own = self.clusters.is_empty();
                let keep: Vec<bool> = (0..entries.len())
                    .map(|i| !own || !reached_by_another(i, &entries, &built))
                    .collect();
                // Each cluster's audit is independent too: in parallel, each taking its own.
                let options = &self.options;
                let plans = built
                    .into_par_iter()
                    .zip(keep)
                    .filter(|(_, keep)| *keep)
                    .map(|(cluster, _)| plan_cluster(cluster, options))
                    .collect();
                return Ok(plans);
            }
        }
        let mut input = Input::default();
        self.paths.iter().for_each(|path| input.read(path));
        for object in external {
            input.push(object.object, &object.file);
        }
        Ok(vec![plan_flat(input, outside_rows, &self.options)])
    }
}

/// Whether the `index`th entry point is applied by another cluster that it does not apply in
/// turn: a Kustomization whose path is its own directory looks like an entry point (its file
/// lies under its path, as a bootstrap sync's does), but when a cluster reaches it, it is a part
/// of that cluster, not a cluster of its own.
fn reached_by_another(index: usize, entries: &[Entry], built: &[fleet::Cluster]) -> bool {
    let applies = |cluster: &fleet::Cluster, target: &Entry| {
        cluster.objects.iter().any(|object| {
            object.file.as_deref() == Some(target.file.as_str())
                && fleet::object_name(&object.object) == fleet::object_name(&target.kustomization)
        })
    };
    (0..entries.len()).any(|other| {
        other != index
            && applies(&built[other], &entries[index])
            && !applies(&built[index], &entries[other])
    })
}

/// The cluster of `entry` when planning it panicked (a bug): an error says so.
fn stopped(entry: &Entry) -> fleet::Cluster {
    fleet::Cluster {
        name: join(&entry.root, &normalize(sync_path(entry))),
        problems: vec![crate::problem::Problem {
            level: 2,
            code: "BuildFailed",
            object: fleet::object_name(&entry.kustomization),
            file: Some(entry.file.clone()),
            line: None,
            message: "planning this cluster stopped unexpectedly (a bug in conflux plan)"
                .to_owned(),
        }],
        ..fleet::Cluster::default()
    }
}

/// The `spec.path` an entry point syncs, as written.
fn sync_path(entry: &Entry) -> &str {
    let path = json_at(&entry.kustomization, "/spec/path");
    path.and_then(Value::as_str).unwrap_or_default()
}

/// An object of `file`; a SOPS-encrypted Secret keeps its keys, never its values.
fn at(object: Value, file: &str) -> Object {
    let object = if fleet::is_sops(&object) {
        fleet::sops_placeholder(&object)
    } else {
        object
    };
    Object {
        object,
        file: Some(file.to_owned()),
    }
}

/// The entries of the clusters asked for with `--cluster`: the entry point found for that
/// directory, else a `flux-system` sync of it.
fn clusters(root: &Path, asked: &[PathBuf], found: Vec<Entry>) -> Result<Vec<Entry>> {
    let canonical_root = root
        .canonicalize()
        .map_err(|e| Error::io(root.display(), e))?;
    let mut entries = Vec::new();
    for dir in asked {
        let names = || (dir.display().to_string(), root.display().to_string());
        let candidates = [root.join(dir), dir.clone()];
        let Some(absolute) = candidates
            .iter()
            .find_map(|c| c.canonicalize().ok().filter(|c| c.is_dir()))
        else {
            let (dir, root) = names();
            return Err(Error::ClusterNotFound { dir, root });
        };
        let Ok(relative) = absolute.strip_prefix(&canonical_root) else {
            let (dir, root) = names();
            return Err(Error::ClusterOutsideRoot { dir, root });
        };
        let relative = relative.to_string_lossy().replace('\\', "/");
        let entry = found
            .iter()
            .find(|e| join(&e.root, &normalize(sync_path(e))) == relative);
        entries.push(match entry {
            Some(entry) => entry.clone(),
            None => Entry {
                kustomization: json!({
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                    "metadata": {"name": "flux-system", "namespace": "flux-system"},
                    "spec": {"path": relative,
                             "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
                }),
                file: format!("--cluster {}", dir.display()),
                root: String::new(),
            },
        });
    }
    Ok(entries)
}

/// Sets the line of each finding's object in its file (files relative to `root`, a directory).
fn locate(root: &Path, plans: &mut [Plan]) {
    if !root.is_dir() {
        return;
    }
    let mut texts: BTreeMap<String, Option<String>> = BTreeMap::new();
    for row in plans.iter_mut().flat_map(|p| p.rows.iter_mut()) {
        let Some(file) = &row.file else { continue };
        if row.line.is_some() {
            continue;
        }
        let text = texts
            .entry(file.clone())
            .or_insert_with(|| std::fs::read_to_string(root.join(file)).ok());
        if let Some(text) = text {
            row.line = line_of(text, &row.object);
        }
    }
}

/// The 1-based line of the `kind:` of the document declaring `object` (`Kind/…/name`).
fn line_of(text: &str, object: &str) -> Option<usize> {
    let kind = object.split('/').next()?;
    let name = object.rsplit('/').next()?;
    let (mut kind_line, mut named) = (None, false);
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("---") {
            if let (Some(found), true) = (kind_line, named) {
                return Some(found);
            }
            (kind_line, named) = (None, false);
            continue;
        }
        let trimmed = line.trim_start().trim_start_matches("- ");
        let value = |key: &str| trimmed.strip_prefix(key).map(scalar);
        if value("kind:") == Some(kind) && kind_line.is_none() {
            kind_line = Some(index + 1);
        }
        if value("name:") == Some(name) {
            named = true;
        }
    }
    kind_line.filter(|_| named)
}

/// A plain one-line YAML value as written after its key: without an anchor (`&app x`, common
/// on names), a tag (`!!str x`), a trailing comment or quotes.
fn scalar(raw: &str) -> &str {
    let mut value = raw.trim();
    while let Some(rest) = value.strip_prefix('&').or_else(|| value.strip_prefix('!')) {
        value = rest
            .split_once(char::is_whitespace)
            .map_or("", |(_, v)| v.trim_start());
    }
    if let Some((before, _)) = value.split_once(" #") {
        value = before.trim_end();
    }
    value.trim_matches(['"', '\''])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plans a fleet made of `files` (path, text) with the built-in engine; `tag` names its
    /// scratch directory.
    fn plan_fleet(tag: &str, files: &[(&str, &str)]) -> Vec<Plan> {
        plan_fleet_with(tag, files, &[])
    }

    /// [`plan_fleet`] with `--substitute-from` values (`{dir}` in them is the fleet's directory).
    fn plan_fleet_with(tag: &str, files: &[(&str, &str)], substitute_from: &[&str]) -> Vec<Plan> {
        let dir = std::env::temp_dir().join(format!("conflux-fleet-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (file, text) in files {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let request = Request {
            paths: vec![dir.clone()],
            clusters: Vec::new(),
            kustomize: Some(PathBuf::from("builtin")),
            external: Vec::new(),
            substitute_from: substitute_from
                .iter()
                .map(|s| s.replace("{dir}", &dir.display().to_string()))
                .collect(),
            options: Options {
                sync_source_namespaces: Vec::new(),
                copy_resourceset_targets: false,
                auto_reload_all: false,
                watch_selector: conflux_watch_index::selector::Selector::everything(),
            },
        };
        let plans = request.plans().expect("planned");
        let _ = std::fs::remove_dir_all(&dir);
        plans
    }

    /// A Flux Kustomization in flux-system; `spec` is YAML indented for `spec:`.
    fn ks(name: &str, spec: &str) -> String {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
             name: {name}\n  namespace: flux-system\nspec:\n{spec}"
        )
    }

    const SYNC: &str = "clusters/prod/flux-system/gotk-sync.yaml";

    fn codes(plans: &[Plan]) -> Vec<&'static str> {
        plans.iter().flat_map(|p| &p.rows).map(|r| r.code).collect()
    }

    /// A Kustomization whose path is its own directory (`apps/podinfo/ks.yaml` syncing
    /// `./apps/podinfo`) looks like an entry point; the cluster that applies it owns it.
    #[test]
    fn an_entry_another_cluster_reaches_is_not_a_cluster_of_its_own() {
        let plans = plan_fleet(
            "self",
            &[
                (SYNC, &ks("flux-system", "  path: ./clusters/prod\n")),
                ("clusters/prod/apps.yaml", &ks("apps", "  path: ./apps\n")),
                (
                    "apps/podinfo/ks.yaml",
                    &ks("podinfo", "  path: ./apps/podinfo\n"),
                ),
                (
                    "apps/podinfo/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: podinfo\n  namespace: default\n",
                ),
            ],
        );
        let names: Vec<Option<String>> = plans.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, [Some("clusters/prod".to_owned())]);
    }

    /// A bad YAML alias in an applied file: the finding names that file and line, not the
    /// Kustomization that builds it.
    #[test]
    fn a_build_failure_names_the_file_and_line_that_failed() {
        let plans = plan_fleet(
            "alias",
            &[
                (SYNC, &ks("flux-system", "  path: ./clusters/prod\n")),
                (
                    "clusters/prod/apps.yaml",
                    &ks("apps", "  path: ./apps/web\n"),
                ),
                (
                    "apps/web/kustomization.yaml",
                    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - cm.yaml\n",
                ),
                (
                    "apps/web/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n\
                     data:\n  a: *missing\n",
                ),
            ],
        );
        let failed: Vec<(Option<&str>, Option<usize>)> = plans
            .iter()
            .flat_map(|p| &p.rows)
            .filter(|r| r.code == "BuildFailed")
            .map(|r| (r.file.as_deref(), r.line))
            .collect();
        assert_eq!(failed, [(Some("apps/web/cm.yaml"), Some(7))]);
    }

    /// The cluster settings ConfigMap lives under the path that substitutes from it (a common
    /// layout): plan models a running cluster, where it exists, so the children's paths are
    /// substituted; an info says it exists only after a first reconcile.
    #[test]
    fn a_substitute_source_the_kustomization_applies_itself_exists() {
        let plans = plan_fleet(
            "selfsource",
            &[
                (
                    SYNC,
                    &ks(
                        "flux-system",
                        "  path: ./clusters/prod\n  postBuild:\n    substituteFrom:\n      \
                         - kind: ConfigMap\n        name: cluster-settings\n",
                    ),
                ),
                (
                    "clusters/prod/settings.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-settings\n  \
                     namespace: flux-system\ndata:\n  CLUSTER: prod\n",
                ),
                (
                    "clusters/prod/apps.yaml",
                    &ks("apps", "  path: ./apps/${CLUSTER}\n"),
                ),
                (
                    "apps/prod/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n",
                ),
            ],
        );
        let codes = codes(&plans);
        assert!(!codes.contains(&"PathNotFound"), "{codes:?}");
        assert!(codes.contains(&"SubstituteSourceSelfApplied"), "{codes:?}");
        let applied: Vec<&str> = plans[0]
            .kustomizations
            .iter()
            .filter_map(|k| k.get("path").and_then(Value::as_str))
            .collect();
        assert!(applied.contains(&"apps/prod"), "{applied:?}");
    }

    /// The cluster settings ConfigMap is applied by a sibling Kustomization that Flux reaches
    /// after the substitution that reads it: plan models a running cluster, where it exists, so
    /// the children's paths are substituted; an info says a new cluster needs it first.
    #[test]
    fn a_substitute_source_a_later_kustomization_applies_exists() {
        let files = [
            (
                SYNC,
                ks(
                    "flux-system",
                    "  path: ./clusters/prod\n  postBuild:\n    substituteFrom:\n      \
                     - kind: ConfigMap\n        name: cluster-settings\n",
                ),
            ),
            (
                "clusters/prod/apps.yaml",
                ks("apps", "  path: ./apps/${CLUSTER}\n"),
            ),
            (
                "clusters/prod/settings.yaml",
                ks("settings", "  path: ./settings\n"),
            ),
            (
                "settings/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-settings\n  \
                 namespace: flux-system\ndata:\n  CLUSTER: prod\n"
                    .to_owned(),
            ),
            (
                "apps/prod/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n"
                    .to_owned(),
            ),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(f, t)| (*f, t.as_str())).collect();
        let plans = plan_fleet("latersource", &files);
        let codes = codes(&plans);
        assert!(
            !codes.contains(&"PathNotFound") && !codes.contains(&"SubstituteSourceMissing"),
            "{codes:?}"
        );
        assert!(codes.contains(&"SubstituteSourceAppliedLater"), "{codes:?}");
        let applied: Vec<&str> = plans[0]
            .kustomizations
            .iter()
            .filter_map(|k| k.get("path").and_then(Value::as_str))
            .collect();
        assert!(applied.contains(&"apps/prod"), "{applied:?}");
    }

    /// Two sources applied later, and a `dependsOn` on the Kustomization that applies them: both
    /// are found (substitution stops at the first missing source, so the first pass must say
    /// which are missing all at once), and Flux orders them first, so nothing is said.
    #[test]
    fn substitute_sources_applied_by_a_dependency_exist_without_a_finding() {
        let apps = ks(
            "apps",
            "  path: ./apps\n  dependsOn:\n    - name: settings\n  postBuild:\n    \
             substituteFrom:\n      - kind: ConfigMap\n        name: cluster-settings\n      \
             - kind: ConfigMap\n        name: cluster-more\n",
        );
        let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-settings\n  \
             namespace: flux-system\ndata:\n  CLUSTER: prod\n---\napiVersion: v1\nkind: ConfigMap\n\
             metadata:\n  name: cluster-more\n  namespace: flux-system\ndata:\n  REGION: eu\n";
        let files = [
            (SYNC, ks("flux-system", "  path: ./clusters/prod\n")),
            ("clusters/prod/apps.yaml", apps),
            (
                "clusters/prod/settings.yaml",
                ks("settings", "  path: ./settings\n"),
            ),
            ("settings/cm.yaml", settings.to_owned()),
            ("apps/web.yaml", ks("web", "  path: ./web/${CLUSTER}\n")),
            (
                "web/prod/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n"
                    .to_owned(),
            ),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(f, t)| (*f, t.as_str())).collect();
        let plans = plan_fleet("dependedsource", &files);
        let codes = codes(&plans);
        assert!(
            !codes.contains(&"PathNotFound")
                && !codes.contains(&"SubstituteSourceMissing")
                && !codes.contains(&"SubstituteSourceAppliedLater"),
            "{codes:?}"
        );
        let applied: Vec<&str> = plans[0]
            .kustomizations
            .iter()
            .filter_map(|k| k.get("path").and_then(Value::as_str))
            .collect();
        assert!(applied.contains(&"web/prod"), "{applied:?}");
    }

    /// kustomize refuses a Component under `resources` and a Kustomization under `components`;
    /// so does the built-in engine.
    #[test]
    fn components_and_resources_are_not_interchangeable() {
        let component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n\
                         resources:\n  - cm.yaml\n";
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: default\n";
        for (field, target, kustomization, fails) in [
            ("resources", "../comp", component, true),
            ("components", "../comp", component, false),
            (
                "components",
                "../comp",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 resources:\n  - cm.yaml\n",
                true,
            ),
        ] {
            let app = format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n{field}:\n  - {target}\n"
            );
            let plans = plan_fleet(
                "component",
                &[
                    (SYNC, &ks("flux-system", "  path: ./clusters/prod\n")),
                    (
                        "clusters/prod/apps.yaml",
                        &ks("apps", "  path: ./apps/web\n"),
                    ),
                    ("apps/web/kustomization.yaml", &app),
                    ("apps/comp/kustomization.yaml", kustomization),
                    ("apps/comp/cm.yaml", cm),
                ],
            );
            assert_eq!(
                codes(&plans).contains(&"BuildFailed"),
                fails,
                "{field} {kustomization}: {:?}",
                plans
                    .iter()
                    .flat_map(|p| &p.rows)
                    .map(|r| &r.message)
                    .collect::<Vec<_>>()
            );
        }
    }

    /// The cluster settings come from Terraform: `--substitute-from` gives them to the plan.
    #[test]
    fn substitution_values_from_outside_git_build_and_audit_the_fleet() {
        let files = [
            (
                SYNC,
                ks(
                    "flux-system",
                    "  path: ./clusters/prod\n  postBuild:\n    substituteFrom:\n      \
                     - kind: ConfigMap\n        name: cluster-settings\n",
                ),
            ),
            (
                "clusters/prod/apps.yaml",
                ks("apps", "  path: ./apps/${CLUSTER}\n"),
            ),
            (
                "apps/prod/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n"
                    .to_owned(),
            ),
            ("values/settings.env", "CLUSTER=prod\n".to_owned()),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(f, t)| (*f, t.as_str())).collect();
        let without = codes(&plan_fleet("outside", &files));
        assert!(
            without.contains(&"SubstituteSourceMissing") && without.contains(&"PathNotFound"),
            "{without:?}"
        );
        let with = plan_fleet_with(
            "outside",
            &files,
            &["ConfigMap/cluster-settings={dir}/values/settings.env"],
        );
        let codes = codes(&with);
        assert!(
            !codes.contains(&"SubstituteSourceMissing") && !codes.contains(&"PathNotFound"),
            "{codes:?}"
        );
    }

    /// A parent's kustomization uses a field the built-in engine skips (`helmCharts`, which
    /// could render the child): what is judged of the child is a warning, not an error.
    #[test]
    fn nothing_downstream_of_a_skipped_step_is_an_error() {
        let plans = plan_fleet(
            "approximate",
            &[
                (SYNC, &ks("flux-system", "  path: ./clusters/prod\n")),
                (
                    "clusters/prod/kustomization.yaml",
                    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                     resources:\n  - apps.yaml\nhelmCharts: []\n",
                ),
                (
                    "clusters/prod/apps.yaml",
                    &ks("apps", "  path: ./not-yet\n"),
                ),
            ],
        );
        let rows: Vec<(&str, usize)> = plans
            .iter()
            .flat_map(|p| &p.rows)
            .map(|r| (r.code, r.level))
            .collect();
        assert!(rows.contains(&("KustomizeUnsupported", 1)), "{rows:?}");
        assert!(rows.contains(&("PathNotFound", 1)), "{rows:?}");
        assert!(!rows.iter().any(|(_, level)| *level == 2), "{rows:?}");
    }

    #[test]
    fn a_finding_points_at_the_kind_line_of_its_document() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n---\n\
                    apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: 'app'\n  namespace: a\n";
        // (object, line)
        let cases = [
            ("ConfigMap/a/app", Some(7)),
            ("ConfigMap/other", Some(2)),
            ("Secret/a/app", None),
            ("ConfigMap/a/missing", None),
        ];
        for (object, line) in cases {
            assert_eq!(line_of(text, object), line, "{object}");
        }
        // A name behind a YAML anchor (`name: &app x`), a tag or with a comment.
        let anchored = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
                        metadata:\n  name: &app podinfo\n  namespace: flux-system\n---\n\
                        kind: ConfigMap\nmetadata:\n  name: !!str cm # the settings\n";
        assert_eq!(
            line_of(anchored, "Kustomization/flux-system/podinfo"),
            Some(2)
        );
        assert_eq!(line_of(anchored, "ConfigMap/cm"), Some(7));
        // A list item's `- kind:` counts too.
        assert_eq!(
            line_of(
                "items:\n- kind: Secret\n  metadata: {}\n  name: s\n",
                "Secret/s"
            ),
            Some(2)
        );
    }
}
