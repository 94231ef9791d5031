//! The fan-out plan, as steps: from what should be (the source, the selected namespaces) and what is (the
//! objects found in the cluster), the writes that make them agree (docs/design.md 4.2).
//!
//! The plan depends on nothing but its inputs: ownership is read from labels on the observed
//! objects, so a restarted operator computes the same plan as the one that stopped.
//!
//! | observed in a namespace | selected | plan |
//! |---|---|---|
//! | nothing | yes | [`Step::Create`] |
//! | our copy, same content and metadata | yes | [`Step::InSync`] |
//! | our copy, edited (data, labels, orphan mark, template) | yes | [`Step::Update`] (server-side apply) |
//! | our copy, other Secret type, or `immutable` with other data | yes | [`Step::Recreate`] |
//! | our copy | no, or it has an old target name | [`Step::Delete`] when `prune`, else nothing |
//! | same-name object not ours | yes | [`Step::Skip`] (`Skip`) or [`Step::Adopt`] (`Adopt`) |
//! | a kopy, reflector or replicator copy of the source ([`Predecessor`](crate::Predecessor)) | yes | [`Step::Adopt`] |
//! | our copy, source gone | any | [`Step::MarkOrphaned`] (once), never deleted |
//! | anything in a terminating namespace | — | nothing |
//!
//! On deletion of the owner, [`plan_deletion`] gives [`Step::Delete`] or [`Step::Release`] per
//! copy, following the deletion policy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use conflux_watch_index::redact::RedactedJson;

use crate::config_sync::{ConflictPolicy, DeletionPolicy};
use crate::desired::{fan_out_copy, stray_keys_patch};
use crate::fan_out::FanOut;
use crate::ownership::{ORPHANED_ANNOTATION, is_managed, release_patch};
use crate::selection::NamespaceView;
use crate::source::ConfigObject;

/// Why a copy is deleted and created again instead of patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecreateReason {
    /// The Secret type differs; `type` is immutable.
    TypeChanged,
    /// The copy is `immutable: true` and its data must change.
    Immutable,
}

/// One write (or deliberate non-write) in one namespace.
///
/// Objects are applied with server-side apply, field manager
/// [`FIELD_MANAGER`](crate::ownership::FIELD_MANAGER) and `force`: conflux is the authority on its
/// copies, so fields someone edited by hand (now owned by their manager) are taken back rather than
/// reported as conflicts.
///
/// `Debug` shows no data value: objects print as [`ConfigObject`] does, patches through
/// [`RedactedJson`].
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// Create the copy (server-side apply with field manager `conflux`).
    Create {
        /// The copy.
        object: ConfigObject,
    },
    /// Server-side apply the copy over our drifted copy.
    Update {
        /// The copy.
        object: ConfigObject,
        /// A JSON merge patch to send too, removing data keys someone else added
        /// ([`stray_keys_patch`]).
        cleanup: Option<serde_json::Value>,
    },
    /// Delete the existing object, then create the copy.
    Recreate {
        /// The copy.
        object: ConfigObject,
        /// Why a patch will not do.
        reason: RecreateReason,
    },
    /// Take over a same-name object that is not ours (`conflictPolicy: Adopt`): server-side apply
    /// the copy with `force`.
    Adopt {
        /// The copy.
        object: ConfigObject,
        /// A JSON merge patch to send too, removing the previous owner's data keys
        /// ([`stray_keys_patch`]).
        cleanup: Option<serde_json::Value>,
    },
    /// Our copy is already what it should be.
    InSync {
        /// Its namespace.
        namespace: String,
    },
    /// Delete our copy (pruned, renamed target, or `deletionPolicy: Delete`).
    Delete {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A same-name object that is not ours is left alone (`conflictPolicy: Skip`, or it belongs to
    /// another owner); report `message` (an Event, a status failure).
    Skip {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What to report; never contains data.
        message: String,
    },
    /// The source is gone: keep the copy (workloads keep running) and mark it with
    /// [`ORPHANED_ANNOTATION`]. `object` is the copy as it is, plus the mark, to server-side apply
    /// (an apply of everything we own, so no owned field is dropped).
    MarkOrphaned {
        /// The copy with the orphan mark.
        object: ConfigObject,
    },
    /// `deletionPolicy: Orphan`: keep the copy and strip conflux's ownership with a JSON merge patch.
    Release {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The merge patch ([`release_patch`]).
        patch: serde_json::Value,
    },
}

/// By hand: the objects are copies of Secret data, and the patches are JSON, which derived `Debug`
/// would print as it is.
impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn patch(p: &Option<serde_json::Value>) -> Option<RedactedJson<'_>> {
            p.as_ref().map(RedactedJson)
        }
        match self {
            Step::Create { object } => f.debug_struct("Create").field("object", object).finish(),
            Step::Update { object, cleanup } => f
                .debug_struct("Update")
                .field("object", object)
                .field("cleanup", &patch(cleanup))
                .finish(),
            Step::Recreate { object, reason } => f
                .debug_struct("Recreate")
                .field("object", object)
                .field("reason", reason)
                .finish(),
            Step::Adopt { object, cleanup } => f
                .debug_struct("Adopt")
                .field("object", object)
                .field("cleanup", &patch(cleanup))
                .finish(),
            Step::InSync { namespace } => f
                .debug_struct("InSync")
                .field("namespace", namespace)
                .finish(),
            Step::Delete { namespace, name } => f
                .debug_struct("Delete")
                .field("namespace", namespace)
                .field("name", name)
                .finish(),
            Step::Skip {
                namespace,
                name,
                message,
            } => f
                .debug_struct("Skip")
                .field("namespace", namespace)
                .field("name", name)
                .field("message", message)
                .finish(),
            Step::MarkOrphaned { object } => f
                .debug_struct("MarkOrphaned")
                .field("object", object)
                .finish(),
            Step::Release {
                namespace,
                name,
                patch,
            } => f
                .debug_struct("Release")
                .field("namespace", namespace)
                .field("name", name)
                .field("patch", &RedactedJson(patch))
                .finish(),
        }
    }
}

