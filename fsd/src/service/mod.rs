//! The gRPC edge: every `fsd.v1` handler is one call of [`FsdService::unary`] (or the stream),
//! which resolves the caller's grant, runs the backend request in a worker of that mode and
//! converts the outcome. Generated proto types stop here; the backend never sees them.
//!
//! `wire` converts messages, `grant` decides modes and redeems tickets, `escalate` describes
//! escalations, `hello` reports what is served.

mod escalate;
mod grant;
mod hello;
mod inspect;
mod patched;
mod plain;
mod record_calls;
mod streamed;
mod wire;
mod write_bytes;

use std::collections::BTreeMap;
use std::sync::Arc;

use fsd_proto::v1::{self, fsd_server::Fsd};
use fsd_proto::{ErrorCode, WireError};
use tonic::{Request, Response, Status};

use crate::budget::Budgets;
use crate::config::{Config, Escalation};
use crate::dispatch::{Dispatcher, stream};
use crate::escalation::Escalations;
use crate::op::Op;
use crate::op::{self, Limits, Mode, Outcome, WriteOperation};
use grant::{Caller, Decision, Grant, Step};
pub use plain::{BodySink, SinkClosed};
use wire::Called;
pub use wire::{mode_from_wire, mode_to_wire};

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
    audit: Option<Arc<crate::audit::Audit>>,
    escalations: Option<Arc<Escalations>>,
    /// Where the daemon asks its approver (signed trust).
    approver_endpoint: Option<crate::escalation::ApproverEndpoint>,
    approver_token: Option<crate::approver_client::Token>,
    approver_tls: Option<crate::approver_client::Tls>,
    /// What each caller has been approved to read or change.
    known: Arc<crate::escalation::Known>,
    /// Per-identity budgets; other parts of the service (escalation requests) draw on them too.
    budgets: Arc<Budgets>,
    /// A stream whose reader reads nothing for this long is cancelled.
    stream_idle: std::time::Duration,
    /// Started with the first signed escalation: audits expiries as they happen.
    sweeper: Arc<std::sync::Once>,
    /// The TLS configuration in use, whose certificate hello names (rotated without a restart).
    tls: Option<crate::tls::Current>,
    /// Identities that may list and rewind every identity's changes (`change_operators`).
    change_operators: Vec<String>,
}

