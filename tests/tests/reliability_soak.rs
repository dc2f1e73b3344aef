//! Soak (short form of `fsd-soak`): 16 sessions run mixed load (read, edit, write, apply_patch,
//! guarded edits of a shared file, stat, listDir, streamed reads) for 20 s while the daemon's
//! process tree is sampled. Memory (summed VmRSS) and open descriptors of the last quarter of the
//! samples must stay within generous bounds of the first quarter's; the numbers are printed.

use std::time::Duration;

use fsd_soak::daemon::Bins;
use fsd_soak::soak::{self, SoakOptions};

#[test]
fn mixed_load_keeps_memory_and_descriptors_flat() {
    let bins = Bins::locate().expect("fsd and fsd-tools are built");
    let options = SoakOptions { duration: Duration::from_secs(20), ..SoakOptions::default() };
    let report = soak::run(&bins, &options).expect("the soak ran");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}\n{}", report.violations.join("\n"));
    assert!(report.calls.values().sum::<u64>() > 100, "{report}");
}
