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
    #[error("cannot listen on {listen}: {source}")]
    Bind { listen: String, source: std::io::Error },
    #[error("another daemon already listens on {0}")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    #[error("cannot open the audit log {path}: {source}")]
    Audit { path: PathBuf, source: std::io::Error },
    #[error("process setup failed: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot install signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("cannot start {role}: {source}")]
    Spawn { role: String, source: std::io::Error },
    #[error("interprocess channel: {0}")]
    Ipc(#[from] crate::ipc::IpcError),
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
    #[error("TLS setup failed: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("server reflection setup failed: {0}")]
    Reflection(String),
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FSD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
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
        let Ok(stream) = std::os::unix::net::UnixStream::connect(path) else { break };
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

/// Owner and group may connect; others may not.
pub fn set_socket_mode(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}
