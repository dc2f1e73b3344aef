//! No lost updates: many sessions (each a real `fsd-tools session` process with its own
//! observations and connection) race read-then-modify cycles on shared files: an `edit` that
//! increments a counter and a `write` that appends an item to a list. The final files must
//! reflect exactly the calls that reported success, and every other call must have lost with
//! `FS_STALE_VERSION` (anything else is counted by code and reported as a violation).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::daemon::{self, Bins, Daemon};
use crate::session::{ToolSession, read_lines};
use crate::util::{Error, Result};

#[derive(Debug, Clone)]
pub struct RaceOptions {
    pub sessions: usize,
    /// Read-modify-write attempts of each session on each file, per round.
    pub attempts: usize,
    /// Keep starting rounds (fresh files each) until this long has passed; at least one round.
    pub duration: Duration,
    pub verbose: bool,
}

impl Default for RaceOptions {
    fn default() -> RaceOptions {
        RaceOptions { sessions: 64, attempts: 6, duration: Duration::ZERO, verbose: false }
    }
}

#[derive(Debug, Default, Clone)]
pub struct RaceReport {
    pub rounds: u64,
    pub sessions: usize,
    pub counter_successes: u64,
    pub list_successes: u64,
    /// Losers by code (`FS_STALE_VERSION` expected).
    pub losers: BTreeMap<String, u64>,
    pub violations: Vec<String>,
}

impl std::fmt::Display for RaceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "races: rounds {} sessions {}; counter edits won {}; list writes won {}; losers {:?}; violations {}",
            self.rounds,
            self.sessions,
            self.counter_successes,
            self.list_successes,
            self.losers,
            self.violations.len()
        )
    }
}

/// What one session saw in one round.
#[derive(Debug, Default)]
struct Tally {
    counter_successes: u64,
    items: Vec<String>,
    losers: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl Tally {
    fn lost(&mut self, code: Option<&str>, text: &str) {
        let code = code.unwrap_or("(none)").to_owned();
        if code != "FS_STALE_VERSION" {
            self.violations.push(format!("a losing call failed with {code}, not FS_STALE_VERSION: {text}"));
        }
        *self.losers.entry(code).or_default() += 1;
    }
}

fn race(session: &mut ToolSession, id: usize, counter: &Path, list: &Path, attempts: usize) -> Result<Tally> {
    let mut tally = Tally::default();
    let (counter, list) = (counter.to_string_lossy(), list.to_string_lossy());
    for attempt in 0..attempts {
        // The counter: read, then edit "count: N" into "count: N+1".
        let read = session.call("read", json!({"file_path": counter}))?;
        if read.is_error() {
            return Err(Error(format!("read failed: {}", read.text())));
        }
        let lines = read_lines(read.text());
        let value: u64 = lines
            .first()
            .and_then(|l| l.strip_prefix("count: "))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error(format!("unexpected counter file: {}", read.text())))?;
        let old = format!("count: {value}");
        let new = format!("count: {}", value + 1);
        let edit =
            session.call("edit", json!({"file_path": counter, "old_string": old, "new_string": new}))?;
        if edit.is_error() {
            tally.lost(edit.code(), edit.text());
        } else {
            tally.counter_successes += 1;
        }

        // The list: read, then write the whole file with one more item.
        let read = session.call("read", json!({"file_path": list}))?;
        if read.is_error() {
            return Err(Error(format!("read failed: {}", read.text())));
        }
        let item = format!("item s{id:03}-a{attempt:03}");
        let mut content: String = read_lines(read.text()).iter().map(|l| format!("{l}\n")).collect();
        content.push_str(&item);
        content.push('\n');
        let write = session.call("write", json!({"file_path": list, "content": content}))?;
        if write.is_error() {
            tally.lost(write.code(), write.text());
        } else {
            tally.items.push(item);
        }
    }
    Ok(tally)
}

/// One round on fresh files with `sessions` sessions started at once.
fn round(bins: &Bins, daemon: &Daemon, options: &RaceOptions, n: u64, report: &mut RaceReport) -> Result<()> {
    let counter = daemon.root.join(format!("counter-{n}.txt"));
    let list = daemon.root.join(format!("list-{n}.txt"));
    std::fs::write(&counter, "count: 0\n")?;
    std::fs::write(&list, "items:\n")?;
    let barrier = Arc::new(Barrier::new(options.sessions));
    let handles: Vec<_> = (0..options.sessions)
        .map(|id| {
            let (bins, socket, root, barrier) =
                (bins.clone(), daemon.socket.clone(), daemon.root.clone(), barrier.clone());
            let (counter, list, attempts) = (counter.clone(), list.clone(), options.attempts);
            std::thread::spawn(move || -> Result<Tally> {
                let session = ToolSession::start(&bins, &socket, &root, None);
                // Everyone waits at the barrier, also a session that failed to start.
                barrier.wait();
                race(&mut session?, id, &counter, &list, attempts)
            })
        })
        .collect();
    let mut won_items = Vec::new();
    let mut counter_wins = 0;
    for handle in handles {
        let tally = handle.join().map_err(|_| Error("a session thread panicked".into()))??;
        counter_wins += tally.counter_successes;
        won_items.extend(tally.items);
        for (code, count) in tally.losers {
            *report.losers.entry(code).or_default() += count;
        }
        report.violations.extend(tally.violations);
    }
    report.counter_successes += counter_wins;
    report.list_successes += won_items.len() as u64;

    let got = std::fs::read_to_string(&counter)?;
    if got != format!("count: {counter_wins}\n") {
        report
            .violations
            .push(format!("round {n}: counter file holds {got:?} after {counter_wins} successful edits"));
    }
    let got = std::fs::read_to_string(&list)?;
    let mut lines: Vec<&str> = got.lines().collect();
    if lines.first() != Some(&"items:") {
        report.violations.push(format!("round {n}: list lost its header: {got:?}"));
    } else {
        lines.remove(0);
    }
    let mut on_disk: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    on_disk.sort();
    won_items.sort();
    if on_disk != won_items {
        let missing: Vec<_> = won_items.iter().filter(|i| !on_disk.contains(i)).collect();
        let extra: Vec<_> = on_disk.iter().filter(|i| !won_items.contains(i)).collect();
        report.violations.push(format!(
            "round {n}: list holds {} items for {} successful writes; missing {missing:?}, unexpected {extra:?}",
            on_disk.len(),
            won_items.len()
        ));
    }
    Ok(())
}

/// Runs the races against a fresh daemon in a temporary directory.
pub fn run(bins: &Bins, options: &RaceOptions) -> Result<RaceReport> {
    let dir = tempfile::Builder::new().prefix("fsd-races-").tempdir()?;
    let root: PathBuf = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let daemon = Daemon::start(
        bins,
        &daemon::Options { root, socket: dir.path().join("fsd.sock"), config: String::new(), log: None },
    )?;
    let mut report = RaceReport { sessions: options.sessions, ..Default::default() };
    let started = Instant::now();
    loop {
        report.rounds += 1;
        round(bins, &daemon, options, report.rounds, &mut report)?;
        if options.verbose {
            note!("{report}");
        }
        if started.elapsed() >= options.duration || !report.violations.is_empty() {
            return Ok(report);
        }
    }
}
