//! How a Job is re-created to roll it. A Job's pod template cannot change, so Reloader rolls a
//! Job by deleting it and creating the same Job again, and so does conflux: the replacement is
//! the Job as it was, without what the API server and the Job controller generated (uid,
//! resourceVersion, status, the generated selector and its `controller-uid` / `job-name` labels),
//! with conflux's fields of the rollout's [`WorkloadPatch`] applied: the new baseline on its
//! metadata (so the new Job is not re-created again), and the template annotation, Reloader's
//! `last-reloaded-from` and the env-vars strategy's variables on its pod template.
//!
//! The controller deletes the old Job with background propagation and a precondition on its uid
//! (never a Job created meanwhile under the same name), then creates the replacement, keeping it
//! until the create succeeds. So that a crash between the delete and the create loses nothing,
//! the replacement is first written down in a [`Record`]: a Secret in conflux's own namespace
//! (a Secret, because a Job's spec may carry credentials in its environment), deleted once the
//! replacement exists. A restarted controller finishes what the records it finds describe.
//!
//! ```
//! use k8s_openapi::api::batch::v1::Job;
//! use conflux_reloader::job::replacement;
//! use conflux_reloader::patch::{WorkloadPatch, WorkloadState, BASELINE_ANNOTATION};
//!
//! let job: Job = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "migrate", "namespace": "shop", "uid": "1234", "resourceVersion": "7",
//!                  "labels": {"app": "migrate", "controller-uid": "1234"}},
//!     "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "1234"}},
//!              "template": {"metadata": {"labels": {"app": "migrate", "job-name": "migrate",
//!                                                   "batch.kubernetes.io/controller-uid": "1234"}},
//!                           "spec": {"containers": [{"name": "m", "image": "m:1"}],
//!                                    "restartPolicy": "Never"}}},
//!     "status": {"active": 1},
//! }))?;
//! let state = WorkloadState::of((&job).into()).expect("named");
//! let patch = WorkloadPatch::keep(&state, "v2;0011223344556677");
//! let new = replacement(&job, &patch)?;
//! assert_eq!(new.metadata.uid, None);
//! assert!(new.status.is_none());
//! let spec = new.spec.as_ref().expect("spec");
//! assert!(spec.selector.is_none(), "generated again by the API server");
//! let labels = spec.template.metadata.as_ref().and_then(|m| m.labels.as_ref()).expect("labels");
//! assert_eq!(labels.keys().collect::<Vec<_>>(), ["app"]);
//! assert_eq!(new.metadata.annotations.as_ref().expect("annotations")[BASELINE_ANNOTATION],
//!            "v2;0011223344556677");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::patch::{
    BASELINE_ANNOTATION, CONFIG_HASH_ANNOTATION, LAST_RELOADED_FROM_ANNOTATION, WorkloadPatch,
};
use crate::{Error, Result};

/// Labels the API server adds to a Job (and its pod template) for its generated selector; the
/// replacement gets its own.
pub const GENERATED_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// An annotation the Job controller of Kubernetes 1.23 to 1.27 set on Jobs it tracked with
/// finalizers; a new Job must not claim it.
const JOB_TRACKING_ANNOTATION: &str = "batch.kubernetes.io/job-tracking";

