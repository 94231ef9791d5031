//! A small renderer: Flux's post-build `${VAR}` substitution on YAML manifests, strict mode, with
//! variables from a vars file and from `RENDER_VAR_<name>` environment variables (which win).
//!
//! ```sh
//! cargo run -p conflux-examples --example render                      # examples/render/*.yaml
//! RENDER_VAR_replicas=5 cargo run -p conflux-examples --example render -- MANIFESTS VARS
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use conflux_examples::render::{add_env_vars, render, vars_from_file};

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn main() -> anyhow::Result<ExitCode> {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("render");
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let manifests = args.next().unwrap_or_else(|| demo.join("app.yaml"));
    let vars_file = args.next().unwrap_or_else(|| demo.join("vars.yaml"));

    let mut vars = vars_from_file(&read(&vars_file)?)?;
    add_env_vars(&mut vars, std::env::vars());
    match render(&read(&manifests)?, &vars, true) {
        Ok(output) => {
            print!("{output}");
            Ok(ExitCode::SUCCESS)
        }
        // Flux's own wording, e.g. `post build failed for 'Deployment.v1.apps/web': envsubst
        // error: variable substitution failed: variable not set (strict mode): "version"`.
        Err(err) => {
            eprintln!("{err}");
            Ok(ExitCode::FAILURE)
        }
    }
}
