//! The daemon's configuration: a TOML file (snake_case keys) overridden by flags. Roots and modes
//! come only from here, never from a request. The file's form is in `file`, where and how the
//! daemon listens in `listen`, the fleet keys (TLS, tokens, health) in `fleet`, the REST face's
//! settings in `rest`; this module resolves them into one [`Config`].

mod file;
mod fleet;
mod guarded;
mod listen;
mod rest;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::op::{Limits, Mode, RootSpec};

pub use file::{BudgetsFile, ConfigFile, TokenFile};
pub use guarded::{DEFAULT_PROTECTED_NAMES, DEFAULT_READ_DENIED};
pub use listen::{Listen, Transport};
pub use rest::{Allowed, Rest};

use file::parse_error;
use fleet::{FleetFile, fleet_settings};
use listen::socket_access;
use rest::rest_settings;

/// How far the daemon trusts a client's claim that a wider mode was approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogFormat {
    Human,
    Json,
}

impl LogFormat {
    /// The value of `log_format` and `--log-format`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Human => "human",
            LogFormat::Json => "json",
        }
    }
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

/// The change record's bounds and who may see every identity's changes (docs/rewind.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordSettings {
    /// Bytes of before-images kept; past it the oldest whole changes are dropped.
    pub max_bytes: u64,
    /// Changes older than this are dropped.
    pub max_age_secs: u64,
    /// A replaced file larger than this is recorded without its content.
    pub max_file_bytes: u64,
    /// Identity labels granted every identity's changes.
    pub operators: Vec<String>,
}

/// The resolved configuration.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub listen: Vec<Listen>,
    pub roots: Vec<RootSpec>,
    pub protected_names: Vec<String>,
    /// Globs of paths whose content never reaches a caller, at any mode (`config::guarded`).
    pub read_denied: Vec<String>,
    pub allow_submounts: Vec<PathBuf>,
    pub allow_backslash: bool,
    pub default_mode: Mode,
    pub max_mode: Mode,
    pub escalation: Escalation,
    pub approver_public_key: Option<String>,
    pub escalation_ttl: std::time::Duration,
    pub approver_endpoint: Option<crate::escalation::ApproverEndpoint>,
    /// The token presented to the approver (`approver_token_file`, read at start).
    pub approver_token: Option<crate::approver_client::Token>,
    /// TLS to a `tcp:` approver (`approver_ca_file`, `approver_client_cert`, read at start).
    pub approver_tls: Option<crate::approver_client::Tls>,
    pub log_format: LogFormat,
    /// Mode and group the Unix sockets have from the moment they exist.
    pub socket_access: crate::sys::socket::SocketAccess,
    pub max_message_bytes: u64,
    pub limits: Limits,
    pub landlock: LandlockPolicy,
    pub link_protection: LinkProtection,
    pub workers_per_mode: usize,
    /// Plain reads served in the network process (`dispatch::direct`) rather than a worker.
    pub direct_reads: bool,
    /// Direct reads on the network process's runtime threads (`dispatch::inline`), where every
    /// root is local; otherwise on its direct read threads only.
    pub inline_reads: bool,
    /// As configured; [`Config::worker_identity`] decides the default.
    pub worker_uid: Option<u32>,
    pub worker_gid: Option<u32>,
    pub call_timeout: std::time::Duration,
    /// The whole of a graceful stop: in-flight calls finish within it, then what is left is killed.
    pub shutdown_grace: std::time::Duration,
    pub audit_log: Option<PathBuf>,
    /// The key that signs the audit log's checkpoints, read by the network process before it
    /// confines itself.
    pub audit_signing_key: Option<PathBuf>,
    /// Audit records between two checkpoints.
    pub audit_checkpoint_every: u64,
    pub client_max_modes: std::collections::BTreeMap<crate::identity::ClientKey, Mode>,
    /// TLS for every `tcp:` listener, when configured.
    pub tls: Option<crate::tls::TlsConfig>,
    pub tokens: Vec<crate::identity::TokenEntry>,
    pub health_listen: Option<std::net::SocketAddr>,
    /// The `http+pod:` listeners on which bearer tokens count (`pod_network_tokens`).
    pub pod_network_tokens: Vec<std::net::SocketAddr>,
    pub transport: Transport,
    pub budgets: crate::budget::Limits,
    pub stream_idle_timeout: std::time::Duration,
    pub max_queued_calls: usize,
    pub max_abandoned_workers: usize,
    pub rest: Rest,
    /// The supervisor's durable state (transactions' intent records), outside every root.
    pub state_dir: Option<PathBuf>,
    /// The change record in `state_dir/changes` (`backend::record`); `None`: off.
    pub record: Option<RecordSettings>,
    /// Prometheus metrics kept and served (`metrics`).
    pub metrics: bool,
    /// Traces exported over OTLP, when `otlp_endpoint` is set.
    pub traces: Option<crate::traces::Settings>,
}

