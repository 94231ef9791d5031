//! The workload kinds that roll when their config changes: Deployment, StatefulSet, DaemonSet,
//! CronJob (whose job template is what the next Job is made from), Job (re-created, as Reloader
//! does: a Job's pod template cannot change) and Argo Rollouts' Rollout.

use std::collections::BTreeMap;

use conflux_watch_index::refs::ObjectRef;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::consumers::{Consumption, pod_template_consumers, pod_template_provider_classes};

/// The API group of Argo Rollouts.
pub const ARGO_ROLLOUTS_GROUP: &str = "argoproj.io";

/// An Argo Rollouts `Rollout` (`argoproj.io/v1alpha1`), as far as the reload controller reads it:
/// its metadata and the three fields of its spec that matter here. Other fields are not kept
/// (patches never send them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// The Rollout's metadata.
    pub metadata: ObjectMeta,
    /// The part of its spec conflux reads.
    #[serde(default)]
    pub spec: RolloutSpec,
}

/// The fields of a Rollout's spec that conflux reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `spec.template`: the pod template (absent when the Rollout uses `workloadRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// `spec.workloadRef`: the Deployment whose pod template the Rollout uses instead of its own
    /// (kept as written: conflux only says it is there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<serde_json::Value>,
    /// `spec.restartAt`: Argo restarts the pods created before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<String>,
}

/// A workload kind this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum WorkloadKind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// batch/v1 CronJob (`spec.jobTemplate.spec.template`).
    CronJob,
    /// batch/v1 Job: re-created (deleted and created again) to roll, as Reloader does.
    Job,
    /// Argo Rollouts' `argoproj.io/v1alpha1` Rollout (`spec.template`).
    Rollout,
}

