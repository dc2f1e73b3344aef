//! Percentiles of one run's samples, and medians with their [min–max] spread across runs.

use std::time::Duration;

/// One run's latency samples, in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples(Vec::with_capacity(n))
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1e6);
    }

    /// The q-quantile (0..=1), nearest rank; 0 for no samples.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    pub fn p50(&self) -> f64 {
        self.quantile(0.5)
    }

    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }
}

/// One value per run.
#[derive(Debug, Default, Clone)]
pub struct PerRun(pub Vec<f64>);

impl PerRun {
    pub fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    pub fn median(&self) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.0.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    /// Element-wise ratio of two series measured in the same runs.
    pub fn ratio(&self, base: &PerRun) -> PerRun {
        PerRun(self.0.iter().zip(&base.0).map(|(a, b)| a / b).collect())
    }

    /// Each run's value through `f` (a ratio less one: a slowdown).
    pub fn map(&self, f: impl Fn(f64) -> f64) -> PerRun {
        PerRun(self.0.iter().map(|v| f(*v)).collect())
    }

    /// Element-wise sum of two series measured in the same runs.
    pub fn plus(&self, other: &PerRun) -> PerRun {
        PerRun(self.0.iter().zip(&other.0).map(|(a, b)| a + b).collect())
    }

    /// Whether a series of same-run ratios shows no difference this machine can measure: its runs
    /// fall on both sides of 1.0 and its median is within `bound` of it (0.03: 3%).
    pub fn unmeasurable(&self, bound: f64) -> bool {
        self.min() <= 1.0 && self.max() >= 1.0 && (self.median() - 1.0).abs() <= bound
    }

    /// `123 µs [110–140]`.
    pub fn micros(&self) -> String {
        format!("{} µs [{}–{}]", sig(self.median()), sig(self.min()), sig(self.max()))
    }

    /// `1.23× [1.10–1.40]`.
    pub fn times(&self) -> String {
        format!("{:.2}× [{:.2}–{:.2}]", self.median(), self.min(), self.max())
    }

    /// `81% [75–90]`.
    pub fn percent(&self) -> String {
        format!("{:.0}% [{:.0}–{:.0}]", self.median() * 100.0, self.min() * 100.0, self.max() * 100.0)
    }

    /// `1.2% [0.9–1.5]`: for small shares.
    pub fn percent_fine(&self) -> String {
        format!("{:.1}% [{:.1}–{:.1}]", self.median() * 100.0, self.min() * 100.0, self.max() * 100.0)
    }

    /// A value with its unit: `1234 MB/s [1100–1300]`.
    pub fn with_unit(&self, unit: &str) -> String {
        format!("{} {unit} [{}–{}]", sig(self.median()), sig(self.min()), sig(self.max()))
    }
}

/// Three significant figures, without a trailing exponent: 1.23, 12.3, 123, 1234.
pub fn sig(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_owned();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        let mut s = Samples::default();
        for us in 1..=100 {
            s.push(Duration::from_micros(us));
        }
        assert!((s.p50() - 50.0).abs() < 1e-6);
        assert!((s.p99() - 99.0).abs() < 1e-6);
        let runs = PerRun(vec![3.0, 1.0, 2.0, 10.0]);
        assert!((runs.median() - 2.5).abs() < 1e-9);
        assert_eq!(runs.micros(), "2.50 µs [1.00–10.0]");
        let ratio = PerRun(vec![2.0, 4.0]).ratio(&PerRun(vec![1.0, 2.0]));
        assert_eq!(ratio.times(), "2.00× [2.00–2.00]");
    }

    /// No difference: both sides of 1.0 and a median within the bound; a spread all above 1.0,
    /// or a median past the bound, is a difference however small.
    #[test]
    fn what_is_not_measurable() {
        assert!(PerRun(vec![0.95, 1.01, 1.10]).unmeasurable(0.03));
        assert!(PerRun(vec![1.0, 1.0]).unmeasurable(0.03));
        assert!(!PerRun(vec![1.01, 1.02, 1.03]).unmeasurable(0.03));
        assert!(!PerRun(vec![0.90, 1.05, 1.20]).unmeasurable(0.03));
        assert!(!PerRun(vec![]).unmeasurable(0.03));
    }
}
