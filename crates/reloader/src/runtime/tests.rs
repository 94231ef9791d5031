//! The controller's parts without an API server: watches fed by hand-made streams (as
//! conflux-runtime's informer tests are), and evaluations, the memory and Job re-creations
//! against a recording client whose answers are data (what the API holds), in kube-rs's
//! controller-rs fixture style. End to end, against the real API server: `tests/e2e/reload*.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conflux_runtime::queue::{Gate, Next, QueueConfig, QueueMetrics, WorkQueue};
use conflux_runtime::{ConfigWatches, Informer, WatchMetrics, Watched};
use conflux_watch_index::refs::ObjectRef;
use futures::FutureExt;
use futures::channel::mpsc;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PartialObjectMeta};
use kube::client::Body;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

use super::cache::Memory;
use super::work::{Causes, Work};
use super::{Context, ReloadConfig, ReloadMetrics, cache, evaluate, memory, recreate, watches};
use crate::WorkloadKind;

type Feed<K> = mpsc::UnboundedSender<Result<Event<K>, watcher::Error>>;

/// What the fake API holds, and every request it was sent (`METHOD path?query`).
#[derive(Default)]
struct World {
    objects: Mutex<BTreeMap<String, Value>>,
    requests: Mutex<Vec<String>>,
    /// Requests answered 500 (`METHOD path` prefixes).
    failing: Mutex<Vec<String>>,
    version: Mutex<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl World {
    /// Stores `obj` at `path` (its collection path + `/` + name) with a new resourceVersion.
    fn put(&self, path: &str, mut obj: Value) -> Value {
        let mut version = lock(&self.version);
        *version += 1;
        obj["metadata"]["resourceVersion"] = json!(version.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{version}"));
        }
        lock(&self.objects).insert(path.to_owned(), obj.clone());
        obj
    }

    fn requests(&self) -> Vec<String> {
        lock(&self.requests).clone()
    }

    fn count(&self, prefix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }

    async fn answer(self: Arc<Self>, request: Request<Body>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let line = format!(
            "{method} {path}{}{query}",
            if query.is_empty() { "" } else { "?" }
        );
        lock(&self.requests).push(line.clone());
        if lock(&self.failing).iter().any(|f| line.starts_with(f)) {
            return respond(StatusCode::INTERNAL_SERVER_ERROR, status(500, "failing"));
        }
        let body = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match method {
            Method::GET if query.contains("limit=") || query.contains("labelSelector=") => {
                let items: Vec<Value> = lock(&self.objects)
                    .iter()
                    .filter(|(p, _)| collection_of(p) == path || all_of(p) == path)
                    .map(|(_, o)| o.clone())
                    .collect();
                let selector = query
                    .split('&')
                    .find_map(|q| q.strip_prefix("labelSelector="))
                    .map(|s| s.replace("%3D", "=").replace("%2F", "/"));
                let items: Vec<Value> = items
                    .into_iter()
                    .filter(|o| {
                        selector.as_deref().is_none_or(|s| {
                            let (k, v) = s.split_once('=').unwrap_or((s, ""));
                            o["metadata"]["labels"][k] == json!(v)
                        })
                    })
                    .collect();
                respond(
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            Method::GET => match lock(&self.objects).get(&path) {
                Some(o) => respond(StatusCode::OK, o.clone()),
                None => respond(StatusCode::NOT_FOUND, status(404, "not found")),
            },
            Method::PATCH => {
                let mut obj = lock(&self.objects)
                    .get(&path)
                    .cloned()
                    .unwrap_or_else(|| json!({"metadata": {"name": path.rsplit('/').next()}}));
                merge(&mut obj, &body);
                respond(StatusCode::OK, self.put(&path, obj))
            }
            Method::POST => {
                let name = body["metadata"]["name"].as_str().unwrap_or("generated");
                let at = format!("{path}/{name}");
                if lock(&self.objects).contains_key(&at) && !path.ends_with("/events") {
                    return respond(StatusCode::CONFLICT, status(409, "exists"));
                }
                respond(StatusCode::CREATED, self.put(&at, body))
            }
            Method::DELETE => match lock(&self.objects).remove(&path) {
                Some(o) => respond(StatusCode::OK, o),
                None => respond(StatusCode::NOT_FOUND, status(404, "not found")),
            },
            _ => respond(StatusCode::NOT_FOUND, status(404, "not found")),
        }
    }
}

/// `/api/v1/namespaces/ns/configmaps/x` → `/api/v1/namespaces/ns/configmaps`.
fn collection_of(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(c, _)| c)
}

/// `/api/v1/namespaces/ns/configmaps/x` → `/api/v1/configmaps`.
fn all_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.iter().position(|p| *p == "namespaces") {
        Some(i) if parts.len() > i + 3 => {
            let mut out: Vec<&str> = parts[..i].to_vec();
            out.push(parts[i + 2]);
            out.join("/")
        }
        _ => path.to_owned(),
    }
}

/// A JSON merge of `patch` into `into` (enough for apply and merge patches of our fields).
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else {
                    merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (into, patch) => *into = patch.clone(),
    }
}

