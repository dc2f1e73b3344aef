//! The fence against the next layer of tricks: the default worker identity (the workspace's
//! owner, no capabilities), resource limits (RLIMIT_FSIZE), and paths that mean something else
//! on another system (trailing slashes, drive letters, backslashes). Several tests change
//! owners or limits, so they need root (and fail saying so without it).

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use common::rpc::Rpc;
use common::*;
use serde_json::json;

fn need_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests change file owners and worker identities: run them as root"
    );
}

/// The daemon's worker processes.
fn workers(d: &Daemon) -> Vec<u32> {
    let _ = Rpc::connect(d);
    let pids: Vec<u32> = d
        .pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains("--role worker --worker-mode workspace-write")
        })
        .collect();
    assert!(!pids.is_empty(), "no workspace-write worker");
    pids
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let value = status.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap();
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// A file of another user inside the workspace.
fn foreign_file(root: &Path, name: &str, mode: u32) {
    let path = root.join(name);
    std::fs::write(&path, "theirs\n").unwrap();
    chown(&path, 4242, 4242);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn workers_take_the_workspace_owner_and_no_capabilities_by_default() {
    need_root();
    let prepare = |root: &Path| {
        // The workers run as 1000 and must still reach the root's descriptor, opened before.
        std::fs::set_permissions(root.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        chown(root, 1000, 1000);
        foreign_file(root, "theirs.txt", 0o644);
        foreign_file(root, "private.txt", 0o600);
    };
    let d = Daemon::start_custom(&[], &prepare, &[], "", &[]);
    for pid in workers(&d) {
        assert_eq!(status_field(pid, "Uid"), "1000 1000 1000 1000", "worker {pid}");
        assert_eq!(status_field(pid, "Gid"), "1000 1000 1000 1000", "worker {pid}");
        assert_eq!(status_field(pid, "CapEff"), "0000000000000000", "worker {pid}");
        assert_eq!(status_field(pid, "CapPrm"), "0000000000000000", "worker {pid}");
    }
    let mut s = d.session();
    let read = s.read("private.txt");
    assert_eq!(read.code(), Some("FS_PERMISSION_DENIED"), "{}", read.json);
    assert!(!read.text().contains("theirs"), "{}", read.json);
    let read = s.read("theirs.txt");
    assert!(!read.is_error(), "{}", read.json);
    let write = s.call("write", json!({"file_path": "theirs.txt", "content": "mine\n"}));
    assert_eq!(write.code(), Some("FS_PERMISSION_DENIED"), "{}", write.json);
    assert_eq!(d.read("theirs.txt"), b"theirs\n");
    assert_eq!(std::fs::metadata(d.path("theirs.txt")).unwrap().uid(), 4242);
    // What the owner may do still works, and new files belong to the owner.
    let write = s.call("write", json!({"file_path": "new.txt", "content": "new\n"}));
    assert!(!write.is_error(), "{}", write.json);
    assert_eq!(std::fs::metadata(d.path("new.txt")).unwrap().uid(), 1000);
}

#[test]
fn a_root_owned_workspace_gets_root_workers_without_capabilities() {
    need_root();
    let d = Daemon::start_custom(&[], &|root| foreign_file(root, "theirs.txt", 0o600), &[], "", &[]);
    for pid in workers(&d) {
        assert_eq!(status_field(pid, "CapEff"), "0000000000000000", "worker {pid}");
        assert_eq!(status_field(pid, "CapBnd"), "0000000000000000", "worker {pid}");
    }
    let mut s = d.session();
    let read = s.read("theirs.txt");
    assert_eq!(read.code(), Some("FS_PERMISSION_DENIED"), "{}", read.json);
}

#[test]
fn root_workers_only_when_worker_uid_is_zero() {
    need_root();
    let d = Daemon::start_custom(
        &[],
        &|root| foreign_file(root, "theirs.txt", 0o644),
        &[],
        "worker_uid = 0\n",
        &[],
    );
    for pid in workers(&d) {
        assert_eq!(status_field(pid, "Uid"), "0 0 0 0", "worker {pid}");
        // CAP_CHOWN | CAP_DAC_OVERRIDE | CAP_FOWNER.
        assert_eq!(status_field(pid, "CapEff"), "000000000000000b", "worker {pid}");
    }
    let mut s = d.session();
    assert!(!s.read("theirs.txt").is_error());
    let write = s.call("write", json!({"file_path": "theirs.txt", "content": "mine\n"}));
    assert!(!write.is_error(), "{}", write.json);
    assert_eq!(std::fs::metadata(d.path("theirs.txt")).unwrap().uid(), 4242, "the owner is kept");
}

#[test]
fn writable_roots_of_different_owners_refuse_to_start() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    chown(&b, 1000, 1000);
    let mut child = fsd_command()
        .arg("--listen")
        .arg(format!("unix:{}", dir.path().join("fsd.sock").display()))
        .arg("--writable-root")
        .arg(&a)
        .arg("--writable-root")
        .arg(&b)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fsd started with writable roots of different owners");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("the writable roots have different owners (0:0, 1000:1000)")
            && stderr.contains("set worker_uid and worker_gid"),
        "{stderr}"
    );
}

#[test]
fn a_write_past_rlimit_fsize_is_too_large_and_leaves_nothing_behind() {
    let d = Daemon::start_custom(&["prlimit", "--fsize=1048576", "--"], &|_| {}, &[], "", &[]);
    d.write("big.txt", "original\n");
    let before = workers(&d);
    let mut s = d.session();
    assert!(!s.read("big.txt").is_error());
    let content = "x".repeat(2 << 20);
    let write = s.call("write", json!({"file_path": "big.txt", "content": content}));
    assert_eq!(write.code(), Some("FS_TOO_LARGE"), "{}", write.json);
    assert!(write.text().contains("1048576"), "the reply names the limit: {}", write.json);
    assert_eq!(d.read("big.txt"), b"original\n");
    let names: Vec<String> = std::fs::read_dir(&d.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["big.txt"], "no temporary file remains");
    // The worker lived through it.
    let mut after = workers(&d);
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(before, after, "a worker died");
    let write = s.call("write", json!({"file_path": "small.txt", "content": "small\n"}));
    assert!(!write.is_error(), "{}", write.json);
}

