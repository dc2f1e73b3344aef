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

/// The pool stopped (a job panicked, or the process is ending).
#[derive(Debug, thiserror::Error)]
#[error("the daemon's check threads stopped")]
pub struct Stopped;

impl Cpu {
    /// Starts `threads` threads (at least one) behind a queue of `queued` jobs (at least one).
    pub fn start(threads: usize, queued: usize) -> std::io::Result<Cpu> {
        let jobs = super::threads::start("fsd-check", threads, |job: Job| {
            // A panicking job loses its caller's answer (it sees `Stopped`), not the thread.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job.work));
        })?;
        Ok(Cpu { jobs, room: Arc::new(Semaphore::new(queued.max(1))) })
    }

    /// Runs `work` on a pool thread and returns its result. A caller that goes away leaves a
    /// queued job to be skipped, a running one to finish unheard.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let room = self.room.clone().acquire_owned().await.map_err(|_| Stopped)?;
        let (reply, answer) = oneshot::channel();
        let work = Box::new(move || {
            let room: OwnedSemaphorePermit = room;
            if !reply.is_closed() {
                let out = work();
                // Given back before the answer: a caller holding its answer finds the room it
                // took free again (dropping it after, the next caller could still find it taken).
                drop(room);
                let _ = reply.send(out);
            }
        });
        self.jobs.send(Job { work }).map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }
}

/// Test hook: a patch or edit check on a file named `fsd-fault-hold-check` is held, wherever it runs,
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
        assert!(rt.block_on(cpu.run(|| panic!("a job that panics"))).is_err());
        assert_eq!(rt.block_on(cpu.run(|| 1)).ok(), Some(1), "the pool survives a panicking job");
    }
}
