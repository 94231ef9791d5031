//! When a ConfigMap/Secret event must wake its referrers (docs/design.md 3.3). Pure: the caller passes
//! what it observed, [`Trigger::decide`] answers.
//!
//! Two modes:
//! - [`Mode::Upstream`] is Flux 2.7+ exactly, i.e. controller-runtime's
//!   `ResourceVersionChangedPredicate` and the `--watch-configs-label-selector` predicate
//!   (`predicate.NewPredicateFuncs`) on a metadata-only watch: create and delete always pass the
//!   resourceVersion rule, an update passes only if `resourceVersion` changed; the selector is
//!   evaluated on the object of a create, the **new** object of an update and the last known object
//!   of a delete. When the event passes, the referrers of the object's key are enqueued (for an update
//!   upstream maps both old and new object; they have the same key, so one lookup covers both).
//! - [`Mode::DataHash`] fires only when the data changed (label-only or status-like writes do
//!   nothing) and when a source is created that referrers are waiting for.
//!
//! In both modes the selector is the opt-in: an object that does not match never fires.
//!
//! ```
//! use std::collections::BTreeMap;
//! use conflux_watch_index::trigger::{Decision, Event, Mode, Observed, Trigger, Why};
//!
//! let trigger = Trigger::from_flag("reconcile.fluxcd.io/watch=Enabled", Mode::Upstream).unwrap();
//! let labels = BTreeMap::from([("reconcile.fluxcd.io/watch".to_owned(), "Enabled".to_owned())]);
//! let old = Observed::new(&labels, "41");
//! let new = Observed::new(&labels, "42");
//! let event = Event::Updated { old, new };
//! assert_eq!(trigger.decide(&event, true), Decision::Fire(Why::ResourceVersionChanged));
//! ```

use crate::Result;
use crate::selector::{Labels, Selector};

/// Flux's default for `--watch-configs-label-selector`.
pub const DEFAULT_WATCH_CONFIGS_SELECTOR: &str = "reconcile.fluxcd.io/watch=Enabled";

/// How events are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Flux 2.7 behaviour, exactly.
    #[default]
    Upstream,
    /// Fire on data changes and on creation of awaited sources only.
    DataHash,
}

/// What the caller knows about one version of a ConfigMap/Secret.
#[derive(Clone, Copy)]
pub struct Observed<'a> {
    /// Its labels (`metadata.labels`; an empty map when absent).
    pub labels: &'a dyn Labels,
    /// `metadata.resourceVersion` (empty when absent, as Go's `GetResourceVersion()`).
    pub resource_version: &'a str,
    /// A hash of `data`/`binaryData`, when the caller computed one. Only [`Mode::DataHash`] reads it.
    pub data_hash: Option<&'a [u8]>,
}

impl std::fmt::Debug for Observed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observed")
            .field("resource_version", &self.resource_version)
            .field("data_hash", &self.data_hash)
            .finish_non_exhaustive()
    }
}

impl<'a> Observed<'a> {
    /// Labels and resourceVersion, no data hash (what a metadata-only watch delivers).
    pub fn new(labels: &'a dyn Labels, resource_version: &'a str) -> Self {
        Observed {
            labels,
            resource_version,
            data_hash: None,
        }
    }

    /// The same, with the hash of the data.
    pub fn with_data_hash(mut self, hash: &'a [u8]) -> Self {
        self.data_hash = Some(hash);
        self
    }
}

