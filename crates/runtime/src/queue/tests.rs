//! The queue's schedule driven by a hand-made clock, and the queue itself on tokio's paused
//! clock: no waiting, no API server.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const WINDOW: Window = Window {
    settle: Duration::from_millis(50),
    quiet: Duration::from_secs(2),
    deadline: Duration::from_secs(300),
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

type Sched = Schedule<&'static str, BTreeSet<String>>;

/// Runs every due key of `s` at `now`, finishing each with `next`; the keys run.
fn run_due(s: &mut Sched, now: Instant, next: Next) -> Vec<(&'static str, BTreeSet<String>)> {
    let due = s.take_due(now, usize::MAX);
    for (key, payload) in &due {
        s.finish(key, payload.clone(), next, now);
    }
    due
}

#[test]
fn a_lone_change_runs_after_the_settle_and_its_companions_join_it() {
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    s.debounce("web", set(&["cm"]), WINDOW, t0);
    s.debounce("web", set(&["secret"]), WINDOW, t0 + ms(20));
    assert!(s.take_due(t0 + ms(49), 10).is_empty(), "still settling");
    assert_eq!(
        s.next_due(),
        Some(t0 + ms(50)),
        "the companion does not move it"
    );
    let due = s.take_due(t0 + ms(50), 10);
    assert_eq!(due, [("web", set(&["cm", "secret"]))], "one run for both");
}

#[test]
fn a_flapping_config_runs_once_at_once_and_once_when_it_settles() {
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    let mut runs = Vec::new();
    // Ten changes a second for 60 s; the handler acts (rolls) each time it runs.
    for i in 0..600u64 {
        let now = t0 + ms(100 * i);
        runs.extend(
            run_due(&mut s, now, Next::Hold(WINDOW.quiet))
                .into_iter()
                .map(|_| now),
        );
        s.debounce("web", set(&["s"]), WINDOW, now);
    }
    let last = t0 + ms(100 * 599);
    for step in 1..=100u64 {
        let now = last + ms(50 * step);
        runs.extend(
            run_due(&mut s, now, Next::Hold(WINDOW.quiet))
                .into_iter()
                .map(|_| now),
        );
    }
    assert_eq!(
        runs,
        [t0 + ms(100), last + WINDOW.quiet],
        "the first change at once (the next tick after its settle), the rest when they stop"
    );
    assert!(s.is_empty());
}

#[test]
fn a_stream_of_changes_postpones_the_trailing_run_only_to_its_deadline() {
    let mut s = Sched::new(Policy::RECONCILE);
    let window = Window {
        deadline: Duration::from_secs(30),
        ..WINDOW
    };
    let t0 = Instant::now();
    s.debounce("web", set(&["s"]), window, t0);
    assert_eq!(
        run_due(&mut s, t0 + ms(50), Next::Hold(window.quiet)).len(),
        1
    );
    // A change every second from then on.
    for i in 1..=60u64 {
        s.debounce("web", set(&["s"]), window, t0 + Duration::from_secs(i));
    }
    assert_eq!(
        s.due(&"web"),
        Some(t0 + Duration::from_secs(31)),
        "the first trailing change's deadline"
    );
}

#[test]
fn a_change_that_only_lands_metadata_leaves_the_key_quiet() {
    // The handler found nothing to do (Done): the next change is a leading edge again.
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    s.debounce("web", set(&["cm"]), WINDOW, t0);
    run_due(&mut s, t0 + ms(50), Next::Done);
    s.debounce("web", set(&["cm"]), WINDOW, t0 + ms(100));
    assert_eq!(s.due(&"web"), Some(t0 + ms(150)));
}