fn status(code: u16, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
           "reason": if code == 404 { "NotFound" } else { "InternalError" }, "message": message})
}

fn respond(code: StatusCode, body: Value) -> Response<Body> {
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = code;
    response
}

fn deployments() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
}

/// A Deployment `name` in `ns` reading ConfigMap `cm` whole and key `token` of Secret `secret`.
fn deployment(name: &str, cm: &str, secret: &str) -> DynamicObject {
    let mut d = DynamicObject::new(name, &deployments()).within("ns");
    d.metadata.uid = Some(format!("uid-{name}"));
    d.metadata.resource_version = Some("1".into());
    d.metadata.annotations = Some([("reloader.stakater.com/auto".into(), "true".into())].into());
    d.data = json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{
        "name": "app",
        "envFrom": [{"configMapRef": {"name": cm}}],
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}],
    }]}}}});
    d
}

fn meta<K>(ns: &str, name: &str, version: &str) -> PartialObjectMeta<K> {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

/// The test's controller: its context, queue (not running: the test drives it), feeds and world.
struct Harness {
    world: Arc<World>,
    ctx: Arc<Context>,
    queue: WorkQueue<Work, Causes>,
    configs: ConfigWatches,
    cm_feed: Feed<PartialObjectMeta<ConfigMap>>,
    secret_feed: Feed<PartialObjectMeta<Secret>>,
}

/// A shared watch started by `start` on a stream the test feeds, its driver running.
/// The driver comes boxed: its unboxed type would name the `&Health` borrow's lifetime.
fn fed<K, T>(
    start: impl FnOnce(
        mpsc::UnboundedReceiver<Result<Event<K>, watcher::Error>>,
        &conflux_runtime::Health,
        Arc<WatchMetrics>,
    ) -> (T, futures::future::BoxFuture<'static, ()>),
) -> (Feed<K>, T) {
    let (tx, rx) = mpsc::unbounded();
    let health = conflux_runtime::Health::new("test");
    let (informer, driver) = start(rx, &health, Arc::new(WatchMetrics::default()));
    tokio::spawn(driver);
    (tx, informer)
}

fn informer<K>(dyntype: K::DynamicType, resource: &str) -> (Feed<K>, Informer<K>)
where
    K: Watched,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    fed(|rx, health, metrics| {
        let (informer, driver) = Informer::new(
            rx,
            dyntype,
            resource,
            metrics,
            health,
            Duration::from_secs(600),
        );
        (informer, driver.boxed())
    })
}

fn compact<X: 'static>(
    resource: &str,
) -> (
    Feed<PartialObjectMeta<X>>,
    conflux_runtime::configs::ConfigInformer<X>,
)
where
    PartialObjectMeta<X>: Watched,
    <PartialObjectMeta<X> as kube::Resource>::DynamicType:
        Eq + std::hash::Hash + Clone + Send + Sync,
{
    fed(|rx, health, metrics| {
        let (informer, driver) =
            Informer::new_compact(rx, resource, metrics, health, Duration::from_secs(600));
        (informer, driver.boxed())
    })
}

