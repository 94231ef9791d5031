//! A fault proxy between a client (the `conflux` binary, or a kube client) and the test
//! cluster's real API server.
//!
//! It terminates TLS with the API server's own certificate (signed by the cluster CA, valid for
//! 127.0.0.1), so clients keep verifying TLS, and forwards each connection over its own TLS
//! connection to the API server (verifying the cluster CA). HTTP/1.1 only, bodies streamed both
//! ways, so watches work through it. Faults, changeable at any time:
//! - [`FaultProxy::drop_all`]: close every open connection now (watches included);
//! - [`FaultProxy::set_drop_every`]: close every connection at random times within a period;
//! - [`FaultProxy::set_refuse`]: close new connections at once;
//! - [`FaultProxy::set_delay`]: delay every request;
//! - [`FaultProxy::set_error_rate`]: answer a fraction of requests (optionally writes only) with
//!   429, 500 or 503 and a Kubernetes `Status` body, never forwarding them.
//!
//! Random choices come from a seed given at start, printed once, so a failing run can be
//! repeated. Everything listens on 127.0.0.1 only, and the proxy stops when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Cluster;

/// What the proxy injected so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultStats {
    /// Connections accepted and forwarded.
    pub connections: u64,
    /// Connections refused.
    pub refused: u64,
    /// Times open connections were dropped (each drop closes all of them).
    pub drops: u64,
    /// Requests answered with an injected error.
    pub injected: u64,
    /// Requests forwarded.
    pub forwarded: u64,
}

#[derive(Debug)]
struct Shared {
    refuse: AtomicBool,
    delay_ms: AtomicU64,
    /// Parts per million of requests answered with an error, and whether only writes count.
    error_ppm: AtomicU64,
    errors_on_writes_only: AtomicBool,
    /// Period of random drops in milliseconds (0 = off).
    drop_every_ms: AtomicU64,
    rng: Mutex<u64>,
    drop_tx: watch::Sender<u64>,
    connections: AtomicU64,
    refused: AtomicU64,
    drops: AtomicU64,
    injected: AtomicU64,
    forwarded: AtomicU64,
}

impl Shared {
    fn random(&self, n: u64) -> u64 {
        let mut x = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % n.max(1)
    }

    fn drop_all(&self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
        self.drop_tx.send_modify(|g| *g += 1);
    }
}

