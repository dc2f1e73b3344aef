//! The tools' one client of the daemon: every operation a tool needs (stat, the write check, reads
//! whole, windowed over a stream or as bytes, listings, guarded writes, edits, moves, deletes,
//! escalation), spoken in domain types (`Target`, `Version`, guards, `Mode`) with one decoded
//! error type, `DaemonError`. With `connect` (the channel) this is the only module of the tools
//! that names generated `fsd.v1` types or a tonic status; the tidy test holds it to that.
//!
//! A `Daemon` also carries the call context: the session id, the call counter, and the mode and
//! escalation ticket of the call in progress, so a tool never builds one.

mod change_record;
mod types;

pub use fsd_policy::{TargetKey, Version};
use fsd_proto::v1::{self, stream_text_reply::Item};

use crate::connect::SessionClient;
use crate::window::{Window, WindowBuilder, WindowSpec};

pub use change_record::{ChangeListing, ChangedFile, ChangesQuery, RecordedChange, Rewound, Visibility};
pub use types::{
    BytesRead, Change, DaemonError, Decider, Decision, Edited, Entry, FileKind, Hello, Info, InspectTarget,
    Inspected, Mode, Moved, Operation, PlannedCall, Rejection, Report, Stat, Target, TextChange, TextRead,
    Ticket, TxnChange, TxnResult, VersionGuard, WriteGuard, Written,
};

/// Why a windowed read over a stream failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    Daemon(DaemonError),
    /// The bytes are not UTF-8 text (or hold a NUL).
    NotText,
    /// The stream ended before it named its target and version.
    NoHeader,
}

/// A window read over a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    pub target: Target,
    /// The header's version, or the trailer's (with the digest) when the stream reached the end.
    pub version: Version,
    pub window: Window,
}

/// One session's connection to its daemon, with the context of the call in progress.
#[derive(Debug)]
pub struct Daemon {
    client: SessionClient,
    session_id: String,
    calls: u64,
    /// The mode and ticket of the call in progress, when it asked for another mode.
    call_mode: Option<(Mode, Option<Ticket>)>,
}

type Reply<T> = Result<T, DaemonError>;

