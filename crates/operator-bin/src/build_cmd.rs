//! `conflux build`: Flux's post-build substitution (the resource layer of `postbuild-subst`) on
//! a multi-document stream of already built manifests, for example `kustomize build` output.
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
//! Output documents are separated by `---` and written with the go-yaml v2 emitter
//! (`JSONToYAML`), as kustomize-controller would see them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use postbuild_subst::resource::{
    self, ResourceOutcome, SubstitutionOptions, post_build_error, substitute_resource,
};
use postbuild_subst::vars::{
    PostBuild, SourceKind, SourceLookup, SubstituteReference, SubstituteStrategy, Variables,
    load_variables, source_data,
};
use postbuild_subst::yaml::emit::json_to_yaml;
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

fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_documents(&text).with_context(|| format!("parsing {}", path.display()))
}

fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    // As kustomize (go-yaml v3) reads manifests: YAML 1.2 booleans only (`yes`/`on` stay
    // strings), and a plain integer with a leading zero is octal (`0644` is 420).
    let options = serde_saphyr::options! { strict_booleans: true, legacy_octal_numbers: true };
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options)?;
    Ok(documents.into_iter().filter(|doc| !doc.is_null()).collect())
}

fn read_input(input: Option<&Path>) -> anyhow::Result<Vec<Value>> {
    match input {
        Some(path) if path != Path::new("-") => read_documents(path),
        _ => {
            let text = std::io::read_to_string(std::io::stdin()).context("reading stdin")?;
            parse_documents(&text).context("parsing stdin")
        }
    }
}

fn text_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The Flux Kustomization named `name` among `documents`, or the only one.
fn pick_kustomization(documents: Vec<Value>, name: Option<&str>) -> anyhow::Result<Value> {
    let is_flux = |d: &Value| {
        text_at(d, "/kind") == "Kustomization"
            && text_at(d, "/apiVersion").starts_with("kustomize.toolkit.fluxcd.io/")
    };
    let id = |d: &Value| {
        format!(
            "{}/{}",
            text_at(d, "/metadata/namespace"),
            text_at(d, "/metadata/name")
        )
    };
    let mut found: Vec<Value> = documents.into_iter().filter(is_flux).collect();
    if let Some(name) = name {
        found.retain(|d| text_at(d, "/metadata/name") == name || id(d) == name);
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!(
            "holds no Flux Kustomization{}",
            name.map(|n| format!(" named '{n}'")).unwrap_or_default()
        ),
        _ => {
            let names: Vec<String> = found.iter().map(id).collect();
            bail!(
                "holds several Flux Kustomizations ({}): choose one with --name",
                names.join(", ")
            )
        }
    }
}

/// The variables and strategy from the flags.
fn variables(args: &BuildArgs) -> anyhow::Result<(Variables, bool)> {
    let mut sources = Vec::new();
    for path in &args.substitute_from {
        sources.extend(read_documents(path)?);
    }
    let (mut vars, always) = match &args.kustomization {
        Some(path) => {
            let kustomization = pick_kustomization(read_documents(path)?, args.name.as_deref())
                .with_context(|| format!("--kustomization {}", path.display()))?;
            let namespace = text_at(&kustomization, "/metadata/namespace");
            let post_build = PostBuild::from_kustomization(&kustomization)?;
            let vars = load_variables(&post_build, |reference: &SubstituteReference| {
                let found = sources.iter().find(|object| {
                    text_at(object, "/kind") == reference.kind.as_str()
                        && text_at(object, "/metadata/name") == reference.name
                        && [namespace, ""].contains(&text_at(object, "/metadata/namespace"))
                });
                match found {
                    Some(object) => SourceLookup::Found(object.clone()),
                    None => SourceLookup::NotFound,
                }
            })?;
            (
                vars,
                post_build.substitute_strategy == SubstituteStrategy::Always,
            )
        }
        None => {
            let mut vars = Variables::new();
            for object in &sources {
                let kind = match text_at(object, "/kind") {
                    "ConfigMap" => SourceKind::ConfigMap,
                    "Secret" => SourceKind::Secret,
                    other => bail!(
                        "--substitute-from: expected ConfigMap or Secret, found kind '{other}'"
                    ),
                };
                for (name, value) in source_data(&kind, object)? {
                    vars.insert(name, &value);
                }
            }
            (vars, false)
        }
    };
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
            let undefined = resource::undefined_variables_in_resource(document, &vars, &options)
                .unwrap_or_default();
            for variable in undefined {
                eprintln!(
                    "warning: '{}': variable '{}' is used but not defined (substituted as an empty string)",
                    resource::resource_id(document),
                    variable.name
                );
            }
        }
        let result = substitute_resource(document, &vars, &options)
            .map(|outcome: ResourceOutcome| outcome.into_value(document))
            .and_then(|value| json_to_yaml(&value));
        match result {
            Ok(yaml) => {
                if index > 0 {
                    output.push_str("---\n");
                }
                output.push_str(&yaml);
            }
            Err(err) => {
                eprintln!("{}", post_build_error(document, err));
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    print!("{output}");
    Ok(ExitCode::SUCCESS)
}
