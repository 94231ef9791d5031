//! `conflux run` rejects bad flags at start-up with a clear message and exit status 1.

use std::process::Command;

fn conflux(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run conflux");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_watch_configs_label_selector_exits_1() {
    let (code, stderr) = conflux(&[
        "run",
        "--controllers=flux-trigger",
        "--watch-configs-label-selector=app in (a",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("invalid --watch-configs-label-selector 'app in (a'"),
        "{stderr}"
    );
}

#[test]
fn unknown_controller_is_a_usage_error() {
    let (code, stderr) = conflux(&["run", "--controllers=flux-trigger,teleport"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("invalid value 'teleport' for '--controllers"),
        "{stderr}"
    );
}

#[test]
fn bad_reload_flags_are_refused() {
    let (code, stderr) = conflux(&["run", "--reload-debounce=soon"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid duration 'soon'"), "{stderr}");
    let (code, stderr) = conflux(&["run", "--reload-rate=0"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--reload-rate must be a positive"),
        "{stderr}"
    );
    let (code, stderr) = conflux(&["run", "--reload-burst=0"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--reload-burst must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn bad_metrics_address_exits_1() {
    let (code, stderr) = conflux(&["run", "--controllers=flux-trigger", "--metrics-addr=nope"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("invalid --metrics-addr 'nope'"), "{stderr}");
}

#[test]
fn plan_without_a_path_is_a_usage_error() {
    // `conflux plan` itself is tested in tests/plan.rs.
    let (code, stderr) = conflux(&["plan"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("<PATH>"), "{stderr}");
}
