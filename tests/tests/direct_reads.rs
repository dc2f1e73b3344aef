//! The direct read path (`fsd::dispatch::direct`): plain reads served by threads of the network
//! process confined as a read-only worker is. Their privileges as the kernel reports them, a
//! write from one refused by the kernel, refusals identical to a worker's (same codes, same
//! texts) for a read-only client, a symlink swapped during direct reads never leading outside
//! the roots, and a hung direct read abandoned until, past the cap, the path turns itself off
//! (health and hello say so) while reads go on through the workers, and back on once the
//! abandoned reads return.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Daemon;
use common::rpc::Rpc;
use common::rpc::health;
use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;

/// The network process of a daemon.
fn network_pid(d: &Daemon) -> u32 {
    let supervisor = d.pid().to_string();
    d.pids()
        .into_iter()
        .find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(supervisor.as_str())
                && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains("--role network")
        })
        .expect("a network process")
}

/// The `/proc` status lines of a process's threads whose name starts with `prefix` ("": all),
/// with their names.
fn threads_named(pid: u32, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            out.push((comm.trim().to_owned(), std::fs::read_to_string(task.join("status")).unwrap()));
        }
    }
    out
}

/// The `/proc` status lines of a process's threads named `fsd-direct-*`.
fn direct_threads(pid: u32) -> Vec<String> {
    threads_named(pid, "fsd-direct-").into_iter().map(|(_, status)| status).collect()
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).unwrap_or("").trim()
}

/// The status of a read-only worker of the daemon.
fn read_only_worker(d: &Daemon) -> String {
    let pid = d
        .pids()
        .into_iter()
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ").contains("--worker-mode read-only")
        })
        .expect("a read-only worker");
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap()
}

/// What hello says of the read-only mode.
fn read_only_reason(d: &Daemon) -> String {
    let rpc = Rpc::connect(d);
    let mode = rpc.hello.modes.iter().find(|m| m.mode == fsd_proto::v1::Mode::ReadOnly as i32);
    mode.expect("read-only in hello").reason.clone()
}

#[test]
fn direct_read_threads_run_with_a_read_only_workers_privileges() {
    // Said, so that a run with every read in the workers (FSD_TEST_READ_PATH) still has them.
    let d = Daemon::start_with(&[], "direct_reads = true\n");
    d.write("a.txt", "a\n");
    assert!(!d.session().read("a.txt").is_error());
    let threads = direct_threads(network_pid(&d));
    assert_eq!(threads.len(), 4, "four direct read threads");
    let worker = read_only_worker(&d);
    let none = "0000000000000000";
    let acting = acting_as(&d, &worker);
    for status in &threads {
        // The read-only worker's effective uid, gids and groups (the real and saved uid stay
        // the daemon's), no capability, no_new_privs, a filter.
        assert_eq!(field(status, "Uid"), acting);
        for name in ["Gid", "Groups"] {
            assert_eq!(field(status, name), field(&worker, name), "{name}");
        }
        assert_eq!(field(status, "CapEff"), none);
        assert_eq!(field(status, "CapPrm"), none);
        assert_eq!(field(status, "NoNewPrivs"), "1");
        assert_eq!(field(status, "Seccomp"), "2");
        if rustix::process::geteuid().is_root() {
            assert_eq!(field(status, "CapBnd"), none);
        }
    }
    assert!(read_only_reason(&d).contains("served in the network process"), "{}", read_only_reason(&d));
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::Serving);
    // The rest of the network process reads on its runtime threads (`dispatch::inline`): every
    // thread of it holds what a read-only worker holds, and no more.
    for (name, status) in threads_named(network_pid(&d), "") {
        assert_eq!(field(&status, "Uid"), acting, "{name}");
        for field_name in ["Gid", "Groups"] {
            assert_eq!(field(&status, field_name), field(&worker, field_name), "{name}: {field_name}");
        }
        assert_eq!(field(&status, "CapEff"), none, "{name}");
        assert_eq!(field(&status, "CapPrm"), none, "{name}");
        assert_eq!(field(&status, "NoNewPrivs"), "1", "{name}");
        assert_eq!(field(&status, "Seccomp"), "2", "{name}");
    }
}

