//! The rollout decision and the server-side-apply patch that carries it.
//!
//! A rollout is one pod-template annotation, [`CONFIG_HASH_ANNOTATION`], set to the workload's
//! [content hash](crate::hash). Next to it, on the workload's own metadata (which does not roll
//! anything), [`BASELINE_ANNOTATION`] records `<content hash>.<watched-set digest>` as last seen.
//! The baseline is what makes the decision safe:
//!
//! | situation | baseline | action |
//! |---|---|---|
//! | first opt-in, adoption, or conflux never saw the workload | absent | [`Action::RecordBaseline`]: no rollout |
//! | conflux restarts, nothing changed | equal | [`Action::None`] |
//! | a watched config's content changed (also while conflux was down) | content differs | [`Action::Rollout`] |
//! | what is watched changed: pod spec, opt-in annotations, `ignore`/`match` on a config, a config created that a `reload` regex matches | watched set differs | [`Action::RecordBaseline`]: a pod spec change rolls by itself, the others are not content changes |
//! | a required config is missing | any | [`Action::None`]: new pods could not start; wait for it |
//!
//! Because the watched-set digest tells content changes from membership changes, the decision
//! needs no "why are we looking" input: a workload update (scaling, a label) is harmless, and the
//! controller can call [`decide`] after any event. A content change that lands together with a
//! membership change only moves the baseline (the pod spec change, if any, rolls the pods anyway).
//!
//! Patches are server-side apply with field manager [`FIELD_MANAGER`]. SSA removes fields a manager
//! owned and no longer sends, so every patch sends *both* annotations once they exist: recording a
//! baseline re-sends the current template hash unchanged, which leaves the template (and the pods)
//! alone. Flux's kustomize-controller takes over fields of managers named `kubectl*` and
//! `before-first-apply`; `conflux-reloader` matches neither, so Flux leaves our annotations in place
//! and applying the same manifest again neither removes them nor rolls the workload. When a
//! workload opts out, the annotations are left as they are (removing the template one would roll
//! it); if it opts in again, the old baseline still stands.

use serde_json::{Value, json};

use crate::hash::ContentHash;
use crate::workload::{Workload, WorkloadKind};

/// Field manager of every patch this crate makes.
pub const FIELD_MANAGER: &str = "conflux-reloader";
/// Pod-template annotation whose change rolls the workload.
pub const CONFIG_HASH_ANNOTATION: &str = "conflux.dev/config-hash";
/// Workload-metadata annotation: the hash last recorded (no rollout when it changes).
pub const BASELINE_ANNOTATION: &str = "conflux.dev/config-hash-baseline";

/// What the decision needs to know about a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadState {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// [`BASELINE_ANNOTATION`] on its metadata (as written by [`baseline_value`]).
    pub baseline: Option<String>,
    /// [`CONFIG_HASH_ANNOTATION`] on its pod template.
    pub template_hash: Option<String>,
}

impl WorkloadState {
    /// Reads the state from a workload; `None` without a name or namespace.
    pub fn of(workload: Workload<'_>) -> Option<Self> {
        let meta = workload.metadata();
        Some(WorkloadState {
            kind: workload.kind(),
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            baseline: workload
                .annotations()
                .and_then(|a| a.get(BASELINE_ANNOTATION))
                .cloned(),
            template_hash: workload
                .template_annotations()
                .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
                .cloned(),
        })
    }
}

/// The outcome of [`decide`]. Patches are server-side apply bodies for [`FIELD_MANAGER`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Nothing to do.
    None,
    /// Record the hash on the workload's metadata; the pod template is unchanged.
    RecordBaseline(WorkloadPatch),
    /// Set the template annotation (this rolls the workload) and the baseline.
    Rollout(WorkloadPatch),
}

/// The value of [`BASELINE_ANNOTATION`] for a hash: `<content hex>.<watched-set hex>`.
pub fn baseline_value(hash: &ContentHash) -> String {
    format!("{}.{}", hash.hex, hash.watched_hex)
}