fn send<K>(feed: &Feed<K>, events: impl IntoIterator<Item = Event<K>>) {
    for event in events {
        let _ = feed.unbounded_send(Ok(event));
    }
}

impl Harness {
    fn new(world: Arc<World>) -> Harness {
        let client = conflux_runtime::client::from_fn({
            let world = world.clone();
            move |request| world.clone().answer(request)
        });
        let config = ReloadConfig {
            namespace: Some("ns".into()),
            records_namespace: Some("conflux-system".into()),
            rate: 0.0,
            ..ReloadConfig::default()
        };
        let ctx = Context::new(client, config, Arc::new(ReloadMetrics::default()));
        ctx.state()
            .resources
            .insert(WorkloadKind::Deployment, deployments());
        let queue = WorkQueue::new(
            QueueConfig::new("test", 1),
            Gate::new(),
            Arc::new(QueueMetrics::default()),
        );
        *super::lock(&ctx.queue) = Some(queue.clone());
        let (cm_feed, cms) = compact::<ConfigMap>("ConfigMap");
        let (secret_feed, secrets) = compact::<Secret>("Secret");
        let configs = ConfigWatches::from_informers(cms, secrets, Some("ns"));
        Harness {
            world,
            ctx,
            queue,
            configs,
            cm_feed,
            secret_feed,
        }
    }

