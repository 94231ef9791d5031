//! What the pods of each namespace mounted from each SecretProviderClass (CSI integration), from
//! the `SecretProviderClassPodStatus` objects the CSI driver writes (one per pod and class), and
//! the classes' own annotations (`ignore`, `match`).
//!
//! The content conflux hashes for a SecretProviderClass is the `status.objects` (ids and
//! versions) of its **most recently written** status in the namespace, by resourceVersion: the
//! driver writes a status when a pod mounts the class, and again when its rotation finds a new
//! version, so the newest write is the newest thing any pod has seen. It is derived from cluster
//! state alone (the statuses the watch lists), so a restarted controller computes the same
//! content and neither misses nor repeats a rollout. While a rollout replaces the pods, statuses
//! of old and new pods coexist: the new pods' mounts are the newest writes and carry the versions
//! the old pods' rotation would write too, so the content stays put; when the old pods go, their
//! statuses are garbage collected with them, which changes nothing either. A class no pod mounts
//! has no content ("absent"); its first mount after that is not a change that rolls
//! ([`decide`](crate::patch::decide)).
//!
//! A plain data structure, fed by the watch tasks and read by evaluations.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::source::{ProviderMount, ProviderObject};

/// (namespace, name).
type Key = (String, String);

/// One status: its resourceVersion (etcd's integer; 0 when unreadable) and what it mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    version: u64,
    objects: Vec<ProviderObject>,
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct ProviderStore {
    /// (namespace, class) → status name → status.
    mounts: HashMap<Key, BTreeMap<String, Status>>,
    /// (namespace, status name) → its class, to move or drop it.
    class_of: HashMap<Key, String>,
    /// (namespace, class) → the SecretProviderClass's annotations (present: it exists).
    classes: HashMap<Key, BTreeMap<String, String>>,
}

impl ProviderStore {
    /// Whether nothing is known (the CSI integration is off, or nothing exists).
    pub(crate) fn is_empty(&self) -> bool {
        self.mounts.is_empty() && self.classes.is_empty()
    }

    /// The objects of the most recently written status of `class` in `namespace`.
    pub(crate) fn latest(&self, namespace: &str, class: &str) -> Option<&[ProviderObject]> {
        let statuses = self.mounts.get(&(namespace.to_owned(), class.to_owned()))?;
        statuses
            .iter()
            .max_by(|(a_name, a), (b_name, b)| (a.version, a_name).cmp(&(b.version, b_name)))
            .map(|(_, s)| s.objects.as_slice())
    }

    /// A status was written (`mount`), or was deleted or became unreadable (`None`: it no longer
    /// counts). Returns the classes it counted or counts for (see [`changed_by`](Self::changed_by)
    /// for those whose [`latest`](Self::latest) changed).
    pub(crate) fn apply_status(
        &mut self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        mount: Option<ProviderMount>,
    ) -> BTreeSet<String> {
        let mut touched = self.delete_status(namespace, name);
        if let Some(mount) = mount {
            let key = (namespace.to_owned(), mount.class.clone());
            touched.insert(mount.class.clone());
            self.class_of
                .insert((namespace.to_owned(), name.to_owned()), mount.class);
            self.mounts.entry(key).or_default().insert(
                name.to_owned(),
                Status {
                    version: resource_version
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_default(),
                    objects: mount.objects,
                },
            );
        }
        touched
    }

