//! The `configs` block shared by conflux's cluster-scoped policies (ReloadPolicy, ProtectPolicy):
//! which ConfigMaps/Secrets a policy is about, by kind, namespace (globs and the Namespace's
//! labels), name (globs) and the config's own labels.
//!
//! Every part that is present must match (AND); an absent or empty part matches everything.
//! `kube-system`, `kube-public` and `kube-node-lease` are matched only when `namespaces` lists
//! them by exact name (as a ConfigSync's targets): a policy for "every namespace" is not meant to
//! reach into the control plane's.
//!
//! ```
//! use std::collections::BTreeMap;
//! use conflux_watch_index::config_selector::{ConfigMeta, ConfigSelector};
//! use conflux_watch_index::refs::ConfigKind;
//!
//! let sel: ConfigSelector = serde_json::from_str(
//!     r#"{"kinds":["Secret"],"namespaces":["team-*"],"names":["registry-*"]}"#,
//! ).unwrap();
//! let compiled = sel.compile("spec.configs").unwrap();
//! let labels = BTreeMap::new();
//! let config = ConfigMeta {
//!     kind: ConfigKind::Secret,
//!     namespace: "team-a",
//!     namespace_labels: None,
//!     name: "registry-eu",
//!     labels: Some(&labels),
//! };
//! assert!(compiled.matches(&config));
//! assert!(!compiled.matches(&ConfigMeta { namespace: "kube-system", ..config }));
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::glob::{any_match, check, is_literal};
use crate::refs::ConfigKind;
use crate::selector::{Selector, validate_label_selector};

/// Namespaces a policy reaches only when `namespaces` names them exactly.
pub const PROTECTED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Which ConfigMaps/Secrets a policy selects (the `configs` block, camelCase in JSON). See the
/// [module docs](self).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConfigSelector {
    /// `ConfigMap` and/or `Secret`; empty or absent: both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<ConfigKind>,
    /// Globs (`*`, `?`) on the config's namespace; empty: every namespace (but `kube-system`,
    /// `kube-public` and `kube-node-lease`, matched only when listed by exact name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// A label selector on the labels of the config's Namespace (ANDed with `namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Globs (`*`, `?`) on the config's name; empty: every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// A label selector on the config's own labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// What [`CompiledConfigSelector::matches`] reads of one config.
#[derive(Debug, Clone, Copy)]
pub struct ConfigMeta<'a> {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its Namespace's labels (`None`: unknown or none; a `namespaceSelector` then sees no
    /// labels).
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// Its name.
    pub name: &'a str,
    /// Its own labels (`None`: none).
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// A [`ConfigSelector`] checked and parsed once, to match many configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledConfigSelector {
    kinds: Vec<ConfigKind>,
    namespaces: Vec<String>,
    namespace_selector: Option<Selector>,
    names: Vec<String>,
    selector: Option<Selector>,
}

/// Characters of a selector problem kept in an error: it goes into a condition and an Event
/// (whose note holds 1 KiB), and quotes what the user wrote.
const MAX_SELECTOR_MESSAGE: usize = 512;

/// Checks and parses a policy's label selector at `path` (such as `spec.configs.selector`); `None`
/// when absent. The error is the first of apimachinery's problems (at most 512 characters of it),
/// as [`Error::Selector`].
pub fn label_selector(ls: Option<&LabelSelector>, path: &str) -> Result<Option<Selector>, Error> {
    let Some(ls) = ls else {
        return Ok(None);
    };
    let short = |m: &str| m.chars().take(MAX_SELECTOR_MESSAGE).collect::<String>();
    if let Some(first) = validate_label_selector(ls, path).first() {
        return Err(Error::Selector(short(first)));
    }
    Selector::from_label_selector(ls)
        .map(Some)
        .map_err(|e| Error::Selector(short(&format!("{path}: {e}"))))
}

