//! `conflux install --export`: the committed kustomize base in deploy/ is exactly its default
//! output, and each controller's RBAC appears only when that controller runs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn conflux_install(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conflux"))
        .arg("install")
        .args(args)
        .output()
        .expect("run conflux install")
}

/// The documents of a successful `conflux install --export ...`.
fn export(args: &[&str]) -> Vec<Value> {
    let output = conflux_install(&[&["--export"], args].concat());
    assert!(
        output.status.success(),
        "conflux install --export failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    serde_saphyr::from_multiple(&text).expect("multi-document YAML")
}

fn kind_name(doc: &Value) -> (String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (s(&doc["kind"]), s(&doc["metadata"]["name"]))
}

/// Every (API group, resource, verb) granted by the ClusterRoles and Roles of `docs`.
fn grants(docs: &[Value]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in doc["rules"].as_array().expect("rules") {
            for group in rule["apiGroups"].as_array().expect("apiGroups") {
                for resource in rule["resources"].as_array().expect("resources") {
                    for verb in rule["verbs"].as_array().expect("verbs") {
                        out.push((
                            group.as_str().expect("group").to_owned(),
                            resource.as_str().expect("resource").to_owned(),
                            verb.as_str().expect("verb").to_owned(),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn granted(grants: &[(String, String, String)], group: &str, resource: &str, verb: &str) -> bool {
    grants
        .iter()
        .any(|(g, r, v)| g == group && r == resource && v == verb)
}

#[test]
fn committed_deploy_base_is_what_conflux_install_export_prints() {
    let output = conflux_install(&["--export"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let committed = std::fs::read_to_string(deploy.join("conflux.yaml")).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale or missing; regenerate it with\n  \
         cargo run -p conflux-operator --bin conflux -- install --export > deploy/conflux.yaml",
        deploy.join("conflux.yaml").display()
    );
    let kustomization =
        std::fs::read_to_string(deploy.join("kustomization.yaml")).unwrap_or_default();
    let kustomization: Value = serde_saphyr::from_str(&kustomization).expect("kustomization.yaml");
    assert_eq!(
        kustomization["resources"],
        serde_json::json!(["conflux.yaml"]),
        "deploy/kustomization.yaml lists the install manifests (and only them: the CRD is in them)"
    );
}

#[test]
fn default_export_is_in_dependency_order_with_everything_a_deployment_needs() {
    let docs = export(&[]);
    let kinds: Vec<String> = docs.iter().map(|d| kind_name(d).0).collect();
    let position = |kind: &str| {
        kinds
            .iter()
            .position(|k| k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    let order = [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ];
    for pair in order.windows(2) {
        assert!(
            position(pair[0]) < position(pair[1]),
            "{pair:?} in {kinds:?}"
        );
    }
    let roles: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .map(|d| kind_name(d).1)
        .collect();
    assert_eq!(
        roles,
        [
            "conflux-common",
            "conflux-copy",
            "conflux-sync",
            "conflux-reload",
            "conflux-flux-trigger"
        ]
    );

    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(deployment["metadata"]["namespace"], "conflux-system");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "conflux");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!("ghcr.io/conflux-dev/conflux:v{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        container["args"],
        serde_json::json!([
            "run",
            "--controllers=copy,sync,reload,flux-trigger",
            "--enable-leader-election",
            "--metrics-addr=:8080",
            "--health-addr=:9440"
        ])
    );
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(container["resources"]["requests"].is_object());
    assert!(container["resources"]["limits"].is_object());
    let env: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(env, ["RUNTIME_NAMESPACE", "POD_NAME"]);

    let pdb = docs
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .expect("PDB");
    assert_eq!(pdb["spec"]["minAvailable"], 1);

    // The run flags the Deployment passes all exist (parsed in-process, as `conflux run` would).
    let run_flags: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    use clap::Parser;
    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        args: conflux_operator::run::RunArgs,
    }
    let parsed = Run::try_parse_from(&run_flags).expect("the Deployment's flags parse");
    assert_eq!(parsed.args.controllers.len(), 4);
}

#[test]
fn only_the_controllers_turned_on_get_rules() {
    let all = grants(&export(&[]));
    let copy_docs = export(&[
        "--controllers=copy",
        "--namespace=ops",
        "--image=example/c:1",
    ]);
    let copy = grants(&copy_docs);

    // What copy needs: the shared watches, its writes, Events, the leader election Lease, and
    // the Namespaces watch (reflector's consent may select target namespaces by label).
    for (group, resource, verb) in [
        ("", "configmaps", "list"),
        ("", "secrets", "watch"),
        ("", "secrets", "get"),
        ("", "secrets", "patch"),
        ("", "configmaps", "create"),
        ("", "configmaps", "delete"),
        ("events.k8s.io", "events", "create"),
        ("coordination.k8s.io", "leases", "patch"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
    ] {
        assert!(
            granted(&copy, group, resource, verb),
            "copy lacks {verb} {group}/{resource}"
        );
    }
    // Nothing of reload, flux-trigger or sync.
    for (group, resource) in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "cronjobs"),
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("helm.toolkit.fluxcd.io", "helmreleases"),
        ("notification.toolkit.fluxcd.io", "receivers"),
        ("conflux.dev", "configsyncs"),
        ("conflux.dev", "configsyncs/status"),
    ] {
        assert!(
            !copy.iter().any(|(g, r, _)| g == group && r == resource),
            "--controllers=copy grants {group}/{resource}"
        );
        assert!(
            all.iter().any(|(g, r, _)| g == group && r == resource),
            "the default grants {group}/{resource}"
        );
    }
    let names: Vec<(String, String)> = copy_docs.iter().map(kind_name).collect();
    for (kind, name) in &names {
        assert!(
            kind == "CustomResourceDefinition"
                || !["reload", "flux-trigger", "sync"]
                    .iter()
                    .any(|c| name.contains(c)),
            "--controllers=copy has {kind} {name}"
        );
    }
    let deployment = copy_docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(deployment["metadata"]["namespace"], "ops");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example/c:1");
    assert_eq!(container["args"][1], "--controllers=copy");
    for binding in copy_docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        assert_eq!(binding["subjects"][0]["namespace"], "ops");
    }

    // Nothing anywhere grants a wildcard, escalation, impersonation or reads of pods.
    for (group, resource, verb) in &all {
        assert!(group != "*" && resource != "*" && verb != "*");
        assert!(!["escalate", "bind", "impersonate", "deletecollection"].contains(&verb.as_str()));
        assert!(resource != "pods" && resource != "nodes");
    }
}

#[test]
fn argo_rollouts_and_csi_rbac_only_with_their_flags() {
    let default = grants(&export(&[]));
    // Jobs are the reload controller's own (re-created to roll).
    for verb in ["get", "list", "watch", "patch", "create", "delete"] {
        assert!(granted(&default, "batch", "jobs", verb), "jobs {verb}");
    }
    let argo = ("argoproj.io", "rollouts");
    let csi = [
        (
            "secrets-store.csi.x-k8s.io",
            "secretproviderclasspodstatuses",
        ),
        ("secrets-store.csi.x-k8s.io", "secretproviderclasses"),
    ];
    for (group, resource) in csi.iter().chain([&argo]) {
        assert!(
            !default.iter().any(|(g, r, _)| g == group && r == resource),
            "the default grants {group}/{resource}"
        );
    }
    let on = grants(&export(&[
        "--arg=--is-argo-rollouts",
        "--arg=--enable-csi-integration=true",
    ]));
    for verb in ["list", "watch", "patch"] {
        assert!(granted(&on, argo.0, argo.1, verb), "rollouts {verb}");
    }
    assert!(!granted(&on, argo.0, argo.1, "update"));
    for (group, resource) in csi {
        for verb in ["list", "watch"] {
            assert!(granted(&on, group, resource, verb), "{resource} {verb}");
        }
        assert!(
            !granted(&on, group, resource, "patch"),
            "{resource} is only read"
        );
    }
    // Reloader's spelling grants it too; without the reload controller, nothing.
    assert!(granted(
        &grants(&export(&["--arg=--is-Argo-Rollouts=true"])),
        argo.0,
        argo.1,
        "patch"
    ));
    let copy_only = grants(&export(&["--controllers=copy", "--arg=--is-argo-rollouts"]));
    assert!(!copy_only.iter().any(|(g, _, _)| g == argo.0));
}

#[test]
fn extra_args_are_appended_to_conflux_run() {
    let docs = export(&["--arg=--reload-debounce=5s", "--arg", "--log-level=debug"]);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[5], "--reload-debounce=5s");
    assert_eq!(args[6], "--log-level=debug");
}

#[test]
fn install_without_export_is_a_usage_error() {
    let output = conflux_install(&[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("only --export is supported"), "{stderr}");
    assert!(
        stderr.contains("conflux install --export | kubectl apply -f -"),
        "{stderr}"
    );
}

/// The protect controller's RBAC and objects follow `--protect-mode`: the admission-policy mode
/// (the default) applies ValidatingAdmissionPolicies and has no webhook Service, port or
/// certificate Secret; the webhook mode the reverse. Each may delete, by name only, what the other
/// mode left. The Deployment passes the mode to `conflux run`, whose start-up checks accept it.
#[test]
fn protect_modes_get_their_own_rbac_and_webhook_objects() {
    use clap::Parser;
    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        args: conflux_operator::run::RunArgs,
    }
    let group = "admissionregistration.k8s.io";
    // (group, resource, verb, resourceNames) of every rule of the ClusterRole conflux-protect.
    let protect_rules = |docs: &[Value]| -> Vec<(String, String, String, Vec<String>)> {
        let role = docs
            .iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "conflux-protect")
            .expect("ClusterRole conflux-protect");
        let mut out = Vec::new();
        for rule in role["rules"].as_array().expect("rules") {
            let names: Vec<String> = rule["resourceNames"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            for g in rule["apiGroups"].as_array().expect("groups") {
                for r in rule["resources"].as_array().expect("resources") {
                    for v in rule["verbs"].as_array().expect("verbs") {
                        let s = |x: &Value| x.as_str().expect("string").to_owned();
                        out.push((s(g), s(r), s(v), names.clone()));
                    }
                }
            }
        }
        out
    };
    let has = |rules: &[(String, String, String, Vec<String>)], r: &str, v: &str| {
        rules
            .iter()
            .find(|(g, res, verb, _)| g == group && res == r && verb == v)
            .map(|(.., names)| names.clone())
    };
    let run_args = |docs: &[Value]| -> Vec<String> {
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("Deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let ports: Vec<&str> = container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        let mut args: Vec<String> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        args.push(format!("ports={}", ports.join(",")));
        args
    };
    let webhook_objects = |docs: &[Value]| {
        let service = docs
            .iter()
            .any(|d| d["kind"] == "Service" && d["metadata"]["name"] == "conflux-webhook");
        // The certificate Secret is replaced (update), which no copy does.
        let cert_secret = granted(&grants(docs), "", "secrets", "update");
        (service, cert_secret)
    };

    for args in [
        vec!["--controllers=copy,protect"],
        vec![
            "--controllers=copy,protect",
            "--protect-mode=admission-policy",
        ],
    ] {
        let docs = export(&args);
        let rules = protect_rules(&docs);
        for resource in [
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
        ] {
            for verb in ["create", "patch"] {
                assert_eq!(
                    has(&rules, resource, verb),
                    Some(vec![]),
                    "{verb} {resource}"
                );
            }
            assert_eq!(has(&rules, resource, "delete"), None);
        }
        assert_eq!(
            has(&rules, "validatingwebhookconfigurations", "delete"),
            Some(vec!["conflux-protect".to_owned()])
        );
        for verb in ["get", "create", "patch"] {
            assert_eq!(has(&rules, "validatingwebhookconfigurations", verb), None);
        }
        assert_eq!(webhook_objects(&docs), (false, false), "no webhook objects");
        let run = run_args(&docs);
        assert!(run.contains(&"--protect-mode=admission-policy".to_owned()));
        assert!(run.contains(&"ports=metrics,healthz".to_owned()), "{run:?}");
        let flags: Vec<&String> = run.iter().filter(|a| !a.starts_with("ports=")).collect();
        let parsed = Run::try_parse_from(&flags).expect("the Deployment's flags parse");
        let mut parsed = parsed.args;
        parsed.runtime_namespace = "conflux-system".to_owned();
        let plan = parsed.plan().expect("start-up checks pass");
        assert!(plan.protect.is_none() && plan.protect_policy.is_some());
    }

    let docs = export(&["--controllers=copy,protect", "--protect-mode=webhook"]);
    let rules = protect_rules(&docs);
    for verb in ["get", "create", "patch"] {
        assert_eq!(
            has(&rules, "validatingwebhookconfigurations", verb),
            Some(vec![])
        );
    }
    assert_eq!(
        has(&rules, "validatingadmissionpolicies", "delete"),
        Some(vec!["conflux-protect".to_owned()])
    );
    assert_eq!(
        has(&rules, "validatingadmissionpolicybindings", "delete"),
        Some(vec![
            "conflux-protect-sources".to_owned(),
            "conflux-protect-labelled".to_owned()
        ])
    );
    for verb in ["create", "patch"] {
        assert_eq!(has(&rules, "validatingadmissionpolicies", verb), None);
    }
    assert_eq!(webhook_objects(&docs), (true, true));
    let run = run_args(&docs);
    assert!(run.contains(&"--protect-mode=webhook".to_owned()));
    assert!(
        run.contains(&"ports=metrics,healthz,webhook".to_owned()),
        "{run:?}"
    );

    // Without protect, no mode is passed and nothing of either mode is granted.
    let docs = export(&["--controllers=copy"]);
    assert!(
        !run_args(&docs)
            .iter()
            .any(|a| a.starts_with("--protect-mode"))
    );
    assert!(!grants(&docs).iter().any(|(g, ..)| g == group));

    // The mode is install's flag, so that the RBAC matches it.
    let output = conflux_install(&[
        "--export",
        "--controllers=protect",
        "--arg=--protect-mode=webhook",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("conflux install --protect-mode"),
        "{stderr}"
    );
}