/// A watch event on a ConfigMap/Secret.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The object appeared in a watch (`Create` in controller-runtime).
    Created(Observed<'a>),
    /// The object was seen in an initial list with no earlier state known (kube-runtime's
    /// `InitApply`). controller-runtime reports these as creates, so [`Mode::Upstream`] treats it as
    /// one; [`Mode::DataHash`] only records a baseline, or every referrer would reconcile at start-up.
    Listed(Observed<'a>),
    /// The object changed: the previous and the new version (a periodic resync has equal
    /// resourceVersions).
    Updated {
        /// The version before the event.
        old: Observed<'a>,
        /// The version after the event.
        new: Observed<'a>,
    },
    /// The object was deleted; its last known version.
    Deleted(Observed<'a>),
}

/// Why an event fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Why {
    /// Upstream: a create (or initial list) of a matching object.
    Created,
    /// Upstream: an update of a matching object whose resourceVersion changed. Also data-hash mode
    /// when a hash is missing on either side (it cannot prove the data did not change).
    ResourceVersionChanged,
    /// A matching object was deleted.
    Deleted,
    /// Data-hash: the data hash changed.
    DataChanged,
    /// Data-hash: a matching source was created and referrers are waiting for it.
    SourceAppeared,
}

/// Why an event does not fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhyNot {
    /// The object (new one for an update, last known one for a delete) does not match the selector.
    SelectorMismatch,
    /// An update with the same resourceVersion (a resync).
    ResourceVersionUnchanged,
    /// Data-hash: the data hash is the same (a label, annotation or other metadata write).
    DataUnchanged,
    /// Data-hash: a source was created that nothing references.
    NoReferrers,
    /// Data-hash: an initial list only records the baseline.
    Baseline,
}

/// The answer for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Wake the referrers of the object's key.
    Fire(Why),
    /// Do nothing.
    Skip(WhyNot),
}

impl Decision {
    /// Whether the referrers are to be woken.
    pub fn fires(self) -> bool {
        matches!(self, Decision::Fire(_))
    }

    /// A short snake_case reason, for a metric label or a log field.
    pub fn reason(self) -> &'static str {
        match self {
            Decision::Fire(Why::Created) => "created",
            Decision::Fire(Why::ResourceVersionChanged) => "resource_version_changed",
            Decision::Fire(Why::Deleted) => "deleted",
            Decision::Fire(Why::DataChanged) => "data_changed",
            Decision::Fire(Why::SourceAppeared) => "source_appeared",
            Decision::Skip(WhyNot::SelectorMismatch) => "selector_mismatch",
            Decision::Skip(WhyNot::ResourceVersionUnchanged) => "resource_version_unchanged",
            Decision::Skip(WhyNot::DataUnchanged) => "data_unchanged",
            Decision::Skip(WhyNot::NoReferrers) => "no_referrers",
            Decision::Skip(WhyNot::Baseline) => "baseline",
        }
    }
}

/// The configured selector and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    selector: Selector,
    mode: Mode,
}

impl Trigger {
    /// A trigger from a parsed selector.
    pub fn new(selector: Selector, mode: Mode) -> Self {
        Trigger { selector, mode }
    }

    /// A trigger from the value of `--watch-configs-label-selector`, parsed as Flux does
    /// (`labels.Parse`; the empty string selects everything). A bad value is an error with
    /// apimachinery's message, for a start-up failure.
    pub fn from_flag(selector: &str, mode: Mode) -> Result<Self> {
        Ok(Trigger::new(Selector::parse(selector)?, mode))
    }

    /// The selector.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Decides one event. `has_referrers` says whether the index holds referrers of the object's key;
    /// only [`Mode::DataHash`] creates read it (elsewhere an event without referrers enqueues
    /// nothing anyway).
    pub fn decide(&self, event: &Event<'_>, has_referrers: bool) -> Decision {
        use Decision::{Fire, Skip};
        let matches = |o: &Observed<'_>| self.selector.matches(o.labels);
        match (self.mode, event) {
            (_, Event::Created(o) | Event::Listed(o)) | (_, Event::Deleted(o)) if !matches(o) => {
                Skip(WhyNot::SelectorMismatch)
            }
            (_, Event::Updated { new, .. }) if !matches(new) => Skip(WhyNot::SelectorMismatch),
            (_, Event::Deleted(_)) => Fire(Why::Deleted),

            (Mode::Upstream, Event::Created(_) | Event::Listed(_)) => Fire(Why::Created),
            (Mode::Upstream, Event::Updated { old, new }) => rv_rule(old, new),

            (Mode::DataHash, Event::Listed(_)) => Skip(WhyNot::Baseline),
            (Mode::DataHash, Event::Created(_)) if has_referrers => Fire(Why::SourceAppeared),
            (Mode::DataHash, Event::Created(_)) => Skip(WhyNot::NoReferrers),
            (Mode::DataHash, Event::Updated { old, new }) => match (old.data_hash, new.data_hash) {
                (Some(a), Some(b)) if a == b => Skip(WhyNot::DataUnchanged),
                (Some(_), Some(_)) => Fire(Why::DataChanged),
                // A side without a hash cannot prove the data is unchanged: the upstream rule.
                _ => rv_rule(old, new),
            },
        }
    }
}

