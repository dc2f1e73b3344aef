//! Disk full: the writable root is a small ext4 filesystem (a loop-mounted image the test makes
//! and unmounts). A write, replace or edit that does not fit, and one that finds no inode for
//! its temporary file, fail with FS_NO_SPACE; the original is intact, no temporary file or
//! journal entry remains, and the daemon keeps serving: once space is freed the same call
//! succeeds. Needs root and loop devices, and fails (never skips) without them.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use fsd_soak::daemon::{self, Bins, Daemon};
use fsd_soak::session::ToolSession;
use fsd_soak::tree;
use serde_json::{Value, json};

/// A loop-mounted ext4 image in a temporary directory, unmounted on drop (also on a failing
/// assertion).
struct Mount {
    dir: tempfile::TempDir,
    point: PathBuf,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Mount {
    /// A `size_mib` ext4 filesystem with no reserved blocks, `inodes` inodes if given.
    fn new(size_mib: u64, inodes: Option<u32>) -> Mount {
        let dir = tempfile::Builder::new().prefix("fsd-diskfull-").tempdir().unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image).unwrap().set_len(size_mib << 20).unwrap();
        let point = dir.path().join("mnt");
        std::fs::create_dir(&point).unwrap();
        let image = image.to_str().unwrap().to_owned();
        let inodes = inodes.map(|n| n.to_string());
        let mut mkfs = vec!["-q", "-F", "-m", "0"];
        if let Some(n) = &inodes {
            mkfs.extend(["-N", n]);
        }
        mkfs.push(&image);
        if let Err(e) = run("mkfs.ext4", &mkfs) {
            panic!("cannot make the test filesystem (install e2fsprogs): {e}");
        }
        if let Err(e) = run("mount", &["-o", "loop", &image, point.to_str().unwrap()]) {
            panic!("cannot loop-mount the test filesystem (this test needs root and loop devices): {e}");
        }
        let point = std::fs::canonicalize(&point).unwrap();
        Mount { dir, point }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let point = self.point.to_str().unwrap_or_default().to_owned();
        if run("umount", &[&point]).is_err() {
            // Still busy (a daemon that did not exit): detach it lazily rather than leak it.
            let _ = run("umount", &["-l", &point]);
        }
    }
}

/// Fills the filesystem with `filler` until it is full, then frees `leave` bytes of it.
fn fill(filler: &Path, leave: u64) {
    let mut file = std::fs::File::create(filler).unwrap();
    let chunk = vec![b'x'; 64 << 10];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    let _ = file.sync_all();
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(leave)).unwrap();
    file.sync_all().unwrap();
}

/// Uses every free inode with empty files in `dir`.
fn use_all_inodes(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    for i in 0.. {
        match std::fs::File::create(dir.join(format!("f{i}"))) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => return,
            Err(e) => panic!("using up inodes: {e}"),
        }
    }
}

