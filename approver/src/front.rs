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
    /// Failed logins on the page, per address and per person.
    pub logins: crate::limit::Limiter,
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
        self.config
            .people
            .iter()
            .find(|p| p.token.as_ref().is_some_and(|t| t.is(token)))
            .map(|p| p.name.as_str())
    }

    /// The person a verified client certificate belongs to, by the first of its names that
    /// one person's `certificate` gives.
    pub fn person_of_certificate(&self, names: &[String]) -> Option<String> {
        names.iter().find_map(|n| {
            self.config.people.iter().find(|p| p.certificate.as_ref() == Some(n)).map(|p| p.name.clone())
        })
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
    /// The sandbox of the daemon asking: by its verified client certificate or its token when
    /// daemons are configured, else none. A certificate and a token that name two different
    /// daemons name neither.
    fn sandbox<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let daemons = &self.0.config.daemons;
        if daemons.is_empty() {
            return Ok(String::new());
        }
        let names = request.peer_certs().and_then(|c| c.first().map(crate::web::certificate_names));
        let by_certificate = names.and_then(|names| {
            names.iter().find_map(|n| daemons.iter().find(|d| d.certificate.as_ref() == Some(n)))
        });
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let by_token =
            token.and_then(|token| daemons.iter().find(|d| d.token.as_ref().is_some_and(|t| t.is(token))));
        match (by_certificate, by_token) {
            (Some(c), Some(t)) if c.sandbox != t.sandbox => Err(Status::unauthenticated(
                "the daemon's certificate and its token name two different daemons",
            )),
            (Some(d), _) | (None, Some(d)) => Ok(d.sandbox.clone()),
            (None, None) => Err(Status::unauthenticated(
                "this approver knows neither the daemon's certificate nor its token",
            )),
        }
    }
}

#[tonic::async_trait]
impl Approver for Service {
    async fn approve(&self, request: Request<ApproveRequest>) -> Result<Response<ApproveReply>, Status> {
        let sandbox = self.sandbox(&request)?;
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

/// An error and its sources on one line (tonic's own message is only "transport error").
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// What the front binds before it is confined, then serves on.
struct Listeners {
    daemons: Bound,
    /// The daemons' gRPC server, with TLS when `[grpc]` is configured.
    grpc: tonic::transport::Server,
    web: Option<(std::net::TcpListener, Option<tokio_rustls::TlsAcceptor>)>,
}

enum Bound {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// Binds every listener and says where each listens (before any thread exists, so the
/// confinement that follows covers the whole process).
fn bind(config: &Config, listen: &str, socket: Socket) -> Result<Listeners, ApproverError> {
    let daemons = if let Some(path) = listen.strip_prefix("unix:") {
        Bound::Unix(bind_unix(Path::new(path), socket)?)
    } else if let Some(addr) = listen.strip_prefix("tcp:") {
        Bound::Tcp(std::net::TcpListener::bind(addr).map_err(|e| ApproverError::Serve(e.to_string()))?)
    } else {
        return Err(ApproverError::Listen(listen.to_owned()));
    };
    let grpc = match &config.grpc {
        Some(g) => {
            use tonic::transport::{Certificate, Identity, ServerTlsConfig};
            let (cert, key) = &g.tls;
            let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
            // Optional: a daemon named by its token connects without one; a certificate the CA
            // did not issue fails the handshake.
            if let Some(ca) = &g.client_ca {
                tls = tls.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(true);
            }
            tonic::transport::Server::builder()
                .tls_config(tls)
                .map_err(|e| ApproverError::Serve(format!("[grpc] {}", with_sources(&e))))?
        }
        None => tonic::transport::Server::builder(),
    };
    eprintln!("fsd-approver: listening on {listen}{}", if config.grpc.is_some() { " (TLS)" } else { "" });
    let web = match &config.web {
        Some(web) => {
            let listener = std::net::TcpListener::bind(web.listen)
                .map_err(|e| ApproverError::Serve(format!("[web] listen {}: {e}", web.listen)))?;
            let tls = web
                .tls
                .as_ref()
                .map(|(cert, key)| crate::web::acceptor(cert, key, web.client_ca.as_deref()))
                .transpose()?;
            eprintln!("fsd-approver: the page is at {}/", web.url);
            Some((listener, tls))
        }
        None => None,
    };
    Ok(Listeners { daemons, grpc, web })
}

/// What the front may still read once it serves: what the C library reads to resolve the
/// webhook's host name (and the modules it loads for that). Nothing of the approver's own files:
/// not the key, not the log, not the config.
const READABLE: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/ld.so.cache",
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
];

/// Confines the front with Landlock: every filesystem right the kernel knows is handled and only
/// [`READABLE`] is granted (reading); signals and abstract sockets are scoped, and a confined
/// process cannot trace the keeper. So a front taken over through its HTTP cannot read the key
/// file or the keeper's memory, though both run as the same user. Where the kernel has no
/// Landlock the front serves unconfined and says so.
fn confine() -> Result<(), ApproverError> {
    use landlock::{
        ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    let failed = |e: &dyn std::fmt::Display| ApproverError::Serve(format!("cannot confine the front: {e}"));
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V6))
        .map_err(|e| failed(&e))?
        .scope(Scope::from_all(ABI::V6))
        .map_err(|e| failed(&e))?
        .create()
        .map_err(|e| failed(&e))?;
    for path in READABLE {
        let Ok(fd) = PathFd::new(path) else { continue };
        let rights = if Path::new(path).is_dir() {
            AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute
        } else {
            AccessFs::ReadFile.into()
        };
        created = created.add_rule(PathBeneath::new(fd, rights)).map_err(|e| failed(&e))?;
    }
    let status = created.restrict_self().map_err(|e| failed(&e))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        eprintln!(
            "fsd-approver: this kernel enforces no Landlock: the front process (HTTP, gRPC) is not kept from the key file"
        );
    }
    Ok(())
}

