//! A call as the network process hands it to a worker: the operation, its paths, its guards,
//! and for an approved escalated call the objects its walks are held to and what was signed.

use serde::{Deserialize, Serialize};

use super::Op;
use super::binding::{Binding, Made, Requester, SignedApproval};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteGuard {
    CreateIfAbsent,
    ReplaceIfVersion { version: String, target_key: Option<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditGuard {
    pub version: String,
    pub target_key: Option<String>,
}

/// An approved call's paths (as the call names them) and the object each is bound to.
pub type Bindings = Vec<(String, Binding)>;

/// One operation, as the service hands it over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    Stat {
        path: String,
        no_follow: bool,
    },
    /// A stat that also checks that the mode may write the target, writing nothing.
    CheckWrite {
        path: String,
        no_follow: bool,
    },
    ReadText {
        path: String,
        max_bytes: u64,
    },
    ReadBytes {
        path: String,
        max_bytes: u64,
    },
    ListDir {
        path: String,
    },
    WriteText {
        path: String,
        content: String,
        guard: Option<WriteGuard>,
        match_style: bool,
    },
    EditText {
        path: String,
        old: String,
        new: String,
        replace_all: bool,
        guard: Option<EditGuard>,
    },
    MoveFile {
        source: String,
        destination: String,
        source_guard: Option<EditGuard>,
        destination_guard: Option<WriteGuard>,
        content: Option<String>,
    },
    DeleteFile {
        path: String,
        guard: Option<EditGuard>,
    },
    /// A whole file of raw bytes, any size: the bytes arrive on a pipe that travels with the
    /// call (see `bytes`), so neither process holds the file in memory.
    WriteBytes {
        path: String,
        /// Permission bits for the file (`None`: new files 0644, replaced files keep theirs).
        mode: Option<u32>,
        guard: Option<WriteGuard>,
    },
    /// A file, a symlink (not followed), an empty directory or, with `recursive`, a tree.
    Remove {
        path: String,
        recursive: bool,
        guard: Option<EditGuard>,
    },
    /// An update of a text file by apply_patch hunks, asked only inside a [`Request::Check`]:
    /// an escalated apply_patch's preview, whose hunks the worker applies (the network process
    /// matches no file content). `base`: the text an earlier operation of the same patch left
    /// (the worker's own earlier answer), else the file's current text.
    PatchText {
        path: String,
        hunks: Vec<Hunk>,
        base: Option<String>,
    },
    /// Operations committed all-or-nothing (`backend::txn`).
    Transact {
        ops: Vec<TxnOp>,
    },
    /// A dry run of the change `request` makes: the whole pipeline but its commit, in a worker
    /// of the mode asked, answered with the outcome the change would have (its `version` the
    /// one there now, which a guard of the change names) or the failure it would meet; nothing
    /// is made or changed. Never a client's call: the network process asks it before an
    /// escalation is approved, and the outcome's content goes to the approver only.
    Check {
        request: Box<Request>,
    },
    /// A change made for `author` (its recorded `who`, `backend::record`): the network process
    /// wraps every client's mutation in it, outermost.
    Recorded {
        author: Author,
        request: Box<Request>,
    },
    /// Names a point in the change record (`Checkpoint{label}`); answered with its id.
    Checkpoint {
        author: Author,
        label: String,
    },
    /// The recorded changes after a point, and for each file changed its diff since then.
    Changes(ChangesQuery),
    /// Restores every file the selected changes after a point changed to its content then, as
    /// one transaction (`backend::rewind`).
    Rewind {
        author: Author,
        query: ChangesQuery,
        /// A file changed since by someone the record did not see is restored too (its version
        /// kept in the rewind's own record); else it is left as it is and reported.
        keep_checkpoint: bool,
    },
    /// An approved escalated call: `request`, each of whose paths the worker's own walk holds to
    /// the object the approval binds (see [`Binding`]).
    Bound {
        bindings: Bindings,
        /// What the approver signed, which the worker checks itself (signed trust).
        approval: Option<SignedApproval>,
        /// The directories earlier calls of the same approval made, as their workers vouched.
        made: Vec<Made>,
        /// Whom the call is made for: on a file other names share, the worker performing it
        /// acts within that requester's own authority only (`Shown::beyond`).
        requester: Requester,
        request: Box<Request>,
    },
}

/// Who made a change: the authenticated identity (its label), the client's session and call
/// ids when it gave them, and whether it ran at a mode wider than the caller's own.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Author {
    pub identity: String,
    pub session: Option<String>,
    pub call: Option<String>,
    pub escalated: bool,
}

/// Which recorded changes a listing names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangesQuery {
    /// The point: changes with a greater sequence number (0: all kept).
    pub since: u64,
    /// Only this identity's changes (`None`: every identity's, an operator's view).
    pub identity: Option<String>,
    /// Only this session's changes.
    pub session: Option<String>,
    /// The caller's own mode: a file's content is shown only where it may read it at it now.
    pub reader_mode: super::Mode,
}

/// One operation of a transaction, with its guard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TxnOp {
    Write {
        path: String,
        content: String,
        guard: Option<WriteGuard>,
        match_style: bool,
    },
    Edit {
        path: String,
        old: String,
        new: String,
        replace_all: bool,
        guard: Option<EditGuard>,
    },
    Delete {
        path: String,
        guard: Option<EditGuard>,
    },
    /// With `content`, the destination gets it and the source goes.
    Move {
        source: String,
        destination: String,
        source_guard: Option<EditGuard>,
        destination_guard: Option<WriteGuard>,
        content: Option<String>,
    },
    /// An update of an existing text file by apply_patch hunks, applied to its current text
    /// under the locks (`fsd_patch::apply_chunks`).
    Patch {
        path: String,
        hunks: Vec<Hunk>,
        guard: Option<EditGuard>,
    },
}