impl FsdService {
    /// `roots`: (canonical path, writable) of each configured root.
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        config: &Config,
        roots: Vec<(String, bool)>,
        audit: Option<Arc<crate::audit::Audit>>,
        tls: Option<crate::tls::Current>,
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
            approver_endpoint: config.approver_endpoint.clone(),
            approver_token: config.approver_token.clone(),
            approver_tls: config.approver_tls.clone(),
            known: Arc::default(),
            audit,
            budgets: Arc::new(Budgets::new(config.budgets)),
            stream_idle: config.stream_idle_timeout,
            sweeper: Arc::new(std::sync::Once::new()),
            tls,
            change_operators: config.record.as_ref().map(|r| r.operators.clone()).unwrap_or_default(),
        }
    }

    /// The per-identity budgets, for callers that hold one (a pending escalation request).
    pub fn budgets(&self) -> &Arc<Budgets> {
        &self.budgets
    }

    /// One backend operation the service makes for itself (checks before a grant), queued as
    /// the daemon's own identity.
    async fn dispatch(&self, mode: Mode, request: op::Request) -> Result<Outcome, WireError> {
        self.dispatcher.call(mode, "daemon", request).await
    }

    /// Runs one operation in a worker of the granted mode (after redeeming its ticket), logs
    /// and audits it.
    async fn run(&self, caller: &Caller, grant: Grant, mut request: op::Request) -> Result<Outcome, Status> {
        let read = self.redeem(caller, &grant, &mut request).await?;
        let mode = grant.mode;
        let op = request.op();
        let path = request.path().to_owned();
        let started = std::time::Instant::now();
        self.may_create(caller, mode, &request).await.map_err(WireError::into_status)?;
        let written = match &request {
            op::Request::WriteText { content, .. } => content.len() as u64,
            _ => 0,
        };
        // A call at the caller's own mode, unescalated, may be a direct read; an escalated one
        // (a ticket, or a mode above the caller's default) always takes the worker hop.
        let escalated = grant.ticket.is_some() || self.escalated(caller, mode);
        let request = request.recorded(caller.author(escalated));
        let result = if !escalated {
            self.dispatcher.read(mode, &caller.client(), request).await
        } else {
            self.dispatcher.call(mode, &caller.client(), request).await
        };
        let result = result.map(|outcome| self.vouched(&grant, outcome));
        measure(caller, op, mode, &result, written, started);
        if let (Some(key), Err(w)) = (&read, &result)
            && w.code == ErrorCode::TooLarge
        {
            self.give_back_read(caller, &grant, key);
        }
        let created = |o: &Outcome| matches!(o, Outcome::WriteText { operation: WriteOperation::Create, .. });
        let files = match &result {
            Ok(Outcome::Transact { outcomes }) => outcomes.iter().filter(|o| created(o)).count(),
            Ok(outcome) => usize::from(created(outcome)),
            Err(_) => 0,
        };
        if files > 0 {
            self.budgets.created(&caller.identity, files);
        }
        match &result {
            Ok(_) => {
                tracing::debug!(
                    op = op.name(),
                    mode = mode.as_str(),
                    micros = started.elapsed().as_micros() as u64,
                    "ok"
                )
            }
            Err(w) => {
                tracing::info!(op = op.name(), mode = mode.as_str(), path = %w.path, code = %w.code, error = %w.message, "refused")
            }
        }
        if op.is_mutation() {
            let code = result.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
            let decision = Decision::of_call(result.as_ref().err().map(|w| w.code));
            self.audit(caller, Step::Call(op), &path, mode, decision, code);
        }
        result.map_err(|w| w.with("mode", mode.as_str()).into_status())
    }

    /// Whether `mode` is wider than the caller runs at without asking.
    fn escalated(&self, caller: &Caller, mode: Mode) -> bool {
        mode > self.default_mode.min(self.max_for(caller))
    }

    /// The new-file budget, for a call that would create a file: while it is spent, a write
    /// that can only replace (guarded by a version) or whose target exists goes ahead, and only
    /// one that creates is refused. The stat is made only then, so a call within the budget
    /// pays nothing. (A file created between that stat and the write is replaced, not created.)
    async fn may_create(&self, caller: &Caller, mode: Mode, request: &op::Request) -> Result<(), WireError> {
        use op::{Request as R, WriteGuard};
        let target = match request.plain() {
            R::WriteText { path, guard, .. } | R::WriteBytes { path, guard, .. } => match guard {
                Some(WriteGuard::ReplaceIfVersion { .. }) => return Ok(()),
                Some(WriteGuard::CreateIfAbsent) | None => path,
            },
            R::Transact { ops } => return self.may_create_files(caller, mode, ops).await,
            // A move renames: the destination's name is new, the file count is not.
            _ => return Ok(()),
        };
        let Err(refusal) = self.budgets.may_create(&caller.identity) else { return Ok(()) };
        if matches!(request.plain(), R::WriteText { guard: Some(WriteGuard::CreateIfAbsent), .. }) {
            return Err(refusal.into_wire(target));
        }
        let probe = R::Stat { path: target.clone(), no_follow: false };
        match self.dispatcher.call(mode, &caller.client(), probe).await {
            Ok(Outcome::Stat { info: Some(_), .. }) => Ok(()),
            _ => Err(refusal.into_wire(target)),
        }
    }

    /// The new-file budget for a transaction: a token for each of its writes that would create a
    /// file, as [`Service::may_create`] judges a single write (a write guarded by a version only
    /// replaces; while the budget holds fewer tokens than the writes that may create, an
    /// unguarded write over a file that exists is not counted, a stat each, made only then).
    /// A refusal comes before the transaction is planned: nothing is changed.
    async fn may_create_files(
        &self,
        caller: &Caller,
        mode: Mode,
        ops: &[op::TxnOp],
    ) -> Result<(), WireError> {
        use op::{TxnOp, WriteGuard};
        // Each write that may create, and whether it surely does (createIfAbsent).
        let writes: Vec<(&String, bool)> = ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::Write { path, guard: None, .. } => Some((path, false)),
                TxnOp::Write { path, guard: Some(WriteGuard::CreateIfAbsent), .. } => Some((path, true)),
                // A move renames: the destination's name is new, the file count is not.
                _ => None,
            })
            .collect();
        if writes.is_empty() || self.budgets.may_create_files(&caller.identity, writes.len()).is_ok() {
            return Ok(());
        }
        let mut creating: Vec<&String> = Vec::new();
        for (path, surely) in writes {
            let exists = !surely && {
                let probe = op::Request::Stat { path: path.clone(), no_follow: false };
                let found = self.dispatcher.call(mode, &caller.client(), probe).await;
                matches!(found, Ok(Outcome::Stat { info: Some(_), .. }))
            };
            if !exists {
                creating.push(path);
            }
        }
        let Some(first) = creating.first() else { return Ok(()) };
        self.budgets.may_create_files(&caller.identity, creating.len()).map_err(|r| r.into_wire(first))
    }

    /// Every unary operation: grant, run, convert.
    async fn unary<T: Called, R>(
        &self,
        request: Request<T>,
        into: impl FnOnce(T) -> op::Request,
        reply: impl FnOnce(Outcome) -> Option<R>,
    ) -> Result<Response<R>, Status> {
        let caller = Caller::of(&request, request.get_ref().context());
        let message = request.into_inner();
        let context = message.context().cloned();
        let outcome = self.called(&caller, context.as_ref(), into(message)).await?;
        reply(outcome).map(Response::new).ok_or_else(unexpected)
    }

    /// One call of `caller`: its budget, its grant, its run.
    async fn called(
        &self,
        caller: &Caller,
        context: Option<&v1::CallContext>,
        call: op::Request,
    ) -> Result<Outcome, Status> {
        // Over budget: refused before anything else happens, so nothing is touched.
        let _in_flight =
            self.budgets.call(&caller.identity).map_err(|r| r.into_wire(call.path()).into_status())?;
        let grant = self.mode(caller, context, call.path(), call.op())?;
        self.run(caller, grant, call).await
    }
}

