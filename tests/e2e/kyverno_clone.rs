//! Kyverno's clone + synchronize conformance scenarios (kyverno/kyverno
//! `test/conformance/chainsaw/generate/`), ported to conflux's `ConfigSync` where conflux claims the
//! behaviour. docs/kyverno-conformance.md lists every Kyverno clone scenario and what became of it.
//!
//! Each ported scenario keeps the Kyverno `ClusterPolicy` it came from as a `const` YAML string next
//! to the `ConfigSync` that `conflux import kyverno` makes of it (the mapping of
//! docs/kyverno-conformance.md), so that the converter can be checked against them:
//! `import(POLICY) == CONFIG_SYNC` for every pair of [`PORTED`]. The ConfigSync is applied as
//! written, plus the test's shard label (`sharding.fluxcd.io/key`), which the converter does not
//! write.
//!
//! Where the upstream policy matched every Namespace, the ported policy also has a namespace
//! `selector` (`kyverno-clone.conflux.dev/scenario`) so that the tests of this binary, which share
//! one cluster and run in parallel, do not copy into each other's namespaces; one test
//! ([`cpol_clone_sync_create`]) keeps the match on every Namespace. Policies are written as
//! `kyverno.io/v1` (upstream has some as `v2beta1`; the generate rule is the same in both) and
//! variables from `context` are written out.
//!
//! conflux runs in-process as `conflux run --controllers copy,sync` runs it (the copy and sync
//! controllers on one runtime), scoped to the test's shard like `--watch-label-selector`. Secret
//! values here are fake, and assertions never print Secret data.

mod copy_support;

use std::collections::BTreeMap;
use std::time::Duration;

use conflux_tests::{cluster, eventually, label_namespace};
use copy_support::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const OWNER: &str = "copy.conflux.dev/config-sync";
const SOURCE: &str = "copy.conflux.dev/source";
const ORPHANED: &str = "copy.conflux.dev/orphaned";
/// The namespace label the ported policies select on, so that tests stay out of each other's way.
const SCENARIO: &str = "kyverno-clone.conflux.dev/scenario";
/// The annotation the converter writes on each ConfigSync, naming the policy and rule.
const IMPORT_SOURCE: &str = "import.conflux.dev/source";

