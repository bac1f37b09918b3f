//! The measure layer: what a window is measured with. CPU time per process
//! group (`cpu.rs`), PostgreSQL's counters (`stats.rs`).

pub(crate) mod cpu;
pub(crate) mod stats;
