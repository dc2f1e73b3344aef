//! The supervisor's book of hung workers. A worker whose call overran its deadline is killed;
//! one that is still alive a moment later is stuck where no signal reaches it (uninterruptible
//! sleep in a FUSE or NFS call) and is abandoned: its slot gets a fresh worker at once, and it is
//! reaped whenever the kernel lets it go. Abandoned workers still hold memory and descriptors,
//! so they are capped per mode: past the cap the mode stops (health NOT_SERVING, calls fail
//! fast) until enough of them exit.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::op::Mode;

/// How long a killed worker may take to die before it counts as unkillable.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// What the supervisor must do about a worker that outlived its kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// Start a fresh worker in its place.
    Replace(Mode),
    /// Too many are abandoned: stop serving the mode (no replacement until some exit).
    Stop { mode: Mode, abandoned: usize },
}

/// What an exit of a worker means here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exited {
    /// Not abandoned: replace it as usual.
    Ordinary,
    /// Abandoned and already replaced: nothing to do.
    Abandoned,
    /// Abandoned, and now few enough are left: serve the mode again, starting `owed` workers.
    Recovered { mode: Mode, owed: usize },
}

#[derive(Debug)]
pub struct HungWorkers {
    max_abandoned: usize,
    grace: Duration,
    modes: HashMap<u32, Mode>,
    abandoned: HashMap<u32, Mode>,
    /// Replacements not started while a mode is stopped.
    owed: HashMap<Mode, usize>,
    checks: JoinSet<u32>,
}

impl HungWorkers {
    pub fn new(max_abandoned: usize, grace: Duration) -> HungWorkers {
        HungWorkers {
            max_abandoned,
            grace,
            modes: HashMap::new(),
            abandoned: HashMap::new(),
            owed: HashMap::new(),
            checks: JoinSet::new(),
        }
    }

    pub fn started(&mut self, pid: u32, mode: Mode) {
        self.modes.insert(pid, mode);
    }

    /// A kill was sent to `pid` (or, under the test hook, pretended): check it in a moment.
    pub fn killed(&mut self, pid: u32) {
        if !self.modes.contains_key(&pid) || self.abandoned.contains_key(&pid) {
            return;
        }
        let grace = self.grace;
        self.checks.spawn(async move {
            tokio::time::sleep(grace).await;
            pid
        });
    }

    /// The next worker whose grace ran out (pending forever when none is being checked).
    pub async fn next_check(&mut self) -> u32 {
        loop {
            match self.checks.join_next().await {
                Some(Ok(pid)) => return pid,
                Some(Err(_)) => continue,
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn abandoned_in(&self, mode: Mode) -> usize {
        self.abandoned.values().filter(|m| **m == mode).count()
    }

    /// `pid`'s grace ran out; `alive`: it has not been reaped. `None`: nothing to do.
    pub fn overdue(&mut self, pid: u32, alive: bool) -> Option<Overdue> {
        if !alive {
            return None;
        }
        let mode = *self.modes.get(&pid)?;
        if self.abandoned.insert(pid, mode).is_some() {
            return None;
        }
        let abandoned = self.abandoned_in(mode);
        if abandoned > self.max_abandoned {
            *self.owed.entry(mode).or_insert(0) += 1;
            return Some(Overdue::Stop { mode, abandoned });
        }
        Some(Overdue::Replace(mode))
    }

    /// `pid` exited (was reaped).
    pub fn exited(&mut self, pid: u32) -> Exited {
        self.modes.remove(&pid);
        let Some(mode) = self.abandoned.remove(&pid) else { return Exited::Ordinary };
        let owed = self.owed.get(&mode).copied().unwrap_or(0);
        if owed > 0 && self.abandoned_in(mode) <= self.max_abandoned {
            self.owed.remove(&mode);
            return Exited::Recovered { mode, owed };
        }
        Exited::Abandoned
    }

    /// Every abandoned worker, to kill once more at shutdown.
    pub fn abandoned(&self) -> impl Iterator<Item = u32> + '_ {
        self.abandoned.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abandoned_workers_are_replaced_up_to_the_cap_then_the_mode_stops_until_they_exit() {
        let mut hung = HungWorkers::new(1, KILL_GRACE);
        let ws = Mode::WorkspaceWrite;
        for pid in [10, 11, 12, 20] {
            hung.started(pid, if pid == 20 { Mode::ReadOnly } else { ws });
        }
        // Reaped before the check: it died of the kill.
        assert_eq!(hung.overdue(10, false), None);
        assert_eq!(hung.exited(10), Exited::Ordinary);
        assert_eq!(hung.overdue(11, true), Some(Overdue::Replace(ws)));
        assert_eq!(hung.overdue(11, true), None, "counted once");
        assert_eq!(hung.overdue(12, true), Some(Overdue::Stop { mode: ws, abandoned: 2 }));
        // Another mode has its own count.
        assert_eq!(hung.overdue(20, true), Some(Overdue::Replace(Mode::ReadOnly)));
        assert_eq!(hung.overdue(99, true), None, "not a worker");
        assert_eq!(hung.exited(11), Exited::Recovered { mode: ws, owed: 1 });
        assert_eq!(hung.exited(12), Exited::Abandoned);
        assert_eq!(hung.abandoned().collect::<Vec<_>>(), vec![20]);
    }
}
