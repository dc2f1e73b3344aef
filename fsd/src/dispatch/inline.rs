//! Direct reads on the runtime thread that received the call: no hand-off to a direct read
//! thread and back (two wake-ups, ~55 µs of a 240 µs stat on the 2-vCPU guest, BENCHMARKS.md).
//!
//! The network process reads as a read-only worker does while its runtime threads read
//! (`role_confinement::network`: that worker's uid and groups, Landlock granting reading beneath
//! the roots and nothing else, the direct read's calls in its allowlist), so its runtime threads
//! may run the workers' walk and read themselves.
//!
//! A read on a runtime thread cannot be abandoned at the call deadline: nothing stops a thread
//! stuck in the filesystem, and the call's answer is that thread's to send. So it runs here only
//! where a read does not wait on anyone else (every root and allowed submount on a local
//! filesystem, `LOCAL`), and never on more runtime threads at once than leaves one free
//! (`slots`): a read that finds every slot taken goes to the direct read threads, whose deadline
//! and abandonment hold as before. A read stuck here anyway (a submount no one listed, whose
//! server hung) holds its call and one runtime thread until its filesystem answers; the
//! daemon serves on with the others, and says so in its log.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fsd_proto::{WireError, WorkerLost};

use super::direct::{Done, Work, lost, run};
use crate::backend::Backend;
use crate::config::Config;
use crate::op::Mode;

