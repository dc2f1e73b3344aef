//! The configuration file's form: every key optional, unknown keys refused, and a TOML error
//! reported as one line with its place.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

/// The file form: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<Vec<String>>,
    pub writable_roots: Option<Vec<PathBuf>>,
    pub readable_roots: Option<Vec<PathBuf>>,
    pub protected_names: Option<Vec<String>>,
    /// Globs of paths no call may read, change, move or delete, at any mode.
    pub read_denied: Option<Vec<String>>,
    /// Mounts below a root that resolution may enter (any other mount below a root is refused).
    pub allow_submounts: Option<Vec<PathBuf>>,
    /// Accept `\\` in path names (refused by default: a Windows path would become a literal name).
    pub allow_backslash: Option<bool>,
    pub default_mode: Option<String>,
    pub max_mode: Option<String>,
    pub escalation: Option<String>,
    /// Ed25519 public key of the approver (64 hex digits), for `escalation = "signed"`.
    pub approver_public_key: Option<String>,
    /// How long a described escalation may be used (seconds, default 120).
    pub escalation_ttl_secs: Option<u64>,
    /// Where the daemon asks its approver (`fsd-approver serve`), for `escalation = "signed"`:
    /// `unix:PATH` or `tcp:HOST:PORT`.
    pub approver_endpoint: Option<String>,
    /// A file holding the bearer token this daemon presents to its approver (an approver with
    /// `[[daemon]]` entries names the sandbox by it).
    pub approver_token_file: Option<PathBuf>,
    /// PEM bundle of the CAs the approver's certificate must chain to: a `tcp:` approver
    /// endpoint speaks TLS with it (and needs it off loopback).
    pub approver_ca_file: Option<PathBuf>,
    /// This daemon's client certificate chain (PEM) for the approver (mutual TLS): an approver
    /// with `[[daemon]]` entries names the sandbox by it.
    pub approver_client_cert: Option<PathBuf>,
    /// The private key (PEM) of `approver_client_cert`.
    pub approver_client_key: Option<PathBuf>,
    pub log_format: Option<String>,
    /// Permission bits of every Unix socket the daemon listens on (octal text, default "0660").
    pub socket_mode: Option<String>,
    /// Group of those sockets: a name from /etc/group or a number (default: the daemon's).
    pub socket_group: Option<String>,
    pub max_message_bytes: Option<u64>,
    pub max_editable_file_bytes: Option<u64>,
    pub max_read_bytes: Option<u64>,
    pub max_diff_text_bytes: Option<u64>,
    pub max_dir_entries: Option<usize>,
    pub landlock: Option<String>,
    /// What to do when the confined modes need the kernel's link protection and it is off:
    /// "enable" (default: turn it on, logged) or "require" (refuse to start).
    pub link_protection: Option<String>,
    pub workers_per_mode: Option<usize>,
    /// Serve plain reads in the network process's confined read threads (default true).
    pub direct_reads: Option<bool>,
    /// Run direct reads on the runtime thread that received them, where every root is on a
    /// local filesystem (default true).
    pub inline_reads: Option<bool>,
    pub worker_uid: Option<u32>,
    pub worker_gid: Option<u32>,
    pub call_timeout_ms: Option<u64>,
    /// How long SIGTERM may take in total before stuck children are killed (default 10000).
    pub shutdown_grace_ms: Option<u64>,
    pub audit_log: Option<PathBuf>,
    /// The Ed25519 private key (64 hex digits, mode 0600) that signs the audit log's checkpoints.
    pub audit_signing_key: Option<PathBuf>,
    /// Audit records between two signed checkpoints (default 100).
    pub audit_checkpoint_every: Option<u64>,
    /// Highest mode per client, keyed by identity: `uid:1000` (or a bare `1000`, the Unix peer
    /// uid), `cert:NAME` (a verified client certificate's SAN or CN), `token:NAME`, `tcp` (every
    /// plaintext loopback TCP client; read-only without an entry), `pod` (every caller of an
    /// `http+pod:` listener; read-only without an entry).
    pub client_max_modes: Option<std::collections::BTreeMap<String, String>>,
    /// TLS for every `tcp:` listener: the PEM certificate chain and private key.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// PEM bundle of the CAs whose client certificates are accepted (mutual TLS).
    pub tls_client_ca: Option<PathBuf>,
    /// `"required"` (the default with `tls_client_ca`) or `"optional"` (then a bearer token
    /// stands in for a missing certificate).
    pub tls_client_cert: Option<String>,
    /// Bearer tokens (accepted only over TLS), by name.
    pub tokens: Option<std::collections::BTreeMap<String, TokenFile>>,
    /// A plaintext listener that serves only `grpc.health.v1` (for orchestrator probes) and
    /// `GET /metrics` (Prometheus).
    pub health_listen: Option<String>,
    /// The `http+pod:` listeners on which bearer tokens are accepted, in plaintext: a list of
    /// their spellings, or `true` for the one there is (default none: a token sent there is
    /// refused, as over any plaintext listener).
    pub pod_network_tokens: Option<PodNetworkTokens>,
    /// Connection limits of TCP listeners.
    pub max_connections: Option<usize>,
    /// Connection limits of each Unix-socket listener: in total, and per peer uid.
    pub max_unix_connections: Option<usize>,
    pub max_unix_connections_per_uid: Option<usize>,
    pub max_concurrent_streams: Option<u32>,
    pub max_calls_per_connection: Option<usize>,
    pub keepalive_interval_ms: Option<u64>,
    pub keepalive_timeout_ms: Option<u64>,
    pub handshake_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    /// The directory the REST face's `/v1/files/{path}` is relative to (a configured root;
    /// default: the first writable root).
    pub rest_root: Option<PathBuf>,
    /// The largest body a REST PUT (or a WriteBytes stream) may carry.
    pub max_upload_bytes: Option<u64>,
    /// The directory the supervisor owns for the daemon's durable state (transactions' intent
    /// records, `backend::txn`): outside every root.
    pub state_dir: Option<PathBuf>,
    /// Whether committed changes are recorded in `state_dir/changes` (default: on with a
    /// `state_dir`).
    pub change_record: Option<bool>,
    /// The most bytes of before-images the change record keeps (its oldest changes go first).
    pub change_record_max_bytes: Option<u64>,
    /// The oldest change the record keeps, in seconds.
    pub change_record_max_age_secs: Option<u64>,
    /// A replaced file larger than this is recorded without its content (not restorable).
    pub change_record_max_file_bytes: Option<u64>,
    /// Identities (`uid:N`, `token:NAME`, `cert:NAME`) that may list and rewind every
    /// identity's changes, not only their own.
    #[serde(default)]
    pub change_operators: Vec<String>,
    /// Operations one transaction may carry.
    pub max_transaction_operations: Option<usize>,
    /// Bytes one transaction may stage (the new content of every file it writes).
    pub max_transaction_bytes: Option<u64>,
    /// The slowest such a body may arrive, averaged, past a grace of 10 s (0: no minimum).
    pub min_upload_bytes_per_sec: Option<u64>,
    /// `/v1/metadata` serves the environment variables with this prefix (default `SANDBOX_`;
    /// empty: none by prefix)...
    pub metadata_env_prefix: Option<String>,
    /// ...and these, by name.
    pub metadata_env: Option<Vec<String>>,
    /// Names (or addresses) the HTTP listeners answer to beside loopback ones (DNS rebinding:
    /// `rest::host`).
    pub http_allowed_hosts: Option<Vec<String>>,
    /// Browser origins (`scheme://host[:port]`) whose requests the HTTP listeners serve.
    pub http_allowed_origins: Option<Vec<String>>,
    /// TLS handshakes in progress per TCP listener, and per source address.
    pub max_handshakes: Option<usize>,
    pub max_handshakes_per_source: Option<usize>,
    /// A TCP connection that has not completed an authenticated call by then is closed.
    pub unauthenticated_idle_ms: Option<u64>,
    /// A streamed read whose reader reads nothing for this long is cancelled.
    pub stream_idle_timeout_ms: Option<u64>,
    /// Calls that may wait for a worker of one mode; more are refused with FS_RATE_LIMITED.
    pub max_queued_calls: Option<usize>,
    /// Workers that overran a deadline and could not be killed, kept before the mode stops.
    pub max_abandoned_workers: Option<usize>,
    /// Per-identity budgets.
    pub budgets: Option<BudgetsFile>,
    /// Keep and serve the Prometheus metrics (default true).
    pub metrics: Option<bool>,
    /// `http://HOST:PORT` or `https://HOST:PORT` of an OTLP/gRPC receiver: traces are exported
    /// there (default: none, off).
    pub otlp_endpoint: Option<String>,
    /// PEM bundle of the CAs a TLS collector's certificate must chain to (default: the system's).
    pub otlp_ca: Option<PathBuf>,
    /// PEM certificate chain shown to a TLS collector that asks for one (with `otlp_client_key`).
    pub otlp_client_cert: Option<PathBuf>,
    /// PEM private key of `otlp_client_cert`.
    pub otlp_client_key: Option<PathBuf>,
    /// `name: value` lines sent with every export (an auth token), read once at start.
    pub otlp_headers_file: Option<PathBuf>,
    /// Finished spans that may wait for the collector (default 2048); more are dropped and counted.
    pub trace_queue_spans: Option<usize>,
    /// The share of calls without a sampled `traceparent` that are traced (default 1.0).
    pub trace_sample_ratio: Option<f64>,
}