    /// Puts a ConfigMap and a Secret in the world and lists their metadata.
    fn configs_of(&self, names: &[&str], value: &str) {
        let mut cms = Vec::new();
        let mut secrets = Vec::new();
        for name in names {
            let cm = self.world.put(
                &format!("/api/v1/namespaces/ns/configmaps/{name}-cm"),
                json!({"metadata": {"name": format!("{name}-cm"), "namespace": "ns"}, "data": {"k": value}}),
            );
            cms.push(meta(
                "ns",
                &format!("{name}-cm"),
                cm["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default(),
            ));
            let s = self.world.put(
                &format!("/api/v1/namespaces/ns/secrets/{name}-s"),
                json!({"metadata": {"name": format!("{name}-s"), "namespace": "ns"}, "data": {"token": "dG9rZW4=", "other": "eA=="}}),
            );
            secrets.push(meta(
                "ns",
                &format!("{name}-s"),
                s["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default(),
            ));
        }
        send(&self.cm_feed, [Event::Init]);
        send(&self.cm_feed, cms.into_iter().map(Event::InitApply));
        send(&self.cm_feed, [Event::InitDone]);
        send(&self.secret_feed, [Event::Init]);
        send(&self.secret_feed, secrets.into_iter().map(Event::InitApply));
        send(&self.secret_feed, [Event::InitDone]);
    }

    /// Changes the ConfigMap of `name` (data `value`): its watch sees it, and the controller's
    /// config handler schedules its readers.
    fn change_cm(&self, name: &str, value: &str, labels: Option<Value>) {
        let path = format!("/api/v1/namespaces/ns/configmaps/{name}-cm");
        let mut cm = json!({"metadata": {"name": format!("{name}-cm"), "namespace": "ns"}, "data": {"k": value}});
        if let Some(labels) = labels {
            cm["metadata"]["labels"] = labels;
        }
        let stored = self.world.put(&path, cm);
        let mut m = meta::<ConfigMap>(
            "ns",
            &format!("{name}-cm"),
            stored["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default(),
        );
        m.metadata.labels = serde_json::from_value(stored["metadata"]["labels"].clone()).ok();
        watches::on_config(
            &self.ctx,
            conflux_watch_index::refs::ConfigKind::ConfigMap,
            &m.metadata,
        );
        send(&self.cm_feed, [Event::Apply(m)]);
    }

    /// Indexes `workloads` (as their watch's first list does).
    async fn list_workloads(&self, workloads: &[DynamicObject]) {
        for w in workloads {
            watches::on_workload(&self.ctx, WorkloadKind::Deployment, Arc::new(w.clone())).await;
            self.world.put(
                &format!(
                    "/apis/apps/v1/namespaces/ns/deployments/{}",
                    w.metadata.name.clone().unwrap_or_default()
                ),
                serde_json::to_value(w).unwrap_or_default(),
            );
        }
    }

    /// Runs one batch of every pending evaluation, as the queue would hand it out.
    async fn evaluate_pending(&self) -> Vec<Next> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let keys: Vec<ObjectRef> = self
            .ctx
            .state()
            .workloads
            .keys()
            .filter(|o| self.queue.contains(&Work::Evaluate((*o).clone())))
            .cloned()
            .collect();
        for o in &keys {
            self.queue.remove(&Work::Evaluate(o.clone()));
        }
        let due = keys.into_iter().map(|o| (o, Causes::default())).collect();
        evaluate::batch(&self.ctx, &self.configs, due)
            .await
            .into_iter()
            .map(|(_, _, next)| next)
            .collect()
    }

    fn workload_writes(&self) -> usize {
        self.world.count("PATCH /apis/apps")
    }

    fn remembered(&self, name: &str) -> Option<String> {
        let object = ObjectRef::new("apps", "Deployment", "ns", name);
        self.ctx
            .state()
            .memory
            .get(&object, Some(&format!("uid-{name}")))
            .map(|e| e.baseline.clone())
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("w{i}")).collect()
}

#[tokio::test]
async fn adoption_reads_in_pages_and_writes_nothing_to_workloads() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    let names = names(40);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    h.configs_of(&refs, "1");
    h.configs.wait_synced().await;
    let workloads: Vec<DynamicObject> = names
        .iter()
        .map(|n| deployment(n, &format!("{n}-cm"), &format!("{n}-s")))
        .collect();
    h.list_workloads(&workloads).await;
    let next = h.evaluate_pending().await;
    assert_eq!(next.len(), 40);
    assert!(next.iter().all(|n| *n == Next::Done));
    assert_eq!(
        h.workload_writes(),
        0,
        "adoption writes nothing to workloads"
    );
    // 80 configs in one namespace: one page of each kind, not 80 GETs.
    assert_eq!(world.count("GET /api/v1/namespaces/ns/configmaps?"), 1);
    assert_eq!(world.count("GET /api/v1/namespaces/ns/secrets?"), 1);
    assert_eq!(world.count("GET /api/v1/namespaces/ns/configmaps/"), 0);
    assert!(names.iter().all(|n| h.remembered(n).is_some()));
    // The memory goes to the shards in one write each.
    assert_eq!(memory::save(&h.ctx).await, Next::Done);
    let shards = world.count("PATCH /api/v1/namespaces/conflux-system/secrets/");
    assert!(
        shards >= 1 && shards <= crate::memory::SHARDS as usize,
        "{shards}"
    );
}

#[tokio::test]
async fn a_restart_decides_from_memory_and_rolls_only_what_changed_while_down() {
    let world = Arc::new(World::default());
    let first = Harness::new(world.clone());
    first.configs_of(&["web", "api"], "1");
    first.configs.wait_synced().await;
    let workloads = [
        deployment("web", "web-cm", "web-s"),
        deployment("api", "api-cm", "api-s"),
    ];
    first.list_workloads(&workloads).await;
    first.evaluate_pending().await;
    memory::save(&first.ctx).await;
    // While no controller runs, `api`'s ConfigMap changes.
    world.put(
        "/api/v1/namespaces/ns/configmaps/api-cm",
        json!({"metadata": {"name": "api-cm", "namespace": "ns"}, "data": {"k": "while down"}}),
    );
    // A second controller (the restart): the same world, its memory read from the shards.
    let second = Harness::new(world.clone());
    let gate = Gate::new();
    memory::load(second.ctx.clone(), gate.part("memory")).await;
    assert!(gate.is_open());
    // Its watches list the same configs (same versions).
    let stored = |path: &str| {
        lock(&world.objects)[path]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    send(&second.cm_feed, [Event::Init]);
    send(&second.secret_feed, [Event::Init]);
    for n in ["web", "api"] {
        send(
            &second.cm_feed,
            [Event::InitApply(meta(
                "ns",
                &format!("{n}-cm"),
                &stored(&format!("/api/v1/namespaces/ns/configmaps/{n}-cm")),
            ))],
        );
        send(
            &second.secret_feed,
            [Event::InitApply(meta(
                "ns",
                &format!("{n}-s"),
                &stored(&format!("/api/v1/namespaces/ns/secrets/{n}-s")),
            ))],
        );
    }
    send(&second.cm_feed, [Event::InitDone]);
    send(&second.secret_feed, [Event::InitDone]);
    second.configs.wait_synced().await;
    let before = world.requests().len();
    second.list_workloads(&workloads).await;
    let mut next = second.evaluate_pending().await;
    next.sort_by_key(|n| format!("{n:?}"));
    assert_eq!(next, [Next::Done, Next::Hold(super::DEFAULT_DEBOUNCE)]);
    let asked: Vec<String> = world.requests()[before..].to_vec();
    // `web` from memory alone; `api`'s two configs read (one GET each), and it rolls once.
    assert!(
        asked.iter().all(|r| !r.contains("/web-")),
        "nothing of web read: {asked:?}"
    );
    let reads = asked
        .iter()
        .filter(|r| r.starts_with("GET") && r.contains("/api-"))
        .count();
    assert_eq!(reads, 2, "{asked:?}");
    let writes: Vec<&String> = asked
        .iter()
        .filter(|r| r.starts_with("PATCH /apis"))
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].contains("/deployments/api?"), "{writes:?}");
    assert_eq!(second.remembered("web"), first.remembered("web"));
}

