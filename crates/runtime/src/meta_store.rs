//! Where an [`Informer`](crate::Informer) keeps its objects: kube's reflector store
//! ([`KubeStore`], any kind, the whole object), or [`MetaStore`], a compact store of metadata for
//! kinds with very many objects (ConfigMaps, Secrets).
//!
//! [`MetaStore`] keeps of each object its namespace (one shared string per namespace), name,
//! resourceVersion, labels and annotations (as compact sorted lists, not maps), its
//! deletionTimestamp, and its uid only when it has annotations (the objects some controller
//! refers to by annotation: copy targets, kopy sources; a uid tells a re-created object from the
//! old one and links Events). Nothing else of the metadata is read by any controller. At 100,000
//! objects this is a fraction of kube's store, which keeps a full `ObjectMeta` per object and a
//! key with copies of name, namespace, uid and resourceVersion.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};

use crate::sync::{lock, read, write};

/// The initial state handed to a subscriber: objects by position.
pub trait Snapshot<K>: Send + Sync {
    /// How many objects.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The object at `index`.
    fn get(&self, index: usize) -> Option<Arc<K>>;
}

impl<K: Send + Sync> Snapshot<K> for Vec<Arc<K>> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, index: usize) -> Option<Arc<K>> {
        self.as_slice().get(index).cloned()
    }
}

/// How an informer stores its objects (implemented by [`KubeStore`] and [`MetaStore`]). The
/// informer's driver is the only writer; readers share it.
pub trait Backend<K>: Send + Sync + 'static {
    /// What a re-list is diffed against: the state before it.
    type Before: Send;

    /// Applies one watch event (a re-list is swapped in whole at `InitDone`).
    fn apply(&self, event: &Event<K>);
    /// The stored version of the object with `obj`'s namespace and name.
    fn get_like(&self, obj: &K) -> Option<Arc<K>>;
    /// How many objects are stored.
    fn len(&self) -> usize;
    /// Whether none is.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every stored object, for a new subscriber.
    fn snapshot(&self) -> Arc<dyn Snapshot<K>>;
    /// The state before a re-list.
    fn before(&self) -> Self::Before;
    /// Takes `obj`'s old version out of `before`: the old version, and whether `obj` differs
    /// from it (is new, or has another resourceVersion).
    fn take(&self, before: &mut Self::Before, obj: &K) -> (Option<Arc<K>>, bool);
    /// What is left in `before` after the re-list: the objects deleted meanwhile.
    fn rest(&self, before: Self::Before) -> Vec<Arc<K>>;
}

/// kube's reflector store: every object whole.
pub struct KubeStore<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Mutex<Writer<K>>,
    store: Store<K>,
    dyntype: K::DynamicType,
}

impl<K: Resource + Clone + 'static> KubeStore<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub(crate) fn new(dyntype: K::DynamicType) -> Self {
        let writer = Writer::new(dyntype.clone());
        KubeStore {
            store: writer.as_reader(),
            writer: Mutex::new(writer),
            dyntype,
        }
    }

    /// The reader.
    pub(crate) fn store(&self) -> Store<K> {
        self.store.clone()
    }
}

impl<K> Backend<K> for KubeStore<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    type Before = HashMap<ObjectRef<K>, Arc<K>>;

    fn apply(&self, event: &Event<K>) {
        lock(&self.writer).apply_watcher_event(event);
    }

    fn get_like(&self, obj: &K) -> Option<Arc<K>> {
        self.store
            .get(&ObjectRef::from_obj_with(obj, self.dyntype.clone()))
    }

    fn len(&self) -> usize {
        self.store.len()
    }

    fn snapshot(&self) -> Arc<dyn Snapshot<K>> {
        Arc::new(self.store.state())
    }

    fn before(&self) -> Self::Before {
        self.store
            .state()
            .into_iter()
            .map(|o| (ObjectRef::from_obj_with(&*o, self.dyntype.clone()), o))
            .collect()
    }

    fn take(&self, before: &mut Self::Before, obj: &K) -> (Option<Arc<K>>, bool) {
        let old = before.remove(&ObjectRef::from_obj_with(obj, self.dyntype.clone()));
        let changed = old
            .as_ref()
            .is_none_or(|old| old.resource_version() != obj.resource_version());
        (old, changed)
    }

    fn rest(&self, before: Self::Before) -> Vec<Arc<K>> {
        before.into_values().collect()
    }
}

/// A sorted list of key/value pairs: a label or annotation map in a fraction of a `BTreeMap`'s
/// memory.
type Pairs = Box<[(Box<str>, Box<str>)]>;

fn pairs(map: Option<&BTreeMap<String, String>>) -> Option<Pairs> {
    let map = map.filter(|m| !m.is_empty())?;
    Some(
        map.iter()
            .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
            .collect(),
    )
}

fn find<'a>(pairs: Option<&'a Pairs>, key: &str) -> Option<&'a str> {
    let pairs = pairs?;
    let i = pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
    pairs.get(i).map(|(_, v)| &**v)
}

