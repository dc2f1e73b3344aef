//! The network process's side of the workers, all on its tokio runtime: per-mode pools of worker
//! connections spoken to with non-blocking socket I/O (frames and descriptors), a bounded fair
//! queue of calls per mode (`queue`) that each worker's driver task takes its next call from,
//! the per-target locks that hold across every worker of every mode (`locks`), per-call
//! deadlines (a worker that overruns is reported to the supervisor, which kills or abandons it;
//! only its call fails), and streamed reads (`stream`). No call holds a thread while it waits.

mod locks;
mod queue;
pub mod stream;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fsd_proto::{ErrorCode, WireError};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::backend::{Mode, Outcome, Request, StreamHeader};
use crate::ipc::{self, ControlRequest, FromWorker, IpcError, Remote, ToWorker};
use crate::sys::ipc::AsyncFrames;
use locks::AsyncLocks;
use queue::FairQueue;

/// How long a new worker may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many reads a driver sends behind the read its worker runs (see `Dispatcher::drive`):
/// with one, the worker still slept now and then before the next arrived; three made 64 stat
/// calls in flight ~10% faster again (`fsd-bench probe --in-flight 64`, alternating builds).
const READS_AHEAD: usize = 3;
/// How long reads sent ahead wait for the worker to answer the call it runs before they go to
/// another worker: far above a healthy read, far below a call's deadline.
const AHEAD_PATIENCE: Duration = Duration::from_millis(50);
/// What a caller refused by a full mode queue is told to wait.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(50);

/// One live worker connection.
#[derive(Debug)]
struct Worker {
    pid: u32,
    frames: AsyncFrames,
}

/// The final reply a call waits for (lock requests and progress come before it).
#[derive(Debug, Clone, Copy)]
enum Expect {
    Reply,
    Stream,
}

/// A worker's final reply to a call, of the kind the call expects.
#[derive(Debug)]
enum Final {
    Reply(Result<Outcome, Remote>),
    /// A streamed read's header, with the descriptor its frame carried.
    Stream(Result<StreamHeader, Remote>, Option<OwnedFd>),
}

impl Expect {
    fn accept(self, reply: FromWorker, fd: Option<OwnedFd>) -> Option<Final> {
        match (self, reply) {
            (Expect::Reply, FromWorker::Reply(result)) => Some(Final::Reply(result)),
            (Expect::Stream, FromWorker::Stream(result)) => Some(Final::Stream(result, fd)),
            _ => None,
        }
    }
}

/// Who decides a queued call's fate first: a worker's driver that takes it, or its caller that
/// gives up (deadline, cancelled). Exactly one of them wins, so a call the caller was told failed
/// never runs, and a call a driver took is answered, or put back in the queue (a read sent
/// ahead of a worker that stopped answering), where the same race starts again.
#[derive(Debug, Default)]
struct Claim(AtomicU8);

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const GIVEN_UP: u8 = 2;

