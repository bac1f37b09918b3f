//! The output layer: text tables and their cell formats (`table.rs`), the
//! SVG plots (`svg.rs`), and the report of a run, as tables and JSON
//! (`report.rs`).
//!
//! It renders what it is given: it imports no scenario.

pub(crate) mod report;
pub(crate) mod svg;
pub(crate) mod table;
