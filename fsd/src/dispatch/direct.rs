//! The direct read path: plain reads (stat, the write check of a stat, readText, readBytes,
//! listDir and the open of a streamed read) served inside the network process by a few threads
//! of its own, with the same `Backend` walk and read a worker runs, instead of a hop to a worker
//! and back (two more sleeps and wake-ups per call than the RPC itself).
//!
//! Each thread is started before the network process confines itself and confines itself first
//! (`role_confinement::direct_reader`): the read-only worker's uid and groups, no capabilities,
//! no_new_privs, a Landlock domain of its own that grants reading beneath the roots and nothing
//! else, and its own seccomp allowlist. The kernel refuses these threads every write and every
//! read outside the roots; the rest of the network process keeps no filesystem rights at all.
//! What Landlock cannot express (read-denied globs, not crossing into a submount) is enforced by
//! the walk, in this process: that is the trade (ARCHITECTURE.md, docs/direct-reads.md).
//!
//! A read runs under the call deadline. One that overruns is abandoned with its thread (nothing
//! can stop a thread stuck in the filesystem); at `MAX_ABANDONED` the path turns itself off and
//! every read takes the worker hop again, whose hung-worker handling kills and replaces. Health
//! and hello say so. It comes back on when enough abandoned reads have returned (their threads
//! serve again) to leave fewer than the cap stuck.
//!
//! The hand-off costs two wake-ups (the direct thread's, then the runtime thread's). The caller
//! parks rather than spin for its answer: on a machine of two vCPUs a spinning runtime thread
//! holds a CPU the read's own thread needs (the same trade measured for the worker socket in
//! BENCHMARKS.md, "Polling the worker's socket").

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::{Duration, Instant};

use fsd_proto::{ErrorCode, Reason, WireError, WorkerLost};
use tokio::sync::{Notify, oneshot};

use crate::backend::{Backend, Fence, Guard, Locking};
use crate::config::{Config, WorkerIdentity};
use crate::error::{Failure, FsError};
use crate::op::{Mode, Outcome, Request, StreamHeader};
use crate::sys::confine::{Enforcement, Grant};

/// Threads that serve direct reads: the calls are short (a walk and one read), and a hung one
/// costs a thread, so a few.
const THREADS: usize = 4;
/// Reads waiting for a direct thread; a read that finds the queue full takes the worker hop.
const QUEUE: usize = 32;
/// Abandoned reads at which the path turns itself off: half the threads may hang before it.
const MAX_ABANDONED: usize = THREADS / 2;

/// Where a job is: the caller and the thread that runs it agree through it on whether the
/// caller gave up before the job was taken (nothing hung) or after (its thread is abandoned,
/// counted until it returns).
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const GIVEN_UP: u8 = 2;
const ABANDONED: u8 = 3;
const DONE: u8 = 4;

/// Why the direct path does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    /// `direct_reads = false`.
    Configured,
    /// The workers keep capabilities (`worker_uid = 0`) that no thread of this process holds, so
    /// its permission outcomes would not be theirs.
    RootCapabilities,
    /// A thread could not confine itself as the path requires (Landlock fully enforced included).
    Confinement(String),
    /// Reads overran the call deadline and were abandoned, this many.
    Tripped(usize),
}

impl Off {
    /// For hello, health and the log.
    pub fn describe(&self) -> String {
        match self {
            Off::Configured => "off by configuration (direct_reads = false)".to_owned(),
            Off::RootCapabilities => {
                "off: the workers keep root capabilities (worker_uid = 0), which the network process never holds"
                    .to_owned()
            }
            Off::Confinement(why) => format!("off: its threads could not be confined ({why})"),
            Off::Tripped(n) => {
                format!("off: {n} reads overran the call deadline and were abandoned; reads go to the workers")
            }
        }
    }
}

/// What a direct thread is asked.
pub(super) enum Work {
    Call(Request),
    Open(String),
    /// Test hook: create a file at this path from a direct thread (its fence must refuse).
    #[cfg(feature = "fault-injection")]
    TryWrite(std::path::PathBuf),
}

