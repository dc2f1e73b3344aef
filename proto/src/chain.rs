//! Tamper-evident JSON-lines logs: the daemon's audit log and the approver's decision log, one
//! writer and one verifier for both. Each record keeps its own fields and gains three at its end:
//! `seq` (1, 2, ...), `prev` (the previous record's `hash`, 64 zeros for the first) and `hash`,
//! the SHA-256 (hex) of the line's bytes before `,"hash":"` — so anyone can recompute it with
//! standard tools. Every `every` records and when the writer stops, a checkpoint record is
//! appended and signed with Ed25519 over its own bytes, which hold `prev` and so the whole chain
//! before it. Without the key, an edit, a reorder or a cut is found by [`verify`]; the records after
//! the last checkpoint are protected by the chain alone (anyone can recompute hashes), which is why
//! a log that does not end with a `shutdown` checkpoint is reported.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

/// Which log a checkpoint seals; it is part of what the signature covers, so a checkpoint of one
/// log cannot be passed off in the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    Audit,
    Decisions,
}

impl LogKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LogKind::Audit => "audit",
            LogKind::Decisions => "decisions",
        }
    }
}

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointKind {
    /// After every `every` records.
    Interval,
    /// When the writer stops; a log must end with one.
    Shutdown,
}

impl CheckpointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Interval => "interval",
            CheckpointKind::Shutdown => "shutdown",
        }
    }

    fn parse(text: &str) -> Option<CheckpointKind> {
        match text {
            "interval" => Some(CheckpointKind::Interval),
            "shutdown" => Some(CheckpointKind::Shutdown),
            _ => None,
        }
    }
}

/// Records between checkpoints unless configured: a signature costs tens of microseconds, and
/// at most this many records are protected by the chain alone.
pub const DEFAULT_EVERY: u64 = 100;

/// `,"hash":"` + 64 hex digits + `"}`.
const HASH_KEY: &str = ",\"hash\":\"";
const HASH_SUFFIX: usize = HASH_KEY.len() + 64 + 2;
/// `,"signature":"` + 128 hex digits + `"`.
const SIGNATURE_KEY: &str = ",\"signature\":\"";
const SIGNATURE_SUFFIX: usize = SIGNATURE_KEY.len() + 128 + 1;

/// The end of a chain: the last record's `seq` and `hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub seq: u64,
    pub hash: [u8; 32],
}

impl Link {
    /// Before the first record.
    pub const START: Link = Link { seq: 0, hash: [0; 32] };
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Adds `seq` and `prev` after `at` to one serialized JSON object (`{...}`, no whitespace around).
fn body(object: &str, at: Link) -> Option<String> {
    let open = object.strip_suffix('}')?;
    if !open.starts_with('{') {
        return None;
    }
    let comma = if open == "{" { "" } else { "," };
    Some(format!("{open}{comma}\"seq\":{},\"prev\":\"{}\"", at.seq + 1, hex::encode(at.hash)))
}

/// Closes a body with its hash; the link after it.
fn finish(body: String, at: Link) -> (String, Link) {
    let hash = sha256(body.as_bytes());
    (format!("{body}{HASH_KEY}{}\"}}", hex::encode(hash)), Link { seq: at.seq + 1, hash })
}

/// One record as the line the log holds (without its newline), and the link after it.
pub fn seal(object: &str, at: Link) -> Option<(String, Link)> {
    Some(finish(body(object, at)?, at))
}

/// What a checkpoint's signature covers: the domain, the log, the checkpoint's bytes up to its
/// `,"signature":"`.
fn signed_bytes(log: LogKind, body: &str) -> Vec<u8> {
    format!("fsd log checkpoint v1\n{}\n{body}", log.as_str()).into_bytes()
}

/// A checkpoint record after `at`: its kind, the interval, the public key (when signed), and the
/// signature.
pub fn checkpoint(
    log: LogKind,
    kind: CheckpointKind,
    every: u64,
    time: &str,
    key: Option<&SigningKey>,
    at: Link,
) -> (String, Link) {
    let mut head = serde_json::json!({
        "time": time,
        "checkpoint": kind.as_str(),
        "log": log.as_str(),
        "every": every,
    });
    if let (Some(key), Some(object)) = (key, head.as_object_mut()) {
        object.insert("key".into(), hex::encode(key.verifying_key().to_bytes()).into());
    }
    // A JSON object always serializes as `{...}`.
    let mut body = body(&head.to_string(), at).unwrap_or_default();
    if let Some(key) = key {
        let signature = key.sign(&signed_bytes(log, &body));
        body = format!("{body}{SIGNATURE_KEY}{}\"", hex::encode(signature.to_bytes()));
    }
    finish(body, at)
}

/// Where an existing log ends, so a writer that starts again continues its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    /// The last complete line's link. A last line that is not a chained record (a log from
    /// before chaining) starts a new chain, which [`verify`] reports there.
    pub at: Link,
    /// Records after the last checkpoint; `None` when none is in the part of the file read.
    pub since: Option<u64>,
    /// The file ends in the middle of a line (a writer killed while writing).
    pub cut: bool,
}

