//! The informer fed by hand-made watch streams, as kube-runtime tests its watcher: no API server.

use std::time::Duration;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};

use super::*;

type Feed = mpsc::UnboundedSender<Result<Event<ConfigMap>, watcher::Error>>;

fn cm(name: &str, version: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.resource_version = Some(version.into());
    cm
}

/// An informer on a stream the test feeds, with its driver running, and its health root.
fn informer(stall_after: Duration) -> (Feed, Informer<ConfigMap>, Arc<Health>, Arc<WatchMetrics>) {
    let (tx, rx) = mpsc::unbounded();
    let health = Arc::new(Health::new("test"));
    let metrics = Arc::new(WatchMetrics::default());
    let (informer, driver) =
        Informer::new(rx, (), "ConfigMap", metrics.clone(), &health, stall_after);
    tokio::spawn(driver);
    (tx, informer, health, metrics)
}

fn send(feed: &Feed, events: impl IntoIterator<Item = Event<ConfigMap>>) {
    for event in events {
        feed.unbounded_send(Ok(event)).expect("the informer runs");
    }
}

fn list(feed: &Feed, objects: &[(&str, &str)]) {
    send(feed, [Event::Init]);
    send(
        feed,
        objects.iter().map(|(n, v)| Event::InitApply(cm(n, v))),
    );
    send(feed, [Event::InitDone]);
}

/// A change as text: `initial a@1`, `listed`, `applied a@2`, `deleted a@2`.
fn text(change: &Change<ConfigMap>) -> String {
    let object = |what: &str, o: &ConfigMap| {
        format!(
            "{what} {}@{}",
            o.metadata.name.as_deref().unwrap_or_default(),
            o.metadata.resource_version.as_deref().unwrap_or_default()
        )
    };
    match change {
        Change::Initial(o) => object("initial", o),
        Change::InitDone => "listed".to_owned(),
        Change::Applied(o) => object("applied", o),
        Change::Deleted(o) => object("deleted", o),
    }
}

async fn next(sub: &mut Subscription<ConfigMap>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let change = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .expect("a change in time")
            .expect("the informer runs");
        out.push(text(&change));
    }
    out
}

fn names(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = informer
        .store()
        .state()
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_subscriber_sees_the_initial_state_then_every_change_in_order() {
    let (feed, informer, health, _) = informer(Duration::from_secs(60));
    let mut sub = informer.subscribe("test");
    assert!(!health.is_ready(), "not listed yet");
    list(&feed, &[("a", "1"), ("b", "1")]);
    let mut initial = next(&mut sub, 2).await;
    initial.sort();
    assert_eq!(initial, ["initial a@1", "initial b@1"]);
    assert_eq!(next(&mut sub, 1).await, ["listed"]);
    assert!(informer.has_listed() && health.is_ready());
    send(
        &feed,
        [Event::Apply(cm("a", "2")), Event::Delete(cm("b", "1"))],
    );
    assert_eq!(next(&mut sub, 2).await, ["applied a@2", "deleted b@1"]);
    assert_eq!(names(&informer), ["a"]);
}

#[tokio::test]
async fn a_relist_after_a_gap_is_diffed_changes_additions_and_deletes_arrive_once() {
    let (feed, informer, _, metrics) = informer(Duration::from_secs(60));
    let mut sub = informer.subscribe("test");
    list(&feed, &[("a", "1"), ("b", "1"), ("c", "1")]);
    next(&mut sub, 4).await;
    // The watch was down (410 Gone): `b` changed, `c` was deleted and `d` created meanwhile;
    // `a` did not change and is not repeated.
    list(&feed, &[("a", "1"), ("b", "2"), ("d", "1")]);
    let mut changes = next(&mut sub, 3).await;
    changes.sort();
    assert_eq!(changes, ["applied b@2", "applied d@1", "deleted c@1"]);
    assert_eq!(
        names(&informer),
        ["a", "b", "d"],
        "the store holds the new list"
    );
    let labels = crate::metrics::ResourceLabels::new("ConfigMap");
    assert_eq!(metrics.relists.get_or_create(&labels).get(), 1);
    // Nothing else is pending: the next live change comes next.
    send(&feed, [Event::Apply(cm("a", "3"))]);
    assert_eq!(next(&mut sub, 1).await, ["applied a@3"]);
}

#[tokio::test]
async fn a_late_subscriber_starts_from_the_current_store() {
    let (feed, informer, _, _) = informer(Duration::from_secs(60));
    let mut early = informer.subscribe("early");
    list(&feed, &[("a", "1")]);
    send(&feed, [Event::Apply(cm("b", "1"))]);
    next(&mut early, 3).await;
    let mut late = informer.subscribe("late");
    let mut initial = next(&mut late, 2).await;
    initial.sort();
    assert_eq!(initial, ["initial a@1", "initial b@1"]);
    assert_eq!(next(&mut late, 1).await, ["listed"]);
}

#[tokio::test]
async fn a_slow_subscriber_does_not_hold_back_a_fast_one_and_loses_nothing() {
    let (feed, informer, _, _) = informer(Duration::from_secs(60));
    let mut fast = informer.subscribe("fast");
    let mut slow = informer.subscribe("slow");
    list(&feed, &[]);
    let updates: Vec<Event<ConfigMap>> = (1..=500)
        .map(|v| Event::Apply(cm("a", &v.to_string())))
        .collect();
    send(&feed, updates);
    // The fast one reads everything while the slow one has read nothing.
    let seen = next(&mut fast, 501).await;
    assert_eq!(seen.last().map(String::as_str), Some("applied a@500"));
    let seen = next(&mut slow, 501).await;
    assert_eq!(seen[0], "listed");
    let expected: Vec<String> = (1..=500).map(|v| format!("applied a@{v}")).collect();
    assert_eq!(seen[1..], expected[..], "every change, in order");
    // A subscriber that went away is forgotten, the others still served.
    drop(slow);
    send(&feed, [Event::Apply(cm("a", "501"))]);
    assert_eq!(next(&mut fast, 1).await, ["applied a@501"]);
}

#[tokio::test]
async fn a_subscriber_that_leaves_events_unread_past_the_bound_fails_liveness() {
    let (feed, informer, health, _) = informer(Duration::from_millis(500));
    let mut reader = informer.subscribe("reader");
    let mut stuck = informer.subscribe("stuck");
    list(&feed, &[("a", "1")]);
    next(&mut reader, 2).await;
    assert!(health.is_live(), "unread for less than the bound");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!health.is_live());
    let problems = health.problems(false);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("subscriber stuck has left 2 events unread"),
        "{problems:?}"
    );
    // Reading catches up: live again.
    next(&mut stuck, 2).await;
    assert!(health.is_live() && health.is_ready());
    // A subscriber that went away (a term that ended) is not stalled.
    send(&feed, [Event::Apply(cm("a", "2"))]);
    next(&mut reader, 1).await;
    drop(stuck);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(health.is_live());
}

