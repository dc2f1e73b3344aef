//! The domain types the tools speak to the daemon in, and their one translation to and from the
//! generated `fsd.v1` messages. Nothing outside `daemon` sees the generated side.

use fsd_policy::{TargetKey, Version};
use fsd_proto::{WireError, v1};
use prost::bytes::Bytes;

/// What a path resolved to: its stable key and its display form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub key: TargetKey,
    /// The resolved path, escaped for display.
    pub display: String,
}

impl From<Option<v1::Target>> for Target {
    fn from(target: Option<v1::Target>) -> Target {
        let target = target.unwrap_or_default();
        Target { key: TargetKey(target.target_key), display: target.display_path }
    }
}

/// The kind of file a stat or a listing found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    /// Anything else (a device, a socket, a mount point without a version).
    Other,
}

impl FileKind {
    pub(super) fn from_wire(kind: i32) -> FileKind {
        match v1::FileType::try_from(kind) {
            Ok(v1::FileType::File) => FileKind::File,
            Ok(v1::FileType::Directory) => FileKind::Directory,
            Ok(v1::FileType::Symlink) => FileKind::Symlink,
            _ => FileKind::Other,
        }
    }
}

/// What a stat found at an existing path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub version: Version,
    pub kind: FileKind,
    pub size: Option<u64>,
}

/// A stat: the target, and what is there (`None`: nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub target: Target,
    pub info: Option<Info>,
}

/// One target of an `inspect`: its path, whether its write check acts on a final link itself,
/// and whether to read its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectTarget {
    pub path: String,
    pub no_follow: bool,
    pub read: bool,
}

/// The answers for one target of an `inspect`, each the single call's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// `check_write` (with the target's `no_follow`).
    pub write_check: Result<(), DaemonError>,
    /// `stat` with no_follow; `None` when the write check failed.
    pub stat: Option<Result<Stat, DaemonError>>,
    /// `read_text`; `None` when not asked, absent, or neither a file nor a link.
    pub text: Option<Result<TextRead, DaemonError>>,
}

impl Inspected {
    /// `None`: an answer without its content (a daemon this client cannot read).
    pub(super) fn from_wire(reply: v1::InspectReply) -> Option<Inspected> {
        use v1::{inspect_read, inspect_stat};
        let stat = |answer: v1::InspectStat| match answer.answer? {
            inspect_stat::Answer::Reply(reply) => Some(Ok(Stat::from(reply))),
            inspect_stat::Answer::Error(error) => Some(Err(DaemonError::from_call_error(error))),
        };
        let write_check = stat(reply.write_check?)?.map(drop);
        let read = |answer: v1::InspectRead| match answer.answer? {
            inspect_read::Answer::Reply(r) => {
                Some(Ok(TextRead { target: r.target.into(), version: Version(r.version), text: r.text }))
            }
            inspect_read::Answer::Error(error) => Some(Err(DaemonError::from_call_error(error))),
        };
        let stat = match reply.stat {
            Some(answer) => Some(stat(answer)?),
            None => None,
        };
        let text = match reply.text {
            Some(answer) => Some(read(answer)?),
            None => None,
        };
        Some(Inspected { write_check, stat, text })
    }
}

impl From<v1::StatReply> for Stat {
    fn from(reply: v1::StatReply) -> Stat {
        Stat {
            target: reply.target.into(),
            info: reply.info.map(|i| Info {
                version: Version(i.version),
                kind: FileKind::from_wire(i.r#type),
                size: i.size,
            }),
        }
    }
}

/// One child of a listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: FileKind,
    pub target: Option<Target>,
}

/// A whole text file, as one read returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRead {
    pub target: Target,
    pub version: Version,
    pub text: String,
}

/// A file's bytes, as one read returned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesRead {
    pub target: Target,
    pub version: Version,
    pub data: Bytes,
}

/// The text before and after a change, when the daemon kept both within its diff cap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextChange {
    pub before: Option<String>,
    pub after: Option<String>,
    /// Too large to carry: the diff card says so.
    pub omitted: bool,
}

