//! Test harness: one real control plane (etcd, kube-apiserver, kube-controller-manager) per test
//! binary, started through `hack/cluster.sh` (docs/design.md section 7), and with
//! [`flux_cluster`] the real Flux controllers, Flux Operator and a Git server beside it.
//!
//! The first call to [`cluster`] (or [`flux_cluster`]) builds the binaries if they are not cached
//! yet, starts the cluster in `target/test-clusters/<binary>-<pid>` and spawns a detached reaper
//! that stops exactly those processes once this test process is gone, however it ends (success,
//! panic, abort or kill), and then deletes its etcd data (the logs stay). A test binary uses one
//! of the two, never both.
//! Every test gets its own [`kube::Client`] (clients are tied to the tokio runtime of the test that
//! built them) and isolates itself in a unique namespace from [`Cluster::namespace`].

pub mod fault_proxy;
pub mod leak;
pub mod objects;
pub mod props;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running test cluster.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
    git_url: Option<String>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static FLUX_CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NAMESPACE_COUNTER: AtomicU32 = AtomicU32::new(0);

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The cluster of this test binary, started on first use.
///
/// # Panics
/// When the cluster cannot be built or started, with the reason (a test that needs Kubernetes must
/// fail then, never pass silently).
pub fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(|| start(false)) {
        Ok(cluster) => cluster,
        Err(reason) => panic!("the test cluster could not start: {reason}"),
    }
}

/// The cluster of this test binary with the real Flux beside it (`hack/cluster.sh up --flux`):
/// source-, kustomize- (two shards: Flux's config watchers on, and off for Kustomizations
/// labelled `sharding.fluxcd.io/key=nowatch`), helm- and notification-controller, Flux Operator,
/// and a Git server at [`Cluster::git_url`]. Started on first use.
///
/// # Panics
/// As [`cluster`].
pub fn flux_cluster() -> &'static Cluster {
    match FLUX_CLUSTER.get_or_init(|| start(true)) {
        Ok(cluster) => cluster,
        Err(reason) => panic!("the test cluster with Flux could not start: {reason}"),
    }
}

/// A control plane of its own in `dir` (a cluster left there before is stopped and the directory
/// emptied first), not shared with [`cluster`]: for a benchmark that wants a fresh cluster per
/// measurement. Stop it with [`Cluster::down`]; it is stopped when this process ends in any case.
///
/// # Errors
/// When the cluster cannot be built or started, with the reason.
pub fn fresh_cluster(dir: &Path) -> Result<Cluster, String> {
    let script = repo_root().join("hack/cluster.sh");
    stop(&script, dir);
    // Nothing of an earlier cluster there (its etcd data above all) may be reused.
    let _ = std::fs::remove_dir_all(dir);
    start_in(dir, false)
}

fn start(flux: bool) -> Result<Cluster, String> {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".to_owned());
    let dir = repo_root()
        .join("target/test-clusters")
        .join(format!("{binary}-{}", std::process::id()));
    start_in(&dir, flux)
}

fn start_in(dir: &Path, flux: bool) -> Result<Cluster, String> {
    let root = repo_root();
    let script = root.join("hack/cluster.sh");
    let flux_arg: &[&str] = if flux { &["--flux"] } else { &[] };
    let build = Command::new("bash")
        .arg(&script)
        .arg("build")
        .args(flux_arg)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !build.success() {
        return Err(format!("`{} build` failed ({build})", script.display()));
    }
    let dir = dir.to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let up = Command::new("bash")
        .arg(&script)
        .arg("up")
        .arg(&dir)
        .args(flux_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !up.status.success() {
        stop(&script, &dir);
        return Err(format!(
            "`{} up {}` failed ({}):\n{}",
            script.display(),
            dir.display(),
            up.status,
            String::from_utf8_lossy(&up.stderr)
        ));
    }
    spawn_reaper(&script, &dir)?;
    let git_url = std::fs::read_to_string(dir.join("git-url"))
        .ok()
        .map(|url| url.trim().to_owned());
    Ok(Cluster {
        kubeconfig: dir.join("kubeconfig"),
        dir,
        git_url,
    })
}

/// Starts a process in its own session that waits for this test process to end and then stops the
/// cluster, so no etcd or apiserver outlives the tests, even after a panic or a kill. It then drops
/// the etcd data (about 75 MB a cluster, several GB over the suite) and keeps the logs.
fn spawn_reaper(script: &Path, dir: &Path) -> Result<(), String> {
    let watch = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; bash '{script}' down '{dir}'; \
         rm -rf '{dir}/etcd-data'",
        pid = std::process::id(),
        script = script.display(),
        dir = dir.display(),
    );
    let setsid = Path::new("/usr/bin/setsid").exists();
    let mut cmd = if setsid {
        let mut c = Command::new("/usr/bin/setsid");
        c.arg("bash");
        c
    } else {
        Command::new("bash")
    };
    cmd.arg("-c")
        .arg(watch)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| {
            stop(script, dir);
            format!("cannot start the cluster reaper: {e}")
        })
}

