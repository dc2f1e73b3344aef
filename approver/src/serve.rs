//! `fsd-approver serve`: the approver as a small gRPC service (fsd.approver.v1), so the private
//! key can live on another host or under another user than the agent. Requests are decided one
//! at a time: by the rule file, or by the person at this terminal.

use std::sync::Arc;

use ed25519_dalek::SigningKey;
use fsd_proto::approver::approver_server::{Approver, ApproverServer};
use fsd_proto::approver::{ApproveReply, ApproveRequest};
use tokio::sync::Mutex;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use crate::{ApproverError, Decision, Rules, ask, decide, signature};

#[derive(Debug)]
struct Service {
    key: SigningKey,
    rules: Option<Rules>,
    /// One prompt at a time on the terminal.
    turn: Arc<Mutex<()>>,
}

#[tonic::async_trait]
impl Approver for Service {
    async fn approve(&self, request: Request<ApproveRequest>) -> Result<Response<ApproveReply>, Status> {
        let description = request.into_inner().description;
        if !description.starts_with("fsd escalation v1\n") {
            return Ok(Response::new(ApproveReply {
                approved: false,
                signature: Default::default(),
                reason: "not an fsd escalation description".into(),
            }));
        }
        let _turn = self.turn.lock().await;
        let approved = match &self.rules {
            Some(rules) => decide(rules, &description) == Decision::Allow,
            None => {
                let text = description.clone();
                tokio::task::spawn_blocking(move || ask(&text))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| Status::unavailable(e.to_string()))?
            }
        };
        let reply = if approved {
            let bytes = signature(&self.key, &description).to_vec();
            ApproveReply { approved: true, signature: bytes.into(), reason: String::new() }
        } else {
            ApproveReply { approved: false, signature: Default::default(), reason: "denied".into() }
        };
        Ok(Response::new(reply))
    }
}

pub fn run(key: SigningKey, listen: &str, rules: Option<Rules>) -> Result<(), ApproverError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ApproverError::Serve(e.to_string()))?;
    runtime.block_on(async move {
        let service = ApproverServer::new(Service { key, rules, turn: Arc::new(Mutex::new(())) });
        let router = tonic::transport::Server::builder().add_service(service);
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let serve_err = |e: tonic::transport::Error| ApproverError::Serve(e.to_string());
        if let Some(path) = listen.strip_prefix("unix:") {
            let _ = std::fs::remove_file(path);
            let listener =
                tokio::net::UnixListener::bind(path).map_err(|e| ApproverError::Serve(e.to_string()))?;
            {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "fsd-approver: listening on {listen}");
            }
            router
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await
                .map_err(serve_err)?;
            let _ = std::fs::remove_file(path);
        } else if let Some(addr) = listen.strip_prefix("tcp:") {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|e| ApproverError::Serve(e.to_string()))?;
            {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "fsd-approver: listening on {listen}");
            }
            router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                .await
                .map_err(serve_err)?;
        } else {
            return Err(ApproverError::Listen(listen.to_owned()));
        }
        Ok(())
    })
}
