//! The protect decision as a ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`,
//! Kubernetes 1.30 or later): the same rules as [`crate::protect::decide`], written in CEL and
//! evaluated by the API server itself, so no webhook has to be served, reachable or certified.
//!
//! [`admission_policy`] builds the policy [`POLICY_NAME`] and [`admission_policy_bindings`] its
//! two bindings (one per protecting label: a label selector cannot say "either label", exactly
//! like the webhook's two entries). Both are plain JSON for a server-side apply.
//!
//! How the policy reproduces the decision:
//! - `matchConstraints`: `v1` `configmaps` and `secrets`, `UPDATE` and `DELETE`, outside
//!   [`Policy::excluded_namespaces`] (a `namespaceSelector` on `kubernetes.io/metadata.name`);
//!   `failurePolicy: Fail`.
//! - The bindings: `objectSelector` [`PROTECTED_LABEL`]` = "true"`, and [`ENABLED_LABEL`]` =
//!   "true"`; `validationActions: [Deny]`. The API server matches an UPDATE when the old or the
//!   new object carries the label; the CEL reads the protection from the **old** object only, as
//!   the decision does.
//! - `matchConditions`: the request is by neither `system:masters` nor
//!   [`Policy::allow_users`] / [`Policy::allow_groups`] (the lists are literals in the policy,
//!   which is applied again whenever they change), and the old object is protected.
//! - Variables read the rules as [`decide`](crate::protect::decide) does: the lines of
//!   [`RULES_ANNOTATION`] split on `;` into six fields (padded), the owner's exemption
//!   annotations split on `,` and trimmed, each rule's operations and exempt users and groups.
//! - One validation, `size(variables.refused) == 0`: by a rule the requester is not exempt from,
//!   DELETE is refused, and an UPDATE that changes `data`, `binaryData`, `type` (a Secret's empty
//!   type read as `Opaque`) or `immutable` (absent read as `false`) or sets `stringData` (when
//!   the rule covers the operation), or changes conflux's keys or (when the owner named
//!   exemptions) the owner's. Its `messageExpression` builds the decision's message from the
//!   same parts: the refusing ProtectPolicies' messages, the object, why it is protected, what
//!   was refused and every way out. The differences, in
//!   the message only (the verdict is the same): a dependents annotation longer than 2048
//!   characters is cut at 2048 characters, where the webhook cuts at 2048 bytes; and the API
//!   server replaces a message over 5 KiB or with a line break (possible only with a dependents
//!   annotation not written by conflux) by the validation's fixed `message`, which names the
//!   labels and the annotation to look at.
//!
//! ```
//! use conflux_copy_core::protect::Policy;
//! use conflux_copy_core::protect_policy::{admission_policy, admission_policy_bindings, POLICY_NAME};
//!
//! let policy = admission_policy(&Policy {
//!     allow_users: vec!["system:serviceaccount:flux-system:kustomize-controller".to_owned()],
//!     ..Policy::default()
//! });
//! assert_eq!(policy["metadata"]["name"], POLICY_NAME);
//! assert_eq!(policy["spec"]["failurePolicy"], "Fail");
//! for binding in admission_policy_bindings() {
//!     assert_eq!(binding["spec"]["policyName"], POLICY_NAME);
//!     assert_eq!(binding["spec"]["validationActions"][0], "Deny");
//! }
//! ```

use serde_json::{Value, json};

use crate::protect::{
    CONFLUX_KEYS, DEPENDENTS_ANNOTATION, ENABLED_LABEL, EXEMPT_GROUPS_ANNOTATION,
    EXEMPT_SERVICE_ACCOUNTS_ANNOTATION, EXEMPT_USERS_ANNOTATION, MASTERS_GROUP,
    MAX_QUOTED_DEPENDENTS, OWNER_KEYS, PROTECTED_LABEL, Policy, RULES_ANNOTATION,
    WHILE_COPIED_ANNOTATION,
};

/// Name of the ValidatingAdmissionPolicy (the same name as the webhook mode's
/// ValidatingWebhookConfiguration: one of the two exists at a time).
pub const POLICY_NAME: &str = "conflux-protect";

