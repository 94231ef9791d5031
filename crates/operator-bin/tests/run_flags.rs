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

#[test]
fn protect_mode_and_webhook_flags_must_agree() {
    // The webhook flags belong to --protect-mode=webhook; the default mode refuses them.
    for flag in [
        "--webhook-addr=:9443",
        "--webhook-url=https://127.0.0.1:9443/validate",
        "--webhook-cert-dir=/tmp",
    ] {
        let (code, stderr) = conflux(&["run", "--controllers=protect", flag]);
        assert_eq!(code, 1, "{flag}: {stderr}");
        let name = flag.split('=').next().unwrap_or_default();
        assert!(
            stderr.contains(&format!("{name} is only used with --protect-mode=webhook"))
                && stderr.contains("add --protect-mode=webhook"),
            "{stderr}"
        );
        let (code, stderr) = conflux(&[
            "run",
            "--controllers=protect",
            "--protect-mode=admission-policy",
            flag,
        ]);
        assert_eq!(code, 1, "{flag}: {stderr}");
    }
    // The webhook mode needs a URL or a namespace for its Service, and a real address.
    let (code, stderr) = conflux(&["run", "--controllers=protect", "--protect-mode=webhook"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--protect-mode=webhook needs --webhook-url, or RUNTIME_NAMESPACE"),
        "{stderr}"
    );
    let (code, stderr) = conflux(&[
        "run",
        "--controllers=protect",
        "--protect-mode=webhook",
        "--webhook-url=https://127.0.0.1:9443/validate",
        "--webhook-addr=0",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--webhook-addr cannot be 0"), "{stderr}");
    let (code, stderr) = conflux(&["run", "--protect-mode=sidecar"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("invalid value 'sidecar' for '--protect-mode"),
        "{stderr}"
    );
    // Without the protect controller, the webhook flags are ignored as before.
    let (code, stderr) = conflux(&[
        "run",
        "--controllers=copy",
        "--webhook-url=https://x/validate",
    ]);
    assert!(!stderr.contains("--protect-mode"), "{stderr}");
    assert!(
        stderr.contains("cannot build a Kubernetes client"),
        "the flags passed: {code} {stderr}"
    );
}