/// Decides what to do for a workload whose watched configs now hash to `current`. Idempotent:
/// applying the returned patch and deciding again yields [`Action::None`]. See the
/// [module docs](self) for the table.
pub fn decide(state: &WorkloadState, current: &ContentHash) -> Action {
    if !current.missing_required.is_empty() {
        return Action::None;
    }
    let recorded = state.baseline.as_deref().and_then(|b| b.split_once('.'));
    match recorded {
        Some((content, set)) if set == current.watched_hex => {
            if content == current.hex {
                Action::None
            } else {
                Action::Rollout(WorkloadPatch::new(
                    state,
                    &baseline_value(current),
                    Some(&current.hex),
                ))
            }
        }
        // Absent, unreadable, or another watched set: record, keep the template as it is.
        _ => Action::RecordBaseline(WorkloadPatch::new(
            state,
            &baseline_value(current),
            state.template_hash.as_deref(),
        )),
    }
}

/// What one server-side apply of [`FIELD_MANAGER`] sets on a workload: the baseline on its
/// metadata and, when present, the template annotation (nothing else, so we own nothing else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadPatch {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The value of [`BASELINE_ANNOTATION`].
    pub baseline: String,
    /// The value of [`CONFIG_HASH_ANNOTATION`] on the pod template; `None` leaves the template
    /// out of the patch.
    pub template_hash: Option<String>,
}

impl WorkloadPatch {
    /// The patch for `state` with `baseline` and `template_hash`.
    pub fn new(state: &WorkloadState, baseline: &str, template_hash: Option<&str>) -> Self {
        WorkloadPatch {
            kind: state.kind,
            namespace: state.namespace.clone(),
            name: state.name.clone(),
            baseline: baseline.to_owned(),
            template_hash: template_hash.map(str::to_owned),
        }
    }

    /// The server-side apply body with the kind's default `apiVersion`.
    pub fn body(&self) -> Value {
        self.body_for(self.kind.api_version())
    }

    /// The server-side apply body for the version the cluster serves (a `batch/v1beta1` CronJob
    /// on Kubernetes before 1.21 has the same shape).
    pub fn body_for(&self, api_version: &str) -> Value {
        let mut patch = json!({
            "apiVersion": api_version,
            "kind": self.kind.as_str(),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {BASELINE_ANNOTATION: self.baseline},
            },
        });
        if let Some(hash) = &self.template_hash {
            let template = json!({"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}}});
            patch["spec"] = match self.kind {
                WorkloadKind::CronJob => json!({"jobTemplate": {"spec": {"template": template}}}),
                _ => json!({"template": template}),
            };
        }
        patch
    }
}

#[cfg(test)]
// Test tables are tuples on purpose: one row per line reads best.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use watch_index::refs::ConfigKind;

    fn state(kind: WorkloadKind, baseline: Option<&str>, template: Option<&str>) -> WorkloadState {
        WorkloadState {
            kind,
            namespace: "ns".into(),
            name: "web".into(),
            baseline: baseline.map(Into::into),
            template_hash: template.map(Into::into),
        }
    }

    /// A hash written `content.set`.
    fn hash(both: &str) -> ContentHash {
        let (hex, set) = both.split_once('.').unwrap();
        ContentHash {
            hex: hex.into(),
            watched_hex: set.into(),
            missing_required: vec![],
        }
    }

    /// Applies a patch to a state the way the API server would for our two fields.
    fn apply(s: &WorkloadState, action: &Action) -> WorkloadState {
        let patch = match action {
            Action::None => return s.clone(),
            Action::RecordBaseline(p) | Action::Rollout(p) => p,
        };
        WorkloadState {
            baseline: Some(patch.baseline.clone()),
            template_hash: patch.template_hash.clone(),
            ..s.clone()
        }
    }

