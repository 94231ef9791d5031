//! The flux-trigger on informers fed by streams and a fake API server: the start-up catch-up
//! asks only the referrers whose configs changed while conflux was down; a first-sight record
//! never swallows a change that fired; a fired change is one patch per referrer, dependencies
//! before dependents, and one Event on its config.

use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::client::Body;
use kube::runtime::watcher::Event;
use serde_json::json;

use super::*;
use crate::refs::ConfigKey;
use crate::runtime::test_support::{
    Feed, config_informer, config_map, informer, kustomization, kustomizations, relist, send,
};
use crate::runtime::trigger::ConfigChange;
use crate::trigger::Why;
use conflux_runtime::Informer;
use conflux_runtime::sync::lock;

/// What the fake API server was asked: method, path, body.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// A client whose API server records every request and answers with what it was sent (a
/// patched object or a created Event, as far as the client reads them).
fn fake_api(seen: Seen) -> kube::Client {
    conflux_runtime::client::from_fn(move |request: http::Request<Body>| {
        let seen = seen.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let name = parts.uri.path().rsplit('/').next().unwrap_or_default();
            let answer = if parts.uri.path().contains("/events") {
                let mut event: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or_default();
                event["metadata"]["name"] = "e".into();
                event
            } else {
                json!({
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                    "kind": "Kustomization",
                    "metadata": {"name": name, "namespace": "flux-system"},
                })
            };
            lock(&seen).push((
                parts.method.to_string(),
                parts.uri.path().to_owned(),
                String::from_utf8_lossy(&body).into_owned(),
            ));
            http::Response::new(Body::from(answer.to_string().into_bytes()))
        }
    })
}

/// The patches written so far: object name, and whether it asked to reconcile.
fn patches(seen: &Seen) -> Vec<(String, bool)> {
    lock(seen)
        .iter()
        .filter(|(method, _, _)| method == "PATCH")
        .map(|(_, path, body)| {
            let name = path.rsplit('/').next().unwrap_or_default().to_owned();
            (name, body.contains(REQUESTED_AT_ANNOTATION))
        })
        .collect()
}

/// The notes of the Events created so far, with the kind and name they are about.
fn events(seen: &Seen) -> Vec<(String, String, String)> {
    lock(seen)
        .iter()
        .filter(|(method, path, _)| method == "POST" && path.contains("/events"))
        .map(|(_, _, body)| {
            let event: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            let field = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (
                field(&event["regarding"]["kind"]),
                field(&event["regarding"]["name"]),
                field(&event["note"]),
            )
        })
        .collect()
}

fn with_observed(mut object: DynamicObject, digest: &str) -> DynamicObject {
    object.metadata.annotations =
        Some([(OBSERVED_ANNOTATION.to_owned(), digest.to_owned())].into());
    object
}

/// A Kustomization `name` substituting from `vars` and depending on `depends_on`.
fn dependent(name: &str, depends_on: &str) -> DynamicObject {
    let mut object = kustomization(name);
    object.data["spec"]["dependsOn"] = json!([{"name": depends_on}]);
    object
}

/// The flux-trigger's parts on streams: the config watches, one Kustomization watch, the
/// index, and an executor writing to a fake API server.
struct World {
    cms: Feed<kube::api::PartialObjectMeta<ConfigMap>>,
    flux: Feed<DynamicObject>,
    ks: Informer<DynamicObject>,
    exec: Arc<Executor>,
    seen: Seen,
}

impl World {
    /// `vars` at `version`, and the Kustomizations `objects`, listed.
    async fn new(version: &str, objects: Vec<DynamicObject>) -> World {
        let (cms, cm_informer) = config_informer::<ConfigMap>("ConfigMap");
        let (secrets, secret_informer) = config_informer::<Secret>("Secret");
        let (flux, ks) = informer::<DynamicObject>(kustomizations(), "Kustomization");
        let configs = ConfigWatches::from_informers(cm_informer, secret_informer, None);
        relist(&cms, vec![config_map("vars", version)]);
        relist(&secrets, vec![]);
        relist(&flux, objects);
        let index = ReferrerIndex::new(ReferenceSet::flux());
        tokio::spawn(index.feed(&ks, "kustomize.toolkit.fluxcd.io/v1", "Kustomization"));
        index.wait_synced().await;
        configs.wait_synced().await;
        let seen: Seen = Arc::default();
        let client = fake_api(seen.clone());
        let ar = kustomizations();
        let exec = Arc::new(Executor {
            recorder: recorder(&client, "conflux"),
            client,
            config: FluxTriggerConfig {
                config_selector: Selector::parse("reconcile.fluxcd.io/watch=Enabled")
                    .expect("valid"),
                object_selector: Selector::default(),
                mode: Mode::Upstream,
                namespace: None,
                concurrent: 4,
            },
            metrics: Arc::default(),
            kinds: RwLock::new(HashMap::from([(
                (ar.group.clone(), ar.kind.clone()),
                FluxKind {
                    resource: ar.clone(),
                    store: ks.store(),
                },
            )])),
            configs,
            index,
            hashes: DataHashes::default(),
            requested: Mutex::default(),
            recorded: Mutex::default(),
            failing: Mutex::default(),
        });
        World {
            cms,
            flux,
            ks,
            exec,
            seen,
        }
    }

