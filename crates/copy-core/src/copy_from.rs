//! Pull copies: `fluxcd.controlplane.io/copyFrom: namespace/name` on a ConfigMap or Secret
//! (docs/design.md 4.1, Flux Operator compatible), and the same from reflector's `reflects` and
//! replicator's `replicate-from` ([`pull`]).
//!
//! ```
//! use conflux_copy_core::copy_from::copy_source;
//! use conflux_copy_core::{SourceKind, SourceRef};
//! use std::collections::BTreeMap;
//!
//! let annotations = BTreeMap::from([(
//!     "fluxcd.controlplane.io/copyFrom".to_owned(),
//!     "flux-system/ghcr-auth".to_owned(),
//! )]);
//! let source = copy_source("v1", "Secret", Some(&annotations)).unwrap().unwrap();
//! assert_eq!(source, SourceRef::new(SourceKind::Secret, "flux-system", "ghcr-auth"));
//! // Other kinds are not copy targets, whatever they carry.
//! assert_eq!(copy_source("apps/v1", "Deployment", Some(&annotations)), Ok(None));
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

pub use conflux_watch_index::refs::COPY_FROM_ANNOTATION;
use conflux_watch_index::refs::{Reference, ReferenceSet};

use crate::source::{SourceKind, SourceRef};
use crate::{Error, Result, reflector, replicator};

/// A parsed `copyFrom` value: the source's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CopyFrom {
    /// Namespace of the source.
    pub namespace: String,
    /// Name of the source.
    pub name: String,
}

impl CopyFrom {
    /// Parses `namespace/name`: exactly one `/`, both parts non-empty (Flux Operator accepts empty
    /// parts and then fails to find the source; we say what is wrong up front).
    pub fn parse(value: &str) -> Result<Self> {
        conflux_watch_index::refs::parse_copy_from(value)
            .map(|(namespace, name)| CopyFrom {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .ok_or_else(|| Error::InvalidCopyFrom {
                value: value.to_owned(),
            })
    }

    /// The source of a target of kind `kind` (source and target kinds are always the same).
    pub fn source(self, kind: SourceKind) -> SourceRef {
        SourceRef {
            kind,
            namespace: self.namespace,
            name: self.name,
        }
    }
}

/// The source an object asks to be a copy of.
///
/// `Ok(None)` when the object is not a copy target: not `apiVersion: v1` ConfigMap/Secret, or no
/// `copyFrom` annotation. An error for a malformed value (report it on the target).
/// Works on metadata alone, so the controller can decide from a metadata-only watch.
pub fn copy_source(
    api_version: &str,
    kind: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<SourceRef>> {
    let Some(kind) = SourceKind::of_object(api_version, kind) else {
        return Ok(None);
    };
    let Some(value) = annotations.and_then(|a| a.get(COPY_FROM_ANNOTATION)) else {
        return Ok(None);
    };
    CopyFrom::parse(value).map(|c| Some(c.source(kind)))
}

/// Which annotation makes an object a pull copy. The three are the same pull copy; they differ
/// in which consent annotation a refusal names and in what happens to the target's own keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PullVia {
    /// `fluxcd.controlplane.io/copyFrom` (Flux Operator).
    CopyFrom,
    /// `reflector.v1.k8s.emberstack.com/reflects` (reflector).
    Reflects,
    /// `replicator.v1.mittwald.de/replicate-from` (replicator).
    ReplicateFrom,
}

impl PullVia {
    /// The annotation on the target.
    pub fn annotation(self) -> &'static str {
        match self {
            PullVia::CopyFrom => COPY_FROM_ANNOTATION,
            PullVia::Reflects => reflector::REFLECTS,
            PullVia::ReplicateFrom => replicator::REPLICATE_FROM,
        }
    }

    /// Whether the source's data replaces the target's (copyFrom, reflector) or is merged into it,
    /// keeping the keys the target has of its own (replicator; see
    /// [`pull_copy_as`](crate::desired::pull_copy_as)).
    pub fn merges(self) -> bool {
        self == PullVia::ReplicateFrom
    }

    /// A short name for logs, metrics and `conflux plan`: `copyFrom`, `reflects`,
    /// `replicate-from`.
    pub fn as_str(self) -> &'static str {
        match self {
            PullVia::CopyFrom => "copyFrom",
            PullVia::Reflects => "reflects",
            PullVia::ReplicateFrom => "replicate-from",
        }
    }
}

/// A pull copy: the source an object asks to be a copy of, and the annotation that asks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pull {
    /// The source (always of the target's kind).
    pub source: SourceRef,
    /// The annotation.
    pub via: PullVia,
}

