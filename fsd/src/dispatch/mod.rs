//! The network process's side of the workers, all on its tokio runtime: per-mode pools of worker
//! connections spoken to with non-blocking socket I/O (frames and descriptors), a bounded fair
//! queue of calls per mode (`queue`, in the mode's `pool`) that each worker's `driver` task
//! takes its next call from, the per-target locks that hold across every worker of every mode
//! (`locks`), per-call deadlines (a worker that overruns is reported to the supervisor, which
//! kills or abandons it; only its call fails), streamed reads (`stream`) and the threads that
//! do CPU work on whole files for the service (`cpu`). No call holds a thread while it waits. Here: registering workers, the modes' availability, and queueing a
//! call and waiting for its answer.

pub mod cpu;
pub mod direct;
mod driver;
mod inline;
mod locks;
mod pool;
mod queue;
pub mod stream;
mod threads;
mod uploads;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use fsd_proto::{ErrorCode, Reason, WireError};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::ipc_messages::{self, ControlRequest, FromWorker, ToWorker};
use crate::op::{Mode, Outcome, Request, StreamHeader};
use crate::sys::ipc::AsyncFrames;
use driver::Worker;
use locks::AsyncLocks;
use pool::{Claim, Expect, Final, Job, Lost, Pool, PoolState, Queued};

/// How long a new worker may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// What a caller refused by a full mode queue is told to wait.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(50);

/// What hello and health report about one mode.
#[derive(Debug, Clone)]
pub struct ModeReport {
    pub mode: Mode,
    pub live_workers: usize,
    pub enforcement: Option<String>,
    pub unavailable: Option<String>,
}

/// All pools, the lock table, the reader pool of streams, the CPU pool and the line to the
/// supervisor.
#[derive(Debug)]
pub struct Dispatcher {
    pools: HashMap<Mode, Arc<Pool>>,
    /// The workers of each mode that uploads may hold (`uploads`).
    uploads: HashMap<Mode, uploads::Uploads>,
    locks: AsyncLocks,
    deadline: Duration,
    max_queued: usize,
    control: mpsc::UnboundedSender<(ControlRequest, Option<OwnedFd>)>,
    readers: stream::Readers,
    cpu: cpu::Cpu,
    /// Plain reads served in this process (`direct`), when it serves.
    direct: direct::Direct,
    /// Woken on every registration and availability change.
    changed: Arc<Notify>,
    /// The locks of transactions whose worker was lost mid-call, kept until the supervisor has
    /// recovered them (`locks::Parked`).
    parked: locks::Parked,
}

fn failure(code: ErrorCode, path: &str, message: &str) -> WireError {
    WireError::new(code, path, message)
}

