//! The embedded default: given a root directory and no endpoint, start a private `fsd` child on a
//! socket in a private temporary directory. The child watches an inherited pipe and exits when
//! it closes, so it never outlives a killed client.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::connect::Endpoint;

/// A running private daemon; dropping it stops the daemon and removes its socket directory.
#[derive(Debug)]
pub struct EmbeddedDaemon {
    child: Child,
    pipe: Option<ChildStdin>,
    dir: Option<tempfile::TempDir>,
    socket: PathBuf,
    stderr: Option<StderrRelay>,
}

/// The daemon's stderr, read by a thread: held back until the daemon listens (so a start error
/// becomes the client's own error, which MCP hosts show, rather than a line on a stderr they
/// hide), passed through to this process's stderr afterwards.
#[derive(Debug)]
struct StderrRelay {
    held: std::sync::Arc<std::sync::Mutex<Option<Vec<String>>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl StderrRelay {
    fn start(pipe: std::process::ChildStderr) -> StderrRelay {
        use std::io::{BufRead, Write};
        let held = std::sync::Arc::new(std::sync::Mutex::new(Some(Vec::new())));
        let (tx, done) = std::sync::mpsc::channel();
        let lines = held.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut held = lines.lock().unwrap_or_else(|p| p.into_inner());
                match held.as_mut() {
                    Some(held) => held.push(line),
                    None => {
                        let _ = writeln!(std::io::stderr(), "{line}");
                    }
                }
            }
            let _ = tx.send(());
        });
        StderrRelay { held, done }
    }

    /// From now on, lines go straight to this process's stderr; those held so far go first.
    fn pass_through(&self) {
        use std::io::Write;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for line in held.take().unwrap_or_default() {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }

    /// The daemon exited before it listened: the last line it wrote (its one start error line),
    /// once its stderr is closed (its children are gone too) or after a short wait.
    fn last_line(&self) -> Option<String> {
        let _ = self.done.recv_timeout(Duration::from_secs(1));
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref()?.iter().rev().find(|l| !l.trim().is_empty()).map(|l| start_error(l))
    }
}

/// The message of the daemon's log line: the human format's timestamp, level and target go
/// (`2026-… ERROR fsd: message`), and JSON lines keep their `fields.message`.
fn start_error(line: &str) -> String {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line)
        && let Some(message) = json.pointer("/fields/message").and_then(|m| m.as_str())
    {
        return message.to_owned();
    }
    match line.split_once(" ERROR ").and_then(|(_, rest)| rest.split_once(": ")) {
        Some((_, message)) => message.to_owned(),
        None => line.trim().to_owned(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("cannot find the fsd binary beside fsd-tools or on PATH; pass --fsd-bin")]
    NoBinary,
    #[error("root {0}: {1}")]
    Root(PathBuf, #[source] std::io::Error),
    #[error("cannot create a private socket directory: {0}")]
    TempDir(#[source] std::io::Error),
    #[error("cannot start {0}: {1}")]
    Spawn(PathBuf, #[source] std::io::Error),
    /// `said`: the last line the daemon wrote (its start error), when it wrote one.
    #[error("fsd exited before it listened ({status}){}", said.as_ref().map(|l| format!(": {l}")).unwrap_or_default())]
    Exited { status: std::process::ExitStatus, said: Option<String> },
    #[error("fsd did not listen within 10 s")]
    Timeout,
}

/// The `fsd` binary: beside this executable, else on PATH.
pub fn find_fsd() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.join("fsd")));
    if let Some(path) = beside.filter(|p| p.is_file()) {
        return Some(path);
    }
    let path_var = std::env::var_os("PATH")?;
    std::env::split_paths(&path_var).map(|dir| dir.join("fsd")).find(|p| p.is_file())
}

impl EmbeddedDaemon {
    /// Starts `fsd` with `root` as its only (writable) root, in workspace-write mode.
    pub fn start(root: &Path, fsd_bin: Option<&Path>) -> Result<EmbeddedDaemon, EmbeddedError> {
        let bin = match fsd_bin {
            Some(bin) => bin.to_owned(),
            None => find_fsd().ok_or(EmbeddedError::NoBinary)?,
        };
        let root = std::fs::canonicalize(root).map_err(|e| EmbeddedError::Root(root.to_owned(), e))?;
        if !root.is_dir() {
            return Err(EmbeddedError::Root(root, std::io::Error::from(std::io::ErrorKind::NotADirectory)));
        }
        let dir = tempfile::Builder::new().prefix("fsd-").tempdir().map_err(EmbeddedError::TempDir)?;
        let socket = dir.path().join("fsd.sock");
        let mut child = Command::new(&bin)
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--writable-root")
            .arg(&root)
            .arg("--default-mode")
            .arg("workspace-write")
            .arg("--parent-pipe")
            .env("FSD_LOG", std::env::var("FSD_LOG").unwrap_or_else(|_| "warn".to_owned()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| EmbeddedError::Spawn(bin.clone(), e))?;
        let pipe = child.stdin.take();
        let stderr = child.stderr.take().map(StderrRelay::start);
        let mut daemon = EmbeddedDaemon { child, pipe, dir: Some(dir), socket, stderr };
        daemon.wait_listening()?;
        if let Some(relay) = &daemon.stderr {
            relay.pass_through();
        }
        Ok(daemon)
    }

    fn wait_listening(&mut self) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let said = self.stderr.as_ref().and_then(StderrRelay::last_line);
                return Err(EmbeddedError::Exited { status, said });
            }
            if Instant::now() > deadline {
                return Err(EmbeddedError::Timeout);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Unix(self.socket.clone())
    }
}

impl Drop for EmbeddedDaemon {
    fn drop(&mut self) {
        // Closing the pipe is the stop signal; the daemon finishes in-flight calls and exits.
        drop(self.pipe.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        // The daemon's last lines (how it stopped) are on their way through the relay.
        if let Some(relay) = &self.stderr {
            let _ = relay.done.recv_timeout(Duration::from_secs(1));
        }
        if let Some(dir) = self.dir.take() {
            // The daemon removes the directory itself; this covers a daemon that was killed.
            let _ = dir.close();
        }
    }
}
