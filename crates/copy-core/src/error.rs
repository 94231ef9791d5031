//! The one error type of this crate. No message ever contains ConfigMap or Secret data: only kinds,
//! namespaces, names, annotation names and Secret types.

use std::fmt;

use crate::source::SourceRef;

/// Everything that can go wrong in this crate. `Display` gives Flux Operator's message where one
/// exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `fluxcd.controlplane.io/copyFrom` value that is not `namespace/name` (Flux Operator's text;
    /// we also reject empty parts).
    #[error(
        "invalid fluxcd.controlplane.io/copyFrom annotation value '{value}' must be in the format 'namespace/name'"
    )]
    InvalidCopyFrom {
        /// The annotation value as found.
        value: String,
    },

    /// A pull annotation (`copyFrom`, reflector's `reflects`, replicator's `replicate-from`) that
    /// names the object carrying it.
    #[error("{source_ref}: {annotation} names the object itself; nothing to copy")]
    CopyOfItself {
        /// The object (also the source it names).
        source_ref: SourceRef,
        /// The annotation.
        annotation: &'static str,
    },

    /// reflector's `reflects` or replicator's `replicate-from` whose value is not
    /// `namespace/name` (valid names). The object is left as it is.
    #[error("{object}: annotation {annotation} is '{value}', which is not 'namespace/name'")]
    InvalidReference {
        /// The object carrying the annotation.
        object: SourceRef,
        /// The annotation.
        annotation: &'static str,
        /// Its value (at most 64 characters of it).
        value: String,
    },

    /// An object with more than one pull annotation naming different sources: which one it should
    /// copy is not ours to guess, so it is left as it is. Boxed to keep `Result`s small.
    #[error("{0}")]
    ConflictingSources(Box<ConflictingSources>),

    /// A reflector or replicator namespace list with an entry that is not a regular expression
    /// (see [`patterns`](crate::patterns)). The whole list is refused: nothing is copied or pruned
    /// because of it.
    #[error("{object}: annotation {annotation}: {problem}")]
    InvalidPattern {
        /// The object carrying the annotation.
        object: SourceRef,
        /// The annotation.
        annotation: &'static str,
        /// The entry and the parser's message.
        problem: Box<crate::patterns::PatternError>,
    },

    /// A reflector or replicator boolean annotation whose value is not a boolean as that tool reads
    /// it. The annotation is ignored and nothing changes because of it.
    #[error("{object}: annotation {annotation} is '{value}', expected {expected}")]
    InvalidAnnotation {
        /// The object carrying the annotation.
        object: SourceRef,
        /// The annotation.
        annotation: &'static str,
        /// Its value (at most 64 characters of it).
        value: String,
        /// What the tool accepts.
        expected: &'static str,
    },

    /// A Secret of a type that cannot be copied: a `kubernetes.io/service-account-token` is
    /// bound to a ServiceAccount of its own namespace (the API server refuses a copy without
    /// one, and a copy with one would be another account's credential).
    #[error(
        "{source_ref} has type '{secret_type}', which is bound to its namespace and is never copied"
    )]
    UnsupportedSecretType {
        /// The source.
        source_ref: SourceRef,
        /// Its type.
        secret_type: String,
    },

    /// The source could not be read (not found, forbidden, ...). Nothing is written.
    #[error("failed to copy data from {source_ref}: {reason}")]
    SourceUnavailable {
        /// The source that was asked for.
        source_ref: SourceRef,
        /// Why, typically the API server's message.
        reason: String,
    },

    /// The target Secret declares a type other than `Opaque` that differs from its source's; types
    /// are immutable and we do not replace an object whose type someone chose on purpose. Boxed to
    /// keep `Result`s small.
    #[error("{0}")]
    SecretTypeConflict(Box<SecretTypeConflict>),

    /// Source and target are of different kinds (a caller error: the source is fetched by the
    /// target's kind).
    #[error("cannot copy {source_ref} into a {target_kind}: source and target kinds differ")]
    KindMismatch {
        /// The source.
        source_ref: SourceRef,
        /// The target's kind.
        target_kind: &'static str,
    },

    /// A cross-namespace copy the source did not consent to.
    #[error(transparent)]
    Refused(#[from] Refusal),

    /// A fan-out annotation (kopy's sync, reflector's auto-enabled, replicator's replicate-to or
    /// replicate-to-matching) on a source outside the namespaces the operator trusts.
    #[error(
        "{source_ref} carries {annotation} but its namespace is not a trusted sync source namespace (--sync-source-namespaces); the annotation is ignored"
    )]
    UntrustedSyncSource {
        /// The annotated source.
        source_ref: SourceRef,
        /// Which annotation.
        annotation: &'static str,
    },

    /// A namespace selector (a ConfigSync's `namespaceSelector` or a kopy annotation) that does not
    /// parse; `message` is apimachinery's.
    #[error("invalid namespace selector in {context}: {message}")]
    InvalidSelector {
        /// Where the selector came from.
        context: String,
        /// The parser's message.
        message: String,
    },

    /// A ProtectPolicy whose spec cannot be used: nothing is protected by it until it is fixed.
    #[error("ProtectPolicy {policy}: {problem}")]
    InvalidProtectPolicy {
        /// The policy's name.
        policy: String,
        /// The stable reason: `InvalidOperation`, `InvalidSelector` or `InvalidSubject`.
        reason: &'static str,
        /// What is wrong, naming the field.
        problem: String,
    },

    /// An API call failed or timed out (runtime feature); the message names the object and the
    /// action.
    #[cfg(feature = "runtime")]
    #[error(transparent)]
    Kube(#[from] conflux_runtime::Error),

    /// Some copies of a fan-out failed (runtime feature); each failure was reported on its own.
    #[cfg(feature = "runtime")]
    #[error("{what}: {failed} of {total} copies failed")]
    Incomplete {
        /// The ConfigSync or kopy source.
        what: String,
        /// Steps that failed.
        failed: usize,
        /// Steps in all.
        total: usize,
    },

    /// A kind the decision needs has not been listed yet (runtime feature); retried.
    #[cfg(feature = "runtime")]
    #[error("{what} not listed yet")]
    NotListed {
        /// The kind.
        what: &'static str,
    },

    /// The ConfigSync finalizer could not be handled (runtime feature).
    #[cfg(feature = "runtime")]
    #[error("finalizer: {0}")]
    Finalizer(&'static str),

    /// The API server does not serve `admissionregistration.k8s.io/v1`
    /// ValidatingAdmissionPolicies (runtime feature): Kubernetes before 1.30, or the API turned
    /// off. The protect controller's admission-policy mode cannot work there.
    #[cfg(feature = "runtime")]
    #[error(
        "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies (Kubernetes 1.30 or later); run conflux with --protect-mode=webhook"
    )]
    AdmissionPolicyUnsupported,
}

