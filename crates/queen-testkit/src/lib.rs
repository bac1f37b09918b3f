//! queen-testkit
