//! The backend's errors: one variant per failing step, errno kept, and the one function that maps
//! them to stable wire codes. Reasons travel as codes and metadata (`reason`, `name`, `count`,
//! `size`, `limit`, and for an I/O failure its `step` and `errno`), never as sentences: the tools write what the model reads. The messages here
//! are terse log and generic-client labels.

use fsd_proto::{ErrorCode, Reason, Step, WireError};

use crate::escalation::TicketError;
use crate::op::Mode;
use crate::sys::Errno;

/// Why a guard no longer holds: the `reason` metadata of `FS_STALE_VERSION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// The file's bytes are not the ones the guard names.
    Changed,
    /// The guarded file is gone.
    Gone,
    /// The name now holds a symbolic link.
    Symlink,
    /// The path now resolves to another target key.
    OtherFile,
    /// Replaced by someone else between the check and the rename (the replace was undone).
    ChangedWhileWriting,
    /// Replaced by someone else between a removal's check and its move of the name aside: the
    /// removal was undone, the other file kept.
    ChangedWhileRemoving,
    /// A move's destination vanished right after the move.
    DestinationGone,
    /// The file was truncated, grew or was rewritten while it was read.
    ChangedWhileRead,
}

impl StaleReason {
    /// The `reason` it travels as.
    pub fn reason(self) -> Reason {
        match self {
            StaleReason::Changed => Reason::Changed,
            StaleReason::Gone => Reason::Gone,
            StaleReason::Symlink => Reason::Symlink,
            StaleReason::OtherFile => Reason::OtherFile,
            StaleReason::ChangedWhileWriting => Reason::ChangedWhileWriting,
            StaleReason::ChangedWhileRemoving => Reason::ChangedWhileRemoving,
            StaleReason::DestinationGone => Reason::DestinationGone,
            StaleReason::ChangedWhileRead => Reason::ChangedWhileRead,
        }
    }
}

/// What a transaction's patch hunk did not find: the `reason` metadata of its
/// `FS_EDIT_NOT_FOUND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HunkMiss {
    /// Its `@@` context line.
    Context,
    /// Its old lines.
    Lines,
}

impl HunkMiss {
    /// The `reason` it travels as.
    pub fn reason(self) -> Reason {
        match self {
            HunkMiss::Context => Reason::HunkContext,
            HunkMiss::Lines => Reason::HunkLines,
        }
    }

    /// What fsd-patch says a hunk did not find.
    pub fn of(kind: &fsd_patch::HunkErrorKind) -> HunkMiss {
        match kind {
            fsd_patch::HunkErrorKind::Context { .. } => HunkMiss::Context,
            fsd_patch::HunkErrorKind::ExpectedLines { .. } => HunkMiss::Lines,
        }
    }
}

/// What is wrong with a request path: the `reason` metadata of `FS_INVALID_PATH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathProblem {
    Empty,
    /// Longer than `MAX_PATH_BYTES` (metadata `limit`).
    TooLong,
    Nul,
    DriveLetter,
    Relative,
    /// A component longer than `MAX_COMPONENT_BYTES` (metadata `limit`).
    ComponentTooLong,
    NotUtf8,
    Backslash,
    BadEscape,
    EscapedSeparator,
    TrailingSlash,
    TooManyLinks,
}

impl PathProblem {
    /// The `reason` it travels as.
    pub fn reason(self) -> Reason {
        match self {
            PathProblem::Empty => Reason::Empty,
            PathProblem::TooLong => Reason::TooLong,
            PathProblem::Nul => Reason::Nul,
            PathProblem::DriveLetter => Reason::DriveLetter,
            PathProblem::Relative => Reason::Relative,
            PathProblem::ComponentTooLong => Reason::ComponentTooLong,
            PathProblem::NotUtf8 => Reason::NotUtf8,
            PathProblem::Backslash => Reason::Backslash,
            PathProblem::BadEscape => Reason::BadEscape,
            PathProblem::EscapedSeparator => Reason::EscapedSeparator,
            PathProblem::TrailingSlash => Reason::TrailingSlash,
            PathProblem::TooManyLinks => Reason::TooManyLinks,
        }
    }

