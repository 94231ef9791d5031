//! Pull copies: `fluxcd.controlplane.io/copyFrom: namespace/name` on a ConfigMap or Secret
//! (docs/design.md 4.1, Flux Operator compatible).
//!
//! ```
//! use copy_core::copy_from::copy_source;
//! use copy_core::{SourceKind, SourceRef};
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

pub use watch_index::refs::COPY_FROM_ANNOTATION;

use crate::source::{SourceKind, SourceRef};
use crate::{Error, Result};

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
        watch_index::refs::parse_copy_from(value)
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
}