/// controller-runtime's `ResourceVersionChangedPredicate` for updates.
fn rv_rule(old: &Observed<'_>, new: &Observed<'_>) -> Decision {
    if old.resource_version == new.resource_version {
        Decision::Skip(WhyNot::ResourceVersionUnchanged)
    } else {
        Decision::Fire(Why::ResourceVersionChanged)
    }
}

/// The hash [`Mode::DataHash`] compares: SHA-256 over a Secret's `type` (empty for a ConfigMap),
/// then the `data` and `binaryData` entries sorted by key, every field length-prefixed so that no
/// two different contents encode the same. Values are bytes (Secret data decoded).
pub fn data_hash<'a>(
    type_: &str,
    data: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    binary_data: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    field(type_.as_bytes());
    let mut data: Vec<_> = data.into_iter().collect();
    let mut binary_data: Vec<_> = binary_data.into_iter().collect();
    data.sort_unstable_by_key(|(key, _)| *key);
    binary_data.sort_unstable_by_key(|(key, _)| *key);
    for (section, entries) in [(b"data".as_slice(), data), (b"binaryData", binary_data)] {
        field(section);
        for (key, value) in entries {
            field(key.as_bytes());
            field(value);
        }
    }
    hasher.finalize().into()
}

/// Lower-case hex of `bytes` (digests in annotations).
#[cfg(feature = "runtime")]
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use Decision::{Fire, Skip};

    /// One version of an object in a table row: watch label on/off, resourceVersion, data hash.
    #[derive(Clone, Copy)]
    struct V(bool, &'static str, Option<&'static str>);

    #[derive(Clone, Copy)]
    enum E {
        Create(V),
        List(V),
        Update(V, V),
        Delete(V),
    }

    const ON: bool = true;
    const OFF: bool = false;

    fn run(trigger: &Trigger, e: E, has_referrers: bool) -> Decision {
        let on = BTreeMap::from([("reconcile.fluxcd.io/watch".to_owned(), "Enabled".to_owned())]);
        let off = BTreeMap::from([("app".to_owned(), "x".to_owned())]);
        let obs = |v: V| Observed {
            labels: if v.0 { &on } else { &off },
            resource_version: v.1,
            data_hash: v.2.map(str::as_bytes),
        };
        let event = match e {
            E::Create(v) => Event::Created(obs(v)),
            E::List(v) => Event::Listed(obs(v)),
            E::Update(a, b) => Event::Updated {
                old: obs(a),
                new: obs(b),
            },
            E::Delete(v) => Event::Deleted(obs(v)),
        };
        trigger.decide(&event, has_referrers)
    }

    fn check(mode: Mode, rows: &[(&str, E, bool, Decision)]) {
        let trigger = Trigger::from_flag(DEFAULT_WATCH_CONFIGS_SELECTOR, mode).unwrap();
        for &(name, e, refs, want) in rows {
            assert_eq!(run(&trigger, e, refs), want, "{mode:?}: {name}");
        }
    }

    #[test]
    fn upstream_rows() {
        use E::*;
        check(
            Mode::Upstream,
            &[
                (
                    "create, labelled",
                    Create(V(ON, "1", None)),
                    true,
                    Fire(Why::Created),
                ),
                (
                    "create, labelled, nothing references it",
                    Create(V(ON, "1", None)),
                    false,
                    Fire(Why::Created),
                ),
                (
                    "create, unlabelled",
                    Create(V(OFF, "1", None)),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "initial list is a create",
                    List(V(ON, "1", None)),
                    true,
                    Fire(Why::Created),
                ),
                (
                    "initial list, unlabelled",
                    List(V(OFF, "1", None)),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "update, rv changed",
                    Update(V(ON, "1", None), V(ON, "2", None)),
                    true,
                    Fire(Why::ResourceVersionChanged),
                ),
                (
                    "update, label-only write still fires",
                    Update(V(ON, "1", Some("h")), V(ON, "2", Some("h"))),
                    true,
                    Fire(Why::ResourceVersionChanged),
                ),
                (
                    "update, resync (same rv)",
                    Update(V(ON, "1", None), V(ON, "1", None)),
                    true,
                    Skip(WhyNot::ResourceVersionUnchanged),
                ),
                (
                    "update, same rv but data hash differs: rv decides",
                    Update(V(ON, "1", Some("a")), V(ON, "1", Some("b"))),
                    true,
                    Skip(WhyNot::ResourceVersionUnchanged),
                ),
                (
                    "update, both rv empty",
                    Update(V(ON, "", None), V(ON, "", None)),
                    true,
                    Skip(WhyNot::ResourceVersionUnchanged),
                ),
                (
                    "update, label added: new labels decide",
                    Update(V(OFF, "1", None), V(ON, "2", None)),
                    true,
                    Fire(Why::ResourceVersionChanged),
                ),
                (
                    "update, label removed: new labels decide",
                    Update(V(ON, "1", None), V(OFF, "2", None)),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "update, unlabelled",
                    Update(V(OFF, "1", None), V(OFF, "2", None)),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "delete, last known labelled",
                    Delete(V(ON, "1", None)),
                    true,
                    Fire(Why::Deleted),
                ),
                (
                    "delete, last known unlabelled",
                    Delete(V(OFF, "1", None)),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
            ],
        );
    }

    #[test]
    fn data_hash_rows() {
        use E::*;
        check(
            Mode::DataHash,
            &[
                (
                    "create, awaited",
                    Create(V(ON, "1", Some("a"))),
                    true,
                    Fire(Why::SourceAppeared),
                ),
                (
                    "create, nothing waits",
                    Create(V(ON, "1", Some("a"))),
                    false,
                    Skip(WhyNot::NoReferrers),
                ),
                (
                    "create, awaited but unlabelled",
                    Create(V(OFF, "1", Some("a"))),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "initial list records a baseline",
                    List(V(ON, "1", Some("a"))),
                    true,
                    Skip(WhyNot::Baseline),
                ),
                (
                    "initial list, unlabelled",
                    List(V(OFF, "1", Some("a"))),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "update, data changed",
                    Update(V(ON, "1", Some("a")), V(ON, "2", Some("b"))),
                    true,
                    Fire(Why::DataChanged),
                ),
                (
                    "update, data changed, no referrers",
                    Update(V(ON, "1", Some("a")), V(ON, "2", Some("b"))),
                    false,
                    Fire(Why::DataChanged),
                ),
                (
                    "update, label-only write",
                    Update(V(ON, "1", Some("a")), V(ON, "2", Some("a"))),
                    true,
                    Skip(WhyNot::DataUnchanged),
                ),
                (
                    "update, label added, data same",
                    Update(V(OFF, "1", Some("a")), V(ON, "2", Some("a"))),
                    true,
                    Skip(WhyNot::DataUnchanged),
                ),
                (
                    "update, data changed, label removed",
                    Update(V(ON, "1", Some("a")), V(OFF, "2", Some("b"))),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
                (
                    "update, resync",
                    Update(V(ON, "1", Some("a")), V(ON, "1", Some("a"))),
                    true,
                    Skip(WhyNot::DataUnchanged),
                ),
                (
                    "update, old hash unknown, rv changed",
                    Update(V(ON, "1", None), V(ON, "2", Some("a"))),
                    true,
                    Fire(Why::ResourceVersionChanged),
                ),
                (
                    "update, new hash unknown, rv changed",
                    Update(V(ON, "1", Some("a")), V(ON, "2", None)),
                    true,
                    Fire(Why::ResourceVersionChanged),
                ),
                (
                    "update, hashes unknown, same rv",
                    Update(V(ON, "1", None), V(ON, "1", None)),
                    true,
                    Skip(WhyNot::ResourceVersionUnchanged),
                ),
                (
                    "delete, last known labelled",
                    Delete(V(ON, "1", Some("a"))),
                    true,
                    Fire(Why::Deleted),
                ),
                (
                    "delete, last known unlabelled",
                    Delete(V(OFF, "1", Some("a"))),
                    true,
                    Skip(WhyNot::SelectorMismatch),
                ),
            ],
        );
    }

    #[test]
    fn reasons_are_distinct_labels() {
        let all = [
            Fire(Why::Created),
            Fire(Why::ResourceVersionChanged),
            Fire(Why::Deleted),
            Fire(Why::DataChanged),
            Fire(Why::SourceAppeared),
            Skip(WhyNot::SelectorMismatch),
            Skip(WhyNot::ResourceVersionUnchanged),
            Skip(WhyNot::DataUnchanged),
            Skip(WhyNot::NoReferrers),
            Skip(WhyNot::Baseline),
        ];
        let labels: std::collections::BTreeSet<&str> = all.iter().map(|d| d.reason()).collect();
        assert_eq!(labels.len(), all.len());
        assert!(
            labels
                .iter()
                .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        );
    }

    #[test]
    fn empty_flag_selects_everything_and_bad_flag_is_an_error() {
        let all = Trigger::from_flag("", Mode::Upstream).unwrap();
        assert!(run(&all, E::Create(V(OFF, "1", None)), false).fires());
        assert!(run(&all, E::Delete(V(OFF, "1", None)), false).fires());
        assert!(Trigger::from_flag("a=(", Mode::Upstream).is_err());
        let owner = Trigger::from_flag("owner!=helm", Mode::DataHash).unwrap();
        assert_eq!(owner.mode(), Mode::DataHash);
        assert_eq!(owner.selector().to_string(), "owner!=helm");
    }

    #[test]
    fn works_with_k8s_openapi_metadata() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let meta = ObjectMeta {
            labels: Some(BTreeMap::from([(
                "reconcile.fluxcd.io/watch".to_owned(),
                "Enabled".to_owned(),
            )])),
            resource_version: Some("7".to_owned()),
            ..ObjectMeta::default()
        };
        let labels = meta.labels.as_ref();
        let o = Observed::new(&labels, meta.resource_version.as_deref().unwrap_or(""));
        let t = Trigger::from_flag(DEFAULT_WATCH_CONFIGS_SELECTOR, Mode::Upstream).unwrap();
        assert_eq!(t.decide(&Event::Deleted(o), false), Fire(Why::Deleted));
    }

    #[test]
    fn data_hash_depends_on_content_only() {
        let a = data_hash("", [("a", b"1".as_slice()), ("b", b"2")], []);
        let same_other_order = data_hash("", [("b", b"2".as_slice()), ("a", b"1")], []);
        assert_eq!(a, same_other_order);
        // Moving bytes between key and value, or between data and binaryData, changes the hash.
        assert_ne!(a, data_hash("", [("a1", b"".as_slice()), ("b", b"2")], []));
        assert_ne!(
            a,
            data_hash("", [("a", b"1".as_slice())], [("b", b"2".as_slice())])
        );
        assert_ne!(
            a,
            data_hash("Opaque", [("a", b"1".as_slice()), ("b", b"2")], [])
        );
    }
}
