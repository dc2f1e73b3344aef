//! The gRPC edge: maps `fsd.v1` messages to backend requests and outcomes back to replies,
//! resolves each call's effective mode, and turns failures into statuses. Generated proto types
//! stop here; the backend never sees them.

use std::collections::BTreeMap;
use std::sync::Arc;

use fsd_proto::v1::{self, fsd_server::Fsd};
use fsd_proto::{ErrorCode, WireError, digest};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::audit::{self, Audit};
use crate::backend::{self, Limits, Mode, Outcome};
use crate::config::{Config, Escalation};
use crate::dispatch::Dispatcher;
use crate::escalation::{CanonicalOp, Describe, Escalations, Preview, Ticket};
use crate::sys;

/// The service state shared by every connection.
#[derive(Debug, Clone)]
pub struct FsdService {
    dispatcher: Arc<Dispatcher>,
    default_mode: Mode,
    max_mode: Mode,
    client_max_modes: BTreeMap<crate::identity::ClientKey, Mode>,
    escalation: Escalation,
    max_message_bytes: u64,
    limits: Limits,
    roots: Vec<(String, bool)>,
    protected: Vec<String>,
    audit: Option<Arc<Audit>>,
    escalations: Option<Arc<Escalations>>,
}

/// The mode a call runs at, and the signed ticket it must redeem first (signed trust only).
#[derive(Debug, Clone)]
struct Grant {
    mode: Mode,
    ticket: Option<v1::EscalationTicket>,
}

/// Who is calling, as far as the transport tells.
#[derive(Debug, Clone)]
struct Caller {
    identity: crate::identity::Identity,
    session: String,
    call: String,
}

impl Caller {
    fn of<T>(request: &Request<T>, context: Option<&v1::CallContext>) -> Caller {
        // The edge layer (`crate::edge`) authenticated the connection and the call before any
        // service sees it; without it (a service used directly) the caller is anonymous.
        let identity = request.extensions().get::<crate::identity::Identity>().cloned().unwrap_or_default();
        Caller {
            identity,
            session: context.map(|c| c.session_id.clone()).unwrap_or_default(),
            call: context.map(|c| c.call_id.clone()).unwrap_or_default(),
        }
    }

    /// `uid:1000`, `cert:NAME`, `token:NAME` or `tcp` (anonymous loopback TCP).
    fn client(&self) -> String {
        self.identity.label()
    }
}

