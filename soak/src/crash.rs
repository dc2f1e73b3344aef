//! Crash safety: clients write and edit small (4 KiB) and large (~8 MiB) files while the whole
//! daemon tree (supervisor, network process, workers) is SIGKILLed at a random moment, or one
//! busy worker is. After each kill (and a restart on the same root after a tree kill) every file
//! must be byte-identical to its last acknowledged content or to the content of the call that
//! was in flight, no acknowledged write may be missing, and no `.fsd-tmp-*` file or journal
//! entry may remain.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_proto::{ErrorCode, WireError};
use fsd_tool_client::connect::{self, Endpoint};
use tonic::transport::Channel;

use crate::daemon::{self, Bins, Daemon};
use crate::tree;
use crate::util::{Error, Result, Rng};

#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Stop starting rounds after this long.
    pub duration: Duration,
    /// Client threads, each with its own connection and its own files.
    pub clients: usize,
    pub small_files: usize,
    pub large_files: usize,
    pub small_bytes: usize,
    pub large_bytes: usize,
    /// A kill comes at a random moment in `0..max_kill_delay` after the clients start.
    pub max_kill_delay: Duration,
    /// The share of rounds (percent) that kill one worker instead of the whole tree.
    pub worker_kill_percent: u64,
    pub seed: u64,
    /// Print one line per round.
    pub verbose: bool,
}

impl Default for CrashOptions {
    fn default() -> CrashOptions {
        CrashOptions {
            duration: Duration::from_secs(60),
            clients: 4,
            small_files: 4,
            large_files: 1,
            small_bytes: 4 << 10,
            large_bytes: 8 << 20,
            max_kill_delay: Duration::from_millis(400),
            worker_kill_percent: 30,
            seed: crate::util::clock_seed(),
            verbose: false,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct CrashReport {
    pub seed: u64,
    pub rounds: u64,
    pub tree_kills: u64,
    pub worker_kills: u64,
    pub acked_writes: u64,
    pub acked_edits: u64,
    pub acked_large: u64,
    /// Calls cut by a kill whose content was found on disk (landed) or not (the old content).
    pub unacked_landed: u64,
    pub unacked_absent: u64,
    /// Calls that failed with FS_ABORTED because their worker was killed.
    pub worker_aborts: u64,
    /// Temporary files seen right after a kill, before any restart (what the sweep had to do).
    pub temps_after_kill: u64,
    pub violations: Vec<String>,
}

impl std::fmt::Display for CrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "crash: seed {} rounds {} (tree kills {}, worker kills {}); acknowledged writes {} edits {} (large {}); \
             cut calls landed {} / not landed {}; FS_ABORTED {}; temp files left by kills {}; violations {}",
            self.seed,
            self.rounds,
            self.tree_kills,
            self.worker_kills,
            self.acked_writes,
            self.acked_edits,
            self.acked_large,
            self.unacked_landed,
            self.unacked_absent,
            self.worker_aborts,
            self.temps_after_kill,
            self.violations.len()
        )
    }
}

/// One file a client owns: what the disk must hold.
#[derive(Debug, Clone)]
struct FileState {
    path: PathBuf,
    large: bool,
    /// The last acknowledged content (`None`: never written, absent).
    committed: Option<Arc<Vec<u8>>>,
    /// The content of a call that was cut by a kill: may or may not have landed.
    pending: Option<Arc<Vec<u8>>>,
    /// The version of `committed` when known (for guarded writes).
    version: Option<String>,
    seq: u64,
}

/// The first line of every file names the write that made it; edits replace it.
fn header(path: &Path, seq: u64) -> String {
    format!("hdr {} {seq:08}\n", path.display())
}

/// A file's content for write `seq`: the header line, then filler lines up to `size` bytes.
fn content(path: &Path, seq: u64, size: usize) -> Vec<u8> {
    let mut out = header(path, seq).into_bytes();
    let line = format!("{seq:08} the quick brown fox jumps over the lazy dog 0123456789abcdef\n");
    while out.len() + line.len() <= size {
        out.extend_from_slice(line.as_bytes());
    }
    out
}

/// How a call ended, as a client sees it.
enum Ended {
    Acked(String),
    /// The call's worker was killed (FS_ABORTED): the outcome is unknown, the daemon lives.
    WorkerLost,
    /// The daemon is gone (transport error).
    DaemonLost,
}

struct Client {
    rt: tokio::runtime::Runtime,
    fsd: FsdClient<Channel>,
}