#[tokio::test(start_paused = true)]
async fn a_failing_watch_is_not_ready_until_an_event_proves_it_back() {
    let (feed, informer, health, metrics) = informer(Duration::from_secs(600));
    let mut sub = informer.subscribe("test");
    list(&feed, &[("a", "1")]);
    next(&mut sub, 2).await;
    assert!(health.is_ready());
    feed.unbounded_send(Err(watcher::Error::NoResourceVersion))
        .expect("the informer runs");
    send(&feed, [Event::Apply(cm("a", "2"))]);
    // The error is retried with backoff (paused time skips it), then the event arrives.
    assert_eq!(next(&mut sub, 1).await, ["applied a@2"]);
    let labels = crate::metrics::ResourceLabels::new("ConfigMap");
    assert_eq!(metrics.errors.get_or_create(&labels).get(), 1);
    assert!(
        health.is_ready(),
        "an event after the error proves the watch back"
    );
}

#[tokio::test]
async fn each_change_comes_with_the_state_before_it() {
    let (feed, informer, _, _) = informer(Duration::from_secs(60));
    let mut sub = informer.subscribe("test");
    list(&feed, &[("a", "1"), ("b", "1")]);
    next(&mut sub, 3).await;
    send(
        &feed,
        [
            Event::Apply(cm("a", "2")),
            Event::Apply(cm("c", "1")),
            Event::Delete(cm("b", "1")),
        ],
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (change, previous) =
            tokio::time::timeout(Duration::from_secs(5), sub.recv_with_previous())
                .await
                .expect("a change in time")
                .expect("the informer runs");
        let before = previous.map_or_else(
            || "new".to_owned(),
            |p| p.metadata.resource_version.clone().unwrap_or_default(),
        );
        seen.push(format!("{} (before: {before})", text(&change)));
    }
    assert_eq!(
        seen,
        [
            "applied a@2 (before: 1)",
            "applied c@1 (before: new)",
            "deleted b@1 (before: 1)"
        ]
    );
    // A re-list that found changes says what they replaced too.
    list(&feed, &[("a", "3"), ("c", "1")]);
    let (change, previous) = sub.recv_with_previous().await.expect("the informer runs");
    assert_eq!(text(&change), "applied a@3");
    assert_eq!(
        previous.and_then(|p| p.metadata.resource_version.clone()),
        Some("2".to_owned())
    );
}

