//! `conflux plan PATH… | -`: offline, on directories of manifests (a Flux fleet repository) or a
//! cluster dump (`kubectl get -A -o yaml`), what conflux would copy, which Flux objects reconcile
//! when a ConfigMap/Secret changes, which workloads roll, and what Flux's substitution breaks.
//!
//! This file only reads the flags and writes the output: which clusters are planned, and every
//! finding, come from `conflux_fleet::request` and `conflux_fleet::plan` (over the audits of the
//! library crates); the formats (text, JSON per docs/plan-json.md, graphviz) from
//! `conflux_fleet::render`. Exit status: 0 clean, 1 findings at or above `--fail-on` (unreadable
//! input included), 2 usage.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use conflux_fleet::plan::{LEVELS, Options};
use conflux_fleet::render;
use conflux_fleet::request::Request;
use conflux_fleet::review::BaseTree;
use conflux_watch_index::selector::Selector;

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
    /// With `--base`: the review as Markdown, for a pull request comment.
    Markdown,
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
    #[arg(long, default_value = conflux_watch_index::trigger::DEFAULT_WATCH_CONFIGS_SELECTOR)]
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
    /// The kustomize binary for the builds the built-in subset cannot make exactly (`builtin`:
    /// the subset alone). Default: `kustomize` on PATH, else the built-in subset.
    #[arg(long, value_name = "PATH")]
    pub kustomize: Option<PathBuf>,
    /// Manifests of objects that exist in the cluster but not in the repository (made by
    /// Terraform, External Secrets, an operator). Repeatable. Secret values may be left out.
    #[arg(long, value_name = "FILE")]
    pub external: Vec<PathBuf>,
    /// Substitution values from outside Git, for building and auditing:
    /// `[KIND/[NAMESPACE/]]NAME=FILE` makes a dotenv FILE the ConfigMap (default) or Secret NAME
    /// in NAMESPACE (default flux-system) that `postBuild.substituteFrom` names; a plain FILE
    /// holds ConfigMap/Secret manifests. Repeatable. Values are never printed.
    #[arg(long, value_name = "SOURCE=FILE")]
    pub substitute_from: Vec<String>,
    /// Review a change: plan PATH (one directory in a Git working tree) as it is and as it was
    /// at this revision (`main`, `origin/main`, a commit), and report only what changed:
    /// findings that appear or disappear, copies and edges added or removed. The exit status
    /// follows the new findings only.
    #[arg(long, value_name = "REV")]
    pub base: Option<String>,
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
    let request = Request {
        paths: args.paths.clone(),
        clusters: args.cluster.clone(),
        kustomize: args.kustomize.clone(),
        external: args.external.clone(),
        substitute_from: args.substitute_from.clone(),
        options: Options {
            sync_source_namespaces: args.sync_source_namespaces.clone(),
            copy_resourceset_targets: args.copy_resourceset_targets,
            auto_reload_all: args.auto_reload_all,
            watch_selector: selector,
        },
    };
    let plans = match request.plans() {
        Ok(plans) => plans,
        Err(err) => {
            eprintln!("conflux plan: {err}");
            return Ok(ExitCode::from(2));
        }
    };
    let threshold = args.fail_on as usize;
    if let Some(base) = &args.base {
        return review(args, &request, base, &plans, threshold);
    }
    if args.output == Format::Markdown {
        eprintln!("conflux plan: --output markdown is the review of --base");
        return Ok(ExitCode::from(2));
    }
    let rows = || plans.iter().flat_map(|p| &p.rows);
    let failed = rows().any(|r| r.level >= threshold);
    let out = match args.output {
        Format::Text => {
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            render::text(&plans, colour)
        }
        Format::Json => {
            let document = render::json(&plans, LEVELS[threshold], failed);
            serde_json::to_string_pretty(&document)? + "\n"
        }
        Format::Dot => render::dot(&plans),
        // Refused above: Markdown is the review's.
        Format::Markdown => String::new(),
    };
    emit(&out)?;
    for row in rows().filter(|r| r.domain == "input") {
        eprintln!("conflux plan: {}: {}", row.object, row.message);
    }
    Ok(ExitCode::from(u8::from(failed)))
}

/// `--base REV`: plans PATH as it was at REV too, and writes what changed.
fn review(
    args: &PlanArgs,
    request: &Request,
    base: &str,
    plans: &[conflux_fleet::plan::Plan],
    threshold: usize,
) -> anyhow::Result<ExitCode> {
    let [path] = request.paths.as_slice() else {
        eprintln!("conflux plan: --base needs exactly one PATH, a directory in a Git working tree");
        return Ok(ExitCode::from(2));
    };
    let tree = match BaseTree::extract(path, base) {
        Ok(tree) => tree,
        Err(err) => {
            eprintln!("conflux plan: {err}");
            return Ok(ExitCode::from(2));
        }
    };
    let before = Request {
        paths: vec![tree.path().to_path_buf()],
        ..request.clone()
    };
    let base_plans = match before.plans() {
        Ok(plans) => plans,
        Err(err) => {
            eprintln!("conflux plan: at {base}: {err}");
            return Ok(ExitCode::from(2));
        }
    };
    let review = conflux_fleet::review::review(base, &base_plans, plans);
    let out = match args.output {
        Format::Text => review.text(),
        Format::Json => serde_json::to_string_pretty(&review.json(threshold))? + "\n",
        Format::Markdown => review.markdown(),
        Format::Dot => {
            eprintln!("conflux plan: --output dot has no review form; use text, json or markdown");
            return Ok(ExitCode::from(2));
        }
    };
    emit(&out)?;
    Ok(ExitCode::from(u8::from(review.fails(threshold))))
}