/// The details of [`Error::ConflictingSources`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{object}: annotations {first} ({first_source}) and {second} ({second_source}) name different sources; nothing is copied until one is removed"
)]
pub struct ConflictingSources {
    /// The object.
    pub object: SourceRef,
    /// The first annotation (in the order copyFrom, reflects, replicate-from).
    pub first: &'static str,
    /// The source it names.
    pub first_source: SourceRef,
    /// The other annotation.
    pub second: &'static str,
    /// The source it names.
    pub second_source: SourceRef,
}

/// The details of [`Error::SecretTypeConflict`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot copy {source_ref} into Secret {namespace}/{name}: the target has type '{target_type}' but the source has type '{source_type}'"
)]
pub struct SecretTypeConflict {
    /// The source.
    pub source_ref: SourceRef,
    /// Namespace of the target.
    pub namespace: String,
    /// Name of the target.
    pub name: String,
    /// The target's declared type.
    pub target_type: String,
    /// The source's type (`Opaque` when empty).
    pub source_type: String,
}

/// The details of [`Error::Refused`]: why a cross-namespace copy was refused (see
/// [`consent`](crate::consent)). Names the kinds, namespaces and the annotations, never
/// any data, so it is safe in Events, logs and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The source that was asked for.
    pub source: SourceRef,
    /// The namespace the copy would go into.
    pub target_namespace: String,
    /// What the source says (boxed: a refusal travels in many `Result`s).
    pub said: Box<SourceSays>,
}