/// Reads one line from the link, byte by byte: nothing past it is taken from the socket.
fn first_line(link: &std::os::unix::net::UnixStream) -> Option<String> {
    use std::io::Read;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match (&*link).read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(1) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
}

/// The front's main: reads its start from the keeper on stdin, binds, confines itself, serves
/// until the keeper closes the link. A failure to start is sent to the keeper, which reports it
/// (and exits).
pub fn main() -> Result<(), ApproverError> {
    use std::io::Write;
    use std::os::fd::AsFd;
    let fd =
        std::io::stdin().as_fd().try_clone_to_owned().map_err(|e| ApproverError::Serve(e.to_string()))?;
    let link = std::os::unix::net::UnixStream::from(fd);
    let Some(Ok(ToFront::Start { config, listen, socket_mode, socket_gid, socket_group })) =
        first_line(&link).map(|line| serde_json::from_str::<ToFront>(&line))
    else {
        return Err(ApproverError::Serve("the keeper sent no start".into()));
    };
    let socket = Socket { mode: socket_mode, gid: socket_gid, group: socket_group };
    let listeners = match bind(&config, &listen, socket).and_then(|l| confine().map(|()| l)) {
        Ok(listeners) => listeners,
        Err(e) => {
            let mut line = serde_json::to_vec(&ToKeeper::Failed { reason: e.to_string() })
                .map_err(|e| ApproverError::Serve(e.to_string()))?;
            line.push(b'\n');
            let _ = (&link).write_all(&line);
            // Until the keeper has read it and closed the link.
            let _ = first_line(&link);
            return Ok(());
        }
    };
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
        let web_limit =
            config.web.as_ref().map_or(
                (crate::config::DEFAULT_LOGIN_FAILURES, crate::config::DEFAULT_LOGIN_WINDOW_SECS),
                |w| (w.login_failures, w.login_window_secs),
            );
        let front = Arc::new(Front {
            config: *config,
            to_keeper,
            next: AtomicU64::new(0),
            asks: Mutex::default(),
            decisions: Mutex::default(),
            queue: Mutex::default(),
            generation: watch::Sender::new(0),
            logins: crate::limit::Limiter::new(web_limit.0, std::time::Duration::from_secs(web_limit.1)),
        });
        serve(&front, listeners)?;
        let hooks = front.config.webhook.clone().map(crate::webhook::Notifier::new);
        let page = front.config.web.as_ref().map_or("", |w| w.url.as_str()).to_owned();
        loop {
            match crate::link::recv::<_, ToFront>(&mut read).await {
                Ok(Some(ToFront::Answer { ask, reply })) => {
                    if let Some(tx) = locked(&front.asks).remove(&ask) {
                        let _ = tx.send(reply);
                    }
                }
                Ok(Some(ToFront::Queued { entry })) => {
                    if let Some(hooks) = &hooks {
                        hooks.notify(&entry, &page);
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

/// Serves the daemons' gRPC and the page on what [`bind`] bound.
fn serve(front: &Arc<Front>, listeners: Listeners) -> Result<(), ApproverError> {
    let failed = |e: std::io::Error| ApproverError::Serve(e.to_string());
    let mut grpc = listeners.grpc;
    let router = grpc.add_service(ApproverServer::new(Service(front.clone())));
    match listeners.daemons {
        Bound::Unix(listener) => {
            listener.set_nonblocking(true).map_err(failed)?;
            let listener = tokio::net::UnixListener::from_std(listener).map_err(failed)?;
            tokio::spawn(router.serve_with_incoming(UnixListenerStream::new(listener)));
        }
        Bound::Tcp(listener) => {
            listener.set_nonblocking(true).map_err(failed)?;
            let listener = tokio::net::TcpListener::from_std(listener).map_err(failed)?;
            tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
        }
    }
    if let Some((listener, tls)) = listeners.web {
        listener.set_nonblocking(true).map_err(failed)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(failed)?;
        tokio::spawn(crate::web::serve(front.clone(), listener, tls));
    }
    Ok(())
}
