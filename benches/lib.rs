//! Criterion benches live under `benches/`; the end-to-end load generator,
//! `queen-load`, under `src/bin/` (run it with `cargo xtask bench`: every scenario; or
//! `cargo xtask bench push|pop|latency|ceiling`).
