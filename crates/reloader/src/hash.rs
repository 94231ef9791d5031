//! The content hash of what a workload's pods read from its watched ConfigMaps and Secrets.
//!
//! Each candidate config is hashed on its own, from its data, as soon as it is read (one GET or
//! a page of a LIST), and its data dropped: the *config hash* ([`ConfigHash`]) is SHA-256 over
//! this encoding, where `lp(x)` is the 8-byte big-endian length of `x` followed by its bytes and
//! `u8`/`u64` are big-endian integers:
//!
//! ```text
//! lp("conflux.dev/config-digest/v1")  u8(kind: 0 ConfigMap, 1 Secret)  lp(name)
//!   absent:  u8(0)
//!   present: u8(1) then
//!     whole object (envFrom, volume without items):
//!       u8(0) u64(n) then per key, sorted: lp(key) u8(0 data | 1 binaryData) lp(value)
//!     some keys (*KeyRef, items):
//!       u8(1) u64(n) then per key read, sorted: lp(key) then u8(0) if missing,
//!       or u8(1) u8(0 data | 1 binaryData) lp(value)
//! ```
//!
//! Its first 8 bytes are the *config digest* ([`ConfigDigest::content`]), which baselines keep.
//! The workload's *content hash* (version 2; the value of the pod-template annotation a rollout
//! writes) is SHA-256 over the config hashes of the configs watched now:
//!
//! ```text
//! lp("conflux.dev/config-hash/v2")  u64(number of watched configs)
//! per watched config, sorted by (kind, name), ConfigMap before Secret:
//!   u8(kind)  lp(name)  u8(0) if absent, or u8(1) and its 32-byte config hash
//! ```
//!
//! Version 1 hashed the concatenated data of every watched config at once, so a workload's
//! configs had to be held in memory together; version 2 needs only their hashes. The value only
//! names what a rollout rolled to: decisions compare config digests with the baseline
//! ([`patch`](crate::patch)), so a template annotation written under version 1 rolls nothing.
//!
//! Next to it, the *watched-set digest* covers only which configs and keys are watched, not their
//! content (so [`decide`](crate::patch::decide) can tell "the content changed" from "what is
//! watched changed"):
//!
//! ```text
//! lp("conflux.dev/watched-set/v1")  u64(number of configs)
//! per config, sorted as above:
//!   u8(kind)  lp(name)  u8(optional: 0 | 1)
//!   whole object: u8(0)      some keys: u8(1) u64(n) then lp(key) per key, sorted
//! ```
//!
//! SecretProviderClasses (secrets-store CSI integration) follow the ConfigMaps and Secrets, with
//! kind byte 2: their config hash is over `u8(2) lp(name)`, then `u8(0)` while no pod's mount is
//! recorded, or `u8(1) u64(n)` and per mounted object, sorted by id, `lp(id) lp(version)` (see
//! [`ProviderObject`]). In the watched-set encoding a SecretProviderClass is
//! `u8(2) lp(name) u8(1) u8(0)` (optional, whole). Workloads that watch none hash exactly as
//! without the integration.
//!
//! So the hash changes exactly when something the pod reads changes: a key it reads, the key set
//! of an object it reads whole, a config appearing or disappearing. A change to a key it does not
//! read changes nothing. Secret values are the decoded bytes (`data`); `stringData` is write-only
//! in the API and never read back. The result is lower-case hex of the 32-byte digest.
//!
//! For each key read that is present there is also a *key digest*: the first 4 bytes of SHA-256
//! over `lp(key)` followed by the first 4 bytes of SHA-256 over `lp(key) u8(source) lp(value)`.
//! The decision compares config digests per config with the baseline ([`patch`](crate::patch)),
//! which is how a config that becomes watched in the same update that changes its data still
//! rolls, and key digests name the keys that changed in an Event.

use std::collections::BTreeMap;
use std::fmt;

use conflux_watch_index::redact::RedactedMap;
use conflux_watch_index::refs::ConfigKind;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use sha2::{Digest, Sha256};

use crate::consumers::{Consumption, Keys};
use crate::opt_in::Watch;
use crate::source::{ProviderObject, SourceKind};

/// The domain tag at the start of the content encoding.
const DOMAIN: &[u8] = b"conflux.dev/config-hash/v2";
/// The domain tag at the start of the watched-set encoding.
const SET_DOMAIN: &[u8] = b"conflux.dev/watched-set/v1";
/// The domain tag at the start of each config digest.
const CONFIG_DOMAIN: &[u8] = b"conflux.dev/config-digest/v1";

