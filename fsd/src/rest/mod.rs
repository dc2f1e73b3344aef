//! The HTTP face of the network process (`--listen http:IP:PORT` / `http+unix:PATH`): the
//! KEP-539.2 filesystem REST API of Kubernetes agent-sandbox (`/v1/files/{path}`, `/v1/health`,
//! `/v1/metadata`) and, on the same listener, fsd.v1 over gRPC-Web (and plain gRPC) for clients
//! behind HTTP/1.1 routers. Every file operation is a call of `FsdService` — the same identities,
//! modes, locks and audit as gRPC — and runs in a worker; this module opens no file.

mod files;
pub mod host;
pub mod reply;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;
use tonic::body::Body;
use tonic::transport::server::Connected;

use crate::edge::{Admitted, Edge};
use crate::identity::Identity;
use crate::op::Mode;
use crate::service::FsdService;
use reply::RestError;

/// How long open connections keep being answered once shutdown starts (health says 503 then),
/// before they are asked to close.
const DRAIN: Duration = Duration::from_secs(2);

/// The gRPC services (fsd.v1, health, reflection) behind the edge, for requests that are gRPC
/// or gRPC-Web.
pub type Grpc = tower::util::BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>;

use tonic::codegen::http;

/// Everything a request of this face needs.
pub struct Face {
    pub service: FsdService,
    pub edge: Edge,
    /// The REST root as the daemon names it (canonical, absolute).
    pub root: String,
    pub max_upload: u64,
    pub chunk: usize,
    /// The modes the daemon serves: health is ok only while each has a worker.
    pub modes: Vec<Mode>,
    pub started: Instant,
    /// What `/v1/metadata` serves, read before confinement.
    pub metadata: BTreeMap<String, String>,
    pub stopping: watch::Receiver<bool>,
    pub grpc: Option<Grpc>,
    /// The names and origins the operator allows beside the listeners' own (`host`).
    pub allowed: host::Allowed,
}

impl std::fmt::Debug for Face {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Face").field("root", &self.root).finish_non_exhaustive()
    }
}

/// The face of a gRPC request on this listener (by its content type), or `None` for REST.
fn grpc_face(request: &Request<Incoming>) -> Option<crate::metrics::Face> {
    let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok())?;
    if content_type.starts_with("application/grpc-web") {
        Some(crate::metrics::Face::GrpcWeb)
    } else if content_type.starts_with("application/grpc") {
        Some(crate::metrics::Face::Grpc)
    } else {
        None
    }
}

impl Face {
    async fn handle(self: Arc<Face>, reach: host::Reach, request: Request<Incoming>) -> Response<Body> {
        // Before anything else, gRPC-Web included: a browser's request is never served.
        if let Err(refusal) = self.allowed.check(reach, &request) {
            tracing::info!(%refusal, "refused an HTTP request");
            if grpc_face(&request).is_some() {
                return tonic::Status::permission_denied(refusal.to_string()).into_http();
            }
            return RestError::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", refusal.to_string())
                .into_response();
        }
        if let Some(face) = grpc_face(&request)
            && let Some(grpc) = &self.grpc
        {
            let mut grpc = grpc.clone();
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(face);
            return match tower::Service::call(&mut grpc, request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
        }
        let admitted = match self.edge.enter(&request) {
            Ok(admitted) => admitted,
            Err(status) => {
                return RestError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", status.message())
                    .into_response();
            }
        };
        // Counted until the response body ends: the connection's idle timeouts wait for it.
        let Admitted { identity, counted } = admitted;
        let span = crate::traces::call(&request, crate::metrics::Face::Rest, &identity);
        crate::traces::within(span, self.route(identity, request)).await.map(|body| counted.guard(body))
    }

    async fn route(self: Arc<Face>, identity: Identity, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if let Some(raw) = path.strip_prefix("/v1/files/") {
            return self.files(identity, request, raw).await;
        }
        if path == "/v1/files" {
            return self.files(identity, request, "").await;
        }
        match (request.method(), path.as_str()) {
            (&Method::GET | &Method::HEAD, "/v1/health") => self.health(),
            (&Method::GET, "/metrics") => reply::metrics(),
            (&Method::GET, "/v1/metadata") => {
                reply::json(StatusCode::OK, &serde_json::json!({ "env": self.metadata }))
            }
            (_, "/v1/health" | "/v1/metadata") => {
                RestError::new(StatusCode::METHOD_NOT_ALLOWED, "INVALID_ARGUMENT", "method not allowed")
                    .into_response()
            }
            _ => RestError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint").into_response(),
        }
    }

    fn health(&self) -> Response<Body> {
        if *self.stopping.borrow() {
            return RestError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", "shutting down")
                .into_response();
        }
        if !self.service.all_modes_served(&self.modes) {
            let message = "not every configured mode has a live worker";
            return RestError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message).into_response();
        }
        let uptime = self.started.elapsed().as_secs();
        // Reads go to the workers while the direct path is off: the daemon is healthy, and says so.
        let direct = match self.service.direct_reads_off() {
            None => serde_json::json!({ "serving": true }),
            Some(reason) => serde_json::json!({ "serving": false, "reason": reason }),
        };
        let body = serde_json::json!({ "status": "ok", "uptime_seconds": uptime, "direct_reads": direct });
        reply::json(StatusCode::OK, &body)
    }
}

/// Serves one connection until it closes, or until shutdown (after the drain window).
async fn serve_connection<IO, X>(
    io: IO,
    (info, reach): (X, host::Reach),
    face: Arc<Face>,
    mut stop: watch::Receiver<bool>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    X: Clone + Send + Sync + 'static,
{
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(info.clone());
        let face = face.clone();
        async move { Ok::<_, Infallible>(face.handle(reach, request).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    if tokio::time::timeout(DRAIN, connection.as_mut()).await.is_ok() {
        return;
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// Serves the connections the edge accepted (TCP, TLS already negotiated when configured, or a
/// Unix socket's).
pub async fn serve(
    incoming: tokio_stream::wrappers::ReceiverStream<Result<crate::edge::Conn, std::io::Error>>,
    reach: host::Reach,
    face: Arc<Face>,
    stop: watch::Receiver<bool>,
) {
    use tokio_stream::StreamExt;
    let mut incoming = incoming;
    let mut connections = tokio::task::JoinSet::new();
    while let Some(conn) = incoming.next().await {
        let Ok(conn) = conn else { continue };
        let info = conn.connect_info();
        connections.spawn(serve_connection(conn, (info, reach), face.clone(), stop.clone()));
    }
    while connections.join_next().await.is_some() {}
}