impl Client {
    fn connect(endpoint: &Endpoint) -> Option<Client> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        let (fsd, _) = rt.block_on(connect::connect(endpoint)).ok()?;
        Some(Client { rt, fsd })
    }

    fn classify(status: &tonic::Status, violations: &mut Vec<String>, what: &str) -> Ended {
        match WireError::from_status(status) {
            Some(wire) if wire.code == ErrorCode::Aborted => Ended::WorkerLost,
            Some(wire) => {
                violations.push(format!("{what}: unexpected {} ({})", wire.code, wire.message));
                Ended::WorkerLost
            }
            None => Ended::DaemonLost,
        }
    }

    fn write(
        &mut self,
        file: &FileState,
        bytes: &[u8],
        guarded: bool,
        violations: &mut Vec<String>,
    ) -> Ended {
        let guard = match (&file.version, guarded) {
            (Some(version), true) => Some(v1::WriteGuard {
                kind: Some(v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
                    version: version.clone(),
                    target_key: String::new(),
                })),
            }),
            _ => None,
        };
        let request = v1::WriteTextRequest {
            path: file.path.to_string_lossy().into_owned(),
            content: String::from_utf8_lossy(bytes).into_owned(),
            guard,
            ..Default::default()
        };
        match self.rt.block_on(self.fsd.write_text(request)) {
            Ok(reply) => Ended::Acked(reply.into_inner().version),
            Err(status) => Client::classify(&status, violations, &format!("write {}", file.path.display())),
        }
    }

    fn edit(&mut self, file: &FileState, old: &str, new: &str, violations: &mut Vec<String>) -> Ended {
        let request = v1::EditTextRequest {
            path: file.path.to_string_lossy().into_owned(),
            old_string: old.to_owned(),
            new_string: new.to_owned(),
            guard: file.version.clone().map(|version| v1::EditGuard { version, target_key: String::new() }),
            ..Default::default()
        };
        match self.rt.block_on(self.fsd.edit_text(request)) {
            Ok(reply) => Ended::Acked(reply.into_inner().version),
            Err(status) => Client::classify(&status, violations, &format!("edit {}", file.path.display())),
        }
    }
}

/// What one client thread did in one round.
#[derive(Debug, Default)]
struct ClientTally {
    writes: u64,
    edits: u64,
    large: u64,
    aborts: u64,
    violations: Vec<String>,
}

/// Checks a file against what it may hold and adopts a landed pending content.
fn settle(file: &mut FileState, report: &mut CrashReport) {
    let disk = match std::fs::read(&file.path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            report.violations.push(format!("{}: unreadable after a kill: {e}", file.path.display()));
            return;
        }
    };
    let is = |want: &Option<Arc<Vec<u8>>>| want.as_deref().map(Vec::as_slice) == disk.as_deref();
    if let Some(pending) = file.pending.take() {
        let pending = Some(pending);
        if is(&pending) && !is(&file.committed) {
            file.committed = pending;
            file.version = None;
            report.unacked_landed += 1;
            return;
        }
        if is(&file.committed) {
            report.unacked_absent += 1;
            return;
        }
    } else if is(&file.committed) {
        return;
    }
    let first_line = |b: Option<&[u8]>| {
        b.map(|b| String::from_utf8_lossy(b.split(|&c| c == b'\n').next().unwrap_or_default()).into_owned())
    };
    report.violations.push(format!(
        "{}: holds neither its acknowledged nor its in-flight content (disk: {} bytes, {:?}; acknowledged: {:?})",
        file.path.display(),
        disk.as_ref().map_or(0, Vec::len),
        first_line(disk.as_deref()),
        first_line(file.committed.as_deref().map(Vec::as_slice)),
    ));
    // Continue from what is there, so one finding does not cascade.
    file.committed = disk.map(Arc::new);
    file.version = None;
}

/// One client's round: random writes and edits on its own files until the daemon goes away or
/// `stop` is set. On a worker kill it settles the cut file at once and goes on.
fn client_round(
    endpoint: &Endpoint,
    files: &mut [FileState],
    options: &CrashOptions,
    rng: &mut Rng,
    stop: &AtomicBool,
) -> (ClientTally, CrashReport) {
    let mut tally = ClientTally::default();
    let mut settled = CrashReport::default();
    let Some(mut client) = Client::connect(endpoint) else { return (tally, settled) };
    while !stop.load(Ordering::Relaxed) {
        let index = rng.below(files.len() as u64) as usize;
        let file = &mut files[index];
        file.seq += 1;
        let size = if file.large { options.large_bytes } else { options.small_bytes };
        let edit = file.committed.is_some() && rng.percent(40);
        let (ended, next) = if edit {
            let current = file.committed.clone().unwrap_or_default();
            let first_len = current.iter().position(|&b| b == b'\n').map_or(current.len(), |i| i + 1);
            let old = String::from_utf8_lossy(&current[..first_len]).into_owned();
            let new = header(&file.path, file.seq);
            let mut next = new.clone().into_bytes();
            next.extend_from_slice(&current[first_len..]);
            let next = Arc::new(next);
            file.pending = Some(next.clone());
            (client.edit(file, &old, &new, &mut tally.violations), next)
        } else {
            let next = Arc::new(content(&file.path, file.seq, size));
            file.pending = Some(next.clone());
            let guarded = rng.percent(50);
            (client.write(file, &next, guarded, &mut tally.violations), next)
        };
        match ended {
            Ended::Acked(version) => {
                file.pending = None;
                file.committed = Some(next);
                file.version = Some(version);
                if edit {
                    tally.edits += 1
                } else {
                    tally.writes += 1
                }
                if file.large {
                    tally.large += 1;
                }
            }
            Ended::WorkerLost => {
                tally.aborts += 1;
                settle(file, &mut settled);
            }
            Ended::DaemonLost => break,
        }
    }
    (tally, settled)
}

