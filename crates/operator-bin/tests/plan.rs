//! `conflux plan` as a user runs it, on `examples/fleet` and on small inputs: the planted mistakes
//! by reason code, the output formats, stdin, `--fail-on`, and the exit statuses.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fleet() -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet");
    dir.to_string_lossy().into_owned()
}

fn conflux(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .arg("plan")
        .args(args)
        // The built-in kustomize, so the result does not depend on a binary on PATH.
        .args(["--kustomize", "builtin"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("conflux starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin.as_bytes()).expect("stdin written");
    drop(input);
    child.wait_with_output().expect("conflux finishes")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

/// (code, object) of every finding.
fn findings(report: &Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .expect("findings is an array")
        .iter()
        .map(|f| {
            let field = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (field("code"), field("object"))
        })
        .collect()
}

fn has(report: &Value, code: &str, object: &str) -> bool {
    findings(report)
        .iter()
        .any(|(c, o)| c == code && o == object)
}

#[test]
fn every_planted_mistake_is_flagged_and_the_exit_status_is_1() {
    let out = conflux(&[&fleet(), "--output", "json"], "");
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    let report = json(&out);
    for (code, object) in [
        ("WatchLabelMissing", "ConfigMap/team-b/runtime-info"),
        ("UndefinedVariable", "Kustomization/team-b/apps"),
        ("CoercedValue", "Kustomization/team-a/apps"),
        ("InvalidWorkload", "Deployment/team-a/podinfo"),
        ("CopySourceMissing", "ConfigMap/team-a/trusted-ca"),
    ] {
        assert!(
            has(&report, code, object),
            "{code} on {object} missing from {:?}",
            findings(&report)
        );
    }
    // Nothing else: the rest of the fleet is meant to be right. The ResourceSet's copy into
    // partner-x is Flux Operator's (as `conflux run` leaves it), unless conflux is to copy it.
    assert_eq!(findings(&report).len(), 5, "{:?}", findings(&report));
    let out = conflux(&[&fleet(), "-o", "json", "--copy-resourceset-targets"], "");
    let refused = json(&out);
    assert!(has(
        &refused,
        "CopyRefused",
        "ConfigMap/partner-x/monitoring-endpoints"
    ));
    // Every finding names its cluster and its file.
    for finding in report["findings"].as_array().expect("findings") {
        assert_eq!(finding["cluster"], "clusters/production", "{finding}");
        assert!(finding["file"].is_string(), "{finding}");
        assert!(finding["line"].is_u64(), "{finding}");
    }
    let undefined = &report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["code"] == "UndefinedVariable"))
        .expect("an UndefinedVariable finding")["message"];
    assert!(
        undefined
            .as_str()
            .unwrap_or_default()
            .contains("${CLUSTER_ENV}")
    );
}

#[test]
fn json_has_the_documented_shape() {
    let report = json(&conflux(&[&fleet(), "-o", "json"], ""));
    assert_eq!(report["schemaVersion"], 1);
    assert_eq!(
        report["inputs"]["generated"], 6,
        "3 inputs x 2 ResourceSet resources"
    );
    assert!(report["inputs"]["documents"].as_u64().unwrap_or_default() > 30);
    let fields = |key: &str, want: &[&str]| {
        let items = report[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} is an array"));
        assert!(!items.is_empty(), "{key} is empty");
        for item in items {
            for field in want {
                assert!(
                    item.get(field).is_some(),
                    "{key} item lacks {field}: {item}"
                );
            }
        }
    };
    fields("copies", &["source", "target", "via", "verdict", "detail"]);
    fields(
        "watchEdges",
        &[
            "source",
            "referrer",
            "referrerApiGroup",
            "path",
            "optional",
            "sourceFound",
            "watched",
            "when",
            "interval",
        ],
    );
    fields(
        "reloadEdges",
        &[
            "config",
            "workload",
            "annotation",
            "why",
            "keys",
            "optional",
            "configFound",
        ],
    );
    fields(
        "findings",
        &["severity", "code", "domain", "object", "message"],
    );
    assert_eq!(report["summary"]["errors"], 1);
    assert_eq!(report["summary"]["warnings"], 4);
    assert_eq!(report["clusters"][0]["name"], "clusters/production");
    assert_eq!(report["clusters"][0]["summary"]["errors"], 1);
    assert_eq!(report["summary"]["failOn"], "error");
    assert_eq!(report["summary"]["failed"], true);

    // The ConfigSync fans the pull secret out to the three tenant namespaces.
    let copies = report["copies"].as_array().expect("copies");
    let synced = copies
        .iter()
        .filter(|c| c["via"] == "ConfigSync/ghcr-auth" && c["verdict"] == "allowed")
        .count();
    assert_eq!(synced, 3);
    // team-a's labelled copy reconciles at once, team-b's at its interval.
    let edge = |source: &str| {
        report["watchEdges"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["source"] == source).cloned())
            .unwrap_or_else(|| panic!("no watch edge from {source}"))
    };
    assert_eq!(edge("ConfigMap/team-a/runtime-info")["watched"], true);
    let team_b = edge("ConfigMap/team-b/runtime-info");
    assert_eq!(team_b["when"], "at interval");
    assert_eq!(team_b["interval"], "30m");
}

#[test]
fn text_and_dot_outputs() {
    let out = conflux(&[&fleet()], "");
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for section in ["Copies (", "Watch edges (", "Reload edges (", "Findings ("] {
        assert!(stdout.contains(section), "{section} missing:\n{stdout}");
    }
    assert!(
        !stdout.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    assert!(stdout.contains("1 errors, 4 warnings, 0 info"), "{stdout}");

    let out = conflux(&[&fleet(), "--output", "dot"], "");
    assert_eq!(out.status.code(), Some(1));
    let dot = text(&out.stdout);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.trim_end().ends_with('}'));
    assert!(
        dot.contains(r#""ConfigMap/flux-system/runtime-info" -> "ConfigMap/team-a/runtime-info""#)
    );
}

const WARNING_ONLY: &str = r#"
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: vars, namespace: apps}
    data: {REGION: eu-1}
  - apiVersion: helm.toolkit.fluxcd.io/v2
    kind: HelmRelease
    metadata: {name: web, namespace: apps}
    spec:
      interval: 15m
      valuesFrom: [{kind: ConfigMap, name: vars}]
"#;

#[test]
fn stdin_and_fail_on() {
    // Only a warning (the source is not labelled): clean for the default --fail-on error.
    let out = conflux(&["-", "-o", "json"], WARNING_ONLY);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let report = json(&out);
    assert_eq!(
        findings(&report),
        [(
            "WatchLabelMissing".to_owned(),
            "ConfigMap/apps/vars".to_owned()
        )]
    );
    assert_eq!(report["watchEdges"][0]["interval"], "15m");
    assert_eq!(report["summary"]["failed"], false);

    let out = conflux(&["-", "--fail-on", "warning"], WARNING_ONLY);
    assert_eq!(out.status.code(), Some(1));
    // The empty selector watches everything: no finding at all.
    let out = conflux(&["-", "--watch-configs-label-selector", ""], WARNING_ONLY);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("0 errors, 0 warnings, 0 info"));
}