impl FsdService {
    /// `roots`: (canonical path, writable) of each configured root.
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        config: &Config,
        roots: Vec<(String, bool)>,
        audit: Option<Arc<Audit>>,
    ) -> FsdService {
        FsdService {
            dispatcher,
            default_mode: config.default_mode,
            max_mode: config.max_mode,
            client_max_modes: config.client_max_modes.clone(),
            escalation: config.escalation,
            max_message_bytes: config.max_message_bytes,
            limits: config.limits,
            roots,
            protected: config.protected_names.clone(),
            escalations: match (config.escalation, &config.approver_public_key) {
                (Escalation::Signed, Some(key)) => {
                    Escalations::new(key, config.escalation_ttl).ok().map(Arc::new)
                }
                _ => None,
            },
            audit,
        }
    }

    /// The highest mode this caller may reach.
    fn max_for(&self, caller: &Caller) -> Mode {
        caller.identity.max_mode(&self.client_max_modes).unwrap_or(self.max_mode)
    }

    /// The mode a call runs at: the daemon's default (capped by the caller's maximum) unless the
    /// call asks for a narrower one; wider only with an escalation the trust level accepts.
    fn mode(
        &self,
        caller: &Caller,
        context: Option<&v1::CallContext>,
        path: &str,
        op: &str,
    ) -> Result<Grant, Status> {
        let plain = |mode| Ok(Grant { mode, ticket: None });
        let max = self.max_for(caller);
        let base = self.default_mode.min(max);
        let requested = context.map(|c| c.mode()).unwrap_or(v1::Mode::Unspecified);
        let Some(requested) = mode_from_wire(requested) else {
            return plain(base);
        };
        if requested <= base {
            return plain(requested);
        }
        let decide = |decision: &str, result: &str| {
            if let Some(audit) = &self.audit {
                audit.record(&audit::Entry {
                    time: audit::now(),
                    session: &caller.session,
                    call: &caller.call,
                    client: caller.client(),
                    op: &format!("escalate:{op}"),
                    path,
                    mode: requested.as_str(),
                    decision,
                    result,
                });
            }
        };
        let deny = |why: String| {
            decide("refused", ErrorCode::SandboxDenied.as_str());
            Err(WireError::new(ErrorCode::SandboxDenied, path, why).with("mode", base.as_str()).into_status())
        };
        if requested > max {
            return deny(format!(
                "{} is above this client's maximum mode {}",
                requested.as_str(),
                max.as_str()
            ));
        }
        match self.escalation {
            Escalation::Deny => {
                deny(format!("escalation to {} is disabled on this daemon", requested.as_str()))
            }
            Escalation::Client => {
                let ticket = context.and_then(|c| c.escalation.as_ref());
                let approved = ticket.and_then(|t| mode_from_wire(t.approved_mode()));
                let justified = ticket.is_some_and(|t| !t.justification.trim().is_empty());
                match approved {
                    Some(approved) if approved >= requested && justified => {
                        decide("approved", "ok");
                        plain(requested)
                    }
                    _ => deny(format!(
                        "{} needs an approved escalation with a justification",
                        requested.as_str()
                    )),
                }
            }
            // The signature is checked against the re-canonicalised call in `run`.
            Escalation::Signed => match context.and_then(|c| c.escalation.clone()) {
                Some(ticket) if !ticket.signature.is_empty() => {
                    Ok(Grant { mode: requested, ticket: Some(ticket) })
                }
                _ => deny(format!("{} needs a signed escalation ticket", requested.as_str())),
            },
        }
    }

    /// The daemon's own canonical form of a call: its paths resolved in a worker of `mode`.
    async fn canonical(
        &self,
        mode: Mode,
        op: &str,
        path: &str,
        follow: bool,
    ) -> Result<(String, String, Option<String>), Status> {
        let request = backend::Request::Stat { path: path.to_owned(), no_follow: !follow };
        match self.dispatch(mode, request).await.map_err(|w| w.into_status())? {
            Outcome::Stat { target, info } => Ok((target.key, target.display, info.map(|i| i.version))),
            _ => Err(Status::internal(format!("{op}: unexpected outcome"))),
        }
    }

    /// Describes one call as an approver would have seen it.
    async fn canonical_op(&self, mode: Mode, request: &backend::Request) -> Result<CanonicalOp, Status> {
        let (op, path, follow, digest, destination) = match request {
            backend::Request::WriteText { path, content, .. } => {
                ("writeText", path, true, digest::content(content.as_bytes()), None)
            }
            backend::Request::EditText { path, old, new, replace_all, .. } => {
                ("editText", path, true, digest::edit(old, new, *replace_all), None)
            }
            backend::Request::DeleteFile { path, .. } => ("deleteFile", path, false, Vec::new(), None),
            backend::Request::MoveFile { source, destination, content, .. } => {
                let digest = content.as_ref().map(|c| digest::content(c.as_bytes())).unwrap_or_default();
                ("moveFile", source, false, digest, Some(destination))
            }
            backend::Request::Stat { path, .. }
            | backend::Request::ReadText { path, .. }
            | backend::Request::ReadBytes { path, .. }
            | backend::Request::ListDir { path } => ("read", path, true, Vec::new(), None),
        };
        let (target_key, display, version) = self.canonical(mode, op, path, follow).await?;
        let destination = match destination {
            Some(dst) => {
                let (key, display, _) = self.canonical(mode, op, dst, true).await?;
                Some((key, display))
            }
            None => None,
        };
        Ok(CanonicalOp {
            op: op.to_owned(),
            target_key,
            display,
            version,
            destination,
            content_sha256: digest,
        })
    }

    /// The digest an approval binds and the diff its approver sees. When the client sent the
    /// change itself, both come from the daemon: the digest of what was sent, and a diff
    /// against the file as a worker of the requested mode reads it now.
    async fn preview(&self, mode: Mode, op: &v1::EscalatedOp, exists: bool) -> (Vec<u8>, Preview) {
        const MAX_PREVIEW_LINES: usize = 200;
        let bounded = |mut lines: Vec<String>| {
            if lines.len() > MAX_PREVIEW_LINES {
                let more = lines.len() - MAX_PREVIEW_LINES;
                lines.truncate(MAX_PREVIEW_LINES);
                lines.push(format!("… {more} more diff lines not shown"));
            }
            Preview { lines }
        };
        match (op.op.as_str(), &op.content, &op.old_string, &op.new_string) {
            ("writeText", Some(content), _, _) => {
                let current = if exists {
                    let request = backend::Request::ReadText { path: op.path.clone(), max_bytes: 1 << 20 };
                    match self.dispatch(mode, request).await {
                        Ok(Outcome::ReadText { text, .. }) => Some(text),
                        _ => None,
                    }
                } else {
                    Some(String::new())
                };
                let lines = match current {
                    Some(old) => similar::TextDiff::configure()
                        .timeout(std::time::Duration::from_millis(100))
                        .diff_lines(old.as_str(), content.as_str())
                        .unified_diff()
                        .context_radius(2)
                        .to_string()
                        .lines()
                        .map(str::to_owned)
                        .collect(),
                    None => vec!["(the current content is not text or too large to show)".to_owned()],
                };
                (digest::content(content.as_bytes()), bounded(lines))
            }
            ("editText", _, Some(old), Some(new)) => {
                let mut lines: Vec<String> = old.lines().map(|l| format!("-{l}")).collect();
                lines.extend(new.lines().map(|l| format!("+{l}")));
                if op.replace_all {
                    lines.insert(0, "(every occurrence)".to_owned());
                }
                (digest::edit(old, new, op.replace_all), bounded(lines))
            }
            _ => (op.content_sha256.to_vec(), Preview::default()),
        }
    }

    /// Redeems a signed ticket for this call, or refuses it (audited either way).
    async fn redeem(&self, caller: &Caller, grant: &Grant, request: &backend::Request) -> Result<(), Status> {
        let Some(ticket) = &grant.ticket else { return Ok(()) };
        let path = request_path(request).to_owned();
        let refuse = |why: String| {
            self.audit_escalation(
                caller,
                op_name(request),
                &path,
                grant.mode,
                "refused",
                ErrorCode::SandboxDenied.as_str(),
            );
            WireError::new(ErrorCode::SandboxDenied, &path, why)
                .with("mode", self.default_mode.as_str())
                .into_status()
        };
        let Some(escalations) = &self.escalations else {
            return Err(refuse("this daemon does not take signed escalations".into()));
        };
        if grant.mode > self.max_for(caller) {
            return Err(refuse(format!("{} is above this client's maximum mode", grant.mode.as_str())));
        }
        let call = self.canonical_op(grant.mode, request).await?;
        let client = caller.client();
        let presented = Ticket {
            id: &ticket.escalation_id,
            nonce: &ticket.nonce,
            signature: &ticket.signature,
            session: &caller.session,
            client: &client,
            mode: grant.mode,
        };
        let result = if call.op == "read" {
            escalations.check_read(&presented, &call.target_key)
        } else {
            escalations.redeem(&presented, &call)
        };
        match result {
            Ok(()) => {
                self.audit_escalation(caller, op_name(request), &path, grant.mode, "approved", "ok");
                Ok(())
            }
            Err(e) => Err(refuse(format!("escalation ticket refused: {e}"))),
        }
    }

    fn audit_escalation(
        &self,
        caller: &Caller,
        op: &str,
        path: &str,
        mode: Mode,
        decision: &str,
        result: &str,
    ) {
        if let Some(audit) = &self.audit {
            audit.record(&audit::Entry {
                time: audit::now(),
                session: &caller.session,
                call: &caller.call,
                client: caller.client(),
                op: &format!("escalate:{op}"),
                path,
                mode: mode.as_str(),
                decision,
                result,
            });
        }
    }

    /// One backend operation on the blocking pool.
    async fn dispatch(&self, mode: Mode, request: backend::Request) -> Result<Outcome, WireError> {
        let dispatcher = self.dispatcher.clone();
        let path = request_path(&request).to_owned();
        tokio::task::spawn_blocking(move || dispatcher.call(mode, request, &path)).await.unwrap_or_else(|e| {
            Err(WireError::new(ErrorCode::IoError, "", format!("dispatch task failed: {e}")))
        })
    }

    /// Runs one operation in a worker of `mode`, on the blocking pool.
    async fn run(&self, caller: &Caller, grant: Grant, request: backend::Request) -> Result<Outcome, Status> {
        self.redeem(caller, &grant, &request).await?;
        let mode = grant.mode;
        let dispatcher = self.dispatcher.clone();
        let op = op_name(&request);
        let path = request_path(&request).to_owned();
        let started = std::time::Instant::now();
        let call_path = path.clone();
        let result = tokio::task::spawn_blocking(move || dispatcher.call(mode, request, &call_path))
            .await
            .map_err(|e| Status::internal(format!("dispatch task failed: {e}")))?;
        match &result {
            Ok(_) => {
                tracing::debug!(op, mode = mode.as_str(), micros = started.elapsed().as_micros() as u64, "ok")
            }
            Err(w) => {
                tracing::info!(op, mode = mode.as_str(), path = %w.path, code = %w.code, error = %w.message, "refused")
            }
        }
        if let (Some(audit), true) = (&self.audit, is_mutation(op)) {
            let code = result.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
            let decision = if code == ErrorCode::SandboxDenied.as_str() { "denied" } else { "allowed" };
            audit.record(&audit::Entry {
                time: audit::now(),
                session: &caller.session,
                call: &caller.call,
                client: caller.client(),
                op,
                path: &path,
                mode: mode.as_str(),
                decision,
                result: code,
            });
        }
        result.map_err(|w| w.with("mode", mode.as_str()).into_status())
    }
}