    /// The status message for logs and generic clients (the tools word it themselves).
    fn label(self) -> &'static str {
        match self {
            PathProblem::Empty => "path is empty",
            PathProblem::TooLong => "path is longer than 4096 bytes",
            PathProblem::Nul => "path contains a NUL byte",
            PathProblem::DriveLetter => "path has a drive-letter prefix (a Windows path)",
            PathProblem::Relative => "path must be absolute",
            PathProblem::ComponentTooLong => "a path component is longer than 255 bytes",
            PathProblem::NotUtf8 => "path is not valid UTF-8",
            PathProblem::Backslash => "path contains a backslash (a Windows separator)",
            PathProblem::BadEscape => "path has an escape that is not a character",
            PathProblem::EscapedSeparator => "an escape in the path stands for '/' or NUL",
            PathProblem::TrailingSlash => "path ends with a slash but does not name a directory",
            PathProblem::TooManyLinks => "too many levels of symbolic links",
        }
    }

    /// The limit a length problem exceeded.
    fn limit(self) -> Option<usize> {
        match self {
            PathProblem::TooLong => Some(crate::op::MAX_PATH_BYTES),
            PathProblem::ComponentTooLong => Some(crate::op::MAX_COMPONENT_BYTES),
            _ => None,
        }
    }
}

/// Why the mode fence refused: the `reason` metadata of `FS_SANDBOX_DENIED` (the mode itself
/// travels as `mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The call's mode writes nothing.
    ReadOnly,
    /// The target is not below a writable root.
    NotWritableRoot,
    /// A path component is a protected name (metadata `name`).
    Protected(String),
    /// A move whose source and destination are one file.
    SameFile,
    /// A transaction naming one target in two operations (each target is changed once).
    RepeatedTarget,
    /// A transaction on a daemon without a `state_dir`: no durable place for its intent record.
    NoStateDir,
    /// A checkpoint, listing or rewind on a daemon that keeps no change record.
    NoChangeRecord,
    /// A rewind to a point whose later history the record's bounds dropped.
    HistoryDropped,
    /// A path component is a git directory found by what it is, whatever its name (metadata
    /// `name`: its display path).
    GitDirectory(String),
    /// The write would complete a git directory's shape in `dir` (its display path) by making
    /// `entry` (`HEAD`, `objects`, `refs` or `commondir`): reason `git_directory` too, with
    /// metadata `name` (the directory) and `entry`.
    WouldBeGitDirectory { dir: String, entry: String },
    /// A path component is a mount point below the root that `allow_submounts` does not name
    /// (metadata `name`: its display path).
    Submount(String),
    /// A removal of a root itself.
    Root,
    /// A tree removal that would cross into another mount (metadata `name`).
    Mount(String),
    /// An approved call whose own walk found another object than the one its approver was
    /// shown (a directory on the way or the final entry swapped since): nothing is done, and
    /// a new approval is needed.
    NotApproved,
    /// A change at a mode wider than the daemon's default that the worker performing it finds
    /// no valid approver's signature for (signed trust): the network process cannot grant
    /// what no person approved.
    Unsigned,
    /// An approved call on a file with more than one hard link that its requester could not
    /// read (or change) itself, found so by the worker performing it (`op::Shown::beyond`):
    /// the same reason as the network process's refusal before approval.
    HardLinked,
}

impl Denial {
    /// The `reason` it travels as.
    pub fn reason(&self) -> Reason {
        match self {
            Denial::ReadOnly => Reason::ReadOnly,
            Denial::NotWritableRoot => Reason::NotWritableRoot,
            Denial::Protected(_) => Reason::Protected,
            Denial::SameFile => Reason::SameFile,
            Denial::RepeatedTarget => Reason::RepeatedTarget,
            Denial::NoStateDir => Reason::NoStateDir,
            Denial::NoChangeRecord => Reason::NoChangeRecord,
            Denial::HistoryDropped => Reason::HistoryDropped,
            Denial::GitDirectory(_) | Denial::WouldBeGitDirectory { .. } => Reason::GitDirectory,
            Denial::Submount(_) => Reason::Submount,
            Denial::Root => Reason::Root,
            Denial::Mount(_) => Reason::Mount,
            Denial::NotApproved => Reason::NotApprovedObject,
            Denial::Unsigned => Reason::UnsignedEscalation,
            Denial::HardLinked => Reason::HardLinked,
        }
    }
}

