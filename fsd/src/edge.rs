//! The connection edge of the network process: accepting TCP connections (TLS handshakes with a
//! deadline, a connection cap, keepalive, an idle timeout) and, for every request on any
//! listener, establishing who is calling (`Identity`) before a service sees it. It also pins the
//! daemon instance: a client that began its session with another instance of this daemon (it
//! restarted) is told so with UNAVAILABLE instead of being served by a daemon that never saw its
//! session.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::{Connected, UdsConnectInfo};

use crate::identity::{self, Identity, TokenEntry};

/// The response header naming this daemon instance, and the request header a client sends to
/// say which instance its session began with.
pub const INSTANCE_HEADER: &str = "fsd-instance";

/// Methods that answer without a client credential on a TLS listener (the handshake still
/// applies): orchestrators probe health without the application's tokens.
const OPEN_METHODS: &[&str] = &["/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"];

/// Limits of one TCP listener.
#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub tcp_keepalive: Duration,
}

/// Requests in flight on one connection and when the last one ended, for the idle timeout.
#[derive(Debug)]
struct ConnState {
    in_flight: AtomicUsize,
    last_active: Mutex<Instant>,
}

impl ConnState {
    fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(*self.last_active.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Marks one request (its whole response body included) in flight on its connection.
#[derive(Debug)]
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn begin(state: &Arc<ConnState>) -> InFlight {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        state.touch();
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a TCP connection tells each of its requests (a request extension).
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    pub tls: bool,
    /// Names of the client certificate the handshake verified (empty without one).
    pub cert_names: Arc<Vec<String>>,
    state: Arc<ConnState>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An accepted TCP connection (TLS already negotiated when the listener has TLS).
pub struct Conn {
    stream: Stream,
    info: PeerInfo,
    idle_timeout: Duration,
    idle_timer: Pin<Box<tokio::time::Sleep>>,
    /// Held for the connection's life: the listener's connection cap.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Connected for Conn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl Conn {
    /// Fails the connection once it has carried no request for the idle timeout. Keepalive pings
    /// do not count: an open connection that asks nothing is closed and may simply reconnect.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        while self.idle_timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            match self.info.state.idle_since() {
                Some(since) if now.duration_since(since) >= self.idle_timeout => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "connection idle"));
                }
                Some(since) => self.idle_timer.as_mut().reset((since + self.idle_timeout).into()),
                None => self.idle_timer.as_mut().reset((now + self.idle_timeout).into()),
            }
        }
        Ok(())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // hyper keeps a read pending on every HTTP/2 connection, so the idle timer is polled
        // (and its waker registered) here.
        if let Err(e) = self.poll_idle(cx) {
            tracing::debug!(remote = ?self.info.remote, "closing idle connection");
            return Poll::Ready(Err(e));
        }
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// TCP keepalive, so a peer that vanished without a FIN is noticed even between HTTP/2 pings.
fn set_keepalive(stream: &TcpStream, idle: Duration) -> io::Result<()> {
    let keepalive =
        socket2::TcpKeepalive::new().with_time(idle).with_interval(Duration::from_secs(10)).with_retries(3);
    socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive)
}

