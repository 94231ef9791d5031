//! A program under measurement: conflux or a peer (Reloader, wave, kopy, replicator, Flux
//! Operator, kustomize-controller), started as its own process against the test cluster, and what
//! can be read of it from outside: peak RSS, CPU seconds, readiness, its Prometheus metrics.
//!
//! Every contender talks to the API server as the cluster's `audited` user, so its requests (and
//! only its requests) land in the audit log, where [`crate::audit`] counts them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// How to start one contender. In `args` and `env` values, `{kubeconfig}`, `{metrics}` (a free
/// port), `{health}` (another) and `{dir}` (a scratch directory of its own) are replaced at start.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Its name in the tables (`conflux`, `Reloader`, `kustomize-controller (watchers on)`).
    pub name: String,
    /// The version it was built from.
    pub version: String,
    /// The executable.
    pub program: PathBuf,
    /// Its flags.
    pub args: Vec<String>,
    /// Extra environment (`KUBECONFIG` is always set).
    pub env: Vec<(String, String)>,
    /// Path of its readiness endpoint on the `{health}` port, when it has one.
    pub readiness: Option<String>,
}

impl Contender {
    /// The command line as printed next to the numbers (placeholders left in place).
    pub fn command_line(&self) -> String {
        let program = self
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let env: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| k != "KUBECONFIG")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut parts = env;
        parts.push(program);
        parts.extend(self.args.iter().cloned());
        parts.join(" ")
    }

    /// Starts it against `kubeconfig`, logging to `log`.
    pub fn start(&self, kubeconfig: &Path, scratch: &Path, log: &Path) -> anyhow::Result<Running> {
        let metrics = conflux_tests::free_port();
        let health = conflux_tests::free_port();
        std::fs::create_dir_all(scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let fill = |value: &str| {
            value
                .replace("{kubeconfig}", &kubeconfig.display().to_string())
                .replace("{metrics}", &metrics.to_string())
                .replace("{health}", &health.to_string())
                .replace("{dir}", &scratch.display().to_string())
        };
        let mut command = Command::new(&self.program);
        command
            .args(self.args.iter().map(|a| fill(a)))
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                std::fs::File::create(log)
                    .with_context(|| format!("creating {}", log.display()))?,
            ))
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(log)
                    .with_context(|| format!("opening {}", log.display()))?,
            ));
        for (key, value) in &self.env {
            command.env(key, fill(value));
        }
        let started = Instant::now();
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        let pid = child.id();
        conflux_tests::reap_with_this_process(pid);
        let peak = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    match crate::memory_kib(pid) {
                        Some((hwm, _)) => peak.fetch_max(hwm, Ordering::Relaxed),
                        None => break,
                    };
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        Ok(Running {
            name: self.name.clone(),
            child,
            pid,
            started,
            metrics,
            health,
            readiness: self.readiness.clone(),
            peak,
            done,
            log: log.to_path_buf(),
        })
    }
}

/// A started contender. Stopped (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Running {
    name: String,
    child: Child,
    pid: u32,
    started: Instant,
    metrics: u16,
    health: u16,
    readiness: Option<String>,
    peak: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    log: PathBuf,
}

/// What [`Running::settle`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    /// From start until its readiness endpoint answered 200 (when it has one).
    pub ready: Option<Duration>,
    /// From start until it went quiet: readiness passed, and less than 2 % of a core used over a
    /// whole second.
    pub settled: Duration,
    /// CPU seconds (user + system) used until then.
    pub cpu_seconds: f64,
}

impl Running {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its metrics port (the `{metrics}` placeholder).
    pub fn metrics_port(&self) -> u16 {
        self.metrics
    }

    /// CPU seconds (user + system) used so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or_default()
    }

    /// Peak resident set so far, in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let now = crate::memory_kib(self.pid).map(|(hwm, _)| hwm).unwrap_or(0);
        self.peak.load(Ordering::Relaxed).max(now) as f64 / 1024.0
    }

    /// Resident set now, in MiB.
    pub fn rss_mib(&self) -> f64 {
        crate::memory_kib(self.pid).map_or(0.0, |(_, rss)| rss as f64 / 1024.0)
    }

    /// Fails when the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            anyhow::bail!(
                "{} exited ({status}); see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }

    /// Waits until it is ready (when it has a readiness endpoint) and then quiet.
    pub async fn settle(&mut self, timeout: Duration) -> anyhow::Result<Settled> {
        let deadline = Instant::now() + timeout;
        let mut ready = None;
        if let Some(path) = self.readiness.clone() {
            loop {
                self.check_alive()?;
                if http_get(self.health, &path).is_some_and(|(code, _)| code == 200) {
                    ready = Some(self.started.elapsed());
                    break;
                }
                if Instant::now() >= deadline {
                    anyhow::bail!("{} not ready after {timeout:?}", self.name);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Quiet: under 2 % of a core over one second, measured in 250 ms steps.
        let mut window: std::collections::VecDeque<(Instant, f64)> = Default::default();
        loop {
            self.check_alive()?;
            let now = Instant::now();
            let cpu = self.cpu_seconds();
            window.push_back((now, cpu));
            while window
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_millis(1000))
            {
                window.pop_front();
            }
            if let Some((t0, c0)) = window.front()
                && now.duration_since(*t0) >= Duration::from_millis(750)
                && self.started.elapsed() > Duration::from_secs(2)
                && (cpu - c0) < 0.02
            {
                return Ok(Settled {
                    ready,
                    settled: now.duration_since(self.started),
                    cpu_seconds: cpu,
                });
            }
            if now >= deadline {
                anyhow::bail!("{} still busy after {timeout:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Its Prometheus metrics (`/metrics` on the metrics port), if it serves them.
    pub fn metrics_text(&self) -> Option<String> {
        http_get(self.metrics, "/metrics")
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body)
    }

    /// Stops it: SIGKILL, as an OOM kill or a node loss would.
    pub fn kill(mut self) {
        self.stop();
    }

    /// Stops it as Kubernetes deletes a pod: SIGTERM, then SIGKILL after `grace`. Returns its peak
    /// RSS in MiB.
    pub async fn terminate(mut self, grace: Duration) -> f64 {
        let peak = self.peak_rss_mib();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.stop();
        peak
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `GET path` on 127.0.0.1:`port` as HTTP/1.0 (so Go's servers neither keep the connection open
/// nor chunk the body): the status and body, `None` when nothing answers within 5 s.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// User + system CPU seconds of process `pid` (`/proc/<pid>/stat`, at 100 ticks a second).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
    // fixed: utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Sum of a Prometheus counter over all its series whose labels contain every `label="value"`
/// in `matching`.
pub fn metric_sum(text: &str, name: &str, matching: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| matching.iter().all(|m| line.contains(m)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_matching_series() {
        let text = "# HELP x\ncontroller_runtime_reconcile_total{controller=\"kustomization\",result=\"success\"} 3\ncontroller_runtime_reconcile_total{controller=\"kustomization\",result=\"error\"} 2\ncontroller_runtime_reconcile_total{controller=\"other\",result=\"error\"} 7\ncontroller_runtime_reconcile_total_x 9\n";
        assert_eq!(
            metric_sum(
                text,
                "controller_runtime_reconcile_total",
                &["controller=\"kustomization\""]
            ),
            5.0
        );
        assert_eq!(
            metric_sum(text, "controller_runtime_reconcile_total", &[]),
            12.0
        );
    }

    #[test]
    fn reads_own_cpu() {
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
