//! Protection decided by the owner or the platform, never by a consumer, end to end on a real API
//! server, in both modes (the ValidatingAdmissionPolicy and the webhook). Every refusal is compared
//! with the pure decision (`conflux_copy_core::protect::decide`) for the same request.
//!
//! This binary's cluster never gets the ConfigSync CRD: `--controllers=copy,protect` protects
//! `copyFrom` sources without it, and says once that ConfigSync-based protection is off.
//!
//! - Two tenants: alice owns namespace `y`, bob has `edit` in `x` only and pulls alice's Secret
//!   with `copyFrom`. A plain consent does not let bob freeze it: alice still rotates and deletes
//!   it, and bob's copy follows. When alice's consent also asks for protection (with herself
//!   exempt), dave (a third tenant with `edit` in `y`) is refused, and alice can still rotate it
//!   and withdraw the protection.
//! - A ProtectPolicy as the Kyverno import of `validate-secrets` / `protect-blogsecret` produces
//!   it: the ServiceAccount kyverno/kyverno may update the Secret, a tenant with `edit` may not
//!   and sees the policy's message first. A bad ProtectPolicy gets `Ready=False`, one Warning
//!   Event and one log line with a stable reason; a good one `Ready=True` with its generation.

mod fault_support;

use std::time::Duration;

use conflux_copy_core::protect::{Operation, Policy, Request, Verdict, decide};
use conflux_tests::{eventually, free_port};
use fault_support::Conflux;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "conflux-protect-tenants-test";
const PROTECTED: &str = "protect.conflux.dev/protected";
const RULES: &str = "protect.conflux.dev/rules";
const WHILE_COPIED: &str = "protect.conflux.dev/while-copied";
const EXEMPT_USERS: &str = "protect.conflux.dev/exempt-users";
const CONSENT: &str = "copy.conflux.dev/allowed-namespaces";
const KYVERNO_MESSAGE: &str = "This Secret is protected and may not be altered or deleted.";

#[derive(Clone, Copy, Debug)]
enum Mode {
    AdmissionPolicy,
    Webhook,
}

async fn apply(client: &Client, object: Value) {
    conflux_tests::objects::apply(client, MANAGER, &object).await;
}

async fn grant_edit(admin: &Client, user: &str, namespace: &str) {
    apply(
        admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{}-edit", user.replace(':', "-")), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await;
}

/// Deletes the ValidatingWebhookConfiguration an earlier webhook-mode test left: it points at a
/// stopped process and, with `failurePolicy: Fail`, would refuse every write of a labelled
/// object (as an admin uninstalling conflux's webhook mode does).
async fn remove_leftover_webhook(admin: &Client) {
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(admin.clone());
    match api
        .delete("conflux-protect", &DeleteParams::default())
        .await
    {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(other) => panic!("delete the webhook configuration: {other}"),
    }
}

/// conflux with `controllers` in `mode`, ready.
async fn start(mode: Mode, name: &str, controllers: &str) -> Conflux {
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    let mut args = vec![format!("--controllers={controllers}")];
    let mut env = Vec::new();
    let system;
    if let Mode::Webhook = mode {
        let port = free_port();
        system = cluster.namespace(&admin, "pt-system").await;
        args.push("--protect-mode=webhook".to_owned());
        args.push(format!("--webhook-addr=127.0.0.1:{port}"));
        args.push(format!("--webhook-url=https://127.0.0.1:{port}/validate"));
        env.push(("RUNTIME_NAMESPACE", system.as_str()));
    }
    // Started here rather than by `Conflux::start_with`, whose default controllers include
    // sync: exactly `controllers` run, so nothing else waits for the ConfigSync CRD.
    let (metrics_port, health_port) = (free_port(), free_port());
    let dir = conflux_tests::repo_root().join("target/fault-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    let log = dir.join(format!("{name}-{}.log", std::process::id()));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args([
            "run",
            "--log-encoding=console",
            "--log-level=debug",
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--health-addr=127.0.0.1:{health_port}"),
        ])
        .args(&args)
        .env("RUNTIME_NAMESPACE", fault_support::runtime_namespace())
        .envs(env.iter().copied())
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start conflux");
    let mut conflux = Conflux::adopt(child, metrics_port, health_port, log);
    conflux.wait_ready().await;
    conflux
}

