//! `conflux plan PATH… | -`: offline, on directories of manifests (a Flux fleet repository) or a
//! cluster dump (`kubectl get -A -o yaml`), what conflux would copy, which Flux objects reconcile
//! when a ConfigMap/Secret changes, which workloads roll, and what Flux's substitution breaks.
//!
//! A fleet repository (one directory with cluster entry points: a `flux-system` sync or a
//! FluxInstance) is read as Flux builds it, one cluster at a time (`conflux_fleet::fleet`); anything
//! else is read as a flat set of manifests.
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

use conflux_fleet::fleet;
use conflux_fleet::kustomize::{Engine, normalize};

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

const LEVELS: [&str; 3] = ["info", "warning", "error"];
const PAINT: [&str; 3] = ["34", "33", "31"];
/// Findings' messages and objects are cut to this many characters.
const MAX_MESSAGE: usize = 300;

/// One finding of any audit: level 0 info, 1 warning, 2 error.
struct Row {
    level: usize,
    domain: &'static str,
    code: &'static str,
    object: String,
    file: Option<String>,
    /// The line of the object's `kind:` in `file`, when it is found there.
    line: Option<usize>,
    message: String,
}

type Str = &'static str;

fn row(level: usize, domain: Str, code: Str, object: String, message: String) -> Row {
    Row {
        level,
        domain,
        code,
        object,
        file: None,
        line: None,
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
        let mut problems = Vec::new();
        for object in fleet::read_tree(path, &mut problems) {
            self.push(object.object, &object.file);
        }
        for p in problems {
            self.problem(p.object, p.message);
        }
    }

    fn read_file(&mut self, path: &Path, relative: Option<String>) {
        match std::fs::read_to_string(path) {
            Ok(text) => self.parse(&text, &path.display().to_string(), relative),
            Err(err) => self.problem(path.display().to_string(), format!("reading: {err}")),
        }
    }

    fn parse(&mut self, text: &str, origin: &str, file: Option<String>) {
        // As kustomize reads manifests: YAML 1.2 booleans, legacy octal (see kustomize.rs).
        match conflux_fleet::kustomize::parse_documents(text) {
            Ok(documents) => documents.into_iter().for_each(|d| self.push(d, &file)),
            Err(err) => self.problem(origin.to_owned(), err.to_string()),
        }
    }

    /// Adds an object; a SOPS-encrypted Secret keeps its keys, never its values.
    fn push(&mut self, document: Value, file: &Option<String>) {
        let document = if fleet::is_sops(&document) {
            fleet::sops_placeholder(&document)
        } else {
            document
        };
        self.documents.push((document, file.clone()));
    }

    /// Appends what ResourceSets generate (no file: no Kustomization applies them); in the flat
    /// mode, then sets the namespaces Flux Kustomizations' `targetNamespace` gives the manifests
    /// they apply.
    fn complete(&mut self, flat: bool) {
        let mut generated = Vec::new();
        for (document, file) in &self.documents {
            if postbuild_subst::resource_set::is_resource_set(document) {
                let expansion = postbuild_subst::resource_set::expand(document);
                // In a fleet, a generated object's file is its ResourceSet's (for findings); in
                // the flat mode no file, so no Kustomization path takes it as a resource.
                let file = file.as_ref().filter(|_| !flat);
                generated.extend(expansion.objects.into_iter().map(|d| (d, file.cloned())));
                let findings = expansion.findings.into_iter();
                self.rows.extend(findings.map(|f| row!("resourceset", f)));
            }
        }
        for (document, file) in &self.documents {
            if let Some(secret) = external_secret_target(document) {
                generated.push((secret, file.as_ref().filter(|_| !flat).cloned()));
            }
        }
        self.generated = generated.len();
        self.documents.extend(generated);
        if !flat {
            return;
        }
        let documents: Vec<Document<'_>> = self.documents.iter().map(view).collect();
        for (index, namespace) in postbuild_subst::audit::target_namespaces(&documents) {
            let document = self.documents.get_mut(index).map(|(d, _)| d);
            if let Some(Value::Object(metadata)) = document.and_then(|d| d.get_mut("metadata")) {
                metadata.insert("namespace".into(), Value::String(namespace));
            }
        }
    }
}