/// A thread's `Uid` line (real, effective, saved, filesystem) that acts as the worker whose
/// status is `worker`: the daemon's real and saved uid, the worker's effective and filesystem uid.
fn acting_as(d: &Daemon, worker: &str) -> String {
    let daemon = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let real = field(&daemon, "Uid").split_whitespace().next().unwrap().to_owned();
    let effective = field(worker, "Uid").split_whitespace().nth(1).unwrap().to_owned();
    format!("{real}\t{effective}\t{real}\t{effective}")
}

/// Whether a process running as the uid and gid of the worker whose status is `worker` may
/// signal the thread `tid` (`kill -0`: the permission check, no signal).
fn may_signal_as(worker: &str, tid: &str) -> bool {
    let uid = field(worker, "Uid").split_whitespace().next().unwrap();
    let gid = field(worker, "Gid").split_whitespace().next().unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", uid, "--regid", gid, "--clear-groups", "kill", "-0", tid])
        .output()
        .expect("setpriv (util-linux) runs the check as the worker's uid");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() || said.contains("Operation not permitted"), "{said}");
    out.status.success()
}

#[test]
fn the_workers_uid_may_not_signal_the_network_process() {
    // An agent often runs as the uid the workers take (the owner of the workspace); the
    // threads of the network process that read as that uid keep the daemon's real and saved
    // uid, so it may not signal them (and stop the daemon), on the runtime threads (reads
    // there) or only the direct read threads.
    for config in ["direct_reads = true\n", "direct_reads = true\ninline_reads = false\n"] {
        // The workspace is a user's, so the workers run as that user.
        let owned = |root: &Path| std::os::unix::fs::chown(root, Some(4242), Some(4242)).unwrap();
        let d = Daemon::start_custom(&[], &owned, &[], config, &[]);
        d.write("a.txt", "a\n");
        assert!(!d.session().read("a.txt").is_error());
        let worker = read_only_worker(&d);
        assert_eq!(field(&worker, "Uid"), "4242\t4242\t4242\t4242", "{config}");
        // The check can refuse and can allow: the worker itself shares the uid.
        assert!(may_signal_as(&worker, field(&worker, "Pid")), "{config}: a worker of the same uid");
        let threads = threads_named(network_pid(&d), "");
        assert!(threads.len() > 4, "{config}");
        for (name, status) in &threads {
            assert!(!may_signal_as(&worker, field(status, "Pid")), "{config}: {name}");
        }
        assert!(!d.session().read("a.txt").is_error(), "{config}");
    }
}

#[test]
fn a_read_held_on_a_runtime_thread_holds_only_its_call() {
    // Reads run on the runtime thread that received them (the roots are local); a read held
    // there past the deadline cannot be abandoned, so it holds its call and that thread, and
    // the daemon serves on: the next reads go to the direct read threads.
    let d = Daemon::start_with(&[], "direct_reads = true\ncall_timeout_ms = 800\n");
    d.write("a.txt", "a\n");
    d.write("held/fsd-fault-hold", "x\n");
    let held_path = d.path("held/fsd-fault-hold");
    let a_path = d.path("a.txt");
    let rpc = Rpc::connect(&d);
    // The held read, and past the deadline a second call on the same connection (whose
    // connection task the held thread must not strand).
    let (beside_tx, beside_rx) = std::sync::mpsc::channel();
    let held = std::thread::spawn(move || {
        rpc.rt.block_on(async {
            let mut client = rpc.client.clone();
            let request =
                fsd_proto::v1::StatRequest { path: common::rpc::p(&held_path), ..Default::default() };
            let held = tokio::spawn(async move { client.stat(request).await });
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let request = fsd_proto::v1::StatRequest { path: common::rpc::p(&a_path), ..Default::default() };
            let beside = tokio::time::timeout(Duration::from_secs(5), rpc.client.clone().stat(request)).await;
            beside_tx.send(beside.map(|r| r.map(|_| ()).map_err(|status| status.code()))).unwrap();
            held.await.unwrap().map(|_| ()).map_err(|status| status.code())
        })
    });
    assert_eq!(beside_rx.recv().unwrap(), Ok(Ok(())), "a call beside the held read, on its connection");
    // Past the deadline, the held read is still held, and everything else is served.
    assert!(!held.is_finished(), "the held read answered before its release");
    let mut s = d.session();
    for _ in 0..5 {
        assert!(!s.read("a.txt").is_error());
    }
    assert!(!s.call("write", json!({"file_path": "b.txt", "content": "b\n"})).is_error());
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::Serving);
    assert_eq!(health(&d, ""), ServingStatus::Serving);
    // Released, it answers: it ran where nothing abandons a read, not on a direct read thread
    // (which would have answered FS_ABORTED at 800 ms).
    d.write("held/fsd-fault-release", "");
    assert_eq!(held.join().unwrap(), Ok(()));
    assert!(!s.read("a.txt").is_error());
}

