//! The page's login rate limit: failed logins (an unknown token, or a token that is not the named
//! person's) are counted per source address and per person named, in a fixed window each; past
//! the allowance every login from that address or for that person is answered `429` until its
//! window ends, a right token too, so guessing gains nothing from being fast. Memory is bounded:
//! at most [`MAX_TRACKED`] addresses and as many people, the oldest window dropped first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most addresses (and, apart, people) whose failures are remembered at once.
pub const MAX_TRACKED: usize = 4096;

/// Who a failure counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// A source address; an IPv6 one by its /64, which one host commonly holds whole.
    Address(IpAddr),
    /// A person named at login (only people of the config: an unknown name is not kept).
    Person(String),
}

impl Key {
    pub fn address(ip: IpAddr) -> Key {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Key::Address(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Key::Address(IpAddr::V6(prefix.into()))
                }
            },
            v4 => Key::Address(v4),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    failures: u32,
}

/// Failed logins per key, each in a window that starts at its first failure.
#[derive(Debug)]
pub struct Limiter {
    allowed: u32,
    window: Duration,
    addresses: Mutex<HashMap<Key, Window>>,
    people: Mutex<HashMap<Key, Window>>,
}

impl Limiter {
    /// `allowed` failures per `window`; the next one is refused.
    pub fn new(allowed: u32, window: Duration) -> Limiter {
        Limiter { allowed, window, addresses: Mutex::default(), people: Mutex::default() }
    }

    fn table(&self, key: &Key) -> std::sync::MutexGuard<'_, HashMap<Key, Window>> {
        let table = match key {
            Key::Address(_) => &self.addresses,
            Key::Person(_) => &self.people,
        };
        table.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long until the first of `keys` that has used its allowance may try again; `None`
    /// when none has.
    pub fn refused(&self, keys: &[Key], now: Instant) -> Option<Duration> {
        keys.iter()
            .filter_map(|key| {
                let table = self.table(key);
                let w = table.get(key)?;
                let ends = w.start + self.window;
                (w.failures >= self.allowed && now < ends).then(|| ends - now)
            })
            .max()
    }

    /// Counts one failed login against each of `keys`.
    pub fn failed(&self, keys: &[Key], now: Instant) {
        for key in keys {
            let mut table = self.table(key);
            if let Some(w) = table.get_mut(key) {
                if now < w.start + self.window {
                    w.failures = w.failures.saturating_add(1);
                } else {
                    *w = Window { start: now, failures: 1 };
                }
                continue;
            }
            if table.len() >= MAX_TRACKED {
                table.retain(|_, w| now < w.start + self.window);
            }
            if table.len() >= MAX_TRACKED
                && let Some(oldest) = table.iter().min_by_key(|(_, w)| w.start).map(|(k, _)| k.clone())
            {
                table.remove(&oldest);
            }
            table.insert(key.clone(), Window { start: now, failures: 1 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The allowance, then refusals until the window ends; each key apart; an IPv6 /64 as one;
    /// the tables never grow past their bound.
    #[test]
    fn failures_are_counted_per_key_in_a_window_within_a_bound() {
        let limiter = Limiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let a = Key::address("192.0.2.1".parse().unwrap());
        let alice = Key::Person("alice".into());
        for _ in 0..3 {
            assert_eq!(limiter.refused(&[a.clone(), alice.clone()], t0), None);
            limiter.failed(&[a.clone(), alice.clone()], t0);
        }
        let later = t0 + Duration::from_secs(20);
        let cases = [
            (vec![a.clone()], Some(Duration::from_secs(40))),
            (vec![alice.clone()], Some(Duration::from_secs(40))),
            (vec![Key::address("192.0.2.2".parse().unwrap())], None),
            (vec![Key::Person("bob".into())], None),
        ];
        for (keys, expected) in cases {
            assert_eq!(limiter.refused(&keys, later), expected, "{keys:?}");
        }
        assert_eq!(limiter.refused(std::slice::from_ref(&a), t0 + Duration::from_secs(60)), None);
        let (one, other): (IpAddr, IpAddr) =
            ("2001:db8::1".parse().unwrap(), "2001:db8::ffff:1".parse().unwrap());
        assert_eq!(Key::address(one), Key::address(other));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(Key::address(mapped), a);
        for i in 0..(MAX_TRACKED as u32 + 10) {
            limiter.failed(&[Key::address(IpAddr::V4(i.into()))], later);
        }
        assert_eq!(limiter.addresses.lock().unwrap().len(), MAX_TRACKED);
        assert_eq!(limiter.people.lock().unwrap().len(), 1);
    }
}