fn map(pairs: Option<&Pairs>) -> Option<BTreeMap<String, String>> {
    pairs.map(|p| {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

/// What [`MetaStore`] keeps of one object (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMeta {
    namespace: Arc<str>,
    name: Arc<str>,
    resource_version: Box<str>,
    uid: Option<Box<str>>,
    labels: Option<Pairs>,
    annotations: Option<Pairs>,
    deletion_timestamp: Option<Time>,
}

impl StoredMeta {
    /// The namespace (empty for a cluster-scoped object).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The resourceVersion.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// The uid, kept only for objects with annotations.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        find(self.labels.as_ref(), key)
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(self.annotations.as_ref(), key)
    }

    /// Whether the object has any annotation.
    pub fn has_annotations(&self) -> bool {
        self.annotations.is_some()
    }

    /// The labels as a map (`None` when there are none).
    pub fn labels(&self) -> Option<BTreeMap<String, String>> {
        map(self.labels.as_ref())
    }

    /// The annotations as a map (`None` when there are none).
    pub fn annotations(&self) -> Option<BTreeMap<String, String>> {
        map(self.annotations.as_ref())
    }

    /// The metadata as kube's type (only what is kept is set).
    pub fn to_meta(&self) -> ObjectMeta {
        ObjectMeta {
            namespace: (!self.namespace.is_empty()).then(|| self.namespace.to_string()),
            name: Some(self.name.to_string()),
            resource_version: Some(self.resource_version.to_string()),
            uid: self.uid.as_deref().map(str::to_owned),
            labels: self.labels(),
            annotations: self.annotations(),
            deletion_timestamp: self.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        }
    }
}

/// Objects by namespace (each namespace's string stored once, shared by its objects), then name.
type Maps = HashMap<Arc<str>, HashMap<Arc<str>, Arc<StoredMeta>>>;

#[derive(Default)]
struct Inner {
    state: RwLock<(Maps, usize)>,
    /// The list in progress, swapped in at `InitDone`.
    buffer: Mutex<Option<(Maps, usize)>>,
}

/// A compact store of the metadata of the objects of one kind (see the module docs). Cheap to
/// clone; clones share the store.
pub struct MetaStore<X> {
    inner: Arc<Inner>,
    _kind: PhantomData<fn() -> X>,
}

impl<X> Clone for MetaStore<X> {
    fn clone(&self) -> Self {
        MetaStore {
            inner: self.inner.clone(),
            _kind: PhantomData,
        }
    }
}

impl<X> std::fmt::Debug for MetaStore<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore")
            .field("objects", &self.len())
            .finish()
    }
}

impl<X> Default for MetaStore<X> {
    fn default() -> Self {
        MetaStore {
            inner: Arc::default(),
            _kind: PhantomData,
        }
    }
}

impl<X> MetaStore<X> {
    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<StoredMeta>> {
        read(&self.inner.state).0.get(namespace)?.get(name).cloned()
    }

    /// Every object, in no particular order.
    pub fn state(&self) -> Vec<Arc<StoredMeta>> {
        let state = read(&self.inner.state);
        state.0.values().flat_map(|m| m.values().cloned()).collect()
    }

