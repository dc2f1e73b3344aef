//! What the daemon's processes share: the error type, logging, and the Unix socket chores.

use std::path::{Path, PathBuf};

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

/// Removes a stale socket left by a daemon that died; refuses to steal a live one.
pub fn clear_stale_socket(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(DaemonError::SocketInUse(path.to_owned()));
            }
            std::fs::remove_file(path)
                .map_err(|source| DaemonError::Bind { listen: path.display().to_string(), source })
        }
        Ok(_) => Err(DaemonError::NotASocket(path.to_owned())),
    }
}

/// Owner and group may connect; others may not.
pub fn set_socket_mode(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}
