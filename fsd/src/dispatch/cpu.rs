//! CPU work on whole files, off the runtime: applying an escalated patch's hunks to a file of up
//! to `max_editable_file_bytes` (or matching an escalated edit in it) takes as long as the file
//! is big, and on a runtime thread it would hold every other client's calls scheduled there for
//! that long. A few threads, started once, do it for everyone (no thread per call: issue 12),
//! behind a bounded queue whose waiters wait as tasks, not threads.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// One unit of work, holding its queue room until it has run (or is dropped unrun).
struct Job {
    work: Box<dyn FnOnce() + Send>,
}

/// The pool. Cloning shares it.
#[derive(Clone)]
pub struct Cpu {
    jobs: std_mpsc::Sender<Job>,
    /// Jobs queued or running: past it a caller waits (as a task) for room, so the queue is
    /// bounded whatever the number of callers.
    room: Arc<Semaphore>,
}

impl std::fmt::Debug for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cpu").field("room", &self.room.available_permits()).finish()
    }
}

/// Why a job gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    /// The job panicked: that one check failed; the thread, and the pool, serve on.
    #[error("the check failed")]
    Failed,
    /// The pool stopped (the process is ending).
    #[error("the daemon's check threads stopped")]
    Stopped,
}

impl CpuError {
    /// The `reason` metadata of the `FS_IO_ERROR` it is reported as.
    pub fn reason(self) -> fsd_proto::Reason {
        match self {
            CpuError::Failed => fsd_proto::Reason::CheckFailed,
            CpuError::Stopped => fsd_proto::Reason::CheckPoolStopped,
        }
    }

    /// The failure a caller of the check on `path` is answered with.
    pub fn into_wire(self, path: &str) -> fsd_proto::WireError {
        fsd_proto::WireError::new(fsd_proto::ErrorCode::IoError, path, self.to_string())
            .with_reason(self.reason())
    }
}

impl Cpu {
    /// Starts `threads` threads (at least one) behind a queue of `queued` jobs (at least one).
    pub fn start(threads: usize, queued: usize) -> std::io::Result<Cpu> {
        let jobs = super::threads::start("fsd-check", threads, |job: Job| {
            // A job catches its own panic (`run`); this one is a second guard for the thread.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job.work));
        })?;
        Ok(Cpu { jobs, room: Arc::new(Semaphore::new(queued.max(1))) })
    }

    /// Runs `work` on a pool thread and returns its result. A caller that goes away leaves a
    /// queued job to be skipped, a running one to finish unheard. A job that panics is answered
    /// as the failed check it is ([`CpuError::Failed`]), not as a stopped pool.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CpuError> {
        let room = self.room.clone().acquire_owned().await.map_err(|_| CpuError::Stopped)?;
        let (reply, answer) = oneshot::channel();
        let work = Box::new(move || {
            let room: OwnedSemaphorePermit = room;
            if !reply.is_closed() {
                let out = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|_| CpuError::Failed);
                // Given back before the answer: a caller holding its answer finds the room it
                // took free again (dropping it after, the next caller could still find it taken).
                drop(room);
                let _ = reply.send(out);
            }
        });
        self.jobs.send(Job { work }).map_err(|_| CpuError::Stopped)?;
        answer.await.map_err(|_| CpuError::Stopped)?
    }
}

/// Test hook: a patch or edit check, a write's preview or a ticketed call's digest on a file
/// named `fsd-fault-hold-check` is held, wherever it runs,
/// until a stat of a path ending in `/fsd-fault-release-check` releases it (or a minute passes,
/// so a test that fails cannot hang the daemon). A stat of a path ending in
/// `/fsd-fault-check-held` asks whether one is held now.
#[cfg(feature = "fault-injection")]
pub mod hold {
    use std::sync::{Condvar, Mutex, PoisonError};
    use std::time::Duration;

    /// (checks held now, releases so far).
    static STATE: Mutex<(usize, u64)> = Mutex::new((0, 0));
    static CHANGED: Condvar = Condvar::new();

    pub fn check(path: &str) {
        if !path.ends_with("/fsd-fault-hold-check") {
            return;
        }
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let released = state.1;
        state.0 += 1;
        let (mut state, _) = CHANGED
            .wait_timeout_while(state, Duration::from_secs(60), |s| s.1 == released)
            .unwrap_or_else(PoisonError::into_inner);
        state.0 -= 1;
    }

    pub fn held() -> bool {
        STATE.lock().unwrap_or_else(PoisonError::into_inner).0 > 0
    }

    pub fn release() {
        STATE.lock().unwrap_or_else(PoisonError::into_inner).1 += 1;
        CHANGED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_a_pool_thread_and_the_queue_is_bounded() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        let cpu = Cpu::start(2, 3).unwrap_or_else(|e| panic!("{e}"));
        let name = rt.block_on(cpu.run(|| std::thread::current().name().map(str::to_owned)));
        assert!(matches!(name, Ok(Some(n)) if n.starts_with("fsd-check-")));
        let sum = rt.block_on(async {
            let runs: Vec<_> = (0..10u64).map(|n| cpu.run(move || n * 2)).collect();
            let mut sum = 0;
            for run in runs {
                sum += run.await.unwrap_or_else(|e| panic!("{e}"));
            }
            sum
        });
        assert_eq!(sum, 90);
        assert_eq!(cpu.room.available_permits(), 3, "every job gave its room back");
    }

    #[test]
    fn a_panicking_job_is_a_failed_check_and_the_pool_serves_on() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        // One thread: the job after the panic runs on the very thread that panicked.
        let cpu = Cpu::start(1, 2).unwrap_or_else(|e| panic!("{e}"));
        let check = |outcome: Result<u32, CpuError>, expected: Result<u32, CpuError>| {
            assert_eq!(outcome, expected);
        };
        check(rt.block_on(cpu.run(|| panic!("a job that panics"))), Err(CpuError::Failed));
        check(rt.block_on(cpu.run(|| 1)), Ok(1));
        check(rt.block_on(cpu.run(|| panic!("another"))), Err(CpuError::Failed));
        check(rt.block_on(cpu.run(|| 2)), Ok(2));
        assert_eq!(cpu.room.available_permits(), 2, "a panicking job gave its room back");
        let wire = CpuError::Failed.into_wire("/w/a.txt");
        assert_eq!(
            (wire.code, wire.path.as_str(), wire.metadata.get("reason").map(String::as_str)),
            (fsd_proto::ErrorCode::IoError, "/w/a.txt", Some("check_failed"))
        );
    }
}
