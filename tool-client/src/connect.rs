//! Reaching a daemon: parse an endpoint, open a tuned HTTP/2 channel over a Unix socket or TCP
//! (TLS with a client certificate and/or a bearer token for fleets), and say hello.
//!
//! A session's channel is a `Link`: one connection reused for every call, re-established with
//! backoff when it drops, carrying the bearer token, and pinned to the daemon instance that
//! answered hello. A daemon that restarted refuses the pinned calls with UNAVAILABLE, so a
//! restart is a clear error, never a call silently served by a daemon that never saw the session.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use hyper_util::rt::TokioIo;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint as TonicEndpoint, Identity};

/// The largest message either side sends: the daemon's default cap.
pub const MAX_MESSAGE_BYTES: usize = 80 << 20;

/// The header the daemon names its instance in (see `fsd::edge`).
pub const INSTANCE_HEADER: &str = "fsd-instance";

/// How long a dropped connection is retried (with backoff) before the call fails.
const RECONNECT_BUDGET: Duration = Duration::from_secs(8);
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Where a daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
    /// `http://HOST:PORT`: a daemon's HTTP listener (or a router in front of it), spoken to in
    /// gRPC-Web over HTTP/1.1 (`crate::web`).
    Web(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid endpoint {0:?}: expected unix:PATH, tcp:HOST:PORT or http://HOST:PORT")]
    Parse(String),
    #[error("cannot connect to {endpoint}: {}", chain(source))]
    Connect { endpoint: String, source: tonic::transport::Error },
    /// The socket could not be opened; `reason` names why (see `describe_connect_failure`).
    #[error("{reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("the daemon at {endpoint} did not answer hello: {}", status_text(status))]
    Hello { endpoint: String, status: tonic::Status },
    #[error(
        "the daemon at {endpoint} closed the TLS connection before answering hello: it refused this client's \
         certificate or requires one (check cert and key, and the daemon's tls_client_ca) ({status})"
    )]
    Handshake { endpoint: String, status: tonic::Status },
    #[error(
        "the daemon at {endpoint} did not answer hello in plaintext: if that listener speaks TLS (the daemon's \
         config sets tls_cert), reach it with --target NAME and a fleet file that names its ca ({})",
        status_text(status)
    )]
    PlaintextToTls { endpoint: String, status: tonic::Status },
    #[error(
        "the server at {endpoint} speaks gRPC but not fsd.v1 (a daemon's health_listen port, or another \
         service): point the client at one of the daemon's listen addresses ({})",
        status_text(status)
    )]
    NotFsd { endpoint: String, status: tonic::Status },
    #[error("refusing to connect to {endpoint}: {reason}")]
    Insecure { endpoint: String, reason: &'static str },
    #[error("invalid bearer token for {endpoint}: it must be printable ASCII")]
    Token { endpoint: String },
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Endpoint, ConnectError> {
        if let Some(path) = text.strip_prefix("unix:").filter(|p| !p.is_empty()) {
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("tcp:").filter(|a| a.contains(':')) {
            return Ok(Endpoint::Tcp(addr.to_owned()));
        }
        if let Some(addr) = text
            .strip_prefix("http://")
            .map(|a| a.trim_end_matches('/'))
            .filter(|a| a.contains(':') && !a.contains('/'))
        {
            return Ok(Endpoint::Web(addr.to_owned()));
        }
        Err(ConnectError::Parse(text.to_owned()))
    }

    /// Whether the endpoint is a loopback address (or a Unix socket): plaintext stays on the host.
    pub fn is_local(&self) -> bool {
        match self {
            Endpoint::Unix(_) => true,
            Endpoint::Tcp(addr) | Endpoint::Web(addr) => {
                let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "tcp:{addr}"),
            Endpoint::Web(addr) => write!(f, "http://{addr}"),
        }
    }
}

/// An error and its sources, outermost first, without repeating a message a wrapper already
/// carries ("transport error: client error (Connect): invalid peer certificate: UnknownIssuer").
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// A status as one line: its code and message, without tonic's metadata dump.
fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// Why a socket to `endpoint` could not be opened, in words that name the problem: a missing
/// socket, a socket nobody listens on, one this user may not open (with its owner and group),
/// a refused TCP port.
pub fn describe_connect_failure(endpoint: &Endpoint, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match (endpoint, error.kind()) {
        (Endpoint::Unix(path), ErrorKind::NotFound) => format!(
            "no daemon at {endpoint}: the socket {} does not exist (is fsd running with --listen {endpoint}?)",
            path.display()
        ),
        (Endpoint::Unix(path), ErrorKind::ConnectionRefused) => format!(
            "no daemon at {endpoint}: nothing listens on the socket {} (the daemon stopped)",
            path.display()
        ),
        (Endpoint::Unix(path), ErrorKind::PermissionDenied) => permission_denied(endpoint, path),
        (Endpoint::Tcp(_), ErrorKind::ConnectionRefused) => {
            format!("no daemon at {endpoint}: the connection was refused (nothing listens on that port)")
        }
        _ => format!("cannot connect to {endpoint}: {error}"),
    }
}

/// Permission denied on a Unix socket: whose socket it is, and who is asking.
fn permission_denied(endpoint: &Endpoint, path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self").map(|m| (m.uid(), m.gid())).ok();
    let who = match me {
        Some((uid, _)) => format!("this user ({})", name_of("/etc/passwd", uid, "uid")),
        None => "this user".to_owned(),
    };
    match std::fs::metadata(path) {
        Ok(meta) => format!(
            "permission denied on the socket of {endpoint}: it belongs to {} and group {} (mode {:04o}) and \
             {who} is neither; add this user to the group, or run as the owner",
            name_of("/etc/passwd", meta.uid(), "uid"),
            name_of("/etc/group", meta.gid(), "gid"),
            meta.mode() & 0o7777,
        ),
        Err(_) => format!(
            "permission denied on the socket of {endpoint}: {who} may not search a directory above {}",
            path.display()
        ),
    }
}

/// `alice (uid 1000)` from a passwd- or group-format file; the number alone when not listed.
fn name_of(file: &str, id: u32, kind: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let name = text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let listed: u32 = fields.nth(1)?.parse().ok()?;
        (listed == id).then(|| name.to_owned())
    });
    match name {
        Some(name) => format!("{name} ({kind} {id})"),
        None => format!("{kind} {id}"),
    }
}

