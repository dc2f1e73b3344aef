//! A mode's pool on the network process's side: its fair queue of calls (`Job`), the claim
//! that settles whether a call's caller gave it up or a worker's driver took it, the calls'
//! final replies, and the caller's end of a queued call (`Queued`).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, oneshot};

use super::queue::FairQueue;
use crate::ipc_messages::{FromWorker, ToWorker};
use crate::op::{Outcome, StreamHeader};
use fsd_proto::WireError;

/// The final reply a call waits for (lock requests and progress come before it).
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect {
    Reply,
    Stream,
}

/// A worker's final reply to a call, of the kind the call expects.
#[derive(Debug)]
pub(super) enum Final {
    Reply(Result<Outcome, WireError>),
    /// A streamed read's header, with the descriptor its frame carried.
    Stream(Result<StreamHeader, WireError>, Option<OwnedFd>),
}

impl Expect {
    pub(super) fn accept(self, reply: FromWorker, fd: Option<OwnedFd>) -> Option<Final> {
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
/// With traces on, it also keeps when a driver took the call (the end of its queue wait).
#[derive(Debug, Default)]
pub(super) struct Claim(AtomicU8, Mutex<Option<std::time::Instant>>);

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const GIVEN_UP: u8 = 2;

impl Claim {
    pub(super) fn take(&self) -> bool {
        let taken = self.0.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if taken && crate::traces::on() {
            *self.1.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::time::Instant::now());
        }
        taken
    }

    /// When a driver last took the call (traces on only).
    pub(super) fn taken_at(&self) -> Option<std::time::Instant> {
        *self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn give_up(&self) -> bool {
        self.0.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A taken call goes back to the queue.
    pub(super) fn release(&self) {
        self.0.store(QUEUED, Ordering::Release);
    }

    pub(super) fn queued(&self) -> bool {
        self.0.load(Ordering::Acquire) == QUEUED
    }
}

/// What a queued call's caller gets back.
pub(super) type Answer = Result<Final, Lost>;

/// A call waiting in its mode's queue. The driver of the worker that comes free takes it and
/// sends it at once: between two calls a worker waits for no other task.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) identity: String,
    /// Sent ahead once and put back: it goes to a worker only as the call that worker runs next,
    /// so it is never held behind a slow call twice.
    pub(super) put_back: bool,
    /// How many workers turned out to be gone before they could take it (see
    /// `Dispatcher::undelivered`).
    pub(super) undelivered: u8,
    pub(super) message: ToWorker,
    pub(super) body: Option<OwnedFd>,
    pub(super) expect: Expect,
    pub(super) claim: Arc<Claim>,
    pub(super) answer: oneshot::Sender<Answer>,
}

/// The state of one mode's pool.
#[derive(Debug, Default)]
pub(super) struct PoolState {
    /// Workers registered and not known dead (idle or busy).
    pub(super) live: usize,
    /// Drivers waiting for a call: calls they are about to take do not count against the queue.
    pub(super) idle: usize,
    /// How the fence is enforced, as the workers reported when ready.
    pub(super) enforcement: Option<String>,
    /// Set when the supervisor gave up on this mode (or too many of its workers hang).
    pub(super) unavailable: Option<String>,
    /// Set while too many of this mode's workers are abandoned (stuck in the kernel): how many.
    pub(super) stuck: Option<usize>,
    /// Calls waiting for a worker, per identity.
    pub(super) waiting: FairQueue<Job>,
}

#[derive(Debug, Default)]
pub(super) struct Pool {
    state: Mutex<PoolState>,
    /// Woken when a call is queued.
    pub(super) work: Notify,
}

impl Pool {
    pub(super) fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next call in turn whose caller still waits for it, waiting for one if none is queued.
    pub(super) async fn next_job(&self) -> Job {
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

    /// The next call in turn, if it is a read and no worker is idle to take it: one to send
    /// behind the read a busy worker runs.
    pub(super) fn next_read(&self) -> Option<Job> {
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
    pub(super) fn requeue(&self, mut job: Job) {
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
pub(super) struct Queued<'a> {
    pub(super) claim: Arc<Claim>,
    pub(super) answer: oneshot::Receiver<Answer>,
    pub(super) pool: &'a Pool,
}

impl Queued<'_> {
    /// Gives the call up if no driver has it, and takes it out of the queue at once, so what
    /// it holds (an upload's pipe) is let go now: its sender sees EPIPE, not a full pipe.
    pub(super) fn give_up(&self) -> bool {
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

/// A worker that failed mid-call: the call's outcome is unknown. The `lost` metadata the tools
/// word it from, and a label for the log.
#[derive(Debug)]
pub(super) struct Lost(pub(super) fsd_proto::WorkerLost, pub(super) String);