/// One apply_patch hunk of [`TxnOp::Patch`]: an `fsd_patch::Chunk` without its patch line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    pub context: Option<String>,
    pub old_lines: Vec<String>,
    pub new_lines: Vec<String>,
    pub end_of_file: bool,
}

impl Hunk {
    /// The hunk of a parsed patch's chunk (its patch line dropped: a miss names the hunk's
    /// index, which the one who parsed the patch maps back).
    pub fn of(chunk: &fsd_patch::Chunk) -> Hunk {
        Hunk {
            context: chunk.context.clone(),
            old_lines: chunk.old_lines.clone(),
            new_lines: chunk.new_lines.clone(),
            end_of_file: chunk.end_of_file,
        }
    }

    /// The chunk fsd-patch applies; its `line` is the hunk's number (from 1), which a
    /// `HunkError` names back.
    pub fn chunk(&self, number: usize) -> fsd_patch::Chunk {
        fsd_patch::Chunk {
            context: self.context.clone(),
            old_lines: self.old_lines.clone(),
            new_lines: self.new_lines.clone(),
            end_of_file: self.end_of_file,
            line: number,
        }
    }
}

impl TxnOp {
    /// The path the operation names (the source of a move).
    pub fn path(&self) -> &str {
        match self {
            TxnOp::Write { path, .. }
            | TxnOp::Edit { path, .. }
            | TxnOp::Delete { path, .. }
            | TxnOp::Patch { path, .. } => path,
            TxnOp::Move { source, .. } => source,
        }
    }

    /// The operation it is, as a single call.
    pub fn op(&self) -> Op {
        match self {
            TxnOp::Write { .. } => Op::WriteText,
            TxnOp::Edit { .. } | TxnOp::Patch { .. } => Op::EditText,
            TxnOp::Delete { .. } => Op::DeleteFile,
            TxnOp::Move { .. } => Op::MoveFile,
        }
    }
}

/// An approved call taken apart: the call, the bindings it is held to, what was signed, the
/// directories earlier calls of it made, and whom it is made for.
#[derive(Debug)]
pub struct Unbound {
    pub request: Request,
    pub bindings: Bindings,
    pub approval: Option<SignedApproval>,
    pub made: Vec<Made>,
    /// `None` for a plain call, which no approval widens.
    pub requester: Option<Requester>,
}

impl Unbound {
    /// A plain call: no approval binds it.
    pub fn plain(request: Request) -> Unbound {
        Unbound { request, bindings: Vec::new(), approval: None, made: Vec::new(), requester: None }
    }
}

impl Request {
    /// The call itself, the bindings an approval holds it to and the approval (none for a
    /// plain call).
    pub fn unbind(self) -> Unbound {
        match self {
            Request::Bound { bindings, approval, made, requester, request } => {
                Unbound { request: *request, bindings, approval, made, requester: Some(requester) }
            }
            request => Unbound::plain(request),
        }
    }

    /// The call and who it is made for, when the network process said (outermost).
    pub fn unrecord(self) -> (Request, Option<Author>) {
        match self {
            Request::Recorded { author, request } => (*request, Some(author)),
            plain => (plain, None),
        }
    }

    /// A client's change, wrapped for the change record; any other call as it is.
    pub fn recorded(self, author: Author) -> Request {
        if self.op().is_mutation() { Request::Recorded { author, request: Box::new(self) } } else { self }
    }

    /// The call itself, without the bindings of an approval.
    pub fn plain(&self) -> &Request {
        match self {
            Request::Bound { request, .. } | Request::Recorded { request, .. } => request.plain(),
            plain => plain,
        }
    }
}

impl Request {
    pub fn op(&self) -> Op {
        match self {
            Request::Stat { .. } | Request::CheckWrite { .. } => Op::Stat,
            Request::ReadText { .. } => Op::ReadText,
            Request::ReadBytes { .. } => Op::ReadBytes,
            Request::ListDir { .. } => Op::ListDir,
            Request::WriteText { .. } => Op::WriteText,
            Request::EditText { .. } | Request::PatchText { .. } => Op::EditText,
            Request::MoveFile { .. } => Op::MoveFile,
            Request::DeleteFile { .. } => Op::DeleteFile,
            Request::WriteBytes { .. } => Op::WriteBytes,
            Request::Remove { .. } => Op::Remove,
            Request::Transact { .. } => Op::Transact,
            Request::Check { .. } => Op::Check,
            Request::Bound { request, .. } | Request::Recorded { request, .. } => request.op(),
            Request::Checkpoint { .. } => Op::Checkpoint,
            Request::Changes(_) => Op::Changes,
            Request::Rewind { .. } => Op::Rewind,
        }
    }

    /// The path the call names (the source of a move).
    pub fn path(&self) -> &str {
        match self {
            Request::Stat { path, .. }
            | Request::CheckWrite { path, .. }
            | Request::ReadText { path, .. }
            | Request::ReadBytes { path, .. }
            | Request::ListDir { path }
            | Request::WriteText { path, .. }
            | Request::EditText { path, .. }
            | Request::PatchText { path, .. }
            | Request::DeleteFile { path, .. }
            | Request::WriteBytes { path, .. }
            | Request::Remove { path, .. } => path,
            Request::MoveFile { source, .. } => source,
            Request::Transact { ops } => ops.first().map_or("", TxnOp::path),
            Request::Check { request }
            | Request::Bound { request, .. }
            | Request::Recorded { request, .. } => request.path(),
            Request::Checkpoint { .. } | Request::Changes(_) | Request::Rewind { .. } => "",
        }
    }
}