struct Case {
    name: &'static str,
    /// Inodes of the filesystem (None: mkfs's default).
    inodes: Option<u32>,
    /// The file the call targets and what it holds before (None: absent).
    target: &'static str,
    before: Option<&'static str>,
    /// The call, given the target's absolute path and a payload that does not fit.
    call: fn(&str, &str) -> (&'static str, Value),
    /// What the target holds once the call succeeds.
    after: fn(&str) -> String,
}

fn write_call(path: &str, big: &str) -> (&'static str, Value) {
    ("write", json!({"file_path": path, "content": big}))
}

fn edit_call(path: &str, big: &str) -> (&'static str, Value) {
    ("edit", json!({"file_path": path, "old_string": "MARK", "new_string": big}))
}

/// Over the 128 KiB left free, and over the daemon's 1 MiB bound on before/after texts: within
/// it the tools diff the texts, which costs seconds in a debug build for this many lines.
fn big_payload() -> String {
    "no space for this line\n".repeat((1 << 20) / 23 + 4096)
}

#[test]
fn writes_that_do_not_fit_fail_with_no_space_and_change_nothing() {
    let cases = [
        Case {
            name: "create a file larger than the free space",
            inodes: None,
            target: "new.txt",
            before: None,
            call: write_call,
            after: |big| big.to_owned(),
        },
        Case {
            name: "replace a file with content larger than the free space",
            inodes: None,
            target: "keep.txt",
            before: Some("original content\n"),
            call: write_call,
            after: |big| big.to_owned(),
        },
        Case {
            name: "edit that grows a file beyond the free space",
            inodes: None,
            target: "dir/grow.txt",
            before: Some("start MARK end\n"),
            call: edit_call,
            after: |big| format!("start {big} end\n"),
        },
        Case {
            name: "no inode left for the temporary file",
            inodes: Some(64),
            target: "small.txt",
            before: Some("a MARK b\n"),
            call: |path, _| ("edit", json!({"file_path": path, "old_string": "MARK", "new_string": "fits"})),
            after: |_| "a fits b\n".to_owned(),
        },
    ];
    let bins = Bins::locate().unwrap();
    let big = big_payload();
    for case in &cases {
        let mount = Mount::new(16, case.inodes);
        let root = mount.point.clone();
        let target = root.join(case.target);
        if let Some(before) = case.before {
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, before).unwrap();
        }
        let options = daemon::Options {
            root: root.clone(),
            socket: mount.dir.path().join("fsd.sock"),
            config: String::new(),
            log: Some(mount.dir.path().join("fsd.log")),
        };
        let mut daemon = Daemon::start(&bins, &options).unwrap();
        let mut session = ToolSession::start(&bins, &daemon.socket, &root, None).unwrap();
        let path = target.to_str().unwrap();
        if case.before.is_some() {
            let read = session.call("read", json!({"file_path": path})).unwrap();
            assert!(!read.is_error(), "{}: {}", case.name, read.json);
        }
        let filler = root.join("filler.bin");
        match case.inodes {
            Some(_) => use_all_inodes(&root.join("inodes")),
            None => fill(&filler, 128 << 10),
        }

        let (tool, args) = (case.call)(path, &big);
        let reply = session.call(tool, args.clone()).unwrap();
        assert!(reply.is_error(), "{}: expected FS_NO_SPACE, got {}", case.name, reply.json);
        assert_eq!(reply.code(), Some("FS_NO_SPACE"), "{}: {}", case.name, reply.json);
        assert!(
            reply.text().starts_with(&format!("Error: cannot modify \"{path}\": ")),
            "{}: {}",
            case.name,
            reply.text()
        );
        match case.before {
            Some(before) => assert_eq!(
                std::fs::read_to_string(&target).unwrap(),
                before,
                "{}: original changed",
                case.name
            ),
            None => assert!(!target.exists(), "{}: a file appeared", case.name),
        }
        assert_eq!(tree::temp_files(&root), Vec::<PathBuf>::new(), "{}: temporary files left", case.name);
        assert_eq!(tree::journal_entries(&root), Vec::<String>::new(), "{}: journal entries left", case.name);

        // The daemon keeps serving: free the space and the same call succeeds.
        match case.inodes {
            Some(_) => std::fs::remove_dir_all(root.join("inodes")).unwrap(),
            None => std::fs::remove_file(&filler).unwrap(),
        }
        let reply = session.call(tool, args).unwrap();
        assert!(!reply.is_error(), "{}: after freeing space: {}", case.name, reply.json);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), (case.after)(&big), "{}", case.name);
        let read = session.call("read", json!({"file_path": path, "limit": 1})).unwrap();
        assert!(!read.is_error(), "{}: {}", case.name, read.json);
        assert!(daemon.running(), "{}: the daemon exited", case.name);

        drop(session);
        daemon.terminate().unwrap();
    }
}

/// The REST face on a full disk: a PUT that does not fit (a new file, a replacement) is 507
/// `NO_SPACE`, the original intact and no temporary file or journal entry left by the staged
/// upload; once space is freed the same PUT succeeds.
#[test]
fn a_rest_put_that_does_not_fit_is_507_and_changes_nothing() {
    use common::rest::{RestDaemon, http, refused};
    let mount = Mount::new(16, None);
    let root = mount.point.clone();
    std::fs::write(root.join("keep.bin"), "original content\n").unwrap();
    let daemon = RestDaemon::start_in(&root, "");
    let filler = root.join("filler.bin");
    fill(&filler, 128 << 10);
    let body = vec![b'x'; 1 << 20];
    for name in ["new.bin", "keep.bin"] {
        let answer = http(daemon.port, "PUT", &format!("/v1/files/{name}"), &[], &body);
        refused(&answer, 507, "NO_SPACE");
    }
    assert!(!root.join("new.bin").exists(), "a PUT that did not fit created its file");
    assert_eq!(std::fs::read_to_string(root.join("keep.bin")).unwrap(), "original content\n");
    assert_eq!(tree::temp_files(&root), Vec::<PathBuf>::new(), "temporary files left");
    assert_eq!(tree::journal_entries(&root), Vec::<String>::new(), "journal entries left");

    std::fs::remove_file(&filler).unwrap();
    for name in ["new.bin", "keep.bin"] {
        let answer = http(daemon.port, "PUT", &format!("/v1/files/{name}"), &[], &body);
        assert_eq!(answer.status, 204, "{name} after freeing space: {answer:?}");
        assert_eq!(std::fs::read(root.join(name)).unwrap(), body);
    }
}
