//! Transactions under SIGKILL: one client commits random transactions (writes that replace or
//! create, edits, deletes, moves, over a small set of overlapping files) while the worker, the
//! network process or the whole daemon tree is killed, at a fault-injection point between two
//! renames of a commit or at a random moment, and an outside writer saves its own files beside
//! the targets. After each kill (and a restart, when the daemon went) the targets must hold the
//! state before the transaction or after it, never a mix; no temporary file or intent record may
//! remain; and every outside save must still be there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_proto::{ErrorCode, WireError};
use fsd_tool_client::connect::{self, Endpoint};

use crate::daemon::{self, Bins, Daemon};
use crate::util::{Error, Result, Rng};

#[derive(Debug, Clone)]
pub struct TxnCrashOptions {
    /// Stop starting transactions after this long.
    pub duration: Duration,
    /// The target files (half of them in a subdirectory).
    pub files: usize,
    /// Bytes of each file's content.
    pub file_bytes: usize,
    pub seed: u64,
    pub verbose: bool,
}

impl Default for TxnCrashOptions {
    fn default() -> TxnCrashOptions {
        TxnCrashOptions {
            duration: Duration::from_secs(20),
            files: 12,
            file_bytes: 4 << 10,
            seed: crate::util::clock_seed(),
            verbose: false,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct TxnCrashReport {
    pub seed: u64,
    pub transactions: u64,
    /// Acknowledged commits.
    pub committed: u64,
    /// Kills: a worker's exit at a commit step (fault-injection), a worker, the network process
    /// or the whole tree killed in a pause between two renames or at a random moment.
    pub step_exits: u64,
    pub worker_kills: u64,
    pub network_kills: u64,
    pub tree_kills: u64,
    /// Cut transactions found rolled back, or whole.
    pub rolled_back: u64,
    pub whole: u64,
    /// Targets that held neither the state before nor the state after (must be 0).
    pub torn: u64,
    /// Outside saves missing or changed (must be 0).
    pub lost_outside_saves: u64,
    pub outside_saves: u64,
    pub violations: Vec<String>,
}

impl TxnCrashReport {
    pub fn kills(&self) -> u64 {
        self.step_exits + self.worker_kills + self.network_kills + self.tree_kills
    }
}

impl std::fmt::Display for TxnCrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "txn-crash: seed {} transactions {} (committed {}); kills {} (worker exits at a commit step {}, \
             worker {}, network process {}, whole daemon {}); cut transactions rolled back {} / whole {}; \
             torn states {}; outside saves {} lost {}; violations {}",
            self.seed,
            self.transactions,
            self.committed,
            self.kills(),
            self.step_exits,
            self.worker_kills,
            self.network_kills,
            self.tree_kills,
            self.rolled_back,
            self.whole,
            self.torn,
            self.outside_saves,
            self.lost_outside_saves,
            self.violations.len()
        )
    }
}

type Tree = BTreeMap<String, Vec<u8>>;

/// How a round's transaction is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    None,
    /// The worker exits right after commit step k (`fsd-fault-txn-die-k`).
    StepExit,
    /// Killed during a pause after commit step k (`fsd-fault-txn-pause-k`).
    Paused(Victim),
    /// Killed after a random delay.
    Random(Victim),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Worker,
    Network,
    Tree,
}

