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

/// The flags every long-run binary takes besides its workload's own.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// Directory holding fsd and fsd-tools (default: beside this binary).
    #[arg(long)]
    pub bin_dir: Option<std::path::PathBuf>,
    /// A line per round, transaction or sample as it happens.
    #[arg(long)]
    pub verbose: bool,
}

/// Runs `workload` against the binaries in `common.bin_dir` (default: beside this binary).
pub fn run<R: Verdict>(name: &str, common: &Common, workload: impl FnOnce(&Bins) -> Result<R>) -> ExitCode {
    let bin_dir: Option<&Path> = common.bin_dir.as_deref();
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
