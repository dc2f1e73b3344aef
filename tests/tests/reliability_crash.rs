//! Crash safety (short form of `fsd-crash`): the daemon's whole process tree, or one worker, is
//! SIGKILLed at random moments while four clients write and edit 4 KiB and 8 MiB files; the
//! daemon restarts on the same root. Every file must hold its last acknowledged content or the
//! content of the call the kill cut, and no `.fsd-tmp-*` file or journal entry may remain (the
//! supervisor's start-up and dead-worker sweeps remove them; see docs/reliability.md).

use std::time::Duration;

use fsd_soak::crash::{self, CrashOptions};
use fsd_soak::daemon::Bins;

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
