//! `conflux build`: Flux's post-build substitution (`conflux_postbuild_subst::stream`) on a
//! multi-document stream of already built manifests, for example `kustomize build` output. This
//! file reads the flags and the files; the library picks the Kustomization, gathers the
//! variables and substitutes.
//!
//! Variables, lowest precedence first: the objects named by the Kustomization's
//! `spec.postBuild.substituteFrom` (looked up among the `--substitute-from` files) or, without
//! `--kustomization`, every ConfigMap/Secret of the `--substitute-from` files in order; then the
//! Kustomization's `spec.postBuild.substitute`; then `--substitute NAME=VALUE` flags.
//!
//! Reading the input: manifests are parsed with `serde-saphyr` (YAML 1.2, multi-document), not
//! with the crate's go-yaml v2 parser. That parser reproduces `YAMLToJSON`, which reads one
//! document with YAML 1.1 resolution (`yes` → `true`); kustomize-controller gets its resources
//! from kustomize (kyaml, go-yaml v3, YAML 1.2-like), so `yes` in a built manifest is still the
//! string `"yes"` when substitution starts. serde-saphyr (with YAML 1.2 booleans only) matches
//! that and splits documents.
//! Input is read as kustomize holds a resource (`conflux_fleet::kustomize::parse_resources`:
//! plain timestamps as Go's JSON, annotations as text, `List`s as items).
//! Output documents are separated by `---` and written with the go-yaml v2 emitter
//! (`JSONToYAML`), as kustomize-controller would see them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use conflux_postbuild_subst::resource::SubstitutionOptions;
use conflux_postbuild_subst::stream;
use conflux_postbuild_subst::vars::Variables;
use serde_json::Value;

/// Flags of `conflux build`.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// Multi-document YAML stream of built manifests; stdin when absent or `-`.
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// A variable, `NAME=VALUE` (repeatable; wins over every other source).
    #[arg(long = "substitute", value_name = "NAME=VALUE")]
    pub substitute: Vec<String>,
    /// A file of ConfigMap/Secret manifests providing variables (repeatable).
    #[arg(long = "substitute-from", value_name = "FILE")]
    pub substitute_from: Vec<PathBuf>,
    /// A Flux Kustomization manifest: its `spec.postBuild` decides the variables and strategy.
    #[arg(long, value_name = "FILE")]
    pub kustomization: Option<PathBuf>,
    /// Which Flux Kustomization of the `--kustomization` file (`NAME` or `NAMESPACE/NAME`);
    /// required when the file holds several.
    #[arg(long, value_name = "NAME", requires = "kustomization")]
    pub name: Option<String>,
    /// Strict mode: a variable used without default and not defined is an error.
    #[arg(long)]
    pub strict: bool,
    /// `substituteStrategy: Always`: substitute even when no variable is defined.
    #[arg(long)]
    pub always: bool,
    /// Opt-in typed mode: substitute inside string values only (types kept, no YAML injection).
    #[arg(long)]
    pub typed: bool,
    /// Warn on stderr about variables used but not defined (they become empty strings).
    #[arg(long)]
    pub lint: bool,
}

/// A file of manifests, read as kustomize reads one (`List`s expanded, non-objects dropped).
fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    conflux_fleet::kustomize::read_documents(path)
        .with_context(|| format!("parsing {}", path.display()))
}

fn read_input(input: Option<&Path>) -> anyhow::Result<Vec<Value>> {
    let (text, name) = match input {
        Some(path) if path != Path::new("-") => (
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        ),
        _ => (
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
            "stdin".to_owned(),
        ),
    };
    let resources = conflux_fleet::kustomize::parse_resources(&text)
        .with_context(|| format!("parsing {name}"))?;
    Ok(resources.objects)
}

/// The variables and strategy from the flags; `--substitute` wins over every other source.
fn variables(args: &BuildArgs) -> anyhow::Result<(Variables, bool)> {
    let mut sources = Vec::new();
    for path in &args.substitute_from {
        sources.extend(read_documents(path)?);
    }
    let kustomization = match &args.kustomization {
        Some(path) => Some(
            stream::pick_kustomization(read_documents(path)?, args.name.as_deref())
                .with_context(|| format!("--kustomization {}", path.display()))?,
        ),
        None => None,
    };
    let (mut vars, always) = stream::variables(kustomization.as_ref(), &sources)?;
    for pair in &args.substitute {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("invalid --substitute '{pair}': expected NAME=VALUE");
        };
        vars.insert(name, value);
    }
    Ok((vars, always || args.always))
}

/// Runs the subcommand: output on stdout; exit 1 with the controller's message on a failure.
pub fn run(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let (vars, always) = variables(args)?;
    let options = SubstitutionOptions {
        strict: args.strict,
        always,
        typed: args.typed,
    };
    let documents = read_input(args.input.as_deref())?;
    let mut output = String::new();
    for (index, document) in documents.iter().enumerate() {
        if args.lint {
            for warning in stream::undefined_warnings(document, &vars, &options) {
                eprintln!("warning: {warning}");
            }
        }
        match stream::substitute_document(document, &vars, &options) {
            Ok(yaml) => {
                if index > 0 {
                    output.push_str("---\n");
                }
                output.push_str(&yaml);
            }
            Err(err) => {
                eprintln!("{err}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    print!("{output}");
    Ok(ExitCode::SUCCESS)
}
