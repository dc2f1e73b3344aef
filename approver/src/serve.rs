//! `fsd-approver serve`: the approver as a small gRPC service (fsd.approver.v1) that the daemon
//! asks, so the private key can live on another host or under another user than the agent.
//! Requests are decided one at a time, by the rule file or by the person at this terminal, and
//! every decision is one JSON line in the decision log: a hash chain whose checkpoints this key
//! signs ([`fsd_proto::chain`]), every `--checkpoint-every` decisions and at exit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use fsd_proto::approver::approver_server::{Approver, ApproverServer};
use fsd_proto::approver::{ApproveReply, ApproveRequest, Decider};
use fsd_proto::chain::{CheckpointKind, LogKind, Writer};
use tokio::sync::Mutex;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use crate::{ApproverError, Decision, Rules, ask, explain, signature};

/// How the Unix socket is made available to the daemon.
#[derive(Debug, Clone, Copy)]
pub struct Socket {
    pub mode: u32,
    pub gid: Option<u32>,
}

impl Socket {
    pub fn parse(mode: &str, group: Option<&str>) -> Result<Socket, ApproverError> {
        let bad_mode = || ApproverError::SocketMode(mode.to_owned());
        let parsed = u32::from_str_radix(mode.trim_start_matches("0o"), 8).map_err(|_| bad_mode())?;
        if parsed > 0o777 {
            return Err(bad_mode());
        }
        let gid = match group {
            None => None,
            Some(g) => Some(match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group_id(g).ok_or_else(|| ApproverError::SocketGroup(g.to_owned()))?,
            }),
        };
        Ok(Socket { mode: parsed, gid })
    }
}

/// A group's id from /etc/group (`name:x:gid:members`).
fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name)).then(|| fields.nth(1)?.parse().ok()).flatten()
    })
}

#[derive(Debug)]
pub struct Options {
    pub key: SigningKey,
    pub listen: String,
    /// The rule file's path (which decisions name) and its rules.
    pub rules: Option<(PathBuf, Rules)>,
    pub socket: Socket,
    pub log: Option<PathBuf>,
    pub checkpoint_every: u64,
}

/// One decision as the log keeps it.
#[derive(Debug, serde::Serialize)]
struct Logged<'a> {
    time: String,
    digest: String,
    id: &'a str,
    mode: &'a str,
    decision: &'a str,
    by: &'a str,
    /// Who decided, as the signature names it: `person`, or `rules FILE: rule N`.
    decider: &'a str,
    reason: &'a str,
}

#[derive(Debug)]
struct Service {
    key: SigningKey,
    rules: Option<(PathBuf, Rules)>,
    log: Option<Arc<std::sync::Mutex<Writer>>>,
    /// One prompt at a time on the terminal.
    turn: Arc<Mutex<()>>,
}

/// Who decided, when a person at this terminal did.
const PERSON: &str = "person";

/// Who decided, when the rule file did: the file and the rules (or the rule that refused).
fn rules_decider(path: &Path, why: &str) -> String {
    format!("rules {}: {why}", path.display())
}

fn field<'a>(description: &'a str, name: &str) -> &'a str {
    description.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("")
}

impl Service {
    fn record(&self, description: &str, approved: bool, by: Decider, decider: &str, reason: &str) {
        let Some(log) = &self.log else { return };
        let entry = Logged {
            time: crate::utc(crate::now_secs()),
            digest: hex::encode(fsd_proto::digest::content(description.as_bytes())),
            id: field(description, "id: "),
            mode: field(description, "mode: "),
            decision: if approved { "approved" } else { "refused" },
            by: match by {
                Decider::Person => "person",
                _ => "rules",
            },
            decider,
            reason,
        };
        let Ok(line) = serde_json::to_string(&entry) else { return };
        let mut writer = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = writer.append(&line, &entry.time) {
            eprintln!("fsd-approver: cannot write the decision log: {e}");
        }
    }
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
                decided_by: Decider::Rules as i32,
                decider: "rules: not an fsd escalation description".into(),
            }));
        }
        let _turn = self.turn.lock().await;
        let (approved, reason, by, decider) = match &self.rules {
            Some((path, rules)) => {
                let (decision, why) = explain(rules, &description);
                let decider = rules_decider(path, &why);
                (decision == Decision::Allow, why, Decider::Rules, decider)
            }
            None => {
                let text = description.clone();
                let (approved, reason) = tokio::task::spawn_blocking(move || ask(&text))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                (approved, reason, Decider::Person, PERSON.to_owned())
            }
        };
        self.record(&description, approved, by, &decider, &reason);
        let reply = if approved {
            let bytes = signature(&self.key, &fsd_proto::signed_decision(&description, &decider)).to_vec();
            ApproveReply {
                approved: true,
                signature: bytes.into(),
                reason: String::new(),
                decided_by: by as i32,
                decider,
            }
        } else {
            ApproveReply {
                approved: false,
                signature: Default::default(),
                reason,
                decided_by: by as i32,
                decider,
            }
        };
        Ok(Response::new(reply))
    }
}