#[test]
fn a_write_from_a_direct_read_thread_is_refused_by_the_kernel() {
    // On a runtime thread of the network process (inline) and on a direct read thread.
    for config in ["direct_reads = true\n", "direct_reads = true\ninline_reads = false\n"] {
        let d = Daemon::start_with(&[], config);
        let mut rpc = Rpc::connect(&d);
        let status = rpc.stat(&d.root.join("fsd-fault-direct-write")).unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{config}{status:?}");
        // EACCES: seccomp let the openat through, Landlock (reading only beneath the roots)
        // refused it.
        assert!(status.message().contains("Permission denied (os error 13)"), "{config}{status:?}");
        assert!(!d.path("fsd-direct-wrote").exists());
    }
}

#[test]
fn with_direct_reads_off_health_and_hello_say_so_and_reads_are_served() {
    let d = Daemon::start_with(&[], "direct_reads = false\n");
    d.write("a.txt", "a\n");
    assert!(!d.session().read("a.txt").is_error());
    assert!(direct_threads(network_pid(&d)).is_empty(), "no direct read thread");
    assert!(read_only_reason(&d).contains("direct reads off by configuration"), "{}", read_only_reason(&d));
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::NotServing);
    assert_eq!(health(&d, ""), ServingStatus::Serving);
}

/// One reply as a model sees it: text, code and metadata (the session's own id aside).
fn seen(reply: &common::Reply) -> serde_json::Value {
    json!({"text": reply.text(), "code": reply.code(), "error": reply.is_error(), "meta": reply.meta()})
}