/// Reads the end of the log at `path` (a missing file is an empty log).
pub fn resume(path: &Path) -> std::io::Result<Resumed> {
    /// Far more than the records between two checkpoints at the default interval.
    const TAIL: u64 = 1 << 20;
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Resumed { at: Link::START, since: Some(0), cut: false });
        }
        Err(e) => return Err(e),
    };
    let len = file.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(TAIL);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let cut = !tail.is_empty() && !tail.ends_with(b"\n");
    let Some(end) = tail.iter().rposition(|b| *b == b'\n') else {
        return Ok(Resumed { at: Link::START, since: (start == 0).then_some(0), cut });
    };
    // The first line of a tail that starts inside the file may be cut by the seek: never read.
    let mut complete: Vec<&[u8]> = tail[..end].split(|b| *b == b'\n').collect();
    if start > 0 {
        complete.remove(0);
    }
    let parsed = |line: &[u8]| std::str::from_utf8(line).ok().and_then(|line| record(line).ok());
    let at = complete.last().and_then(|line| parsed(line)).map_or(Link::START, |r| r.link);
    let mut since = 0;
    let mut found = start == 0;
    for line in complete.iter().rev() {
        if parsed(line).is_some_and(|r| r.value.get("checkpoint").is_some()) {
            found = true;
            break;
        }
        since += 1;
    }
    Ok(Resumed { at, since: found.then_some(since), cut })
}

/// A chained log being written: a file opened for appending, and where its chain ends.
#[derive(Debug)]
pub struct Writer {
    file: std::fs::File,
    at: Link,
    log: LogKind,
    every: u64,
    key: Option<SigningKey>,
    /// Records since the last checkpoint.
    since: u64,
    /// A line left cut by a writer before: the next record starts on a line of its own.
    cut: bool,
}

impl Writer {
    /// Continues the chain of the log at `path`, appended through `file`; `every` is at least 1.
    pub fn new(
        path: &Path,
        file: std::fs::File,
        log: LogKind,
        every: u64,
        key: Option<SigningKey>,
    ) -> std::io::Result<Writer> {
        let every = every.max(1);
        let Resumed { at, since, cut } = resume(path)?;
        // Without a checkpoint in sight, the next record is followed by one.
        let since = since.unwrap_or(every);
        Ok(Writer { file, at, log, every, key, since, cut })
    }

    fn write(&mut self, line: &str, next: Link) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 2);
        if self.cut {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // One write of the whole line (the file is O_APPEND); the chain moves on only once the
        // line is in the file, so a failed write leaves no gap in it.
        self.file.write_all(&bytes)?;
        self.cut = false;
        self.at = next;
        Ok(())
    }

    /// Appends one record (a serialized JSON object), then a checkpoint when its turn has come;
    /// that checkpoint, when one was written.
    pub fn append(&mut self, object: &str, time: &str) -> std::io::Result<Option<Sealed>> {
        let (line, next) = seal(object, self.at)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a JSON object"))?;
        self.write(&line, next)?;
        self.since += 1;
        if self.since >= self.every {
            return self.checkpoint(CheckpointKind::Interval, time).map(Some);
        }
        Ok(None)
    }

    /// Appends a checkpoint now.
    pub fn checkpoint(&mut self, kind: CheckpointKind, time: &str) -> std::io::Result<Sealed> {
        let (line, next) = checkpoint(self.log, kind, self.every, time, self.key.as_ref(), self.at);
        self.write(&line, next)?;
        self.since = 0;
        Ok(Sealed { kind, link: next })
    }
}