fn change(c: Option<v1::TextChange>) -> Option<TextChange> {
    c.map(|c| TextChange { before: c.before, after: c.after, omitted: c.omitted })
}

/// A finished write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub target: Target,
    pub version: Version,
    /// The file did not exist before.
    pub created: bool,
    pub change: Option<TextChange>,
}

impl From<v1::WriteTextReply> for Written {
    fn from(reply: v1::WriteTextReply) -> Written {
        Written {
            created: reply.operation == v1::WriteOperation::Create as i32,
            target: reply.target.into(),
            version: Version(reply.version),
            change: change(reply.change),
        }
    }
}

/// A finished edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub target: Target,
    pub version: Version,
    pub replacements: u32,
    pub change: Option<TextChange>,
}

impl From<v1::EditTextReply> for Edited {
    fn from(reply: v1::EditTextReply) -> Edited {
        Edited {
            target: reply.target.into(),
            version: Version(reply.version),
            replacements: reply.replacements,
            change: change(reply.change),
        }
    }
}

/// A finished move. `source_remains`: the destination was written but the source could not be
/// removed (`source_removal_errno` says why, when the daemon said).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub source: Target,
    pub destination: Target,
    pub destination_version: Version,
    pub source_remains: bool,
    pub source_removal_errno: Option<i32>,
}

impl From<v1::MoveFileReply> for Moved {
    fn from(reply: v1::MoveFileReply) -> Moved {
        Moved {
            source: reply.source.into(),
            destination: reply.destination.into(),
            destination_version: Version(reply.destination_version),
            source_remains: reply.source_remains,
            source_removal_errno: (reply.source_removal_errno != 0).then_some(reply.source_removal_errno),
        }
    }
}

/// One change of a transaction (`Daemon::transact`), with its guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnChange {
    Write {
        path: String,
        content: String,
        guard: Option<WriteGuard>,
    },
    Delete {
        path: String,
        guard: Option<VersionGuard>,
    },
    /// With `content`, the destination gets it and the source goes.
    Move {
        source: String,
        destination: String,
        source_guard: Option<VersionGuard>,
        destination_guard: Option<WriteGuard>,
        content: Option<String>,
    },
    /// An update of an existing text file by apply_patch hunks, which the daemon applies to
    /// its current text under the transaction's locks (a chunk's `line` is not sent: a hunk
    /// that does not match is named by its index, metadata `hunk_index`).
    Patch {
        path: String,
        chunks: Vec<fsd_patch::Chunk>,
        guard: Option<VersionGuard>,
    },
}

impl TxnChange {
    pub(super) fn wire(self) -> v1::TransactOperation {
        use v1::transact_operation::Kind;
        let kind = match self {
            TxnChange::Write { path, content, guard } => Kind::Write(v1::WriteTextRequest {
                context: None,
                path,
                content,
                guard: write_guard(guard.as_ref()),
                match_existing_style: false,
            }),
            TxnChange::Delete { path, guard } => {
                Kind::Delete(v1::DeleteFileRequest { context: None, path, guard: edit_guard(guard.as_ref()) })
            }
            TxnChange::Patch { path, chunks, guard } => Kind::Patch(v1::PatchTextRequest {
                path,
                hunks: chunks
                    .into_iter()
                    .map(|c| v1::PatchHunk {
                        context: c.context,
                        old_lines: c.old_lines,
                        new_lines: c.new_lines,
                        end_of_file: c.end_of_file,
                    })
                    .collect(),
                guard: edit_guard(guard.as_ref()),
            }),
            TxnChange::Move { source, destination, source_guard, destination_guard, content } => {
                Kind::Move(v1::MoveFileRequest {
                    context: None,
                    source,
                    destination,
                    source_guard: edit_guard(source_guard.as_ref()),
                    destination_guard: write_guard(destination_guard.as_ref()),
                    content,
                })
            }
        };
        v1::TransactOperation { kind: Some(kind) }
    }
}

