//! The daemon's side of `fsd-approver serve`: it sends its own description of an escalation to
//! the approver and gets back a decision (and, when approved, the signature). The network
//! process makes this connection after confinement: Landlock (ABI up to 7) does not govern
//! connecting to a pathname Unix socket or a TCP port, only the socket file's permissions do.
//! So while the network process reads as a read-only worker (reads on its runtime threads,
//! `dispatch::inline`), a thread that kept its own identity connects to a Unix approver
//! (`start_connector`): the socket's permissions are asked of the daemon, as they always were,
//! never of the worker's user.

use std::time::Duration;

use fsd_proto::approver::{ApproveRequest, Decider, approver_client::ApproverClient};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::escalation::ApproverEndpoint;

/// The bearer token the daemon presents to its approver, which names the sandbox by it; never
/// printed (it travels to the network process in the start frame with the rest of the config).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The same form `fsd-approver`'s token files take: at least 16 letters, digits, `-._~`.
    pub fn new(text: &str) -> Result<Token, &'static str> {
        let fits = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
        if text.len() < 16 || !text.chars().all(fits) {
            return Err("a token is one line of at least 16 letters, digits, '-', '.', '_' or '~'");
        }
        Ok(Token(text.to_owned()))
    }
}

/// TLS to a `tcp:` approver: the roots its certificate must chain to, and this daemon's own
/// certificate and key when the approver names it by one. Read at start; the key is never
/// printed.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Tls {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("client_certificate", &self.identity.is_some()).finish_non_exhaustive()
    }
}

impl Tls {
    pub fn new(ca: Vec<u8>, identity: Option<(Vec<u8>, Vec<u8>)>) -> Tls {
        Tls { ca, identity }
    }

    fn client_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca)).domain_name(host);
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// What the approver decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `decider`: who decided in the approver's words (`person`, `rules FILE: rule N`), which
    /// its signature covers ([`fsd_proto::signed_decision`]).
    Approved {
        signature: Vec<u8>,
        by: Decider,
        decider: String,
    },
    Refused {
        reason: String,
        by: Decider,
        decider: String,
    },
}

/// Why no decision came back.
#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("cannot reach the approver at {0}: {1}")]
    Connect(String, String),
    #[error("the approver at {0} failed: {1}")]
    Call(String, String),
    #[error("the approver at {0} did not answer within {1} s")]
    Timeout(String, u64),
}

/// How long the start-up probe waits for a connection: the start never waits on it (it runs as
/// a task), but a dead TCP peer must not keep the probe, and its warning, for a minute.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// An error with its sources, on one line: tonic's own message is only "transport error".
fn reason(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A connection asked of the connector thread: the socket's path, and where its answer goes.
type Connect =
    (std::path::PathBuf, tokio::sync::oneshot::Sender<std::io::Result<std::os::unix::net::UnixStream>>);

/// The connector thread's queue, once started.
static CONNECTOR: std::sync::OnceLock<std::sync::mpsc::Sender<Connect>> = std::sync::OnceLock::new();

/// Starts the thread that connects to a Unix approver with the network process's own identity,
/// confined by `confine` (as the network process is without reads on its runtime threads: no
/// filesystem right, the network's allowlist). Before the rest of the process takes a read-only
/// worker's identity, and only when an approver listens on a Unix socket.
pub fn start_connector(
    endpoint: Option<&ApproverEndpoint>,
    confine: impl FnOnce() -> Result<(), crate::sys::confine::ConfineError> + Send + 'static,
) -> Result<(), crate::sys::confine::ConfineError> {
    if !matches!(endpoint, Some(ApproverEndpoint::Unix(_))) {
        return Ok(());
    }
    let (asks, queue) = std::sync::mpsc::channel::<Connect>();
    let (confined, ready) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new().name("fsd-connect".to_owned()).spawn(move || {
        let confinement = confine();
        let ok = confinement.is_ok();
        let _ = confined.send(confinement);
        if !ok {
            return;
        }
        for (path, answer) in queue {
            let stream = std::os::unix::net::UnixStream::connect(&path)
                .and_then(|stream| stream.set_nonblocking(true).map(|()| stream));
            let _ = answer.send(stream);
        }
    });
    thread.map_err(crate::sys::confine::ConfineError::Connector)?;
    match ready.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(crate::sys::confine::ConfineError::ConnectorLost),
    }
    let _ = CONNECTOR.set(asks);
    Ok(())
}

