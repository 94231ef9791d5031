//! Who may copy what across namespaces (docs/design.md 4.1).
//!
//! A standalone operator has no per-tenant service account to impersonate, so conflux asks the
//! **source** for consent: a copy inside one namespace is always allowed; a copy into another
//! namespace needs the source to carry [`ALLOWED_NAMESPACES_ANNOTATION`], a comma-separated list of
//! namespace globs (`*`, `?`), one of which matches the target namespace. Without it, anyone who can
//! write a ConfigMap in their own namespace could read any Secret in the cluster.
//!
//! ```
//! use copy_core::consent::{check, ALLOWED_NAMESPACES_ANNOTATION};
//! use copy_core::{SourceKind, SourceRef};
//! use std::collections::BTreeMap;
//!
//! let source = SourceRef::new(SourceKind::Secret, "flux-system", "ghcr-auth");
//! let consent = BTreeMap::from([(ALLOWED_NAMESPACES_ANNOTATION.to_owned(), "team-*, ci".to_owned())]);
//! assert!(check(&source, Some(&consent), "team-a").is_ok());
//! assert!(check(&source, None, "flux-system").is_ok()); // same namespace
//! let refused = check(&source, None, "team-a").unwrap_err();
//! assert!(refused.to_string().contains(ALLOWED_NAMESPACES_ANNOTATION));
//! ```

use std::collections::BTreeMap;
use std::fmt;

use crate::glob::glob_match;
use crate::source::SourceRef;

/// Annotation on a source listing (comma-separated globs) the namespaces it may be copied into.
pub const ALLOWED_NAMESPACES_ANNOTATION: &str = "copy.conflux.dev/allowed-namespaces";

/// Why a cross-namespace copy was refused. Names the kinds, namespaces and the annotation, never any
/// data, so it is safe in Events, logs and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The source that was asked for.
    pub source: SourceRef,
    /// The namespace the copy would go into.
    pub target_namespace: String,
    /// Whether the source had the annotation at all.
    pub annotated: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "copying {} into namespace '{}' is not allowed: ",
            self.source, self.target_namespace
        )?;
        if self.annotated {
            write!(
                f,
                "namespace '{}' does not match the source's {ALLOWED_NAMESPACES_ANNOTATION} annotation",
                self.target_namespace
            )
        } else {
            write!(
                f,
                "the source in namespace '{}' has no {ALLOWED_NAMESPACES_ANNOTATION} annotation",
                self.source.namespace
            )
        }
    }
}

impl std::error::Error for Refusal {}

/// Whether `source` (with its annotations) may be copied into `target_namespace`.
pub fn check(
    source: &SourceRef,
    source_annotations: Option<&BTreeMap<String, String>>,
    target_namespace: &str,
) -> Result<(), Refusal> {
    if source.namespace == target_namespace {
        return Ok(());
    }
    let allowed = source_annotations.and_then(|a| a.get(ALLOWED_NAMESPACES_ANNOTATION));
    if allowed.is_some_and(|list| allows(list, target_namespace)) {
        return Ok(());
    }
    Err(Refusal {
        source: source.clone(),
        target_namespace: target_namespace.to_owned(),
        annotated: allowed.is_some(),
    })
}

/// True when the annotation value `list` (comma-separated globs, whitespace around entries ignored,
/// empty entries skipped) matches `namespace`.
pub fn allows(list: &str, namespace: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| glob_match(p, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceKind;

    #[test]
    fn consent_table() {
        // (annotation value, target namespace, allowed)
        let cases = [
            (None, "src", true),
            (None, "other", false),
            (Some(""), "other", false),
            (Some("other"), "other", true),
            (Some(" other , team-a "), "team-a", true),
            (Some("team-*"), "team-a", true),
            (Some("team-*"), "prod", false),
            (Some("team-?"), "team-ab", false),
            (Some("*"), "anything", true),
            (Some(",,"), "other", false),
            (Some("a,,b"), "b", true),
            (Some("Other"), "other", false),
        ];
        let source = SourceRef::new(SourceKind::Secret, "src", "token");
        for (value, target, want) in cases {
            let annotations = value.map(|v| {
                BTreeMap::from([(ALLOWED_NAMESPACES_ANNOTATION.to_owned(), v.to_owned())])
            });
            assert_eq!(
                check(&source, annotations.as_ref(), target).is_ok(),
                want,
                "{value:?} → {target}"
            );
        }
    }

    #[test]
    fn refusal_names_namespaces_and_annotation_only() {
        let source = SourceRef::new(SourceKind::Secret, "vault", "db-password");
        let missing = check(&source, None, "tenant").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "copying Secret/vault/db-password into namespace 'tenant' is not allowed: the source in namespace 'vault' has no copy.conflux.dev/allowed-namespaces annotation"
        );
        let annotations =
            BTreeMap::from([(ALLOWED_NAMESPACES_ANNOTATION.to_owned(), "ops-*".to_owned())]);
        let unlisted = check(&source, Some(&annotations), "tenant").unwrap_err();
        assert_eq!(
            unlisted.to_string(),
            "copying Secret/vault/db-password into namespace 'tenant' is not allowed: namespace 'tenant' does not match the source's copy.conflux.dev/allowed-namespaces annotation"
        );
        assert_eq!(crate::Error::from(unlisted).reason(), "Refused");
    }
}
