//! `deploy/crds/<name>.yaml` is exactly what `conflux crd <name>` prints, for every CRD conflux
//! serves, so the committed CRDs never drift from the Rust types.

use std::path::Path;
use std::process::Command;

#[test]
fn committed_crds_are_what_conflux_crd_prints() {
    for (arg, crd) in [
        ("configsync", "configsyncs.conflux.dev"),
        ("protectpolicy", "protectpolicies.conflux.dev"),
        ("reloadpolicy", "reloadpolicies.conflux.dev"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_conflux"))
            .args(["crd", arg])
            .output()
            .expect("run conflux crd");
        assert!(
            output.status.success(),
            "conflux crd {arg} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
        assert!(generated.contains("kind: CustomResourceDefinition"));
        assert!(generated.contains(&format!("name: {crd}")), "{arg}");
        assert!(generated.contains("scope: Cluster"));
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../deploy/crds/{arg}.yaml"));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is stale or missing; regenerate it with\n  \
             cargo run -p conflux-operator --bin conflux -- crd {arg} > deploy/crds/{arg}.yaml",
            path.display()
        );
    }
    // Without a name: ConfigSync's, as before there were three.
    let output = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .arg("crd")
        .output()
        .expect("run conflux crd");
    assert!(String::from_utf8_lossy(&output.stdout).contains("name: configsyncs.conflux.dev"));
}
