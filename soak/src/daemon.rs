//! A real `fsd` process tree on a chosen root, started through the shared kit (`fsd-testkit`):
//! the workloads' view of it (one root, one Unix socket, stderr to a log or ours).

use std::path::PathBuf;

use fsd_tool_client::connect::Endpoint;

pub use fsd_testkit::{Bins, Sample, kill, role, tree};

use crate::util::Result;

/// How to start a daemon.
#[derive(Debug, Clone)]
pub struct Options {
    /// The one writable root.
    pub root: PathBuf,
    /// The Unix socket to listen on.
    pub socket: PathBuf,
    /// A config file body (TOML); empty for none. Written beside the socket.
    pub config: String,
    /// Where the daemon's stderr goes (appended); `None` inherits ours.
    pub log: Option<PathBuf>,
}

/// A running daemon. Dropping it SIGKILLs the whole tree.
#[derive(Debug)]
pub struct Daemon {
    process: fsd_testkit::Daemon,
    pub socket: PathBuf,
    pub root: PathBuf,
}

impl Daemon {
    pub fn start(bins: &Bins, options: &Options) -> Result<Daemon> {
        let mut launch = fsd_testkit::Launch::fsd(bins).unix(&options.socket).writable_root(&options.root);
        if !options.config.is_empty() {
            launch = launch.config(options.socket.with_extension("toml"), options.config.as_str());
        }
        if let Some(log) = &options.log {
            launch = launch.stderr(fsd_testkit::Stderr::Log(log.clone()));
        }
        Ok(Daemon { process: launch.start()?, socket: options.socket.clone(), root: options.root.clone() })
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Unix(self.socket.clone())
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The supervisor and all its descendants, as they are now.
    pub fn pids(&self) -> Vec<u32> {
        self.process.pids()
    }

    /// The workers of `mode` (`workspace-write`, `read-only`, ...).
    pub fn worker_pids(&self, mode: &str) -> Vec<u32> {
        self.process.worker_pids(mode)
    }

    /// Memory and descriptors summed over the tree.
    pub fn sample(&self) -> Sample {
        self.process.sample()
    }

    /// Whether the supervisor is still running.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// SIGKILLs the whole tree and waits until all of it is gone.
    pub fn kill_tree(&mut self) -> Result<()> {
        Ok(self.process.kill_tree()?)
    }

    /// SIGTERM and wait: the graceful stop.
    pub fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        Ok(self.process.terminate()?)
    }
}