#[tokio::test]
async fn a_data_change_rolls_once_and_a_label_never_rolls() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    h.configs_of(&["web"], "1");
    h.configs.wait_synced().await;
    let web = deployment("web", "web-cm", "web-s");
    h.list_workloads(std::slice::from_ref(&web)).await;
    h.evaluate_pending().await;
    let adopted = h.remembered("web");
    // A label: the version moves, the digests do not: no rollout.
    h.change_cm("web", "1", Some(json!({"team": "a"})));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.queue.contains(&Work::Evaluate(ObjectRef::new(
        "apps",
        "Deployment",
        "ns",
        "web"
    ))));
    h.evaluate_pending().await;
    assert_eq!(h.workload_writes(), 0);
    assert_eq!(h.remembered("web"), adopted);
    // The data: one rollout, held afterwards for the window.
    h.change_cm("web", "2", None);
    let next = h.evaluate_pending().await;
    assert_eq!(next, [Next::Hold(super::DEFAULT_DEBOUNCE)]);
    assert_eq!(h.workload_writes(), 1);
    assert_ne!(h.remembered("web"), adopted);
    // Evaluated again (its own write seen by the watch): nothing more.
    h.queue.add(
        Work::Evaluate(ObjectRef::new("apps", "Deployment", "ns", "web")),
        Causes::default(),
    );
    h.evaluate_pending().await;
    assert_eq!(h.workload_writes(), 1, "rolled once");
}

/// A fan-out the rate limit spreads over several batches reads the changed config once: the
/// later batches hash it from the version their watch shows, and still roll.
#[tokio::test]
async fn a_config_is_read_once_per_version_however_many_batches_read_it() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    h.configs_of(&["web"], "1");
    h.configs.wait_synced().await;
    let fan: Vec<DynamicObject> = ["a", "b", "c"]
        .iter()
        .map(|name| deployment(name, "web-cm", "web-s"))
        .collect();
    h.list_workloads(&fan).await;
    h.evaluate_pending().await;
    h.change_cm("web", "2", None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = h.world.count("GET /api/v1/namespaces/ns/configmaps");
    for name in ["a", "b", "c"] {
        let object = ObjectRef::new("apps", "Deployment", "ns", name);
        h.queue.remove(&Work::Evaluate(object.clone()));
        let next = evaluate::batch(&h.ctx, &h.configs, vec![(object, Causes::default())]).await;
        assert_eq!(next.len(), 1);
        assert_eq!(
            next[0].2,
            Next::Hold(super::DEFAULT_DEBOUNCE),
            "{name} rolled"
        );
    }
    assert_eq!(h.workload_writes(), 3);
    assert_eq!(
        h.world.count("GET /api/v1/namespaces/ns/configmaps") - before,
        1,
        "{:?}",
        h.world.requests()
    );
}

