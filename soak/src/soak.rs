//! Soak: mixed load from many sessions (the library `Session`, each with its own connection)
//! for a set duration, while the daemon's whole process tree is sampled: resident memory (VmRSS)
//! and open descriptors must stay flat, the first quarter of the samples against the last.
//!
//! Each session cycles through read, edit, write and apply_patch (add, update, delete) on its
//! own files, guarded edits on a shared file (losers must get `FS_STALE_VERSION`), stat and
//! listDir over gRPC, and a streamed read of a file above the streaming threshold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fsd_proto::v1;
use fsd_tool_client::connect;
use fsd_tool_client::{ClientConfig, Session, Tools};
use serde_json::json;

use crate::daemon::{self, Bins, Daemon, Sample};
use crate::tree;
use crate::util::{Error, Result};

#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub duration: Duration,
    pub sessions: usize,
    /// Time between samples of the daemon tree.
    pub interval: Duration,
    /// Bounds on the last quarter against the first: memory may grow by this factor plus
    /// `rss_slack_kib`, descriptors by `fd_slack`.
    pub rss_factor: f64,
    pub rss_slack_kib: u64,
    pub fd_slack: u64,
    pub verbose: bool,
}

impl Default for SoakOptions {
    fn default() -> SoakOptions {
        SoakOptions {
            duration: Duration::from_secs(20),
            sessions: 16,
            interval: Duration::from_millis(250),
            rss_factor: 1.5,
            rss_slack_kib: 32 << 10,
            fd_slack: 16,
            verbose: false,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct SoakReport {
    pub samples: Vec<Sample>,
    pub calls: BTreeMap<String, u64>,
    /// Failures by code (shared-file losers get FS_STALE_VERSION).
    pub failures: BTreeMap<String, u64>,
    pub first_quarter: Sample,
    pub last_quarter: Sample,
    pub peak: Sample,
    pub violations: Vec<String>,
}

impl std::fmt::Display for SoakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: u64 = self.calls.values().sum();
        write!(
            f,
            "soak: {} calls {:?}; failures {:?}; {} samples; RSS first quarter {} KiB, last quarter {} KiB, peak {} KiB; \
             fds first quarter {}, last quarter {}, peak {}; processes {}; violations {}",
            total,
            self.calls,
            self.failures,
            self.samples.len(),
            self.first_quarter.rss_kib,
            self.last_quarter.rss_kib,
            self.peak.rss_kib,
            self.first_quarter.fds,
            self.last_quarter.fds,
            self.peak.fds,
            self.last_quarter.processes,
            self.violations.len()
        )
    }
}

/// The mean of some samples.
fn mean(samples: &[Sample]) -> Sample {
    let n = samples.len().max(1) as u64;
    Sample {
        rss_kib: samples.iter().map(|s| s.rss_kib).sum::<u64>() / n,
        fds: samples.iter().map(|s| s.fds).sum::<u64>() / n,
        processes: samples.iter().map(|s| s.processes).sum::<u64>() / n,
    }
}

/// What one session did.
#[derive(Debug, Default)]
struct Tally {
    calls: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl Tally {
    /// Counts a call; a failure is a violation unless `allowed` lists its code.
    fn note(&mut self, tool: &str, result: &fsd_tool_client::ToolResult, allowed: &[&str]) {
        *self.calls.entry(tool.to_owned()).or_default() += 1;
        if result.is_error {
            let code = result.code.clone().unwrap_or_default();
            if !allowed.contains(&code.as_str()) && self.violations.len() < 20 {
                self.violations.push(format!("{tool} failed with {code}: {}", result.text()));
            }
            *self.failures.entry(code).or_default() += 1;
        }
    }
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// One session's loop until `stop`.
async fn session_loop(
    endpoint: connect::Endpoint,
    root: PathBuf,
    id: usize,
    stop: Arc<AtomicBool>,
) -> Result<Tally> {
    let (client, hello) = connect::connect(&endpoint).await.map_err(|e| Error(e.to_string()))?;
    let mut raw = client.clone();
    let config = ClientConfig { apply_patch: true, ..ClientConfig::default() };
    let mut session = Session::new(Tools::new(config), client, hello, root.clone());
    let mut tally = Tally::default();
    let dir = root.join(format!("s{id:02}"));
    let note = dir.join("note.txt");
    let shared = root.join("shared.txt");
    let big = root.join("big.txt");
    let patched = dir.join("patched.txt");
    let mut n: u64 = 0;
    let r = session.call("write", json!({"file_path": p(&note), "content": "value 0\n"})).await;
    tally.note("write", &r, &[]);
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        // Own file: read, edit, rewrite.
        let r = session.call("read", json!({"file_path": p(&note)})).await;
        tally.note("read", &r, &[]);
        let r = session
            .call("edit", json!({"file_path": p(&note), "old_string": format!("value {}", n - 1), "new_string": format!("value {n}")}))
            .await;
        tally.note("edit", &r, &[]);
        let body: String = (0..(n % 64)).map(|i| format!("line {i} of round {n}\n")).collect();
        let r = session.call("write", json!({"file_path": p(&dir.join("body.txt")), "content": body})).await;
        tally.note("write", &r, &[]);

        // apply_patch: add, update, delete (inodes and names churn).
        let add =
            format!("*** Begin Patch\n*** Add File: {}\n+first {n}\n+second\n*** End Patch\n", p(&patched));
        let r = session.call("apply_patch", json!({"input": add})).await;
        tally.note("apply_patch", &r, &[]);
        let update = format!(
            "*** Begin Patch\n*** Update File: {}\n@@\n-second\n+second {n}\n*** End Patch\n",
            p(&patched)
        );
        let r = session.call("apply_patch", json!({"input": update})).await;
        tally.note("apply_patch", &r, &[]);
        let delete = format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch\n", p(&patched));
        let r = session.call("apply_patch", json!({"input": delete})).await;
        tally.note("apply_patch", &r, &[]);

        // Shared file: a guarded edit races the other sessions.
        let r = session.call("read", json!({"file_path": p(&shared)})).await;
        tally.note("read", &r, &[]);
        let current =
            r.text().lines().find_map(|l| l.split_once(": tick ").and_then(|(_, t)| t.parse::<u64>().ok()));
        if let Some(tick) = current {
            let r = session
                .call("edit", json!({"file_path": p(&shared), "old_string": format!("tick {tick}"), "new_string": format!("tick {}", tick + 1)}))
                .await;
            // A loser's read is older than another session's edit.
            tally.note("edit", &r, &["FS_STALE_VERSION"]);
        } else {
            tally.violations.push(format!("unexpected shared file: {}", r.text()));
        }

        // Metadata over gRPC, and every fourth round a streamed read of a large file.
        let stat = raw.stat(v1::StatRequest { path: p(&note), ..Default::default() }).await;
        *tally.calls.entry("stat".into()).or_default() += 1;
        if let Err(status) = stat {
            tally.violations.push(format!("stat failed: {status}"));
        }
        let list = raw.list_dir(v1::ListDirRequest { path: p(&dir), ..Default::default() }).await;
        *tally.calls.entry("listDir".into()).or_default() += 1;
        if let Err(status) = list {
            tally.violations.push(format!("listDir failed: {status}"));
        }
        if n.is_multiple_of(4) {
            let r = session
                .call("read", json!({"file_path": p(&big), "offset": 1 + (n * 97) % 100_000, "limit": 50}))
                .await;
            tally.note("read (streamed)", &r, &[]);
        }
    }
    Ok(tally)
}

/// Runs the soak against a fresh daemon in a temporary directory.
pub fn run(bins: &Bins, options: &SoakOptions) -> Result<SoakReport> {
    let dir = tempfile::Builder::new().prefix("fsd-soak-").tempdir()?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    // Above the read tool's streaming threshold (readStreamMinSize, 10 MiB).
    let line = "soak streaming line with some padding to make it longer 0123456789\n";
    std::fs::write(root.join("big.txt"), line.repeat((12 << 20) / line.len()))?;
    std::fs::write(root.join("shared.txt"), "shared: tick 0\n")?;
    let daemon = Daemon::start(
        bins,
        &daemon::Options {
            root: root.clone(),
            socket: dir.path().join("fsd.sock"),
            config: String::new(),
            log: None,
        },
    )?;

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..options.sessions)
        .map(|id| rt.spawn(session_loop(daemon.endpoint(), root.clone(), id, stop.clone())))
        .collect();