fn globs(patterns: &[String], path: String) -> Result<Vec<String>, Error> {
    for (i, pattern) in patterns.iter().enumerate() {
        check(pattern).map_err(|reason| Error::InvalidGlob {
            field: format!("{path}[{i}]"),
            pattern: pattern.chars().take(64).collect(),
            reason,
        })?;
    }
    Ok(patterns.to_vec())
}

impl ConfigSelector {
    /// Checks every part and parses the label selectors. `path` names the block in errors (for
    /// example `spec.configs`). Errors: [`Error::InvalidGlob`] for a glob that can match no name,
    /// [`Error::Selector`] (apimachinery's messages) for an invalid label selector.
    pub fn compile(&self, path: &str) -> Result<CompiledConfigSelector, Error> {
        Ok(CompiledConfigSelector {
            kinds: self.kinds.clone(),
            namespaces: globs(&self.namespaces, format!("{path}.namespaces"))?,
            namespace_selector: label_selector(
                self.namespace_selector.as_ref(),
                &format!("{path}.namespaceSelector"),
            )?,
            names: globs(&self.names, format!("{path}.names"))?,
            selector: label_selector(self.selector.as_ref(), &format!("{path}.selector"))?,
        })
    }

    /// Whether `config` is selected. An invalid selector selects nothing (check it with
    /// [`compile`](Self::compile), which the callers that match many configs use anyway).
    pub fn matches(&self, config: &ConfigMeta<'_>) -> bool {
        self.compile("configs").is_ok_and(|c| c.matches(config))
    }
}

impl CompiledConfigSelector {
    /// Whether configs of `kind` may be selected.
    pub fn matches_kind(&self, kind: ConfigKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    /// Whether configs of `namespace` (whose Namespace carries `labels`) may be selected.
    pub fn matches_namespace(
        &self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let listed = if PROTECTED_NAMESPACES.contains(&namespace) {
            self.namespaces
                .iter()
                .any(|p| is_literal(p) && p == namespace)
        } else {
            self.namespaces.is_empty()
                || any_match(self.namespaces.iter().map(String::as_str), namespace)
        };
        listed
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(&labels))
    }

    /// Whether configs named `name` may be selected.
    pub fn matches_name(&self, name: &str) -> bool {
        self.names.is_empty() || any_match(self.names.iter().map(String::as_str), name)
    }

