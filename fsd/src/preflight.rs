//! What the supervisor checks before it starts any child: the causes that would otherwise show
//! up as workers crash-looping behind a daemon that says it serves. Each is one line that names
//! the cause, and exit status 2, so `Restart=on-failure` and orchestrators see a failed start.

use std::path::{Path, PathBuf};

use crate::config::{Config, Listen};

/// A configuration the daemon cannot serve, found before anything started.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreflightError {
    /// `what`: the setting that names the directory (`writable root`, `allow_submounts`).
    #[error("{what} {path} does not exist")]
    DirMissing { what: &'static str, path: PathBuf },
    #[error("{what} {path} is not a directory")]
    NotDirectory { what: &'static str, path: PathBuf },
    #[error("{what} {path}: {reason}")]
    DirUnusable { what: &'static str, path: PathBuf, reason: String },
    /// One directory named twice (also through a link, or as writable and readable): the
    /// daemon would serve it twice and take its own journal lock for another daemon's.
    #[error("{what} {path} is the same directory as {first_what} {first}: list each root once")]
    SameRoot { what: &'static str, path: PathBuf, first_what: &'static str, first: PathBuf },
    /// Two listeners on one socket path or one address: the second bind's own words (`File
    /// exists`, `Address already in use`) sent the operator looking for another process.
    #[error("{second} is the same {what} as {first}: list each listener once")]
    SameListener { what: &'static str, first: String, second: String },
    #[error("cannot listen on {listen}: the socket directory {dir} does not exist")]
    SocketDirMissing { listen: String, dir: PathBuf },
    #[error("cannot listen on {listen}: {dir} is not a directory")]
    SocketDirNotDirectory { listen: String, dir: PathBuf },
    #[error("worker_uid/worker_gid {uid}:{gid} cannot be used: 4294967295 means \"unchanged\" to the kernel")]
    IdsInvalid { uid: u32, gid: u32 },
    #[error(
        "worker_uid/worker_gid {uid}:{gid} cannot be used: the daemon runs as {euid}:{egid} without \
         CAP_SETUID/CAP_SETGID (run it as root, or drop worker_uid and worker_gid)"
    )]
    IdsUnusable { uid: u32, gid: u32, euid: u32, egid: u32 },
}

/// Checks everything the children would fail on at start. The first cause found is reported.
pub fn check(config: &Config) -> Result<(), PreflightError> {
    let what = |writable: bool| if writable { "writable root" } else { "readable root" };
    let mut seen: Vec<((u64, u64), &crate::backend::RootSpec)> = Vec::new();
    for root in &config.roots {
        let id = check_dir(&root.path, what(root.writable))?;
        if let Some((_, first)) = seen.iter().find(|(seen_id, _)| *seen_id == id) {
            return Err(PreflightError::SameRoot {
                what: what(root.writable),
                path: root.path.clone(),
                first_what: what(first.writable),
                first: first.path.clone(),
            });
        }
        seen.push((id, root));
    }
    // Every worker opens each allowed submount at birth: one that is not there would have them
    // all fail at start, behind a daemon that says it serves.
    for path in &config.allow_submounts {
        check_dir(path, "allow_submounts")?;
    }
    for listen in &config.listen {
        if let Listen::Unix(path) | Listen::HttpUnix(path) = listen {
            check_socket_dir(listen, path)?;
        }
    }
    check_listeners(&config.listen, config.health_listen)?;
    // An identity that cannot be decided (roots of different owners) is the supervisor's own
    // start-up error; one that can be decided must be one this process can take.
    match config.worker_identity() {
        Ok(identity) => check_ids(identity.uid, identity.gid),
        Err(_) => Ok(()),
    }
}

/// The roots the confined workers may not enter, one warning each: every call beneath such a
/// root fails with `FS_PERMISSION_DENIED`, behind a daemon that says it serves. (A warning, not
/// a start error: an ACL may let the workers in where the mode bits do not.) Workers open their
/// roots before they switch ids, so only each root's own search permission matters, for the
/// worker identity with no supplementary groups and no capabilities.
pub fn unenterable_roots(config: &Config, identity: crate::config::WorkerIdentity) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let confined = config.served_modes().iter().any(|m| *m != crate::backend::Mode::DangerFullAccess);
    if !confined || identity.root_capabilities {
        return Vec::new();
    }
    let (euid, egid) = crate::sys::effective_ids();
    let mut warnings = Vec::new();
    for root in &config.roots {
        let Ok(meta) = std::fs::metadata(&root.path) else { continue };
        let enters = if (identity.uid, identity.gid) == (euid, egid) {
            // Workers keep this process's ids and groups: ask the kernel (ACLs included).
            // A root daemon keeps capabilities its workers drop, so it cannot ask for them.
            euid == 0 || std::fs::metadata(root.path.join(".")).is_ok()
        } else {
            let bits = if meta.uid() == identity.uid {
                meta.mode() >> 6
            } else if meta.gid() == identity.gid {
                meta.mode() >> 3
            } else {
                meta.mode()
            };
            bits & 0o1 != 0
        };
        if !enters {
            warnings.push(format!(
                "{} {}: the workers (uid {}, gid {}) may not enter it (owner {}:{}, mode {:04o}): calls beneath it \
                 fail with FS_PERMISSION_DENIED; change its permissions or set worker_uid/worker_gid",
                if root.writable { "writable root" } else { "readable root" },
                root.path.display(),
                identity.uid,
                identity.gid,
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777
            ));
        }
    }
    warnings
}