/// The data of one ConfigMap or Secret, borrowed from the object. `Debug` shows the keys and the
/// length of each value, never a value ([`conflux_watch_index::redact`]).
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum ConfigData<'a> {
    /// A ConfigMap's `data` and `binaryData`.
    ConfigMap {
        /// `data` (UTF-8 values).
        data: Option<&'a BTreeMap<String, String>>,
        /// `binaryData`.
        binary_data: Option<&'a BTreeMap<String, ByteString>>,
    },
    /// A Secret's `data`.
    Secret {
        /// `data` (decoded bytes).
        data: Option<&'a BTreeMap<String, ByteString>>,
    },
}

/// By hand: a derived `Debug` would print Secret data.
impl fmt::Debug for ConfigData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigData::ConfigMap { data, binary_data } => f
                .debug_struct("ConfigMap")
                .field("data", &data.map(RedactedMap))
                .field("binary_data", &binary_data.map(RedactedMap))
                .finish(),
            ConfigData::Secret { data } => f
                .debug_struct("Secret")
                .field("data", &data.map(RedactedMap))
                .finish(),
        }
    }
}

impl<'a> ConfigData<'a> {
    /// The data of a ConfigMap.
    pub fn from_config_map(cm: &'a ConfigMap) -> Self {
        ConfigData::ConfigMap {
            data: cm.data.as_ref(),
            binary_data: cm.binary_data.as_ref(),
        }
    }

    /// The data of a Secret.
    pub fn from_secret(secret: &'a Secret) -> Self {
        ConfigData::Secret {
            data: secret.data.as_ref(),
        }
    }

    /// One key's value and its source (0 `data`, 1 `binaryData`).
    fn get(&self, key: &str) -> Option<(u8, &'a [u8])> {
        match *self {
            ConfigData::ConfigMap { data, binary_data } => data
                .and_then(|d| d.get(key))
                .map(|v| (0, v.as_bytes()))
                .or_else(|| {
                    binary_data
                        .and_then(|d| d.get(key))
                        .map(|v| (1, v.0.as_slice()))
                }),
            ConfigData::Secret { data } => {
                data.and_then(|d| d.get(key)).map(|v| (0, v.0.as_slice()))
            }
        }
    }

    /// Every entry, sorted by key then source.
    fn entries(&self) -> Vec<(&'a str, u8, &'a [u8])> {
        let mut out: Vec<(&str, u8, &[u8])> = Vec::new();
        match *self {
            ConfigData::ConfigMap { data, binary_data } => {
                let text = data.into_iter().flatten();
                out.extend(text.map(|(k, v)| (k.as_str(), 0, v.as_bytes())));
                let bin = binary_data.into_iter().flatten();
                out.extend(bin.map(|(k, v)| (k.as_str(), 1, v.0.as_slice())));
                // Each map is sorted; a key in both (rejected by the API) sorts by source.
                out.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            }
            ConfigData::Secret { data } => {
                let d = data.into_iter().flatten();
                out.extend(d.map(|(k, v)| (k.as_str(), 0, v.0.as_slice())));
            }
        }
        out
    }
}

/// A workload's content hash, and what is missing for it to be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentHash {
    /// Lower-case hex SHA-256 of the content encoding in the [module docs](self), over the configs
    /// watched now: the value of the pod-template annotation that rolls the workload.
    pub hex: String,
    /// Lower-case hex SHA-256 of the watched-set encoding: which configs and keys, not content.
    pub watched_hex: String,
    /// Watched configs that are absent although a reference to them is not optional. A rollout now
    /// would make pods that cannot start, so [`decide`](crate::patch::decide) holds it until they
    /// exist again.
    pub missing_required: Vec<(ConfigKind, String)>,
    /// The workload side of the watch ([`Watch::spec`]).
    pub spec: [u8; 8],
    /// One digest per candidate of the watch, sorted by (kind, name).
    pub configs: Vec<ConfigDigest>,
}

/// What one candidate config of a workload looks like now, in digests (no data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDigest {
    /// ConfigMap, Secret or SecretProviderClass.
    pub kind: SourceKind,
    /// Its name.
    pub name: String,
    /// Whether the workload watches it now.
    pub watched: bool,
    /// The config digest of the [module docs](self); `None` while the config is absent.
    pub content: Option<[u8; 8]>,
    /// The key digest of each key read that is present, sorted by key (for a
    /// SecretProviderClass: each mounted object, by id, its version as the value).
    pub keys: Vec<(String, [u8; 8])>,
}