fn is_mutation(op: &str) -> bool {
    matches!(op, "writeText" | "editText" | "moveFile" | "deleteFile")
}

fn request_path(request: &backend::Request) -> &str {
    match request {
        backend::Request::Stat { path, .. }
        | backend::Request::ReadText { path, .. }
        | backend::Request::ReadBytes { path, .. }
        | backend::Request::ListDir { path }
        | backend::Request::WriteText { path, .. }
        | backend::Request::EditText { path, .. }
        | backend::Request::DeleteFile { path, .. } => path,
        backend::Request::MoveFile { source, .. } => source,
    }
}

fn op_name(request: &backend::Request) -> &'static str {
    match request {
        backend::Request::Stat { .. } => "stat",
        backend::Request::ReadText { .. } => "readText",
        backend::Request::ReadBytes { .. } => "readBytes",
        backend::Request::ListDir { .. } => "listDir",
        backend::Request::WriteText { .. } => "writeText",
        backend::Request::EditText { .. } => "editText",
        backend::Request::MoveFile { .. } => "moveFile",
        backend::Request::DeleteFile { .. } => "deleteFile",
    }
}

fn unexpected() -> Status {
    Status::internal("backend returned an outcome of another operation")
}

pub fn mode_from_wire(mode: v1::Mode) -> Option<Mode> {
    match mode {
        v1::Mode::Unspecified => None,
        v1::Mode::ReadOnly => Some(Mode::ReadOnly),
        v1::Mode::WorkspaceWrite => Some(Mode::WorkspaceWrite),
        v1::Mode::DangerFullAccess => Some(Mode::DangerFullAccess),
    }
}