/// The Job that replaces `job` when `patch` rolls it (see the [module docs](self)). Refused, with
/// [`Error::JobNotRecreatable`], for a Job without a spec, without a name, or already being
/// deleted.
pub fn replacement(job: &Job, patch: &WorkloadPatch) -> Result<Job> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let refuse = |reason: &str| Error::JobNotRecreatable {
        name: name.clone(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(refuse("it has no name"));
    }
    if job.metadata.deletion_timestamp.is_some() {
        return Err(refuse("it is being deleted"));
    }
    let mut new = job.clone();
    new.status = None;
    let meta = &mut new.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = None;
    meta.managed_fields = None;
    meta.self_link = None;
    let spec = new.spec.as_mut().ok_or_else(|| refuse("it has no spec"))?;
    // A selector the user set (`manualSelector: true`) is theirs, with its labels; otherwise the
    // API server generates both again for the new uid.
    let generated = spec.manual_selector != Some(true);
    if generated {
        spec.selector = None;
        strip(&mut new.metadata.labels);
    }
    let annotations = new.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.remove(JOB_TRACKING_ANNOTATION);
    annotations.insert(BASELINE_ANNOTATION.to_owned(), patch.baseline.clone());
    let Some(spec) = new.spec.as_mut() else {
        // Checked above; a Job without a spec was refused.
        return Err(refuse("it has no spec"));
    };
    let template_meta = spec.template.metadata.get_or_insert_with(Default::default);
    if generated {
        strip(&mut template_meta.labels);
    }
    let template_annotations = template_meta.annotations.get_or_insert_with(BTreeMap::new);
    if let Some(hash) = &patch.template_hash {
        template_annotations.insert(CONFIG_HASH_ANNOTATION.to_owned(), hash.clone());
    }
    if let Some(source) = &patch.last_reloaded_from {
        template_annotations.insert(LAST_RELOADED_FROM_ANNOTATION.to_owned(), source.clone());
    }
    if template_annotations.is_empty() {
        template_meta.annotations = None;
    }
    if let Some(pod) = spec.template.spec.as_mut() {
        for var in &patch.env {
            let Some(container) = pod.containers.iter_mut().find(|c| c.name == var.container)
            else {
                continue;
            };
            let env = container.env.get_or_insert_with(Vec::new);
            match env.iter_mut().find(|e| e.name == var.name) {
                Some(existing) => {
                    existing.value = Some(var.value.clone());
                    existing.value_from = None;
                }
                None => env.push(EnvVar {
                    name: var.name.clone(),
                    value: Some(var.value.clone()),
                    value_from: None,
                }),
            }
        }
    }
    Ok(new)
}

/// The label (and its value) on the Secrets that record a Job re-creation in progress; a
/// restarted controller lists its namespace's Secrets with it.
pub const RECORD_LABEL: (&str, &str) = ("conflux.dev/pending", "job-recreation");
/// Annotation of a record: the Job, as `<namespace>/<name>`.
const RECORD_JOB: &str = "conflux.dev/job";
/// Annotation of a record: the uid of the Job being replaced.
const RECORD_UID: &str = "conflux.dev/job-uid";
/// Annotation of a record: what the rollout answers (config names and keys, never values).
const RECORD_REASON: &str = "conflux.dev/reason";
/// The record's data key holding the replacement, as JSON.
const RECORD_KEY: &str = "job.json";

/// A Job re-creation in progress, as written down before the old Job is deleted (see the
/// [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The Job's namespace.
    pub namespace: String,
    /// The Job's name.
    pub name: String,
    /// The uid of the Job being replaced.
    pub old_uid: String,
    /// The Job to create ([`replacement`]).
    pub replacement: Job,
    /// What the rollout answers, for its Event.
    pub why: String,
}

impl Record {
    /// The name of the record's Secret: one per replaced Job (its namespace, name and uid),
    /// so a later decision about the same Job overwrites it.
    pub fn secret_name(&self) -> String {
        Record::secret_name_of(&self.namespace, &self.name, &self.old_uid)
    }

    /// [`Record::secret_name`] from the replaced Job's namespace, name and uid alone.
    pub fn secret_name_of(namespace: &str, name: &str, old_uid: &str) -> String {
        let mut h = Sha256::new();
        for part in [namespace, name, old_uid] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let hex = crate::hash::to_hex(&h.finalize());
        // 64 hex digits; 16 of them keep the name short and still unique in practice.
        format!("conflux-job-recreation-{}", hex.get(..16).unwrap_or(&hex))
    }

