//! `conflux build` against kustomize-controller v1.10's own post-build substitution, on the same
//! corpus that `flux.rs` runs through the real v1.9.5 controller in a cluster.
//!
//! The test ground runs Flux 2.9: the Go module proxy serves neither helm-controller v1.7 nor
//! notification-controller v1.10, so Flux 2.10 cannot run here. Its substitution is one library
//! call, though: the flux-oracle (`hack/cluster/flux-oracle`) is that call, `SubstituteVariables`
//! of fluxcd/pkg/kustomize at the version kustomize-controller v1.10.1 pins, built with Go 1.27.
//! It reads the resource as kustomize does and writes it as kustomize-controller applies it.
//!
//! The oracle is `$CONFLUX_FLUX_ORACLE` (hack/test.sh sets it), else the binary
//! `hack/cluster.sh build --tools-only --flux-oracle` caches.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

#[path = "flux_support/corpus.rs"]
#[allow(dead_code)]
mod corpus;

fn oracle() -> PathBuf {
    if let Some(path) = std::env::var_os("CONFLUX_FLUX_ORACLE") {
        return PathBuf::from(path);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../hack/cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("flux-oracle-bin")
        .output()
        .expect("hack/cluster.sh runs");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        path.is_file(),
        "no flux-oracle at {}: run `hack/cluster.sh build --tools-only --flux-oracle` \
         (hack/test.sh does)",
        path.display()
    );
    path
}

/// Runs `program args` with `input` on stdin: the output on success, else stderr.
fn run(mut command: Command, input: &str) -> Result<String, String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("writes stdin");
    let out = child.wait_with_output().expect("runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The `spec` of the one document of `yaml`.
fn spec_of(yaml: &str) -> Result<Value, String> {
    let docs =
        serde_saphyr::from_multiple::<Value>(yaml).map_err(|e| format!("unreadable: {e}"))?;
    docs.into_iter()
        .find(|d| d["kind"] == "Sample")
        .map(|d| d["spec"].clone())
        .ok_or_else(|| "no Sample in the output".to_owned())
}

#[test]
fn conflux_build_substitutes_as_kustomize_controller_1_10() {
    let oracle = oracle();
    let dir = conflux_tests::repo_root().join(format!("target/flux-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let vars: serde_json::Map<String, Value> = corpus::VARIABLES
        .iter()
        .map(|(name, value)| ((*name).to_owned(), Value::from(*value)))
        .collect();
    let vars_file = dir.join("vars.json");
    std::fs::write(&vars_file, Value::Object(vars).to_string()).expect("vars file");

    let cases = corpus::cases("corpus");
    let mut report = Vec::new();
    let mut refused = Vec::new();
    for case in &cases {
        let mut flux = Command::new(&oracle);
        flux.arg(&vars_file);
        let flux = run(flux, &case.manifest);
        let mut ours = Command::new(env!("CARGO_BIN_EXE_conflux"));
        ours.arg("build");
        for (name, value) in corpus::VARIABLES {
            ours.arg("--substitute").arg(format!("{name}={value}"));
        }
        let ours = run(ours, &case.manifest);
        let (flux, ours) = (
            flux.and_then(|t| spec_of(&t)),
            ours.and_then(|t| spec_of(&t)),
        );
        if corpus::judge("flux-oracle", &case.name, &flux, &ours, &mut report) {
            refused.push(case.name.clone());
        }
    }
    println!(
        "flux-oracle: {} cases, {} refused by both ({refused:?}), {} differences",
        cases.len(),
        refused.len(),
        report.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(report.is_empty(), "differences:\n{}", report.join("\n"));
}
