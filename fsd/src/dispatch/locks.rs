//! The per-target locks of the network process, awaited on its runtime: a worker asks for the
//! keys of its call's targets, and waits without a thread until no other call of any worker of
//! any mode holds one of them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Table {
    held: Mutex<HashSet<String>>,
    released: Notify,
}

/// The lock table; clones share it.
#[derive(Debug, Default, Clone)]
pub struct AsyncLocks {
    table: Arc<Table>,
}

/// Holds some keys until dropped.
#[derive(Debug)]
pub struct Held {
    table: Arc<Table>,
    keys: Vec<String>,
}

impl AsyncLocks {
    fn held(&self) -> MutexGuard<'_, HashSet<String>> {
        // Inserts and removes only: a panic cannot leave the set half-changed.
        self.table.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every key is free, then holds them all. Keys are taken together, so two
    /// calls locking the same pair in opposite orders cannot deadlock.
    pub async fn lock(&self, keys: &[String]) -> Held {
        let mut keys = keys.to_vec();
        keys.sort();
        keys.dedup();
        loop {
            // Registered before the check, so a release between check and wait is not missed.
            let released = self.table.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut held = self.held();
                if !keys.iter().any(|k| held.contains(k)) {
                    held.extend(keys.iter().cloned());
                    return Held { table: self.table.clone(), keys };
                }
            }
            released.await;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let mut held = self.table.held.lock().unwrap_or_else(PoisonError::into_inner);
            for k in &self.keys {
                held.remove(k);
            }
        }
        self.table.released.notify_waiters();
    }
}

/// The locks of transactions whose worker was lost mid-call, by the worker's pid: held until the
/// supervisor says it recovered that worker's transaction (`ipc_messages::Control::Recovered`), so no
/// other call sees a half-committed transaction. The word may come before the loss is seen
/// here; it is remembered then (the last [`REMEMBERED`] pids).
#[derive(Debug, Default)]
pub struct Parked {
    state: Mutex<(std::collections::HashMap<u32, Held>, std::collections::VecDeque<u32>)>,
}

/// How many recovered pids are remembered for a loss not seen yet.
const REMEMBERED: usize = 1024;

impl Parked {
    /// Keeps `held` until worker `pid` is recovered (at once if it was already).
    pub fn park(&self, pid: u32, held: Held) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = state.1.iter().position(|p| *p == pid) {
            state.1.remove(i);
            return;
        }
        tracing::warn!(
            pid,
            keys = held.keys.len(),
            "a worker was lost in a transaction: its targets stay locked until it is recovered"
        );
        state.0.insert(pid, held);
    }

    pub fn recovered(&self, pid: u32) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.0.remove(&pid).is_none() {
            if state.1.len() == REMEMBERED {
                state.1.pop_front();
            }
            state.1.push_back(pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_holder_per_key_at_a_time() {
        let locks = AsyncLocks::default();
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (locks, inside) = (locks.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..200 {
                    let keys = if i % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
                    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
                    let _held = locks.lock(&keys).await;
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
        for task in tasks {
            assert!(task.await.is_ok());
        }
    }
}
