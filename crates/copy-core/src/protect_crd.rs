//! The `ProtectPolicy` custom resource (`conflux.dev/v1alpha1`, cluster-scoped): the platform's
//! rule that protects the ConfigMaps and Secrets it selects, like a Kyverno `validate` rule with
//! `deny` on UPDATE and DELETE, with Kyverno's `exclude.subjects` as its exemptions.
//!
//! conflux's labeller puts a matched object under protection ([`PROTECTED_LABEL`]) and writes the
//! policy as one line of [`RULES_ANNOTATION`] ([`ValidPolicy::rule_line`]), which the webhook's
//! [`decide`](crate::protect::decide) and the admission policy read alike.
//!
//! ```
//! use conflux_copy_core::protect_crd::{ProtectPolicySpec, validate};
//!
//! let spec: ProtectPolicySpec = serde_json::from_value(serde_json::json!({
//!     "configs": {"kinds": ["Secret"], "namespaces": ["platform"], "names": ["blogsecret"]},
//!     "operations": ["UPDATE", "DELETE"],
//!     "exclude": {"serviceAccounts": [{"namespace": "kyverno", "name": "kyverno"}]},
//!     "message": "This Secret is protected and may not be altered or deleted.",
//! })).unwrap();
//! let valid = validate("validate-secrets", &spec).unwrap();
//! assert_eq!(
//!     valid.rule_line().render(),
//!     "policy;ProtectPolicy/validate-secrets;UPDATE,DELETE;system:serviceaccount:kyverno:kyverno;;\
//!      This Secret is protected and may not be altered or deleted."
//! );
//! ```
//!
//! [`PROTECTED_LABEL`]: crate::protect::PROTECTED_LABEL
//! [`RULES_ANNOTATION`]: crate::protect::RULES_ANNOTATION

use std::collections::BTreeMap;

use conflux_watch_index::config_selector::{CompiledConfigSelector, ConfigMeta};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::protect::{RuleLine, service_account_username};
use crate::source::SourceKind;

/// Kind of `ProtectPolicy`.
pub const KIND: &str = "ProtectPolicy";

/// The namespaces matched only when a selector lists them by exact name: the control plane's.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The longest message kept: refusals stay readable, and the API server shows at most 5 KiB.
const MAX_MESSAGE: usize = 1024;

/// Which ConfigMaps and Secrets a rule applies to (the `configs` block ReloadPolicies share).
pub use conflux_watch_index::config_selector::ConfigSelector;

/// Protect the selected ConfigMaps and Secrets from being changed or deleted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "kube",
    derive(kube_derive::CustomResource, schemars::JsonSchema),
    kube(
        group = "conflux.dev",
        version = "v1alpha1",
        kind = "ProtectPolicy",
        doc = "A ProtectPolicy protects the ConfigMaps and Secrets it selects from being changed or deleted, except by the identities it exempts.",
        status = "ProtectPolicyStatus",
        shortname = "ppol",
        derive = "PartialEq",
        derive = "Default",
        crates(kube_core = "::kube_core"),
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProtectPolicySpec {
    /// The ConfigMaps and Secrets protected.
    #[serde(default)]
    pub configs: ConfigSelector,
    /// Admission operations refused: `UPDATE`, `DELETE`; empty or absent for both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<String>,
    /// Who is exempt (Kyverno's `exclude.subjects`).
    #[serde(default)]
    pub exclude: Exclude,
    /// Shown first in every refusal this policy causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The identities a ProtectPolicy does not apply to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Exclude {
    /// Usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// ServiceAccounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<ServiceAccountRef>,
}

/// A ServiceAccount by namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Observed state of a ProtectPolicy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ProtectPolicyStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` when the spec is valid and applied, `False` with a stable reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Why a ProtectPolicy spec cannot be used (the detail of [`Error::InvalidProtectPolicy`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SpecProblem {
    /// An operation other than `UPDATE` or `DELETE`.
    #[error("operations: '{0}' is not UPDATE or DELETE")]
    Operation(String),
    /// A label selector that does not parse, or a glob that can match nothing (the message
    /// names the field).
    #[error("{message}")]
    Selector {
        /// The reason: `InvalidSelector` or `InvalidGlob`.
        reason: &'static str,
        /// The parser's message.
        message: String,
    },
    /// An exempt identity that is empty or holds `,`, `;` or a line break (the separators of the
    /// rules annotation).
    #[error("exclude.{field}: '{value}' is empty or holds ',', ';' or a line break")]
    Subject {
        /// `users`, `groups` or `serviceAccounts`.
        field: &'static str,
        /// The value (at most 64 characters).
        value: String,
    },
}

