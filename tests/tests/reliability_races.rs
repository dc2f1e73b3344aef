//! No lost updates (short form of `fsd-races`): 64 `fsd-tools session` processes race
//! read-then-edit on a shared counter and read-then-write on a shared list. The counter must
//! equal the number of edits that reported success, the list must hold exactly the items whose
//! writes reported success, and every losing call must have failed with FS_STALE_VERSION.

use fsd_soak::daemon::Bins;
use fsd_soak::races::{self, RaceOptions};

#[test]
fn sixty_four_sessions_racing_guarded_edits_lose_no_update() {
    let bins = Bins::locate().expect("fsd and fsd-tools are built");
    let options = RaceOptions { sessions: 64, attempts: 8, ..RaceOptions::default() };
    let report = races::run(&bins, &options).expect("the race ran");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}\n{}", report.violations.join("\n"));
    // There was contention: some calls lost, and some won.
    assert!(report.losers.get("FS_STALE_VERSION").copied().unwrap_or(0) > 0, "{report}");
    assert!(report.counter_successes > 0 && report.list_successes > 0, "{report}");
}
