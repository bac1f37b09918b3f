//! Typed reads of segment rows. (Being written.)