impl Step {
    /// The namespace the step writes in.
    pub fn namespace(&self) -> &str {
        match self {
            Step::Create { object }
            | Step::Update { object, .. }
            | Step::Recreate { object, .. }
            | Step::Adopt { object, .. }
            | Step::MarkOrphaned { object } => object.namespace(),
            Step::InSync { namespace }
            | Step::Delete { namespace, .. }
            | Step::Skip { namespace, .. }
            | Step::Release { namespace, .. } => namespace,
        }
    }

    /// True for steps that leave a synced copy in a target namespace when they succeed (these count
    /// in `syncedTargets`).
    pub fn is_target(&self) -> bool {
        matches!(
            self,
            Step::Create { .. }
                | Step::Update { .. }
                | Step::Recreate { .. }
                | Step::Adopt { .. }
                | Step::InSync { .. }
        )
    }

    /// True for steps that write nothing.
    pub fn is_noop(&self) -> bool {
        matches!(self, Step::InSync { .. } | Step::Skip { .. })
    }
}

/// The plan for one fan-out.
///
/// - `source`: the source as read, `None` when it does not exist (then copies are only marked
///   orphaned).
/// - `namespaces`: every namespace in the cluster (terminating ones included, so their copies are
///   left alone rather than pruned).
/// - `observed`: the objects the controller found: every copy labelled with the fan-out's owner
///   ([`Owner::selector`](crate::ownership::Owner::selector)) and every object named like the
///   target in a selected namespace. Objects of another kind are ignored.
///
/// Steps come ordered by namespace.
pub fn plan_sync<'a>(
    fan_out: &FanOut,
    source: Option<&ConfigObject>,
    namespaces: impl IntoIterator<Item = NamespaceView<'a>>,
    observed: &[ConfigObject],
) -> Vec<Step> {
    let mut terminating = BTreeSet::new();
    let mut targets = BTreeSet::new();
    for ns in namespaces {
        if ns.terminating {
            terminating.insert(ns.name);
        } else if fan_out.selects(ns) {
            targets.insert(ns.name);
        }
    }
    let kind = fan_out.source.kind;
    // The object named like the target, per namespace, and our copies under other names.
    let mut at_target: BTreeMap<&str, &ConfigObject> = BTreeMap::new();
    let mut renamed: Vec<&ConfigObject> = Vec::new();
    for obj in observed.iter().filter(|o| o.kind() == kind) {
        if terminating.contains(obj.namespace()) {
            continue;
        }
        if obj.name() == fan_out.target_name {
            at_target.insert(obj.namespace(), obj);
        } else if fan_out.owner.owns(obj.metadata().labels.as_ref()) {
            renamed.push(obj);
        }
    }

    let mut steps = Vec::new();
    let Some(source) = source else {
        for obj in at_target.values().copied().chain(renamed) {
            if fan_out.owner.owns(obj.metadata().labels.as_ref()) && !is_orphaned(obj) {
                steps.push(Step::MarkOrphaned {
                    object: orphaned(obj, fan_out),
                });
            }
        }
        steps.sort_by(|a, b| a.namespace().cmp(b.namespace()));
        return steps;
    };

    for &namespace in &targets {
        let desired = fan_out_copy(source, fan_out, namespace);
        steps.push(match at_target.get(namespace) {
            None => Step::Create { object: desired },
            Some(obj) if fan_out.owner.owns(obj.metadata().labels.as_ref()) => {
                reconcile_owned(obj, desired)
            }
            Some(obj) => conflict(obj, desired, fan_out),
        });
    }
    if fan_out.prune {
        let stale = at_target
            .iter()
            .filter(|(ns, _)| !targets.contains(*ns))
            .map(|(_, obj)| *obj)
            .chain(renamed)
            .filter(|obj| fan_out.owner.owns(obj.metadata().labels.as_ref()));
        for obj in stale {
            steps.push(Step::Delete {
                namespace: obj.namespace().to_owned(),
                name: obj.name().to_owned(),
            });
        }
    }
    steps.sort_by(|a, b| a.namespace().cmp(b.namespace()));
    steps
}

