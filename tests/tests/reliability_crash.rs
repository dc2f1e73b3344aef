//! Crash safety (short form of `fsd-crash`): the daemon's whole process tree, or one worker, is
//! SIGKILLed at random moments while four clients write and edit 4 KiB and 8 MiB files; the
//! daemon restarts on the same root. Every file must hold its last acknowledged content or the
//! content of the call the kill cut, and no `.fsd-tmp-*` file or journal entry may remain (the
//! supervisor's start-up and dead-worker sweeps remove them; see docs/reliability.md). And a
//! worker killed while idle costs no call: the next one goes to another worker.

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