/// The Secret an External Secrets Operator `ExternalSecret` makes (`spec.target.name`, default
/// its own name, unless `creationPolicy: None`): its keys (`spec.data[].secretKey`, the template's
/// `data`) and the template's labels and annotations; never a value (each is the text
/// `EXTERNAL`). Keys from `dataFrom` are not known offline.
fn external_secret_target(object: &Value) -> Option<Value> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    let group = text("/apiVersion")?.split('/').next()?;
    if group != "external-secrets.io" || text("/kind") != Some("ExternalSecret") {
        return None;
    }
    if text("/spec/target/creationPolicy") == Some("None") {
        return None;
    }
    let name = text("/spec/target/name").or(text("/metadata/name"))?;
    let mut data = serde_json::Map::new();
    let external = Value::String("RVhURVJOQUw=".to_owned());
    for entry in object
        .pointer("/spec/data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(key) = entry.get("secretKey").and_then(Value::as_str) {
            data.insert(key.to_owned(), external.clone());
        }
    }
    let template = object
        .pointer("/spec/target/template/data")
        .and_then(Value::as_object);
    for key in template.into_iter().flat_map(|t| t.keys()) {
        data.insert(key.clone(), external.clone());
    }
    let mut metadata = json!({"name": name, "namespace": text("/metadata/namespace")});
    for field in ["labels", "annotations"] {
        if let Some(map) = object.pointer(&format!("/spec/target/template/metadata/{field}")) {
            metadata[field] = map.clone();
        }
    }
    let secret_type = text("/spec/target/template/type").unwrap_or("Opaque");
    Some(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                "type": secret_type, "data": data}),
    )
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

/// The plan of one cluster (`name`: its directory), or of the flat input (`name` None).
struct Plan {
    name: Option<String>,
    sections: [Vec<Edge>; 3],
    rows: Vec<Row>,
    documents: usize,
    generated: usize,
    /// In a fleet: each Kustomization built, the directory and how many objects it applies.
    kustomizations: Vec<Value>,
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
                plans.push(plan_cluster(cluster, args, selector));
            }
            return Ok(plans);
        }
    }
    let mut input = Input::default();
    args.paths.iter().for_each(|path| input.read(path));
    for object in external {
        input.push(object.object, &object.file);
    }
    input.complete(true);
    let documents: Vec<Document<'_>> = input.documents.iter().map(view).collect();
    let substitution = postbuild_subst::audit::audit(&documents);
    let rows = substitution.into_iter().map(|f| row!("substitution", f));
    let mut rows: Vec<Row> = rows.collect();
    rows.extend(outside_rows);
    Ok(vec![audit(input, None, rows, &[], args, selector)])
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

/// Audits one cluster of a fleet: the objects applied to it, and each Kustomization's postBuild
/// with what it applies.
fn plan_cluster(cluster: fleet::Cluster, args: &PlanArgs, selector: &Selector) -> Plan {
    let mut input = Input::default();
    for object in &cluster.objects {
        input.push(object.object.clone(), &object.file);
    }
    input.complete(false);
    let mut rows = Vec::new();
    for problem in cluster.problems {
        let domain = if problem.code == "SourceNotFollowed" {
            "fleet"
        } else {
            "build"
        };
        rows.push(Row {
            level: problem.level,
            domain,
            code: problem.code,
            object: problem.object,
            file: problem.file,
            line: None,
            message: problem.message,
        });
    }
    let applied = cluster.applied;
    audit(input, Some(cluster.name), rows, &applied, args, selector)
}

