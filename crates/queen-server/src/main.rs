//! Queen server.
fn main() {}
