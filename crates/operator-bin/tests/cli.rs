//! `conflux envsubst` and `conflux build` as a user runs them: exit codes, stdout, stderr.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn conflux(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_conflux"));
    command
        .args(args)
        .env_remove("X")
        .env_remove("NAME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("conflux starts");
    let written = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes());
    // A usage error exits before reading stdin: its pipe may close before the write.
    if let Err(err) = written {
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::BrokenPipe,
            "stdin written: {err}"
        );
    }
    child.wait_with_output().expect("conflux finishes")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_file(name: &str, content: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("conflux-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("temp file");
    path
}

#[test]
fn envsubst_strict_uses_defaults() {
    let out = conflux(&["envsubst", "--strict"], "a: ${X:=1}\n", &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "a: 1\n");
}

#[test]
fn envsubst_strict_unknown_variable_fails() {
    let out = conflux(&["envsubst", "--strict"], "a: ${NAME}\n", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains(r#"variable not set (strict mode): "NAME""#),
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn envsubst_reads_environment_and_whole_input() {
    let long_line = "x".repeat(100_000);
    let input = format!("${{X}} $${{X}} $X\n{long_line}\n");
    let out = conflux(&["envsubst"], &input, &[("X", "value")]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), format!("value ${{X}} $X\n{long_line}\n"));
}

#[test]
fn envsubst_parse_error_exits_1() {
    let out = conflux(&["envsubst"], "${X", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr).trim(), "missing closing brace");
}

const MANIFESTS: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: apps
data:
  region: ${region}
  env: ${env:=dev}
  flag: yes
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    kustomize.toolkit.fluxcd.io/substitute: disabled
spec:
  replicas: 1
  template: ${untouched}
";

#[test]
fn build_substitutes_every_document() {
    let out = conflux(&["build", "--substitute", "region=eu-1"], MANIFESTS, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "apiVersion: v1\ndata:\n  env: dev\n  flag: \"yes\"\n  region: eu-1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: apps\n\
---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  labels:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\n  name: web\nspec:\n  replicas: 1\n  template: ${untouched}\n"
    );
}

#[test]
fn build_without_variables_skips_unless_always() {
    let input = "apiVersion: v1\ndata:\n  a: ${x:=d}\nkind: ConfigMap\nmetadata:\n  name: c\n";
    let out = conflux(&["build"], input, &[]);
    assert_eq!(text(&out.stdout), input);
    let out = conflux(&["build", "--always"], input, &[]);
    assert_eq!(text(&out.stdout), input.replace("${x:=d}", "d"));
}

/// The input is taken as kustomize holds a resource it has read: what `kustomize build` v5.8.2
/// writes for this file (a plain timestamp converted; quoted and annotation ones kept).
#[test]
fn build_reads_resources_as_kustomize_does() {
    let input = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    day: 2001-12-14\ndata:\n  day: 2001-12-14\n  quoted: \"2001-12-14\"\n";
    let out = conflux(&["build"], input, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "apiVersion: v1\ndata:\n  day: \"2001-12-14T00:00:00Z\"\n  quoted: \"2001-12-14\"\nkind: ConfigMap\nmetadata:\n  annotations:\n    day: \"2001-12-14\"\n  name: c\n"
    );
}

#[test]
fn build_strict_error_has_controller_prefix() {
    let input = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: ${missing}\n";
    let out = conflux(&["build", "--strict", "--substitute", "v=1"], input, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        r#"post build failed for 'ConfigMap.v1.[noGrp]/c': envsubst error: variable substitution failed: variable not set (strict mode): "missing""#
    );
}

#[test]
fn build_with_kustomization_and_sources() {
    let sources = temp_file(
        "sources.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vars\n  namespace: flux-system\ndata:\n  region: \"\\neu-2\\n\"\n  zone: cm\n\
---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-vars\n  namespace: flux-system\ndata:\n  zone: c2VjcmV0\n",
    );
    let kustomization = temp_file(
        "ks.yaml",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: apps\n  namespace: flux-system\nspec:\n  postBuild:\n    substitute:\n      env: prod\n    substituteFrom:\n    - kind: ConfigMap\n      name: vars\n    - kind: Secret\n      name: secret-vars\n    - kind: ConfigMap\n      name: absent\n      optional: true\n",
    );
    let input = "apiVersion: v1\ndata:\n  a: ${region}-${zone}-${env}\nkind: ConfigMap\nmetadata:\n  name: c\n";
    let out = conflux(
        &[
            "build",
            "--kustomization",
            kustomization.to_str().expect("utf-8 path"),
            "--substitute-from",
            sources.to_str().expect("utf-8 path"),
        ],
        input,
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        input.replace("${region}-${zone}-${env}", "eu-2-secret-prod")
    );
}

#[test]
fn build_typed_mode_keeps_strings_and_lint_warns() {
    let input =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: ${v}\n  b: ${nope}\n";
    let out = conflux(
        &["build", "--typed", "--lint", "--substitute", "v=yes"],
        input,
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("a: \"yes\"\n  b: \"\"\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("variable 'nope' is used but not defined"));
}

#[test]
fn build_rejects_bad_flag_value() {
    let out = conflux(&["build", "--substitute", "novalue"], "a: 1\n", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("expected NAME=VALUE"));
}

#[test]
fn build_with_several_kustomizations_needs_a_name() {
    let two = temp_file(
        "two-ks.yaml",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, namespace: x}\nspec: {postBuild: {substitute: {A: one}}}\n\
---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: b, namespace: x}\nspec: {postBuild: {substitute: {A: two}}}\n",
    );
    let path = two.to_str().expect("utf-8 path");
    let input = "apiVersion: v1\ndata:\n  a: ${A}\nkind: ConfigMap\nmetadata:\n  name: c\n";
    let out = conflux(&["build", "--kustomization", path], input, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("several Flux Kustomizations (x/a, x/b): choose one with --name"),
        "{}",
        text(&out.stderr)
    );
    let out = conflux(
        &["build", "--kustomization", path, "--name", "x/b"],
        input,
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), input.replace("${A}", "two"));
}

/// `conflux import kyverno`: objects on stdout, one stable line per finding on stderr; stdin as
/// `-`; `--fail-on-unconverted` exits 1 when something is not converted; bad YAML exits 1.
#[test]
fn import_kyverno_prints_objects_and_findings() {
    let article = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/kyverno/article-policies.yaml"
    );
    let out = conflux(&["import", "kyverno", article], "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text(&out.stdout)).expect("YAML on stdout");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["ProtectPolicy", "ConfigSync", "ReloadPolicy"]);
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[0].starts_with(
        "unconverted ClusterPolicy/validate-secrets rule protect-blogsecret: ExcludeRoles: "
    ));
    assert!(lines[1].starts_with(
        "differs ClusterPolicy/validate-secrets rule protect-blogsecret: MetadataUpdates: "
    ));

    let policy = std::fs::read_to_string(article).unwrap();
    let strict = conflux(
        &["import", "kyverno", "--fail-on-unconverted", "-"],
        &policy,
        &[],
    );
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(
        strict.stdout, out.stdout,
        "the objects are printed all the same"
    );

    let bad = conflux(&["import", "kyverno", "-"], "rules: [", &[]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("invalid YAML"),
        "{}",
        text(&bad.stderr)
    );
    let usage = conflux(&["import", "kyverno"], "", &[]);
    assert_eq!(usage.status.code(), Some(2));
}