pub fn mode_to_wire(mode: Mode) -> v1::Mode {
    match mode {
        Mode::ReadOnly => v1::Mode::ReadOnly,
        Mode::WorkspaceWrite => v1::Mode::WorkspaceWrite,
        Mode::DangerFullAccess => v1::Mode::DangerFullAccess,
    }
}

fn target(t: backend::Target) -> Option<v1::Target> {
    Some(v1::Target { target_key: t.key, display_path: t.display })
}

fn file_type(t: backend::FileType) -> i32 {
    match t {
        backend::FileType::File => v1::FileType::File as i32,
        backend::FileType::Directory => v1::FileType::Directory as i32,
        backend::FileType::Other => v1::FileType::Other as i32,
        backend::FileType::Symlink => v1::FileType::Symlink as i32,
    }
}

fn change(c: backend::Change) -> Option<v1::TextChange> {
    Some(v1::TextChange { before: c.before, after: c.after, omitted: c.omitted })
}

fn write_guard(g: Option<v1::WriteGuard>) -> Option<backend::WriteGuard> {
    match g?.kind? {
        v1::write_guard::Kind::CreateIfAbsent(_) => Some(backend::WriteGuard::CreateIfAbsent),
        v1::write_guard::Kind::ReplaceIfVersion(r) => Some(backend::WriteGuard::ReplaceIfVersion {
            version: r.version,
            target_key: (!r.target_key.is_empty()).then_some(r.target_key),
        }),
    }
}

