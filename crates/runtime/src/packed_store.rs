//! [`PackedStore`]: an informer [`Backend`] that keeps each object as its compact JSON text and
//! parses it again when asked.
//!
//! A `DynamicObject` held as a `serde_json::Value` tree costs about ten times its JSON: every map,
//! however small, is a B-tree node of some 600 bytes, and every key and string its own allocation.
//! A small Deployment trimmed to what reload reads is about 1 KB of JSON and 10 KB as a tree. For
//! kinds with many objects that are read rarely (on a change, or when a subscriber starts), the
//! text is the cheaper copy: a read costs one parse of one object.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::meta_store::{Backend, Snapshot};
use crate::sync::{lock, read, write};

/// (namespace, name).
type Key = (Box<str>, Box<str>);

/// One object as kept.
#[derive(Clone)]
struct Packed {
    resource_version: Box<str>,
    // Shared, so the state before a re-list is a cheap copy.
    json: Arc<str>,
}

type Objects = HashMap<Key, Packed>;

/// A [`PackedStore`]'s objects before a re-list (what the re-list is diffed against).
pub struct Before(Objects);

struct Inner {
    state: RwLock<Objects>,
    /// The initial list being received (swapped in whole at `InitDone`).
    buffer: Mutex<Option<Objects>>,
}

