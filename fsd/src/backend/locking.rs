//! Per-target locks as a backend sees them: a change's check and commit (`pipeline`) run as one
//! critical section per target key. The keys are held by the process that routes calls
//! (`dispatch::locks`), so a lock holds across every worker of every mode; a worker asks for
//! them over its IPC (`worker::RemoteLocks`).

/// Where a backend takes its per-target locks.
pub trait Locking: Send + Sync + std::fmt::Debug {
    /// Blocks until every key is held for the rest of the current call.
    fn lock(&self, keys: &[&str]) -> Result<Guard, crate::error::FsError>;
}

/// Proof that a call's locks are held; the router releases them when the call's reply arrives.
#[derive(Debug)]
pub struct Guard(());

impl Guard {
    /// A guard whose release the lock owner handles elsewhere.
    pub fn remote() -> Guard {
        Guard(())
    }
}
