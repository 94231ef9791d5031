//! replicator's annotations (mittwald/kubernetes-replicator), read with replicator's own rules.
//!
//! | annotation | on | what conflux does |
//! |---|---|---|
//! | [`REPLICATION_ALLOWED`] `"true"` | source | consent: replicas may copy it ([`consent`]) |
//! | [`REPLICATION_ALLOWED_NAMESPACES`] | source | into these namespaces (regexes; required) |
//! | [`REPLICATE_FROM`] `namespace/name` | replica | a pull copy of that source ([`replicate_from`]), merged into the replica's own keys |
//! | [`REPLICATE_TO`] | source | fan-out into the namespaces these regexes match ([`push`]) |
//! | [`REPLICATE_TO_MATCHING`] | source | fan-out into namespaces with these labels (ORed) |
//! | [`STRIP_LABELS`] `"true"` | source | fan-out copies do not get the source's labels |
//!
//! Booleans are read as Go's `strconv.ParseBool` does (`1`, `t`, `T`, `TRUE`, `true`, `True`
//! and the same for false). Regexes are anchored with `^…$` unless already anchored, as
//! replicator's `BuildStrictRegex` does ([`Dialect::Replicator`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use conflux_copy_core::{replicator, NamespaceView, SourceKind, SourceRef};
//!
//! let source = SourceRef::new(SourceKind::Secret, "default", "test-secret");
//! let annotations = BTreeMap::from([(
//!     replicator::REPLICATE_TO.to_owned(),
//!     "my-ns-1,namespace-[0-9]*".to_owned(),
//! )]);
//! let targets = replicator::push(&source, Some(&annotations))?.expect("a push source");
//! assert!(targets.matches(NamespaceView::new("namespace-3")));
//! assert!(!targets.matches(NamespaceView::new("my-ns-10")));
//! # Ok::<(), conflux_copy_core::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};

use conflux_watch_index::refs::parse_copy_from;
use conflux_watch_index::selector::Selector;

use crate::patterns::{Dialect, NamePatterns, shorten};
use crate::selection::Selection;
use crate::source::{ConfigObject, SourceRef};
use crate::{Error, Result};

/// Replica: `namespace/name` of its source.
pub const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
/// Source: comma-separated regexes of the namespaces it is pushed into.
pub const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
/// Source: a label selector of the namespaces it is pushed into.
pub const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
/// Source: `"true"` lets replicas copy it.
pub const REPLICATION_ALLOWED: &str = "replicator.v1.mittwald.de/replication-allowed";
/// Source: comma-separated regexes of the namespaces replicas may be in.
pub const REPLICATION_ALLOWED_NAMESPACES: &str =
    "replicator.v1.mittwald.de/replication-allowed-namespaces";
/// Copy: the keys replicator copied into it (comma-separated). conflux reads it to take over
/// replicator's copies without losing keys that were not replicator's, and never writes it.
pub const REPLICATED_KEYS: &str = "replicator.v1.mittwald.de/replicated-keys";
/// Copy: the source's resourceVersion replicator last copied (conflux compares content instead).
pub const REPLICATED_FROM_VERSION: &str = "replicator.v1.mittwald.de/replicated-from-version";
/// Source: `"true"` keeps the source's labels off its pushed copies.
pub const STRIP_LABELS: &str = "replicator.v1.mittwald.de/strip-labels";
/// Source: `"true"` copies the source's ownerReferences onto pushed copies. Not supported: an
/// ownerReference names an object in the source's namespace, so in another namespace the garbage
/// collector deletes the copy.
pub const KEEP_OWNER_REFERENCES: &str = "replicator.v1.mittwald.de/keep-owner-references";

/// What replicator accepts as a boolean.
const BOOLEAN: &str = "a boolean (true, false, 1, 0, t, f, TRUE, FALSE, True, False, T, F)";

/// A boolean as replicator reads it (Go's `strconv.ParseBool`).
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn patterns(object: &SourceRef, annotation: &'static str, value: &str) -> Result<Selection> {
    NamePatterns::parse(value, Dialect::Replicator)
        .map(Selection::Patterns)
        .map_err(|problem| Error::InvalidPattern {
            object: object.clone(),
            annotation,
            problem: Box::new(problem),
        })
}

/// The namespaces the source lets replicas copy it into, or `None` when it does not allow
/// replication ([`REPLICATION_ALLOWED`] unset or false). Allowed without
/// [`REPLICATION_ALLOWED_NAMESPACES`] selects no namespace, as in replicator.
pub fn consent(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Selection>> {
    let Some(allowed) = annotations.and_then(|a| a.get(REPLICATION_ALLOWED)) else {
        return Ok(None);
    };
    match parse_bool(allowed) {
        Some(true) => {}
        Some(false) => return Ok(None),
        None => {
            return Err(Error::InvalidAnnotation {
                object: source.clone(),
                annotation: REPLICATION_ALLOWED,
                value: shorten(allowed),
                expected: BOOLEAN,
            });
        }
    }
    match annotations.and_then(|a| a.get(REPLICATION_ALLOWED_NAMESPACES)) {
        Some(list) => patterns(source, REPLICATION_ALLOWED_NAMESPACES, list).map(Some),
        None => Ok(Some(Selection::nothing())),
    }
}

/// The push annotation the source carries, if any ([`REPLICATE_TO`] first).
pub fn push_annotation(annotations: Option<&BTreeMap<String, String>>) -> Option<&'static str> {
    [REPLICATE_TO, REPLICATE_TO_MATCHING]
        .into_iter()
        .find(|key| annotations.is_some_and(|a| a.contains_key(*key)))
}

