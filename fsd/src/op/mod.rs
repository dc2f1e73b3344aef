//! The daemon's vocabulary, below every process that speaks it: the operations it serves as one
//! enum (their wire names in audit records and escalation descriptions, whether they mutate,
//! whether their path follows a final symlink), a call (`Request`) and its answer (`Outcome`),
//! modes, limits, roots, and the objects an approval binds. Imports nothing of the daemon: the
//! network process speaks it without the code that touches the disk (`backend`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod binding;
mod outcome;
mod request;

pub use binding::{Binding, Last, Made, ObjectId, Requester, Scope, Shown, SignedApproval};
pub use outcome::{
    Change, ChangeEntry, Changes, DirEntry, FileDiff, FileType, Info, Outcome, Rewound, StreamHeader, Target,
    Visible, WriteOperation,
};
pub use request::{Author, Bindings, ChangesQuery, EditGuard, Hunk, Request, TxnOp, Unbound, WriteGuard};

/// One operation of `fsd.v1`, or a step of signed escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Stat,
    ReadText,
    StreamText,
    ReadBytes,
    ListDir,
    WriteText,
    EditText,
    MoveFile,
    DeleteFile,
    WriteBytes,
    Remove,
    /// Operations committed all-or-nothing.
    Transact,
    /// A change's preflight questions about its targets, in one call: each is its own call too
    /// (a stat, a read), so this only names the client's call in metrics and traces.
    Inspect,
    /// Any read at an escalated mode: what a read ticket is checked against.
    Read,
    /// RequestEscalation: the daemon describes calls for an approver.
    Describe,
    /// A dry run of a change ([`Request::Check`]): the network process's own question, never a
    /// client's call.
    Check,
    /// Names a point in the change record.
    Checkpoint,
    /// Lists the recorded changes after a point.
    Changes,
    /// Restores the files changed after a point.
    Rewind,
}

impl Op {
    /// The name in audit records and canonical escalation descriptions (stable: approvers sign it).
    pub fn name(self) -> &'static str {
        match self {
            Op::Stat => "stat",
            Op::ReadText => "readText",
            Op::StreamText => "streamText",
            Op::ReadBytes => "readBytes",
            Op::ListDir => "listDir",
            Op::WriteText => "writeText",
            Op::EditText => "editText",
            Op::MoveFile => "moveFile",
            Op::DeleteFile => "deleteFile",
            Op::WriteBytes => "writeBytes",
            Op::Remove => "remove",
            Op::Transact => "transact",
            Op::Inspect => "inspect",
            Op::Read => "read",
            Op::Describe => "describe",
            Op::Check => "check",
            Op::Checkpoint => "checkpoint",
            Op::Changes => "changes",
            Op::Rewind => "rewind",
        }
    }

    /// The operations a client may name in an escalation request.
    pub fn escalatable(name: &str) -> Option<Op> {
        match name {
            "readText" => Some(Op::ReadText),
            "writeText" => Some(Op::WriteText),
            "editText" => Some(Op::EditText),
            "moveFile" => Some(Op::MoveFile),
            "deleteFile" => Some(Op::DeleteFile),
            _ => None,
        }
    }

    pub fn is_mutation(self) -> bool {
        matches!(
            self,
            Op::WriteText
                | Op::EditText
                | Op::MoveFile
                | Op::DeleteFile
                | Op::WriteBytes
                | Op::Remove
                | Op::Transact
        )
    }

    /// Whether the (source) path follows a final symlink: moves and deletes act on the link.
    pub fn follows_link(self) -> bool {
        !matches!(self, Op::MoveFile | Op::DeleteFile | Op::Remove)
    }
}

/// Prefix of the temporary files of an atomic replace; listDir hides names with it.
pub const TEMP_PREFIX: &str = ".fsd-tmp-";

/// A call's effective mode, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl Mode {
    /// The name models and configs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }

    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "read-only" => Some(Mode::ReadOnly),
            "workspace-write" => Some(Mode::WorkspaceWrite),
            "danger-full-access" => Some(Mode::DangerFullAccess),
            _ => None,
        }
    }
}

/// The backend's bounds; all reported by hello.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Limits {
    pub max_editable_bytes: u64,
    pub max_read_bytes: u64,
    pub max_diff_text_bytes: u64,
    pub max_dir_entries: usize,
    pub default_chunk_bytes: usize,
    pub max_chunk_bytes: usize,
    /// The largest streamed byte write (REST PUT, WriteBytes).
    pub max_upload_bytes: u64,
    /// The slowest an upload's client may send its body, past a grace (0: no minimum).
    pub min_upload_bytes_per_sec: u64,
    /// Operations one transaction may carry (`backend::txn`).
    pub max_transaction_operations: usize,
    /// Bytes one transaction may stage: the new content of every file it writes.
    pub max_transaction_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_editable_bytes: 64 << 20,
            max_read_bytes: 50 << 20,
            max_diff_text_bytes: 1 << 20,
            max_dir_entries: 100_000,
            default_chunk_bytes: 256 << 10,
            // The default, which the tools ask for: a stream whose reader stalls holds two
            // chunks (the one read ahead and the one HTTP/2 waits to send), so the cap bounds
            // what an identity's 64 stalled streams pin (32 MiB, not 128 with 1 MiB chunks).
            max_chunk_bytes: 256 << 10,
            max_upload_bytes: 4 << 30,
            min_upload_bytes_per_sec: 16 << 10,
            max_transaction_operations: 1000,
            max_transaction_bytes: 256 << 20,
        }
    }
}

/// The roots and policy a backend serves, fixed at startup.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootSpec {
    pub path: PathBuf,
    pub writable: bool,
}

/// The longest request path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest name in a path, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A path as text a model or a log may show, escaped ([`fsd_proto::names`]): reversible, so
/// two names never collide and the text leads back to the file.
pub fn path_string(path: &Path) -> String {
    fsd_proto::names::escape(path.as_os_str().as_bytes())
}
