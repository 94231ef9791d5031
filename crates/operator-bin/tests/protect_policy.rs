//! The protect controller's admission-policy mode end to end: conflux applies a
//! ValidatingAdmissionPolicy and its bindings, and the real API server evaluates the CEL for a
//! tenant who has `edit` in the source namespace, impersonated by the admin. Every verdict and
//! message is compared with the pure decision (`conflux_copy_core::protect::decide`) for the same request.
//!
//! conflux runs as the plain user `bob`, bound to exactly the ClusterRoles of `conflux install
//! --export` in this mode: its RBAC is proven too, and so is the policy's exemption of conflux's
//! own identity (bob is not `system:masters`, yet its unlabelling passes).

mod fault_support;

use std::collections::BTreeMap;
use std::time::Duration;

use conflux_copy_core::protect::{Operation, Policy, Request, Verdict, decide};
use conflux_tests::eventually;
use fault_support::Conflux;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-protect-policy-test";
const PROTECTED: &str = "protect.conflux.dev/protected";
const ENABLED: &str = "protect.conflux.dev/enabled";
const DEPENDENTS: &str = "protect.conflux.dev/dependents";
const WHILE_COPIED: &str = "protect.conflux.dev/while-copied";
const RULES: &str = "protect.conflux.dev/rules";
const EXEMPT_USERS: &str = "protect.conflux.dev/exempt-users";
const EXEMPT_GROUPS: &str = "protect.conflux.dev/exempt-groups";
/// The identities the tests allow with --protect-allow-users / --protect-allow-groups.
const ALLOWED_USER: &str = "carol";
const ALLOWED_GROUP: &str = "platform-admins";

async fn apply(client: &Client, object: Value) {
    conflux_tests::objects::apply(client, MANAGER, &object).await;
}

/// Server-side applies a cluster-scoped RBAC object (ClusterRole, ClusterRoleBinding).
async fn apply_cluster_rbac(client: &Client, object: &Value) {
    let kind = object["kind"].as_str().expect("kind");
    let plural = format!("{}s", kind.to_lowercase());
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
        &plural,
    );
    let name = object["metadata"]["name"].as_str().expect("name");
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// RFC 7386 merge patch of `patch` onto `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// Grants `bob` exactly the ClusterRoles `conflux install --export` gives every controller with
/// protect in admission-policy mode (the default).
async fn grant_bob_the_exported_cluster_roles(admin: &Client) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args([
            "install",
            "--export",
            "--controllers=copy,sync,reload,flux-trigger,protect",
        ])
        .output()
        .expect("conflux install --export");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert!(roles.iter().any(|r| {
        r["rules"].as_array().is_some_and(|rules| {
            rules.iter().any(|rule| {
                rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!("validatingadmissionpolicies")))
            })
        })
    }));
    for role in roles {
        apply_cluster_rbac(admin, role).await;
        let name = role["metadata"]["name"].as_str().expect("name");
        apply_cluster_rbac(
            admin,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": format!("{name}-bob")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}),
        )
        .await;
    }
}

/// The policy and its bindings, as applied by conflux, and the API server's type checking of the
/// CEL against the ConfigMap and Secret schemas (no warnings).
async fn assert_policy_in_place(admin: &Client) {
    let api = |kind: &str, plural: &str| {
        Api::<DynamicObject>::all_with(
            admin.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
                plural,
            ),
        )
    };
    let bindings = api(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    );
    for name in ["conflux-protect-sources", "conflux-protect-labelled"] {
        let binding = bindings.get(name).await.expect("binding");
        assert_eq!(binding.data["spec"]["validationActions"], json!(["Deny"]));
    }
    let policies = api("ValidatingAdmissionPolicy", "validatingadmissionpolicies");
    let status = eventually(
        "the policy type-checked",
        Duration::from_secs(60),
        || async {
            let policy = policies.get("conflux-protect").await.ok()?;
            let generation = policy.metadata.generation?;
            (policy.data["status"]["observedGeneration"] == generation)
                .then(|| policy.data["status"].clone())
        },
    )
    .await;
    let warnings = &status["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(|w| w.is_empty()),
        "type checking warnings: {warnings:#}"
    );
    // The webhook mode's registration is not there.
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(admin.clone());
    assert!(
        webhooks
            .get_opt("conflux-protect")
            .await
            .expect("read")
            .is_none()
    );
}

