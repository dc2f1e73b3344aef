//! The change record's calls (docs/rewind.md): Checkpoint and ListChanges, in domain types.

use fsd_proto::v1;

use super::{Daemon, DaemonError, Reply, Target};

/// Which changes a listing asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangesQuery {
    /// The point: changes after it (0: every change kept).
    pub since: u64,
    /// Only this session's changes.
    pub this_session: bool,
    /// Another identity's (`*`: every identity's); `None`: the caller's own.
    pub identity: Option<String>,
}

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedChange {
    pub seq: u64,
    pub at_ms: u64,
    pub identity: String,
    pub session: String,
    pub call: String,
    pub escalated: bool,
    pub operation: String,
    pub targets: Vec<Target>,
    /// The call answered an error, yet its change reached the disk.
    pub failed: bool,
}

/// What a listing shows of a changed file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// The unified diff from the point to now (empty: the same content).
    Diff(String),
    Escalated,
    NotReadable,
    NotText,
}

/// A file changed since the point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    pub target: Target,
    pub authors: Vec<String>,
    pub existed: bool,
    pub exists: bool,
    pub changed_outside: bool,
    pub visibility: Visibility,
}

/// The changes after a point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeListing {
    pub dropped_through: Option<u64>,
    pub dropped_changes: u64,
    pub changes: Vec<RecordedChange>,
    pub files: Vec<ChangedFile>,
}

/// What a rewind did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewound {
    /// The rewind's own change in the record (none when nothing was restored).
    pub change: Option<u64>,
    pub restored: Vec<Target>,
    /// Left as they are: changed since by someone the record did not see.
    pub conflicts: Vec<ChangedFile>,
    /// Restored over such a change; the version replaced is in the rewind's change.
    pub replaced: Vec<Target>,
    pub unrestorable: Vec<Target>,
}

impl Daemon {
    /// Restores the files the selected changes after a point changed (`keep_checkpoint`: over
    /// a change the record did not see too).
    pub async fn rewind(&mut self, query: &ChangesQuery, keep_checkpoint: bool) -> Reply<Rewound> {
        let request = v1::RewindRequest {
            context: self.context(),
            since: query.since,
            this_session: query.this_session,
            identity: query.identity.clone().unwrap_or_default(),
            keep_checkpoint,
        };
        let reply = self.client.rewind(request).await.map_err(DaemonError::from_status)?.into_inner();
        let targets = |t: Vec<v1::Target>| t.into_iter().map(|t| Target::from(Some(t))).collect();
        Ok(Rewound {
            change: reply.change,
            restored: targets(reply.restored),
            conflicts: reply.conflicts.into_iter().map(changed_file).collect(),
            replaced: targets(reply.replaced),
            unrestorable: targets(reply.unrestorable),
        })
    }

    /// Names a point in the daemon's change record: its id.
    pub async fn checkpoint(&mut self, label: &str) -> Reply<u64> {
        let request = v1::CheckpointRequest { context: self.context(), label: label.to_owned() };
        Ok(self.client.checkpoint(request).await.map_err(DaemonError::from_status)?.into_inner().id)
    }

    /// The changes recorded after a point, and each changed file's diff.
    pub async fn list_changes(&mut self, query: &ChangesQuery) -> Reply<ChangeListing> {
        let request = v1::ListChangesRequest {
            context: self.context(),
            since: query.since,
            this_session: query.this_session,
            identity: query.identity.clone().unwrap_or_default(),
        };
        let reply = self.client.list_changes(request).await.map_err(DaemonError::from_status)?.into_inner();
        Ok(ChangeListing {
            dropped_through: reply.dropped_through,
            dropped_changes: reply.dropped_changes,
            changes: reply
                .changes
                .into_iter()
                .map(|c| {
                    let author = c.author.unwrap_or_default();
                    RecordedChange {
                        seq: c.seq,
                        at_ms: c.at_ms,
                        identity: author.identity,
                        session: author.session_id,
                        call: author.call_id,
                        escalated: author.escalated,
                        operation: c.operation,
                        targets: c.targets.into_iter().map(|t| Target::from(Some(t))).collect(),
                        failed: c.failed,
                    }
                })
                .collect(),
            files: reply.files.into_iter().map(changed_file).collect(),
        })
    }
}

/// A changed file off the wire.
fn changed_file(f: v1::ChangedFile) -> ChangedFile {
    let visibility = match v1::ChangeVisibility::try_from(f.visibility) {
        Ok(v1::ChangeVisibility::Diff) => Visibility::Diff(f.diff),
        Ok(v1::ChangeVisibility::Escalated) => Visibility::Escalated,
        Ok(v1::ChangeVisibility::NotReadable) => Visibility::NotReadable,
        // Unspecified, or a kind newer than this client: nothing shown.
        _ => Visibility::NotText,
    };
    ChangedFile {
        target: f.target.into(),
        authors: f.authors,
        existed: f.existed,
        exists: f.exists,
        changed_outside: f.changed_outside,
        visibility,
    }
}