/// TLS material for one daemon, already read from its files.
#[derive(Clone)]
pub struct TlsCredentials {
    /// PEM bundle of the CAs that sign the daemon's certificate.
    pub ca_pem: Vec<u8>,
    /// PEM certificate chain and key of this client (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the daemon's certificate must carry (default: the endpoint's host).
    pub server_name: Option<String>,
}

/// How this client proves who it is to one daemon.
#[derive(Clone, Default)]
pub struct Credentials {
    pub tls: Option<TlsCredentials>,
    /// Sent as `authorization: Bearer <token>`; only ever over TLS (or, to an `http://`
    /// endpoint, as `x-fsd-authorization` and only on loopback).
    pub token: Option<String>,
    /// Extra headers on every call (`http://` endpoints: a router's `X-Sandbox-ID` and the like).
    pub headers: Vec<(String, String)>,
}

// Never print a key or a token.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("tls", &self.tls.as_ref().map(|t| (t.identity.is_some(), t.server_name.clone())))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The tuned endpoint every channel starts from; large windows because tonic's defaults cost
/// streaming several times over.
fn tonic_endpoint(endpoint: &Endpoint, tls: bool) -> Result<TonicEndpoint, ConnectError> {
    let uri = match endpoint {
        Endpoint::Unix(_) => "http://fsd.local".to_owned(),
        Endpoint::Tcp(addr) if tls => format!("https://{addr}"),
        Endpoint::Tcp(addr) | Endpoint::Web(addr) => format!("http://{addr}"),
    };
    Ok(TonicEndpoint::from_shared(uri)
        .map_err(|source| ConnectError::Connect { endpoint: endpoint.to_string(), source })?
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20)))
}