/// A directory the setting `what` names: it must exist and be a directory. Returns its device
/// and inode, which say whether two settings name the same directory.
fn check_dir(path: &Path, what: &'static str) -> Result<(u64, u64), PreflightError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok((meta.dev(), meta.ino())),
        Ok(_) => Err(PreflightError::NotDirectory { what, path: path.to_owned() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(PreflightError::DirMissing { what, path: path.to_owned() })
        }
        Err(e) => Err(PreflightError::DirUnusable { what, path: path.to_owned(), reason: e.to_string() }),
    }
}

fn check_socket_dir(listen: &Listen, path: &Path) -> Result<(), PreflightError> {
    // A bare file name is a socket in the current directory, which exists.
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => {
            Err(PreflightError::SocketDirNotDirectory { listen: listen.to_string(), dir: dir.to_owned() })
        }
        Err(_) => Err(PreflightError::SocketDirMissing { listen: listen.to_string(), dir: dir.to_owned() }),
    }
}

/// No two listeners (`health_listen` included) on one socket path or one TCP address; port 0
/// asks the kernel for a fresh port each time, so it never collides.
fn check_listeners(listen: &[Listen], health: Option<std::net::SocketAddr>) -> Result<(), PreflightError> {
    #[derive(PartialEq)]
    enum Place {
        Path(PathBuf),
        Addr(std::net::SocketAddr),
    }
    let place = |l: &Listen| match l {
        Listen::Unix(p) | Listen::HttpUnix(p) => {
            Place::Path(std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        }
        Listen::Tcp(a) | Listen::Http(a) | Listen::HttpPlain(a) | Listen::HttpPod(a) => Place::Addr(*a),
    };
    let health = health.map(|a| (Place::Addr(a), format!("health_listen tcp:{a}")));
    let all: Vec<(Place, String)> =
        listen.iter().map(|l| (place(l), format!("listen {l}"))).chain(health).collect();
    for (at, (here, name)) in all.iter().enumerate() {
        if matches!(here, Place::Addr(a) if a.port() == 0) {
            continue;
        }
        if let Some((_, first)) = all[..at].iter().find(|(there, _)| there == here) {
            let what = if matches!(here, Place::Path(_)) { "socket path" } else { "address" };
            return Err(PreflightError::SameListener { what, first: first.clone(), second: name.clone() });
        }
    }
    Ok(())
}

fn check_ids(uid: u32, gid: u32) -> Result<(), PreflightError> {
    if uid == u32::MAX || gid == u32::MAX {
        return Err(PreflightError::IdsInvalid { uid, gid });
    }
    if crate::sys::confine::can_switch_ids(uid, gid) {
        return Ok(());
    }
    let (euid, egid) = crate::sys::effective_ids();
    Err(PreflightError::IdsUnusable { uid, gid, euid, egid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_socket_directories() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap_or_else(|e| panic!("write: {e}"));
        let missing = dir.path().join("missing");
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir.path()).unwrap_or_else(|e| panic!("stat: {e}"));
        assert_eq!(check_dir(dir.path(), "writable root"), Ok((meta.dev(), meta.ino())));
        let check_root_case = |path: &Path, expected: Result<(), PreflightError>| {
            assert_eq!(check_dir(path, "writable root").map(drop), expected, "{}", path.display());
        };
        check_root_case(
            &missing,
            Err(PreflightError::DirMissing { what: "writable root", path: missing.clone() }),
        );
        check_root_case(
            &file,
            Err(PreflightError::NotDirectory { what: "writable root", path: file.clone() }),
        );
        let socket = |p: PathBuf| (Listen::Unix(p.clone()), p);
        let (listen, path) = socket(dir.path().join("fsd.sock"));
        assert_eq!(check_socket_dir(&listen, &path), Ok(()));
        let (listen, path) = socket(missing.join("fsd.sock"));
        assert_eq!(
            check_socket_dir(&listen, &path).map_err(|e| e.to_string()),
            Err(format!(
                "cannot listen on unix:{0}/fsd.sock: the socket directory {0} does not exist",
                missing.display()
            ))
        );
        let (listen, path) = socket(file.join("fsd.sock"));
        assert_eq!(
            check_socket_dir(&listen, &path),
            Err(PreflightError::SocketDirNotDirectory { listen: listen.to_string(), dir: file.clone() })
        );
        let (listen, path) = socket(PathBuf::from("fsd.sock"));
        assert_eq!(check_socket_dir(&listen, &path), Ok(()));
    }

    #[test]
    fn each_listener_once() {
        let check = |listen: &[&str], health: Option<&str>, expected: Result<(), &str>| {
            let listen: Vec<Listen> =
                listen.iter().map(|l| Listen::parse(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect();
            let health = health.map(|h| h.parse().unwrap_or_else(|e| panic!("{h}: {e}")));
            let got = check_listeners(&listen, health).map_err(|e| e.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "{listen:?} {health:?}");
        };
        check(
            &["unix:/run/a.sock", "http+unix:/run/b.sock", "tcp:127.0.0.1:1", "http:127.0.0.1:2"],
            None,
            Ok(()),
        );
        check(&["tcp:127.0.0.1:0", "http:127.0.0.1:0"], Some("127.0.0.1:0"), Ok(()));
        check(
            &["unix:/run/a.sock", "http+unix:/run/./a.sock"],
            None,
            Err(
                "listen http+unix:/run/./a.sock is the same socket path as listen unix:/run/a.sock: list each listener once",
            ),
        );
        check(
            &["tcp:127.0.0.1:7000", "http:127.0.0.1:7000"],
            None,
            Err(
                "listen http:127.0.0.1:7000 is the same address as listen tcp:127.0.0.1:7000: list each listener once",
            ),
        );
        check(
            &["tcp:127.0.0.1:7000"],
            Some("127.0.0.1:7000"),
            Err(
                "health_listen tcp:127.0.0.1:7000 is the same address as listen tcp:127.0.0.1:7000: list each listener once",
            ),
        );
    }

    #[test]
    fn worker_ids() {
        let (euid, egid) = crate::sys::effective_ids();
        assert_eq!(check_ids(euid, egid), Ok(()));
        assert_eq!(check_ids(u32::MAX, egid), Err(PreflightError::IdsInvalid { uid: u32::MAX, gid: egid }));
    }
}