/// Every ported scenario: (Kyverno policy, the ConfigSyncs `conflux import kyverno` makes of it,
/// one per rule in order).
const PORTED: &[(&str, &[&str])] = &[
    (CPOL_CLONE_SYNC_CREATE, &[CPOL_CLONE_SYNC_CREATE_SYNC]),
    (
        CPOL_CLONE_SYNC_DELETE_DOWNSTREAM,
        &[CPOL_CLONE_SYNC_DELETE_DOWNSTREAM_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM,
        &[CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_APPLY,
        &[CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_APPLY_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_MODIFY_SOURCE,
        &[CPOL_CLONE_SYNC_MODIFY_SOURCE_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_SINGLE_SOURCE_MULTIPLE_TRIGGERS_TARGETS,
        &[CPOL_CLONE_SYNC_SINGLE_SOURCE_MULTIPLE_TRIGGERS_TARGETS_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_1,
        &[CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_1_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_2,
        &[CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_2_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_DELETE_SOURCE,
        &[CPOL_CLONE_SYNC_DELETE_SOURCE_SYNC],
    ),
    (
        CLONE_SOURCE_MANAGED_BY_LABEL_HELM,
        &[CLONE_SOURCE_MANAGED_BY_LABEL_HELM_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_DELETE_RULE,
        &[
            CPOL_CLONE_SYNC_DELETE_RULE_SECRET_SYNC,
            CPOL_CLONE_SYNC_DELETE_RULE_CM_SYNC,
        ],
    ),
    (
        CPOL_CLONE_SYNC_UPDATE_TRIGGER_NO_MATCH,
        &[CPOL_CLONE_SYNC_UPDATE_TRIGGER_NO_MATCH_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_CREATE_SOURCE_AFTER_POLICY,
        &[CPOL_CLONE_SYNC_CREATE_SOURCE_AFTER_POLICY_SYNC],
    ),
    (
        CLONE_SOURCE_NAME_EXCEEDS_63_CHARACTERS,
        &[CLONE_SOURCE_NAME_EXCEEDS_63_CHARACTERS_SYNC],
    ),
    (
        CPOL_CLONE_DELETE_OWNERREFERENCES_ACROSS_NAMESPACES,
        &[CPOL_CLONE_DELETE_OWNERREFERENCES_ACROSS_NAMESPACES_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_REINSTALL_POLICY,
        &[CPOL_CLONE_SYNC_REINSTALL_POLICY_SYNC],
    ),
    (
        CPOL_CLONE_SYNC_EXISTING_DOWNSTREAM,
        &[CPOL_CLONE_SYNC_EXISTING_DOWNSTREAM_SYNC],
    ),
];

// ---------------------------------------------------------------------------------------------
// Helpers

/// Parses a YAML manifest of this file.
fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("a manifest of this file: {e}"))
}

/// Creates the ConfigSync `manifest` (as the converter writes it) labelled with the test's shard,
/// and returns its name.
async fn create_sync(client: &Client, shard: &str, manifest: &str) -> String {
    let mut object = yaml(manifest);
    object["metadata"]["labels"] = json!({SHARD: shard});
    let sync: conflux_copy_core::ConfigSync =
        serde_json::from_value(object).unwrap_or_else(|e| panic!("a ConfigSync: {e}"));
    let name = sync.metadata.name.clone().unwrap_or_default();
    Api::<conflux_copy_core::ConfigSync>::all(client.clone())
        .create(&PostParams::default(), &sync)
        .await
        .unwrap_or_else(|e| panic!("create ConfigSync {name}: {e}"));
    name
}

/// Deletes a ConfigSync and waits until it is gone (its finalizer released).
async fn delete_sync(client: &Client, name: &str) {
    Api::<conflux_copy_core::ConfigSync>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete ConfigSync {name}: {e}"));
    eventually(
        &format!("ConfigSync {name} is gone (finalizer released)"),
        WAIT,
        || async { config_sync(client, name).await.is_none().then_some(()) },
    )
    .await;
}

/// A namespace of a scenario, labelled so that the scenario's policy matches it.
async fn scenario_namespace(client: &Client, name: &str, scenario: &str) -> String {
    named_namespace(client, name, &[(SCENARIO, scenario)]).await
}

/// An Opaque Secret with fake data, as the Kyverno scenarios write them.
fn opaque(name: &str, data: &[(&str, &str)]) -> Value {
    let data: BTreeMap<&str, String> = data.iter().map(|(k, v)| (*k, b64(v))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "type": "Opaque", "data": data})
}

/// A ConfigMap with data.
fn config(name: &str, data: &[(&str, &str)]) -> Value {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// Waits until the Secret `ns/name` holds exactly `want`, and returns it.
async fn wait_secret_holding(
    client: &Client,
    ns: &str,
    name: &str,
    want: &[(&str, &str)],
) -> Secret {
    let want = bytes(want);
    eventually(
        &format!("Secret {ns}/{name} with the expected data"),
        WAIT,
        || async {
            let s = secret(client, ns, name).await?;
            (secret_data(&s) == want).then_some(s)
        },
    )
    .await
}

/// Waits until there is no Secret `ns/name`.
async fn wait_no_secret(client: &Client, ns: &str, name: &str) {
    eventually(&format!("no Secret {ns}/{name}"), WAIT, || async {
        secret(client, ns, name).await.is_none().then_some(())
    })
    .await;
}

/// Waits until the ConfigSync's `Ready` condition has `reason`, and returns its status.
async fn wait_ready_reason(client: &Client, name: &str, reason: &str) -> String {
    eventually(
        &format!("ConfigSync {name} Ready with reason {reason}"),
        WAIT,
        || async {
            let (status, r, _) = ready(client, name).await?;
            (r == reason).then_some(status)
        },
    )
    .await
}

/// Gives conflux time to do what it must not: tests never assert wall-clock limits, but a
/// "stays absent" or "stays as is" check must wait a little before looking (Kyverno's scenarios
/// sleep 3 s for the same reason).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

// ---------------------------------------------------------------------------------------------
// The manifests are pure data: they parse, and each ConfigSync names the rule it came from.

/// `conflux import kyverno` writes exactly the ConfigSyncs these tests apply (without the tests'
/// shard label), one per rule, from every ported policy.
#[test]
fn the_importer_writes_the_ported_manifests() {
    for (policy, syncs) in PORTED {
        let import = conflux_install::kyverno::import_text(policy).expect("the policy imports");
        let wanted: Vec<Value> = syncs.iter().map(|s| yaml(s)).collect();
        assert_eq!(import.objects, wanted, "{}", import.findings.len());
        assert_eq!(import.unconverted(), 0, "{:?}", import.findings);
    }
}

/// Every ported policy parses, and each of its ConfigSyncs parses as a ConfigSync named
/// `<policy>-<rule>` with the converter's `import.conflux.dev/source` annotation, one per rule.
#[test]
fn ported_manifests_are_the_mapping_of_their_policies() {
    for (policy, syncs) in PORTED {
        let policy = yaml(policy);
        assert_eq!(policy["kind"], "ClusterPolicy");
        assert_eq!(policy["apiVersion"], "kyverno.io/v1");
        let name = policy["metadata"]["name"].as_str().expect("policy name");
        let rules = policy["spec"]["rules"].as_array().expect("rules");
        assert_eq!(
            rules.len(),
            syncs.len(),
            "one ConfigSync per rule of {name}"
        );
        for (rule, sync) in rules.iter().zip(syncs.iter()) {
            let rule_name = rule["name"].as_str().expect("rule name");
            let generate = &rule["generate"];
            assert_eq!(generate["synchronize"], true, "{name}: synchronize");
            let sync: conflux_copy_core::ConfigSync = serde_json::from_value(yaml(sync))
                .unwrap_or_else(|e| panic!("the ConfigSync of {name}: {e}"));
            assert_eq!(
                sync.metadata.name.as_deref(),
                Some(format!("{name}-{rule_name}").to_lowercase().as_str())
            );
            assert_eq!(
                sync.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(IMPORT_SOURCE))
                    .map(String::as_str),
                Some(format!("kyverno.io/v1 ClusterPolicy {name}, rule {rule_name}").as_str())
            );
            let spec = &sync.spec;
            assert_eq!(generate["kind"], spec.source.kind.as_str(), "{name}: kind");
            assert_eq!(generate["clone"]["namespace"], spec.source.namespace);
            assert_eq!(generate["clone"]["name"], spec.source.name);
            assert_eq!(generate["name"], spec.target_name(), "{name}: target name");
            assert_eq!(
                generate["namespace"], "{{request.object.metadata.name}}",
                "{name}: one copy per matching Namespace"
            );
            assert!(spec.prune, "{name}: prune");
            assert_eq!(
                spec.deletion_policy,
                conflux_copy_core::config_sync::DeletionPolicy::Orphan
            );
            assert_eq!(
                spec.conflict_policy,
                conflux_copy_core::config_sync::ConflictPolicy::Adopt,
                "{name}: Kyverno overwrites a pre-existing downstream object"
            );
            assert!(
                spec.target
                    .exclude_namespaces
                    .iter()
                    .any(|n| n == "kyverno"),
                "{name}: Kyverno's own namespace is excluded"
            );
            let resources = &rule["match"]["any"][0]["resources"];
            assert_eq!(resources["kinds"], json!(["Namespace"]));
            let selector =
                serde_json::to_value(&spec.target.namespace_selector).expect("selector as JSON");
            assert_eq!(
                resources["selector"], selector,
                "{name}: namespace selector"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-create

/// kyverno/kyverno `test/conformance/chainsaw/generate/clusterpolicy/standard/clone/sync/cpol-clone-sync-create`
/// (policy `cpol-sync-clone` there; the Secret is `regcred` there, renamed here because this
/// policy matches every Namespace of the shared cluster).
const CPOL_CLONE_SYNC_CREATE: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-create
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
    generate:
      apiVersion: v1
      kind: Secret
      name: cpol-clone-sync-create-regcred
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        namespace: default
        name: cpol-clone-sync-create-regcred
"#;

const CPOL_CLONE_SYNC_CREATE_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-create-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-create, rule clone-secret"
spec:
  source: {kind: Secret, namespace: default, name: cpol-clone-sync-create-regcred}
  target:
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-create` (and
/// `policy/standard/clone/nosync/pol-clone-nosync-create`, `clusterpolicy/standard/clone/nosync/cpol-clone-nosync-create`
/// for the creation): a Namespace created after the policy receives a clone of the Secret with the
/// source's data and type.
///
/// Also asserts what the mapping adds: a Namespace that existed before the policy gets its clone
/// too (Kyverno only with `generateExisting: true`: conflux always fills existing namespaces), while
/// `kube-system` (excluded by ConfigSync unless named) and `kyverno` (excluded by the converter)
/// get none, and the source's own namespace keeps just the source.
#[tokio::test]
async fn cpol_clone_sync_create() {
    let (client, shard) = setup("cpol-clone-sync-create").await;
    let c = cluster();
    let existing = named_namespace(&client, "cpol-clone-sync-create-existing-ns", &[]).await;
    let kyverno = named_namespace(&client, "kyverno", &[]).await;
    let name = "cpol-clone-sync-create-regcred";
    apply(&client, "default", opaque(name, &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(&client, &shard, CPOL_CLONE_SYNC_CREATE_SYNC).await;

    let new = named_namespace(&client, "cpol-clone-sync-create-ns", &[]).await;
    for ns in [&new, &existing] {
        let clone = wait_secret_holding(&client, ns, name, &[("foo", "bar")]).await;
        assert_eq!(clone.type_.as_deref(), Some("Opaque"));
        assert_eq!(label(&clone.metadata, MANAGED_BY), Some("conflux"));
        assert_eq!(label(&clone.metadata, OWNER), Some(sync.as_str()));
        assert_eq!(
            annotation(&clone.metadata, SOURCE),
            Some(format!("Secret/default/{name}").as_str())
        );
    }
    assert_eq!(wait_ready_reason(&client, &sync, "Synced").await, "True");
    assert!(
        secret(&client, "kube-system", name).await.is_none(),
        "kube-system is never a target unless named"
    );
    assert!(
        secret(&client, &kyverno, name).await.is_none(),
        "Kyverno's own namespace is excluded by the converter"
    );
    let source = secret(&client, "default", name).await.expect("the source");
    assert_eq!(
        label(&source.metadata, MANAGED_BY),
        None,
        "the source is not a copy of itself"
    );
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-downstream

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-downstream` (policy `cpol-sync-clone`
/// there, renamed after the scenario), with a namespace selector.
const CPOL_CLONE_SYNC_DELETE_DOWNSTREAM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-delete-downstream
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-downstream
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        namespace: default
        name: regcred
"#;

const CPOL_CLONE_SYNC_DELETE_DOWNSTREAM_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-delete-downstream-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-delete-downstream, rule clone-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-downstream
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-downstream` (and
/// `policy/standard/clone/sync/pol-clone-sync-delete-downstream`): a clone deleted by someone is
/// cloned again from the source.
#[tokio::test]
async fn cpol_clone_sync_delete_downstream() {
    let (client, shard) = setup("cpol-clone-sync-delete-downstream").await;
    let c = cluster();
    apply(&client, "default", opaque("regcred", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(&client, &shard, CPOL_CLONE_SYNC_DELETE_DOWNSTREAM_SYNC).await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-delete-downstream-ns",
        "cpol-clone-sync-delete-downstream",
    )
    .await;
    let first = wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;

    Api::<Secret>::namespaced(client.clone(), &ns)
        .delete("regcred", &DeleteParams::default())
        .await
        .expect("delete the clone");
    eventually("the clone is cloned again", WAIT, || async {
        let s = secret(&client, &ns, "regcred").await?;
        (s.metadata.uid != first.metadata.uid && secret_data(&s) == bytes(&[("foo", "bar")]))
            .then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream` (rule name and source
/// name through a `context` variable there), with a namespace selector.
const CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-modify-downstream
spec:
  rules:
  - name: cpol-clone-sync-modify-downstream-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-downstream
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: default
        name: regcred
"#;

const CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-modify-downstream-cpol-clone-sync-modify-downstream-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-modify-downstream, rule cpol-clone-sync-modify-downstream-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-downstream
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream` (and
/// `policy/standard/clone/sync/pol-clone-sync-modify-downstream`,
/// `foreach/clusterpolicy/clone/sync/cpol-clone-sync-update-target`): a clone edited by hand is
/// reverted to the source's data. The ConfigSync's name is longer than a label value: the clones'
/// owner label is its shortened form.
#[tokio::test]
async fn cpol_clone_sync_modify_downstream() {
    let (client, shard) = setup("cpol-clone-sync-modify-downstream").await;
    let c = cluster();
    apply(&client, "default", opaque("regcred", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(&client, &shard, CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_SYNC).await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-modify-downstream-ns",
        "cpol-clone-sync-modify-downstream",
    )
    .await;
    let clone = wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;
    assert!(sync.len() > 63);
    assert_eq!(
        label(&clone.metadata, OWNER),
        Some(conflux_copy_core::ownership::label_value(&sync).as_str())
    );

    // Kyverno's editeddownstream.yaml, applied with `kubectl apply` (a patch of `foo`).
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            "regcred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"foo": b64("notbachhere")}})),
        )
        .await
        .expect("edit the clone");
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;
    assert_eq!(wait_ready_reason(&client, &sync, "Synced").await, "True");
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream-apply

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream-apply`
/// (`useServerSideApply: true`), with a namespace selector.
const CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_APPLY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-modify-downstream-apply
spec:
  useServerSideApply: true
  rules:
  - name: cpol-clone-sync-modify-downstream-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-downstream-apply
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: default
        name: regcred
"#;

const CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_APPLY_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-modify-downstream-apply-cpol-clone-sync-modify-downstream-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-modify-downstream-apply, rule cpol-clone-sync-modify-downstream-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-downstream-apply
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-downstream-apply`, where
/// conflux differs on purpose. Someone server-side applies the clone with `foo` changed and a key
/// `foo2` of their own. Kyverno (`useServerSideApply: true`) reverts `foo` and keeps `foo2`;
/// conflux keeps every copy identical to its source (docs/design.md 4.2), so it reverts `foo` and
/// removes `foo2` too. A key that must live beside the copied ones belongs in another object.
#[tokio::test]
async fn cpol_clone_sync_modify_downstream_apply() {
    let (client, shard) = setup("cpol-clone-sync-modify-downstream-apply").await;
    let c = cluster();
    apply(&client, "default", opaque("regcred", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(
        &client,
        &shard,
        CPOL_CLONE_SYNC_MODIFY_DOWNSTREAM_APPLY_SYNC,
    )
    .await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-modify-downstream-apply-ns",
        "cpol-clone-sync-modify-downstream-apply",
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;

    // Kyverno's editeddownstream.yaml, applied server-side by another field manager.
    apply(
        &client,
        &ns,
        opaque(
            "regcred",
            &[("foo", "notbachhere"), ("foo2", "notbachhere")],
        ),
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-source

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-source` (source name through a
/// `context` variable there), with a namespace selector.
const CPOL_CLONE_SYNC_MODIFY_SOURCE: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-modify-source
spec:
  rules:
  - name: cpol-clone-sync-modify-source-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-source
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: cpol-clone-sync-modify-source-ns
        name: regcred
"#;

const CPOL_CLONE_SYNC_MODIFY_SOURCE_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-modify-source-cpol-clone-sync-modify-source-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-modify-source, rule cpol-clone-sync-modify-source-secret"
spec:
  source: {kind: Secret, namespace: cpol-clone-sync-modify-source-ns, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-modify-source
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-modify-source` (and
/// `policy/standard/clone/sync/pol-clone-sync-modify-source`,
/// `foreach/clusterpolicy/clone/sync/cpol-clone-sync-update-source`): a change of the source's
/// data reaches the clone.
#[tokio::test]
async fn cpol_clone_sync_modify_source() {
    let (client, shard) = setup("cpol-clone-sync-modify-source").await;
    let c = cluster();
    let src = named_namespace(&client, "cpol-clone-sync-modify-source-ns", &[]).await;
    apply(&client, &src, opaque("regcred", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(&client, &shard, CPOL_CLONE_SYNC_MODIFY_SOURCE_SYNC).await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-modify-source-trigger-ns",
        "cpol-clone-sync-modify-source",
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;

    apply(
        &client,
        &src,
        opaque("regcred", &[("foo", "herearesomecoolchanges")]),
    )
    .await;
    wait_secret_holding(
        &client,
        &ns,
        "regcred",
        &[("foo", "herearesomecoolchanges")],
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/cpol-clone-sync-single-source-multiple-triggers-targets

/// `clusterpolicy/cornercases/cpol-clone-sync-single-source-multiple-triggers-targets` (policy
/// `cpol-clone-sync-single-source-multiple-targets` there), with a namespace selector.
const CPOL_CLONE_SYNC_SINGLE_SOURCE_MULTIPLE_TRIGGERS_TARGETS: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-single-source-multiple-targets
spec:
  rules:
  - name: rule-clone-sync-single-source-multiple-targets
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-source-multiple-targets
    generate:
      generateExisting: false
      apiVersion: v1
      kind: ConfigMap
      name: footarget
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: foosource
        namespace: cpol-clone-sync-single-source-multiple-targets-ns
"#;

const CPOL_CLONE_SYNC_SINGLE_SOURCE_MULTIPLE_TRIGGERS_TARGETS_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-single-source-multiple-targets-rule-clone-sync-single-source-multiple-targets
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-single-source-multiple-targets, rule rule-clone-sync-single-source-multiple-targets"
spec:
  source: {kind: ConfigMap, namespace: cpol-clone-sync-single-source-multiple-targets-ns, name: foosource}
  target:
    name: footarget
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-source-multiple-targets
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/cpol-clone-sync-single-source-multiple-triggers-targets`
/// (and its `-deprecated` twin): one ConfigMap cloned under another name into two Namespaces; a
/// change of the source (`foo: bar` → `baz`) reaches both clones.
#[tokio::test]
async fn cpol_clone_sync_single_source_multiple_triggers_targets() {
    let (client, shard) = setup("cpol-clone-sync-single-source-multiple-targets").await;
    let c = cluster();
    let src = named_namespace(
        &client,
        "cpol-clone-sync-single-source-multiple-targets-ns",
        &[],
    )
    .await;
    apply(&client, &src, config("foosource", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(
        &client,
        &shard,
        CPOL_CLONE_SYNC_SINGLE_SOURCE_MULTIPLE_TRIGGERS_TARGETS_SYNC,
    )
    .await;
    let mut targets = Vec::new();
    for i in 1..=2 {
        targets.push(
            scenario_namespace(
                &client,
                &format!("cpol-clone-sync-single-source-multiple-targets-trigger-ns-{i}"),
                "cpol-clone-sync-single-source-multiple-targets",
            )
            .await,
        );
    }
    for ns in &targets {
        wait_config_map(&client, ns, "footarget", &strings(&[("foo", "bar")])).await;
    }
    assert!(
        config_map(&client, &targets[0], "foosource")
            .await
            .is_none(),
        "the clone has the target name only"
    );

    apply(&client, &src, config("foosource", &[("foo", "baz")])).await;
    for ns in &targets {
        wait_config_map(&client, ns, "footarget", &strings(&[("foo", "baz")])).await;
    }
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/cpol-clone-sync-single-trigger-source-multiple-targets

/// `clusterpolicy/cornercases/cpol-clone-sync-single-trigger-source-multiple-targets`, policy-1.yaml,
/// with a namespace selector.
const CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_1: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-single-trigger-source-multiple-targets-1
spec:
  rules:
  - name: rule-sync-image-pull-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-trigger-source-multiple
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: footarget
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: foosource
        namespace: cpol-clone-sync-single-trigger-source-multiple-targets-ns
"#;

const CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_1_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-single-trigger-source-multiple-targets-1-rule-sync-image-pull-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-single-trigger-source-multiple-targets-1, rule rule-sync-image-pull-secret"
spec:
  source: {kind: ConfigMap, namespace: cpol-clone-sync-single-trigger-source-multiple-targets-ns, name: foosource}
  target:
    name: footarget
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-trigger-source-multiple
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// `clusterpolicy/cornercases/cpol-clone-sync-single-trigger-source-multiple-targets`, policy-2.yaml,
/// with a namespace selector.
const CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_2: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-single-trigger-source-multiple-targets-2
spec:
  rules:
  - name: rule-sync-image-pull-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-trigger-source-multiple
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: bartarget
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: foosource
        namespace: cpol-clone-sync-single-trigger-source-multiple-targets-ns
"#;

const CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_2_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-single-trigger-source-multiple-targets-2-rule-sync-image-pull-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-single-trigger-source-multiple-targets-2, rule rule-sync-image-pull-secret"
spec:
  source: {kind: ConfigMap, namespace: cpol-clone-sync-single-trigger-source-multiple-targets-ns, name: foosource}
  target:
    name: bartarget
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-single-trigger-source-multiple
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/cpol-clone-sync-single-trigger-source-multiple-targets`: two
/// policies clone one ConfigMap under two names into the same Namespace; a change of the source
/// reaches both clones.
#[tokio::test]
async fn cpol_clone_sync_single_trigger_source_multiple_targets() {
    let (client, shard) = setup("cpol-clone-sync-single-trigger").await;
    let c = cluster();
    let src = named_namespace(
        &client,
        "cpol-clone-sync-single-trigger-source-multiple-targets-ns",
        &[],
    )
    .await;
    apply(&client, &src, config("foosource", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    for manifest in [
        CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_1_SYNC,
        CPOL_CLONE_SYNC_SINGLE_TRIGGER_SOURCE_MULTIPLE_TARGETS_2_SYNC,
    ] {
        create_sync(&client, &shard, manifest).await;
    }
    let ns = scenario_namespace(
        &client,
        "cpol-single-trigger-source-multiple-targets-trigger-ns",
        "cpol-clone-sync-single-trigger-source-multiple",
    )
    .await;
    for name in ["footarget", "bartarget"] {
        wait_config_map(&client, &ns, name, &strings(&[("foo", "bar")])).await;
    }

    apply(&client, &src, config("foosource", &[("foo", "baz")])).await;
    for name in ["footarget", "bartarget"] {
        wait_config_map(&client, &ns, name, &strings(&[("foo", "baz")])).await;
    }
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-source

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-source` (source name through a
/// `context` variable there), with a namespace selector.
const CPOL_CLONE_SYNC_DELETE_SOURCE: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-delete-source
spec:
  rules:
  - name: cpol-clone-sync-delete-source-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-source
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: cpol-clone-sync-delete-source-ns
        name: regcred
"#;

const CPOL_CLONE_SYNC_DELETE_SOURCE_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-delete-source-cpol-clone-sync-delete-source-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-delete-source, rule cpol-clone-sync-delete-source-secret"
spec:
  source: {kind: Secret, namespace: cpol-clone-sync-delete-source-ns, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-source
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-source` (and
/// `policy/standard/clone/sync/pol-clone-sync-delete-source`), where conflux differs on purpose:
/// Kyverno deletes the clones when the source of a synchronized clone is deleted; conflux keeps
/// them with their data, marked `copy.conflux.dev/orphaned`, and reports `SourceNotFound`
/// (docs/design.md 4.2: the apps reading them keep running). The source coming back heals the
/// clones.
#[tokio::test]
async fn cpol_clone_sync_delete_source() {
    let (client, shard) = setup("cpol-clone-sync-delete-source").await;
    let c = cluster();
    let src = named_namespace(&client, "cpol-clone-sync-delete-source-ns", &[]).await;
    apply(&client, &src, opaque("regcred", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(&client, &shard, CPOL_CLONE_SYNC_DELETE_SOURCE_SYNC).await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-delete-source-trigger-ns",
        "cpol-clone-sync-delete-source",
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;

    Api::<Secret>::namespaced(client.clone(), &src)
        .delete("regcred", &DeleteParams::default())
        .await
        .expect("delete the source");
    let kept = eventually("the clone is marked orphaned", WAIT, || async {
        let s = secret(&client, &ns, "regcred").await?;
        (annotation(&s.metadata, ORPHANED) == Some("true")).then_some(s)
    })
    .await;
    assert!(
        secret_data(&kept) == bytes(&[("foo", "bar")]),
        "the orphaned clone keeps its data"
    );
    assert_eq!(
        wait_ready_reason(&client, &sync, "SourceNotFound").await,
        "False"
    );

    apply(&client, &src, opaque("regcred", &[("foo", "back")])).await;
    let healed = wait_secret_holding(&client, &ns, "regcred", &[("foo", "back")]).await;
    assert_eq!(annotation(&healed.metadata, ORPHANED), None);
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/clone-source-managed-by-label-helm

/// `clusterpolicy/cornercases/clone-source-managed-by-label-helm`, as upstream (its policy selects
/// Namespaces by label already; `validationFailureAction`, `background` and `generateExisting`
/// have no ConfigSync counterpart and are dropped by the converter).
const CLONE_SOURCE_MANAGED_BY_LABEL_HELM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: sync-image-pull-secrets
spec:
  validationFailureAction: Audit
  background: false
  generateExisting: true
  rules:
  - name: sync-image-pull-secret-harbor-external
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              sync-image-pull-secrets: "true"
    generate:
      apiVersion: v1
      kind: Secret
      name: harbor-external
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: platform
        name: harbor-external
"#;

const CLONE_SOURCE_MANAGED_BY_LABEL_HELM_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: sync-image-pull-secrets-sync-image-pull-secret-harbor-external
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy sync-image-pull-secrets, rule sync-image-pull-secret-harbor-external"
spec:
  source: {kind: Secret, namespace: platform, name: harbor-external}
  target:
    namespaceSelector:
      matchLabels:
        sync-image-pull-secrets: "true"
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/clone-source-managed-by-label-helm`: a Helm-installed
/// `kubernetes.io/dockerconfigjson` source (`app.kubernetes.io/managed-by: Helm`) is cloned into a
/// Namespace carrying `sync-image-pull-secrets: "true"` with its type and data, and the clone says
/// who manages it now (`app.kubernetes.io/managed-by: conflux` where Kyverno writes `kyverno`).
/// conflux differs on purpose twice: the source's labels and annotations (Helm's) are not copied
/// (Kyverno copies them; they would make Helm believe it owns the clones), and deleting the source
/// keeps the clone, marked orphaned (Kyverno deletes it; see [`cpol_clone_sync_delete_source`]).
#[tokio::test]
async fn clone_source_managed_by_label_helm() {
    let (client, shard) = setup("clone-source-managed-by-label-helm").await;
    let c = cluster();
    let platform = named_namespace(&client, "platform", &[]).await;
    let docker_config = "{\"auths\":{\"ghcr.io\":{}}}";
    apply(
        &client,
        &platform,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "harbor-external",
                "labels": {MANAGED_BY: "Helm", "generate.kyverno.io/clone-source": ""},
                "annotations": {"meta.helm.sh/release-name": "bootstrap",
                                "meta.helm.sh/release-namespace": "default"},
            },
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64(docker_config)},
        }),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(&client, &shard, CLONE_SOURCE_MANAGED_BY_LABEL_HELM_SYNC).await;
    let app = named_namespace(
        &client,
        "my-app",
        &[
            (MANAGED_BY, "Helm"),
            ("sync-image-pull-secrets", "true"),
            ("owner", "team-ccs"),
        ],
    )
    .await;
    let clone = wait_secret_holding(
        &client,
        &app,
        "harbor-external",
        &[(".dockerconfigjson", docker_config)],
    )
    .await;
    assert_eq!(
        clone.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    assert_eq!(label(&clone.metadata, MANAGED_BY), Some("conflux"));
    assert_eq!(
        label(&clone.metadata, "generate.kyverno.io/clone-source"),
        None,
        "the source's labels are not copied"
    );
    assert_eq!(
        annotation(&clone.metadata, "meta.helm.sh/release-name"),
        None,
        "the source's annotations are not copied"
    );

    Api::<Secret>::namespaced(client.clone(), &platform)
        .delete("harbor-external", &DeleteParams::default())
        .await
        .expect("delete the source");
    let kept = eventually("the clone is kept, marked orphaned", WAIT, || async {
        let s = secret(&client, &app, "harbor-external").await?;
        (annotation(&s.metadata, ORPHANED) == Some("true")).then_some(s)
    })
    .await;
    assert!(
        secret_data(&kept) == bytes(&[(".dockerconfigjson", docker_config)]),
        "the orphaned clone keeps its data"
    );
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-rule and -delete-policy

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-rule` (the Secret rule's names
/// through a `context` variable there), with a namespace selector.
const CPOL_CLONE_SYNC_DELETE_RULE: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-delete-rule
spec:
  rules:
  - name: cpol-clone-sync-delete-rule-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-rule
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: default
        name: regcred
  - name: cpol-clone-sync-delete-rule-cm
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-rule
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: mytestcm
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: default
        name: mytestcm
"#;

const CPOL_CLONE_SYNC_DELETE_RULE_SECRET_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-delete-rule-cpol-clone-sync-delete-rule-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-delete-rule, rule cpol-clone-sync-delete-rule-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-rule
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

const CPOL_CLONE_SYNC_DELETE_RULE_CM_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-delete-rule-cpol-clone-sync-delete-rule-cm
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-delete-rule, rule cpol-clone-sync-delete-rule-cm"
spec:
  source: {kind: ConfigMap, namespace: default, name: mytestcm}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-delete-rule
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-rule` and
/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-delete-policy` (and their `policy/` and
/// `nosync` twins): a rule removed from the policy (its ConfigSync deleted by the next import)
/// leaves its clone in place, and so does the whole policy deleted (every ConfigSync deleted):
/// `deletionPolicy: Orphan` keeps the data and only strips conflux's ownership labels.
#[tokio::test]
async fn cpol_clone_sync_delete_rule_and_policy() {
    let (client, shard) = setup("cpol-clone-sync-delete-rule").await;
    let c = cluster();
    apply(&client, "default", opaque("regcred", &[("foo", "bar")])).await;
    apply(
        &client,
        "default",
        config("mytestcm", &[("color", "yellow")]),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let secret_rule = create_sync(&client, &shard, CPOL_CLONE_SYNC_DELETE_RULE_SECRET_SYNC).await;
    let cm_rule = create_sync(&client, &shard, CPOL_CLONE_SYNC_DELETE_RULE_CM_SYNC).await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-delete-rule-ns",
        "cpol-clone-sync-delete-rule",
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;
    let yellow = strings(&[("color", "yellow")]);
    wait_config_map(&client, &ns, "mytestcm", &yellow).await;

    // singlerule.yaml: the Secret rule is gone.
    delete_sync(&client, &secret_rule).await;
    let kept = secret(&client, &ns, "regcred")
        .await
        .expect("the Secret clone stays");
    assert!(secret_data(&kept) == bytes(&[("foo", "bar")]));
    assert_eq!(label(&kept.metadata, MANAGED_BY), None, "released");
    assert_eq!(label(&kept.metadata, OWNER), None, "released");
    let cm = config_map(&client, &ns, "mytestcm")
        .await
        .expect("the ConfigMap clone");
    assert_eq!(cm_data(&cm), yellow);
    assert_eq!(
        label(&cm.metadata, OWNER),
        Some(cm_rule.as_str()),
        "still owned"
    );

    // The policy is deleted.
    delete_sync(&client, &cm_rule).await;
    let cm = config_map(&client, &ns, "mytestcm")
        .await
        .expect("the ConfigMap clone stays");
    assert_eq!(cm_data(&cm), yellow);
    assert_eq!(label(&cm.metadata, OWNER), None, "released");
    settle().await;
    assert!(secret(&client, &ns, "regcred").await.is_some());
    assert!(config_map(&client, &ns, "mytestcm").await.is_some());
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/standard/clone/sync/cpol-clone-sync-update-trigger-no-match

/// `clusterpolicy/standard/clone/sync/cpol-clone-sync-update-trigger-no-match`, with the trigger
/// a Namespace instead of a ConfigMap (the converter takes only rules matching Namespaces): the
/// selector `create-secret: "true"` is upstream's.
const CPOL_CLONE_SYNC_UPDATE_TRIGGER_NO_MATCH: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-update-trigger-no-match-policy
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              create-secret: "true"
    generate:
      apiVersion: v1
      kind: Secret
      name: downstream-secret
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: source-secret
        namespace: cpol-clone-sync-update-trigger-no-match-ns
"#;

const CPOL_CLONE_SYNC_UPDATE_TRIGGER_NO_MATCH_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-update-trigger-no-match-policy-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-update-trigger-no-match-policy, rule clone-secret"
spec:
  source: {kind: Secret, namespace: cpol-clone-sync-update-trigger-no-match-ns, name: source-secret}
  target:
    name: downstream-secret
    namespaceSelector:
      matchLabels:
        create-secret: "true"
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/standard/clone/sync/cpol-clone-sync-update-trigger-no-match` (and
/// `policy/standard/clone/sync/pol-clone-sync-update-trigger-no-match`,
/// `cpol-clone-sync-(no-)existing-update-trigger-no-precondition`) for a Namespace trigger: once
/// the Namespace's label no longer matches (`create-secret: "true"` → `"false"`), its clone is
/// deleted (`prune: true`); labelled again, it gets its clone back.
#[tokio::test]
async fn cpol_clone_sync_update_trigger_no_match() {
    let (client, shard) = setup("cpol-clone-sync-update-trigger-no-match").await;
    let c = cluster();
    let src = named_namespace(&client, "cpol-clone-sync-update-trigger-no-match-ns", &[]).await;
    apply(&client, &src, opaque("source-secret", &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(
        &client,
        &shard,
        CPOL_CLONE_SYNC_UPDATE_TRIGGER_NO_MATCH_SYNC,
    )
    .await;
    let ns = named_namespace(
        &client,
        "cpol-clone-sync-update-trigger-no-match-trigger-ns",
        &[("create-secret", "true")],
    )
    .await;
    wait_secret_holding(&client, &ns, "downstream-secret", &[("foo", "bar")]).await;

    label_namespace(&client, &ns, &[("create-secret", "false")]).await;
    wait_no_secret(&client, &ns, "downstream-secret").await;

    label_namespace(&client, &ns, &[("create-secret", "true")]).await;
    wait_secret_holding(&client, &ns, "downstream-secret", &[("foo", "bar")]).await;
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/cpol-clone-sync-create-source-after-policy

/// `clusterpolicy/cornercases/cpol-clone-sync-create-source-after-policy` (Secret `regcred` in
/// `default` there, renamed so it does not meet the other scenarios' `regcred`), with a namespace
/// selector.
const CPOL_CLONE_SYNC_CREATE_SOURCE_AFTER_POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-create-source-after-policy
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-create-source-after-policy
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred-after-policy
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: regcred-after-policy
        namespace: default
"#;

const CPOL_CLONE_SYNC_CREATE_SOURCE_AFTER_POLICY_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-create-source-after-policy-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-create-source-after-policy, rule clone-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcred-after-policy}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-create-source-after-policy
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/cpol-clone-sync-create-source-after-policy` (and
/// `policy/cornercases/pol-clone-sync-create-source-after-policy`): the source is created after
/// the policy; a Namespace created then gets its clone. Before the source exists the ConfigSync
/// says so (`Ready=False`, `SourceNotFound`), and it is `Synced` after.
#[tokio::test]
async fn cpol_clone_sync_create_source_after_policy() {
    let (client, shard) = setup("cpol-clone-sync-create-source-after-policy").await;
    let c = cluster();
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(
        &client,
        &shard,
        CPOL_CLONE_SYNC_CREATE_SOURCE_AFTER_POLICY_SYNC,
    )
    .await;
    assert_eq!(
        wait_ready_reason(&client, &sync, "SourceNotFound").await,
        "False"
    );
    apply(
        &client,
        "default",
        opaque("regcred-after-policy", &[("foo", "bar")]),
    )
    .await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-create-source-after-policy-ns",
        "cpol-clone-sync-create-source-after-policy",
    )
    .await;
    wait_secret_holding(&client, &ns, "regcred-after-policy", &[("foo", "bar")]).await;
    assert_eq!(wait_ready_reason(&client, &sync, "Synced").await, "True");
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/clone-source-name-exceeds-63-characters

/// `clusterpolicy/cornercases/clone-source-name-exceeds-63-characters` (policy `generate-secret`
/// there, renamed after the scenario), with a namespace selector.
const CLONE_SOURCE_NAME_EXCEEDS_63_CHARACTERS: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: clone-source-name-exceeds-63-characters
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: clone-source-name-exceeds-63-characters
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: regcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcred
        namespace: default
"#;

const CLONE_SOURCE_NAME_EXCEEDS_63_CHARACTERS_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: clone-source-name-exceeds-63-characters-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy clone-source-name-exceeds-63-characters, rule clone-secret"
spec:
  source: {kind: Secret, namespace: default, name: regcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcredregcred}
  target:
    name: regcred
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: clone-source-name-exceeds-63-characters
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/clone-source-name-exceeds-63-characters`: a source whose
/// name (98 characters) cannot be a label value is cloned under a short name; the clone names its
/// source in full in an annotation. Upstream then deletes the source and applies a Secret of the
/// clone's name over it, asserting nothing more: here the source's deletion leaves the clone
/// orphaned, and the Secret applied over it is kept as written (`kubectl apply` of Kyverno's
/// step 6).
#[tokio::test]
async fn clone_source_name_exceeds_63_characters() {
    let (client, shard) = setup("clone-source-name-exceeds-63").await;
    let c = cluster();
    let long = "regcred".repeat(14);
    apply(&client, "default", opaque(&long, &[("foo", "bar")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(
        &client,
        &shard,
        CLONE_SOURCE_NAME_EXCEEDS_63_CHARACTERS_SYNC,
    )
    .await;
    let ns = scenario_namespace(
        &client,
        "production",
        "clone-source-name-exceeds-63-characters",
    )
    .await;
    let clone = wait_secret_holding(&client, &ns, "regcred", &[("foo", "bar")]).await;
    assert_eq!(
        annotation(&clone.metadata, SOURCE),
        Some(format!("Secret/default/{long}").as_str())
    );

    Api::<Secret>::namespaced(client.clone(), "default")
        .delete(&long, &DeleteParams::default())
        .await
        .expect("delete the source");
    eventually("the clone is marked orphaned", WAIT, || async {
        let s = secret(&client, &ns, "regcred").await?;
        (annotation(&s.metadata, ORPHANED) == Some("true")).then_some(())
    })
    .await;
    apply(&client, &ns, opaque("regcred", &[("foo", "bar")])).await;
    settle().await;
    let s = secret(&client, &ns, "regcred")
        .await
        .expect("the Secret stays");
    assert!(secret_data(&s) == bytes(&[("foo", "bar")]));
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/cpol-clone-delete-ownerreferences-across-namespaces

/// `clusterpolicy/cornercases/cpol-clone-delete-ownerreferences-across-namespaces`, with a
/// namespace selector (`generateExisting` has no counterpart: conflux always fills existing
/// namespaces).
const CPOL_CLONE_DELETE_OWNERREFERENCES_ACROSS_NAMESPACES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-delete-ownerreferences-across-namespaces
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-delete-ownerreferences
    generate:
      generateExisting: true
      apiVersion: v1
      kind: Secret
      name: cpol-clone-delete-ownerreferences-across-namespaces
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: cpol-clone-delete-ownerreferences-across-namespaces
        namespace: cpol-clone-delete-ownerreferences-across-namespaces-source-ns
"#;

const CPOL_CLONE_DELETE_OWNERREFERENCES_ACROSS_NAMESPACES_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-delete-ownerreferences-across-namespaces-clone-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-delete-ownerreferences-across-namespaces, rule clone-secret"
spec:
  source: {kind: Secret, namespace: cpol-clone-delete-ownerreferences-across-namespaces-source-ns, name: cpol-clone-delete-ownerreferences-across-namespaces}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-delete-ownerreferences
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/cpol-clone-delete-ownerreferences-across-namespaces` (and
/// its `-deprecated` twin): the source is owned (`ownerReferences`) by a ConfigMap of its own
/// namespace; the clone in another namespace carries no `ownerReferences`, so the garbage
/// collector (running in the test cluster) does not delete it.
#[tokio::test]
async fn cpol_clone_delete_ownerreferences_across_namespaces() {
    let (client, shard) = setup("cpol-clone-delete-ownerreferences").await;
    let c = cluster();
    let name = "cpol-clone-delete-ownerreferences-across-namespaces";
    let src = named_namespace(&client, &format!("{name}-source-ns"), &[]).await;
    apply(&client, &src, config("owner", &[])).await;
    let owner = config_map(&client, &src, "owner").await.expect("owner");
    let mut source = opaque(name, &[("foo", "bar")]);
    source["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid.clone().unwrap_or_default(),
    }]);
    apply(&client, &src, source).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    create_sync(
        &client,
        &shard,
        CPOL_CLONE_DELETE_OWNERREFERENCES_ACROSS_NAMESPACES_SYNC,
    )
    .await;
    let ns = scenario_namespace(
        &client,
        &format!("{name}-target-ns"),
        "cpol-clone-delete-ownerreferences",
    )
    .await;
    let clone = wait_secret_holding(&client, &ns, name, &[("foo", "bar")]).await;
    assert_eq!(clone.metadata.owner_references, None);
    settle().await;
    let later = secret(&client, &ns, name)
        .await
        .expect("the garbage collector leaves the clone");
    assert_eq!(
        later.metadata.uid, clone.metadata.uid,
        "the same clone, never re-created"
    );
    assert!(
        secret(&client, &src, name)
            .await
            .is_some_and(|s| s.metadata.owner_references.is_some()),
        "the source keeps its owner"
    );
}

// ---------------------------------------------------------------------------------------------
// clusterpolicy/cornercases/cpol-clone-sync-reinstall-policy

/// `clusterpolicy/cornercases/cpol-clone-sync-reinstall-policy` (the re-installed policy there adds
/// `generateExisting: true`, which the converter drops: conflux always fills existing
/// namespaces), with a namespace selector.
const CPOL_CLONE_SYNC_REINSTALL_POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-reinstall-policy
spec:
  rules:
  - name: sync-image-pull-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-reinstall-policy
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: regcred
        namespace: cpol-clone-sync-reinstall-policy-ns
"#;

const CPOL_CLONE_SYNC_REINSTALL_POLICY_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-reinstall-policy-sync-image-pull-secret
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-reinstall-policy, rule sync-image-pull-secret"
spec:
  source: {kind: Secret, namespace: cpol-clone-sync-reinstall-policy-ns, name: regcred}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-reinstall-policy
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Mirrors `clusterpolicy/cornercases/cpol-clone-sync-reinstall-policy` (and its `-deprecated`
/// twin): clones in two Namespaces; the policy is deleted (the clones stay, released), the source
/// changed meanwhile, and the policy installed again: the clones it left behind are taken over
/// again (`conflictPolicy: Adopt`) and get the change; a later change of the source reaches them
/// too.
#[tokio::test]
async fn cpol_clone_sync_reinstall_policy() {
    let (client, shard) = setup("cpol-clone-sync-reinstall-policy").await;
    let c = cluster();
    let src = named_namespace(&client, "cpol-clone-sync-reinstall-policy-ns", &[]).await;
    apply(&client, &src, opaque("regcred", &[("foo", "foo")])).await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(&client, &shard, CPOL_CLONE_SYNC_REINSTALL_POLICY_SYNC).await;
    let mut targets = Vec::new();
    for i in 1..=2 {
        targets.push(
            scenario_namespace(
                &client,
                &format!("cpol-clone-sync-reinstall-policy-trigger-ns-{i}"),
                "cpol-clone-sync-reinstall-policy",
            )
            .await,
        );
    }
    for ns in &targets {
        wait_secret_holding(&client, ns, "regcred", &[("foo", "foo")]).await;
    }

    delete_sync(&client, &sync).await;
    apply(
        &client,
        &src,
        opaque("regcred", &[("foo", "hereischangeddata")]),
    )
    .await;
    create_sync(&client, &shard, CPOL_CLONE_SYNC_REINSTALL_POLICY_SYNC).await;
    for ns in &targets {
        let clone =
            wait_secret_holding(&client, ns, "regcred", &[("foo", "hereischangeddata")]).await;
        assert_eq!(
            label(&clone.metadata, OWNER),
            Some(sync.as_str()),
            "ours again"
        );
    }

    apply(&client, &src, opaque("regcred", &[("foo", "bar")])).await;
    for ns in &targets {
        wait_secret_holding(&client, ns, "regcred", &[("foo", "bar")]).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A pre-existing downstream object (no chainsaw scenario: Kyverno's code)

/// A ClusterPolicy whose clone's name is already taken in a matching Namespace (no chainsaw
/// scenario covers this; Kyverno's behaviour is read from `pkg/background/generate/clone.go` and
/// `generator.go`: with `synchronize: true` a same-name downstream object is overwritten with the
/// clone, whoever made it).
const CPOL_CLONE_SYNC_EXISTING_DOWNSTREAM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cpol-clone-sync-existing-downstream
spec:
  rules:
  - name: clone-configmap
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              kyverno-clone.conflux.dev/scenario: cpol-clone-sync-existing-downstream
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: settings
      namespace: '{{request.object.metadata.name}}'
      synchronize: true
      clone:
        name: settings
        namespace: cpol-clone-sync-existing-downstream-ns
"#;

const CPOL_CLONE_SYNC_EXISTING_DOWNSTREAM_SYNC: &str = r#"
apiVersion: conflux.dev/v1alpha1
kind: ConfigSync
metadata:
  name: cpol-clone-sync-existing-downstream-clone-configmap
  annotations:
    import.conflux.dev/source: "kyverno.io/v1 ClusterPolicy cpol-clone-sync-existing-downstream, rule clone-configmap"
spec:
  source: {kind: ConfigMap, namespace: cpol-clone-sync-existing-downstream-ns, name: settings}
  target:
    namespaceSelector:
      matchLabels:
        kyverno-clone.conflux.dev/scenario: cpol-clone-sync-existing-downstream
    excludeNamespaces: [kyverno]
  prune: true
  deletionPolicy: Orphan
  conflictPolicy: Adopt
"#;

/// Why the converter writes `conflictPolicy: Adopt`: Kyverno overwrites a same-name object that
/// was in a matching Namespace before the policy, and with `Adopt` conflux does the same (the
/// object gets the source's data, keys of its own included, and becomes a copy).
#[tokio::test]
async fn cpol_clone_sync_existing_downstream_is_taken_over() {
    let (client, shard) = setup("cpol-clone-sync-existing-downstream").await;
    let c = cluster();
    let src = named_namespace(&client, "cpol-clone-sync-existing-downstream-ns", &[]).await;
    apply(
        &client,
        &src,
        config("settings", &[("region", "eu-west-1")]),
    )
    .await;
    let ns = scenario_namespace(
        &client,
        "cpol-clone-sync-existing-downstream-target-ns",
        "cpol-clone-sync-existing-downstream",
    )
    .await;
    apply(
        &client,
        &ns,
        config("settings", &[("region", "local"), ("mine", "yes")]),
    )
    .await;
    let _operator = Operator::start(c, &shard, &[], 4).await;
    let sync = create_sync(&client, &shard, CPOL_CLONE_SYNC_EXISTING_DOWNSTREAM_SYNC).await;
    let want = strings(&[("region", "eu-west-1")]);
    let taken = eventually("the same-name ConfigMap is taken over", WAIT, || async {
        let cm = config_map(&client, &ns, "settings").await?;
        (label(&cm.metadata, OWNER) == Some(sync.as_str()) && cm_data(&cm) == want).then_some(cm)
    })
    .await;
    assert_eq!(label(&taken.metadata, MANAGED_BY), Some("conflux"));
    assert_eq!(wait_ready_reason(&client, &sync, "Synced").await, "True");
}
