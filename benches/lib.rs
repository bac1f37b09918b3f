//! Criterion benches live under benches/.