    /// The record as a Secret in `namespace` (conflux's own).
    pub fn to_secret(&self, namespace: &str) -> Result<Secret> {
        let json = serde_json::to_vec(&self.replacement).map_err(|e| Error::InvalidRecord {
            name: self.secret_name(),
            reason: format!("the replacement does not serialize: {e}"),
        })?;
        let annotations = BTreeMap::from([
            (
                RECORD_JOB.to_owned(),
                format!("{}/{}", self.namespace, self.name),
            ),
            (RECORD_UID.to_owned(), self.old_uid.clone()),
            (RECORD_REASON.to_owned(), self.why.clone()),
        ]);
        let labels = BTreeMap::from([
            (RECORD_LABEL.0.to_owned(), RECORD_LABEL.1.to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "conflux".to_owned(),
            ),
        ]);
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name()),
                namespace: Some(namespace.to_owned()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(RECORD_KEY.to_owned(), ByteString(json))])),
            ..Secret::default()
        })
    }

    /// Reads a record back. A Secret that is not a well-formed record (edited by hand, or
    /// written by another version) is refused with [`Error::InvalidRecord`], naming what is
    /// wrong but never the data.
    pub fn from_secret(secret: &Secret) -> Result<Record> {
        let secret_name = secret.metadata.name.clone().unwrap_or_default();
        let refuse = |reason: &str| Error::InvalidRecord {
            name: secret_name.clone(),
            reason: reason.to_owned(),
        };
        let annotations = secret
            .metadata
            .annotations
            .as_ref()
            .ok_or_else(|| refuse("it has no annotations"))?;
        let job = annotations
            .get(RECORD_JOB)
            .ok_or_else(|| refuse("annotation conflux.dev/job is missing"))?;
        let (namespace, name) = job
            .split_once('/')
            .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
            .ok_or_else(|| refuse("annotation conflux.dev/job is not <namespace>/<name>"))?;
        let old_uid = annotations
            .get(RECORD_UID)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| refuse("annotation conflux.dev/job-uid is missing"))?;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(RECORD_KEY))
            .ok_or_else(|| refuse("data key job.json is missing"))?;
        // The serde error is not quoted: it may echo part of the data.
        let replacement: Job = serde_json::from_slice(&bytes.0)
            .map_err(|_| refuse("data key job.json is not a Job"))?;
        let same = replacement.metadata.name.as_deref() == Some(name)
            && replacement
                .metadata
                .namespace
                .as_deref()
                .is_none_or(|n| n == namespace);
        if !same {
            return Err(refuse("the Job in job.json is not the Job it names"));
        }
        Ok(Record {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            old_uid: old_uid.clone(),
            replacement,
            why: annotations.get(RECORD_REASON).cloned().unwrap_or_default(),
        })
    }
}

