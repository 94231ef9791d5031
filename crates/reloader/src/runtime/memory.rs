//! The memory's runtime half: what is remembered of each workload (its baseline and the
//! `resourceVersion`s behind it, [`crate::memory`]), read from the shard Secrets in the
//! controller's namespace when it starts, and written back, shard by shard, a moment after it
//! changes (one write per changed shard, whatever the number of workloads).
//!
//! Failure modes, each said in a log line and in `conflux_reload_memory_unsaved`:
//! - a write fails: the shard stays changed and is retried with backoff; until it lands, a
//!   restart adopts the workloads whose baseline was not written (a change made while conflux was
//!   down is then not rolled; a rollout is never repeated: the pod template says what it rolled
//!   to);
//! - a shard is over its budget ([`crate::memory::SHARD_BUDGET`]): the workloads that do not fit
//!   are remembered in this process only;
//! - the shards cannot be read for lack of access (403) or of the namespace (404): the controller
//!   starts without memory, adopting every workload, and says so once.

use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::backoff::Policy;
use conflux_runtime::queue::{Next, Opening};
use conflux_watch_index::refs::ObjectRef;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use tracing::{debug, info, warn};

use super::context::Context;
use super::work::Work;
use crate::memory::{Entry, SHARD_LABEL, decode_shard, encode_shard, shard_name, shard_of};
use crate::patch::FIELD_MANAGER;

/// How long after a change the changed shards are written: changes made together (a batch of
/// evaluations, a burst of rollouts) share one write per shard.
const SAVE_AFTER: Duration = Duration::from_secs(1);

/// Remembers `entry` for `object` and schedules the write of its shard.
pub(super) fn remember(ctx: &Context, object: &ObjectRef, entry: Entry) {
    let changed = ctx.state().memory.set(object, entry);
    if changed {
        ctx.later(Work::Save, SAVE_AFTER);
    }
}

/// Remembers `entry` for `object` after an evaluation that changed nothing: a write of its
/// shard only when more than the versions changed ([`super::cache::Memory::refresh`]).
pub(super) fn refresh(ctx: &Context, object: &ObjectRef, entry: Entry) {
    let changed = ctx.state().memory.refresh(object, entry);
    if changed {
        ctx.later(Work::Save, SAVE_AFTER);
    }
}

/// Forgets `object` and schedules the write of its shard.
pub(super) fn forget(ctx: &Context, object: &ObjectRef) {
    let changed = ctx.state().memory.remove(object);
    if changed {
        ctx.later(Work::Save, SAVE_AFTER);
    }
}

/// The shard Secrets' API, in the controller's namespace (none without one).
fn shards_api(ctx: &Context) -> Option<(String, Api<Secret>)> {
    let ns = ctx.config.records_namespace.clone()?;
    let api = Api::namespaced(ctx.client.clone(), &ns);
    Some((ns, api))
}

/// Reads the shards (retried with backoff until it answers), then opens the queue's `memory`
/// part.
pub(super) async fn load(ctx: Arc<Context>, mut opening: Opening) {
    let Some((ns, api)) = shards_api(&ctx) else {
        info!(
            "reload: no runtime namespace; what is remembered of workloads is kept in this process only"
        );
        opening.open();
        return;
    };
    let params = ListParams::default().labels(&format!("{}={}", SHARD_LABEL.0, SHARD_LABEL.1));
    let mut backoff = Policy::STARTUP.backoff();
    let list = loop {
        match api.list(&params).await {
            Ok(list) => break Some(list),
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => {
                warn!(reason = "MemoryUnavailable", namespace = %ns, code = status.code, error = %status.message, "reload: cannot read what was remembered of workloads; adopting every workload (changes made while conflux was down are not rolled)");
                break None;
            }
            Err(err) => {
                let err = conflux_runtime::Error::api(format!(
                    "listing the reload memory in namespace {ns}"
                ))(err);
                warn!(reason = err.reason(), error = %err, "reload: cannot read the memory yet; retrying");
                backoff.wait().await;
            }
        }
    };
    let mut loaded = 0usize;
    for secret in list.map(|l| l.items).unwrap_or_default() {
        let data = secret.data.unwrap_or_default();
        let (entries, unreadable) =
            decode_shard(data.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())));
        if !unreadable.is_empty() {
            warn!(reason = "InvalidMemory", secret = %secret.metadata.name.unwrap_or_default(), entries = unreadable.len(), "reload: memory entries that cannot be read are ignored (those workloads are adopted again)");
        }
        let mut state = ctx.state();
        for (object, entry) in entries {
            loaded += 1;
            state.memory.entries.insert(object, entry);
        }
    }
    info!(workloads = loaded, "reload: memory read");
    opening.open();
}