/// Counts one finished call in the metrics: its operation, mode, face and code, its time since
/// `started`, and the file bytes it moved (`written`: what the request carried).
fn measure(
    caller: &Caller,
    op: Op,
    mode: Mode,
    result: &Result<Outcome, WireError>,
    written: u64,
    started: std::time::Instant,
) {
    use crate::metrics::{self, Direction};
    let code = result.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
    metrics::call(op.name(), mode, caller.face, code, started);
    crate::traces::outcome(op.name(), mode, code, &caller.session, &caller.call);
    let (direction, bytes) = match result {
        Ok(Outcome::ReadText { text, .. }) => (Direction::Read, text.len() as u64),
        Ok(Outcome::ReadBytes { data, .. }) => (Direction::Read, data.len() as u64),
        Ok(Outcome::WriteBytes { size, .. }) => (Direction::Written, *size),
        Ok(Outcome::WriteText { .. }) => (Direction::Written, written),
        _ => return,
    };
    metrics::file_bytes(direction, caller.face, bytes);
}

/// Counts the opening of a streamed read (its bytes are counted when it reaches the end).
fn measure_open<T>(caller: &Caller, mode: Mode, opened: &Result<T, WireError>, started: std::time::Instant) {
    let code = opened.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
    crate::metrics::call(Op::StreamText.name(), mode, caller.face, code, started);
    crate::traces::outcome(Op::StreamText.name(), mode, code, &caller.session, &caller.call);
}

fn unexpected() -> Status {
    Status::internal("backend returned an outcome of another operation")
}

type StreamReply = stream::Replies<Result<v1::StreamTextReply, Status>>;

#[tonic::async_trait]
impl Fsd for FsdService {
    async fn hello(&self, request: Request<v1::HelloRequest>) -> Result<Response<v1::HelloReply>, Status> {
        Ok(self.hello_reply(&request))
    }

