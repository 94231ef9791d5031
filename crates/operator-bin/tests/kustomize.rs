//! The built-in kustomize subset of `conflux plan` against the real kustomize: every case of the
//! corpus in `tests/kustomize/` (see its README) builds to the same objects, from the same files.
//!
//! The oracle is the kustomize of the test ground: `$CONFLUX_KUSTOMIZE` (hack/test.sh sets it),
//! else the binary `hack/cluster.sh build --kustomize` caches.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use conflux_fleet::fleet::FluxOverlay;
use conflux_fleet::kustomize::{Engine, Object, generated_resources};
use serde_json::{Value, json};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kustomize")
}

fn kustomize() -> PathBuf {
    if let Some(path) = std::env::var_os("CONFLUX_KUSTOMIZE") {
        return PathBuf::from(path);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../hack/cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("kustomize-bin")
        .output()
        .expect("hack/cluster.sh runs");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        path.is_file(),
        "no kustomize at {}: run `hack/cluster.sh build --kustomize` (hack/test.sh does)",
        path.display()
    );
    path
}

/// `Kind/namespace/name` → (object, file).
fn by_name(objects: Vec<Object>) -> BTreeMap<String, (Value, Option<String>)> {
    let mut out = BTreeMap::new();
    for o in objects {
        let text = |p: &str| o.object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let key = format!(
            "{}/{}/{}",
            text("/kind"),
            text("/metadata/namespace"),
            text("/metadata/name")
        );
        let previous = out.insert(key.clone(), (o.object, o.file));
        assert!(previous.is_none(), "{key} built twice");
    }
    out
}

fn same(dir: &str, overlay: &FluxOverlay) -> usize {
    let root = corpus();
    let built_in = Engine::BuiltIn
        .build(&root, dir, overlay)
        .unwrap_or_else(|e| panic!("{dir}: built-in: {e}"));
    let real = Engine::Binary(kustomize())
        .build(&root, dir, overlay)
        .unwrap_or_else(|e| panic!("{dir}: kustomize: {e}"));
    assert!(
        built_in.problems.is_empty(),
        "{dir}: the built-in build reports {:?}",
        built_in.problems
    );
    // In the same order too: kustomize-controller applies in build order, unsorted.
    let order = |objects: &[Object]| -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{}/{}", o.object["kind"], o.object["metadata"]["name"]))
            .collect()
    };
    assert_eq!(
        order(&built_in.objects),
        order(&real.objects),
        "{dir}: object order"
    );
    let (ours, theirs) = (by_name(built_in.objects), by_name(real.objects));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{dir}: object names"
    );
    for (name, (object, file)) in &theirs {
        let (mine, my_file) = &ours[name];
        assert_eq!(mine, object, "{dir}: {name}");
        assert_eq!(my_file, file, "{dir}: the file of {name}");
    }
    theirs.len()
}

#[test]
fn flux_generator_takes_sub_kustomizations_whole_and_only_manifests() {
    let root = corpus();
    assert_eq!(
        generated_resources(&root, "generated"),
        [
            "generated/app.yml",
            "generated/namespace.yaml",
            "generated/nested/deeper/secret.yaml",
            "generated/sub",
        ]
    );
    assert_eq!(same("generated", &FluxOverlay::default()), 6);
}

#[test]
fn the_built_in_subset_equals_kustomize() {
    for dir in [
        "overlay",
        "labels",
        "hashing",
        "base",
        "patched",
        "merged",
        "binary",
        "multi-patch",
        "name-reference",
        "strategic-merge-files",
        "replacements",
        "patch-directives",
    ] {
        assert!(
            same(dir, &FluxOverlay::default()) > 0,
            "{dir} builds nothing"
        );
    }
}

/// Plain YAML timestamps as kustomize writes them (go-yaml v3 into a Go `time.Time`, then Go's
/// JSON): in resources, a `List`, a strategic-merge patch and annotations a JSON 6902 patch
/// wrote through JSON; generated data, JSON 6902 values and other annotations keep their text.
#[test]
fn yaml_timestamps_are_written_as_kustomize_writes_them() {
    assert_eq!(same("timestamps", &FluxOverlay::default()), 5);
    let built = Engine::BuiltIn
        .build(&corpus(), "timestamps", &FluxOverlay::default())
        .expect("builds");
    let dates = built
        .objects
        .iter()
        .find(|o| o.object["metadata"]["name"] == "dates")
        .expect("the ConfigMap dates");
    assert_eq!(dates.object["data"]["date"], "2001-12-14T00:00:00Z");
    assert_eq!(dates.object["data"]["quoted"], "2001-12-14");
}

/// A timestamp as a label: kustomize selects by its text and writes it converted, which the
/// built-in subset does not follow; it says so, and the auto engine takes the binary's build.
#[test]
fn a_timestamp_label_goes_to_the_binary() {
    let overlay = FluxOverlay::default();
    let built = Engine::BuiltIn
        .build(&corpus(), "timestamp-label", &overlay)
        .expect("builds");
    let codes: Vec<&str> = built.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["KustomizeUnsupported"]);
    assert!(built.problems[0].message.contains("metadata.labels.day"));
    let auto = Engine::Auto(kustomize())
        .build(&corpus(), "timestamp-label", &overlay)
        .expect("builds");
    let real = Engine::Binary(kustomize())
        .build(&corpus(), "timestamp-label", &overlay)
        .expect("builds");
    assert!(auto.problems.is_empty(), "{:?}", auto.problems);
    assert_eq!(by_name(auto.objects), by_name(real.objects));
}