/// The `[budgets]` section: what one client identity may hold or use per second.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsFile {
    pub calls_in_flight: Option<usize>,
    pub open_streams: Option<usize>,
    pub calls_per_second: Option<f64>,
    pub call_burst: Option<f64>,
    pub new_files_per_second: Option<f64>,
    pub new_file_burst: Option<f64>,
    pub pending_escalations: Option<usize>,
    pub escalated_ops: Option<usize>,
}

impl BudgetsFile {
    pub(super) fn resolve(self) -> Result<crate::budget::Limits, ConfigError> {
        let d = crate::budget::Limits::default();
        let count = |v: Option<usize>, d: usize, key| match v.unwrap_or(d) {
            0 => Err(ConfigError::Budget(key)),
            n => Ok(n),
        };
        let rate = |v: Option<f64>, d: f64, key| match v.unwrap_or(d) {
            r if r.is_finite() && r > 0.0 => Ok(r),
            _ => Err(ConfigError::Budget(key)),
        };
        let limits = crate::budget::Limits {
            calls_in_flight: count(self.calls_in_flight, d.calls_in_flight, "calls_in_flight")?,
            open_streams: count(self.open_streams, d.open_streams, "open_streams")?,
            calls_per_second: rate(self.calls_per_second, d.calls_per_second, "calls_per_second")?,
            call_burst: rate(self.call_burst, d.call_burst, "call_burst")?,
            new_files_per_second: rate(
                self.new_files_per_second,
                d.new_files_per_second,
                "new_files_per_second",
            )?,
            new_file_burst: rate(self.new_file_burst, d.new_file_burst, "new_file_burst")?,
            pending_escalations: count(
                self.pending_escalations,
                d.pending_escalations,
                "pending_escalations",
            )?,
            escalated_ops: count(self.escalated_ops, d.escalated_ops, "escalated_ops")?,
        };
        // A bucket that can never hold one token refuses everything.
        if limits.call_burst < 1.0 {
            return Err(ConfigError::Budget("call_burst"));
        }
        if limits.new_file_burst < 1.0 {
            return Err(ConfigError::Budget("new_file_burst"));
        }
        Ok(limits)
    }
}

