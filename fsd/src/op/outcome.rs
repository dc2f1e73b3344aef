//! What a worker answers: each operation's outcome, the targets replies name, entries and
//! before/after text.

use serde::{Deserialize, Serialize};

use super::binding::{Binding, Made};

/// A resolved target as replies name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub key: String,
    pub display: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    File,
    Directory,
    Other,
    Symlink,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub version: String,
    pub file_type: FileType,
    pub size: Option<u64>,
}

/// Before/after text of a change, when within the reply bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub before: Option<String>,
    pub after: Option<String>,
    pub omitted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub raw_name: Vec<u8>,
    pub file_type: FileType,
    pub target: Target,
    pub version: Option<String>,
    pub size: Option<u64>,
    /// Modification time (seconds, nanoseconds) and permission bits of what the entry leads
    /// to, when known.
    pub modified: Option<(i64, u32)>,
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteOperation {
    Create,
    Update,
}

/// What an operation did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Outcome {
    Stat {
        target: Target,
        info: Option<Info>,
        /// The object the walk stood on, which an approval of this target binds.
        binding: Option<Binding>,
    },
    ReadText {
        target: Target,
        version: String,
        text: String,
    },
    ReadBytes {
        target: Target,
        version: String,
        data: Vec<u8>,
    },
    ListDir {
        target: Target,
        entries: Vec<DirEntry>,
    },
    WriteText {
        target: Target,
        operation: WriteOperation,
        version: String,
        change: Change,
    },
    EditText {
        target: Target,
        version: String,
        replacements: usize,
        change: Change,
    },
    MoveFile {
        source: Target,
        destination: Target,
        destination_version: String,
        source_change: Change,
        destination_change: Change,
        /// The errno of a failed removal of the source (the destination was written).
        source_removal_errno: Option<i32>,
    },
    DeleteFile {
        target: Target,
        change: Change,
    },
    WriteBytes {
        target: Target,
        operation: WriteOperation,
        version: String,
        size: u64,
    },
    Remove {
        target: Target,
        /// Names removed (a tree counts every entry, itself included).
        removed: u64,
    },
    /// A patch's dry run ([`super::Request::PatchText`]): the text its hunks apply to and the
    /// text they produce, whole, for an escalation's approver (never a client).
    Patched {
        target: Target,
        before: String,
        after: String,
    },
    /// Each operation's outcome, in order (a write's, an edit's, a delete's or a move's).
    Transact {
        outcomes: Vec<Outcome>,
    },
    /// An approved call's outcome with the directories it made, vouched for by its worker (the
    /// redemption of its approval's next call admits them); taken apart by the service before
    /// any reply is built.
    Vouched {
        outcome: Box<Outcome>,
        made: Made,
    },
    /// A point named in the change record.
    Checkpoint {
        id: u64,
    },
    Changes(Changes),
    Rewind(Rewound),
}

/// What a rewind did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewound {
    /// The rewind's own change in the record (none when it restored nothing).
    pub change: Option<u64>,
    /// The files restored to their content at the point.
    pub restored: Vec<Target>,
    /// Files changed since by someone the record did not see: left as they are, each with the
    /// diff from its content at the point to its content now (where the caller may see it).
    pub conflicts: Vec<FileDiff>,
    /// Files restored over such a change (`keep_checkpoint`): their version is the rewind's
    /// change's before-image.
    pub replaced: Vec<Target>,
    /// Files the record cannot restore (not a file, larger than it keeps, not readable by the caller).
    pub unrestorable: Vec<Target>,
}

/// The recorded changes after a point (`Request::Changes`), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// History the record's bounds dropped: every change up to this sequence number.
    pub dropped_through: Option<u64>,
    /// How many whole changes were dropped, in all.
    pub dropped_changes: u64,
    pub entries: Vec<ChangeEntry>,
    /// Each file changed since the point, in the order first changed.
    pub files: Vec<FileDiff>,
}

/// One recorded change: one call's commit (a transaction's every file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEntry {
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub author: super::Author,
    /// The operation's wire name (`writeText`, `transact`, ...).
    pub op: String,
    pub targets: Vec<Target>,
    /// The call answered an error, yet its change reached the disk (placed, then its sync
    /// failed): recorded all the same, so it can be listed and undone.
    pub failed: bool,
}

/// A file changed since the point: who changed it and, where the caller may see it, the diff
/// from its content at the point to its content now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    pub target: Target,
    /// The identities that changed it, each once, in order.
    pub authors: Vec<String>,
    /// Whether a file was there at the point, and now.
    pub existed: bool,
    pub exists: bool,
    /// Changed since by someone fsd did not record: what is there is not what fsd left.
    pub changed_outside: bool,
    pub shown: Visible,
}

/// What a listing shows of a file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Visible {
    /// The unified diff (empty: the same content).
    Diff(String),
    /// Content withheld: a change made under an escalation.
    Escalated,
    /// Content withheld: the caller may not read the file at its own mode now.
    NotReadable,
    /// Not text, or larger than the record keeps.
    NotText,
}

/// The first message of a streamed read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHeader {
    pub target: Target,
    pub version: String,
    pub size: u64,
}
