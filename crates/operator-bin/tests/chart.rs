//! The Helm chart `charts/conflux` renders what `conflux install --export` prints: with default
//! values exactly (less the Namespace, which Helm creates), and with each install flag's value
//! as with that flag. helm is the real one, built from its Go module (`hack/cluster.sh build
//! --tools-only --helm`). The chart's generated files (the ConfigSync CRD, the RBAC rules) are
//! current; regenerate them with `CONFLUX_UPDATE_CHART=1 cargo test -p conflux-operator --test chart`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// The release name and namespace the chart documents.
const RELEASE: &str = "conflux";
const NAMESPACE: &str = "conflux-system";

fn chart_dir() -> PathBuf {
    conflux_tests::repo_root().join("charts/conflux")
}

fn conflux(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(args)
        .output()
        .expect("run conflux")
}

/// The documents of `conflux install --export ARGS`.
fn export(args: &[&str]) -> Vec<Value> {
    let output = conflux(&[&["install", "--export"], args].concat());
    assert!(
        output.status.success(),
        "conflux install --export {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&String::from_utf8(output.stdout).expect("UTF-8"))
}

fn parse(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("multi-document YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm ARGS`.
fn helm(args: &[&str]) -> Output {
    conflux_tests::helm_command()
        .args(args)
        .output()
        .expect("run helm")
}

/// `helm template` of the chart in `namespace` with the CRDs, and `values` (helm flags).
fn template_in(namespace: &str, values: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart_dir();
    let chart = chart.to_str().expect("UTF-8 path");
    let args = [
        &[
            "template",
            RELEASE,
            chart,
            "--namespace",
            namespace,
            "--include-crds",
        ],
        values,
    ]
    .concat();
    let output = helm(&args);
    if output.status.success() {
        Ok(parse(&String::from_utf8(output.stdout).expect("UTF-8")))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn template(values: &[&str]) -> Vec<Value> {
    template_in(NAMESPACE, values)
        .unwrap_or_else(|e| panic!("helm template {values:?} failed: {e}"))
}

fn key(doc: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&doc["kind"]),
        s(&doc["metadata"]["namespace"]),
        s(&doc["metadata"]["name"]),
    )
}

/// Helm's install order of the kinds the chart renders (helm.sh/helm/v4
/// pkg/release/v1/util/kind_sorter.go); `helm template --include-crds` prints crds/ first.
fn helm_rank(kind: &str) -> usize {
    [
        "CustomResourceDefinition",
        "Namespace",
        "PodDisruptionBudget",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
    ]
    .iter()
    .position(|k| *k == kind)
    .unwrap_or(usize::MAX)
}

/// The chart's objects equal the export's, compared as parsed objects, and come in the export's
/// order as Helm sorts it: by kind (Helm applies in that order whatever the templates say), the
/// export's order within a kind.
fn assert_same(case: &str, helm: &[Value], export: &[Value]) {
    let index = |docs: &[Value]| -> BTreeMap<(String, String, String), Value> {
        docs.iter().map(|d| (key(d), d.clone())).collect()
    };
    let (h, e) = (index(helm), index(export));
    assert_eq!(
        h.keys().collect::<Vec<_>>(),
        e.keys().collect::<Vec<_>>(),
        "{case}: the chart renders other objects than the export"
    );
    for (k, want) in &e {
        let got = &h[k];
        assert!(
            got == want,
            "{case}: {k:?} differs\n--- helm template:\n{}\n--- conflux install --export:\n{}",
            serde_json::to_string_pretty(got).unwrap_or_default(),
            serde_json::to_string_pretty(want).unwrap_or_default(),
        );
    }
    let mut expected: Vec<_> = export.iter().map(key).collect();
    expected.sort_by_key(|(kind, ..)| helm_rank(kind));
    assert_eq!(
        helm.iter().map(key).collect::<Vec<_>>(),
        expected,
        "{case}: order"
    );
}

#[test]
fn default_values_render_what_conflux_install_export_prints() {
    let export = export(&[]);
    // Helm creates the release namespace (`helm install --create-namespace`) and keeps the
    // release in it before any object of the chart exists, so by default the chart has no
    // Namespace; it is the only difference.
    let (namespaces, rest): (Vec<Value>, Vec<Value>) = export
        .iter()
        .cloned()
        .partition(|d| d["kind"] == "Namespace");
    assert_eq!(
        namespaces,
        [json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "conflux"}},
        })]
    );
    assert_same("defaults", &template(&[]), &rest);
    // With createNamespace, exactly the export.
    assert_same(
        "createNamespace=true",
        &template(&["--set", "createNamespace=true"]),
        &export,
    );
}