/// The Secret as the API server has it, with its kind (for the decision).
async fn object(api: &Api<Secret>, name: &str) -> Value {
    let mut value = serde_json::to_value(api.get(name).await.expect("get")).expect("JSON");
    value["kind"] = json!("Secret");
    value
}

/// The pure decision's message for `user` doing what gave `outcome` (a DELETE when `new` is
/// `None`); asserts the API server's answer is the same: allowed, or ending with that message.
fn same_as_decision(
    user: &str,
    groups: &[&str],
    old: &Value,
    new: Option<&Value>,
    outcome: &str,
) -> String {
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
        kind: "Secret",
        namespace: old["metadata"]["namespace"].as_str().expect("namespace"),
        name: old["metadata"]["name"].as_str().expect("name"),
        old_object: Some(old),
        new_object: new,
    };
    conflux_tests::leak::assert_clean(user, outcome);
    match decide(&Policy::default(), &request) {
        Verdict::Allow => {
            assert_eq!(outcome, "", "{user}: the decision allows");
            String::new()
        }
        Verdict::Deny { message } => {
            assert!(
                outcome.ends_with(&message),
                "{user}:\n  API server: {outcome}\n  decision:   {message}"
            );
            message
        }
        _ => unreachable!(),
    }
}

/// Waits until the API server enforces protection on `name` for `api`'s user: a dry-run delete
/// is refused (policies and webhooks are loaded a moment after they are written).
async fn wait_enforced(api: &Api<Secret>, name: &str) {
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    eventually(
        &format!("protection enforced on {name}"),
        Duration::from_secs(60),
        || async {
            (!conflux_tests::refusal(api.delete(name, &dry).await).is_empty()).then_some(())
        },
    )
    .await;
}

/// The value of `key` in a copy's data once it equals `want`.
async fn wait_copy(api: &Api<Secret>, name: &str, want: &[u8]) {
    eventually(
        &format!("copy {name} has the source's data"),
        Duration::from_secs(60),
        || async {
            let s = api.get(name).await.ok()?;
            let data = s.data?;
            (data.get("leak-raw").map(|b| b.0.as_slice()) == Some(want)).then_some(())
        },
    )
    .await;
}

