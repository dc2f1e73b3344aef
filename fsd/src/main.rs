//! The `fsd` binary: parses flags and runs the daemon.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fsd::config::{Config, Overrides};
use fsd::daemon::{self, RunOptions};

/// fsd: the file daemon that owns the disk of one sandbox and serves fsd.v1 over gRPC.
#[derive(Debug, Parser)]
#[command(name = "fsd", version)]
struct Args {
    /// Where to listen: unix:PATH or tcp:127.0.0.1:PORT (repeatable).
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
}

fn main() -> ExitCode {
    let args = Args::parse();
    let overrides = Overrides {
        listen: args.listen,
        writable_roots: args.writable_root,
        readable_roots: args.readable_root,
        log_format: args.log_format,
        default_mode: args.default_mode,
    };
    let result = Config::load(args.config.as_deref(), overrides)
        .map_err(daemon::DaemonError::from)
        .and_then(|config| daemon::run(config, RunOptions { parent_pipe: args.parent_pipe }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fsd: {e}");
            ExitCode::from(2)
        }
    }
}