    /// Whether configs labelled `labels` may be selected.
    pub fn matches_labels(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(&labels))
    }

    /// Whether a label selector on the configs' own labels is set (their labels then decide).
    pub fn has_label_selector(&self) -> bool {
        self.selector.is_some()
    }

    /// Whether a `namespaceSelector` is set (the Namespace's labels then decide).
    pub fn needs_namespace_labels(&self) -> bool {
        self.namespace_selector.is_some()
    }

    /// Whether every part matches `config`.
    pub fn matches(&self, config: &ConfigMeta<'_>) -> bool {
        self.matches_kind(config.kind)
            && self.matches_namespace(config.namespace, config.namespace_labels)
            && self.matches_name(config.name)
            && self.matches_labels(config.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfigKind::{ConfigMap, Secret};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(json: &str) -> CompiledConfigSelector {
        serde_json::from_str::<ConfigSelector>(json)
            .unwrap()
            .compile("configs")
            .unwrap()
    }

    #[test]
    fn parts_are_anded() {
        let ns_labels = labels(&[("tenant", "yes")]);
        let own = labels(&[("app", "registry")]);
        let base = ConfigMeta {
            kind: Secret,
            namespace: "team-a",
            namespace_labels: Some(&ns_labels),
            name: "registry-eu",
            labels: Some(&own),
        };
        let all = selector(
            r#"{"kinds":["Secret"],"namespaces":["team-*"],
                "namespaceSelector":{"matchLabels":{"tenant":"yes"}},
                "names":["registry-*"],"selector":{"matchLabels":{"app":"registry"}}}"#,
        );
        assert!(all.matches(&base));
        assert!(!all.matches(&ConfigMeta {
            kind: ConfigMap,
            ..base
        }));
        assert!(!all.matches(&ConfigMeta {
            namespace: "platform",
            ..base
        }));
        assert!(!all.matches(&ConfigMeta {
            namespace_labels: None,
            ..base
        }));
        assert!(!all.matches(&ConfigMeta {
            name: "other",
            ..base
        }));
        assert!(!all.matches(&ConfigMeta {
            labels: None,
            ..base
        }));
        // Empty: everything but the control plane's namespaces.
        let empty = selector("{}");
        assert!(empty.matches(&base));
        assert!(empty.matches(&ConfigMeta {
            kind: ConfigMap,
            labels: None,
            ..base
        }));
        assert!(!empty.matches(&ConfigMeta {
            namespace: "kube-system",
            ..base
        }));
    }

    #[test]
    fn control_plane_namespaces_only_by_exact_name() {
        let cm = |ns| ConfigMeta {
            kind: ConfigMap,
            namespace: ns,
            namespace_labels: None,
            name: "x",
            labels: None,
        };
        assert!(!selector(r#"{"namespaces":["kube-*"]}"#).matches(&cm("kube-system")));
        assert!(selector(r#"{"namespaces":["kube-*"]}"#).matches(&cm("kube-flannel")));
        assert!(selector(r#"{"namespaces":["kube-system"]}"#).matches(&cm("kube-system")));
        assert!(!selector(r#"{"namespaces":["*"]}"#).matches(&cm("kube-node-lease")));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let bad = |json: &str| {
            serde_json::from_str::<ConfigSelector>(json)
                .unwrap()
                .compile("spec.configs")
                .unwrap_err()
        };
        let err = bad(r#"{"names":["ok","Bad/Name"]}"#);
        assert_eq!(err.reason(), "InvalidGlob");
        assert!(err.to_string().contains("spec.configs.names[1]"), "{err}");
        assert_eq!(bad(r#"{"namespaces":[""]}"#).reason(), "InvalidGlob");
        let err = bad(r#"{"selector":{"matchExpressions":[{"key":"a","operator":"Gt"}]}}"#);
        assert_eq!(err.reason(), "InvalidSelector");
        assert!(err.to_string().contains("spec.configs.selector"), "{err}");
        assert_eq!(
            bad(r#"{"namespaceSelector":{"matchLabels":{"bad key!":"x"}}}"#).reason(),
            "InvalidSelector"
        );
        assert!(serde_json::from_str::<ConfigSelector>(r#"{"kinds":["Pod"]}"#).is_err());
        // Only the first problem, bounded: it goes into a condition and an Event.
        let long = format!(
            r#"{{"selector":{{"matchLabels":{{"a":"{}","b!":"{}"}}}}}}"#,
            "x/".repeat(5_000),
            "y/".repeat(5_000)
        );
        let err = bad(&long);
        assert_eq!(err.reason(), "InvalidSelector");
        assert!(
            err.to_string().chars().count() <= 512,
            "{}",
            err.to_string().len()
        );
        let invalid: ConfigSelector = serde_json::from_str(r#"{"names":["A"]}"#).unwrap();
        assert!(!invalid.matches(&ConfigMeta {
            kind: ConfigMap,
            namespace: "a",
            namespace_labels: None,
            name: "A",
            labels: None,
        }));
    }

    #[test]
    fn json_shape_round_trips() {
        let json = serde_json::json!({
            "kinds": ["Secret"], "namespaces": ["platform"],
            "namespaceSelector": {"matchLabels": {"a": "b"}},
            "names": ["blogsecret"], "selector": {"matchLabels": {"c": "d"}},
        });
        let sel: ConfigSelector = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&sel).unwrap(), json);
        assert_eq!(
            serde_json::to_value(ConfigSelector::default()).unwrap(),
            serde_json::json!({})
        );
    }
}