/// The namespaces the source is pushed into: [`REPLICATE_TO`]'s regexes ORed with
/// [`REPLICATE_TO_MATCHING`]'s selector; `None` without either.
pub fn push(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Selection>> {
    let get = |key: &str| annotations.and_then(|a| a.get(key));
    let mut parts = Vec::new();
    if let Some(list) = get(REPLICATE_TO) {
        parts.push(patterns(source, REPLICATE_TO, list)?);
    }
    if let Some(selector) = get(REPLICATE_TO_MATCHING) {
        let parsed = Selector::parse(selector).map_err(|e| Error::InvalidSelector {
            context: format!("{REPLICATE_TO_MATCHING} on {source}"),
            message: e.to_string(),
        })?;
        parts.push(Selection::Labels(parsed));
    }
    Ok((!parts.is_empty()).then(|| Selection::any_of(parts)))
}

/// The labels a pushed copy gets: the source's, unless [`STRIP_LABELS`] is `"true"`.
pub fn copied_labels(
    source_labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let strip = annotations
        .and_then(|a| a.get(STRIP_LABELS))
        .is_some_and(|v| v == "true");
    if strip {
        BTreeMap::new()
    } else {
        source_labels.cloned().unwrap_or_default()
    }
}

/// The source a replica asks to copy ([`REPLICATE_FROM`]), of the replica's own kind.
pub fn replicate_from(
    replica: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<SourceRef>> {
    let Some(value) = annotations.and_then(|a| a.get(REPLICATE_FROM)) else {
        return Ok(None);
    };
    match parse_copy_from(value) {
        Some((namespace, name)) => Ok(Some(SourceRef::new(replica.kind, namespace, name))),
        None => Err(Error::InvalidReference {
            object: replica.clone(),
            annotation: REPLICATE_FROM,
            value: shorten(value),
        }),
    }
}

/// The keys replicator recorded as copied into an object ([`REPLICATED_KEYS`]).
pub fn replicated_keys(annotations: Option<&BTreeMap<String, String>>) -> BTreeSet<String> {
    annotations
        .and_then(|a| a.get(REPLICATED_KEYS))
        .map(|list| {
            list.split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `observed` is a copy replicator pushed that conflux may take over: it carries
/// [`REPLICATED_KEYS`], no [`REPLICATE_FROM`] (that would be a replica of its own), and every key
/// it holds is one replicator copied, so adopting it (which makes it equal to the source) loses no
/// key anyone else put there.
pub fn is_push_copy(observed: &ConfigObject) -> bool {
    let annotations = observed.metadata().annotations.as_ref();
    let marked = annotations.is_some_and(|a| a.contains_key(REPLICATED_KEYS))
        && !annotations.is_some_and(|a| a.contains_key(REPLICATE_FROM));
    if !marked {
        return false;
    }
    let copied = replicated_keys(annotations);
    observed.keys().all(|key| copied.contains(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selection::NamespaceView;
    use crate::source::SourceKind;

    use crate::testing::map as ann;

    fn source() -> SourceRef {
        SourceRef::new(SourceKind::Secret, "default", "test-secret")
    }

    #[test]
    fn booleans_as_go_reads_them() {
        for (value, want) in [
            ("true", Some(true)),
            ("1", Some(true)),
            ("T", Some(true)),
            ("True", Some(true)),
            ("false", Some(false)),
            ("0", Some(false)),
            ("tRUE", None),
            (" true", None),
            ("yes", None),
        ] {
            assert_eq!(parse_bool(value), want, "{value:?}");
        }
    }

    #[test]
    fn consent_table() {
        // (case, annotations, namespace, Ok(consents) or Err(reason))
        type Row<'a> = (
            &'a str,
            Vec<(&'a str, &'a str)>,
            &'a str,
            std::result::Result<bool, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            ("nothing", vec![], "my-ns-1", Ok(false)),
            (
                "README example",
                vec![
                    (REPLICATION_ALLOWED, "true"),
                    (REPLICATION_ALLOWED_NAMESPACES, "my-ns-1,namespace-[0-9]*"),
                ],
                "namespace-5",
                Ok(true),
            ),
            (
                "README example, unlisted",
                vec![
                    (REPLICATION_ALLOWED, "true"),
                    (REPLICATION_ALLOWED_NAMESPACES, "my-ns-1,namespace-[0-9]*"),
                ],
                "my-ns-2",
                Ok(false),
            ),
            (
                "allowed without namespaces: none",
                vec![(REPLICATION_ALLOWED, "true")],
                "my-ns-1",
                Ok(false),
            ),
            (
                "namespaces without allowed",
                vec![(REPLICATION_ALLOWED_NAMESPACES, ".*")],
                "my-ns-1",
                Ok(false),
            ),
            (
                "allowed false",
                vec![
                    (REPLICATION_ALLOWED, "false"),
                    (REPLICATION_ALLOWED_NAMESPACES, ".*"),
                ],
                "my-ns-1",
                Ok(false),
            ),
            (
                "Go boolean",
                vec![
                    (REPLICATION_ALLOWED, "1"),
                    (REPLICATION_ALLOWED_NAMESPACES, ".*"),
                ],
                "my-ns-1",
                Ok(true),
            ),
            (
                "bad boolean",
                vec![(REPLICATION_ALLOWED, "yes")],
                "my-ns-1",
                Err("InvalidAnnotation"),
            ),
            (
                "bad regex",
                vec![
                    (REPLICATION_ALLOWED, "true"),
                    (REPLICATION_ALLOWED_NAMESPACES, "my-ns-1,["),
                ],
                "my-ns-1",
                Err("InvalidPattern"),
            ),
        ];
        for (case, pairs, namespace, want) in rows {
            let annotations = ann(&pairs);
            let got = consent(&source(), Some(&annotations))
                .map(|s| s.is_some_and(|s| s.matches(NamespaceView::new(namespace))))
                .map_err(|e| e.reason());
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn push_ors_names_and_labels() {
        let team = ann(&[("team", "a")]);
        let both = push(
            &source(),
            Some(&ann(&[
                (REPLICATE_TO, "my-ns-1"),
                (REPLICATE_TO_MATCHING, "team=a"),
            ])),
        )
        .unwrap()
        .unwrap();
        assert!(both.matches(NamespaceView::new("my-ns-1")));
        assert!(both.matches(NamespaceView::new("other").labels(&team)));
        assert!(!both.matches(NamespaceView::new("other")));
        // The README's selector.
        let readme = push(
            &source(),
            Some(&ann(&[(
                REPLICATE_TO_MATCHING,
                "my-label=value,my-other-label,my-other-label notin (foo,bar)\n",
            )])),
        )
        .unwrap()
        .unwrap();
        let labelled = ann(&[("my-label", "value"), ("my-other-label", "baz")]);
        assert!(readme.matches(NamespaceView::new("x").labels(&labelled)));
        let excluded = ann(&[("my-label", "value"), ("my-other-label", "foo")]);
        assert!(!readme.matches(NamespaceView::new("x").labels(&excluded)));
        assert_eq!(push(&source(), None), Ok(None));
        let err = push(&source(), Some(&ann(&[(REPLICATE_TO_MATCHING, "a in (")]))).unwrap_err();
        assert_eq!(err.reason(), "InvalidSelector");
        let err = push(&source(), Some(&ann(&[(REPLICATE_TO, "(")]))).unwrap_err();
        assert_eq!(err.reason(), "InvalidPattern");
    }

    #[test]
    fn labels_are_copied_unless_stripped() {
        let labels = ann(&[("app", "kafka")]);
        assert_eq!(copied_labels(Some(&labels), None), labels);
        let strip = ann(&[(STRIP_LABELS, "true")]);
        assert!(copied_labels(Some(&labels), Some(&strip)).is_empty());
        let keep = ann(&[(STRIP_LABELS, "false")]);
        assert_eq!(copied_labels(Some(&labels), Some(&keep)), labels);
    }

    #[test]
    fn push_copies_are_recognised_only_when_every_key_is_replicators() {
        let copy = |annotations: &[(&str, &str)], keys: &[&str]| -> ConfigObject {
            let data: BTreeMap<String, String> = keys
                .iter()
                .map(|k| ((*k).to_owned(), "v".to_owned()))
                .collect();
            ConfigObject::ConfigMap(k8s_openapi::api::core::v1::ConfigMap {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    annotations: Some(ann(annotations)),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            })
        };
        assert!(is_push_copy(&copy(
            &[(REPLICATED_KEYS, "a,b")],
            &["a", "b"]
        )));
        assert!(is_push_copy(&copy(&[(REPLICATED_KEYS, "a,b")], &["a"])));
        assert!(!is_push_copy(&copy(
            &[(REPLICATED_KEYS, "a")],
            &["a", "mine"]
        )));
        assert!(!is_push_copy(&copy(&[], &["a"])));
        assert!(!is_push_copy(&copy(
            &[(REPLICATED_KEYS, "a"), (REPLICATE_FROM, "x/y")],
            &["a"]
        )));
        assert!(is_push_copy(&copy(&[(REPLICATED_KEYS, "")], &[])));
    }
}
