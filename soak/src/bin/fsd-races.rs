//! `fsd-races`: the long form of the lost-updates run. Rounds of many `fsd-tools session`
//! processes racing guarded edits and writes on shared files, until `--duration` has passed.

use std::process::ExitCode;

use clap::Parser;
use fsd_soak::races::{self, RaceOptions};

#[derive(Debug, Parser)]
#[command(name = "fsd-races")]
struct Args {
    /// Keep starting rounds until this long has passed (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "10m", value_parser = fsd_soak::util::parse_duration)]
    duration: std::time::Duration,
    /// Concurrent sessions (each an fsd-tools session process).
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Attempts of each session on each shared file per round.
    #[arg(long, default_value_t = 6)]
    attempts: usize,
    #[command(flatten)]
    common: fsd_soak::cli::Common,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = RaceOptions {
        sessions: args.sessions,
        attempts: args.attempts,
        duration: args.duration,
        verbose: args.common.verbose,
    };
    fsd_soak::cli::run("fsd-races", &args.common, |bins| races::run(bins, &options))
}
