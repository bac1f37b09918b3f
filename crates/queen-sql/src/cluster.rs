//! Managed PostgreSQL cluster. (Being written.)
