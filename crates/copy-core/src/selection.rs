//! Which namespaces something reaches: a [`Selection`] (what a fan-out selects, or what a source
//! consents to) matched against a [`NamespaceView`] (a namespace's name, labels and whether it is
//! terminating). Fan-out ([`crate::fan_out`]), consent ([`crate::consent`]) and the reflector and
//! replicator annotations all speak in these terms.

use std::collections::BTreeMap;

use conflux_watch_index::selector::Selector;
use k8s_openapi::api::core::v1::Namespace;

use crate::patterns::NamePatterns;
use conflux_watch_index::glob::{any_match, is_literal};

/// What fan-out and consent need to know about a namespace. Borrowed, so a namespace cache can be scanned
/// without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceView<'a> {
    /// The namespace's name.
    pub name: &'a str,
    /// Its labels.
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// True while it is being deleted.
    pub terminating: bool,
}

impl<'a> NamespaceView<'a> {
    /// A namespace without labels that is not terminating.
    pub fn new(name: &'a str) -> Self {
        NamespaceView {
            name,
            labels: None,
            terminating: false,
        }
    }

    /// The same namespace with `labels`.
    pub fn labels(self, labels: &'a BTreeMap<String, String>) -> Self {
        NamespaceView {
            labels: Some(labels),
            ..self
        }
    }

    /// The same namespace, terminating or not.
    pub fn terminating(self, terminating: bool) -> Self {
        NamespaceView {
            terminating,
            ..self
        }
    }
}

/// A namespace is terminating once it has a deletion timestamp or phase `Terminating`.
impl<'a> From<&'a Namespace> for NamespaceView<'a> {
    fn from(ns: &'a Namespace) -> Self {
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        NamespaceView {
            name: ns.metadata.name.as_deref().unwrap_or_default(),
            labels: ns.metadata.labels.as_ref(),
            terminating: ns.metadata.deletion_timestamp.is_some() || phase == Some("Terminating"),
        }
    }
}

/// Which namespaces a fan-out selects (or a source consents to), before the exclusions every
/// fan-out applies.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Selection {
    /// Every namespace.
    All,
    /// Namespaces whose labels match the selector.
    Labels(Selector),
    /// Namespaces whose name matches one of these globs (`*`, `?`).
    Globs(Vec<String>),
    /// Namespaces whose name matches one of these regexes (reflector's and replicator's lists).
    Patterns(NamePatterns),
    /// Namespaces that any of these select; none when empty.
    AnyOf(Vec<Selection>),
    /// Namespaces that all of these select.
    AllOf(Vec<Selection>),
}

impl Selection {
    /// Selects no namespace.
    pub fn nothing() -> Self {
        Selection::AnyOf(Vec::new())
    }

    /// The union of `parts`, without a needless level for a single part.
    pub fn any_of(mut parts: Vec<Selection>) -> Self {
        if parts.len() == 1 {
            parts.remove(0)
        } else {
            Selection::AnyOf(parts)
        }
    }

    /// Whether the namespace is selected (its name and labels; terminating or not is the
    /// fan-out's business).
    pub fn matches(&self, ns: NamespaceView<'_>) -> bool {
        match self {
            Selection::All => true,
            Selection::Labels(selector) => selector.matches(&ns.labels),
            Selection::Globs(globs) => any_match(globs.iter().map(String::as_str), ns.name),
            Selection::Patterns(patterns) => patterns.matches(ns.name),
            Selection::AnyOf(parts) => parts.iter().any(|p| p.matches(ns)),
            Selection::AllOf(parts) => parts.iter().all(|p| p.matches(ns)),
        }
    }

    /// Whether `namespace` is listed by its exact name somewhere (a glob or regex entry without
    /// metacharacters): that lifts the default exclusion of `kube-system` and friends.
    pub fn names_literally(&self, namespace: &str) -> bool {
        match self {
            Selection::All | Selection::Labels(_) => false,
            Selection::Globs(globs) => globs.iter().any(|g| is_literal(g) && g == namespace),
            Selection::Patterns(patterns) => patterns.literals().any(|l| l == namespace),
            Selection::AnyOf(parts) | Selection::AllOf(parts) => {
                parts.iter().any(|p| p.names_literally(namespace))
            }
        }
    }
}
