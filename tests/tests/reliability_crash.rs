//! Crash safety (short form of `fsd-crash`): the daemon's whole process tree, or one worker, is
//! SIGKILLed at random moments while four clients write and edit 4 KiB and 8 MiB files; the
//! daemon restarts on the same root. Every file must hold its last acknowledged content or the
//! content of the call the kill cut, and no `.fsd-tmp-*` file or journal entry may remain (the
//! supervisor's start-up and dead-worker sweeps remove them; see docs/reliability.md). And a
//! worker killed while idle costs no call: the next one goes to another worker; its replacement
//! serves the configuration the daemon started with, whatever the config file says by then.

use crate::common;

use std::time::Duration;

use common::*;
use fsd_soak::crash::{self, CrashOptions};
use fsd_soak::daemon::Bins;
use serde_json::json;

/// Every worker of the mode killed while idle (the OOM killer, an operator), and the next call
/// sent before anything noticed: each worker it is sent to is found gone before it took the
/// call, so it goes to the next, and then to a replacement, instead of failing with an
/// unknown outcome.
#[test]
fn a_call_sent_to_killed_idle_workers_is_served_by_their_replacement() {
    let d = Daemon::start();
    let mut s = d.session();
    d.write("a.txt", "alpha\n");
    assert!(!s.read("a.txt").is_error());
    for round in 0..3 {
        let killed = d.process.kill_workers(&["workspace-write"]);
        assert!(!killed.is_empty(), "no workspace-write worker to kill");
        // Their sockets close when they die, before anyone reaps them.
        std::thread::sleep(Duration::from_millis(100));
        let content = format!("round {round}\n");
        let r = s.call("write", json!({"file_path": "a.txt", "content": content}));
        let path = d.path("a.txt");
        ok(
            &r,
            &format!(
                "<path>{}</path>\n<type>file</type>\n<content>\nUpdated file\n</content>",
                path.display()
            ),
        );
        assert_eq!(d.read("a.txt"), content.as_bytes());
    }
}

/// The configuration is read once, by the supervisor, and reaches every child in its first
/// frame: workers that replace killed ones serve the roots the daemon was started with, not a
/// root added to the config file since (they used to read the file again, and served it).
#[test]
fn replaced_workers_serve_the_configuration_the_daemon_started_with() {
    use common::rpc::{Rpc, wire};
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("ws");
    let second = dir.path().join("second");
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();
    let (first, second) = (std::fs::canonicalize(first).unwrap(), std::fs::canonicalize(second).unwrap());
    std::fs::write(second.join("secret.txt"), "secret\n").unwrap();
    let socket = dir.path().join("fsd.sock");
    let config = dir.path().join("fsd.toml");
    let roots = |roots: &[&std::path::Path]| {
        let quoted: Vec<String> = roots.iter().map(|r| format!("{:?}", r.to_str().unwrap())).collect();
        format!("writable_roots = [{}]\n", quoted.join(", "))
    };
    let process = launch().unix(&socket).config(&config, roots(&[&first])).start().unwrap();
    let d = Daemon { process, socket, dir, root: first.clone() };
    let mut rpc = Rpc::connect(&d);
    // Served once: the workers are up.
    rpc.write_text(&first.join("a.txt"), "alpha\n", None).expect("a write into the root");
    std::fs::write(&config, roots(&[&first, &second])).unwrap();
    let killed = d.process.kill_workers(&["workspace-write"]);
    assert!(!killed.is_empty(), "no workspace-write worker to kill");
    // Gone, their sockets are closed: the next call goes to a replacement, never into a socket
    // a dying worker still holds (that call's outcome would be unknown).
    fsd_testkit::procs::wait_gone(&killed, Duration::from_secs(10), "killed workers").unwrap();
    // The replacements serve the root the daemon started with...
    rpc.write_text(&first.join("b.txt"), "beta\n", None).expect("a write into the started root");
    assert_eq!(d.read("b.txt"), b"beta\n");
    // ...and neither read nor write the one the file names since.
    let read = rpc.read_text(&second.join("secret.txt"), 1 << 20).expect_err("a read outside the roots");
    let write =
        rpc.write_text(&second.join("new.txt"), "new\n", None).expect_err("a write outside the roots");
    for status in [read, write] {
        assert_eq!(wire(&status).code, fsd_proto::ErrorCode::SandboxDenied, "{status:?}");
    }
    assert!(!second.join("new.txt").exists());
}

#[test]
fn kills_at_random_points_lose_no_acknowledged_write_and_leave_no_temporary_file() {
    let bins = Bins::locate().expect("fsd and fsd-tools are built");
    let options = CrashOptions { duration: Duration::from_secs(45), ..CrashOptions::default() };
    let report = crash::run(&bins, &options).expect("the crash run ran");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}\n{}", report.violations.join("\n"));
    // The run must have exercised what it claims to: both kinds of kill, both sizes, and calls
    // cut in flight.
    assert!(report.tree_kills >= 5 && report.worker_kills >= 2, "{report}");
    assert!(report.acked_large > 0 && report.acked_edits > 0, "{report}");
    assert!(report.unacked_landed + report.unacked_absent > 0, "{report}");
}
