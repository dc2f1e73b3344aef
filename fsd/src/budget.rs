//! Per-identity budgets: how much of the daemon one client (a peer uid, a certificate name, a
//! token name) may hold at once or use per second, so one busy or hostile client cannot slow
//! another. Every check is a few atomic or uncontended-mutex operations and fails fast with
//! [`Refusal`] (`FS_RATE_LIMITED` with `retry_after_ms` on the wire); nothing waits here.
//!
//! Held budgets (calls in flight, open streams, pending escalation requests and the operations
//! they list) are [`Permit`]s, released when dropped. Rates (calls, new files) are token
//! buckets with a burst.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fsd_proto::{ErrorCode, WireError};

use crate::identity::Identity;

/// One budget of an identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    CallsInFlight,
    OpenStreams,
    CallsPerSecond,
    NewFilesPerSecond,
    PendingEscalations,
    EscalatedOps,
}

impl Budget {
    /// Its config key (in `[budgets]`), also the `budget` metadata of a refusal.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::CallsInFlight => "calls_in_flight",
            Budget::OpenStreams => "open_streams",
            Budget::CallsPerSecond => "calls_per_second",
            Budget::NewFilesPerSecond => "new_files_per_second",
            Budget::PendingEscalations => "pending_escalations",
            Budget::EscalatedOps => "escalated_ops",
        }
    }
}

/// The configured limits, the same for every identity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub calls_in_flight: usize,
    pub open_streams: usize,
    pub calls_per_second: f64,
    pub call_burst: f64,
    pub new_files_per_second: f64,
    pub new_file_burst: f64,
    pub pending_escalations: usize,
    /// Operations listed by one identity's escalation requests being checked or awaiting a
    /// decision (each costs a resolution, a read and a diff); also the most one request lists.
    pub escalated_ops: usize,
}

impl Default for Limits {
    /// Far above what one busy agent does (a few calls in flight, tens of calls per second), so
    /// only a flood meets them.
    fn default() -> Limits {
        Limits {
            calls_in_flight: 256,
            open_streams: 64,
            calls_per_second: 5000.0,
            call_burst: 10_000.0,
            new_files_per_second: 1000.0,
            new_file_burst: 5000.0,
            pending_escalations: 16,
            escalated_ops: 1024,
        }
    }
}

/// Why a call was refused, and when trying again may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub budget: Budget,
    pub retry_after: Duration,
}

impl Refusal {
    /// The wire form: `FS_RATE_LIMITED`, metadata `retry_after_ms` (at least 1) and `budget`.
    pub fn into_wire(self, path: &str) -> WireError {
        crate::metrics::budget_refusal(self.budget.as_str());
        // Rounded up: a client that waits exactly this long finds a token.
        let ms = self.retry_after.as_micros().div_ceil(1000).clamp(1, u128::from(u32::MAX));
        WireError::new(
            ErrorCode::RateLimited,
            path,
            format!("the caller's {} budget is spent", self.budget.as_str()),
        )
        .with("retry_after_ms", ms.to_string())
        .with("budget", self.budget.as_str())
    }
}

/// Held budgets have no time to wait for: a retry after a short pause is the honest advice.
const HELD_RETRY: Duration = Duration::from_millis(100);
const MIN_RETRY: Duration = Duration::from_millis(1);

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64) -> Bucket {
        Bucket { tokens: burst, at: Instant::now() }
    }

    fn refill(&mut self, rate: f64, burst: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
    }

    /// How long until one token is there (zero: now).
    fn wait(&self, rate: f64) -> Duration {
        self.wait_for(rate, 1.0)
    }

    /// How long until `tokens` tokens are there (zero: now).
    fn wait_for(&self, rate: f64, tokens: f64) -> Duration {
        if self.tokens >= tokens || rate <= 0.0 {
            return Duration::ZERO;
        }
        // Config validation keeps rates positive; the guard above only avoids a division by 0.
        Duration::from_secs_f64((tokens - self.tokens) / rate)
    }
}

