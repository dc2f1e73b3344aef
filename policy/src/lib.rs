//! The read-before-write observation policy: what one session has seen, and which guard each of
//! its mutations must carry. Pure state: no I/O, no async, no gRPC.
//!
//! | call                            | observed present at v   | observed absent / never seen |
//! |---------------------------------|-------------------------|------------------------------|
//! | write                           | `ReplaceIfVersion(v)`   | `CreateIfAbsent`             |
//! | edit / str_replace / insert / patch update, delete, move source | guard `{v}` | refused |
//!
//! An edit refused on a target the session saw as absent is reported differently from one it
//! never saw: the first is "not found" (a re-read confirmed absence), the second "not read".
#![forbid(unsafe_code)]

use std::collections::HashMap;

/// An opaque target key from the provider. Never parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetKey(pub String);

/// An opaque version token from the provider. Never parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// What a session last saw of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Present(Version),
    Absent,
}

/// The guard a whole-file write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteGuard {
    CreateIfAbsent,
    ReplaceIfVersion(Version),
}

/// Why an edit-like mutation may not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditRefusal {
    /// The session has never observed the target: `FS_NOT_OBSERVED`.
    NotObserved,
    /// The session's latest observation is confirmed absence: `FS_NOT_FOUND`.
    ObservedAbsent,
}

/// The observations of one session (one owner). Sessions never share an instance, so one
/// session's read never authorizes another's write.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    seen: HashMap<TargetKey, Observation>,
}

impl Observations {
    pub fn new() -> Observations {
        Observations::default()
    }

    /// The latest observation of `key`, if any.
    pub fn get(&self, key: &TargetKey) -> Option<&Observation> {
        self.seen.get(key)
    }

    /// The guard for writing a whole file. `None` is a target the session cannot even name yet
    /// (never resolved): it is treated as never seen.
    pub fn write_intent(&self, key: Option<&TargetKey>) -> WriteGuard {
        match key.and_then(|k| self.seen.get(k)) {
            Some(Observation::Present(version)) => WriteGuard::ReplaceIfVersion(version.clone()),
            Some(Observation::Absent) | None => WriteGuard::CreateIfAbsent,
        }
    }

    /// The version an edit-like mutation must find, or why it is refused.
    pub fn edit_intent(&self, key: Option<&TargetKey>) -> Result<Version, EditRefusal> {
        match key.and_then(|k| self.seen.get(k)) {
            Some(Observation::Present(version)) => Ok(version.clone()),
            Some(Observation::Absent) => Err(EditRefusal::ObservedAbsent),
            None => Err(EditRefusal::NotObserved),
        }
    }

    /// Records a successful read, write, edit or create of `key` at `version`.
    pub fn record_present(&mut self, key: TargetKey, version: Version) {
        self.seen.insert(key, Observation::Present(version));
    }

    /// Records confirmed absence: a read that found nothing, a delete, a move's source.
    pub fn record_absent(&mut self, key: TargetKey) {
        self.seen.insert(key, Observation::Absent);
    }

    /// Forgets a target, for an outcome that is unknown (the file may or may not have changed).
    pub fn forget(&mut self, key: &TargetKey) {
        self.seen.remove(key);
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> TargetKey {
        TargetKey(k.to_owned())
    }

    fn v(x: &str) -> Version {
        Version(x.to_owned())
    }

    /// Builds a session from a history of events, then asks both intents for `probe`.
    fn check(
        history: &[(&str, Option<&str>)],
        probe: Option<&str>,
        write: WriteGuard,
        edit: Result<Version, EditRefusal>,
    ) {
        let mut obs = Observations::new();
        for &(k, version) in history {
            match version {
                Some(version) => obs.record_present(key(k), v(version)),
                None => obs.record_absent(key(k)),
            }
        }
        let probe = probe.map(key);
        assert_eq!(obs.write_intent(probe.as_ref()), write, "write intent after {history:?}");
        assert_eq!(obs.edit_intent(probe.as_ref()), edit, "edit intent after {history:?}");
    }

    #[test]
    fn intents_follow_the_design_table() {
        use EditRefusal::*;
        use WriteGuard::*;
        // Never seen, and a path the session cannot name yet.
        check(&[], Some("a"), CreateIfAbsent, Err(NotObserved));
        check(&[], None, CreateIfAbsent, Err(NotObserved));
        // Observed present at v.
        check(&[("a", Some("1"))], Some("a"), ReplaceIfVersion(v("1")), Ok(v("1")));
        // Observed absent (a missing read, a delete).
        check(&[("a", None)], Some("a"), CreateIfAbsent, Err(ObservedAbsent));
        // The latest observation wins, in both directions.
        check(&[("a", Some("1")), ("a", Some("2"))], Some("a"), ReplaceIfVersion(v("2")), Ok(v("2")));
        check(&[("a", Some("1")), ("a", None)], Some("a"), CreateIfAbsent, Err(ObservedAbsent));
        check(&[("a", None), ("a", Some("3"))], Some("a"), ReplaceIfVersion(v("3")), Ok(v("3")));
        // Another target's observation authorizes nothing.
        check(&[("b", Some("1"))], Some("a"), CreateIfAbsent, Err(NotObserved));
    }

    #[test]
    fn sessions_do_not_share_observations() {
        let mut alice = Observations::new();
        let bob = Observations::new();
        alice.record_present(key("a"), v("1"));
        assert_eq!(bob.edit_intent(Some(&key("a"))), Err(EditRefusal::NotObserved));
        assert_eq!(alice.edit_intent(Some(&key("a"))), Ok(v("1")));
    }

    #[test]
    fn forgetting_returns_a_target_to_never_seen() {
        let mut obs = Observations::new();
        obs.record_present(key("a"), v("1"));
        obs.forget(&key("a"));
        assert!(obs.is_empty());
        assert_eq!(obs.edit_intent(Some(&key("a"))), Err(EditRefusal::NotObserved));
    }
}
