//! fsd.v1 over gRPC-Web on HTTP/1.1 (`--endpoint http://HOST:PORT`): the transport that passes
//! HTTP/1.1 reverse proxies such as the Kubernetes agent-sandbox router, which carry no HTTP/2 and
//! so no plain gRPC. Every call carries the configured extra headers (the router's `X-Sandbox-ID`,
//! `X-Sandbox-Namespace`, `X-Sandbox-Port`), the bearer token in `x-fsd-authorization` (routers
//! strip `authorization`) and the pinned daemon instance, like a `Link`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;
use tonic::codegen::http;
use tonic_web::{GrpcWebCall, GrpcWebClientLayer, GrpcWebClientService};

use crate::connect::{ConnectError, Credentials, Endpoint, LinkState, MAX_MESSAGE_BYTES, SessionClient};

/// The header the token travels in: routers strip `authorization`, and forward this one.
pub const TOKEN_HEADER: &str = "x-fsd-authorization";

/// The router's headers that name one sandbox behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRoute {
    pub id: String,
    pub namespace: Option<String>,
    pub port: Option<u16>,
}

impl SandboxRoute {
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("X-Sandbox-ID".to_owned(), self.id.clone())];
        if let Some(namespace) = &self.namespace {
            headers.push(("X-Sandbox-Namespace".to_owned(), namespace.clone()));
        }
        if let Some(port) = self.port {
            headers.push(("X-Sandbox-Port".to_owned(), port.to_string()));
        }
        headers
    }
}

/// Parses `NAME: VALUE` (a `--header` flag).
pub fn parse_header(text: &str) -> Option<(String, String)> {
    let (name, value) = text.split_once(':')?;
    let (name, value) = (name.trim(), value.trim());
    let valid =
        http::HeaderName::from_bytes(name.as_bytes()).is_ok() && http::HeaderValue::from_str(value).is_ok();
    (valid && !name.is_empty()).then(|| (name.to_owned(), value.to_owned()))
}

type Inner = GrpcWebClientService<Checked>;

/// What went wrong below gRPC-Web on the last call, in the words a person needs: tonic-web
/// would only say "Invalid header bit 60" of a web server's HTML or "client error (Connect)".
#[derive(Debug, Clone, PartialEq, Eq)]
enum Below {
    /// The server answered, but not in gRPC-Web: its status line and the start of its body.
    NotGrpcWeb { status: String, body: String },
    /// No connection: the socket error.
    Connect(std::io::ErrorKind, String),
}

/// How much of a foreign reply's body is quoted.
const QUOTED_BODY_BYTES: usize = 200;

/// The HTTP client under tonic-web, which notes a reply that is not gRPC-Web (and keeps its
/// body from tonic-web's decoder) and a connection that failed.
#[derive(Clone)]
struct Checked {
    client: Client<HttpConnector, GrpcWebCall<Body>>,
    below: Arc<std::sync::Mutex<Option<Below>>>,
}

impl tower::Service<http::Request<GrpcWebCall<Body>>> for Checked {
    type Response = http::Response<Body>;
    type Error = hyper_util::client::legacy::Error;
    type Future = BoxFuture<http::Response<Body>, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, request: http::Request<GrpcWebCall<Body>>) -> Self::Future {
        let future = self.client.request(request);
        let below = self.below.clone();
        Box::pin(async move {
            let note =
                |what: Below| *below.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(what);
            let response = match future.await {
                Ok(response) => response,
                Err(error) => {
                    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
                    while let Some(e) = source {
                        if let Some(io) = e.downcast_ref::<std::io::Error>() {
                            note(Below::Connect(io.kind(), io.to_string()));
                            break;
                        }
                        source = e.source();
                    }
                    return Err(error);
                }
            };
            let grpc_web = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/grpc-web"));
            if response.status() == http::StatusCode::OK && grpc_web {
                return Ok(response.map(Body::new));
            }
            let (parts, mut body) = response.into_parts();
            let mut head = Vec::new();
            while head.len() < QUOTED_BODY_BYTES {
                match http_body_util::BodyExt::frame(&mut body).await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            head.extend_from_slice(data);
                        }
                    }
                    _ => break,
                }
            }
            head.truncate(QUOTED_BODY_BYTES);
            let status =
                format!("{} {}", parts.status.as_u16(), parts.status.canonical_reason().unwrap_or_default());
            note(Below::NotGrpcWeb {
                status: status.trim_end().to_owned(),
                body: String::from_utf8_lossy(&head).into_owned(),
            });
            Ok(http::Response::from_parts(parts, Body::empty()))
        })
    }
}

