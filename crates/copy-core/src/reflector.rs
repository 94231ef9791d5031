//! reflector's annotations (emberstack/kubernetes-reflector), read with reflector's own rules.
//!
//! | annotation | on | what conflux does |
//! |---|---|---|
//! | [`ALLOWED`] `"true"` | source | consent: mirrors may copy it ([`consent`]) |
//! | [`ALLOWED_NAMESPACES`] | source | into these namespaces (regexes; unset or `""`: all) |
//! | [`ALLOWED_NAMESPACES_SELECTOR`] | source | or into namespaces with these labels |
//! | [`AUTO_ENABLED`] `"true"` | source | fan-out into every allowed namespace ([`auto`]) |
//! | [`AUTO_NAMESPACES`] | source | restricted to these (regexes; unset or `""`: all) |
//! | [`AUTO_NAMESPACES_SELECTOR`] | source | or to namespaces with these labels |
//! | [`REFLECTS`] `namespace/name` | mirror | a pull copy of that source ([`reflects`]) |
//!
//! Booleans are read as .NET's `bool.TryParse` does: `true` or `false` in any case, surrounding
//! whitespace ignored. A list and its selector are ORed; the allowed and the auto namespaces are
//! ANDed (an auto mirror must be allowed too). An unset or empty list selects every namespace,
//! while a list of only separators or spaces selects none, as in reflector.
//!
//! ```
//! use std::collections::BTreeMap;
//! use conflux_copy_core::{reflector, NamespaceView, SourceKind, SourceRef};
//!
//! let source = SourceRef::new(SourceKind::Secret, "default", "source-secret");
//! let annotations = BTreeMap::from([
//!     (reflector::ALLOWED.to_owned(), "true".to_owned()),
//!     (reflector::ALLOWED_NAMESPACES.to_owned(), "namespace-1,namespace-2,namespace-[0-9]*".to_owned()),
//! ]);
//! let allowed = reflector::consent(&source, Some(&annotations))?.expect("consents");
//! assert!(allowed.matches(NamespaceView::new("namespace-7")));
//! assert!(!allowed.matches(NamespaceView::new("prod")));
//! # Ok::<(), conflux_copy_core::Error>(())
//! ```

use std::collections::BTreeMap;

use conflux_watch_index::refs::parse_copy_from;
use conflux_watch_index::selector::Selector;

use crate::patterns::{Dialect, NamePatterns, shorten};
use crate::selection::Selection;
use crate::source::SourceRef;
use crate::{Error, Result};

/// Source: `"true"` lets mirrors copy it.
pub const ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
/// Source: comma-separated regexes of the namespaces mirrors may be in.
pub const ALLOWED_NAMESPACES: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
/// Source: a label selector of the namespaces mirrors may be in (ORed with the list).
pub const ALLOWED_NAMESPACES_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces-selector";
/// Source: `"true"` makes mirrors in every allowed namespace automatically.
pub const AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
/// Source: comma-separated regexes of the namespaces that get automatic mirrors.
pub const AUTO_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces";
/// Source: a label selector of the namespaces that get automatic mirrors (ORed with the list).
pub const AUTO_NAMESPACES_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector";
/// Mirror: `namespace/name` of its source.
pub const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
/// Mirror: `"True"` on the mirrors reflector made automatically (conflux reads it, never writes
/// it).
pub const AUTO_REFLECTS: &str = "reflector.v1.k8s.emberstack.com/auto-reflects";
/// Mirror: the source's resourceVersion reflector last copied. conflux compares content instead
/// and neither reads nor writes it.
pub const REFLECTED_VERSION: &str = "reflector.v1.k8s.emberstack.com/reflected-version";

/// What reflector accepts as a boolean.
const BOOLEAN: &str = "\"true\" or \"false\"";