fn edit_guard(g: Option<v1::EditGuard>) -> Option<backend::EditGuard> {
    g.map(|g| backend::EditGuard {
        version: g.version,
        target_key: (!g.target_key.is_empty()).then_some(g.target_key),
    })
}

type StreamReply = ReceiverStream<Result<v1::StreamTextReply, Status>>;

#[tonic::async_trait]
impl Fsd for FsdService {
    async fn hello(&self, request: Request<v1::HelloRequest>) -> Result<Response<v1::HelloReply>, Status> {
        // The modes this caller may reach, not the daemon's global ones.
        let caller = Caller::of(&request, None);
        let max_mode = self.max_for(&caller);
        let default_mode = self.default_mode.min(max_mode);
        let limits = self.limits;
        let reports = self.dispatcher.report();
        let modes = reports
            .iter()
            .map(|report| {
                let mode = report.mode;
                let (available, enforcement, reason) = if mode > max_mode {
                    (false, "refused".to_owned(), format!("above this client's maximum mode {}", max_mode.as_str()))
                } else if let Some(reason) = &report.unavailable {
                    (false, "refused".to_owned(), reason.clone())
                } else {
                    let enforcement = report.enforcement.clone().unwrap_or_else(|| "starting".to_owned());
                    let reason = match mode {
                        Mode::DangerFullAccess => "workers keep the daemon's privileges under the seccomp allowlist".to_owned(),
                        _ => format!("{} worker processes confined at birth (uid, capabilities, no_new_privs, Landlock, seccomp); protected names by the resolver", report.live_workers),
                    };
                    (report.live_workers > 0, enforcement, reason)
                };
                v1::ModeStatus { mode: mode_to_wire(mode) as i32, available, enforcement, reason }
            })
            .collect();
        let roots = &self.roots;
        Ok(Response::new(v1::HelloReply {
            protocol_version: fsd_proto::PROTOCOL_VERSION,
            daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
            landlock_abi: sys::landlock_abi(),
            modes,
            default_mode: mode_to_wire(default_mode) as i32,
            max_mode: mode_to_wire(max_mode) as i32,
            escalation: self.escalation.as_str().to_owned(),
            limits: Some(v1::Limits {
                max_message_bytes: self.max_message_bytes,
                max_editable_file_bytes: limits.max_editable_bytes,
                max_read_bytes: limits.max_read_bytes,
                max_diff_text_bytes: limits.max_diff_text_bytes,
                max_dir_entries: limits.max_dir_entries as u64,
                max_path_bytes: backend::resolve::MAX_PATH_BYTES as u64,
            }),
            readable_roots: roots.iter().map(|(p, _)| p.clone()).collect(),
            writable_roots: roots.iter().filter(|(_, w)| *w).map(|(p, _)| p.clone()).collect(),
            protected_names: self.protected.clone(),
        }))
    }

