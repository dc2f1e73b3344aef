//! What the supervisor checks before it starts any child: the causes that would otherwise show
//! up as workers crash-looping behind a daemon that says it serves. Each is one line that names
//! the cause, and exit status 2, so `Restart=on-failure` and orchestrators see a failed start.

use std::path::{Path, PathBuf};

use crate::config::{Config, LandlockPolicy, LinkProtection, Listen, WorkerIdentity};
use crate::op::Mode;
use crate::sys::Errno;

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
    /// The root's own directory refuses the workers' identity (a parent that does is
    /// `RootParentBlocks`).
    #[error(
        "{what} {path}: the workers (uid {uid}, gid {gid}) may not enter it ({errno}; owner {owner}:{group}, \
         mode {mode:04o}): change its permissions or set worker_uid/worker_gid"
    )]
    RootUnenterable {
        what: &'static str,
        path: PathBuf,
        uid: u32,
        gid: u32,
        errno: Errno,
        owner: u32,
        group: u32,
        mode: u32,
    },
    #[error(
        "writable root {path}: the workers (uid {uid}, gid {gid}) may not create files in it ({errno}; owner \
         {owner}:{group}, mode {mode:04o}): every write would fail; give them write access (chown or chmod), \
         set worker_uid/worker_gid, or name it with --readable-root"
    )]
    RootUnwritable { path: PathBuf, uid: u32, gid: u32, errno: Errno, owner: u32, group: u32, mode: u32 },
    /// A directory above the root refuses the workers' identity (they reach the root by its
    /// path: Landlock opens it after they take their identity), so that directory is named,
    /// with its owner and mode, not the root's own.
    #[error(
        "{what} {path}: the workers (uid {uid}, gid {gid}) may not enter it: they may not pass its parent \
         directory {blocker} ({errno}; owner {owner}:{group}, mode {mode:04o}): change that directory's \
         permissions, move the root, or set worker_uid/worker_gid"
    )]
    RootParentBlocks {
        what: &'static str,
        path: PathBuf,
        blocker: PathBuf,
        uid: u32,
        gid: u32,
        errno: Errno,
        owner: u32,
        group: u32,
        mode: u32,
    },
    #[error("cannot check what the workers may do in the roots: {0}")]
    AccessCheck(String),
    #[error(
        "landlock: the kernel offers Landlock ABI {abi}; the confined modes need ABI {floor} (a newer kernel, \
         or landlock = \"best-effort\" to serve them without the kernel fence)"
    )]
    LandlockTooOld { abi: u32, floor: u32 },
    /// Link protection is off where it guards something, and stays off: `cause` says why fsd
    /// did not turn it on.
    #[error(
        "{settings}: the confined modes need the kernel's link protection here ({why}); \
         turn it on with `sysctl -w {fix}`{cause}"
    )]
    LinksUnprotected { settings: String, why: LinksMatter, fix: String, cause: String },
    #[error(
        "cannot read whether the kernel protects links ({paths}), which the confined modes need here ({why}); \
         make /proc/sys/fs readable to the daemon (no ProcSubset=pid in a systemd unit)"
    )]
    LinksUnknown { paths: String, why: LinksMatter },
}

/// Why `fs.protected_hardlinks` and `fs.protected_symlinks` guard something for this daemon:
/// someone may plant a link in a root that a worker (or an escalated call) would follow with
/// more authority than the one who planted it. Without such a reason the workers can reach
/// through a link only what whoever made it could reach, and the settings protect nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinksMatter {
    /// `worker_uid = 0`: the workers keep root's capabilities.
    RootCapabilities,
    /// An escalated call runs with the daemon's own authority.
    Escalation,
    /// Someone other than the workers' uid (and root) may write the root's directory.
    SharedRoot { path: PathBuf, uid: u32, gid: u32, mode: u32 },
}

impl std::fmt::Display for LinksMatter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinksMatter::RootCapabilities => {
                write!(f, "worker_uid = 0 keeps root's capabilities in the workers")
            }
            LinksMatter::Escalation => {
                write!(f, "an escalated call may run with the daemon's own rights")
            }
            LinksMatter::SharedRoot { path, uid, gid, mode } => write!(
                f,
                "others than the workers may make links in root {}, owner {uid}:{gid}, mode {mode:04o}",
                path.display()
            ),
        }
    }
}