/// A checkpoint just written. Its writer logs it (stderr, so journald by default): a copy of its
/// `hash` kept off the host is what `--expect-checkpoint` checks a log against later, the one
/// way to find a log cut back to an earlier checkpoint, which verifies as whole and signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub kind: CheckpointKind,
    pub link: Link,
}

impl Sealed {
    /// The checkpoint's `hash`, as the log and `--expect-checkpoint` spell it.
    pub fn hash_hex(&self) -> String {
        hex::encode(self.link.hash)
    }
}

/// A line's chain fields, checked against its own hash.
struct Record {
    link: Link,
    prev: [u8; 32],
    value: serde_json::Value,
    /// The bytes before `,"hash":"`.
    body: String,
}

fn hash_field(text: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

fn record(line: &str) -> Result<Record, Why> {
    let split = line.len().checked_sub(HASH_SUFFIX).ok_or(Why::NotARecord)?;
    let (body, suffix) = (line.get(..split).ok_or(Why::NotARecord)?, &line[split..]);
    let hash = suffix
        .strip_prefix(HASH_KEY)
        .and_then(|s| s.strip_suffix("\"}"))
        .and_then(hash_field)
        .ok_or(Why::NotARecord)?;
    // The hash first: an edit that also breaks the JSON is still an edit.
    if sha256(body.as_bytes()) != hash {
        return Err(Why::Edited);
    }
    let value: serde_json::Value = serde_json::from_str(line).map_err(|_| Why::NotARecord)?;
    let seq = value.get("seq").and_then(serde_json::Value::as_u64).ok_or(Why::NotARecord)?;
    let prev = value.get("prev").and_then(serde_json::Value::as_str).and_then(hash_field);
    let prev = prev.ok_or(Why::NotARecord)?;
    Ok(Record { link: Link { seq, hash }, prev, value, body: body.to_owned() })
}

/// Why a log fails verification, said of its first broken line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("not a chained record (not JSON, or without seq, prev and hash at its end)")]
    NotARecord,
    #[error("edited: the record does not match its hash")]
    Edited,
    #[error(
        "edited: its prev is not the hash of the record before it (a record was changed and the hashes after it recomputed)"
    )]
    Relinked,
    #[error("reordered: record {found} where record {expected} belongs")]
    Reordered { found: u64, expected: u64 },
    #[error("records missing: record {found} where record {expected} belongs")]
    Missing { found: u64, expected: u64 },
    #[error("truncated: the line is cut short")]
    Cut,
    #[error(
        "truncated: the log ends without a shutdown checkpoint (cut, or its writer still runs or was killed); {uncovered} records after the last checkpoint are covered by no signature"
    )]
    Unclosed { uncovered: u64 },
    #[error("missing checkpoint: more than {every} records since the last one")]
    MissingCheckpoint { every: u64 },
    #[error("bad signature: the checkpoint is not signed by {key}")]
    BadSignature { key: String },
    #[error("unsigned checkpoint: a public key was given, so every checkpoint must be signed")]
    Unsigned,
    #[error(
        "records missing: the log does not hold the expected checkpoint {hash} (cut back to an earlier checkpoint, or rewritten)"
    )]
    ExpectedCheckpoint { hash: String },
}

/// The first broken line (1-based) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct Broken {
    pub line: usize,
    pub why: Why,
}

/// What an intact log holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verified {
    /// Records other than checkpoints.
    pub records: u64,
    pub checkpoints: u64,
    /// The public keys the checkpoints name (hex), in the order first seen; with a trusted key,
    /// only that key.
    pub keys: Vec<String>,
    /// Checkpoints without a signature (a writer without a key).
    pub unsigned: u64,
}

/// The seq of a line, when it has one, for telling a reorder from a removal.
fn seq_of(line: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(line).ok()?.get("seq")?.as_u64()
}

/// Checks a whole log: every line a chained record matching its hash, in order, with none
/// missing; a checkpoint at least every `every` records, each signed by `trusted` when given (else
/// by the key it names); the last record a shutdown checkpoint.
pub fn verify(text: &[u8], log: LogKind, trusted: Option<&VerifyingKey>) -> Result<Verified, Broken> {
    verify_expecting(text, log, trusted, &[])
}

