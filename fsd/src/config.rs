//! The daemon's configuration: a TOML file (snake_case keys) overridden by flags. Roots and modes
//! come only from here, never from a request.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::backend::{Limits, Mode, RootSpec};

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
    /// The REST face (KEP-539.2 filesystem API) and gRPC-Web, over HTTP/1.1 or HTTP/2.
    Http(std::net::SocketAddr),
    /// The same face in plaintext even when TLS is configured, on loopback only: for the other
    /// containers of a pod (they share its network namespace) beside a TLS listener for the rest.
    HttpPlain(std::net::SocketAddr),
    HttpUnix(PathBuf),
}

impl Listen {
    /// Parses `unix:PATH`, `tcp:HOST:PORT`, `http:HOST:PORT`, `http+plain:HOST:PORT` or
    /// `http+unix:PATH`.
    pub fn parse(text: &str) -> Result<Listen, ConfigError> {
        if let Some(addr) = text.strip_prefix("http+plain:") {
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|_| ConfigError::Listen(text.to_owned(), "expected http+plain:IP:PORT"))?;
            if !addr.ip().is_loopback() {
                return Err(ConfigError::Listen(text.to_owned(), "a plaintext listener must be on loopback"));
            }
            return Ok(Listen::HttpPlain(addr));
        }
        if let Some(path) = text.strip_prefix("http+unix:") {
            if path.is_empty() {
                return Err(ConfigError::Listen(text.to_owned(), "empty socket path"));
            }
            return Ok(Listen::HttpUnix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("http:") {
            let addr: std::net::SocketAddr =
                addr.parse().map_err(|_| ConfigError::Listen(text.to_owned(), "expected http:IP:PORT"))?;
            return Ok(Listen::Http(addr));
        }
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ConfigError::Listen(text.to_owned(), "empty socket path"));
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("tcp:") {
            let addr: std::net::SocketAddr =
                addr.parse().map_err(|_| ConfigError::Listen(text.to_owned(), "expected tcp:IP:PORT"))?;
            // Whether a non-loopback address is allowed depends on TLS: checked in `resolve`.
            return Ok(Listen::Tcp(addr));
        }
        Err(ConfigError::Listen(
            text.to_owned(),
            "expected unix:PATH, tcp:IP:PORT, http:IP:PORT, http+plain:IP:PORT or http+unix:PATH",
        ))
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
            Listen::Tcp(addr) => write!(f, "tcp:{addr}"),
            Listen::Http(addr) => write!(f, "http:{addr}"),
            Listen::HttpPlain(addr) => write!(f, "http+plain:{addr}"),
            Listen::HttpUnix(path) => write!(f, "http+unix:{}", path.display()),
        }
    }
}

/// How far the daemon trusts a client's claim that a wider mode was approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escalation {
    Deny,
    Client,
    Signed,
}

impl Escalation {
    pub fn as_str(self) -> &'static str {
        match self {
            Escalation::Deny => "deny",
            Escalation::Client => "client",
            Escalation::Signed => "signed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

/// The file form: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<Vec<String>>,
    pub writable_roots: Option<Vec<PathBuf>>,
    pub readable_roots: Option<Vec<PathBuf>>,
    pub protected_names: Option<Vec<String>>,
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
    pub workers_per_mode: Option<usize>,
    pub worker_uid: Option<u32>,
    pub worker_gid: Option<u32>,
    pub call_timeout_ms: Option<u64>,
    /// How long SIGTERM may take in total before stuck children are killed (default 10000).
    pub shutdown_grace_ms: Option<u64>,
    pub audit_log: Option<PathBuf>,
    /// Highest mode per client, keyed by identity: `uid:1000` (or a bare `1000`, the Unix peer
    /// uid), `cert:NAME` (a verified client certificate's SAN or CN), `token:NAME`, `tcp` (every
    /// plaintext loopback TCP client; read-only without an entry).
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
    /// A plaintext listener that serves only `grpc.health.v1` (for orchestrator probes).
    pub health_listen: Option<String>,
    /// Connection limits of TCP listeners.
    pub max_connections: Option<usize>,
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
    /// `/v1/metadata` serves the environment variables with this prefix (default `SANDBOX_`;
    /// empty: none by prefix)...
    pub metadata_env_prefix: Option<String>,
    /// ...and these, by name.
    pub metadata_env: Option<Vec<String>>,
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
    fn resolve(self) -> Result<crate::budget::Limits, ConfigError> {
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

/// Connection limits (HTTP/2 and TCP) of the daemon's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Open connections per TCP listener; more are closed at accept.
    pub max_connections: usize,
    /// HTTP/2 streams a connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Calls of one connection served at once; the rest wait their turn.
    pub max_calls_per_connection: usize,
    pub keepalive_interval: std::time::Duration,
    pub keepalive_timeout: std::time::Duration,
    /// A TLS handshake not finished within this is dropped.
    pub handshake_timeout: std::time::Duration,
    /// A TCP connection without a call for this long is closed.
    pub idle_timeout: std::time::Duration,
    /// TLS handshakes in progress at once per listener, and per source address.
    pub max_handshakes: usize,
    pub max_handshakes_per_source: usize,
    /// A TCP connection without a completed authenticated call after this long is closed.
    pub unauthenticated_idle: std::time::Duration,
}

/// What the flags say; each set flag overrides the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Vec<String>,
    pub writable_roots: Vec<PathBuf>,
    pub readable_roots: Vec<PathBuf>,
    pub log_format: Option<String>,
    pub default_mode: Option<String>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Vec<Listen>,
    pub roots: Vec<RootSpec>,
    pub protected_names: Vec<String>,
    pub allow_submounts: Vec<PathBuf>,
    pub allow_backslash: bool,
    pub default_mode: Mode,
    pub max_mode: Mode,
    pub escalation: Escalation,
    pub approver_public_key: Option<String>,
    pub escalation_ttl: std::time::Duration,
    pub approver_endpoint: Option<crate::escalation::ApproverEndpoint>,
    pub log_format: LogFormat,
    /// Mode and group the Unix sockets have from the moment they exist.
    pub socket_access: crate::sys::socket::SocketAccess,
    pub max_message_bytes: u64,
    pub limits: Limits,
    pub landlock: LandlockPolicy,
    pub workers_per_mode: usize,
    /// As configured; [`Config::worker_identity`] decides the default.
    pub worker_uid: Option<u32>,
    pub worker_gid: Option<u32>,
    pub call_timeout: std::time::Duration,
    /// The whole of a graceful stop: in-flight calls finish within it, then what is left is killed.
    pub shutdown_grace: std::time::Duration,
    pub audit_log: Option<PathBuf>,
    pub client_max_modes: std::collections::BTreeMap<crate::identity::ClientKey, Mode>,
    /// TLS for every `tcp:` listener, when configured.
    pub tls: Option<crate::tls::TlsConfig>,
    pub tokens: Vec<crate::identity::TokenEntry>,
    pub health_listen: Option<std::net::SocketAddr>,
    pub transport: Transport,
    pub budgets: crate::budget::Limits,
    pub stream_idle_timeout: std::time::Duration,
    pub max_queued_calls: usize,
    pub max_abandoned_workers: usize,
    pub rest: Rest,
}

/// The REST face's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rest {
    /// The absolute directory request paths are joined to (one of the roots).
    pub root: PathBuf,
    pub metadata_env_prefix: String,
    pub metadata_env: Vec<String>,
}

