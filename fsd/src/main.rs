//! The `fsd` binary: parses flags and runs the process role it was started as (the supervisor by
//! default; the network process and workers are re-executions of this binary by the supervisor).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fsd::backend::Mode;
use fsd::config::{Config, Overrides};
use fsd::daemon::DaemonError;
use fsd::supervisor::RunOptions;

/// The version line; a build with the test-only hooks says so, so tests can insist on it.
#[cfg(feature = "fault-injection")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (fault-injection)");
#[cfg(not(feature = "fault-injection"))]
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// fsd: the file daemon that owns the disk of one sandbox and serves fsd.v1 over gRPC.
#[derive(Debug, Parser)]
#[command(name = "fsd", version = VERSION)]
struct Args {
    /// Where to listen: unix:PATH or tcp:127.0.0.1:PORT (gRPC), http:127.0.0.1:PORT or http+unix:PATH (REST and gRPC-Web) (repeatable).
    #[arg(long, value_name = "ADDR")]
    listen: Vec<String>,
    /// A directory the daemon may read and write (repeatable).
    #[arg(long, value_name = "DIR")]
    writable_root: Vec<PathBuf>,
    /// A directory the daemon may only read (repeatable).
    #[arg(long, value_name = "DIR")]
    readable_root: Vec<PathBuf>,
    /// TOML configuration file (snake_case keys); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, value_name = "human|json")]
    log_format: Option<String>,
    /// The mode calls run at unless they ask for a narrower one.
    #[arg(long, value_name = "MODE")]
    default_mode: Option<String>,
    /// Exit when stdin reaches EOF and remove the socket directory (used by fsd-tools --root).
    #[arg(long, hide = true)]
    parent_pipe: bool,
    /// Internal: the process role (supervisor, network, worker).
    #[arg(long, hide = true, default_value = "supervisor")]
    role: String,
    /// Internal: the inherited IPC descriptor of a network process or worker.
    #[arg(long, hide = true)]
    ipc_fd: Option<i32>,
    /// Internal: a worker's mode.
    #[arg(long, hide = true)]
    worker_mode: Option<String>,
}

/// The flags a child gets: the configuration flags only, never the role or the parent pipe.
fn child_args(args: &Args) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for l in &args.listen {
        out.extend(["--listen".into(), l.into()]);
    }
    for r in &args.writable_root {
        out.extend(["--writable-root".into(), r.into()]);
    }
    for r in &args.readable_root {
        out.extend(["--readable-root".into(), r.into()]);
    }
    if let Some(c) = &args.config {
        out.extend(["--config".into(), c.into()]);
    }
    if let Some(f) = &args.log_format {
        out.extend(["--log-format".into(), f.into()]);
    }
    if let Some(m) = &args.default_mode {
        out.extend(["--default-mode".into(), m.into()]);
    }
    out
}

fn ipc_socket(args: &Args) -> Result<UnixStream, DaemonError> {
    let raw = args.ipc_fd.ok_or(DaemonError::Inherited(-1, fsd::sys::Errno::BADF))?;
    let fd = fsd::sys::ipc::inherited(raw).map_err(|e| DaemonError::Inherited(raw, e))?;
    Ok(UnixStream::from(fd))
}

fn run(args: Args) -> Result<(), DaemonError> {
    let overrides = Overrides {
        listen: args.listen.clone(),
        writable_roots: args.writable_root.clone(),
        readable_roots: args.readable_root.clone(),
        log_format: args.log_format.clone(),
        default_mode: args.default_mode.clone(),
    };
    let config = Config::load(args.config.as_deref(), overrides)?;
    if args.role != "supervisor" {
        fsd::sys::ipc::die_with_parent().map_err(|e| DaemonError::Inherited(-1, e))?;
    }
    match args.role.as_str() {
        "network" => fsd::network::run(config, ipc_socket(&args)?),
        "worker" => {
            fsd::daemon::init_logging(config.log_format);
            let mode = args.worker_mode.as_deref().and_then(Mode::parse).unwrap_or(Mode::ReadOnly);
            Ok(fsd::worker::run(&config, mode, ipc_socket(&args)?)?)
        }
        _ => fsd::supervisor::run(config, child_args(&args), RunOptions { parent_pipe: args.parent_pipe }),
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fsd: {e}");
            ExitCode::from(2)
        }
    }
}