impl WorkloadKind {
    /// Every kind, for registering watches (Rollouts only when asked for: they need a CRD and
    /// RBAC the cluster may not have).
    pub const ALL: [WorkloadKind; 6] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
        WorkloadKind::Job,
        WorkloadKind::Rollout,
    ];

    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Job => "Job",
            WorkloadKind::Rollout => "Rollout",
        }
    }

    /// The API group (`apps`, `batch` or `argoproj.io`).
    pub fn group(self) -> &'static str {
        match self {
            WorkloadKind::CronJob | WorkloadKind::Job => "batch",
            WorkloadKind::Rollout => ARGO_ROLLOUTS_GROUP,
            _ => "apps",
        }
    }

    /// The `apiVersion` patches are sent with.
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::CronJob | WorkloadKind::Job => "batch/v1",
            WorkloadKind::Rollout => "argoproj.io/v1alpha1",
            _ => "apps/v1",
        }
    }

    /// Whether Reloader's env-vars strategy can be applied with server-side apply. Not for
    /// Rollouts: Argo Rollouts' CRD marks `containers` as an atomic list before v1.9, and a
    /// server-side apply of one variable would replace every container; they roll through the
    /// template annotation instead.
    pub fn supports_env_vars(self) -> bool {
        self != WorkloadKind::Rollout
    }

    /// Parses a group and kind (`None` for anything else).
    pub fn from_group_kind(group: &str, kind: &str) -> Option<Self> {
        WorkloadKind::ALL
            .into_iter()
            .find(|k| k.group() == group && k.as_str() == kind)
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A borrowed workload of one of the supported kinds.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Workload<'a> {
    /// A Deployment.
    Deployment(&'a Deployment),
    /// A StatefulSet.
    StatefulSet(&'a StatefulSet),
    /// A DaemonSet.
    DaemonSet(&'a DaemonSet),
    /// A CronJob.
    CronJob(&'a CronJob),
    /// A Job.
    Job(&'a Job),
    /// An Argo Rollout.
    Rollout(&'a Rollout),
}

impl<'a> Workload<'a> {
    /// Its kind.
    pub fn kind(self) -> WorkloadKind {
        match self {
            Workload::Deployment(_) => WorkloadKind::Deployment,
            Workload::StatefulSet(_) => WorkloadKind::StatefulSet,
            Workload::DaemonSet(_) => WorkloadKind::DaemonSet,
            Workload::CronJob(_) => WorkloadKind::CronJob,
            Workload::Job(_) => WorkloadKind::Job,
            Workload::Rollout(_) => WorkloadKind::Rollout,
        }
    }

    /// The workload's own metadata.
    pub fn metadata(self) -> &'a ObjectMeta {
        match self {
            Workload::Deployment(w) => &w.metadata,
            Workload::StatefulSet(w) => &w.metadata,
            Workload::DaemonSet(w) => &w.metadata,
            Workload::CronJob(w) => &w.metadata,
            Workload::Job(w) => &w.metadata,
            Workload::Rollout(w) => &w.metadata,
        }
    }

    /// The pod template (for a CronJob, `spec.jobTemplate.spec.template`; `None` when its job
    /// template has no spec, for a Job without a spec, or for a Rollout without `spec.template`).
    pub fn pod_template(self) -> Option<&'a PodTemplateSpec> {
        match self {
            Workload::Deployment(w) => Some(&w.spec.template),
            Workload::StatefulSet(w) => Some(&w.spec.template),
            Workload::DaemonSet(w) => Some(&w.spec.template),
            Workload::CronJob(w) => w.spec.job_template.spec.as_ref().map(|s| &s.template),
            Workload::Job(w) => w.spec.as_ref().map(|s| &s.template),
            Workload::Rollout(w) => w.spec.template.as_ref(),
        }
    }

    /// Whether another controller owns this workload (an owner reference with `controller:
    /// true`) and it is a Job: such Jobs are left alone. A CronJob's Jobs are rolled through the
    /// CronJob's job template (the next run reads the new config); re-creating one would run it
    /// again outside its schedule, and re-create the finished Jobs kept as its history. Jobs of
    /// other controllers are theirs to replace.
    pub fn is_controlled_job(self) -> bool {
        matches!(self, Workload::Job(_))
            && self
                .metadata()
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true))
    }

    /// Annotations on the workload's metadata.
    pub fn annotations(self) -> Option<&'a BTreeMap<String, String>> {
        self.metadata().annotations.as_ref()
    }

    /// Annotations on the pod template's metadata.
    pub fn template_annotations(self) -> Option<&'a BTreeMap<String, String>> {
        self.pod_template()?.metadata.as_ref()?.annotations.as_ref()
    }

    /// What the pod template consumes (see [`consumers`](crate::consumers)).
    pub fn consumers(self) -> Vec<Consumption> {
        self.pod_template()
            .map(pod_template_consumers)
            .unwrap_or_default()
    }

    /// The SecretProviderClasses its pods mount through the secrets-store CSI driver, sorted
    /// (see [`pod_spec_provider_classes`](crate::consumers::pod_spec_provider_classes)).
    pub fn provider_classes(self) -> Vec<String> {
        self.pod_template()
            .map(pod_template_provider_classes)
            .unwrap_or_default()
    }

    /// The workload as a watch-index object; `None` without a name or namespace.
    pub fn object_ref(self) -> Option<ObjectRef> {
        let meta = self.metadata();
        let kind = self.kind();
        Some(ObjectRef::new(
            kind.group(),
            kind.as_str(),
            meta.namespace.as_deref()?,
            meta.name.as_deref()?,
        ))
    }
}

impl<'a> From<&'a Deployment> for Workload<'a> {
    fn from(w: &'a Deployment) -> Self {
        Workload::Deployment(w)
    }
}

impl<'a> From<&'a StatefulSet> for Workload<'a> {
    fn from(w: &'a StatefulSet) -> Self {
        Workload::StatefulSet(w)
    }
}

impl<'a> From<&'a DaemonSet> for Workload<'a> {
    fn from(w: &'a DaemonSet) -> Self {
        Workload::DaemonSet(w)
    }
}

impl<'a> From<&'a CronJob> for Workload<'a> {
    fn from(w: &'a CronJob) -> Self {
        Workload::CronJob(w)
    }
}