#[tokio::test]
async fn a_failed_read_retries_and_rolls_nothing() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    h.configs_of(&["web"], "1");
    h.configs.wait_synced().await;
    h.list_workloads(&[deployment("web", "web-cm", "web-s")])
        .await;
    lock(&world.failing).push("GET /api/v1/namespaces/ns/configmaps".into());
    let next = h.evaluate_pending().await;
    assert_eq!(next, [Next::Retry]);
    assert_eq!(
        h.remembered("web"),
        None,
        "nothing remembered from a failed read"
    );
    lock(&world.failing).clear();
    h.queue.add(
        Work::Evaluate(ObjectRef::new("apps", "Deployment", "ns", "web")),
        Causes::default(),
    );
    assert_eq!(h.evaluate_pending().await, [Next::Done]);
    assert!(h.remembered("web").is_some());
}

#[tokio::test]
async fn workload_events_index_evaluate_and_forget() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    let (feed, informer) = informer::<DynamicObject>(deployments(), "Deployment");
    let gate = Gate::new();
    tokio::spawn(watches::workloads(
        h.ctx.clone(),
        WorkloadKind::Deployment,
        informer.subscribe("test"),
        gate.part("watch Deployment"),
    ));
    let web = deployment("web", "web-cm", "web-s");
    let plain = {
        let mut d = deployment("plain", "c", "s");
        d.metadata.annotations = None;
        d
    };
    send(
        &feed,
        [
            Event::Init,
            Event::InitApply(web.clone()),
            Event::InitApply(plain),
            Event::InitDone,
        ],
    );
    tokio::time::timeout(Duration::from_secs(5), gate.opened())
        .await
        .expect("listed");
    let object = ObjectRef::new("apps", "Deployment", "ns", "web");
    assert_eq!(h.ctx.state().index.len(), 1, "only the opted-in one");
    assert!(h.queue.contains(&Work::Evaluate(object.clone())));
    // A status-only update needs no evaluation.
    h.queue.remove(&Work::Evaluate(object.clone()));
    let mut scaled = web.clone();
    scaled.metadata.resource_version = Some("2".into());
    scaled.data["status"] = json!({"replicas": 3});
    send(&feed, [Event::Apply(scaled)]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!h.queue.contains(&Work::Evaluate(object.clone())));
    // Deleted: gone from the index, the cache and the memory.
    h.ctx.state().memory.set(
        &object,
        crate::memory::Entry {
            uid: "uid-web".into(),
            baseline: "v2;00".into(),
            versions: BTreeMap::new(),
        },
    );
    send(&feed, [Event::Delete(web)]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.ctx.state().index.len(), 0);
    assert!(h.ctx.state().workloads.is_empty());
    assert_eq!(h.remembered("web"), None);
}

#[tokio::test]
async fn config_events_debounce_the_workloads_that_read_them() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    h.configs_of(&["web"], "1");
    h.configs.wait_synced().await;
    let gate = Gate::new();
    tokio::spawn(watches::configs::<ConfigMap>(
        h.ctx.clone(),
        h.configs.informer::<ConfigMap>().subscribe("test"),
        gate.part("watch ConfigMap"),
    ));
    tokio::time::timeout(Duration::from_secs(5), gate.opened())
        .await
        .expect("listed");
    h.list_workloads(&[deployment("web", "web-cm", "web-s")])
        .await;
    let object = Work::Evaluate(ObjectRef::new("apps", "Deployment", "ns", "web"));
    h.queue.remove(&object);
    // A config nothing reads: nothing scheduled.
    let other = meta::<ConfigMap>("ns", "unread", "99");
    send(&h.cm_feed, [Event::Apply(other)]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!h.queue.contains(&object));
    // The one `web` reads: scheduled, with its cause.
    let changed = meta::<ConfigMap>("ns", "web-cm", "100");
    send(&h.cm_feed, [Event::Apply(changed)]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.queue.contains(&object));
}

