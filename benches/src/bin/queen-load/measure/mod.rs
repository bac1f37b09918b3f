//! The measure layer: what a window is measured with. CPU time per process
//! group (`cpu.rs`), PostgreSQL's counters (`stats.rs`), the cluster and the
//! clocks around a window (`window.rs`), request latencies (`latency.rs`),
//! messages per second (`timeline.rs`), the broker's memory (`memory.rs`),
//! the machine (`machine.rs`), and trends (`fit.rs`).
//!
//! It reads the broker through the client layer and nothing above it.

pub(crate) mod cpu;
pub(crate) mod fit;
pub(crate) mod latency;
pub(crate) mod machine;
pub(crate) mod memory;
pub(crate) mod stats;
pub(crate) mod timeline;
pub(crate) mod window;

pub(crate) use latency::{micros, Latency};
pub(crate) use timeline::Timeline;
pub(crate) use window::{measure, DbWrites};

/// Counters to float for rates; exact below 2^53, far beyond any count here.
pub(crate) fn to_f64(value: u64) -> f64 {
    value as f64
}

/// [`to_f64`] for PostgreSQL's signed counters.
pub(crate) fn to_f64_i(value: i64) -> f64 {
    value as f64
}

/// `a / b`, 0 when `b` is 0.
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// `a / b` of two optional figures, `None` unless both are there and `b > 0`.
pub(crate) fn per(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}
