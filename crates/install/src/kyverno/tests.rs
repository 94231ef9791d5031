use serde_json::json;

use super::{Outcome, SOURCE_ANNOTATION, import_text};

/// The three ClusterPolicies of Kyverno's article "Reloading Secrets and ConfigMaps with Kyverno".
const ARTICLE: &str = include_str!("../../../../tests/kyverno/article-policies.yaml");

fn reasons(import: &super::Import) -> Vec<(Outcome, &'static str)> {
    import
        .findings
        .iter()
        .map(|f| (f.outcome, f.reason))
        .collect()
}

#[test]
fn the_article_becomes_a_protect_policy_a_config_sync_and_a_reload_policy() {
    let import = import_text(ARTICLE).unwrap();
    let kinds: Vec<&str> = import
        .objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ProtectPolicy", "ConfigSync", "ReloadPolicy"]);

    let protect = &import.objects[0];
    assert_eq!(
        protect["metadata"]["name"],
        "validate-secrets-protect-blogsecret"
    );
    assert_eq!(
        protect["metadata"]["annotations"][SOURCE_ANNOTATION],
        "kyverno.io/v1 ClusterPolicy validate-secrets, rule protect-blogsecret"
    );
    assert_eq!(
        protect["spec"],
        json!({
            "configs": {"kinds": ["Secret"], "namespaces": ["platform"], "names": ["blogsecret"]},
            "operations": ["UPDATE", "DELETE"],
            "exclude": {"serviceAccounts": [{"namespace": "kyverno", "name": "kyverno"}]},
            "message": "This Secret is protected and may not be altered or deleted.",
        })
    );

    let sync = &import.objects[1];
    assert_eq!(sync["apiVersion"], "conflux.dev/v1alpha1");
    assert_eq!(
        sync["metadata"]["name"],
        "generate-secret-generate-blogsecret"
    );
    assert_eq!(
        sync["spec"],
        json!({
            "source": {"kind": "Secret", "namespace": "platform", "name": "blogsecret"},
            "target": {"excludeNamespaces": ["kyverno"]},
            "prune": true,
            "deletionPolicy": "Orphan",
            "conflictPolicy": "Adopt",
        })
    );

    let reload = &import.objects[2];
    assert_eq!(
        reload["spec"],
        json!({
            "configs": {"kinds": ["Secret"], "names": ["blogsecret"]},
            "workloads": {"kinds": ["Deployment"], "references": ["Env"]},
        })
    );

    // Nothing dropped silently: the cluster-admin exemption is reported, and the deliberate
    // differences are said.
    assert_eq!(
        reasons(&import),
        [
            (Outcome::Unconverted, "ExcludeRoles"),
            (Outcome::Differs, "MetadataUpdates"),
            (Outcome::Differs, "RolloutAnnotation"),
        ]
    );
    assert_eq!(import.unconverted(), 1);
    assert_eq!(
        import.findings[0].to_string(),
        "unconverted ClusterPolicy/validate-secrets rule protect-blogsecret: ExcludeRoles: the exemption of roles [cluster-admin] is not converted: conflux exempts users, groups and ServiceAccounts (system:masters always); name their members in spec.exclude"
    );
    let yaml = import.to_yaml().unwrap();
    assert_eq!(yaml.matches("---\n").count(), 3);
}