/// Each `conflux install` flag and the chart value that matches it render the same objects.
#[test]
fn values_render_what_the_matching_install_flags_print() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "controllers",
            &["--set-json", r#"controllers=["copy","sync"]"#],
            &["--controllers=copy,sync"],
        ),
        (
            "controllers in another order",
            &[
                "--set-json",
                r#"controllers=["flux-trigger","reload","copy"]"#,
            ],
            &["--controllers=flux-trigger,reload,copy"],
        ),
        (
            "protect, admission policy",
            &["--set-json", r#"controllers=["copy","protect"]"#],
            &["--controllers=copy,protect"],
        ),
        (
            "protect webhook",
            &[
                "--set-json",
                r#"controllers=["copy","sync","reload","flux-trigger","protect"]"#,
                "--set",
                "protectMode=webhook",
            ],
            &[
                "--controllers=copy,sync,reload,flux-trigger,protect",
                "--protect-mode=webhook",
            ],
        ),
        (
            "webhook mode without protect",
            &["--set", "protectMode=webhook"],
            &["--protect-mode=webhook"],
        ),
        (
            "image",
            &[
                "--set",
                "image.repository=registry.example.com/team/conflux",
                "--set",
                "image.tag=v9.9.9",
            ],
            &["--image=registry.example.com/team/conflux:v9.9.9"],
        ),
        (
            "image digest",
            &[
                "--set",
                "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ],
            &[
                "--image=ghcr.io/conflux-dev/conflux@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ],
        ),
        (
            "extra args",
            &[
                "--set-json",
                r#"extraArgs=["--reload-debounce=5s","--log-level=debug","--sync-source-namespaces=flux-system,tenants"]"#,
            ],
            &[
                "--arg=--reload-debounce=5s",
                "--arg",
                "--log-level=debug",
                "--arg=--sync-source-namespaces=flux-system,tenants",
            ],
        ),
        (
            "extra args that need RBAC: Argo Rollouts and the CSI integration",
            &[
                "--set-json",
                r#"extraArgs=["--is-Argo-Rollouts=true","--enable-csi-integration"]"#,
            ],
            &[
                "--arg=--is-Argo-Rollouts=true",
                "--arg=--enable-csi-integration",
            ],
        ),
        (
            "the reload flags' RBAC only with the reload controller",
            &[
                "--set-json",
                r#"controllers=["copy"]"#,
                "--set-json",
                r#"extraArgs=["--is-argo-rollouts"]"#,
            ],
            &["--controllers=copy", "--arg=--is-argo-rollouts"],
        ),
    ];
    for (case, values, flags) in cases {
        let values = [&["--set", "createNamespace=true"], *values].concat();
        assert_same(case, &template(&values), &export(flags));
    }
    // The namespace: Helm's own --namespace, or namespaceOverride.
    let export_ops = export(&["--namespace=ops"]);
    let rendered = template_in("ops", &["--set", "createNamespace=true"])
        .unwrap_or_else(|e| panic!("helm template -n ops: {e}"));
    assert_same("release namespace ops", &rendered, &export_ops);
    assert_same(
        "namespaceOverride=ops",
        &template(&[
            "--set",
            "createNamespace=true",
            "--set",
            "namespaceOverride=ops",
        ]),
        &export_ops,
    );
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn container(docs: &[Value]) -> Value {
    find(docs, "Deployment", "conflux").expect("Deployment")["spec"]["template"]["spec"]
        ["containers"][0]
        .clone()
}

/// What Helm users set beyond the install flags lands where they expect it; mistakes fail at
/// `helm template`, with the reason.
#[test]
fn chart_only_values_land_where_helm_users_expect_them() {
    let docs = template(&[
        "--set",
        "replicas=3",
        "--set-json",
        r#"nodeSelector={"kubernetes.io/os":"linux"}"#,
        "--set-json",
        r#"tolerations=[{"key":"infra","operator":"Exists","effect":"NoSchedule"}]"#,
        "--set-json",
        r#"podAnnotations={"example.com/scrape":"true"}"#,
        "--set-json",
        r#"podLabels={"team":"platform"}"#,
        "--set-json",
        r#"commonLabels={"example.com/owner":"platform"}"#,
        "--set-json",
        r#"serviceAccount={"name":"conflux-sa","annotations":{"example.com/role":"x"}}"#,
        "--set",
        "priorityClassName=system-cluster-critical",
        "--set-json",
        r#"env=[{"name":"TZ","value":"UTC"}]"#,
        "--set",
        "metrics.port=18080",
        "--set",
        "health.port=19440",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "resources.limits.memory=1Gi",
    ]);
    let deployment = find(&docs, "Deployment", "conflux").expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"]["example.com/scrape"], "true");
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "infra");
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["spec"]["serviceAccountName"], "conflux-sa");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["env"][2], json!({"name": "TZ", "value": "UTC"}));
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(c["resources"]["requests"]["memory"], "64Mi");
    assert!(
        c["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--metrics-addr=:18080"))
    );
    assert!(
        c["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--health-addr=:19440"))
    );
    assert_eq!(c["ports"][0]["containerPort"], 18080);
    assert_eq!(c["ports"][1]["containerPort"], 19440);
    let sa = find(&docs, "ServiceAccount", "conflux-sa").expect("ServiceAccount conflux-sa");
    assert_eq!(sa["metadata"]["annotations"]["example.com/role"], "x");
    // Every object but the CRD: Helm does not template crds/.
    for doc in docs
        .iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
    {
        assert_eq!(
            doc["metadata"]["labels"]["example.com/owner"],
            "platform",
            "commonLabels on {:?}",
            key(doc)
        );
        for subject in doc["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["name"], "conflux-sa");
        }
    }
    let metrics = find(&docs, "Service", "conflux-metrics").expect("metrics Service");
    assert_eq!(metrics["spec"]["ports"][0]["port"], 18080);
    let monitor = find(&docs, "ServiceMonitor", "conflux").expect("ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");

    // Without leader election (one replica): no flag, and no Lease in the Role: it keeps only
    // what the reload controller's memory and records need, and exists only when a controller
    // needs it.
    let docs = template(&[
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicas=1",
    ]);
    assert!(
        !container(&docs)["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--enable-leader-election"))
    );
    let role = find(&docs, "Role", "conflux-leader-election").expect("the records' Role");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch", "delete"]}])
    );
    let docs = template(&[
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicas=1",
        "--set-json",
        r#"controllers=["copy"]"#,
    ]);
    assert!(find(&docs, "Role", "conflux-leader-election").is_none());
    let docs = template(&[
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicas=1",
        "--set-json",
        r#"controllers=["protect"]"#,
        "--set",
        "protectMode=webhook",
    ]);
    let role = find(&docs, "Role", "conflux-leader-election").expect("the certificate's Role");
    assert_eq!(role["rules"].as_array().map(Vec::len), Some(1));
    assert_eq!(role["rules"][0]["resources"], json!(["secrets"]));

    // Bring-your-own ServiceAccount and RBAC.
    let docs = template(&[
        "--set",
        "serviceAccount.create=false",
        "--set",
        "rbac.create=false",
        "--set",
        "podDisruptionBudget.enabled=false",
        "--set",
        "metrics.service.enabled=false",
    ]);
    let kinds: Vec<String> = docs.iter().map(|d| key(d).0).collect();
    // The CRDs (ConfigSync, ProtectPolicy, ReloadPolicy) and the Deployment.
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment"
        ],
        "{kinds:?}"
    );

    // Mistakes, each refused with its reason.
    for (values, reason) in [
        (
            &["--set-json", r#"controllers=["copy","reloader"]"#][..],
            "controllers",
        ),
        (&["--set-json", "controllers=[]"][..], "controllers"),
        (&["--set", "protectMode=policy"][..], "protectMode"),
        (
            &["--set-json", r#"extraArgs=["--protect-mode=webhook"]"#][..],
            "protectMode",
        ),
        (
            &["--set", "leaderElection.enabled=false"][..],
            "leaderElection",
        ),
        (&["--set", "replica=3"][..], "replica"),
        (&["--set", "namespaceOverride=Ops"][..], "namespaceOverride"),
        (&["--set", "metrics.port=0"][..], "port"),
    ] {
        let err = template_in(NAMESPACE, values)
            .err()
            .unwrap_or_else(|| panic!("helm template {values:?} succeeded"));
        assert!(err.contains(reason), "{values:?}: {err}");
    }
}

#[test]
fn helm_lint_passes() {
    let chart = chart_dir();
    let chart = chart.to_str().expect("UTF-8 path");
    for values in [
        &[][..],
        &[
            "--set-json",
            r#"controllers=["copy","protect"]"#,
            "--set",
            "protectMode=webhook",
        ][..],
    ] {
        let output = helm(&[&["lint", "--strict", chart], values].concat());
        assert!(
            output.status.success(),
            "helm lint --strict {values:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The chart's version is the workspace's, and its appVersion the image tag that
/// `conflux install --export` and `hack/image.sh build` use.
#[test]
fn chart_version_follows_the_workspace() {
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], format!("v{version}"));
    let image = container(&export(&[]))["image"].clone();
    assert_eq!(image, format!("ghcr.io/conflux-dev/conflux:v{version}"));
    assert_eq!(container(&template(&[]))["image"], image);

    // The schema's controllers are those conflux knows, in the order the chart sorts them.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("values.schema.json is JSON");
    assert_eq!(
        schema["properties"]["controllers"]["items"]["enum"],
        rbac_data()["controllers"]
    );
}

/// files/rbac.yaml, from the export with every controller in both protect modes: the controllers
/// in order, each ClusterRole's rules (protect's per mode), and the leader election Role's rules
/// (and what the reload controller and the webhook mode add to it).
/// The reload controller's roles that exist only when `extraArgs` passes their flag (the
/// spellings `conflux install --arg=...` grants them for), by role name.
const RELOAD_FLAG_ROLES: [(&str, &[&str]); 2] = [
    (
        "reload-argo-rollouts",
        &[
            "--is-argo-rollouts",
            "--is-argo-rollouts=true",
            "--is-argo-rollouts=True",
            "--is-Argo-Rollouts",
            "--is-Argo-Rollouts=true",
            "--is-Argo-Rollouts=True",
        ],
    ),
    (
        "reload-csi",
        &[
            "--enable-csi-integration",
            "--enable-csi-integration=true",
            "--enable-csi-integration=True",
        ],
    ),
];

fn rbac_data() -> Value {
    let all = "--controllers=copy,sync,reload,flux-trigger,protect";
    let policy = export(&[all, "--protect-mode=admission-policy"]);
    let with_flags = export(&[
        all,
        "--protect-mode=admission-policy",
        "--arg=--is-argo-rollouts",
        "--arg=--enable-csi-integration",
    ]);
    let webhook = export(&[all, "--protect-mode=webhook"]);
    let cluster_roles = |docs: &[Value]| -> Vec<(String, Value)> {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole")
            .map(|d| {
                let name = d["metadata"]["name"].as_str().expect("name");
                let name = name.strip_prefix("conflux-").expect("conflux- prefix");
                (name.to_owned(), d["rules"].clone())
            })
            .collect()
    };
    let role_rules = |docs: &[Value]| -> Vec<Value> {
        find(docs, "Role", "conflux-leader-election").expect("Role")["rules"]
            .as_array()
            .expect("rules")
            .clone()
    };
    let mut roles = serde_json::Map::new();
    let mut controllers = Vec::new();
    let webhook_roles: BTreeMap<String, Value> = cluster_roles(&webhook).into_iter().collect();
    for (name, rules) in cluster_roles(&policy) {
        if name != "common" {
            controllers.push(json!(name));
        }
        if name == "protect" {
            roles.insert("protect-admission-policy".to_owned(), rules);
            roles.insert("protect-webhook".to_owned(), webhook_roles[&name].clone());
        } else {
            assert_eq!(webhook_roles[&name], rules, "{name} depends on the mode");
            roles.insert(name, rules);
        }
    }
    let mut flag_roles = Vec::new();
    let flagged: BTreeMap<String, Value> = cluster_roles(&with_flags).into_iter().collect();
    for (name, flags) in RELOAD_FLAG_ROLES {
        let rules = flagged
            .get(name)
            .unwrap_or_else(|| panic!("the export has no ClusterRole conflux-{name}"));
        assert!(!roles.contains_key(name), "{name} exists without its flag");
        roles.insert(name.to_owned(), rules.clone());
        flag_roles.push(json!({"name": name, "flags": flags}));
    }
    assert_eq!(
        flagged.len(),
        roles.len() - 1,
        "every role the flags add is listed in RELOAD_FLAG_ROLES"
    );
    let election = role_rules(&export(&["--controllers=copy"]));
    let with_reload = role_rules(&policy);
    let with_webhook = role_rules(&webhook);
    assert_eq!(
        with_reload[..election.len()],
        election[..],
        "the reload controller adds rules after the Lease's"
    );
    assert_eq!(
        with_webhook[..with_reload.len()],
        with_reload[..],
        "the webhook mode adds rules after the reload controller's"
    );
    json!({
        "controllers": controllers,
        "clusterRoles": roles,
        "reloadFlagRoles": flag_roles,
        "role": {
            "leaderElection": election,
            "reload": with_reload[election.len()..],
            "webhook": with_webhook[with_reload.len()..],
        },
    })
}

fn check_generated(path: &Path, want: &str) {
    if std::env::var_os("CONFLUX_UPDATE_CHART").is_some() {
        std::fs::write(path, want).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale or missing: run `CONFLUX_UPDATE_CHART=1 cargo test -p conflux-operator --test chart`",
        path.display()
    );
}

#[test]
fn generated_chart_files_are_current() {
    for arg in ["configsync", "protectpolicy", "reloadpolicy"] {
        let crd = conflux(&["crd", arg]);
        assert!(crd.status.success());
        let crd = String::from_utf8(crd.stdout).expect("UTF-8");
        // `conflux crd`'s document, under a header that says how this copy is made.
        let body = crd
            .split_once("\n---\n")
            .map(|(_, body)| body)
            .expect("conflux crd prints a header, then the CRD");
        check_generated(
            &chart_dir().join(format!("crds/{arg}.yaml")),
            &format!(
                "# Generated from `conflux crd {arg}` by\n\
                 #   CONFLUX_UPDATE_CHART=1 cargo test -p conflux-operator --test chart\n\
                 # do not edit. Helm installs it before the chart's objects, and never upgrades or\n\
                 # deletes it (charts/conflux/README.md says why).\n---\n{body}"
            ),
        );
    }
    let body =
        conflux_postbuild_subst::yaml::emit::json_to_yaml(&rbac_data()).expect("rbac data as YAML");
    check_generated(
        &chart_dir().join("files/rbac.yaml"),
        &format!(
            "# Generated from `conflux install --export` by\n\
             #   CONFLUX_UPDATE_CHART=1 cargo test -p conflux-operator --test chart\n\
             # do not edit. The controllers in the order `--controllers` sorts them, the rules of\n\
             # each ClusterRole conflux-<name> (protect's by --protect-mode), the reload\n\
             # controller's roles that extraArgs flags turn on, and of the Role\n\
             # conflux-leader-election (and what the protect webhook adds to it).\n{body}"
        ),
    );
}
