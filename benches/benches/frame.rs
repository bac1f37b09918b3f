//! Frame benches.
fn main() {}