/// What it answers.
pub(super) enum Done {
    Call(Result<Outcome, WireError>),
    Open(Result<(StreamHeader, File), WireError>),
    #[cfg(feature = "fault-injection")]
    Wrote(Result<(), String>),
}

struct Job {
    mode: Mode,
    work: Work,
    /// What it answers, and when a thread took it (the trace's queue and work spans).
    answer: oneshot::Sender<(Done, Instant)>,
    /// `QUEUED`, `TAKEN`, `GIVEN_UP`, `ABANDONED` or `DONE`.
    state: Arc<AtomicU8>,
}

/// A direct read that ran here, or the call back for the worker hop.
pub enum Served<T, W> {
    Here { result: Result<T, WireError>, tripped: bool },
    NotHere(W),
}

/// Reads never lock: a direct thread has no lock to take (the network process's lock table is
/// the workers'; a plain read takes none).
#[derive(Debug)]
struct NoLocks;

impl Locking for NoLocks {
    fn lock(&self, _keys: &[&str]) -> Result<Guard, FsError> {
        Err(FsError::Aborted)
    }
}

/// A read-only worker's Landlock grants beneath the roots, and its identity.
type Reader = (Arc<Vec<(PathBuf, Grant)>>, WorkerIdentity);

/// The pool, or why there is none.
#[derive(Debug)]
pub struct Direct {
    jobs: Option<mpsc::SyncSender<Job>>,
    /// Reads on the runtime threads, where they may run (`dispatch::inline`).
    inline: Option<super::inline::Inline>,
    /// What the network process confines itself to while its runtime threads read (`inline`):
    /// a read-only worker's Landlock grants and identity.
    reader: Option<Reader>,
    shared: Arc<Shared>,
    deadline: Duration,
}