#[test]
fn changes_that_arrive_while_the_handler_runs_join_the_trailing_run() {
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    s.debounce("web", set(&["a"]), WINDOW, t0);
    let taken = s.take_due(t0 + ms(50), 10);
    assert_eq!(taken.len(), 1);
    s.debounce("web", set(&["b"]), WINDOW, t0 + ms(60));
    assert!(
        s.take_due(t0 + Duration::from_secs(10), 10).is_empty(),
        "never handed out twice at once"
    );
    s.finish("web", set(&["a"]), Next::Hold(WINDOW.quiet), t0 + ms(70));
    assert_eq!(s.due(&"web"), Some(t0 + ms(2070)), "after the hold");
    let due = s.take_due(t0 + ms(2070), 10);
    assert_eq!(due, [("web", set(&["b"]))]);
}

#[test]
fn an_add_runs_now_but_never_pulls_a_bursts_window_in() {
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    s.add("api", set(&[]), t0);
    assert_eq!(s.due(&"api"), Some(t0));
    // Held after acting, then a trailing change; an add (its own write seen by the watch) keeps
    // the trailing time.
    s.debounce("web", set(&["s"]), WINDOW, t0);
    run_due(&mut s, t0 + ms(50), Next::Hold(WINDOW.quiet));
    s.debounce("web", set(&["s"]), WINDOW, t0 + ms(100));
    s.add("web", set(&["own write"]), t0 + ms(200));
    assert_eq!(s.due(&"web"), Some(t0 + ms(2100)));
    // An add to a held key waits for the hold.
    s.add("db", set(&[]), t0);
    run_due(&mut s, t0, Next::Hold(Duration::from_secs(1)));
    s.add("db", set(&[]), t0 + ms(10));
    assert_eq!(s.due(&"db"), Some(t0 + Duration::from_secs(1)));
    // A delayed add is pulled in by an earlier one.
    s.add_at("cache", set(&[]), t0 + Duration::from_secs(60));
    s.add("cache", set(&[]), t0 + ms(5));
    assert_eq!(s.due(&"cache"), Some(t0 + ms(5)));
}

#[test]
fn retries_back_off_per_key_keep_their_payload_and_reset_on_success() {
    let mut s = Sched::new(Policy::ROLLOUT);
    let t0 = Instant::now();
    s.add("web", set(&["cm"]), t0);
    let mut now = t0;
    let mut delays = Vec::new();
    for _ in 0..4 {
        let due = s.take_due(now, 10);
        assert_eq!(due, [("web", set(&["cm"]))]);
        s.finish("web", set(&["cm"]), Next::Retry, now);
        let next = s.due(&"web").expect("retried");
        delays.push((next - now).as_millis());
        now = next;
    }
    assert_eq!(delays, [250, 500, 1000, 2000]);
    assert_eq!(s.failures(&"web"), 4);
    s.take_due(now, 10);
    s.finish("web", set(&[]), Next::Done, now);
    assert_eq!(s.failures(&"web"), 0);
    s.add("web", set(&[]), now);
    s.take_due(now, 10);
    s.finish("web", set(&[]), Next::After(ms(700)), now);
    assert_eq!(s.due(&"web"), Some(now + ms(700)));
    s.remove(&"web");
    assert!(s.is_empty());
}

#[test]
fn take_due_hands_out_the_earliest_first_up_to_its_bound() {
    let mut s = Sched::new(Policy::RECONCILE);
    let t0 = Instant::now();
    for (i, key) in ["c", "a", "b"].into_iter().enumerate() {
        s.add_at(key, set(&[]), t0 + ms(i as u64));
    }
    let due: Vec<&str> = s
        .take_due(t0 + ms(5), 2)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(due, ["c", "a"]);
    assert_eq!(s.running(), 2);
    assert_eq!(s.next_due(), Some(t0 + ms(2)));
}

fn queue(concurrency: usize, gate: Gate) -> WorkQueue<String, BTreeSet<String>> {
    WorkQueue::new(
        QueueConfig::new("test", concurrency),
        gate,
        Arc::new(QueueMetrics::default()),
    )
}