impl SpecProblem {
    fn reason(&self) -> &'static str {
        match self {
            SpecProblem::Operation(_) => "InvalidOperation",
            SpecProblem::Selector { reason, .. } => reason,
            SpecProblem::Subject { .. } => "InvalidSubject",
        }
    }
}

/// A ProtectPolicy whose spec was checked: it can match objects and be written as a rule line.
#[derive(Debug, Clone)]
pub struct ValidPolicy {
    name: String,
    configs: CompiledConfigSelector,
    line: RuleLine,
}

/// Checks `spec` (of the ProtectPolicy `name`): [`Error::InvalidProtectPolicy`] when it cannot be
/// used, with the stable reason `InvalidOperation`, `InvalidSelector` or `InvalidSubject`.
pub fn validate(name: &str, spec: &ProtectPolicySpec) -> Result<ValidPolicy, Error> {
    check(name, spec).map_err(|problem| Error::InvalidProtectPolicy {
        policy: name.to_owned(),
        reason: problem.reason(),
        problem: problem.to_string(),
    })
}

fn check(name: &str, spec: &ProtectPolicySpec) -> Result<ValidPolicy, SpecProblem> {
    let mut operations = Vec::new();
    for op in &spec.operations {
        match op.as_str() {
            "UPDATE" | "DELETE" => {
                if !operations.contains(&op.as_str()) {
                    operations.push(op.as_str());
                }
            }
            other => return Err(SpecProblem::Operation(cut(other))),
        }
    }
    let configs = spec
        .configs
        .compile("configs")
        .map_err(|e| SpecProblem::Selector {
            reason: e.reason(),
            message: e.to_string(),
        })?;
    let subject = |field: &'static str, value: &str| {
        if value.trim().is_empty() || value.contains([',', ';', '\n', '\r']) {
            Err(SpecProblem::Subject {
                field,
                value: cut(value),
            })
        } else {
            Ok(value.trim().to_owned())
        }
    };
    let mut users = Vec::new();
    for u in &spec.exclude.users {
        users.push(subject("users", u)?);
    }
    for sa in &spec.exclude.service_accounts {
        let value = format!("{}/{}", sa.namespace, sa.name);
        if sa.namespace.trim().is_empty() || sa.name.trim().is_empty() || value.contains(':') {
            return Err(SpecProblem::Subject {
                field: "serviceAccounts",
                value: cut(&value),
            });
        }
        subject("serviceAccounts", &value)?;
        users.push(service_account_username(
            sa.namespace.trim(),
            sa.name.trim(),
        ));
    }
    let mut groups = Vec::new();
    for g in &spec.exclude.groups {
        groups.push(subject("groups", g)?);
    }
    // A line break would end the rule's line; other control characters would make the API
    // server drop the message.
    let message: String = spec
        .message
        .as_deref()
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_MESSAGE)
        .collect::<String>()
        .trim()
        .to_owned();
    Ok(ValidPolicy {
        name: name.to_owned(),
        configs,
        line: RuleLine {
            kind: "policy".to_owned(),
            who: format!("{KIND}/{name}"),
            operations: operations.join(","),
            users: users.join(","),
            groups: groups.join(","),
            message,
        },
    })
}

/// `Ready=True` reason of a valid ProtectPolicy.
pub const REASON_APPLIED: &str = "Applied";

/// The status for a ProtectPolicy of `generation` whose validation gave `result`: `Ready=True`
/// (reason `Applied`) or `Ready=False` with the error's stable reason; `lastTransitionTime` kept
/// from `previous` while the status stays the same.
pub fn status(
    result: Result<(), &Error>,
    generation: Option<i64>,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    previous: Option<&ProtectPolicyStatus>,
) -> ProtectPolicyStatus {
    let (state, reason, message) = match result {
        Ok(()) => (
            "True",
            REASON_APPLIED,
            "the selected ConfigMaps and Secrets are protected".to_owned(),
        ),
        Err(err) => ("False", err.reason(), err.to_string()),
    };
    let previous = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let mut conditions: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != crate::status::READY)
        .cloned()
        .collect();
    conditions.insert(
        0,
        crate::status::ready(state, reason, message, generation, now, previous),
    );
    ProtectPolicyStatus {
        observed_generation: generation,
        conditions,
    }
}

/// At most 64 characters of `text`, for messages.
fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

impl ValidPolicy {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the policy reads the labels of Namespaces (`configs.namespaceSelector`).
    pub fn needs_namespace_labels(&self) -> bool {
        self.configs.needs_namespace_labels()
    }