impl Rest {
    /// The environment variables `/v1/metadata` serves: only those the config names.
    pub fn metadata(
        &self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> std::collections::BTreeMap<String, String> {
        vars.filter(|(name, _)| {
            (!self.metadata_env_prefix.is_empty() && name.starts_with(&self.metadata_env_prefix))
                || self.metadata_env.contains(name)
        })
        .collect()
    }
}

/// Whether a kernel without the Landlock floor may still serve the confined modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockPolicy {
    Required,
    BestEffort,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    /// One line: the toml crate's own rendering spans several (a snippet with a caret).
    #[error("invalid config {}{}: {message}", path.display(), at.map(|(line, column)| format!(":{line}:{column}")).unwrap_or_default())]
    Parse { path: PathBuf, at: Option<(usize, usize)>, message: String },
    #[error("invalid listen address {0:?}: {1}")]
    Listen(String, &'static str),
    #[error("invalid {key} {value:?}: expected read-only, workspace-write or danger-full-access")]
    Mode { key: &'static str, value: String },
    #[error("invalid escalation {0:?}: expected \"deny\", \"client\" or \"signed\"")]
    Escalation(String),
    #[error(
        "escalation = \"signed\" needs approver_endpoint (unix:PATH or tcp:HOST:PORT of fsd-approver serve)"
    )]
    NoApproverEndpoint,
    #[error("invalid approver_endpoint {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    ApproverEndpoint(String),
    #[error("escalation = \"signed\" needs approver_public_key (64 hex digits)")]
    NoApproverKey,
    /// The key's own reason, which names `approver_public_key`.
    #[error("{0}")]
    ApproverKey(String),
    #[error("invalid log_format {0:?}: expected human or json")]
    LogFormat(String),
    #[error("no listen address: pass --listen unix:PATH or tcp:127.0.0.1:PORT")]
    NoListen,
    #[error("no root: pass --writable-root DIR or --readable-root DIR")]
    NoRoots,
    #[error("default_mode {default} is wider than max_mode {max}")]
    DefaultAboveMax { default: &'static str, max: &'static str },
    #[error("invalid landlock {0:?}: expected \"required\" or \"best-effort\"")]
    Landlock(String),
    #[error(
        "invalid client_max_modes key {0:?}: expected uid:UID (or a bare uid), cert:NAME, token:NAME or tcp"
    )]
    ClientUid(String),
    #[error(
        "listener {0} is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)"
    )]
    NeedsTls(String),
    #[error("invalid TLS settings: {0}")]
    Tls(&'static str),
    #[error("invalid token {0:?}: {1}")]
    Token(String, &'static str),
    #[error("invalid health_listen {0:?}: expected tcp:IP:PORT")]
    HealthListen(String),
    #[error("invalid {0}: must be at least 1")]
    AtLeastOne(&'static str),
    #[error("invalid socket_mode {0:?}: expected octal permission bits such as \"0660\"")]
    SocketMode(String),
    #[error("invalid socket_group {0:?}: not a group in /etc/group nor a number")]
    SocketGroup(String),
    #[error("invalid budgets.{0}: must be a positive number (bursts at least 1)")]
    Budget(&'static str),
    #[error("workers_per_mode must be between 1 and 64")]
    Workers,
    #[error("rest_root {0} is not one of the configured roots")]
    RestRoot(PathBuf),
    #[error(
        "max_message_bytes {message} is too small for {key} {bytes}: a message carries the whole file plus 1 MiB of framing, so set max_message_bytes to at least {needed}"
    )]
    MessageTooSmall { message: u64, key: &'static str, bytes: u64, needed: u64 },
    #[error("cannot read the owner of root {0}: {1}")]
    RootOwner(PathBuf, #[source] std::io::Error),
    #[error(
        "the writable roots have different owners ({0}); workers take the owner's uid and gid: set worker_uid and worker_gid"
    )]
    RootOwners(String),
}

/// A TOML error as one line: the file, the 1-based line and column (in characters) where the
/// error's span starts, and the message with its line breaks folded.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e.span().map(|span| {
        let before = text.get(..span.start).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    });
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    ConfigError::Parse { path: path.to_owned(), at, message }
}