#[test]
fn windows_paths_and_trailing_slashes_are_invalid_paths() {
    let d = Daemon::start();
    d.write("t.txt", "t\n");
    let mut s = d.session();
    for path in ["new.txt/", "C:\\Users\\x.txt", "..\\..\\etc\\passwd", "C:/Users/x.txt", "sub\\x.txt"] {
        let write = s.call("write", json!({"file_path": path, "content": "x\n"}));
        assert_eq!(write.code(), Some("FS_INVALID_PATH"), "{path}: {}", write.json);
    }
    assert!(s.read("t.txt").text().contains("1: t"));
    let write = s.call("write", json!({"file_path": "t.txt/", "content": "x\n"}));
    assert_eq!(write.code(), Some("FS_INVALID_PATH"), "{}", write.json);
    let read = s.read("t.txt/");
    assert_eq!(read.code(), Some("FS_INVALID_PATH"), "{}", read.json);
    let names: Vec<String> = std::fs::read_dir(&d.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["t.txt"]);
    assert_eq!(d.read("t.txt"), b"t\n");
    // A directory with a trailing slash is still a directory.
    std::fs::create_dir(d.path("dir")).unwrap();
    let mut rpc = Rpc::connect(&d);
    assert!(rpc.list_dir(&d.root.join("dir/")).is_ok());
    let status = rpc.write_text(Path::new(&format!("{}/t.txt/", d.root.display())), "x", None).unwrap_err();
    assert_eq!(common::rpc::wire(&status).code, fsd_proto::ErrorCode::InvalidPath, "{status:?}");
}

#[test]
fn allow_backslash_lets_backslashes_through() {
    let d = Daemon::start_with(&[], "allow_backslash = true\n");
    let mut s = d.session();
    let write = s.call("write", json!({"file_path": "a\\b.txt", "content": "x\n"}));
    assert!(!write.is_error(), "{}", write.json);
    assert_eq!(d.read("a\\b.txt"), b"x\n");
}

#[test]
fn a_file_truncated_while_it_streams_is_not_passed_off_as_the_file() {
    let d = Daemon::start();
    d.write("big.txt", "0123456789abcde\n".repeat(20 << 16));
    let mut rpc = Rpc::connect(&d);
    let request = fsd_proto::v1::StreamTextRequest {
        path: common::rpc::p(&d.path("big.txt")),
        chunk_bytes: 4096,
        ..Default::default()
    };
    let mut stream = rpc.rt.block_on(rpc.client.stream_text(request)).unwrap().into_inner();
    let mut items = 0;
    let mut outcome = None;
    while let Some(item) = rpc.rt.block_on(stream.message()).transpose() {
        match item {
            Ok(_) => {
                items += 1;
                if items == 2 {
                    // The header and a first chunk are in: cut the file to 1 MiB under the read.
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(d.path("big.txt"))
                        .unwrap()
                        .set_len(1 << 20)
                        .unwrap();
                }
            }
            Err(status) => {
                outcome = Some(status);
                break;
            }
        }
    }
    let status = outcome.expect("the stream ended as if it had read the whole file");
    let w = common::rpc::wire(&status);
    assert_eq!(w.code, fsd_proto::ErrorCode::StaleVersion, "{status:?}");
    assert_eq!(w.get("reason"), Some("changed_while_read"), "{status:?}");
}

/// A git directory by what it is: HEAD, objects/ and refs/.
fn git_dir(dir: &Path) {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("refs/heads")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("config"), "[core]\n").unwrap();
}

#[test]
fn git_directories_are_protected_by_what_they_are_not_by_name() {
    let d = Daemon::start();
    // `.git` renamed by a shell, a bare repository, a linked worktree's git directory.
    git_dir(&d.path("proj/g2"));
    git_dir(&d.path("bare"));
    std::fs::create_dir_all(d.path("wt-gitdir")).unwrap();
    std::fs::write(d.path("wt-gitdir/HEAD"), "ref: refs/heads/x\n").unwrap();
    std::fs::write(d.path("wt-gitdir/commondir"), "../bare\n").unwrap();
    d.write("proj/a.txt", "a\n");
    let mut s = d.session();
    for path in [
        "proj/g2/hooks/pre-commit",
        "proj/g2/config",
        "bare/config",
        "bare/hooks/new/post-checkout",
        "wt-gitdir/config",
    ] {
        let write = s.call("write", json!({"file_path": path, "content": "#!/bin/sh\n"}));
        assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{path}: {}", write.json);
        assert!(write.text().contains("is a git directory (protected)"), "{path}: {}", write.json);
    }
    assert_eq!(std::fs::read(d.path("proj/g2/config")).unwrap(), b"[core]\n");
    assert!(!d.path("proj/g2/hooks/pre-commit").exists());
    assert!(!d.path("bare/hooks/new").exists(), "a directory was created inside a git directory");
    // A link into it is caught on the resolved components.
    symlink(d.path("proj/g2/config"), &d.path("innocent"));
    assert!(!s.read("innocent").is_error());
    let write = s.call("write", json!({"file_path": "innocent", "content": "[core]\nfsmonitor = x\n"}));
    assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{}", write.json);
    // Moves into and out of it are refused.
    let mut rpc = Rpc::connect(&d);
    for (from, to) in [("proj/a.txt", "proj/g2/hooks/pre-commit"), ("proj/g2/config", "proj/stolen")] {
        let request = fsd_proto::v1::MoveFileRequest {
            source: common::rpc::p(&d.path(from)),
            destination: common::rpc::p(&d.path(to)),
            ..Default::default()
        };
        let status = rpc.rt.block_on(rpc.client.move_file(request)).unwrap_err();
        assert_eq!(
            common::rpc::wire(&status).code,
            fsd_proto::ErrorCode::SandboxDenied,
            "{from}: {status:?}"
        );
    }
    assert!(d.path("proj/a.txt").exists() && d.path("proj/g2/config").exists());
    // Beside it, writes work; a directory with only some of the markers is not a git directory.
    std::fs::create_dir_all(d.path("notgit/objects")).unwrap();
    std::fs::write(d.path("notgit/HEAD"), "x\n").unwrap();
    for path in ["proj/b.txt", "notgit/c.txt"] {
        let write = s.call("write", json!({"file_path": path, "content": "ok\n"}));
        assert!(!write.is_error(), "{path}: {}", write.json);
    }
}