/// One change's reply in a committed transaction.
#[derive(Debug, Clone)]
pub enum TxnResult {
    Written(Written),
    Edited(Edited),
    Deleted(Target),
    Moved(Moved),
    /// A patch's reply: `replacements` is the number of hunks applied.
    Patched(Edited),
}

impl TxnResult {
    pub(super) fn from_wire(result: v1::TransactResult) -> Option<TxnResult> {
        use v1::transact_result::Kind;
        Some(match result.kind? {
            Kind::Write(w) => TxnResult::Written(w.into()),
            Kind::Edit(e) => TxnResult::Edited(e.into()),
            Kind::Delete(d) => TxnResult::Deleted(d.target.into()),
            Kind::Move(m) => TxnResult::Moved(m.into()),
            Kind::Patch(p) => TxnResult::Patched(Edited {
                target: p.target.into(),
                version: Version(p.version),
                replacements: p.hunks,
                change: change(p.change),
            }),
        })
    }
}

/// What a replace or edit must find: the version the session saw, and the target it saw it on
/// when known (the daemon checks both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionGuard {
    pub version: Version,
    pub key: Option<TargetKey>,
}

impl VersionGuard {
    pub fn new(version: Version, key: Option<TargetKey>) -> VersionGuard {
        VersionGuard { version, key }
    }

    fn wire(&self) -> v1::EditGuard {
        v1::EditGuard {
            version: self.version.0.clone(),
            target_key: self.key.as_ref().map(|k| k.0.clone()).unwrap_or_default(),
        }
    }
}

/// What a whole-file write must find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteGuard {
    /// Nothing at the path.
    CreateIfAbsent,
    /// The file at this version.
    ReplaceIfVersion(VersionGuard),
}

impl WriteGuard {
    /// The policy's decision, with the target key the session learnt for the path.
    pub fn from_policy(guard: fsd_policy::WriteGuard, key: Option<TargetKey>) -> WriteGuard {
        match guard {
            fsd_policy::WriteGuard::CreateIfAbsent => WriteGuard::CreateIfAbsent,
            fsd_policy::WriteGuard::ReplaceIfVersion(version) => {
                WriteGuard::ReplaceIfVersion(VersionGuard::new(version, key))
            }
        }
    }

    fn wire(&self) -> v1::WriteGuard {
        let kind = match self {
            WriteGuard::CreateIfAbsent => v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {}),
            WriteGuard::ReplaceIfVersion(guard) => {
                let v1::EditGuard { version, target_key } = guard.wire();
                v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion { version, target_key })
            }
        };
        v1::WriteGuard { kind: Some(kind) }
    }
}

pub(super) fn write_guard(guard: Option<&WriteGuard>) -> Option<v1::WriteGuard> {
    guard.map(WriteGuard::wire)
}

pub(super) fn edit_guard(guard: Option<&VersionGuard>) -> Option<v1::EditGuard> {
    guard.map(VersionGuard::wire)
}

/// A sandbox mode, narrowest first (so `<` means "narrower").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess];

    /// The mode's name, as models and configs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }

    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    fn from_wire(mode: i32) -> Option<Mode> {
        match v1::Mode::try_from(mode) {
            Ok(v1::Mode::ReadOnly) => Some(Mode::ReadOnly),
            Ok(v1::Mode::WorkspaceWrite) => Some(Mode::WorkspaceWrite),
            Ok(v1::Mode::DangerFullAccess) => Some(Mode::DangerFullAccess),
            _ => None,
        }
    }

    pub(super) fn wire(mode: Option<Mode>) -> i32 {
        let mode = match mode {
            None => v1::Mode::Unspecified,
            Some(Mode::ReadOnly) => v1::Mode::ReadOnly,
            Some(Mode::WorkspaceWrite) => v1::Mode::WorkspaceWrite,
            Some(Mode::DangerFullAccess) => v1::Mode::DangerFullAccess,
        };
        mode as i32
    }
}

