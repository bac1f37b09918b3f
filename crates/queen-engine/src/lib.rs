//! queen-engine