    async fn stat(&self, request: Request<v1::StatRequest>) -> Result<Response<v1::StatReply>, Status> {
        #[cfg(feature = "fault-injection")]
        if let Some(dir) = request.get_ref().path.strip_suffix("/fsd-fault-network-exec") {
            // Test hook: the network process itself stats a root (which Landlock does not
            // cover) and runs a program; its seccomp allowlist must refuse the program, and the
            // stat unless its runtime threads read (`dispatch::inline`).
            let said = |r: std::io::Result<()>| r.map_or_else(|e| e.to_string(), |()| "done".to_owned());
            let stat = said(std::fs::metadata(dir).map(drop));
            let exec = std::process::Command::new("/bin/true").status().map(drop);
            let ran = exec.is_ok();
            let message = format!("network process: stat: {stat}; exec: {}", said(exec));
            return Err(if ran { Status::internal(message) } else { Status::permission_denied(message) });
        }
        #[cfg(feature = "fault-injection")]
        if let Some(dir) = request.get_ref().path.strip_suffix("/fsd-fault-network-open") {
            // Test hook: the network process itself tries to list a directory (a root, or one
            // outside the roots); its fence must refuse, unless its runtime threads read
            // (`dispatch::inline`) and the directory is a root.
            return match std::fs::read_dir(dir) {
                Ok(_) => Err(Status::internal("the network process could list it")),
                Err(e) => Err(Status::permission_denied(format!("network process: {e}"))),
            };
        }
        #[cfg(feature = "fault-injection")]
        if let Some(dir) = request.get_ref().path.strip_suffix("/fsd-fault-direct-write") {
            // Test hook: a direct read thread of the network process tries to create a file in
            // a root; its Landlock domain must refuse (it grants reading only).
            let target = std::path::Path::new(dir).join("fsd-direct-wrote");
            return match self.dispatcher.direct().try_write(target).await {
                Ok(()) => Err(Status::internal("a direct read thread could create a file")),
                Err(e) => Err(Status::permission_denied(format!("direct read thread: {e}"))),
            };
        }
        #[cfg(feature = "fault-injection")]
        {
            // Test hooks of `dispatch::cpu::hold`: release a held patch check, or say whether
            // one is held now (a stat answered at all while one is, is the point).
            use crate::dispatch::cpu::hold;
            let path = &request.get_ref().path;
            if path.ends_with("/fsd-fault-release-check") {
                hold::release();
            }
            if path.ends_with("/fsd-fault-check-held") {
                return Err(Status::failed_precondition(if hold::held() { "held" } else { "not held" }));
            }
        }
        self.unary(request, wire::stat, wire::stat_reply).await
    }

    async fn read_text(
        &self,
        request: Request<v1::ReadTextRequest>,
    ) -> Result<Response<v1::ReadTextReply>, Status> {
        self.unary(request, wire::read_text, wire::read_text_reply).await
    }

    type StreamTextStream = StreamReply;