/// Forgets what is remembered of workloads that are gone (the initial lists are in), and
/// schedules the write.
pub(super) fn prune(ctx: &Context) {
    let pruned = {
        let mut state = ctx.state();
        let gone: Vec<ObjectRef> = state
            .memory
            .entries
            .iter()
            .filter(|(object, entry)| {
                state
                    .workloads
                    .get(*object)
                    .and_then(|w| w.uid())
                    .is_none_or(|uid| uid != entry.uid)
            })
            .map(|(object, _)| object.clone())
            .collect();
        for object in &gone {
            state.memory.remove(object);
        }
        gone.len()
    };
    if pruned > 0 {
        debug!(
            workloads = pruned,
            "reload: forgetting workloads that are gone"
        );
        ctx.later(Work::Save, SAVE_AFTER);
    }
}

/// Writes the changed shards (one server-side apply each).
pub(super) async fn save(ctx: &Context) -> Next {
    let Some((ns, api)) = shards_api(ctx) else {
        ctx.state().memory.dirty.clear();
        return Next::Done;
    };
    let dirty: Vec<u32> = std::mem::take(&mut ctx.state().memory.dirty)
        .into_iter()
        .collect();
    let mut failed = Vec::new();
    let mut unsaved = 0usize;
    for shard in dirty {
        let (data, left_out) = {
            let state = ctx.state();
            encode_shard(
                state
                    .memory
                    .entries
                    .iter()
                    .filter(|(object, _)| shard_of(object) == shard),
            )
        };
        if !left_out.is_empty() {
            warn!(
                reason = "MemoryFull",
                shard,
                workloads = left_out.len(),
                "reload: a memory shard is full; these workloads are remembered in this process only (after a restart they are adopted again)"
            );
            unsaved += left_out.len();
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(shard_name(shard)),
                namespace: Some(ns.clone()),
                labels: Some(
                    [
                        (SHARD_LABEL.0.to_owned(), SHARD_LABEL.1.to_owned()),
                        (
                            "app.kubernetes.io/managed-by".to_owned(),
                            "conflux".to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k, ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Secret::default()
        };
        let mut body = serde_json::to_value(&secret).unwrap_or_default();
        body["apiVersion"] = "v1".into();
        body["kind"] = "Secret".into();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(err) = api
            .patch(&shard_name(shard), &params, &Patch::Apply(&body))
            .await
        {
            let err = conflux_runtime::Error::api(format!(
                "writing the reload memory (Secret {ns}/{})",
                shard_name(shard)
            ))(err);
            warn!(reason = err.reason(), error = %err, "reload: cannot write the memory; retrying with backoff");
            failed.push(shard);
        }
    }
    let mut state = ctx.state();
    let retry = !failed.is_empty();
    state.memory.dirty.extend(failed);
    let pending: usize = state
        .memory
        .entries
        .keys()
        .filter(|o| state.memory.dirty.contains(&shard_of(o)))
        .count();
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    ctx.metrics.memory_unsaved.set(gauge(unsaved + pending));
    ctx.metrics.memory_entries.set(gauge(state.memory.len()));
    if retry { Next::Retry } else { Next::Done }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::memory::SHARDS;
    use crate::runtime::cache::Memory;

    #[test]
    fn the_memory_marks_the_shard_of_what_changed() {
        let mut memory = Memory::default();
        let web = ObjectRef::new("apps", "Deployment", "ns", "web");
        let entry = Entry {
            uid: "u1".into(),
            baseline: "v2;00".into(),
            versions: Default::default(),
        };
        assert!(memory.set(&web, entry.clone()));
        assert_eq!(memory.dirty, BTreeSet::from([shard_of(&web)]));
        memory.dirty.clear();
        assert!(
            !memory.set(&web, entry.clone()),
            "the same entry changes nothing"
        );
        assert!(memory.dirty.is_empty());
        assert_eq!(memory.get(&web, Some("u1")), Some(&entry));
        assert_eq!(
            memory.get(&web, Some("u2")),
            None,
            "another workload of that name"
        );
        assert_eq!(memory.get(&web, None), None);
        // A metadata-only write of a config: newer versions, same baseline, no write.
        let mut newer = entry.clone();
        newer.versions.insert(
            (
                conflux_watch_index::refs::ConfigKind::ConfigMap,
                "cm".into(),
            ),
            Some("7".into()),
        );
        assert!(!memory.refresh(&web, newer.clone()));
        assert!(memory.dirty.is_empty());
        assert_eq!(memory.get(&web, Some("u1")), Some(&newer), "kept in memory");
        // Another baseline is a change.
        let rolled = Entry {
            baseline: "v2;01".into(),
            ..newer
        };
        assert!(memory.refresh(&web, rolled));
        assert_eq!(memory.dirty, BTreeSet::from([shard_of(&web)]));
        memory.dirty.clear();
        assert!(memory.remove(&web));
        assert!(!memory.remove(&web));
        assert_eq!(memory.dirty.len(), 1);
        assert_eq!(SHARDS, 8);
    }
}
