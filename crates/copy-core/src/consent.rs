//! Who may copy what across namespaces (docs/design.md 4.1).
//!
//! A standalone operator has no per-tenant service account to impersonate, so conflux asks the
//! **source** for consent: a copy inside one namespace is always allowed; a copy into another
//! namespace needs the source to carry [`ALLOWED_NAMESPACES_ANNOTATION`], a comma-separated list of
//! namespace globs (`*`, `?`), one of which matches the target namespace. Without it, anyone who can
//! write a ConfigMap in their own namespace could read any Secret in the cluster.
//!
//! reflector's and replicator's `*-allowed` annotations are the same consent in those tools' words,
//! and [`decide`] accepts them too, read with those tools' rules.
//!
//! ```
//! use conflux_copy_core::consent::{check, ALLOWED_NAMESPACES_ANNOTATION};
//! use conflux_copy_core::{SourceKind, SourceRef};
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

use crate::copy_from::PullVia;
use crate::patterns::shorten;
use crate::selection::{NamespaceView, Selection};
use crate::source::SourceRef;
use crate::{Error, reflector, replicator};
use conflux_watch_index::glob::glob_match;

// A refusal is an error's detail, defined with the error; callers look for it here.
pub use crate::error::{Refusal, SourceSays};

/// Annotation on a source listing (comma-separated globs) the namespaces it may be copied into.
pub const ALLOWED_NAMESPACES_ANNOTATION: &str = "copy.conflux.dev/allowed-namespaces";

/// Consent is asked for in the words of the tool whose annotation made the copy: defined here,
/// beside the annotations it names, so pull copies need not know about consent.
impl PullVia {
    /// The consent annotation a refusal names when the source has none: the one the target's
    /// tool asks for.
    pub fn consent_annotation(self) -> &'static str {
        match self {
            PullVia::CopyFrom => ALLOWED_NAMESPACES_ANNOTATION,
            PullVia::Reflects => reflector::ALLOWED,
            PullVia::ReplicateFrom => replicator::REPLICATION_ALLOWED,
        }
    }
}

/// Whether `source` (with its annotations) may be copied into `target_namespace`, by conflux's
/// own [`ALLOWED_NAMESPACES_ANNOTATION`] alone. The controllers ask [`decide`], which also reads
/// reflector's and replicator's consent annotations.
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
        said: Box::new(SourceSays {
            unmatched: allowed
                .map(|_| ALLOWED_NAMESPACES_ANNOTATION)
                .into_iter()
                .collect(),
            declined: Vec::new(),
            wanted: ALLOWED_NAMESPACES_ANNOTATION,
        }),
    })
}

/// What let a copy happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// Source and copy are in the same namespace: no consent is needed.
    SameNamespace,
    /// The source consents with this annotation (conflux's, reflector's or replicator's).
    Annotation(&'static str),
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::SameNamespace => f.write_str("same namespace"),
            Grant::Annotation(annotation) => f.write_str(annotation),
        }
    }
}

/// Whether `source` may be copied into `target` (its name and labels), asked through `via`.
///
/// Consent is consent, whichever tool's words the source uses: conflux's
/// [`ALLOWED_NAMESPACES_ANNOTATION`] (globs), reflector's `reflection-allowed` with its namespace
/// list and selector ([`reflector::consent`]), or replicator's `replication-allowed` with its
/// namespace list ([`replicator::consent`]); the first that admits the namespace grants the copy.
/// A copy inside one namespace needs none.
///
/// When none grants it: a malformed consent annotation (a bad regex, selector or boolean) is the
/// error, so the Warning says what to fix; otherwise [`Error::Refused`], naming the annotations
/// that did not match, or `via`'s consent annotation when the source has none.
pub fn decide(
    source: &SourceRef,
    source_annotations: Option<&BTreeMap<String, String>>,
    target: NamespaceView<'_>,
    via: PullVia,
) -> Result<Grant, Error> {
    if source.namespace == target.name {
        return Ok(Grant::SameNamespace);
    }
    let mut unmatched = Vec::new();
    let mut declined = Vec::new();
    let mut problem = None;
    if let Some(list) = source_annotations.and_then(|a| a.get(ALLOWED_NAMESPACES_ANNOTATION)) {
        if allows(list, target.name) {
            return Ok(Grant::Annotation(ALLOWED_NAMESPACES_ANNOTATION));
        }
        unmatched.push(ALLOWED_NAMESPACES_ANNOTATION);
    }
    let peers: [(&'static str, &'static str, PeerConsent); 2] = [
        (
            reflector::ALLOWED,
            reflector::ALLOWED_NAMESPACES,
            reflector::consent,
        ),
        (
            replicator::REPLICATION_ALLOWED,
            replicator::REPLICATION_ALLOWED_NAMESPACES,
            replicator::consent,
        ),
    ];
    for (allowed, namespaces, consent) in peers {
        match consent(source, source_annotations) {
            Ok(Some(selection)) if selection.matches(target) => {
                return Ok(Grant::Annotation(namespaces));
            }
            Ok(Some(_)) => unmatched.push(namespaces),
            Ok(None) => {
                if let Some(value) = source_annotations.and_then(|a| a.get(allowed)) {
                    declined.push((allowed, shorten(value)));
                }
            }
            Err(err) => {
                problem.get_or_insert(err);
            }
        }
    }
    if let Some(problem) = problem {
        return Err(problem);
    }
    Err(Error::Refused(Refusal {
        source: source.clone(),
        target_namespace: target.name.to_owned(),
        said: Box::new(SourceSays {
            unmatched,
            declined,
            wanted: via.consent_annotation(),
        }),
    }))
}