impl Dispatcher {
    /// `control`: requests to the supervisor (kill a worker), sent by the control task.
    pub fn new(
        deadline: Duration,
        (max_queued, workers_per_mode): (usize, usize),
        control: mpsc::UnboundedSender<(ControlRequest, Option<OwnedFd>)>,
        readers: stream::Readers,
        cpu: cpu::Cpu,
        direct: direct::Direct,
    ) -> Dispatcher {
        let pools = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|m| (m, Arc::new(Pool::default())))
            .collect();
        let uploads = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|m| (m, uploads::Uploads::new(workers_per_mode)))
            .collect();
        let changed = Arc::new(Notify::new());
        direct.notify(changed.clone());
        Dispatcher {
            pools,
            uploads,
            locks: AsyncLocks::default(),
            parked: locks::Parked::default(),
            deadline,
            max_queued,
            control,
            readers,
            cpu,
            direct,
            changed,
        }
    }

    fn pool(&self, mode: Mode) -> &Arc<Pool> {
        // Every mode has a pool from construction on.
        &self.pools[&mode]
    }

    pub fn readers(&self) -> &stream::Readers {
        &self.readers
    }

    pub fn cpu(&self) -> &cpu::Cpu {
        &self.cpu
    }

    /// The direct read path, for hello, health and its test hook.
    pub fn direct(&self) -> &direct::Direct {
        &self.direct
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
        let ready =
            tokio::time::timeout(READY_TIMEOUT, ipc_messages::recv_async::<FromWorker>(&mut frames)).await;
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

    /// The supervisor recovered worker `pid`'s transaction (if it was running one): the locks
    /// kept for it go.
    pub fn recovered(&self, pid: u32) {
        self.parked.recovered(pid);
    }

    fn kill(&self, pid: u32) {
        if self.control.send((ControlRequest::Kill { pid }, None)).is_err() {
            tracing::error!(pid, "cannot ask the supervisor to kill a worker: it is gone");
        }
    }

    /// Passes a temporary file a worker could not remove on to the supervisor.
    fn stranded(&self, stranded: ipc_messages::Stranded, dir: Option<OwnedFd>) {
        if dir.is_none() {
            tracing::warn!(?stranded, "a worker reported a stranded file without its directory");
            return;
        }
        if self.control.send((ControlRequest::RemoveStranded(stranded), dir)).is_err() {
            tracing::error!("cannot ask the supervisor to remove a stranded file: it is gone");
        }
    }

    fn unavailable(mode: Mode, path: &str, state: &PoolState) -> WireError {
        let reason = state.unavailable.as_deref().unwrap_or("its workers are gone");
        if let Some(abandoned) = state.stuck {
            // Not a fence decision: the mode is down; the call ran nowhere.
            let message = format!("{} mode is not serving: {reason}", mode.as_str());
            return failure(ErrorCode::IoError, path, &message)
                .with_reason(Reason::ModeStuck)
                .with("mode", mode.as_str())
                .with("abandoned_workers", abandoned.to_string());
        }
        let message = format!("{} mode is not served by this daemon: {reason}", mode.as_str());
        failure(ErrorCode::SandboxDenied, path, &message)
            .with_reason(Reason::ModeUnserved)
            .with("mode", mode.as_str())
    }

    /// A final reply of the wrong kind, which [`Expect`] already refused: unreachable.
    fn mismatched(path: &str) -> WireError {
        failure(ErrorCode::IoError, path, "unexpected reply").with_reason(Reason::UnexpectedReply)
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
            // A caller that gives up takes its call out at once (`Queued::give_up`): what is
            // queued is waited for.
            if state.waiting.len() >= self.max_queued + state.idle {
                let refusal = crate::budget::Refusal {
                    budget: crate::budget::Budget::CallsInFlight,
                    retry_after: QUEUE_FULL_RETRY,
                };
                return Err(refusal.into_wire(path).with("queue", mode.as_str()));
            }
            let job = Job {
                identity: identity.to_owned(),
                put_back: false,
                undelivered: 0,
                message,
                body,
                expect,
                claim: claim.clone(),
                answer: tx,
            };
            state.waiting.push(identity, job);
        }
        pool.work.notify_one();
        let queued_at = crate::traces::on().then(std::time::Instant::now);
        let mut queued = Queued { claim, answer: rx, pool };
        let answer = loop {
            match tokio::time::timeout(self.deadline, &mut queued.answer).await {
                Ok(answer) => break answer,
                Err(_) if queued.give_up() => {
                    return Err(failure(ErrorCode::Aborted, path, "queue: no free worker by the deadline")
                        .with_reason(Reason::NoFreeWorker));
                }
                // A driver has the call: its exchange answers within its own deadline, unless
                // it puts the call back, which the next round sees.
                Err(_) => {}
            }
        };
        if let Some(queued_at) = queued_at {
            crate::traces::dispatched(mode, queued_at, queued.claim.taken_at(), std::time::Instant::now());
        }
        match answer {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Lost(lost, what))) => {
                Err(failure(ErrorCode::Aborted, path, &format!("worker lost: {what}"))
                    .with_reason(Reason::WorkerLost)
                    .with_word(lost))
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
            Final::Reply(result) => result,
            Final::Stream(..) => Err(Dispatcher::mismatched(&path)),
        }
    }

    /// Runs a call that is neither escalated nor a mutation: a plain read runs in this process
    /// when the direct path serves its mode (`direct`), anything else in a worker of `mode`.
    pub async fn read(&self, mode: Mode, identity: &str, request: Request) -> Result<Outcome, WireError> {
        let request = match self.direct.call(mode, request).await {
            direct::Served::Here { result, tripped } => {
                if tripped {
                    self.changed.notify_waiters();
                }
                return result;
            }
            direct::Served::NotHere(request) => request,
        };
        self.call(mode, identity, request).await
    }

    /// Opens a plain (not escalated) streamed read: in this process when the direct path serves
    /// `mode`, else in a worker.
    pub async fn open_read_stream(
        &self,
        mode: Mode,
        identity: &str,
        path: &str,
    ) -> Result<(StreamHeader, File), WireError> {
        if let Some((result, tripped)) = self.direct.open_stream(mode, path).await {
            if tripped {
                self.changed.notify_waiters();
            }
            return result;
        }
        let plain = crate::op::Request::ReadText { path: path.to_owned(), max_bytes: 0 };
        self.open_stream(mode, identity, path, crate::op::Unbound::plain(plain)).await
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
        // A place among the workers uploads may hold, under the call's deadline; the body waits
        // in its pipe meanwhile.
        let uploads = &self.uploads[&mode];
        let Ok(_place) = tokio::time::timeout(self.deadline, uploads.enter(identity)).await else {
            return Err(failure(ErrorCode::Aborted, &path, "queue: no free worker by the deadline")
                .with_reason(fsd_proto::Reason::NoFreeWorker));
        };
        let message = ToWorker::Call(request);
        match self.run(mode, identity, &path, message, Some(body), Expect::Reply).await? {
            Final::Reply(result) => result,
            Final::Stream(..) => Err(Dispatcher::mismatched(&path)),
        }
    }

    /// Opens a file for a streamed read in a worker of `mode`; the read itself happens here, on
    /// the descriptor the worker opened under its fence.
    /// `approved`: for an approved read, the object its approval binds, what the approver
    /// signed (the worker checks it) and whom it is for.
    pub async fn open_stream(
        &self,
        mode: Mode,
        identity: &str,
        path: &str,
        approved: crate::op::Unbound,
    ) -> Result<(StreamHeader, File), WireError> {
        let crate::op::Unbound { bindings, approval, requester, .. } = approved;
        let message = ToWorker::OpenStream { path: path.to_owned(), bindings, approval, requester };
        match self.run(mode, identity, path, message, None, Expect::Stream).await? {
            Final::Stream(Ok(header), Some(fd)) => Ok((header, File::from(fd))),
            Final::Stream(Ok(_), None) => {
                Err(failure(ErrorCode::IoError, path, "no descriptor").with_reason(Reason::NoDescriptor))
            }
            Final::Stream(Err(wire), _) => Err(wire),
            Final::Reply(_) => Err(Dispatcher::mismatched(path)),
        }
    }
}