impl<'a> From<&'a Job> for Workload<'a> {
    fn from(w: &'a Job) -> Self {
        Workload::Job(w)
    }
}

impl<'a> From<&'a Rollout> for Workload<'a> {
    fn from(w: &'a Rollout) -> Self {
        Workload::Rollout(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_finds_its_template() {
        let template = json!({"metadata": {"annotations": {"t": "1"}},
            "spec": {"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}});
        let meta = json!({"name": "w", "namespace": "ns", "annotations": {"m": "1"}});
        let d: Deployment = serde_json::from_value(json!({"metadata": meta,
            "spec": {"selector": {}, "template": template}}))
        .unwrap();
        let s: StatefulSet = serde_json::from_value(json!({"metadata": meta,
            "spec": {"selector": {}, "serviceName": "x", "template": template}}))
        .unwrap();
        let ds: DaemonSet = serde_json::from_value(json!({"metadata": meta,
            "spec": {"selector": {}, "template": template}}))
        .unwrap();
        let cj: CronJob = serde_json::from_value(json!({"metadata": meta,
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}))
        .unwrap();
        let job: Job =
            serde_json::from_value(json!({"metadata": meta, "spec": {"template": template}}))
                .unwrap();
        let rollout: Rollout = serde_json::from_value(json!({"metadata": meta,
            "spec": {"replicas": 2, "strategy": {"canary": {}}, "template": template}}))
        .unwrap();
        let all: [(Workload, &str, &str); 6] = [
            ((&d).into(), "apps", "Deployment"),
            ((&s).into(), "apps", "StatefulSet"),
            ((&ds).into(), "apps", "DaemonSet"),
            ((&cj).into(), "batch", "CronJob"),
            ((&job).into(), "batch", "Job"),
            ((&rollout).into(), "argoproj.io", "Rollout"),
        ];
        for (w, group, kind) in all {
            assert_eq!(w.object_ref(), Some(ObjectRef::new(group, kind, "ns", "w")));
            assert_eq!(WorkloadKind::from_group_kind(group, kind), Some(w.kind()));
            assert_eq!(w.consumers().len(), 1, "{kind}");
            assert_eq!(
                w.template_annotations()
                    .and_then(|a| a.get("t"))
                    .map(String::as_str),
                Some("1")
            );
            assert_eq!(
                w.annotations().and_then(|a| a.get("m")).map(String::as_str),
                Some("1")
            );
        }
        assert_eq!(WorkloadKind::from_group_kind("apps", "CronJob"), None);
        assert!(!WorkloadKind::Rollout.supports_env_vars());
        assert!(WorkloadKind::Job.supports_env_vars());
        let empty = Deployment::default();
        assert!(Workload::from(&empty).consumers().is_empty());
        assert_eq!(Workload::from(&empty).object_ref(), None);
        // A Rollout with `workloadRef` has no template of its own.
        let by_ref: Rollout = serde_json::from_value(json!({"metadata": meta,
            "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}}))
        .unwrap();
        assert!(Workload::from(&by_ref).pod_template().is_none());
        assert!(by_ref.spec.workload_ref.is_some());
    }

    #[test]
    fn jobs_of_other_controllers_are_left_alone() {
        let job = |owners: serde_json::Value| -> Job {
            serde_json::from_value(json!({"metadata": {"name": "j", "namespace": "ns",
                "ownerReferences": owners}, "spec": {"template": {}}}))
            .unwrap()
        };
        let owner = |controller: bool| {
            json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u",
                    "controller": controller}])
        };
        assert!(Workload::from(&job(owner(true))).is_controlled_job());
        assert!(!Workload::from(&job(owner(false))).is_controlled_job());
        assert!(!Workload::from(&job(json!([]))).is_controlled_job());
        let cj: CronJob = serde_json::from_value(json!({"metadata": {"name": "c",
            "ownerReferences": owner(true)}, "spec": {"schedule": "* * * * *", "jobTemplate": {}}}))
        .unwrap();
        assert!(!Workload::from(&cj).is_controlled_job(), "Jobs only");
    }
}