/// One identity's state.
#[derive(Debug)]
struct Account {
    in_flight: AtomicUsize,
    streams: AtomicUsize,
    escalations: AtomicUsize,
    escalated_ops: AtomicUsize,
    calls: Mutex<Bucket>,
    new_files: Mutex<Bucket>,
}

impl Account {
    fn new(limits: &Limits) -> Account {
        Account {
            in_flight: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            escalations: AtomicUsize::new(0),
            escalated_ops: AtomicUsize::new(0),
            calls: Mutex::new(Bucket::full(limits.call_burst)),
            new_files: Mutex::new(Bucket::full(limits.new_file_burst)),
        }
    }

    fn counter(&self, budget: Budget) -> &AtomicUsize {
        match budget {
            Budget::OpenStreams => &self.streams,
            Budget::PendingEscalations => &self.escalations,
            Budget::EscalatedOps => &self.escalated_ops,
            _ => &self.in_flight,
        }
    }

    /// Nothing held and the buckets full again: forgetting it changes nothing.
    fn is_idle(&self, limits: &Limits, now: Instant) -> bool {
        let full = |bucket: &Mutex<Bucket>, rate: f64, burst: f64| {
            let mut b = bucket.lock().unwrap_or_else(PoisonError::into_inner);
            b.refill(rate, burst, now);
            b.tokens >= burst
        };
        self.in_flight.load(Ordering::Acquire) == 0
            && self.streams.load(Ordering::Acquire) == 0
            && self.escalations.load(Ordering::Acquire) == 0
            && self.escalated_ops.load(Ordering::Acquire) == 0
            && full(&self.calls, limits.calls_per_second, limits.call_burst)
            && full(&self.new_files, limits.new_files_per_second, limits.new_file_burst)
    }
}

/// A held budget (a call in flight, an open stream, a pending escalation request, the
/// operations it lists), given back when dropped.
#[derive(Debug)]
pub struct Permit {
    account: Arc<Account>,
    budget: Budget,
    units: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.account.counter(self.budget).fetch_sub(self.units, Ordering::AcqRel);
    }
}

/// Accounts beyond this many are pruned of idle ones (identities come and go; the map must not
/// grow with every uid or certificate that ever called).
const PRUNE_AT: usize = 4096;

/// Every identity's budgets.
#[derive(Debug)]
pub struct Budgets {
    limits: Limits,
    accounts: Mutex<HashMap<String, Arc<Account>>>,
}

impl Budgets {
    pub fn new(limits: Limits) -> Budgets {
        Budgets { limits, accounts: Mutex::new(HashMap::new()) }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The account of `who`: budgets follow the most specific credential (token, certificate
    /// name, uid), the same name audit records carry.
    fn account(&self, who: &Identity) -> Arc<Account> {
        let key = who.label();
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(account) = accounts.get(&key) {
            return account.clone();
        }
        if accounts.len() >= PRUNE_AT {
            let now = Instant::now();
            accounts.retain(|_, a| Arc::strong_count(a) > 1 || !a.is_idle(&self.limits, now));
        }
        accounts.entry(key).or_insert_with(|| Arc::new(Account::new(&self.limits))).clone()
    }

    fn hold(&self, account: Arc<Account>, budget: Budget, limit: usize) -> Result<Permit, Refusal> {
        self.hold_units(account, budget, limit, 1)
    }

    fn hold_units(
        &self,
        account: Arc<Account>,
        budget: Budget,
        limit: usize,
        units: usize,
    ) -> Result<Permit, Refusal> {
        let counter = account.counter(budget);
        let taken = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            n.checked_add(units).filter(|total| *total <= limit)
        });
        match taken {
            Ok(_) => Ok(Permit { account, budget, units }),
            Err(_) => Err(Refusal { budget, retry_after: HELD_RETRY }),
        }
    }