/// Opens a channel; large windows because tonic's defaults cost streaming several times over.
pub async fn channel(endpoint: &Endpoint) -> Result<Channel, ConnectError> {
    let tonic_endpoint = tonic_endpoint(endpoint, false)?;
    let failure = Failure::default();
    let connected = match endpoint {
        Endpoint::Unix(path) => {
            let path = path.clone();
            let failure = failure.clone();
            let named = endpoint.clone();
            tonic_endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let (path, failure, named) = (path.clone(), failure.clone(), named.clone());
                    async move {
                        let socket = connect_unix(&path).await;
                        socket.map(TokioIo::new).map_err(|e| remember(&failure, &named, e))
                    }
                }))
                .await
        }
        // An HTTP listener also speaks plain gRPC (HTTP/2 without TLS).
        Endpoint::Tcp(_) | Endpoint::Web(_) => tonic_endpoint.connect().await,
    };
    connected.map_err(|source| unreachable(endpoint, &failure, source))
}

/// Connects to a Unix socket at any path length. `sun_path` holds 107 bytes, and the daemon
/// binds through its directory's descriptor, so a socket in a deep directory (a CI workspace, a
/// home directory) serves fine; the client reaches it the same way, through
/// `/proc/self/fd/N/NAME` of its directory opened for the connect.
pub async fn connect_unix(path: &std::path::Path) -> std::io::Result<tokio::net::UnixStream> {
    const SUN_PATH: usize = 108;
    if path.as_os_str().len() < SUN_PATH {
        return tokio::net::UnixStream::connect(path).await;
    }
    // A directory this user may search but not read cannot be opened here: the plain connect
    // then says why it cannot work.
    let opened = path
        .parent()
        .zip(path.file_name())
        .and_then(|(dir, name)| Some((std::fs::File::open(dir).ok()?, name)));
    let Some((dir, name)) = opened else {
        return tokio::net::UnixStream::connect(path).await;
    };
    let short = std::path::Path::new("/proc/self/fd")
        .join(std::os::fd::AsRawFd::as_raw_fd(&dir).to_string())
        .join(name);
    let socket = tokio::net::UnixStream::connect(&short).await;
    drop(dir);
    socket
}

/// The last connect failure of a channel, described.
type Failure = Arc<Mutex<Option<String>>>;

fn remember(failure: &Failure, endpoint: &Endpoint, error: std::io::Error) -> std::io::Error {
    let described = describe_connect_failure(endpoint, &error);
    *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(described);
    error
}

/// A failed connect as the error that names its cause, when the socket step said one.
fn unreachable(endpoint: &Endpoint, failure: &Failure, source: tonic::transport::Error) -> ConnectError {
    match failure.lock().unwrap_or_else(PoisonError::into_inner).take() {
        Some(reason) => ConnectError::Unreachable { endpoint: endpoint.to_string(), reason },
        None => ConnectError::Connect { endpoint: endpoint.to_string(), source },
    }
}