    /// Every object of `namespace`, in no particular order.
    pub fn state_in(&self, namespace: &str) -> Vec<Arc<StoredMeta>> {
        read(&self.inner.state)
            .0
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// How many objects.
    pub fn len(&self) -> usize {
        read(&self.inner.state).1
    }

    /// How many objects `namespace` holds.
    pub fn len_in(&self, namespace: &str) -> usize {
        read(&self.inner.state)
            .0
            .get(namespace)
            .map_or(0, |m| m.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `obj` as kept: its namespace shared with the objects of `maps` in the same namespace.
fn compact(maps: &Maps, meta: &ObjectMeta) -> StoredMeta {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let namespace = maps
        .get_key_value(ns)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| Arc::from(ns));
    let annotations = pairs(meta.annotations.as_ref());
    StoredMeta {
        namespace,
        name: Arc::from(meta.name.as_deref().unwrap_or_default()),
        resource_version: Box::from(meta.resource_version.as_deref().unwrap_or_default()),
        uid: annotations.as_ref().and(meta.uid.as_deref()).map(Box::from),
        labels: pairs(meta.labels.as_ref()),
        annotations,
        deletion_timestamp: meta.deletion_timestamp.clone(),
    }
}

fn insert(maps: &mut (Maps, usize), meta: &ObjectMeta) {
    let stored = compact(&maps.0, meta);
    let ns = stored.namespace.clone();
    let name = stored.name.clone();
    if maps
        .0
        .entry(ns)
        .or_default()
        .insert(name, Arc::new(stored))
        .is_none()
    {
        maps.1 += 1;
    }
}

fn remove(maps: &mut (Maps, usize), meta: &ObjectMeta) {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let Some(names) = maps.0.get_mut(ns) else {
        return;
    };
    if names.remove(name).is_some() {
        maps.1 -= 1;
    }
    if names.is_empty() {
        maps.0.remove(ns);
    }
}

/// The object as subscribers see it.
pub(crate) fn materialize<X>(stored: &StoredMeta) -> Arc<PartialObjectMeta<X>> {
    Arc::new(PartialObjectMeta {
        types: None,
        metadata: stored.to_meta(),
        _phantom: PhantomData,
    })
}

struct MetaSnapshot<X> {
    objects: Vec<Arc<StoredMeta>>,
    _kind: PhantomData<fn() -> X>,
}

impl<X> Snapshot<PartialObjectMeta<X>> for MetaSnapshot<X> {
    fn len(&self) -> usize {
        self.objects.len()
    }

    fn get(&self, index: usize) -> Option<Arc<PartialObjectMeta<X>>> {
        self.objects.get(index).map(|o| materialize(o.as_ref()))
    }
}

impl<X: 'static> Backend<PartialObjectMeta<X>> for MetaStore<X> {
    type Before = Maps;

    fn apply(&self, event: &Event<PartialObjectMeta<X>>) {
        match event {
            Event::Init => *lock(&self.inner.buffer) = Some((Maps::new(), 0)),
            Event::InitApply(obj) => {
                if let Some(buffer) = lock(&self.inner.buffer).as_mut() {
                    insert(buffer, &obj.metadata);
                }
            }
            Event::InitDone => {
                if let Some(mut buffer) = lock(&self.inner.buffer).take() {
                    buffer.0.shrink_to_fit();
                    *write(&self.inner.state) = buffer;
                }
            }
            Event::Apply(obj) => insert(&mut write(&self.inner.state), &obj.metadata),
            Event::Delete(obj) => remove(&mut write(&self.inner.state), &obj.metadata),
        }
    }

    fn get_like(&self, obj: &PartialObjectMeta<X>) -> Option<Arc<PartialObjectMeta<X>>> {
        let m = &obj.metadata;
        let stored = self.get(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        )?;
        Some(materialize(&stored))
    }

    fn len(&self) -> usize {
        MetaStore::len(self)
    }

    fn snapshot(&self) -> Arc<dyn Snapshot<PartialObjectMeta<X>>> {
        Arc::new(MetaSnapshot {
            objects: self.state(),
            _kind: PhantomData,
        })
    }

    fn before(&self) -> Maps {
        read(&self.inner.state).0.clone()
    }

    fn take(
        &self,
        before: &mut Maps,
        obj: &PartialObjectMeta<X>,
    ) -> (Option<Arc<PartialObjectMeta<X>>>, bool) {
        let m = &obj.metadata;
        let old = before
            .get_mut(m.namespace.as_deref().unwrap_or_default())
            .and_then(|names| names.remove(m.name.as_deref().unwrap_or_default()));
        let changed = old
            .as_ref()
            .is_none_or(|old| Some(&*old.resource_version) != m.resource_version.as_deref());
        (old.map(|o| materialize(&o)), changed)
    }

    fn rest(&self, before: Maps) -> Vec<Arc<PartialObjectMeta<X>>> {
        before
            .into_values()
            .flat_map(|m| m.into_values())
            .map(|o| materialize(&o))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn obj(ns: &str, name: &str, rv: &str) -> PartialObjectMeta<ConfigMap> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                uid: Some("u-1".into()),
                labels: Some(
                    [
                        ("b".to_owned(), "2".to_owned()),
                        ("a".to_owned(), "1".to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            _phantom: PhantomData,
        }
    }

    #[test]
    fn keeps_what_controllers_read_and_shares_namespaces() {
        let store = MetaStore::<ConfigMap>::default();
        store.apply(&Event::Init);
        store.apply(&Event::InitApply(obj("ns", "a", "1")));
        let mut annotated = obj("ns", "b", "2");
        annotated.metadata.annotations = Some([("k".to_owned(), "v".to_owned())].into());
        store.apply(&Event::InitApply(annotated));
        assert!(store.is_empty(), "a list in progress is not visible");
        store.apply(&Event::InitDone);
        assert_eq!(store.len(), 2);
        let (a, b) = (
            store.get("ns", "a").expect("a"),
            store.get("ns", "b").expect("b"),
        );
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert_eq!(a.label("a"), Some("1"));
        assert_eq!(a.label("b"), Some("2"));
        assert_eq!(a.label("c"), None);
        assert_eq!(a.uid(), None, "no annotations, no uid");
        assert_eq!(b.uid(), Some("u-1"));
        assert_eq!(b.annotation("k"), Some("v"));
        let meta = b.to_meta();
        assert_eq!(meta.resource_version.as_deref(), Some("2"));
        assert_eq!(meta.labels.map(|l| l.len()), Some(2));
        store.apply(&Event::Delete(obj("ns", "a", "3")));
        store.apply(&Event::Delete(obj("ns", "b", "3")));
        assert!(store.is_empty());
        assert!(store.state_in("ns").is_empty());
    }
}
