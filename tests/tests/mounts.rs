//! Mounts below a root: a bind mount (or any other filesystem) mounted inside the workspace is
//! not part of the fence. Reads and writes through it are FS_SANDBOX_DENIED, nothing is created
//! on the mounted filesystem, a listing shows the mount point but never descends, and only the
//! mounts the operator names in `allow_submounts` are entered. The tests mount, so they need
//! root (and fail saying so without it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::rpc::{Rpc, wire};
use common::*;
use fsd_proto::ErrorCode;
use serde_json::json;

/// A bind mount, unmounted when dropped.
struct Bind {
    at: PathBuf,
}

impl Bind {
    fn new(source: &Path, at: &Path) -> Bind {
        assert!(
            rustix::process::geteuid().is_root(),
            "the mount tests bind-mount directories: run them as root"
        );
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount").arg("--bind").arg(source).arg(at).status().expect("run mount");
        assert!(status.success(), "mount --bind {} {} failed: {status}", source.display(), at.display());
        Bind { at: at.to_path_buf() }
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// A directory outside every root with a secret in it.
fn secret_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.txt"), "secret\n").unwrap();
    dir
}

#[test]
fn a_bind_mount_below_the_root_is_not_followed() {
    let secret = secret_dir();
    let d = Daemon::start();
    d.write("a.txt", "a\n");
    let _bind = Bind::new(secret.path(), &d.path("host"));
    let mut s = d.session();

    let read = s.read("host/s.txt");
    assert!(read.is_error(), "{}", read.json);
    assert_eq!(read.code(), Some("FS_SANDBOX_DENIED"), "{}", read.json);
    assert!(!read.text().contains("secret"), "{}", read.json);
    assert!(
        read.text().contains("/host is a mount point below the root (not in allow_submounts)"),
        "{}",
        read.json
    );

    let write = s.call("write", json!({"file_path": "host/new.txt", "content": "x\n"}));
    assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{}", write.json);
    assert!(!secret.path().join("new.txt").exists(), "a write crossed into the mount");
    let write = s.call("write", json!({"file_path": "host/deeper/new.txt", "content": "x\n"}));
    assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{}", write.json);
    assert!(!secret.path().join("deeper").exists(), "a parent directory was created in the mount");

    // A link to the mount is the mount.
    symlink(d.path("host"), &d.path("via-link"));
    let read = s.read("via-link/s.txt");
    assert_eq!(read.code(), Some("FS_SANDBOX_DENIED"), "{}", read.json);

    let mut rpc = Rpc::connect(&d);
    let status = rpc.read_text(&d.path("host/s.txt"), 0).unwrap_err();
    let w = wire(&status);
    assert_eq!(w.code, ErrorCode::SandboxDenied, "{status:?}");
    assert_eq!(w.get("reason"), Some("submount"), "{status:?}");
    assert_eq!(w.get("name"), Some(format!("{}/host", d.root.display()).as_str()), "{status:?}");

    // The listing shows the mount point, without anything from inside it.
    let listing = rpc.list_dir(&d.root).unwrap();
    let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    assert!(names.contains(&"host"), "{names:?}");
    let host = listing.entries.iter().find(|e| e.name == "host").unwrap();
    assert!(host.version.is_none() && host.size.is_none(), "{host:?}");
    let status = rpc.list_dir(&d.path("host")).unwrap_err();
    assert_eq!(wire(&status).code, ErrorCode::SandboxDenied, "{status:?}");
    // The rest of the root is served as before.
    ok(&s.read("a.txt"), &envelope(&d.path("a.txt"), &["1: a"], "(End of file - total 1 lines)"));
}

#[test]
fn allow_submounts_names_the_mounts_resolution_may_enter() {
    let secret = secret_dir();
    let other = tempfile::tempdir().unwrap();
    let other_root = std::fs::canonicalize(other.path()).unwrap();
    let _allowed = Bind::new(secret.path(), &other_root.join("cache"));
    let denied_source = secret_dir();
    let _denied = Bind::new(denied_source.path(), &other_root.join("elsewhere"));
    let config = format!("allow_submounts = [\"{}\"]\n", other_root.join("cache").display());
    let d = Daemon::start_with(&["--writable-root", other_root.to_str().unwrap()], &config);
    let mut s = ToolSession::start(&d.endpoint(), &other_root, None);

    let read = s.read("cache/s.txt");
    assert!(!read.is_error(), "{}", read.json);
    let write = s.call("write", json!({"file_path": "cache/new.txt", "content": "x\n"}));
    assert!(!write.is_error(), "{}", write.json);
    assert_eq!(std::fs::read(secret.path().join("new.txt")).unwrap(), b"x\n");

    let read = s.read("elsewhere/s.txt");
    assert_eq!(read.code(), Some("FS_SANDBOX_DENIED"), "{}", read.json);
}

/// A mount swapped in and out below the root while reads run (served by the network process's
/// direct read threads, whose walk is the workers'): every read returns the root's own file or is
/// refused as a submount, never what the mount shows.
#[test]
fn a_mount_swapped_in_during_direct_reads_is_never_read_through() {
    let secret = secret_dir();
    let d = Daemon::start();
    d.write("sub/s.txt", "public\n");
    let at = d.path("sub");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, at, source) = (stop.clone(), at.clone(), secret.path().to_owned());
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop(Bind::new(&source, &at));
                swaps += 1;
            }
            swaps
        })
    };
    let mut rpc = Rpc::connect(&d);
    let mut s = d.session();
    let (mut public, mut refused) = (0u32, 0u32);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    while std::time::Instant::now() < deadline {
        match rpc.read_text(&d.path("sub/s.txt"), 0) {
            Ok(reply) => {
                assert_eq!(reply.text, "public\n", "a read went through the mount: {reply:?}");
                public += 1;
            }
            Err(status) => {
                let w = wire(&status);
                assert_eq!(
                    (w.code, w.get("reason")),
                    (ErrorCode::SandboxDenied, Some("submount")),
                    "{status:?}"
                );
                refused += 1;
            }
        }
        let r = s.read("sub/s.txt");
        assert!(!r.text().contains("secret"), "the read tool went through the mount: {}", r.json);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    println!("mount swap: {swaps} swaps, {public} reads of the root's file, {refused} refused");
    assert!(public > 0 && refused > 0, "both sides of the swap were met: {public} read, {refused} refused");
}