/// A session's gRPC-Web channel.
#[derive(Clone)]
pub struct WebLink {
    inner: Inner,
    headers: Arc<Vec<(http::HeaderName, http::HeaderValue)>>,
    state: LinkState,
}

impl std::fmt::Debug for WebLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebLink").field("headers", &self.headers.len()).finish_non_exhaustive()
    }
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl tower::Service<http::Request<Body>> for WebLink {
    type Response = http::Response<Body>;
    type Error = hyper_util::client::legacy::Error;
    type Future = BoxFuture<http::Response<Body>, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        for (name, value) in self.headers.iter() {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(instance) = self.state.pinned() {
            request.headers_mut().insert(crate::connect::INSTANCE_HEADER, instance);
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        Box::pin(async move {
            let response = tower::Service::call(&mut inner, request).await?;
            state.note(response.headers());
            Ok(response.map(Body::new))
        })
    }
}

/// Opens a gRPC-Web session client to `endpoint` (an `http://` one) and says hello.
pub async fn open(
    endpoint: &Endpoint,
    credentials: &Credentials,
) -> Result<(SessionClient, v1::HelloReply, LinkState), ConnectError> {
    let Endpoint::Web(authority) = endpoint else {
        return Err(ConnectError::Parse(endpoint.to_string()));
    };
    let name = endpoint.to_string();
    if credentials.tls.is_some() {
        return Err(ConnectError::Insecure {
            endpoint: name,
            reason: "gRPC-Web endpoints are plain http://; put TLS on the router or the daemon side",
        });
    }
    let mut headers = Vec::new();
    for (key, value) in &credentials.headers {
        let key =
            http::HeaderName::from_bytes(key.as_bytes()).map_err(|_| ConnectError::Parse(key.clone()))?;
        let value = http::HeaderValue::from_str(value).map_err(|_| ConnectError::Parse(value.clone()))?;
        headers.push((key, value));
    }
    if let Some(token) = &credentials.token {
        if !endpoint.is_local() {
            // Plain HTTP would carry the token across the network in clear text.
            return Err(ConnectError::Insecure {
                endpoint: name,
                reason: "a bearer token over plain http:// stays on this host (a loopback router or port-forward)",
            });
        }
        let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ConnectError::Token { endpoint: name.clone() })?;
        value.set_sensitive(true);
        headers.push((http::HeaderName::from_static(TOKEN_HEADER), value));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
    let client = Client::builder(TokioExecutor::new()).http2_only(false).build(connector);
    let below = Arc::new(std::sync::Mutex::new(None));
    let inner = tower::Layer::layer(&GrpcWebClientLayer::new(), Checked { client, below: below.clone() });
    let state = LinkState::default();
    let link = WebLink { inner, headers: Arc::new(headers), state: state.clone() };
    let origin: http::Uri =
        format!("http://{authority}").parse().map_err(|_| ConnectError::Parse(endpoint.to_string()))?;
    let mut client = FsdClient::with_origin(link, origin)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let hello = client
        .hello(v1::HelloRequest { context: None })
        .await
        .map_err(|status| match below.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            Some(Below::NotGrpcWeb { status, body }) => {
                ConnectError::NotGrpcWeb { endpoint: name, status, body }
            }
            Some(Below::Connect(kind, text)) => ConnectError::Unreachable {
                reason: crate::connect::describe_connect_failure(endpoint, &std::io::Error::new(kind, text)),
                endpoint: name,
            },
            None => crate::connect::hello_failed(name, status),
        })?
        .into_inner();
    Ok((SessionClient::Web(Box::new(client), state.clone()), hello, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse() {
        let check = |text: &str, want: Option<(&str, &str)>| {
            assert_eq!(parse_header(text), want.map(|(a, b)| (a.to_owned(), b.to_owned())), "{text}");
        };
        check("X-Sandbox-ID: sb-1", Some(("X-Sandbox-ID", "sb-1")));
        check("x-a:b", Some(("x-a", "b")));
        check("no colon", None);
        check(": empty", None);
        check("bad name: v", None);
    }

    #[test]
    fn a_route_names_its_sandbox() {
        let route = SandboxRoute { id: "sb-1".into(), namespace: Some("team".into()), port: Some(8080) };
        let got = route.headers();
        let want = [("X-Sandbox-ID", "sb-1"), ("X-Sandbox-Namespace", "team"), ("X-Sandbox-Port", "8080")];
        assert_eq!(got, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
    }
}