impl Claim {
    fn take(&self) -> bool {
        self.0.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    fn give_up(&self) -> bool {
        self.0.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A taken call goes back to the queue.
    fn release(&self) {
        self.0.store(QUEUED, Ordering::Release);
    }

    fn queued(&self) -> bool {
        self.0.load(Ordering::Acquire) == QUEUED
    }
}

/// A call on its way to a worker's socket and not yet answered.
#[derive(Debug)]
#[expect(clippy::large_enum_variant, reason = "at most four a worker; a box would cost an allocation a call")]
enum Sent {
    Job(Job),
    /// A read sent ahead and then given to another worker: its reply is dropped.
    Recalled(Expect),
}

impl Sent {
    fn expect(&self) -> Expect {
        match self {
            Sent::Job(job) => job.expect,
            Sent::Recalled(expect) => *expect,
        }
    }

    fn is_read(&self) -> bool {
        match self {
            Sent::Job(job) => job.message.is_read(),
            // Only reads are sent ahead.
            Sent::Recalled(_) => true,
        }
    }
}

/// What a queued call's caller gets back.
type Answer = Result<Final, Lost>;

/// A call waiting in its mode's queue. The driver of the worker that comes free takes it and
/// sends it at once: between two calls a worker waits for no other task.
#[derive(Debug)]
struct Job {
    identity: String,
    /// Sent ahead once and put back: it goes to a worker only as the call that worker runs next,
    /// so it is never held behind a slow call twice.
    put_back: bool,
    message: ToWorker,
    body: Option<OwnedFd>,
    expect: Expect,
    claim: Arc<Claim>,
    answer: oneshot::Sender<Answer>,
}

/// The state of one mode's pool.
#[derive(Debug, Default)]
struct PoolState {
    /// Workers registered and not known dead (idle or busy).
    live: usize,
    /// Drivers waiting for a call: calls they are about to take do not count against the queue.
    idle: usize,
    /// How the fence is enforced, as the workers reported when ready.
    enforcement: Option<String>,
    /// Set when the supervisor gave up on this mode (or too many of its workers hang).
    unavailable: Option<String>,
    /// Set while too many of this mode's workers are abandoned (stuck in the kernel): how many.
    stuck: Option<usize>,
    /// Calls waiting for a worker, per identity.
    waiting: FairQueue<Job>,
}

#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
    /// Woken when a call is queued.
    work: Notify,
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next call in turn whose caller still waits for it, waiting for one if none is queued.
    async fn next_job(&self) -> Job {
        let mut waited = false;
        loop {
            let notified = self.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state();
                if waited {
                    state.idle -= 1;
                }
                while let Some(job) = state.waiting.pop() {
                    if job.claim.take() {
                        return job;
                    }
                }
                state.idle += 1;
            }
            notified.await;
            waited = true;
        }
    }
}

impl Pool {
    /// The next call in turn, if it is a read and no worker is idle to take it: one to send
    /// behind the read a busy worker runs.
    fn next_read(&self) -> Option<Job> {
        let mut state = self.state();
        if state.idle > 0 {
            return None;
        }
        loop {
            let job = state
                .waiting
                .pop_if(|job| !job.claim.queued() || (job.message.is_read() && !job.put_back))?;
            if job.claim.take() {
                return Some(job);
            }
        }
    }

    /// A call taken and put back (its worker was lost before it began it, or stopped answering
    /// with it sent ahead): first in its identity's turn again.
    fn requeue(&self, mut job: Job) {
        let mut state = self.state();
        // A mode no longer served drained its queue: dropped, the call's caller hears why.
        if state.unavailable.is_some() {
            return;
        }
        job.claim.release();
        job.put_back = true;
        let identity = job.identity.clone();
        state.waiting.push_front(&identity, job);
        drop(state);
        self.work.notify_one();
    }
}

/// A caller's side of a queued call. Dropped while the call is still queued (the caller was
/// cancelled), it gives the call up, so no driver runs it.
struct Queued<'a> {
    claim: Arc<Claim>,
    answer: oneshot::Receiver<Answer>,
    pool: &'a Pool,
}

