//! A worker stuck where no kill reaches it (uninterruptible sleep in a dead FUSE or NFS server)
//! is abandoned: its slot gets a fresh worker at once and the mode keeps serving; past
//! `max_abandoned_workers` the mode reports NOT_SERVING in health and its calls fail fast. The
//! test hook `FSD_FAULT_UNKILLABLE_WORKERS=1` (fault-injection builds) makes the supervisor
//! treat every worker it is asked to kill as unkillable; `fsd-fault-hang` makes a read hang,
//! `fsd-fault-slow` take half a second. Reads sent ahead to a busy worker (`fsd::dispatch`)
//! never wait out a stuck worker's deadline. Reads take the worker hop here (`direct_reads =
//! false`); a hung direct read is `direct_reads.rs`'s.

use crate::common;

use std::time::{Duration, Instant};

use common::Daemon;
use common::rpc::health;
use tonic_health::pb::health_check_response::ServingStatus;

/// The workers the daemon's supervisor started, as they are now.
fn workers(daemon: &Daemon) -> Vec<u32> {
    let supervisor = daemon.pid();
    let mut pids: Vec<u32> = daemon
        .pids()
        .into_iter()
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(&supervisor.to_string()) && String::from_utf8_lossy(&cmdline).contains("worker")
        })
        .collect();
    pids.sort();
    pids
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_unkillable_worker_is_abandoned_and_replaced_and_past_the_cap_the_mode_stops() {
    let d = Daemon::start_with_env(
        &[],
        "call_timeout_ms = 800\nworkers_per_mode = 1\nmax_abandoned_workers = 1\nmax_mode = \"workspace-write\"\ndirect_reads = false\n",
        &[("FSD_FAULT_UNKILLABLE_WORKERS", "1")],
    );
    d.write("a.txt", "a\n");
    let mut s = d.session();
    assert!(!s.read("a.txt").is_error());
    let before = workers(&d);
    assert_eq!(before.len(), 2, "one worker per mode: {before:?}");
    assert_eq!(health(&d, "fsd.v1.Fsd/workspace-write"), ServingStatus::Serving);

    // The first hung call: its worker survives the kill, is abandoned, and a fresh one serves.
    let r = s.read("fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    wait_for("a replacement worker runs beside the abandoned one", || workers(&d).len() == 3);
    for _ in 0..3 {
        let r = s.read("a.txt");
        assert!(!r.is_error(), "the mode keeps serving: {}", r.json);
    }
    assert_eq!(health(&d, "fsd.v1.Fsd/workspace-write"), ServingStatus::Serving);

    // The second one is past the cap of one abandoned worker: the mode stops, loudly and fast.
    let r = s.read("fsd-fault-hang");
    assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
    wait_for("the mode reports NOT_SERVING", || {
        health(&d, "fsd.v1.Fsd/workspace-write") == ServingStatus::NotServing
    });
    // FS_IO_ERROR at once, not FS_ABORTED after waiting a deadline for a worker.
    let r = s.read("a.txt");
    assert_eq!(r.code(), Some("FS_IO_ERROR"), "{}", r.json);
    assert!(r.text().contains("stuck"), "{}", r.text());
    // Other modes are not affected.
    assert_eq!(health(&d, "fsd.v1.Fsd/read-only"), ServingStatus::Serving);
    assert_eq!(workers(&d).len(), 3, "no replacement past the cap: {:?}", workers(&d));
}

/// A daemon with `config`, a one-line `a.txt` and a file at each fault-hook path of `faults`;
/// its reads go to the workers (`direct_reads = false`), whose hangs these tests are about.
fn faulty_daemon(config: &str, faults: &[&str]) -> Daemon {
    let d = Daemon::start_with(&[], &format!("{config}direct_reads = false\n"));
    d.write("a.txt", "a\n");
    for fault in faults {
        d.write(fault, "x");
    }
    d
}

/// `n` sessions, each past a first read, so none of them waits for a busy worker to start.
fn ready_sessions(d: &Daemon, n: usize) -> Vec<common::ToolSession> {
    (0..n)
        .map(|_| {
            let mut session = d.session();
            assert!(!session.read("a.txt").is_error());
            session
        })
        .collect()
}

#[test]
fn a_read_sent_ahead_of_a_hung_read_is_never_reported_lost() {
    // One worker, hung twice in a row: a read queued behind the second hung read is sent to the
    // same worker before that one finishes (reads are sent in a row to a busy worker). When the
    // worker stops answering, the read goes back to the queue: it never ran anywhere that
    // counts, so its caller hears either its answer from the fresh worker that replaces the
    // killed one, or that no worker became free by its deadline, never that its worker was
    // lost with the outcome unknown.
    let d = faulty_daemon(
        "call_timeout_ms = 1500\nworkers_per_mode = 1\n",
        &["one/fsd-fault-hang", "two/fsd-fault-hang"],
    );
    let _warm = ready_sessions(&d, 1);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| d.session().read("one/fsd-fault-hang"));
        std::thread::sleep(Duration::from_millis(300));
        let second = scope.spawn(|| d.session().read("two/fsd-fault-hang"));
        std::thread::sleep(Duration::from_millis(300));
        let third = scope.spawn(|| d.session().read("a.txt"));
        for hung in [first, second] {
            let r = hung.join().unwrap();
            assert_eq!(r.code(), Some("FS_ABORTED"), "{}", r.json);
        }
        let r = third.join().unwrap();
        let path = d.path("a.txt");
        if r.is_error() {
            let text = format!(
                "Error: cannot read \"{}\": no worker became free before the call's deadline",
                path.display()
            );
            common::err(&r, "FS_ABORTED", &text);
        } else {
            common::ok(&r, &common::envelope(&path, &["1: a"], "(End of file - total 1 lines)"));
        }
    });
}

