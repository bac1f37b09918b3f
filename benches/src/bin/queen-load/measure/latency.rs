//! Request latencies: samples in whole microseconds, and their percentiles.

use std::time::Duration;

use serde::Serialize;

/// A latency sample: whole microseconds, saturating.
pub(crate) fn micros(elapsed: Duration) -> u32 {
    u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX)
}

/// Request latency percentiles, in milliseconds.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl Latency {
    /// Percentiles (nearest rank) of request latencies in microseconds.
    pub(crate) fn from_micros(mut micros: Vec<u32>) -> Latency {
        if micros.is_empty() {
            return Latency::default();
        }
        micros.sort_unstable();
        let n = micros.len();
        // Nearest rank: the smallest value with at least `permille`/1000 of
        // the samples at or below it.
        let rank = |permille: usize| {
            let position = (permille * n).div_ceil(1000);
            f64::from(micros[position.clamp(1, n) - 1]) / 1000.0
        };
        let sum: u64 = micros.iter().map(|&m| u64::from(m)).sum();
        Latency {
            p50: rank(500),
            p90: rank(900),
            p99: rank(990),
            max: f64::from(micros[n - 1]) / 1000.0,
            mean: sum as f64 / n as f64 / 1000.0,
        }
    }
}

/// The 99th percentile of `micros`, in milliseconds.
pub(crate) fn p99(micros: &[u32]) -> f64 {
    Latency::from_micros(micros.to_vec()).p99
}