#[test]
fn a_clean_input_exits_0() {
    let clean = WARNING_ONLY.replace(
        "metadata: {name: vars, namespace: apps}",
        "metadata: {name: vars, namespace: apps, labels: {reconcile.fluxcd.io/watch: Enabled}}",
    );
    let out = conflux(&["-", "--fail-on", "warning"], &clean);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = conflux(&["-", "-o", "json"], &clean);
    let report = json(&out);
    assert_eq!(report["findings"], serde_json::json!([]));
    assert_eq!(report["watchEdges"][0]["when"], "at once");
}

#[test]
fn usage_errors_exit_2_and_bad_input_exits_1() {
    let out = conflux(&["--bogus", "x"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = conflux(&[], "");
    assert_eq!(out.status.code(), Some(2));
    let out = conflux(&["-", "--fail-on", "sometimes"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = conflux(&["-", "--watch-configs-label-selector", "a in ("], "");
    assert_eq!(out.status.code(), Some(2));

    let out = conflux(&["/nonexistent/conflux-plan-input", "-o", "json"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(has(
        &json(&out),
        "InvalidInput",
        "/nonexistent/conflux-plan-input"
    ));
    assert!(text(&out.stderr).contains("/nonexistent/conflux-plan-input"));
    let out = conflux(&["-"], "a: [\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("invalid YAML"),
        "{}",
        text(&out.stderr)
    );
}

fn d2() -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fleets/d2");
    dir.to_string_lossy().into_owned()
}

/// (cluster, severity, code, object) of every finding.
fn per_cluster(report: &Value) -> Vec<(String, String, String, String)> {
    let findings = report["findings"].as_array().expect("findings");
    findings
        .iter()
        .map(|f| {
            let field = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (
                field("cluster"),
                field("severity"),
                field("code"),
                field("object"),
            )
        })
        .collect()
}

#[test]
fn a_d2_fleet_is_planned_per_cluster_with_only_the_real_findings() {
    let external = format!("{}/external/terraform.yaml", d2());
    let out = conflux(&[&d2(), "-o", "json", "--external", &external], "");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let report = json(&out);
    let clusters: Vec<&str> = report["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        clusters,
        ["clusters/production", "clusters/staging", "clusters/update"]
    );
    // The copies of flux-runtime-info in the update cluster lack the watch label: the one real
    // finding. Each cluster's own flux-runtime-info defines its variables (no UndefinedVariable),
    // the ResourceSet copies are Flux Operator's (no CopyRefused), generated ConfigMaps and the
    // namespace of the sub-kustomization are applied (no ReferenceMissing), the SOPS Secret's
    // keys count and its values are never decoded.
    assert_eq!(
        per_cluster(&report),
        [(
            "clusters/update".to_owned(),
            "warning".to_owned(),
            "WatchLabelMissing".to_owned(),
            "ConfigMap/apps/flux-runtime-info".to_owned()
        )]
    );
    let finding = &report["findings"][0];
    assert_eq!(finding["file"], "clusters/update/automation.yaml");
    // The generated settings (hash suffix, sub-kustomization namespace) roll the exporter.
    let edges = report["reloadEdges"].as_array().expect("reloadEdges");
    let hashed = edges.iter().filter(|e| {
        let config = e["config"].as_str().unwrap_or_default();
        config.starts_with("ConfigMap/monitoring/exporter-settings-")
    });
    assert_eq!(hashed.count(), 2, "one per cluster: {edges:?}");
    // The ExternalSecret's Secret exists in the cluster: it rolls the exporter too.
    let external = edges
        .iter()
        .filter(|e| e["config"] == "Secret/monitoring/exporter-credentials");
    assert_eq!(external.count(), 2, "one per cluster: {edges:?}");

    // Without the Terraform-made pull secret declared: warnings, not errors.
    let out = conflux(&[&d2(), "-o", "json"], "");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let missing = per_cluster(&json(&out));
    assert!(
        missing
            .iter()
            .filter(|(_, _, code, _)| code == "CopySourceMissing")
            .all(|(_, severity, _, _)| severity == "warning")
    );
    assert_eq!(missing.len(), 5, "{missing:?}");
}

#[test]
fn one_cluster_at_a_time() {
    let out = conflux(&[&d2(), "-o", "json", "--cluster", "clusters/staging"], "");
    let report = json(&out);
    assert_eq!(report["clusters"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["clusters"][0]["name"], "clusters/staging");
    let copies = report["copies"].as_array().expect("copies");
    assert!(copies.iter().all(|c| c["cluster"] == "clusters/staging"));

    let out = conflux(&[&d2(), "--cluster", "clusters/nowhere"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // A cluster's directory given instead of the repository: read flat, and said so.
    let part = format!("{}/clusters/staging", d2());
    let report = json(&conflux(&[&part, "-o", "json"], ""));
    assert!(has(
        &report,
        "EntryOutsideInput",
        "Kustomization/flux-system/flux-system"
    ));
    assert_eq!(report["clusters"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_missing_path_an_empty_input_and_a_closed_pipe() {
    let dir = std::env::temp_dir().join(format!("conflux-plan-test-{}", std::process::id()));
    let cluster = dir.join("clusters/one/flux-system");
    std::fs::create_dir_all(&cluster).expect("temp dir");
    std::fs::write(
        cluster.join("gotk-sync.yaml"),
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: flux-system, namespace: flux-system}\nspec:\n  path: ./clusters/one\n  sourceRef: {kind: GitRepository, name: flux-system}\n",
    )
    .expect("written");
    std::fs::write(
        dir.join("clusters/one/apps.yaml"),
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: apps, namespace: flux-system}\nspec:\n  path: ./apps\n  sourceRef: {kind: GitRepository, name: flux-system}\n",
    )
    .expect("written");
    let report = json(&conflux(
        &[dir.to_str().unwrap_or_default(), "-o", "json"],
        "",
    ));
    assert!(has(
        &report,
        "PathNotFound",
        "Kustomization/flux-system/apps"
    ));

    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let out = conflux(
        &[empty.to_str().unwrap_or_default(), "--fail-on", "warning"],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("NothingToPlan"));

    // `conflux plan DIR -o dot | true`: the reader is gone before conflux writes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(["plan", &d2(), "-o", "dot"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("conflux starts");
    drop(child.stdout.take());
    let status = child.wait().expect("conflux finishes");
    assert_ne!(status.code(), Some(101), "a broken pipe must not panic");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--base REV` reviews a change: only what the working tree changed against the revision, and
/// the exit status from the new findings alone.
#[test]
fn a_review_against_a_base_revision_reports_only_what_changed() {
    let dir = std::env::temp_dir().join(format!("conflux-plan-review-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    let ks = |name: &str, path: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n  namespace: flux-system\nspec:\n  path: {path}\n"
        )
    };
    write(
        "clusters/prod/flux-system/gotk-sync.yaml",
        &ks("flux-system", "./clusters/prod"),
    );
    write("clusters/prod/apps.yaml", &ks("apps", "./apps"));
    write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n",
    );
    // An error already on the base: not the change's.
    write("clusters/prod/old.yaml", &ks("old", "./missing-before"));
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    // The change: a new Kustomization whose path does not exist.
    write("clusters/prod/new.yaml", &ks("new", "./missing-now"));
    let path = dir.to_string_lossy().into_owned();

    let out = conflux(&[&path, "--base", "HEAD", "-o", "json"], "");
    let review = json(&out);
    let new: Vec<&str> = review["newFindings"]
        .as_array()
        .expect("newFindings")
        .iter()
        .map(|f| f["object"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(new, ["Kustomization/flux-system/new"], "{review:#}");
    assert_eq!(review["resolvedFindings"], serde_json::json!([]));
    assert_eq!(out.status.code(), Some(1), "a new error fails the review");

    let markdown = conflux(&[&path, "--base", "HEAD", "-o", "markdown"], "");
    let markdown = text(&markdown.stdout);
    assert!(
        markdown.starts_with("### conflux plan: changes against `HEAD`")
            && markdown.contains("PathNotFound")
            && !markdown.contains("missing-before"),
        "{markdown}"
    );

    // Fixed in the working tree: the base's error is resolved, nothing new, status 0.
    std::fs::remove_file(dir.join("clusters/prod/new.yaml")).expect("rm");
    std::fs::remove_file(dir.join("clusters/prod/old.yaml")).expect("rm");
    let out = conflux(&[&path, "--base", "HEAD", "-o", "json"], "");
    let review = json(&out);
    assert_eq!(review["newFindings"], serde_json::json!([]));
    assert_eq!(
        review["resolvedFindings"].as_array().map(Vec::len),
        Some(1),
        "{review:#}"
    );
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ReloadPolicy in a cluster dump: its edges carry its name, a neighbour that does not read the
/// Secret has none, and a bad policy is a finding.
#[test]
fn reload_policy_edges_carry_the_policy_name() {
    let dump = r#"
apiVersion: conflux.dev/v1alpha1
kind: ReloadPolicy
metadata:
  name: restart-on-blogsecret
spec:
  configs: {kinds: [Secret], names: [blogsecret]}
  workloads: {kinds: [Deployment], references: [Env]}
---
apiVersion: conflux.dev/v1alpha1
kind: ReloadPolicy
metadata: {name: broken}
spec:
  workloads: {references: [Mount]}
---
apiVersion: v1
kind: Secret
metadata: {name: blogsecret, namespace: blog}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: blog, namespace: blog}
spec:
  selector: {matchLabels: {app: blog}}
  template:
    metadata: {labels: {app: blog}}
    spec:
      containers:
      - name: blog
        image: ghost
        env:
        - name: PASSWORD
          valueFrom: {secretKeyRef: {name: blogsecret, key: password}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: neighbour, namespace: blog}
spec:
  selector: {matchLabels: {app: neighbour}}
  template:
    metadata: {labels: {app: neighbour}}
    spec:
      containers: [{name: n, image: nginx}]
"#;
    let out = conflux(&["-", "-o", "json"], dump);
    let report = json(&out);
    let edges = report["reloadEdges"].as_array().expect("reloadEdges");
    assert_eq!(edges.len(), 1, "{edges:?}");
    assert_eq!(edges[0]["config"], "Secret/blog/blogsecret");
    assert_eq!(edges[0]["workload"], "Deployment/blog/blog");
    assert_eq!(edges[0]["annotation"], "ReloadPolicy");
    assert_eq!(edges[0]["policy"], "restart-on-blogsecret");
    let codes: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"InvalidReloadPolicy"), "{codes:?}");
    let text_out = conflux(&["-"], dump);
    assert!(
        text(&text_out.stdout).contains("ReloadPolicy restart-on-blogsecret"),
        "{}",
        text(&text_out.stdout)
    );
}
