//! The `render` example's logic: Flux post-build substitution of YAML manifests, strict mode.

use std::path::Path;

use conflux_examples::render::{add_env_vars, render, vars_from_file};
use conflux_postbuild_subst::vars::Variables;

fn demo(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("render")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn the_demo_renders_as_flux_would() {
    let vars = vars_from_file(&demo("vars.yaml")).expect("vars");
    let out = render(&demo("app.yaml"), &vars, true).expect("render");
    let docs: Vec<&str> = out.split("---\n").collect();
    assert_eq!(docs.len(), 2);
    assert!(docs[0].contains("name: podinfo-settings\n"));
    assert!(docs[0].contains("log_level: info\n"), "default applied");
    assert!(
        docs[0].contains("start.sh: echo $HOME\n"),
        "$HOME is not a variable"
    );
    // go-yaml v2 round trip, as kustomize-controller: the substituted "2" is the number 2.
    assert!(docs[1].contains("replicas: 2\n"));
    assert!(docs[1].contains("image: ghcr.io/example/podinfo:6.7.0\n"));
}

#[test]
fn strict_mode_names_the_resource_and_the_variable() {
    let vars = Variables::from_merged([("app".to_owned(), "web".to_owned())]);
    let err = render(
        "kind: ConfigMap\napiVersion: v1\nmetadata:\n  name: ${app}\ndata:\n  a: ${missing}\n",
        &vars,
        true,
    )
    .expect_err("missing variable in strict mode");
    assert_eq!(
        err.to_string(),
        "post build failed for 'ConfigMap.v1.[noGrp]/${app}': envsubst error: variable substitution failed: variable not set (strict mode): \"missing\""
    );
    // Not strict: substituted by nothing, as Flux without --strict; `a: ` then reads back as
    // null (the substitution is textual).
    let out = render("a: ${missing}\n", &vars, false).expect("non-strict");
    assert_eq!(out, "a: null\n");
}

#[test]
fn environment_overrides_the_vars_file_and_configmaps_work_as_vars_files() {
    let mut vars = vars_from_file(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-vars\ndata:\n  replicas: \"2\"\n---\nregion: eu\n",
    )
    .expect("vars");
    add_env_vars(
        &mut vars,
        [
            ("RENDER_VAR_replicas".to_owned(), "5".to_owned()),
            ("PATH".to_owned(), "/bin".to_owned()),
        ],
    );
    assert_eq!(vars.get("replicas"), Some("5"));
    assert_eq!(vars.get("region"), Some("eu"));
    assert_eq!(vars.get("PATH"), None, "only prefixed variables");
    let out = render("spec:\n  replicas: ${replicas}\n", &vars, true).expect("render");
    assert_eq!(out, "spec:\n  replicas: 5\n");
}

#[test]
fn resources_can_opt_out() {
    let vars = Variables::from_merged([("x".to_owned(), "1".to_owned())]);
    let input = "metadata:\n  annotations:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\nvalue: ${nope}\n";
    let out = render(input, &vars, true).expect("disabled resources are not substituted");
    assert!(out.contains("value: ${nope}\n"));
}