/// What hello says, as far as the tools use it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// The mode a call without a mode runs in (the daemon always names one).
    pub default_mode: Option<Mode>,
    /// The widest mode this client may reach.
    pub max_mode: Option<Mode>,
    /// The modes the daemon serves now (its workers are up), whatever this client may reach.
    pub available: Vec<Mode>,
    /// The escalation trust: `deny`, `client` or `signed` (empty from an old daemon).
    pub escalation: String,
    pub readable_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    /// Names read-only under workspace-write.
    pub protected_names: Vec<String>,
    /// The most bytes one read returns (0: not said).
    pub max_read_bytes: u64,
}

impl From<v1::HelloReply> for Hello {
    fn from(hello: v1::HelloReply) -> Hello {
        Hello {
            default_mode: Mode::from_wire(hello.default_mode),
            max_mode: Mode::from_wire(hello.max_mode),
            available: hello
                .modes
                .iter()
                .filter(|m| m.available)
                .filter_map(|m| Mode::from_wire(m.mode))
                .collect(),
            escalation: hello.escalation,
            readable_roots: hello.readable_roots,
            writable_roots: hello.writable_roots,
            protected_names: hello.protected_names,
            max_read_bytes: hello.limits.map_or(0, |l| l.max_read_bytes),
        }
    }
}

/// An operation a call at a wider mode will make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    ReadText,
    WriteText,
    EditText,
    MoveFile,
    DeleteFile,
}

impl Operation {
    /// The name the escalation request carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::ReadText => "readText",
            Operation::WriteText => "writeText",
            Operation::EditText => "editText",
            Operation::MoveFile => "moveFile",
            Operation::DeleteFile => "deleteFile",
        }
    }
}

/// A write's new content or an edit's replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Content(String),
    Replace { old: String, new: String, all: bool },
}

/// One call a tool will make at the wider mode, for the daemon to check and describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCall {
    pub op: Operation,
    pub path: String,
    pub destination: Option<String>,
    /// Empty: the content is not bound (apply_patch, planned before its content is known).
    pub content_sha256: Vec<u8>,
    /// The change itself, sent so the daemon shows the approver its own diff.
    pub change: Option<Change>,
    /// The guards the call will carry, so the daemon refuses what would fail before asking.
    pub write_guard: Option<WriteGuard>,
    pub edit_guard: Option<VersionGuard>,
}

impl PlannedCall {
    pub(super) fn wire(&self) -> v1::EscalatedOp {
        let (content, old_string, new_string, replace_all) = match &self.change {
            Some(Change::Content(content)) => (Some(content.clone()), None, None, false),
            Some(Change::Replace { old, new, all }) => (None, Some(old.clone()), Some(new.clone()), *all),
            None => (None, None, None, false),
        };
        v1::EscalatedOp {
            op: self.op.as_str().to_owned(),
            path: self.path.clone(),
            destination: self.destination.clone().unwrap_or_default(),
            content_sha256: self.content_sha256.clone().into(),
            content,
            old_string,
            new_string,
            replace_all,
            write_guard: write_guard(self.write_guard.as_ref()),
            edit_guard: edit_guard(self.edit_guard.as_ref()),
        }
    }
}

/// Who decided an escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// The daemon's approver, by its rules.
    Rules,
    /// The person at the daemon's approver.
    Person,
    /// Nobody: the approver could not be reached.
    Unreachable,
    /// This client decides (`client` trust).
    Client,
    /// This client's own rules.
    ClientRules,
    /// Not said (an old daemon).
    Unspecified,
}

impl Decider {
    fn from_wire(decider: i32) -> Decider {
        match v1::Decider::try_from(decider) {
            Ok(v1::Decider::Rules) => Decider::Rules,
            Ok(v1::Decider::Person) => Decider::Person,
            Ok(v1::Decider::Unreachable) => Decider::Unreachable,
            Ok(v1::Decider::Client) => Decider::Client,
            Ok(v1::Decider::ClientRules) => Decider::ClientRules,
            _ => Decider::Unspecified,
        }
    }

