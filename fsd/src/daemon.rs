//! Wiring: logging, the backend, listeners with tuned HTTP/2 settings, graceful shutdown on
//! SIGINT/SIGTERM (or the parent's pipe closing), and socket cleanup.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fsd_proto::v1::fsd_server::FsdServer;
use tokio::sync::watch;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use crate::backend::{Backend, StartError};
use crate::config::{Config, ConfigError, Listen, LogFormat};
use crate::service::FsdService;

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("cannot listen on {listen}: {source}")]
    Bind { listen: String, source: std::io::Error },
    #[error("another daemon already listens on {0}")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot install signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("server on {listen} failed: {source}")]
    Serve { listen: String, source: tonic::transport::Error },
}

/// Options that are not configuration: how this process was started.
#[derive(Debug, Default, Clone)]
pub struct RunOptions {
    /// Exit when standard input reaches EOF, and remove the socket's directory at exit: the
    /// embedded mode, where the parent holds the other end of that pipe.
    pub parent_pipe: bool,
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

/// Runs the daemon until shutdown.
pub fn run(config: Config, options: RunOptions) -> Result<(), DaemonError> {
    init_logging(config.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fsd")
        .build()
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(serve(config, options))
}

/// Removes a stale socket left by a daemon that died; refuses to steal a live one.
fn clear_stale_socket(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(DaemonError::SocketInUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(|source| DaemonError::Bind { listen: path.display().to_string(), source })
        }
        Ok(_) => Err(DaemonError::NotASocket(path.to_owned())),
    }
}

async fn serve(config: Config, options: RunOptions) -> Result<(), DaemonError> {
    let backend = Arc::new(Backend::new(&config.roots, &config.protected_names, config.limits)?);
    let service = FsdService::new(backend, &config);
    let (stop_tx, stop_rx) = watch::channel(false);

    let mut sockets = Vec::new();
    let mut servers = tokio::task::JoinSet::new();
    for listen in &config.listen {
        let max = config.max_message_bytes as usize;
        let svc = FsdServer::new(service.clone()).max_decoding_message_size(max).max_encoding_message_size(max);
        // Large windows and frames: tonic's defaults cost streaming several times over here.
        let router = tonic::transport::Server::builder()
            .initial_stream_window_size(16 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size((1 << 20) - 1)
            .tcp_nodelay(true)
            .max_concurrent_streams(256)
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .add_service(svc);
        let mut stop = stop_rx.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let name = listen.to_string();
        match listen {
            Listen::Unix(path) => {
                clear_stale_socket(path)?;
                let listener = tokio::net::UnixListener::bind(path)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                set_socket_mode(path).map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                sockets.push(path.clone());
                servers.spawn(async move {
                    let result = router.serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown).await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
            Listen::Tcp(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                servers.spawn(async move {
                    let result = router.serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown).await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
        }
        tracing::info!(listen = %listen, "listening");
    }
    tracing::info!(
        roots = ?config.roots.iter().map(|r| (r.path.display().to_string(), r.writable)).collect::<Vec<_>>(),
        default_mode = config.default_mode.as_str(),
        "fsd {} serving",
        env!("CARGO_PKG_VERSION")
    );

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(DaemonError::Signal)?;
    let parent_gone = async {
        if options.parent_pipe {
            wait_for_stdin_eof().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let mut failure = None;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: finishing in-flight calls"),
        _ = sigterm.recv() => tracing::info!("SIGTERM: finishing in-flight calls"),
        _ = parent_gone => tracing::info!("parent pipe closed: finishing in-flight calls"),
        Some(done) = servers.join_next() => {
            if let Ok(Err(e)) = done { failure = Some(e); }
        }
    }
    let _ = stop_tx.send(true);
    while let Some(done) = servers.join_next().await {
        if let Ok(Err(e)) = done {
            failure.get_or_insert(e);
        }
    }
    for path in &sockets {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %e, "could not remove socket");
        }
        if options.parent_pipe {
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    tracing::info!("stopped");
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn set_socket_mode(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

/// Resolves when standard input reaches EOF (or fails).
async fn wait_for_stdin_eof() {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
