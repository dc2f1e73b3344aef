//! `fsd-bench`: measures the release `fsd` and its tools against floors measured in the same run
//! (a bare tonic echo with fsd's transport settings, the same file operation done locally) and
//! against the MCP reference filesystem server. Every figure is a median of runs with its spread;
//! nothing here asserts a time. `scripts/bench.sh` builds and runs it all and writes BENCHMARKS.md.

// `say!` and `note!` (output that never panics) come from the kit, shared with the soak.
#[macro_use]
extern crate fsd_testkit;

mod concurrent;
mod echo;
mod fixtures;
mod local;
mod mcp;
mod neighbour;
mod patchscale;
mod percall;
mod procs;
mod record;
mod report;
mod rest;
mod stats;
mod stream;
mod telemetry;
mod txn;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Every failure of a benchmark: it stops the run with a message, never with a panic.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, Error>;

#[derive(Debug, Parser)]
#[command(name = "fsd-bench", about = "Benchmarks of fsd against its floors and the MCP reference server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Runs per figure; each figure is the median of the per-run values.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Where `fsd` and `fsd-tools` are (default: beside this binary, i.e. target/release).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Fewer samples per run: for checking the harness, not for figures.
    #[arg(long)]
    pub quick: bool,
}

impl Common {
    pub fn bin_dir(&self) -> Res<PathBuf> {
        match &self.bin_dir {
            Some(dir) => Ok(dir.clone()),
            None => {
                let exe = std::env::current_exe()?;
                Ok(exe.parent().ok_or("the bench binary has no directory")?.to_path_buf())
            }
        }
    }

    /// A build of the daemon the benchmarks compare the real one with, built with the cargo feature
    /// `feature` into `<bin-dir>/<dir>/` (`scripts/bench.sh` builds every one). Its `--version`
    /// must name the feature: a daemon built without it would make the comparison one of the
    /// same build with itself, and say nothing.
    pub fn comparison_build(&self, dir: &str, feature: &str) -> Res<PathBuf> {
        let dir = self.bin_dir()?.join(dir);
        let missing = || {
            format!(
                "{}/fsd is missing: `bash scripts/bench.sh` builds it (cargo build --release -p fsd \
                 --features fsd/{feature}, copied there)",
                dir.display()
            )
        };
        let bins = fsd_testkit::Bins::fsd_in(&dir).map_err(|_| missing())?;
        let out = bins.fsd_command().arg("--version").output()?;
        let version = String::from_utf8_lossy(&out.stdout);
        if !version.contains(&format!("({feature}")) {
            return Err(format!(
                "{}/fsd is not built with {feature}: its version is {version:?}",
                dir.display()
            )
            .into());
        }
        Ok(dir)
    }