fn lp(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// Which key (4 bytes) and its value (4 bytes): enough to tell a changed key from a removed one.
fn key_digest(key: &str, source: u8, value: &[u8]) -> [u8; 8] {
    let mut h = Sha256::new();
    lp(&mut h, key.as_bytes());
    // The key part is the digest of `lp(key)` alone: hash the prefix once, finish a copy.
    let id = h.clone().finalize();
    h.update([source]);
    lp(&mut h, value);
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&id[..4]);
    out[4..].copy_from_slice(&h.finalize()[..4]);
    out
}

/// What one candidate config hashes to, without its data: computed when the config is read
/// (one GET, or a page of a LIST) and kept while the workloads that read it are decided, so data
/// is dropped at once. Absent configs hash too ([`ConfigHash::present`] false).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigHash {
    /// Whether the config exists (for a SecretProviderClass: whether a mount is recorded).
    pub present: bool,
    /// SHA-256 of `lp("conflux.dev/config-digest/v1")` followed by this config's part of the
    /// encoding (the config digest is its first 8 bytes).
    pub full: [u8; 32],
    /// The key digest of each key read that is present, sorted by key.
    pub keys: Vec<(String, [u8; 8])>,
}

impl ConfigHash {
    /// The 8-byte config digest (`None` while absent).
    pub fn digest(&self) -> Option<[u8; 8]> {
        let mut out = [0u8; 8];
        out.copy_from_slice(&self.full[..8]);
        self.present.then_some(out)
    }
}

/// The kind byte of the encodings.
fn kind_byte(kind: SourceKind) -> u8 {
    match kind {
        SourceKind::ConfigMap => 0,
        SourceKind::Secret => 1,
        SourceKind::SecretProviderClass => 2,
    }
}

/// Hashes what a workload reading `c` reads of it (`data`: `None` when the config is absent).
pub fn hash_config(c: &Consumption, data: Option<ConfigData<'_>>) -> ConfigHash {
    let mut h = Sha256::new();
    lp(&mut h, CONFIG_DOMAIN);
    h.update([kind_byte(c.kind.into())]);
    lp(&mut h, c.name.as_bytes());
    let mut keys = Vec::new();
    match &data {
        None => h.update([0u8]),
        Some(data) => {
            h.update([1u8]);
            match &c.keys {
                Keys::All => {
                    let entries = data.entries();
                    h.update([0u8]);
                    h.update((entries.len() as u64).to_be_bytes());
                    for (key, source, value) in entries {
                        lp(&mut h, key.as_bytes());
                        h.update([source]);
                        lp(&mut h, value);
                        keys.push((key.to_owned(), key_digest(key, source, value)));
                    }
                }
                Keys::Only(read) => {
                    h.update([1u8]);
                    h.update((read.len() as u64).to_be_bytes());
                    for key in read {
                        lp(&mut h, key.as_bytes());
                        match data.get(key) {
                            None => h.update([0u8]),
                            Some((source, value)) => {
                                h.update([1u8, source]);
                                lp(&mut h, value);
                                keys.push((key.clone(), key_digest(key, source, value)));
                            }
                        }
                    }
                }
            }
        }
    }
    ConfigHash {
        present: data.is_some(),
        full: h.finalize().into(),
        keys,
    }
}

/// Hashes what the pods mounted from the SecretProviderClass `name` (`None`: no mount recorded).
pub fn hash_provider(name: &str, mounted: Option<&[ProviderObject]>) -> ConfigHash {
    let mut h = Sha256::new();
    lp(&mut h, CONFIG_DOMAIN);
    h.update([kind_byte(SourceKind::SecretProviderClass)]);
    lp(&mut h, name.as_bytes());
    let mut keys = Vec::new();
    match mounted {
        None => h.update([0u8]),
        Some(objects) => {
            let mut objects: Vec<&ProviderObject> = objects.iter().collect();
            objects.sort();
            h.update([1u8]);
            h.update((objects.len() as u64).to_be_bytes());
            for o in objects {
                lp(&mut h, o.id.as_bytes());
                lp(&mut h, o.version.as_bytes());
                keys.push((o.id.clone(), key_digest(&o.id, 0, o.version.as_bytes())));
            }
        }
    }
    ConfigHash {
        present: mounted.is_some(),
        full: h.finalize().into(),
        keys,
    }
}

