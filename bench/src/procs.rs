//! The servers under test, as child processes: the release `fsd` (one Unix socket and one
//! loopback TCP listener over a temporary root) and the bench's own bare tonic echo server with
//! the same listeners. Both stop when their stdin pipe closes, so neither outlives the bench.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use fsd_tool_client::connect::Endpoint;

use crate::Res;

/// The two transports every per-call figure is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Tcp,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Unix, Transport::Tcp];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Unix => "Unix socket",
            Transport::Tcp => "TCP loopback",
        }
    }
}

/// A child server with a Unix socket and a TCP port.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pipe: Option<ChildStdin>,
    socket: PathBuf,
    tcp: String,
    /// Holds the socket directory until the server is gone.
    _dir: tempfile::TempDir,
}

/// A loopback port nobody listens on now (the server binds it a moment later).
pub fn free_port() -> Res<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Server {
    /// Starts the release `fsd` with `root` as its writable root; plaintext loopback TCP, which
    /// is read-only unless configured, may write too (the TCP rows write).
    pub fn fsd(bin_dir: &Path, root: &Path) -> Res<Server> {
        Server::fsd_started(bin_dir, root, &[], Some("client_max_modes = { tcp = \"workspace-write\" }\n"))
    }

    /// [`Server::fsd`] with more arguments (a config, another listener) instead of its config.
    pub fn fsd_with(bin_dir: &Path, root: &Path, args: &[std::ffi::OsString]) -> Res<Server> {
        Server::fsd_started(bin_dir, root, args, None)
    }

    fn fsd_started(
        bin_dir: &Path,
        root: &Path,
        args: &[std::ffi::OsString],
        config: Option<&str>,
    ) -> Res<Server> {
        let bin = bin_dir.join("fsd");
        if !bin.is_file() {
            return Err(format!("{} is missing: build with `cargo build --release`", bin.display()).into());
        }
        let mut cmd = Command::new(bin);
        cmd.arg("--writable-root").arg(root).arg("--parent-pipe").args(args).env("FSD_LOG", "warn");
        Server::start(cmd, "fsd", config)
    }

    /// Starts this binary's bare tonic echo server.
    pub fn echo() -> Res<Server> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("echo-server");
        Server::start(cmd, "echo", None)
    }

    fn start(mut cmd: Command, what: &str, config: Option<&str>) -> Res<Server> {
        let dir = tempfile::Builder::new().prefix("fsd-bench-sock-").tempdir()?;
        if let Some(config) = config {
            let file = dir.path().join(format!("{what}.toml"));
            std::fs::write(&file, config)?;
            cmd.arg("--config").arg(file);
        }
        let socket = dir.path().join(format!("{what}.sock"));
        let tcp = format!("127.0.0.1:{}", free_port()?);
        cmd.arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--listen")
            .arg(format!("tcp:{tcp}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn()?;
        let pipe = child.stdin.take();
        let mut server = Server { child, pipe, socket, tcp, _dir: dir };
        server.wait_listening(what)?;
        Ok(server)
    }

    fn wait_listening(&mut self, what: &str) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let unix = std::os::unix::net::UnixStream::connect(&self.socket).is_ok();
            if unix && std::net::TcpStream::connect(&self.tcp).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("{what} exited before it listened: {status}").into());
            }
            if Instant::now() > deadline {
                return Err(format!("{what} did not listen within 20 s").into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn endpoint(&self, transport: Transport) -> Endpoint {
        match transport {
            Transport::Unix => Endpoint::Unix(self.socket.clone()),
            Transport::Tcp => Endpoint::Tcp(self.tcp.clone()),
        }
    }

    /// The server's process and all its descendants (for fsd: the supervisor, the network
    /// process and the workers), as they are now.
    pub fn pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut pending = vec![self.child.id()];
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

    /// Peak resident memory in KiB, VmHWM summed over the process tree: an upper bound of the
    /// whole server's peak (the processes need not peak at the same moment). Also the count.
    pub fn peak_rss_kib(&self) -> (u64, usize) {
        let pids = self.pids();
        let total = pids.iter().map(|pid| status_kib(*pid, "VmHWM:")).sum();
        (total, pids.len())
    }
}

/// A `kB` field of /proc/PID/status; 0 when the process is gone.
fn status_kib(pid: u32, field: &str) -> u64 {
    let mut text = String::new();
    let read =
        std::fs::File::open(format!("/proc/{pid}/status")).and_then(|mut f| f.read_to_string(&mut text));
    if read.is_err() {
        return 0;
    }
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing the pipe is the stop signal; a server that does not stop in time is killed.
        drop(self.pipe.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}
