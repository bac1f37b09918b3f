//! Connection settings and pool. (Being written.)