/// A running fault proxy. Dropping it stops it.
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    kubeconfig: PathBuf,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy in front of `cluster`'s API server, with `seed` for its random choices.
    ///
    /// # Panics
    /// When the cluster's certificates or kubeconfig cannot be read or the port cannot be bound
    /// (a test that needs the proxy must fail then).
    pub fn start(cluster: &Cluster, seed: u64) -> FaultProxy {
        eprintln!("fault proxy seed: {seed}");
        let certs = cluster.dir().join("certs");
        let upstream = upstream_addr(cluster.kubeconfig());
        let server_config = server_config(&certs);
        let client_config = client_config(&certs);
        let (drop_tx, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            refuse: AtomicBool::new(false),
            delay_ms: AtomicU64::new(0),
            error_ppm: AtomicU64::new(0),
            errors_on_writes_only: AtomicBool::new(true),
            drop_every_ms: AtomicU64::new(0),
            rng: Mutex::new(seed.max(1)),
            drop_tx,
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            drops: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().expect("proxy address").port();
        let url = format!("https://127.0.0.1:{port}");
        let kubeconfig = cluster.dir().join(format!("proxy-{port}.kubeconfig"));
        let text = std::fs::read_to_string(cluster.kubeconfig()).expect("read kubeconfig");
        let text = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("server:") {
                    format!("    server: {url}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&kubeconfig, text + "\n").expect("write the proxy kubeconfig");

        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let run_shared = shared.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
                let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
                tokio::spawn(random_drops(run_shared.clone()));
                let accept = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else {
                            continue;
                        };
                        if run_shared.refuse.load(Ordering::Relaxed) {
                            run_shared.refused.fetch_add(1, Ordering::Relaxed);
                            drop(tcp);
                            continue;
                        }
                        run_shared.connections.fetch_add(1, Ordering::Relaxed);
                        let (shared, acceptor, connector) =
                            (run_shared.clone(), acceptor.clone(), connector.clone());
                        tokio::spawn(async move {
                            let mut dropped = shared.drop_tx.subscribe();
                            tokio::select! {
                                () = serve(shared.clone(), tcp, acceptor, connector, upstream) => {}
                                _ = dropped.changed() => {}
                            }
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stop_rx => {}
                }
            });
        });
        FaultProxy {
            shared,
            kubeconfig,
            url,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// A kubeconfig (the cluster's admin one, pointing at the proxy; TLS verified).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The proxy's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes every open connection now.
    pub fn drop_all(&self) {
        self.shared.drop_all();
    }

    /// Closes every open connection at random times, on average once per `period`; `None` stops.
    pub fn set_drop_every(&self, period: Option<Duration>) {
        let ms = period.map_or(0, |p| {
            u64::try_from(p.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.shared.drop_every_ms.store(ms, Ordering::Relaxed);
    }

    /// Refuses (closes at once) new connections while `true`.
    pub fn set_refuse(&self, refuse: bool) {
        self.shared.refuse.store(refuse, Ordering::Relaxed);
    }

    /// Delays every request by `delay` before forwarding it.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Answers `rate` (0.0–1.0) of the requests with 429, 500 or 503; only POST/PUT/PATCH/DELETE
    /// when `writes_only`. Watch requests are never answered with an error here.
    pub fn set_error_rate(&self, rate: f64, writes_only: bool) {
        let ppm = (rate.clamp(0.0, 1.0) * 1_000_000.0) as u64;
        self.shared.error_ppm.store(ppm, Ordering::Relaxed);
        self.shared
            .errors_on_writes_only
            .store(writes_only, Ordering::Relaxed);
    }

    /// Turns every fault off.
    pub fn heal(&self) {
        self.set_refuse(false);
        self.set_drop_every(None);
        self.set_delay(Duration::ZERO);
        self.set_error_rate(0.0, true);
    }

    /// What was injected so far.
    pub fn stats(&self) -> FaultStats {
        let s = &self.shared;
        FaultStats {
            connections: s.connections.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            drops: s.drops.load(Ordering::Relaxed),
            injected: s.injected.load(Ordering::Relaxed),
            forwarded: s.forwarded.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.drop_all();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn random_drops(shared: Arc<Shared>) {
    loop {
        let period = shared.drop_every_ms.load(Ordering::Relaxed);
        if period == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        // Uniform in [0, 2 × period): one drop per period on average.
        let wait = shared.random(2 * period);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if shared.drop_every_ms.load(Ordering::Relaxed) != 0 {
            shared.drop_all();
        }
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Serves one client connection over its own upstream connection until either side closes.
async fn serve(
    shared: Arc<Shared>,
    tcp: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    upstream: std::net::SocketAddr,
) {
    let Ok(tls) = acceptor.accept(tcp).await else {
        return;
    };
    let Ok(upstream_tcp) = TcpStream::connect(upstream).await else {
        return;
    };
    let name = ServerName::IpAddress(upstream.ip().into());
    let Ok(upstream_tls) = connector.connect(name, upstream_tcp).await else {
        return;
    };
    let Ok((sender, connection)) =
        hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(upstream_tls)).await
    else {
        return;
    };
    tokio::spawn(connection);
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (shared, sender) = (shared.clone(), sender.clone());
        async move { handle(shared, sender, request).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

async fn handle(
    shared: Arc<Shared>,
    sender: Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Incoming>>>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, hyper::Error> {
    let is_watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let is_write = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let ppm = shared.error_ppm.load(Ordering::Relaxed);
    let eligible = !is_watch && (is_write || !shared.errors_on_writes_only.load(Ordering::Relaxed));
    if ppm > 0 && eligible && shared.random(1_000_000) < ppm {
        shared.injected.fetch_add(1, Ordering::Relaxed);
        let (code, reason) = match shared.random(3) {
            0 => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            1 => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        };
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "injected by the fault proxy",
            "reason": reason, "code": code.as_u16(),
        })
        .to_string();
        let mut response = Response::new(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        );
        *response.status_mut() = code;
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        if code == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
        }
        return Ok(response);
    }
    let delay = shared.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    shared.forwarded.fetch_add(1, Ordering::Relaxed);
    // HTTP/1.1: one request at a time per connection, as the client sends them.
    let response = sender.lock().await.send_request(request).await?;
    Ok(response.map(BodyExt::boxed))
}

fn server_config(certs: &Path) -> rustls::ServerConfig {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join("apiserver.crt"))
            .expect("read apiserver.crt")
            .collect::<Result<_, _>>()
            .expect("parse apiserver.crt");
    let key = PrivateKeyDer::from_pem_file(certs.join("apiserver.key")).expect("apiserver.key");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

fn client_config(certs: &Path) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(certs.join("ca.crt")).expect("read ca.crt") {
        roots
            .add(cert.expect("parse ca.crt"))
            .expect("add the cluster CA");
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The API server's address, from the kubeconfig's `server:` line.
fn upstream_addr(kubeconfig: &Path) -> std::net::SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let server = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server:"))
        .expect("a server in the kubeconfig")
        .trim();
    server
        .trim_start_matches("https://")
        .parse()
        .expect("server is https://IP:PORT")
}
