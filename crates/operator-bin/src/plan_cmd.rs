//! `conflux plan PATH… | -`: offline, on directories of manifests (a Flux fleet repository) or a
//! cluster dump (`kubectl get -A -o yaml`), what conflux would copy, which Flux objects reconcile
//! when a ConfigMap/Secret changes, which workloads roll, and what Flux's substitution breaks.
//!
//! A fleet repository (one directory with cluster entry points: a `flux-system` sync or a
//! FluxInstance) is read as Flux builds it, one cluster at a time (`conflux_fleet::fleet`); anything
//! else is read as a flat set of manifests.
//!
//! This file only reads the flags and writes the output; the plans, and every finding in them,
//! come from `conflux_fleet::plan` (over the audits of the library crates), the formats (text,
//! JSON per docs/plan-json.md, graphviz) from `conflux_fleet::render`. Exit status: 0 clean, 1
//! findings at or above `--fail-on` (unreadable input included), 2 usage.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use watch_index::selector::Selector;

use conflux_fleet::fleet;
use conflux_fleet::kustomize::{Engine, normalize};
use conflux_fleet::plan::{Input, LEVELS, Options, Plan, plan_cluster, plan_flat, row};
use conflux_fleet::render;

/// Output formats of `conflux plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables (coloured on a terminal unless NO_COLOR is set).
    Text,
    /// One JSON document (schemaVersion 1: copies, watchEdges, reloadEdges, findings, clusters,
    /// summary).
    Json,
    /// A graphviz digraph of copies, watch edges and reload edges.
    Dot,
}

/// The lowest severity that makes `conflux plan` exit with status 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Warnings and errors.
    Warning = 1,
    /// Errors only.
    Error = 2,
}

/// Flags of `conflux plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// Directories (searched recursively for *.yaml and *.yml), files, or `-` for stdin.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "text")]
    pub output: Format,
    /// Exit with status 1 when a finding is at least this severe.
    #[arg(long, value_enum, default_value = "error")]
    pub fail_on: FailOn,
    /// Flux's `--watch-configs-label-selector`: sources that do not match reach their referrers
    /// only at the next interval. The empty string watches everything.
    #[arg(long, default_value = watch_index::trigger::DEFAULT_WATCH_CONFIGS_SELECTOR)]
    pub watch_configs_label_selector: String,
    /// Namespaces whose ConfigMaps/Secrets may fan out with kopy's, reflector's or replicator's
    /// annotations.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub sync_source_namespaces: Vec<String>,
    /// Reloader's `--auto-reload-all`: workloads without annotations roll on consumed configs.
    #[arg(long)]
    pub auto_reload_all: bool,
    /// Plan only this cluster: the directory its `flux-system` sync or FluxInstance points at
    /// (relative to PATH, or an existing directory below it). Repeatable. Without it, every
    /// cluster entry point found is planned on its own.
    #[arg(long, value_name = "DIR")]
    pub cluster: Vec<PathBuf>,
    /// The kustomize binary for the builds (`builtin`: the built-in subset). Default: `kustomize`
    /// on PATH, else the built-in subset.
    #[arg(long, value_name = "PATH")]
    pub kustomize: Option<PathBuf>,
    /// Manifests of objects that exist in the cluster but not in the repository (made by
    /// Terraform, External Secrets, an operator). Repeatable. Secret values may be left out.
    #[arg(long, value_name = "FILE")]
    pub external: Vec<PathBuf>,
    /// As `conflux run --copy-resourceset-targets`: judge the copies of ResourceSet-generated
    /// targets as conflux's. Off: they are Flux Operator's.
    #[arg(long)]
    pub copy_resourceset_targets: bool,
}