fn content(name: &str, seq: u64, size: usize) -> Vec<u8> {
    let mut out = format!("hdr {name} {seq:08}\n").into_bytes();
    let line = format!("{seq:08} all or nothing, across every file of the transaction\n");
    while out.len() + line.len() <= size {
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn header(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned()
}

/// A random transaction over `names` and what it makes of `before`.
fn transaction(
    rng: &mut Rng,
    root: &Path,
    names: &[String],
    before: &Tree,
    seq: &mut u64,
    size: usize,
) -> (Vec<v1::TransactOperation>, Tree, usize) {
    use v1::transact_operation::Kind;
    let path = |name: &str| root.join(name).to_string_lossy().into_owned();
    let mut order: Vec<usize> = (0..names.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let count = 1 + rng.below(8.min(names.len() as u64 / 2)) as usize;
    let mut used = std::collections::BTreeSet::new();
    let mut after = before.clone();
    let mut ops = Vec::new();
    let mut steps = 0;
    for &i in order.iter().take(count) {
        let name = &names[i];
        if !used.insert(name.clone()) {
            continue;
        }
        *seq += 1;
        let kind = match after.get(name).cloned() {
            None => {
                let bytes = content(name, *seq, size);
                after.insert(name.clone(), bytes.clone());
                Kind::Write(v1::WriteTextRequest {
                    path: path(name),
                    content: String::from_utf8_lossy(&bytes).into_owned(),
                    guard: Some(v1::WriteGuard {
                        kind: Some(v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {})),
                    }),
                    ..Default::default()
                })
            }
            Some(current) => match rng.below(4) {
                0 => {
                    let bytes = content(name, *seq, size);
                    after.insert(name.clone(), bytes.clone());
                    Kind::Write(v1::WriteTextRequest {
                        path: path(name),
                        content: String::from_utf8_lossy(&bytes).into_owned(),
                        ..Default::default()
                    })
                }
                1 => {
                    let old = header(&current);
                    let new = format!("hdr {name} {:08} edited", *seq);
                    let text = String::from_utf8_lossy(&current).replacen(&old, &new, 1);
                    after.insert(name.clone(), text.into_bytes());
                    Kind::Edit(v1::EditTextRequest {
                        path: path(name),
                        old_string: old,
                        new_string: new,
                        ..Default::default()
                    })
                }
                2 => {
                    after.remove(name);
                    Kind::Delete(v1::DeleteFileRequest { path: path(name), ..Default::default() })
                }
                _ => {
                    // A move to a name no other operation of this transaction names and that is
                    // absent; a delete when there is none.
                    let free = order
                        .iter()
                        .map(|&j| &names[j])
                        .find(|n| !used.contains(*n) && !after.contains_key(*n));
                    match free.cloned() {
                        Some(to) => {
                            used.insert(to.clone());
                            after.remove(name);
                            after.insert(to.clone(), current);
                            Kind::Move(v1::MoveFileRequest {
                                source: path(name),
                                destination: path(&to),
                                destination_guard: Some(v1::WriteGuard {
                                    kind: Some(v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {})),
                                }),
                                ..Default::default()
                            })
                        }
                        None => {
                            after.remove(name);
                            Kind::Delete(v1::DeleteFileRequest { path: path(name), ..Default::default() })
                        }
                    }
                }
            },
        };
        steps += 1;
        ops.push(v1::TransactOperation { kind: Some(kind) });
    }
    (ops, after, steps)
}

/// One outside file: its last finished save and the one being made.
type Saves = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The outside writer: saves its own files beside the targets (write, then rename over), and
/// records each save it finished. A save in progress when checked may be either.
struct Outside {
    saves: Mutex<Vec<Saves>>,
    count: std::sync::atomic::AtomicU64,
}

const OUTSIDE_FILES: [&str; 4] = ["outside-0.txt", "sub/outside-1.txt", "outside-2.txt", "sub/outside-3.txt"];

fn outside_writer(root: PathBuf, outside: Arc<Outside>, stop: Arc<AtomicBool>) {
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for (i, name) in OUTSIDE_FILES.iter().enumerate() {
            seq += 1;
            let bytes = format!("outside save {seq}\n").into_bytes();
            if let Ok(mut saves) = outside.saves.lock() {
                saves[i].1 = Some(bytes.clone());
            }
            let target = root.join(name);
            let staged = root.join(format!("{name}.saving"));
            if std::fs::write(&staged, &bytes).is_ok() && std::fs::rename(&staged, &target).is_ok() {
                if let Ok(mut saves) = outside.saves.lock() {
                    saves[i] = (Some(bytes), None);
                }
                outside.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn read_tree(root: &Path, names: &[String]) -> Tree {
    names.iter().filter_map(|n| std::fs::read(root.join(n)).ok().map(|b| (n.clone(), b))).collect()
}

/// Names fsd must not leave: temporary files below the root, records in the state directory.
fn leftovers(root: &Path, state: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if entry.file_name().to_string_lossy().starts_with(".fsd-tmp-") {
                out.push(path.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    if let Ok(entries) = std::fs::read_dir(state.join("txn")) {
        out.extend(entries.flatten().map(|e| e.path().display().to_string()));
    }
    out
}

fn start(bins: &Bins, dir: &Path, root: &Path, state: &Path) -> Result<Daemon> {
    let options = daemon::Options {
        root: root.to_owned(),
        socket: dir.join("fsd.sock"),
        config: format!("state_dir = \"{}\"\n", state.display()),
        log: Some(dir.join("fsd.log")),
    };
    Daemon::start(bins, &options)
}

/// How the round's call ended.
enum Ended {
    Committed,
    /// Refused or failed with nothing changed (the reply says which operation).
    Failed(ErrorCode),
    /// Its worker was lost (FS_ABORTED) or the daemon went (no status): outcome unknown.
    Cut,
}

fn call(endpoint: &Endpoint, ops: Vec<v1::TransactOperation>) -> Ended {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return Ended::Cut;
    };
    let Ok((mut fsd, _)) = rt.block_on(connect::connect(endpoint)) else { return Ended::Cut };
    let fsd: &mut FsdClient<_> = &mut fsd;
    match rt.block_on(fsd.transact(v1::TransactRequest { context: None, operations: ops })) {
        Ok(_) => Ended::Committed,
        Err(status) => match WireError::from_status(&status) {
            Some(wire) if wire.code == ErrorCode::Aborted => Ended::Cut,
            Some(wire) => Ended::Failed(wire.code),
            None => Ended::Cut,
        },
    }
}

/// Waits until a dead worker's transaction was recovered and swept (or `limit` passed).
fn settled(root: &Path, state: &Path, limit: Duration) -> Vec<String> {
    let until = Instant::now() + limit;
    loop {
        let left = leftovers(root, state);
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(bins: &Bins, options: &TxnCrashOptions) -> Result<TxnCrashReport> {
    let dir = tempfile::Builder::new().prefix("fsd-txn-crash-").tempdir()?;
    let root = dir.path().join("ws");
    std::fs::create_dir_all(root.join("sub"))?;
    let root = std::fs::canonicalize(&root)?;
    let state = dir.path().join("state");
    let mut rng = Rng::new(options.seed);
    let mut report = TxnCrashReport { seed: options.seed, ..Default::default() };
    let names: Vec<String> = (0..options.files)
        .map(|i| if i % 2 == 0 { format!("t{i}.txt") } else { format!("sub/t{i}.txt") })
        .collect();
    let mut seq = 0u64;
    let mut model = Tree::new();
    for name in names.iter().step_by(2) {
        seq += 1;
        let bytes = content(name, seq, options.file_bytes);
        std::fs::write(root.join(name), &bytes)?;
        model.insert(name.clone(), bytes);
    }
    let outside =
        Arc::new(Outside { saves: Mutex::new(vec![(None, None); OUTSIDE_FILES.len()]), count: 0.into() });
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (root, outside, stop) = (root.clone(), outside.clone(), stop.clone());
        std::thread::spawn(move || outside_writer(root, outside, stop))
    };

    let mut daemon = start(bins, dir.path(), &root, &state)?;
    let started = Instant::now();
    while started.elapsed() < options.duration {
        report.transactions += 1;
        let (mut ops, after, steps) =
            transaction(&mut rng, &root, &names, &model, &mut seq, options.file_bytes);
        let roll = rng.below(100);
        let cut = match roll {
            0..30 => Cut::None,
            30..50 => Cut::StepExit,
            50..62 => Cut::Paused(Victim::Worker),
            62..70 => Cut::Paused(Victim::Network),
            70..80 => Cut::Paused(Victim::Tree),
            80..90 => Cut::Random(Victim::Worker),
            _ => Cut::Random(Victim::Tree),
        };
        // A hook names a step before the last (its own write is the last): the commit is cut.
        let hook = match cut {
            Cut::StepExit => Some("die"),
            Cut::Paused(_) => Some("pause"),
            Cut::None | Cut::Random(_) => None,
        };
        if let Some(hook) = hook {
            let step = 1 + rng.below(steps as u64);
            let name = format!("fsd-fault-txn-{hook}-{step}");
            ops.push(v1::TransactOperation {
                kind: Some(v1::transact_operation::Kind::Write(v1::WriteTextRequest {
                    path: root.join(name).to_string_lossy().into_owned(),
                    ..Default::default()
                })),
            });
        }
        let before = model.clone();
        let endpoint = daemon.endpoint();
        let caller = std::thread::spawn(move || call(&endpoint, ops));
        let victim = match cut {
            Cut::Paused(victim) => {
                std::thread::sleep(Duration::from_millis(400));
                Some(victim)
            }
            Cut::Random(victim) => {
                std::thread::sleep(Duration::from_micros(rng.below(30_000)));
                Some(victim)
            }
            Cut::None | Cut::StepExit => None,
        };
        let mut restart = false;
        match victim {
            Some(Victim::Worker) => {
                for pid in daemon.worker_pids("workspace-write") {
                    daemon::kill(pid, rustix::process::Signal::KILL);
                }
                report.worker_kills += 1;
            }
            Some(Victim::Network) => {
                let network =
                    daemon.pids().into_iter().find(|&p| daemon::role(p).as_deref() == Some("network"));
                if let Some(pid) = network {
                    daemon::kill(pid, rustix::process::Signal::KILL);
                }
                report.network_kills += 1;
                restart = true;
            }
            Some(Victim::Tree) => {
                daemon.kill_tree()?;
                report.tree_kills += 1;
                restart = true;
            }
            None => {}
        }
        let ended = caller.join().map_err(|_| Error::from("the transaction's thread panicked"))?;
        if cut == Cut::StepExit {
            report.step_exits += 1;
        }
        if restart {
            // The network process's death stops the daemon; what is left is killed, then a new
            // daemon recovers at start.
            daemon.kill_tree()?;
            drop(daemon);
            daemon = start(bins, dir.path(), &root, &state)?;
        }
        let left = settled(&root, &state, Duration::from_secs(10));
        if !left.is_empty() {
            report.violations.push(format!("transaction {}: left behind: {left:?}", report.transactions));
        }
        let disk = read_tree(&root, &names);
        match ended {
            // A kill that came before the transaction reached its worker (a loaded machine) or
            // after its reply missed it: committed, whole.
            Ended::Committed if disk == after => report.committed += 1,
            Ended::Failed(_) if disk == before => {}
            Ended::Cut if disk == before => report.rolled_back += 1,
            // Cut after its last step (a random kill), or its worker finishing alone while the
            // network process was killed: whole. A worker that exits at a step before the last is
            // never.
            Ended::Cut if disk == after && cut != Cut::StepExit => report.whole += 1,
            ended => {
                let torn: Vec<&String> = names
                    .iter()
                    .filter(|n| disk.get(*n) != before.get(*n) && disk.get(*n) != after.get(*n))
                    .collect();
                let mixed = disk != before && disk != after;
                if mixed {
                    report.torn += 1;
                }
                let how = match ended {
                    Ended::Committed => "committed".to_owned(),
                    Ended::Failed(code) => format!("failed {code}"),
                    Ended::Cut => "cut".to_owned(),
                };
                report.violations.push(format!(
                    "transaction {} ({cut:?}, {how}): the tree is {} (files neither before nor after: {torn:?})",
                    report.transactions,
                    if mixed { "a mix of before and after" } else { "not what the reply said" },
                ));
            }
        }
        if options.verbose {
            note!("transaction {}: {cut:?}", report.transactions);
        }
        model = disk;
        // Every outside save finished so far is on disk (or a newer one in progress).
        if let Ok(saves) = outside.saves.lock() {
            for (name, (done, doing)) in OUTSIDE_FILES.iter().zip(saves.iter()) {
                let Some(done) = done else { continue };
                let now = std::fs::read(root.join(name)).ok();
                if now.as_ref() != Some(done) && now.as_ref() != doing.as_ref() {
                    report.lost_outside_saves += 1;
                    report
                        .violations
                        .push(format!("outside save of {name} lost: disk {:?}", now.map(|b| header(&b))));
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    report.outside_saves = outside.count.load(Ordering::Relaxed);
    daemon.terminate()?;
    Ok(report)
}
