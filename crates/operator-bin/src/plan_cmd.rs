//! `conflux plan PATH… | -`: offline, on directories of manifests (a Flux fleet repository) or a
//! cluster dump (`kubectl get -A -o yaml`), what conflux would copy, which Flux objects reconcile
//! when a ConfigMap/Secret changes, which workloads roll, and what Flux's substitution breaks.
//!
//! This file only reads the input and renders; the answers come from the audits of the library
//! crates (`copy_core::audit`, `watch_index::audit`, `reloader::audit`, `postbuild_subst::audit`,
//! `postbuild_subst::resource_set`). Output: text, JSON (docs/plan-json.md) or graphviz. Exit
//! status: 0 clean, 1 findings at or above `--fail-on` (unreadable input included), 2 usage.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use copy_core::audit::{AuditOptions, Verdict};
use postbuild_subst::audit::Document;
use reloader::consumers::Keys;
use serde_json::{Value, json};
use watch_index::audit::{config_name, referrer_name};
use watch_index::refs::ReferenceSet;
use watch_index::selector::Selector;

/// Output formats of `conflux plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables (coloured on a terminal unless NO_COLOR is set).
    Text,
    /// The JSON document of docs/plan-json.md.
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
    /// Namespaces whose ConfigMaps/Secrets may fan out with the kopy annotations.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub sync_source_namespaces: Vec<String>,
    /// Reloader's `--auto-reload-all`: workloads without annotations roll on consumed configs.
    #[arg(long)]
    pub auto_reload_all: bool,
}

const LEVELS: [&str; 3] = ["info", "warning", "error"];
const PAINT: [&str; 3] = ["34", "33", "31"];

/// One finding of any audit: level 0 info, 1 warning, 2 error.
struct Row {
    level: usize,
    domain: &'static str,
    code: &'static str,
    object: String,
    message: String,
}

type Str = &'static str;

fn row(level: usize, domain: Str, code: Str, object: String, message: String) -> Row {
    Row {
        level,
        domain,
        code,
        object,
        message,
    }
}

/// Maps a library finding (the crates share the field names) to a [`Row`].
macro_rules! row {
    ($domain:expr, $f:expr) => {{
        let f = $f;
        let level = LEVELS.iter().position(|l| *l == f.severity.as_str());
        row(level.unwrap_or(2), $domain, f.code, f.object, f.message)
    }};
}

fn view((object, file): &(Value, Option<String>)) -> Document<'_> {
    let file = file.as_deref();
    Document { object, file }
}

/// The parsed input: documents with their file (relative to the directory given), and problems.
#[derive(Default)]
struct Input {
    documents: Vec<(Value, Option<String>)>,
    generated: usize,
    rows: Vec<Row>,
}

impl Input {
    fn problem(&mut self, object: String, message: String) {
        self.rows
            .push(row(2, "input", "InvalidInput", object, message));
    }

