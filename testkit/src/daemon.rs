//! Starting a daemon and owning it until it is gone: the command (listeners, roots, config, extra
//! arguments, environment, a wrapper), the wait until it listens, its process tree, and the stop.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::bins::Bins;
use crate::error::{Error, Result, io};
use crate::procs::{self, Sample};

/// One listener, as `--listen` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listener {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// gRPC on loopback TCP, `host:port`.
    Tcp(String),
    /// The REST face (HTTP/1.1), `host:port`.
    Http(String),
}

impl Listener {
    /// The value of `--listen`.
    pub fn spec(&self) -> String {
        match self {
            Listener::Unix(path) => format!("unix:{}", path.display()),
            Listener::Tcp(addr) => format!("tcp:{addr}"),
            Listener::Http(addr) => format!("http:{addr}"),
        }
    }
}

/// Where the daemon's stderr goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stderr {
    /// Ours: its warnings show in the test's or the run's output.
    Inherit,
    /// Appended to this file.
    Log(PathBuf),
    /// A pipe the caller reads ([`Daemon::take_stderr`]).
    Piped,
    Null,
}

/// How to start one daemon (or another server with the same `--listen` flags).
#[derive(Debug, Clone)]
pub struct Launch {
    what: String,
    program: PathBuf,
    wrapper: Vec<OsString>,
    args: Vec<OsString>,
    listeners: Vec<Listener>,
    awaited: Vec<Listener>,
    roots: Vec<PathBuf>,
    config: Option<(PathBuf, String)>,
    env: Vec<(OsString, OsString)>,
    stderr: Stderr,
    stdin_pipe: bool,
    timeout: Duration,
}

impl Launch {
    /// The `fsd` of `bins`, logging warnings and worse unless `FSD_LOG` is set here.
    pub fn fsd(bins: &Bins) -> Launch {
        Launch::server("fsd", &bins.fsd).env("FSD_LOG", "warn")
    }

    /// Another server taking the same `--listen` flags (the bench's echo server); `what` names it
    /// in errors.
    pub fn server(what: &str, program: &Path) -> Launch {
        Launch {
            what: what.to_owned(),
            program: program.to_path_buf(),
            wrapper: Vec::new(),
            args: Vec::new(),
            listeners: Vec::new(),
            awaited: Vec::new(),
            roots: Vec::new(),
            config: None,
            env: Vec::new(),
            stderr: Stderr::Inherit,
            stdin_pipe: false,
            timeout: Duration::from_secs(30),
        }
    }

    /// Listens here (`--listen`), and the start waits until it does.
    pub fn listen(mut self, listener: Listener) -> Launch {
        self.listeners.push(listener);
        self
    }

    pub fn unix(self, socket: impl Into<PathBuf>) -> Launch {
        self.listen(Listener::Unix(socket.into()))
    }

    pub fn tcp(self, addr: impl Into<String>) -> Launch {
        self.listen(Listener::Tcp(addr.into()))
    }

    /// Waits for a listener the arguments already name (a config or a template of them).
    pub fn awaits(mut self, listener: Listener) -> Launch {
        self.awaited.push(listener);
        self
    }

    /// One more `--writable-root`.
    pub fn writable_root(mut self, root: impl Into<PathBuf>) -> Launch {
        self.roots.push(root.into());
        self
    }

    /// Writes `body` to `path` when the daemon starts and passes `--config path`.
    pub fn config(mut self, path: impl Into<PathBuf>, body: impl Into<String>) -> Launch {
        self.config = Some((path.into(), body.into()));
        self
    }

    /// Arguments right after the program (a subcommand) and before the kit's own flags.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Launch {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Launch {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets a variable; a later one wins, so this overrides the default `FSD_LOG`.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launch {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Starts the program through this command, which must exec it (`prlimit ...`, `ip netns
    /// exec NAME`): the child is then still the daemon's supervisor.
    pub fn wrapper<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, wrapper: I) -> Launch {
        self.wrapper = wrapper.into_iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    pub fn stderr(mut self, stderr: Stderr) -> Launch {
        self.stderr = stderr;
        self
    }

    /// Pipes stdin: closing it (the drop) is how the server learns to stop, so it cannot outlive
    /// its parent. For `fsd` use [`Launch::parent_pipe`], which also tells it so.
    pub fn stdin_pipe(mut self) -> Launch {
        self.stdin_pipe = true;
        self
    }

    /// `fsd --parent-pipe` with stdin piped: the daemon exits when the pipe closes.
    pub fn parent_pipe(self) -> Launch {
        self.arg("--parent-pipe").stdin_pipe()
    }

    /// How long the start may take to listen (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Launch {
        self.timeout = timeout;
        self
    }

    fn command(&self) -> Result<Command> {
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        command.args(&self.args);
        for listener in &self.listeners {
            command.arg("--listen").arg(listener.spec());
        }
        for root in &self.roots {
            command.arg("--writable-root").arg(root);
        }
        if let Some((path, body)) = &self.config {
            std::fs::write(path, body).map_err(io(format!("cannot write {}", path.display())))?;
            command.arg("--config").arg(path);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let stderr = match &self.stderr {
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Piped => Stdio::piped(),
            Stderr::Null => Stdio::null(),
            Stderr::Log(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(io(format!("cannot open {}", path.display())))?,
            ),
        };
        let stdin = if self.stdin_pipe { Stdio::piped() } else { Stdio::null() };
        command.stdin(stdin).stdout(Stdio::null()).stderr(stderr);
        Ok(command)
    }

    /// Starts it and waits until every listener is its own.
    pub fn start(self) -> Result<Daemon> {
        let (child, pipe) = self.spawn()?;
        let mut daemon = Daemon { launch: self, child, pipe };
        daemon.wait_listening()?;
        Ok(daemon)
    }

    fn spawn(&self) -> Result<(Child, Option<ChildStdin>)> {
        let mut child =
            self.command()?.spawn().map_err(io(format!("cannot start {}", self.program.display())))?;
        let pipe = child.stdin.take();
        Ok((child, pipe))
    }
}