/// Who the confined workers run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerIdentity {
    pub uid: u32,
    pub gid: u32,
    /// A root worker the operator asked for (`worker_uid = 0`): keeps the few capabilities
    /// that keeping owners and modes of replaced files needs. Every other worker has none.
    pub root_capabilities: bool,
}

/// `socket_mode` (octal text, at most 0777; default 0660: owner and group) and `socket_group`.
fn socket_access(
    mode: Option<&str>,
    group: Option<&str>,
) -> Result<crate::sys::socket::SocketAccess, ConfigError> {
    let mode = match mode {
        None => 0o660,
        Some(text) => {
            let digits = text.strip_prefix("0o").unwrap_or(text);
            match u32::from_str_radix(digits, 8) {
                Ok(bits) if bits <= 0o777 && !digits.is_empty() && !digits.starts_with('+') => bits,
                _ => return Err(ConfigError::SocketMode(text.to_owned())),
            }
        }
    };
    let gid = match group {
        None => None,
        Some(text) => Some(match text.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_id(text).ok_or_else(|| ConfigError::SocketGroup(text.to_owned()))?,
        }),
    };
    Ok(crate::sys::socket::SocketAccess { mode, gid })
}

/// A group's id from /etc/group (`name:x:gid:members`).
fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name)).then(|| fields.nth(1)?.parse().ok()).flatten()
    })
}

fn mode(key: &'static str, value: Option<String>, default: Mode) -> Result<Mode, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => Mode::parse(&v).ok_or(ConfigError::Mode { key, value: v }),
    }
}

impl Config {
    /// The workers' identity. Configured: as configured (the group defaults to the daemon's).
    /// Unset under a root daemon: the owner of the writable roots (of the roots, when none is
    /// writable), so the agent can do no more than the workspace's owner could; a root worker
    /// only on an explicit `worker_uid = 0`. Unset otherwise: the daemon's own ids.
    pub fn worker_identity(&self) -> Result<WorkerIdentity, ConfigError> {
        use std::os::unix::fs::MetadataExt;
        let (uid, gid) = crate::sys::effective_ids();
        if let Some(worker_uid) = self.worker_uid {
            let gid = self.worker_gid.unwrap_or(gid);
            return Ok(WorkerIdentity { uid: worker_uid, gid, root_capabilities: worker_uid == 0 });
        }
        if uid != 0 {
            return Ok(WorkerIdentity { uid, gid: self.worker_gid.unwrap_or(gid), root_capabilities: false });
        }
        let writable: Vec<&RootSpec> = self.roots.iter().filter(|r| r.writable).collect();
        let owners_of = if writable.is_empty() { self.roots.iter().collect() } else { writable };
        let mut owners = std::collections::BTreeSet::new();
        for root in owners_of {
            let meta =
                std::fs::metadata(&root.path).map_err(|e| ConfigError::RootOwner(root.path.clone(), e))?;
            owners.insert((meta.uid(), meta.gid()));
        }
        match owners.len() {
            1 => {
                let (uid, owner_gid) = owners.into_iter().next().unwrap_or((uid, gid));
                Ok(WorkerIdentity {
                    uid,
                    gid: self.worker_gid.unwrap_or(owner_gid),
                    root_capabilities: false,
                })
            }
            _ => Err(ConfigError::RootOwners(
                owners.iter().map(|(u, g)| format!("{u}:{g}")).collect::<Vec<_>>().join(", "),
            )),
        }
    }