#[tokio::test(start_paused = true)]
async fn nothing_is_handed_out_before_the_gate_opens_and_no_key_runs_twice_at_once() {
    let gate = Gate::new();
    let mut configs = gate.part("watch ConfigMap");
    let mut workloads = gate.part("watch Deployment");
    let q = queue(4, gate.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let active = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (active, overlapped) = (active.clone(), overlapped.clone());
        move |key: String, payload: &BTreeSet<String>| {
            let (tx, active, overlapped) = (tx.clone(), active.clone(), overlapped.clone());
            let payload = payload.clone();
            async move {
                if active.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlapped.fetch_add(1, Ordering::SeqCst);
                }
                let _ = tx.send((key, payload));
                tokio::time::sleep(ms(100)).await;
                active.fetch_sub(1, Ordering::SeqCst);
                Next::Done
            }
        }
    };
    tokio::spawn(q.clone().run(handler));
    q.add("web".into(), set(&["a"]));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(rx.try_recv().is_err(), "the gate is closed");
    assert_eq!(gate.waiting_for(), ["watch ConfigMap", "watch Deployment"]);
    configs.open();
    workloads.open();
    let (key, payload) = rx.recv().await.expect("handled");
    assert_eq!((key.as_str(), payload), ("web", set(&["a"])));
    // Added again while it runs: handed out after, with both newer payloads, not at once.
    q.add("web".into(), set(&["b"]));
    tokio::time::sleep(ms(10)).await;
    q.add("web".into(), set(&["c"]));
    let (_, payload) = rx.recv().await.expect("handled again");
    assert_eq!(payload, set(&["b", "c"]));
    assert_eq!(overlapped.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn keys_run_at_most_concurrency_at_once() {
    let gate = Gate::new();
    let q = queue(2, gate);
    let active = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (active, peak, done) = (active.clone(), peak.clone(), done.clone());
        move |_key: String, _payload: &BTreeSet<String>| {
            let (active, peak, done) = (active.clone(), peak.clone(), done.clone());
            async move {
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(ms(100)).await;
                active.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                Next::Done
            }
        }
    };
    for i in 0..10 {
        q.add(format!("w{i}"), BTreeSet::new());
    }
    tokio::spawn(q.clone().run(handler));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(done.load(Ordering::SeqCst), 10);
    assert_eq!(peak.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn batches_share_their_work_and_an_unanswered_key_is_not_stuck() {
    let q = queue(1, Gate::new());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = move |batch: Vec<(String, BTreeSet<String>)>| {
        let tx = tx.clone();
        async move {
            let keys: Vec<String> = batch.iter().map(|(k, _)| k.clone()).collect();
            let _ = tx.send(keys);
            // Answers only the first key.
            batch
                .into_iter()
                .take(1)
                .map(|(k, v)| (k, v, Next::Done))
                .collect()
        }
    };
    for key in ["a", "b", "c"] {
        q.add(key.into(), BTreeSet::new());
    }
    tokio::spawn(q.clone().run_batches(2, handler));
    assert_eq!(rx.recv().await.expect("a batch"), ["a", "b"]);
    assert_eq!(rx.recv().await.expect("a batch"), ["c"]);
    q.add("b".into(), BTreeSet::new());
    assert_eq!(rx.recv().await.expect("b again"), ["b"]);
}

#[test]
fn a_limit_allows_its_burst_then_says_how_long_to_wait() {
    let limit = Limit::per_second_f64(2.0, 3).expect("a finite rate");
    for _ in 0..3 {
        assert_eq!(limit.check(), Ok(()));
    }
    let wait = limit.check().expect_err("the burst is spent");
    assert!(wait > Duration::ZERO && wait <= ms(500), "{wait:?}");
    assert!(
        Limit::per_second_f64(0.0, 3).is_none(),
        "no rate: unlimited"
    );
    assert!(Limit::per_second_f64(f64::INFINITY, 3).is_none());
}

#[tokio::test]
async fn a_gate_without_parts_is_open_and_an_opening_opens_once() {
    let gate = Gate::new();
    assert!(gate.is_open());
    gate.opened().await;
    let mut part = gate.part("watch Secret");
    assert!(!gate.is_open());
    part.open();
    part.open();
    assert!(gate.is_open());
    let _other = gate.part("watch Job");
    assert_eq!(gate.waiting_for(), ["watch Job"]);
}
