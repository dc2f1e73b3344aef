//! Where the workspace's binaries are: beside the running executable (`target/<profile>/`), one
//! directory up (a test runs from `target/<profile>/deps/`), or a directory the caller names.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result, io};

const BUILD_HINT: &str =
    "build the workspace binaries first (`cargo build --workspace --bins --features fsd/fault-injection`)";

/// `fsd` and `fsd-tools` of one build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bins {
    pub dir: PathBuf,
    pub fsd: PathBuf,
    pub tools: PathBuf,
}

impl Bins {
    /// The binaries beside this executable, or one directory up.
    pub fn locate() -> Result<Bins> {
        let exe = std::env::current_exe().map_err(io("current_exe"))?;
        let here = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        for dir in [Some(here.as_path()), here.parent()].into_iter().flatten() {
            if dir.join("fsd").is_file() && dir.join("fsd-tools").is_file() {
                return Bins::in_dir(dir);
            }
        }
        Err(Error::Missing { path: here.join("fsd"), hint: BUILD_HINT })
    }

    /// Both binaries in `dir`.
    pub fn in_dir(dir: &Path) -> Result<Bins> {
        let bins = Bins::fsd_in(dir)?;
        if !bins.tools.is_file() {
            return Err(Error::Missing { path: bins.tools, hint: BUILD_HINT });
        }
        Ok(bins)
    }

    /// The daemon in `dir`, `fsd-tools` not needed (the bench builds only what it starts).
    pub fn fsd_in(dir: &Path) -> Result<Bins> {
        let bins = Bins { dir: dir.to_path_buf(), fsd: dir.join("fsd"), tools: dir.join("fsd-tools") };
        if !bins.fsd.is_file() {
            return Err(Error::Missing { path: bins.fsd, hint: BUILD_HINT });
        }
        Ok(bins)
    }

    /// A bare command of the `fsd` binary, for runs that are not a daemon being served: `--version`,
    /// a start that must fail, a worker started by hand. A daemon starts through
    /// [`crate::Launch::fsd`], which waits until it listens and owns its process tree.
    pub fn fsd_command(&self) -> Command {
        let mut command = Command::new(&self.fsd);
        command.stdin(Stdio::null());
        command
    }

    /// Whether `fsd --version` says the daemon carries the test-only hooks (`fault-injection`),
    /// which the fence and reliability tests need.
    pub fn has_test_hooks(&self) -> Result<bool> {
        let out = self
            .fsd_command()
            .arg("--version")
            .output()
            .map_err(io(format!("{} --version", self.fsd.display())))?;
        Ok(String::from_utf8_lossy(&out.stdout).contains("(fault-injection)"))
    }
}
