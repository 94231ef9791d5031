//! The one error type of this crate.

/// Everything that can go wrong in this crate. Never carries ConfigMap or Secret data: only
/// annotation keys, the patterns users wrote, and object names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An entry of a `configmap.reloader.stakater.com/reload` (or secret) list is not a valid regex.
    /// Reloader compares such an entry literally with the config name, and so do we; the error is
    /// reported so the controller can warn about it.
    #[error("invalid pattern {pattern:?} in annotation {annotation}: {reason}")]
    InvalidPattern {
        /// The annotation holding the list.
        annotation: &'static str,
        /// The entry as written (trimmed).
        pattern: String,
        /// What the regex parser said.
        reason: String,
    },
    /// A boolean annotation whose value Reloader would not read as a boolean: the `auto`
    /// annotations take Go's `strconv.ParseBool` forms (as Reloader v1.4 does), `search` and wave's
    /// annotation take `"true"` exactly. The annotation is then false, as in Reloader, and reported.
    #[error("annotation {annotation} is {value:?}, not one of {accepted}; it is read as false")]
    InvalidBoolean {
        /// The annotation.
        annotation: &'static str,
        /// Its value (at most 64 characters of it).
        value: String,
        /// The values accepted there.
        accepted: &'static str,
    },
    /// A ReloadPolicy's `configs` block (or its `workloads.namespaceSelector`) is invalid: a glob
    /// that can match no name, or an invalid label selector. The reason is watch-index's
    /// (`InvalidGlob`, `InvalidSelector`).
    #[error("{0}")]
    InvalidConfigSelector(conflux_watch_index::Error),
    /// A ReloadPolicy names a workload kind conflux does not roll.
    #[error(
        "spec.workloads.kinds[{index}]: unknown workload kind {value:?}, expected one of {expected}"
    )]
    UnknownWorkloadKind {
        /// Its position in the list.
        index: usize,
        /// The value (at most 64 characters of it).
        value: String,
        /// The kinds accepted.
        expected: &'static str,
    },
    /// A ReloadPolicy names a reference kind other than `Env`, `EnvFrom` and `Volume`.
    #[error(
        "spec.workloads.references[{index}]: unknown reference {value:?}, expected Env, EnvFrom or Volume"
    )]
    UnknownReference {
        /// Its position in the list.
        index: usize,
        /// The value (at most 64 characters of it).
        value: String,
    },
    /// A workload annotation conflux reads for its rollouts (`conflux.dev/reload-debounce`,
    /// Reloader's `pause-period` and `rollout-strategy`) has a value it cannot use; it is ignored.
    #[error("annotation {annotation} is {value:?}, expected {expected}; it is ignored")]
    InvalidAnnotation {
        /// The annotation.
        annotation: &'static str,
        /// Its value (at most 64 characters of it).
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A duration flag or setting is not a Go-style duration (`0`, `300ms`, `2s`, `1m30s`).
    #[error("invalid duration '{input}': expected e.g. 0, 300ms, 2s, 1m30s")]
    InvalidDuration {
        /// The value as given.
        input: String,
    },
    /// A controller flag (Reloader's filters) has a value Reloader would refuse.
    #[error("invalid {flag} '{value}': {reason}")]
    InvalidFlag {
        /// The flag.
        flag: &'static str,
        /// The value as given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// A Job cannot be re-created to roll it ([`crate::job::replacement`]).
    #[error("Job {name} cannot be re-created: {reason}")]
    JobNotRecreatable {
        /// The Job.
        name: String,
        /// Why.
        reason: String,
    },
    /// A Secret labelled as a Job re-creation record ([`crate::job::Record`]) cannot be read;
    /// it is left in place and reported.
    #[error("Job re-creation record {name} is unreadable: {reason}")]
    InvalidRecord {
        /// The record's Secret.
        name: String,
        /// What is wrong (never its data).
        reason: String,
    },
    /// A workload has no pod template to read or roll: an Argo Rollout with `spec.workloadRef`
    /// (roll the referenced Deployment instead) or without `spec.template`.
    #[error("{kind} {name} has no pod template{hint}")]
    NoPodTemplate {
        /// The kind.
        kind: crate::WorkloadKind,
        /// Its name.
        name: String,
        /// What to do about it (may be empty).
        hint: &'static str,
    },
    /// A cached workload no longer reads as its kind (the watch checked it when it came): it is
    /// not rolled; the next watch event replaces it.
    #[error("{kind} {name} cannot be read as a {kind}")]
    UnreadableWorkload {
        /// The kind.
        kind: crate::WorkloadKind,
        /// Its name.
        name: String,
    },
    /// A `SecretProviderClassPodStatus` whose status conflux cannot read (CSI integration); its
    /// pod's mount is not counted.
    #[error("SecretProviderClassPodStatus {name} is unreadable: {reason}")]
    InvalidProviderStatus {
        /// The object.
        name: String,
        /// What is wrong (no secret data: the status holds ids and versions only).
        reason: String,
    },
    /// Reading a config or writing a workload failed (runtime feature); the message names the
    /// object, never its data.
    #[cfg(feature = "runtime")]
    #[error(transparent)]
    Kube(#[from] conflux_runtime::Error),
    /// The workload's kind is not served by this cluster (runtime feature).
    #[cfg(feature = "runtime")]
    #[error("{kind} is not served by this cluster")]
    KindNotServed {
        /// The kind.
        kind: crate::WorkloadKind,
    },
}

impl Error {
    /// A stable reason for logs and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidPattern { .. } => "InvalidPattern",
            Error::InvalidBoolean { .. } => "InvalidAnnotation",
            Error::InvalidDuration { .. } => "InvalidDuration",
            Error::InvalidFlag { .. } => "InvalidFlag",
            Error::InvalidAnnotation { .. } => "InvalidAnnotation",
            Error::JobNotRecreatable { .. } => "JobNotRecreatable",
            Error::InvalidRecord { .. } => "InvalidJobRecord",
            Error::NoPodTemplate { .. } => "NoPodTemplate",
            Error::UnreadableWorkload { .. } => "UnreadableWorkload",
            Error::InvalidProviderStatus { .. } => "InvalidProviderStatus",
            Error::InvalidConfigSelector(err) => err.reason(),
            Error::UnknownWorkloadKind { .. } => "UnknownWorkloadKind",
            Error::UnknownReference { .. } => "UnknownReference",
            #[cfg(feature = "runtime")]
            Error::Kube(err) => err.reason(),
            #[cfg(feature = "runtime")]
            Error::KindNotServed { .. } => "KindNotServed",
        }
    }

    /// A short, stable label for metrics and Event reasons.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::InvalidPattern { .. } => "invalid_pattern",
            Error::InvalidBoolean { .. } => "invalid_annotation",
            Error::InvalidDuration { .. } => "invalid_duration",
            Error::InvalidFlag { .. } => "invalid_flag",
            Error::InvalidAnnotation { .. } => "invalid_annotation",
            Error::JobNotRecreatable { .. } => "job_not_recreatable",
            Error::InvalidRecord { .. } => "invalid_job_record",
            Error::NoPodTemplate { .. } => "no_pod_template",
            Error::UnreadableWorkload { .. } => "unreadable_workload",
            Error::InvalidProviderStatus { .. } => "invalid_provider_status",
            Error::InvalidConfigSelector(_) => "invalid_policy",
            Error::UnknownWorkloadKind { .. } => "invalid_policy",
            Error::UnknownReference { .. } => "invalid_policy",
            #[cfg(feature = "runtime")]
            Error::Kube(_) => "api_error",
            #[cfg(feature = "runtime")]
            Error::KindNotServed { .. } => "kind_not_served",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