/// Name of the binding for sources conflux protects ([`PROTECTED_LABEL`]).
pub const SOURCES_BINDING: &str = "conflux-protect-sources";

/// Name of the binding for objects users opted in ([`ENABLED_LABEL`]).
pub const LABELLED_BINDING: &str = "conflux-protect-labelled";

/// `apiVersion` of the policy and its bindings.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// A CEL string literal for `text`: JSON's double-quoted form is valid CEL (CEL accepts the
/// escapes JSON produces: `\"`, `\\`, `\n`, `\t`, `\uXXXX`, ...).
fn lit(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// A CEL list literal of strings.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| lit(i)).collect();
    format!("[{}]", items.join(", "))
}

/// The CEL of the changes of `keys` (labels or annotations) from the old to the new object:
/// for each, a one-element list with the refusal (removing, changing or adding it), or an empty
/// list; concatenated.
fn key_changes(keys: &[(&str, &str, &str)]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|(section, what, key)| {
            let (old, new) = match *section {
                "labels" => ("variables.oldLabels", "variables.newLabels"),
                _ => ("variables.oldAnnotations", "variables.newAnnotations"),
            };
            let k = lit(key);
            let removed = lit(&format!("removing its protection {what} {key}"));
            let changed = lit(&format!("changing its protection {what} {key}"));
            let added = lit(&format!("adding the protection {what} {key}"));
            format!(
                "({k} in {old} ? (!({k} in {new}) ? [{removed}] : ({new}[{k}] != {old}[{k}] ? [{changed}] : [])) : ({k} in {new} ? [{added}] : []))"
            )
        })
        .collect();
    parts.join(" + ")
}

/// The CEL of a comma-separated owner annotation as a list: entries trimmed, empty ones dropped.
fn owner_list(key: &str) -> String {
    let k = lit(key);
    format!(
        "({k} in variables.oldAnnotations ? variables.oldAnnotations[{k}].split(',').map(s, s.trim()).filter(s, s != '') : [])"
    )
}

