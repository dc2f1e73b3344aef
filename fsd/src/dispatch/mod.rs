//! The network process's side of the workers, all on its tokio runtime: per-mode pools of worker
//! connections spoken to with non-blocking socket I/O (frames and descriptors), a bounded fair
//! queue per mode in front of them (`queue`), the per-target locks that hold across every worker
//! of every mode (`locks`), per-call deadlines (a worker that overruns is reported to the
//! supervisor, which kills or abandons it; only its call fails), and streamed reads (`stream`).
//! No call holds a thread while it waits.

mod locks;
mod queue;
pub mod stream;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fsd_proto::{ErrorCode, WireError};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::backend::{Mode, Outcome, Request, StreamHeader};
use crate::ipc::{self, ControlRequest, FromWorker, IpcError, ToWorker};
use crate::sys::ipc::AsyncFrames;
use locks::AsyncLocks;
use queue::FairQueue;

/// How long a new worker may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// What a caller refused by a full mode queue is told to wait.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(50);

/// One live worker connection.
#[derive(Debug)]
struct Worker {
    pid: u32,
    frames: AsyncFrames,
}

/// The state of one mode's pool.
#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Worker>,
    /// Workers registered and not known dead (idle or busy).
    live: usize,
    /// How the fence is enforced, as the workers reported when ready.
    enforcement: Option<String>,
    /// Set when the supervisor gave up on this mode (or too many of its workers hang).
    unavailable: Option<String>,
    /// Set while too many of this mode's workers are abandoned (stuck in the kernel): how many.
    stuck: Option<usize>,
    /// Calls waiting for a worker, per identity.
    waiting: FairQueue<oneshot::Sender<Worker>>,
}

#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker is free: the next identity in turn gets it, or it waits idle.
    fn checkin(&self, mut worker: Worker) {
        let mut state = self.state();
        while let Some(waiter) = state.waiting.pop() {
            match waiter.send(worker) {
                Ok(()) => return,
                // That caller gave up (deadline, cancelled): the next one.
                Err(back) => worker = back,
            }
        }
        state.idle.push(worker);
    }
}