/// Connects to a Unix approver: through the connector thread when there is one.
async fn connect_unix(path: std::path::PathBuf) -> std::io::Result<tokio::net::UnixStream> {
    let Some(connector) = CONNECTOR.get() else { return tokio::net::UnixStream::connect(path).await };
    let (answer, answered) = tokio::sync::oneshot::channel();
    connector.send((path, answer)).map_err(|_| std::io::Error::other("the approver's connector is gone"))?;
    let stream = answered.await.map_err(|_| std::io::Error::other("the approver's connector is gone"))??;
    tokio::net::UnixStream::from_std(stream)
}

async fn channel(endpoint: &ApproverEndpoint, tls: Option<&Tls>) -> Result<Channel, ApproverError> {
    let failed = |e: tonic::transport::Error| ApproverError::Connect(endpoint.to_string(), reason(&e));
    match endpoint {
        ApproverEndpoint::Unix(path) => {
            let path = path.clone();
            Endpoint::from_static("http://approver.local")
                .connect_timeout(Duration::from_secs(5))
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move { connect_unix(path).await.map(TokioIo::new) }
                }))
                .await
                .map_err(failed)
        }
        ApproverEndpoint::Tcp(addr) => {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut channel = Endpoint::from_shared(format!("{scheme}://{addr}")).map_err(failed)?;
            if let Some(tls) = tls {
                let host = endpoint.host().unwrap_or_default();
                channel = channel.tls_config(tls.client_config(host)).map_err(failed)?;
            }
            channel.connect_timeout(Duration::from_secs(5)).connect().await.map_err(failed)
        }
    }
}

/// Asks the approver about `description`, waiting at most `within` (a person may be slow).
pub async fn ask(
    endpoint: &ApproverEndpoint,
    token: Option<&Token>,
    tls: Option<&Tls>,
    description: &str,
    within: Duration,
) -> Result<Answer, ApproverError> {
    let call = async {
        let mut client = ApproverClient::new(channel(endpoint, tls).await?);
        let mut request = tonic::Request::new(ApproveRequest { description: description.to_owned() });
        if let Some(Token(token)) = token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        let reply = client
            .approve(request)
            .await
            .map_err(|s| ApproverError::Call(endpoint.to_string(), s.message().to_owned()))?
            .into_inner();
        let by = reply.decided_by();
        let decider = reply.decider;
        Ok(if reply.approved {
            Answer::Approved { signature: reply.signature.to_vec(), by, decider }
        } else {
            Answer::Refused { reason: reply.reason, by, decider }
        })
    };
    tokio::time::timeout(within, call)
        .await
        .map_err(|_| ApproverError::Timeout(endpoint.to_string(), within.as_secs()))?
}

/// Tries once to connect to the approver, at start, and logs one line either way: a warning
/// naming the endpoint and the reason when it cannot be reached (escalations are refused until
/// it can: approvers may come up after the daemon, so the start goes on), else that it answered.
pub async fn probe(endpoint: &ApproverEndpoint, tls: Option<&Tls>) {
    let connected = tokio::time::timeout(PROBE_TIMEOUT, channel(endpoint, tls))
        .await
        .unwrap_or_else(|_| Err(ApproverError::Timeout(endpoint.to_string(), PROBE_TIMEOUT.as_secs())));
    match connected {
        Ok(_) => tracing::info!(approver = %endpoint, "the approver accepts connections"),
        Err(e) => tracing::warn!(
            approver = %endpoint,
            "{e}; escalations are refused until it can be reached (the daemon starts anyway)"
        ),
    }
}
