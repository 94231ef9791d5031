//! `deploy/crds/configsync.yaml` is exactly what `conflux crd` prints, so the committed CRD never
//! drifts from the Rust types.

use std::path::Path;
use std::process::Command;

#[test]
fn committed_configsync_crd_is_what_conflux_crd_prints() {
    let output = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .arg("crd")
        .output()
        .expect("run conflux crd");
    assert!(
        output.status.success(),
        "conflux crd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    assert!(generated.contains("kind: CustomResourceDefinition"));
    assert!(generated.contains("name: configsyncs.conflux.dev"));
    assert!(generated.contains("scope: Cluster"));

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/configsync.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale or missing; regenerate it with\n  \
         cargo run -p operator-bin --bin conflux -- crd > deploy/crds/configsync.yaml",
        path.display()
    );
}

#[test]
fn committed_reloadpolicy_crd_is_what_conflux_crd_prints() {
    let output = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(["crd", "reloadpolicy"])
        .output()
        .expect("run conflux crd reloadpolicy");
    assert!(output.status.success());
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    assert!(generated.contains("name: reloadpolicies.conflux.dev"));
    assert!(generated.contains("scope: Cluster"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/reloadpolicy.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale or missing; regenerate it with\n  \
         cargo run -p operator-bin --bin conflux -- crd reloadpolicy > deploy/crds/reloadpolicy.yaml",
        path.display()
    );
}