/// A caller's place in a mode's queue. Dropped before a worker arrived (the caller timed out
/// or was cancelled), it hands back a worker that was sent meanwhile, so none is lost.
struct Waiting {
    rx: oneshot::Receiver<Worker>,
    pool: Arc<Pool>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok(worker) = self.rx.try_recv() {
            self.pool.checkin(worker);
        }
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
    pub async fn add_worker(&self, mode: Mode, pid: u32, socket: UnixStream) {
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
                pool.checkin(Worker { pid, frames });
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

    /// Takes a worker of `mode` for `identity`, waiting in the fair queue up to the deadline.
    async fn checkout(&self, mode: Mode, identity: &str, path: &str) -> Result<Worker, WireError> {
        let pool = self.pool(mode);
        let rx = {
            let mut state = pool.state();
            if state.unavailable.is_some() {
                return Err(Dispatcher::unavailable(mode, path, &state));
            }
            if let Some(worker) = state.idle.pop() {
                return Ok(worker);
            }
            if state.waiting.len() >= self.max_queued {
                state.waiting.retain(|w| !w.is_closed());
                if state.waiting.len() >= self.max_queued {
                    let refusal = crate::budget::Refusal {
                        budget: crate::budget::Budget::CallsInFlight,
                        retry_after: QUEUE_FULL_RETRY,
                    };
                    return Err(refusal.into_wire(path).with("queue", mode.as_str()));
                }
            }
            let (tx, rx) = oneshot::channel();
            state.waiting.push(identity, tx);
            rx
        };
        let mut waiting = Waiting { rx, pool: pool.clone() };
        match tokio::time::timeout(self.deadline, &mut waiting.rx).await {
            Ok(Ok(worker)) => Ok(worker),
            Ok(Err(_)) => Err(Dispatcher::unavailable(mode, path, &pool.state())),
            Err(_) => Err(failure(ErrorCode::Aborted, path, "queue: no free worker by the deadline")
                .with("reason", "no_free_worker")),
        }
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

    /// Sends one message and serves the worker's lock requests until `done` accepts a reply.
    async fn exchange<T>(
        &self,
        mode: Mode,
        worker: &mut Worker,
        message: &ToWorker,
        body: Option<OwnedFd>,
        mut done: impl FnMut(FromWorker, Option<OwnedFd>) -> Option<T>,
    ) -> Result<T, Lost> {
        use std::os::fd::AsFd;
        if let Err(e) = ipc::send_async(&worker.frames, message, body.as_ref().map(|b| b.as_fd())).await {
            return Err(Lost("send_failed", format!("send: {e}")));
        }
        let mut held = None;
        loop {
            let received =
                match tokio::time::timeout(self.deadline, ipc::recv_async::<FromWorker>(&mut worker.frames))
                    .await
                {
                    Ok(received) => received,
                    Err(_) => Err(IpcError::TimedOut),
                };
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
                    let result = done(reply, fd);
                    drop(held);
                    // Our copy of an upload's pipe closes now: its sender sees EPIPE.
                    drop(body);
                    return result.ok_or_else(|| Lost("unexpected_message", "unexpected message".into()));
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

    /// Runs one exchange on a worker of `mode`. Once a worker has the call, the exchange runs
    /// in its own task: a caller that goes away cannot leave a worker mid-call.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        path: &str,
        message: ToWorker,
        body: Option<OwnedFd>,
        done: impl FnMut(FromWorker, Option<OwnedFd>) -> Option<T> + Send + 'static,
    ) -> Result<T, WireError> {
        let mut worker = self.checkout(mode, identity, path).await?;
        let dispatcher = self.clone();
        let task = tokio::spawn(async move {
            let result = dispatcher.exchange(mode, &mut worker, &message, body, done).await;
            match result {
                Ok(value) => {
                    dispatcher.pool(mode).checkin(worker);
                    Ok(value)
                }
                Err(lost) => {
                    dispatcher.discard(mode, worker);
                    Err(lost)
                }
            }
        });
        match task.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Lost(lost, what))) => {
                Err(failure(ErrorCode::Aborted, path, &format!("worker lost: {what}"))
                    .with("reason", "worker_lost")
                    .with("lost", lost))
            }
            Err(e) => Err(failure(ErrorCode::IoError, path, &format!("dispatch task failed: {e}"))
                .with("reason", "dispatch_failed")),
        }
    }

    /// Runs one operation in a worker of `mode`, queued fairly among `identity`'s peers.
    pub async fn call(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        request: Request,
    ) -> Result<Outcome, WireError> {
        let path = request.path().to_owned();
        let message = ToWorker::Call(request);
        self.run(mode, identity, &path, message, None, |reply, _| match reply {
            FromWorker::Reply(result) => Some(result),
            _ => None,
        })
        .await?
        .map_err(|remote| remote.into_wire())
    }

    /// Runs one operation whose body arrives on `body` (the read end of a pipe) in a worker of
    /// `mode` (`Request::WriteBytes`).
    pub async fn call_with_body(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        request: Request,
        body: OwnedFd,
    ) -> Result<Outcome, WireError> {
        let path = request.path().to_owned();
        let message = ToWorker::Call(request);
        self.run(mode, identity, &path, message, Some(body), |reply, _| match reply {
            FromWorker::Reply(result) => Some(result),
            _ => None,
        })
        .await?
        .map_err(|remote| remote.into_wire())
    }

    /// Opens a file for a streamed read in a worker of `mode`; the read itself happens here, on
    /// the descriptor the worker opened under its fence.
    pub async fn open_stream(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        path: &str,
    ) -> Result<(StreamHeader, File), WireError> {
        let message = ToWorker::OpenStream { path: path.to_owned() };
        let owned = path.to_owned();
        self.run(mode, identity, path, message, None, move |reply, fd| match reply {
            FromWorker::Stream(Ok(header)) => Some(fd.map(|fd| (header, File::from(fd))).ok_or_else(|| {
                failure(ErrorCode::IoError, &owned, "no descriptor").with("reason", "no_descriptor")
            })),
            FromWorker::Stream(Err(remote)) => Some(Err(remote.into_wire())),
            _ => None,
        })
        .await?
    }
}