/// Checks everything the children would fail on at start. The first cause found is reported.
pub fn check(config: &Config) -> Result<(), PreflightError> {
    let what = |writable: bool| if writable { "writable root" } else { "readable root" };
    let mut seen: Vec<((u64, u64), &crate::op::RootSpec)> = Vec::new();
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
    let Ok(identity) = config.worker_identity() else { return Ok(()) };
    check_ids(identity.uid, identity.gid)?;
    if !config.served_modes().iter().any(|m| *m != Mode::DangerFullAccess) {
        return Ok(());
    }
    check_roots_usable(config, identity)?;
    check_landlock(config.landlock, crate::sys::landlock_abi())?;
    check_links(config, identity, &sysctl_dir())
}

/// The confined modes' kernel fence: below the floor they are not served at all, unless the
/// operator chose `landlock = "best-effort"` (served, loudly).
fn check_landlock(policy: LandlockPolicy, abi: u32) -> Result<(), PreflightError> {
    let floor = crate::sys::confine::LANDLOCK_FLOOR;
    if abi >= floor {
        return Ok(());
    }
    if policy == LandlockPolicy::Required {
        return Err(PreflightError::LandlockTooOld { abi, floor });
    }
    tracing::warn!(
        reason = %format!("the kernel offers Landlock ABI {abi}; the fence needs ABI {floor}"),
        "SERVING WITHOUT A KERNEL FENCE (landlock = \"best-effort\")"
    );
    Ok(())
}

/// Whether the kernel's link protection guards anything here (see [`LinksMatter`]). Only the
/// roots' own directories are looked at: a subdirectory the owner opened to others is the
/// owner's choice, and a scan of the whole tree at every start is not affordable.
pub fn links_matter(config: &Config, identity: WorkerIdentity) -> Option<LinksMatter> {
    use std::os::unix::fs::MetadataExt;
    if identity.root_capabilities {
        return Some(LinksMatter::RootCapabilities);
    }
    if config.escalation != crate::config::Escalation::Deny
        && config.served_modes().contains(&Mode::DangerFullAccess)
    {
        return Some(LinksMatter::Escalation);
    }
    config.roots.iter().find_map(|root| {
        let meta = std::fs::metadata(&root.path).ok()?;
        let others_write = (meta.uid() != identity.uid && meta.uid() != 0) || meta.mode() & 0o022 != 0;
        others_write.then(|| LinksMatter::SharedRoot {
            path: root.path.clone(),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        })
    })
}

/// `fs.protected_hardlinks = 0` lets anyone hard-link a file they cannot write (a root-only
/// file) into the workspace, where a worker with more rights would read or keep its owner;
/// `fs.protected_symlinks = 0` lets a link planted in a sticky directory be followed for anyone.
/// Where they matter and are off, fsd turns them on (every distribution's default: nothing
/// that works with them on breaks), logged, unless `link_protection = "require"`; where that
/// fails or is not wanted, it does not start.
fn check_links(config: &Config, identity: WorkerIdentity, dir: &Path) -> Result<(), PreflightError> {
    const NAMES: [&str; 2] = ["protected_hardlinks", "protected_symlinks"];
    let mut off = Vec::new();
    let mut unknown = Vec::new();
    for name in NAMES {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(v) if v.trim() == "0" => off.push(name),
            Ok(_) => {}
            // Unreadable counts as off: the precondition is not known to hold. It is said
            // apart, for a /proc without sys/ (systemd's ProcSubset=pid, a container's masked
            // /proc/sys) is a setting to change there, not the kernel's.
            Err(e) => unknown.push(format!("{}: {e}", dir.join(name).display())),
        }
    }
    if off.is_empty() && unknown.is_empty() {
        return Ok(());
    }
    let Some(why) = links_matter(config, identity) else {
        tracing::info!(
            off = %off.iter().map(|n| format!("fs.{n}")).chain(unknown.iter().cloned()).collect::<Vec<_>>().join(", "),
            "the kernel's link protection is off; it guards nothing here (the workers have no more rights than \
             whoever may make links in the roots)"
        );
        return Ok(());
    };
    let best_effort = |reason: String| {
        tracing::warn!(%reason, "SERVING WITHOUT THE KERNEL'S LINK PROTECTION (landlock = \"best-effort\")");
    };
    if !unknown.is_empty() {
        let error = PreflightError::LinksUnknown { paths: unknown.join(", "), why };
        if config.landlock == LandlockPolicy::BestEffort {
            best_effort(error.to_string());
            return Ok(());
        }
        return Err(error);
    }
    let settings = off.iter().map(|n| format!("fs.{n} = 0")).collect::<Vec<_>>().join(", ");
    let fix = off.iter().map(|n| format!("fs.{n}=1")).collect::<Vec<_>>().join(" ");
    let refusal = if config.link_protection == LinkProtection::Require {
        Some("; fsd does not change it itself under link_protection = \"require\"".to_owned())
    } else {
        off.iter()
            .try_for_each(|name| std::fs::write(dir.join(name), "1\n").map_err(|e| (*name, e)))
            .err()
            .map(|(name, e)| format!("; fsd could not set fs.{name} itself: {e}"))
    };
    let Some(cause) = refusal else {
        tracing::warn!(
            "{settings}: turned on, for the confined modes need it here ({why}); set link_protection = \"require\" \
             to refuse to start instead"
        );
        return Ok(());
    };
    let error = PreflightError::LinksUnprotected { settings, why, fix, cause };
    if config.landlock == LandlockPolicy::BestEffort {
        best_effort(error.to_string());
        return Ok(());
    }
    Err(error)
}