/// Whether a kernel without the Landlock floor may still serve the confined modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LandlockPolicy {
    Required,
    BestEffort,
}

/// What the daemon does when its confined modes need `fs.protected_hardlinks` and
/// `fs.protected_symlinks` (see `start_checks::link_protection`) and the kernel has them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LinkProtection {
    /// Turn them on (every distribution's default; minimal VM images leave them off), with a
    /// logged line; refuse to start only where that is not possible.
    Enable,
    /// Refuse to start: an operator who keeps them off on purpose decides.
    Require,
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
    #[error("invalid approver_token_file {0}: {1}")]
    ApproverToken(PathBuf, String),
    #[error("invalid approver_endpoint {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    ApproverEndpoint(String),
    #[error(
        "approver_endpoint {0} is not on loopback: the daemon's descriptions and the approver's answers would cross the network in the clear; set approver_ca_file (the approver serves TLS with its [grpc] table)"
    )]
    ApproverPlain(String),
    #[error("invalid approver TLS settings: {0}")]
    ApproverTls(&'static str),
    #[error("invalid {0} {1}: {2}")]
    ApproverTlsFile(&'static str, PathBuf, String),
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
    #[error("change_record = true needs a state_dir, where the record is kept")]
    RecordWithoutStateDir,
    #[error("invalid state_dir {0:?}: expected an absolute path outside every root")]
    StateDir(PathBuf),
    #[error("invalid landlock {0:?}: expected \"required\" or \"best-effort\"")]
    Landlock(String),
    #[error("invalid link_protection {0:?}: expected \"enable\" or \"require\"")]
    LinkProtection(String),
    #[error(
        "invalid client_max_modes key {0:?}: expected uid:UID (or a bare uid), cert:NAME, token:NAME, tcp or pod"
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
    #[error("invalid pod_network_tokens: {0}")]
    PodNetworkTokens(&'static str),
    #[error("invalid pod_network_tokens entry {0:?}: {1}")]
    PodNetworkListener(String, &'static str),
    #[error("invalid health_listen {0:?}: expected tcp:IP:PORT")]
    HealthListen(String),
    #[error("invalid {0}: must be at least 1")]
    AtLeastOne(&'static str),
    #[error("audit_signing_key needs audit_log: it signs that log's checkpoints")]
    SigningKeyWithoutLog,
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
        "invalid {key} entry {value:?}: expected a host name or IP address (hosts) or scheme://host[:port] (origins)"
    )]
    AllowedName { key: &'static str, value: String },
    #[error(
        "max_message_bytes {message} is too small for {key} {bytes}: a message carries the whole file plus 1 MiB of framing, so set max_message_bytes to at least {needed}"
    )]
    MessageTooSmall { message: u64, key: &'static str, bytes: u64, needed: u64 },
    #[error(
        "invalid otlp_endpoint {0:?}: expected http://HOST:PORT or https://HOST:PORT (an OTLP/gRPC receiver)"
    )]
    OtlpEndpoint(String),
    #[error("invalid {0}: needs otlp_endpoint")]
    TraceWithoutEndpoint(&'static str),
    #[error("invalid {0}: needs an https:// otlp_endpoint")]
    TraceNeedsTls(&'static str),
    #[error("invalid {0}: needs {1}")]
    TraceNeedsPair(&'static str, &'static str),
    #[error("invalid trace_sample_ratio {0}: expected a number from 0 to 1")]
    TraceSampleRatio(f64),
    #[error("cannot read the owner of root {0}: {1}")]
    RootOwner(PathBuf, #[source] std::io::Error),
    #[error(
        "the writable roots have different owners ({0}); workers take the owner's uid and gid: set worker_uid and worker_gid"
    )]
    RootOwners(String),
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

    pub fn resolve(mut file: ConfigFile, flags: Overrides) -> Result<Config, ConfigError> {
        let traces = trace_settings(&file)?;
        let (listen, roots) =
            listen_and_roots(&mut file, flags.listen, flags.writable_roots, flags.readable_roots)?;
        let (default_mode, max_mode) = modes(&mut file, flags.default_mode)?;
        let Approval { escalation, endpoint: approver_endpoint, token: approver_token, tls: approver_tls } =
            approval(&file)?;
        let log_format = match flags.log_format.or(file.log_format.take()).as_deref() {
            None | Some("human") => LogFormat::Human,
            Some("json") => LogFormat::Json,
            Some(other) => return Err(ConfigError::LogFormat(other.to_owned())),
        };
        let socket_access = socket_access(file.socket_mode.as_deref(), file.socket_group.as_deref())?;
        let (limits, max_message_bytes) = size_limits(&file)?;
        let landlock = match file.landlock.as_deref() {
            None | Some("required") => LandlockPolicy::Required,
            Some("best-effort") => LandlockPolicy::BestEffort,
            Some(other) => return Err(ConfigError::Landlock(other.to_owned())),
        };
        let link_protection = match file.link_protection.as_deref() {
            None | Some("enable") => LinkProtection::Enable,
            Some("require") => LinkProtection::Require,
            Some(other) => return Err(ConfigError::LinkProtection(other.to_owned())),
        };
        let workers_per_mode = file.workers_per_mode.unwrap_or(2);
        if !(1..=64).contains(&workers_per_mode) {
            return Err(ConfigError::Workers);
        }
        let mut client_max_modes = std::collections::BTreeMap::new();
        for (key, value) in file.client_max_modes.take().unwrap_or_default() {
            let client =
                crate::identity::ClientKey::parse(&key).ok_or_else(|| ConfigError::ClientUid(key.clone()))?;
            client_max_modes.insert(client, mode("client_max_modes", Some(value), max_mode)?);
        }
        let fleet = fleet_settings(
            &listen,
            FleetFile {
                tls_cert: file.tls_cert.take(),
                tls_key: file.tls_key.take(),
                tls_client_ca: file.tls_client_ca.take(),
                tls_client_cert: file.tls_client_cert.take(),
                tokens: file.tokens.take(),
                health_listen: file.health_listen.take(),
                pod_network_tokens: file.pod_network_tokens.take(),
            },
        )?;
        let load = time_and_load(&mut file)?;
        let rest = rest_settings(
            &roots,
            file.rest_root,
            file.metadata_env_prefix,
            file.metadata_env,
            (file.http_allowed_hosts, file.http_allowed_origins),
        )?;
        if file.audit_signing_key.is_some() && file.audit_log.is_none() {
            return Err(ConfigError::SigningKeyWithoutLog);
        }
        let audit_checkpoint_every = at_least_one(
            "audit_checkpoint_every",
            file.audit_checkpoint_every,
            fsd_proto::chain::DEFAULT_EVERY,
        )?;
        let state_dir = file.state_dir;
        if let Some(dir) = &state_dir
            && (!dir.is_absolute()
                || roots.iter().any(|r| dir.starts_with(&r.path) || r.path.starts_with(dir)))
        {
            return Err(ConfigError::StateDir(dir.clone()));
        }
        let record = match (&state_dir, file.change_record) {
            (Some(_), None | Some(true)) => Some(RecordSettings {
                max_bytes: file.change_record_max_bytes.unwrap_or(256 << 20),
                max_age_secs: file.change_record_max_age_secs.unwrap_or(7 * 24 * 3600),
                max_file_bytes: file.change_record_max_file_bytes.unwrap_or(16 << 20),
                operators: file.change_operators,
            }),
            (None, Some(true)) => return Err(ConfigError::RecordWithoutStateDir),
            (_, Some(false)) | (None, None) => None,
        };
        Ok(Config {
            state_dir,
            record,
            metrics: file.metrics.unwrap_or(true),
            traces,
            rest,
            landlock,
            link_protection,
            workers_per_mode,
            direct_reads: file.direct_reads.unwrap_or(true),
            inline_reads: file.inline_reads.unwrap_or(true),
            worker_uid: file.worker_uid,
            worker_gid: file.worker_gid,
            call_timeout: load.call_timeout,
            shutdown_grace: load.shutdown_grace,
            audit_log: file.audit_log,
            audit_signing_key: file.audit_signing_key,
            audit_checkpoint_every,
            client_max_modes,
            tls: fleet.tls,
            tokens: fleet.tokens,
            health_listen: fleet.health_listen,
            pod_network_tokens: fleet.pod_network_tokens,
            transport: load.transport,
            budgets: load.budgets,
            stream_idle_timeout: load.stream_idle_timeout,
            max_queued_calls: load.max_queued_calls,
            max_abandoned_workers: file.max_abandoned_workers.unwrap_or(8),
            listen,
            roots,
            protected_names: guarded::protected_names(file.protected_names),
            read_denied: guarded::read_denied(file.read_denied),
            allow_submounts: file.allow_submounts.unwrap_or_default(),
            allow_backslash: file.allow_backslash.unwrap_or(false),
            default_mode,
            max_mode,
            escalation,
            approver_public_key: file.approver_public_key.clone(),
            escalation_ttl: load.escalation_ttl,
            approver_endpoint,
            approver_token,
            approver_tls,
            log_format,
            socket_access,
            max_message_bytes,
            limits,
        })
    }
}

/// Where the daemon listens and the roots it serves: the flags' roots replace the file's.
fn listen_and_roots(
    file: &mut ConfigFile,
    listen_flags: Vec<String>,
    writable_flags: Vec<PathBuf>,
    readable_flags: Vec<PathBuf>,
) -> Result<(Vec<Listen>, Vec<RootSpec>), ConfigError> {
    let listen_text =
        if listen_flags.is_empty() { file.listen.take().unwrap_or_default() } else { listen_flags };
    let listen = listen_text.iter().map(|l| Listen::parse(l)).collect::<Result<Vec<_>, _>>()?;
    if listen.is_empty() {
        return Err(ConfigError::NoListen);
    }
    let roots_given = !writable_flags.is_empty() || !readable_flags.is_empty();
    let (writable, readable) = if roots_given {
        (writable_flags, readable_flags)
    } else {
        (file.writable_roots.take().unwrap_or_default(), file.readable_roots.take().unwrap_or_default())
    };
    let mut roots: Vec<RootSpec> =
        writable.into_iter().map(|path| RootSpec { path, writable: true }).collect();
    roots.extend(readable.into_iter().map(|path| RootSpec { path, writable: false }));
    if roots.is_empty() {
        return Err(ConfigError::NoRoots);
    }
    Ok((listen, roots))
}

/// The default and the highest mode.
fn modes(file: &mut ConfigFile, default_flag: Option<String>) -> Result<(Mode, Mode), ConfigError> {
    let default_mode = mode("default_mode", default_flag.or(file.default_mode.take()), Mode::WorkspaceWrite)?;
    let max_mode = mode("max_mode", file.max_mode.take(), default_mode)?;
    if default_mode > max_mode {
        return Err(ConfigError::DefaultAboveMax { default: default_mode.as_str(), max: max_mode.as_str() });
    }
    Ok((default_mode, max_mode))
}

/// How escalations are decided, and where and how the daemon asks its approver.
struct Approval {
    escalation: Escalation,
    endpoint: Option<crate::escalation::ApproverEndpoint>,
    token: Option<crate::approver_client::Token>,
    tls: Option<crate::approver_client::Tls>,
}

/// How escalations are decided, and where, with which token and over which TLS the daemon asks
/// its approver.
fn approval(file: &ConfigFile) -> Result<Approval, ConfigError> {
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
    let approver_token = file
        .approver_token_file
        .as_deref()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::ApproverToken(path.to_owned(), e.to_string()))?;
            crate::approver_client::Token::new(text.trim())
                .map_err(|why| ConfigError::ApproverToken(path.to_owned(), why.to_owned()))
        })
        .transpose()?;
    let tls = approver_tls(file)?;
    match &approver_endpoint {
        Some(crate::escalation::ApproverEndpoint::Unix(_)) if tls.is_some() => {
            return Err(ConfigError::ApproverTls(
                "approver_ca_file is for a tcp: approver_endpoint (a unix: socket is guarded by its permissions)",
            ));
        }
        Some(endpoint @ crate::escalation::ApproverEndpoint::Tcp(_))
            if tls.is_none() && !endpoint.on_loopback() =>
        {
            return Err(ConfigError::ApproverPlain(endpoint.to_string()));
        }
        _ => {}
    }
    Ok(Approval { escalation, endpoint: approver_endpoint, token: approver_token, tls })
}

