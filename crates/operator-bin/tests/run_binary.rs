//! The real `conflux run` binary against the test cluster: it becomes ready, serves metrics and
//! health, and stops cleanly on SIGTERM.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

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