async fn two_tenants(mode: Mode) {
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    remove_leftover_webhook(&admin).await;
    let y = cluster.namespace(&admin, "pt-y").await;
    let x = cluster.namespace(&admin, "pt-x").await;
    grant_edit(&admin, "alice", &y).await;
    grant_edit(&admin, "dave", &y).await;
    grant_edit(&admin, "bob", &x).await;
    let alice = conflux_tests::cluster()
        .impersonating("alice", &["tenants"])
        .await;
    let bob = conflux_tests::cluster()
        .impersonating("bob", &["tenants"])
        .await;
    let dave = conflux_tests::cluster()
        .impersonating("dave", &["tenants"])
        .await;
    // An upgrade: `legacy` was labelled by an earlier conflux (its field manager) only because
    // bob pulls it, without a rules annotation; alice asked for nothing, so the labeller
    // unprotects it.
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "legacy", "namespace": y, "annotations": {CONSENT: x}},
               "data": {"leak-raw": conflux_tests::leak::base64(b"v1")}}),
    )
    .await;
    conflux_tests::objects::apply(
        &admin,
        "conflux-protect",
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "legacy", "namespace": y,
                             "labels": {PROTECTED: "true"},
                             "annotations": {"protect.conflux.dev/dependents": format!("Secret/{x}/legacy (copyFrom)")}}}),
    )
    .await;
    apply(
        &bob,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "legacy", "namespace": x,
                            "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{y}/legacy")}}}),
    )
    .await;
    let name = format!("{mode:?}").to_lowercase();
    let mut conflux = start(mode, &format!("pt-tenants-{name}"), "copy,protect").await;
    let admin_y: Api<Secret> = Api::namespaced(admin.clone(), &y);
    eventually(
        "the legacy protection removed",
        Duration::from_secs(60),
        || async {
            let s = admin_y.get("legacy").await.ok()?;
            (!s.labels().contains_key(PROTECTED)).then_some(())
        },
    )
    .await;
    let log = conflux.log_text();
    assert!(
        log.contains("CrdMissing") && log.contains("ConfigSync"),
        "the missing ConfigSync CRD is said once"
    );
    assert!(
        conflux
            .metrics()
            .contains("conflux_protect_crd_missing{kind=\"ConfigSync\"} 1"),
        "{}",
        conflux.metrics()
    );

    let base64 = conflux_tests::leak::base64;
    let alice_secrets: Api<Secret> = Api::namespaced(alice.clone(), &y);
    let dave_secrets: Api<Secret> = Api::namespaced(dave.clone(), &y);
    let bob_secrets: Api<Secret> = Api::namespaced(bob.clone(), &x);
    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), &y);
    let pp = PatchParams::default();
    let dp = DeleteParams::default();

    // alice consents to copies of `s` into x; bob pulls it.
    let source = |name: &str, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": y, "annotations": annotations},
               "data": {"leak-raw": base64(b"v1"),
                        "leak-pem": base64(conflux_tests::leak::pem().as_bytes())}})
    };
    let copy = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": x,
                            "annotations": {"fluxcd.controlplane.io/copyFrom": format!("{y}/{name}")}}})
    };
    apply(&alice, source("s", json!({CONSENT: x}))).await;
    apply(&bob, copy("s")).await;
    wait_copy(&bob_secrets, "s", b"v1").await;

    // alice also consents to `p`, asking for protection while it is copied, herself exempt.
    apply(
        &alice,
        source(
            "p",
            json!({CONSENT: x, WHILE_COPIED: "true", EXEMPT_USERS: "alice"}),
        ),
    )
    .await;
    apply(&bob, copy("p")).await;
    wait_copy(&bob_secrets, "p", b"v1").await;
    eventually("p protected", Duration::from_secs(60), || async {
        let s = admin_secrets.get("p").await.ok()?;
        (s.labels().get(PROTECTED).map(String::as_str) == Some("true")).then_some(())
    })
    .await;
    // The labeller handled bob's copies: `s`, whose owner asked for nothing, is not protected.
    let s = admin_secrets.get("s").await.expect("s");
    assert!(
        !s.labels().contains_key(PROTECTED),
        "a consumer froze a source: {:?}",
        s.labels()
    );

    // alice rotates and later deletes `s`; bob's copy follows the rotation.
    let rotate = |v: &[u8]| json!({"data": {"leak-raw": base64(v)}});
    assert_eq!(
        conflux_tests::refusal(
            alice_secrets
                .patch("s", &pp, &Patch::Merge(&rotate(b"v2")))
                .await
        ),
        ""
    );
    wait_copy(&bob_secrets, "s", b"v2").await;

    // `p`: dave may neither delete, rotate nor withdraw the protection; each refusal is the
    // decision's, names why and the ways out.
    wait_enforced(&dave_secrets, "p").await;
    let old = object(&admin_secrets, "p").await;
    let outcome = conflux_tests::refusal(dave_secrets.delete("p", &dp).await);
    let message = same_as_decision("dave", &["tenants"], &old, None, &outcome);
    assert!(
        message.contains(&format!("while copied by Secret/{x}/p (copyFrom)")),
        "{message}"
    );
    assert!(
        message.contains("ask an identity its owner exempts (alice)"),
        "{message}"
    );
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    for patch in [
        rotate(b"dave"),
        json!({"metadata": {"annotations": {WHILE_COPIED: null}}}),
        json!({"metadata": {"annotations": {EXEMPT_USERS: "alice,dave"}}}),
        json!({"metadata": {"labels": {PROTECTED: null}}}),
    ] {
        let mut new = old.clone();
        merge(&mut new, &patch);
        let outcome =
            conflux_tests::refusal(dave_secrets.patch("p", &dry, &Patch::Merge(&patch)).await);
        assert!(!outcome.is_empty(), "dave may not {patch}");
        same_as_decision("dave", &["tenants"], &old, Some(&new), &outcome);
    }
    // bob cannot touch y at all (RBAC), so nothing he did froze alice.
    let bob_in_y: Api<Secret> = Api::namespaced(bob.clone(), &y);
    assert!(conflux_tests::refusal(bob_in_y.delete("p", &dp).await).contains("forbidden"));

    // alice rotates `p` (exempt), bob's copy follows; then she withdraws the protection and
    // deletes both her Secrets.
    assert_eq!(
        conflux_tests::refusal(
            alice_secrets
                .patch("p", &pp, &Patch::Merge(&rotate(b"v3")))
                .await
        ),
        ""
    );
    wait_copy(&bob_secrets, "p", b"v3").await;
    let withdraw = json!({"metadata": {"annotations": {WHILE_COPIED: null}}});
    assert_eq!(
        conflux_tests::refusal(
            alice_secrets
                .patch("p", &pp, &Patch::Merge(&withdraw))
                .await
        ),
        ""
    );
    eventually("p unprotected", Duration::from_secs(60), || async {
        let s = admin_secrets.get("p").await.ok()?;
        (!s.labels().contains_key(PROTECTED) && !s.annotations().contains_key(RULES)).then_some(())
    })
    .await;
    assert_eq!(
        conflux_tests::refusal(alice_secrets.delete("p", &dp).await),
        ""
    );
    assert_eq!(
        conflux_tests::refusal(alice_secrets.delete("s", &dp).await),
        ""
    );
    assert!(
        !conflux.log_text().contains("forbidden"),
        "conflux was refused something"
    );
    let metrics = conflux.metrics();
    conflux.stop();
    conflux_tests::leak::assert_clean("metrics", &metrics);
    conflux_tests::leak::assert_clean("log", &conflux.log_text());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_never_freezes_a_source_admission_policy() {
    let _serial = fault_support::serial().await;
    two_tenants(Mode::AdmissionPolicy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_never_freezes_a_source_webhook() {
    let _serial = fault_support::serial().await;
    two_tenants(Mode::Webhook).await;
}

async fn kyverno_import(mode: Mode) {
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    conflux_tests::objects::install_crd(
        &admin,
        MANAGER,
        &conflux_tests::objects::protect_policy_crd(),
    )
    .await;
    remove_leftover_webhook(&admin).await;
    let platform = cluster.namespace(&admin, "platform").await;
    let kyverno_sa = "system:serviceaccount:kyverno:kyverno";
    grant_edit(&admin, "carol", &platform).await;
    grant_edit(&admin, kyverno_sa, &platform).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "blogsecret", "namespace": platform},
               "data": {"leak-raw": conflux_tests::leak::base64(b"v1"),
                        "leak-pem": conflux_tests::leak::base64(conflux_tests::leak::pem().as_bytes())}}),
    )
    .await;
    let name = format!("{mode:?}").to_lowercase();
    let mut conflux = start(mode, &format!("pt-kyverno-{name}"), "protect").await;

    // What the import of validate-secrets / protect-blogsecret produces (clusterRoles are not
    // expressible; system:masters is always allowed).
    let policy_name = format!("validate-secrets-protect-blogsecret-{name}");
    apply(
        &admin,
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ProtectPolicy",
               "metadata": {"name": policy_name,
                            "annotations": {"import.conflux.dev/source": "kyverno.io/v1 ClusterPolicy validate-secrets, rule protect-blogsecret"}},
               "spec": {"configs": {"kinds": ["Secret"], "namespaces": [platform], "names": ["blogsecret"]},
                        "operations": ["UPDATE", "DELETE"],
                        "exclude": {"serviceAccounts": [{"namespace": "kyverno", "name": "kyverno"}]},
                        "message": KYVERNO_MESSAGE}}),
    )
    .await;
    let policies: Api<conflux_copy_core::ProtectPolicy> = Api::all(admin.clone());
    eventually("the policy Ready", Duration::from_secs(60), || async {
        let p = policies.get(&policy_name).await.ok()?;
        let status = p.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "True" && status.observed_generation == p.metadata.generation)
            .then_some(())
    })
    .await;
    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), &platform);
    eventually("blogsecret protected", Duration::from_secs(60), || async {
        let s = admin_secrets.get("blogsecret").await.ok()?;
        (s.labels().get(PROTECTED).map(String::as_str) == Some("true")).then_some(())
    })
    .await;

    let carol: Api<Secret> = Api::namespaced(
        conflux_tests::cluster()
            .impersonating("carol", &["tenants"])
            .await,
        &platform,
    );
    let kyverno: Api<Secret> = Api::namespaced(
        conflux_tests::cluster()
            .impersonating(
                kyverno_sa,
                &["system:serviceaccounts", "system:serviceaccounts:kyverno"],
            )
            .await,
        &platform,
    );
    wait_enforced(&carol, "blogsecret").await;
    let pp = PatchParams::default();
    let rotate = json!({"data": {"leak-raw": conflux_tests::leak::base64(b"v2")}});
    let old = object(&admin_secrets, "blogsecret").await;
    let mut new = old.clone();
    merge(&mut new, &rotate);
    let outcome =
        conflux_tests::refusal(carol.patch("blogsecret", &pp, &Patch::Merge(&rotate)).await);
    let message = same_as_decision("carol", &["tenants"], &old, Some(&new), &outcome);
    assert!(message.starts_with(KYVERNO_MESSAGE), "{message}");
    assert!(
        message.contains(&format!(
            "ask the platform to change ProtectPolicy/{policy_name}"
        )),
        "{message}"
    );
    let outcome =
        conflux_tests::refusal(carol.delete("blogsecret", &DeleteParams::default()).await);
    same_as_decision("carol", &["tenants"], &old, None, &outcome);
    assert!(outcome.contains(KYVERNO_MESSAGE), "{outcome}");
    assert_eq!(
        conflux_tests::refusal(
            kyverno
                .patch("blogsecret", &pp, &Patch::Merge(&rotate))
                .await
        ),
        "",
        "the exempt ServiceAccount may update it"
    );

    // A bad policy: Ready=False with a stable reason, one Warning Event, one log line; touching
    // it again repeats neither.
    let bad = format!("bad-{name}");
    let bad_policy = |touch: &str| {
        json!({"apiVersion": "conflux.dev/v1alpha1", "kind": "ProtectPolicy",
               "metadata": {"name": bad, "labels": {"touch": touch}},
               "spec": {"operations": ["CREATE"]}})
    };
    apply(&admin, bad_policy("1")).await;
    eventually(
        "the bad policy not Ready",
        Duration::from_secs(60),
        || async {
            let p = policies.get(&bad).await.ok()?;
            let status = p.status?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            (ready.status == "False"
                && ready.reason == "InvalidOperation"
                && status.observed_generation == p.metadata.generation)
                .then_some(())
        },
    )
    .await;
    apply(&admin, bad_policy("2")).await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(admin.clone());
    let warnings = || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(bad.as_str())
                    && e.reason.as_deref() == Some("InvalidOperation")
            })
            .count()
    };
    eventually("one Warning Event", Duration::from_secs(30), || async {
        (warnings().await >= 1).then_some(())
    })
    .await;
    // Let the watch deliver the second write (its status stays as it was).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(warnings().await, 1, "one Warning Event for the bad policy");
    let log = conflux.log_text();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains("InvalidOperation") && l.contains(&bad))
            .count(),
        1,
        "one log line"
    );
    conflux_tests::leak::assert_clean("log", &log);
    policies
        .delete(&bad, &DeleteParams::default())
        .await
        .expect("delete");
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .expect("delete");
    eventually(
        "blogsecret unprotected",
        Duration::from_secs(60),
        || async {
            let s = admin_secrets.get("blogsecret").await.ok()?;
            (!s.labels().contains_key(PROTECTED)).then_some(())
        },
    )
    .await;
    let metrics = conflux.metrics();
    conflux.stop();
    conflux_tests::leak::assert_clean("metrics", &metrics);
    conflux_tests::leak::assert_clean("log", &conflux.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kyverno_import_exempts_its_service_account_admission_policy() {
    let _serial = fault_support::serial().await;
    kyverno_import(Mode::AdmissionPolicy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kyverno_import_exempts_its_service_account_webhook() {
    let _serial = fault_support::serial().await;
    kyverno_import(Mode::Webhook).await;
}