/// A client with the message caps set to the daemon's.
pub fn client(channel: Channel) -> FsdClient<Channel> {
    FsdClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Connects and says hello, so an unreachable or foreign daemon fails here, not mid-call.
pub async fn connect(endpoint: &Endpoint) -> Result<(FsdClient<Channel>, v1::HelloReply), ConnectError> {
    let mut client = client(channel(endpoint).await?);
    let hello = client
        .hello(v1::HelloRequest { context: None })
        .await
        .map_err(|status| plaintext_hello_failed(endpoint, status))?
        .into_inner();
    Ok((client, hello))
}

/// A plaintext hello that failed. Sent to a TLS listener it gets no HTTP answer at all (the
/// daemon's TLS layer refuses the bytes; HTTP/2 here sees a protocol error or a closed pipe), so
/// a `tcp:` endpoint says what that most likely means.
fn plaintext_hello_failed(endpoint: &Endpoint, status: tonic::Status) -> ConnectError {
    let unanswered = matches!(
        status.code(),
        tonic::Code::Internal | tonic::Code::Cancelled | tonic::Code::Unavailable | tonic::Code::Unknown
    ) && status.metadata().is_empty();
    let endpoint_text = endpoint.to_string();
    if unanswered && matches!(endpoint, Endpoint::Tcp(_)) {
        ConnectError::PlaintextToTls { endpoint: endpoint_text, status }
    } else {
        hello_failed(endpoint_text, status)
    }
}

/// A hello the server answered with an error: a server without fsd.v1 says `UNIMPLEMENTED`.
pub(crate) fn hello_failed(endpoint: String, status: tonic::Status) -> ConnectError {
    if status.code() == tonic::Code::Unimplemented {
        ConnectError::NotFsd { endpoint, status }
    } else {
        ConnectError::Hello { endpoint, status }
    }
}

/// What one link knows about its daemon, shared by every clone of the link.
#[derive(Debug, Default)]
struct LinkInner {
    /// The instance that answered first (hello); every later call names it. Cleared by
    /// `repin` after a restart, so the next reply pins the new instance.
    instance: Mutex<Option<http::HeaderValue>>,
    /// Why the last attempt to open a socket failed, described (`describe_connect_failure`).
    failure: Failure,
    /// A reply came from another instance: the daemon restarted under this session.
    restarted: AtomicBool,
    connected_once: AtomicBool,
    connections: AtomicU64,
}

/// A handle on a link's state, for the session that owns it.
#[derive(Debug, Clone, Default)]
pub struct LinkState(Arc<LinkInner>);

impl LinkState {
    /// Whether the daemon answered as another instance than the one the session began with.
    pub fn restarted(&self) -> bool {
        self.0.restarted.load(Ordering::Acquire)
    }

    /// The daemon instance this link is pinned to.
    pub fn instance(&self) -> Option<String> {
        self.pinned().and_then(|v| v.to_str().ok().map(str::to_owned))
    }

    /// Accepts the restart: forgets the pinned instance and the restart flag, so the next reply
    /// pins the instance that gave it. The session that calls this drops what it knew.
    pub fn repin(&self) {
        *self.0.instance.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.0.restarted.store(false, Ordering::Release);
    }

    /// Connections opened so far (1 while the first one lasts).
    pub fn connections(&self) -> u64 {
        self.0.connections.load(Ordering::Acquire)
    }

    /// The pinned instance, to send with a call (a `Link`'s and the gRPC-Web link's use).
    pub(crate) fn pinned(&self) -> Option<http::HeaderValue> {
        self.0.instance.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Watches a reply's instance (the gRPC-Web link's use).
    pub(crate) fn note(&self, headers: &http::HeaderMap) {
        self.observe(headers);
    }

    fn observe(&self, headers: &http::HeaderMap) {
        let Some(seen) = headers.get(INSTANCE_HEADER) else { return };
        let mut pinned = self.0.instance.lock().unwrap_or_else(PoisonError::into_inner);
        match &*pinned {
            None => *pinned = Some(seen.clone()),
            Some(instance) if instance != seen => self.0.restarted.store(true, Ordering::Release),
            Some(_) => {}
        }
    }

    /// Opens a socket: once for the first connection (an absent daemon fails fast), with
    /// exponential backoff for a reconnection (a daemon restarting or a network blip).
    async fn open<T, F, Fut>(&self, endpoint: &Endpoint, attempt: F) -> std::io::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::io::Result<T>>,
    {
        let opened = self.retry(attempt).await;
        let mut failure = self.0.failure.lock().unwrap_or_else(PoisonError::into_inner);
        *failure = opened.as_ref().err().map(|e| describe_connect_failure(endpoint, e));
        opened
    }

    async fn retry<T, F, Fut>(&self, mut attempt: F) -> std::io::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::io::Result<T>>,
    {
        let budget =
            if self.0.connected_once.load(Ordering::Acquire) { RECONNECT_BUDGET } else { Duration::ZERO };
        let deadline = Instant::now() + budget;
        let mut delay = BACKOFF_FIRST;
        loop {
            match attempt().await {
                Ok(socket) => {
                    self.0.connected_once.store(true, Ordering::Release);
                    self.0.connections.fetch_add(1, Ordering::AcqRel);
                    return Ok(socket);
                }
                Err(e) if Instant::now() + delay < deadline => {
                    tracing::debug!(error = %e, delay_ms = delay.as_millis() as u64, "reconnecting");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(BACKOFF_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The channel of a session: adds the bearer token and the pinned instance to every call and
/// watches the instance of every reply.
#[derive(Debug, Clone)]
pub struct Link {
    channel: Channel,
    /// For messages: `unix:PATH` or `tcp:HOST:PORT`.
    endpoint: Arc<str>,
    token: Option<http::HeaderValue>,
    state: LinkState,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<Body>> for Link {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<http::Response<Body>, BoxError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.channel, cx).map_err(|e| Box::new(e) as BoxError)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if let Some(token) = &self.token {
            request.headers_mut().insert(http::header::AUTHORIZATION, token.clone());
        }
        if let Some(instance) = self.state.pinned() {
            request.headers_mut().insert(INSTANCE_HEADER, instance);
        }
        let future = tower::Service::call(&mut self.channel, request);
        let state = self.state.clone();
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            match future.await {
                Ok(response) => {
                    state.observe(response.headers());
                    Ok(response)
                }
                // The daemon went away and could not be reached again: say so, with the
                // endpoint, rather than the socket error ("No such file or directory").
                Err(e) => {
                    let failure = state.0.failure.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    let reason = failure.unwrap_or_else(|| {
                        format!(
                            "the connection to the daemon at {endpoint} was lost ({}); the next call reconnects",
                            chain(&e)
                        )
                    });
                    Err(Box::new(tonic::Status::unavailable(reason)) as BoxError)
                }
            }
        })
    }
}

/// Opens a `Link` to `endpoint` with `credentials`, without saying hello.
pub async fn link(endpoint: &Endpoint, credentials: &Credentials) -> Result<(Link, LinkState), ConnectError> {
    let name = endpoint.to_string();
    if credentials.token.is_some() && credentials.tls.is_none() {
        return Err(ConnectError::Insecure {
            endpoint: name,
            reason: "a bearer token is sent only over TLS (set ca)",
        });
    }
    if credentials.tls.is_none() && !endpoint.is_local() {
        return Err(ConnectError::Insecure {
            endpoint: name,
            reason: "plaintext leaves this host: a remote daemon needs TLS (set ca)",
        });
    }
    let token = match &credentials.token {
        Some(token) => {
            let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| ConnectError::Token { endpoint: name.clone() })?;
            value.set_sensitive(true);
            Some(value)
        }
        None => None,
    };
    let mut tonic_endpoint = tonic_endpoint(endpoint, credentials.tls.is_some())?;
    if let Some(tls) = &credentials.tls {
        if matches!(endpoint, Endpoint::Unix(_)) {
            return Err(ConnectError::Insecure { endpoint: name, reason: "TLS is for tcp: endpoints" });
        }
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .timeout(Duration::from_secs(10));
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(server_name) = &tls.server_name {
            config = config.domain_name(server_name.clone());
        }
        tonic_endpoint = tonic_endpoint
            .tls_config(config)
            .map_err(|source| ConnectError::Connect { endpoint: name.clone(), source })?;
    }
    let state = LinkState::default();
    let named = endpoint.clone();
    let connected = match endpoint {
        Endpoint::Unix(path) => {
            let (path, state) = (path.clone(), state.clone());
            tonic_endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let (path, state, named) = (path.clone(), state.clone(), named.clone());
                    async move {
                        let socket = state.open(&named, || connect_unix(&path)).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(socket))
                    }
                }))
                .await
        }
        Endpoint::Tcp(addr) | Endpoint::Web(addr) => {
            let (addr, state) = (addr.clone(), state.clone());
            tonic_endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let (addr, state, named) = (addr.clone(), state.clone(), named.clone());
                    async move {
                        let socket =
                            state.open(&named, || tokio::net::TcpStream::connect(addr.clone())).await?;
                        socket.set_nodelay(true)?;
                        Ok::<_, std::io::Error>(TokioIo::new(socket))
                    }
                }))
                .await
        }
    };
    let channel = connected.map_err(|source| unreachable(endpoint, &state.0.failure, source))?;
    let endpoint = Arc::from(endpoint.to_string());
    Ok((Link { channel, endpoint, token, state: state.clone() }, state))
}