/// `approver_ca_file`, and `approver_client_cert` with `approver_client_key`, read at start.
fn approver_tls(file: &ConfigFile) -> Result<Option<crate::approver_client::Tls>, ConfigError> {
    let read = |key: &'static str, path: &Path| {
        std::fs::read(path).map_err(|e| ConfigError::ApproverTlsFile(key, path.to_owned(), e.to_string()))
    };
    let identity = match (&file.approver_client_cert, &file.approver_client_key) {
        (Some(cert), Some(key)) => {
            Some((read("approver_client_cert", cert)?, read("approver_client_key", key)?))
        }
        (None, None) => None,
        _ => {
            return Err(ConfigError::ApproverTls("approver_client_cert and approver_client_key go together"));
        }
    };
    let Some(ca) = &file.approver_ca_file else {
        return match identity {
            Some(_) => Err(ConfigError::ApproverTls(
                "approver_client_cert needs approver_ca_file (the approver's CA): a certificate is presented only over TLS",
            )),
            None => Ok(None),
        };
    };
    Ok(Some(crate::approver_client::Tls::new(read("approver_ca_file", ca)?, identity)))
}

/// The size caps of files, listings, uploads and transactions, and the message size that must
/// hold the largest of them.
fn size_limits(file: &ConfigFile) -> Result<(Limits, u64), ConfigError> {
    // A size cap of 0 refuses every non-empty file, listing or upload: a typo, not a policy.
    // (max_diff_text_bytes = 0 is one: never send a change's text; max_abandoned_workers = 0
    // too: stop a mode at its first unkillable worker.)
    for (key, value) in [
        ("max_message_bytes", file.max_message_bytes),
        ("max_editable_file_bytes", file.max_editable_file_bytes),
        ("max_read_bytes", file.max_read_bytes),
        ("max_upload_bytes", file.max_upload_bytes),
        ("max_dir_entries", file.max_dir_entries.map(|n| n as u64)),
        ("max_transaction_operations", file.max_transaction_operations.map(|n| n as u64)),
        ("max_transaction_bytes", file.max_transaction_bytes),
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
        min_upload_bytes_per_sec: file.min_upload_bytes_per_sec.unwrap_or(defaults.min_upload_bytes_per_sec),
        max_transaction_operations: file
            .max_transaction_operations
            .unwrap_or(defaults.max_transaction_operations),
        max_transaction_bytes: file.max_transaction_bytes.unwrap_or(defaults.max_transaction_bytes),
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
    Ok((limits, max_message_bytes))
}

/// A zero time would make the daemon time out everything at once: refused, not raised.
fn at_least_one(key: &'static str, value: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::AtLeastOne(key)),
        other => Ok(other.unwrap_or(default)),
    }
}