    pub(super) fn wire(self) -> i32 {
        let decider = match self {
            Decider::Rules => v1::Decider::Rules,
            Decider::Person => v1::Decider::Person,
            Decider::Unreachable => v1::Decider::Unreachable,
            Decider::Client => v1::Decider::Client,
            Decider::ClientRules => v1::Decider::ClientRules,
            Decider::Unspecified => v1::Decider::Unspecified,
        };
        decider as i32
    }
}

/// The daemon's answer to an escalation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub decided_by: Decider,
    pub approved: bool,
    /// Set when the daemon's approver approved (`signed` trust): the ticket's id.
    pub escalation_id: String,
    pub nonce: Bytes,
    /// The approver's reason, when it gave one.
    pub reason: String,
    /// Client trust: the digest the client's report of its decision names.
    pub digest: String,
    /// Client trust: each path (then each destination) as the daemon resolved it (a path that
    /// does not resolve fails the checks instead; an older daemon lists none).
    pub resolved_paths: Vec<String>,
}

/// What this client's own approver decided (client trust), as reported to the daemon.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    pub approved: bool,
    pub by: Decider,
    pub mode: Mode,
    /// The first path of the call, as the approver was shown it.
    pub path: &'a str,
    /// A refusal's reason, when one was given.
    pub reason: &'a str,
}

impl From<v1::EscalationDescription> for Decision {
    fn from(d: v1::EscalationDescription) -> Decision {
        Decision {
            decided_by: Decider::from_wire(d.decided_by),
            approved: d.approved,
            escalation_id: d.escalation_id,
            nonce: d.nonce,
            reason: d.reason,
            digest: d.digest,
            resolved_paths: d.resolved_paths,
        }
    }
}

/// What lets one call run at a wider mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub approved_mode: Mode,
    pub justification: String,
    /// Empty under `client` trust; the daemon's id of a signed approval otherwise.
    pub escalation_id: String,
    pub nonce: Bytes,
}

impl Ticket {
    pub(super) fn wire(&self) -> v1::EscalationTicket {
        v1::EscalationTicket {
            approved_mode: Mode::wire(Some(self.approved_mode)),
            justification: self.justification.clone(),
            escalation_id: self.escalation_id.clone(),
            nonce: self.nonce.clone(),
            signature: Default::default(),
        }
    }
}

/// A failed call, decoded once: the daemon's code and structured reason, or no answer from fsd
/// at all (the connection, the transport, a generic gRPC failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonError {
    Refused(WireError),
    /// No answer from fsd: the transport's (or this client's link's) message.
    Unavailable(String),
    /// The daemon's gRPC layer refused the call without an fsd error (credentials, a malformed
    /// request, an internal failure); its status message is not passed on.
    Rejected(Rejection),
}

/// Why the daemon's gRPC layer refused a call that carries no fsd error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The client's token or certificate was not accepted.
    Credentials,
    /// The request is malformed (a client bug or a version mismatch).
    Malformed,
    /// The daemon failed internally.
    Internal,
    /// An fsd error with a code this client does not know: the daemon is newer. Its gRPC status
    /// code is not read as credentials or a malformed call (a new code may map to any).
    NewerCode,
}

impl DaemonError {
    pub(super) fn from_status(status: tonic::Status) -> DaemonError {
        match WireError::from_status(&status) {
            Some(wire) => DaemonError::Refused(wire),
            None if WireError::newer_code(&status) => DaemonError::Rejected(Rejection::NewerCode),
            None => match status.code() {
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => {
                    DaemonError::Rejected(Rejection::Credentials)
                }
                tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::OutOfRange => {
                    DaemonError::Rejected(Rejection::Malformed)
                }
                tonic::Code::Internal | tonic::Code::DataLoss => DaemonError::Rejected(Rejection::Internal),
                _ => DaemonError::Unavailable(status.message().to_owned()),
            },
        }
    }

