//! What the long-run binaries share: finding fsd and fsd-tools, running one workload, printing
//! its report and violations, and the exit code (0 clean, 1 violations, 2 could not run).

use std::path::Path;
use std::process::ExitCode;

use crate::Result;
use crate::daemon::Bins;

/// A workload's report: printable, with the violations it found.
pub trait Verdict: std::fmt::Display {
    fn violations(&self) -> &[String];
}

impl Verdict for crate::crash::CrashReport {
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl Verdict for crate::txn_crash::TxnCrashReport {
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl Verdict for crate::races::RaceReport {
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl Verdict for crate::soak::SoakReport {
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

/// Runs `workload` against the binaries in `bin_dir` (default: beside this binary).
pub fn run<R: Verdict>(
    name: &str,
    bin_dir: Option<&Path>,
    workload: impl FnOnce(&Bins) -> Result<R>,
) -> ExitCode {
    let bins = match bin_dir.map_or_else(Bins::locate, Bins::in_dir) {
        Ok(bins) => bins,
        Err(e) => {
            note!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    match workload(&bins) {
        Ok(report) => {
            say!("{report}");
            for v in report.violations() {
                say!("VIOLATION: {v}");
            }
            if report.violations().is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            note!("{name}: {e}");
            ExitCode::from(2)
        }
    }
}
