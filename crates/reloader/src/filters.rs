//! Reloader's controller-wide filters, parsed as Reloader v1.4 parses them: which namespaces
//! (`--namespace-selector`, `--namespaces-to-ignore`), which configs (`--resource-label-selector`,
//! `--resources-to-ignore`) and which workload kinds (`--ignored-workload-types`) the reload
//! controller looks at.
//!
//! ```
//! use conflux_reloader::filters::{NamespaceFilter, reloader_selector};
//! use std::collections::BTreeMap;
//!
//! // Reloader's legacy forms: `key:value`, and `*` for "any value".
//! let selector = reloader_selector(&["team:payments".into(), "env=*".into()]).unwrap();
//! let filter = NamespaceFilter::new(selector, ["kube-system".to_owned()]);
//! let labels = BTreeMap::from([("team".to_owned(), "payments".to_owned()), ("env".to_owned(), "prod".to_owned())]);
//! assert!(filter.allows("shop", Some(&labels)));
//! assert!(!filter.allows("kube-system", Some(&labels)));
//! assert!(!filter.allows("other", None));
//! ```

use std::collections::{BTreeMap, BTreeSet};

use conflux_watch_index::selector::Selector;

use crate::{Error, Result, WorkloadKind};

/// Turns the values of a Reloader selector flag (`--namespace-selector`,
/// `--resource-label-selector`; each value may itself hold commas) into one label selector, as
/// Reloader does: the values are split at commas, each part `key:value` becomes `key=value`, a
/// part whose value is `*` (`key:*`, `key=*`) becomes `key` (the label exists), and the parts are
/// joined with commas again. No value selects everything.
pub fn reloader_selector(values: &[String]) -> Result<Selector> {
    let parts: Vec<String> = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|part| {
            let mut converted = part.to_owned();
            if part.contains(':') {
                let mut split = part.split(':');
                let key = split.next().unwrap_or_default();
                let value = split.next().unwrap_or_default();
                converted = if value == "*" {
                    key.to_owned()
                } else {
                    format!("{key}={value}")
                };
            }
            if part.contains('=') {
                let mut split = part.split('=');
                let key = split.next().unwrap_or_default();
                if split.next() == Some("*") {
                    converted = key.to_owned();
                }
            }
            converted
        })
        .collect();
    let joined = parts.join(",");
    Selector::parse(&joined).map_err(|e| Error::InvalidFlag {
        flag: "selector",
        value: joined.clone(),
        reason: e.to_string(),
    })
}

/// `--resources-to-ignore`: `configmaps` or `secrets` (Reloader refuses both at once, and
/// anything else). Returns (ignore ConfigMaps, ignore Secrets).
pub fn resources_to_ignore(values: &[String]) -> Result<(bool, bool)> {
    let mut config_maps = false;
    let mut secrets = false;
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        match value {
            "configmaps" => config_maps = true,
            "secrets" => secrets = true,
            other => {
                return Err(Error::InvalidFlag {
                    flag: "--resources-to-ignore",
                    value: other.to_owned(),
                    reason: "accepts configmaps or secrets".to_owned(),
                });
            }
        }
    }
    if config_maps && secrets {
        return Err(Error::InvalidFlag {
            flag: "--resources-to-ignore",
            value: "configmaps,secrets".to_owned(),
            reason: "only one of configmaps and secrets can be ignored (to stop reloading, leave \
                     the reload controller out of --controllers)"
                .to_owned(),
        });
    }
    Ok((config_maps, secrets))
}

/// `--ignored-workload-types`: `jobs`, `cronjobs`, or both (Reloader's values; anything else is
/// refused). Returns the kinds the controller does not watch.
pub fn ignored_workload_types(values: &[String]) -> Result<BTreeSet<WorkloadKind>> {
    let mut out = BTreeSet::new();
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        match value {
            "cronjobs" => out.insert(WorkloadKind::CronJob),
            "jobs" => out.insert(WorkloadKind::Job),
            other => {
                return Err(Error::InvalidFlag {
                    flag: "--ignored-workload-types",
                    value: other.to_owned(),
                    reason: "accepts jobs, cronjobs, or both".to_owned(),
                });
            }
        };
    }
    Ok(out)
}