#[test]
fn clone_match_and_exclude_become_the_config_syncs_target() {
    let policy = |match_: serde_json::Value, exclude: serde_json::Value| {
        let doc = json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "Sync Secrets"},
            "spec": {"generateExisting": true, "rules": [{
                "name": "clone", "match": match_, "exclude": exclude,
                "generate": {"kind": "ConfigMap", "name": "ca", "namespace": "{{ request.object.metadata.name }}",
                             "synchronize": true, "clone": {"namespace": "certs", "name": "root-ca"}},
            }]},
        });
        super::import(&[doc])
    };
    let ns = |r: serde_json::Value| json!({"any": [{"resources": r}]});
    let import = policy(
        ns(json!({"kinds": ["Namespace"], "names": ["team-*"]})),
        json!({"any": [{"resources": {"names": ["team-legacy"]}}]}),
    );
    assert_eq!(import.objects[0]["metadata"]["name"], "sync-secrets-clone");
    assert_eq!(
        import.objects[0]["spec"]["target"],
        json!({"name": "ca", "namespaces": ["team-*"], "excludeNamespaces": ["kyverno", "team-legacy"]})
    );
    assert!(import.findings.is_empty(), "{:?}", import.findings);

    // Names AND labels in one filter: the names join the selector.
    let import = policy(
        ns(
            json!({"kinds": ["Namespace"], "names": ["a", "b"], "selector": {"matchLabels": {"tier": "app"}}}),
        ),
        json!(null),
    );
    assert_eq!(
        import.objects[0]["spec"]["target"]["namespaceSelector"],
        json!({"matchLabels": {"tier": "app"}, "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]})
    );

    // An exclude by labels cannot be said: the rule is not converted rather than copying more.
    let import = policy(
        ns(json!({"kinds": ["Namespace"]})),
        json!({"any": [{"resources": {"selector": {"matchLabels": {"skip": "yes"}}}}]}),
    );
    assert!(import.objects.is_empty());
    assert_eq!(
        reasons(&import),
        [(Outcome::Unconverted, "ExcludeNotExpressible")]
    );
}

#[test]
fn what_cannot_be_converted_is_reported_with_its_reason() {
    let rule = |rule: serde_json::Value| {
        let doc = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                         "metadata": {"name": "p"}, "spec": {"rules": [rule]}});
        let import = super::import(&[doc]);
        assert!(import.objects.is_empty(), "{:?}", import.objects);
        reasons(&import)
    };
    let ns = json!({"any": [{"resources": {"kinds": ["Namespace"]}}]});
    assert_eq!(
        rule(
            json!({"name": "r", "match": ns, "generate": {"kind": "Secret", "namespace": "{{request.object.metadata.name}}",
                "synchronize": true, "cloneList": {"namespace": "x", "kinds": ["v1/Secret"], "selector": {}}}})
        ),
        [(Outcome::Unconverted, "CloneList")]
    );
    assert_eq!(
        rule(
            json!({"name": "r", "match": ns, "generate": {"kind": "NetworkPolicy", "name": "deny",
                "namespace": "{{request.object.metadata.name}}", "data": {}}})
        ),
        [(Outcome::Unconverted, "GenerateData")]
    );
    assert_eq!(
        rule(
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"failureAction": "Enforce", "pattern": {"spec": {}}}})
        ),
        [(Outcome::Unconverted, "NotProtection")]
    );
    assert_eq!(
        rule(
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Secret"]}}]},
            "validate": {"failureAction": "Audit", "deny": {}}})
        ),
        [(Outcome::Unconverted, "AuditOnly")]
    );
    assert_eq!(
        rule(
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Secret"]}}]},
            "preconditions": {"all": [{"key": "{{request.object.type}}", "operator": "Equals", "value": "Opaque"}]},
            "validate": {"failureAction": "Enforce", "deny": {}}})
        ),
        [(Outcome::Unconverted, "Preconditions")]
    );
    assert_eq!(
        rule(
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}})
        ),
        [(Outcome::Unconverted, "NotImportable")]
    );
    assert_eq!(
        rule(json!({"name": "r", "verifyImages": []})),
        [(Outcome::Unconverted, "NotImportable")]
    );

    let other = import_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    assert_eq!(other.findings[0].reason, "NotAPolicy");
    assert_eq!(other.findings[0].policy, "document 1");
}

#[test]
fn a_validate_rule_without_roles_and_with_operations_in_match() {
    let doc = json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
        "metadata": {"name": "keep", "namespace": "payments"},
        "spec": {"validationFailureAction": "enforce", "rules": [{
            "name": "no-delete",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap", "Secret", "Pod"], "operations": ["DELETE"],
                                             "selector": {"matchLabels": {"keep": "true"}}}}]},
            "exclude": {"any": [{"subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "ops"}]}]},
            "validate": {"deny": {}}}]}});
    let import = super::import(&[doc]);
    assert_eq!(
        import.objects[0]["metadata"]["name"],
        "payments-keep-no-delete"
    );
    assert_eq!(
        import.objects[0]["spec"],
        json!({
            "configs": {"kinds": ["ConfigMap", "Secret"], "namespaces": ["payments"],
                        "selector": {"matchLabels": {"keep": "true"}}},
            "operations": ["DELETE"],
            "exclude": {"users": ["alice"], "groups": ["ops"]},
        })
    );
    assert_eq!(
        reasons(&import),
        [
            (Outcome::Unconverted, "NotAConfig"),
            (Outcome::Differs, "MetadataUpdates")
        ]
    );
    assert!(import.findings[0].to_string().starts_with(
        "unconverted Policy/payments/keep rule no-delete: NotAConfig: Pod not protected"
    ));
}

