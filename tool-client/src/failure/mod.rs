//! Tool failures and the model-facing error texts: every failure renders as `Error: <message>`
//! with its stable code kept beside it. The FS_NOT_OBSERVED and FS_STALE_VERSION remedies are
//! added here and only here. Every daemon failure is worded here from its code and metadata
//! (`reason`, `step` and `errno`, `name`, `mode`, limits); the daemon's status message is a log
//! label and never reaches the model. Each fact is stated once.
//!
//! Codes and the metadata's words (`reason`, `ticket`, `step`, `lost`) are matched as the enums
//! of `fsd_proto` (`ErrorCode`, `fsd_proto::reason`). A daemon newer than this client may send a
//! word it does not know: `WireError::reason` and `WireError::word` answer `None` for it, and the
//! text falls back to what the code alone says (`detail`, the stale text of `FS_STALE_VERSION`,
//! the bare sandbox marker), as for a failure without the word. A code this client does not know
//! never reaches here: `WireError::from_status` does not decode it, and the call is
//! `Rejection::NewerCode`, whose text says the daemon is newer and the outcome unknown.

use fsd_proto::{ErrorCode, Reason, Step, TicketRefusal, WireError, Word, WorkerLost};

use crate::daemon::{DaemonError, Rejection};

/// A failed tool call: a stable code and the message the model reads after `Error: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub code: String,
    pub message: String,
}

/// The stale reason the tools find most: the bytes changed since the read.
const STALE_CHANGED: &str = "file changed on disk since it was read";

/// Why bytes are not text, for either reason.
const NOT_TEXT: &str = "the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)";

/// The remedy appended to stale-version failures.
pub const STALE_REMEDY: &str = " — re-read the file, then retry";