/// What the callers and the threads share.
#[derive(Debug)]
struct Shared {
    serving: AtomicBool,
    /// Reads abandoned whose thread has not returned yet.
    abandoned: AtomicUsize,
    /// Why the path does not serve; held while it turns off or on, so the two agree with
    /// `abandoned`.
    off: Mutex<Option<Off>>,
    /// Woken when the path turns off or on (health, hello).
    changed: OnceLock<Arc<Notify>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Direct {
    /// Starts the threads, each confined before this returns; must run before the network
    /// process confines itself (they need the roots' descriptors and the rights to confine
    /// themselves as a worker would) and before any other thread starts. `runtime_threads`: the
    /// network process's, of which all but one may read (`dispatch::inline`).
    pub fn start(config: &Config, runtime_threads: usize) -> Direct {
        let (jobs, off) = match spawn(config) {
            Ok(jobs) => (Some(jobs), None),
            Err(off) => (None, Some(off)),
        };
        match &off {
            None if !config.read_denied.is_empty() => tracing::info!(
                "direct reads on: reads run in the network process, which enforces read_denied (and submounts) by its walk; Landlock confines those reads to the roots (direct_reads = false keeps every read in the workers)"
            ),
            None => tracing::info!(
                "direct reads on: reads run in the network process, confined to reading the roots"
            ),
            Some(Off::Configured) => tracing::info!("direct reads off by configuration"),
            Some(off) => tracing::warn!("direct reads {}", off.describe()),
        }
        let Some(Spawned { jobs, shared, backend, grants, identity }) = jobs else {
            return Direct {
                jobs: None,
                inline: None,
                reader: None,
                shared: Arc::new(Shared::new(off)),
                deadline: config.call_timeout,
            };
        };
        let inline = super::inline::Inline::new(config, backend, runtime_threads);
        // Without reads on the runtime threads, the rest of the process keeps no filesystem
        // right at all.
        let reader = inline.is_some().then_some((grants, identity));
        Direct { jobs: Some(jobs), inline, reader, shared, deadline: config.call_timeout }
    }

    /// Off, for a dispatcher without the network process around it (unit tests).
    pub fn off() -> Direct {
        Direct {
            jobs: None,
            inline: None,
            reader: None,
            shared: Arc::new(Shared::new(Some(Off::Configured))),
            deadline: Duration::from_secs(30),
        }
    }

    /// Whom to wake when the path turns off or back on by itself (the dispatcher's watchers).
    pub fn notify(&self, changed: Arc<Notify>) {
        let _ = self.shared.changed.set(changed);
    }

    /// The Landlock grants and identity the network process reads with, when its runtime
    /// threads read (`role_confinement::network`); `None`: it keeps no filesystem right.
    pub fn reader(&self) -> Option<(&[(PathBuf, Grant)], WorkerIdentity)> {
        self.reader.as_ref().map(|(grants, identity)| (grants.as_slice(), *identity))
    }

    /// None while serving; why not otherwise.
    pub fn off_reason(&self) -> Option<Off> {
        self.shared.off.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether a call of `mode` may run here: only while serving, never at danger-full-access
    /// (whose walk reaches outside the roots).
    fn serves(&self, mode: Mode) -> bool {
        mode != Mode::DangerFullAccess && self.shared.serving.load(Ordering::Acquire)
    }

    /// Runs a plain read here when the path serves it; otherwise hands it back for a worker.
    pub async fn call(&self, mode: Mode, request: Request) -> Served<Outcome, Request> {
        let direct = matches!(
            request,
            Request::Stat { .. }
                | Request::CheckWrite { .. }
                | Request::ReadText { .. }
                | Request::ReadBytes { .. }
                | Request::ListDir { .. }
        );
        if !direct || !self.serves(mode) {
            return Served::NotHere(request);
        }
        let path = request.path().to_owned();
        match self.here(mode, &path, Work::Call(request)).await {
            Ok((Ok(Done::Call(result)), tripped)) => Served::Here { result, tripped },
            Ok((Ok(_), tripped)) => Served::Here { result: Err(mismatched(&path)), tripped },
            Ok((Err(failure), tripped)) => Served::Here { result: Err(failure), tripped },
            Err(Work::Call(request)) => Served::NotHere(request),
            Err(_) => Served::Here { result: Err(mismatched(&path)), tripped: false },
        }
    }

    /// Opens a file for a streamed read here when the path serves it (`None`: take the worker
    /// hop).
    pub async fn open_stream(
        &self,
        mode: Mode,
        path: &str,
    ) -> Option<(Result<(StreamHeader, File), WireError>, bool)> {
        if !self.serves(mode) {
            return None;
        }
        match self.here(mode, path, Work::Open(path.to_owned())).await {
            Ok((Ok(Done::Open(result)), tripped)) => Some((result, tripped)),
            Ok((Ok(_), tripped)) => Some((Err(mismatched(path)), tripped)),
            Ok((Err(failure), tripped)) => Some((Err(failure), tripped)),
            Err(_) => None,
        }
    }

    /// Test hook: a direct thread tries to create `path`; the error the kernel gave, if it
    /// refused.
    #[cfg(feature = "fault-injection")]
    pub async fn try_write(&self, path: std::path::PathBuf) -> Result<(), String> {
        let shown = path.display().to_string();
        match self.here(Mode::ReadOnly, &shown, Work::TryWrite(path)).await {
            Ok((Ok(Done::Wrote(result)), _)) => result,
            Ok((Ok(_), _)) => Err("unexpected answer".to_owned()),
            Ok((Err(failure), _)) => Err(failure.message),
            Err(_) => Err("the direct path is off".to_owned()),
        }
    }

    /// Runs `work` on this runtime thread where it may (`dispatch::inline`), else on a direct
    /// read thread.
    async fn here(
        &self,
        mode: Mode,
        path: &str,
        work: Work,
    ) -> Result<(Result<Done, WireError>, bool), Work> {
        if let Some(slot) = self.inline.as_ref().and_then(super::inline::Inline::claim) {
            return Ok((slot.run(mode, path, work), false));
        }
        self.ask(mode, path, work).await
    }

    /// Queues `work` for a thread and waits for it under the deadline. `Err(work)`: not queued
    /// (the queue is full, or the path is off); the bool says whether this call turned it off.
    async fn ask(&self, mode: Mode, path: &str, work: Work) -> Result<(Result<Done, WireError>, bool), Work> {
        let Some(jobs) = &self.jobs else { return Err(work) };
        let (answer, done) = oneshot::channel();
        let queued = crate::traces::on().then(Instant::now);
        let state = Arc::new(AtomicU8::new(QUEUED));
        if let Err(refused) = jobs.try_send(Job { mode, work, answer, state: state.clone() }) {
            let job = match refused {
                mpsc::TrySendError::Full(job) | mpsc::TrySendError::Disconnected(job) => job,
            };
            return Err(job.work);
        }
        let answered = tokio::time::timeout(self.deadline, done).await;
        match answered {
            Ok(Ok((done, taken))) => {
                if let Some(queued) = queued {
                    crate::traces::dispatched(mode, queued, Some(taken), Instant::now());
                }
                Ok((Ok(done), false))
            }
            // Its thread ended without answering: only a panic does that.
            Ok(Err(_)) => Ok((Err(lost(path, WorkerLost::Died, "direct read thread died")), false)),
            Err(_) => {
                // Taken by a thread that has not answered: that thread is stuck. Still queued
                // (the threads were busy): nothing is stuck, the thread that finds it skips it.
                let stuck =
                    match state.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => false,
                        // Unless it answered just now.
                        Err(TAKEN) => state
                            .compare_exchange(TAKEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok(),
                        Err(_) => false,
                    };
                let tripped = stuck && self.shared.abandon();
                let failure = lost(path, WorkerLost::Deadline, "deadline passed; direct read abandoned");
                Ok((Err(failure), tripped))
            }
        }
    }
}

impl Shared {
    fn new(off: Option<Off>) -> Shared {
        Shared {
            serving: AtomicBool::new(off.is_none()),
            abandoned: AtomicUsize::new(0),
            off: Mutex::new(off),
            changed: OnceLock::new(),
        }
    }

    /// Counts one abandoned read; at the cap the path turns itself off (true: now).
    fn abandon(&self) -> bool {
        let abandoned = self.abandoned.fetch_add(1, Ordering::AcqRel) + 1;
        let mut off = self.off.lock().unwrap_or_else(PoisonError::into_inner);
        // Read again under the lock: an abandoned read may have returned meanwhile.
        let abandoned_now = self.abandoned.load(Ordering::Acquire);
        if abandoned_now < MAX_ABANDONED || !self.serving.swap(false, Ordering::AcqRel) {
            tracing::warn!(abandoned, "a direct read overran the call deadline; its thread is abandoned");
            return false;
        }
        let tripped = Off::Tripped(abandoned_now);
        tracing::error!("direct reads {}", tripped.describe());
        *off = Some(tripped);
        true
    }

    /// An abandoned read's thread returned and serves again: below the cap the path comes back
    /// on (if the cap turned it off).
    fn returned(&self) {
        let left = self.abandoned.fetch_sub(1, Ordering::AcqRel) - 1;
        let mut off = self.off.lock().unwrap_or_else(PoisonError::into_inner);
        let left_now = self.abandoned.load(Ordering::Acquire);
        if left_now >= MAX_ABANDONED || !matches!(*off, Some(Off::Tripped(_))) {
            tracing::info!(left, "an abandoned direct read returned; its thread serves again");
            return;
        }
        *off = None;
        self.serving.store(true, Ordering::Release);
        drop(off);
        tracing::warn!(
            left = left_now,
            "direct reads back on: abandoned reads returned and their threads serve again"
        );
        if let Some(changed) = self.changed.get() {
            changed.notify_waiters();
        }
    }
}

pub(super) fn lost(path: &str, lost: WorkerLost, what: &str) -> WireError {
    WireError::new(ErrorCode::Aborted, path, format!("worker lost: {what}"))
        .with_reason(Reason::WorkerLost)
        .with_word(lost)
}

fn mismatched(path: &str) -> WireError {
    WireError::new(ErrorCode::IoError, path, "unexpected reply").with_reason(Reason::UnexpectedReply)
}

/// What `spawn` started: the queue the threads serve, and what they read with.
struct Spawned {
    jobs: mpsc::SyncSender<Job>,
    shared: Arc<Shared>,
    backend: Arc<Backend>,
    grants: Arc<Vec<(PathBuf, Grant)>>,
    identity: WorkerIdentity,
}

/// The backend over the roots and the threads, each confined; the queue they serve, or why not.
fn spawn(config: &Config) -> Result<Spawned, Off> {
    if !config.direct_reads {
        return Err(Off::Configured);
    }
    let identity = config.worker_identity().map_err(|e| Off::Confinement(e.to_string()))?;
    if identity.root_capabilities {
        return Err(Off::RootCapabilities);
    }
    // The fence a read-only worker walks with: the configured roots, never the host's.
    let fence = Fence {
        protected: &config.protected_names,
        read_denied: &config.read_denied,
        submounts: &config.allow_submounts,
        allow_backslash: config.allow_backslash,
        host_root: false,
    };
    let backend = Backend::new(&config.roots, &fence, config.limits, Arc::new(NoLocks))
        .map_err(|e| Off::Confinement(e.to_string()))?;
    let backend = Arc::new(backend);
    let grants = Arc::new(crate::role_confinement::direct_grants(config));
    let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUE);
    let queue = Arc::new(Mutex::new(queue));
    let shared = Arc::new(Shared::new(None));
    let (ready, confined) = mpsc::channel::<Result<Enforcement, String>>();
    for n in 0..THREADS {
        let (backend, queue, grants, ready) = (backend.clone(), queue.clone(), grants.clone(), ready.clone());
        let shared = shared.clone();
        let thread = std::thread::Builder::new().name(format!("fsd-direct-{n}")).spawn(move || {
            let confinement = crate::role_confinement::direct_reader(&grants, identity);
            let full = matches!(&confinement, Ok(c) if c.landlock == Enforcement::Full);
            let _ = ready.send(confinement.map(|c| c.landlock).map_err(|e| e.to_string()));
            if full {
                serve(&backend, &queue, &shared);
            }
        });
        thread.map_err(|e| Off::Confinement(format!("cannot start a thread: {e}")))?;
    }
    drop(ready);
    for _ in 0..THREADS {
        match confined.recv() {
            Ok(Ok(Enforcement::Full)) => {}
            // Dropping `jobs` on the way out ends the threads that did confine themselves.
            Ok(Ok(other)) => {
                return Err(Off::Confinement(format!("Landlock not fully enforced ({other:?})")));
            }
            Ok(Err(why)) => return Err(Off::Confinement(why)),
            Err(_) => return Err(Off::Confinement("a thread ended before it was confined".to_owned())),
        }
    }
    Ok(Spawned { jobs, shared, backend, grants, identity })
}

/// A direct thread's loop: the next job, run, answered; until the queue's sender is gone.
fn serve(backend: &Backend, queue: &Mutex<mpsc::Receiver<Job>>, shared: &Shared) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(Job { mode, work, answer, state }) = job else { return };
        // Its caller gave up (deadline or cancellation) before a thread took it.
        if answer.is_closed()
            || state.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            continue;
        }
        let taken = Instant::now();
        // A panic answers as a worker's death would, and the thread serves on.
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(backend, mode, work)));
        match done {
            Ok(done) => {
                let _ = answer.send((done, taken));
            }
            Err(_) => drop(answer),
        }
        // Its caller counted this thread as stuck: it is back.
        if state.compare_exchange(TAKEN, DONE, Ordering::AcqRel, Ordering::Acquire).is_err() {
            shared.returned();
        }
    }
}

pub(super) fn run(backend: &Backend, mode: Mode, work: Work) -> Done {
    match work {
        Work::Call(request) => {
            #[cfg(feature = "fault-injection")]
            if let Some(failure) = crate::worker::fault(&request, None) {
                return Done::Call(Err(failure));
            }
            Done::Call(backend.handle(mode, request).map_err(Failure::into_wire))
        }
        Work::Open(path) => Done::Open(backend.open_stream(mode, &path).map_err(Failure::into_wire)),
        #[cfg(feature = "fault-injection")]
        Work::TryWrite(path) => Done::Wrote(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map(drop)
                .map_err(|e| e.to_string()),
        ),
    }
}