/// Which namespaces the reload controller serves: those matching `--namespace-selector` and not
/// named by `--namespaces-to-ignore`.
#[derive(Debug, Clone)]
pub struct NamespaceFilter {
    selector: Selector,
    ignored: BTreeSet<String>,
}

impl Default for NamespaceFilter {
    fn default() -> Self {
        NamespaceFilter::new(Selector::everything(), [])
    }
}

impl NamespaceFilter {
    /// A filter from a namespace label selector and names to ignore.
    pub fn new(selector: Selector, ignored: impl IntoIterator<Item = String>) -> Self {
        NamespaceFilter {
            selector,
            ignored: ignored
                .into_iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// Whether namespace labels are needed to decide (a selector was given).
    pub fn needs_labels(&self) -> bool {
        !self.selector.is_empty()
    }

    /// Whether the namespace `name` with `labels` is served; a namespace not known (`None`) is
    /// served only when no selector is set.
    pub fn allows(&self, name: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        if self.ignored.contains(name) {
            return false;
        }
        if !self.needs_labels() {
            return true;
        }
        labels.is_some_and(|labels| self.selector.matches(labels))
    }
}

#[cfg(test)]
// Test tables are tuples on purpose: one row per line reads best.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    fn s(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn selectors_take_reloaders_legacy_forms() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cases: [(&[&str], &[(&str, &str)], bool); 8] = [
            (&["a=b"], &[("a", "b")], true),
            (&["a:b"], &[("a", "b")], true),
            (&["a:b"], &[("a", "c")], false),
            (&["a:*"], &[("a", "anything")], true),
            (&["a=*"], &[("a", "")], true),
            (&["a=*"], &[("b", "x")], false),
            (&["a in (x,y)"], &[("a", "y")], true),
            (&["a=b", "c!=d"], &[("a", "b"), ("c", "e")], true),
        ];
        for (values, have, want) in cases {
            let selector = reloader_selector(&s(values)).unwrap();
            assert_eq!(selector.matches(&labels(have)), want, "{values:?} {have:?}");
        }
        assert!(reloader_selector(&[]).unwrap().is_empty());
        let err = reloader_selector(&s(&["a in (x"])).unwrap_err();
        assert_eq!(err.reason(), "InvalidFlag");
    }

    #[test]
    fn resource_and_workload_kinds() {
        assert_eq!(resources_to_ignore(&s(&["configmaps"])), Ok((true, false)));
        assert_eq!(resources_to_ignore(&s(&["secrets", ""])), Ok((false, true)));
        assert_eq!(resources_to_ignore(&[]), Ok((false, false)));
        assert!(resources_to_ignore(&s(&["configmaps", "secrets"])).is_err());
        assert!(resources_to_ignore(&s(&["pods"])).is_err());
        assert_eq!(
            ignored_workload_types(&s(&["jobs", "cronjobs"])).unwrap(),
            BTreeSet::from([WorkloadKind::CronJob, WorkloadKind::Job])
        );
        assert_eq!(
            ignored_workload_types(&s(&["jobs"])).unwrap(),
            BTreeSet::from([WorkloadKind::Job])
        );
        assert!(ignored_workload_types(&s(&["deployments"])).is_err());
    }

    #[test]
    fn namespaces() {
        let filter = NamespaceFilter::new(Selector::everything(), s(&["kube-system"]));
        assert!(filter.allows("a", None));
        assert!(!filter.allows("kube-system", None));
        assert!(!filter.needs_labels());
        let filter = NamespaceFilter::new(Selector::parse("team").unwrap(), []);
        assert!(filter.needs_labels());
        assert!(!filter.allows("a", None));
        let team = BTreeMap::from([("team".to_owned(), "x".to_owned())]);
        assert!(filter.allows("a", Some(&team)));
    }
}