/// The plan when the owner (a ConfigSync, or a source's kopy annotation) goes away: every copy it
/// owns is deleted (`Delete`) or released (`Orphan`). Objects it does not own are never touched.
pub fn plan_deletion(fan_out: &FanOut, observed: &[ConfigObject]) -> Vec<Step> {
    observed
        .iter()
        .filter(|o| o.kind() == fan_out.source.kind)
        .filter(|o| fan_out.owner.owns(o.metadata().labels.as_ref()))
        .map(|o| {
            let (namespace, name) = (o.namespace().to_owned(), o.name().to_owned());
            match fan_out.deletion_policy {
                DeletionPolicy::Delete => Step::Delete { namespace, name },
                DeletionPolicy::Orphan => Step::Release {
                    namespace,
                    name,
                    patch: release_patch(),
                },
            }
        })
        .collect()
}

/// Our copy exists: recreate, update or leave it.
fn reconcile_owned(observed: &ConfigObject, desired: ConfigObject) -> Step {
    if let Some(reason) = recreate_reason(observed, &desired) {
        return Step::Recreate {
            object: desired,
            reason,
        };
    }
    let observed_meta = observed.metadata();
    let desired_meta = desired.metadata();
    let drifted = !desired.same_content(observed)
        || !is_subset(desired_meta.labels.as_ref(), observed_meta.labels.as_ref())
        || !is_subset(
            desired_meta.annotations.as_ref(),
            observed_meta.annotations.as_ref(),
        )
        || is_orphaned(observed);
    if drifted {
        Step::Update {
            cleanup: stray_keys_patch(&desired, observed),
            object: desired,
        }
    } else {
        Step::InSync {
            namespace: observed.namespace().to_owned(),
        }
    }
}

/// A same-name object that is not ours.
fn conflict(observed: &ConfigObject, desired: ConfigObject, fan_out: &FanOut) -> Step {
    // Another conflux owner's copy is never adopted: two syncs taking turns would flap forever.
    let other_owner = is_managed(observed.metadata().labels.as_ref());
    // A copy kopy, reflector or replicator made of this very source is taken over: switching to
    // conflux must neither skip nor re-create the copies workloads already use.
    let adopt = fan_out.conflict_policy == ConflictPolicy::Adopt || fan_out.inherits(observed);
    if adopt && !other_owner {
        return match recreate_reason(observed, &desired) {
            Some(reason) => Step::Recreate {
                object: desired,
                reason,
            },
            None => Step::Adopt {
                cleanup: stray_keys_patch(&desired, observed),
                object: desired,
            },
        };
    }
    let why = if other_owner {
        "it is managed by another conflux sync"
    } else {
        "it is not managed by conflux (conflictPolicy: Skip)"
    };
    Step::Skip {
        namespace: observed.namespace().to_owned(),
        name: observed.name().to_owned(),
        message: format!(
            "{} {}/{} already exists and was left alone: {why}",
            observed.kind(),
            observed.namespace(),
            observed.name()
        ),
    }
}

fn recreate_reason(observed: &ConfigObject, desired: &ConfigObject) -> Option<RecreateReason> {
    if observed.secret_type() != desired.secret_type() {
        Some(RecreateReason::TypeChanged)
    } else if observed.is_immutable() && !desired.same_content(observed) {
        Some(RecreateReason::Immutable)
    } else {
        None
    }
}

fn is_orphaned(obj: &ConfigObject) -> bool {
    obj.metadata()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ORPHANED_ANNOTATION))
}

/// The observed copy reduced to the fields we own, plus the orphan mark: applying it keeps the data
/// and adds the mark.
fn orphaned(observed: &ConfigObject, fan_out: &FanOut) -> ConfigObject {
    // The copy's own content stands in for the missing source.
    let mut copy = fan_out_copy(observed, fan_out, observed.namespace());
    let meta = copy.metadata_mut();
    meta.name = Some(observed.name().to_owned());
    // The labels the copy carries stay: the owner of a gone source no longer knows them (a
    // replicator source's labels copied onto its copies), and dropping them changes nothing for
    // the better.
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    for (key, value) in observed.metadata().labels.iter().flatten() {
        labels.entry(key.clone()).or_insert_with(|| value.clone());
    }
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ORPHANED_ANNOTATION.to_owned(), "true".to_owned());
    copy
}

/// True when every entry of `want` is in `have`.
fn is_subset(
    want: Option<&BTreeMap<String, String>>,
    have: Option<&BTreeMap<String, String>>,
) -> bool {
    want.into_iter()
        .flatten()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

#[cfg(test)]
mod tests;
