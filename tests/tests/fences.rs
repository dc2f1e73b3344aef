//! The mode fences, proven against the real processes: the kernel refuses what our resolver is
//! bypassed for, the network process holds no filesystem rights, workers run with no_new_privs,
//! seccomp and few capabilities, links and moves cannot leave the roots, protected paths stay
//! read-only, read-only mode refuses every mutation, and a hung worker costs only its own call.

use crate::common;

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Stdio};

use common::rpc::{Rpc, p};
use common::*;
use fsd::ipc_messages::{FromWorker, ToWorker};
use fsd::op::Request;
use fsd_proto::{ErrorCode, WireError, v1};
use serde_json::json;

/// A worker started by hand with a socket we hold: requests go "straight to the worker over its
/// IPC", past the network process and its resolver checks.
struct Worker {
    child: Child,
    socket: UnixStream,
}

impl Worker {
    fn start(mode: &str, root: &Path) -> Worker {
        let (ours, theirs) = fsd::sys::ipc::pair().unwrap();
        fsd::sys::ipc::set_inheritable(theirs.as_fd(), true).unwrap();
        let child = fsd_command()
            .args(["--role", "worker", "--worker-mode", mode])
            .arg("--ipc-fd")
            .arg(theirs.as_raw_fd().to_string())
            .env("FSD_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        drop(theirs);
        // What the supervisor writes first on every child's socket: the key and the configuration.
        let config = fsd::config::Config::resolve(
            fsd::config::ConfigFile::default(),
            fsd::config::Overrides {
                listen: vec!["unix:/nonexistent/fsd.sock".into()],
                writable_roots: vec![root.to_owned()],
                ..Default::default()
            },
        )
        .unwrap();
        let start = fsd::ipc_messages::Start {
            digest_key: [7; fsd::digest::KEY_BYTES],
            config,
            vouch_key: Some([9; fsd::digest::KEY_BYTES]),
            audit_key: None,
        };
        fsd::ipc_messages::send(&ours, &start, None).unwrap();
        let (ready, _) = fsd::ipc_messages::recv::<FromWorker>(&ours).unwrap();
        assert!(
            matches!(ready, FromWorker::Ready { enforcement, .. } if enforcement == "landlock"),
            "worker not confined"
        );
        Worker { child, socket: ours }
    }

    fn ask(&self, message: &ToWorker) -> FromWorker {
        fsd::ipc_messages::send(&self.socket, message, None).unwrap();
        fsd::ipc_messages::recv::<FromWorker>(&self.socket).unwrap().0
    }

    fn raw(&self, message: ToWorker) -> Result<(), String> {
        match self.ask(&message) {
            FromWorker::RawOpened(result) => result,
            other => panic!("unexpected reply {other:?}"),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_kernel_refuses_what_the_resolver_is_bypassed_for() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "secret\n").unwrap();
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("inside.txt");
    std::fs::write(&inside, "inside\n").unwrap();
    let w = Worker::start("workspace-write", root.path());

    // Control: the same raw open inside the root works, so a refusal below is the fence.
    assert_eq!(w.raw(ToWorker::RawOpen { path: p(&inside), write: true }), Ok(()));
    let check = |path: &Path, write: bool| {
        let got = w.raw(ToWorker::RawOpen { path: p(path), write });
        assert!(
            got.as_ref().is_err_and(|e| e.contains("Permission denied")),
            "{path:?} write={write}: {got:?}"
        );
    };
    check(&secret, false);
    check(&secret, true);
    check(&outside.path().join("new.txt"), true);
    check(Path::new("/etc/passwd"), false);
    assert!(!outside.path().join("new.txt").exists());
    // Metadata by path is not a Landlock right, so seccomp refuses chmod and chown outright,
    // even inside the root.
    let metadata = w.raw(ToWorker::RawMetadata { path: p(&inside) });
    assert_eq!(
        metadata,
        Err("chmod: Operation not permitted (os error 1); chown: Operation not permitted (os error 1)"
            .to_owned())
    );

    // Through the normal request path, our own resolver refuses first, with the stable code.
    match w.ask(&ToWorker::Call(Request::Stat { path: p(&secret), no_follow: false })) {
        FromWorker::Reply(Err(wire)) => assert_eq!(wire.code, ErrorCode::SandboxDenied),
        other => panic!("unexpected reply {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret\n");
}

#[test]
fn a_read_only_worker_cannot_write_even_inside_its_root() {
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("inside.txt");
    std::fs::write(&inside, "inside\n").unwrap();
    let w = Worker::start("read-only", root.path());
    assert_eq!(w.raw(ToWorker::RawOpen { path: p(&inside), write: false }), Ok(()));
    let got = w.raw(ToWorker::RawOpen { path: p(&inside), write: true });
    assert!(got.as_ref().is_err_and(|e| e.contains("Permission denied")), "{got:?}");
    let request =
        Request::WriteText { path: p(&inside), content: "x".into(), guard: None, match_style: false };
    match w.ask(&ToWorker::Call(request)) {
        FromWorker::Reply(Err(wire)) => assert_eq!(wire.code, ErrorCode::SandboxDenied),
        other => panic!("unexpected reply {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "inside\n");
}

/// The daemon's child processes whose command line contains `role`.
fn children_with_role(daemon_pid: u32, role: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let ppid: Option<u32> = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ppid == Some(daemon_pid) && cmdline.contains(&format!("--role {role}")) {
            pids.push(pid);
        }
    }
    pids
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap().trim().to_owned()
}

#[test]
fn processes_run_with_the_privileges_the_contract_allows() {
    let d = Daemon::start();
    // Serving starts once the pools are up.
    let _ = Rpc::connect(&d);
    let workers = children_with_role(d.pid(), "worker");
    assert_eq!(workers.len(), 4, "two workers for each of read-only and workspace-write");
    let root = rustix::process::geteuid().is_root();
    // By default a worker has no capability, whoever it runs as (root workers that keep CAP_CHOWN,
    // CAP_DAC_OVERRIDE and CAP_FOWNER need `worker_uid = 0`: tests/tests/hardening.rs).
    let caps = "0000000000000000";
    for pid in workers {
        assert_eq!(status_field(pid, "NoNewPrivs"), "1", "worker {pid}");
        assert_eq!(status_field(pid, "Seccomp"), "2", "worker {pid}");
        assert_eq!(status_field(pid, "CapEff"), caps, "worker {pid}");
        assert_eq!(status_field(pid, "CapPrm"), caps, "worker {pid}");
        if root {
            assert_eq!(status_field(pid, "CapBnd"), caps, "worker {pid}");
        }
    }
    let network = children_with_role(d.pid(), "network");
    assert_eq!(network.len(), 1);
    assert_eq!(status_field(network[0], "NoNewPrivs"), "1");
    assert_eq!(status_field(network[0], "CapEff"), "0000000000000000");
}

#[test]
fn the_network_process_holds_no_filesystem_rights_unless_its_runtime_threads_read() {
    // (config, what listing the root gets, what listing the root's parent gets)
    fn check(config: &str, root: Result<(), &str>, outside: Result<(), &str>) {
        let d = Daemon::start_with(&[], config);
        d.write("a.txt", "a\n");
        let mut rpc = Rpc::connect(&d);
        let listed = |rpc: &mut Rpc, dir: &Path| match rpc.stat(&dir.join("fsd-fault-network-open")) {
            Err(status) if status.code() == tonic::Code::Internal => Ok(()),
            Err(status) => Err(status.message().to_owned()),
            Ok(reply) => panic!("{config}: the hook answered {reply:?}"),
        };
        let said = |expected: Result<(), &str>| expected.map_err(|e| format!("network process: {e}"));
        assert_eq!(listed(&mut rpc, &d.root), said(root), "{config}: the root");
        assert_eq!(listed(&mut rpc, &d.root.join("..")), said(outside), "{config}: outside the roots");
        // The same root is served.
        assert!(rpc.stat(&d.path("a.txt")).unwrap().info.is_some(), "{config}");
    }
    // Reads on the direct read threads only: opening a path is refused before Landlock sees
    // it, seccomp answers EPERM (Landlock's refusal would be EACCES, "Permission denied").
    let refused = "Operation not permitted (os error 1)";
    check("inline_reads = false\n", Err(refused), Err(refused));
    check("direct_reads = false\n", Err(refused), Err(refused));
    // Reads on the runtime threads (the default on a local filesystem; said, for a run with
    // every read in the workers): reading beneath the roots and nothing else, Landlock's refusal.
    check("direct_reads = true\n", Ok(()), Err("Permission denied (os error 13)"));
}

#[test]
fn the_network_process_runs_under_a_seccomp_allowlist() {
    // Said, so that a run with every read in the workers (FSD_TEST_READ_PATH) still reads here.
    let d = Daemon::start_with(&[], "direct_reads = true\n");
    let mut rpc = Rpc::connect(&d);
    // Stat by path is outside Landlock's reach, exec is not: seccomp refuses both with EPERM,
    // but for the stat when the runtime threads read (a direct read's walk stats; a stat leaks
    // metadata, never content).
    let exec = |d: &Daemon| Rpc::connect(d).stat(&d.root.join("fsd-fault-network-exec")).unwrap_err();
    let status = exec(&d);
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), "network process: stat: done; exec: Operation not permitted (os error 1)");
    let threads_only = Daemon::start_with(&[], "inline_reads = false\n");
    let status = exec(&threads_only);
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert_eq!(
        status.message(),
        "network process: stat: Operation not permitted (os error 1); exec: Operation not permitted (os error 1)"
    );
    let network = children_with_role(d.pid(), "network");
    assert_eq!(network.len(), 1);
    // Mode 2: a seccomp filter is loaded.
    assert_eq!(status_field(network[0], "Seccomp"), "2");
    // Still serving, over every face of the network process: a call, a stream, a write.
    d.write("a.txt", "a\n");
    assert!(rpc.stat(&d.path("a.txt")).unwrap().info.is_some());
    let mut s = d.session();
    assert!(!s.read("a.txt").is_error());
    let write = s.call("write", json!({"file_path": "b.txt", "content": "b\n"}));
    assert!(!write.is_error(), "{}", write.json);
}

#[test]
fn hello_reports_the_abi_the_walls_and_the_trust_level() {
    let d = Daemon::start();
    let rpc = Rpc::connect(&d);
    let h = &rpc.hello;
    assert_eq!(h.landlock_abi, fsd::sys::landlock_abi());
    assert!(
        h.landlock_abi >= 3,
        "this machine has Landlock ABI {}; the tests need at least 3",
        h.landlock_abi
    );
    assert_eq!(h.escalation, "deny");
    let defaults: Vec<&str> = fsd::config::DEFAULT_PROTECTED_NAMES.iter().map(|(name, _)| *name).collect();
    assert_eq!(h.protected_names, defaults);
    assert_eq!(
        defaults,
        [".git", ".githooks", ".husky", ".claude", ".codex", ".gemini", ".cursor", ".vscode", ".mcp.json"]
    );
    let modes: Vec<(i32, bool, &str)> =
        h.modes.iter().map(|m| (m.mode, m.available, m.enforcement.as_str())).collect();
    assert_eq!(
        modes,
        vec![
            (v1::Mode::ReadOnly as i32, true, "landlock"),
            (v1::Mode::WorkspaceWrite as i32, true, "landlock"),
            (v1::Mode::DangerFullAccess as i32, false, "refused"),
        ]
    );
    assert_eq!(h.writable_roots, vec![p(&d.root)]);
}

#[test]
fn links_and_moves_cannot_leave_the_roots() {
    let d = Daemon::start();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target.txt");
    std::fs::write(&target, "outside\n").unwrap();
    // A hard link inside the root to an outside file: the atomic replace writes a new inode
    // inside the root; the outside file keeps its content.
    std::fs::hard_link(&target, d.path("hard.txt")).unwrap();
    let mut s = d.session();
    assert!(!s.read("hard.txt").is_error());
    let r = s.call("write", json!({"file_path": "hard.txt", "content": "inside\n"}));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "outside\n");
    assert_eq!(d.read("hard.txt"), b"inside\n");
    // A dangling link whose target lies outside cannot create it.
    std::os::unix::fs::symlink(outside.path().join("created.txt"), d.path("dangling.txt")).unwrap();
    let r = s.call("write", json!({"file_path": "dangling.txt", "content": "x"}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(!outside.path().join("created.txt").exists());
    // A move whose destination lies outside is refused, and the source stays.
    d.write("m.txt", "m\n");
    let mut rpc = Rpc::connect(&d);
    let request = v1::MoveFileRequest {
        source: p(&d.path("m.txt")),
        destination: p(&outside.path().join("m.txt")),
        ..Default::default()
    };
    let status = rpc.rt.block_on(rpc.client.move_file(request)).unwrap_err();
    assert_eq!(WireError::from_status(&status).map(|w| w.code), Some(ErrorCode::SandboxDenied));
    assert!(d.path("m.txt").exists());
    assert!(!outside.path().join("m.txt").exists());
}

#[test]
fn protected_paths_stay_read_only_at_any_depth_and_through_links() {
    let d = Daemon::start();
    d.write(".git/config", "[core]\n");
    d.write("sub/deep/.git/hooks/pre-commit", "#!/bin/sh\n");
    std::os::unix::fs::symlink(d.path(".git/config"), d.path("innocent.txt")).unwrap();
    let mut s = d.session_with_config("observationPolicy = false\n");
    let denied = "[sandbox: file access denied under workspace-write mode]";
    for (tool, args) in [
        ("write", json!({"file_path": ".git/config", "content": "x"})),
        ("write", json!({"file_path": ".git/hooks/new", "content": "x"})),
        ("write", json!({"file_path": "sub/deep/.git/hooks/pre-commit", "content": "x"})),
        ("write", json!({"file_path": "sub/new/.git/x", "content": "x"})),
        ("edit", json!({"file_path": "innocent.txt", "old_string": "core", "new_string": "evil"})),
        ("write", json!({"file_path": "innocent.txt", "content": "x"})),
    ] {
        let r = s.call(tool, args.clone());
        assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{tool} {args}: {}", r.json);
        assert!(r.text().ends_with(denied), "{}", r.text());
    }
    assert_eq!(d.read(".git/config"), b"[core]\n");
    assert!(!d.path(".git/hooks/new").exists());
    assert!(!d.path("sub/new").exists(), "no directory is created on the way to a refusal");
    // Reading stays allowed.
    assert!(!s.read(".git/config").is_error());
}

#[test]
fn read_only_mode_refuses_every_mutation() {
    let d = Daemon::start_with(&["--default-mode", "read-only"], "");
    d.write("a.txt", "a\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    assert!(!s.read("a.txt").is_error());
    let marker = "[sandbox: file access denied under read-only mode]";
    for (tool, args) in [
        ("write", json!({"file_path": "a.txt", "content": "b\n"})),
        ("write", json!({"file_path": "new.txt", "content": "b\n"})),
        ("edit", json!({"file_path": "a.txt", "old_string": "a", "new_string": "b"})),
        ("apply_patch", json!({"input": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"})),
    ] {
        let r = s.call(tool, args.clone());
        assert!(r.text().contains(marker), "{tool}: {}", r.json);
    }
    assert_eq!(d.read("a.txt"), b"a\n");
    assert!(!d.path("new.txt").exists());
}

#[test]
fn a_hung_worker_is_killed_and_only_its_call_fails() {
    // Reads in the workers: a hung direct read is `direct_reads.rs`'s.
    let d = Daemon::start_with(&[], "call_timeout_ms = 1500\ndirect_reads = false\n");
    d.write("a.txt", "a\n");
    let mut s = d.session();
    // The first answered call means the pools are up.
    assert!(!s.read("a.txt").is_error());
    let before = children_with_role(d.pid(), "worker");
    assert_eq!(before.len(), 4);
    let r = s.read("fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    assert!(r.text().contains("exceeded its deadline"), "{}", r.text());
    // The next calls succeed, and the supervisor replaced the killed worker.
    for _ in 0..4 {
        assert!(!s.read("a.txt").is_error());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = children_with_role(d.pid(), "worker");
        if now.len() == before.len() && now != before {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "worker not replaced: {before:?} -> {now:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_read_only_root_inside_a_writable_one_stays_read_only_however_it_is_reached() {
    let outer = tempfile::tempdir().unwrap();
    let outer_path = std::fs::canonicalize(outer.path()).unwrap();
    let ro = outer_path.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::create_dir_all(outer_path.join("sub")).unwrap();
    std::fs::write(ro.join("keep.txt"), "read only\n").unwrap();
    std::os::unix::fs::symlink("ro", outer_path.join("ro-link")).unwrap();
    let d = Daemon::start_with(
        &["--writable-root", outer_path.to_str().unwrap(), "--readable-root", ro.to_str().unwrap()],
        "",
    );
    let mut rpc = Rpc::connect(&d);
    let direct_key = rpc.stat(&ro.join("keep.txt")).unwrap().target.unwrap().target_key;
    // The read-only root by its own path, through `..` from the writable one, and through a
    // relative link in it: one target, and no write, create or removal of it.
    for spelled in ["ro", "sub/../ro", "ro-link"] {
        let dir = outer_path.join(spelled);
        assert_eq!(
            rpc.stat(&dir.join("keep.txt")).unwrap().target.unwrap().target_key,
            direct_key,
            "{spelled}"
        );
        for name in ["keep.txt", "new.txt"] {
            let status = rpc.write_text(&dir.join(name), "overwritten\n", None).unwrap_err();
            let wire = WireError::from_status(&status).unwrap();
            assert_eq!(
                (wire.code, wire.get("reason")),
                (ErrorCode::SandboxDenied, Some("not_writable_root")),
                "{spelled}/{name}"
            );
        }
        // The file in it, and (but for the link, which is removed itself) the root.
        let removals =
            if spelled == "ro-link" { vec![dir.join("keep.txt")] } else { vec![dir.join("keep.txt"), dir] };
        for path in removals {
            let request = v1::RemoveRequest { path: p(&path), recursive: true, ..Default::default() };
            let status = rpc.rt.block_on(rpc.client.remove(request)).unwrap_err();
            assert_eq!(
                WireError::from_status(&status).map(|w| w.code),
                Some(ErrorCode::SandboxDenied),
                "{path:?}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(ro.join("keep.txt")).unwrap(), "read only\n");
    assert!(!ro.join("new.txt").exists());
}

#[test]
fn a_recursive_removal_never_takes_a_root_nested_in_its_tree() {
    let outer = tempfile::tempdir().unwrap();
    let outer_path = std::fs::canonicalize(outer.path()).unwrap();
    let ro = outer_path.join("a/ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(ro.join("keep.txt"), "read only\n").unwrap();
    std::fs::write(outer_path.join("a/other.txt"), "writable\n").unwrap();
    let d = Daemon::start_with(
        &["--writable-root", outer_path.to_str().unwrap(), "--readable-root", ro.to_str().unwrap()],
        "",
    );
    let mut rpc = Rpc::connect(&d);
    let request = v1::RemoveRequest { path: p(&outer_path.join("a")), recursive: true, ..Default::default() };
    let status = rpc.rt.block_on(rpc.client.remove(request)).unwrap_err();
    let wire = WireError::from_status(&status).unwrap();
    assert_eq!((wire.code, wire.get("reason")), (ErrorCode::SandboxDenied, Some("root")), "{status:?}");
    // The dry walk refused it before anything was gone.
    assert_eq!(std::fs::read_to_string(ro.join("keep.txt")).unwrap(), "read only\n");
    assert_eq!(std::fs::read_to_string(outer_path.join("a/other.txt")).unwrap(), "writable\n");
}