/// Every object of one kind as its JSON text (see the module docs). Cheap to clone; clones share
/// the store. Objects that cannot be written as JSON are not kept (a warning says which).
pub struct PackedStore<K> {
    inner: Arc<Inner>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for PackedStore<K> {
    fn clone(&self) -> Self {
        PackedStore {
            inner: self.inner.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> Default for PackedStore<K> {
    fn default() -> Self {
        PackedStore {
            inner: Arc::new(Inner {
                state: RwLock::default(),
                buffer: Mutex::default(),
            }),
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for PackedStore<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedStore")
            .field("objects", &read(&self.inner.state).len())
            .finish()
    }
}

fn key<K: ResourceExt>(obj: &K) -> Key {
    (
        obj.namespace().unwrap_or_default().into(),
        obj.name_any().into(),
    )
}

fn pack<K: ResourceExt + Serialize>(obj: &K) -> Option<Packed> {
    match serde_json::to_string(obj) {
        Ok(json) => Some(Packed {
            resource_version: obj.resource_version().unwrap_or_default().into(),
            json: json.into(),
        }),
        Err(err) => {
            // Not expected: the object was just read from JSON.
            warn!(name = %obj.name_any(), error = %err, "cannot keep a watched object");
            None
        }
    }
}

fn unpack<K: DeserializeOwned>(packed: &Packed) -> Option<Arc<K>> {
    // The text was written from a `K` by `pack`, so it reads back.
    serde_json::from_str(&packed.json).ok().map(Arc::new)
}

impl<K: ResourceExt + Serialize + DeserializeOwned> PackedStore<K> {
    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let state = read(&self.inner.state);
        unpack(state.get(&(namespace.into(), name.into()))?)
    }

    /// Every object, in no particular order (each parsed: for rare full passes).
    pub fn state(&self) -> Vec<Arc<K>> {
        let packed: Vec<Packed> = read(&self.inner.state).values().cloned().collect();
        packed.iter().filter_map(unpack).collect()
    }

    /// How many objects are kept.
    pub fn len(&self) -> usize {
        read(&self.inner.state).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of JSON kept (for tests and metrics).
    pub fn bytes(&self) -> usize {
        read(&self.inner.state).values().map(|p| p.json.len()).sum()
    }
}

/// The initial state for a subscriber: parsed one object at a time as it is delivered.
struct PackedSnapshot<K> {
    objects: Vec<Packed>,
    _kind: PhantomData<fn() -> K>,
}

impl<K: DeserializeOwned + Send + Sync> Snapshot<K> for PackedSnapshot<K> {
    fn len(&self) -> usize {
        self.objects.len()
    }

    fn get(&self, index: usize) -> Option<Arc<K>> {
        unpack(self.objects.get(index)?)
    }
}

impl<K> Backend<K> for PackedStore<K>
where
    K: ResourceExt + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    type Before = Before;

    fn apply(&self, event: &Event<K>) {
        match event {
            Event::Init => *lock(&self.inner.buffer) = Some(Objects::new()),
            Event::InitApply(obj) => {
                if let (Some(buffer), Some(packed)) = (lock(&self.inner.buffer).as_mut(), pack(obj))
                {
                    buffer.insert(key(obj), packed);
                }
            }
            Event::InitDone => {
                if let Some(mut buffer) = lock(&self.inner.buffer).take() {
                    buffer.shrink_to_fit();
                    *write(&self.inner.state) = buffer;
                }
            }
            Event::Apply(obj) => match pack(obj) {
                Some(packed) => {
                    write(&self.inner.state).insert(key(obj), packed);
                }
                None => {
                    write(&self.inner.state).remove(&key(obj));
                }
            },
            Event::Delete(obj) => {
                write(&self.inner.state).remove(&key(obj));
            }
        }
    }

    fn get_like(&self, obj: &K) -> Option<Arc<K>> {
        unpack(read(&self.inner.state).get(&key(obj))?)
    }

    fn len(&self) -> usize {
        read(&self.inner.state).len()
    }

    fn snapshot(&self) -> Arc<dyn Snapshot<K>> {
        Arc::new(PackedSnapshot::<K> {
            objects: read(&self.inner.state).values().cloned().collect(),
            _kind: PhantomData,
        })
    }

    fn before(&self) -> Before {
        Before(read(&self.inner.state).clone())
    }

    fn take(&self, before: &mut Before, obj: &K) -> (Option<Arc<K>>, bool) {
        let old = before.0.remove(&key(obj));
        let changed = old
            .as_ref()
            .is_none_or(|old| Some(&*old.resource_version) != obj.resource_version().as_deref());
        (old.and_then(|o| unpack(&o)), changed)
    }

    fn rest(&self, before: Before) -> Vec<Arc<K>> {
        before.0.values().filter_map(unpack).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;

    fn deployment(name: &str, rv: &str, image: &str) -> DynamicObject {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        let mut obj = DynamicObject::new(name, &ar)
            .within("ns")
            .data(json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": image}]}}}}));
        obj.metadata.resource_version = Some(rv.into());
        obj
    }

    #[test]
    fn objects_read_back_as_they_were_kept() {
        let store = PackedStore::<DynamicObject>::default();
        let a = deployment("a", "1", "x");
        store.apply(&Event::Init);
        store.apply(&Event::InitApply(a.clone()));
        assert!(
            store.is_empty(),
            "the initial list is swapped in at its end"
        );
        store.apply(&Event::InitDone);
        assert_eq!(store.get("ns", "a").as_deref(), Some(&a));
        assert_eq!(store.get_like(&a).as_deref(), Some(&a));

        let a2 = deployment("a", "2", "y");
        let mut before = store.before();
        assert_eq!(
            store.take(&mut before, &a2),
            (Some(Arc::new(a.clone())), true)
        );
        assert_eq!(store.take(&mut before, &a2), (None, true));
        store.apply(&Event::Apply(a2.clone()));
        assert_eq!(store.state(), vec![Arc::new(a2.clone())]);
        let snapshot = store.snapshot();
        assert_eq!(
            (snapshot.len(), snapshot.get(0)),
            (1, Some(Arc::new(a2.clone())))
        );

        store.apply(&Event::Delete(a2));
        assert!(store.is_empty());
    }

    #[test]
    fn the_text_is_a_fraction_of_the_tree() {
        let store = PackedStore::<DynamicObject>::default();
        store.apply(&Event::Apply(deployment("a", "1", "x")));
        // The JSON of this object is about 200 bytes; as a `Value` tree it takes several KB.
        assert!(store.bytes() < 400, "{}", store.bytes());
    }
}