/// Accepts connections on `listener` until `stop`, negotiating TLS when `tls` is set, and yields
/// them to the server. A handshake runs in its own task under a deadline, so a slow or hostile
/// peer never holds up the accept loop; connections beyond the cap are closed at once.
pub fn incoming(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: TcpLimits,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<Conn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, remote) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(%remote, max = limits.max_connections, "connection cap reached; closing the new connection");
                continue;
            };
            let _ = stream.set_nodelay(true);
            if let Err(e) = set_keepalive(&stream, limits.tcp_keepalive) {
                tracing::debug!(error = %e, "cannot set TCP keepalive");
            }
            let tx = tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let (stream, cert_names) = match tls {
                    None => (Stream::Plain(stream), Vec::new()),
                    Some(acceptor) => {
                        match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                let names = tls
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .map(crate::tls::cert_names)
                                    .unwrap_or_default();
                                (Stream::Tls(Box::new(tls)), names)
                            }
                            Ok(Err(e)) => {
                                tracing::info!(%remote, error = %e, "TLS handshake refused");
                                return;
                            }
                            Err(_) => {
                                tracing::info!(%remote, "TLS handshake timed out");
                                return;
                            }
                        }
                    }
                };
                let tls = matches!(stream, Stream::Tls(_));
                let state = Arc::new(ConnState {
                    in_flight: AtomicUsize::new(0),
                    last_active: Mutex::new(Instant::now()),
                });
                let conn = Conn {
                    stream,
                    info: PeerInfo { remote: Some(remote), tls, cert_names: Arc::new(cert_names), state },
                    idle_timeout: limits.idle_timeout,
                    idle_timer: Box::pin(tokio::time::sleep(limits.idle_timeout)),
                    _slot: slot,
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// The per-request half of the edge: a tower layer over every service of a listener.
#[derive(Debug, Clone)]
pub struct Edge {
    instance: http::HeaderValue,
    tokens: Arc<Vec<TokenEntry>>,
}

impl Edge {
    /// `instance`: this network process's random id; `tokens`: the configured bearer tokens.
    pub fn new(instance: &str, tokens: Vec<TokenEntry>) -> Result<Edge, http::header::InvalidHeaderValue> {
        Ok(Edge { instance: http::HeaderValue::from_str(instance)?, tokens: Arc::new(tokens) })
    }

    /// Establishes the caller's identity, or says why the request is refused.
    fn admit<B>(&self, request: &http::Request<B>) -> Result<Identity, tonic::Status> {
        if let Some(pinned) = request.headers().get(INSTANCE_HEADER)
            && pinned != self.instance
        {
            return Err(tonic::Status::unavailable(format!(
                "the daemon restarted: this session began with daemon instance {}, which is gone (now {}); \
                 start a new session and read files again",
                pinned.to_str().unwrap_or("?"),
                self.instance.to_str().unwrap_or("?"),
            )));
        }
        let extensions = request.extensions();
        if let Some(uds) = extensions.get::<UdsConnectInfo>() {
            // The kernel vouches for a Unix peer; tokens are for TLS connections.
            return Ok(Identity { uid: uds.peer_cred.map(|c| c.uid()), ..Identity::default() });
        }
        let Some(peer) = extensions.get::<PeerInfo>() else {
            return Ok(Identity::default());
        };
        let header = request.headers().get(http::header::AUTHORIZATION);
        if !peer.tls {
            if header.is_some() {
                // A token sent in clear text is compromised: refuse loudly rather than use it.
                return Err(tonic::Status::unauthenticated("bearer tokens are accepted only over TLS"));
            }
            // Plaintext TCP is loopback only (config refuses more): an identity of its own.
            return Ok(Identity { tcp: true, ..Identity::default() });
        }
        let token = match header {
            None => None,
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| tonic::Status::unauthenticated("malformed authorization header"))?;
                match identity::verify_bearer(text, &self.tokens, &peer.cert_names) {
                    Ok(name) => Some(name),
                    Err(e) => {
                        tracing::info!(remote = ?peer.remote, certificate = ?peer.cert_names.first(), reason = %e, "refused a bearer token");
                        return Err(tonic::Status::unauthenticated(e.to_string()));
                    }
                }
            }
        };
        let open = OPEN_METHODS.contains(&request.uri().path());
        if token.is_none() && peer.cert_names.is_empty() && !open {
            return Err(tonic::Status::unauthenticated(
                "this daemon needs a client certificate or a bearer token (authorization: Bearer <token>)",
            ));
        }
        Ok(Identity { uid: None, cert_names: peer.cert_names.as_ref().clone(), token, tcp: false })
    }
}

impl<S> tower::Layer<S> for Edge {
    type Service = EdgeService<S>;

    fn layer(&self, inner: S) -> EdgeService<S> {
        EdgeService { inner, edge: self.clone() }
    }
}

#[derive(Debug, Clone)]
pub struct EdgeService<S> {
    inner: S,
    edge: Edge,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S> tower::Service<http::Request<Body>> for EdgeService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<http::Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let instance = self.edge.instance.clone();
        let identity = match self.edge.admit(&request) {
            Ok(identity) => identity,
            Err(status) => {
                let mut response = status.into_http::<Body>();
                response.headers_mut().insert(INSTANCE_HEADER, instance);
                return Box::pin(std::future::ready(Ok(response)));
            }
        };
        let in_flight = request.extensions().get::<PeerInfo>().map(|peer| InFlight::begin(&peer.state));
        request.extensions_mut().insert(identity);
        // The service that was polled ready is the one that must be called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let mut response = inner.call(request).await?;
            response.headers_mut().insert(INSTANCE_HEADER, instance);
            Ok(match in_flight {
                Some(guard) => response.map(|body| Body::new(Guarded { inner: body, _guard: guard })),
                None => response,
            })
        })
    }
}

/// A response body that keeps its request counted in flight until the body is done or dropped,
/// so a long stream never counts as idle.
struct Guarded {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