impl ToolError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError { code: code.into(), message: message.into() }
    }

    /// An argument mistake the schema cannot express.
    pub fn invalid_args(message: impl Into<String>) -> ToolError {
        ToolError::new("INVALID_ARGS", message)
    }

    /// The policy or the provider found no prior observation: one text whatever the source.
    pub fn not_observed(path: &str) -> ToolError {
        let path = &shown(path);
        ToolError::new(
            ErrorCode::NotObserved.as_str(),
            format!("cannot modify \"{path}\": file has not been read — read the file, then retry"),
        )
    }

    /// The observed version no longer holds, as the tools find it themselves before a call.
    pub fn stale(path: &str) -> ToolError {
        ToolError::new(
            ErrorCode::StaleVersion.as_str(),
            format!("cannot modify \"{path}\": {}{STALE_REMEDY}", STALE_CHANGED),
        )
    }

    /// The daemon restarted under the session: its observations are gone.
    pub fn restarted() -> ToolError {
        ToolError::new(
            "UNAVAILABLE",
            "The file service restarted, so earlier reads no longer count. Read files again before you \
             edit or overwrite them, then retry this call.",
        )
    }

    /// The daemon went away mid-session; `message` is what the transport said.
    pub fn unavailable(message: &str) -> ToolError {
        ToolError::new("UNAVAILABLE", format!("the file service is unavailable: {message}"))
    }

    /// The daemon's gRPC layer refused the call without an fsd error. The code stays
    /// `UNAVAILABLE` (nothing the model can change about the file helps); the words say why.
    pub fn rejected(rejection: Rejection) -> ToolError {
        let why = match rejection {
            Rejection::Credentials => {
                "the file service did not accept this client's credentials (nothing was done); ask the user to check the client's token or certificate"
            }
            Rejection::Malformed => {
                "the file service rejected the call as malformed (nothing was done); this client and the daemon may be of different versions"
            }
            Rejection::Internal => "the file service failed internally; the outcome is unknown",
            Rejection::NewerCode => {
                "the file service refused the call with a failure this client does not know (the daemon is newer than this client); the outcome is unknown"
            }
        };
        ToolError::new("UNAVAILABLE", why)
    }

    /// Maps a provider failure of a mutation on `path` to the model's text.
    pub fn from_mutation(path: &str, error: &DaemonError) -> ToolError {
        match error {
            DaemonError::Refused(wire) => ToolError::from_mutation_wire(path, wire),
            DaemonError::Unavailable(message) => ToolError::unavailable(message),
            DaemonError::Rejected(rejection) => ToolError::rejected(*rejection),
        }
    }

    pub fn from_mutation_wire(path: &str, wire: &WireError) -> ToolError {
        let path = &shown(path);
        match wire.code {
            ErrorCode::NotObserved => ToolError::not_observed(path),
            ErrorCode::StaleVersion => ToolError::new(
                wire.code.as_str(),
                format!("cannot modify \"{path}\": {}{STALE_REMEDY}", stale_reason(wire)),
            ),
            ErrorCode::SandboxDenied => sandbox_denied("modify", path, wire),
            ErrorCode::ReadDenied => read_denied("modify", path, wire),
            ErrorCode::RateLimited => rate_limited("modify", path, wire),
            ErrorCode::NotRegularFile => {
                ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": not a regular file"))
            }
            ErrorCode::NotFound => {
                ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": not found"))
            }
            _ => ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": {}", detail(wire))),
        }
    }

    /// Maps a provider failure of a read of `path` to the model's text.
    /// A failure of the change record's calls (checkpoint, changes, rewind), for a person or a
    /// host.
    pub fn from_record(error: &DaemonError) -> ToolError {
        let DaemonError::Refused(wire) = error else { return ToolError::from_read("", error) };
        let message = match wire.reason() {
            Some(Reason::NoChangeRecord) => {
                "the file service keeps no change record (it needs state_dir, and change_record not off)"
            }
            Some(Reason::HistoryDropped) => {
                "the change record's bounds dropped history after that point, so it cannot be restored whole; nothing was changed"
            }
            Some(Reason::OthersChanges) => {
                "only an identity the file service's change_operators names may see or undo another identity's changes"
            }
            Some(Reason::ReadOnly) => "a rewind writes, and this client may only read; nothing was changed",
            _ => return ToolError::from_read("", error),
        };
        ToolError::new(wire.code.as_str(), message)
    }

    pub fn from_read(path: &str, error: &DaemonError) -> ToolError {
        match error {
            DaemonError::Refused(wire) => ToolError::from_read_wire(path, wire),
            DaemonError::Unavailable(message) => ToolError::unavailable(message),
            DaemonError::Rejected(rejection) => ToolError::rejected(*rejection),
        }
    }

    pub fn from_read_wire(path: &str, wire: &WireError) -> ToolError {
        let path = &shown(path);
        let code = wire.code.as_str();
        match wire.code {
            ErrorCode::NotFound => ToolError::new(code, format!("cannot read \"{path}\": not found")),
            ErrorCode::NotRegularFile => {
                ToolError::new(code, format!("cannot read \"{path}\": not a regular file"))
            }
            ErrorCode::NotText => ToolError::new(code, format!("cannot read \"{path}\": {NOT_TEXT}")),
            ErrorCode::SandboxDenied => sandbox_denied("read", path, wire),
            ErrorCode::ReadDenied => read_denied("read", path, wire),
            ErrorCode::RateLimited => rate_limited("read", path, wire),
            // A file rewritten in place under the read: nothing was returned; reading again helps.
            ErrorCode::StaleVersion => ToolError::new(
                code,
                format!("cannot read \"{path}\": {} — read it again", stale_reason(wire)),
            ),
            _ => ToolError::new(code, format!("cannot read \"{path}\": {}", detail(wire))),
        }
    }

    /// A move wrote its destination but could not remove its source (`errno` as the daemon
    /// sent it).
    pub fn source_removal_failed(errno: Option<i32>) -> ToolError {
        let why = match errno {
            Some(errno) => {
                format!(": {}: {}", step_phrase(Some(Step::Remove)), std::io::Error::from_raw_os_error(errno))
            }
            None => String::new(),
        };
        ToolError::new(ErrorCode::IoError.as_str(), format!("source removal failed{why}"))
    }

    /// The text the model reads.
    pub fn text(&self) -> String {
        format!("Error: {}", self.message)
    }
}

