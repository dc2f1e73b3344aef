//! The fair queue in front of one mode's workers: calls wait per client identity, and a worker
//! that comes free goes to the next identity in turn, so one busy client cannot push another's
//! call to the back of a long queue. Pure bookkeeping; the pool holds it under its lock.

use std::collections::{HashMap, VecDeque};

/// Waiters of type `W`, one FIFO per identity, served round-robin across identities.
#[derive(Debug)]
pub struct FairQueue<W> {
    by_identity: HashMap<String, VecDeque<W>>,
    /// Identities with waiters, in serving order.
    turn: VecDeque<String>,
    len: usize,
}

impl<W> Default for FairQueue<W> {
    fn default() -> FairQueue<W> {
        FairQueue { by_identity: HashMap::new(), turn: VecDeque::new(), len: 0 }
    }
}

impl<W> FairQueue<W> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn push(&mut self, identity: &str, waiter: W) {
        match self.by_identity.get_mut(identity) {
            Some(queue) => queue.push_back(waiter),
            None => {
                self.by_identity.insert(identity.to_owned(), VecDeque::from([waiter]));
                self.turn.push_back(identity.to_owned());
            }
        }
        self.len += 1;
    }

    /// The oldest waiter of the identity whose turn it is; that identity goes to the back.
    pub fn pop(&mut self) -> Option<W> {
        let identity = self.turn.pop_front()?;
        let queue = self.by_identity.get_mut(&identity)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.by_identity.remove(&identity);
        } else {
            self.turn.push_back(identity);
        }
        if waiter.is_some() {
            self.len -= 1;
        }
        waiter
    }

    /// [`FairQueue::pop`], but only when `take` accepts the waiter whose turn it is; otherwise
    /// the queue is unchanged.
    pub fn pop_if(&mut self, take: impl FnOnce(&W) -> bool) -> Option<W> {
        let identity = self.turn.front()?;
        let next = self.by_identity.get(identity).and_then(VecDeque::front)?;
        if take(next) { self.pop() } else { None }
    }

    /// Puts a waiter back first: first in its identity's queue, and that identity's turn next.
    pub fn push_front(&mut self, identity: &str, waiter: W) {
        match self.by_identity.get_mut(identity) {
            Some(queue) => {
                queue.push_front(waiter);
                self.turn.retain(|i| i != identity);
            }
            None => {
                self.by_identity.insert(identity.to_owned(), VecDeque::from([waiter]));
            }
        }
        self.turn.push_front(identity.to_owned());
        self.len += 1;
    }

    /// Takes out the first waiter `which` picks, wherever it is.
    pub fn remove(&mut self, mut which: impl FnMut(&W) -> bool) -> Option<W> {
        let (identity, at) = self.by_identity.iter().find_map(|(identity, queue)| {
            queue.iter().position(&mut which).map(|at| (identity.clone(), at))
        })?;
        let queue = self.by_identity.get_mut(&identity)?;
        let waiter = queue.remove(at);
        if queue.is_empty() {
            self.by_identity.remove(&identity);
            self.turn.retain(|i| *i != identity);
        }
        if waiter.is_some() {
            self.len -= 1;
        }
        waiter
    }

    /// Takes every waiter out (the mode stopped being served).
    pub fn drain(&mut self) -> Vec<W> {
        self.turn.clear();
        self.len = 0;
        self.by_identity.drain().flat_map(|(_, q)| q).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pushes: &[(&str, u32)], expected: &[u32]) {
        let mut queue = FairQueue::default();
        for (identity, n) in pushes {
            queue.push(identity, *n);
        }
        let mut got = Vec::new();
        while let Some(n) = queue.pop() {
            got.push(n);
        }
        assert_eq!(got, expected);
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn identities_take_turns() {
        // alice queued five calls before bob's one: bob's is served second, not sixth.
        check(
            &[("alice", 1), ("alice", 2), ("alice", 3), ("alice", 4), ("alice", 5), ("bob", 9)],
            &[1, 9, 2, 3, 4, 5],
        );
        check(&[("a", 1), ("b", 2), ("a", 3), ("b", 4), ("c", 5)], &[1, 2, 5, 3, 4]);
        check(&[], &[]);
    }

    #[test]
    fn pop_if_leaves_a_refused_turn_and_push_front_goes_first() {
        let mut queue = FairQueue::default();
        queue.push("a", 1);
        queue.push("b", 2);
        queue.push("a", 3);
        assert_eq!(queue.pop_if(|n| *n == 2), None, "a's turn: nothing taken");
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.pop_if(|n| *n == 1), Some(1));
        queue.push_front("a", 1);
        queue.push_front("c", 0);
        let mut got = Vec::new();
        while let Some(n) = queue.pop() {
            got.push(n);
        }
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.pop_if(|_| true), None);
    }

    #[test]
    fn remove_takes_one_waiter_from_anywhere() {
        let mut queue = FairQueue::default();
        for (identity, n) in [("a", 1), ("b", 2), ("a", 3)] {
            queue.push(identity, n);
        }
        assert_eq!(queue.remove(|n| *n == 2), Some(2));
        assert_eq!(queue.remove(|n| *n == 9), None);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.pop(), Some(1));
        assert_eq!(queue.pop(), Some(3));
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn remove_and_drain_keep_the_count() {
        let mut queue = FairQueue::default();
        for n in 0..6 {
            queue.push(if n % 2 == 0 { "a" } else { "b" }, n);
        }
        for gone in [1, 3, 5] {
            assert_eq!(queue.remove(|n| *n == gone), Some(gone));
        }
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.pop(), Some(0));
        assert_eq!(queue.pop(), Some(2));
        assert_eq!(queue.drain(), vec![4]);
        assert_eq!(queue.pop(), None);
        assert_eq!(queue.len(), 0);
    }
}