#[tokio::test]
async fn a_job_is_recreated_once_and_its_record_is_gone() {
    let world = Arc::new(World::default());
    let h = Harness::new(world.clone());
    let jobs = ApiResource::from_gvk(&GroupVersionKind::gvk("batch", "v1", "Job"));
    h.ctx.state().resources.insert(WorkloadKind::Job, jobs);
    let job = world.put(
        "/apis/batch/v1/namespaces/ns/jobs/migrate",
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "migrate", "namespace": "ns", "uid": "old"},
               "spec": {"template": {"spec": {"containers": [{"name": "m"}], "restartPolicy": "Never"}}}}),
    );
    assert_eq!(job["metadata"]["uid"], "old");
    let object = ObjectRef::new("batch", "Job", "ns", "migrate");
    let patch = crate::patch::WorkloadPatch {
        kind: WorkloadKind::Job,
        namespace: "ns".into(),
        name: "migrate".into(),
        baseline: "v2;00".into(),
        template_hash: Some("h".into()),
        last_reloaded_from: None,
        env: Vec::new(),
        changes: Vec::new(),
    };
    recreate::start_recreation(&h.ctx, &object, Some("old"), &patch, "cfg changed".into())
        .await
        .expect("started");
    assert!(h.queue.contains(&Work::Recreate(object.clone())));
    let next = recreate::attempt(&h.ctx, &object).await;
    assert_eq!(next, Next::Done);
    let requests = world.requests();
    let deleted = requests
        .iter()
        .filter(|r| r.starts_with("DELETE /apis/batch/v1/namespaces/ns/jobs/migrate"))
        .count();
    let created = requests
        .iter()
        .filter(|r| r.starts_with("POST /apis/batch/v1/namespaces/ns/jobs"))
        .count();
    assert_eq!((deleted, created), (1, 1));
    // Written down before the delete, gone once the replacement exists.
    let record = requests
        .iter()
        .position(|r| r.starts_with("POST /api/v1/namespaces/conflux-system/secrets"));
    let delete = requests
        .iter()
        .position(|r| r.starts_with("DELETE /apis/batch"));
    assert!(record < delete, "{requests:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("DELETE /api/v1/namespaces/conflux-system/secrets/"))
    );
    let replacement = lock(&world.objects)["/apis/batch/v1/namespaces/ns/jobs/migrate"].clone();
    assert_ne!(replacement["metadata"]["uid"], "old");
    assert_eq!(
        replacement["metadata"]["annotations"][crate::patch::BASELINE_ANNOTATION],
        "v2;00"
    );
    assert!(h.ctx.state().recreations.is_empty());
    // Nothing kept: attempting again does nothing.
    assert_eq!(recreate::attempt(&h.ctx, &object).await, Next::Done);
}

#[test]
fn the_cache_trims_what_no_decision_reads() {
    let mut d = deployment("web", "c", "s");
    d.data["status"] = json!({"replicas": 1});
    d.metadata.managed_fields = Some(Vec::new());
    cache::trim_kind(WorkloadKind::Deployment)(&mut d);
    let owned = cache::Owned::from_dynamic(WorkloadKind::Deployment, d).expect("a Deployment");
    let cache::Owned::Deployment(d) = owned else {
        panic!("a Deployment");
    };
    assert!(d.status.is_none() && d.metadata.managed_fields.is_none());
    let memory = Memory::default();
    assert_eq!(memory.len(), 0);
}