impl Queued<'_> {
    /// Gives the call up if no driver has it, and takes it out of the queue at once, so what
    /// it holds (an upload's pipe) is let go now: its sender sees EPIPE, not a full pipe.
    fn give_up(&self) -> bool {
        if !self.claim.give_up() {
            return false;
        }
        let job = self.pool.state().waiting.remove(|job| Arc::ptr_eq(&job.claim, &self.claim));
        drop(job);
        true
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// What hello and health report about one mode.
#[derive(Debug, Clone)]
pub struct ModeReport {
    pub mode: Mode,
    pub live_workers: usize,
    pub enforcement: Option<String>,
    pub unavailable: Option<String>,
}

/// All pools, the lock table, the reader pool of streams and the line to the supervisor.
#[derive(Debug)]
pub struct Dispatcher {
    pools: HashMap<Mode, Arc<Pool>>,
    locks: AsyncLocks,
    deadline: Duration,
    max_queued: usize,
    control: mpsc::UnboundedSender<ControlRequest>,
    readers: stream::Readers,
    /// Woken on every registration and availability change.
    changed: Notify,
}

fn failure(code: ErrorCode, path: &str, message: &str) -> WireError {
    WireError::new(code, path, message)
}

/// A worker that failed mid-call: the call's outcome is unknown. The `lost` metadata the tools
/// word it from, and a label for the log.
#[derive(Debug)]
struct Lost(&'static str, String);

impl Dispatcher {
    /// `control`: requests to the supervisor (kill a worker), sent by the control task.
    pub fn new(
        deadline: Duration,
        max_queued: usize,
        control: mpsc::UnboundedSender<ControlRequest>,
        readers: stream::Readers,
    ) -> Dispatcher {
        let pools = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|m| (m, Arc::new(Pool::default())))
            .collect();
        Dispatcher {
            pools,
            locks: AsyncLocks::default(),
            deadline,
            max_queued,
            control,
            readers,
            changed: Notify::new(),
        }
    }

    fn pool(&self, mode: Mode) -> &Arc<Pool> {
        // Every mode has a pool from construction on.
        &self.pools[&mode]
    }

    pub fn readers(&self) -> &stream::Readers {
        &self.readers
    }

    /// Registers a worker the supervisor started, once it says it is ready.
    pub async fn add_worker(self: &Arc<Self>, mode: Mode, pid: u32, socket: UnixStream) {
        let mut frames = match AsyncFrames::new(socket) {
            Ok(frames) => frames,
            Err(e) => {
                tracing::error!(mode = mode.as_str(), pid, error = %e, "cannot watch a worker socket; killing it");
                self.kill(pid);
                return;
            }
        };
        let ready = tokio::time::timeout(READY_TIMEOUT, ipc::recv_async::<FromWorker>(&mut frames)).await;
        match ready {
            Ok(Ok((FromWorker::Ready { enforcement, .. }, _))) => {
                let pool = self.pool(mode);
                {
                    let mut state = pool.state();
                    state.enforcement = Some(enforcement);
                    state.live += 1;
                }
                tokio::spawn(self.clone().drive(mode, Worker { pid, frames }));
                self.changed.notify_waiters();
                tracing::debug!(mode = mode.as_str(), pid, "worker registered");
            }
            _ => {
                tracing::error!(mode = mode.as_str(), pid, "worker did not report ready; killing it");
                self.kill(pid);
            }
        }
    }

    /// The supervisor will not (or no longer) serve `mode`: queued calls fail at once.
    pub fn mark_unavailable(&self, mode: Mode, reason: String) {
        let pool = self.pool(mode);
        let waiters = {
            let mut state = pool.state();
            state.unavailable = Some(reason);
            state.waiting.drain()
        };
        // Dropped senders wake their callers, who then read the reason.
        drop(waiters);
        self.changed.notify_waiters();
    }

    /// Too many workers of `mode` are stuck where no kill reaches them: its calls fail fast
    /// (instead of waiting for workers that will not come) until the supervisor says otherwise.
    pub fn mark_stuck(&self, mode: Mode, abandoned: usize) {
        self.pool(mode).state().stuck = Some(abandoned);
        self.mark_unavailable(
            mode,
            format!("{abandoned} of its workers are stuck in the filesystem and were abandoned"),
        );
    }

    /// The supervisor serves `mode` again (abandoned workers finally exited).
    pub fn mark_available(&self, mode: Mode) {
        let pool = self.pool(mode);
        {
            let mut state = pool.state();
            state.unavailable = None;
            state.stuck = None;
        }
        self.changed.notify_waiters();
    }

    /// Resolves at the next registration or availability change of any mode (once enabled or
    /// first polled).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Waits until every mode in `modes` has its `workers` or was given up, so the first call
    /// and the first hello see the pools as they will be.
    pub async fn wait_ready(&self, modes: &[Mode], workers: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        for &mode in modes {
            let pool = self.pool(mode);
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                {
                    let state = pool.state();
                    if state.live >= workers || state.unavailable.is_some() {
                        break;
                    }
                }
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    tracing::warn!(mode = mode.as_str(), "no worker ready yet; serving anyway");
                    break;
                }
            }
        }
    }

    pub fn report(&self) -> Vec<ModeReport> {
        [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|mode| {
                let state = self.pool(mode).state();
                ModeReport {
                    mode,
                    live_workers: state.live,
                    enforcement: state.enforcement.clone(),
                    unavailable: state.unavailable.clone(),
                }
            })
            .collect()
    }

    fn kill(&self, pid: u32) {
        if self.control.send(ControlRequest::Kill { pid }).is_err() {
            tracing::error!(pid, "cannot ask the supervisor to kill a worker: it is gone");
        }
    }

    fn unavailable(mode: Mode, path: &str, state: &PoolState) -> WireError {
        let reason = state.unavailable.as_deref().unwrap_or("its workers are gone");
        if let Some(abandoned) = state.stuck {
            // Not a fence decision: the mode is down; the call ran nowhere.
            let message = format!("{} mode is not serving: {reason}", mode.as_str());
            return failure(ErrorCode::IoError, path, &message)
                .with("reason", "mode_stuck")
                .with("mode", mode.as_str())
                .with("abandoned_workers", abandoned.to_string());
        }
        let message = format!("{} mode is not served by this daemon: {reason}", mode.as_str());
        failure(ErrorCode::SandboxDenied, path, &message)
            .with("reason", "mode_unserved")
            .with("mode", mode.as_str())
    }

    /// A final reply of the wrong kind, which [`Expect`] already refused: unreachable.
    fn mismatched(path: &str) -> WireError {
        failure(ErrorCode::IoError, path, "unexpected reply").with("reason", "unexpected_reply")
    }

    /// Serves `worker`'s calls in turn until it fails mid-call. The exchange runs here, not in
    /// the caller's task: a caller that goes away cannot leave a worker mid-call.
    ///
    /// Behind a read the worker is running, the next queued calls (up to [`READS_AHEAD`]) are
    /// sent at once while they are reads too and no other worker is idle, so the worker finds
    /// the next one waiting instead of sleeping until its reply has been taken. Only reads:
    /// they take no locks (a worker waiting for a lock grant must not find a call in its socket
    /// instead), and if the worker hangs and its kill does not land, a read it may still run
    /// later changes nothing. Calls sent but not begun when their worker is lost are queued
    /// again, first in their identity's turn.
    async fn drive(self: Arc<Self>, mode: Mode, mut worker: Worker) {
        let pool = self.pool(mode).clone();
        // Sent and not yet answered, oldest first: the one the worker runs, then the reads
        // sent ahead of it.
        let mut sent: VecDeque<Sent> = VecDeque::with_capacity(READS_AHEAD + 1);
        loop {
            if sent.is_empty() {
                let job = pool.next_job().await;
                let result = Dispatcher::send(&worker, &job).await;
                sent.push_back(Sent::Job(job));
                if let Err(lost) = result {
                    self.lose(mode, worker, lost, sent);
                    return;
                }
            }
            let recalled = sent.iter().any(|s| matches!(s, Sent::Recalled(_)));
            // With a deadline this short, a stuck worker is dropped about as soon as it would
            // be found slow: nothing is sent ahead of it.
            while !recalled
                && self.deadline > 2 * AHEAD_PATIENCE
                && sent.len() <= READS_AHEAD
                && sent[0].is_read()
                && let Some(next) = pool.next_read()
            {
                let result = Dispatcher::send(&worker, &next).await;
                sent.push_back(Sent::Job(next));
                if let Err(lost) = result {
                    self.lose(mode, worker, lost, sent);
                    return;
                }
            }
            let expect = sent[0].expect();
            let answer = if sent.len() > 1 && !recalled {
                // Reads sent ahead wait only so long for a worker that may be stuck. The call it
                // runs is a read, which takes no locks, so the answer is dropped, if at all,
                // while it receives, which is cancel-safe (a frame half-read stays in
                // `worker.frames`); the call's deadline goes on.
                let patient = self.answer(mode, &mut worker, expect, self.deadline);
                match tokio::time::timeout(AHEAD_PATIENCE, patient).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        Dispatcher::recall(&pool, &mut sent);
                        let rest = self.deadline.saturating_sub(AHEAD_PATIENCE);
                        self.answer(mode, &mut worker, expect, rest).await
                    }
                }
            } else {
                self.answer(mode, &mut worker, expect, self.deadline).await
            };
            match answer {
                Ok(answer) => {
                    if let Some(Sent::Job(job)) = sent.pop_front() {
                        // Our copy of an upload's pipe closes now: its sender sees EPIPE.
                        drop(job.body);
                        // A caller cancelled after the call was taken no longer listens.
                        let _ = job.answer.send(Ok(answer));
                    }
                }
                Err(lost) => {
                    self.lose(mode, worker, lost, sent);
                    return;
                }
            }
        }
    }

    /// The worker has not answered the call it runs within [`AHEAD_PATIENCE`]: it may be stuck
    /// (a dead network filesystem), so the reads sent ahead of it go back to the queue for
    /// another worker. This one still has them in its socket; it runs them (a read changes
    /// nothing) and their replies are dropped.
    fn recall(pool: &Pool, sent: &mut VecDeque<Sent>) {
        let mut recalled = Vec::new();
        for slot in sent.iter_mut().skip(1) {
            let expect = slot.expect();
            if let Sent::Job(job) = std::mem::replace(slot, Sent::Recalled(expect)) {
                recalled.push(job);
            }
        }
        for job in recalled.into_iter().rev() {
            pool.requeue(job);
        }
    }

    /// `worker` failed mid-call: the call it was running gets `lost`, the calls sent behind it
    /// (not begun: a worker runs one call at a time) go back to the queue in their order, and
    /// the worker is discarded.
    fn lose(&self, mode: Mode, worker: Worker, lost: Lost, mut sent: VecDeque<Sent>) {
        if let Some(Sent::Job(job)) = sent.pop_front() {
            let _ = job.answer.send(Err(lost));
        }
        let pool = self.pool(mode);
        for slot in sent.into_iter().rev() {
            if let Sent::Job(job) = slot {
                pool.requeue(job);
            }
        }
        self.discard(mode, worker);
    }

    /// A worker that failed mid-call is gone for good: the supervisor kills (or abandons) and
    /// replaces it.
    fn discard(&self, mode: Mode, worker: Worker) {
        {
            let mut state = self.pool(mode).state();
            state.live = state.live.saturating_sub(1);
        }
        self.kill(worker.pid);
    }

    async fn send(worker: &Worker, job: &Job) -> Result<(), Lost> {
        use std::os::fd::AsFd;
        let fd = job.body.as_ref().map(|b| b.as_fd());
        ipc::send_async(&worker.frames, &job.message, fd)
            .await
            .map_err(|e| Lost("send_failed", format!("send: {e}")))
    }

    /// Serves the worker's lock requests for the call it runs until its final reply; the first
    /// message is due within `first` (the deadline, or what is left of it), each later one
    /// restarts the deadline.
    async fn answer(&self, mode: Mode, worker: &mut Worker, expect: Expect, first: Duration) -> Answer {
        let mut held = None;
        let mut wait = first;
        loop {
            let received =
                match tokio::time::timeout(wait, ipc::recv_async::<FromWorker>(&mut worker.frames)).await {
                    Ok(received) => received,
                    Err(_) => Err(IpcError::TimedOut),
                };
            wait = self.deadline;
            match received {
                Ok((FromWorker::Lock { keys }, _)) => {
                    // Waiting for another call's lock is not the worker's time: the deadline
                    // restarts once the grant is sent.
                    held = Some(self.locks.lock(&keys).await);
                    if ipc::send_async(&worker.frames, &ToWorker::LockGranted, None).await.is_err() {
                        return Err(Lost("lock_wait", "gone while waiting for a lock".into()));
                    }
                }
                // A streamed write in progress: the deadline restarts.
                Ok((FromWorker::Progress { .. }, _)) => {}
                Ok((reply, fd)) => {
                    drop(held);
                    return expect
                        .accept(reply, fd)
                        .ok_or_else(|| Lost("unexpected_message", "unexpected message".into()));
                }
                Err(IpcError::TimedOut) => {
                    tracing::error!(
                        pid = worker.pid,
                        mode = mode.as_str(),
                        "call overran its deadline; killing the worker"
                    );
                    return Err(Lost("deadline", "deadline passed; worker killed".into()));
                }
                Err(e) => return Err(Lost("died", format!("died: {e}"))),
            }
        }
    }

    /// Queues one call for a worker of `mode`, fairly among `identity`'s peers, and waits for
    /// its final reply: up to the deadline for a worker to take it, then as long as the
    /// exchange runs (which has a deadline of its own). A call put back in the queue (sent ahead
    /// of a worker that stopped answering) is given up at the next deadline it is still queued.
    async fn run(
        &self,
        mode: Mode,
        identity: &str,
        path: &str,
        message: ToWorker,
        body: Option<OwnedFd>,
        expect: Expect,
    ) -> Result<Final, WireError> {
        let pool = self.pool(mode);
        let claim = Arc::new(Claim::default());
        let (tx, rx) = oneshot::channel();
        {
            let mut state = pool.state();
            if state.unavailable.is_some() {
                return Err(Dispatcher::unavailable(mode, path, &state));
            }
            let room = self.max_queued + state.idle;
            if state.waiting.len() >= room {
                state.waiting.retain(|job| job.claim.queued());
                if state.waiting.len() >= room {
                    let refusal = crate::budget::Refusal {
                        budget: crate::budget::Budget::CallsInFlight,
                        retry_after: QUEUE_FULL_RETRY,
                    };
                    return Err(refusal.into_wire(path).with("queue", mode.as_str()));
                }
            }
            let job = Job {
                identity: identity.to_owned(),
                put_back: false,
                message,
                body,
                expect,
                claim: claim.clone(),
                answer: tx,
            };
            state.waiting.push(identity, job);
        }
        pool.work.notify_one();
        let mut queued = Queued { claim, answer: rx, pool };
        let answer = loop {
            match tokio::time::timeout(self.deadline, &mut queued.answer).await {
                Ok(answer) => break answer,
                Err(_) if queued.give_up() => {
                    return Err(failure(ErrorCode::Aborted, path, "queue: no free worker by the deadline")
                        .with("reason", "no_free_worker"));
                }
                // A driver has the call: its exchange answers within its own deadline, unless
                // it puts the call back, which the next round sees.
                Err(_) => {}
            }
        };
        match answer {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Lost(lost, what))) => {
                Err(failure(ErrorCode::Aborted, path, &format!("worker lost: {what}"))
                    .with("reason", "worker_lost")
                    .with("lost", lost))
            }
            // The queue was emptied: the mode stopped being served.
            Err(_) => Err(Dispatcher::unavailable(mode, path, &pool.state())),
        }
    }

    /// Runs one operation in a worker of `mode`, queued fairly among `identity`'s peers.
    pub async fn call(&self, mode: Mode, identity: &str, request: Request) -> Result<Outcome, WireError> {
        let path = request.path().to_owned();
        let message = ToWorker::Call(request);
        match self.run(mode, identity, &path, message, None, Expect::Reply).await? {
            Final::Reply(result) => result.map_err(|remote| remote.into_wire()),
            Final::Stream(..) => Err(Dispatcher::mismatched(&path)),
        }
    }

    /// Runs one operation whose body arrives on `body` (the read end of a pipe) in a worker of
    /// `mode` (`Request::WriteBytes`).
    pub async fn call_with_body(
        &self,
        mode: Mode,
        identity: &str,
        request: Request,
        body: OwnedFd,
    ) -> Result<Outcome, WireError> {
        let path = request.path().to_owned();
        let message = ToWorker::Call(request);
        match self.run(mode, identity, &path, message, Some(body), Expect::Reply).await? {
            Final::Reply(result) => result.map_err(|remote| remote.into_wire()),
            Final::Stream(..) => Err(Dispatcher::mismatched(&path)),
        }
    }

    /// Opens a file for a streamed read in a worker of `mode`; the read itself happens here, on
    /// the descriptor the worker opened under its fence.
    pub async fn open_stream(
        &self,
        mode: Mode,
        identity: &str,
        path: &str,
    ) -> Result<(StreamHeader, File), WireError> {
        let message = ToWorker::OpenStream { path: path.to_owned() };
        match self.run(mode, identity, path, message, None, Expect::Stream).await? {
            Final::Stream(Ok(header), Some(fd)) => Ok((header, File::from(fd))),
            Final::Stream(Ok(_), None) => {
                Err(failure(ErrorCode::IoError, path, "no descriptor").with("reason", "no_descriptor"))
            }
            Final::Stream(Err(remote), _) => Err(remote.into_wire()),
            Final::Reply(_) => Err(Dispatcher::mismatched(path)),
        }
    }
}
