//! Reaching a daemon: parse an endpoint, open a tuned HTTP/2 channel over a Unix socket or TCP,
//! and say hello.

use std::path::PathBuf;
use std::time::Duration;

use fsd_proto::v1::{self, fsd_client::FsdClient};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint as TonicEndpoint};

/// The largest message either side sends: the daemon's default cap.
pub const MAX_MESSAGE_BYTES: usize = 80 << 20;

/// Where a daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid endpoint {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    Parse(String),
    #[error("cannot connect to {endpoint}: {source}")]
    Connect { endpoint: String, source: tonic::transport::Error },
    #[error("the daemon at {endpoint} did not answer hello: {status}")]
    Hello { endpoint: String, status: tonic::Status },
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Endpoint, ConnectError> {
        if let Some(path) = text.strip_prefix("unix:").filter(|p| !p.is_empty()) {
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("tcp:").filter(|a| a.contains(':')) {
            return Ok(Endpoint::Tcp(addr.to_owned()));
        }
        Err(ConnectError::Parse(text.to_owned()))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "tcp:{addr}"),
        }
    }
}

/// Opens a channel; large windows because tonic's defaults cost streaming several times over.
pub async fn channel(endpoint: &Endpoint) -> Result<Channel, ConnectError> {
    let uri = match endpoint {
        Endpoint::Unix(_) => "http://fsd.local".to_owned(),
        Endpoint::Tcp(addr) => format!("http://{addr}"),
    };
    let tonic_endpoint = TonicEndpoint::from_shared(uri)
        .map_err(|source| ConnectError::Connect { endpoint: endpoint.to_string(), source })?
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    let connected = match endpoint {
        Endpoint::Unix(path) => {
            let path = path.clone();
            tonic_endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await
        }
        Endpoint::Tcp(_) => tonic_endpoint.connect().await,
    };
    connected.map_err(|source| ConnectError::Connect { endpoint: endpoint.to_string(), source })
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
        .map_err(|status| ConnectError::Hello { endpoint: endpoint.to_string(), status })?
        .into_inner();
    Ok((client, hello))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let check = |text: &str, want: Option<Endpoint>| assert_eq!(Endpoint::parse(text).ok(), want, "{text}");
        check("unix:/run/fsd.sock", Some(Endpoint::Unix("/run/fsd.sock".into())));
        check("tcp:127.0.0.1:7000", Some(Endpoint::Tcp("127.0.0.1:7000".into())));
        check("unix:", None);
        check("tcp:7000", None);
        check("/run/fsd.sock", None);
    }
}
