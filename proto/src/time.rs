//! UTC civil time of a Unix timestamp, for the timestamps logs and prompts show (no time zone
//! table, no dependency): the audit log's RFC 3339 times and the approver's expiry.

/// A moment as `YYYY-MM-DD`, `HH:MM:SS` parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
}

impl Civil {
    /// The UTC date and time `secs` seconds after 1970-01-01 (proleptic Gregorian, era-based
    /// civil-from-days).
    pub fn from_unix(secs: u64) -> Civil {
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil { year, month, day, hour: rem / 3600, minute: (rem % 3600) / 60, second: rem % 60 }
    }

    /// `YYYY-MM-DD` and `HH:MM:SS`, joined by `sep`.
    pub fn format(&self, sep: char) -> String {
        let Civil { year, month, day, hour, minute, second } = self;
        format!("{year:04}-{month:02}-{day:02}{sep}{hour:02}:{minute:02}:{second:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(secs: u64, expected: &str) {
        assert_eq!(Civil::from_unix(secs).format('T'), expected, "{secs}");
    }

    #[test]
    fn unix_times_become_civil_dates() {
        check(0, "1970-01-01T00:00:00");
        check(951_782_400, "2000-02-29T00:00:00");
        check(1_796_112_000, "2026-12-01T08:00:00");
        check(4_107_542_399, "2100-02-28T23:59:59");
    }
}
