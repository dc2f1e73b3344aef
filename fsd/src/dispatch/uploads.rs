//! How many of a mode's workers uploads may hold. A streamed write holds its worker for as long
//! as its body takes to arrive, which its client decides; were every worker of a mode held that
//! way, no other call of the mode would run until the uploads ended. So uploads hold at most all
//! but one of a mode's workers (one when the mode has only one), and one identity at most half of
//! those (at least one): the rest of the pool always serves the other calls, and one client's
//! uploads cannot keep another's waiting behind all of its own. An upload waits for its place
//! before it is queued for a worker, under the call's deadline, and asks for one only once its
//! body filled its pipe or is complete (`service::plain`), so a trickle never holds a place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The places of one mode's uploads.
#[derive(Debug)]
pub(super) struct Uploads {
    overall: Arc<Semaphore>,
    per_identity: usize,
    by_identity: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One upload's place, held until its call is answered.
#[derive(Debug)]
pub(super) struct Place<'a> {
    uploads: &'a Uploads,
    identity: String,
    permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl Uploads {
    /// The places for a mode of `workers` workers.
    pub(super) fn new(workers: usize) -> Uploads {
        let overall = workers.saturating_sub(1).max(1);
        Uploads {
            overall: Arc::new(Semaphore::new(overall)),
            per_identity: overall.div_ceil(2),
            by_identity: Mutex::new(HashMap::new()),
        }
    }

    /// How many uploads may hold a worker at once, overall and per identity.
    #[cfg(test)]
    pub(super) fn caps(&self) -> (usize, usize) {
        (self.overall.available_permits(), self.per_identity)
    }

    /// Waits for a place for an upload of `identity`: first among its own, then among all.
    pub(super) async fn enter(&self, identity: &str) -> Place<'_> {
        let own = {
            let mut map = self.by_identity.lock().unwrap_or_else(PoisonError::into_inner);
            map.entry(identity.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_identity)))
                .clone()
        };
        let mut place = Place { uploads: self, identity: identity.to_owned(), permits: None };
        // Neither semaphore is ever closed.
        if let Ok(own) = own.acquire_owned().await
            && let Ok(overall) = self.overall.clone().acquire_owned().await
        {
            place.permits = Some((own, overall));
        }
        place
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        drop(self.permits.take());
        let mut map = self.uploads.by_identity.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it: no upload of this identity holds or waits for a place.
        if map.get(&self.identity).is_some_and(|own| Arc::strong_count(own) == 1) {
            map.remove(&self.identity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_leave_a_worker_for_other_calls() {
        for (workers, caps) in [(1, (1, 1)), (2, (1, 1)), (3, (2, 1)), (4, (3, 2)), (8, (7, 4))] {
            assert_eq!(Uploads::new(workers).caps(), caps, "{workers} workers");
        }
    }

    #[tokio::test]
    async fn one_identity_cannot_take_every_place() {
        let uploads = Uploads::new(5);
        let a1 = uploads.enter("a").await;
        let a2 = uploads.enter("a").await;
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), uploads.enter("a")).await;
        assert!(third.is_err(), "a third upload of one identity waits");
        let b1 = uploads.enter("b").await;
        let b2 = uploads.enter("b").await;
        drop((a1, a2, b1, b2));
        assert!(uploads.by_identity.lock().unwrap().is_empty(), "places are forgotten once let go");
        assert_eq!(uploads.overall.available_permits(), 4);
    }
}