#[test]
fn cel_generating_and_validating_policies_with_the_known_shapes() {
    let text = r#"
apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata: {name: clone-image-pull-secret}
spec:
  evaluation: {synchronize: {enabled: true}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}
  variables:
    - {name: nsName, expression: object.metadata.name}
    - {name: source, expression: 'resource.Get("v1", "secrets", "default", "regcred")'}
  generate:
    - expression: generator.Apply(variables.nsName, [variables.source])
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: keep-ca}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - {apiGroups: [''], apiVersions: [v1], operations: [UPDATE, DELETE], resources: [configmaps], resourceNames: [root-ca]}
  validations:
    - {expression: 'false', message: root-ca is managed by the platform}
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: m}
spec: {}
"#;
    let import = import_text(text).unwrap();
    assert_eq!(
        import.objects[0]["spec"]["source"],
        json!({"kind": "Secret", "namespace": "default", "name": "regcred"})
    );
    assert_eq!(
        import.objects[0]["metadata"]["annotations"][SOURCE_ANNOTATION],
        "policies.kyverno.io/v1 GeneratingPolicy clone-image-pull-secret"
    );
    assert_eq!(
        import.objects[1]["spec"],
        json!({"configs": {"kinds": ["ConfigMap"], "names": ["root-ca"]}, "operations": ["UPDATE", "DELETE"],
               "message": "root-ca is managed by the platform"})
    );
    assert_eq!(
        reasons(&import),
        [
            (Outcome::Differs, "MetadataUpdates"),
            (Outcome::Unconverted, "CelNotRecognised")
        ]
    );
}

#[test]
fn names_are_dns_labels_and_unique() {
    assert_eq!(
        super::dns_name("Sync_Secrets..Rule 1"),
        "sync-secrets-rule-1"
    );
    assert_eq!(super::dns_name(&"x".repeat(300)).len(), 253);
    assert_eq!(super::dns_name("--"), "imported");
    let doc = |name: &str| {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"generateExisting": true, "rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                "generate": {"kind": "Secret", "name": "s", "namespace": "{{request.object.metadata.name}}",
                             "synchronize": true, "clone": {"namespace": "n", "name": "s"}}}]}})
    };
    let import = super::import(&[doc("a_b"), doc("a-b")]);
    let names: Vec<&str> = import
        .objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a-b-r", "a-b-r-2"]);
}

#[test]
fn bad_yaml_is_an_error_with_a_reason() {
    let err = import_text("a: [").unwrap_err();
    assert_eq!(err.reason(), "InvalidYaml");
}

/// Every object the import writes is one the conflux API takes: ConfigSyncs, ProtectPolicies and
/// ReloadPolicies deserialize as their types and pass their validation.
#[test]
fn imported_objects_are_valid_conflux_objects() {
    let import = import_text(ARTICLE).unwrap();
    for object in &import.objects {
        let name = object["metadata"]["name"].as_str().unwrap();
        match object["kind"].as_str().unwrap() {
            "ConfigSync" => {
                let sync: conflux_copy_core::ConfigSync =
                    serde_json::from_value(object.clone()).unwrap();
                conflux_copy_core::FanOut::from_config_sync(name, &sync.spec).unwrap();
            }
            "ProtectPolicy" => {
                let policy: conflux_copy_core::ProtectPolicy =
                    serde_json::from_value(object.clone()).unwrap();
                conflux_copy_core::protect_crd::validate(name, &policy.spec).unwrap();
            }
            "ReloadPolicy" => {
                let policy: conflux_reloader::policy::ReloadPolicy =
                    serde_json::from_value(object.clone()).unwrap();
                policy.spec.compile(name).unwrap();
            }
            other => panic!("{other}"),
        }
    }
}