    /// A single call's failure carried inside another reply (`Inspect`): decoded as that
    /// call's status would be.
    fn from_call_error(error: v1::CallError) -> DaemonError {
        let code = tonic::Code::from_i32(error.status);
        DaemonError::from_status(tonic::Status::with_details(code, error.message, error.details))
    }

    /// The daemon's error, when it answered with one.
    pub fn wire(&self) -> Option<&WireError> {
        match self {
            DaemonError::Refused(wire) => Some(wire),
            DaemonError::Unavailable(_) | DaemonError::Rejected(_) => None,
        }
    }

    /// The stable code, when the daemon answered with one.
    pub fn code(&self) -> Option<fsd_proto::ErrorCode> {
        self.wire().map(|w| w.code)
    }
}

impl From<WireError> for DaemonError {
    fn from(wire: WireError) -> DaemonError {
        DaemonError::Refused(wire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_decodes_once() {
        let check = |status: tonic::Status, expected: DaemonError| {
            assert_eq!(DaemonError::from_status(status), expected);
        };
        let wire = WireError::new(fsd_proto::ErrorCode::NotFound, "/ws/a", "label");
        check(wire.clone().into_status(), DaemonError::Refused(wire));
        check(
            tonic::Status::unavailable("no daemon at unix:/s"),
            DaemonError::Unavailable("no daemon at unix:/s".into()),
        );
        check(tonic::Status::unknown("transport error"), DaemonError::Unavailable("transport error".into()));
        check(tonic::Status::unauthenticated("unknown token"), DaemonError::Rejected(Rejection::Credentials));
        check(tonic::Status::invalid_argument("bad"), DaemonError::Rejected(Rejection::Malformed));
        check(tonic::Status::internal("oops"), DaemonError::Rejected(Rejection::Internal));
        let newer = tonic_types::ErrorDetails::with_error_info(
            "FS_A_NEWER_CODE",
            "fsd",
            std::collections::HashMap::new(),
        );
        check(
            <tonic::Status as tonic_types::StatusExt>::with_error_details(
                tonic::Code::PermissionDenied,
                "label",
                newer,
            ),
            DaemonError::Rejected(Rejection::NewerCode),
        );
    }

    /// A patch travels as its chunks (their patch lines stay here) and its guard; its reply is
    /// read as an edit's, `replacements` the hunks applied.
    #[test]
    fn a_patch_goes_out_as_its_hunks_and_comes_back_as_an_edit() {
        use v1::{transact_operation, transact_result};
        let chunk = fsd_patch::Chunk {
            context: Some("fn main()".into()),
            old_lines: vec!["a".into()],
            new_lines: vec!["b".into(), "c".into()],
            end_of_file: true,
            line: 7,
        };
        let guard = VersionGuard::new(Version("v1.x".into()), None);
        let change = TxnChange::Patch { path: "/ws/a".into(), chunks: vec![chunk], guard: Some(guard) };
        let Some(transact_operation::Kind::Patch(sent)) = change.wire().kind else { panic!("not a patch") };
        assert_eq!(sent.path, "/ws/a");
        assert_eq!(
            sent.hunks,
            [v1::PatchHunk {
                context: Some("fn main()".into()),
                old_lines: vec!["a".into()],
                new_lines: vec!["b".into(), "c".into()],
                end_of_file: true,
            }]
        );
        assert_eq!(sent.guard.map(|g| g.version), Some("v1.x".to_owned()));
        let reply = v1::TransactResult {
            kind: Some(transact_result::Kind::Patch(v1::PatchTextReply {
                version: "v1.y".into(),
                hunks: 1,
                ..Default::default()
            })),
        };
        match TxnResult::from_wire(reply) {
            Some(TxnResult::Patched(edited)) => {
                assert_eq!((edited.version, edited.replacements), (Version("v1.y".into()), 1));
            }
            other => panic!("{other:?}"),
        }
    }
}
