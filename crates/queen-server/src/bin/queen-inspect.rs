//! Segment inspector.
fn main() {}