/// Compares one request's outcome on the API server with the pure decision for it: both allow,
/// or the API server's message ends with the decision's message, word for word.
struct Differential {
    policy: Policy,
}

impl Differential {
    fn check(
        &self,
        what: &str,
        user: &str,
        groups: &[&str],
        old: &Value,
        new: Option<&Value>,
        outcome: &str,
    ) {
        let groups: Vec<String> = groups
            .iter()
            .map(|g| (*g).to_owned())
            .chain(["system:authenticated".to_owned()])
            .collect();
        let request = Request {
            operation: if new.is_some() {
                Operation::Update
            } else {
                Operation::Delete
            },
            username: user,
            groups: &groups,
            kind: old["kind"].as_str().expect("kind"),
            namespace: old["metadata"]["namespace"].as_str().expect("namespace"),
            name: old["metadata"]["name"].as_str().expect("name"),
            old_object: Some(old),
            new_object: new,
        };
        match decide(&self.policy, &request) {
            Verdict::Allow => assert_eq!(outcome, "", "{what}: the decision allows"),
            Verdict::Deny { message } => {
                assert!(
                    outcome.contains("ValidatingAdmissionPolicy 'conflux-protect'"),
                    "{what}: {outcome}"
                );
                assert!(
                    outcome.ends_with(&message),
                    "{what}:\n  API server: {outcome}\n  decision:   {message}"
                );
            }
            _ => unreachable!(),
        }
        conflux_tests::leak::assert_clean(what, outcome);
    }
}

/// Waits until the API server enforces the policy on `name` (it loads policies and bindings
/// through an informer, a moment after they are written): a dry-run delete is refused.
async fn wait_enforced<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    eventually(
        &format!("the policy enforced on {name}"),
        Duration::from_secs(30),
        || async {
            (!conflux_tests::refusal(api.delete(name, &dry).await).is_empty()).then_some(())
        },
    )
    .await;
}

