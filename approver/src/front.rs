//! `fsd-approver front`: the process of `serve` that speaks to the network (see [`crate::link`]).
//! It serves the daemons' gRPC (fsd.approver.v1), identifying each daemon by its token, the web
//! page and the webhook; it holds no key: every decision is the keeper's, asked over the link.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fsd_proto::approver::approver_server::{Approver, ApproverServer};
use fsd_proto::approver::{ApproveReply, ApproveRequest};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use crate::ApproverError;
use crate::config::Config;
use crate::link::{Entry, Reply, ToFront, ToKeeper};
use crate::serve::{Socket, bind_unix};

/// What the front's tasks share.
#[derive(Debug)]
pub struct Front {
    pub config: Config,
    to_keeper: mpsc::UnboundedSender<ToKeeper>,
    next: AtomicU64,
    asks: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    decisions: Mutex<HashMap<u64, oneshot::Sender<Option<String>>>>,
    /// The waiting requests, in arrival order, as the keeper last said.
    pub queue: Mutex<Vec<Entry>>,
    /// Changes whenever the queue does (the page polls it to know when to reload).
    pub generation: watch::Sender<u64>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Front {
    fn tell(&self, message: ToKeeper) {
        let _ = self.to_keeper.send(message);
    }

    /// Asks the keeper to take a person's decision; why not, when it was not taken.
    pub async fn decide(&self, key: String, person: String, approve: bool, reason: String) -> Option<String> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        locked(&self.decisions).insert(ticket, tx);
        self.tell(ToKeeper::Decide { ticket, key, person, approve, reason });
        rx.await.unwrap_or_else(|_| Some("The approver is stopping.".into()))
    }

    /// The person a bearer token belongs to.
    pub fn person(&self, token: &str) -> Option<&str> {
        self.config.people.iter().find(|p| p.token.is(token)).map(|p| p.name.as_str())
    }
}

/// Tells the keeper when a daemon stops waiting before its answer came.
struct Waiting<'a> {
    front: &'a Front,
    ask: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if locked(&self.front.asks).remove(&self.ask).is_some() {
            self.front.tell(ToKeeper::Gone { ask: self.ask });
        }
    }
}

#[derive(Debug, Clone)]
struct Service(Arc<Front>);

impl Service {
    /// The sandbox of the daemon asking: by its token when daemons are configured, else none.
    fn sandbox(&self, metadata: &tonic::metadata::MetadataMap) -> Result<String, Status> {
        let daemons = &self.0.config.daemons;
        if daemons.is_empty() {
            return Ok(String::new());
        }
        let token = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        daemons
            .iter()
            .find(|d| d.token.is(token))
            .map(|d| d.sandbox.clone())
            .ok_or_else(|| Status::unauthenticated("this approver does not know the daemon's token"))
    }
}

#[tonic::async_trait]
impl Approver for Service {
    async fn approve(&self, request: Request<ApproveRequest>) -> Result<Response<ApproveReply>, Status> {
        let sandbox = self.sandbox(request.metadata())?;
        let description = request.into_inner().description;
        let front = &self.0;
        let ask = front.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        locked(&front.asks).insert(ask, tx);
        // Dropped with this call when the daemon gives up: the request leaves the queue.
        let _waiting = Waiting { front, ask };
        front.tell(ToKeeper::Ask { ask, sandbox, description });
        let reply = rx.await.map_err(|_| Status::unavailable("the approver is stopping"))?;
        let signature = hex::decode(&reply.signature).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(ApproveReply {
            approved: reply.approved,
            signature: signature.into(),
            reason: reply.reason,
            decided_by: reply.decided_by,
            decider: reply.decider,
        }))
    }
}

