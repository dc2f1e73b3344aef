//! The network process's side of the workers: per-mode pools of worker connections, the
//! per-target locks that hold across every worker of every mode, per-call deadlines (a worker
//! that overruns is killed and replaced; only its call fails), and streamed-read descriptors.
//! Every function here blocks; the service calls them on tokio's blocking pool.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fsd_proto::{ErrorCode, WireError};

use crate::backend::{Mode, Outcome, Request, StreamHeader, TargetLocks};
use crate::ipc::{self, ControlRequest, FromWorker, IpcError, ToWorker};
use crate::sys::ipc::set_receive_deadline;

/// One live worker connection.
#[derive(Debug)]
struct Conn {
    pid: u32,
    socket: UnixStream,
}

/// The state of one mode's pool.
#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Conn>,
    /// Workers registered and not known dead (idle or busy).
    live: usize,
    /// How the fence is enforced, as the workers reported when ready.
    enforcement: Option<String>,
    /// Set when the supervisor gave up on this mode.
    unavailable: Option<String>,
}

#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
    ready: Condvar,
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What hello reports about one mode.
#[derive(Debug, Clone)]
pub struct ModeReport {
    pub mode: Mode,
    pub live_workers: usize,
    pub enforcement: Option<String>,
    pub unavailable: Option<String>,
}

/// All pools, the lock table and the line to the supervisor.
#[derive(Debug)]
pub struct Dispatcher {
    pools: HashMap<Mode, Pool>,
    locks: TargetLocks,
    deadline: Duration,
    control: Mutex<UnixStream>,
}

fn failure(code: ErrorCode, path: &str, message: &str) -> WireError {
    WireError::new(code, path, message)
}