/// Connects a session's client: a `Link` with the message caps, after a hello that pins the
/// daemon instance.
pub async fn open(
    endpoint: &Endpoint,
    credentials: &Credentials,
) -> Result<(SessionClient, v1::HelloReply, LinkState), ConnectError> {
    if let Endpoint::Web(_) = endpoint {
        return crate::web::open(endpoint, credentials).await;
    }
    let (link, state) = link(endpoint, credentials).await?;
    let mut client = FsdClient::new(link)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let hello = client.hello(v1::HelloRequest { context: None }).await.map_err(|status| {
        if credentials.tls.is_none() {
            return plaintext_hello_failed(endpoint, status);
        }
        // In TLS 1.3 a refused client certificate surfaces as a connection closed under the
        // first call, with no HTTP answer at all: say what that most likely means.
        let unanswered =
            matches!(status.code(), tonic::Code::Cancelled | tonic::Code::Unavailable | tonic::Code::Unknown)
                && status.metadata().is_empty();
        let endpoint = endpoint.to_string();
        if unanswered && state.instance().is_none() {
            ConnectError::Handshake { endpoint, status }
        } else {
            hello_failed(endpoint, status)
        }
    })?;
    Ok((SessionClient::Linked(client, state.clone()), hello.into_inner(), state))
}