#[test]
fn a_read_only_clients_direct_reads_are_refused_exactly_as_a_workers() {
    // The same tree served twice, by a daemon whose reads are direct and one whose reads go to
    // the workers: every reply must be the same, character for character.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE\n").unwrap();
    let outside_path = std::fs::canonicalize(outside.path()).unwrap();
    let prepare = move |root: &Path| {
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        std::fs::write(root.join(".env"), "KEY=1\n").unwrap();
        std::fs::create_dir(root.join(".ssh")).unwrap();
        std::fs::write(root.join(".ssh/id_ed25519"), "key\n").unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink(outside_path.join("secret.txt"), root.join("out-link")).unwrap();
        std::os::unix::fs::symlink(".env", root.join("env-link")).unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();
        if rustix::process::geteuid().is_root() {
            // Another user's private file: the worker identity (no capability) cannot read it.
            std::fs::write(root.join("private.txt"), "p\n").unwrap();
            std::os::unix::fs::chown(root.join("private.txt"), Some(65534), Some(65534)).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root.join("private.txt"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
    };
    let config = "default_mode = \"read-only\"\n";
    let direct = Daemon::start_custom(&[], &prepare, &[], config, &[]);
    let workers = Daemon::start_custom(&[], &prepare, &[], &format!("{config}direct_reads = false\n"), &[]);
    let secret = outside.path().join("secret.txt");
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("a file", json!({"file_path": "a.txt"})),
        ("outside the roots", json!({"file_path": secret.to_str().unwrap()})),
        ("escaping with ..", json!({"file_path": "../../../etc/hostname"})),
        ("a link leading outside", json!({"file_path": "out-link"})),
        ("read-denied", json!({"file_path": ".env"})),
        ("a link to a read-denied file", json!({"file_path": "env-link"})),
        ("in a read-denied directory", json!({"file_path": ".ssh/id_ed25519"})),
        ("a protected name (readable)", json!({"file_path": ".git/config"})),
        ("missing", json!({"file_path": "missing.txt"})),
        ("a directory", json!({"file_path": "dir"})),
        ("another user's private file", json!({"file_path": "private.txt"})),
    ];
    let mut a = direct.session();
    let mut b = workers.session();
    for (what, args) in &cases {
        let ours = a.call("read", args.clone());
        let theirs = b.call("read", args.clone());
        let (ours, theirs) = (seen(&ours), seen(&theirs));
        // Each daemon names its own root in paths: compare with the roots taken out.
        let strip =
            |v: &serde_json::Value, root: &Path| v.to_string().replace(root.to_str().unwrap(), "<root>");
        assert_eq!(strip(&ours, &direct.root), strip(&theirs, &workers.root), "{what}");
    }
    // The refusals are refusals: spot-check the codes a worker gives.
    let code = |s: &mut common::ToolSession, path: &str| s.read(path).code().map(str::to_owned);
    assert_eq!(code(&mut a, secret.to_str().unwrap()).as_deref(), Some("FS_SANDBOX_DENIED"));
    assert_eq!(code(&mut a, ".env").as_deref(), Some("FS_READ_DENIED"));
    assert_eq!(code(&mut a, "out-link").as_deref(), Some("FS_SANDBOX_DENIED"));
}

#[test]
fn a_symlink_swapped_during_direct_reads_never_leads_outside_the_roots() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE\n").unwrap();
    std::fs::create_dir(outside.path().join("dir")).unwrap();
    std::fs::write(outside.path().join("dir/f.txt"), "OUTSIDE\n").unwrap();
    let d = Daemon::start();
    d.write("inside.txt", "inside\n");
    d.write("dir/f.txt", "inside\n");
    let root = d.root.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A file link and a directory that flip between inside and outside, atomically (rename).
    let swapper = {
        let (stop, root, outside) = (stop.clone(), root.clone(), outside.path().to_owned());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (file, dir) = if n.is_multiple_of(2) {
                    (root.join("inside.txt"), root.join("dir"))
                } else {
                    (outside.join("secret.txt"), outside.join("dir"))
                };
                let tmp = root.join(format!(".swap-{n}"));
                std::os::unix::fs::symlink(&file, &tmp).unwrap();
                std::fs::rename(&tmp, root.join("link")).unwrap();
                let tmp = root.join(format!(".swapdir-{n}"));
                std::os::unix::fs::symlink(&dir, &tmp).unwrap();
                std::fs::rename(&tmp, root.join("dlink")).unwrap();
                n += 1;
            }
        })
    };
    let mut s = d.session();
    let mut rpc = Rpc::connect(&d);
    let deadline = Instant::now() + Duration::from_secs(4);
    let (mut inside, mut refused) = (0, 0);
    while Instant::now() < deadline {
        for path in ["link", "dlink/f.txt"] {
            let r = s.read(path);
            assert!(!r.text().contains("OUTSIDE"), "a direct read reached outside the roots: {}", r.json);
            if r.is_error() {
                refused += 1;
            } else {
                inside += 1;
            }
            // The raw RPCs the tools do not make alike: readText, readBytes, listDir.
            if let Ok(reply) = rpc.read_text(&root.join(path), 0) {
                assert!(!reply.text.contains("OUTSIDE"), "readText reached outside: {reply:?}");
            }
            if let Ok(listing) = rpc.list_dir(&root.join("dlink")) {
                let outside = outside.path().to_str().unwrap();
                let shown = |e: &fsd_proto::v1::DirEntry| e.target.as_ref().map(|t| t.display_path.clone());
                assert!(listing.entries.iter().all(|e| !shown(e).unwrap_or_default().contains(outside)));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    println!("symlink swap: {inside} reads inside, {refused} refused");
    assert!(inside > 0 && refused > 0, "both sides of the swap were met: {inside} inside, {refused} refused");
}

#[test]
fn a_hung_direct_read_is_abandoned_and_past_the_cap_the_path_turns_itself_off() {
    // On the direct read threads, which abandon a read at the deadline (a runtime thread's read
    // is `a_read_held_on_a_runtime_thread_holds_only_its_call`'s).
    let d = Daemon::start_with(&[], "direct_reads = true\ninline_reads = false\ncall_timeout_ms = 800\n");
    d.write("a.txt", "a\n");
    d.write("one/fsd-fault-hang", "x");
    d.write("two/fsd-fault-hang", "x");
    let mut s = d.session();
    assert!(!s.read("a.txt").is_error());
    let workers_before = {
        let mut w: Vec<u32> = d.process.worker_pids("read-only");
        w.extend(d.process.worker_pids("workspace-write"));
        w.sort();
        w
    };
    // The first hang: abandoned (its thread is counted), the path still serves.
    let r = s.read("one/fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::Serving);
    assert!(!s.read("a.txt").is_error());
    // The second is the cap (half the four threads): the path turns itself off.
    let r = s.read("two/fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::NotServing);
    assert!(read_only_reason(&d).contains("2 reads overran the call deadline"), "{}", read_only_reason(&d));
    // Reads go on through the workers; the daemon as a whole stays healthy, no worker was killed.
    for _ in 0..3 {
        assert!(!s.read("a.txt").is_error());
    }
    assert_eq!(health(&d, ""), ServingStatus::Serving);
    let mut workers_after: Vec<u32> = d.process.worker_pids("read-only");
    workers_after.extend(d.process.worker_pids("workspace-write"));
    workers_after.sort();
    assert_eq!(workers_before, workers_after, "the hung reads ran in no worker");
    // Now a hang is a worker's: killed at the deadline and replaced.
    let r = s.read("one/fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    assert!(r.text().contains("exceeded its deadline"), "{}", r.text());
}

#[test]
fn a_tripped_direct_path_comes_back_once_its_abandoned_reads_return() {
    let d = Daemon::start_with(&[], "inline_reads = false\ncall_timeout_ms = 800\n");
    d.write("a.txt", "a\n");
    d.write("one/fsd-fault-hold", "x");
    d.write("two/fsd-fault-hold", "x");
    let mut s = d.session();
    // Two reads held past the deadline: abandoned, and the cap turns the path off.
    for held in ["one/fsd-fault-hold", "two/fsd-fault-hold"] {
        let r = s.read(held);
        assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    }
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::NotServing);
    assert!(read_only_reason(&d).contains("2 reads overran the call deadline"), "{}", read_only_reason(&d));
    // One returns: one thread is still stuck, under the cap, so the path serves again.
    d.write("one/fsd-fault-release", "");
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(&d, "fsd.v1.Fsd/direct-reads") != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "the direct path never came back on");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!read_only_reason(&d).contains("overran"), "{}", read_only_reason(&d));
    assert!(!s.read("a.txt").is_error());
    // A third held read is abandoned, and with the one still stuck the cap turns it off again.
    d.write("three/fsd-fault-hold", "x");
    let r = s.read("three/fsd-fault-hold");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    assert_eq!(health(&d, "fsd.v1.Fsd/direct-reads"), ServingStatus::NotServing);
    // Both return: on again.
    d.write("two/fsd-fault-release", "");
    d.write("three/fsd-fault-release", "");
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(&d, "fsd.v1.Fsd/direct-reads") != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "the direct path never came back on");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!s.read("a.txt").is_error());
    assert_eq!(health(&d, ""), ServingStatus::Serving);
}