/// Hashes what the pods read from `watch` (from [`watch`](crate::opt_in::watch)), fetching each
/// candidate with `lookup` (`None` = absent).
pub fn content_hash<'a>(
    watch: &Watch,
    lookup: impl Fn(ConfigKind, &str) -> Option<ConfigData<'a>>,
) -> ContentHash {
    content_hash_with_providers(watch, lookup, |_| None)
}

/// [`content_hash`], with what the pods mounted from each SecretProviderClass of
/// [`Watch::providers`] given by `providers` (`None`: no mount is recorded).
pub fn content_hash_with_providers<'a, 'p>(
    watch: &Watch,
    lookup: impl Fn(ConfigKind, &str) -> Option<ConfigData<'a>>,
    providers: impl Fn(&str) -> Option<&'p [ProviderObject]>,
) -> ContentHash {
    let mut hashes: BTreeMap<(SourceKind, String), ConfigHash> = watch
        .candidates
        .iter()
        .map(|c| {
            let c = &c.consumption;
            (
                (c.kind.into(), c.name.clone()),
                hash_config(c, lookup(c.kind, &c.name)),
            )
        })
        .collect();
    for p in &watch.providers {
        let hash = hash_provider(&p.name, providers(&p.name));
        hashes.insert((SourceKind::SecretProviderClass, p.name.clone()), hash);
    }
    assemble(watch, |kind, name| {
        hashes
            .remove(&(kind, name.to_owned()))
            // Every candidate was hashed above; a duplicate name is hashed again.
            .unwrap_or_else(|| hash_provider(name, None))
    })
}