/// The times and load limits of connections, calls and identities.
struct Load {
    transport: Transport,
    call_timeout: std::time::Duration,
    shutdown_grace: std::time::Duration,
    stream_idle_timeout: std::time::Duration,
    escalation_ttl: std::time::Duration,
    max_queued_calls: usize,
    budgets: crate::budget::Limits,
}

fn time_and_load(file: &mut ConfigFile) -> Result<Load, ConfigError> {
    let ms = |key: &'static str, value: Option<u64>, default: u64| {
        at_least_one(key, value, default).map(std::time::Duration::from_millis)
    };
    let transport = Transport {
        max_connections: file.max_connections.unwrap_or(256),
        max_unix_connections: file.max_unix_connections.unwrap_or(512),
        max_unix_connections_per_uid: file.max_unix_connections_per_uid.unwrap_or(128),
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
    let escalation_ttl =
        std::time::Duration::from_secs(at_least_one("escalation_ttl_secs", file.escalation_ttl_secs, 120)?);
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
    let budgets = file.budgets.take().unwrap_or_default().resolve()?;
    if transport.max_connections == 0 {
        return Err(ConfigError::AtLeastOne("max_connections"));
    }
    if transport.max_unix_connections == 0 {
        return Err(ConfigError::AtLeastOne("max_unix_connections"));
    }
    if transport.max_unix_connections_per_uid == 0 {
        return Err(ConfigError::AtLeastOne("max_unix_connections_per_uid"));
    }
    if transport.max_concurrent_streams == 0 {
        return Err(ConfigError::AtLeastOne("max_concurrent_streams"));
    }
    if transport.max_calls_per_connection == 0 {
        return Err(ConfigError::AtLeastOne("max_calls_per_connection"));
    }
    Ok(Load {
        transport,
        call_timeout,
        shutdown_grace,
        stream_idle_timeout,
        escalation_ttl,
        max_queued_calls,
        budgets,
    })
}

