//! Why the kit could not start, watch or stop a daemon.

use std::path::PathBuf;
use std::time::Duration;

/// A failure of the kit. The bench and the soak report it; the tests panic with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{} is missing: {hint}", path.display())]
    Missing { path: PathBuf, hint: &'static str },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{what} exited before it listened: {status}")]
    Exited { what: String, status: std::process::ExitStatus },
    #[error("{what} did not listen within {timeout:?}")]
    NotListening { what: String, timeout: Duration },
    #[error("processes {pids:?} of {what} did not exit within {timeout:?}")]
    Lingering { what: String, pids: Vec<u32>, timeout: Duration },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Wraps an I/O error with what was being done.
pub(crate) fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what: what.to_string(), source }
}