/// Why a guard no longer holds, from the daemon's `reason` (and, for a removal that had to keep
/// a save at another name, that name: `kept`).
fn stale_reason(wire: &WireError) -> std::borrow::Cow<'static, str> {
    if let Some(kept) = wire.get("kept") {
        let kept = shown(kept);
        match wire.reason() {
            Some(Reason::ChangedWhileRemoving) => {
                return format!(
                    "file changed on disk while it was being deleted (the change was kept; an earlier change, whose name was taken again, was kept as \"{kept}\")"
                )
                .into();
            }
            Some(Reason::ChangedWhileWriting) => {
                return format!(
                    "file changed on disk while it was being written (the newest change was kept; an earlier change it replaced was kept as \"{kept}\")"
                )
                .into();
            }
            _ => {}
        }
    }
    std::borrow::Cow::Borrowed(match wire.reason() {
        Some(Reason::Gone) => "file no longer exists",
        Some(Reason::Symlink) => "file was replaced by a symbolic link",
        Some(Reason::OtherFile) => "path now resolves to a different file than the one that was read",
        Some(Reason::ChangedWhileWriting) => "file changed on disk while it was being written",
        Some(Reason::ChangedWhileRemoving) => {
            "file changed on disk while it was being deleted (the change was kept)"
        }
        Some(Reason::DestinationGone) => "destination disappeared after the move",
        Some(Reason::ChangedWhileRead) => "file changed while it was read",
        // `changed`, a reason of another code, none, or one newer than this client.
        _ => STALE_CHANGED,
    })
}

/// Why a call at a wider mode (or a request for one) was refused, from its `reason`, `requested`,
/// `max_mode` and `ticket`; `None` for a reason of no escalation refusal (the marker stands).
fn escalation_denial(reason: Reason, wire: &WireError) -> Option<String> {
    let requested = wire.get("requested").unwrap_or("the requested mode");
    Some(match reason {
        Reason::AboveMax => format!(
            "{requested} is above this client's maximum mode {}",
            wire.get("max_mode").unwrap_or("of this daemon")
        ),
        Reason::EscalationDisabled => match wire.get("requested") {
            Some(mode) => format!("escalation to {mode} is disabled on this daemon"),
            None => "escalation is disabled on this daemon".to_owned(),
        },
        Reason::NeedsApproval => format!("{requested} needs an approved escalation with a justification"),
        Reason::NeedsTicket => format!("{requested} needs a signed escalation ticket"),
        Reason::NoSignedEscalation => "this daemon does not take signed escalations".to_owned(),
        Reason::NoMode => "the escalation names no mode".to_owned(),
        Reason::NotWider => format!("{requested} needs no escalation"),
        Reason::TicketRefused => format!("escalation ticket refused: {}", ticket_reason(wire.word())),
        Reason::UnboundChange => {
            "an escalated write or edit must carry its change, so the approver sees what it approves"
                .to_owned()
        }
        Reason::HardLinked => {
            "the file has more than one hard link, and its requester may not access it itself".to_owned()
        }
        Reason::NotApprovedObject => {
            "the path now leads to another file or directory than the one the approver was shown; a new approval is needed"
                .to_owned()
        }
        _ => return None,
    })
}

/// Why a signed ticket does not hold, from the daemon's `ticket` (none, or one newer than this
/// client: it does not hold, whatever the cause).
fn ticket_reason(ticket: Option<TicketRefusal>) -> &'static str {
    match ticket {
        Some(TicketRefusal::Unknown) => "unknown or already spent escalation",
        Some(TicketRefusal::NotApproved) => "the escalation was not approved",
        Some(TicketRefusal::Expired) => "the escalation expired",
        Some(TicketRefusal::WrongCaller) => "the escalation belongs to another session or client",
        Some(TicketRefusal::WrongMode) => "the escalation approved another mode",
        Some(TicketRefusal::BadSignature) => "the escalation ticket is not signed by the configured approver",
        Some(TicketRefusal::Mismatch) => "this call differs from every call the approver signed",
        Some(TicketRefusal::ReadsSpent) => "the escalation's reads of the files it changes are used up",
        None => "it does not hold for this call",
    }
}