/// The share of calls without a caller's sampling decision that are traced: enough to see
/// the shape of a fleet's calls, little enough that tracing costs no more than the 3%
/// (BENCHMARKS.md). A caller's sampled `traceparent` is always traced.
const DEFAULT_SAMPLE_RATIO: f64 = 0.1;

/// Traces: on with `otlp_endpoint` (`http://HOST:PORT` plaintext or `https://HOST:PORT` TLS
/// OTLP/gRPC), their other keys refused without it (they would do nothing), the TLS ones
/// without `https://`.
fn trace_settings(file: &ConfigFile) -> Result<Option<crate::traces::Settings>, ConfigError> {
    let Some(endpoint) = &file.otlp_endpoint else {
        let keys = [
            ("trace_queue_spans", file.trace_queue_spans.is_some()),
            ("trace_sample_ratio", file.trace_sample_ratio.is_some()),
            ("otlp_ca", file.otlp_ca.is_some()),
            ("otlp_client_cert", file.otlp_client_cert.is_some()),
            ("otlp_client_key", file.otlp_client_key.is_some()),
            ("otlp_headers_file", file.otlp_headers_file.is_some()),
        ];
        if let Some((key, _)) = keys.iter().find(|(_, set)| *set) {
            return Err(ConfigError::TraceWithoutEndpoint(key));
        }
        return Ok(None);
    };
    let authority = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://"));
    let well_formed = authority.and_then(|authority| {
        let (host, port) = authority.rsplit_once(':')?;
        (!host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()).then_some(())
    });
    if well_formed.is_none() {
        return Err(ConfigError::OtlpEndpoint(endpoint.clone()));
    }
    let tls = endpoint.starts_with("https://");
    let tls_keys = [
        ("otlp_ca", file.otlp_ca.is_some()),
        ("otlp_client_cert", file.otlp_client_cert.is_some()),
        ("otlp_client_key", file.otlp_client_key.is_some()),
    ];
    if let Some((key, _)) = tls_keys.iter().find(|(_, set)| *set && !tls) {
        return Err(ConfigError::TraceNeedsTls(key));
    }
    let client = match (&file.otlp_client_cert, &file.otlp_client_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (Some(_), None) => return Err(ConfigError::TraceNeedsPair("otlp_client_cert", "otlp_client_key")),
        (None, Some(_)) => return Err(ConfigError::TraceNeedsPair("otlp_client_key", "otlp_client_cert")),
        (None, None) => None,
    };
    let queue = file.trace_queue_spans.unwrap_or(2048);
    if queue == 0 {
        return Err(ConfigError::AtLeastOne("trace_queue_spans"));
    }
    let sample_ratio = file.trace_sample_ratio.unwrap_or(DEFAULT_SAMPLE_RATIO);
    if !(0.0..=1.0).contains(&sample_ratio) {
        return Err(ConfigError::TraceSampleRatio(sample_ratio));
    }
    Ok(Some(crate::traces::Settings {
        endpoint: endpoint.clone(),
        queue,
        sample_ratio,
        ca: file.otlp_ca.clone(),
        client,
        headers_file: file.otlp_headers_file.clone(),
    }))
}
