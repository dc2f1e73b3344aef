//! The audit log: one JSON line per mutation and per escalation decision (time, session, client,
//! operation, path, mode, decision, result, and for approver decisions the description's digest). Never file contents. Opened before confinement; the
//! network process keeps only the descriptor (and the checkpoint key, read then). The lines form a
//! hash chain with signed checkpoints ([`fsd_proto::chain`]), which `fsd audit verify` checks.
//! The checkpoints are always signed: with `audit_signing_key`, else with the daemon's own key,
//! which the supervisor makes once in `state_dir` ([`signing_key`]).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ed25519_dalek::SigningKey;
use fsd_proto::chain::{CheckpointKind, LogKind, Sealed, Writer};
use serde::Serialize;

use crate::config::Config;
use crate::daemon::DaemonError;

/// The daemon's own key pair under `state_dir`: a directory of the supervisor's user alone
/// (0700), so neither a worker (another user, or Landlock) nor the network process (no
/// filesystem after confinement, and it never opens it: the key comes in its start frame) reads it.
pub const KEY_DIR: &str = "audit-key";
/// The private key, as `fsd-approver keygen` writes one (64 hex digits, 0600).
pub const KEY_FILE: &str = "audit.key";
/// Its public key, for `fsd audit verify --public-key`.
pub const PUBLIC_FILE: &str = "audit.pub";

/// Where the key that signs the audit log's checkpoints comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `audit_signing_key`.
    Configured(PathBuf),
    /// The daemon's own, kept in `state_dir` across restarts (the private key's path).
    StateDir(PathBuf),
    /// No `state_dir` to keep one in: a key of this run only, never written anywhere.
    ThisRun,
}

/// The supervisor's choice of the audit log's key: the configured one first; else the daemon's
/// own in `state_dir`, made at the first start and reused after; else one for this run. `None`
/// without an audit log.
pub fn signing_key(config: &Config) -> Result<Option<(SigningKey, KeySource)>, DaemonError> {
    if config.audit_log.is_none() {
        return Ok(None);
    }
    let chosen = match (&config.audit_signing_key, &config.state_dir) {
        (Some(path), _) => (
            fsd_proto::chain::read_signing_key(path).map_err(DaemonError::AuditKey)?,
            KeySource::Configured(path.clone()),
        ),
        (None, Some(state)) => {
            let dir = state.join(KEY_DIR);
            let failed = |source| DaemonError::AuditKeyDir { path: dir.clone(), source };
            (own_key(&dir).map_err(failed)?, KeySource::StateDir(dir.join(KEY_FILE)))
        }
        (None, None) => (SigningKey::from_bytes(&random_seed()?), KeySource::ThisRun),
    };
    Ok(Some(chosen))
}

/// Logs the public key, so that a copy of it reaches the journal; once the daemon serves (a
/// start that fails is one line, its cause).
pub fn announce(key: &SigningKey, source: &KeySource) {
    let public = hex::encode(key.verifying_key().to_bytes());
    match source {
        KeySource::Configured(path) => tracing::info!(
            key = %public,
            audit_signing_key = %path.display(),
            "the audit log's checkpoints are signed by this key"
        ),
        KeySource::StateDir(path) => tracing::info!(
            key = %public,
            private_key = %path.display(),
            "the audit log's checkpoints are signed by the daemon's own key"
        ),
        KeySource::ThisRun => tracing::warn!(
            key = %public,
            "the audit log's checkpoints are signed by a key of this run only (no audit_signing_key, no state_dir to keep one in)"
        ),
    }
}

fn random_seed() -> Result<[u8; 32], DaemonError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(DaemonError::NoAuditKey)?;
    Ok(seed)
}

/// The daemon's own key in `dir` (`state_dir/audit-key`), made when there is none yet. The
/// directory and the key must be the supervisor's user's: one planted by another user is refused.
fn own_key(dir: &Path) -> std::io::Result<SigningKey> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let (uid, _) = crate::sys::effective_ids();
    let ours = |path: &Path, dir: bool| -> std::io::Result<()> {
        let meta = std::fs::symlink_metadata(path)?;
        let kind = if dir { meta.is_dir() } else { meta.is_file() };
        if !kind || meta.uid() != uid {
            let what = if dir { "a directory" } else { "a file" };
            return Err(std::io::Error::other(format!(
                "{} is not {what} of the daemon's user (uid {uid})",
                path.display()
            )));
        }
        Ok(())
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    ours(dir, true)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(KEY_FILE);
    if !path.exists() {
        // Written whole under a temporary name, then linked to its name, which fails if another
        // start made one meanwhile: a key file is never seen half-written.
        let seed = random_seed().map_err(std::io::Error::other)?;
        let temp = dir.join(format!(".{KEY_FILE}.{}", std::process::id()));
        let _ = std::fs::remove_file(&temp);
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        writeln!(file, "{}", hex::encode(seed))?;
        file.sync_all()?;
        let linked = std::fs::hard_link(&temp, &path);
        std::fs::remove_file(&temp)?;
        match linked {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        std::fs::File::open(dir)?.sync_all()?;
    }
    ours(&path, false)?;
    let key = fsd_proto::chain::read_signing_key(&path).map_err(std::io::Error::other)?;
    // The public key beside it, for `fsd audit verify --public-key`; rewritten if it differs.
    let public = format!("{}\n", hex::encode(key.verifying_key().to_bytes()));
    let public_path = dir.join(PUBLIC_FILE);
    if std::fs::read_to_string(&public_path).ok().as_deref() != Some(public.as_str()) {
        std::fs::write(&public_path, &public)?;
        std::fs::set_permissions(&public_path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(key)
}

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
    /// written after every `every` records, signed with `key` when there is one (always, from
    /// the supervisor's [`signing_key`]).
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
        match writer.append(&line, &now()) {
            Ok(Some(sealed)) => said(&sealed),
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "cannot write the audit log"),
        }
    }

    /// The shutdown checkpoint: the log ends sealed, so a cut after it is found.
    pub fn close(&self) {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        match writer.checkpoint(CheckpointKind::Shutdown, &now()) {
            Ok(sealed) => said(&sealed),
            Err(e) => tracing::error!(error = %e, "cannot write the audit log's shutdown checkpoint"),
        }
    }
}

/// One log line (stderr: the journal, under systemd) for each checkpoint: its hash, kept off this
/// host, is what `fsd audit verify --expect-checkpoint` checks the file against later, the one
/// way to find the log cut back to an earlier checkpoint.
fn said(sealed: &Sealed) {
    tracing::info!(
        checkpoint = sealed.kind.as_str(),
        seq = sealed.link.seq,
        hash = %sealed.hash_hex(),
        "audit log checkpoint"
    );
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