    /// A sample count, cut down in quick mode.
    pub fn n(&self, full: usize) -> usize {
        if self.quick { (full / 10).max(5) } else { full }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every benchmark, in order; optionally writes the tables into a Markdown file.
    All {
        #[command(flatten)]
        common: Common,
        /// The MCP reference server's entry point (`…/server-filesystem/dist/index.js`).
        #[arg(long)]
        mcp_peer: PathBuf,
        /// Size of the streamed file, in MiB.
        #[arg(long, default_value_t = 1024)]
        stream_mib: u64,
        /// Replace the generated block of this Markdown file with the results.
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// The command line to record beside the results.
        #[arg(long, default_value = "")]
        command_line: String,
        /// The date to record beside the results.
        #[arg(long, default_value = "")]
        date: String,
    },
    /// Per-call latency of stat, read, write, edit and apply_patch, Unix socket and TCP.
    Percall {
        #[command(flatten)]
        common: Common,
    },
    /// Throughput with 64 calls in flight on one connection.
    Concurrent {
        #[command(flatten)]
        common: Common,
    },
    /// streamText of a large file: MB/s and the daemon's peak RSS.
    Stream {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 1024)]
        stream_mib: u64,
    },
    /// apply_patch with 1, 10, 100 and 1000 files.
    Patch {
        #[command(flatten)]
        common: Common,
    },
    /// One transaction of 1, 10 and 100 files against the same writes as separate calls.
    Txn {
        #[command(flatten)]
        common: Common,
    },
    /// `fsd-tools mcp` against the MCP reference filesystem server, one raw JSON-RPC client.
    Mcp {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        mcp_peer: PathBuf,
    },
    /// The REST face against gRPC: 4 KiB GET/PUT p50, large GET/PUT MB/s and peak RSS.
    Rest {
        #[command(flatten)]
        common: Common,
        /// Size of the large file, in MiB.
        #[arg(long, default_value_t = 1024)]
        rest_mib: u64,
    },
    /// One identity's stalled streams, idle connections and stat flood beside another's reads.
    Neighbour {
        #[command(flatten)]
        common: Common,
    },
    /// The write tool with the change record on against off, and the record's bytes per change.
    Record {
        #[command(flatten)]
        common: Common,
        /// Keeps the disk in steady writeback while measuring: a thread writes 1 GiB buffered
        /// (never synced) over and over into a file beside the root.
        #[arg(long)]
        writeback: bool,
    },
    /// The read tool with metrics and traces off, metrics on, and metrics plus traces on; off
    /// against the daemon built without them.
    Telemetry {
        #[command(flatten)]
        common: Common,
    },
    /// One load for a while, for profiling under `perf record -a`.
    #[command(hide = true)]
    Probe {
        #[command(flatten)]
        common: Common,
        /// readText instead of stat.
        #[arg(long)]
        read: bool,
        /// Against the bare echo server instead of fsd.
        #[arg(long)]
        echo: bool,
        #[arg(long, default_value_t = 1)]
        in_flight: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long)]
        tcp: bool,
    },
    /// The bare tonic echo server (started by the benchmarks themselves).
    #[command(hide = true)]
    EchoServer {
        #[arg(long, required = true)]
        listen: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            note!("fsd-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The client side runs on a current-thread runtime, as `fsd-tools` does. Each benchmark makes
/// its own after starting its servers, so the runtime (and every connection it drives) is gone
/// before the servers are told to stop: a daemon would otherwise wait out its shutdown grace.
pub fn client_runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn run(command: Command) -> Res<()> {
    match command {
        Command::EchoServer { listen } => echo::serve(&listen),
        Command::Probe { common, read, echo, in_flight, seconds, tcp } => {
            say!("{}", concurrent::probe(&common, !read, echo, in_flight, seconds, tcp)?);
            Ok(())
        }
        Command::Percall { common } => {
            say!("{}", percall::run(&common)?);
            Ok(())
        }
        Command::Concurrent { common } => {
            say!("{}", concurrent::run(&common)?);
            Ok(())
        }
        Command::Stream { common, stream_mib } => {
            say!("{}", stream::run(&common, stream_mib)?);
            Ok(())
        }
        Command::Patch { common } => {
            say!("{}", patchscale::run(&common)?);
            Ok(())
        }
        Command::Txn { common } => {
            say!("{}", txn::run(&common)?);
            Ok(())
        }
        Command::Rest { common, rest_mib } => {
            say!("{}", rest::run(&common, rest_mib)?);
            Ok(())
        }
        Command::Telemetry { common } => {
            say!("{}", telemetry::run(&common)?);
            Ok(())
        }
        Command::Record { common, writeback } => {
            say!("{}", record::run(&common, writeback)?);
            Ok(())
        }
        Command::Neighbour { common } => {
            println!("{}", neighbour::run(&common)?);
            Ok(())
        }
        Command::Mcp { common, mcp_peer } => {
            say!("{}", mcp::run(&common, &mcp_peer)?);
            Ok(())
        }
        Command::All { common, mcp_peer, stream_mib, markdown, command_line, date } => {
            let mut doc = report::Document::new(&command_line, &date, &common);
            let step = |name: &str| note!("fsd-bench: {name} ({})", report::loadavg());
            step("per call");
            doc.push(percall::run(&common)?);
            step("64 in flight");
            doc.push(concurrent::run(&common)?);
            step("streaming");
            doc.push(stream::run(&common, stream_mib)?);
            step("apply_patch scaling");
            doc.push(patchscale::run(&common)?);
            step("transactions");
            doc.push(txn::run(&common)?);
            step("MCP side by side");
            doc.push(mcp::run(&common, &mcp_peer)?);
            step("noisy neighbour");
            doc.push(neighbour::run(&common)?);
            step("metrics and traces");
            doc.push(telemetry::run(&common)?);
            step("REST face");
            // Recorded, not fatal: the other sections of a long run stay.
            match rest::run(&common, stream_mib) {
                Ok(section) => doc.push(section),
                Err(e) => doc.push(report::Section {
                    markdown: format!("### REST face\n\nThe REST benchmark failed in this run: {e}.\n"),
                    ..report::Section::default()
                }),
            }
            let text = doc.finish();
            say!("{text}");
            if let Some(path) = markdown {
                report::splice(&path, &text)?;
                note!("fsd-bench: wrote {}", path.display());
            }
            Ok(())
        }
    }
}