/// Whether git, run inside `dir`, finds a repository there (the directory itself, bare), looking
/// no higher than the daemon's root.
fn git_finds_a_repository(root: &Path, dir: &Path) -> bool {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", root)
        .output()
        .expect("git is needed to check what its discovery finds and is not installed");
    out.status.success()
}

/// A model cannot build a bare repository out of ordinary writes (`x/config` with a
/// `core.fsmonitor` command, `x/objects/`, `x/refs/`, `x/HEAD`) that the user's next git command
/// inside `x` would run: whichever piece comes last is refused, as a write into a git
/// directory is, and nothing of it is made. Files named `config` or `HEAD` on their own are
/// ordinary files.
#[test]
fn a_bare_repository_cannot_be_built_piece_by_piece_in_any_order() {
    let d = Daemon::start();
    let mut s = d.session();
    let config = "[core]\n\tfsmonitor = touch /tmp/pwned\n";
    let head = "ref: refs/heads/main\n";
    // (directory, the writes that go through, the write refused, what it would have made)
    let orders: [(&str, &[&str], &str, &str); 4] = [
        ("head-last", &["config", "objects/info/packs", "refs/heads/main"], "HEAD", "HEAD"),
        ("refs-last", &["HEAD", "config", "objects/info/packs"], "refs/heads/main", "refs"),
        ("objects-last", &["refs/heads/main", "HEAD", "config"], "objects/info/packs", "objects"),
        ("worktree", &["HEAD", "config"], "commondir", "commondir"),
    ];
    for (dir, allowed, refused, made) in orders {
        for name in allowed {
            let content = match *name {
                "config" => config,
                "HEAD" => head,
                _ => "x\n",
            };
            let path = format!("{dir}/{name}");
            let write = s.call("write", json!({"file_path": path, "content": content}));
            assert!(!write.is_error(), "{path}: {}", write.json);
        }
        let path = format!("{dir}/{refused}");
        let write = s.call("write", json!({"file_path": path, "content": head}));
        assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{path}: {}", write.json);
        let shown = d.path(dir).display().to_string();
        let expected = format!("{made} would make {shown} a git directory (protected)");
        assert!(write.text().contains(&expected), "{path}: {}", write.json);
        assert!(!d.path(dir).join(made).exists(), "{path}: the last piece was made");
        assert!(!git_finds_a_repository(&d.root, &d.path(dir)), "{dir}: git found a repository");
    }
    // The same through a move onto the last name, with the wire's structured reason.
    d.write("moved/HEAD.txt", head);
    let mut rpc = Rpc::connect(&d);
    let request = fsd_proto::v1::MoveFileRequest {
        source: common::rpc::p(&d.path("moved/HEAD.txt")),
        destination: common::rpc::p(&d.path("head-last/HEAD")),
        ..Default::default()
    };
    let status = rpc.rt.block_on(rpc.client.move_file(request)).unwrap_err();
    let wire = common::rpc::wire(&status);
    assert_eq!(wire.code, fsd_proto::ErrorCode::SandboxDenied, "{status:?}");
    assert_eq!(wire.get("reason"), Some("git_directory"), "{status:?}");
    assert_eq!(wire.get("entry"), Some("HEAD"), "{status:?}");
    assert_eq!(wire.get("name"), Some(d.path("head-last").to_str().unwrap()), "{status:?}");
    assert!(d.path("moved/HEAD.txt").exists() && !d.path("head-last/HEAD").exists());
    // Ordinary files with those names, and the pieces one short of the shape, stay writable.
    for path in ["plain/HEAD", "plain/config", "plain/refs/x", "other/objects/y", "other/config"] {
        let write = s.call("write", json!({"file_path": path, "content": head}));
        assert!(!write.is_error(), "{path}: {}", write.json);
    }
    // apply_patch's preflight asks about each directory the patch would make, so a patch whose
    // new file's parent would be the last piece is refused before any change.
    d.write("a.txt", "one\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    assert!(!s.read("a.txt").is_error());
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n\
                 *** Add File: refs-last/refs/heads/main\n+x\n*** End Patch\n";
    let reply = s.call("apply_patch", json!({"input": patch}));
    assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{}", reply.json);
    assert!(reply.text().starts_with("Error: Patch rejected before any change"), "{}", reply.json);
    assert_eq!(d.read("a.txt"), b"one\n");
    assert!(!d.path("refs-last/refs").exists());
}

/// Two calls racing to complete a git directory: each passes the fence's check before the other
/// has made its piece (the test hook `fsd-fault-pause-git` holds a write of a piece into a
/// directory of that name for a second after the check), on two workers. Each looks again once
/// its piece exists; whichever sees both removes its own, so the directory never stays a git
/// directory and at least one call is refused.
#[test]
fn racing_writes_cannot_complete_a_git_directory_together() {
    // (a piece already there, the two racing pieces: a file or a move onto HEAD, or directories)
    let cases: [(&str, &str, &str); 3] = [
        ("objects/x", "HEAD", "refs/heads/main"),
        ("HEAD", "refs/heads/main", "objects/info/packs"),
        ("objects/x", "move:HEAD", "refs/heads/main"),
    ];
    for (present, a, b) in cases {
        let d = Daemon::start_with(&[], "workers_per_mode = 2\n");
        let dir = d.path("fsd-fault-pause-git");
        std::fs::create_dir_all(dir.join(present).parent().unwrap()).unwrap();
        std::fs::write(dir.join(present), "ref: refs/heads/main\n").unwrap();
        d.write("source.txt", "ref: refs/heads/main\n");
        let racers: Vec<_> = [a, b]
            .into_iter()
            .map(|piece| {
                let mut rpc = Rpc::connect(&d);
                let source = common::rpc::p(&d.path("source.txt"));
                let target = common::rpc::p(&dir.join(piece.trim_start_matches("move:")));
                let is_move = piece.starts_with("move:");
                std::thread::spawn(move || {
                    if is_move {
                        let request = fsd_proto::v1::MoveFileRequest {
                            source,
                            destination: target,
                            ..Default::default()
                        };
                        rpc.rt.block_on(rpc.client.move_file(request)).map(drop)
                    } else {
                        let path = Path::new(&target);
                        rpc.write_text(path, "ref: refs/heads/main\n", None).map(drop)
                    }
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        assert!(!git_finds_a_repository(&d.root, &dir), "{a} + {b}: git found a repository: {results:?}");
        let shape = ["HEAD", "objects", "refs"].iter().all(|n| dir.join(n).exists());
        assert!(!shape, "{a} + {b}: the directory has a git directory's shape: {results:?}");
        assert!(results.iter().any(Result::is_err), "{a} + {b}: both racing calls succeeded");
        for status in results.iter().filter_map(|r| r.as_ref().err()) {
            let wire = common::rpc::wire(status);
            assert_eq!(wire.code, fsd_proto::ErrorCode::SandboxDenied, "{a} + {b}: {status:?}");
            assert_eq!(wire.get("reason"), Some("git_directory"), "{a} + {b}: {status:?}");
        }
        if a.starts_with("move:") && !dir.join("HEAD").exists() {
            assert!(d.path("source.txt").exists(), "an undone move lost its source");
        }
    }
}

/// A move with new content writes its destination instead of renaming the source (as a move
/// across filesystems does): it too looks again once its piece exists. The write of `refs`
/// passes its check and makes its piece first; the move's check passed before that piece was
/// there, and it places `HEAD` after the write looked again, so only the move's second look sees
/// both, and it removes its own `HEAD`, keeping its source.
#[test]
fn a_move_with_content_cannot_complete_a_git_directory_in_a_race() {
    let d = Daemon::start_with(&[], "workers_per_mode = 2\n");
    let dir = d.path("fsd-fault-pause-git");
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    d.write("source.txt", "ref: refs/heads/main\n");
    let mut writer = Rpc::connect(&d);
    let refs = dir.join("refs");
    let writing = std::thread::spawn(move || writer.write_text(&refs, "x\n", None).map(drop));
    std::thread::sleep(std::time::Duration::from_millis(400));
    let mut mover = Rpc::connect(&d);
    let request = fsd_proto::v1::MoveFileRequest {
        source: common::rpc::p(&d.path("source.txt")),
        destination: common::rpc::p(&dir.join("HEAD")),
        content: Some("ref: refs/heads/main\n".to_owned()),
        ..Default::default()
    };
    let moved = mover.rt.block_on(mover.client.move_file(request)).map(drop);
    let written = writing.join().unwrap();
    let shape = ["HEAD", "objects", "refs"].iter().all(|n| dir.join(n).exists());
    assert!(!shape, "the directory has a git directory's shape: write {written:?}, move {moved:?}");
    assert!(!git_finds_a_repository(&d.root, &dir), "git found a repository");
    // Whichever call checked first places its piece first and keeps it; the other is refused
    // and leaves nothing. On a loaded machine the write may reach its check after the move
    // does, so the order is read from the outcome, not assumed.
    let refused = match (&written, &moved) {
        (Ok(()), Err(status)) => {
            assert_eq!(d.read("source.txt"), b"ref: refs/heads/main\n", "the refused move lost its source");
            assert!(!dir.join("HEAD").exists(), "the refused move left its HEAD");
            status
        }
        (Err(status), Ok(())) => {
            eprintln!("the move checked first: the write's own second look refused it");
            assert!(!dir.join("refs").exists(), "the refused write left its refs");
            status
        }
        _ => panic!("exactly one call must be refused: write {written:?}, move {moved:?}"),
    };
    let wire = common::rpc::wire(refused);
    assert_eq!(wire.code, fsd_proto::ErrorCode::SandboxDenied, "{refused:?}");
    assert_eq!(wire.get("reason"), Some("git_directory"), "{refused:?}");
}

#[test]
fn apply_patch_asks_the_daemon_before_writing_anything() {
    let readable = tempfile::tempdir().unwrap();
    let readable = std::fs::canonicalize(readable.path()).unwrap();
    std::fs::write(readable.join("r.txt"), "r\n").unwrap();
    let d = Daemon::start_with(&["--readable-root", readable.to_str().unwrap()], "");
    d.write("a.txt", "one\n");
    std::fs::create_dir_all(d.path(".git/hooks")).unwrap();
    git_dir(&d.path("g2"));
    let mut s = d.session_with_config("applyPatch = true\n");
    assert!(!s.read("a.txt").is_error());
    let update = "*** Update File: a.txt\n@@\n-one\n+two\n";
    let denied = [
        "*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n".to_owned(),
        "*** Add File: g2/hooks/pre-commit\n+#!/bin/sh\n".to_owned(),
        format!("*** Add File: {}/new.txt\n+x\n", readable.display()),
        "*** Update File: a.txt\n*** Move to: g2/config\n@@\n-one\n+two\n".to_owned(),
    ];
    for op in &denied {
        let patch = format!("*** Begin Patch\n{update}{op}*** End Patch\n");
        let reply = s.call("apply_patch", json!({"input": patch}));
        assert!(reply.is_error(), "{op}: {}", reply.json);
        assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{op}: {}", reply.json);
        assert!(
            reply.text().starts_with("Error: Patch rejected before any change"),
            "{op}: {}",
            reply.text()
        );
        assert_eq!(d.read("a.txt"), b"one\n", "{op}: the valid update was written");
    }
    assert!(!d.path(".git/hooks/pre-commit").exists() && !readable.join("new.txt").exists());

    // A read-only call refuses the whole patch the same way.
    let d = Daemon::start_with(&["--default-mode", "read-only"], "");
    d.write("a.txt", "one\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    assert!(!s.read("a.txt").is_error());
    let patch = format!("*** Begin Patch\n{update}*** Add File: b.txt\n+b\n*** End Patch\n");
    let reply = s.call("apply_patch", json!({"input": patch}));
    assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{}", reply.json);
    assert_eq!(d.read("a.txt"), b"one\n");
    assert!(!d.path("b.txt").exists());
}

/// A start that must fail: its exit code, its stderr lines and how long it took.
fn failed_start(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<String>, f64) {
    let mut cmd = common::fsd_command();
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped()).env_remove("FSD_LOG");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let started = std::time::Instant::now();
    let output = cmd.spawn().unwrap().wait_with_output().unwrap();
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8(output.stderr).unwrap();
    (output.status.code(), stderr.lines().map(str::to_owned).collect(), secs)
}

/// The message of a human-format log line.
fn logged(line: &str) -> &str {
    line.split_once(" fsd: ").or_else(|| line.split_once(" fsd::start_checks: ")).map_or(line, |(_, m)| m)
}

#[test]
fn link_protection_is_required_only_where_it_guards_something_and_turned_on_there() {
    // (config, sysctls (None: unreadable), expected: Ok(log line wanted, values after) or
    // Err(the one start line)).
    type Want = Result<(Option<&'static str>, &'static str), &'static str>;
    let why_root = "worker_uid = 0 keeps root's capabilities in the workers";
    type Case = (&'static str, Option<(&'static str, &'static str)>, Want);
    let cases: &[Case] = &[
        // The workers (the root's owner, no capabilities) reach through a link only what whoever
        // made it could: nothing to protect, nothing changed (README set-up command 1).
        ("", Some(("0", "0")), Ok((None, "0 0"))),
        // Root workers with capabilities: turned on, logged.
        ("worker_uid = 0\n", Some(("0", "1")), Ok((Some("fs.protected_hardlinks = 0: turned on"), "1 1"))),
        // An escalation may run with the daemon's own rights.
        (
            "max_mode = \"danger-full-access\"\nescalation = \"client\"\n",
            Some(("1", "0")),
            Ok((Some("fs.protected_symlinks = 0: turned on"), "1 1")),
        ),
        // The operator keeps the refusal.
        (
            "worker_uid = 0\nlink_protection = \"require\"\n",
            Some(("0", "1")),
            Err(
                "fs.protected_hardlinks = 0: the confined modes need the kernel's link protection here (worker_uid \
                 = 0 keeps root's capabilities in the workers); turn it on with `sysctl -w \
                 fs.protected_hardlinks=1`; fsd does not change it itself under link_protection = \"require\"",
            ),
        ),
        // best-effort serves anyway (with a warning), values untouched.
        (
            "worker_uid = 0\nlink_protection = \"require\"\nlandlock = \"best-effort\"\n",
            Some(("0", "0")),
            Ok((Some("SERVING WITHOUT THE KERNEL'S LINK PROTECTION"), "0 0")),
        ),
        // Unreadable (a /proc without sys/, as systemd's ProcSubset=pid makes it).
        ("worker_uid = 0\n", None, Err("cannot read whether the kernel protects links (")),
        // Both on: nothing to say.
        ("worker_uid = 0\n", Some(("1", "1")), Ok((None, "1 1"))),
    ];
    for (config, values, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        if let Some((hard, sym)) = values {
            std::fs::write(dir.path().join("protected_hardlinks"), format!("{hard}\n")).unwrap();
            std::fs::write(dir.path().join("protected_symlinks"), format!("{sym}\n")).unwrap();
        }
        let env = [("FSD_FAULT_SYSCTL_FS_DIR", dir.path().to_str().unwrap())];
        let values_now = || {
            ["protected_hardlinks", "protected_symlinks"]
                .map(|n| std::fs::read_to_string(dir.path().join(n)).unwrap().trim().to_owned())
                .join(" ")
        };
        match want {
            Ok((line, after)) => {
                let ws = tempfile::tempdir().unwrap();
                let socket = ws.path().join("fsd.sock");
                let root = ws.path().join("ws");
                std::fs::create_dir(&root).unwrap();
                std::fs::write(root.join("a.txt"), "a\n").unwrap();
                let mut daemon = common::launch()
                    .unix(&socket)
                    .writable_root(&root)
                    .config(ws.path().join("fsd.toml"), *config)
                    .env("FSD_FAULT_SYSCTL_FS_DIR", env[0].1)
                    .env("FSD_LOG", "warn")
                    .stderr(fsd_testkit::Stderr::Piped)
                    .start()
                    .unwrap_or_else(|e| panic!("{config:?}: {e}"));
                let endpoint = format!("unix:{}", socket.display());
                let mut s = ToolSession::start(&endpoint, &root, None);
                assert!(
                    !s.read("a.txt").is_error(),
                    "{config:?} {values:?}: a daemon that started must serve"
                );
                drop(s);
                let mut pipe = daemon.take_stderr().unwrap();
                daemon.signal(rustix::process::Signal::TERM);
                let mut stderr = String::new();
                std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
                daemon.wait().unwrap();
                match line {
                    Some(line) => assert!(stderr.contains(line), "{config:?}: {line:?} not in {stderr}"),
                    None => assert!(!stderr.contains("link"), "{config:?}: {stderr}"),
                }
                if line.is_some_and(|l| l.contains("turned on")) {
                    assert!(stderr.contains(why_root) || stderr.contains("escalated call"), "{stderr}");
                }
                assert_eq!(values_now(), *after, "{config:?} {values:?}");
            }
            Err(start) => {
                let ws = tempfile::tempdir().unwrap();
                let config_path = ws.path().join("fsd.toml");
                std::fs::write(&config_path, config).unwrap();
                let socket = format!("unix:{}", ws.path().join("fsd.sock").display());
                let root = ws.path().to_str().unwrap();
                let args =
                    ["--listen", &socket, "--writable-root", root, "--config", config_path.to_str().unwrap()];
                let (code, lines, secs) = failed_start(&args, &env);
                println!("exit {code:?} after {secs:.3} s: {lines:?}");
                assert_eq!(code, Some(2), "{config:?}: {lines:?}");
                assert_eq!(lines.len(), 1, "one line: {lines:?}");
                assert!(logged(&lines[0]).starts_with(start), "{:?} does not start with {start:?}", lines[0]);
                assert!(secs < 1.0, "a start that cannot serve must fail at once, took {secs:.3} s");
                assert!(!ws.path().join("fsd.sock").exists(), "nothing listens");
                if values.is_some() {
                    assert_eq!(values_now(), format!("{} {}", values.unwrap().0, values.unwrap().1));
                }
            }
        }
    }
}

#[test]
fn the_embedded_daemon_that_cannot_start_says_why_in_the_clients_error() {
    // A root anyone may write: links in it matter, and the settings cannot be read. Before, the
    // daemon started, served nothing, and the model read a sandbox denial.
    let unstartable = UnstartableRoot::new();
    let (var, hidden) = unstartable.env();
    let out = std::process::Command::new(common::tools_bin())
        .args(["call", "read", r#"{"file_path": "README.md", "limit": 5}"#, "--root", "."])
        .current_dir(unstartable.ws.path())
        .env(var, hidden)
        .env_remove("FSD_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stdout {stdout} stderr {stderr}");
    assert!(!stdout.contains("[sandbox:") && !stderr.contains("[sandbox:"), "{stdout} {stderr}");
    assert_eq!(stderr, format!("fsd-tools: {}\n", unstartable.line()));
}

#[test]
fn the_embedded_daemon_that_cannot_start_answers_each_session_line_with_why() {
    // Before: the line on stderr (which a host may not read) and exit 2 with no reply at all.
    // Now every line gets a reply that carries it, then exit 2; stderr still has it once.
    use std::io::Write;
    let unstartable = UnstartableRoot::new();
    let (var, hidden) = unstartable.env();
    let mut child = std::process::Command::new(common::tools_bin())
        .args(["session", "--root", "."])
        .current_dir(unstartable.ws.path())
        .env(var, hidden)
        .env_remove("FSD_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = [
        json!({"id": 1, "tool": "read", "args": {"file_path": "README.md"}}).to_string(),
        json!({"id": "two", "tool": "write", "args": {"file_path": "a.txt", "content": "a\n"}}).to_string(),
        "not json".to_owned(),
    ];
    let mut stdin = child.stdin.take().unwrap();
    // The client may have stopped reading already (a broken pipe is the failure shown below).
    let _ = stdin.write_all(format!("{}\n", lines.join("\n")).as_bytes());
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stdout {stdout} stderr {stderr}");
    assert_eq!(stderr, format!("fsd-tools: {}\n", unstartable.line()));
    let text = format!("Error: the file service is unavailable: {}", unstartable.line());
    let replies: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let ids = [json!(1), json!("two"), serde_json::Value::Null];
    assert_eq!(replies.len(), ids.len(), "{stdout}");
    for (reply, id) in replies.iter().zip(ids) {
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["is_error"], json!(true), "{reply}");
        assert_eq!(reply["code"], json!("UNAVAILABLE"), "{reply}");
        assert_eq!(reply["text"], json!(text), "{reply}");
    }
    assert!(!stdout.contains("[sandbox:"), "{stdout}");
}

#[test]
fn readme_command_one_works_with_the_real_link_protection_off() {
    // As root, for real: the machine's own settings at 0 for as short a time as a daemon's start
    // (other tests on this machine need them), then put back as they were. The README's first
    // command serves, and a daemon that needs them turns them on itself.
    assert_eq!(rustix::process::geteuid().as_raw(), 0, "this test sets /proc/sys/fs: run it as root");
    let names = ["/proc/sys/fs/protected_hardlinks", "/proc/sys/fs/protected_symlinks"];
    let found = names.map(|n| std::fs::read_to_string(n).unwrap());
    let set = |values: [&str; 2]| {
        for (name, value) in names.iter().zip(values) {
            std::fs::write(name, value)
                .unwrap_or_else(|e| panic!("cannot set {name} (needed for this test): {e}"));
        }
    };
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# one\ntwo\n").unwrap();
    // The README's command runs the whole daemon start inside the window.
    set(["0", "0"]);
    let out = std::process::Command::new(common::tools_bin())
        .args(["call", "read", r#"{"file_path": "README.md", "limit": 5}"#, "--root", "."])
        .current_dir(ws.path())
        .env_remove("FSD_LOG")
        .output();
    set([found[0].as_str(), found[1].as_str()]);
    let out = out.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1: # one\n2: two\n"), "{stdout}");

    // Root workers need them: the daemon turns them on before it serves.
    set(["0", "1"]);
    let d = Daemon::start_with_env(&[], "worker_uid = 0\n", &[("FSD_LOG", "warn")]);
    let after = std::fs::read_to_string(names[0]).unwrap();
    set([found[0].as_str(), found[1].as_str()]);
    assert_eq!(after.trim(), "1", "the daemon turned fs.protected_hardlinks on");
    d.write("a.txt", "a\n");
    assert!(!d.session().read("a.txt").is_error());
}

/// A POSIX ACL in its xattr form: the owner rw, user 4242 rw, the owning group only r, mask rw.
fn narrow_group_acl() -> Vec<u8> {
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 6, 4242),
        (0x04, 4, u32::MAX),
        (0x10, 6, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    acl
}

#[test]
fn a_replace_keeps_the_acl_and_user_attributes() {
    use rustix::fs::{XattrFlags, getxattr, setxattr};
    let d = Daemon::start();
    d.write("shared.txt", "v1\n");
    let path = d.path("shared.txt");
    let acl = narrow_group_acl();
    setxattr(&path, "system.posix_acl_access", &acl, XattrFlags::empty())
        .expect("this filesystem takes POSIX ACLs");
    setxattr(&path, "user.origin", b"kept", XattrFlags::empty()).expect("this filesystem takes user xattrs");
    let mode_before = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    let mut s = d.session();
    assert!(!s.read("shared.txt").is_error());
    let write = s.call("write", json!({"file_path": "shared.txt", "content": "v2\n"}));
    assert!(!write.is_error(), "{}", write.json);
    let edit = s.call("edit", json!({"file_path": "shared.txt", "old_string": "v2", "new_string": "v3"}));
    assert!(!edit.is_error(), "{}", edit.json);
    assert_eq!(d.read("shared.txt"), b"v3\n");
    let mut buf = vec![0u8; 256];
    let n = getxattr(&path, "system.posix_acl_access", &mut buf).expect("the ACL survived the replace");
    assert_eq!(&buf[..n], acl.as_slice(), "the group entry is still narrower than the mask");
    let n = getxattr(&path, "user.origin", &mut buf).expect("the user attribute survived the replace");
    assert_eq!(&buf[..n], b"kept");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, mode_before);
}

#[test]
fn a_replace_that_cannot_keep_the_acl_is_refused_and_changes_nothing() {
    use rustix::fs::{XattrFlags, getxattr, setxattr};
    let d = Daemon::start();
    // The test build refuses to set kept attributes on this name's replacement.
    let name = "fsd-fault-keep-attributes";
    d.write(name, "v1\n");
    let path = d.path(name);
    let acl = narrow_group_acl();
    setxattr(&path, "system.posix_acl_access", &acl, XattrFlags::empty())
        .expect("this filesystem takes POSIX ACLs");
    let ino = std::fs::metadata(&path).unwrap().ino();
    let mut s = d.session();
    assert!(!s.read(name).is_error());
    let write = s.call("write", json!({"file_path": name, "content": "v2\n"}));
    assert!(write.is_error(), "a replace that would widen access went through: {}", write.json);
    assert_eq!(write.code(), Some("FS_PERMISSION_DENIED"), "{}", write.json);
    let edit = s.call("edit", json!({"file_path": name, "old_string": "v1", "new_string": "v3"}));
    assert_eq!(edit.code(), Some("FS_PERMISSION_DENIED"), "{}", edit.json);
    // The old file, its inode and its ACL are untouched; no temporary file is left.
    assert_eq!(d.read(name), b"v1\n");
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
    let mut buf = vec![0u8; 256];
    let n = getxattr(&path, "system.posix_acl_access", &mut buf).expect("the ACL is still there");
    assert_eq!(&buf[..n], acl.as_slice());
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [name], "left in the root");
}

#[test]
fn confined_workers_hold_no_descriptor_outside_their_roots() {
    let d = Daemon::start();
    let _ = Rpc::connect(&d);
    let confined: Vec<u32> = d
        .pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains("--worker-mode read-only") || cmdline.contains("--worker-mode workspace-write")
        })
        .collect();
    assert_eq!(confined.len(), 4, "two workers for each confined mode");
    // The one directory outside the roots a workspace-write worker holds: its root's
    // temporary-file journal on tmpfs, where its Landlock domain lets it write entries.
    let journal = fsd_soak::tree::journal_dir(&d.root);
    let mut journal_held = 0;
    for pid in confined {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let writes = String::from_utf8_lossy(&cmdline).contains("workspace-write");
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
            let fd = fd.unwrap();
            // Standard input, output and error are the daemon's own (its log may be a file
            // anywhere): inherited, never walked from.
            if fd.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n < 3) {
                continue;
            }
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            // Sockets, pipes and anonymous inodes are not paths, and /dev/null is no directory to
            // walk from; every other path is inside the root.
            if target == journal && writes {
                journal_held += 1;
                continue;
            }
            if target.is_absolute() && target != Path::new("/dev/null") {
                assert!(target.starts_with(&d.root), "worker {pid} holds {}", target.display());
            }
        }
    }
    assert_eq!(journal_held, 2, "each workspace-write worker holds its root's journal directory");
}

/// Mode and group of the socket file at `path`.
fn socket_access(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(
        std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()),
        "{} is not a socket",
        path.display()
    );
    (meta.mode() & 0o7777, meta.gid())
}

#[test]
fn unix_sockets_have_their_configured_mode_and_group_and_no_leftovers() {
    need_root();
    // The default: owner and group.
    let d = Daemon::start();
    assert_eq!(socket_access(&d.socket), (0o660, rustix::process::getegid().as_raw()));
    // Configured: every Unix listener, gRPC and HTTP, gets them (the group need not be ours).
    let dir = tempfile::tempdir().unwrap();
    let http = dir.path().join("http.sock");
    let d = Daemon::start_with(
        &["--listen", &format!("http+unix:{}", http.display())],
        "socket_mode = \"0600\"\nsocket_group = \"4321\"\n",
    );
    // A first answer comes once every listener is bound (the kit waits for the first only).
    let _ = Rpc::connect(&d);
    assert_eq!(socket_access(&d.socket), (0o600, 4321));
    assert_eq!(socket_access(&http), (0o600, 4321));
    // The private directories the sockets were bound in are gone.
    let mut names: Vec<_> =
        std::fs::read_dir(d.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["fsd.sock", "fsd.toml", "ws"], "left beside the socket");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["http.sock"]);
    // Served on the renamed socket.
    let mut s = d.session();
    d.write("a.txt", "a\n");
    assert!(!s.read("a.txt").is_error());
}

#[test]
fn bad_socket_settings_refuse_to_start() {
    for (config, expected) in [
        ("socket_mode = \"0999\"\n", "invalid socket_mode \"0999\""),
        ("socket_mode = \"01777\"\n", "invalid socket_mode \"01777\""),
        ("socket_group = \"no-such-group-fsd\"\n", "invalid socket_group \"no-such-group-fsd\""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (root, config_path) = (dir.path().join("ws"), dir.path().join("fsd.toml"));
        std::fs::create_dir(&root).unwrap();
        std::fs::write(&config_path, config).unwrap();
        let out = fsd_command()
            .arg("--listen")
            .arg(format!("unix:{}", dir.path().join("fsd.sock").display()))
            .arg("--writable-root")
            .arg(&root)
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{config}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{config}: {stderr}");
        assert!(!dir.path().join("fsd.sock").exists());
    }
}

#[test]
fn a_20_kb_path_in_an_error_reply_is_cut_not_a_broken_connection() {
    let d = Daemon::start_with(&[], "[budgets]\ncalls_per_second = 0.01\ncall_burst = 1\n");
    let mut rpc = Rpc::connect(&d);
    let long = d.root.join("x".repeat(20 << 10));
    // The budget refusal quotes the request path as sent: 20 KB, far over the 16 KiB header list
    // hyper's client accepts (and gRPC C-core's 8 KiB).
    let mut refused = None;
    for _ in 0..3 {
        match rpc.stat(&long) {
            Err(status) if rpc::wire(&status).code == fsd_proto::ErrorCode::RateLimited => {
                refused = Some(rpc::wire(&status));
                break;
            }
            Err(status) => {
                let wire = fsd_proto::WireError::from_status(&status).unwrap_or_else(|| {
                    panic!("not an fsd error: {:?} {:.200}", status.code(), status.message())
                });
                assert_eq!(wire.code, fsd_proto::ErrorCode::InvalidPath, "{wire:?}");
                assert!(wire.path.len() <= 1027, "{}", wire.path.len());
            }
            Ok(reply) => panic!("a 20 KB path was served: {reply:?}"),
        }
    }
    let wire = refused.expect("the budget refused a call");
    assert!(wire.path.len() <= 1027 && wire.path.ends_with("..."), "quoted {} bytes", wire.path.len());
    assert!(long.to_str().unwrap().starts_with(wire.path.trim_end_matches("...")));
    assert!(wire.get("retry_after_ms").is_some());
}

#[test]
fn a_temporary_file_left_in_a_directory_moved_out_mid_write_holds_nothing() {
    let d = Daemon::start();
    let outside = d.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(d.path("d")).unwrap();
    let mut rpc = Rpc::connect(&d);
    // The test build pauses 2 s between this write's last byte and its rename.
    let target = d.path("d/fsd-fault-pause-rename");
    let writer = std::thread::spawn(move || rpc.write_text(&target, "the caller's secret bytes\n", None));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let temp_seen = || {
        std::fs::read_dir(d.path("d"))
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".fsd-tmp-"))
    };
    while !temp_seen() {
        assert!(std::time::Instant::now() < deadline, "the write never made its temporary file");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A shell moves the directory out of the fence while the write is in flight.
    std::fs::rename(d.path("d"), outside.join("d")).unwrap();
    let result = writer.join().unwrap();
    let status = result.expect_err("a write into a directory outside the fence must fail");
    println!("the write answered {:?}: {:?}", status.code(), fsd_proto::WireError::from_status(&status));
    // Outside the fence: the target never appeared, and the temporary name, which Landlock does
    // not let the worker remove there, holds no byte and grants no access.
    let moved = outside.join("d");
    assert!(!moved.join("fsd-fault-pause-rename").exists(), "the write landed outside the fence");
    for entry in std::fs::read_dir(&moved).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_name().to_string_lossy().starts_with(".fsd-tmp-"), "{entry:?}");
        // The supervisor removes such a file (its stranded-temp sweep) and may do so between
        // the listing and this look: gone holds nothing either.
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{entry:?}: {e}"),
        };
        assert_eq!(
            (meta.len(), meta.mode() & 0o7777),
            (0, 0),
            "{entry:?} keeps the caller's bytes or access"
        );
    }
    // The daemon serves on.
    let mut s = d.session();
    d.write("after.txt", "a\n");
    assert!(!s.read("after.txt").is_error());
}

/// The supervisor is privileged and the network process faces clients: a kill the network
/// process asks for is carried out only on a live worker of the daemon, never on another
/// process (test hook `FSD_FAULT_ASK_KILL`: the network process asks, at start, for a pid of
/// the test's choosing, as a compromised one could).
#[test]
fn the_network_process_cannot_have_the_supervisor_kill_another_process() {
    let mut bystander = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
    let pid = bystander.id().to_string();
    let d = Daemon::start_with_env(&[], "", &[("FSD_FAULT_ASK_KILL", &pid)]);
    d.write("a.txt", "a\n");
    let mut s = d.session();
    assert!(!s.read("a.txt").is_error());
    // The request went out before the first worker was up; the supervisor has long read it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = bystander.try_wait().expect("wait");
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert_eq!(status, None, "the supervisor killed a process that is not its worker");
}