    /// The modes any client of this daemon may reach: each gets a worker pool.
    pub fn served_modes(&self) -> Vec<Mode> {
        let highest =
            self.client_max_modes.values().copied().chain([self.max_mode]).max().unwrap_or(self.max_mode);
        [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .filter(|m| *m <= highest)
            .collect()
    }

    /// Loads the file (if any) and applies the flags.
    pub fn load(file: Option<&Path>, flags: Overrides) -> Result<Config, ConfigError> {
        let parsed = match file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.to_owned(), e))?;
                toml::from_str(&text).map_err(|e| parse_error(path, &text, &e))?
            }
            None => ConfigFile::default(),
        };
        Config::resolve(parsed, flags)
    }

    pub fn resolve(file: ConfigFile, flags: Overrides) -> Result<Config, ConfigError> {
        let listen_text =
            if flags.listen.is_empty() { file.listen.unwrap_or_default() } else { flags.listen };
        let listen = listen_text.iter().map(|l| Listen::parse(l)).collect::<Result<Vec<_>, _>>()?;
        if listen.is_empty() {
            return Err(ConfigError::NoListen);
        }
        let roots_given = !flags.writable_roots.is_empty() || !flags.readable_roots.is_empty();
        let (writable, readable) = if roots_given {
            (flags.writable_roots, flags.readable_roots)
        } else {
            (file.writable_roots.unwrap_or_default(), file.readable_roots.unwrap_or_default())
        };
        let mut roots: Vec<RootSpec> =
            writable.into_iter().map(|path| RootSpec { path, writable: true }).collect();
        roots.extend(readable.into_iter().map(|path| RootSpec { path, writable: false }));
        if roots.is_empty() {
            return Err(ConfigError::NoRoots);
        }
        let default_mode =
            mode("default_mode", flags.default_mode.or(file.default_mode), Mode::WorkspaceWrite)?;
        let max_mode = mode("max_mode", file.max_mode, default_mode)?;
        if default_mode > max_mode {
            return Err(ConfigError::DefaultAboveMax {
                default: default_mode.as_str(),
                max: max_mode.as_str(),
            });
        }
        let escalation = match file.escalation.as_deref() {
            None | Some("deny") => Escalation::Deny,
            Some("client") => Escalation::Client,
            Some("signed") => Escalation::Signed,
            Some(other) => return Err(ConfigError::Escalation(other.to_owned())),
        };
        let mut approver_endpoint = None;
        if escalation == Escalation::Signed {
            let key = file.approver_public_key.as_deref().ok_or(ConfigError::NoApproverKey)?;
            crate::escalation::Escalations::new(key, std::time::Duration::from_secs(1))
                .map_err(ConfigError::ApproverKey)?;
            let endpoint = file.approver_endpoint.as_deref().ok_or(ConfigError::NoApproverEndpoint)?;
            approver_endpoint = Some(
                crate::escalation::ApproverEndpoint::parse(endpoint)
                    .ok_or_else(|| ConfigError::ApproverEndpoint(endpoint.to_owned()))?,
            );
        }
        let log_format = match flags.log_format.or(file.log_format).as_deref() {
            None | Some("human") => LogFormat::Human,
            Some("json") => LogFormat::Json,
            Some(other) => return Err(ConfigError::LogFormat(other.to_owned())),
        };
        let socket_access = socket_access(file.socket_mode.as_deref(), file.socket_group.as_deref())?;
        // A size cap of 0 refuses every non-empty file, listing or upload: a typo, not a policy.
        // (max_diff_text_bytes = 0 is one: never send a change's text; max_abandoned_workers = 0
        // too: stop a mode at its first unkillable worker.)
        for (key, value) in [
            ("max_message_bytes", file.max_message_bytes),
            ("max_editable_file_bytes", file.max_editable_file_bytes),
            ("max_read_bytes", file.max_read_bytes),
            ("max_upload_bytes", file.max_upload_bytes),
            ("max_dir_entries", file.max_dir_entries.map(|n| n as u64)),
        ] {
            if value == Some(0) {
                return Err(ConfigError::AtLeastOne(key));
            }
        }
        let defaults = Limits::default();
        let limits = Limits {
            max_editable_bytes: file.max_editable_file_bytes.unwrap_or(defaults.max_editable_bytes),
            max_read_bytes: file.max_read_bytes.unwrap_or(defaults.max_read_bytes),
            max_diff_text_bytes: file.max_diff_text_bytes.unwrap_or(defaults.max_diff_text_bytes),
            max_dir_entries: file.max_dir_entries.unwrap_or(defaults.max_dir_entries),
            max_upload_bytes: file.max_upload_bytes.unwrap_or(defaults.max_upload_bytes),
            ..defaults
        };
        let max_message_bytes = file.max_message_bytes.unwrap_or(80 << 20);
        // A unary write (or a whole read) carries the file plus framing: the cap must leave room
        // for it. The error names the key that needs the room, not always the editable size.
        let (key, bytes) = if limits.max_read_bytes > limits.max_editable_bytes {
            ("max_read_bytes", limits.max_read_bytes)
        } else {
            ("max_editable_file_bytes", limits.max_editable_bytes)
        };
        let needed = bytes.saturating_add(1 << 20);
        if max_message_bytes < needed {
            return Err(ConfigError::MessageTooSmall { message: max_message_bytes, key, bytes, needed });
        }
        let landlock = match file.landlock.as_deref() {
            None | Some("required") => LandlockPolicy::Required,
            Some("best-effort") => LandlockPolicy::BestEffort,
            Some(other) => return Err(ConfigError::Landlock(other.to_owned())),
        };
        let workers_per_mode = file.workers_per_mode.unwrap_or(2);
        if !(1..=64).contains(&workers_per_mode) {
            return Err(ConfigError::Workers);
        }
        let mut client_max_modes = std::collections::BTreeMap::new();
        for (key, value) in file.client_max_modes.unwrap_or_default() {
            let client =
                crate::identity::ClientKey::parse(&key).ok_or_else(|| ConfigError::ClientUid(key.clone()))?;
            client_max_modes.insert(client, mode("client_max_modes", Some(value), max_mode)?);
        }
        let fleet = fleet_settings(
            &listen,
            FleetFile {
                tls_cert: file.tls_cert,
                tls_key: file.tls_key,
                tls_client_ca: file.tls_client_ca,
                tls_client_cert: file.tls_client_cert,
                tokens: file.tokens,
                health_listen: file.health_listen,
            },
        )?;
        // A zero time would make the daemon time out everything at once: refused, not raised.
        let at_least_one = |key: &'static str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(ConfigError::AtLeastOne(key)),
            other => Ok(other.unwrap_or(default)),
        };
        let ms = |key: &'static str, value: Option<u64>, default: u64| {
            at_least_one(key, value, default).map(std::time::Duration::from_millis)
        };
        let transport = Transport {
            max_connections: file.max_connections.unwrap_or(256),
            max_concurrent_streams: file.max_concurrent_streams.unwrap_or(256),
            max_calls_per_connection: file.max_calls_per_connection.unwrap_or(64),
            keepalive_interval: ms("keepalive_interval_ms", file.keepalive_interval_ms, 30_000)?,
            keepalive_timeout: ms("keepalive_timeout_ms", file.keepalive_timeout_ms, 20_000)?,
            handshake_timeout: ms("handshake_timeout_ms", file.handshake_timeout_ms, 10_000)?,
            idle_timeout: ms("idle_timeout_ms", file.idle_timeout_ms, 300_000)?,
            max_handshakes: file.max_handshakes.unwrap_or(256),
            max_handshakes_per_source: file.max_handshakes_per_source.unwrap_or(16),
            unauthenticated_idle: ms("unauthenticated_idle_ms", file.unauthenticated_idle_ms, 10_000)?,
        };
        let call_timeout = ms("call_timeout_ms", file.call_timeout_ms, 30_000)?;
        let shutdown_grace = ms("shutdown_grace_ms", file.shutdown_grace_ms, 10_000)?;
        let stream_idle_timeout = ms("stream_idle_timeout_ms", file.stream_idle_timeout_ms, 30_000)?;
        let escalation_ttl = std::time::Duration::from_secs(at_least_one(
            "escalation_ttl_secs",
            file.escalation_ttl_secs,
            120,
        )?);
        if transport.max_handshakes == 0 {
            return Err(ConfigError::AtLeastOne("max_handshakes"));
        }
        if transport.max_handshakes_per_source == 0 {
            return Err(ConfigError::AtLeastOne("max_handshakes_per_source"));
        }
        let max_queued_calls = file.max_queued_calls.unwrap_or(4096);
        if max_queued_calls == 0 {
            return Err(ConfigError::AtLeastOne("max_queued_calls"));
        }
        let budgets = file.budgets.unwrap_or_default().resolve()?;
        if transport.max_connections == 0 {
            return Err(ConfigError::AtLeastOne("max_connections"));
        }
        if transport.max_concurrent_streams == 0 {
            return Err(ConfigError::AtLeastOne("max_concurrent_streams"));
        }
        if transport.max_calls_per_connection == 0 {
            return Err(ConfigError::AtLeastOne("max_calls_per_connection"));
        }
        let rest = rest_settings(&roots, file.rest_root, file.metadata_env_prefix, file.metadata_env)?;
        Ok(Config {
            rest,
            landlock,
            workers_per_mode,
            worker_uid: file.worker_uid,
            worker_gid: file.worker_gid,
            call_timeout,
            shutdown_grace,
            audit_log: file.audit_log,
            client_max_modes,
            tls: fleet.tls,
            tokens: fleet.tokens,
            health_listen: fleet.health_listen,
            transport,
            budgets,
            stream_idle_timeout,
            max_queued_calls,
            max_abandoned_workers: file.max_abandoned_workers.unwrap_or(8),
            listen,
            roots,
            protected_names: file.protected_names.unwrap_or_else(|| vec![".git".to_owned()]),
            allow_submounts: file.allow_submounts.unwrap_or_default(),
            allow_backslash: file.allow_backslash.unwrap_or(false),
            default_mode,
            max_mode,
            escalation,
            approver_public_key: file.approver_public_key.clone(),
            escalation_ttl,
            approver_endpoint,
            log_format,
            socket_access,
            max_message_bytes,
            limits,
        })
    }
}