#[tokio::test]
async fn the_initial_state_is_one_shared_snapshot_counted_as_unread_until_handed_out() {
    let (feed, informer, _, _) = informer(Duration::from_secs(60));
    let mut sub = informer.subscribe("test");
    list(&feed, &[("a", "1"), ("b", "1"), ("c", "1")]);
    tokio::time::timeout(Duration::from_secs(5), async {
        while !informer.has_listed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("listed");
    assert_eq!(
        sub.stats.queued.load(Ordering::Acquire),
        4,
        "3 objects and InitDone"
    );
    next(&mut sub, 2).await;
    assert_eq!(sub.stats.queued.load(Ordering::Acquire), 2);
    next(&mut sub, 2).await;
    assert_eq!(sub.stats.queued.load(Ordering::Acquire), 0);
}

/// An API server whose watch cache has not caught up yet: `b` was written just before the watch
/// started, so a streaming list served from the cache as it is (`resourceVersion=0`) lacks it
/// and sends it as a change after the list; a consistent one (no resourceVersion: the server
/// waits until its cache holds everything written before the request) holds it. Resumed watches
/// wait forever.
fn lagging_watch_cache() -> kube::Client {
    use kube::client::Body;
    crate::client::from_fn(|request: http::Request<Body>| async move {
        let query = request.uri().query().unwrap_or_default().to_owned();
        let pairs: Vec<&str> = query.split('&').collect();
        if !pairs.contains(&"sendInitialEvents=true") {
            return std::future::pending().await;
        }
        let object = |name: &str, version: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": version}})
        };
        let bookmark = |version: &str| {
            serde_json::json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"resourceVersion": version,
                             "annotations": {"k8s.io/initial-events-end": "true"}}}})
        };
        let added = |o| serde_json::json!({"type": "ADDED", "object": o});
        let events = if pairs.contains(&"resourceVersion=0") {
            vec![
                added(object("a", "1")),
                bookmark("1"),
                added(object("b", "2")),
            ]
        } else {
            vec![
                added(object("a", "1")),
                added(object("b", "2")),
                bookmark("2"),
            ]
        };
        let body: String = events.iter().map(|e| format!("{e}\n")).collect();
        http::Response::new(Body::from(body.into_bytes()))
    })
}

#[tokio::test]
async fn a_streaming_list_holds_everything_written_before_the_watch_started() {
    let runtime = crate::Runtime::new(lagging_watch_cache())
        .with_initial_list(crate::InitialList::StreamingList);
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(runtime.client(), "ns");
    let health = Health::new("test");
    let informer = runtime.informer(api, watcher::Config::default(), "ConfigMap", &health);
    let mut sub = informer.subscribe("test");
    let mut initial = next(&mut sub, 2).await;
    initial.sort();
    assert_eq!(
        initial,
        ["initial a@1", "initial b@2"],
        "b, written before the watch started, is in the first list, not a change after it"
    );
    assert_eq!(next(&mut sub, 1).await, ["listed"]);
}

/// An API server whose WatchList feature is off (Kubernetes 1.33's default): it refuses a
/// streaming list with `422 Invalid`, as its request validation does, and answers a LIST; a
/// watch from the list's version waits forever. `refused` counts the refused requests.
fn without_watch_list(refused: Arc<std::sync::atomic::AtomicUsize>) -> kube::Client {
    use kube::client::Body;
    crate::client::from_fn(move |request: http::Request<Body>| {
        let refused = refused.clone();
        async move {
            let query = request.uri().query().unwrap_or_default().to_owned();
            let pairs: Vec<&str> = query.split('&').collect();
            if pairs.contains(&"sendInitialEvents=true") {
                refused.fetch_add(1, Ordering::AcqRel);
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
                    "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: \
                                Forbidden: sendInitialEvents is forbidden for watch unless the \
                                WatchList feature gate is enabled"});
                let mut response = http::Response::new(Body::from(status.to_string().into_bytes()));
                *response.status_mut() = http::StatusCode::UNPROCESSABLE_ENTITY;
                return response;
            }
            if pairs.contains(&"watch=true") {
                return std::future::pending().await;
            }
            let object = |name: &str, version: &str| {
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "ns", "resourceVersion": version}})
            };
            let list = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "2"},
                "items": [object("a", "1"), object("b", "2")]});
            http::Response::new(Body::from(list.to_string().into_bytes()))
        }
    })
}

#[tokio::test]
async fn a_refused_streaming_list_falls_back_to_a_list_once_for_the_process() {
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Streaming lists are the default.
    let runtime = crate::Runtime::new(without_watch_list(refused.clone()));
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(runtime.client(), "ns");
    let health = Health::new("test");
    let first = runtime.informer(
        api.clone(),
        watcher::Config::default(),
        "ConfigMap",
        &health,
    );
    let mut sub = first.subscribe("test");
    let mut initial = next(&mut sub, 2).await;
    initial.sort();
    assert_eq!(initial, ["initial a@1", "initial b@2"], "listed instead");
    assert_eq!(next(&mut sub, 1).await, ["listed"]);
    assert_eq!(refused.load(Ordering::Acquire), 1);

    // A watch started later lists first, without asking for a streaming list again.
    let second = runtime.informer(api, watcher::Config::default(), "ConfigMap", &health);
    let mut sub = second.subscribe("test");
    assert_eq!(next(&mut sub, 3).await.len(), 3);
    assert_eq!(refused.load(Ordering::Acquire), 1, "asked once per process");
}
