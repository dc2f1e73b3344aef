//! Per-target locks: a mutation's check, match and write run as one critical section per target
//! key. Kept by the process that routes calls, so it holds across every worker of every mode.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Where a backend takes its per-target locks: in this process, or from the process that routes
/// calls (a worker asks over its IPC and the router releases when the call's reply arrives).
pub trait Locking: Send + Sync + std::fmt::Debug {
    /// Blocks until every key is held for the rest of the current call.
    fn lock(&self, keys: &[&str]) -> Result<Guard, crate::error::FsError>;
}

/// Keeps a call's locks; dropping it releases them (a remote guard is released by the router).
#[derive(Debug)]
pub struct Guard(#[allow(dead_code)] Option<Held>);

impl Guard {
    /// A guard whose release the lock owner handles elsewhere.
    pub fn remote() -> Guard {
        Guard(None)
    }
}

impl Locking for TargetLocks {
    fn lock(&self, keys: &[&str]) -> Result<Guard, crate::error::FsError> {
        Ok(Guard(Some(TargetLocks::lock(self, keys))))
    }
}

/// The set of target keys currently held.
#[derive(Debug, Default, Clone)]
pub struct TargetLocks {
    inner: Arc<(Mutex<HashSet<String>>, Condvar)>,
}

/// Holds some keys until dropped.
#[derive(Debug)]
pub struct Held {
    locks: TargetLocks,
    keys: Vec<String>,
}

impl TargetLocks {
    fn set(&self) -> MutexGuard<'_, HashSet<String>> {
        // A panic while holding the set leaves it consistent (insert/remove only), so go on.
        self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until every key is free, then holds them all. Keys are taken together, so two
    /// calls locking the same pair in opposite orders cannot deadlock.
    pub fn lock(&self, keys: &[&str]) -> Held {
        let mut keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        keys.sort();
        keys.dedup();
        let mut set = self.set();
        while keys.iter().any(|k| set.contains(k)) {
            set = self.inner.1.wait(set).unwrap_or_else(PoisonError::into_inner);
        }
        for k in &keys {
            set.insert(k.clone());
        }
        Held { locks: self.clone(), keys }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut set = self.locks.set();
        for k in &self.keys {
            set.remove(k);
        }
        drop(set);
        self.locks.inner.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_holder_per_key_at_a_time() {
        let locks = TargetLocks::default();
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (locks, inside) = (locks.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let keys = if i % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
                        let _held = locks.lock(&keys);
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().is_ok());
        }
    }
}