async fn object(api: &Api<Secret>, name: &str) -> Value {
    let mut value = serde_json::to_value(api.get(name).await.expect("get")).expect("JSON");
    value["kind"] = json!("Secret");
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_tenants_with_the_same_decision_and_message() {
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::config_sync_crd(),
    )
    .await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::protect_policy_crd(),
    )
    .await;
    let src = cluster.namespace(&admin, "vap-src").await;
    let dst = cluster.namespace(&admin, "vap-dst").await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": dst, "labels": {"protect-test": src}}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit", "namespace": src},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
    )
    .await;
    grant_bob_the_exported_cluster_roles(&admin).await;

    // conflux as bob, with the exported RBAC only; no webhook flag, no port.
    let mut conflux = Conflux::start_with(
        &cluster.kubeconfig_as("bob"),
        "protect-policy",
        &[
            "--controllers=protect",
            &format!("--protect-allow-users={ALLOWED_USER}"),
            &format!("--protect-allow-groups={ALLOWED_GROUP}"),
        ],
        &[],
    );
    conflux.wait_ready().await;
    assert_policy_in_place(&admin).await;

    let secret = |name: &str, annotations: Value, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": src, "annotations": annotations, "labels": labels},
               "stringData": conflux_tests::leak::string_data()})
    };
    apply(&admin, secret("fanned", json!({}), json!({}))).await;
    apply(
        &admin,
        secret(
            "pulled",
            // Consent, and (the owner's choice) protection while copied.
            json!({"copy.conflux.dev/allowed-namespaces": dst, WHILE_COPIED: "true"}),
            json!({}),
        ),
    )
    .await;
    apply(
        &admin,
        secret("opted-in", json!({}), json!({ENABLED: "true"})),
    )
    .await;
    apply(&admin, secret("free", json!({}), json!({}))).await;
    // The owner's protection with an exempt identity (alice): locked for everyone else.
    apply(
        &admin,
        secret(
            "owned",
            json!({EXEMPT_USERS: "alice"}),
            json!({ENABLED: "true"}),
        ),
    )
    .await;
    // A ProtectPolicy's rule as the labeller writes it (by hand here, without the dependents
    // annotation, so the labeller leaves it): DELETE only, alice exempt, a message first.
    apply(
        &admin,
        secret(
            "ruled",
            json!({RULES: "policy;ProtectPolicy/hand;DELETE;alice;;Hands off; really."}),
            json!({PROTECTED: "true"}),
        ),
    )
    .await;
    let sync_name = format!("{src}-fan");
    apply(
        &admin,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ConfigSync",
        "metadata": {"name": sync_name},
        "spec": {"source": {"kind": "Secret", "namespace": src, "name": "fanned"},
                 "target": {"namespaceSelector": {"matchLabels": {"protect-test": src}}}}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pulled", "namespace": dst,
                     "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{src}/pulled")}}}),
    )
    .await;
    // A ProtectPolicy (its CRD, watch, Namespace watch and status, with the exported RBAC).
    let policy_name = format!("{src}-policy");
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "guarded-by-policy", "namespace": dst}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ProtectPolicy",
               "metadata": {"name": policy_name},
               "spec": {"configs": {"kinds": ["ConfigMap"], "namespaces": [dst],
                                    "names": ["guarded-by-policy"],
                                    "namespaceSelector": {"matchLabels": {"protect-test": src}}}}}),
    )
    .await;
    let policies: Api<conflux_copy_core::ProtectPolicy> = Api::all(admin.clone());
    eventually(
        "the ProtectPolicy Ready",
        Duration::from_secs(60),
        || async {
            let p = policies.get(&policy_name).await.ok()?;
            let status = p.status?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            (ready.status == "True" && status.observed_generation == p.metadata.generation)
                .then_some(())
        },
    )
    .await;
    let dst_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &dst);
    eventually(
        "the policy's ConfigMap labelled",
        Duration::from_secs(60),
        || async {
            let cm = dst_cms.get("guarded-by-policy").await.ok()?;
            (cm.labels().get(PROTECTED).map(String::as_str) == Some("true")).then_some(())
        },
    )
    .await;
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .expect("delete ProtectPolicy");

    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), &src);
    for name in ["fanned", "pulled"] {
        eventually(
            &format!("{name} labelled protected"),
            Duration::from_secs(60),
            || async {
                let s = admin_secrets.get(name).await.ok()?;
                (s.labels().get(PROTECTED).map(String::as_str) == Some("true")).then_some(())
            },
        )
        .await;
    }

    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let secrets: Api<Secret> = Api::namespaced(alice.clone(), &src);
    let dp = DeleteParams::default();
    let pp = PatchParams::default();
    wait_enforced(&secrets, "opted-in").await;

    // The same assertions as the webhook's scenario, on real requests.
    let message = conflux_tests::refusal(secrets.delete("fanned", &dp).await);
    assert!(
        message.contains(&format!("ConfigSync/{sync_name}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("Secret {src}/fanned is protected")),
        "{message}"
    );
    assert!(message.contains("To unprotect it"), "{message}");
    eprintln!("the API server's denial: {message}");
    let message = conflux_tests::refusal(secrets.delete("pulled", &dp).await);
    assert!(
        message.contains(&format!("Secret/{dst}/pulled (copyFrom)")),
        "{message}"
    );
    let message = conflux_tests::refusal(secrets.delete("opted-in", &dp).await);
    assert!(message.contains(ENABLED), "{message}");
    let data = json!({"data": {"leak-raw": conflux_tests::leak::base64(b"changed")}});
    assert!(
        !conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&data)).await)
            .is_empty()
    );
    let label = json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}});
    assert_eq!(
        conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&label)).await),
        ""
    );
    let strip = json!({"metadata": {"labels": {PROTECTED: null}}});
    assert!(
        !conflux_tests::refusal(secrets.patch("fanned", &pp, &Patch::Merge(&strip)).await)
            .is_empty()
    );
    let fanned = admin_secrets.get("fanned").await.expect("fanned");
    assert_eq!(
        fanned.labels().get("team").map(String::as_str),
        Some("a"),
        "label edits pass"
    );
    assert_eq!(
        fanned.labels().get(PROTECTED).map(String::as_str),
        Some("true"),
        "the protection stays"
    );

    // Differential: many requests as dry runs (admission runs, nothing is stored), each compared
    // with the pure decision for the same old and new objects.
    let diff = Differential {
        policy: Policy {
            allow_users: vec![ALLOWED_USER.to_owned(), "bob".to_owned()],
            allow_groups: vec![ALLOWED_GROUP.to_owned()],
            ..Policy::default()
        },
    };
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let base64 = conflux_tests::leak::base64;
    let cases: Vec<(&str, &str, Option<Value>)> = vec![
        ("delete a ConfigSync source", "fanned", None),
        ("delete a copyFrom source", "pulled", None),
        ("delete an opted-in object", "opted-in", None),
        ("delete an unprotected object", "free", None),
        (
            "change data",
            "fanned",
            Some(json!({"data": {"leak-raw": base64(b"changed")}})),
        ),
        (
            "add a key",
            "opted-in",
            Some(json!({"data": {"new-key": base64(b"v")}})),
        ),
        (
            "remove a key",
            "pulled",
            Some(json!({"data": {"leak-raw": null}})),
        ),
        (
            "same data again",
            "fanned",
            Some(
                json!({"data": {"leak-raw": fanned.data.as_ref().and_then(|d| d.get("leak-raw")).map(|b| base64(&b.0))}}),
            ),
        ),
        ("immutable", "pulled", Some(json!({"immutable": true}))),
        (
            "immutable false",
            "pulled",
            Some(json!({"immutable": false})),
        ),
        (
            "labels and annotations",
            "opted-in",
            Some(json!({"metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}}})),
        ),
        (
            "remove the protected label",
            "pulled",
            Some(json!({"metadata": {"labels": {PROTECTED: null}}})),
        ),
        (
            "protected label to false",
            "fanned",
            Some(json!({"metadata": {"labels": {PROTECTED: "false"}}})),
        ),
        (
            "remove the dependents annotation",
            "fanned",
            Some(json!({"metadata": {"annotations": {DEPENDENTS: null}}})),
        ),
        (
            "change the dependents annotation",
            "pulled",
            Some(json!({"metadata": {"annotations": {DEPENDENTS: "nobody"}}})),
        ),
        (
            "remove the enabled label",
            "opted-in",
            Some(json!({"metadata": {"labels": {ENABLED: null}}})),
        ),
        (
            "opt in the enabled label by a second label",
            "fanned",
            Some(json!({"metadata": {"labels": {ENABLED: "true"}}})),
        ),
        (
            "data, immutable and both protections at once",
            "fanned",
            Some(
                json!({"immutable": true, "data": {"leak-raw": base64(b"x")},
                        "metadata": {"labels": {PROTECTED: null},
                                     "annotations": {DEPENDENTS: null}}}),
            ),
        ),
        (
            "opting in and changing data in one request (judged by the old object)",
            "free",
            Some(json!({"data": {"leak-raw": base64(b"x")},
                        "metadata": {"labels": {ENABLED: "true"}}})),
        ),
        // Exemptions: the owner's, and a ProtectPolicy's rule.
        ("delete an owned object", "owned", None),
        (
            "change an owned object's data",
            "owned",
            Some(json!({"data": {"leak-raw": base64(b"x")}})),
        ),
        (
            "withdraw the owner's label of a locked object",
            "owned",
            Some(json!({"metadata": {"labels": {ENABLED: null}}})),
        ),
        (
            "widen the owner's exemptions",
            "owned",
            Some(json!({"metadata": {"annotations": {EXEMPT_GROUPS: "tenants"}}})),
        ),
        ("delete under a policy rule", "ruled", None),
        (
            "change data under a DELETE-only rule",
            "ruled",
            Some(json!({"data": {"leak-raw": base64(b"x")}})),
        ),
        (
            "strip a policy rule's label",
            "ruled",
            Some(json!({"metadata": {"labels": {PROTECTED: null}}})),
        ),
        (
            "forge a rule",
            "ruled",
            Some(json!({"metadata": {"annotations": {RULES: "policy;x;;frank;;"}}})),
        ),
        (
            "ask for protection while copied",
            "free",
            Some(json!({"metadata": {"annotations": {WHILE_COPIED: "true"}}})),
        ),
    ];
    let identities: [(&str, &[&str]); 5] = [
        ("alice", &["tenants"]),
        ("frank", &["tenants"]),
        (ALLOWED_USER, &["tenants"]),
        ("dave", &["tenants", ALLOWED_GROUP]),
        ("erin", &["system:masters"]),
    ];
    for (user, groups) in identities {
        let client = conflux_tests::cluster().impersonating(user, groups).await;
        let api: Api<Secret> = Api::namespaced(client, &src);
        // Users other than alice have no RBAC in this namespace: grant them edit too.
        apply(
            &admin,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{user}-edit"), "namespace": src},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
        )
        .await;
        if user == ALLOWED_USER {
            // The API server loads a changed policy asynchronously: an earlier test's conflux
            // applied it with another allow list, so wait until this one's is in force.
            eventually(
                "the policy's allow list in force",
                Duration::from_secs(30),
                || async {
                    conflux_tests::refusal(api.delete("fanned", &dry_delete).await)
                        .is_empty()
                        .then_some(())
                },
            )
            .await;
        }
        for (what, name, patch) in &cases {
            let old = object(&admin_secrets, name).await;
            let (new, outcome) = match patch {
                None => (
                    None,
                    conflux_tests::refusal(api.delete(name, &dry_delete).await),
                ),
                Some(patch) => {
                    let mut new = old.clone();
                    merge(&mut new, patch);
                    let outcome = conflux_tests::refusal(
                        api.patch(name, &dry_patch, &Patch::Merge(patch)).await,
                    );
                    (Some(new), outcome)
                }
            };
            diff.check(
                &format!("{what} as {user}"),
                user,
                groups,
                &old,
                new.as_ref(),
                &outcome,
            );
        }
    }

    // The admin may do anything; conflux's own unlabelling passes (bob is exempt as conflux, not
    // as an admin): once the ConfigSync is gone, the tenant may delete the source.
    let admin_patch = json!({"data": {"leak-raw": conflux_tests::leak::base64(b"rotated")}});
    admin_secrets
        .patch("opted-in", &pp, &Patch::Merge(&admin_patch))
        .await
        .expect("admin may");
    admin_secrets
        .delete("opted-in", &dp)
        .await
        .expect("admin may");
    let syncs: Api<conflux_copy_core::ConfigSync> = Api::all(admin.clone());
    syncs
        .delete(&sync_name, &dp)
        .await
        .expect("delete ConfigSync");
    eventually(
        "protection removed by conflux",
        Duration::from_secs(60),
        || async {
            let s = admin_secrets.get("fanned").await.ok()?;
            (!s.labels().contains_key(PROTECTED) && !s.annotations().contains_key(DEPENDENTS))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        conflux_tests::refusal(secrets.delete("fanned", &dp).await),
        ""
    );
    // RBAC refusals only: the API server takes up a changed ValidatingAdmissionPolicy (here the
    // one naming bob as exempt, applied at start) a moment after it is written, and a labeller
    // write refused by the previous version in that moment is retried, as it should be.
    let log = conflux.log_text();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("forbidden") && !l.contains("ValidatingAdmissionPolicy"))
        .collect();
    assert!(
        refused.is_empty(),
        "conflux (bob, the exported RBAC) was refused something: {} line(s), log in target/fault-logs/protect-policy-*.log",
        refused.len()
    );
    assert!(log.contains("exempt_user=bob") || log.contains("\"exempt_user\":\"bob\""));

    // conflux stopped: the API server keeps enforcing; unprotected objects are never blocked.
    conflux.stop();
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), &src);
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "while-down", "namespace": src}}),
    )
    .await;
    assert_eq!(
        conflux_tests::refusal(
            cms.patch(
                "while-down",
                &pp,
                &Patch::Merge(&json!({"data": {"b": "1"}}))
            )
            .await
        ),
        ""
    );
    assert_eq!(
        conflux_tests::refusal(cms.delete("while-down", &dp).await),
        ""
    );
    let message = conflux_tests::refusal(secrets.delete("pulled", &dp).await);
    assert!(
        message.contains("is protected"),
        "a protected object stays protected while conflux is down: {message}"
    );
}