    fn read(&mut self, path: &Path) {
        if path == Path::new("-") {
            match std::io::read_to_string(std::io::stdin()) {
                Ok(text) => self.parse(&text, "<stdin>", None),
                Err(err) => self.problem("<stdin>".into(), format!("reading stdin: {err}")),
            }
            return;
        }
        if !path.is_dir() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            return self.read_file(path, name);
        }
        let (mut files, mut dirs) = (Vec::new(), vec![path.to_path_buf()]);
        while let Some(dir) = dirs.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(err) => {
                    self.problem(dir.display().to_string(), format!("reading: {err}"));
                    continue;
                }
            };
            for entry in entries.flatten() {
                let (file, name) = (entry.path(), entry.file_name());
                let name = name.to_string_lossy();
                if file.is_dir() && !name.starts_with('.') {
                    dirs.push(file);
                } else if name.ends_with(".yaml") || name.ends_with(".yml") {
                    files.push(file);
                }
            }
        }
        files.sort();
        for file in files {
            let relative = file.strip_prefix(path).unwrap_or(&file).to_string_lossy();
            let relative = relative.replace('\\', "/");
            self.read_file(&file, Some(relative));
        }
    }

    fn read_file(&mut self, path: &Path, relative: Option<String>) {
        match std::fs::read_to_string(path) {
            Ok(text) => self.parse(&text, &path.display().to_string(), relative),
            Err(err) => self.problem(path.display().to_string(), format!("reading: {err}")),
        }
    }

    fn parse(&mut self, text: &str, origin: &str, file: Option<String>) {
        // YAML 1.2 booleans, as kustomize reads manifests (see build_cmd.rs).
        let options = serde_saphyr::options! { strict_booleans: true, legacy_octal_numbers: true };
        match serde_saphyr::from_multiple_with_options::<Value>(text, options) {
            Ok(documents) => documents.into_iter().for_each(|d| self.push(d, &file)),
            Err(err) => {
                let err = err.to_string();
                let first = err.lines().next().unwrap_or_default();
                self.problem(origin.to_owned(), format!("invalid YAML: {first}"));
            }
        }
    }

    /// Adds a document: the items of a `kind: List` (or `…List`) one by one, objects only.
    fn push(&mut self, document: Value, file: &Option<String>) {
        let kind = document.get("kind").and_then(Value::as_str);
        match document.get("items") {
            Some(Value::Array(items)) if kind.is_some_and(|k| k.ends_with("List")) => {
                for item in items.clone() {
                    self.push(item, file);
                }
            }
            _ if document.is_object() => self.documents.push((document, file.clone())),
            _ => {}
        }
    }

    /// Appends what ResourceSets generate (no file: no Kustomization applies them), then sets the
    /// namespaces Flux Kustomizations' `targetNamespace` gives the manifests they apply.
    fn complete(&mut self) {
        let mut generated = Vec::new();
        for (document, _) in &self.documents {
            if postbuild_subst::resource_set::is_resource_set(document) {
                let expansion = postbuild_subst::resource_set::expand(document);
                generated.extend(expansion.objects);
                let findings = expansion.findings.into_iter();
                self.rows.extend(findings.map(|f| row!("resourceset", f)));
            }
        }
        self.generated = generated.len();
        self.documents
            .extend(generated.into_iter().map(|d| (d, None)));
        let documents: Vec<Document<'_>> = self.documents.iter().map(view).collect();
        for (index, namespace) in postbuild_subst::audit::target_namespaces(&documents) {
            let document = self.documents.get_mut(index).map(|(d, _)| d);
            if let Some(Value::Object(metadata)) = document.and_then(|d| d.get_mut("metadata")) {
                metadata.insert("namespace".into(), Value::String(namespace));
            }
        }
    }
}

/// One edge of any section, as every format renders it: the text cells (from, to, state, then
/// the rest), whether the state is good (green) or not, and its JSON.
struct Edge {
    cells: Vec<String>,
    good: bool,
    json: Value,
}

/// The three sections: text titles and headers, JSON keys, DOT colours.
const TITLES: [&str; 3] = ["Copies", "Watch edges", "Reload edges"];
const HEADERS: [&[&str]; 3] = [
    &["SOURCE", "COPY", "VERDICT", "VIA", "WHY"],
    &["SOURCE", "RECONCILES", "WHEN", "INTERVAL", "REFERENCE"],
    &["CONFIG", "ROLLS", "WHY"],
];
const KEYS: [&str; 3] = ["copies", "watchEdges", "reloadEdges"];
const COLOURS: [&str; 3] = ["darkgreen", "blue", "purple"];

struct Plan {
    sections: [Vec<Edge>; 3],
    rows: Vec<Row>,
    documents: usize,
    generated: usize,
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
    let mut input = Input::default();
    args.paths.iter().for_each(|path| input.read(path));
    input.complete();
    let plan = audit(input, args, &selector);
    let threshold = args.fail_on as usize;
    let failed = plan.rows.iter().any(|r| r.level >= threshold);
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let fail_on = LEVELS[threshold];
    let out = match args.output {
        Format::Text => text(&plan, colour),
        Format::Json => serde_json::to_string_pretty(&to_json(&plan, fail_on, failed))? + "\n",
        Format::Dot => dot(&plan),
    };
    print!("{out}");
    for row in plan.rows.iter().filter(|r| r.domain == "input") {
        eprintln!("conflux plan: {}: {}", row.object, row.message);
    }
    Ok(ExitCode::from(u8::from(failed)))
}

