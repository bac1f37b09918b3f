//! Cross-crate integration test support.