/// What failed, for a code the tools have no text of their own for: worded from the code and
/// its metadata (`step` and `errno` of an I/O failure, `reason`, `limit`, ...), never from the
/// daemon's status message.
fn detail(wire: &WireError) -> String {
    // Any step, a newer one too: the failure is an I/O step's, whichever.
    if wire.get(Step::KEY).is_some() {
        let step = wire.word::<Step>();
        let errno = wire.get("errno").and_then(|e| e.parse::<i32>().ok());
        return match errno {
            // The errno as this host's C library words it: "Input/output error (os error 5)".
            Some(errno) => format!("{}: {}", step_phrase(step), std::io::Error::from_raw_os_error(errno)),
            None => step_phrase(step).to_owned(),
        };
    }
    let reason = wire.reason();
    let limit = wire.get("limit");
    match wire.code {
        ErrorCode::NotFound => "not found".to_owned(),
        ErrorCode::NotDirectory => "a path component is not a directory".to_owned(),
        ErrorCode::NotText => NOT_TEXT.to_owned(),
        ErrorCode::NotRegularFile => "not a regular file".to_owned(),
        ErrorCode::PermissionDenied => "permission denied".to_owned(),
        ErrorCode::SandboxDenied => "file access denied".to_owned(),
        ErrorCode::NotObserved => "file has not been read".to_owned(),
        ErrorCode::StaleVersion => stale_reason(wire).into_owned(),
        ErrorCode::EditNotFound => "the string to replace was not found".to_owned(),
        ErrorCode::AmbiguousEdit => {
            format!("the string to replace was found {} times", wire.get("count").unwrap_or("several"))
        }
        ErrorCode::NotEmpty => "directory is not empty".to_owned(),
        ErrorCode::NoSpace => "no space left on the file system".to_owned(),
        ErrorCode::RateLimited => "the file service is limiting this client's calls".to_owned(),
        ErrorCode::ReadDenied => "the daemon denies every access to this path".to_owned(),
        ErrorCode::TooLarge => match (reason, wire.get("size"), limit) {
            (Some(Reason::TooManyEntries), _, Some(limit)) => {
                format!("directory has more than {limit} entries")
            }
            (Some(Reason::TooManyEntries), _, None) => "directory has too many entries".to_owned(),
            (_, Some(size), Some(limit)) => format!("file is {size} bytes, over the limit of {limit} bytes"),
            _ => "the file is too large".to_owned(),
        },
        ErrorCode::InvalidPath => match reason {
            Some(Reason::Empty) => "path is empty".to_owned(),
            Some(Reason::TooLong) => match limit {
                Some(limit) => format!("path is longer than {limit} bytes"),
                None => "path is too long".to_owned(),
            },
            Some(Reason::Nul) => "path contains a NUL byte".to_owned(),
            Some(Reason::DriveLetter) => "path has a drive-letter prefix (a Windows path)".to_owned(),
            Some(Reason::Relative) => "path must be absolute".to_owned(),
            Some(Reason::ComponentTooLong) => match limit {
                Some(limit) => format!("a path component is longer than {limit} bytes"),
                None => "a path component is too long".to_owned(),
            },
            Some(Reason::NotUtf8) => "path is not valid UTF-8".to_owned(),
            Some(Reason::Backslash) => "path contains a backslash (a Windows separator)".to_owned(),
            Some(Reason::BadEscape) => "path has an escape that is not a character".to_owned(),
            Some(Reason::EscapedSeparator) => "an escape in the path stands for '/' or NUL".to_owned(),
            Some(Reason::TrailingSlash) => "path ends with a slash but does not name a directory".to_owned(),
            Some(Reason::TooManyLinks) => "too many levels of symbolic links".to_owned(),
            _ => "invalid path".to_owned(),
        },
        ErrorCode::Aborted => match reason {
            Some(Reason::NoFreeWorker) => "no worker became free before the call's deadline".to_owned(),
            Some(Reason::WorkerLost) => format!("{}; the outcome is unknown", lost_phrase(wire.word())),
            Some(Reason::StreamIdle) => format!(
                "the stream was not read for {} ms and was cancelled",
                wire.get("limit_ms").unwrap_or("too many")
            ),
            Some(Reason::Cancelled) => "the call was cancelled".to_owned(),
            Some(Reason::UploadTooSlow) => format!(
                "the upload's body came slower than {} bytes a second and was cut off; nothing was written",
                wire.get("limit").unwrap_or("the daemon's minimum of")
            ),
            Some(Reason::Truncated) => "the upload ended before its last byte".to_owned(),
            _ => "the call was aborted; the outcome is unknown".to_owned(),
        },
        ErrorCode::IoError => match reason {
            Some(Reason::ModeStuck) => format!(
                "{} mode is not serving: {} of its workers are stuck in the filesystem and were abandoned",
                wire.get("mode").unwrap_or("this"),
                wire.get("abandoned_workers").unwrap_or("some")
            ),
            Some(Reason::DispatchFailed) => "the file service could not run the call".to_owned(),
            Some(Reason::NoDescriptor) => "the file service's worker sent no descriptor".to_owned(),
            Some(Reason::CheckFailed) => "the file service's check of this call failed".to_owned(),
            Some(Reason::CheckPoolStopped) => "the file service's check threads stopped".to_owned(),
            _ => "an I/O error".to_owned(),
        },
    }
}