    /// One call: a token of the call rate, and a place among the calls in flight (held by the
    /// permit until the call's reply).
    pub fn call(&self, who: &Identity) -> Result<Permit, Refusal> {
        let account = self.account(who);
        {
            let mut bucket = account.calls.lock().unwrap_or_else(PoisonError::into_inner);
            bucket.refill(self.limits.calls_per_second, self.limits.call_burst, Instant::now());
            if bucket.tokens < 1.0 {
                let wait = bucket.wait(self.limits.calls_per_second);
                return Err(Refusal { budget: Budget::CallsPerSecond, retry_after: wait.max(MIN_RETRY) });
            }
            bucket.tokens -= 1.0;
        }
        self.hold(account, Budget::CallsInFlight, self.limits.calls_in_flight)
    }

    /// One open stream, held by the permit until the stream ends or is cancelled.
    pub fn stream(&self, who: &Identity) -> Result<Permit, Refusal> {
        self.hold(self.account(who), Budget::OpenStreams, self.limits.open_streams)
    }

    /// One pending escalation request, held by the permit until it is decided or expires.
    pub fn escalation(&self, who: &Identity) -> Result<Permit, Refusal> {
        self.hold(self.account(who), Budget::PendingEscalations, self.limits.pending_escalations)
    }

    /// The `ops` operations one escalation request lists, held by the permit while they are
    /// checked and until the request is decided or expires. A request listing more than the
    /// whole budget never fits; the caller refuses it as too large before asking.
    pub fn escalated_ops(&self, who: &Identity, ops: usize) -> Result<Permit, Refusal> {
        self.hold_units(self.account(who), Budget::EscalatedOps, self.limits.escalated_ops, ops)
    }

    /// Whether a call that would create a file can start: refused while the new-file budget is
    /// spent. Files are counted from outcomes ([`created`]); the service asks only for a call
    /// that would create one, so overwrites never meet this budget.
    ///
    /// [`created`]: Budgets::created
    pub fn may_create(&self, who: &Identity) -> Result<(), Refusal> {
        self.may_create_files(who, 1)
    }

    /// Whether a call that would create `files` files (a transaction's) can start: refused
    /// until the new-file budget holds a token for each, or is full (so a transaction of more
    /// new files than the burst can run on a full budget, and is charged them all).
    pub fn may_create_files(&self, who: &Identity, files: usize) -> Result<(), Refusal> {
        let account = self.account(who);
        let mut bucket = account.new_files.lock().unwrap_or_else(PoisonError::into_inner);
        bucket.refill(self.limits.new_files_per_second, self.limits.new_file_burst, Instant::now());
        let needed = (files as f64).min(self.limits.new_file_burst).max(1.0);
        if bucket.tokens >= needed {
            return Ok(());
        }
        let wait = bucket.wait_for(self.limits.new_files_per_second, needed);
        Err(Refusal { budget: Budget::NewFilesPerSecond, retry_after: wait.max(MIN_RETRY) })
    }

