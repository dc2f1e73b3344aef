//! The audit log: one JSON line per mutation and per escalation decision (time, session, client,
//! operation, path, mode, decision, result, and for approver decisions the description's digest). Never file contents. Opened before confinement; the
//! network process keeps only the descriptor (and the checkpoint key, read then). The lines form a
//! hash chain with signed checkpoints ([`fsd_proto::chain`]), which `fsd audit verify` checks.

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use ed25519_dalek::SigningKey;
use fsd_proto::chain::{CheckpointKind, LogKind, Writer};
use serde::Serialize;

#[derive(Debug)]
pub struct Audit {
    writer: Mutex<Writer>,
}

/// One audit record.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    pub time: String,
    pub session: &'a str,
    pub call: &'a str,
    /// The peer uid on a Unix socket, else the transport's identity.
    pub client: String,
    pub op: &'a str,
    /// The path the daemon acts on: resolved by the daemon where it resolved it, else the
    /// request's path with its name escapes decoded and empty and `.` components dropped (a
    /// path that is not absolute, as sent).
    pub path: &'a str,
    /// The path as the request wrote it, only when it differs from `path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_path: Option<&'a str>,
    pub mode: &'a str,
    /// "allowed", "denied", or for escalations "approved"/"refused".
    pub decision: &'a str,
    /// "ok" or the stable error code.
    pub result: &'a str,
    /// For escalation decisions: SHA-256 (hex) of the description the approver decided on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<&'a str>,
    /// For a signed approver's decision: who decided, as the approver signed it (`person`, or
    /// `rules FILE: rule N`); for its refusals, as it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<&'a str>,
}

impl Audit {
    /// Opens the log for appending and continues the chain where the file ends; a checkpoint is
    /// written after every `every` records, signed with `key` when there is one.
    pub fn open(path: &Path, every: u64, key: Option<SigningKey>) -> std::io::Result<Audit> {
        // Records name clients and paths: the daemon's user writes, its group (operators) reads.
        let file = std::os::unix::fs::OpenOptionsExt::mode(&mut std::fs::OpenOptions::new(), 0o640)
            .create(true)
            .append(true)
            .open(path)?;
        let writer = Writer::new(path, file, LogKind::Audit, every, key)?;
        Ok(Audit { writer: Mutex::new(writer) })
    }

    pub fn record(&self, entry: &Entry<'_>) {
        let Ok(line) = serde_json::to_string(entry) else { return };
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = writer.append(&line, &now()) {
            tracing::error!(error = %e, "cannot write the audit log");
        }
    }

    /// The shutdown checkpoint: the log ends sealed, so a cut after it is found.
    pub fn close(&self) {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = writer.checkpoint(CheckpointKind::Shutdown, &now()) {
            tracing::error!(error = %e, "cannot write the audit log's shutdown checkpoint");
        }
    }
}

/// Seconds and nanoseconds since the epoch, as RFC 3339-like UTC text without a time zone table.
pub fn now() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let civil = fsd_proto::time::Civil::from_unix(now.as_secs());
    format!("{}.{:06}Z", civil.format('T'), now.subsec_micros())
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_look_like_rfc3339() {
        let t = super::now();
        assert_eq!(t.len(), "2026-11-29T20:00:00.000000Z".len(), "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
    }
}
