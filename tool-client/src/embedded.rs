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
    #[error("fsd exited before it listened ({0})")]
    Exited(std::process::ExitStatus),
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
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| EmbeddedError::Spawn(bin.clone(), e))?;
        let pipe = child.stdin.take();
        let mut daemon = EmbeddedDaemon { child, pipe, dir: Some(dir), socket };
        daemon.wait_listening()?;
        Ok(daemon)
    }

    fn wait_listening(&mut self) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(EmbeddedError::Exited(status));
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
        if let Some(dir) = self.dir.take() {
            // The daemon removes the directory itself; this covers a daemon that was killed.
            let _ = dir.close();
        }
    }
}