/// One bearer token: the hex SHA-256 of the token (never the token), and optionally the client
/// certificate name it is bound to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    pub sha256: String,
    pub cert: Option<String>,
}

/// A TOML error as one line: the file, the 1-based line and column (in characters) where the
/// error's span starts, and the message with its line breaks folded.
pub(super) fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e.span().map(|span| {
        let before = text.get(..span.start).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    });
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    let message = unknown_key(&message).unwrap_or(message);
    ConfigError::Parse { path: path.to_owned(), at, message }
}

/// serde's "unknown field `x`, expected one of `a`, `b`, …" lists every key of the section (52
/// at the top level): the key that was meant, when one is close, says more.
fn unknown_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.strip_prefix(", expected one of ").or_else(|| rest.strip_prefix(", expected "))?;
    let closest = expected
        .split(", ")
        .filter_map(|key| key.strip_prefix('`')?.strip_suffix('`'))
        .map(|key| (edit_distance(unknown, key), key))
        .min()
        .filter(|(distance, _)| *distance <= (unknown.chars().count() / 3).max(2));
    Some(match closest {
        Some((_, key)) => format!("unknown key `{unknown}` (did you mean `{key}`?)"),
        None => format!("unknown key `{unknown}` (docs/config.md lists every key)"),
    })
}

/// Levenshtein distance, by characters.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// `pod_network_tokens`: `true` (the daemon's one `http+pod:` listener, the form that shipped
/// first) or the spellings of the `http+pod:` listeners that take tokens, so an operator opts in
/// for each listener and a second one never inherits the first one's opt-in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub enum PodNetworkTokens {
    All(bool),
    Listeners(Vec<String>),
}