    #[test]
    fn decision_table() {
        // (what, baseline, template annotation, current "content.set", expected action)
        let cases: [(&str, Option<&str>, Option<&str>, &str, &str); 10] = [
            (
                "first sight records a baseline",
                None,
                None,
                "c1.s1",
                "baseline",
            ),
            (
                "restart, nothing changed",
                Some("c1.s1"),
                None,
                "c1.s1",
                "none",
            ),
            (
                "restart after a rollout",
                Some("c1.s1"),
                Some("c1"),
                "c1.s1",
                "none",
            ),
            ("content changed", Some("c1.s1"), None, "c2.s1", "rollout"),
            (
                "content changed again",
                Some("c2.s1"),
                Some("c2"),
                "c3.s1",
                "rollout",
            ),
            (
                "watched set changed",
                Some("c1.s1"),
                Some("c1"),
                "c2.s2",
                "baseline",
            ),
            (
                "watched set changed, same content hash",
                Some("c1.s1"),
                None,
                "c1.s2",
                "baseline",
            ),
            (
                "adopted with an old template hash",
                None,
                Some("c0"),
                "c1.s1",
                "baseline",
            ),
            (
                "unreadable baseline",
                Some("garbage"),
                Some("c1"),
                "c1.s1",
                "baseline",
            ),
            ("empty baseline", Some(""), None, "c1.s1", "baseline"),
        ];
        for (what, baseline, template, current, want) in cases {
            let s = state(WorkloadKind::Deployment, baseline, template);
            let action = decide(&s, &hash(current));
            let got = match &action {
                Action::None => "none",
                Action::RecordBaseline(_) => "baseline",
                Action::Rollout(_) => "rollout",
            };
            assert_eq!(got, want, "{what}");
            let after = apply(&s, &action);
            if want == "baseline" {
                assert_eq!(
                    after.template_hash, s.template_hash,
                    "template untouched: {what}"
                );
            }
            if want == "rollout" {
                assert_eq!(
                    after.template_hash.as_deref(),
                    current.split_once('.').map(|c| c.0)
                );
            }
            // Idempotent: once applied, nothing more to do.
            assert_eq!(
                decide(&after, &hash(current)),
                Action::None,
                "idempotent: {what}"
            );
        }
    }

    #[test]
    fn missing_required_config_holds_the_rollout() {
        let mut current = hash("c2.s1");
        current.missing_required = vec![(ConfigKind::Secret, "creds".into())];
        for s in [
            state(WorkloadKind::Deployment, Some("c1.s1"), Some("c1")),
            state(WorkloadKind::Deployment, None, None),
        ] {
            assert_eq!(decide(&s, &current), Action::None);
        }
    }

    #[test]
    fn patches_hold_only_owned_fields() {
        let s = state(WorkloadKind::Deployment, Some("old.s"), Some("old"));
        let Action::Rollout(p) = decide(&s, &hash("new.s")) else {
            panic!("expected a rollout");
        };
        assert_eq!(
            p.body(),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ns",
                             "annotations": {"conflux.dev/config-hash-baseline": "new.s"}},
                "spec": {"template": {"metadata": {"annotations": {"conflux.dev/config-hash": "new"}}}},
            })
        );
        let s = state(WorkloadKind::CronJob, None, None);
        let Action::RecordBaseline(p) = decide(&s, &hash("h.s")) else {
            panic!("expected a baseline");
        };
        assert_eq!(
            p.body(),
            json!({
                "apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "web", "namespace": "ns",
                             "annotations": {"conflux.dev/config-hash-baseline": "h.s"}},
            })
        );
        let s = state(WorkloadKind::CronJob, Some("a.s"), Some("a"));
        let Action::Rollout(p) = decide(&s, &hash("b.s")) else {
            panic!("expected a rollout");
        };
        assert_eq!(
            p.body().pointer(
                "/spec/jobTemplate/spec/template/metadata/annotations/conflux.dev~1config-hash"
            ),
            Some(&json!("b"))
        );
        for kind in [WorkloadKind::StatefulSet, WorkloadKind::DaemonSet] {
            let p = WorkloadPatch::new(&state(kind, None, None), "x", Some("x")).body();
            assert_eq!(p["apiVersion"], "apps/v1");
            assert_eq!(p["kind"], kind.as_str());
        }
    }

    #[test]
    fn field_manager_is_not_taken_over_by_flux() {
        assert!(!FIELD_MANAGER.starts_with("kubectl"));
        assert_ne!(FIELD_MANAGER, "before-first-apply");
    }

    #[test]
    fn state_of_a_workload() {
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {BASELINE_ANNOTATION: "b"}},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: "t"}}}},
        }))
        .unwrap();
        assert_eq!(
            WorkloadState::of(Workload::from(&d)),
            Some(state(WorkloadKind::Deployment, Some("b"), Some("t")))
        );
    }
}