/// Removes the socket file when serving ends, however it ends.
struct Cleanup<'a>(&'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// Binds the socket where nobody else can reach it yet (a private 0700 directory beside `path`),
/// gives it its mode and group there, and only then links it at `path`: no client ever sees it
/// with the umask's mode or the wrong group, and a file that appears at `path` meanwhile is never
/// replaced (the link fails instead).
fn bind_unix(path: &Path, socket: Socket) -> Result<tokio::net::UnixListener, ApproverError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
    let failed = |e: std::io::Error| ApproverError::Serve(format!("{}: {e}", path.display()));
    // Only a stale socket is replaced, never another kind of file.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(ApproverError::Serve(format!("{} exists and is not a socket", path.display())));
        }
        std::fs::remove_file(path).map_err(failed)?;
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ApproverError::Serve(format!("{}: not a socket path", path.display())));
    };
    let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut private_name = std::ffi::OsString::from(".fsd-approver.");
    private_name.push(format!("{}.{nanos:08x}.", std::process::id()));
    private_name.push(name);
    let private = parent.join(private_name);
    std::fs::DirBuilder::new().mode(0o700).create(&private).map_err(failed)?;
    let staged = private.join(name);
    let group_refused = std::cell::Cell::new(None);
    let placed = (|| {
        let listener = tokio::net::UnixListener::bind(&staged)?;
        if let Some(gid) = socket.gid {
            std::os::unix::fs::chown(&staged, None, Some(gid))
                .inspect_err(|_| group_refused.set(Some(gid)))?;
        }
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(socket.mode))?;
        std::fs::hard_link(&staged, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    // Only root or a member may give a file to a group: the bare EPERM named neither.
    placed.map_err(|e| match group_refused.get() {
        Some(gid) => ApproverError::Serve(format!(
            "{}: cannot give the socket to group {gid} (--socket-group): {e}; add the approver's user to that \
             group (usermod -aG GROUP USER) or run it as root",
            path.display()
        )),
        None => failed(e),
    })
}

pub fn run(options: Options) -> Result<(), ApproverError> {
    let Options { key, listen, rules, socket, log, checkpoint_every } = options;
    let log = match log {
        // Decisions name paths and reasons: readable by the approver's user alone.
        Some(path) => {
            let file = std::os::unix::fs::OpenOptionsExt::mode(&mut std::fs::OpenOptions::new(), 0o600)
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| ApproverError::Io(path.clone(), e))?;
            // The chain goes on where the file ends, signed by this approver's key.
            let writer = Writer::new(&path, file, LogKind::Decisions, checkpoint_every, Some(key.clone()))
                .map_err(|e| ApproverError::Io(path.clone(), e))?;
            Some(Arc::new(std::sync::Mutex::new(writer)))
        }
        None => None,
    };
    let sealed = log.clone();
    let served = serve(key, listen, rules, socket, log);
    // However serving ended, the log ends with a signed checkpoint.
    if let Some(log) = sealed {
        let mut writer = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = writer.checkpoint(CheckpointKind::Shutdown, &crate::utc(crate::now_secs())) {
            eprintln!("fsd-approver: cannot write the decision log's shutdown checkpoint: {e}");
        }
    }
    served
}

fn serve(
    key: SigningKey,
    listen: String,
    rules: Option<(PathBuf, Rules)>,
    socket: Socket,
    log: Option<Arc<std::sync::Mutex<Writer>>>,
) -> Result<(), ApproverError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ApproverError::Serve(e.to_string()))?;
    runtime.block_on(async move {
        let service = ApproverServer::new(Service { key, rules, log, turn: Arc::new(Mutex::new(())) });
        let router = tonic::transport::Server::builder().add_service(service);
        let shutdown = async {
            let term = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut term) => {
                        term.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = term => {}
            }
        };
        let serve_err = |e: tonic::transport::Error| ApproverError::Serve(e.to_string());
        if let Some(path) = listen.strip_prefix("unix:") {
            let path = Path::new(path);
            let listener = bind_unix(path, socket)?;
            let _cleanup = Cleanup(path);
            {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "fsd-approver: listening on {listen}");
            }
            router
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await
                .map_err(serve_err)?;
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
            return Err(ApproverError::Listen(listen.clone()));
        }
        Ok(())
    })
}
