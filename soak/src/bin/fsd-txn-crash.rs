//! `fsd-txn-crash`: the long form of the transactions' crash run. Commits random transactions
//! while the worker, the network process or the whole daemon is SIGKILLed mid-commit (at a
//! fault-injection point between two renames, or at a random moment), restarts it, and counts
//! transactions, kills, torn states and lost outside saves (both must be 0). Needs binaries built
//! with `--features fsd/fault-injection`.

use std::process::ExitCode;

use clap::Parser;
use fsd_soak::txn_crash::{self, TxnCrashOptions};

#[derive(Debug, Parser)]
#[command(name = "fsd-txn-crash")]
struct Args {
    /// How long to keep starting transactions (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "10m", value_parser = fsd_soak::util::parse_duration)]
    duration: std::time::Duration,
    /// Target files (half of them in a subdirectory).
    #[arg(long, default_value_t = 12)]
    files: usize,
    /// Seed of the run (default: from the clock); printed so a run can be repeated.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    common: fsd_soak::cli::Common,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = TxnCrashOptions {
        duration: args.duration,
        files: args.files,
        seed: args.seed.unwrap_or_else(fsd_soak::util::clock_seed),
        verbose: args.common.verbose,
        ..TxnCrashOptions::default()
    };
    fsd_soak::cli::run("fsd-txn-crash", &args.common, |bins| txn_crash::run(bins, &options))
}