/// The front's main: reads its start from the keeper on stdin, serves until the keeper closes
/// the link. A failure to start is sent to the keeper, which reports it (and exits).
pub fn main() -> Result<(), ApproverError> {
    use std::os::fd::AsFd;
    let fd =
        std::io::stdin().as_fd().try_clone_to_owned().map_err(|e| ApproverError::Serve(e.to_string()))?;
    let link = std::os::unix::net::UnixStream::from(fd);
    link.set_nonblocking(true).map_err(|e| ApproverError::Serve(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ApproverError::Serve(e.to_string()))?;
    runtime.block_on(async move {
        let link = tokio::net::UnixStream::from_std(link).map_err(|e| ApproverError::Serve(e.to_string()))?;
        let (read, mut write) = link.into_split();
        let mut read = tokio::io::BufReader::new(read);
        let (to_keeper, mut outgoing) = mpsc::unbounded_channel::<ToKeeper>();
        tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                if crate::link::send(&mut write, &message).await.is_err() {
                    return;
                }
            }
        });
        let Ok(Some(ToFront::Start { config, listen, socket_mode, socket_gid })) =
            crate::link::recv::<_, ToFront>(&mut read).await
        else {
            return Err(ApproverError::Serve("the keeper sent no start".into()));
        };
        let front = Arc::new(Front {
            config,
            to_keeper: to_keeper.clone(),
            next: AtomicU64::new(0),
            asks: Mutex::default(),
            decisions: Mutex::default(),
            queue: Mutex::default(),
            generation: watch::Sender::new(0),
        });
        let socket = Socket { mode: socket_mode, gid: socket_gid };
        if let Err(e) = start(&front, &listen, socket).await {
            let _ = to_keeper.send(ToKeeper::Failed { reason: e.to_string() });
            // Until the keeper has read it and closed the link.
            while let Ok(Some(_)) = crate::link::recv::<_, ToFront>(&mut read).await {}
            return Ok(());
        }
        let hooks = front.config.webhook.clone().map(crate::webhook::Notifier::new);
        loop {
            match crate::link::recv::<_, ToFront>(&mut read).await {
                Ok(Some(ToFront::Answer { ask, reply })) => {
                    if let Some(tx) = locked(&front.asks).remove(&ask) {
                        let _ = tx.send(reply);
                    }
                }
                Ok(Some(ToFront::Queued { entry })) => {
                    if let (Some(hooks), Some(web)) = (&hooks, &front.config.web) {
                        hooks.notify(&entry, &web.url);
                    } else if let Some(hooks) = &hooks {
                        hooks.notify(&entry, "");
                    }
                    locked(&front.queue).push(entry);
                    front.generation.send_modify(|g| *g += 1);
                }
                Ok(Some(ToFront::Removed { key })) => {
                    locked(&front.queue).retain(|e| e.key != key);
                    front.generation.send_modify(|g| *g += 1);
                }
                Ok(Some(ToFront::Decided { ticket, refusal })) => {
                    if let Some(tx) = locked(&front.decisions).remove(&ticket) {
                        let _ = tx.send(refusal);
                    }
                }
                Ok(Some(ToFront::Start { .. })) | Ok(None) | Err(_) => break,
            }
        }
        // The keeper is gone: so is serving (its listeners end with this process).
        std::process::exit(0)
    })
}

/// Binds every listener, says where it listens, and starts serving on each.
async fn start(front: &Arc<Front>, listen: &str, socket: Socket) -> Result<(), ApproverError> {
    let router = tonic::transport::Server::builder().add_service(ApproverServer::new(Service(front.clone())));
    if let Some(path) = listen.strip_prefix("unix:") {
        let listener = bind_unix(Path::new(path), socket)?;
        tokio::spawn(router.serve_with_incoming(UnixListenerStream::new(listener)));
    } else if let Some(addr) = listen.strip_prefix("tcp:") {
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| ApproverError::Serve(e.to_string()))?;
        tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    } else {
        return Err(ApproverError::Listen(listen.to_owned()));
    }
    eprintln!("fsd-approver: listening on {listen}");
    if let Some(web) = &front.config.web {
        let listener = tokio::net::TcpListener::bind(web.listen)
            .await
            .map_err(|e| ApproverError::Serve(format!("[web] listen {}: {e}", web.listen)))?;
        let tls = web.tls.as_ref().map(|(cert, key)| crate::web::acceptor(cert, key)).transpose()?;
        eprintln!("fsd-approver: the page is at {}/", web.url);
        tokio::spawn(crate::web::serve(front.clone(), listener, tls));
    }
    Ok(())
}