/// A running daemon and its process tree. Dropping it closes its stdin pipe and gives it 10 s to
/// stop (when it has one), then SIGKILLs the whole tree.
#[derive(Debug)]
pub struct Daemon {
    launch: Launch,
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Daemon {
    /// Waits until this daemon listens. A connection alone proves nothing for a Unix socket: the
    /// listener of a predecessor killed a moment ago accepts until the last of its threads has
    /// exited. So the listener must be one of this daemon's processes (a Unix socket's peer
    /// credentials name the process that called listen()), and the daemon must still run.
    fn wait_listening(&mut self) -> Result<()> {
        let timeout = self.launch.timeout;
        let deadline = Instant::now() + timeout;
        let listeners: Vec<Listener> =
            self.launch.listeners.iter().chain(&self.launch.awaited).cloned().collect();
        let mut pending = listeners;
        loop {
            pending.retain(|listener| !self.listens(listener));
            if pending.is_empty() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().map_err(io("wait"))? {
                return Err(Error::Exited { what: self.launch.what.clone(), status });
            }
            if Instant::now() > deadline {
                return Err(Error::NotListening { what: self.launch.what.clone(), timeout });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn listens(&self, listener: &Listener) -> bool {
        match listener {
            Listener::Unix(path) => std::os::unix::net::UnixStream::connect(path).is_ok_and(|stream| {
                rustix::net::sockopt::socket_peercred(&stream)
                    .is_ok_and(|peer| self.pids().contains(&(peer.pid.as_raw_pid() as u32)))
            }),
            Listener::Tcp(addr) | Listener::Http(addr) => std::net::TcpStream::connect(addr).is_ok(),
        }
    }

    /// The first Unix socket it listens on.
    pub fn socket(&self) -> Option<&Path> {
        self.launch.listeners.iter().find_map(|l| match l {
            Listener::Unix(path) => Some(path.as_path()),
            _ => None,
        })
    }

    /// The first gRPC TCP address it listens on.
    pub fn tcp(&self) -> Option<&str> {
        self.launch.listeners.iter().find_map(|l| match l {
            Listener::Tcp(addr) => Some(addr.as_str()),
            _ => None,
        })
    }

    /// The supervisor's pid (the wrapper execs it, so it is the child's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The supervisor and all its descendants (network process, workers), as they are now.
    pub fn pids(&self) -> Vec<u32> {
        procs::tree(self.child.id())
    }

    /// The workers of `mode` (`workspace-write`, `read-only`, ...).
    pub fn worker_pids(&self, mode: &str) -> Vec<u32> {
        self.pids().into_iter().filter(|&pid| procs::role(pid).as_deref() == Some(mode)).collect()
    }

    /// SIGKILLs the workers of `modes` as they are now (the OOM killer, an operator, a crash)
    /// and returns their pids: none when there were none.
    pub fn kill_workers(&self, modes: &[&str]) -> Vec<u32> {
        let pids: Vec<u32> = modes.iter().flat_map(|mode| self.worker_pids(mode)).collect();
        for &pid in &pids {
            procs::kill(pid, Signal::KILL);
        }
        pids
    }

    /// Memory and descriptors summed over the tree.
    pub fn sample(&self) -> Sample {
        procs::sample(&self.pids())
    }

    /// VmHWM summed over the tree, in KiB, and how many processes it covers.
    pub fn peak_rss_kib(&self) -> (u64, usize) {
        let pids = self.pids();
        (procs::peak_rss_kib(&pids), pids.len())
    }

    /// Whether the supervisor is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The supervisor's process itself, for a test that signals or reaps it on purpose.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its stderr, once, when started with [`Stderr::Piped`].
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Sends `signal` to the supervisor.
    pub fn signal(&self, signal: Signal) {
        procs::kill(self.child.id(), signal);
    }

    /// Waits for the supervisor's exit status.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        self.child.wait().map_err(io(format!("wait for {}", self.launch.what)))
    }

    /// SIGKILLs the supervisor first (so it can start nothing new), then every other process of
    /// the tree as listed just before, and waits until all of them are gone.
    pub fn kill_tree(&mut self) -> Result<()> {
        let pids = self.pids();
        for &pid in &pids {
            procs::kill(pid, Signal::KILL);
        }
        self.wait()?;
        procs::wait_gone(pids.get(1..).unwrap_or_default(), Duration::from_secs(20), &self.launch.what)
    }

    /// SIGTERM, the graceful stop: waits for the supervisor's status and for the rest of the
    /// tree to be gone.
    pub fn terminate(&mut self) -> Result<ExitStatus> {
        let pids = self.pids();
        self.signal(Signal::TERM);
        let status = self.wait()?;
        procs::wait_gone(pids.get(1..).unwrap_or_default(), Duration::from_secs(30), &self.launch.what)?;
        Ok(status)
    }

    /// Stops it gracefully and starts it again as before (same listeners, root, config), then
    /// waits until the new one listens.
    pub fn restart(&mut self) -> Result<ExitStatus> {
        drop(self.pipe.take());
        let status = self.terminate()?;
        let (child, pipe) = self.launch.spawn()?;
        self.child = child;
        self.pipe = pipe;
        self.wait_listening()?;
        Ok(status)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A closed pipe is the stop signal of a server started with one; one that does not stop
        // in time is killed, as is one without a pipe.
        if self.pipe.take().is_some() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if self.running() {
            let _ = self.kill_tree();
        }
    }
}
