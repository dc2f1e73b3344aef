//! `fsd-crash`: the long form of the crash-safety run. SIGKILLs the daemon tree (or one worker)
//! at random moments during writes and edits of small and large files, restarts it on the same
//! root, and checks every file, every acknowledged write, and that no temporary file remains.

use std::process::ExitCode;

use clap::Parser;
use fsd_soak::crash::{self, CrashOptions};

#[derive(Debug, Parser)]
#[command(name = "fsd-crash")]
struct Args {
    /// How long to keep starting rounds (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "10m", value_parser = fsd_soak::util::parse_duration)]
    duration: std::time::Duration,
    /// Client threads, each with its own connection and files.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Small (4 KiB) and large files per client.
    #[arg(long, default_value_t = 4)]
    small_files: usize,
    #[arg(long, default_value_t = 1)]
    large_files: usize,
    /// Size of a large file in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    large_bytes: usize,
    /// Kill at a random moment up to this many milliseconds after the clients start.
    #[arg(long, default_value_t = 400)]
    max_kill_delay_ms: u64,
    /// Percent of rounds that kill one worker instead of the whole tree.
    #[arg(long, default_value_t = 30)]
    worker_kill_percent: u64,
    /// Seed of the run (default: from the clock); printed so a run can be repeated.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    common: fsd_soak::cli::Common,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = CrashOptions {
        duration: args.duration,
        clients: args.clients,
        small_files: args.small_files,
        large_files: args.large_files,
        large_bytes: args.large_bytes,
        max_kill_delay: std::time::Duration::from_millis(args.max_kill_delay_ms),
        worker_kill_percent: args.worker_kill_percent,
        seed: args.seed.unwrap_or_else(fsd_soak::util::clock_seed),
        verbose: args.common.verbose,
        ..CrashOptions::default()
    };
    fsd_soak::cli::run("fsd-crash", &args.common, |bins| crash::run(bins, &options))
}