fn start(bins: &Bins, dir: &Path, root: &Path) -> Result<Daemon> {
    let options = daemon::Options {
        root: root.to_path_buf(),
        socket: dir.join("fsd.sock"),
        config: String::new(),
        log: Some(dir.join("fsd.log")),
    };
    Daemon::start(bins, &options)
}

/// Waits until no temporary file is left below `root` (the supervisor sweeps a dead worker's
/// files when it reaps it, which may come a moment after the call failed).
fn wait_no_temps(root: &Path, timeout: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + timeout;
    loop {
        let temps = tree::temp_files(root);
        if temps.is_empty() || Instant::now() > deadline {
            return temps;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the crash workload in a fresh temporary directory.
pub fn run(bins: &Bins, options: &CrashOptions) -> Result<CrashReport> {
    let dir = tempfile::Builder::new().prefix("fsd-crash-").tempdir()?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let mut rng = Rng::new(options.seed);
    let mut report = CrashReport { seed: options.seed, ..Default::default() };

    let mut sets: Vec<Vec<FileState>> = (0..options.clients)
        .map(|c| {
            let mut files = Vec::new();
            for i in 0..options.small_files + options.large_files {
                let large = i >= options.small_files;
                let sub = if i % 2 == 0 { "" } else { "sub/dir/" };
                let name = format!("{sub}c{c}-{}{i}.txt", if large { "large" } else { "small" });
                files.push(FileState {
                    path: root.join(name),
                    large,
                    committed: None,
                    pending: None,
                    version: None,
                    seq: 0,
                });
            }
            files
        })
        .collect();

    let mut daemon = start(bins, dir.path(), &root)?;
    let started = Instant::now();
    while started.elapsed() < options.duration {
        report.rounds += 1;
        let stop = Arc::new(AtomicBool::new(false));
        let endpoint = daemon.endpoint();
        let handles: Vec<_> = sets
            .drain(..)
            .map(|mut files| {
                let (endpoint, stop, options, mut rng) =
                    (endpoint.clone(), stop.clone(), options.clone(), rng.fork());
                std::thread::spawn(move || {
                    let (tally, settled) = client_round(&endpoint, &mut files, &options, &mut rng, &stop);
                    (files, tally, settled)
                })
            })
            .collect();

        std::thread::sleep(Duration::from_millis(rng.below(options.max_kill_delay.as_millis() as u64 + 1)));
        let worker_kill = rng.percent(options.worker_kill_percent);
        if worker_kill {
            let workers = daemon.worker_pids("workspace-write");
            if let Some(&pid) = workers.get(rng.below(workers.len() as u64) as usize) {
                daemon::kill(pid, rustix::process::Signal::KILL);
                report.worker_kills += 1;
            }
            // Let the clients go on against the replacement for a moment.
            std::thread::sleep(Duration::from_millis(50 + rng.below(150)));
            stop.store(true, Ordering::Relaxed);
        } else {
            daemon.kill_tree()?;
            report.tree_kills += 1;
            stop.store(true, Ordering::Relaxed);
        }

        for handle in handles {
            let (files, tally, settled) =
                handle.join().map_err(|_| Error("a client thread panicked".into()))?;
            report.acked_writes += tally.writes;
            report.acked_edits += tally.edits;
            report.acked_large += tally.large;
            report.worker_aborts += tally.aborts;
            report.unacked_landed += settled.unacked_landed;
            report.unacked_absent += settled.unacked_absent;
            report.violations.extend(tally.violations);
            report.violations.extend(settled.violations);
            sets.push(files);
        }

        if worker_kill {
            let left = wait_no_temps(&root, Duration::from_secs(20));
            report.violations.extend(left.iter().map(|t| {
                format!("round {}: temporary file left after a worker kill: {}", report.rounds, t.display())
            }));
            if !daemon.running() {
                report
                    .violations
                    .push(format!("round {}: the daemon died after a worker kill", report.rounds));
                daemon = start(bins, dir.path(), &root)?;
            }
        } else {
            report.temps_after_kill += tree::temp_files(&root).len() as u64;
            daemon = start(bins, dir.path(), &root)?;
            // `start` returns once this daemon's own network process listens (not a dying
            // predecessor's), and the supervisor starts it only after its start-up sweep: no
            // wait needed.
            for temp in tree::temp_files(&root) {
                report.violations.push(format!(
                    "round {}: temporary file left after restart: {}",
                    report.rounds,
                    temp.display()
                ));
            }
        }
        for entry in tree::journal_entries(&root) {
            // Entries of calls in flight are normal while clients run; none run now.
            report.violations.push(format!("round {}: journal entry left: {entry}", report.rounds));
        }
        for file in sets.iter_mut().flatten() {
            settle(file, &mut report);
        }
        if options.verbose {
            note!("round {}: {}", report.rounds, report);
        }
        if report.violations.len() > 50 {
            break;
        }
    }
    daemon.terminate()?;
    Ok(report)
}
