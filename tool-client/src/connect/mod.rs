//! Reaching a daemon: parse an endpoint, open a tuned HTTP/2 channel over a Unix socket or TCP
//! (TLS with a client certificate and/or a bearer token for fleets), and say hello.
//!
//! A session's channel is a `Link`: one connection reused for every call, re-established with
//! backoff when it drops, carrying the bearer token, and pinned to the daemon instance that
//! answered hello. A daemon that restarted refuses the pinned calls with UNAVAILABLE, so a
//! restart is a clear error, never a call silently served by a daemon that never saw the session.
//!
//! `link` is that channel; `describe` says in words why a daemon could not be reached.

mod describe;
mod link;
pub mod trace;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fsd_proto::v1::{self, fsd_client::FsdClient};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint as TonicEndpoint};

pub use describe::{chain, describe_connect_failure};
pub use link::{Link, LinkState, SessionClient, link, open};

use describe::status_text;

/// The largest message either side sends: the daemon's default cap.
pub const MAX_MESSAGE_BYTES: usize = 80 << 20;

/// The header the daemon names its instance in (see `fsd::edge`).
pub const INSTANCE_HEADER: &str = "fsd-instance";

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
    /// An `http://` endpoint answered, but not as fsd: a router's refusal, a dead upstream, a
    /// web server. Its status line and the start of its body say which.
    #[error("the server at {endpoint} did not answer as fsd (gRPC-Web): HTTP {status}, body {body:?}")]
    NotGrpcWeb { endpoint: String, status: String, body: String },
    /// A `tcp:` endpoint answered in HTTP/1.x (a web server, a proxy): no TLS listener, no fsd.
    /// Its status line and the start of its body say which.
    #[error(
        "the server at {endpoint} is not fsd: it answered in HTTP/1.x, not gRPC over HTTP/2 ({status_line}, body \
         {body:?}); point the client at one of the daemon's listen addresses"
    )]
    NotGrpc { endpoint: String, status_line: String, body: String },
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
pub(super) fn tonic_endpoint(endpoint: &Endpoint, tls: bool) -> Result<TonicEndpoint, ConnectError> {
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
/// binds through its directory's descriptor and publishes by a rename, so a socket in a deep
/// directory (a CI workspace, a home directory) or under a long name serves fine; the client
/// reaches it through `/proc/self/fd/N` of the socket file opened with `O_PATH` (which needs
/// only search permission on its directories, as a plain connect does).
pub async fn connect_unix(path: &std::path::Path) -> std::io::Result<tokio::net::UnixStream> {
    const SUN_PATH: usize = 108;
    if path.as_os_str().len() < SUN_PATH {
        return tokio::net::UnixStream::connect(path).await;
    }
    use rustix::fs::{Mode, OFlags};
    // A socket that is not there (no daemon), or a directory this user may not search: the
    // open's error is the connect's (a plain connect would only say the path is too long).
    let socket = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let short =
        std::path::Path::new("/proc/self/fd").join(std::os::fd::AsRawFd::as_raw_fd(&socket).to_string());
    let connected = tokio::net::UnixStream::connect(&short).await;
    drop(socket);
    connected
}

/// The last connect failure of a channel, described.
pub(super) type Failure = Arc<Mutex<Option<String>>>;

pub(super) fn remember(failure: &Failure, endpoint: &Endpoint, error: std::io::Error) -> std::io::Error {
    let described = describe_connect_failure(endpoint, &error);
    *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(described);
    error
}

/// A failed connect as the error that names its cause, when the socket step said one.
pub(super) fn unreachable(
    endpoint: &Endpoint,
    failure: &Failure,
    source: tonic::transport::Error,
) -> ConnectError {
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
pub(super) fn plaintext_hello_failed(endpoint: &Endpoint, status: tonic::Status) -> ConnectError {
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

/// How much of a failed connection's first answer is kept, and how much of its body is quoted
/// (as an `http://` endpoint's is).
pub(super) const FIRST_BYTES: usize = 1024;
const QUOTED_BODY_BYTES: usize = 200;

/// What an HTTP/1.x server answered, from the first bytes a connection received: its status
/// line and the start of its body. None for anything else (HTTP/2 frames, a TLS alert, nothing).
pub(super) fn http1_answer(first: &[u8]) -> Option<(String, String)> {
    if !first.starts_with(b"HTTP/1.") {
        return None;
    }
    let head_end = first.windows(4).position(|w| w == b"\r\n\r\n");
    let head = &first[..head_end.unwrap_or(first.len())];
    let status_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    let status_line = String::from_utf8_lossy(&head[..status_end]).trim_end().to_owned();
    let body = head_end.map_or(&[][..], |end| &first[end + 4..]);
    let body = &body[..body.len().min(QUOTED_BODY_BYTES)];
    Some((status_line, String::from_utf8_lossy(body).into_owned()))
}

/// A hello the server answered with an error: a server without fsd.v1 says `UNIMPLEMENTED`.
pub(crate) fn hello_failed(endpoint: String, status: tonic::Status) -> ConnectError {
    if status.code() == tonic::Code::Unimplemented {
        ConnectError::NotFsd { endpoint, status }
    } else {
        ConnectError::Hello { endpoint, status }
    }
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

    /// A socket path past `sun_path`, a long name in a short directory included: reached when
    /// something listens, and otherwise the error that says why (not "path too long").
    #[tokio::test]
    async fn a_long_socket_path_is_reached_or_says_why() {
        use std::io::ErrorKind;
        let dir = tempfile::tempdir().unwrap();
        let bind_long = |name: &str| {
            // Bound at a short name, then renamed to the long one (as the daemon publishes).
            let short = dir.path().join("s");
            let listener = std::os::unix::net::UnixListener::bind(&short).unwrap();
            let long = dir.path().join(name);
            std::fs::rename(&short, &long).unwrap();
            assert!(long.as_os_str().len() >= 108, "{}", long.display());
            (listener, long)
        };
        let (_live, live) = bind_long(&"l".repeat(110));
        let (stale, refused) = bind_long(&"r".repeat(110));
        drop(stale);
        let missing = dir.path().join("m".repeat(110));
        let check = |got: std::io::Result<tokio::net::UnixStream>, expected: Option<ErrorKind>| {
            assert_eq!(got.map(drop).map_err(|e| e.kind()).err(), expected);
        };
        check(connect_unix(&live).await, None);
        check(connect_unix(&refused).await, Some(ErrorKind::ConnectionRefused));
        check(connect_unix(&missing).await, Some(ErrorKind::NotFound));
    }

    #[test]
    fn an_http_1_answer_is_its_status_line_and_the_start_of_its_body() {
        // (the first bytes, the status line and body quoted)
        type Case<'a> = (&'a [u8], Option<(&'a str, &'a str)>);
        let long = format!("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n{}", "b".repeat(300));
        let cases: &[Case] = &[
            (
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nnope\n",
                Some(("HTTP/1.1 400 Bad Request", "nope\n")),
            ),
            (
                b"HTTP/1.0 505 HTTP Version Not Supported\r\n",
                Some(("HTTP/1.0 505 HTTP Version Not Supported", "")),
            ),
            (long.as_bytes(), Some(("HTTP/1.1 200 OK", &"b".repeat(200)))),
            // HTTP/2 frames, a TLS alert, nothing: not an HTTP/1.x answer.
            (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00", None),
            (b"\x15\x03\x03\x00\x02\x02\x46", None),
            (b"", None),
        ];
        for (first, want) in cases {
            let got = http1_answer(first);
            let want = want.map(|(s, b)| (s.to_owned(), b.to_owned()));
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(first));
        }
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
}
