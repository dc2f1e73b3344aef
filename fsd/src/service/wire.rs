//! Conversions between `fsd.v1` messages and the backend's own types, in both directions. The
//! only place besides the handlers that names generated types.

use fsd_proto::v1;

use crate::op::{self, Mode, Outcome};

/// A request message that carries the common call context.
pub(super) trait Called {
    fn context(&self) -> Option<&v1::CallContext>;
}

macro_rules! called {
    ($($message:ty),* $(,)?) => {
        $(impl Called for $message {
            fn context(&self) -> Option<&v1::CallContext> {
                self.context.as_ref()
            }
        })*
    };
}

called!(
    v1::StatRequest,
    v1::ReadTextRequest,
    v1::StreamTextRequest,
    v1::ReadBytesRequest,
    v1::ListDirRequest,
    v1::WriteTextRequest,
    v1::EditTextRequest,
    v1::MoveFileRequest,
    v1::DeleteFileRequest,
    v1::RemoveRequest,
    v1::TransactRequest,
    v1::EscalationRequest,
    v1::ReleaseEscalationRequest,
);

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

pub(super) fn target(t: op::Target) -> Option<v1::Target> {
    Some(v1::Target { target_key: t.key, display_path: t.display })
}

fn file_type(t: op::FileType) -> i32 {
    match t {
        op::FileType::File => v1::FileType::File as i32,
        op::FileType::Directory => v1::FileType::Directory as i32,
        op::FileType::Other => v1::FileType::Other as i32,
        op::FileType::Symlink => v1::FileType::Symlink as i32,
    }
}

fn change(c: op::Change) -> Option<v1::TextChange> {
    Some(v1::TextChange { before: c.before, after: c.after, omitted: c.omitted })
}

pub(super) fn write_guard(g: Option<v1::WriteGuard>) -> Option<op::WriteGuard> {
    match g?.kind? {
        v1::write_guard::Kind::CreateIfAbsent(_) => Some(op::WriteGuard::CreateIfAbsent),
        v1::write_guard::Kind::ReplaceIfVersion(r) => Some(op::WriteGuard::ReplaceIfVersion {
            version: r.version,
            target_key: (!r.target_key.is_empty()).then_some(r.target_key),
        }),
    }
}

pub(super) fn edit_guard(g: Option<v1::EditGuard>) -> Option<op::EditGuard> {
    g.map(|g| op::EditGuard {
        version: g.version,
        target_key: (!g.target_key.is_empty()).then_some(g.target_key),
    })
}

pub(super) fn stat(r: v1::StatRequest) -> op::Request {
    if r.check_write {
        return op::Request::CheckWrite { path: r.path, no_follow: r.no_follow };
    }
    op::Request::Stat { path: r.path, no_follow: r.no_follow }
}

pub(super) fn read_text(r: v1::ReadTextRequest) -> op::Request {
    op::Request::ReadText { path: r.path, max_bytes: r.max_bytes }
}

pub(super) fn read_bytes(r: v1::ReadBytesRequest) -> op::Request {
    op::Request::ReadBytes { path: r.path, max_bytes: r.max_bytes }
}

pub(super) fn list_dir(r: v1::ListDirRequest) -> op::Request {
    op::Request::ListDir { path: r.path }
}

pub(super) fn write_text(r: v1::WriteTextRequest) -> op::Request {
    op::Request::WriteText {
        path: r.path,
        content: r.content,
        guard: write_guard(r.guard),
        match_style: r.match_existing_style,
    }
}

pub(super) fn edit_text(r: v1::EditTextRequest) -> op::Request {
    op::Request::EditText {
        path: r.path,
        old: r.old_string,
        new: r.new_string,
        replace_all: r.replace_all,
        guard: edit_guard(r.guard),
    }
}

pub(super) fn move_file(r: v1::MoveFileRequest) -> op::Request {
    op::Request::MoveFile {
        source: r.source,
        destination: r.destination,
        source_guard: edit_guard(r.source_guard),
        destination_guard: write_guard(r.destination_guard),
        content: r.content,
    }
}

pub(super) fn delete_file(r: v1::DeleteFileRequest) -> op::Request {
    op::Request::DeleteFile { path: r.path, guard: edit_guard(r.guard) }
}

pub(super) fn remove(r: v1::RemoveRequest) -> op::Request {
    op::Request::Remove { path: r.path, recursive: r.recursive, guard: edit_guard(r.guard) }
}

pub(super) fn write_bytes(h: v1::WriteBytesHeader) -> op::Request {
    op::Request::WriteBytes { path: h.path, mode: h.mode, guard: write_guard(h.guard) }
}