/// Where the `fs.*` sysctls are read; the test build may point elsewhere
/// (`FSD_FAULT_SYSCTL_FS_DIR`) so a test can show every outcome without changing the machine.
fn sysctl_dir() -> PathBuf {
    #[cfg(feature = "fault-injection")]
    if let Some(dir) = std::env::var_os("FSD_FAULT_SYSCTL_FS_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from("/proc/sys/fs")
}

/// Every root the confined workers serve must be usable by them: entered, and for a writable
/// root under workspace-write, written. Otherwise the daemon would say it serves while every
/// call beneath the root failed (`FS_PERMISSION_DENIED`, "cannot create temporary file"). A
/// root worker keeps the capabilities that override both, so it is not asked.
fn check_roots_usable(config: &Config, identity: WorkerIdentity) -> Result<(), PreflightError> {
    use crate::sys::confine::RootUse;
    use std::os::unix::fs::MetadataExt;
    if identity.root_capabilities {
        return Ok(());
    }
    let writes = config.served_modes().contains(&Mode::WorkspaceWrite);
    let wants: Vec<(PathBuf, RootUse)> = config
        .roots
        .iter()
        .map(|r| (r.path.clone(), if r.writable && writes { RootUse::Create } else { RootUse::Enter }))
        .collect();
    let answers = crate::sys::confine::worker_may(identity.uid, identity.gid, wants.clone())
        .map_err(|e| PreflightError::AccessCheck(e.to_string()))?;
    for ((path, want), answer) in wants.into_iter().zip(answers) {
        let Err(errno) = answer else { continue };
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        let (uid, gid, owner, group, mode) =
            (identity.uid, identity.gid, meta.uid(), meta.gid(), meta.mode() & 0o7777);
        // Each directory from `/` down to the root, entered in turn: the first refused one is
        // what blocks (a 0700 parent, not the root's own mode).
        let mut chain: Vec<PathBuf> = path.ancestors().map(Path::to_path_buf).collect();
        chain.reverse();
        let entered = crate::sys::confine::worker_may(
            uid,
            gid,
            chain.iter().map(|dir| (dir.clone(), RootUse::Enter)).collect(),
        )
        .map_err(|e| PreflightError::AccessCheck(e.to_string()))?;
        let refused = chain.into_iter().zip(entered).find_map(|(dir, a)| a.err().map(|e| (dir, e)));
        let writable = config.roots.iter().any(|r| r.path == path && r.writable);
        let what = if writable { "writable root" } else { "readable root" };
        return Err(match refused {
            None if want == RootUse::Create => {
                PreflightError::RootUnwritable { path, uid, gid, errno, owner, group, mode }
            }
            Some((blocker, errno)) if blocker != path => match std::fs::metadata(&blocker) {
                Ok(above) => PreflightError::RootParentBlocks {
                    what,
                    path,
                    blocker,
                    uid,
                    gid,
                    errno,
                    owner: above.uid(),
                    group: above.gid(),
                    mode: above.mode() & 0o7777,
                },
                Err(_) => PreflightError::RootUnenterable { what, path, uid, gid, errno, owner, group, mode },
            },
            _ => PreflightError::RootUnenterable { what, path, uid, gid, errno, owner, group, mode },
        });
    }
    Ok(())
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