impl Daemon {
    pub fn new(client: SessionClient, session_id: String) -> Daemon {
        Daemon { client, session_id, calls: 0, call_mode: None }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The id the daemon is told for this tool call (`CallContext.call_id`): an approver's page
    /// names the call's escalation by it.
    pub fn call_id(&self) -> String {
        format!("{}-{}", self.session_id, self.calls)
    }

    /// Starts a tool call: a new call id, the session's own mode.
    pub fn begin_call(&mut self) {
        self.calls += 1;
        self.call_mode = None;
    }

    /// Runs the rest of this call at `mode`, with `ticket` when an approver granted it.
    pub fn set_call_mode(&mut self, mode: Option<(Mode, Option<Ticket>)>) {
        self.call_mode = mode;
    }

    /// Whether this call runs on a signed approval, whose ticket bounds what it may read.
    pub fn signed_call(&self) -> bool {
        matches!(&self.call_mode, Some((_, Some(ticket))) if !ticket.escalation_id.is_empty())
    }

    /// Ends the call's wider mode; a signed approval is handed back to the daemon, spent.
    pub async fn end_call(&mut self) {
        let Some((_, Some(ticket))) = self.call_mode.take() else { return };
        if ticket.escalation_id.is_empty() {
            return;
        }
        let request = v1::ReleaseEscalationRequest {
            context: self.context(),
            escalation_id: ticket.escalation_id,
            client_decision: None,
        };
        let _ = self.client.release_escalation(request).await;
    }

    /// Whether a reply came from another daemon instance than the session's (the link is
    /// re-pinned: the caller must drop what the session knew).
    pub fn take_restart(&self) -> bool {
        self.client.take_restart()
    }

    fn context(&self) -> Option<v1::CallContext> {
        let (mode, ticket) = match &self.call_mode {
            Some((mode, ticket)) => (Mode::wire(Some(*mode)), ticket.as_ref().map(Ticket::wire)),
            None => (Mode::wire(None), None),
        };
        Some(v1::CallContext {
            session_id: self.session_id.clone(),
            call_id: self.call_id(),
            mode,
            escalation: ticket,
        })
    }

    pub async fn hello(&mut self) -> Reply<Hello> {
        let reply = self.client.hello(v1::HelloRequest { context: None }).await;
        Ok(reply.map_err(DaemonError::from_status)?.into_inner().into())
    }

    /// What is at `path` (through a final link unless `no_follow`).
    pub async fn stat(&mut self, path: &str, no_follow: bool) -> Reply<Stat> {
        let request =
            v1::StatRequest { context: self.context(), path: path.to_owned(), no_follow, check_write: false };
        Ok(self.client.stat(request).await.map_err(DaemonError::from_status)?.into_inner().into())
    }

    /// Whether the call's mode may write `path` (roots, mode, protected names, git directories,
    /// mounts), resolving without creating and writing nothing.
    pub async fn check_write(&mut self, path: &str, no_follow: bool) -> Reply<()> {
        let request =
            v1::StatRequest { context: self.context(), path: path.to_owned(), no_follow, check_write: true };
        self.client.stat(request).await.map_err(DaemonError::from_status)?;
        Ok(())
    }

    /// Asks, for each target, what `check_write`, `stat` (no_follow) and, when `read`,
    /// `read_text` (the daemon's limit) would answer, in one call (`fsd.v1` Inspect), each
    /// answer as the single call's. `None`: the daemon predates Inspect (ask the single calls).
    pub async fn inspect(&mut self, targets: &[InspectTarget]) -> Reply<Option<Vec<Inspected>>> {
        let request = v1::InspectRequest {
            context: self.context(),
            targets: targets
                .iter()
                .map(|t| v1::InspectTarget { path: t.path.clone(), no_follow: t.no_follow, read: t.read })
                .collect(),
        };
        let mut stream = match self.client.inspect(request).await {
            Ok(reply) => reply.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => return Ok(None),
            Err(status) => return Err(DaemonError::from_status(status)),
        };
        let mut answers = Vec::with_capacity(targets.len());
        while let Some(reply) = stream.message().await.map_err(DaemonError::from_status)? {
            answers.push(Inspected::from_wire(reply).ok_or(DaemonError::Rejected(Rejection::Internal))?);
        }
        if answers.len() != targets.len() {
            // Fewer answers than targets: the daemon stopped answering (it is going away).
            return Err(DaemonError::Unavailable("the daemon's answers ended early".to_owned()));
        }
        Ok(Some(answers))
    }

    /// The whole text of a file of at most `max_bytes` (0: the daemon's limit), else
    /// `FS_TOO_LARGE`.
    pub async fn read_text(&mut self, path: &str, max_bytes: u64) -> Reply<TextRead> {
        let request = v1::ReadTextRequest { context: self.context(), path: path.to_owned(), max_bytes };
        let reply = self.client.read_text(request).await.map_err(DaemonError::from_status)?.into_inner();
        Ok(TextRead { target: reply.target.into(), version: Version(reply.version), text: reply.text })
    }

    /// The bytes of a file of at most `max_bytes`.
    pub async fn read_bytes(&mut self, path: &str, max_bytes: u64) -> Reply<BytesRead> {
        let request = v1::ReadBytesRequest { context: self.context(), path: path.to_owned(), max_bytes };
        let reply = self.client.read_bytes(request).await.map_err(DaemonError::from_status)?.into_inner();
        Ok(BytesRead { target: reply.target.into(), version: Version(reply.version), data: reply.data })
    }

    /// Streams a file through a window builder with bounded memory, stopping (and so cancelling
    /// the stream) as soon as the window is complete.
    pub async fn read_window(&mut self, path: &str, spec: WindowSpec) -> Result<Streamed, StreamError> {
        let request =
            v1::StreamTextRequest { context: self.context(), path: path.to_owned(), chunk_bytes: 0 };
        let daemon = |status| StreamError::Daemon(DaemonError::from_status(status));
        let mut stream = self.client.stream_text(request).await.map_err(daemon)?.into_inner();
        let mut header = None;
        let mut builder = WindowBuilder::new(spec);
        while let Some(message) = stream.message().await.map_err(daemon)? {
            match message.item {
                Some(Item::Header(h)) => header = Some((Target::from(h.target), Version(h.version))),
                // Sent only after the last chunk: the version with the digest of everything read.
                Some(Item::Trailer(t)) => {
                    if let Some((_, version)) = header.as_mut() {
                        *version = Version(t.version);
                    }
                }
                Some(Item::Chunk(bytes)) => {
                    builder.feed(&bytes).map_err(|_| StreamError::NotText)?;
                    if builder.done_early() {
                        break;
                    }
                }
                None => {}
            }
        }
        // Dropping the stream cancels it; the daemon stops reading.
        drop(stream);
        let (target, version) = header.ok_or(StreamError::NoHeader)?;
        let window = builder.finish().map_err(|_| StreamError::NotText)?;
        Ok(Streamed { target, version, window })
    }

    /// A directory's children, in the daemon's (name) order.
    pub async fn list_dir(&mut self, path: &str) -> Reply<Vec<Entry>> {
        let request = v1::ListDirRequest { context: self.context(), path: path.to_owned() };
        let reply = self.client.list_dir(request).await.map_err(DaemonError::from_status)?.into_inner();
        Ok(reply
            .entries
            .into_iter()
            .map(|e| Entry {
                kind: FileKind::from_wire(e.r#type),
                target: e.target.map(|t| Target::from(Some(t))),
                name: e.name,
            })
            .collect())
    }

    /// Replaces or creates a whole file atomically. `match_style`: keep an existing file's BOM
    /// and line endings.
    pub async fn write_text(
        &mut self,
        path: &str,
        content: String,
        guard: Option<&WriteGuard>,
        match_style: bool,
    ) -> Reply<Written> {
        let request = v1::WriteTextRequest {
            context: self.context(),
            path: path.to_owned(),
            content,
            guard: types::write_guard(guard),
            match_existing_style: match_style,
        };
        Ok(self.client.write_text(request).await.map_err(DaemonError::from_status)?.into_inner().into())
    }

    /// Replaces `old` by `new` (every match with `replace_all`) under the target lock, after the
    /// guard's check.
    pub async fn edit_text(
        &mut self,
        path: &str,
        old: &str,
        new: &str,
        replace_all: bool,
        guard: Option<&VersionGuard>,
    ) -> Reply<Edited> {
        let request = v1::EditTextRequest {
            context: self.context(),
            path: path.to_owned(),
            old_string: old.to_owned(),
            new_string: new.to_owned(),
            replace_all,
            guard: types::edit_guard(guard),
        };
        Ok(self.client.edit_text(request).await.map_err(DaemonError::from_status)?.into_inner().into())
    }

    /// Moves a file, optionally writing `content` at the destination instead of the source's.
    pub async fn move_file(
        &mut self,
        source: &str,
        destination: &str,
        source_guard: Option<&VersionGuard>,
        destination_guard: Option<&WriteGuard>,
        content: Option<String>,
    ) -> Reply<Moved> {
        let request = v1::MoveFileRequest {
            context: self.context(),
            source: source.to_owned(),
            destination: destination.to_owned(),
            source_guard: types::edit_guard(source_guard),
            destination_guard: types::write_guard(destination_guard),
            content,
        };
        Ok(self.client.move_file(request).await.map_err(DaemonError::from_status)?.into_inner().into())
    }

    /// Deletes a file; the reply names what was deleted.
    pub async fn delete_file(&mut self, path: &str, guard: Option<&VersionGuard>) -> Reply<Target> {
        let request = v1::DeleteFileRequest {
            context: self.context(),
            path: path.to_owned(),
            guard: types::edit_guard(guard),
        };
        Ok(self
            .client
            .delete_file(request)
            .await
            .map_err(DaemonError::from_status)?
            .into_inner()
            .target
            .into())
    }

    /// Commits `changes` all-or-nothing (`fsd.v1` Transact): each one's reply, in order, or the
    /// failure of the one that failed (metadata `operation`, `undone`), nothing changed.
    pub async fn transact(&mut self, changes: Vec<TxnChange>) -> Reply<Vec<TxnResult>> {
        let request = v1::TransactRequest {
            context: self.context(),
            operations: changes.into_iter().map(TxnChange::wire).collect(),
        };
        let reply = self.client.transact(request).await.map_err(DaemonError::from_status)?.into_inner();
        let results = reply.results.into_iter().map(TxnResult::from_wire).collect::<Option<Vec<_>>>();
        // A reply without a result's kind: the daemon answered something this client cannot read.
        results.ok_or(DaemonError::Rejected(Rejection::Internal))
    }

    /// Has the daemon check `calls` at `mode` and, under `signed` trust, ask its approver.
    pub async fn request_escalation(
        &mut self,
        mode: Mode,
        justification: &str,
        calls: &[PlannedCall],
        patch: Option<&str>,
    ) -> Reply<Decision> {
        let request = v1::EscalationRequest {
            context: self.context(),
            requested_mode: Mode::wire(Some(mode)),
            justification: justification.to_owned(),
            ops: calls.iter().map(PlannedCall::wire).collect(),
            patch: patch.map(str::to_owned),
        };
        Ok(self
            .client
            .request_escalation(request)
            .await
            .map_err(DaemonError::from_status)?
            .into_inner()
            .into())
    }

    /// Tells the daemon what this client's approver decided on the request RequestEscalation
    /// answered with `digest` (for its audit log: every decision is one record).
    pub async fn report_decision(&mut self, report: Report<'_>, digest: &str) {
        let request = v1::ReleaseEscalationRequest {
            context: self.context(),
            escalation_id: String::new(),
            client_decision: Some(v1::ClientDecision {
                decided_by: report.by.wire(),
                requested_mode: Mode::wire(Some(report.mode)),
                path: report.path.to_owned(),
                reason: report.reason.to_owned(),
                approved: report.approved,
                digest: digest.to_owned(),
            }),
        };
        let _ = self.client.release_escalation(request).await;
    }
}