/// Makes sure process `pid` (a helper this test process started, such as a shared `conflux`)
/// is SIGKILLed once this test process is gone, however it ends.
pub fn reap_with_this_process(pid: u32) {
    let watch = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; kill -9 {pid} 2>/dev/null",
        me = std::process::id(),
    );
    let _ = Command::new("bash")
        .arg("-c")
        .arg(watch)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

fn stop(script: &Path, dir: &Path) {
    let _ = Command::new("bash")
        .arg(script)
        .arg("down")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Cluster {
    /// Stops exactly the processes of this cluster (`hack/cluster.sh down`); its directory stays.
    pub fn down(&self) {
        stop(&repo_root().join("hack/cluster.sh"), &self.dir);
    }

    /// Directory holding the cluster's data, logs, pid files and kubeconfig.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The Git server's base URL (`$CONFLUX_GIT_URL`), when the cluster runs Flux.
    pub fn git_url(&self) -> Option<&str> {
        self.git_url.as_deref()
    }

    /// Commits `files` (path, content) as the whole tree of a new commit and pushes it, forced, to
    /// `<git_url>/<repo>.git` on branch `main`; returns the commit's SHA.
    ///
    /// # Panics
    /// When the cluster runs no Git server or git fails.
    pub fn git_push(&self, repo: &str, files: &[(&str, &str)]) -> String {
        let url = format!(
            "{}/{repo}.git",
            self.git_url()
                .expect("the cluster runs no Git server (use flux_cluster)")
        );
        let n = NAMESPACE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let work = self.dir.join(format!("git-work/{repo}-{n}"));
        let _ = std::fs::remove_dir_all(&work);
        for (path, content) in files {
            let file = work.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).expect("git work dir");
            }
            std::fs::write(&file, content).expect("git work file");
        }
        std::fs::create_dir_all(&work).expect("git work dir");
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args([
                    "-c",
                    "user.name=conflux-test",
                    "-c",
                    "user.email=test@conflux.invalid",
                ])
                .args(args)
                .current_dir(&work)
                .output()
                .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
            assert!(
                out.status.success(),
                "git {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        git(&["init", "--quiet", "--initial-branch=main"]);
        git(&["add", "--all"]);
        git(&["commit", "--quiet", "--allow-empty", "-m", "test"]);
        git(&["push", "--quiet", "--force", &url, "main"]);
        git(&["rev-parse", "HEAD"])
    }

    /// A kube `Config` for the admin user.
    pub async fn config(&self) -> Config {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("loading {}: {e}", self.kubeconfig.display()));
        config.read_timeout = Some(Duration::from_secs(60));
        config
    }

    /// A new admin client, bound to the calling test's runtime.
    pub async fn client(&self) -> Client {
        Client::try_from(self.config().await).unwrap_or_else(|e| panic!("building client: {e}"))
    }

    /// The admin impersonating `user` in `groups`, as `kubectl --as --as-group` does.
    pub async fn impersonating(&self, user: &str, groups: &[&str]) -> Client {
        let mut config = self.config().await;
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups =
            Some(groups.iter().map(|g| (*g).to_owned()).collect());
        Client::try_from(config).unwrap_or_else(|e| panic!("building client: {e}"))
    }

    /// A client authenticated as one of the static-token users (`alice`, `bob`, both in the group
    /// `tenants`, with no permissions until a test grants them), for RBAC tests.
    pub async fn client_as(&self, user: &str) -> Client {
        let mut config = self.config().await;
        config.auth_info.token = Some(self.token(user).into());
        Client::try_from(config).unwrap_or_else(|e| panic!("building client: {e}"))
    }

    /// The static token of `user` (from the cluster's `tokens.csv`; never printed).
    fn token(&self, user: &str) -> String {
        let tokens = std::fs::read_to_string(self.dir.join("certs/tokens.csv"))
            .unwrap_or_else(|e| panic!("reading tokens.csv: {e}"));
        tokens
            .lines()
            .find_map(|line| {
                let mut fields = line.split(',');
                let token = fields.next()?;
                (fields.next()? == user).then(|| token.to_owned())
            })
            .unwrap_or_else(|| panic!("no static token for user {user}"))
    }

    /// A kubeconfig file for one of the static-token users (the admin's server and CA, TLS
    /// verified, and the user's token), written owner-only next to the cluster's own. The user
    /// `audited` is an admin whose every request the API server writes to [`Cluster::audit_log`].
    pub fn kubeconfig_as(&self, user: &str) -> PathBuf {
        let token = self.token(user);
        let admin = std::fs::read_to_string(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let mut out = String::new();
        for line in admin.lines() {
            match line.trim_start().strip_prefix("token: ") {
                Some(_) => out.push_str(&format!("    token: {token}\n")),
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        let path = self.dir.join(format!("{user}.kubeconfig"));
        std::fs::write(&path, out).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        path
    }

    /// The API server's audit log (requests of the user `audited`, metadata only).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// Creates a namespace with a unique name starting with `prefix` and returns its name.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> String {
        let n = NAMESPACE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name },
        }))
        .unwrap_or_else(|e| panic!("namespace object: {e}"));
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }
}

