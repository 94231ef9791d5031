//! `conflux plan PATH… | -`: offline, on directories of manifests (a Flux fleet repository) or a
//! cluster dump (`kubectl get -A -o yaml`), what conflux would copy, which Flux objects reconcile
//! when a ConfigMap/Secret changes, which workloads roll, and what Flux's substitution breaks.
//!
//! A fleet repository (one directory with cluster entry points: a `flux-system` sync or a
//! FluxInstance) is read as Flux builds it, one cluster at a time (`conflux_fleet::fleet`); anything
//! else is read as a flat set of manifests.
//!
//! This file only reads the flags and renders; the plans, and every finding in them, come from
//! `conflux_fleet::plan` (over the audits of the library crates). Output: text, JSON (docs/plan-json.md) or graphviz. Exit
//! status: 0 clean, 1 findings at or above `--fail-on` (unreadable input included), 2 usage.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use watch_index::selector::Selector;

use conflux_fleet::fleet;
use conflux_fleet::kustomize::{Engine, normalize};
use conflux_fleet::plan::{Input, LEVELS, Options, Plan, Row, plan_cluster, plan_flat, row};

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

/// ANSI colours of the severities.
const PAINT: [&str; 3] = ["34", "33", "31"];

/// The three sections: text titles and headers, JSON keys, DOT colours.
const TITLES: [&str; 3] = ["Copies", "Watch edges", "Reload edges"];
const HEADERS: [&[&str]; 3] = [
    &["SOURCE", "COPY", "VERDICT", "VIA", "WHY"],
    &["SOURCE", "RECONCILES", "WHEN", "INTERVAL", "REFERENCE"],
    &["CONFIG", "ROLLS", "WHY"],
];
const KEYS: [&str; 3] = ["copies", "watchEdges", "reloadEdges"];
const COLOURS: [&str; 3] = ["darkgreen", "blue", "purple"];

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
        Format::Text => {
            let mut out: String = plans.iter().map(|p| text(p, colour)).collect();
            if plans.len() > 1 {
                let rows = || plans.iter().flat_map(|p| &p.rows);
                let count = |l: usize| rows().filter(|r| r.level == l).count();
                let _ = writeln!(
                    out,
                    "{} clusters: {} errors, {} warnings, {} info",
                    plans.len(),
                    count(2),
                    count(1),
                    count(0)
                );
            }
            out
        }
        Format::Json => serde_json::to_string_pretty(&to_json(&plans, fail_on, failed))? + "\n",
        Format::Dot => dot(&plans),
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

/// A cell: text and an optional ANSI colour.
type Cell = (String, Option<&'static str>);

/// Appends an aligned table; the last column is not padded.
fn table(out: &mut String, title: &str, headers: &[&str], rows: Vec<Vec<Cell>>, colour: bool) {
    let paint = |text: &str, code: Option<&str>| match code {
        Some(code) if colour => format!("\x1b[{code}m{text}\x1b[0m"),
        _ => text.to_owned(),
    };
    let title = paint(&format!("{title} ({})", rows.len()), Some("1"));
    let _ = writeln!(out, "{title}");
    if rows.is_empty() {
        out.push_str("  none\n\n");
        return;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, (cell, _)) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = headers.iter().map(|h| (h.to_string(), None)).collect();
    for row in std::iter::once(header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, ((cell, code), width)) in row.iter().zip(&widths).enumerate() {
            let pad = (width - cell.chars().count()) * usize::from(i < last);
            let _ = write!(out, "  {}{}", paint(cell, *code), " ".repeat(pad));
        }
        out.push('\n');
    }
    out.push('\n');
}

fn text(plan: &Plan, colour: bool) -> String {
    let mut out = String::new();
    if let Some(name) = &plan.name {
        let title = format!("Cluster {}", if name.is_empty() { "." } else { name });
        let title = if colour {
            format!("\x1b[1;4m{title}\x1b[0m")
        } else {
            title
        };
        let _ = writeln!(out, "{title}\n");
    }
    for ((title, headers), edges) in TITLES.iter().zip(HEADERS).zip(&plan.sections) {
        let rows = edges.iter().map(|e| {
            let paint = |i: usize| (i == 2).then_some(if e.good { "32" } else { "31" });
            let cells = e.cells.iter().enumerate();
            cells.map(|(i, c)| (c.clone(), paint(i))).collect()
        });
        table(&mut out, title, headers, rows.collect(), colour);
    }
    let findings = plan.rows.iter().map(|r| {
        let severity = (LEVELS[r.level].to_owned(), Some(PAINT[r.level]));
        let (code, object) = ((r.code.to_owned(), None), (r.object.clone(), None));
        let file = match (&r.file, r.line) {
            (Some(file), Some(line)) => format!("{file}:{line}"),
            (Some(file), None) => file.clone(),
            _ => "-".to_owned(),
        };
        let file = (file, None);
        vec![severity, code, object, file, (r.message.clone(), None)]
    });
    let headers = ["SEVERITY", "CODE", "OBJECT", "FILE", "MESSAGE"];
    table(&mut out, "Findings", &headers, findings.collect(), colour);
    let _ = writeln!(out, "{}\n", summary_line(plan));
    out
}