/// Filesystems whose reads answer from the local kernel and its block devices: a read there
/// ends (or fails) without waiting on a server or a user-space daemon. Anything else (NFS, SMB,
/// FUSE and virtiofs, 9p, Ceph ...) is read by the direct read threads, under the deadline.
const LOCAL: &[(i64, &str)] = &[
    (0xEF53, "ext2, ext3, ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58f6, "ramfs"),
    (0x794c_7630, "overlayfs: a container's root, layered on local directories"),
    (0xF2F5_2010, "f2fs"),
    (0xca45_1a4e, "bcachefs"),
    (0x2fc1_2fc1, "zfs"),
    (0x7371_7368, "squashfs: a read-only image"),
    (0xE0F5_E1E2, "erofs: a read-only image"),
];

/// Whether the network runtime was built without its LIFO slot (`network::run`), whose task no
/// other runtime thread may take: with it, a read held on a runtime thread would hold the task
/// woken last on that thread (often a connection's) as long as itself.
pub(crate) const LIFO_SLOT_OFF: bool = cfg!(tokio_unstable);

/// Whether reads on a filesystem of type `magic` answer without waiting on anyone else.
fn is_local(magic: i64) -> bool {
    LOCAL.iter().any(|(m, _)| *m == magic)
}

/// The paths whose filesystem decides (every root, every allowed submount) and, for the log,
/// the first one not local.
fn not_local(config: &Config) -> Option<(PathBuf, String)> {
    let paths = config.roots.iter().map(|r| r.path.clone()).chain(config.allow_submounts.iter().cloned());
    for path in paths {
        match crate::sys::filesystem_type(&path) {
            Ok(magic) if is_local(magic) => {}
            Ok(magic) => return Some((path, format!("filesystem type {magic:#x}"))),
            Err(errno) => return Some((path, format!("its filesystem is unknown ({errno})"))),
        }
    }
    None
}

/// The runtime threads' share of the direct path.
#[derive(Debug)]
pub(super) struct Inline {
    backend: Arc<Backend>,
    /// One per runtime thread that may read at once: 0 free, else when its read started
    /// (nanoseconds since `epoch`, plus one).
    slots: Box<[AtomicU64]>,
    epoch: Instant,
    deadline: Duration,
    /// Said once while a read holds its slot past the deadline.
    overdue_said: AtomicBool,
}

impl Inline {
    /// Reads on `runtime_threads - 1` runtime threads at most, when `config` asks for it and
    /// every root is local; `None` (every direct read on the direct read threads) otherwise.
    pub(super) fn new(config: &Config, backend: Arc<Backend>, runtime_threads: usize) -> Option<Inline> {
        if !config.inline_reads {
            tracing::info!("direct reads run on the direct read threads only (inline_reads = false)");
            return None;
        }
        if !LIFO_SLOT_OFF {
            tracing::info!(
                "direct reads run on the direct read threads only: this build's runtime keeps its LIFO slot (built without --cfg tokio_unstable, which .cargo/config.toml sets; a RUSTFLAGS variable replaces it)"
            );
            return None;
        }
        let slots = runtime_threads.saturating_sub(1);
        if slots == 0 {
            tracing::info!("direct reads run on the direct read threads only: one runtime thread, kept free");
            return None;
        }
        if let Some((path, why)) = not_local(config) {
            tracing::info!(
                path = %path.display(),
                why,
                "direct reads run on the direct read threads only: a read there may wait on a server, and only those threads can be abandoned at the deadline"
            );
            return None;
        }
        Some(Inline {
            backend,
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            deadline: config.call_timeout,
            overdue_said: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// A slot for a read on this thread, when one is free; `None` to take a direct read thread.
    pub(super) fn claim(&self) -> Option<Slot<'_>> {
        let started = self.now();
        let claimed = self
            .slots
            .iter()
            .find(|s| s.compare_exchange(0, started, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        if claimed.is_none() {
            self.say_overdue(started);
        }
        claimed.map(|slot| Slot { inline: self, slot })
    }

    fn any_overdue(&self, now: u64) -> bool {
        let deadline = u64::try_from(self.deadline.as_nanos()).unwrap_or(u64::MAX);
        self.slots.iter().any(|s| {
            let started = s.load(Ordering::Acquire);
            started != 0 && now.saturating_sub(started) > deadline
        })
    }

    fn say_overdue(&self, now: u64) {
        if self.any_overdue(now) && !self.overdue_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "a direct read on a runtime thread is past the call deadline: it holds its call and that thread until its filesystem answers; reads go to the direct read threads meanwhile"
            );
        }
    }
}

/// A runtime thread's turn to read, freed when dropped.
pub(super) struct Slot<'a> {
    inline: &'a Inline,
    slot: &'a AtomicU64,
}

impl Slot<'_> {
    /// Runs `work` on this thread. No task waits behind it while it reads: the runtime has no
    /// LIFO slot (`LIFO_SLOT_OFF`), and every other queued task is another runtime thread's to
    /// steal.
    pub(super) fn run(self, mode: Mode, path: &str, work: Work) -> Result<Done, WireError> {
        let inline = self.inline;
        let traced = crate::traces::on().then(Instant::now);
        // A panic answers as a dead worker's would, and the slot is free again.
        let done =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&inline.backend, mode, work)));
        drop(self);
        if let Some(start) = traced {
            crate::traces::dispatched(mode, start, Some(start), Instant::now());
        }
        if inline.overdue_said.load(Ordering::Relaxed) && !inline.any_overdue(inline.now()) {
            inline.overdue_said.store(false, Ordering::Relaxed);
            tracing::info!("no direct read on a runtime thread is past the call deadline any more");
        }
        done.map_err(|_| lost(path, WorkerLost::Died, "direct read panicked"))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slot.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_filesystems_that_answer_locally_are_read_inline() {
        fn check(magic: i64, expected: bool) {
            assert_eq!(is_local(magic), expected, "{magic:#x}");
        }
        check(0xEF53, true); // ext4
        check(0x0102_1994, true); // tmpfs
        check(0x794c_7630, true); // overlayfs
        check(0x6969, false); // NFS
        check(0x6573_5546, false); // FUSE (virtiofs too)
        check(0xFF53_4D42, false); // CIFS
        check(0xFE53_4D42, false); // SMB2
        check(0x0102_1997, false); // 9p
        check(0x00c3_6400, false); // Ceph
        check(0, false);
    }

    #[test]
    fn every_local_filesystem_says_what_it_is_and_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for (magic, what) in LOCAL {
            assert!(!what.trim().is_empty(), "{magic:#x} says nothing");
            assert!(seen.insert(magic), "{magic:#x} listed twice");
        }
    }
}