fn strip(labels: &mut Option<BTreeMap<String, String>>) {
    if let Some(map) = labels.as_mut() {
        for key in GENERATED_LABELS {
            map.remove(key);
        }
        if map.is_empty() {
            *labels = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{EnvVarRef, WorkloadState};
    use serde_json::{Value, json};

    /// A Job as the API server returns it after the Job controller saw it.
    fn stored(extra_spec: Value) -> Job {
        let mut spec = json!({
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": {"app": "m", "controller-uid": "u1", "job-name": "m",
                    "batch.kubernetes.io/controller-uid": "u1", "batch.kubernetes.io/job-name": "m"}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "i", "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "old"}]},
                    {"name": "side", "image": "i"}]},
            },
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "m", "controller-uid": "u1", "batch.kubernetes.io/job-name": "m"},
                "annotations": {"team": "a", JOB_TRACKING_ANNOTATION: "", BASELINE_ANNOTATION: "old"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "x"}]},
            "spec": spec,
            "status": {"active": 1, "startTime": "2026-01-01T00:00:01Z"},
        }))
        .unwrap()
    }

    /// The record of re-creating [`stored`] (uid 1234).
    fn record(why: &str) -> Record {
        let job = stored(json!({}));
        Record {
            namespace: "ns".into(),
            name: "m".into(),
            old_uid: "1234".into(),
            replacement: replacement(&job, &patch(&job)).expect("replacement"),
            why: why.into(),
        }
    }

    fn patch(job: &Job) -> WorkloadPatch {
        let state = WorkloadState::of(job.into()).unwrap();
        let mut patch = WorkloadPatch::keep(&state, "v2;new");
        patch.template_hash = Some("h".into());
        patch.last_reloaded_from = Some("{}".into());
        patch.env = vec![
            EnvVarRef {
                container: "main".into(),
                name: "STAKATER_APP_CONFIGMAP".into(),
                value: "new".into(),
            },
            EnvVarRef {
                container: "side".into(),
                name: "STAKATER_S_SECRET".into(),
                value: "d".into(),
            },
            EnvVarRef {
                container: "gone".into(),
                name: "STAKATER_X_SECRET".into(),
                value: "d".into(),
            },
        ];
        patch
    }

    #[test]
    fn the_replacement_is_the_job_without_what_was_generated_plus_our_fields() {
        let job = stored(json!({}));
        let new = serde_json::to_value(replacement(&job, &patch(&job)).unwrap()).unwrap();
        assert_eq!(
            new,
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "m", "namespace": "ns", "labels": {"app": "m"},
                    "annotations": {"team": "a", BASELINE_ANNOTATION: "v2;new"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "x"}]},
                "spec": {"backoffLimit": 2, "template": {
                    "metadata": {"labels": {"app": "m"},
                        "annotations": {CONFIG_HASH_ANNOTATION: "h", LAST_RELOADED_FROM_ANNOTATION: "{}"}},
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "main", "image": "i", "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "new"}]},
                        {"name": "side", "image": "i", "env": [{"name": "STAKATER_S_SECRET", "value": "d"}]}]}}},
            })
        );
    }

    #[test]
    fn a_manual_selector_is_kept_with_its_labels() {
        let job = stored(json!({"manualSelector": true,
            "selector": {"matchLabels": {"controller-uid": "mine"}}}));
        let new = replacement(&job, &patch(&job)).unwrap();
        let spec = new.spec.unwrap();
        assert!(spec.selector.is_some());
        let labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["controller-uid"], "u1");
    }

    #[test]
    fn a_record_reads_back_as_written_and_names_one_replaced_job() {
        let record = record("ConfigMap cfg changed (keys a)");
        let secret = record.to_secret("conflux-system").expect("secret");
        assert_eq!(secret.metadata.namespace.as_deref(), Some("conflux-system"));
        assert_eq!(
            secret.metadata.labels.as_ref().expect("labels")[RECORD_LABEL.0],
            RECORD_LABEL.1
        );
        assert_eq!(Record::from_secret(&secret).expect("read back"), record);
        let name = record.secret_name();
        assert!(name.len() <= 63 && name.starts_with("conflux-job-recreation-"));
        let other = Record {
            old_uid: "5678".into(),
            ..record.clone()
        };
        assert_ne!(other.secret_name(), name, "one record per replaced Job");
    }

    #[test]
    fn records_that_are_not_well_formed_are_refused_without_their_data() {
        let record = record("");
        let good = record.to_secret("conflux-system").expect("secret");
        let mut garbled = good.clone();
        garbled.data = Some(BTreeMap::from([(
            RECORD_KEY.to_owned(),
            ByteString(b"{\"password\": hunter2".to_vec()),
        )]));
        let mut other_job = good.clone();
        other_job
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(RECORD_JOB.into(), "ns/other".into());
        let mut no_uid = good.clone();
        no_uid
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .remove(RECORD_UID);
        for (secret, why) in [
            (garbled, "is not a Job"),
            (other_job, "not the Job it names"),
            (no_uid, "job-uid is missing"),
        ] {
            let err = Record::from_secret(&secret).expect_err(why);
            assert_eq!(err.reason(), "InvalidJobRecord");
            let text = err.to_string();
            assert!(text.contains(why), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn jobs_that_cannot_be_recreated_are_refused() {
        let job = stored(json!({}));
        let p = patch(&job);
        let mut deleting = job.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let mut no_spec = job.clone();
        no_spec.spec = None;
        let mut no_name = job.clone();
        no_name.metadata.name = None;
        for (what, job) in [
            ("being deleted", deleting),
            ("no spec", no_spec),
            ("no name", no_name),
        ] {
            let err = replacement(&job, &p).unwrap_err();
            assert_eq!(err.reason(), "JobNotRecreatable", "{what}");
        }
    }
}
