//! The real `conflux run` binary against the test cluster: it becomes ready, serves metrics and
//! health, and stops cleanly on SIGTERM.

use conflux_tests::{free_port, http_get};
use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn conflux_run_serves_health_and_metrics_and_stops_on_sigterm() {
    let cluster = conflux_tests::cluster();
    let (metrics_port, health_port) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args([
            "run",
            "--controllers=flux-trigger",
            "--log-encoding=console",
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--health-addr=127.0.0.1:{health_port}"),
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start conflux");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, _)) = http_get(health_port, "/readyz") {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("conflux exited early: {status}");
        }
        assert!(Instant::now() < deadline, "conflux did not become ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(http_get(health_port, "/healthz").map(|r| r.0), Some(200));

    // Hundreds of idle connections, and slow ones that never finish their request head, on both
    // ports: the probes still answer (each connection has its own task and a head timeout).
    let mut hogs = Vec::new();
    for port in [health_port, metrics_port] {
        for i in 0..200 {
            let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            if i % 4 == 0 {
                let _ = write!(stream, "GET /readyz HTTP/1.1\r\nHost: slo");
            }
            hogs.push(stream);
        }
    }
    assert!(hogs.len() >= 300, "connections opened: {}", hogs.len());
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            http_get(health_port, path).map(|r| r.0),
            Some(200),
            "{path}"
        );
    }
    drop(hogs);
    let (status, metrics) = http_get(metrics_port, "/metrics").expect("metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("conflux_index_keys"), "{metrics}");
    assert!(metrics.contains("conflux_index_referrers"), "{metrics}");

    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "conflux did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "graceful exit, got {status}");
}

/// A new user's first run: the ConfigSync CRD is not installed. conflux stays not ready, and both
/// `/readyz` and one log line say what is missing; installing the CRD makes it ready.
#[test]
fn missing_crd_is_reported_then_picked_up_once_installed() {
    let cluster = conflux_tests::cluster();
    let health_port = free_port();
    let log =
        conflux_tests::repo_root().join(format!("target/missing-crd-{}.log", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args([
            "run",
            "--controllers=sync",
            "--log-encoding=console",
            "--metrics-addr=0",
            &format!("--health-addr=127.0.0.1:{health_port}"),
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start conflux");
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        if let Some((503, body)) = http_get(health_port, "/readyz")
            && body.contains("not served")
        {
            break body;
        }
        assert!(child.try_wait().ok().flatten().is_none(), "conflux exited");
        assert!(Instant::now() < deadline, "readiness never named the CRD");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        body.contains(
            "ConfigSync: not served by the API server (is its CustomResourceDefinition installed?)"
        ),
        "{body}"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines = text
        .lines()
        .filter(|l| l.contains("is its CustomResourceDefinition installed"))
        .count();
    assert_eq!(lines, 1, "one log line per incident:\n{text}");

    let crd = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .arg("crd")
        .output()
        .expect("conflux crd");
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_saphyr::from_slice(&crd.stdout).expect("a CRD");
    tokio::runtime::Runtime::new().expect("runtime").block_on(async {
        let api: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(cluster.client().await);
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &kube::api::PatchParams::apply("conflux-test").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await
        .expect("install the CRD");
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while http_get(health_port, "/readyz").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "not ready after the CRD was installed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
}