/// The client a `Session` calls through: a plain channel (`connect`) or a `Link` (`open`).
#[derive(Debug, Clone)]
pub enum SessionClient {
    Plain(FsdClient<Channel>),
    Linked(FsdClient<Link>, LinkState),
    /// gRPC-Web over HTTP/1.1 (`http://` endpoints).
    Web(Box<FsdClient<crate::web::WebLink>>, LinkState),
}

impl SessionClient {
    /// Whether a reply came from another daemon instance than the session's. If so, the link
    /// is re-pinned (`LinkState::repin`): the caller must drop what the session knew.
    pub fn take_restart(&self) -> bool {
        match self {
            SessionClient::Linked(_, state) | SessionClient::Web(_, state) if state.restarted() => {
                state.repin();
                true
            }
            _ => false,
        }
    }
}

impl From<FsdClient<Channel>> for SessionClient {
    fn from(client: FsdClient<Channel>) -> SessionClient {
        SessionClient::Plain(client)
    }
}

/// The generated client's methods, for either kind of channel.
macro_rules! delegate {
    ($($method:ident($request:ty) -> $reply:ty;)*) => {
        impl SessionClient {
            $(
                pub async fn $method(
                    &mut self,
                    request: impl tonic::IntoRequest<$request>,
                ) -> Result<tonic::Response<$reply>, tonic::Status> {
                    match self {
                        SessionClient::Plain(client) => client.$method(request).await,
                        SessionClient::Linked(client, _) => client.$method(request).await,
                        SessionClient::Web(client, _) => client.$method(request).await,
                    }
                }
            )*
        }
    };
}

