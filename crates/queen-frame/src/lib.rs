//! queen-frame