/// The ValidatingAdmissionPolicy [`POLICY_NAME`] enforcing `policy` (see the module
/// documentation), as JSON for a server-side apply.
pub fn admission_policy(policy: &Policy) -> Value {
    let mut groups = vec![MASTERS_GROUP.to_owned()];
    groups.extend(policy.allow_groups.iter().cloned());
    let users = list(&policy.allow_users);
    let groups = list(&groups);
    let protected = lit(PROTECTED_LABEL);
    let enabled = lit(ENABLED_LABEL);
    let dependents = lit(DEPENDENTS_ANNOTATION);
    let rules = lit(RULES_ANNOTATION);
    let while_copied = lit(WHILE_COPIED_ANNOTATION);
    let max = MAX_QUOTED_DEPENDENTS;

    // The API server compiles matchConditions without the policy's variables: the two conditions
    // are spelled out, and the variables of the same name reuse them.
    let exempt = format!(
        "request.userInfo.?username.orValue('') in {users} || request.userInfo.?groups.orValue([]).exists(g, g in {groups})"
    );
    let old_label_true = |key: &str| {
        format!(
            "has(oldObject.metadata.labels) && {key} in oldObject.metadata.labels && oldObject.metadata.labels[{key}] == 'true'"
        )
    };
    let (by_conflux, opted_in) = (old_label_true(&protected), old_label_true(&enabled));

    // One rule line's predicates (`f`: its six fields).
    let covers = "(f[2] == '' || f[2].split(',').exists(o, o == request.operation))";
    let exempts = "(f[3].split(',').exists(u, u != '' && u == variables.username) || f[4].split(',').exists(g, g != '' && g in variables.groups))";
    let content_by = format!("(size(variables.content) > 0 && {covers} && !{exempts})");
    let meta_by = format!("(size(variables.confluxChanges) > 0 && !{exempts})");
    let undo = |what: &str| {
        format!(
            "(variables.ownerLocked ? 'ask an identity its owner exempts (' + variables.ownerExemptList + ') to ' + {what} : {what} + ' first (the owner\\'s protection)')"
        )
    };

    // `object` is null for DELETE: everything reading it is reached for UPDATE only (CEL's `?:`,
    // `&&` and `||` evaluate lazily, and so are variables).
    let variables = [
        ("isSecret", "request.kind.kind == 'Secret'".to_owned()),
        (
            "username",
            "request.userInfo.?username.orValue('')".to_owned(),
        ),
        ("groups", "request.userInfo.?groups.orValue([])".to_owned()),
        (
            "oldLabels",
            "oldObject.metadata.?labels.orValue({})".to_owned(),
        ),
        (
            "oldAnnotations",
            "oldObject.metadata.?annotations.orValue({})".to_owned(),
        ),
        (
            "newLabels",
            "object == null ? {} : object.metadata.?labels.orValue({})".to_owned(),
        ),
        (
            "newAnnotations",
            "object == null ? {} : object.metadata.?annotations.orValue({})".to_owned(),
        ),
        ("byConflux", by_conflux.clone()),
        ("optedIn", opted_in.clone()),
        // The rule lines, each padded to six fields (as `RuleLine::parse` reads them).
        (
            "lines",
            format!(
                "variables.byConflux && {rules} in variables.oldAnnotations ? variables.oldAnnotations[{rules}].split('\\n').filter(l, l != '').map(l, l.split(';', 6) + ['', '', '', '', '', '']) : []"
            ),
        ),
        // A labelled object without lines: one platform rule without exemptions.
        (
            "platform",
            "variables.byConflux && size(variables.lines) == 0 ? [['', '', '', '', '', '']] : variables.lines.filter(f, f[0] != 'copy')".to_owned(),
        ),
        (
            "copyLines",
            "variables.lines.filter(f, f[0] == 'copy')".to_owned(),
        ),
        (
            "whileCopied",
            format!(
                "{while_copied} in variables.oldAnnotations && variables.oldAnnotations[{while_copied}] == 'true' && size(variables.copyLines) > 0"
            ),
        ),
        (
            "ownerRules",
            "variables.optedIn || variables.whileCopied".to_owned(),
        ),
        (
            "ownerUsers",
            format!(
                "{} + {}.map(s, 'system:serviceaccount:' + s.replace('/', ':'))",
                owner_list(EXEMPT_USERS_ANNOTATION),
                owner_list(EXEMPT_SERVICE_ACCOUNTS_ANNOTATION)
            ),
        ),
        ("ownerGroups", owner_list(EXEMPT_GROUPS_ANNOTATION)),
        (
            "ownerExempt",
            "variables.username in variables.ownerUsers || variables.groups.exists(g, g in variables.ownerGroups)".to_owned(),
        ),
        (
            "ownerLocked",
            "variables.ownerRules && size(variables.ownerUsers) + size(variables.ownerGroups) > 0 && !variables.ownerExempt".to_owned(),
        ),
        (
            "ownerExemptList",
            "(variables.ownerUsers + variables.ownerGroups.map(g, 'group ' + g)).join(', ')"
                .to_owned(),
        ),
        // A Secret's missing or empty type is what the API server stores: Opaque.
        (
            "oldType",
            "oldObject.?type.orValue('') == '' ? 'Opaque' : oldObject.type".to_owned(),
        ),
        (
            "newType",
            "object.?type.orValue('') == '' ? 'Opaque' : object.type".to_owned(),
        ),
        (
            "changedFields",
            [
                "(oldObject.?data.orValue({}) != object.?data.orValue({}) ? ['data'] : [])",
                "(!variables.isSecret && oldObject.?binaryData.orValue({}) != object.?binaryData.orValue({}) ? ['binaryData'] : [])",
                "(variables.isSecret && variables.oldType != variables.newType ? ['type'] : [])",
                "(oldObject.?immutable.orValue(false) != object.?immutable.orValue(false) ? ['immutable'] : [])",
            ]
            .join(" + "),
        ),
        (
            "content",
            format!(
                "request.operation == 'DELETE' ? ['deleting it'] : {}",
                [
                    "(size(variables.changedFields) > 0 ? ['changing its ' + variables.changedFields.join(', ')] : [])",
                    // The API server folds stringData into data before admission; checked anyway,
                    // as the webhook does.
                    "(variables.isSecret && size(object.?stringData.orValue({})) > 0 ? ['setting its stringData'] : [])",
                ]
                .join(" + ")
            ),
        ),
        (
            "confluxChanges",
            format!(
                "request.operation == 'DELETE' ? [] : {}",
                key_changes(&CONFLUX_KEYS)
            ),
        ),
        (
            "ownerChanges",
            format!(
                "request.operation == 'DELETE' ? [] : {}",
                key_changes(&OWNER_KEYS)
            ),
        ),
        (
            "binding",
            format!("variables.platform.filter(f, {content_by} || {meta_by})"),
        ),
        (
            "ownerContent",
            "variables.ownerRules && size(variables.content) > 0 && !variables.ownerExempt"
                .to_owned(),
        ),
        (
            "ownerMeta",
            "variables.ownerLocked && (size(variables.confluxChanges) > 0 || size(variables.ownerChanges) > 0)".to_owned(),
        ),
        (
            "refused",
            format!(
                "(variables.platform.exists(f, {content_by}) || variables.ownerContent ? variables.content : []) + (variables.platform.exists(f, {meta_by}) || (variables.ownerLocked && size(variables.confluxChanges) > 0) ? variables.confluxChanges : []) + (variables.ownerLocked ? variables.ownerChanges : [])"
            ),
        ),
        (
            "dependents",
            format!(
                "({dependents} in variables.oldAnnotations ? variables.oldAnnotations[{dependents}] : '').trim()"
            ),
        ),
        (
            "messages",
            "variables.binding.filter(f, f[0] == 'policy' && f[5] != '').map(f, f[5] + ' ')"
                .to_owned(),
        ),
        (
            "why",
            format!(
                "variables.binding.map(f, f[0] == 'sync' ? 'it is copied by ' + f[1] : (f[0] == 'policy' ? f[1] + ' protects it' : (variables.dependents != '' ? 'conflux protects it for ' + (size(variables.dependents) > {max} ? variables.dependents.substring(0, {max}) + '…' : variables.dependents) : 'conflux protects it'))) + (variables.ownerContent || variables.ownerMeta ? (variables.optedIn ? [{}] : []) + (variables.whileCopied ? [{} + variables.copyLines[0][1]] : []) : [])",
                lit(&format!("it is labelled {ENABLED_LABEL}=true")),
                lit(&format!(
                    "its owner asked ({WHILE_COPIED_ANNOTATION}) to protect it while copied by "
                )),
            ),
        ),
        (
            "how",
            format!(
                "variables.binding.map(f, f[0] == 'sync' ? 'ask the platform to stop copying it with ' + f[1] : (f[0] == 'policy' ? 'ask the platform to change ' + f[1] + (f[3] != '' ? ', which exempts the users ' + f[3] : '') + (f[4] != '' ? ', which exempts the groups ' + f[4] : '') : {})) + (variables.ownerContent || variables.ownerMeta ? (variables.optedIn ? [{}] : []) + (variables.whileCopied ? [{}] : []) : [])",
                lit(&format!(
                    "ask the platform to remove what protects it (conflux then removes {PROTECTED_LABEL})"
                )),
                undo(&lit(&format!("remove the label {ENABLED_LABEL}"))),
                undo(&lit(&format!("remove the annotation {WHILE_COPIED_ANNOTATION}"))),
            ),
        ),
    ];
    let variables: Vec<Value> = variables
        .into_iter()
        .map(|(name, expression)| json!({"name": name, "expression": expression}))
        .collect();

    let namespace_selector = match policy.excluded_namespaces.as_slice() {
        [] => json!({}),
        excluded => json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                 "operator": "NotIn", "values": excluded}]}),
    };
    let message = "variables.messages.join('') + request.kind.kind + ' ' + request.namespace + '/' + request.name + ' is protected: ' + variables.why.join('; ') + '. Refused: ' + variables.refused.join('; ') + '. To unprotect it, ' + variables.how.join('; ') + '; or ask a cluster admin.'";
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/managed-by": "conflux"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["UPDATE", "DELETE"],
                                   "resources": ["configmaps", "secrets"], "scope": "Namespaced"}],
                "namespaceSelector": namespace_selector,
                "objectSelector": {},
                "matchPolicy": "Equivalent",
            },
            "variables": variables,
            "matchConditions": [
                {"name": "not-exempt", "expression": format!("!({exempt})")},
                {"name": "protected", "expression": format!("({by_conflux}) || ({opted_in})")},
            ],
            "validations": [{
                "expression": "size(variables.refused) == 0",
                "messageExpression": message,
                "message": format!("this object is protected by conflux (label {PROTECTED_LABEL} or {ENABLED_LABEL}; why is in its annotations {DEPENDENTS_ANNOTATION} and {RULES_ANNOTATION}, the owner's exemptions in {EXEMPT_USERS_ANNOTATION}, {EXEMPT_GROUPS_ANNOTATION} and {EXEMPT_SERVICE_ACCOUNTS_ANNOTATION}): deleting it, changing its content or removing its protection is refused"),
                "reason": "Forbidden",
            }],
        },
    })
}

