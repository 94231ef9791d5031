//! The conflux image, built by `hack/image.sh build --binary` around the binary cargo built for
//! this test: its shared libraries, crane, the same packaging as the release image, without a
//! second, release build of the workspace in CI. Unpacked by hand from its OCI layout the way a
//! container runtime does (digests checked, layers in order), and run from that root file system
//! in a chroot as user 65532: the Deployment's user, with nothing of the build machine's files.
//! `helm install` of charts/conflux on the test cluster, then conflux started as its Deployment
//! would start it (the image's entrypoint, the Deployment's args and env, the ServiceAccount's own
//! token and the cluster CA where a pod finds them), does every controller's job and becomes
//! ready; `helm upgrade` turns protect on, and the new RBAC and args take effect; `helm
//! uninstall` keeps the ConfigSync CRD and its objects. `hack/image.sh push` puts the same image
//! (same digest) into a registry (crane's own, on loopback).
//!
//! The test cluster has no kubelet: the Deployment's pods stay Pending, so conflux runs as a
//! process here. Needs root (chroot).

mod fault_support;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use conflux_tests::eventually;
use fault_support::{Conflux, World};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The release name and namespace the chart documents.
const RELEASE: &str = "conflux";
const NS: &str = "conflux-system";
/// The user and group the Deployment runs as.
const USER: u32 = 65532;

/// The built image: its OCI layout and what its index and config say.
struct Image {
    layout: PathBuf,
    /// The reference the layout's index names (`io.containerd.image.name`).
    reference: String,
    config: Value,
}

/// `hack/image.sh build --binary` once per test binary, around the `conflux` cargo built for it.
fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let root = conflux_tests::repo_root();
        let build = Command::new("bash")
            .arg(root.join("hack/image.sh"))
            .arg("build")
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_conflux"))
            .output()
            .expect("run hack/image.sh build");
        let log = String::from_utf8_lossy(&build.stderr);
        eprint!("{log}");
        assert!(
            build.status.success(),
            "hack/image.sh build failed ({}):\n{log}",
            build.status
        );
        let layout = root.join("target/image/oci");
        let index: Value = read_json(&layout.join("index.json"));
        let manifests = index["manifests"].as_array().expect("manifests");
        assert_eq!(manifests.len(), 1, "one image in the layout");
        let descriptor = &manifests[0];
        let reference = descriptor["annotations"]["io.containerd.image.name"]
            .as_str()
            .expect("the index names the image")
            .to_owned();
        let manifest: Value =
            serde_json::from_slice(&blob(&layout, descriptor)).expect("manifest JSON");
        assert_eq!(
            manifest["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        let config: Value =
            serde_json::from_slice(&blob(&layout, &manifest["config"])).expect("config JSON");
        Image {
            layout,
            reference,
            config,
        }
    })
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The blob a descriptor points at, its size and digest checked.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).expect("blob");
    assert_eq!(
        Some(bytes.len() as u64),
        descriptor["size"].as_u64(),
        "size of {digest}"
    );
    assert_eq!(sha256(&bytes), digest, "content of {digest}");
    bytes
}

/// Unpacks the image's layers, in order, into a new directory under target/, as a runtime does:
/// each layer's digest (compressed) and diff ID (uncompressed) checked, then extracted with its
/// owners and modes.
fn unpack(image: &Image, name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = conflux_tests::repo_root().join(format!(
        "target/image-test/{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("rootfs dir");
    let index: Value = read_json(&image.layout.join("index.json"));
    let manifest: Value =
        serde_json::from_slice(&blob(&image.layout, &index["manifests"][0])).expect("manifest");
    let diff_ids = image.config["rootfs"]["diff_ids"]
        .as_array()
        .expect("diff_ids");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), diff_ids.len());
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let tar = pipe("gzip", &["-dc"], &blob(&image.layout, layer));
        assert_eq!(json!(sha256(&tar)), *diff_id, "diff ID");
        let dir_arg = dir.to_str().expect("UTF-8 path");
        pipe(
            "tar",
            &[
                "--extract",
                "--directory",
                dir_arg,
                "--same-owner",
                "--preserve-permissions",
            ],
            &tar,
        );
    }
    dir
}