impl Dispatcher {
    pub fn new(deadline: Duration, control: UnixStream) -> Dispatcher {
        let pools = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|m| (m, Pool::default()))
            .collect();
        Dispatcher { pools, locks: TargetLocks::default(), deadline, control: Mutex::new(control) }
    }

    fn pool(&self, mode: Mode) -> &Pool {
        // Every mode has a pool from construction on.
        &self.pools[&mode]
    }

    /// Registers a worker the supervisor started; it must first say it is ready.
    pub fn add_worker(&self, mode: Mode, pid: u32, socket: UnixStream) {
        let ready = set_receive_deadline(&socket, Some(Duration::from_secs(30)))
            .ok()
            .and_then(|()| ipc::recv::<FromWorker>(&socket).ok());
        match ready {
            Some((FromWorker::Ready { enforcement, .. }, _)) => {
                let pool = self.pool(mode);
                let mut state = pool.state();
                state.enforcement = Some(enforcement);
                state.live += 1;
                state.unavailable = None;
                state.idle.push(Conn { pid, socket });
                drop(state);
                pool.ready.notify_one();
                tracing::debug!(mode = mode.as_str(), pid, "worker registered");
            }
            _ => {
                tracing::error!(mode = mode.as_str(), pid, "worker did not report ready; killing it");
                self.kill(pid);
            }
        }
    }

    /// The supervisor will not start workers for `mode`.
    pub fn mark_unavailable(&self, mode: Mode, reason: String) {
        let pool = self.pool(mode);
        pool.state().unavailable = Some(reason);
        pool.ready.notify_all();
    }

    /// Waits until every mode in `modes` has its `workers` or was given up, so the first call
    /// and the first hello see the pools as they will be.
    pub fn wait_ready(&self, modes: &[Mode], workers: usize, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        for &mode in modes {
            let pool = self.pool(mode);
            let mut state = pool.state();
            while state.live < workers && state.unavailable.is_none() {
                let now = std::time::Instant::now();
                if now >= deadline {
                    tracing::warn!(mode = mode.as_str(), "no worker ready yet; serving anyway");
                    break;
                }
                state =
                    pool.ready.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
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
        let control = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = ipc::send(&control, &ControlRequest::Kill { pid }, None) {
            tracing::error!(pid, error = %e, "cannot ask the supervisor to kill a worker");
        }
    }

    /// Takes an idle worker of `mode`, waiting for one up to the deadline.
    fn checkout(&self, mode: Mode, path: &str) -> Result<Conn, WireError> {
        let pool = self.pool(mode);
        let mut state = pool.state();
        let deadline = std::time::Instant::now() + self.deadline;
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if let Some(reason) = &state.unavailable {
                let message = format!("{} mode is not served by this daemon: {reason}", mode.as_str());
                return Err(failure(ErrorCode::SandboxDenied, path, &message).with("mode", mode.as_str()));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(failure(
                    ErrorCode::Aborted,
                    path,
                    "no worker became free before the call's deadline",
                ));
            }
            state = pool.ready.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn checkin(&self, mode: Mode, conn: Conn) {
        let pool = self.pool(mode);
        pool.state().idle.push(conn);
        pool.ready.notify_one();
    }

    /// A worker that failed mid-call is gone for good: kill it (the supervisor replaces it).
    fn discard(&self, mode: Mode, conn: Conn) {
        let pool = self.pool(mode);
        {
            let mut state = pool.state();
            state.live = state.live.saturating_sub(1);
        }
        self.kill(conn.pid);
    }

    /// Sends one message and serves the worker's lock requests until `done` accepts a reply.
    fn exchange<T>(
        &self,
        mode: Mode,
        path: &str,
        message: &ToWorker,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
        mut done: impl FnMut(FromWorker, Option<std::os::fd::OwnedFd>) -> Option<T>,
    ) -> Result<T, WireError> {
        let conn = self.checkout(mode, path)?;
        let lost = |conn: Conn, what: &str| {
            let code = ErrorCode::Aborted;
            let message = format!("{what}; the outcome is unknown");
            self.discard(mode, conn);
            failure(code, path, &message)
        };
        if let Err(e) = ipc::send(&conn.socket, message, fd) {
            return Err(lost(conn, &format!("the worker could not take the call ({e})")));
        }
        let mut held = None;
        loop {
            if set_receive_deadline(&conn.socket, Some(self.deadline)).is_err() {
                return Err(lost(conn, "the worker socket failed"));
            }
            match ipc::recv::<FromWorker>(&conn.socket) {
                Ok((FromWorker::Lock { keys }, _)) => {
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    // Waiting for another call's lock is not the worker's time: the deadline
                    // restarts once the grant is sent.
                    held = Some(self.locks.lock(&keys));
                    if ipc::send(&conn.socket, &ToWorker::LockGranted, None).is_err() {
                        return Err(lost(conn, "the worker went away while waiting for a lock"));
                    }
                }
                // A streamed write in progress: the deadline restarts.
                Ok((FromWorker::Progress { .. }, _)) => {}
                Ok((reply, fd)) => match done(reply, fd) {
                    Some(result) => {
                        drop(held);
                        self.checkin(mode, conn);
                        return Ok(result);
                    }
                    None => return Err(lost(conn, "the worker sent an unexpected message")),
                },
                Err(IpcError::TimedOut) => {
                    tracing::error!(
                        pid = conn.pid,
                        mode = mode.as_str(),
                        "call overran its deadline; killing the worker"
                    );
                    return Err(lost(conn, "the call exceeded its deadline and its worker was killed"));
                }
                Err(e) => return Err(lost(conn, &format!("the worker died ({e})"))),
            }
        }
    }

    /// Runs one operation in a worker of `mode`.
    pub fn call(&self, mode: Mode, request: Request, path: &str) -> Result<Outcome, WireError> {
        let message = ToWorker::Call(request);
        self.exchange(mode, path, &message, None, |reply, _| match reply {
            FromWorker::Reply(result) => Some(result),
            _ => None,
        })?
        .map_err(|remote| remote.into_wire())
    }

    /// Runs one operation whose body arrives on `body` (the read end of a pipe), in a worker
    /// of `mode`.
    pub fn call_with_body(
        &self,
        mode: Mode,
        request: Request,
        path: &str,
        body: std::os::fd::OwnedFd,
    ) -> Result<Outcome, WireError> {
        use std::os::fd::AsFd;
        let message = ToWorker::Call(request);
        let result = self.exchange(mode, path, &message, Some(body.as_fd()), |reply, _| match reply {
            FromWorker::Reply(result) => Some(result),
            _ => None,
        });
        // Our copy of the read end closes now: the sender sees EPIPE once the worker is done.
        drop(body);
        result?.map_err(|remote| remote.into_wire())
    }

    /// Opens a file for a streamed read in a worker of `mode`; the read itself happens here, on
    /// the descriptor the worker opened under its fence.
    pub fn open_stream(&self, mode: Mode, path: &str) -> Result<(StreamHeader, File), WireError> {
        let message = ToWorker::OpenStream { path: path.to_owned() };

        self.exchange(mode, path, &message, None, |reply, fd| match reply {
            FromWorker::Stream(Ok(header)) => Some(
                fd.map(|fd| (header, File::from(fd)))
                    .ok_or_else(|| failure(ErrorCode::IoError, path, "the worker sent no descriptor")),
            ),
            FromWorker::Stream(Err(remote)) => Some(Err(remote.into_wire())),
            _ => None,
        })?
    }
}
