//! The one HTTP server stack: hyper's HTTP/1.1 connections, optionally over TLS (rustls), serving
//! any `tower` service, with limits against slow clients and a graceful shutdown.
//!
//! Both of conflux's servers are one of these: the admin endpoints ([`crate::admin`]) and the
//! protect controller's admission webhook (HTTPS). The server knows nothing of what it serves.
//!
//! On shutdown the listener closes at once, connections in flight finish their request (at most
//! [`Limits::drain`]), and [`Server::serve`] returns once they are gone.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use crate::Error;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Bounds of one server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send its request head (and its TLS handshake); idle and
    /// slow connections are closed after it, so they cannot pile up.
    pub header_read_timeout: Duration,
    /// How long one connection may stay open in all (keep-alive included).
    pub connection_timeout: Duration,
    /// Whether a connection serves more than one request.
    pub keep_alive: bool,
    /// How long connections in flight may take to finish on shutdown.
    pub drain: Duration,
}

impl Default for Limits {
    /// 5 s for the head, 60 s per connection, keep-alive on, 10 s to drain.
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(60),
            keep_alive: true,
            drain: Duration::from_secs(10),
        }
    }
}

/// A bound listener, not serving yet.
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    limits: Limits,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("limits", &self.limits)
            .finish()
    }
}

impl Server {
    /// Listens on `addr` (port 0 picks a free port: see [`Server::local_addr`]).
    pub async fn bind(addr: SocketAddr) -> crate::Result<Server> {
        let listener = TcpListener::bind(addr).await.map_err(|e| Error::Bind {
            addr,
            message: e.to_string(),
        })?;
        let addr = listener.local_addr().map_err(|e| Error::Bind {
            addr,
            message: e.to_string(),
        })?;
        Ok(Server {
            listener,
            addr,
            tls: None,
            limits: Limits::default(),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves HTTPS with `config` (its certificate resolver may swap certificates at any time).
    pub fn with_tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(TlsAcceptor::from(config));
        self
    }

    /// Other connection limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves `service` until `shutdown` resolves, then drains (see the module docs). Every
    /// connection runs on a task of this server's own set, none outlives it.
    pub async fn serve<S, B>(self, service: S, shutdown: impl Future<Output = ()>)
    where
        S: tower_service::Service<Request<Incoming>, Response = Response<B>>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let Server {
            listener,
            tls,
            limits,
            ..
        } = self;
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => {
                    let Ok((socket, _)) = accepted else {
                        // Out of file descriptors and the like: wait a moment instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let watcher = graceful.watcher();
                    let (service, tls) = (service.clone(), tls.clone());
                    connections.spawn(async move {
                        serve_connection(socket, tls, service, limits, watcher).await;
                    });
                }
            }
        }
        drop(listener);
        let open = connections.len();
        if tokio::time::timeout(limits.drain, graceful.shutdown())
            .await
            .is_err()
        {
            debug!(
                open,
                "server: connections still open after the drain bound; closing them"
            );
        }
        connections.shutdown().await;
    }
}

async fn serve_connection<S, B>(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    service: S,
    limits: Limits,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: tower_service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let builder = {
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(limits.keep_alive);
        builder
    };
    let service = TowerToHyperService::new(service);
    // Errors here are the client's (reset, timeout, bad handshake): nothing to report.
    match tls {
        Some(acceptor) => {
            let handshake =
                tokio::time::timeout(limits.header_read_timeout, acceptor.accept(socket));
            let Ok(Ok(stream)) = handshake.await else {
                return;
            };
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let _ =
                tokio::time::timeout(limits.connection_timeout, watcher.watch(connection)).await;
        }
        None => {
            let connection = builder.serve_connection(TokioIo::new(socket), service);
            let _ =
                tokio::time::timeout(limits.connection_timeout, watcher.watch(connection)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::admin::{Admin, Endpoints};
    use crate::health::Health;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut socket = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        socket.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.expect("read");
        answer
    }

    #[tokio::test]
    async fn serves_a_tower_service_and_drains_on_shutdown() {
        let health = Arc::new(Health::new("conflux"));
        health.set_ready(true);
        let admin = Admin::new(
            Endpoints::Health,
            Arc::new(prometheus_client::registry::Registry::default()),
            health,
        );
        let server = Server::bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bound");
        let addr = server.local_addr();
        let stop = CancellationToken::new();
        let serving = tokio::spawn(server.serve(admin, stop.clone().cancelled_owned()));
        let answer = get(addr, "/readyz").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        assert!(get(addr, "/nothing").await.starts_with("HTTP/1.1 404"));
        // An idle keep-alive connection does not hold the shutdown up.
        let idle = TcpStream::connect(addr).await.expect("connect");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("drained in time")
            .expect("no panic");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
        drop(idle);
    }
}