/// Why a call at a wider mode, or a request for one, was refused: the `reason` metadata of
/// `FS_SANDBOX_DENIED` (with `requested`, the mode asked for, and `max_mode` or `ticket`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EscalationDenial {
    /// Above the caller's maximum mode.
    AboveMax { requested: Mode, max: Mode },
    /// The daemon takes no escalation (to that mode, when one was named).
    Disabled(Option<Mode>),
    /// `client` trust: the call carries no approval with a justification.
    NeedsApproval(Mode),
    /// `signed` trust: the call carries no ticket.
    NeedsTicket(Mode),
    /// A ticket presented to a daemon without signed trust.
    NoSignedEscalation,
    /// An escalation request that names no mode.
    NoMode,
    /// An escalation request for a mode the caller has anyway.
    NotWider(Mode),
    /// The ticket does not hold for this call.
    Ticket(TicketError),
    /// An escalation request for a write or an edit without the change itself (a bare digest
    /// or nothing): the approver would approve a path without seeing what is written there.
    UnboundChange,
    /// An escalation request to read or change the content of a file with more than one hard
    /// link that its requester could not read or change itself: the approver would see one
    /// name of a file that other names (a root-only one among them) share.
    HardLinked,
}

impl EscalationDenial {
    /// The `reason` it travels as.
    pub fn reason(&self) -> Reason {
        match self {
            EscalationDenial::AboveMax { .. } => Reason::AboveMax,
            EscalationDenial::Disabled(_) => Reason::EscalationDisabled,
            EscalationDenial::NeedsApproval(_) => Reason::NeedsApproval,
            EscalationDenial::NeedsTicket(_) => Reason::NeedsTicket,
            EscalationDenial::NoSignedEscalation => Reason::NoSignedEscalation,
            EscalationDenial::NoMode => Reason::NoMode,
            EscalationDenial::NotWider(_) => Reason::NotWider,
            EscalationDenial::Ticket(_) => Reason::TicketRefused,
            EscalationDenial::UnboundChange => Reason::UnboundChange,
            EscalationDenial::HardLinked => Reason::HardLinked,
        }
    }

    /// The status message for logs and generic clients (the tools word it from the metadata).
    fn label(&self) -> String {
        match self {
            EscalationDenial::AboveMax { requested, max } => {
                format!("{} is above this client's maximum mode {}", requested.as_str(), max.as_str())
            }
            EscalationDenial::Disabled(Some(mode)) => {
                format!("escalation to {} is disabled on this daemon", mode.as_str())
            }
            EscalationDenial::Disabled(None) => "escalation is disabled on this daemon".to_owned(),
            EscalationDenial::NeedsApproval(mode) => {
                format!("{} needs an approved escalation with a justification", mode.as_str())
            }
            EscalationDenial::NeedsTicket(mode) => {
                format!("{} needs a signed escalation ticket", mode.as_str())
            }
            EscalationDenial::NoSignedEscalation => "this daemon does not take signed escalations".to_owned(),
            EscalationDenial::NoMode => "no mode requested".to_owned(),
            EscalationDenial::NotWider(mode) => format!("{} needs no escalation", mode.as_str()),
            EscalationDenial::Ticket(e) => format!("escalation ticket refused: {e}"),
            EscalationDenial::UnboundChange => {
                "an escalated write or edit must carry its change, so the approver sees what it approves"
                    .to_owned()
            }
            EscalationDenial::HardLinked => {
                "the file has more than one hard link, and its requester may not access it itself".to_owned()
            }
        }
    }

    fn requested(&self) -> Option<Mode> {
        match self {
            EscalationDenial::AboveMax { requested: mode, .. }
            | EscalationDenial::Disabled(Some(mode))
            | EscalationDenial::NeedsApproval(mode)
            | EscalationDenial::NeedsTicket(mode)
            | EscalationDenial::NotWider(mode) => Some(*mode),
            _ => None,
        }
    }

    /// The refusal on the wire; `mode` is the mode the caller runs at without escalation.
    pub fn into_wire(self, path: &str, mode: Mode) -> WireError {
        let mut wire = WireError::new(ErrorCode::SandboxDenied, path, self.label())
            .with("mode", mode.as_str())
            .with_reason(self.reason());
        if let Some(requested) = self.requested() {
            wire = wire.with("requested", requested.as_str());
        }
        match self {
            EscalationDenial::AboveMax { max, .. } => wire.with("max_mode", max.as_str()),
            EscalationDenial::Ticket(e) => wire.with_word(e.refusal()),
            _ => wire,
        }
    }
}