/// [`verify`], and every checkpoint hash in `expected` (copies kept elsewhere, from the writer's
/// log lines) must be a checkpoint of the log. Without them, a log cut back to an earlier
/// checkpoint (a previous run's `shutdown` one) is a whole signed log: only a hash from after
/// the cut shows records are gone.
pub fn verify_expecting(
    text: &[u8],
    log: LogKind,
    trusted: Option<&VerifyingKey>,
    expected: &[[u8; 32]],
) -> Result<Verified, Broken> {
    let mut lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    let cut = lines.last().is_some_and(|l| !l.is_empty());
    if !cut {
        lines.pop();
    }
    let texts: Vec<Option<&str>> = lines.iter().map(|l| std::str::from_utf8(l).ok()).collect();
    let mut at = Link::START;
    let mut verified = Verified::default();
    // Records since the last checkpoint, and the interval the last checkpoint named.
    let (mut since, mut every) = (0u64, 0u64);
    let mut closed = false;
    let mut missing: Vec<&[u8; 32]> = expected.iter().collect();
    for (index, line) in texts.iter().enumerate() {
        let number = index + 1;
        let broken = |why| Broken { line: number, why };
        if cut && number == texts.len() {
            return Err(broken(Why::Cut));
        }
        let record = record(line.ok_or(broken(Why::NotARecord))?).map_err(broken)?;
        let expected = at.seq + 1;
        if record.link.seq != expected {
            let found = record.link.seq;
            let later = texts[number..].iter().any(|l| l.and_then(seq_of) == Some(expected));
            let why = if found < expected || later {
                Why::Reordered { found, expected }
            } else {
                Why::Missing { found, expected }
            };
            return Err(broken(why));
        }
        if record.prev != at.hash {
            return Err(broken(Why::Relinked));
        }
        let kind = record.value.get("checkpoint").and_then(serde_json::Value::as_str);
        match kind {
            None => {
                verified.records += 1;
                since += 1;
                closed = false;
            }
            Some(kind) => {
                let kind = CheckpointKind::parse(kind).ok_or(broken(Why::NotARecord))?;
                let named = record.value.get("every").and_then(serde_json::Value::as_u64).unwrap_or(0);
                // The interval may have changed with a restart: the larger of the two applies.
                let allowed = named.max(every).max(1);
                if since > allowed {
                    let line = number - usize::try_from(since - allowed).unwrap_or(0);
                    return Err(Broken { line, why: Why::MissingCheckpoint { every: allowed } });
                }
                check_signature(&record, log, trusted, &mut verified).map_err(broken)?;
                missing.retain(|hash| **hash != record.link.hash);
                verified.checkpoints += 1;
                (since, every) = (0, named);
                closed = kind == CheckpointKind::Shutdown;
            }
        }
        at = record.link;
    }
    // Before the end's own verdict: records known to be gone say more than a missing seal,
    // which a crash leaves too.
    if let Some(hash) = missing.first() {
        let why = Why::ExpectedCheckpoint { hash: hex::encode(hash) };
        return Err(Broken { line: texts.len() + 1, why });
    }
    if !closed {
        return Err(Broken { line: texts.len() + 1, why: Why::Unclosed { uncovered: since } });
    }
    Ok(verified)
}

fn check_signature(
    record: &Record,
    log: LogKind,
    trusted: Option<&VerifyingKey>,
    verified: &mut Verified,
) -> Result<(), Why> {
    let named = record.value.get("key").and_then(serde_json::Value::as_str);
    let Some(split) = record.body.len().checked_sub(SIGNATURE_SUFFIX) else {
        return unsigned(trusted, verified);
    };
    let Some(signature) = record
        .body
        .get(split..)
        .and_then(|s| s.strip_prefix(SIGNATURE_KEY))
        .and_then(|s| s.strip_suffix('"'))
        .and_then(|s| hex::decode(s).ok())
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return unsigned(trusted, verified);
    };
    let key = match trusted {
        Some(key) => *key,
        None => named
            .and_then(hash_field)
            .and_then(|k| VerifyingKey::from_bytes(&k).ok())
            .ok_or(Why::BadSignature { key: named.unwrap_or("the key it names").to_owned() })?,
    };
    let key_hex = hex::encode(key.to_bytes());
    let signed = signed_bytes(log, &record.body[..split]);
    if key.verify(&signed, &Signature::from_bytes(&signature)).is_err() {
        return Err(Why::BadSignature { key: key_hex });
    }
    if !verified.keys.contains(&key_hex) {
        verified.keys.push(key_hex);
    }
    Ok(())
}