    async fn stat(&self, request: Request<v1::StatRequest>) -> Result<Response<v1::StatReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "stat")?;
        #[cfg(feature = "fault-injection")]
        if let Some(dir) = r.path.strip_suffix("/fsd-fault-network-open") {
            // Test hook: the network process itself tries to list a root; its fence must refuse.
            return match std::fs::read_dir(dir) {
                Ok(_) => Err(Status::internal("the network process could list a root")),
                Err(e) => Err(Status::permission_denied(format!("network process: {e}"))),
            };
        }
        match self
            .run(&caller, grant, backend::Request::Stat { path: r.path, no_follow: r.no_follow })
            .await?
        {
            Outcome::Stat { target: t, info } => Ok(Response::new(v1::StatReply {
                target: target(t),
                info: info.map(|i| v1::FsInfo {
                    version: i.version,
                    r#type: file_type(i.file_type),
                    size: i.size,
                }),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn read_text(
        &self,
        request: Request<v1::ReadTextRequest>,
    ) -> Result<Response<v1::ReadTextReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "readText")?;
        match self
            .run(&caller, grant, backend::Request::ReadText { path: r.path, max_bytes: r.max_bytes })
            .await?
        {
            Outcome::ReadText { target: t, version, text } => {
                Ok(Response::new(v1::ReadTextReply { target: target(t), version, text }))
            }
            _ => Err(unexpected()),
        }
    }

    type StreamTextStream = StreamReply;

    async fn stream_text(
        &self,
        request: Request<v1::StreamTextRequest>,
    ) -> Result<Response<StreamReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "streamText")?;
        let probe = backend::Request::ReadText { path: r.path.clone(), max_bytes: 0 };
        self.redeem(&caller, &grant, &probe).await?;
        let mode = grant.mode;
        // A few chunks in flight at most: memory stays constant whatever the file's size.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let dispatcher = self.dispatcher.clone();
        let chunk = match r.chunk_bytes as usize {
            0 => self.limits.default_chunk_bytes,
            n => n.clamp(4096, self.limits.max_chunk_bytes),
        };
        tokio::task::spawn_blocking(move || {
            let (header, file) = match dispatcher.open_stream(mode, &r.path) {
                Ok(opened) => opened,
                Err(w) => {
                    let _ = tx.blocking_send(Err(w.with("mode", mode.as_str()).into_status()));
                    return;
                }
            };
            let header = v1::StreamTextReply {
                item: Some(v1::stream_text_reply::Item::Header(v1::StreamHeader {
                    target: target(header.target),
                    version: header.version,
                    size: header.size,
                })),
            };
            if tx.blocking_send(Ok(header)).is_err() {
                return;
            }
            let mut sink = |bytes: Vec<u8>| {
                let reply =
                    v1::StreamTextReply { item: Some(v1::stream_text_reply::Item::Chunk(bytes.into())) };
                tx.blocking_send(Ok(reply)).is_ok()
            };
            if let Err(e) = backend::pump(file, chunk, &mut sink) {
                let w = crate::error::Failure::new(e, r.path.clone()).into_wire();
                let _ = tx.blocking_send(Err(w.with("mode", mode.as_str()).into_status()));
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn read_bytes(
        &self,
        request: Request<v1::ReadBytesRequest>,
    ) -> Result<Response<v1::ReadBytesReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "readBytes")?;
        match self
            .run(&caller, grant, backend::Request::ReadBytes { path: r.path, max_bytes: r.max_bytes })
            .await?
        {
            Outcome::ReadBytes { target: t, version, data } => {
                Ok(Response::new(v1::ReadBytesReply { target: target(t), version, data: data.into() }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn list_dir(
        &self,
        request: Request<v1::ListDirRequest>,
    ) -> Result<Response<v1::ListDirReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "listDir")?;
        match self.run(&caller, grant, backend::Request::ListDir { path: r.path }).await? {
            Outcome::ListDir { target: t, entries } => Ok(Response::new(v1::ListDirReply {
                target: target(t),
                entries: entries
                    .into_iter()
                    .map(|e| v1::DirEntry {
                        name: e.name,
                        raw_name: e.raw_name.into(),
                        r#type: file_type(e.file_type),
                        target: target(e.target),
                        version: e.version,
                        size: e.size,
                    })
                    .collect(),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn write_text(
        &self,
        request: Request<v1::WriteTextRequest>,
    ) -> Result<Response<v1::WriteTextReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "writeText")?;
        let req = backend::Request::WriteText {
            path: r.path,
            content: r.content,
            guard: write_guard(r.guard),
            match_style: r.match_existing_style,
        };
        match self.run(&caller, grant, req).await? {
            Outcome::WriteText { target: t, operation, version, change: c } => {
                Ok(Response::new(v1::WriteTextReply {
                    target: target(t),
                    operation: match operation {
                        backend::WriteOperation::Create => v1::WriteOperation::Create as i32,
                        backend::WriteOperation::Update => v1::WriteOperation::Update as i32,
                    },
                    version,
                    change: change(c),
                }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn edit_text(
        &self,
        request: Request<v1::EditTextRequest>,
    ) -> Result<Response<v1::EditTextReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "editText")?;
        let req = backend::Request::EditText {
            path: r.path,
            old: r.old_string,
            new: r.new_string,
            replace_all: r.replace_all,
            guard: edit_guard(r.guard),
        };
        match self.run(&caller, grant, req).await? {
            Outcome::EditText { target: t, version, replacements, change: c } => {
                Ok(Response::new(v1::EditTextReply {
                    target: target(t),
                    version,
                    replacements: u32::try_from(replacements).unwrap_or(u32::MAX),
                    change: change(c),
                }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn move_file(
        &self,
        request: Request<v1::MoveFileRequest>,
    ) -> Result<Response<v1::MoveFileReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.source, "moveFile")?;
        let req = backend::Request::MoveFile {
            source: r.source,
            destination: r.destination,
            source_guard: edit_guard(r.source_guard),
            destination_guard: write_guard(r.destination_guard),
            content: r.content,
        };
        match self.run(&caller, grant, req).await? {
            Outcome::MoveFile {
                source,
                destination,
                destination_version,
                source_change,
                destination_change,
                source_removal_error,
            } => Ok(Response::new(v1::MoveFileReply {
                source: target(source),
                destination: target(destination),
                destination_version,
                source_change: change(source_change),
                destination_change: change(destination_change),
                source_remains: source_removal_error.is_some(),
                source_removal_error: source_removal_error.unwrap_or_default(),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn delete_file(
        &self,
        request: Request<v1::DeleteFileRequest>,
    ) -> Result<Response<v1::DeleteFileReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, "deleteFile")?;
        match self
            .run(&caller, grant, backend::Request::DeleteFile { path: r.path, guard: edit_guard(r.guard) })
            .await?
        {
            Outcome::DeleteFile { target: t, change: c } => {
                Ok(Response::new(v1::DeleteFileReply { target: target(t), change: change(c) }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn request_escalation(
        &self,
        request: Request<v1::EscalationRequest>,
    ) -> Result<Response<v1::EscalationDescription>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        let first = r.ops.first().map(|o| o.path.clone()).unwrap_or_default();
        let refuse = |why: String| {
            WireError::new(ErrorCode::SandboxDenied, &first, why)
                .with("mode", self.default_mode.as_str())
                .into_status()
        };
        let Some(escalations) = &self.escalations else {
            return Err(refuse("this daemon does not take signed escalations".into()));
        };
        let max = self.max_for(&caller);
        let base = self.default_mode.min(max);
        let requested =
            mode_from_wire(r.requested_mode()).ok_or_else(|| refuse("no mode requested".into()))?;
        if requested <= base {
            return Err(refuse(format!("{} needs no escalation", requested.as_str())));
        }
        if requested > max {
            self.audit_escalation(
                &caller,
                "describe",
                &first,
                requested,
                "refused",
                ErrorCode::SandboxDenied.as_str(),
            );
            return Err(refuse(format!(
                "{} is above this client's maximum mode {}",
                requested.as_str(),
                max.as_str()
            )));
        }
        if r.ops.is_empty() || r.ops.len() > 10_000 {
            return Err(Status::invalid_argument("an escalation lists between 1 and 10000 calls"));
        }
        let mut ops = Vec::with_capacity(r.ops.len());
        for op in &r.ops {
            let (follow, destination) = match op.op.as_str() {
                "writeText" | "editText" => (true, None),
                "deleteFile" => (false, None),
                "moveFile" => (false, Some(op.destination.as_str())),
                other => {
                    return Err(Status::invalid_argument(format!("cannot escalate operation {other:?}")));
                }
            };
            let (target_key, display, version) = self.canonical(requested, &op.op, &op.path, follow).await?;
            let destination = match destination {
                Some(dst) => {
                    let (key, display, _) = self.canonical(requested, &op.op, dst, true).await?;
                    Some((key, display))
                }
                None => None,
            };
            let (content_sha256, preview) = self.preview(requested, op, version.is_some()).await;
            ops.push((
                CanonicalOp { op: op.op.clone(), target_key, display, version, destination, content_sha256 },
                preview,
            ));
        }
        let described = escalations.describe(Describe {
            session: &caller.session,
            client: &caller.client(),
            mode: requested,
            justification: &r.justification,
            ops,
        });
        self.audit_escalation(&caller, "describe", &first, requested, "pending", "ok");
        Ok(Response::new(v1::EscalationDescription {
            escalation_id: described.id,
            nonce: described.nonce.into(),
            description: described.text,
            expires_unix: i64::try_from(described.expires).unwrap_or(i64::MAX),
        }))
    }

    async fn release_escalation(
        &self,
        request: Request<v1::ReleaseEscalationRequest>,
    ) -> Result<Response<v1::ReleaseEscalationReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let r = request.into_inner();
        if let Some(escalations) = &self.escalations {
            escalations.release(&r.escalation_id, &caller.session);
        }
        Ok(Response::new(v1::ReleaseEscalationReply {}))
    }
}