/// Why a backend operation failed. Errno travels untouched until [`FsError::code`].
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{}", .0.label())]
    InvalidPath(PathProblem),
    #[error("path resolves outside every root of this daemon")]
    OutsideRoots,
    #[error("denied: {}", .0.reason())]
    Denied(Denial),
    /// The resolved target, or the directory `name` (its display path) holding it, matches the
    /// `read_denied` glob `pattern`: refused at every mode, whatever an approver says.
    #[error("read denied by {pattern}")]
    ReadDenied { pattern: String, name: String },
    #[error("not found")]
    NotFound,
    #[error("a path component is not a directory")]
    NotDirectory,
    #[error("not a regular file")]
    NotRegularFile,
    #[error("too many levels of symbolic links")]
    TooManyLinks,
    #[error("{0}")]
    NotText(&'static str),
    #[error("file is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("stale: {}", .0.reason())]
    Stale(StaleReason),
    /// A removal or replace was undone (stale, `reason`), and an outside save it had moved aside
    /// could not go back to its name, taken again by a newer change: it was kept at `kept` (a
    /// bare name in the target's directory until `Backend::fail` makes it the full path), which
    /// the reply names.
    #[error("stale: {}; a save was kept at {}", .reason.reason(), .kept.display())]
    KeptAside { reason: StaleReason, kept: std::path::PathBuf },
    #[error("file already exists")]
    AlreadyExists,
    #[error("edit: no match")]
    EditNotFound,
    /// A patch's hunk `hunk` (its index, from 0) does not match the file's current text.
    #[error("patch: hunk {hunk} does not match")]
    HunkMismatch { hunk: usize, miss: HunkMiss },
    /// `lines`: where the matches start (`backend::text::match_lines`), for a dry run's answer.
    #[error("edit: {count} matches")]
    AmbiguousEdit { count: usize, lines: Option<String> },
    #[error("directory has more than {0} entries")]
    TooManyEntries(usize),
    #[error("cannot keep the replaced file's owner: {0}")]
    KeepOwner(#[source] Errno),
    #[error("cannot keep the replaced file's ACL or extended attributes: {0}")]
    KeepAttributes(#[source] Errno),
    #[error("cannot resolve path: {0}")]
    Walk(#[source] Errno),
    #[error("cannot create parent directory: {0}")]
    MakeDir(#[source] Errno),
    #[error("cannot open file: {0}")]
    Open(#[source] Errno),
    #[error("cannot read file metadata: {0}")]
    Metadata(#[source] Errno),
    #[error("cannot read file: {0}")]
    Read(#[source] std::io::Error),
    #[error("cannot list directory: {0}")]
    List(#[source] Errno),
    #[error("cannot create temporary file: {0}")]
    CreateTemp(#[source] Errno),
    #[error("cannot write temporary file: {0}")]
    WriteTemp(#[source] std::io::Error),
    #[error("cannot set file mode: {0}")]
    SetMode(#[source] Errno),
    #[error("cannot sync: {0}")]
    Sync(#[source] Errno),
    #[error("cannot rename into place: {0}")]
    Rename(#[source] Errno),
    #[error("cannot remove file: {0}")]
    Remove(#[source] Errno),
    #[error("the call was cancelled")]
    Aborted,
    #[error("directory is not empty")]
    NotEmpty,
    #[error("the upload ended before its last byte")]
    Truncated,
    #[error("removed {removed} entries, then: {source}")]
    Partial {
        removed: u64,
        #[source]
        source: Box<FsError>,
    },
}

fn io_errno(err: &std::io::Error) -> Option<Errno> {
    err.raw_os_error().map(Errno::from_raw_os_error)
}

fn from_errno(errno: Errno) -> ErrorCode {
    match errno {
        Errno::NOENT => ErrorCode::NotFound,
        Errno::NOTDIR => ErrorCode::NotDirectory,
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ErrorCode::PermissionDenied,
        Errno::NOSPC | Errno::DQUOT | Errno::FBIG => ErrorCode::NoSpace,
        Errno::NAMETOOLONG => ErrorCode::InvalidPath,
        Errno::LOOP => ErrorCode::InvalidPath,
        Errno::ISDIR | Errno::NXIO => ErrorCode::NotRegularFile,
        Errno::NOTEMPTY => ErrorCode::NotEmpty,
        _ => ErrorCode::IoError,
    }
}

impl FsError {
    /// The step an I/O failure happened in, and its errno when it has one: the `step` and
    /// `errno` metadata the tools word the failure from.
    fn step(&self) -> Option<(Step, Option<i32>)> {
        let (step, errno) = match self {
            FsError::KeepOwner(e) => (Step::KeepOwner, e),
            FsError::KeepAttributes(e) => (Step::KeepAttributes, e),
            FsError::Walk(e) => (Step::Walk, e),
            FsError::MakeDir(e) => (Step::MakeDir, e),
            FsError::Open(e) => (Step::Open, e),
            FsError::Metadata(e) => (Step::Metadata, e),
            FsError::List(e) => (Step::List, e),
            FsError::CreateTemp(e) => (Step::CreateTemp, e),
            FsError::SetMode(e) => (Step::SetMode, e),
            FsError::Sync(e) => (Step::Sync, e),
            FsError::Rename(e) => (Step::Rename, e),
            FsError::Remove(e) => (Step::Remove, e),
            FsError::Read(e) => return Some((Step::Read, e.raw_os_error())),
            FsError::WriteTemp(e) => return Some((Step::WriteTemp, e.raw_os_error())),
            FsError::Partial { source, .. } => return source.step(),
            _ => return None,
        };
        Some((step, Some(errno.raw_os_error())))
    }

    /// The stable code: the one place errno becomes a wire code. Refusals the daemon decided
    /// itself (outside roots, mode, protected path) are classified by what it knows, not errno.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::InvalidPath(_) | FsError::TooManyLinks => ErrorCode::InvalidPath,
            FsError::OutsideRoots | FsError::Denied(_) => ErrorCode::SandboxDenied,
            FsError::ReadDenied { .. } => ErrorCode::ReadDenied,
            FsError::NotFound => ErrorCode::NotFound,
            FsError::NotDirectory => ErrorCode::NotDirectory,
            FsError::NotRegularFile => ErrorCode::NotRegularFile,
            FsError::NotText(_) => ErrorCode::NotText,
            FsError::TooLarge { .. } | FsError::TooManyEntries(_) => ErrorCode::TooLarge,
            FsError::Stale(_) | FsError::KeptAside { .. } => ErrorCode::StaleVersion,
            FsError::AlreadyExists => ErrorCode::NotObserved,
            FsError::EditNotFound | FsError::HunkMismatch { .. } => ErrorCode::EditNotFound,
            FsError::AmbiguousEdit { .. } => ErrorCode::AmbiguousEdit,
            FsError::KeepOwner(_) | FsError::KeepAttributes(_) => ErrorCode::PermissionDenied,
            FsError::Aborted | FsError::Truncated => ErrorCode::Aborted,
            FsError::NotEmpty => ErrorCode::NotEmpty,
            FsError::Partial { source, .. } => source.code(),
            FsError::Walk(e)
            | FsError::MakeDir(e)
            | FsError::Open(e)
            | FsError::Metadata(e)
            | FsError::List(e)
            | FsError::CreateTemp(e)
            | FsError::SetMode(e)
            | FsError::Sync(e)
            | FsError::Rename(e)
            | FsError::Remove(e) => from_errno(*e),
            FsError::Read(e) | FsError::WriteTemp(e) => match io_errno(e) {
                Some(errno) => from_errno(errno),
                None => ErrorCode::IoError,
            },
        }
    }
}

/// A failure with the place it happened, ready for the wire.
#[derive(Debug)]
pub struct Failure {
    pub error: FsError,
    /// The display path: resolved where resolution got that far, else the request's path.
    pub path: String,
    /// Boxed, as `operation`: every call's result carries a `Failure`, which stays under the
    /// size clippy lets an error be.
    pub target_key: Option<Box<str>>,
    /// In a transaction: which operation failed (from 0), and how many committed operations
    /// before it were undone (metadata `operation`, `undone`).
    pub operation: Option<Box<(usize, usize)>>,
}

impl Failure {
    pub fn new(error: FsError, path: impl Into<String>) -> Failure {
        // A request path as the client sent it may hold raw control characters; replies and
        // logs carry it defanged (display paths are escaped already and pass unchanged).
        Failure { error, path: fsd_proto::names::sanitize(&path.into()), target_key: None, operation: None }
    }

    /// The failure of a transaction's operation `index`, after `undone` earlier ones were undone.
    pub fn in_transaction(mut self, index: usize, undone: usize) -> Failure {
        self.operation = Some(Box::new((index, undone)));
        self
    }

    pub fn into_wire(self) -> WireError {
        let code = self.error.code();
        let mut wire = WireError::new(code, self.path, self.error.to_string());
        if let Some(key) = self.target_key {
            wire = wire.with("target_key", String::from(key));
        }
        if let Some((index, undone)) = self.operation.map(|o| *o) {
            wire = wire.with("operation", index.to_string()).with("undone", undone.to_string());
        }
        if let Some((step, errno)) = self.error.step() {
            wire = wire.with_word(step);
            if let Some(errno) = errno {
                wire = wire.with("errno", errno.to_string());
            }
        }
        match self.error {
            FsError::Stale(reason) => wire = wire.with_reason(reason.reason()),
            FsError::KeptAside { reason, kept } => {
                use std::os::unix::ffi::OsStrExt;
                let kept = fsd_proto::names::escape(kept.as_os_str().as_bytes());
                wire = wire.with_reason(reason.reason()).with("kept", kept);
            }
            FsError::InvalidPath(problem) => {
                wire = wire.with_reason(problem.reason());
                if let Some(limit) = problem.limit() {
                    wire = wire.with("limit", limit.to_string());
                }
            }
            FsError::TooManyLinks => wire = wire.with_reason(Reason::TooManyLinks),
            FsError::TooManyEntries(limit) => {
                wire = wire.with_reason(Reason::TooManyEntries).with("limit", limit.to_string());
            }
            FsError::Aborted => wire = wire.with_reason(Reason::Cancelled),
            FsError::Truncated => wire = wire.with_reason(Reason::Truncated),
            FsError::OutsideRoots => wire = wire.with_reason(Reason::OutsideRoots),
            FsError::Denied(denial) => {
                wire = wire.with_reason(denial.reason());
                match denial {
                    Denial::Protected(name)
                    | Denial::GitDirectory(name)
                    | Denial::Submount(name)
                    | Denial::Mount(name) => wire = wire.with("name", name),
                    Denial::WouldBeGitDirectory { dir, entry } => {
                        wire = wire.with("name", dir).with("entry", entry);
                    }
                    Denial::ReadOnly
                    | Denial::NotWritableRoot
                    | Denial::SameFile
                    | Denial::RepeatedTarget
                    | Denial::NoStateDir
                    | Denial::NoChangeRecord
                    | Denial::HistoryDropped
                    | Denial::Root
                    | Denial::NotApproved
                    | Denial::Unsigned
                    | Denial::HardLinked => {}
                }
            }
            FsError::ReadDenied { pattern, name } => {
                // `escalation = never`: no mode and no approval reaches it, and clients say so.
                wire = wire
                    .with_reason(fsd_proto::Reason::ReadDenied)
                    .with("pattern", pattern)
                    .with("name", name)
                    .with("escalation", "never");
            }
            FsError::TooLarge { size, limit } => {
                wire = wire.with("size", size.to_string()).with("limit", limit.to_string());
            }
            FsError::AmbiguousEdit { count, lines } => {
                wire = wire.with("count", count.to_string());
                if let Some(lines) = lines {
                    wire = wire.with("lines", lines);
                }
            }
            FsError::HunkMismatch { hunk, miss } => {
                wire = wire.with_reason(miss.reason()).with("hunk_index", hunk.to_string());
            }
            FsError::Partial { removed, .. } => wire = wire.with("removed", removed.to_string()),
            _ => {}
        }
        wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: FsError, expected: ErrorCode) {
        assert_eq!(error.code(), expected, "{error:?}");
    }

    #[test]
    fn errno_and_decisions_map_to_codes() {
        check(FsError::Open(Errno::NOENT), ErrorCode::NotFound);
        check(FsError::Open(Errno::ACCESS), ErrorCode::PermissionDenied);
        check(FsError::Rename(Errno::NOSPC), ErrorCode::NoSpace);
        check(FsError::Walk(Errno::NOTDIR), ErrorCode::NotDirectory);
        check(FsError::Read(std::io::Error::from_raw_os_error(5)), ErrorCode::IoError);
        check(FsError::OutsideRoots, ErrorCode::SandboxDenied);
        check(FsError::Denied(Denial::Protected(".git".into())), ErrorCode::SandboxDenied);
        check(
            FsError::ReadDenied { pattern: "**/.env".into(), name: "/ws/.env".into() },
            ErrorCode::ReadDenied,
        );
        check(FsError::Stale(StaleReason::Changed), ErrorCode::StaleVersion);
        check(FsError::AlreadyExists, ErrorCode::NotObserved);
        check(FsError::HunkMismatch { hunk: 0, miss: HunkMiss::Lines }, ErrorCode::EditNotFound);
        check(FsError::TooLarge { size: 2, limit: 1 }, ErrorCode::TooLarge);
        check(FsError::KeepOwner(Errno::PERM), ErrorCode::PermissionDenied);
    }

    fn reasons(error: FsError, expected: &[(&str, &str)]) {
        let wire = Failure::new(error, "/ws/a").into_wire();
        for (key, value) in expected {
            assert_eq!(wire.get(key), Some(*value), "{key} of {wire:?}");
        }
    }

    #[test]
    fn reasons_travel_as_metadata() {
        reasons(FsError::Stale(StaleReason::Gone), &[("reason", "gone")]);
        reasons(FsError::Stale(StaleReason::OtherFile), &[("reason", "other_file")]);
        reasons(
            FsError::KeptAside {
                reason: StaleReason::ChangedWhileRemoving,
                kept: "/ws/a.kept-0123abcd".into(),
            },
            &[("reason", "changed_while_removing"), ("kept", "/ws/a.kept-0123abcd")],
        );
        reasons(
            FsError::Denied(Denial::Protected(".git".into())),
            &[("reason", "protected"), ("name", ".git")],
        );
        reasons(FsError::Denied(Denial::ReadOnly), &[("reason", "read_only")]);
        reasons(FsError::OutsideRoots, &[("reason", "outside_roots")]);
        reasons(FsError::AmbiguousEdit { count: 3, lines: None }, &[("count", "3")]);
        reasons(
            FsError::AmbiguousEdit { count: 2, lines: Some("1,4".into()) },
            &[("count", "2"), ("lines", "1,4")],
        );
        reasons(FsError::TooLarge { size: 9, limit: 4 }, &[("size", "9"), ("limit", "4")]);
        reasons(FsError::Rename(Errno::IO), &[("step", "rename"), ("errno", "5")]);
        reasons(FsError::Read(std::io::Error::from_raw_os_error(28)), &[("step", "read"), ("errno", "28")]);
        reasons(
            FsError::Partial { removed: 2, source: Box::new(FsError::Remove(Errno::ACCESS)) },
            &[("removed", "2"), ("step", "remove"), ("errno", "13")],
        );
        reasons(FsError::InvalidPath(PathProblem::Relative), &[("reason", "relative")]);
        reasons(FsError::InvalidPath(PathProblem::TooLong), &[("reason", "too_long"), ("limit", "4096")]);
        reasons(FsError::TooManyLinks, &[("reason", "too_many_links")]);
        reasons(FsError::TooManyEntries(10), &[("reason", "too_many_entries"), ("limit", "10")]);
        reasons(
            FsError::HunkMismatch { hunk: 2, miss: HunkMiss::Lines },
            &[("reason", "hunk_lines"), ("hunk_index", "2")],
        );
        reasons(
            FsError::HunkMismatch { hunk: 0, miss: HunkMiss::Context },
            &[("reason", "hunk_context"), ("hunk_index", "0")],
        );
    }

    #[test]
    fn escalation_denials_travel_as_metadata() {
        let check = |denial: EscalationDenial, label: &str, expected: &[(&str, &str)]| {
            let wire = denial.into_wire("/ws/a", Mode::WorkspaceWrite);
            assert_eq!((wire.code, wire.message.as_str()), (ErrorCode::SandboxDenied, label));
            assert_eq!(wire.get("mode"), Some("workspace-write"));
            for (key, value) in expected {
                assert_eq!(wire.get(key), Some(*value), "{key} of {wire:?}");
            }
        };
        check(
            EscalationDenial::AboveMax { requested: Mode::DangerFullAccess, max: Mode::WorkspaceWrite },
            "danger-full-access is above this client's maximum mode workspace-write",
            &[("reason", "above_max"), ("requested", "danger-full-access"), ("max_mode", "workspace-write")],
        );
        check(
            EscalationDenial::Disabled(None),
            "escalation is disabled on this daemon",
            &[("reason", "escalation_disabled")],
        );
        check(
            EscalationDenial::Ticket(TicketError::Expired),
            "escalation ticket refused: the escalation expired",
            &[("reason", "ticket_refused"), ("ticket", "expired")],
        );
    }
}