/// The path of a tool of the test ground that `hack/cluster.sh build --tools-only --<name>` builds
/// from its Go module (`helm`, `crane`, `kustomize`), built first if it is not cached yet.
///
/// # Panics
/// When the build fails (a test that needs the tool must fail then, never pass silently).
pub fn tool(name: &str) -> PathBuf {
    let script = repo_root().join("hack/cluster.sh");
    let build = Command::new("bash")
        .arg(&script)
        .args(["build", "--tools-only", &format!("--{name}")])
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        build.success(),
        "`hack/cluster.sh build --tools-only --{name}` failed ({build}); its log is above"
    );
    let path = Command::new("bash")
        .arg(&script)
        .arg(format!("{name}-bin"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let path = PathBuf::from(String::from_utf8_lossy(&path.stdout).trim());
    assert!(path.is_file(), "no {name} at {}", path.display());
    path
}

/// A `helm` command (the test ground's, [`tool`]) whose configuration, cache and data live under
/// target/helm-home, never in the user's home.
pub fn helm_command() -> Command {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    let home = repo_root().join("target/helm-home");
    let mut cmd = Command::new(HELM.get_or_init(|| tool("helm")));
    cmd.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    cmd
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for a listener a test starts).
///
/// It is taken below the kernel's ephemeral range, as `hack/cluster.sh` takes the cluster's:
/// a port the kernel handed out once may be handed out again, as the local end of any client's
/// connection, before the process the test starts binds it (a flaky "cannot listen").
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| (12_000..=65_535).contains(low))
        .unwrap_or(32_768);
    let span = low - 10_000;
    // Each test process starts elsewhere in the range; threads of one process never share.
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let port = 10_000 + (start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span);
        let port = u16::try_from(port).unwrap_or(u16::MAX);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below {low}")
}

/// `GET path` on 127.0.0.1:`port` (HTTP/1.1, plain): the status and body, `None` when nothing
/// answers within 5 s.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// The API server's message for a refused request (empty when it succeeded).
pub fn refusal<T>(result: Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => String::new(),
        Err(kube::Error::Api(status)) => status.message,
        Err(other) => other.to_string(),
    }
}

/// Sets namespace labels (a merge patch).
pub async fn label_namespace(client: &Client, ns: &str, labels: &[(&str, &str)]) {
    let labels: std::collections::BTreeMap<&str, &str> = labels.iter().copied().collect();
    patch_namespace(
        client,
        ns,
        serde_json::json!({"metadata": {"labels": labels}}),
    )
    .await;
}

/// Removes a namespace label.
pub async fn unlabel_namespace(client: &Client, ns: &str, key: &str) {
    let labels = serde_json::json!({"metadata": {"labels": {key: null}}});
    patch_namespace(client, ns, labels).await;
}

async fn patch_namespace(client: &Client, ns: &str, patch: serde_json::Value) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap_or_else(|e| panic!("patch namespace {ns}: {e}"));
}

/// The baseline conflux's reload controller remembers of the workload `kind` `ns`/`name`, read
/// from its memory Secrets in its namespace `records_ns` as docs/design.md section 5.1 describes
/// them (labelled `conflux.dev/memory=reload`, one data key `<kind>.<namespace>.<name>` per
/// workload, the value `<uid> <baseline> <versions>`); written a moment after it changes.
pub async fn remembered_baseline(
    client: &Client,
    records_ns: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<String> {
    let shards = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), records_ns)
        .list(&kube::api::ListParams::default().labels("conflux.dev/memory=reload"))
        .await
        .ok()?;
    let key = format!("{}.{ns}.{name}", kind.to_lowercase());
    shards.items.into_iter().find_map(|shard| {
        let value = shard.data?.remove(&key)?;
        let text = String::from_utf8(value.0).ok()?;
        text.split(' ').nth(1).map(str::to_owned)
    })
}

/// Polls `check` every 100 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
