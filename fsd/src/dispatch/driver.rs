//! A worker's driver: the task that sends the worker its calls from the mode's queue, one at a
//! time and reads sent ahead of a read it runs, serves its lock requests, and answers each
//! call's caller; and what happens to the calls when the worker stops answering or is lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::Dispatcher;
use super::pool::{Answer, Expect, Job, Lost, Pool};
use fsd_proto::WorkerLost;

use crate::ipc_messages::{self, FromWorker, IpcError, ToWorker};
use crate::op::Mode;
use crate::sys::ipc::AsyncFrames;

/// How many reads a driver sends behind the read its worker runs (see `Dispatcher::drive`):
/// with one, the worker still slept now and then before the next arrived; three made 64 stat
/// calls in flight ~10% faster again (`fsd-bench probe --in-flight 64`, alternating builds).
const READS_AHEAD: usize = 3;
/// How long reads sent ahead wait for the worker to answer the call it runs before they go to
/// another worker: far above a healthy read, far below a call's deadline.
const AHEAD_PATIENCE: Duration = Duration::from_millis(50);

/// How many gone workers one call may be refused by before it is lost: as many as a mode may
/// have (`workers_per_mode` is at most 64), so killing them all at once loses no call.
const MAX_UNDELIVERED: u8 = 64;

/// One live worker connection.
#[derive(Debug)]
pub(super) struct Worker {
    pub(super) pid: u32,
    pub(super) frames: AsyncFrames,
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

    /// A transaction, whose locks outlive a lost worker (`locks::Parked`).
    fn is_transaction(&self) -> bool {
        matches!(self, Sent::Job(job) if matches!(&job.message, ToWorker::Call(request) if matches!(request.plain(), crate::op::Request::Transact { .. })))
    }

    fn is_read(&self) -> bool {
        match self {
            Sent::Job(job) => job.message.is_read(),
            // Only reads are sent ahead.
            Sent::Recalled(_) => true,
        }
    }
}

/// Why a call's frame did not go out.
#[derive(Debug)]
enum Refused {
    /// The socket refused it: the worker's end is closed.
    Gone(std::io::Error),
    /// It could not be encoded: no worker would take it.
    Unsendable(IpcError),
}

impl Refused {
    fn lost(self) -> Lost {
        let detail = match self {
            Refused::Gone(e) => e.to_string(),
            Refused::Unsendable(e) => e.to_string(),
        };
        Lost(WorkerLost::SendFailed, format!("send: {detail}"))
    }
}

impl Dispatcher {
    /// Serves `worker`'s calls in turn until it fails mid-call. The exchange runs here, not in
    /// the caller's task: a caller that goes away cannot leave a worker mid-call.
    ///
    /// Behind a read the worker is running, the next queued calls (up to [`READS_AHEAD`]) are
    /// sent at once while they are reads too and no other worker is idle, so the worker finds
    /// the next one waiting instead of sleeping until its reply has been taken. Only reads:
    /// they take no locks (a worker waiting for a lock grant must not find a call in its socket
    /// instead), and if the worker hangs and its kill does not land, a read it may still run
    /// later changes nothing. Reads sent ahead of a worker that has not answered within
    /// [`AHEAD_PATIENCE`], and calls sent but not begun when their worker is lost, are queued
    /// again, first in their identity's turn.
    pub(super) async fn drive(self: Arc<Self>, mode: Mode, mut worker: Worker) {
        let pool = self.pool(mode).clone();
        // Sent and not yet answered, oldest first: the one the worker runs, then the reads
        // sent ahead of it.
        let mut sent: VecDeque<Sent> = VecDeque::with_capacity(READS_AHEAD + 1);
        loop {
            if sent.is_empty() {
                let job = pool.next_job().await;
                if let Err(refused) = Dispatcher::send(&worker, &job).await {
                    self.undelivered(mode, worker, job, refused);
                    return;
                }
                sent.push_back(Sent::Job(job));
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
                if let Err(refused) = result {
                    self.lose(mode, worker, refused.lost(), sent);
                    return;
                }
            }
            let expect = sent[0].expect();
            let transaction = sent[0].is_transaction();
            let answer = if sent.len() > 1 && !recalled {
                // Reads sent ahead wait only so long for a worker that may be stuck. The call it
                // runs is a read, which takes no locks, so the answer is dropped, if at all,
                // while it receives, which is cancel-safe (a frame half-read stays in
                // `worker.frames`); the call's deadline goes on.
                let patient = self.answer(mode, &mut worker, (expect, transaction), self.deadline);
                match tokio::time::timeout(AHEAD_PATIENCE, patient).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        Dispatcher::recall(&pool, &mut sent);
                        let rest = self.deadline.saturating_sub(AHEAD_PATIENCE);
                        self.answer(mode, &mut worker, (expect, transaction), rest).await
                    }
                }
            } else {
                self.answer(mode, &mut worker, (expect, transaction), self.deadline).await
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

    /// The first call sent to an idle `worker` did not reach it. When the socket said the
    /// worker's end is closed (`Refused::Gone`), the worker never read the whole frame, so the
    /// call never ran: it goes back to the queue for another worker, unless its caller gave up
    /// meanwhile, and this worker is discarded (each refusal uses up a worker, which the
    /// supervisor replaces; after [`MAX_UNDELIVERED`] the call is lost). Without this, an idle
    /// worker killed by the OOM killer or an operator failed the next call with an unknown
    /// outcome.
    fn undelivered(&self, mode: Mode, worker: Worker, mut job: Job, refused: Refused) {
        match refused {
            Refused::Gone(_) if job.answer.is_closed() => self.discard(mode, worker),
            Refused::Gone(e) if job.undelivered < MAX_UNDELIVERED => {
                tracing::warn!(
                    pid = worker.pid,
                    mode = mode.as_str(),
                    %e,
                    "worker gone before it took a call; the call goes to another"
                );
                job.undelivered += 1;
                self.pool(mode).requeue(job);
                self.discard(mode, worker);
            }
            refused => self.lose(mode, worker, refused.lost(), VecDeque::from([Sent::Job(job)])),
        }
    }

    async fn send(worker: &Worker, job: &Job) -> Result<(), Refused> {
        use std::os::fd::AsFd;
        let fd = job.body.as_ref().map(|b| b.as_fd());
        ipc_messages::send_async(&worker.frames, &job.message, fd).await.map_err(|e| match e {
            // Only these say the worker's end is closed; a frame too large or a descriptor the
            // kernel would not pass says nothing about the worker.
            IpcError::Io(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE) | Some(libc::ECONNRESET) | Some(libc::ENOTCONN)
                ) =>
            {
                Refused::Gone(e)
            }
            other => Refused::Unsendable(other),
        })
    }