/// The informer keeps workloads without what no decision reads; what decisions and patches read
/// (consumers, env, pause, the template's annotations) is all still there, and a Job is kept
/// whole because it is re-created from it.
#[test]
fn trimmed_workloads_keep_what_decisions_read() {
    let mut d = deployment("app", "cm", "secret");
    d.data["spec"]["replicas"] = json!(3);
    d.data["spec"]["paused"] = json!(true);
    d.data["spec"]["strategy"] = json!({"type": "RollingUpdate"});
    d.data["spec"]["template"]["metadata"] = json!({"annotations": {"a": "b"}});
    d.data["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "v", "configMap": {"name": "cm"}}]);
    d.data["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {}});
    d.data["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:1");
    d.data["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {}});
    let before = cache::Owned::from_dynamic(WorkloadKind::Deployment, {
        let mut whole = d.clone();
        cache::trim(&mut whole);
        whole
    })
    .expect("a Deployment");
    cache::trim_kind(WorkloadKind::Deployment)(&mut d);
    let spec = &d.data["spec"];
    assert_eq!(spec["replicas"], Value::Null);
    assert_eq!(spec["strategy"], Value::Null);
    assert_eq!(spec["paused"], json!(true));
    assert_eq!(spec["template"]["spec"]["affinity"], Value::Null);
    let container = &spec["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], Value::Null);
    assert_eq!(container["resources"], Value::Null);
    let after = cache::Owned::from_dynamic(WorkloadKind::Deployment, d).expect("a Deployment");
    // What the index and the rollout decision read is the same for both.
    let (b, a) = (before.workload(), after.workload());
    assert_eq!(a.annotations(), b.annotations());
    let (ta, tb) = (
        a.pod_template().expect("a template"),
        b.pod_template().expect("a template"),
    );
    assert_eq!(
        crate::consumers::pod_template_consumers(ta),
        crate::consumers::pod_template_consumers(tb)
    );
    assert_eq!(ta.metadata, tb.metadata);

    let mut job = DynamicObject::new("job", &deployments()).within("ns");
    job.data =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let whole = job.data.clone();
    cache::trim_kind(WorkloadKind::Job)(&mut job);
    assert_eq!(job.data, whole);
}

/// The cache keeps a workload as its JSON: it types back to the same object, and only what a
/// decision reads (uid, annotations, pod template) makes two versions differ for a decision.
#[test]
fn cached_workloads_compare_what_decisions_read() {
    let mut d = deployment("app", "cm", "secret");
    d.metadata.uid = Some("u1".into());
    d.metadata.resource_version = Some("10".into());
    cache::trim_kind(WorkloadKind::Deployment)(&mut d);
    let cached = |d: &DynamicObject| {
        cache::Cached::new(WorkloadKind::Deployment, d)
            .expect("a Deployment")
            .0
    };
    let a = cached(&d);
    let (Some(cache::Owned::Deployment(typed)), Ok(cache::Owned::Deployment(direct))) = (
        a.typed(),
        cache::Owned::from_dynamic(WorkloadKind::Deployment, d.clone()),
    ) else {
        panic!("Deployments");
    };
    assert_eq!(typed, direct);
    assert_eq!(typed.metadata.name.as_deref(), Some("app"));
    assert_eq!(a.uid(), Some("u1"));

    // Labels, status and a newer resourceVersion: the same for a decision, and newer.
    let mut b = d.clone();
    b.metadata.resource_version = Some("11".into());
    b.metadata.labels = Some([("l".to_owned(), "v".to_owned())].into());
    b.data["status"] = json!({"replicas": 2});
    let b = cached(&b);
    assert!(a.same_for_decision(&b) && a.is_older_than(&b) && !b.is_older_than(&a));

    // An annotation, the template, or another uid: different.
    let mut c = d.clone();
    c.metadata.annotations =
        Some([(crate::settings::RELOAD_DEBOUNCE.to_owned(), "5s".to_owned())].into());
    let c = cached(&c);
    assert!(!a.same_for_decision(&c));
    assert_eq!(c.settings().debounce, Some(Duration::from_secs(5)));
    let mut t = d.clone();
    t.data["spec"]["template"]["metadata"] = json!({"annotations": {"x": "y"}});
    assert!(!a.same_for_decision(&cached(&t)));
    let mut u = d.clone();
    u.metadata.uid = Some("u2".into());
    assert!(!a.same_for_decision(&cached(&u)));

    // What does not read as its kind is not cached.
    let mut bad = d;
    bad.data["spec"]["template"]["spec"]["containers"] = json!("not a list");
    assert!(cache::Cached::new(WorkloadKind::Deployment, &bad).is_err());
}