/// What a refused source says about consent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceSays {
    /// The consent annotations the source carries that do not admit the namespace.
    pub unmatched: Vec<&'static str>,
    /// A reflector or replicator `*-allowed` annotation the source carries with a value that is not
    /// `true` (the annotation and its value, shortened).
    pub declined: Vec<(&'static str, String)>,
    /// The consent annotation to name when the source carries none: the one the target's tool
    /// asks for ([`PullVia::consent_annotation`](crate::copy_from::PullVia::consent_annotation)).
    pub wanted: &'static str,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "copying {} into namespace '{}' is not allowed: ",
            self.source, self.target_namespace
        )?;
        let said = &self.said;
        if said.unmatched.is_empty() && said.declined.is_empty() {
            return write!(
                f,
                "the source in namespace '{}' has no {} annotation",
                self.source.namespace, said.wanted
            );
        }
        let mut parts = Vec::new();
        if !said.unmatched.is_empty() {
            let plural = if said.unmatched.len() == 1 { "" } else { "s" };
            parts.push(format!(
                "namespace '{}' does not match the source's {} annotation{plural}",
                self.target_namespace,
                said.unmatched.join(", ")
            ));
        }
        for (annotation, value) in &said.declined {
            parts.push(format!("the source's {annotation} is '{value}', not true"));
        }
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for Refusal {}

impl Error {
    /// A short, stable name for the error: the `Ready` condition reason, an Event reason and a metric
    /// label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidCopyFrom { .. } => "InvalidCopyFrom",
            Error::CopyOfItself { .. } => "SelfReference",
            Error::InvalidReference { .. } => "InvalidReference",
            Error::ConflictingSources(_) => "ConflictingSources",
            Error::InvalidPattern { .. } => "InvalidPattern",
            Error::InvalidAnnotation { .. } => "InvalidAnnotation",
            Error::UnsupportedSecretType { .. } => "UnsupportedSecretType",
            Error::SourceUnavailable { .. } => "SourceNotFound",
            Error::SecretTypeConflict(_) => "SecretTypeConflict",
            Error::KindMismatch { .. } => "KindMismatch",
            Error::Refused(_) | Error::UntrustedSyncSource { .. } => "Refused",
            Error::InvalidSelector { .. } => "InvalidSelector",
            Error::InvalidProtectPolicy { reason, .. } => reason,
            #[cfg(feature = "runtime")]
            Error::Kube(err) => err.reason(),
            #[cfg(feature = "runtime")]
            Error::Incomplete { .. } => "Incomplete",
            #[cfg(feature = "runtime")]
            Error::Finalizer(_) => "FinalizerFailed",
            #[cfg(feature = "runtime")]
            Error::NotListed { .. } => "NotListed",
            #[cfg(feature = "runtime")]
            Error::AdmissionPolicyUnsupported => "AdmissionPolicyUnsupported",
        }
    }

    /// Whether only a change of the objects involved can fix this: the input itself is wrong
    /// (a malformed annotation or selector, a copy of itself, a refusal, a kind mismatch). Such
    /// an error is found without asking the API server, so retrying it would only repeat the
    /// report: controllers wait for a change instead (their watches see it).
    pub fn is_input_problem(&self) -> bool {
        matches!(
            self,
            Error::InvalidCopyFrom { .. }
                | Error::CopyOfItself { .. }
                | Error::InvalidReference { .. }
                | Error::ConflictingSources(_)
                | Error::InvalidPattern { .. }
                | Error::InvalidAnnotation { .. }
                | Error::UnsupportedSecretType { .. }
                | Error::KindMismatch { .. }
                | Error::UntrustedSyncSource { .. }
                | Error::InvalidSelector { .. }
                | Error::InvalidProtectPolicy { .. }
        )
    }
}

/// The error a source reference makes, kept with the error so sources need not know it.
impl SourceRef {
    /// The error to report when the source cannot be read (not found, forbidden, ...):
    /// `failed to copy data from <Kind>/<ns>/<name>: <reason>`, as Flux Operator words it.
    pub fn unavailable(&self, reason: impl fmt::Display) -> Error {
        Error::SourceUnavailable {
            source_ref: self.clone(),
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceKind;

    #[test]
    fn unavailable_message_is_flux_operators() {
        let src = SourceRef::new(SourceKind::ConfigMap, "infra", "cfg");
        assert_eq!(
            src.unavailable("configmaps \"cfg\" not found").to_string(),
            "failed to copy data from ConfigMap/infra/cfg: configmaps \"cfg\" not found"
        );
    }
}
