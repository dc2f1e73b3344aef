//! `fsd-soak`: the long form of the soak. Mixed load from many sessions for `--duration`, while
//! the daemon tree's memory (VmRSS) and open descriptors are sampled; prints the samples'
//! first- and last-quarter means and fails if they grew beyond the bounds.

use std::process::ExitCode;

use clap::Parser;
use fsd_soak::soak::{self, SoakOptions};

#[derive(Debug, Parser)]
#[command(name = "fsd-soak")]
struct Args {
    /// How long to run (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "30m", value_parser = fsd_soak::util::parse_duration)]
    duration: std::time::Duration,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 16)]
    sessions: usize,
    /// Milliseconds between samples of the daemon tree.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// The last quarter's mean RSS may be at most this factor of the first's, plus the slack.
    #[arg(long, default_value_t = 1.5)]
    rss_factor: f64,
    #[arg(long, default_value_t = 32 << 10)]
    rss_slack_kib: u64,
    /// The last quarter's mean descriptor count may exceed the first's by this much.
    #[arg(long, default_value_t = 16)]
    fd_slack: u64,
    #[command(flatten)]
    common: fsd_soak::cli::Common,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = SoakOptions {
        duration: args.duration,
        sessions: args.sessions,
        interval: std::time::Duration::from_millis(args.interval_ms),
        rss_factor: args.rss_factor,
        rss_slack_kib: args.rss_slack_kib,
        fd_slack: args.fd_slack,
        verbose: args.common.verbose,
    };
    fsd_soak::cli::run("fsd-soak", &args.common, |bins| soak::run(bins, &options))
}
