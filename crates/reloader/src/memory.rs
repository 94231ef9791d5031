//! What conflux remembers of each workload between restarts, kept out of the workloads.
//!
//! To roll a change made while it was down, and to tell which config changed, the controller
//! must know what each workload's pods last saw: its baseline ([`patch::baseline_value`]). Older
//! versions wrote it on every workload (an annotation, one write per workload at adoption, which
//! kube-controller-manager then copied onto a ReplicaSet). Now it is kept in the controller's own
//! namespace, in a few Secrets ("shards"), one [`Entry`] per workload:
//!
//! - the workload's uid (a workload deleted and created again under the same name starts over);
//! - its baseline;
//! - the `resourceVersion` of each candidate config its digests were taken from: on a restart,
//!   a workload whose configs all kept their version is decided from memory alone, without
//!   reading any config.
//!
//! Each workload belongs to one of [`SHARDS`] shards by a stable hash of its key
//! ([`shard_of`]), so a rollout rewrites one shard, not all of them. A shard is a Secret (the
//! digests are derived from Secret data) named [`shard_name`], labelled [`SHARD_LABEL`], with one
//! data key per workload ([`data_key`]). A shard holds at most [`SHARD_BUDGET`] bytes; entries
//! beyond it are kept in memory only ([`encode_shard`] says which), and such a workload is
//! adopted again after a restart (a change made while conflux was down is then not rolled).
//!
//! Plain data: encoding, parsing and the budget; the controller reads and writes the Secrets.
//!
//! [`patch::baseline_value`]: crate::patch::baseline_value

use std::collections::BTreeMap;

use conflux_watch_index::refs::{ConfigKind, ObjectRef};
use sha2::{Digest, Sha256};

use crate::workload::WorkloadKind;

/// How many shards the memory is spread over.
pub const SHARDS: u32 = 8;
/// The label every shard carries (`conflux.dev/memory: reload`).
pub const SHARD_LABEL: (&str, &str) = ("conflux.dev/memory", "reload");
/// The largest encoded shard written: a Secret holds at most 1 MiB, and a rollout rewrites its
/// shard.
pub const SHARD_BUDGET: usize = 768 * 1024;

/// What is remembered of one workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The workload's uid.
    pub uid: String,
    /// Its baseline ([`crate::patch::baseline_value`]).
    pub baseline: String,
    /// The `resourceVersion` each candidate ConfigMap/Secret had when its digest was taken;
    /// `None` while it was absent.
    pub versions: BTreeMap<(ConfigKind, String), Option<String>>,
}

impl Entry {
    /// The encoded entry: `<uid> <baseline> <c|s><name>=<resourceVersion|->;…` (names and
    /// versions hold no spaces, `;` or `=`).
    pub fn encode(&self) -> String {
        let versions: Vec<String> = self
            .versions
            .iter()
            .map(|((kind, name), rv)| {
                let k = match kind {
                    ConfigKind::ConfigMap => 'c',
                    ConfigKind::Secret => 's',
                };
                format!("{k}{name}={}", rv.as_deref().unwrap_or("-"))
            })
            .collect();
        format!("{} {} {}", self.uid, self.baseline, versions.join(";"))
    }

    /// Parses [`Entry::encode`]'s form; `None` for anything else.
    pub fn parse(value: &str) -> Option<Entry> {
        let mut parts = value.splitn(3, ' ');
        let uid = parts.next().filter(|u| !u.is_empty())?.to_owned();
        let baseline = parts.next().filter(|b| !b.is_empty())?.to_owned();
        let mut versions = BTreeMap::new();
        for item in parts.next().unwrap_or_default().split(';') {
            if item.is_empty() {
                continue;
            }
            let kind = match item.as_bytes().first()? {
                b'c' => ConfigKind::ConfigMap,
                b's' => ConfigKind::Secret,
                _ => return None,
            };
            let (name, rv) = item.get(1..)?.split_once('=')?;
            let rv = (rv != "-").then(|| rv.to_owned());
            versions.insert((kind, name.to_owned()), rv);
        }
        Some(Entry {
            uid,
            baseline,
            versions,
        })
    }