/// `clusters/staging: 12 objects (3 generated by ResourceSets or ExternalSecrets): 0 errors, 1 warnings, 2 info;
/// by code: …`.
fn summary_line(plan: &Plan) -> String {
    let count = |l: usize| plan.rows.iter().filter(|r| r.level == l).count();
    let (total, generated) = (plan.documents + plan.generated, plan.generated);
    let (errors, warnings, info) = (count(2), count(1), count(0));
    let mut codes: BTreeMap<&str, usize> = BTreeMap::new();
    for r in plan.rows.iter().filter(|r| r.level > 0) {
        *codes.entry(r.code).or_default() += 1;
    }
    let codes: Vec<String> = codes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let prefix = plan.name.as_deref().map(|n| {
        if n.is_empty() {
            ".: ".to_owned()
        } else {
            format!("{n}: ")
        }
    });
    let mut line = format!(
        "{}{total} objects ({generated} generated by ResourceSets or ExternalSecrets): {errors} errors, {warnings} warnings, {info} info",
        prefix.unwrap_or_default()
    );
    if !codes.is_empty() {
        let _ = write!(line, " ({})", codes.join(", "));
    }
    line
}

fn to_json(plans: &[Plan], fail_on: &str, failed: bool) -> Value {
    let documents: usize = plans.iter().map(|p| p.documents).sum();
    let generated: usize = plans.iter().map(|p| p.generated).sum();
    let mut document = json!({
        "schemaVersion": 1,
        "inputs": {"documents": documents, "generated": generated},
    });
    let tag = |plan: &Plan, mut value: Value| {
        if let (Some(name), Some(map)) = (&plan.name, value.as_object_mut()) {
            map.insert("cluster".into(), json!(name));
        }
        value
    };
    for (i, key) in KEYS.iter().enumerate() {
        let edges = plans
            .iter()
            .flat_map(|p| p.sections[i].iter().map(move |e| tag(p, e.json.clone())));
        document[*key] = edges.collect();
    }
    let findings = plans.iter().flat_map(|p| {
        p.rows.iter().map(move |r| {
            tag(
                p,
                json!({"severity": LEVELS[r.level], "code": r.code, "domain": r.domain,
                          "object": r.object, "file": r.file, "line": r.line, "message": r.message}),
            )
        })
    });
    document["findings"] = findings.collect();
    let clusters = plans.iter().filter(|p| p.name.is_some()).map(|p| {
        let mut s = counts(p.rows.iter());
        s["documents"] = json!(p.documents);
        s["generated"] = json!(p.generated);
        json!({"name": p.name, "summary": s, "kustomizations": p.kustomizations})
    });
    document["clusters"] = clusters.collect();
    let mut total = counts(plans.iter().flat_map(|p| p.rows.iter()));
    total["failOn"] = json!(fail_on);
    total["failed"] = json!(failed);
    document["summary"] = total;
    document
}

/// `{"errors": n, "warnings": n, "info": n}` of some rows.
fn counts<'r>(rows: impl Iterator<Item = &'r Row>) -> Value {
    let mut n = [0usize; 3];
    rows.for_each(|r| n[r.level.min(2)] += 1);
    json!({"errors": n[2], "warnings": n[1], "info": n[0]})
}

fn dot(plans: &[Plan]) -> String {
    let quote = |s: &str| Value::String(s.to_owned()).to_string();
    let mut out = String::from("digraph conflux {\n  rankdir=LR;\n");
    out.push_str("  node [fontname=\"Helvetica\", fontsize=10];\n");
    let several = plans.len() > 1;
    for (index, plan) in plans.iter().enumerate() {
        // Node names are per cluster: two clusters' objects never merge.
        let id = |node: &str| match (&plan.name, several) {
            (Some(name), true) => format!("{name}: {node}"),
            _ => node.to_owned(),
        };
        let mut nodes = BTreeMap::new();
        let mut edges = String::new();
        for (colour, section) in COLOURS.iter().zip(&plan.sections) {
            for e in section {
                let [from, to, state, ..] = e.cells.as_slice() else {
                    continue;
                };
                for node in [from, to] {
                    let shape = match node.split('/').next().unwrap_or_default() {
                        "ConfigMap" | "Secret" => "note",
                        "Deployment" | "StatefulSet" | "DaemonSet" | "CronJob" => "component",
                        _ => "box",
                    };
                    nodes.insert(node.clone(), shape);
                }
                let (colour, style) = [("red", "dashed"), (*colour, "solid")][usize::from(e.good)];
                let attrs = format!("label={}, color={colour}, style={style}", quote(state));
                let (from, to) = (quote(&id(from)), quote(&id(to)));
                let _ = writeln!(edges, "  {from} -> {to} [{attrs}];");
            }
        }
        if several {
            let label = plan.name.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "  subgraph cluster_{index} {{\n  label={};",
                quote(label)
            );
        }
        for (node, shape) in nodes {
            let error = plan.rows.iter().any(|r| r.level == 2 && r.object == node);
            let colour = if error { ", color=red" } else { "" };
            let label = if several {
                format!(", label={}", quote(&node))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {} [shape={shape}{colour}{label}];",
                quote(&id(&node))
            );
        }
        out.push_str(&edges);
        if several {
            out.push_str("  }\n");
        }
    }
    out + "}\n"
}