    async fn stream_text(
        &self,
        request: Request<v1::StreamTextRequest>,
    ) -> Result<Response<StreamReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context());
        let r = request.into_inner();
        let refused = |r: crate::budget::Refusal, path: &str| r.into_wire(path).into_status();
        let call_permit = self.budgets.call(&caller.identity).map_err(|e| refused(e, &r.path))?;
        let stream_permit = self.budgets.stream(&caller.identity).map_err(|e| refused(e, &r.path))?;
        let grant = self.mode(&caller, r.context.as_ref(), &r.path, Op::StreamText)?;
        let mut probe = op::Request::ReadText { path: r.path.clone(), max_bytes: 0 };
        self.redeem(&caller, &grant, &mut probe).await?;
        // An approved read's stream is opened on the object the approval binds.
        let approved = probe.unbind();
        let mode = grant.mode;
        let started = std::time::Instant::now();
        let opened = if grant.ticket.is_none() && !self.escalated(&caller, mode) {
            self.dispatcher.open_read_stream(mode, &caller.client(), &r.path).await
        } else {
            self.dispatcher.open_stream(mode, &caller.client(), &r.path, approved).await
        };
        measure_open(&caller, mode, &opened, started);
        let (header, file) = opened.map_err(|w| w.with("mode", mode.as_str()).into_status())?;
        drop(call_permit);
        let chunk = match r.chunk_bytes as usize {
            0 => self.limits.default_chunk_bytes,
            n => n.clamp(4096, self.limits.max_chunk_bytes),
        };
        let shape = streamed::Shape {
            header: Some(Ok(wire::stream_header(header.clone()))),
            chunk: |bytes| Ok(wire::stream_chunk(bytes)),
            trailer: |version| Some(Ok(wire::stream_trailer(version))),
            failed: |error| Err(error.into_status()),
        };
        Ok(Response::new(self.spawn_stream(
            (header, file),
            r.path,
            chunk,
            (mode, caller.face),
            stream_permit,
            shape,
        )))
    }

    async fn read_bytes(
        &self,
        request: Request<v1::ReadBytesRequest>,
    ) -> Result<Response<v1::ReadBytesReply>, Status> {
        self.unary(request, wire::read_bytes, wire::read_bytes_reply).await
    }

    async fn list_dir(
        &self,
        request: Request<v1::ListDirRequest>,
    ) -> Result<Response<v1::ListDirReply>, Status> {
        self.unary(request, wire::list_dir, wire::list_dir_reply).await
    }

    async fn write_text(
        &self,
        request: Request<v1::WriteTextRequest>,
    ) -> Result<Response<v1::WriteTextReply>, Status> {
        self.unary(request, wire::write_text, wire::write_text_reply).await
    }

    async fn edit_text(
        &self,
        request: Request<v1::EditTextRequest>,
    ) -> Result<Response<v1::EditTextReply>, Status> {
        self.unary(request, wire::edit_text, wire::edit_text_reply).await
    }

    async fn move_file(
        &self,
        request: Request<v1::MoveFileRequest>,
    ) -> Result<Response<v1::MoveFileReply>, Status> {
        self.unary(request, wire::move_file, wire::move_file_reply).await
    }

    async fn delete_file(
        &self,
        request: Request<v1::DeleteFileRequest>,
    ) -> Result<Response<v1::DeleteFileReply>, Status> {
        self.unary(request, wire::delete_file, wire::delete_file_reply).await
    }

    type InspectStream = inspect::Answers;

    async fn inspect(
        &self,
        request: Request<v1::InspectRequest>,
    ) -> Result<Response<inspect::Answers>, Status> {
        if old_daemon_hook() {
            return Err(Status::unimplemented(""));
        }
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        self.inspect_targets(caller, request.into_inner()).map(Response::new)
    }

    async fn write_bytes(
        &self,
        request: Request<tonic::Streaming<v1::WriteBytesRequest>>,
    ) -> Result<Response<v1::WriteBytesReply>, Status> {
        self.write_bytes_call(request).await
    }

    async fn remove(&self, request: Request<v1::RemoveRequest>) -> Result<Response<v1::RemoveReply>, Status> {
        self.unary(request, wire::remove, wire::remove_reply).await
    }

    async fn transact(
        &self,
        request: Request<v1::TransactRequest>,
    ) -> Result<Response<v1::TransactReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context());
        let message = request.into_inner();
        let context = message.context.clone();
        let count = message.operations.len();
        let call = wire::transact(message).ok_or_else(|| {
            WireError::new(ErrorCode::InvalidPath, "", "a transaction's operation names no kind")
                .with_reason(fsd_proto::Reason::Malformed)
                .with("field", "operations.kind")
                .into_status()
        })?;
        // Too many operations is refused before any budget is drawn (the worker checks again):
        // `FS_TOO_LARGE` with the limit, not a rate limit the caller could wait out.
        let limit = self.limits.max_transaction_operations;
        if count > limit {
            let error = crate::error::FsError::TooLarge { size: count as u64, limit: limit as u64 };
            return Err(crate::error::Failure::new(error, call.path()).into_wire().into_status());
        }
        // One call in flight, and one token of the call budget per operation.
        let refused = |r: crate::budget::Refusal| r.into_wire(call.path()).into_status();
        let _in_flight = self.budgets.call(&caller.identity).map_err(refused)?;
        for _ in 1..count {
            drop(self.budgets.call(&caller.identity).map_err(refused)?);
        }
        let grant = self.mode(&caller, context.as_ref(), call.path(), Op::Transact)?;
        let patches = wire::patches(&call);
        let outcome = self.run(&caller, grant, call).await?;
        wire::transact_reply(outcome, &patches).map(Response::new).ok_or_else(unexpected)
    }

    async fn checkpoint(
        &self,
        request: Request<v1::CheckpointRequest>,
    ) -> Result<Response<v1::CheckpointReply>, Status> {
        self.checkpoint_call(request).await
    }

    async fn list_changes(
        &self,
        request: Request<v1::ListChangesRequest>,
    ) -> Result<Response<v1::ListChangesReply>, Status> {
        self.list_changes_call(request).await
    }

    async fn rewind(&self, request: Request<v1::RewindRequest>) -> Result<Response<v1::RewindReply>, Status> {
        self.rewind_call(request).await
    }

    async fn request_escalation(
        &self,
        request: Request<v1::EscalationRequest>,
    ) -> Result<Response<v1::EscalationDescription>, Status> {
        self.describe(request).await
    }

    async fn release_escalation(
        &self,
        request: Request<v1::ReleaseEscalationRequest>,
    ) -> Result<Response<v1::ReleaseEscalationReply>, Status> {
        self.release(request);
        Ok(Response::new(v1::ReleaseEscalationReply {}))
    }
}

/// Test hook (cargo feature `fault-injection`, `FSD_FAULT_NO_INSPECT=1`): Inspect is answered as
/// a daemon that predates it answers (`UNIMPLEMENTED`), so a test can drive the tools' fallback
/// to the single calls.
fn old_daemon_hook() -> bool {
    cfg!(feature = "fault-injection") && std::env::var_os("FSD_FAULT_NO_INSPECT").is_some_and(|v| v == "1")
}
