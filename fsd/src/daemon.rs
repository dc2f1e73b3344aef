//! What the daemon's processes share: the error type, logging, and the Unix socket chores.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{ConfigError, LogFormat};

/// Why a daemon process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Start(#[from] crate::backend::StartError),
    #[error(transparent)]
    Preflight(#[from] crate::start_checks::PreflightError),
    /// The network process could not start; its own words.
    #[error("{0}")]
    NetworkStart(String),
    /// Every mode the daemon serves was given up (its workers keep exiting at start): a daemon
    /// that serves nothing stops rather than run on.
    #[error("no mode can be served: {0}")]
    NothingServed(String),
    /// This child's start failure went to the supervisor, which reports it once.
    #[error("reported to the supervisor")]
    Reported,
    #[error("cannot listen on {listen}: {source}")]
    Bind { listen: String, source: std::io::Error },
    #[error(
        "cannot listen on {listen}: cannot give the socket to group {gid} (socket_group): {source}; run the daemon as root or as a member of that group"
    )]
    SocketGroup { listen: String, gid: u32, source: std::io::Error },
    #[error("another daemon already listens on {0}")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// A connect to the socket failed otherwise than a stale socket fails (refused): whether a
    /// daemon listens there cannot be told, so the socket is not removed.
    #[error(
        "cannot tell whether another daemon listens on {path} (connecting: {source}); remove it if none does"
    )]
    SocketUnchecked { path: PathBuf, source: std::io::Error },
    #[error("cannot open the audit log {path}: {source}")]
    Audit { path: PathBuf, source: std::io::Error },
    #[error("cannot use audit_signing_key: {0}")]
    AuditKey(#[source] fsd_proto::chain::KeyError),
    #[error("cannot keep the audit log's key in {path}: {source}")]
    AuditKeyDir { path: PathBuf, source: std::io::Error },
    #[error("no randomness for the audit log's key: {0}")]
    NoAuditKey(getrandom::Error),
    #[error("process setup failed: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot prepare state_dir {path}: {source}")]
    StateDir { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Traces(#[from] crate::traces::TraceError),
    #[error("cannot install signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("cannot start {role}: {source}")]
    Spawn { role: String, source: std::io::Error },
    #[error("interprocess channel: {0}")]
    Ipc(#[from] crate::ipc_messages::IpcError),
    #[error("no randomness for the content digest key: {0}")]
    NoDigestKey(getrandom::Error),
    /// This process's tags would match no other process's.
    #[error("a content digest was taken before the daemon's digest key was set")]
    DigestKeyTooLate,
    #[error("inherited descriptor {0}: {1}")]
    Inherited(i32, #[source] crate::sys::Errno),
    #[error("confinement failed: {0}")]
    Confine(#[source] crate::sys::confine::ConfineError),
    #[error(transparent)]
    Worker(#[from] crate::worker::WorkerError),
    #[error("server on {listen} failed: {source}")]
    Serve { listen: String, source: tonic::transport::Error },
    #[error("the network process exited: {0}")]
    NetworkExited(std::process::ExitStatus),
    /// It stopped cleanly, but nobody asked the supervisor: most likely it was sent the signal.
    #[error(
        "the network process stopped ({status}) without the supervisor asking, so the daemon stops; to stop fsd, signal the supervisor (pid {supervisor})"
    )]
    NetworkStopped { status: String, supervisor: u32 },
    #[error("TLS setup failed: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("server reflection setup failed: {0}")]
    Reflection(String),
}

/// `FSD_LOG` could not be used: the daemon refuses to start rather than log nothing.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("invalid FSD_LOG {value:?}: {reason}")]
    Filter { value: String, reason: String },
}

/// The filter `FSD_LOG` asks for: comma-separated `LEVEL` or `TARGET=LEVEL` directives (unset or
/// empty: `info`). A bare word that is not a level is refused: tracing would read it as a
/// target name and silently log nothing else.
pub fn log_filter(value: Option<&str>) -> Result<tracing_subscriber::EnvFilter, LogError> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let text = value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or("info");
    let refuse = |reason: String| LogError::Filter { value: text.to_owned(), reason };
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(refuse(format!(
                "{directive:?} is not a level (trace, debug, info, warn, error, off); write LEVEL or TARGET=LEVEL"
            )));
        }
    }
    tracing_subscriber::EnvFilter::builder().parse(text).map_err(|e| refuse(e.to_string()))
}