/// The pull copy an object asks for, through any of the annotations conflux understands:
/// `fluxcd.controlplane.io/copyFrom`, reflector's `reflects` (not on the mirrors reflector made
/// automatically, which belong to their source's fan-out), replicator's `replicate-from`.
///
/// `Ok(None)` when the object is not a pull target. An error for a malformed value, for two
/// annotations naming different sources, and for an object naming itself (so the error is
/// reported on the target and nothing is written). Works on metadata alone.
///
/// ```
/// use conflux_copy_core::copy_from::{pull, PullVia};
/// use conflux_copy_core::{SourceKind, SourceRef};
/// use std::collections::BTreeMap;
///
/// let annotations = BTreeMap::from([(
///     "replicator.v1.mittwald.de/replicate-from".to_owned(),
///     "default/some-secret".to_owned(),
/// )]);
/// let wanted = pull("v1", "Secret", "team-a", "secret-replica", Some(&annotations))?.unwrap();
/// assert_eq!(wanted.source, SourceRef::new(SourceKind::Secret, "default", "some-secret"));
/// assert_eq!(wanted.via, PullVia::ReplicateFrom);
/// # Ok::<(), conflux_copy_core::Error>(())
/// ```
pub fn pull(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Pull>> {
    let Some(kind) = SourceKind::of_object(api_version, kind) else {
        return Ok(None);
    };
    let target = SourceRef::new(kind, namespace, name);
    let copy_from = copy_source(api_version, kind.as_str(), annotations)?;
    let found = [
        copy_from.map(|source| (PullVia::CopyFrom, source)),
        reflector::reflects(&target, annotations)?.map(|source| (PullVia::Reflects, source)),
        replicator::replicate_from(&target, annotations)?
            .map(|source| (PullVia::ReplicateFrom, source)),
    ];
    let mut found = found.into_iter().flatten();
    let Some((via, source)) = found.next() else {
        return Ok(None);
    };
    if let Some((other, other_source)) = found.find(|(_, s)| *s != source) {
        return Err(Error::ConflictingSources(Box::new(
            crate::error::ConflictingSources {
                object: target,
                first: via.annotation(),
                first_source: source,
                second: other.annotation(),
                second_source: other_source,
            },
        )));
    }
    if source == target {
        return Err(Error::CopyOfItself {
            source_ref: source,
            annotation: via.annotation(),
        });
    }
    Ok(Some(Pull { source, via }))
}

/// The references the pull-copy controller indexes targets by (target → source, so a change of a
/// source wakes its copies): Flux's set, `copyFrom` among it, plus reflector's `reflects` and
/// replicator's `replicate-from`. Malformed values are not references (the controller reports
/// them on the target).
pub fn pull_references() -> ReferenceSet {
    let mut set = ReferenceSet::flux();
    set.register_fn("", "ConfigMap", peer_pulls);
    set.register_fn("", "Secret", peer_pulls);
    set
}

fn peer_pulls(obj: &serde_json::Value, namespace: &Arc<str>, out: &mut Vec<Reference>) {
    let text = |p: &str| obj.pointer(p).and_then(serde_json::Value::as_str);
    let Some(kind) = text("/kind").and_then(SourceKind::from_kind) else {
        return;
    };
    let Some(map) = obj
        .pointer("/metadata/annotations")
        .and_then(serde_json::Value::as_object)
    else {
        return;
    };
    // Only the few annotations read here are copied out of the object.
    let annotations: BTreeMap<String, String> = [
        reflector::REFLECTS,
        reflector::AUTO_REFLECTS,
        replicator::REPLICATE_FROM,
    ]
    .into_iter()
    .filter_map(|key| Some((key.to_owned(), map.get(key)?.as_str()?.to_owned())))
    .collect();
    let target = SourceRef::new(
        kind,
        &**namespace,
        text("/metadata/name").unwrap_or_default(),
    );
    let found = [
        (
            reflector::reflects(&target, Some(&annotations)),
            reflector::REFLECTS,
        ),
        (
            replicator::replicate_from(&target, Some(&annotations)),
            replicator::REPLICATE_FROM,
        ),
    ];
    for (source, annotation) in found {
        if let Ok(Some(source)) = source {
            out.push(Reference {
                key: source.config_key(),
                optional: false,
                path: Arc::from(format!("metadata.annotations[{annotation}]")),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let ok = |ns: &str, name: &str| Some((ns.to_owned(), name.to_owned()));
        let bad = |_: &str| None;
        let cases: &[(&str, Option<(String, String)>)] = &[
            ("flux-system/ghcr-auth", ok("flux-system", "ghcr-auth")),
            ("a/b", ok("a", "b")),
            ("", bad("")),
            ("name-only", bad("name-only")),
            ("a/b/c", bad("a/b/c")),
            ("/b", bad("/b")),
            ("a/", bad("a/")),
            ("/", bad("/")),
        ];
        for (value, want) in cases {
            let got = CopyFrom::parse(value).map(|c| (c.namespace, c.name));
            match (got, want) {
                (Ok(got), Some(want)) => assert_eq!(&got, want, "{value:?}"),
                (Err(err), None) => assert_eq!(
                    err,
                    Error::InvalidCopyFrom {
                        value: (*value).to_owned()
                    }
                ),
                (got, want) => panic!("{value:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn invalid_message_is_flux_operators() {
        assert_eq!(
            CopyFrom::parse("nope").unwrap_err().to_string(),
            "invalid fluxcd.controlplane.io/copyFrom annotation value 'nope' must be in the format 'namespace/name'"
        );
    }

    #[test]
    fn copy_targets_table() {
        let with = |v: &str| BTreeMap::from([(COPY_FROM_ANNOTATION.to_owned(), v.to_owned())]);
        let other = BTreeMap::from([("x".to_owned(), "a/b".to_owned())]);
        let cases = [
            (
                "v1",
                "ConfigMap",
                Some(with("a/b")),
                Some(Ok(SourceRef::new(SourceKind::ConfigMap, "a", "b"))),
            ),
            (
                "v1",
                "Secret",
                Some(with("a/b")),
                Some(Ok(SourceRef::new(SourceKind::Secret, "a", "b"))),
            ),
            (
                "v1",
                "Secret",
                Some(with("a")),
                Some(Err(Error::InvalidCopyFrom { value: "a".into() })),
            ),
            ("v1", "Secret", Some(other), None),
            ("v1", "Secret", None, None),
            ("v1", "Pod", Some(with("a/b")), None),
            ("apps/v1", "Secret", Some(with("a/b")), None),
        ];
        for (api_version, kind, annotations, want) in cases {
            assert_eq!(
                copy_source(api_version, kind, annotations.as_ref()).transpose(),
                want,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn pull_table() {
        use crate::testing::map as ann;
        use crate::{reflector, replicator};
        let src = |ns: &str, name: &str| SourceRef::new(SourceKind::Secret, ns, name);
        // (case, annotations, Ok(Some(via)) / Ok(None) / Err(reason))
        type Row<'a> = (
            &'a str,
            BTreeMap<String, String>,
            std::result::Result<Option<PullVia>, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            ("none", ann(&[]), Ok(None)),
            (
                "copyFrom",
                ann(&[(COPY_FROM_ANNOTATION, "a/b")]),
                Ok(Some(PullVia::CopyFrom)),
            ),
            (
                "reflects",
                ann(&[(reflector::REFLECTS, "a/b")]),
                Ok(Some(PullVia::Reflects)),
            ),
            (
                "reflector's own auto mirror",
                ann(&[
                    (reflector::REFLECTS, "a/b"),
                    (reflector::AUTO_REFLECTS, "True"),
                ]),
                Ok(None),
            ),
            (
                "replicate-from",
                ann(&[(replicator::REPLICATE_FROM, "a/b")]),
                Ok(Some(PullVia::ReplicateFrom)),
            ),
            (
                "two naming the same source",
                ann(&[
                    (COPY_FROM_ANNOTATION, "a/b"),
                    (replicator::REPLICATE_FROM, "a/b"),
                ]),
                Ok(Some(PullVia::CopyFrom)),
            ),
            (
                "two naming different sources",
                ann(&[
                    (reflector::REFLECTS, "a/b"),
                    (replicator::REPLICATE_FROM, "a/c"),
                ]),
                Err("ConflictingSources"),
            ),
            (
                "malformed reflects",
                ann(&[(reflector::REFLECTS, "a")]),
                Err("InvalidReference"),
            ),
            (
                "malformed replicate-from",
                ann(&[(replicator::REPLICATE_FROM, "a/b/c")]),
                Err("InvalidReference"),
            ),
            (
                "itself",
                ann(&[(replicator::REPLICATE_FROM, "team-a/target")]),
                Err("SelfReference"),
            ),
        ];
        for (case, annotations, want) in rows {
            let got = pull("v1", "Secret", "team-a", "target", Some(&annotations))
                .map(|p| {
                    p.map(|p| {
                        assert_eq!(p.source, src("a", "b"), "{case}");
                        p.via
                    })
                })
                .map_err(|e| e.reason());
            assert_eq!(got, want, "{case}");
        }
        let bad = ann(&[(reflector::REFLECTS, "a/b")]);
        assert_eq!(
            pull("apps/v1", "Deployment", "x", "y", Some(&bad)),
            Ok(None)
        );
        let err = pull(
            "v1",
            "Secret",
            "team-a",
            "t",
            Some(&ann(&[
                (reflector::REFLECTS, "a/b"),
                (replicator::REPLICATE_FROM, "a/c"),
            ])),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret/team-a/t: annotations reflector.v1.k8s.emberstack.com/reflects (Secret/a/b) and replicator.v1.mittwald.de/replicate-from (Secret/a/c) name different sources; nothing is copied until one is removed"
        );
    }
}