fn audit(
    input: Input,
    name: Option<String>,
    extra: Vec<Row>,
    applied: &[fleet::Applied],
    args: &PlanArgs,
    selector: &Selector,
) -> Plan {
    let trusted = args.sync_source_namespaces.iter().filter(|s| !s.is_empty());
    let sync_source_namespaces = trusted.cloned().collect();
    let options = AuditOptions {
        sync_source_namespaces,
        resource_set_targets: args.copy_resourceset_targets,
    };
    let mut world: Vec<Value> = input.documents.iter().map(|(d, _)| d.clone()).collect();
    let copies = copy_core::audit::audit(&world, &options);
    world.extend(copies.written.iter().cloned());
    let watch = watch_index::audit::audit(&world, &ReferenceSet::flux(), selector);
    let auto_reload_all = args.auto_reload_all;
    let reload = reloader::audit::audit(
        &world,
        reloader::opt_in::Options {
            auto_reload_all,
            ..Default::default()
        },
    );

    let mut rows = Vec::new();
    rows.extend(copies.findings.into_iter().map(|f| {
        let mut r = row!("copy", f);
        if r.code == "CopySourceMissing" {
            // Not in the repository is not "not in the cluster".
            r.level = r.level.min(1);
            r.message
                .push_str(" (if it is made outside the repository, declare it with --external)");
        }
        r
    }));
    // A ConfigMap/Secret whose name carries kustomize's content hash is renamed by a change, and
    // its referrers (which name it) change with it: they reconcile without a watch label.
    let hashed: std::collections::BTreeSet<String> = applied
        .iter()
        .flat_map(|a| &a.resources)
        .filter(|o| {
            matches!(
                o.object.get("kind").and_then(Value::as_str),
                Some("ConfigMap" | "Secret")
            )
        })
        .filter(|o| {
            let name = o.object.pointer("/metadata/name").and_then(Value::as_str);
            let suffix = format!("-{}", conflux_fleet::kustomize::hash_suffix(&o.object));
            name.is_some_and(|n| n.ends_with(&suffix))
        })
        .map(|o| fleet::object_name(&o.object))
        .collect();
    rows.extend(watch.findings.into_iter().map(|f| {
        let mut r = row!("watch", f);
        if r.code == "WatchLabelMissing" && hashed.contains(&r.object) {
            r.level = 0;
            r.code = "WatchLabelNotNeeded";
            r.message = "no watch label, none needed: its name carries kustomize's content hash, so a change renames it and its referrers change with it".to_owned();
        }
        r
    }));
    rows.extend(reload.findings.into_iter().map(|f| row!("reload", f)));
    // Each Kustomization's postBuild, with what it applies and the cluster's ConfigMaps and
    // Secrets as they would be (copies filled in).
    let configs: Vec<&Value> = world
        .iter()
        .filter(|d| {
            matches!(
                d.get("kind").and_then(Value::as_str),
                Some("ConfigMap" | "Secret")
            )
        })
        .collect();
    for applied in applied {
        let resources: Vec<Document<'_>> = applied
            .resources
            .iter()
            .map(|o| Document {
                object: &o.object,
                file: o.file.as_deref(),
            })
            .collect();
        let ks = &applied.kustomization;
        let findings = postbuild_subst::audit::audit_kustomization(ks, &resources, &configs);
        rows.extend(findings.into_iter().map(|f| row!("substitution", f)));
    }
    rows.extend(extra);
    rows.extend(helm_values_reloads(&input.documents));
    let (generated, mut rows) = (input.generated, rows);
    rows.splice(0..0, input.rows);
    let documents = input.documents.len() - generated;
    if documents == 0 {
        rows.push(row(
            1,
            "input",
            "NothingToPlan",
            name.clone().unwrap_or_else(|| "input".to_owned()),
            "no Kubernetes object found to plan".to_owned(),
        ));
    }
    // Each finding names a file: its own, else that of the object it is about.
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for (object, file) in &input.documents {
        if let Some(file) = file {
            files
                .entry(fleet::object_name(object))
                .or_insert_with(|| file.clone());
        }
    }
    for r in &mut rows {
        if r.file.is_none() {
            r.file = files.get(&r.object).cloned();
        }
        r.message = conflux_fleet::kustomize::shorten(&r.message, MAX_MESSAGE);
        r.object = conflux_fleet::kustomize::shorten(&r.object, MAX_MESSAGE);
    }
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
    let kustomizations = applied
        .iter()
        .map(|a| {
            json!({"name": fleet::object_name(&a.kustomization), "path": a.path,
                   "objects": a.resources.len()})
        })
        .collect();
    Plan {
        name,
        sections,
        rows,
        documents,
        generated,
        kustomizations,
    }
}

/// Reload annotations inside HelmRelease values (the app-template pattern) are rendered by the
/// chart: their edges are not evaluated offline, and this says so.
fn helm_values_reloads(documents: &[(Value, Option<String>)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (object, file) in documents {
        let is_release = object.get("kind").and_then(Value::as_str) == Some("HelmRelease");
        let Some(values) = object.pointer("/spec/values").filter(|_| is_release) else {
            continue;
        };
        let text = values.to_string();
        if text.contains("reloader.stakater.com/") || text.contains("wave.pusher.com/") {
            let mut r = row(
                0,
                "reload",
                "ReloadNotEvaluated",
                fleet::object_name(object),
                "reload annotations in spec.values: not evaluated (needs the chart); the workloads the chart renders roll as those annotations say".to_owned(),
            );
            r.file = file.clone();
            rows.push(r);
        }
    }
    rows
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
