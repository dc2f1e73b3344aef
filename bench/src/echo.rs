//! The RPC floor: a bare tonic echo service with fsd's server settings (runtime, windows, frame
//! size, message caps; copied from `fsd::network`), reached through the very channel constructor
//! the tools use (`fsd_tool_client::connect::channel`). What fsd costs above it is fsd's.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use fsd_tool_client::connect::{self, Endpoint};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::Res;

#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used, missing_docs)]
pub mod pb {
    tonic::include_proto!("bench.v1");
}

use pb::echo_client::EchoClient;
use pb::echo_server::{Echo, EchoServer};

/// fsd's `max_message_bytes` default, on both ends.
const MAX_MESSAGE: usize = 80 << 20;

/// Replies are slices of one buffer: the baseline allocates nothing per call beyond tonic.
const REPLY_BUFFER: usize = 4 << 20;

#[derive(Debug, Clone)]
struct EchoService {
    buffer: Bytes,
}

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(&self, request: Request<pb::EchoRequest>) -> Result<Response<pb::EchoReply>, Status> {
        let n = (request.get_ref().reply_bytes as usize).min(self.buffer.len());
        Ok(Response::new(pb::EchoReply { data: self.buffer.slice(..n) }))
    }

    type StreamStream = ReceiverStream<Result<pb::Chunk, Status>>;

    async fn stream(
        &self,
        request: Request<pb::StreamRequest>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let r = request.into_inner();
        let chunk = (r.chunk_bytes as usize).clamp(1, self.buffer.len());
        let total = r.total_bytes;
        // fsd's streamText channel depth: a few chunks in flight at most.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        if r.path.is_empty() {
            let buffer = self.buffer.slice(..chunk);
            tokio::spawn(async move {
                let mut sent = 0u64;
                while sent < total {
                    let n = (total - sent).min(chunk as u64) as usize;
                    if tx.send(Ok(pb::Chunk { data: buffer.slice(..n) })).await.is_err() {
                        return;
                    }
                    sent += n as u64;
                }
            });
        } else {
            // What fsd's streamText does once it holds the descriptor, minus the worker.
            tokio::task::spawn_blocking(move || {
                let file = match std::fs::File::open(&r.path) {
                    Ok(file) => file,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Status::not_found(e.to_string())));
                        return;
                    }
                };
                loop {
                    // Into a buffer that is not zeroed first, as fsd's reader pool reads.
                    let mut buf = Vec::with_capacity(chunk);
                    while buf.len() < chunk {
                        match rustix::io::read(&file, rustix::buffer::spare_capacity(&mut buf)) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(rustix::io::Errno::INTR) => continue,
                            Err(e) => {
                                let _ = tx.blocking_send(Err(Status::internal(e.to_string())));
                                return;
                            }
                        }
                    }
                    let filled = buf.len();
                    if filled == 0 {
                        return;
                    }
                    if tx.blocking_send(Ok(pb::Chunk { data: buf.into() })).is_err() || filled < chunk {
                        return;
                    }
                }
            });
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves until stdin closes. Same runtime and server settings as `fsd::network`.
pub fn serve(listen: &[String]) -> Res<()> {
    let mut unix = Vec::new();
    let mut tcp = Vec::new();
    for l in listen {
        match Endpoint::parse(l)? {
            Endpoint::Unix(path) => unix.push(path),
            Endpoint::Tcp(addr) | Endpoint::Web(addr) => tcp.push(addr),
        }
    }
    // The parent's pipe: EOF means the bench is done (or died).
    std::thread::Builder::new().name("echo-parent".into()).spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("echo-net").build()?;
    runtime.block_on(async move {
        let service = EchoService { buffer: Bytes::from(vec![b'x'; REPLY_BUFFER]) };
        let mut servers = tokio::task::JoinSet::new();
        let router = || {
            let svc = EchoServer::new(service.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE);
            tonic::transport::Server::builder()
                .initial_stream_window_size(2 << 20)
                .initial_connection_window_size(4 << 20)
                .max_frame_size((1 << 20) - 1)
                .tcp_nodelay(true)
                .max_concurrent_streams(256)
                .http2_keepalive_interval(Some(Duration::from_secs(30)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .add_service(svc)
        };
        for path in unix {
            let listener = tokio::net::UnixListener::bind(&path)?;
            let router = router();
            servers.spawn(async move { router.serve_with_incoming(UnixListenerStream::new(listener)).await });
        }
        for addr in tcp {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            // serve_with_incoming ignores the builder's tcp_nodelay; the incoming sets it.
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let router = router();
            servers.spawn(async move { router.serve_with_incoming(incoming).await });
        }
        while let Some(done) = servers.join_next().await {
            done??;
        }
        Ok(())
    })
}

/// The echo service's client on a tonic channel.
pub type Client = EchoClient<Channel>;

/// A client on the tools' own channel constructor.
pub async fn client(endpoint: &Endpoint) -> Res<Client> {
    let channel = connect::channel(endpoint).await?;
    Ok(EchoClient::new(channel).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE))
}

/// The shape of one fsd RPC: encoded request and reply sizes.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub request: usize,
    pub reply: usize,
}

/// A preallocated request payload, sliced per call.
#[derive(Debug, Clone)]
pub struct Payloads {
    buffer: Bytes,
}

impl Payloads {
    pub fn new() -> Payloads {
        Payloads { buffer: Bytes::from(vec![b'y'; REPLY_BUFFER]) }
    }

    /// One echo call per shape, in order: the RPC floor of a tool that makes these calls.
    pub async fn call(&self, client: &mut EchoClient<Channel>, shapes: &[Shape]) -> Res<()> {
        for shape in shapes {
            let request = pb::EchoRequest {
                data: self.buffer.slice(..shape.request.min(self.buffer.len())),
                reply_bytes: shape.reply as u32,
            };
            let reply = client.echo(request).await?.into_inner();
            if reply.data.len() != shape.reply {
                return Err("echo answered the wrong size".into());
            }
        }
        Ok(())
    }
}
