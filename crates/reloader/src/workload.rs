//! The workload kinds that roll when their config changes: Deployment, StatefulSet, DaemonSet and
//! CronJob (whose job template is what the next Job is made from).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use watch_index::refs::ObjectRef;

use crate::consumers::{Consumption, pod_template_consumers};

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
}

impl WorkloadKind {
    /// Every kind, for registering watches.
    pub const ALL: [WorkloadKind; 4] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
    ];

    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::CronJob => "CronJob",
        }
    }

    /// The API group (`apps` or `batch`).
    pub fn group(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "batch",
            _ => "apps",
        }
    }

    /// The `apiVersion` patches are sent with.
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "batch/v1",
            _ => "apps/v1",
        }
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
}

impl<'a> Workload<'a> {
    /// Its kind.
    pub fn kind(self) -> WorkloadKind {
        match self {
            Workload::Deployment(_) => WorkloadKind::Deployment,
            Workload::StatefulSet(_) => WorkloadKind::StatefulSet,
            Workload::DaemonSet(_) => WorkloadKind::DaemonSet,
            Workload::CronJob(_) => WorkloadKind::CronJob,
        }
    }

    /// The workload's own metadata.
    pub fn metadata(self) -> &'a ObjectMeta {
        match self {
            Workload::Deployment(w) => &w.metadata,
            Workload::StatefulSet(w) => &w.metadata,
            Workload::DaemonSet(w) => &w.metadata,
            Workload::CronJob(w) => &w.metadata,
        }
    }

    /// The pod template (for a CronJob, `spec.jobTemplate.spec.template`; `None` when its job
    /// template has no spec).
    pub fn pod_template(self) -> Option<&'a PodTemplateSpec> {
        match self {
            Workload::Deployment(w) => Some(&w.spec.template),
            Workload::StatefulSet(w) => Some(&w.spec.template),
            Workload::DaemonSet(w) => Some(&w.spec.template),
            Workload::CronJob(w) => w.spec.job_template.spec.as_ref().map(|s| &s.template),
        }
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
        let all: [(Workload, &str, &str); 4] = [
            ((&d).into(), "apps", "Deployment"),
            ((&s).into(), "apps", "StatefulSet"),
            ((&ds).into(), "apps", "DaemonSet"),
            ((&cj).into(), "batch", "CronJob"),
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
        let empty = Deployment::default();
        assert!(Workload::from(&empty).consumers().is_empty());
        assert_eq!(Workload::from(&empty).object_ref(), None);
    }
}