fn audit(input: Input, args: &PlanArgs, selector: &Selector) -> Plan {
    let trusted = args.sync_source_namespaces.iter().filter(|s| !s.is_empty());
    let sync_source_namespaces = trusted.cloned().collect();
    let options = AuditOptions {
        sync_source_namespaces,
    };
    let mut world: Vec<Value> = input.documents.iter().map(|(d, _)| d.clone()).collect();
    let copies = copy_core::audit::audit(&world, &options);
    world.extend(copies.written.iter().cloned());
    let watch = watch_index::audit::audit(&world, &ReferenceSet::flux(), selector);
    let auto_reload_all = args.auto_reload_all;
    let reload = reloader::audit::audit(&world, reloader::opt_in::Options { auto_reload_all });
    let mut documents: Vec<Document<'_>> = input.documents.iter().map(view).collect();
    let written = copies.written.iter();
    documents.extend(written.map(|object| Document { object, file: None }));
    let substitution = postbuild_subst::audit::audit(&documents);

    let mut rows = Vec::new();
    rows.extend(copies.findings.into_iter().map(|f| row!("copy", f)));
    rows.extend(watch.findings.into_iter().map(|f| row!("watch", f)));
    rows.extend(reload.findings.into_iter().map(|f| row!("reload", f)));
    rows.extend(substitution.into_iter().map(|f| row!("substitution", f)));
    let (generated, mut rows) = (input.generated, rows);
    rows.splice(0..0, input.rows);
    rows.sort_by(|a, b| (b.level, &a.object, a.code).cmp(&(a.level, &b.object, b.code)));

    let copy_edges = copies.copies.into_iter().map(|c| {
        let (from, to) = (c.source.to_string(), c.target.to_string());
        let (via, state, detail) = (c.via.to_string(), c.verdict.as_str(), c.verdict.detail());
        let json = json!({"source": from, "target": to, "via": via, "verdict": state,
                          "detail": detail});
        let good = matches!(c.verdict, Verdict::Allowed(_));
        let cells = vec![from, to, state.to_owned(), via, detail];
        Edge { cells, good, json }
    });
    let watch_edges = watch.edges.into_iter().map(|e| {
        let (from, to) = (config_name(&e.source), referrer_name(&e.referrer));
        let json = json!({
            "source": from, "referrer": to, "referrerApiGroup": &*e.referrer.group,
            "path": &*e.path, "optional": e.optional, "sourceFound": e.source_found,
            "watched": e.watched, "when": e.when(), "interval": e.interval,
        });
        let interval = e.interval.clone().unwrap_or_else(|| "-".into());
        let cells = vec![from, to, e.when().into(), interval, e.path.to_string()];
        let good = e.watched;
        Edge { cells, good, json }
    });
    let reload_edges = reload.edges.into_iter().map(|e| {
        let (from, to) = (config_name(&e.config), referrer_name(&e.workload));
        let keys = match &e.keys {
            Keys::Only(keys) => Some(keys.iter().cloned().collect::<Vec<_>>()),
            _ => None,
        };
        let json = json!({
            "config": from, "workload": to, "annotation": e.annotation(), "why": e.why(),
            "keys": keys, "optional": e.optional, "configFound": e.config_found,
        });
        let (cells, good) = (vec![from, to, e.why()], true);
        Edge { cells, good, json }
    });
    let (copies, watches) = (copy_edges.collect(), watch_edges.collect());
    let sections = [copies, watches, reload_edges.collect()];
    let documents = input.documents.len() - generated;
    Plan {
        sections,
        rows,
        documents,
        generated,
    }
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
        vec![severity, code, object, (r.message.clone(), None)]
    });
    let headers = ["SEVERITY", "CODE", "OBJECT", "MESSAGE"];
    table(&mut out, "Findings", &headers, findings.collect(), colour);
    let count = |l: usize| plan.rows.iter().filter(|r| r.level == l).count();
    let (total, generated) = (plan.documents + plan.generated, plan.generated);
    let (errors, warnings, info) = (count(2), count(1), count(0));
    let _ = writeln!(
        out,
        "{total} objects ({generated} generated by ResourceSets): {errors} errors, {warnings} warnings, {info} info"
    );
    out
}

fn to_json(plan: &Plan, fail_on: &str, failed: bool) -> Value {
    let mut document = json!({
        "schemaVersion": 1,
        "inputs": {"documents": plan.documents, "generated": plan.generated},
    });
    for (key, edges) in KEYS.iter().zip(&plan.sections) {
        document[*key] = edges.iter().map(|e| e.json.clone()).collect();
    }
    let findings = plan.rows.iter().map(|r| {
        json!({"severity": LEVELS[r.level], "code": r.code, "domain": r.domain,
               "object": r.object, "message": r.message})
    });
    document["findings"] = findings.collect();
    let count = |l: usize| plan.rows.iter().filter(|r| r.level == l).count();
    document["summary"] = json!({"errors": count(2), "warnings": count(1), "info": count(0),
                                  "failOn": fail_on, "failed": failed});
    document
}

fn dot(plan: &Plan) -> String {
    let quote = |s: &str| Value::String(s.to_owned()).to_string();
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
            let _ = writeln!(edges, "  {} -> {} [{attrs}];", quote(from), quote(to));
        }
    }
    let mut out = String::from("digraph conflux {\n  rankdir=LR;\n");
    out.push_str("  node [fontname=\"Helvetica\", fontsize=10];\n");
    for (node, shape) in nodes {
        let error = plan.rows.iter().any(|r| r.level == 2 && r.object == node);
        let colour = if error { ", color=red" } else { "" };
        let _ = writeln!(out, "  {} [shape={shape}{colour}];", quote(&node));
    }
    out + &edges + "}\n"
}