/// The REST face's root (one of the roots, canonical) and the metadata it may serve.
fn rest_settings(
    roots: &[RootSpec],
    root: Option<PathBuf>,
    prefix: Option<String>,
    names: Option<Vec<String>>,
) -> Result<Rest, ConfigError> {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let root = match root {
        Some(root) => {
            let wanted = canonical(&root);
            if !roots.iter().any(|r| canonical(&r.path) == wanted) {
                return Err(ConfigError::RestRoot(root));
            }
            wanted
        }
        None => {
            let first =
                roots.iter().find(|r| r.writable).or_else(|| roots.first()).ok_or(ConfigError::NoRoots)?;
            canonical(&first.path)
        }
    };
    Ok(Rest {
        root,
        metadata_env_prefix: prefix.unwrap_or_else(|| "SANDBOX_".to_owned()),
        metadata_env: names.unwrap_or_default(),
    })
}

/// The fleet keys of the file, resolved together: they constrain one another.
struct FleetFile {
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_client_cert: Option<String>,
    tokens: Option<std::collections::BTreeMap<String, TokenFile>>,
    health_listen: Option<String>,
}

struct Fleet {
    tls: Option<crate::tls::TlsConfig>,
    tokens: Vec<crate::identity::TokenEntry>,
    health_listen: Option<std::net::SocketAddr>,
}