    /// Whether the candidate configs `now` (each with its current `resourceVersion`, `None` when
    /// absent) are exactly those remembered, at the same versions: the digests in the baseline
    /// are then the configs' digests now.
    pub fn versions_match<'a>(
        &self,
        now: impl IntoIterator<Item = (ConfigKind, &'a str, Option<&'a str>)>,
    ) -> bool {
        let mut n = 0usize;
        for (kind, name, rv) in now {
            n += 1;
            match self.versions.get(&(kind, name.to_owned())) {
                Some(remembered) if remembered.as_deref() == rv => {}
                _ => return false,
            }
        }
        n == self.versions.len()
    }
}

/// The shard of a workload: a stable hash of its kind, namespace and name.
pub fn shard_of(object: &ObjectRef) -> u32 {
    let digest = Sha256::new()
        .chain_update(object.kind.as_bytes())
        .chain_update([0])
        .chain_update(object.namespace.as_bytes())
        .chain_update([0])
        .chain_update(object.name.as_bytes())
        .finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % SHARDS
}

/// The name of shard `shard`'s Secret.
pub fn shard_name(shard: u32) -> String {
    format!("conflux-reload-memory-{shard}")
}

/// The data key of a workload in its shard: `<kind>.<namespace>.<name>`, the kind lower-case
/// (Secret keys allow `[-._a-zA-Z0-9]`, which namespaces and names keep to).
pub fn data_key(object: &ObjectRef) -> String {
    format!(
        "{}.{}.{}",
        object.kind.to_ascii_lowercase(),
        object.namespace,
        object.name
    )
}

/// The workload a data key names; `None` when it names none.
pub fn parse_data_key(key: &str) -> Option<ObjectRef> {
    let (kind, rest) = key.split_once('.')?;
    let (namespace, name) = rest.split_once('.')?;
    let kind = WorkloadKind::ALL
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(kind))?;
    (!namespace.is_empty() && !name.is_empty())
        .then(|| ObjectRef::new(kind.group(), kind.as_str(), namespace, name))
}

/// A shard's data from its entries, in key order, within [`SHARD_BUDGET`]; also the workloads
/// that did not fit (kept in memory only).
pub fn encode_shard<'a>(
    entries: impl IntoIterator<Item = (&'a ObjectRef, &'a Entry)>,
) -> (BTreeMap<String, String>, Vec<ObjectRef>) {
    let mut sorted: Vec<(String, &ObjectRef, String)> = entries
        .into_iter()
        .map(|(o, e)| (data_key(o), o, e.encode()))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut data = BTreeMap::new();
    let mut left_out = Vec::new();
    let mut size = 0usize;
    for (key, object, value) in sorted {
        // The API sends values base64-encoded: a third more.
        let cost = key.len() + value.len().div_ceil(3) * 4 + 8;
        if size + cost > SHARD_BUDGET {
            left_out.push(object.clone());
            continue;
        }
        size += cost;
        data.insert(key, value);
    }
    (data, left_out)
}