/// The step of an I/O failure, from the daemon's `step` (`None`: one newer than this client).
fn step_phrase(step: Option<Step>) -> &'static str {
    match step {
        Some(Step::Walk) => "cannot resolve path",
        Some(Step::MakeDir) => "cannot create parent directory",
        Some(Step::Open) => "cannot open file",
        Some(Step::Metadata) => "cannot read file metadata",
        Some(Step::Read) => "cannot read file",
        Some(Step::List) => "cannot list directory",
        Some(Step::CreateTemp) => "cannot create temporary file",
        Some(Step::WriteTemp) => "cannot write temporary file",
        Some(Step::SetMode) => "cannot set file mode",
        Some(Step::Sync) => "cannot sync",
        Some(Step::Rename) => "cannot rename into place",
        Some(Step::Remove) => "cannot remove file",
        Some(Step::KeepOwner) => "cannot keep the replaced file's owner",
        Some(Step::KeepAttributes) => "cannot keep the replaced file's ACL or extended attributes",
        None => "an I/O step failed",
    }
}

/// How the worker of a call was lost, from the daemon's `lost` (none, or one newer than this
/// client).
fn lost_phrase(lost: Option<WorkerLost>) -> &'static str {
    match lost {
        Some(WorkerLost::SendFailed) => "the worker could not take the call",
        Some(WorkerLost::LockWait) => "the worker went away while waiting for a lock",
        Some(WorkerLost::UnexpectedMessage) => "the worker sent an unexpected message",
        Some(WorkerLost::Deadline) => "the call exceeded its deadline and its worker was killed",
        Some(WorkerLost::Died) => "the worker died",
        None => "the call's worker was lost",
    }
}

/// A path as the model gave it, for an error text: a raw control, bidi or zero-width character
/// in it is escaped (`fsd_proto::names`), escapes it already holds are left as they are.
fn shown(path: &str) -> String {
    fsd_proto::names::sanitize(path)
}

