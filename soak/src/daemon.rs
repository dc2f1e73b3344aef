//! A real `fsd` process tree on a chosen root: start it, find its processes (supervisor, network
//! process, workers), sample their memory and descriptors, and SIGKILL all of them at once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fsd_tool_client::connect::Endpoint;

use crate::util::{Error, Result};

/// The workspace binaries a run starts.
#[derive(Debug, Clone)]
pub struct Bins {
    pub fsd: PathBuf,
    pub tools: PathBuf,
}

impl Bins {
    /// `fsd` and `fsd-tools` beside this executable (`target/<profile>/fsd-soak`), or one
    /// directory up (a test runs from `target/<profile>/deps/`).
    pub fn locate() -> Result<Bins> {
        let exe = std::env::current_exe()?;
        let here = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        for dir in [Some(here.as_path()), here.parent()].into_iter().flatten() {
            if dir.join("fsd").is_file() && dir.join("fsd-tools").is_file() {
                return Bins::in_dir(dir);
            }
        }
        Err(Error(format!(
            "fsd and fsd-tools are not beside {}: build them first (`cargo build --workspace --bins --features fsd/fault-injection`)",
            exe.display()
        )))
    }

    pub fn in_dir(dir: &Path) -> Result<Bins> {
        let bins = Bins { fsd: dir.join("fsd"), tools: dir.join("fsd-tools") };
        for bin in [&bins.fsd, &bins.tools] {
            if !bin.is_file() {
                return Err(Error(format!("{} is missing", bin.display())));
            }
        }
        Ok(bins)
    }
}

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
    child: Child,
    pub socket: PathBuf,
    pub root: PathBuf,
}

/// Memory and descriptors of the whole tree at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// VmRSS summed over the tree, in KiB.
    pub rss_kib: u64,
    /// Entries of /proc/<pid>/fd summed over the tree.
    pub fds: u64,
    pub processes: u64,
}

impl Daemon {
    pub fn start(bins: &Bins, options: &Options) -> Result<Daemon> {
        let mut command = Command::new(&bins.fsd);
        command
            .arg("--listen")
            .arg(format!("unix:{}", options.socket.display()))
            .arg("--writable-root")
            .arg(&options.root);
        if !options.config.is_empty() {
            let path = options.socket.with_extension("toml");
            std::fs::write(&path, &options.config)?;
            command.arg("--config").arg(path);
        }
        let stderr = match &options.log {
            Some(path) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
            None => Stdio::inherit(),
        };
        command.env("FSD_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let child =
            command.spawn().map_err(|e| Error(format!("cannot start {}: {e}", bins.fsd.display())))?;
        let mut daemon = Daemon { child, socket: options.socket.clone(), root: options.root.clone() };
        daemon.wait_listening()?;
        Ok(daemon)
    }

    /// Waits until this daemon listens. A connection alone proves nothing: the listener of a
    /// predecessor killed a moment ago accepts until the last of its threads has exited. The
    /// listener must be one of this daemon's processes (a Unix socket's peer credentials name
    /// the process that called listen()), and the supervisor must still be running.
    fn wait_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(stream) = std::os::unix::net::UnixStream::connect(&self.socket)
                && let Ok(peer) = rustix::net::sockopt::socket_peercred(&stream)
                && self.pids().contains(&(peer.pid.as_raw_pid() as u32))
            {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(Error(format!("fsd exited before listening: {status}")));
            }
            if Instant::now() > deadline {
                return Err(Error("fsd did not listen within 30 s".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Unix(self.socket.clone())
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The supervisor and all its descendants, as they are now.
    pub fn pids(&self) -> Vec<u32> {
        tree(self.child.id())
    }

    /// The workers of `mode` (`workspace-write`, `read-only`, ...).
    pub fn worker_pids(&self, mode: &str) -> Vec<u32> {
        self.pids().into_iter().filter(|&pid| role(pid).as_deref() == Some(mode)).collect()
    }

    /// Memory and descriptors summed over the tree. A process that exits between the listing
    /// and the read counts for nothing.
    pub fn sample(&self) -> Sample {
        let mut sample = Sample::default();
        for pid in self.pids() {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
            sample.processes += 1;
            sample.rss_kib += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
            sample.fds += std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
        }
        sample
    }

    /// Whether the supervisor is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILLs the supervisor first (so it can start nothing new), then every other process of
    /// the tree as listed just before, and waits until all of them are gone.
    pub fn kill_tree(&mut self) -> Result<()> {
        let pids = self.pids();
        for &pid in &pids {
            kill(pid, rustix::process::Signal::KILL);
        }
        self.child.wait()?;
        wait_gone(&pids[1..], Duration::from_secs(20))
    }

    /// SIGTERM and wait: the graceful stop.
    pub fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        let pids = self.pids();
        kill(self.child.id(), rustix::process::Signal::TERM);
        let status = self.child.wait()?;
        wait_gone(&pids[1..], Duration::from_secs(30))?;
        Ok(status)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.kill_tree();
        }
    }
}

/// Sends `signal` to `pid`, ignoring a process that is already gone.
pub fn kill(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `pid` and all its descendants.
pub fn tree(root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        out.push(pid);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pending.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    out
}

/// A worker's mode from its command line (`--worker-mode MODE`), `network` for the network
/// process, `None` for the supervisor or a process that is gone.
pub fn role(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let after = |flag: &[u8]| {
        args.windows(2).find(|w| w[0] == flag).map(|w| String::from_utf8_lossy(w[1]).into_owned())
    };
    match after(b"--role").as_deref() {
        Some("worker") => after(b"--worker-mode"),
        Some(other) => Some(other.to_owned()),
        None => None,
    }
}

/// Whether a process is gone: none of its threads is still running (a zombie nobody reaped yet
/// counts as gone). Its main thread alone says too little: a killed multi-threaded process (the
/// network process) shows a zombie main thread while its other threads are still exiting, and
/// those still hold its descriptors, its listening socket among them.
fn gone(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.flatten().all(|task| match std::fs::read_to_string(task.path().join("stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    })
}

fn wait_gone(pids: &[u32], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error(format!("processes {left:?} of the daemon did not exit within {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