fn fleet_settings(listen: &[Listen], file: FleetFile) -> Result<Fleet, ConfigError> {
    use crate::tls::{ClientCerts, TlsConfig};
    let mut tokens = Vec::new();
    for (name, token) in file.tokens.unwrap_or_default() {
        let sha256 = crate::identity::parse_sha256(&token.sha256).ok_or(ConfigError::Token(
            name.clone(),
            "sha256 must be 64 hex digits (sha256sum of the token)",
        ))?;
        if token.cert.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::Token(name, "cert must name a client certificate"));
        }
        tokens.push(crate::identity::TokenEntry { name, sha256, cert: token.cert });
    }
    let tls = match (file.tls_cert, file.tls_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let client_certs = match (file.tls_client_ca.is_some(), file.tls_client_cert.as_deref()) {
                (false, None) => ClientCerts::None,
                (false, Some(_)) => return Err(ConfigError::Tls("tls_client_cert needs tls_client_ca")),
                (true, None | Some("required")) => ClientCerts::Required,
                (true, Some("optional")) => ClientCerts::Optional,
                (true, Some(_)) => {
                    return Err(ConfigError::Tls("tls_client_cert must be \"required\" or \"optional\""));
                }
            };
            if client_certs != ClientCerts::Required && tokens.is_empty() {
                // Otherwise a client without a certificate could never authenticate.
                return Err(ConfigError::Tls(
                    "without required client certificates (tls_client_ca), configure tokens",
                ));
            }
            Some(TlsConfig { cert, key, client_ca: file.tls_client_ca.clone(), client_certs })
        }
        _ => return Err(ConfigError::Tls("tls_cert and tls_key go together")),
    };
    if tls.is_none() && (file.tls_client_ca.is_some() || file.tls_client_cert.is_some()) {
        return Err(ConfigError::Tls("tls_client_ca needs tls_cert and tls_key"));
    }
    if tls.is_none() && !tokens.is_empty() {
        return Err(ConfigError::Tls("bearer tokens are accepted only over TLS: set tls_cert and tls_key"));
    }
    for l in listen {
        if let Listen::Tcp(addr) | Listen::Http(addr) = l
            && !addr.ip().is_loopback()
            && tls.is_none()
        {
            return Err(ConfigError::NeedsTls(l.to_string()));
        }
    }
    let health_listen = match file.health_listen {
        None => None,
        Some(text) => Some(
            text.strip_prefix("tcp:")
                .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
                .ok_or(ConfigError::HealthListen(text))?,
        ),
    };
    Ok(Fleet { tls, tokens, health_listen })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_text: &str, flags: Overrides, expected: Result<&str, &str>) {
        let file: ConfigFile = match toml::from_str(toml_text) {
            Ok(f) => f,
            Err(e) => {
                let want = expected.err().unwrap_or("a valid config");
                assert!(e.to_string().contains(want), "{e} does not contain {want}");
                return;
            }
        };
        let got = Config::resolve(file, flags).map(|c| {
            format!(
                "{} {:?} {} {}",
                c.listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                c.roots.iter().map(|r| (r.path.display().to_string(), r.writable)).collect::<Vec<_>>(),
                c.default_mode.as_str(),
                c.escalation.as_str()
            )
        });
        assert_eq!(got.map_err(|e| e.to_string()), expected.map(str::to_owned).map_err(str::to_owned));
    }

    fn flags(listen: &[&str], writable: &[&str]) -> Overrides {
        Overrides {
            listen: listen.iter().map(|s| (*s).to_owned()).collect(),
            writable_roots: writable.iter().map(PathBuf::from).collect(),
            ..Overrides::default()
        }
    }

    #[test]
    fn socket_access_values() {
        let check = |mode: Option<&str>, group: Option<&str>, expected: Result<(u32, Option<u32>), &str>| {
            let got = socket_access(mode, group).map(|a| (a.mode, a.gid)).map_err(|e| e.to_string());
            match expected {
                Ok(want) => assert_eq!(got, Ok(want), "{mode:?} {group:?}"),
                Err(want) => {
                    assert!(got.as_ref().is_err_and(|e| e.contains(want)), "{mode:?} {group:?}: {got:?}")
                }
            }
        };
        check(None, None, Ok((0o660, None)));
        check(Some("0600"), None, Ok((0o600, None)));
        check(Some("666"), Some("0"), Ok((0o666, Some(0))));
        check(Some("0o640"), Some("root"), Ok((0o640, Some(0))));
        check(Some("0"), None, Ok((0, None)));
        check(Some("01777"), None, Err("invalid socket_mode"));
        check(Some("0689"), None, Err("invalid socket_mode"));
        check(Some(""), None, Err("invalid socket_mode"));
        check(Some("+660"), None, Err("invalid socket_mode"));
        check(None, Some("no-such-group-fsd"), Err("invalid socket_group"));
    }

    #[test]
    fn config_table() {
        check("", flags(&["unix:/s"], &["/ws"]), Ok("unix:/s [(\"/ws\", true)] workspace-write deny"));
        check(
            "listen = [\"tcp:127.0.0.1:7000\"]\nreadable_roots = [\"/r\"]\ndefault_mode = \"read-only\"",
            Overrides::default(),
            Ok("tcp:127.0.0.1:7000 [(\"/r\", false)] read-only deny"),
        );
        // Flags override the file.
        check(
            "writable_roots = [\"/a\"]",
            flags(&["unix:/s"], &["/b"]),
            Ok("unix:/s [(\"/b\", true)] workspace-write deny"),
        );
        check(
            "",
            flags(&["tcp:0.0.0.0:1"], &["/ws"]),
            Err(
                "listener tcp:0.0.0.0:1 is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)",
            ),
        );
        check(
            "",
            flags(&["http+plain:127.0.0.1:8080"], &["/ws"]),
            Ok("http+plain:127.0.0.1:8080 [(\"/ws\", true)] workspace-write deny"),
        );
        check(
            "tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"",
            flags(&["http+plain:0.0.0.0:8080"], &["/ws"]),
            Err(
                "invalid listen address \"http+plain:0.0.0.0:8080\": a plaintext listener must be on loopback",
            ),
        );
        check(
            "",
            flags(&[], &["/ws"]),
            Err("no listen address: pass --listen unix:PATH or tcp:127.0.0.1:PORT"),
        );
        check("", flags(&["unix:/s"], &[]), Err("no root: pass --writable-root DIR or --readable-root DIR"));
        check(
            "escalation = \"signed\"",
            flags(&["unix:/s"], &["/ws"]),
            Err("escalation = \"signed\" needs approver_public_key (64 hex digits)"),
        );
        let key =
            "approver_public_key = \"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"";
        check(
            &format!("escalation = \"signed\"\n{key}"),
            flags(&["unix:/s"], &["/ws"]),
            Err(
                "escalation = \"signed\" needs approver_endpoint (unix:PATH or tcp:HOST:PORT of fsd-approver serve)",
            ),
        );
        check(
            &format!("escalation = \"signed\"\n{key}\napprover_endpoint = \"approver.sock\""),
            flags(&["unix:/s"], &["/ws"]),
            Err("invalid approver_endpoint \"approver.sock\": expected unix:PATH or tcp:HOST:PORT"),
        );
        check(
            "escalation = \"maybe\"",
            flags(&["unix:/s"], &["/ws"]),
            Err("invalid escalation \"maybe\": expected \"deny\", \"client\" or \"signed\""),
        );
        check(
            "default_mode = \"danger-full-access\"\nmax_mode = \"read-only\"",
            flags(&["unix:/s"], &["/ws"]),
            Err("default_mode danger-full-access is wider than max_mode read-only"),
        );
        check("bogus = 1", flags(&["unix:/s"], &["/ws"]), Err("unknown field `bogus`"));
        check(
            "landlock = \"maybe\"",
            flags(&["unix:/s"], &["/ws"]),
            Err("invalid landlock \"maybe\": expected \"required\" or \"best-effort\""),
        );
        check(
            "[client_max_modes]\nalice = \"read-only\"",
            flags(&["unix:/s"], &["/ws"]),
            Err(
                "invalid client_max_modes key \"alice\": expected uid:UID (or a bare uid), cert:NAME, token:NAME or tcp",
            ),
        );
    }

    /// TLS, tokens and identity keys: what a fleet daemon's config may and may not say.
    #[test]
    fn fleet_config_table() {
        let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let tls = "tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n";
        let fleet = |text: &str| -> Result<Config, String> {
            let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
            Config::resolve(file, flags(&[], &["/ws"])).map_err(|e| e.to_string())
        };
        let listen = "listen = [\"tcp:10.99.0.1:7443\"]\n";
        // TLS with required client certificates may listen beyond loopback.
        let ok = fleet(&format!("{listen}{tls}tls_client_ca = \"/ca.pem\""))
            .map(|c| c.tls.map(|t| t.client_certs));
        assert_eq!(ok, Ok(Some(crate::tls::ClientCerts::Required)));
        // Server-only TLS needs tokens, or nobody could authenticate.
        assert_eq!(
            fleet(&format!("{listen}{tls}")).err().as_deref(),
            Some(
                "invalid TLS settings: without required client certificates (tls_client_ca), configure tokens"
            )
        );
        let with_token = fleet(&format!("{listen}{tls}[tokens.ci]\nsha256 = \"{hash}\"\ncert = \"agent-a\""));
        assert_eq!(
            with_token.map(|c| (c.tokens[0].name.clone(), c.tokens[0].cert.clone())),
            Ok(("ci".into(), Some("agent-a".into())))
        );
        assert_eq!(
            fleet(&format!("{listen}{tls}[tokens.ci]\nsha256 = \"abc\"")).err().as_deref(),
            Some("invalid token \"ci\": sha256 must be 64 hex digits (sha256sum of the token)")
        );
        assert_eq!(
            fleet(&format!("listen = [\"tcp:127.0.0.1:1\"]\n[tokens.ci]\nsha256 = \"{hash}\""))
                .err()
                .as_deref(),
            Some("invalid TLS settings: bearer tokens are accepted only over TLS: set tls_cert and tls_key")
        );
        assert_eq!(
            fleet(&format!("{listen}tls_cert = \"/c.pem\"")).err().as_deref(),
            Some("invalid TLS settings: tls_cert and tls_key go together")
        );
        assert_eq!(
            fleet(&format!("{listen}{tls}tls_client_ca = \"/ca.pem\"\ntls_client_cert = \"sometimes\""))
                .err()
                .as_deref(),
            Some("invalid TLS settings: tls_client_cert must be \"required\" or \"optional\"")
        );
        assert_eq!(
            fleet("listen = [\"unix:/s\"]\nhealth_listen = \"0.0.0.0:8081\"").err().as_deref(),
            Some("invalid health_listen \"0.0.0.0:8081\": expected tcp:IP:PORT")
        );
        // Identity keys: bare uids keep working beside the new forms.
        let keys = fleet("listen = [\"unix:/s\"]\nmax_mode = \"danger-full-access\"\n[client_max_modes]\n1000 = \"read-only\"\n\"uid:1001\" = \"workspace-write\"\n\"cert:agent-a\" = \"read-only\"\n\"token:ci\" = \"danger-full-access\"")
            .map(|c| c.client_max_modes.iter().map(|(k, m)| format!("{k}={}", m.as_str())).collect::<Vec<_>>().join(" "));
        assert_eq!(
            keys.as_deref(),
            Ok(
                "uid:1000=read-only uid:1001=workspace-write cert:agent-a=read-only token:ci=danger-full-access"
            )
        );
        let limits = fleet("listen = [\"unix:/s\"]\nmax_concurrent_streams = 0").err();
        assert_eq!(limits.as_deref(), Some("invalid max_concurrent_streams: must be at least 1"));
    }

    #[test]
    fn parse_errors_are_one_line_with_their_place() {
        let check = |text: &str, expected: &str| {
            let e = toml::from_str::<ConfigFile>(text).err().unwrap_or_else(|| panic!("{text} parses"));
            let got = parse_error(Path::new("/etc/fsd.toml"), text, &e).to_string();
            assert!(got.starts_with(expected) && !got.contains('\n'), "{text}: {got}");
        };
        check(
            "workers_per_mode = 2\nmax_mode = read-only\n",
            "invalid config /etc/fsd.toml:2:12: string values must be quoted, expected literal string",
        );
        check(
            "\n  listen = [\"unix:/s\"\n",
            "invalid config /etc/fsd.toml:2:22: unclosed array, expected `]`",
        );
        check(
            "# é\nworkers_per_mode = \"two\"",
            "invalid config /etc/fsd.toml:2:20: invalid type: string \"two\", expected usize",
        );
        check("bogus = 1", "invalid config /etc/fsd.toml:1:1: unknown field `bogus`, expected one of");
    }

    /// Every size, count and time limit refuses 0 with one line naming its key; the two that
    /// mean something at 0 keep it.
    #[test]
    fn zero_limits_are_refused_by_key() {
        let check = |text: &str, expected: Result<(), &str>| {
            let file: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let got =
                Config::resolve(file, flags(&["unix:/s"], &["/ws"])).map(drop).map_err(|e| e.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "{text}");
        };
        for key in [
            "max_read_bytes",
            "max_editable_file_bytes",
            "max_message_bytes",
            "max_upload_bytes",
            "max_dir_entries",
            "workers_per_mode",
            "max_queued_calls",
            "max_connections",
            "max_concurrent_streams",
            "max_calls_per_connection",
            "max_handshakes",
            "max_handshakes_per_source",
            "call_timeout_ms",
            "shutdown_grace_ms",
            "stream_idle_timeout_ms",
            "escalation_ttl_secs",
        ] {
            let expected = match key {
                "workers_per_mode" => "workers_per_mode must be between 1 and 64".to_owned(),
                _ => format!("invalid {key}: must be at least 1"),
            };
            check(&format!("{key} = 0"), Err(&expected));
        }
        check(
            "[budgets]
calls_in_flight = 0",
            Err("invalid budgets.calls_in_flight: must be a positive number (bursts at least 1)"),
        );
        check("max_diff_text_bytes = 0", Ok(()));
        check("max_abandoned_workers = 0", Ok(()));
        check("max_read_bytes = 1\nmax_dir_entries = 1\nmax_upload_bytes = 1", Ok(()));
    }
}