#[test]
fn the_flux_kustomization_fields_equal_kustomize() {
    let overlay = FluxOverlay {
        namespace: Some("flux-target".to_owned()),
        name_prefix: Some("f-".to_owned()),
        ..FluxOverlay::default()
    };
    assert_eq!(same("generated", &overlay), 6);
    let overlay = FluxOverlay {
        namespace: Some("flux-target".to_owned()),
        ..FluxOverlay::default()
    };
    assert!(same("overlay", &overlay) > 5);
    // The Flux Kustomization's own JSON 6902 patches.
    let patch = "- op: add\n  path: /data/flux\n  value: patched\n";
    let overlay = FluxOverlay {
        patches: vec![json!({"patch": patch, "target": {"kind": "ConfigMap"}})],
        ..FluxOverlay::default()
    };
    assert_eq!(same("generated", &overlay), 6);
}

/// kustomize-controller adds the Flux Kustomization's components to the path's own
/// kustomization, so the path's own patches see what the components bring.
#[test]
fn the_path_s_own_patches_see_the_flux_components() {
    let overlay = FluxOverlay {
        components: vec!["extra".to_owned()],
        ..FluxOverlay::default()
    };
    assert_eq!(same("component-patch", &overlay), 2);
}

/// A strategic-merge patch with a list, of a Kubernetes kind: kustomize merges the list with the
/// schema's list keys, which the built-in subset does not know.
fn list_patch() -> FluxOverlay {
    FluxOverlay {
        patches: vec![
            json!({"patch": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n\
                                       data: {x: y}\nimmutable: true\nother: [1]\n",
                             "target": {"kind": "ConfigMap"}}),
        ],
        ..FluxOverlay::default()
    }
}

#[test]
fn a_strategic_merge_patch_the_built_in_cannot_apply_exactly_is_named_not_guessed() {
    let overlay = list_patch();
    let built = Engine::BuiltIn
        .build(&corpus(), "generated", &overlay)
        .expect("builds");
    let codes: Vec<&str> = built.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["KustomizeUnsupported"]);
    assert!(built.problems[0].message.contains("strategic-merge"));
}

/// `Engine::Auto` (what `plan --kustomize PATH` uses) gives the subset's build where the subset
/// is exact, and the binary's where it is not: never the subset's guess.
#[test]
fn the_auto_engine_takes_the_binary_where_the_subset_is_not_exact() {
    let overlay = list_patch();
    let auto = Engine::Auto(kustomize());
    let built = auto
        .build(&corpus(), "generated", &overlay)
        .expect("builds");
    let real = Engine::Binary(kustomize())
        .build(&corpus(), "generated", &overlay)
        .expect("builds");
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    assert_eq!(by_name(built.objects), by_name(real.objects));
    // Where the subset is exact, its build is the answer.
    let plain = auto
        .build(&corpus(), "base", &FluxOverlay::default())
        .expect("builds");
    let subset = Engine::BuiltIn
        .build(&corpus(), "base", &FluxOverlay::default())
        .expect("builds");
    assert_eq!(by_name(plain.objects), by_name(subset.objects));
}

/// A bad YAML alias: with the auto engine the failure is kustomize's, in the file and line the
/// subset found at fault (kustomize names none).
#[test]
fn the_auto_engine_names_the_file_kustomize_fails_on() {
    let root = std::env::temp_dir().join(format!("conflux-auto-alias-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("web")).expect("mkdir");
    std::fs::write(
        root.join("web/kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - cm.yaml\n",
    )
    .expect("write");
    std::fs::write(
        root.join("web/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: *missing\n",
    )
    .expect("write");
    let failed = Engine::Auto(kustomize()).build(&root, "web", &FluxOverlay::default());
    let _ = std::fs::remove_dir_all(&root);
    match failed {
        Err(conflux_fleet::Error::InFile { file, line, source }) => {
            assert_eq!((file.as_str(), line), ("web/cm.yaml", Some(6)));
            assert!(
                matches!(*source, conflux_fleet::Error::Kustomize(_)),
                "kustomize's own words: {source}"
            );
        }
        other => panic!("expected a failure in web/cm.yaml, got {other:?}"),
    }
}

#[test]
fn legacy_octal_reads_as_kustomize_reads_it() {
    let root = corpus();
    let built = Engine::BuiltIn
        .build(&root, "labels", &FluxOverlay::default())
        .expect("builds");
    let db = built
        .objects
        .iter()
        .find(|o| o.object["kind"] == "StatefulSet")
        .expect("the StatefulSet");
    assert_eq!(
        db.object
            .pointer("/spec/template/spec/volumes/0/configMap/defaultMode"),
        Some(&json!(420))
    );
}

#[test]
fn a_whole_fleet_plans_the_same_with_either_engine() {
    let fleet = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fleets/d2");
    let plan = |engine: &std::ffi::OsStr| {
        let out = Command::new(env!("CARGO_BIN_EXE_conflux"))
            .arg("plan")
            .arg(&fleet)
            .args(["-o", "json", "--kustomize"])
            .arg(engine)
            .output()
            .expect("conflux runs");
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let real = kustomize();
    assert_eq!(plan("builtin".as_ref()), plan(real.as_os_str()));
}
