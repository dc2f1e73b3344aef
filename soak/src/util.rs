//! Small shared pieces: the error type, a seeded generator (a failure names its seed, so a run
//! can be repeated) and the `--duration` syntax.

use std::time::Duration;

/// Why a workload could not run (not a finding: findings are reported as violations).
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error(e.to_string())
    }
}

impl From<fsd_testkit::Error> for Error {
    fn from(e: fsd_testkit::Error) -> Error {
        Error(e.to_string())
    }
}

impl From<String> for Error {
    fn from(e: String) -> Error {
        Error(e)
    }
}

impl From<&str> for Error {
    fn from(e: &str) -> Error {
        Error(e.to_owned())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// SplitMix64: small, fast, good enough to pick operations and sizes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A derived generator for a thread, so threads do not share state.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

/// A seed from the clock, for runs that did not ask for one.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// Parses `90`, `90s`, `500ms`, `15m` or `2h`.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 =
        number.parse().map_err(|_| format!("invalid duration {text:?}: expected e.g. 90s, 15m, 2h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("invalid duration unit in {text:?}: use ms, s, m or h")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        let table: &[(&str, Option<Duration>)] = &[
            ("90", Some(Duration::from_secs(90))),
            ("90s", Some(Duration::from_secs(90))),
            ("500ms", Some(Duration::from_millis(500))),
            ("15m", Some(Duration::from_secs(900))),
            ("2h", Some(Duration::from_secs(7200))),
            ("", None),
            ("5d", None),
            ("s", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_duration(text).ok(), *want, "{text:?}");
        }
    }
}