#[test]
fn reads_sent_ahead_of_a_stuck_worker_go_to_another_one() {
    // Both workers are busy with slow reads (half a second each, the second started later) when
    // a hanging read and then a plain one queue. The first worker to come free takes the
    // hanging read with the plain one sent ahead of it. The plain one must not wait out the
    // hanging one's deadline (30 s): once its worker has not answered for a moment, it goes
    // back to the queue and the other worker, free soon after, serves it.
    let d = faulty_daemon(
        "call_timeout_ms = 30000\nworkers_per_mode = 2\n",
        &["one/fsd-fault-slow", "two/fsd-fault-slow", "stuck/fsd-fault-hang"],
    );
    let (done, finished) = std::sync::mpsc::channel();
    let calls = [
        ("slow", "one/fsd-fault-slow", 200),
        ("slow", "two/fsd-fault-slow", 100),
        ("stuck", "stuck/fsd-fault-hang", 100),
        ("plain", "a.txt", 0),
    ];
    // Every session is up before the first call, so all four are issued within the first slow
    // read's half second.
    let sessions = ready_sessions(&d, calls.len());
    for ((name, path, pause), mut session) in calls.into_iter().zip(sessions) {
        let done = done.clone();
        // Not joined: the stuck read ends when the daemon does.
        std::thread::spawn(move || {
            let reply = session.read(path);
            let _ = done.send((name, reply));
        });
        std::thread::sleep(Duration::from_millis(pause));
    }
    let mut before = Vec::new();
    loop {
        let (name, reply) = finished.recv_timeout(Duration::from_secs(15)).expect(
            "the plain read waited for the stuck one (deadline 30 s) instead of going to the free worker",
        );
        if name == "plain" {
            let expected = common::envelope(&d.path("a.txt"), &["1: a"], "(End of file - total 1 lines)");
            common::ok(&reply, &expected);
            break;
        }
        assert!(!reply.is_error(), "{name}: {}", reply.json);
        before.push(name);
    }
    // The second slow read and the plain one finish moments apart, in either order.
    assert!(before.iter().all(|name| *name == "slow") && !before.is_empty(), "{before:?}");
}

#[test]
fn an_upload_that_gives_up_waiting_for_a_worker_lets_go_of_its_body() {
    // One worker, hung twice in a row, and an upload of 4 MiB queued behind both. When the
    // upload's queue deadline passes it fails at once: the daemon lets go of its pipe then, not
    // when a worker next comes free (until then the upload's sender would block on the full
    // pipe and the call would not end).
    use fsd_proto::v1::{self, write_bytes_request::Item};
    let d = faulty_daemon(
        "call_timeout_ms = 3000\nworkers_per_mode = 1\n",
        &["one/fsd-fault-hang", "two/fsd-fault-hang"],
    );
    let (done, finished) = std::sync::mpsc::channel();
    // Both sessions are up before the first read hangs the only worker.
    let sessions = ready_sessions(&d, 2);
    for (path, mut session) in ["one/fsd-fault-hang", "two/fsd-fault-hang"].into_iter().zip(sessions) {
        let done = done.clone();
        // Not joined: the second hung read ends when the daemon does.
        std::thread::spawn(move || {
            let reply = session.read(path);
            let _ = done.send(("hung", reply.code().map(str::to_owned)));
        });
        std::thread::sleep(Duration::from_millis(300));
    }
    let (socket, target) = (d.socket.clone(), common::rpc::p(&d.path("up.bin")));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            let endpoint = fsd_tool_client::connect::Endpoint::Unix(socket);
            let (mut client, _) = fsd_tool_client::connect::connect(&endpoint).await.unwrap();
            let header = v1::WriteBytesHeader { path: target, ..Default::default() };
            let chunk = bytes::Bytes::from(vec![b'x'; 64 << 10]);
            let mut messages = vec![v1::WriteBytesRequest { item: Some(Item::Header(header)) }];
            messages
                .extend((0..64).map(|_| v1::WriteBytesRequest { item: Some(Item::Chunk(chunk.clone())) }));
            client.write_bytes(tokio_stream::iter(messages)).await.map(|_| ())
        });
        let reason = outcome.err().map(|status| {
            let wire = common::rpc::wire(&status);
            format!("{} {}", wire.code.as_str(), wire.metadata.get("reason").cloned().unwrap_or_default())
        });
        let _ = done.send(("upload", reason));
    });
    let mut before = Vec::new();
    loop {
        let (name, outcome) = finished.recv_timeout(Duration::from_secs(30)).expect("every call ends");
        if name == "upload" {
            assert_eq!(outcome.as_deref(), Some("FS_ABORTED no_free_worker"));
            break;
        }
        assert_eq!(outcome.as_deref(), Some("FS_ABORTED"));
        before.push(name);
    }
    // The first hung read ended at its deadline; the second one still runs.
    assert_eq!(before, ["hung"], "the upload ended only after a worker came free");
    assert!(!d.path("up.bin").exists(), "the upload ran nowhere");
}