/// Writes to stdout; a closed pipe (`conflux plan … | head`) ends quietly.
fn emit(out: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Runs the subcommand.
pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let selector = match Selector::parse(&args.watch_configs_label_selector) {
        Ok(selector) => selector,
        Err(err) => {
            eprintln!("conflux plan: invalid --watch-configs-label-selector: {err}");
            return Ok(ExitCode::from(2));
        }
    };
    let plans = match plans(args, &selector) {
        Ok(mut plans) => {
            if let [root] = args.paths.as_slice() {
                locate(root, &mut plans);
            }
            plans
        }
        Err(message) => {
            eprintln!("conflux plan: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let threshold = args.fail_on as usize;
    let failed = plans
        .iter()
        .flat_map(|p| &p.rows)
        .any(|r| r.level >= threshold);
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let fail_on = LEVELS[threshold];
    let out = match args.output {
        Format::Text => render::text(&plans, colour),
        Format::Json => {
            serde_json::to_string_pretty(&render::json(&plans, fail_on, failed))? + "\n"
        }
        Format::Dot => render::dot(&plans),
    };
    emit(&out)?;
    for row in plans
        .iter()
        .flat_map(|p| &p.rows)
        .filter(|r| r.domain == "input")
    {
        eprintln!("conflux plan: {}: {}", row.object, row.message);
    }
    Ok(ExitCode::from(u8::from(failed)))
}

/// Sets the line of each finding's object in its file (files relative to `root`, a directory).
fn locate(root: &Path, plans: &mut [Plan]) {
    if !root.is_dir() {
        return;
    }
    let mut texts: BTreeMap<String, Option<String>> = BTreeMap::new();
    for row in plans.iter_mut().flat_map(|p| p.rows.iter_mut()) {
        let Some(file) = &row.file else { continue };
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
        let value = |key: &str| {
            trimmed
                .strip_prefix(key)
                .map(|v| v.trim().trim_matches(['"', '\'']))
        };
        if value("kind:") == Some(kind) && kind_line.is_none() {
            kind_line = Some(index + 1);
        }
        if value("name:") == Some(name) {
            named = true;
        }
    }
    kind_line.filter(|_| named)
}

/// The plans: one per cluster of a fleet repository, or one of the flat input.
fn plans(args: &PlanArgs, selector: &Selector) -> Result<Vec<Plan>, String> {
    let options = Options {
        sync_source_namespaces: args.sync_source_namespaces.clone(),
        copy_resourceset_targets: args.copy_resourceset_targets,
        auto_reload_all: args.auto_reload_all,
        watch_selector: selector.clone(),
    };
    let mut external = Vec::new();
    for file in &args.external {
        let objects = conflux_fleet::kustomize::read_documents(file)
            .map_err(|e| format!("--external {}: {e}", file.display()))?;
        let name = format!("--external {}", file.display());
        external.extend(
            objects
                .into_iter()
                .map(|object| fleet_object(object, &name)),
        );
    }
    let root = match args.paths.as_slice() {
        [root] if root.is_dir() => Some(root.as_path()),
        _ => None,
    };
    let mut outside_rows = Vec::new();
    if root.is_none() && !args.cluster.is_empty() {
        return Err("--cluster needs exactly one PATH: the repository's directory".to_owned());
    }
    if let Some(root) = root {
        let mut problems = Vec::new();
        let documents = fleet::read_tree(root, &mut problems);
        let files: Vec<String> = fleet::yaml_files(root)
            .iter()
            .map(|f| fleet::relative(root, f))
            .collect();
        let mut entries = fleet::entries(&documents, &files);
        if args.cluster.is_empty() {
            // A sync whose path is not below the directory given (PATH is a part of the
            // repository): its cluster cannot be built from here.
            let (inside, outside): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| {
                let path = e
                    .kustomization
                    .pointer("/spec/path")
                    .and_then(Value::as_str);
                root.join(&e.root)
                    .join(normalize(path.unwrap_or_default()))
                    .is_dir()
            });
            entries = inside;
            for entry in outside.iter().filter(|_| entries.is_empty()) {
                let path = entry
                    .kustomization
                    .pointer("/spec/path")
                    .and_then(Value::as_str);
                let mut r = row(
                    0,
                    "fleet",
                    "EntryOutsideInput",
                    fleet::object_name(&entry.kustomization),
                    format!(
                        "syncs '{}', which is not below {}: read as flat manifests (give the repository's root to plan per cluster)",
                        path.unwrap_or_default(),
                        root.display()
                    ),
                );
                r.file = Some(entry.file.clone());
                outside_rows.push(r);
            }
        } else {
            entries = clusters(root, &args.cluster, entries)?;
        }
        if !entries.is_empty() {
            let engine = Engine::pick(args.kustomize.as_deref());
            let mut plans = Vec::new();
            for entry in &entries {
                let cluster = fleet::plan_cluster(root, entry, &engine, &external);
                plans.push(plan_cluster(cluster, &options));
            }
            return Ok(plans);
        }
    }
    let mut input = Input::default();
    args.paths.iter().for_each(|path| input.read(path));
    for object in external {
        input.push(object.object, &object.file);
    }
    Ok(vec![plan_flat(input, outside_rows, &options)])
}

fn fleet_object(object: Value, file: &str) -> conflux_fleet::kustomize::Object {
    let object = if fleet::is_sops(&object) {
        fleet::sops_placeholder(&object)
    } else {
        object
    };
    conflux_fleet::kustomize::Object {
        object,
        file: Some(file.to_owned()),
    }
}

/// The entries of the clusters asked for with `--cluster`: the entry point found for that
/// directory, else a `flux-system` sync of it.
fn clusters(
    root: &Path,
    asked: &[PathBuf],
    found: Vec<fleet::Entry>,
) -> Result<Vec<fleet::Entry>, String> {
    let canonical_root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let mut entries = Vec::new();
    for dir in asked {
        let candidates = [root.join(dir), dir.clone()];
        let Some(absolute) = candidates
            .iter()
            .find_map(|c| c.canonicalize().ok().filter(|c| c.is_dir()))
        else {
            return Err(format!(
                "--cluster {}: no such directory in {}",
                dir.display(),
                root.display()
            ));
        };
        let Ok(relative) = absolute.strip_prefix(&canonical_root) else {
            return Err(format!(
                "--cluster {}: not inside {}",
                dir.display(),
                root.display()
            ));
        };
        let relative = relative.to_string_lossy().replace('\\', "/");
        let entry = found.iter().find(|e| {
            let path = e
                .kustomization
                .pointer("/spec/path")
                .and_then(Value::as_str);
            let path = conflux_fleet::kustomize::normalize(path.unwrap_or_default());
            conflux_fleet::kustomize::join(&e.root, &path) == relative
        });
        entries.push(match entry {
            Some(entry) => entry.clone(),
            None => fleet::Entry {
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