/// Whether human-format logs may carry ANSI colour: only on a terminal, and never with
/// `NO_COLOR` set (https://no-color.org).
pub fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the process's logger on stderr. With an invalid `FSD_LOG` the logger still comes up
/// (at `info`), so the caller can report the error in the configured format, then stop.
pub fn init_logging(format: LogFormat) -> Result<(), LogError> {
    use std::io::IsTerminal;
    let (filter, outcome) = match log_filter(std::env::var("FSD_LOG").ok().as_deref()) {
        Ok(filter) => (filter, Ok(())),
        Err(e) => (tracing_subscriber::EnvFilter::new("info"), Err(e)),
    };
    let ansi = colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // A closed stderr must not turn every later event into a second failed write.
        .log_internal_errors(false);
    // `try_init`: a second call (the embedded test harness) keeps the first logger.
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    outcome
}

/// How long a starting daemon waits for a predecessor that is still exiting to let go of the
/// socket. Only a listener whose process is provably on its way out is waited for; a live
/// daemon's is refused at once.
const PREDECESSOR_EXIT: Duration = Duration::from_secs(10);

/// Removes a stale socket left by a daemon that died; refuses to steal a live one. A daemon
/// killed a moment ago (a restart after SIGKILL, a supervisor killed alone) still accepts
/// connections until the last thread of its network process has exited: that listener is
/// waited for, not taken for another daemon.
pub fn clear_stale_socket(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::FileTypeExt;
    let deadline = Instant::now() + PREDECESSOR_EXIT;
    let mut waited = false;
    loop {
        match std::fs::symlink_metadata(path) {
            Err(_) => return Ok(()),
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(DaemonError::NotASocket(path.to_owned()));
            }
            Ok(_) => {}
        }
        // Only a refused connect says nobody listens: one this process may not make (the
        // socket's mode or group shuts it out) says nothing, and the socket may be live.
        let stream = match crate::sys::socket::connect_unix(path) {
            Ok(stream) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(DaemonError::SocketUnchecked { path: path.to_owned(), source }),
        };
        let listener = crate::sys::ipc::listener_pid(&stream);
        drop(stream);
        if !listener.is_some_and(crate::sys::ipc::exiting) || Instant::now() >= deadline {
            return Err(DaemonError::SocketInUse(path.to_owned()));
        }
        if !waited {
            tracing::info!(path = %path.display(), pid = listener, "the previous daemon is still exiting; waiting for its socket");
            waited = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(DaemonError::Bind { listen: path.display().to_string(), source: e })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsd_log_values() {
        let check = |value: Option<&str>, expected: Result<(), &str>| {
            let got = log_filter(value).map(drop).map_err(|e| e.to_string());
            match expected {
                Ok(()) => assert!(got.is_ok(), "{value:?}: {got:?}"),
                Err(want) => {
                    let got = got.err().unwrap_or_default();
                    assert!(got.starts_with(want), "{value:?}: {got:?} does not start with {want:?}");
                }
            }
        };
        for good in
            [None, Some(""), Some("warn"), Some("DEBUG"), Some("info,fsd::network=debug"), Some("off")]
        {
            check(good, Ok(()));
        }
        check(Some("bogus"), Err("invalid FSD_LOG \"bogus\": \"bogus\" is not a level"));
        check(Some("info,verbose"), Err("invalid FSD_LOG \"info,verbose\": \"verbose\" is not a level"));
        check(Some("fsd=loud"), Err("invalid FSD_LOG \"fsd=loud\": "));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        let check = |tty: bool, no_color: Option<&str>, expected: bool| {
            assert_eq!(colour(tty, no_color.map(OsStr::new)), expected, "{tty} {no_color:?}");
        };
        check(true, None, true);
        check(true, Some(""), true);
        check(true, Some("1"), false);
        check(false, None, false);
        check(false, Some("1"), false);
    }
}