    /// Serves the worker's lock requests for the call it runs until its final reply; the first
    /// message is due within `first` (the deadline, or what is left of it), each later one
    /// restarts the deadline.
    async fn answer(
        &self,
        mode: Mode,
        worker: &mut Worker,
        (expect, transaction): (Expect, bool),
        first: Duration,
    ) -> Answer {
        let mut held = None;
        let answer = self.answer_holding(mode, worker, expect, first, &mut held).await;
        // A transaction's worker lost mid-call may have committed part of it: its targets stay
        // locked until the supervisor has rolled it back (or finished it).
        if answer.is_err()
            && transaction
            && let Some(held) = held
        {
            self.parked.park(worker.pid, held);
        }
        answer
    }

    async fn answer_holding(
        &self,
        mode: Mode,
        worker: &mut Worker,
        expect: Expect,
        first: Duration,
        held: &mut Option<super::locks::Held>,
    ) -> Answer {
        let mut wait = first;
        loop {
            let received =
                match tokio::time::timeout(wait, ipc_messages::recv_async::<FromWorker>(&mut worker.frames))
                    .await
                {
                    Ok(received) => received,
                    Err(_) => Err(IpcError::TimedOut),
                };
            wait = self.deadline;
            match received {
                Ok((FromWorker::Lock { keys }, _)) => {
                    // Waiting for another call's lock is not the worker's time: the deadline
                    // restarts once the grant is sent.
                    *held = Some(self.locks.lock(&keys).await);
                    if ipc_messages::send_async(&worker.frames, &ToWorker::LockGranted, None).await.is_err() {
                        return Err(Lost(WorkerLost::LockWait, "gone while waiting for a lock".into()));
                    }
                }
                // A streamed write in progress: the deadline restarts.
                Ok((FromWorker::Progress { .. }, _)) => {}
                Ok((FromWorker::Stranded(stranded), dir)) => self.stranded(stranded, dir),
                Ok((reply, fd)) => {
                    *held = None;
                    return expect
                        .accept(reply, fd)
                        .ok_or_else(|| Lost(WorkerLost::UnexpectedMessage, "unexpected message".into()));
                }
                Err(IpcError::TimedOut) => {
                    tracing::error!(
                        pid = worker.pid,
                        mode = mode.as_str(),
                        "call overran its deadline; killing the worker"
                    );
                    return Err(Lost(WorkerLost::Deadline, "deadline passed; worker killed".into()));
                }
                Err(e) => return Err(Lost(WorkerLost::Died, format!("died: {e}"))),
            }
        }
    }
}