    /// A status was deleted (its pod is gone). Returns the classes it counted for.
    pub(crate) fn delete_status(&mut self, namespace: &str, name: &str) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        if let Some(class) = self
            .class_of
            .remove(&(namespace.to_owned(), name.to_owned()))
        {
            let key = (namespace.to_owned(), class.clone());
            if let Some(statuses) = self.mounts.get_mut(&key) {
                statuses.remove(name);
                if statuses.is_empty() {
                    self.mounts.remove(&key);
                }
            }
            touched.insert(class);
        }
        touched
    }

    /// Runs `change` and keeps, of the classes it reports, those whose latest content differs.
    pub(crate) fn changed_by(
        &mut self,
        namespace: &str,
        change: impl FnOnce(&mut Self) -> BTreeSet<String>,
    ) -> Vec<String> {
        let mut before: HashMap<String, Option<Vec<ProviderObject>>> = HashMap::new();
        // The classes a status can touch are its old class and its new one: snapshot every class
        // of the namespace that has statuses (few), then compare.
        for (ns, class) in self.mounts.keys() {
            if ns == namespace {
                before.insert(class.clone(), self.latest(ns, class).map(<[_]>::to_vec));
            }
        }
        let touched = change(self);
        touched
            .into_iter()
            .filter(|class| {
                let now = self.latest(namespace, class).map(<[_]>::to_vec);
                before.get(class).cloned().unwrap_or_default() != now
            })
            .collect()
    }

    /// A SecretProviderClass exists with `annotations`.
    pub(crate) fn apply_class(
        &mut self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) {
        self.classes
            .insert((namespace.to_owned(), name.to_owned()), annotations);
    }

    /// A SecretProviderClass was deleted.
    pub(crate) fn delete_class(&mut self, namespace: &str, name: &str) {
        self.classes
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// The annotations of a SecretProviderClass, when it exists.
    pub(crate) fn class_annotations(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<&BTreeMap<String, String>> {
        self.classes.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Every SecretProviderClass of `namespace`, sorted.
    pub(crate) fn class_names(&self, namespace: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .classes
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, name)| name.clone())
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(class: &str, version: &str) -> Option<ProviderMount> {
        Some(ProviderMount {
            class: class.into(),
            objects: vec![ProviderObject {
                id: "db-password".into(),
                version: version.into(),
            }],
        })
    }

    fn version(store: &ProviderStore, class: &str) -> Option<String> {
        store
            .latest("ns", class)
            .map(|objects| objects[0].version.clone())
    }

    #[test]
    fn the_newest_write_is_the_content_and_old_and_new_pods_coexist() {
        let mut store = ProviderStore::default();
        // Three pods mounted v1.
        for (i, pod) in ["web-a", "web-b", "web-c"].into_iter().enumerate() {
            let rv = (10 + i).to_string();
            store.apply_status("ns", pod, Some(&rv), mount("vault", "1"));
        }
        assert_eq!(version(&store, "vault").as_deref(), Some("1"));
        // Rotation writes v2 into one pod's status: the class changed.
        let changed = store.changed_by("ns", |s| {
            s.apply_status("ns", "web-a", Some("20"), mount("vault", "2"))
        });
        assert_eq!(changed, ["vault"]);
        assert_eq!(version(&store, "vault").as_deref(), Some("2"));
        // The rollout's new pods mount v2 while the old ones still exist, and rotation writes v2
        // into the old ones: nothing changes.
        for (pod, rv) in [("web-d", "21"), ("web-b", "22"), ("web-e", "23")] {
            let changed = store.changed_by("ns", |s| {
                s.apply_status("ns", pod, Some(rv), mount("vault", "2"))
            });
            assert!(changed.is_empty(), "{pod}");
        }
        // A status rewritten unchanged (its node label) changes nothing either.
        let changed = store.changed_by("ns", |s| {
            s.apply_status("ns", "web-d", Some("24"), mount("vault", "2"))
        });
        assert!(changed.is_empty());
        // The old pods go: their statuses are collected.
        for pod in ["web-a", "web-b", "web-c"] {
            store.changed_by("ns", |s| s.delete_status("ns", pod));
        }
        assert_eq!(version(&store, "vault").as_deref(), Some("2"));
        // Scaled to zero: no content.
        for pod in ["web-d", "web-e"] {
            store.changed_by("ns", |s| s.delete_status("ns", pod));
        }
        assert_eq!(version(&store, "vault"), None);
        assert!(store.mounts.is_empty() && store.class_of.is_empty());
    }

    #[test]
    fn a_status_can_move_classes_become_unreadable_and_namespaces_are_apart() {
        let mut store = ProviderStore::default();
        store.apply_status("ns", "p", Some("1"), mount("a", "1"));
        store.apply_status("other", "p", Some("2"), mount("a", "9"));
        let changed = store.changed_by("ns", |s| {
            s.apply_status("ns", "p", Some("3"), mount("b", "1"))
        });
        assert_eq!(changed, ["a", "b"]);
        assert_eq!(version(&store, "a"), None);
        assert_eq!(version(&store, "b").as_deref(), Some("1"));
        let changed = store.changed_by("ns", |s| s.apply_status("ns", "p", Some("4"), None));
        assert_eq!(changed, ["b"], "an unreadable status no longer counts");
        assert_eq!(
            store.latest("other", "a").map(|o| o[0].version.as_str()),
            Some("9")
        );
        store.apply_class("ns", "b", BTreeMap::from([("k".into(), "v".into())]));
        store.apply_class("ns", "a", BTreeMap::new());
        assert_eq!(store.class_names("ns"), ["a", "b"]);
        assert!(store.class_annotations("ns", "b").is_some());
        store.delete_class("ns", "b");
        assert!(store.class_annotations("ns", "b").is_none());
        assert!(store.class_names("other").is_empty());
    }
}
