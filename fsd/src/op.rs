//! The operations the daemon serves, as one enum: their wire names (audit records, escalation
//! descriptions), whether they mutate, and whether their path follows a final symlink.

use crate::backend::Request;

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
    /// Any read at an escalated mode: what a read ticket is checked against.
    Read,
    /// RequestEscalation: the daemon describes calls for an approver.
    Describe,
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
            Op::Read => "read",
            Op::Describe => "describe",
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

impl Request {
    pub fn op(&self) -> Op {
        match self {
            Request::Stat { .. } | Request::CheckWrite { .. } => Op::Stat,
            Request::ReadText { .. } => Op::ReadText,
            Request::ReadBytes { .. } => Op::ReadBytes,
            Request::ListDir { .. } => Op::ListDir,
            Request::WriteText { .. } => Op::WriteText,
            Request::EditText { .. } => Op::EditText,
            Request::MoveFile { .. } => Op::MoveFile,
            Request::DeleteFile { .. } => Op::DeleteFile,
            Request::WriteBytes { .. } => Op::WriteBytes,
            Request::Remove { .. } => Op::Remove,
            Request::Transact { .. } => Op::Transact,
            Request::Bound { request, .. } => request.op(),
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
            | Request::DeleteFile { path, .. }
            | Request::WriteBytes { path, .. }
            | Request::Remove { path, .. } => path,
            Request::MoveFile { source, .. } => source,
            Request::Transact { ops } => ops.first().map_or("", crate::backend::txn::TxnOp::path),
            Request::Bound { request, .. } => request.path(),
        }
    }
}