/// Runs `program args` with `input` on stdin; its stdout.
fn pipe(program: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("wait");
    writer.join().expect("writer").expect("write stdin");
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// `chroot --userspec=65532:65532 ROOT COMMAND...` with exactly `env`.
fn chroot(root: &Path, command: &[String], env: &[(String, String)]) -> Command {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    assert_eq!(
        uid, 0,
        "running the image needs root (chroot): run the tests as root, as CI does"
    );
    // Looked up on this process's PATH: the child's environment is emptied.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let chroot = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("chroot"))
        .find(|p| p.is_file())
        .expect("chroot (coreutils) on PATH");
    let mut cmd = Command::new(chroot);
    cmd.arg(format!("--userspec={USER}:{USER}"))
        .arg(root)
        .args(command)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// The image's entrypoint.
fn entrypoint(image: &Image) -> Vec<String> {
    image.config["config"]["Entrypoint"]
        .as_array()
        .expect("Entrypoint")
        .iter()
        .map(|v| v.as_str().expect("string").to_owned())
        .collect()
}

#[test]
fn the_image_holds_what_the_deployment_runs_and_runs_as_65532() {
    let image = image();
    let config = &image.config;
    assert_eq!(config["os"], "linux");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(config["architecture"], arch);
    assert_eq!(config["config"]["User"], format!("{USER}:{USER}"));
    assert_eq!(entrypoint(image), ["/usr/local/bin/conflux"]);
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );

    // The name the build gives is the one `conflux install --export` (and the chart) deploys.
    let export = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(["install", "--export"])
        .output()
        .expect("conflux install --export");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&export.stdout)).expect("YAML");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], image.reference);
    assert_eq!(pod["securityContext"]["runAsUser"], USER);
    assert_eq!(pod["securityContext"]["runAsGroup"], USER);

    // The file system: root's, read-only for the user (as readOnlyRootFilesystem makes it), the
    // binary and its loader, the user named.
    let root = unpack(image, "contents");
    let mut files = Vec::new();
    walk(&root, &mut files);
    for path in &files {
        let meta = std::fs::symlink_metadata(path).expect("metadata");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{} is root's",
            path.display()
        );
        assert_eq!(
            meta.permissions().mode() & 0o022,
            0,
            "{} is writable by others",
            path.display()
        );
    }
    let relative: Vec<String> = files
        .iter()
        .filter(|p| p.is_file())
        .map(|p| {
            p.strip_prefix(&root)
                .expect("under root")
                .display()
                .to_string()
        })
        .collect();
    assert!(
        relative.contains(&"usr/local/bin/conflux".to_owned()),
        "{relative:?}"
    );
    assert!(
        relative.iter().any(|f| f.contains("ld-linux")),
        "the dynamic loader: {relative:?}"
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    assert!(passwd.contains(":65532:65532:"), "{passwd}");

    // It runs there, as 65532, with nothing of this machine's libraries.
    let output = chroot(
        &root,
        &[entrypoint(image), vec!["--version".to_owned()]].concat(),
        &[],
    )
    .output()
    .expect("chroot");
    assert!(
        output.status.success(),
        "conflux --version in the image: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("conflux {}", env!("CARGO_PKG_VERSION"))
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `hack/image.sh push` puts the very image that was built (same digest) into a registry: crane's
/// own, on loopback.
#[test]
fn hack_image_push_puts_the_built_image_into_a_registry() {
    let image = image();
    let crane = conflux_tests::tool("crane");
    let log = conflux_tests::repo_root().join(format!(
        "target/image-test/{}-registry.log",
        std::process::id()
    ));
    std::fs::create_dir_all(log.parent().expect("parent")).expect("log dir");
    let mut registry = Command::new(&crane)
        .args(["registry", "serve", "--address", "127.0.0.1:0"])
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("crane registry serve");
    conflux_tests::reap_with_this_process(registry.id());
    let mut port = None;
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        port = text
            .split("serving on port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned);
        if port.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let port = port.expect("crane's registry reports its port");
    let reference = format!(
        "127.0.0.1:{port}/team/conflux:v{}",
        env!("CARGO_PKG_VERSION")
    );
    let push = Command::new("bash")
        .arg(conflux_tests::repo_root().join("hack/image.sh"))
        .args(["push", &reference])
        .output()
        .expect("hack/image.sh push");
    assert!(
        push.status.success(),
        "hack/image.sh push: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    let digest = Command::new(&crane)
        .args(["digest", &reference])
        .output()
        .expect("crane digest");
    let index: Value = read_json(&image.layout.join("index.json"));
    assert_eq!(
        String::from_utf8_lossy(&digest.stdout).trim(),
        index["manifests"][0]["digest"]
            .as_str()
            .expect("the built digest")
    );
    let _ = registry.kill();
    let _ = registry.wait();
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        out.push(path.clone());
        if std::fs::symlink_metadata(&path).expect("metadata").is_dir() {
            walk(&path, out);
        }
    }
}

/// `helm ARGS` against the test cluster; panics when it fails.
fn helm(cluster: &conflux_tests::Cluster, args: &[&str]) -> Output {
    let output = conflux_tests::helm_command()
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The installed Deployment's pod spec.
async fn deployed_pod_spec(admin: &Client) -> Value {
    let deployment = Api::<Deployment>::namespaced(admin.clone(), NS)
        .get("conflux")
        .await
        .expect("the chart's Deployment");
    let value = serde_json::to_value(deployment).expect("JSON");
    value["spec"]["template"]["spec"].clone()
}

/// The installed Deployment's container.
async fn deployed_container(admin: &Client) -> Value {
    deployed_pod_spec(admin).await["containers"][0].clone()
}

/// The `--NAME=:PORT` port among `args`.
fn port_arg(args: &[String], name: &str) -> u16 {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=:")))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no --{name}=:PORT in {args:?}"))
}

/// Starts conflux from a fresh unpack of the image as the Deployment's pod `pod` would run it:
/// the image's entrypoint with the container's args, its env (fieldRefs resolved for that pod),
/// the ServiceAccount's token (TokenRequest), the cluster CA and the namespace where kubelet
/// mounts them, and the API server in KUBERNETES_SERVICE_HOST/PORT (the in-cluster config).
async fn start_as_deployed(
    cluster: &conflux_tests::Cluster,
    admin: &Client,
    pod: &str,
    run: u32,
) -> Conflux {
    let image = image();
    let pod_spec = deployed_pod_spec(admin).await;
    let container = pod_spec["containers"][0].clone();
    let sa_name = pod_spec["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName")
        .to_owned();
    let root = unpack(image, &format!("run{run}"));

    // What kubelet projects into the pod.
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token: TokenRequest = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create_subresource("token", &sa_name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest for the ServiceAccount");
    let token = token
        .status
        .and_then(|s| s.token)
        .expect("TokenRequest returned a token");
    let secrets = root.join("var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&secrets).expect("serviceaccount dir");
    let ca = std::fs::read(cluster.dir().join("certs/ca.crt")).expect("cluster CA");
    for (file, content) in [
        ("token", token.as_bytes()),
        ("ca.crt", &ca[..]),
        ("namespace", NS.as_bytes()),
    ] {
        let path = secrets.join(file);
        std::fs::write(&path, content).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    }

    let kubeconfig = std::fs::read_to_string(cluster.kubeconfig()).expect("kubeconfig");
    let api_port = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .expect("the API server's port")
        .to_owned();
    let mut env = vec![
        ("KUBERNETES_SERVICE_HOST".to_owned(), "127.0.0.1".to_owned()),
        ("KUBERNETES_SERVICE_PORT".to_owned(), api_port),
    ];
    for var in container["env"].as_array().expect("env") {
        let name = var["name"].as_str().expect("name").to_owned();
        let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.namespace") => NS.to_owned(),
            Some("metadata.name") => pod.to_owned(),
            Some(other) => panic!("unexpected fieldRef {other}"),
            None => var["value"].as_str().unwrap_or_default().to_owned(),
        };
        env.push((name, value));
    }
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_owned())
        .collect();
    let log = root.with_extension("log");
    let child = chroot(&root, &[entrypoint(image), args.clone()].concat(), &env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start conflux in the image");
    conflux_tests::reap_with_this_process(child.id());
    Conflux::adopt(
        child,
        port_arg(&args, "metrics-addr"),
        port_arg(&args, "health-addr"),
        log,
    )
}

/// The name of one of the Deployment's (Pending) pods: the identity conflux takes there.
async fn a_pod(admin: &Client) -> String {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    eventually("a pod of the Deployment", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=conflux"))
                .await
                .ok()?;
            list.items.into_iter().find_map(|p| p.metadata.name)
        }
    })
    .await
}

async fn wait_leader(conflux: &Conflux) {
    eventually("conflux to lead", Duration::from_secs(120), || {
        let leading = conflux.is_leader();
        async move { leading.then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_runs_conflux_from_the_image() {
    let cluster = conflux_tests::cluster();
    let admin = cluster.client().await;
    let chart = conflux_tests::repo_root().join("charts/conflux");
    let chart = chart.to_str().expect("UTF-8 path");
    // The probes' and metrics' ports are free ones: conflux shares this machine's network.
    let (metrics, health) = (conflux_tests::free_port(), conflux_tests::free_port());
    helm(
        cluster,
        &[
            "install",
            RELEASE,
            chart,
            "--namespace",
            NS,
            "--create-namespace",
            "--set",
            &format!("metrics.port={metrics}"),
            "--set",
            &format!("health.port={health}"),
            "--set-json",
            r#"extraArgs=["--reload-debounce=500ms"]"#,
        ],
    );

    // The chart's objects are there, the CRD from crds/ first.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    assert!(
        crds.get_opt("configsyncs.conflux.dev")
            .await
            .expect("read")
            .is_some(),
        "helm installed the ConfigSync CRD"
    );
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for name in ["common", "copy", "sync", "reload", "flux-trigger"] {
        assert!(
            roles
                .get_opt(&format!("conflux-{name}"))
                .await
                .expect("read")
                .is_some(),
            "ClusterRole conflux-{name}"
        );
    }
    assert!(
        roles
            .get_opt("conflux-protect")
            .await
            .expect("read")
            .is_none()
    );
    let container = deployed_container(&admin).await;
    assert_eq!(
        container["image"],
        image().reference,
        "the image that was built"
    );

    // conflux from the image, as the pod would run it, with the installed RBAC: a pull copy, a
    // ConfigSync fan-out, a Kustomization reconcile request and a rollout (World).
    let pod = a_pod(&admin).await;
    let world = World::setup(&admin, "image", 2).await;
    let mut conflux = start_as_deployed(cluster, &admin, &pod, 1).await;
    conflux.wait_ready().await;
    wait_leader(&conflux).await;
    world.wait_baselines().await;
    world.change(1).await;
    world.wait_converged(1, Duration::from_secs(180)).await;
    assert!(
        !conflux.log_text().contains("forbidden"),
        "conflux was refused something (log: target/image-test/, run1)"
    );
    assert!(conflux.metrics().contains("conflux_"), "metrics are served");
    conflux.stop();

    // helm upgrade: protect on. The new ClusterRole and args are applied, and conflux started
    // with them applies its admission policy with them.
    helm(
        cluster,
        &[
            "upgrade",
            RELEASE,
            chart,
            "--namespace",
            NS,
            "--reuse-values",
            "--set-json",
            r#"controllers=["copy","sync","reload","flux-trigger","protect"]"#,
        ],
    );
    let args = deployed_container(&admin).await["args"].clone();
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.contains(&"--controllers=copy,sync,reload,flux-trigger,protect")
            && args.contains(&"--protect-mode=admission-policy")
            && args.contains(&"--reload-debounce=500ms"),
        "the upgraded Deployment: {args:?}"
    );
    assert!(
        roles
            .get_opt("conflux-protect")
            .await
            .expect("read")
            .is_some()
    );
    let mut conflux = start_as_deployed(cluster, &admin, &pod, 2).await;
    conflux.wait_ready().await;
    wait_leader(&conflux).await;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    eventually(
        "conflux to apply its admission policy",
        Duration::from_secs(120),
        || {
            let policies = policies.clone();
            async move { policies.get_opt("conflux-protect").await.ok().flatten() }
        },
    )
    .await;
    world.change(2).await;
    world.wait_converged(2, Duration::from_secs(180)).await;
    assert!(
        !conflux.log_text().contains("forbidden"),
        "conflux was refused something after the upgrade (log: target/image-test/, run2)"
    );
    conflux.stop();

    // helm uninstall removes conflux and keeps the CRD, so ConfigSyncs survive.
    helm(cluster, &["uninstall", RELEASE, "--namespace", NS]);
    eventually("the ClusterRoles to go", Duration::from_secs(60), || {
        let roles = roles.clone();
        async move {
            roles
                .get_opt("conflux-copy")
                .await
                .ok()
                .filter(Option::is_none)
                .map(drop)
        }
    })
    .await;
    assert!(
        crds.get_opt("configsyncs.conflux.dev")
            .await
            .expect("read")
            .is_some()
    );
    let syncs: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("conflux.dev", "v1alpha1", "ConfigSync"),
            "configsyncs",
        ),
    );
    assert!(
        !syncs
            .list(&ListParams::default())
            .await
            .expect("list ConfigSyncs")
            .items
            .is_empty(),
        "the ConfigSyncs survive helm uninstall"
    );
    remove_roots();
}

/// Removes the file systems this test unpacked to run conflux (their logs stay beside them).
fn remove_roots() {
    let dir = conflux_tests::repo_root().join("target/image-test");
    let prefix = format!("{}-run", std::process::id());
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(&prefix);
        if ours && path.is_dir() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