/// The two ValidatingAdmissionPolicyBindings of [`POLICY_NAME`]: [`SOURCES_BINDING`] for objects
/// labelled [`PROTECTED_LABEL`]` = "true"`, [`LABELLED_BINDING`] for [`ENABLED_LABEL`]` =
/// "true"`, both denying (`validationActions: [Deny]`).
pub fn admission_policy_bindings() -> Vec<Value> {
    [
        (SOURCES_BINDING, PROTECTED_LABEL),
        (LABELLED_BINDING, ENABLED_LABEL),
    ]
    .into_iter()
    .map(|(name, label)| {
        json!({
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "conflux"}},
            "spec": {
                "policyName": POLICY_NAME,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {},
                    "objectSelector": {"matchLabels": {label: "true"}},
                },
            },
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protect::{Operation, Request, Verdict, decide};

    fn variable<'v>(policy: &'v Value, name: &str) -> &'v str {
        policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))["expression"]
            .as_str()
            .unwrap()
    }

    fn condition<'v>(policy: &'v Value, name: &str) -> &'v str {
        policy["spec"]["matchConditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no matchCondition {name}"))["expression"]
            .as_str()
            .unwrap()
    }

    #[test]
    fn shape() {
        let policy = admission_policy(&Policy::default());
        let spec = &policy["spec"];
        assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
        assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(spec["failurePolicy"], "Fail");
        let rules = &spec["matchConstraints"]["resourceRules"][0];
        assert_eq!(rules["resources"], json!(["configmaps", "secrets"]));
        assert_eq!(rules["operations"], json!(["UPDATE", "DELETE"]));
        assert_eq!(rules["apiGroups"], json!([""]));
        assert_eq!(
            spec["matchConstraints"]["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                         "operator": "NotIn", "values": ["kube-system"]}]})
        );
        assert_eq!(spec["validations"].as_array().unwrap().len(), 1);
        // matchConditions cannot read variables (the API server refuses them).
        for c in spec["matchConditions"].as_array().unwrap() {
            assert!(
                !c["expression"].as_str().unwrap().contains("variables."),
                "{c}"
            );
        }
        assert!(
            condition(&policy, "protected").contains(&variable(&policy, "byConflux").to_owned())
        );
        assert!(condition(&policy, "protected").contains(&variable(&policy, "optedIn").to_owned()));
        assert_eq!(
            spec["validations"][0]["expression"],
            "size(variables.refused) == 0"
        );
        // Every variable is defined before it is used (the API server resolves them lazily, but
        // a reader should not have to).
        let names: Vec<&str> = spec["variables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for (i, name) in names.iter().enumerate() {
            for later in &names[i + 1..] {
                assert!(
                    !variable(&policy, name).contains(&format!("variables.{later}")),
                    "{name} uses {later}, defined later"
                );
            }
        }

        let bindings = admission_policy_bindings();
        let selectors: Vec<&Value> = bindings
            .iter()
            .map(|b| &b["spec"]["matchResources"]["objectSelector"])
            .collect();
        assert_eq!(
            selectors,
            [
                &json!({"matchLabels": {PROTECTED_LABEL: "true"}}),
                &json!({"matchLabels": {ENABLED_LABEL: "true"}}),
            ]
        );
        for b in &bindings {
            assert_eq!(b["kind"], "ValidatingAdmissionPolicyBinding");
            assert_eq!(b["spec"]["policyName"], POLICY_NAME);
            assert_eq!(b["spec"]["validationActions"], json!(["Deny"]));
        }
    }

    #[test]
    fn allow_lists_are_literals_and_escaped() {
        let policy = admission_policy(&Policy {
            allow_users: vec![
                "system:serviceaccount:flux-system:kustomize-controller".to_owned(),
                "it's \"odd\"\\".to_owned(),
            ],
            allow_groups: vec!["platform-admins".to_owned()],
            excluded_namespaces: vec![],
        });
        let exempt = condition(&policy, "not-exempt");
        assert!(
            exempt.contains(
                r#"in ["system:serviceaccount:flux-system:kustomize-controller", "it's \"odd\"\\"]"#
            ),
            "{exempt}"
        );
        assert!(
            exempt.contains(r#"g in ["system:masters", "platform-admins"]"#),
            "{exempt}"
        );
        // Nobody allowed: masters still are, and the user list is empty.
        let default = admission_policy(&Policy::default());
        let exempt = condition(&default, "not-exempt");
        assert!(exempt.contains("orValue('') in []"), "{exempt}");
        assert!(exempt.contains(r#"g in ["system:masters"]"#), "{exempt}");
        // No excluded namespace: every namespace.
        assert_eq!(
            policy["spec"]["matchConstraints"]["namespaceSelector"],
            json!({})
        );
    }

    #[test]
    fn cel_literal_escapes_like_cel() {
        assert_eq!(lit("a"), r#""a""#);
        assert_eq!(lit("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(lit("\u{1}"), r#""\u0001""#);
        assert_eq!(lit("é…"), "\"é…\"");
        assert_eq!(list(&[]), "[]");
    }

    #[test]
    fn every_refusal_and_protection_key_is_checked() {
        let policy = admission_policy(&Policy::default());
        let fields = variable(&policy, "changedFields");
        for field in ["data", "binaryData", "type", "immutable"] {
            assert!(fields.contains(&format!("['{field}']")), "{field}");
        }
        let content = variable(&policy, "content");
        assert!(content.starts_with("request.operation == 'DELETE' ? ['deleting it']"));
        assert!(content.contains("'setting its stringData'"));
        for (variable_name, keys) in [
            ("confluxChanges", &CONFLUX_KEYS[..]),
            ("ownerChanges", &OWNER_KEYS[..]),
        ] {
            let changes = variable(&policy, variable_name);
            for (_, what, key) in keys {
                for change in [
                    format!("removing its protection {what} {key}"),
                    format!("changing its protection {what} {key}"),
                    format!("adding the protection {what} {key}"),
                ] {
                    assert!(changes.contains(&change), "{variable_name}: {change}");
                }
            }
        }
        let refused = variable(&policy, "refused");
        for part in [
            "variables.content",
            "variables.confluxChanges",
            "variables.ownerChanges",
        ] {
            assert!(refused.contains(part), "{part}");
        }
    }

    /// The message the CEL builds has the decision's parts, word for word: every fixed fragment of
    /// a webhook message appears as a literal in the policy.
    #[test]
    fn messages_are_built_from_the_decisions_words() {
        let old = json!({
            "kind": "Secret",
            "metadata": {"name": "registry", "namespace": "team-a",
                         "labels": {PROTECTED_LABEL: "true", ENABLED_LABEL: "true"}},
            "data": {"k": "dg=="},
        });
        let mut new = old.clone();
        new["data"]["k"] = json!("dw==");
        new["immutable"] = json!(true);
        new["metadata"]["labels"] = json!({});
        let groups = vec![];
        let delete = Request {
            operation: Operation::Delete,
            username: "alice",
            groups: &groups,
            kind: "Secret",
            namespace: "team-a",
            name: "registry",
            old_object: Some(&old),
            new_object: None,
        };
        let update = Request {
            operation: Operation::Update,
            new_object: Some(&new),
            ..delete
        };
        let text = serde_json::to_string(&admission_policy(&Policy::default())).unwrap();
        for request in [delete, update] {
            let Verdict::Deny { message } = decide(&Policy::default(), &request) else {
                panic!("denied")
            };
            let rest = message
                .strip_prefix("Secret team-a/registry is protected: ")
                .unwrap();
            let (why, rest) = rest.split_once(". Refused: ").unwrap();
            let (refused, how) = rest.split_once(". To unprotect it, ").unwrap();
            let how = how.strip_suffix("; or ask a cluster admin.").unwrap();
            let mut fragments: Vec<&str> = why.split("; ").collect();
            for way in how.split("; ") {
                // The owner's ways out are joined by the CEL from the label and its condition.
                match way.strip_suffix(" first (the owner's protection)") {
                    Some(what) => fragments.push(what),
                    None => fragments.push(way),
                }
            }
            for part in refused.split("; ") {
                // "changing its data, immutable" is joined by the CEL from its fields.
                match part.strip_prefix("changing its ") {
                    Some(fields) if !fields.starts_with("protection") => {
                        fragments.push("changing its ");
                        fragments.extend(fields.split(", "));
                    }
                    _ => fragments.push(part),
                }
            }
            for fragment in fragments {
                let quoted = serde_json::to_string(fragment).unwrap();
                let (single, double) = (format!("'{fragment}'"), quoted.trim_matches('"'));
                assert!(
                    text.contains(&single) || text.contains(double),
                    "{fragment:?} not in the policy"
                );
            }
            assert!(text.contains("' is protected: '"));
            assert!(text.contains("'. Refused: '"));
            assert!(text.contains("'. To unprotect it, '"));
            assert!(
                text.contains("' first (the owner\\\\'s protection)'"),
                "{text}"
            );
            assert!(text.contains("'; or ask a cluster admin.'"));
        }
    }

    /// The words of the rules' reasons and ways out, as the decision writes them, are the CEL's
    /// literals (the end-to-end test compares whole messages on the API server).
    #[test]
    fn rule_messages_are_built_from_the_decisions_words() {
        let text = serde_json::to_string(&admission_policy(&Policy::default())).unwrap();
        let old = json!({
            "kind": "Secret",
            "metadata": {"name": "s", "namespace": "y",
                         "labels": {PROTECTED_LABEL: "true", ENABLED_LABEL: "true"},
                         "annotations": {
                             RULES_ANNOTATION: "sync;ConfigSync/fan;;;;\ncopy;Secret/x/s (copyFrom);;;;\npolicy;ProtectPolicy/p;;u;g;Stop.",
                             WHILE_COPIED_ANNOTATION: "true",
                             EXEMPT_USERS_ANNOTATION: "alice",
                         }},
        });
        let Verdict::Deny { message } = decide(
            &Policy::default(),
            &Request {
                operation: Operation::Delete,
                username: "dave",
                groups: &[],
                kind: "Secret",
                namespace: "y",
                name: "s",
                old_object: Some(&old),
                new_object: None,
            },
        ) else {
            panic!("denied")
        };
        assert!(
            message.starts_with("Stop. Secret y/s is protected: "),
            "{message}"
        );
        for (fragment, literal) in [
            ("it is copied by ConfigSync/fan", "'it is copied by '"),
            ("ProtectPolicy/p protects it", "' protects it'"),
            (
                "it is labelled protect.conflux.dev/enabled=true",
                "it is labelled protect.conflux.dev/enabled=true",
            ),
            (
                "to protect it while copied by Secret/x/s (copyFrom)",
                "to protect it while copied by ",
            ),
            (
                "ask the platform to stop copying it with ConfigSync/fan",
                "'ask the platform to stop copying it with '",
            ),
            (
                "ask the platform to change ProtectPolicy/p, which exempts the users u, which exempts the groups g",
                "', which exempts the groups '",
            ),
            (
                "ask an identity its owner exempts (alice) to remove the label protect.conflux.dev/enabled",
                "'ask an identity its owner exempts ('",
            ),
            (
                "to remove the annotation protect.conflux.dev/while-copied",
                "remove the annotation protect.conflux.dev/while-copied",
            ),
        ] {
            assert!(message.contains(fragment), "{fragment:?} not in {message}");
            assert!(text.contains(literal), "{literal:?} not in the policy");
        }
    }
}
