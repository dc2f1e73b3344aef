//! Unix listening sockets that appear at their path already with their final mode and group.
//!
//! `bind` creates the socket file with the umask's mode, and `chmod` on the path afterwards
//! follows a symlink planted there and leaves a window in which anyone the umask lets in may
//! connect; `fchmod`/`fchown` on a socket descriptor change the socket's own inode, not the file.
//! So the socket is bound inside a private directory (mode 0700, created next to the final path,
//! so on the same filesystem), given its mode and group there, where nobody else can reach it,
//! and then renamed into place in one step (RENAME_NOREPLACE: never over another file).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, RenameFlags};

/// Who may connect: the socket file's permission bits and, if set, its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SocketAccess {
    pub mode: u32,
    pub gid: Option<u32>,
}

/// The name of the socket inside the private directory.
const INNER: &str = "s";

/// Binds a listener for `path` with `access` in effect from the moment the path exists; the path
/// appears only at [`Pending::publish`], so a daemon can make every listener ready before any
/// socket is visible (a client that sees one may use them all). A stale socket at `path` must
/// have been removed first; any file there makes publishing fail with EEXIST.
pub fn bind_unix(path: &Path, access: SocketAccess) -> std::io::Result<Pending> {
    let name = path.file_name().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent =
        rustix::fs::open(parent, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let private = private_name()?;
    rustix::fs::mkdirat(&parent, private.as_str(), Mode::RWXU)?;
    let made = Private { parent, name: private };
    let dir = rustix::fs::openat(
        &made.parent,
        made.name.as_str(),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let listener = bind_inside(&dir, access)?;
    Ok(Pending { listener, dir, name: name.to_owned(), private: made })
}

/// A bound socket still in its private directory.
#[derive(Debug)]
pub struct Pending {
    listener: UnixListener,
    dir: OwnedFd,
    name: std::ffi::OsString,
    private: Private,
}

impl Pending {
    /// Renames the socket into place (never over another file) and removes the private
    /// directory.
    pub fn publish(self) -> std::io::Result<UnixListener> {
        let Pending { listener, dir, name, private } = self;
        rustix::fs::renameat_with(&dir, INNER, &private.parent, name.as_os_str(), RenameFlags::NOREPLACE)?;
        drop(private);
        Ok(listener)
    }
}

/// Binds, sets mode and group, all inside the private directory `dir`.
fn bind_inside(dir: &OwnedFd, access: SocketAccess) -> std::io::Result<UnixListener> {
    // Through the directory's descriptor, so the bound path stays short whatever the real path's
    // length (sun_path holds 107 bytes) and names exactly the directory just made.
    let inner = format!("/proc/self/fd/{}/{INNER}", dir.as_raw_fd());
    let listener = UnixListener::bind(&inner)?;
    let set = (|| {
        if let Some(gid) = access.gid {
            let gid = Gid::from_raw(gid);
            rustix::fs::chownat(dir, INNER, None, Some(gid), AtFlags::SYMLINK_NOFOLLOW)?;
        }
        rustix::fs::chmodat(dir, INNER, Mode::from_raw_mode(access.mode), AtFlags::empty())
    })();
    if let Err(e) = set {
        let _ = rustix::fs::unlinkat(dir, INNER, AtFlags::empty());
        return Err(e.into());
    }
    Ok(listener)
}

/// Removes the private directory (and a socket left in it by a failure) when binding ends.
#[derive(Debug)]
struct Private {
    parent: OwnedFd,
    name: String,
}

impl Drop for Private {
    fn drop(&mut self) {
        if let Ok(dir) = rustix::fs::openat(
            &self.parent,
            self.name.as_str(),
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            let _ = rustix::fs::unlinkat(&dir, INNER, AtFlags::empty());
        }
        let _ = rustix::fs::unlinkat(&self.parent, self.name.as_str(), AtFlags::REMOVEDIR);
    }
}

/// `.fsd-bind-` and 64 random bits: not guessable in advance, so nobody pre-plants it.
fn private_name() -> std::io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().fold(String::from(".fsd-bind-"), |mut s, b| {
        s.push_str(&format!("{b:02x}"));
        s
    }))
}

/// Connects to the Unix socket at `path`, whatever its length: through a descriptor of the
/// socket file itself (`O_PATH`), since `sun_path` holds 107 bytes and a daemon serves a socket
/// in a deep directory or under a long name ([`bind_unix`] publishes any name by a rename). A
/// connect by the long path fails at once, which the stale-socket check took for a socket
/// nobody listens on; so did one through the directory's descriptor when the name alone was
/// long (`/proc/self/fd/N/NAME`).
pub fn connect_unix(path: &Path) -> std::io::Result<std::os::unix::net::UnixStream> {
    let socket = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let short = Path::new("/proc/self/fd").join(socket.as_raw_fd().to_string());
    std::os::unix::net::UnixStream::connect(short)
}

/// The socket file's mode and group as a path lookup sees them (for the tests).
pub fn file_access(path: &Path) -> std::io::Result<(u32, u32)> {
    let stat = rustix::fs::lstat(path)?;
    Ok((stat.st_mode & 0o7777, stat.st_gid))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn the_socket_appears_with_its_mode_and_group_and_nothing_else_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fsd.sock");
        let gid = rustix::process::getegid().as_raw();
        for mode in [0o600, 0o660, 0o666] {
            let pending = bind_unix(&path, SocketAccess { mode, gid: Some(gid) }).unwrap();
            assert!(!path.exists(), "visible before it is published");
            let listener = pending.publish().unwrap();
            assert_eq!(file_access(&path).unwrap(), (mode, gid));
            // Reachable by the path it was renamed to.
            std::os::unix::net::UnixStream::connect(&path).unwrap();
            drop(listener);
            std::fs::remove_file(&path).unwrap();
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_file_or_link_at_the_path_is_never_replaced_or_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let before = file_access(&target).unwrap();
        let error = bind_unix(&link, SocketAccess { mode: 0o666, gid: None }).unwrap().publish().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EEXIST), "{error}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(file_access(&target).unwrap(), before);
        let mut left: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, [OsStr::new("link.sock"), OsStr::new("target")]);
    }
}