/// The entries of a shard's data; keys or values that cannot be read are skipped and returned
/// (a shard written by someone else, or by a newer version).
pub fn decode_shard<'a>(
    data: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> (Vec<(ObjectRef, Entry)>, Vec<String>) {
    let mut entries = Vec::new();
    let mut unreadable = Vec::new();
    for (key, value) in data {
        let parsed = parse_data_key(key).and_then(|object| {
            let entry = Entry::parse(std::str::from_utf8(value).ok()?)?;
            Some((object, entry))
        });
        match parsed {
            Some(pair) => entries.push(pair),
            None => unreadable.push(key.to_owned()),
        }
    }
    (entries, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            uid: "0f1e-uid".into(),
            baseline: "v2;0011223344556677;cwapp=8899aabbccddeeff:01020304a0b0c0d0".into(),
            versions: BTreeMap::from([
                ((ConfigKind::ConfigMap, "app".into()), Some("1234".into())),
                ((ConfigKind::Secret, "creds".into()), None),
            ]),
        }
    }

    #[test]
    fn an_entry_round_trips_and_anything_else_is_refused() {
        let e = entry();
        let text = e.encode();
        assert_eq!(
            text,
            "0f1e-uid v2;0011223344556677;cwapp=8899aabbccddeeff:01020304a0b0c0d0 capp=1234;screds=-"
        );
        assert_eq!(Entry::parse(&text), Some(e));
        let bare = Entry {
            versions: BTreeMap::new(),
            ..entry()
        };
        assert_eq!(Entry::parse(&bare.encode()), Some(bare));
        for bad in ["", "uid", " v2;x", "uid v2;x xapp=1", "uid v2;x capp"] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn versions_match_only_the_same_configs_at_the_same_versions() {
        let e = entry();
        let same = [
            (ConfigKind::ConfigMap, "app", Some("1234")),
            (ConfigKind::Secret, "creds", None),
        ];
        assert!(e.versions_match(same));
        let moved = [
            (ConfigKind::ConfigMap, "app", Some("1235")),
            (ConfigKind::Secret, "creds", None),
        ];
        assert!(!e.versions_match(moved));
        let created = [
            (ConfigKind::ConfigMap, "app", Some("1234")),
            (ConfigKind::Secret, "creds", Some("9")),
        ];
        assert!(!e.versions_match(created));
        assert!(!e.versions_match([(ConfigKind::ConfigMap, "app", Some("1234"))]));
        let more = [
            (ConfigKind::ConfigMap, "app", Some("1234")),
            (ConfigKind::ConfigMap, "other", None),
            (ConfigKind::Secret, "creds", None),
        ];
        assert!(!e.versions_match(more));
    }

    #[test]
    fn keys_name_their_workload_and_shards_are_stable() {
        let web = ObjectRef::new("apps", "Deployment", "team-a", "web.v2");
        let key = data_key(&web);
        assert_eq!(key, "deployment.team-a.web.v2");
        assert_eq!(parse_data_key(&key), Some(web.clone()));
        let job = ObjectRef::new("batch", "Job", "ns", "migrate");
        assert_eq!(parse_data_key(&data_key(&job)), Some(job));
        for bad in ["deployment", "pod.ns.x", "deployment..x", "deployment.ns."] {
            assert_eq!(parse_data_key(bad), None, "{bad:?}");
        }
        // The same workload always lands in the same shard (a stable hash, not the process's).
        assert_eq!(shard_of(&web), shard_of(&web.clone()));
        let spread: std::collections::BTreeSet<u32> = (0..200)
            .map(|i| shard_of(&ObjectRef::new("apps", "Deployment", "ns", format!("w{i}"))))
            .collect();
        assert_eq!(spread.len(), SHARDS as usize, "every shard is used");
        assert_eq!(shard_name(3), "conflux-reload-memory-3");
    }

    #[test]
    fn a_shard_round_trips_within_its_budget_and_says_what_did_not_fit() {
        let objects: Vec<ObjectRef> = (0..3)
            .map(|i| ObjectRef::new("apps", "Deployment", "ns", format!("w{i}")))
            .collect();
        let e = entry();
        let (data, left_out) = encode_shard(objects.iter().map(|o| (o, &e)));
        assert!(left_out.is_empty());
        let (back, unreadable) = decode_shard(data.iter().map(|(k, v)| (k.as_str(), v.as_bytes())));
        assert!(unreadable.is_empty());
        assert_eq!(back.len(), 3);
        assert!(back.iter().all(|(o, got)| objects.contains(o) && *got == e));
        // Too large for one Secret: the rest is left out, never a write the API refuses.
        let big = Entry {
            baseline: format!("v2;{}", "a".repeat(300 * 1024)),
            ..entry()
        };
        let (data, left_out) = encode_shard(objects.iter().map(|o| (o, &big)));
        assert_eq!((data.len(), left_out.len()), (1, 2));
        let (_, unreadable) = decode_shard([("deployment.ns.x", &b"\xff"[..]), ("junk", b"x")]);
        assert_eq!(unreadable, ["deployment.ns.x", "junk"]);
    }
}