delegate! {
    hello(v1::HelloRequest) -> v1::HelloReply;
    stat(v1::StatRequest) -> v1::StatReply;
    read_text(v1::ReadTextRequest) -> v1::ReadTextReply;
    stream_text(v1::StreamTextRequest) -> tonic::Streaming<v1::StreamTextReply>;
    read_bytes(v1::ReadBytesRequest) -> v1::ReadBytesReply;
    list_dir(v1::ListDirRequest) -> v1::ListDirReply;
    write_text(v1::WriteTextRequest) -> v1::WriteTextReply;
    edit_text(v1::EditTextRequest) -> v1::EditTextReply;
    move_file(v1::MoveFileRequest) -> v1::MoveFileReply;
    delete_file(v1::DeleteFileRequest) -> v1::DeleteFileReply;
    request_escalation(v1::EscalationRequest) -> v1::EscalationDescription;
    release_escalation(v1::ReleaseEscalationRequest) -> v1::ReleaseEscalationReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let check =
            |text: &str, want: Option<Endpoint>| assert_eq!(Endpoint::parse(text).ok(), want, "{text}");
        check("unix:/run/fsd.sock", Some(Endpoint::Unix("/run/fsd.sock".into())));
        check("tcp:127.0.0.1:7000", Some(Endpoint::Tcp("127.0.0.1:7000".into())));
        check("unix:", None);
        check("tcp:7000", None);
        check("/run/fsd.sock", None);
    }

    #[test]
    fn only_loopback_is_local() {
        for (text, local) in [
            ("unix:/s", true),
            ("tcp:127.0.0.1:1", true),
            ("tcp:[::1]:1", true),
            ("tcp:localhost:1", true),
            ("tcp:10.99.0.1:1", false),
            ("tcp:fsd.example:1", false),
        ] {
            assert_eq!(Endpoint::parse(text).map(|e| e.is_local()).ok(), Some(local), "{text}");
        }
    }

    #[test]
    fn a_reply_from_another_instance_marks_a_restart() {
        let state = LinkState::default();
        let headers = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(
                INSTANCE_HEADER,
                http::HeaderValue::from_str(v).unwrap_or(http::HeaderValue::from_static("x")),
            );
            h
        };
        state.observe(&http::HeaderMap::new());
        assert_eq!(state.instance(), None);
        state.observe(&headers("aaaa"));
        state.observe(&headers("aaaa"));
        assert!(!state.restarted());
        assert_eq!(state.instance().as_deref(), Some("aaaa"));
        state.observe(&headers("bbbb"));
        assert!(state.restarted());
        assert_eq!(state.instance().as_deref(), Some("aaaa"));
    }

    #[tokio::test]
    async fn reconnection_backs_off_but_a_first_connection_fails_fast() {
        let state = LinkState::default();
        let endpoint = Endpoint::Unix("/s".into());
        let started = Instant::now();
        let failed: std::io::Result<()> =
            state.open(&endpoint, || async { Err(std::io::Error::other("refused")) }).await;
        assert!(failed.is_err());
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(state.open(&endpoint, || async { Ok(()) }).await.is_ok());
        // Now a reconnection: the third attempt succeeds after 100 + 200 ms of backoff.
        let mut attempts = 0;
        let started = Instant::now();
        let result = state
            .open(&endpoint, || {
                attempts += 1;
                let ok = attempts >= 3;
                async move { if ok { Ok(()) } else { Err(std::io::Error::other("refused")) } }
            })
            .await;
        assert!(result.is_ok());
        assert_eq!(attempts, 3);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(state.connections(), 2);
    }
}