/// A transaction: each operation as the single call's request says it. An operation with no
/// kind is refused by the caller (`None`).
pub(super) fn transact(r: v1::TransactRequest) -> Option<op::Request> {
    use crate::op::TxnOp;
    use v1::transact_operation::Kind;
    let ops = r.operations.into_iter().map(|op| {
        Some(match op.kind? {
            Kind::Write(w) => TxnOp::Write {
                path: w.path,
                content: w.content,
                guard: write_guard(w.guard),
                match_style: w.match_existing_style,
            },
            Kind::Edit(e) => TxnOp::Edit {
                path: e.path,
                old: e.old_string,
                new: e.new_string,
                replace_all: e.replace_all,
                guard: edit_guard(e.guard),
            },
            Kind::Delete(d) => TxnOp::Delete { path: d.path, guard: edit_guard(d.guard) },
            Kind::Patch(p) => TxnOp::Patch {
                path: p.path,
                hunks: p
                    .hunks
                    .into_iter()
                    .map(|h| op::Hunk {
                        context: h.context,
                        old_lines: h.old_lines,
                        new_lines: h.new_lines,
                        end_of_file: h.end_of_file,
                    })
                    .collect(),
                guard: edit_guard(p.guard),
            },
            Kind::Move(m) => TxnOp::Move {
                source: m.source,
                destination: m.destination,
                source_guard: edit_guard(m.source_guard),
                destination_guard: write_guard(m.destination_guard),
                content: m.content,
            },
        })
    });
    Some(op::Request::Transact { ops: ops.collect::<Option<Vec<_>>>()? })
}

/// Which operations of a transaction are patches: their outcomes, an edit's inside the
/// daemon, are answered as patches.
pub(super) fn patches(request: &op::Request) -> Vec<bool> {
    match request {
        op::Request::Transact { ops } => ops.iter().map(|o| matches!(o, op::TxnOp::Patch { .. })).collect(),
        _ => Vec::new(),
    }
}

/// A transaction's replies, in order; `patches` from [`patches`].
pub(super) fn transact_reply(outcome: Outcome, patches: &[bool]) -> Option<v1::TransactReply> {
    use v1::transact_result::Kind;
    let Outcome::Transact { outcomes } = outcome else { return None };
    let results = outcomes.into_iter().enumerate().map(|(i, outcome)| {
        let kind = match outcome {
            Outcome::EditText { target: t, version, replacements, change: c }
                if patches.get(i).copied().unwrap_or(false) =>
            {
                Kind::Patch(v1::PatchTextReply {
                    target: target(t),
                    version,
                    hunks: u32::try_from(replacements).unwrap_or(u32::MAX),
                    change: change(c),
                })
            }
            o @ Outcome::WriteText { .. } => Kind::Write(write_text_reply(o)?),
            o @ Outcome::EditText { .. } => Kind::Edit(edit_text_reply(o)?),
            o @ Outcome::DeleteFile { .. } => Kind::Delete(delete_file_reply(o)?),
            o @ Outcome::MoveFile { .. } => Kind::Move(move_file_reply(o)?),
            _ => return None,
        };
        Some(v1::TransactResult { kind: Some(kind) })
    });
    Some(v1::TransactReply { results: results.collect::<Option<Vec<_>>>()? })
}

pub(super) fn remove_reply(outcome: Outcome) -> Option<v1::RemoveReply> {
    let Outcome::Remove { target: t, removed } = outcome else { return None };
    Some(v1::RemoveReply { target: target(t), removed })
}

pub(super) fn write_bytes_reply(outcome: Outcome) -> Option<v1::WriteBytesReply> {
    let Outcome::WriteBytes { target: t, operation, version, size } = outcome else { return None };
    Some(v1::WriteBytesReply {
        target: target(t),
        operation: match operation {
            op::WriteOperation::Create => v1::WriteOperation::Create as i32,
            op::WriteOperation::Update => v1::WriteOperation::Update as i32,
        },
        version,
        size,
    })
}

/// A single call's failure, as an answer inside another reply (`Inspect`): the status as it
/// would have gone out, its details (the `ErrorInfo`) included.
pub(super) fn call_error(status: &tonic::Status) -> v1::CallError {
    v1::CallError {
        status: status.code() as i32,
        message: status.message().to_owned(),
        details: bytes::Bytes::copy_from_slice(status.details()),
    }
}