    /// Whether the policy selects the `kind` `namespace/name` with `labels`, in a Namespace with
    /// `namespace_labels` (`None` when unknown: a policy with a namespace selector then does not
    /// match).
    pub fn matches(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        (namespace_labels.is_some() || !self.needs_namespace_labels())
            && self.configs.matches(&ConfigMeta {
                kind,
                namespace,
                namespace_labels,
                name,
                labels,
            })
    }

    /// The policy as a line of [`RULES_ANNOTATION`](crate::protect::RULES_ANNOTATION).
    pub fn rule_line(&self) -> RuleLine {
        self.line.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::map;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> ProtectPolicySpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn matching_ands_every_part_and_spares_system_namespaces() {
        let p = validate(
            "p",
            &spec(json!({"configs": {
                "kinds": ["Secret"], "namespaces": ["platform", "team-*"], "names": ["blog*"],
                "selector": {"matchLabels": {"app": "blog"}},
            }})),
        )
        .unwrap();
        let app = map(&[("app", "blog")]);
        assert!(p.matches(SourceKind::Secret, "team-a", "blogsecret", Some(&app), None));
        assert!(!p.matches(
            SourceKind::ConfigMap,
            "team-a",
            "blogsecret",
            Some(&app),
            None
        ));
        assert!(!p.matches(SourceKind::Secret, "other", "blogsecret", Some(&app), None));
        assert!(!p.matches(SourceKind::Secret, "platform", "other", Some(&app), None));
        assert!(!p.matches(SourceKind::Secret, "platform", "blogsecret", None, None));

        let everything = validate("all", &ProtectPolicySpec::default()).unwrap();
        assert!(everything.matches(SourceKind::ConfigMap, "a", "b", None, None));
        for ns in SYSTEM_NAMESPACES {
            assert!(!everything.matches(SourceKind::ConfigMap, ns, "b", None, None));
        }
        let star = validate("star", &spec(json!({"configs": {"namespaces": ["*"]}}))).unwrap();
        assert!(!star.matches(SourceKind::Secret, "kube-system", "b", None, None));
        let named = validate(
            "ks",
            &spec(json!({"configs": {"namespaces": ["kube-system"]}})),
        )
        .unwrap();
        assert!(named.matches(SourceKind::Secret, "kube-system", "b", None, None));

        let by_ns = validate(
            "ns",
            &spec(json!({"configs": {"namespaces": ["team-*"],
                                     "namespaceSelector": {"matchLabels": {"tier": "prod"}}}})),
        )
        .unwrap();
        assert!(by_ns.needs_namespace_labels());
        let prod = map(&[("tier", "prod")]);
        assert!(by_ns.matches(SourceKind::Secret, "team-a", "x", None, Some(&prod)));
        assert!(!by_ns.matches(SourceKind::Secret, "team-a", "x", None, None));
        assert!(!by_ns.matches(SourceKind::Secret, "other", "x", None, Some(&prod)));
    }

    #[test]
    fn bad_specs_have_stable_reasons() {
        for (value, reason) in [
            (json!({"operations": ["CREATE"]}), "InvalidOperation"),
            (
                json!({"configs": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}}),
                "InvalidSelector",
            ),
            (
                json!({"configs": {"namespaceSelector": {"matchLabels": {"a b": "c"}}}}),
                "InvalidSelector",
            ),
            (json!({"exclude": {"users": ["a,b"]}}), "InvalidSubject"),
            (json!({"exclude": {"groups": [""]}}), "InvalidSubject"),
            (json!({"exclude": {"users": ["x;y"]}}), "InvalidSubject"),
            (
                json!({"exclude": {"serviceAccounts": [{"namespace": "", "name": "a"}]}}),
                "InvalidSubject",
            ),
        ] {
            let problem = validate("bad", &spec(value.clone())).unwrap_err();
            assert_eq!(problem.reason(), reason, "{value}: {problem}");
        }
    }

    #[test]
    fn the_rule_line_carries_operations_exemptions_and_a_one_line_message() {
        let p = validate(
            "p",
            &spec(json!({"operations": ["DELETE", "DELETE"],
                         "exclude": {"users": ["alice"], "groups": ["admins", "ops"]},
                         "message": "no\nway;\tnever"})),
        )
        .unwrap();
        let line = p.rule_line();
        assert_eq!(
            line.render(),
            "policy;ProtectPolicy/p;DELETE;alice;admins,ops;no way; never"
        );
        assert_eq!(RuleLine::parse(&line.render()), line);
    }
}