    fn object(name: &str) -> ObjectRef {
        ObjectRef::new(
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "flux-system",
            name,
        )
    }

    /// Handles `name` with `work`, as the queue would.
    async fn handle(&self, name: &str, work: Work) -> conflux_runtime::queue::Next {
        let (steps, _) = mpsc::unbounded_channel();
        self.exec
            .clone()
            .handle(Self::object(name), work.view(), steps)
            .await
    }

    /// The digest of `name`'s configs as they are now.
    async fn digest(&self, name: &str) -> String {
        let (kind, current) = self.exec.current(&Self::object(name)).expect("known");
        let keys = self.exec.references(&kind.resource, &current);
        self.exec.digest_of(keys).await
    }

    /// Waits until the Kustomization informer's store holds `name` at `version`.
    async fn stored(&self, name: &str, version: &str) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !self.ks.store().state().iter().any(|o| {
                o.metadata.name.as_deref() == Some(name)
                    && o.metadata.resource_version.as_deref() == Some(version)
            }) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the informer has the object");
    }

    /// Waits until the ConfigMap store holds `vars` at `version`.
    async fn vars_at(&self, version: &str) {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let meta = self.exec.configs.meta(
                    crate::refs::ConfigKind::ConfigMap,
                    "flux-system",
                    "vars",
                );
                if meta.and_then(|m| m.resource_version).as_deref() == Some(version) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the store has the version");
    }
}

/// The change of `vars` as the trigger fires it, with its referrers now.
fn fired(exec: &Executor) -> Fired {
    let source = ConfigKey::new(crate::refs::ConfigKind::ConfigMap, "flux-system", "vars");
    let order = exec.index.read().referrers_in_dependency_order(&source);
    Fired {
        source,
        change: ConfigChange::Updated,
        why: Why::ResourceVersionChanged,
        order,
    }
}

#[tokio::test]
async fn catch_up_requests_only_the_referrers_whose_configs_changed_while_not_watching() {
    // `apps` recorded a digest of older configs, `fresh` will record the current one, `new`
    // none (created while conflux was down, or before it recorded anything).
    let world = World::new(
        "5",
        vec![
            with_observed(kustomization("apps"), "stale"),
            kustomization("fresh"),
            kustomization("new"),
        ],
    )
    .await;
    let digest = world.digest("fresh").await;
    let mut fresh = with_observed(kustomization("fresh"), &digest);
    fresh.metadata.resource_version = Some("2".into());
    send(&world.flux, [Event::Apply(fresh)]);
    world.stored("fresh", "2").await;

    let pending = Arc::new(AtomicUsize::new(0));
    for name in ["apps", "fresh", "new"] {
        world.handle(name, Work::catch_up(&pending)).await;
    }
    assert_eq!(
        pending.load(Ordering::Acquire),
        0,
        "every catch-up attempted"
    );
    let mut written = patches(&world.seen);
    written.sort();
    assert_eq!(
        written,
        [("apps".to_owned(), true), ("new".to_owned(), false)],
        "apps is asked to reconcile, new gets its baseline recorded, fresh is left alone"
    );
    assert!(
        lock(&world.seen)
            .iter()
            .filter(|(method, _, _)| method == "PATCH")
            .all(|(_, _, body)| body.contains(&digest)),
        "what is written is the digest of the configs as they are now"
    );
    assert_eq!(
        events(&world.seen)
            .iter()
            .map(|(kind, name, _)| format!("{kind}/{name}"))
            .collect::<Vec<_>>(),
        ["Kustomization/apps"],
        "the catch-up's request has its Event on the object"
    );
    // A second catch-up (another kind listed, a re-run) asks for nothing more.
    lock(&world.seen).clear();
    for name in ["apps", "fresh", "new"] {
        world.handle(name, Work::catch_up(&pending)).await;
    }
    assert_eq!(patches(&world.seen), []);
}