/// A boolean as reflector reads it (.NET `bool.TryParse`): `true`/`false` in any case, surrounding
/// whitespace ignored.
pub fn parse_bool(value: &str) -> Option<bool> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// A boolean annotation: `false` when unset, an error when not a boolean.
fn flag(
    object: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
    annotation: &'static str,
) -> Result<bool> {
    let Some(value) = annotations.and_then(|a| a.get(annotation)) else {
        return Ok(false);
    };
    parse_bool(value).ok_or_else(|| Error::InvalidAnnotation {
        object: object.clone(),
        annotation,
        value: shorten(value),
        expected: BOOLEAN,
    })
}

/// A namespace list ORed with its selector; every namespace when both are unset or empty.
fn namespaces(
    object: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
    list: &'static str,
    selector: &'static str,
) -> Result<Selection> {
    let get = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
    };
    let mut parts = Vec::new();
    if let Some(value) = get(list) {
        let patterns = NamePatterns::parse(value, Dialect::Reflector).map_err(|problem| {
            Error::InvalidPattern {
                object: object.clone(),
                annotation: list,
                problem: Box::new(problem),
            }
        })?;
        parts.push(Selection::Patterns(patterns));
    }
    if let Some(value) = get(selector) {
        let parsed = Selector::parse(value).map_err(|e| Error::InvalidSelector {
            context: format!("{selector} on {object}"),
            message: e.to_string(),
        })?;
        parts.push(Selection::Labels(parsed));
    }
    Ok(if parts.is_empty() {
        Selection::All
    } else {
        Selection::any_of(parts)
    })
}