/// kube-system is spared by the policy's namespaceSelector alone (the CEL has no namespace
/// check): objects there labelled for protection can be deleted and changed by a tenant, while
/// the same objects elsewhere cannot. Switching to webhook mode then removes the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_system_is_never_protected_and_modes_replace_each_other() {
    let _serial = fault_support::serial().await;
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::config_sync_crd(),
    )
    .await;
    let other = cluster.namespace(&admin, "vap-ks").await;
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-policy-ks",
        &["--controllers=protect"],
        &[],
    );
    conflux.wait_ready().await;
    let suffix = std::process::id();
    for ns in ["kube-system", other.as_str()] {
        apply(
            &admin,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("alice-edit-{suffix}"), "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
        )
        .await;
    }
    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let pp = PatchParams::default();
    let dp = DeleteParams::default();
    let labels: BTreeMap<&str, &str> = BTreeMap::from([(PROTECTED, "true"), (ENABLED, "true")]);
    for ns in [other.as_str(), "kube-system"] {
        let name = format!("guarded-{suffix}");
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": ns, "labels": labels,
                                "annotations": {DEPENDENTS: "ConfigSync/x"}},
                   "data": {"a": "1"}}),
        )
        .await;
        let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), ns);
        if ns != "kube-system" {
            wait_enforced(&cms, &name).await;
        }
        let data = json!({"data": {"a": "2"}});
        let changed = conflux_tests::refusal(cms.patch(&name, &pp, &Patch::Merge(&data)).await);
        let deleted = conflux_tests::refusal(cms.delete(&name, &dp).await);
        if ns == "kube-system" {
            assert_eq!(changed, "", "kube-system is never protected");
            assert_eq!(deleted, "", "kube-system is never protected");
        } else {
            assert!(changed.contains("is protected"), "{changed}");
            assert!(deleted.contains("is protected"), "{deleted}");
        }
    }
    // A message the API server would not show (a line break from the annotation): the fixed
    // message instead, still a denial.
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "odd", "namespace": other, "labels": {PROTECTED: "true"},
                            "annotations": {DEPENDENTS: "first\nsecond"}}}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), &other);
    wait_enforced(&cms, "odd").await;
    let message = conflux_tests::refusal(cms.delete("odd", &dp).await);
    assert!(
        message.contains("this object is protected by conflux (label"),
        "{message}"
    );
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), "kube-system")
        .delete(&format!("alice-edit-{suffix}"), &dp)
        .await
        .expect("clean up");
    conflux.stop();

    // The webhook mode removes the policy once its webhook is registered.
    let port = conflux_tests::free_port();
    let system = cluster.namespace(&admin, "vap-webhook").await;
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-policy-to-webhook",
        &[
            "--controllers=protect",
            "--protect-mode=webhook",
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--webhook-url=https://127.0.0.1:{port}/validate"),
        ],
        &[("RUNTIME_NAMESPACE", system.as_str())],
    );
    conflux.wait_ready().await;
    let policies = Api::<DynamicObject>::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy",
            ),
            "validatingadmissionpolicies",
        ),
    );
    eventually("the policy removed", Duration::from_secs(60), || async {
        policies
            .get_opt("conflux-protect")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    conflux.stop();
    // And the admission-policy mode removes the webhook's registration (left behind, pointing at
    // a stopped process, it would block every protected object).
    let mut conflux = Conflux::start_with(
        cluster.kubeconfig(),
        "protect-webhook-to-policy",
        &["--controllers=protect"],
        &[],
    );
    conflux.wait_ready().await;
    assert_policy_in_place(&admin).await;
    conflux.stop();
}