/// The streaming-list race: a referrer first seen after the first list (it came as a change,
/// from a first list older than the start) gets its first-sight digest recorded only after a
/// config change already landed; the change, which fired, must still be requested. Before the
/// fix the record claimed the digest and the request was skipped as "requested already".
#[tokio::test]
async fn a_first_sight_record_never_swallows_a_change_that_fired() {
    let world = World::new("1", vec![]).await;
    // `apps` arrives after the first list, without a digest; `vars` changes right after.
    send(&world.flux, [Event::Apply(kustomization("apps"))]);
    world.stored("apps", "1").await;
    send(&world.cms, [Event::Apply(config_map("vars", "2"))]);
    world.vars_at("2").await;
    // The first-sight record runs only now: its digest already holds version 2.
    world.handle("apps", Work::record()).await;
    assert_eq!(patches(&world.seen), [("apps".to_owned(), false)]);
    // The change's trigger: asked to reconcile.
    let (steps, _) = mpsc::unbounded_channel();
    let wave = Arc::new(Wave::new(1, fired(&world.exec), steps).expect("referrers"));
    let (object, ticket) = wave.depth(0).pop().expect("apps");
    assert_eq!(object, World::object("apps"));
    world.handle("apps", Work::ask(ticket)).await;
    assert_eq!(
        patches(&world.seen),
        [("apps".to_owned(), false), ("apps".to_owned(), true)],
        "recorded, then asked to reconcile for the change"
    );
    // The same change asked again (a second wave of it): requested already.
    let (steps, _) = mpsc::unbounded_channel();
    let wave = Arc::new(Wave::new(2, fired(&world.exec), steps).expect("referrers"));
    let (_, ticket) = wave.depth(0).pop().expect("apps");
    world.handle("apps", Work::ask(ticket)).await;
    assert_eq!(patches(&world.seen).len(), 2, "not asked twice");
}

#[tokio::test]
async fn a_fired_change_asks_dependencies_first_one_patch_each_and_is_reported_once() {
    let world = World::new(
        "1",
        vec![
            kustomization("infra"),
            dependent("apps", "infra"),
            dependent("web", "apps"),
            kustomization("other"),
        ],
    )
    .await;
    send(&world.cms, [Event::Apply(config_map("vars", "2"))]);
    world.vars_at("2").await;
    let queue: WorkQueue<ObjectRef, Work> = WorkQueue::new(
        QueueConfig::new("flux-trigger", 4),
        Gate::new(),
        Arc::default(),
    );
    let (steps_tx, steps) = mpsc::unbounded_channel();
    let handling = tokio::spawn(handle_queue(
        queue.clone(),
        world.exec.clone(),
        steps_tx.clone(),
    ));
    let tasks = Tasks::new();
    let waves = {
        let (exec, queue, tasks) = (world.exec.clone(), queue.clone(), tasks.clone());
        let fired = futures::stream::iter([fired(&world.exec)]).chain(futures::stream::pending());
        tokio::spawn(async move {
            add_waves(&tasks, &exec, &queue, fired, (steps_tx, steps)).await;
        })
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while events(&world.seen).is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the change is reported");
    let written = patches(&world.seen);
    assert_eq!(written.len(), 4, "one patch per referrer: {written:?}");
    assert!(written.iter().all(|(_, requested)| *requested));
    let at = |name: &str| written.iter().position(|(n, _)| n == name);
    assert!(
        at("infra") < at("apps") && at("apps") < at("web"),
        "{written:?}"
    );
    let reported = events(&world.seen);
    assert_eq!(reported.len(), 1, "{reported:?}");
    let (kind, name, note) = &reported[0];
    assert_eq!((kind.as_str(), name.as_str()), ("ConfigMap", "vars"));
    assert!(
        note.starts_with("ConfigMap flux-system/vars was updated; requested reconciliation of ")
            && ["infra", "apps", "web", "other"]
                .iter()
                .all(|n| note.contains(&format!("Kustomization/{n}"))),
        "{note}"
    );
    handling.abort();
    waves.abort();
}