/// The namespaces the source lets mirrors copy it into, or `None` when it does not allow
/// reflection ([`ALLOWED`] unset or `false`).
pub fn consent(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Selection>> {
    if !flag(source, annotations, ALLOWED)? {
        return Ok(None);
    }
    namespaces(
        source,
        annotations,
        ALLOWED_NAMESPACES,
        ALLOWED_NAMESPACES_SELECTOR,
    )
    .map(Some)
}

/// Whether the source asks for automatic mirrors: [`AUTO_ENABLED`] and [`ALLOWED`] both `true`
/// (reflector makes none without the second).
pub fn auto_enabled(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<bool> {
    Ok(flag(source, annotations, AUTO_ENABLED)? && flag(source, annotations, ALLOWED)?)
}

/// The namespaces that get an automatic mirror (those both allowed and auto), or `None` when the
/// source asks for none ([`auto_enabled`]).
pub fn auto(
    source: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Selection>> {
    if !auto_enabled(source, annotations)? {
        return Ok(None);
    }
    let allowed = namespaces(
        source,
        annotations,
        ALLOWED_NAMESPACES,
        ALLOWED_NAMESPACES_SELECTOR,
    )?;
    let auto = namespaces(
        source,
        annotations,
        AUTO_NAMESPACES,
        AUTO_NAMESPACES_SELECTOR,
    )?;
    Ok(Some(Selection::AllOf(vec![allowed, auto])))
}

/// The source a mirror asks to copy ([`REFLECTS`]), of the mirror's own kind; `None` without the
/// annotation, and for the mirrors reflector made automatically ([`AUTO_REFLECTS`] true): those
/// belong to their source's fan-out.
pub fn reflects(
    mirror: &SourceRef,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<SourceRef>> {
    let Some(value) = annotations.and_then(|a| a.get(REFLECTS)) else {
        return Ok(None);
    };
    if is_auto(annotations) {
        return Ok(None);
    }
    match parse_copy_from(value) {
        Some((namespace, name)) => Ok(Some(SourceRef::new(mirror.kind, namespace, name))),
        None => Err(Error::InvalidReference {
            object: mirror.clone(),
            annotation: REFLECTS,
            value: shorten(value),
        }),
    }
}

fn is_auto(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(AUTO_REFLECTS))
        .and_then(|v| parse_bool(v))
        .unwrap_or(false)
}

/// Whether an object's annotations make it a mirror reflector created automatically for `source`.
pub fn is_auto_mirror_of(
    annotations: Option<&BTreeMap<String, String>>,
    source: &SourceRef,
) -> bool {
    is_auto(annotations)
        && annotations
            .and_then(|a| a.get(REFLECTS))
            .and_then(|v| parse_copy_from(v))
            == Some((source.namespace.as_str(), source.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selection::NamespaceView;
    use crate::source::SourceKind;

    use crate::testing::map as ann;

    fn source() -> SourceRef {
        SourceRef::new(SourceKind::Secret, "default", "source-secret")
    }

    #[test]
    fn booleans_as_dotnet_reads_them() {
        for (value, want) in [
            ("true", Some(true)),
            ("True", Some(true)),
            (" TRUE ", Some(true)),
            ("false", Some(false)),
            ("False", Some(false)),
            ("1", None),
            ("yes", None),
            ("", None),
        ] {
            assert_eq!(parse_bool(value), want, "{value:?}");
        }
    }

    /// (case, annotations, namespace, its labels, consents)
    type ConsentRow<'a> = (
        &'a str,
        Vec<(&'a str, &'a str)>,
        &'a str,
        Vec<(&'a str, &'a str)>,
        std::result::Result<bool, &'a str>,
    );

    #[test]
    fn consent_table() {
        let rows: Vec<ConsentRow<'_>> = vec![
            ("nothing", vec![], "a", vec![], Ok(false)),
            (
                "allowed, no list: all",
                vec![(ALLOWED, "true")],
                "a",
                vec![],
                Ok(true),
            ),
            (
                "allowed, empty list: all",
                vec![(ALLOWED, "true"), (ALLOWED_NAMESPACES, "")],
                "a",
                vec![],
                Ok(true),
            ),
            (
                "allowed, list of separators: none",
                vec![(ALLOWED, "true"), (ALLOWED_NAMESPACES, " , ")],
                "a",
                vec![],
                Ok(false),
            ),
            (
                "not allowed, list",
                vec![(ALLOWED, "false"), (ALLOWED_NAMESPACES, "a")],
                "a",
                vec![],
                Ok(false),
            ),
            (
                "list only, README example",
                vec![
                    (ALLOWED, "true"),
                    (
                        ALLOWED_NAMESPACES,
                        "namespace-1,namespace-2,namespace-[0-9]*",
                    ),
                ],
                "namespace-42",
                vec![],
                Ok(true),
            ),
            (
                "list OR selector: selector",
                vec![
                    (ALLOWED, "true"),
                    (ALLOWED_NAMESPACES, "namespace-1"),
                    (ALLOWED_NAMESPACES_SELECTOR, "env=production"),
                ],
                "shop",
                vec![("env", "production")],
                Ok(true),
            ),
            (
                "list OR selector: neither",
                vec![
                    (ALLOWED, "true"),
                    (ALLOWED_NAMESPACES, "namespace-1"),
                    (ALLOWED_NAMESPACES_SELECTOR, "env=production"),
                ],
                "shop",
                vec![("env", "dev")],
                Ok(false),
            ),
            (
                "bad boolean",
                vec![(ALLOWED, "yes")],
                "a",
                vec![],
                Err("InvalidAnnotation"),
            ),
            (
                "bad regex",
                vec![(ALLOWED, "true"), (ALLOWED_NAMESPACES, "a,(")],
                "a",
                vec![],
                Err("InvalidPattern"),
            ),
            (
                "bad selector",
                vec![
                    (ALLOWED, "true"),
                    (ALLOWED_NAMESPACES_SELECTOR, "env in (a"),
                ],
                "a",
                vec![],
                Err("InvalidSelector"),
            ),
        ];
        for (case, pairs, namespace, labels, want) in rows {
            let annotations = ann(&pairs);
            let labels = ann(&labels);
            let got = consent(&source(), Some(&annotations))
                .map(|s| {
                    s.is_some_and(|s| s.matches(NamespaceView::new(namespace).labels(&labels)))
                })
                .map_err(|e| e.reason());
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn auto_needs_both_flags_and_ands_the_lists() {
        let auto_of = |pairs: &[(&str, &str)]| auto(&source(), Some(&ann(pairs))).unwrap();
        assert!(
            auto_of(&[(AUTO_ENABLED, "true")]).is_none(),
            "allowed is required"
        );
        assert!(auto_of(&[(ALLOWED, "true"), (AUTO_ENABLED, "false")]).is_none());
        let all = auto_of(&[(ALLOWED, "true"), (AUTO_ENABLED, "true")]).unwrap();
        assert!(all.matches(NamespaceView::new("anything")));
        let both = auto_of(&[
            (ALLOWED, "true"),
            (AUTO_ENABLED, "True"),
            (ALLOWED_NAMESPACES, "team-.*"),
            (AUTO_NAMESPACES, "team-a,prod"),
        ])
        .unwrap();
        assert!(both.matches(NamespaceView::new("team-a")));
        assert!(
            !both.matches(NamespaceView::new("prod")),
            "auto but not allowed"
        );
        assert!(
            !both.matches(NamespaceView::new("team-b")),
            "allowed but not auto"
        );
        let prod = ann(&[("env", "prod")]);
        let by_label = auto_of(&[
            (ALLOWED, "true"),
            (AUTO_ENABLED, "true"),
            (AUTO_NAMESPACES_SELECTOR, "env=prod"),
        ])
        .unwrap();
        assert!(by_label.matches(NamespaceView::new("x").labels(&prod)));
        assert!(!by_label.matches(NamespaceView::new("x")));
        // A bad value is an error, whichever annotation holds it.
        let err = auto(&source(), Some(&ann(&[(AUTO_ENABLED, "on")]))).unwrap_err();
        assert_eq!(err.reason(), "InvalidAnnotation");
        assert!(err.to_string().contains(AUTO_ENABLED), "{err}");
    }

    #[test]
    fn reflects_is_a_pull_unless_reflector_made_the_mirror() {
        let mirror = SourceRef::new(SourceKind::ConfigMap, "team-a", "mirror-config-map");
        let pull = |pairs: &[(&str, &str)]| reflects(&mirror, Some(&ann(pairs)));
        assert_eq!(
            pull(&[(REFLECTS, "default/source-config-map")]),
            Ok(Some(SourceRef::new(
                SourceKind::ConfigMap,
                "default",
                "source-config-map"
            )))
        );
        assert_eq!(pull(&[]), Ok(None));
        assert_eq!(
            pull(&[
                (REFLECTS, "default/source-config-map"),
                (AUTO_REFLECTS, "True")
            ]),
            Ok(None)
        );
        let err = pull(&[(REFLECTS, "no-slash")]).unwrap_err();
        assert_eq!(err.reason(), "InvalidReference");
        assert_eq!(
            err.to_string(),
            "ConfigMap/team-a/mirror-config-map: annotation reflector.v1.k8s.emberstack.com/reflects is 'no-slash', which is not 'namespace/name'"
        );
    }

    #[test]
    fn auto_mirrors_are_recognised_by_their_annotations() {
        let src = source();
        let mirror = ann(&[(AUTO_REFLECTS, "True"), (REFLECTS, "default/source-secret")]);
        assert!(is_auto_mirror_of(Some(&mirror), &src));
        let direct = ann(&[(REFLECTS, "default/source-secret")]);
        assert!(!is_auto_mirror_of(Some(&direct), &src));
        let other = ann(&[(AUTO_REFLECTS, "True"), (REFLECTS, "other/source-secret")]);
        assert!(!is_auto_mirror_of(Some(&other), &src));
        assert!(!is_auto_mirror_of(None, &src));
    }
}