/// A refusal by the mode fence, with the seed's marker. The marker names the mode and the
/// denial; the words before it add only what it does not say (which protected name, which root).
fn sandbox_denied(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let mode = wire.get("mode").unwrap_or("workspace-write");
    // The mode's workers are not up: no fence refused anything, so no sandbox marker (it would
    // invite an escalation that cannot help); the operator's reason is in the daemon's log.
    if wire.reason() == Some(Reason::ModeUnserved) {
        return ToolError::new(
            "UNAVAILABLE",
            format!(
                "cannot {verb} \"{path}\": the file service cannot serve {mode} mode now (nothing was done); \
                 ask the user to check the daemon's log"
            ),
        );
    }
    let fact = match wire.reason() {
        Some(Reason::Protected) => {
            Some(format!("{} is a protected path", wire.get("name").unwrap_or("a path component")))
        }
        Some(Reason::GitDirectory) => {
            let name = wire.get("name").unwrap_or("a path component");
            // The write would build one: this entry is the last piece git looks for.
            Some(match wire.get("entry") {
                Some(entry) => format!("{entry} would make {name} a git directory (protected)"),
                None => format!("{name} is a git directory (protected)"),
            })
        }
        Some(Reason::Submount) => Some(format!(
            "{} is a mount point below the root (not in allow_submounts)",
            wire.get("name").unwrap_or("a path component")
        )),
        Some(Reason::NotWritableRoot) => Some("not inside a writable root".to_owned()),
        Some(Reason::OutsideRoots) => Some("path resolves outside every root of this daemon".to_owned()),
        Some(Reason::SameFile) => Some("source and destination are the same file".to_owned()),
        Some(Reason::RepeatedTarget) => {
            Some("another operation of the same atomic patch changes this file too".to_owned())
        }
        Some(Reason::NoStateDir) => {
            Some("the file service keeps no state_dir, which atomic patches need".to_owned())
        }
        Some(Reason::Root) => Some("a root itself cannot be removed".to_owned()),
        Some(Reason::Mount) => Some(format!(
            "{} is another mount below the tree (a removal does not cross it)",
            wire.get("name").unwrap_or("a path component")
        )),
        // Refusals of a wider mode: the marker names the mode the call runs at.
        Some(reason) => escalation_denial(reason, wire),
        // None, or one newer than this client: the marker says it all.
        None => None,
    };
    let marker = format!("[sandbox: file access denied under {mode} mode]");
    let message = match fact {
        Some(fact) => format!("cannot {verb} \"{path}\": {fact} {marker}"),
        None => format!("cannot {verb} \"{path}\" {marker}"),
    };
    ToolError::new(ErrorCode::SandboxDenied.as_str(), message)
}

/// A path the daemon's `read_denied` patterns name: refused at every mode, so no escalation
/// hint and no seed marker (which invites one); the words say that retrying wider is useless.
/// `name` is what matched (the target, or a directory holding it, as the daemon resolved it).
fn read_denied(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let by = match wire.get("pattern") {
        Some(pattern) => format!("the daemon's read_denied pattern \"{}\"", shown(pattern)),
        None => "the daemon's read_denied patterns".to_owned(),
    };
    let denied = match wire.get("name").map(shown) {
        Some(name) if name != path => format!("\"{name}\" is denied"),
        _ => "denied".to_owned(),
    };
    ToolError::new(
        ErrorCode::ReadDenied.as_str(),
        format!(
            "cannot {verb} \"{path}\": {denied} by {by} (no mode or approval grants access to it; do not retry with sandbox_permissions)"
        ),
    )
}

/// A per-client budget of the daemon is spent: nothing was done; the daemon says how long to
/// wait. The model is told to wait and retry, not that the file is at fault.
fn rate_limited(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let wait = wire.get("retry_after_ms").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1000);
    ToolError::new(
        ErrorCode::RateLimited.as_str(),
        format!(
            "cannot {verb} \"{path}\": the file service is limiting this client's calls (nothing was done) — wait {wait} ms, then retry"
        ),
    )
}

#[cfg(test)]
mod tests;