/// The content hash of `watch` from each candidate's [`ConfigHash`], given by `hashes` (asked
/// once per candidate, in order): what the controller calls once every config a workload reads
/// was read and hashed, in whichever order the reads came.
pub fn assemble(
    watch: &Watch,
    mut hashes: impl FnMut(SourceKind, &str) -> ConfigHash,
) -> ContentHash {
    let mut sorted: Vec<(&Consumption, bool)> = watch
        .candidates
        .iter()
        .map(|c| (&c.consumption, c.watched()))
        .collect();
    sorted.sort_by(|a, b| (a.0.kind, &a.0.name).cmp(&(b.0.kind, &b.0.name)));
    let mut sorted_providers: Vec<(&str, bool)> = watch
        .providers
        .iter()
        .map(|p| (p.name.as_str(), p.reason.is_some()))
        .collect();
    sorted_providers.sort_unstable();
    let watched_count = (sorted.iter().filter(|(_, w)| *w).count()
        + sorted_providers.iter().filter(|(_, w)| *w).count()) as u64;
    let mut h = Sha256::new();
    let mut set = Sha256::new();
    let mut missing_required = Vec::new();
    let mut configs = Vec::with_capacity(sorted.len() + sorted_providers.len());
    lp(&mut h, DOMAIN);
    lp(&mut set, SET_DOMAIN);
    h.update(watched_count.to_be_bytes());
    set.update(watched_count.to_be_bytes());
    let mut add = |kind: SourceKind, name: &str, watched: bool, hash: ConfigHash| {
        if watched {
            h.update([kind_byte(kind)]);
            lp(&mut h, name.as_bytes());
            h.update([u8::from(hash.present)]);
            if hash.present {
                h.update(hash.full);
            }
        }
        configs.push(ConfigDigest {
            kind,
            name: name.to_owned(),
            watched,
            content: hash.digest(),
            keys: hash.keys,
        });
    };
    for (c, watched) in sorted {
        if watched {
            set.update([kind_byte(c.kind.into())]);
            lp(&mut set, c.name.as_bytes());
            set.update([u8::from(c.optional)]);
            match &c.keys {
                Keys::All => set.update([0u8]),
                Keys::Only(keys) => {
                    set.update([1u8]);
                    set.update((keys.len() as u64).to_be_bytes());
                    for key in keys {
                        lp(&mut set, key.as_bytes());
                    }
                }
            }
        }
        let hash = hashes(c.kind.into(), &c.name);
        if watched && !c.optional && !hash.present {
            missing_required.push((c.kind, c.name.clone()));
        }
        add(c.kind.into(), &c.name, watched, hash);
    }
    for (name, watched) in sorted_providers {
        if watched {
            set.update([kind_byte(SourceKind::SecretProviderClass)]);
            lp(&mut set, name.as_bytes());
            set.update([1u8, 0u8]);
        }
        let hash = hashes(SourceKind::SecretProviderClass, name);
        add(SourceKind::SecretProviderClass, name, watched, hash);
    }
    ContentHash {
        hex: to_hex(&h.finalize()),
        watched_hex: to_hex(&set.finalize()),
        missing_required,
        spec: watch.spec,
        configs,
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    hex
}

/// Config hashes by the `resourceVersion` they were read at, so a config read for one workload is
/// not read again for another while it keeps that version: a fan-out that the rollout rate limit
/// spreads over seconds, or several workloads of one namespace reading one config at different
/// times. A [`ConfigHash`] is a function of the consumption's kind, name and keys and of the data,
/// and the data of one version never changes, so a hit is exact. It holds digests, no data.
///
/// Bounded: one version per config (a newer one replaces it), and at most `capacity` configs;
/// past that it starts empty again (a miss costs one read, as without the cache).
#[derive(Debug, Clone)]
pub struct HashCache {
    entries: std::collections::HashMap<(ConfigKind, String, String), CachedVersion>,
    capacity: usize,
}

/// The hashes of one version of one config, per set of keys read.
#[derive(Debug, Clone)]
struct CachedVersion {
    resource_version: String,
    hashes: Vec<(Keys, ConfigHash)>,
}

impl HashCache {
    /// An empty cache of at most `capacity` configs.
    pub fn new(capacity: usize) -> Self {
        HashCache {
            entries: std::collections::HashMap::new(),
            capacity,
        }
    }

    /// The hash of `c` in namespace `namespace`, when it was taken at `resource_version`.
    pub fn get(
        &self,
        namespace: &str,
        c: &Consumption,
        resource_version: &str,
    ) -> Option<&ConfigHash> {
        let cached = self
            .entries
            .get(&(c.kind, namespace.to_owned(), c.name.clone()))?;
        if cached.resource_version != resource_version {
            return None;
        }
        cached
            .hashes
            .iter()
            .find(|(keys, _)| *keys == c.keys)
            .map(|(_, hash)| hash)
    }

    /// Keeps `hash`, the hash of `c` in `namespace` read at `resource_version`.
    pub fn put(
        &mut self,
        namespace: &str,
        c: &Consumption,
        resource_version: &str,
        hash: &ConfigHash,
    ) {
        let key = (c.kind, namespace.to_owned(), c.name.clone());
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.clear();
        }
        let cached = self.entries.entry(key).or_insert_with(|| CachedVersion {
            resource_version: resource_version.to_owned(),
            hashes: Vec::new(),
        });
        if cached.resource_version != resource_version {
            cached.resource_version = resource_version.to_owned();
            cached.hashes.clear();
        }
        match cached.hashes.iter_mut().find(|(keys, _)| *keys == c.keys) {
            Some((_, kept)) => *kept = hash.clone(),
            None => cached.hashes.push((c.keys.clone(), hash.clone())),
        }
    }

    /// Configs held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no config is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
// Test tables are tuples on purpose: one row per line reads best.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    type Store =
        BTreeMap<(ConfigKind, String), (BTreeMap<String, String>, BTreeMap<String, ByteString>)>;

    fn store(entries: &[(ConfigKind, &str, &[(&str, &str)], &[(&str, &[u8])])]) -> Store {
        entries
            .iter()
            .map(|(kind, name, data, bin)| {
                let data = data
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let bin = bin
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect();
                ((*kind, name.to_string()), (data, bin))
            })
            .collect()
    }

    /// Every consumption watched, no spec.
    fn all_watched(watched: &[Consumption]) -> Watch {
        Watch {
            providers: Vec::new(),
            candidates: watched
                .iter()
                .map(|c| crate::opt_in::Candidate {
                    consumption: c.clone(),
                    reason: Some(crate::opt_in::Reason::Auto),
                })
                .collect(),
            spec: [0; 8],
        }
    }

    fn hash(watched: &[Consumption], s: &Store) -> ContentHash {
        content_hash(&all_watched(watched), |kind, name| {
            let (data, bin) = s.get(&(kind, name.to_owned()))?;
            Some(match kind {
                ConfigKind::ConfigMap => ConfigData::ConfigMap {
                    data: Some(data),
                    binary_data: Some(bin),
                },
                ConfigKind::Secret => ConfigData::Secret { data: Some(bin) },
            })
        })
    }

    fn whole(kind: ConfigKind, name: &str, optional: bool) -> Consumption {
        Consumption {
            kind,
            name: name.into(),
            keys: Keys::All,
            optional,
        }
    }

    fn only(kind: ConfigKind, name: &str, keys: &[&str]) -> Consumption {
        let keys = keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        Consumption {
            kind,
            name: name.into(),
            keys: Keys::Only(keys),
            optional: false,
        }
    }

    use ConfigKind::{ConfigMap, Secret};

    fn base() -> Store {
        store(&[
            (
                ConfigMap,
                "app",
                &[("a", "1"), ("b", "2")],
                &[("bin", b"\x00\x01")],
            ),
            (Secret, "creds", &[], &[("user", b"u"), ("pw", b"p")]),
        ])
    }

    #[test]
    fn golden_values() {
        // The content hash (version 2) and the watched-set digest, computed independently from the
        // documented encoding (a short Python script, hashlib). The config digests they build on
        // are unchanged since version 1: baselines written by older versions still compare.
        let s = base();
        let cases: [(&[Consumption], &str, &str); 4] = [
            (
                &[],
                "ba054f4cab40efa782f99de278bdbbf0fd817c8878675bdec37c12f9fd6a3550",
                "7399b87cbd4c8b406e0585a233a7ece3c2424531f9cbb96bf6eb18a6560bc219",
            ),
            (
                &[whole(ConfigMap, "app", false)],
                "59d67c20c764b05b1482f35c833a355b6625b88753c69c913e49ef965482de19",
                "c9cdcd4353245af8041c6c51c8b3ebe9c8bab257713035e9bc583666f5f9a93f",
            ),
            (
                &[
                    only(ConfigMap, "app", &["a"]),
                    only(Secret, "creds", &["pw"]),
                ],
                "4c778e0ad18be7b9239f45f4618e58b12ce3c03a93827d55b640e2bf8df92b22",
                "243b559297b00d7b884ed5f13a67795d09c31d9086fa90bf94c3927b94af026c",
            ),
            (
                &[whole(ConfigMap, "missing", true)],
                "db48e9907d44c86ae2bf3710f21b43d00e0656ff80f14d4b8ee98b846140e096",
                "833d5bd6561e2e43e3faa8f06d587aa2edca10bf1d99798d994c3c6cb58b7d92",
            ),
        ];
        for (watched, want, want_set) in cases {
            let got = hash(watched, &s);
            assert_eq!(got.hex, want, "{watched:?}");
            assert_eq!(got.watched_hex, want_set, "{watched:?}");
        }
        // The watched set does not depend on content.
        assert_eq!(
            hash(&[whole(ConfigMap, "app", false)], &Store::new()).watched_hex,
            "c9cdcd4353245af8041c6c51c8b3ebe9c8bab257713035e9bc583666f5f9a93f"
        );
    }

    #[test]
    fn config_digests_are_those_of_version_1() {
        // Baselines written by older versions hold these: computed independently (Python).
        let s = base();
        let got = hash(
            &[
                whole(ConfigMap, "app", false),
                only(Secret, "creds", &["pw"]),
            ],
            &s,
        );
        let digests: Vec<String> = got
            .configs
            .iter()
            .map(|c| to_hex(&c.content.expect("present")))
            .collect();
        assert_eq!(digests, ["bc46247fe3ff8f93", "c62b4a7fbb9c1e08"]);
    }

    #[test]
    fn secret_provider_classes_follow_configs_in_the_encoding() {
        use crate::opt_in::ProviderCandidate;
        // Computed independently from the documented encoding (Python, hashlib).
        let s = base();
        let mut watch = all_watched(&[whole(ConfigMap, "app", false)]);
        watch.providers.push(ProviderCandidate {
            name: "vault".into(),
            reason: Some(crate::opt_in::Reason::Auto),
        });
        let objects = |v: &str| {
            vec![
                ProviderObject {
                    id: "b-key".into(),
                    version: "2".into(),
                },
                ProviderObject {
                    id: "a-key".into(),
                    version: v.into(),
                },
            ]
        };
        let mounted = objects("1");
        let got = content_hash_with_providers(
            &watch,
            |kind, name| {
                let (data, bin) = s.get(&(kind, name.to_owned()))?;
                Some(ConfigData::ConfigMap {
                    data: Some(data),
                    binary_data: Some(bin),
                })
            },
            |_| Some(&mounted[..]),
        );
        assert_eq!(
            got.hex,
            "b3718d15ae715f512223702eae492dd2ec0bb97d8b8507e08000eeae69ac5bca"
        );
        assert_eq!(
            got.watched_hex,
            "8493c4915027b0a74f8caa95e83c7f81cc8940244e8bf32c5335f08baecaf530"
        );
        let class = got.configs.last().unwrap();
        assert_eq!(class.kind, SourceKind::SecretProviderClass);
        let ids: Vec<&str> = class.keys.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a-key", "b-key"]);
        // A version change moves it; not watched, only its own digest moves.
        let lookup = |kind: ConfigKind, name: &str| {
            let (data, bin) = s.get(&(kind, name.to_owned()))?;
            Some(ConfigData::ConfigMap {
                data: Some(data),
                binary_data: Some(bin),
            })
        };
        let newer = objects("2");
        let changed = content_hash_with_providers(&watch, lookup, |_| Some(&newer[..]));
        assert_ne!(changed.hex, got.hex);
        watch.providers[0].reason = None;
        let quiet_before = content_hash_with_providers(&watch, lookup, |_| Some(&mounted[..]));
        let quiet_after = content_hash_with_providers(&watch, lookup, |_| Some(&newer[..]));
        assert_eq!(quiet_before.hex, quiet_after.hex);
        assert_eq!(
            quiet_before.hex,
            hash(&[whole(ConfigMap, "app", false)], &s).hex
        );
        assert_ne!(
            quiet_before.configs.last().unwrap().content,
            quiet_after.configs.last().unwrap().content
        );
        // No mount recorded: absent, never required.
        let none = content_hash_with_providers(&watch, lookup, |_| None);
        assert!(none.configs.last().unwrap().content.is_none());
        assert!(none.missing_required.is_empty());
    }

    #[test]
    fn changes_only_when_a_read_key_changes() {
        let watched = [
            only(ConfigMap, "app", &["a"]),
            whole(Secret, "creds", false),
        ];
        let before = hash(&watched, &base()).hex;
        let edits: [(&str, fn(&mut Store), bool); 7] = [
            (
                "unread key changed",
                |s| {
                    s.get_mut(&(ConfigMap, "app".into()))
                        .unwrap()
                        .0
                        .insert("b".into(), "9".into());
                },
                false,
            ),
            (
                "unread key added",
                |s| {
                    s.get_mut(&(ConfigMap, "app".into()))
                        .unwrap()
                        .0
                        .insert("c".into(), "9".into());
                },
                false,
            ),
            (
                "unread binary key changed",
                |s| {
                    s.get_mut(&(ConfigMap, "app".into()))
                        .unwrap()
                        .1
                        .insert("bin".into(), ByteString(vec![7]));
                },
                false,
            ),
            (
                "read key changed",
                |s| {
                    s.get_mut(&(ConfigMap, "app".into()))
                        .unwrap()
                        .0
                        .insert("a".into(), "9".into());
                },
                true,
            ),
            (
                "read key removed",
                |s| {
                    s.get_mut(&(ConfigMap, "app".into())).unwrap().0.remove("a");
                },
                true,
            ),
            (
                "whole object: key added",
                |s| {
                    s.get_mut(&(Secret, "creds".into()))
                        .unwrap()
                        .1
                        .insert("x".into(), ByteString(vec![]));
                },
                true,
            ),
            (
                "whole object: deleted",
                |s| {
                    s.remove(&(Secret, "creds".into()));
                },
                true,
            ),
        ];
        for (what, edit, changes) in edits {
            let mut s = base();
            edit(&mut s);
            assert_eq!(hash(&watched, &s).hex != before, changes, "{what}");
        }
    }

    #[test]
    fn binary_data_counts_and_sources_are_distinct() {
        let watched = [whole(ConfigMap, "app", false)];
        let before = hash(&watched, &base()).hex;
        let mut s = base();
        s.get_mut(&(ConfigMap, "app".into()))
            .unwrap()
            .1
            .insert("bin".into(), ByteString(vec![9]));
        assert_ne!(hash(&watched, &s).hex, before);
        // The same bytes moved from data to binaryData are a different object.
        let a = store(&[(ConfigMap, "x", &[("k", "v")], &[])]);
        let b = store(&[(ConfigMap, "x", &[], &[("k", b"v")])]);
        let w = [whole(ConfigMap, "x", false)];
        assert_ne!(hash(&w, &a).hex, hash(&w, &b).hex);
        let w = [only(ConfigMap, "x", &["k"])];
        assert_ne!(hash(&w, &a).hex, hash(&w, &b).hex);
    }

    #[test]
    fn absent_is_distinct_from_empty_and_order_free() {
        let empty = store(&[(ConfigMap, "x", &[], &[])]);
        let none = Store::new();
        let w = [whole(ConfigMap, "x", true)];
        assert_ne!(hash(&w, &empty).hex, hash(&w, &none).hex);
        assert!(hash(&w, &none).missing_required.is_empty());
        let w = [whole(ConfigMap, "x", false)];
        assert_eq!(
            hash(&w, &none).missing_required,
            [(ConfigMap, "x".to_owned())]
        );
        // Same name, other kind: a different object.
        let s = store(&[(ConfigMap, "n", &[], &[]), (Secret, "n", &[], &[])]);
        let ab = [whole(ConfigMap, "n", false), whole(Secret, "n", false)];
        let ba = [whole(Secret, "n", false), whole(ConfigMap, "n", false)];
        assert_eq!(hash(&ab, &s).hex, hash(&ba, &s).hex);
        assert_ne!(hash(&ab[..1], &s).hex, hash(&ba[..1], &s).hex);
    }

    #[test]
    fn length_prefixes_prevent_ambiguity() {
        let a = store(&[(ConfigMap, "x", &[("ab", "c")], &[])]);
        let b = store(&[(ConfigMap, "x", &[("a", "bc")], &[])]);
        let w = [whole(ConfigMap, "x", false)];
        assert_ne!(hash(&w, &a).hex, hash(&w, &b).hex);
    }

    proptest::proptest! {
        /// For any data and any set of read keys: changing an unread key keeps the hash, changing
        /// a read key changes it.
        #[test]
        fn only_read_keys_matter(
            data in proptest::collection::btree_map("[a-e]{1,2}", "[a-z]{0,4}", 1..8),
            read in proptest::collection::btree_set("[a-e]{1,2}", 1..4),
            pick in 0usize..8,
            value in "[A-Z]{1,3}",
        ) {
            let keys: Vec<&String> = data.keys().collect();
            let key = keys[pick % keys.len()].clone();
            let s = |data: &BTreeMap<String, String>| -> Store {
                BTreeMap::from([((ConfigMap, "x".to_owned()), (data.clone(), BTreeMap::new()))])
            };
            let watched = [Consumption {
                kind: ConfigMap,
                name: "x".into(),
                keys: Keys::Only(read.clone()),
                optional: false,
            }];
            let before = hash(&watched, &s(&data)).hex;
            let mut changed = data.clone();
            // Upper-case values never occur in the generated data, so this is a real change.
            changed.insert(key.clone(), value);
            let after = hash(&watched, &s(&changed)).hex;
            proptest::prop_assert_eq!(before != after, read.contains(&key));
        }
    }
    #[test]
    fn the_hash_cache_answers_only_for_the_version_and_keys_it_was_given() {
        let cm = |keys: Keys| Consumption {
            kind: ConfigKind::ConfigMap,
            name: "app".into(),
            keys,
            optional: false,
        };
        let whole = cm(Keys::All);
        let one = cm(Keys::Only(BTreeSet::from(["a".to_string()])));
        let data = BTreeMap::from([("a".to_string(), "1".to_string())]);
        let object = k8s_openapi::api::core::v1::ConfigMap {
            data: Some(data),
            ..Default::default()
        };
        let hash = |c: &Consumption| hash_config(c, Some(ConfigData::from_config_map(&object)));
        let mut cache = HashCache::new(2);
        cache.put("ns", &whole, "10", &hash(&whole));
        assert_eq!(cache.get("ns", &whole, "10"), Some(&hash(&whole)));
        assert_eq!(cache.get("ns", &whole, "11"), None, "another version");
        assert_eq!(cache.get("other", &whole, "10"), None, "another namespace");
        assert_eq!(cache.get("ns", &one, "10"), None, "other keys");
        cache.put("ns", &one, "10", &hash(&one));
        assert_eq!(cache.get("ns", &one, "10"), Some(&hash(&one)));
        assert_eq!(cache.get("ns", &whole, "10"), Some(&hash(&whole)));
        // A newer version replaces the config's hashes.
        cache.put("ns", &one, "12", &hash(&one));
        assert_eq!(cache.get("ns", &whole, "10"), None);
        assert_eq!(cache.len(), 1);
        // Bounded: past its capacity it starts empty again.
        cache.put("b", &one, "1", &hash(&one));
        cache.put("c", &one, "1", &hash(&one));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get("c", &one, "1"), Some(&hash(&one)));
    }
}