pub(super) fn stat_reply(outcome: Outcome) -> Option<v1::StatReply> {
    let Outcome::Stat { target: t, info, .. } = outcome else { return None };
    Some(v1::StatReply {
        target: target(t),
        info: info.map(|i| v1::FsInfo { version: i.version, r#type: file_type(i.file_type), size: i.size }),
    })
}

pub(super) fn read_text_reply(outcome: Outcome) -> Option<v1::ReadTextReply> {
    let Outcome::ReadText { target: t, version, text } = outcome else { return None };
    Some(v1::ReadTextReply { target: target(t), version, text })
}

pub(super) fn read_bytes_reply(outcome: Outcome) -> Option<v1::ReadBytesReply> {
    let Outcome::ReadBytes { target: t, version, data } = outcome else { return None };
    Some(v1::ReadBytesReply { target: target(t), version, data: data.into() })
}

pub(super) fn list_dir_reply(outcome: Outcome) -> Option<v1::ListDirReply> {
    let Outcome::ListDir { target: t, entries } = outcome else { return None };
    Some(v1::ListDirReply {
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
    })
}

pub(super) fn write_text_reply(outcome: Outcome) -> Option<v1::WriteTextReply> {
    let Outcome::WriteText { target: t, operation, version, change: c } = outcome else { return None };
    Some(v1::WriteTextReply {
        target: target(t),
        operation: match operation {
            op::WriteOperation::Create => v1::WriteOperation::Create as i32,
            op::WriteOperation::Update => v1::WriteOperation::Update as i32,
        },
        version,
        change: change(c),
    })
}

pub(super) fn edit_text_reply(outcome: Outcome) -> Option<v1::EditTextReply> {
    let Outcome::EditText { target: t, version, replacements, change: c } = outcome else { return None };
    Some(v1::EditTextReply {
        target: target(t),
        version,
        replacements: u32::try_from(replacements).unwrap_or(u32::MAX),
        change: change(c),
    })
}

pub(super) fn move_file_reply(outcome: Outcome) -> Option<v1::MoveFileReply> {
    let Outcome::MoveFile {
        source,
        destination,
        destination_version,
        source_change,
        destination_change,
        source_removal_errno,
    } = outcome
    else {
        return None;
    };
    Some(v1::MoveFileReply {
        source: target(source),
        destination: target(destination),
        destination_version,
        source_change: change(source_change),
        destination_change: change(destination_change),
        source_remains: source_removal_errno.is_some(),
        source_removal_error: source_removal_errno
            .map(|errno| {
                crate::error::FsError::Remove(crate::sys::Errno::from_raw_os_error(errno)).to_string()
            })
            .unwrap_or_default(),
        source_removal_errno: source_removal_errno.unwrap_or(0),
    })
}

pub(super) fn delete_file_reply(outcome: Outcome) -> Option<v1::DeleteFileReply> {
    let Outcome::DeleteFile { target: t, change: c } = outcome else { return None };
    Some(v1::DeleteFileReply { target: target(t), change: change(c) })
}

pub(super) fn stream_header(header: op::StreamHeader) -> v1::StreamTextReply {
    v1::StreamTextReply {
        item: Some(v1::stream_text_reply::Item::Header(v1::StreamHeader {
            target: target(header.target),
            version: header.version,
            size: header.size,
        })),
    }
}

pub(super) fn stream_trailer(version: String) -> v1::StreamTextReply {
    v1::StreamTextReply { item: Some(v1::stream_text_reply::Item::Trailer(v1::StreamTrailer { version })) }
}

pub(super) fn stream_chunk(bytes: bytes::Bytes) -> v1::StreamTextReply {
    v1::StreamTextReply { item: Some(v1::stream_text_reply::Item::Chunk(bytes)) }
}

/// The change record's listing as the wire carries it.
pub(super) fn changes_reply(changes: op::Changes) -> v1::ListChangesReply {
    let author = |a: op::Author| v1::ChangeAuthor {
        identity: a.identity,
        session_id: a.session.unwrap_or_default(),
        call_id: a.call.unwrap_or_default(),
        escalated: a.escalated,
    };
    v1::ListChangesReply {
        dropped_through: changes.dropped_through,
        dropped_changes: changes.dropped_changes,
        changes: changes
            .entries
            .into_iter()
            .map(|e| v1::RecordedChange {
                seq: e.seq,
                at_ms: e.at_ms,
                author: Some(author(e.author)),
                operation: e.op,
                targets: e.targets.into_iter().filter_map(target).collect(),
                failed: e.failed,
            })
            .collect(),
        files: changes.files.into_iter().map(changed_file).collect(),
    }
}

/// A rewind's outcome as the wire carries it.
pub(super) fn rewind_reply(rewound: op::Rewound) -> v1::RewindReply {
    let targets = |t: Vec<op::Target>| t.into_iter().filter_map(target).collect();
    v1::RewindReply {
        change: rewound.change,
        restored: targets(rewound.restored),
        conflicts: rewound.conflicts.into_iter().map(changed_file).collect(),
        replaced: targets(rewound.replaced),
        unrestorable: targets(rewound.unrestorable),
    }
}

/// A changed file as the wire carries it.
fn changed_file(f: op::FileDiff) -> v1::ChangedFile {
    {
        {
            let (visibility, diff) = match f.shown {
                op::Visible::Diff(diff) => (v1::ChangeVisibility::Diff, diff),
                op::Visible::Escalated => (v1::ChangeVisibility::Escalated, String::new()),
                op::Visible::NotReadable => (v1::ChangeVisibility::NotReadable, String::new()),
                op::Visible::NotText => (v1::ChangeVisibility::NotText, String::new()),
            };
            v1::ChangedFile {
                target: target(f.target),
                authors: f.authors,
                existed: f.existed,
                exists: f.exists,
                changed_outside: f.changed_outside,
                visibility: visibility as i32,
                diff,
            }
        }
    }
}