    let mut report = SoakReport::default();
    let started = Instant::now();
    while started.elapsed() < options.duration {
        std::thread::sleep(options.interval);
        let sample = daemon.sample();
        if options.verbose {
            note!(
                "{:>6.1} s: RSS {} KiB, fds {}, processes {}",
                started.elapsed().as_secs_f64(),
                sample.rss_kib,
                sample.fds,
                sample.processes
            );
        }
        report.samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let tally = rt.block_on(task).map_err(|e| Error(format!("a session task failed: {e}")))??;
        for (tool, count) in tally.calls {
            *report.calls.entry(tool).or_default() += count;
        }
        for (code, count) in tally.failures {
            *report.failures.entry(code).or_default() += count;
        }
        report.violations.extend(tally.violations);
    }

    let quarter = (report.samples.len() / 4).max(1);
    report.first_quarter = mean(&report.samples[..quarter.min(report.samples.len())]);
    report.last_quarter = mean(&report.samples[report.samples.len().saturating_sub(quarter)..]);
    report.peak = Sample {
        rss_kib: report.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        fds: report.samples.iter().map(|s| s.fds).max().unwrap_or(0),
        processes: report.samples.iter().map(|s| s.processes).max().unwrap_or(0),
    };
    if report.samples.len() < 8 {
        report
            .violations
            .push(format!("only {} samples: run longer or sample more often", report.samples.len()));
    }
    let rss_bound = (report.first_quarter.rss_kib as f64 * options.rss_factor) as u64 + options.rss_slack_kib;
    if report.last_quarter.rss_kib > rss_bound {
        report.violations.push(format!(
            "memory grew: last quarter {} KiB over the bound {} KiB (first quarter {} KiB)",
            report.last_quarter.rss_kib, rss_bound, report.first_quarter.rss_kib
        ));
    }
    if report.last_quarter.fds > report.first_quarter.fds + options.fd_slack {
        report.violations.push(format!(
            "descriptors grew: last quarter {} against first quarter {} (slack {})",
            report.last_quarter.fds, report.first_quarter.fds, options.fd_slack
        ));
    }
    if report.last_quarter.processes != report.first_quarter.processes {
        report.violations.push(format!(
            "the daemon's process count changed: {} then {} (a worker died?)",
            report.first_quarter.processes, report.last_quarter.processes
        ));
    }
    let temps = tree::temp_files(&root);
    if !temps.is_empty() {
        report.violations.push(format!("temporary files left after the soak: {temps:?}"));
    }
    drop(rt);
    let mut daemon = daemon;
    daemon.terminate()?;
    Ok(report)
}
