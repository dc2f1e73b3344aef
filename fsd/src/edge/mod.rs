//! The connection edge of the network process: accepting TCP connections (TLS handshakes with a
//! deadline and their own caps, overall and per source address; a connection slot taken only
//! once the handshake is done; keepalive; an idle timeout; and a shorter one for connections
//! that never complete an authenticated call, which also yield their slot to a newcomer when
//! the listener is full) and, for every request on any
//! listener, establishing who is calling (`Identity`) before a service sees it. It also pins the
//! daemon instance: a client that began its session with another instance of this daemon (it
//! restarted) is told so with UNAVAILABLE instead of being served by a daemon that never saw its
//! session.
//!
//! `accept` is the connection half; this module is the per-request half.

mod accept;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;

use crate::identity::{self, Identity, TokenEntry};

pub use accept::{Conn, PodNetwork, TcpLimits, UnixLimits, incoming, incoming_pod, incoming_unix};

use accept::{InFlight, PeerInfo};

/// The response header naming this daemon instance, and the request header a client sends to
/// say which instance its session began with.
pub const INSTANCE_HEADER: &str = "fsd-instance";

/// The header a bearer token may come in instead of `authorization`, through a router that
/// strips that one: `x-fsd-authorization: Bearer <token>`.
pub const FORWARDED_AUTHORIZATION: &str = "x-fsd-authorization";

/// Methods that answer without a client credential on a TLS listener (the handshake still
/// applies): orchestrators probe health without the application's tokens.
/// `/v1/health` is the REST face's probe (kubelet `httpGet` over HTTPS sends no credential).
const OPEN_METHODS: &[&str] = &["/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/v1/health"];

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
    pub fn admit<B>(&self, request: &http::Request<B>) -> Result<Identity, tonic::Status> {
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
        let Some(peer) = extensions.get::<PeerInfo>() else {
            return Ok(Identity::default());
        };
        if let Some(uid) = peer.unix {
            // The kernel vouches for a Unix peer; tokens are for TLS connections.
            return Ok(Identity { uid, ..Identity::default() });
        }
        // Routers such as agent-sandbox's strip `authorization` (they consume it themselves); the
        // token then travels in a header they forward.
        let header = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .or_else(|| request.headers().get(FORWARDED_AUTHORIZATION));
        if let Some(pod) = peer.pod {
            return self.admit_pod(pod, header, peer);
        }
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
                        tracing::info!(remote = peer.remote.map(|r| r.to_string()), certificate = peer.cert_names.first().map(String::as_str), reason = %e, "refused a bearer token");
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
        Ok(Identity {
            uid: None,
            cert_names: peer.cert_names.as_ref().clone(),
            token,
            tcp: false,
            pod: false,
        })
    }

    /// A request on an `http+pod:` listener: the caller is `pod`. A bearer token there crossed
    /// the pod network in clear text, so it counts only where the operator said it may
    /// (`pod_network_tokens` names this listener); otherwise it is refused loudly, as on any plaintext listener.
    fn admit_pod(
        &self,
        pod: PodNetwork,
        header: Option<&http::HeaderValue>,
        peer: &PeerInfo,
    ) -> Result<Identity, tonic::Status> {
        let token = match header {
            None => None,
            Some(_) if !pod.tokens => {
                return Err(tonic::Status::unauthenticated(
                    "bearer tokens are accepted only over TLS (this pod-network listener does not take them: pod_network_tokens does not name it)",
                ));
            }
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| tonic::Status::unauthenticated("malformed authorization header"))?;
                match identity::verify_bearer(text, &self.tokens, &[]) {
                    Ok(name) => Some(name),
                    Err(e) => {
                        tracing::info!(remote = peer.remote.map(|r| r.to_string()), listener = "http+pod", reason = %e, "refused a bearer token");
                        return Err(tonic::Status::unauthenticated(e.to_string()));
                    }
                }
            }
        };
        Ok(Identity { token, pod: true, ..Identity::default() })
    }
}

/// A request the edge let in: who made it, and its place among its connection's requests.
#[derive(Debug)]
pub struct Admitted {
    pub identity: Identity,
    pub counted: Counted,
}

/// On TCP, one request counted in flight on its connection until its response body is done.
#[derive(Debug)]
pub struct Counted(Option<InFlight>);

impl Counted {
    /// The response body, keeping the request in flight until the body is done or dropped.
    pub fn guard(self, body: Body) -> Body {
        match self.0 {
            Some(guard) => Body::new(Guarded { inner: body, _guard: guard }),
            None => body,
        }
    }
}

impl Edge {
    /// Admits one request ([`Edge::admit`]) and counts it on its TCP connection: any request
    /// but an open one (health) makes the connection no longer a stranger's (it is not closed
    /// after `unauthenticated_idle`), and the request is in flight until its response body ends,
    /// so a long upload or download never counts as idle. Faces outside the tower stack (REST)
    /// call this; `EdgeService` does for gRPC.
    pub fn enter<B>(&self, request: &http::Request<B>) -> Result<Admitted, tonic::Status> {
        let identity = self.admit(request)?;
        let open = OPEN_METHODS.contains(&request.uri().path());
        let in_flight = request.extensions().get::<PeerInfo>().map(|peer| peer.begin_call(open));
        Ok(Admitted { identity, counted: Counted(in_flight) })
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
        let Admitted { identity, counted } = match self.edge.enter(&request) {
            Ok(admitted) => admitted,
            Err(status) => {
                let mut response = status.into_http::<Body>();
                response.headers_mut().insert(INSTANCE_HEADER, instance);
                return Box::pin(std::future::ready(Ok(response)));
            }
        };
        // The call's span, child of the caller's `traceparent`.
        let span = crate::traces::call(&request, crate::metrics::Face::Grpc, &identity);
        request.extensions_mut().insert(identity);
        // The service that was polled ready is the one that must be called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(crate::traces::within(span, async move {
            let mut response = inner.call(request).await?;
            response.headers_mut().insert(INSTANCE_HEADER, instance);
            Ok(response.map(|body| counted.guard(body)))
        }))
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