    /// A call of `who` created `files` files: a token of the new-file rate each.
    pub fn created(&self, who: &Identity, files: usize) {
        let account = self.account(who);
        let mut bucket = account.new_files.lock().unwrap_or_else(PoisonError::into_inner);
        bucket.refill(self.limits.new_files_per_second, self.limits.new_file_burst, Instant::now());
        bucket.tokens -= files as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(n: u32) -> Identity {
        Identity { uid: Some(n), ..Identity::default() }
    }

    fn tight() -> Limits {
        Limits {
            calls_in_flight: 2,
            open_streams: 1,
            calls_per_second: 1.0,
            call_burst: 3.0,
            new_files_per_second: 1.0,
            new_file_burst: 1.0,
            pending_escalations: 1,
            escalated_ops: 5,
        }
    }

    fn check(result: Result<Permit, Refusal>, expected: Option<Budget>) -> Option<Permit> {
        match (result, expected) {
            (Ok(p), None) => Some(p),
            (Err(r), Some(b)) => {
                assert_eq!(r.budget, b);
                assert!(!r.retry_after.is_zero());
                None
            }
            (Ok(_), Some(b)) => panic!("expected a {b:?} refusal"),
            (Err(r), None) => panic!("unexpected refusal {r:?}"),
        }
    }

    #[test]
    fn held_budgets_are_per_identity_and_given_back() {
        let budgets = Budgets::new(tight());
        let a1 = check(budgets.call(&uid(1)), None);
        let a2 = check(budgets.call(&uid(1)), None);
        check(budgets.call(&uid(1)), Some(Budget::CallsInFlight));
        // Another identity is not touched by the first one's use.
        let b1 = check(budgets.call(&uid(2)), None);
        drop(a1);
        // The in-flight place came back; the rate bucket (burst 3) is now empty for uid 1.
        check(budgets.call(&uid(1)), Some(Budget::CallsPerSecond));
        drop((a2, b1));
        let s = check(budgets.stream(&uid(1)), None);
        check(budgets.stream(&uid(1)), Some(Budget::OpenStreams));
        check(budgets.stream(&uid(2)), None);
        drop(s);
        check(budgets.stream(&uid(1)), None);
        let e = check(budgets.escalation(&uid(1)), None);
        check(budgets.escalation(&uid(1)), Some(Budget::PendingEscalations));
        drop(e);
        check(budgets.escalation(&uid(1)), None);
    }

    #[test]
    fn escalated_operations_are_counted_per_identity_until_given_back() {
        let budgets = Budgets::new(tight());
        let three = check(budgets.escalated_ops(&uid(1), 3), None);
        check(budgets.escalated_ops(&uid(1), 3), Some(Budget::EscalatedOps));
        let two = check(budgets.escalated_ops(&uid(1), 2), None);
        check(budgets.escalated_ops(&uid(1), 1), Some(Budget::EscalatedOps));
        check(budgets.escalated_ops(&uid(2), 5), None);
        drop(three);
        check(budgets.escalated_ops(&uid(1), 3), None);
        drop(two);
        check(budgets.escalated_ops(&uid(1), usize::MAX), Some(Budget::EscalatedOps));
    }

    #[test]
    fn the_rate_refusal_says_when_a_token_is_back() {
        let budgets = Budgets::new(Limits { call_burst: 1.0, ..tight() });
        drop(check(budgets.call(&uid(1)), None));
        let refusal = budgets.call(&uid(1)).err();
        let retry = refusal.map(|r| r.retry_after).unwrap_or_default();
        assert!(retry > Duration::from_millis(900) && retry <= Duration::from_secs(1), "{retry:?}");
    }

    #[test]
    fn new_files_are_refused_once_the_budget_is_spent() {
        let budgets = Budgets::new(tight());
        assert!(budgets.may_create(&uid(1)).is_ok());
        budgets.created(&uid(1), 1);
        assert_eq!(budgets.may_create(&uid(1)).map_err(|r| r.budget), Err(Budget::NewFilesPerSecond));
        assert!(budgets.may_create(&uid(2)).is_ok());
    }

    /// A transaction's new files: a token each, or a full budget for more than the burst.
    #[test]
    fn a_transactions_new_files_need_a_token_each() {
        // (files created before, files the transaction would create, may it start)
        let cases = [(0, 3, true), (0, 5, true), (1, 3, false), (1, 2, true), (3, 1, false)];
        for (before, files, starts) in cases {
            let limits = Limits { new_files_per_second: 0.001, new_file_burst: 3.0, ..tight() };
            let budgets = Budgets::new(limits);
            budgets.created(&uid(1), before);
            let result = budgets.may_create_files(&uid(1), files).map_err(|r| r.budget);
            let expected = if starts { Ok(()) } else { Err(Budget::NewFilesPerSecond) };
            assert_eq!(result, expected, "{before} {files}");
        }
    }

    #[test]
    fn the_wire_refusal_carries_code_and_retry() {
        let wire = Refusal { budget: Budget::CallsPerSecond, retry_after: Duration::from_micros(1500) }
            .into_wire("/ws/a");
        assert_eq!(wire.code, ErrorCode::RateLimited);
        assert_eq!(wire.get("retry_after_ms"), Some("2"));
        assert_eq!(wire.get("budget"), Some("calls_per_second"));
        let status = wire.into_status();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    }
}