/// Whether [`decide`] needs the target namespace's labels for this source: only reflector's
/// `reflection-allowed-namespaces-selector` grants by label. (A controller without the labels yet
/// waits for them only then.)
pub fn needs_namespace_labels(source_annotations: Option<&BTreeMap<String, String>>) -> bool {
    source_annotations
        .and_then(|a| a.get(reflector::ALLOWED_NAMESPACES_SELECTOR))
        .is_some_and(|selector| !selector.is_empty())
}

/// A peer's consent reader ([`reflector::consent`], [`replicator::consent`]).
type PeerConsent =
    fn(&SourceRef, Option<&BTreeMap<String, String>>) -> crate::Result<Option<Selection>>;

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

    /// [`decide`]: any tool's consent grants the copy, through any pull annotation; refusals name
    /// what the source says, or the consent annotation of the target's tool.
    #[test]
    fn decide_table() {
        use crate::{reflector as rf, replicator as rp};
        let source = SourceRef::new(SourceKind::Secret, "vault", "db");
        let prod = BTreeMap::from([("env".to_owned(), "production".to_owned())]);
        // (case, annotations, target namespace, labelled env=production, via, Ok(grant) / Err(message tail or reason))
        type Row<'a> = (
            &'a str,
            Vec<(&'a str, &'a str)>,
            &'a str,
            bool,
            PullVia,
            std::result::Result<&'a str, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "same namespace",
                vec![],
                "vault",
                false,
                PullVia::Reflects,
                Ok("same namespace"),
            ),
            (
                "conflux consent, reflector target",
                vec![(ALLOWED_NAMESPACES_ANNOTATION, "team-*")],
                "team-a",
                false,
                PullVia::Reflects,
                Ok(ALLOWED_NAMESPACES_ANNOTATION),
            ),
            (
                "reflector consent, copyFrom target",
                vec![(rf::ALLOWED, "true")],
                "team-a",
                false,
                PullVia::CopyFrom,
                Ok(rf::ALLOWED_NAMESPACES),
            ),
            (
                "reflector consent by label",
                vec![
                    (rf::ALLOWED, "true"),
                    (rf::ALLOWED_NAMESPACES, "namespace-1"),
                    (rf::ALLOWED_NAMESPACES_SELECTOR, "env=production"),
                ],
                "shop",
                true,
                PullVia::Reflects,
                Ok(rf::ALLOWED_NAMESPACES),
            ),
            (
                "replicator consent",
                vec![
                    (rp::REPLICATION_ALLOWED, "true"),
                    (rp::REPLICATION_ALLOWED_NAMESPACES, "team-.*"),
                ],
                "team-a",
                false,
                PullVia::ReplicateFrom,
                Ok(rp::REPLICATION_ALLOWED_NAMESPACES),
            ),
            (
                "no consent, reflector target",
                vec![],
                "team-a",
                false,
                PullVia::Reflects,
                Err(
                    "the source in namespace 'vault' has no reflector.v1.k8s.emberstack.com/reflection-allowed annotation",
                ),
            ),
            (
                "no consent, replicator target",
                vec![],
                "team-a",
                false,
                PullVia::ReplicateFrom,
                Err(
                    "the source in namespace 'vault' has no replicator.v1.mittwald.de/replication-allowed annotation",
                ),
            ),
            (
                "two lists, neither matches",
                vec![
                    (ALLOWED_NAMESPACES_ANNOTATION, "ops"),
                    (rp::REPLICATION_ALLOWED, "true"),
                    (rp::REPLICATION_ALLOWED_NAMESPACES, "ops"),
                ],
                "team-a",
                false,
                PullVia::ReplicateFrom,
                Err(
                    "namespace 'team-a' does not match the source's copy.conflux.dev/allowed-namespaces, replicator.v1.mittwald.de/replication-allowed-namespaces annotations",
                ),
            ),
            (
                "declined",
                vec![(rf::ALLOWED, "false"), (rf::ALLOWED_NAMESPACES, "team-a")],
                "team-a",
                false,
                PullVia::Reflects,
                Err(
                    "the source's reflector.v1.k8s.emberstack.com/reflection-allowed is 'false', not true",
                ),
            ),
            (
                "a bad peer list does not block another grant",
                vec![
                    (ALLOWED_NAMESPACES_ANNOTATION, "team-a"),
                    (rf::ALLOWED, "true"),
                    (rf::ALLOWED_NAMESPACES, "("),
                ],
                "team-a",
                false,
                PullVia::Reflects,
                Ok(ALLOWED_NAMESPACES_ANNOTATION),
            ),
            (
                "a bad peer list is the error when nothing grants",
                vec![(rf::ALLOWED, "true"), (rf::ALLOWED_NAMESPACES, "(")],
                "team-a",
                false,
                PullVia::Reflects,
                Err("InvalidPattern"),
            ),
        ];
        for (case, pairs, namespace, labelled, via, want) in rows {
            let annotations = crate::testing::map(&pairs);
            let mut view = NamespaceView::new(namespace);
            if labelled {
                view = view.labels(&prod);
            }
            let by_label = annotations.contains_key(rf::ALLOWED_NAMESPACES_SELECTOR);
            assert_eq!(
                needs_namespace_labels(Some(&annotations)),
                by_label,
                "{case}"
            );
            let got = decide(&source, Some(&annotations), view, via);
            match (&got, want) {
                (Ok(grant), Ok(want)) => assert_eq!(grant.to_string(), want, "{case}"),
                (Err(crate::Error::Refused(refusal)), Err(tail)) => {
                    assert!(refusal.to_string().ends_with(tail), "{case}: {refusal}")
                }
                (Err(err), Err(reason)) => assert_eq!(err.reason(), reason, "{case}"),
                _ => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }
}
