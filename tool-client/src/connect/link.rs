//! A session's channel: one connection reused for every call, re-established with backoff when
//! it drops, carrying the bearer token, and pinned to the daemon instance that answered hello.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use hyper_util::rt::TokioIo;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::describe::{chain, describe_connect_failure};
use super::{
    ConnectError, Credentials, Endpoint, FIRST_BYTES, Failure, INSTANCE_HEADER, MAX_MESSAGE_BYTES,
    connect_unix, hello_failed, http1_answer, plaintext_hello_failed, tonic_endpoint, unreachable,
};

/// How long a dropped connection is retried (with backoff) before the call fails.
const RECONNECT_BUDGET: Duration = Duration::from_secs(8);
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

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
    /// The first bytes the latest TCP connection received (`Recording`): what a server that is
    /// not fsd answered, for the error of a hello that failed.
    first_bytes: Mutex<Arc<Mutex<Vec<u8>>>>,
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

    /// A new TCP connection's recorder of its first bytes.
    fn record_next(&self) -> Arc<Mutex<Vec<u8>>> {
        let fresh = Arc::new(Mutex::new(Vec::new()));
        *self.0.first_bytes.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        fresh
    }

    /// What the latest TCP connection's server answered, if it answered in HTTP/1.x.
    fn http1_answer(&self) -> Option<(String, String)> {
        let first = self.0.first_bytes.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let first = first.lock().unwrap_or_else(PoisonError::into_inner);
        http1_answer(&first)
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
                        let first = Some(state.record_next());
                        Ok::<_, std::io::Error>(TokioIo::new(Recording { socket, first }))
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
        // A web server or proxy answers the HTTP/2 preface (or a TLS hello) in HTTP/1.x, which
        // HTTP/2 reports only as a protocol error: say what it answered instead.
        if let Some((status_line, body)) = state.http1_answer() {
            return ConnectError::NotGrpc { endpoint: endpoint.to_string(), status_line, body };
        }
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

/// A TCP connection that keeps the first [`FIRST_BYTES`] it receives (then stops looking), so
/// a hello that failed can say what the server answered. Beneath TLS, so an HTTP/1.x server
/// answering a TLS hello in plaintext is caught too.
struct Recording {
    socket: tokio::net::TcpStream,
    first: Option<Arc<Mutex<Vec<u8>>>>,
}

impl tokio::io::AsyncRead for Recording {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.socket).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(first)) = (&polled, &this.first) {
            let mut kept = first.lock().unwrap_or_else(PoisonError::into_inner);
            let room = FIRST_BYTES.saturating_sub(kept.len());
            let got = &buf.filled()[before..];
            kept.extend_from_slice(&got[..got.len().min(room)]);
            if kept.len() >= FIRST_BYTES {
                drop(kept);
                this.first = None;
            }
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Recording {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
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
                    // The trace context of the tool call this daemon call serves, if any.
                    let mut request = request.into_request();
                    crate::connect::trace::inject(request.metadata_mut());
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
    inspect(v1::InspectRequest) -> tonic::Streaming<v1::InspectReply>;
    transact(v1::TransactRequest) -> v1::TransactReply;
    request_escalation(v1::EscalationRequest) -> v1::EscalationDescription;
    release_escalation(v1::ReleaseEscalationRequest) -> v1::ReleaseEscalationReply;
    checkpoint(v1::CheckpointRequest) -> v1::CheckpointReply;
    list_changes(v1::ListChangesRequest) -> v1::ListChangesReply;
    rewind(v1::RewindRequest) -> v1::RewindReply;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

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