fn unsigned(trusted: Option<&VerifyingKey>, verified: &mut Verified) -> Result<(), Why> {
    if trusted.is_some() {
        return Err(Why::Unsigned);
    }
    verified.unsigned += 1;
    Ok(())
}

/// What `fsd audit verify` and `fsd-approver verify-log` say about a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0; the line for stdout.
    Intact(String),
    /// Exit 1; the line for stdout: `FILE:LINE: why`.
    Broken(String),
    /// Exit 2: the file or the key could not be read.
    Failed(String),
}

/// Verifies the log at `path`, checking its checkpoints against `public_key` (hex, or a file
/// holding it) when given, and that it holds each checkpoint hash in `expected` (64 hex digits).
pub fn verify_file(path: &Path, log: LogKind, public_key: Option<&str>, expected: &[String]) -> Verdict {
    let trusted = match public_key.map(read_public_key).transpose() {
        Ok(key) => key,
        Err(e) => return Verdict::Failed(e.to_string()),
    };
    let mut hashes = Vec::with_capacity(expected.len());
    for given in expected {
        match hash_field(given.trim()) {
            Some(hash) => hashes.push(hash),
            None => {
                return Verdict::Failed(format!(
                    "{given:?} is not a checkpoint hash: expected 64 hex digits (a checkpoint's \"hash\")"
                ));
            }
        }
    }
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) => return Verdict::Failed(format!("cannot read {}: {e}", path.display())),
    };
    match verify_expecting(&text, log, trusted.as_ref(), &hashes) {
        Err(broken) => Verdict::Broken(format!("{}:{}: {}", path.display(), broken.line, broken.why)),
        Ok(v) => {
            let mut line =
                format!("{}: intact: {} records, {} checkpoints", path.display(), v.records, v.checkpoints);
            if !v.keys.is_empty() {
                line.push_str(&format!(", signed by {}", v.keys.join(", ")));
                if trusted.is_none() {
                    line.push_str(
                        " (the key the log names: pass --public-key to check it is the expected one)",
                    );
                }
            }
            if v.unsigned > 0 {
                line.push_str(&format!(", {} unsigned (the writer had no key)", v.unsigned));
            }
            if !hashes.is_empty() {
                line.push_str(&format!(", holds every expected checkpoint ({})", hashes.len()));
            }
            Verdict::Intact(line)
        }
    }
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error("{0} does not hold a key (64 hex digits)")]
    NotAKey(PathBuf),
    #[error("{0} is a public key: a signing key is the private one (mode 0600)")]
    Public(PathBuf),
    #[error("{0} is readable by other users: a private key must be mode 0600")]
    Open(PathBuf),
    #[error("{0:?} is not a public key: expected 64 hex digits or a file holding them")]
    NotAPublicKey(String),
}

fn key_bytes(text: &str) -> Option<[u8; 32]> {
    hash_field(text.trim())
}

/// A private key file as `fsd-approver keygen` writes it (64 hex digits, mode 0600).
pub fn read_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    use std::os::unix::fs::PermissionsExt;
    if path.extension().is_some_and(|e| e == "pub") {
        return Err(KeyError::Public(path.to_owned()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| KeyError::Io(path.to_owned(), e))?;
    let seed = key_bytes(&text).ok_or_else(|| KeyError::NotAKey(path.to_owned()))?;
    let mode = std::fs::metadata(path).map_err(|e| KeyError::Io(path.to_owned(), e))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(KeyError::Open(path.to_owned()));
    }
    Ok(SigningKey::from_bytes(&seed))
}

/// A public key given as 64 hex digits, or as a file holding them (`approver.pub`).
pub fn read_public_key(given: &str) -> Result<VerifyingKey, KeyError> {
    let bad = || KeyError::NotAPublicKey(given.to_owned());
    let bytes = match key_bytes(given) {
        Some(bytes) => bytes,
        None => {
            let path = Path::new(given);
            let text = std::fs::read_to_string(path).map_err(|e| KeyError::Io(path.to_owned(), e))?;
            key_bytes(&text).ok_or_else(bad)?
        }
    };
    VerifyingKey::from_bytes(&bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests;
