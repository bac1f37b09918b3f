//! The embedded `.sql` files, in apply order.
//!
//! Every file under `sql/` at the workspace root is compiled into the binary
//! here with `include_str!`, so a broker never reads SQL from disk and the
//! schema it applies is exactly the one it was built with. [`FILES`] is the
//! whole list; the crate's tests check that it and the directory agree.
//!
//! [`crate::apply_schema`] runs every [`ApplyMode::Transactional`] file, in
//! list order, inside one transaction, and then every
//! [`ApplyMode::Concurrent`] file, in list order, outside any transaction, one
//! statement at a time.

/// How the applier must run a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// Run as a whole, inside the single schema transaction, with every other
    /// transactional file. The file must be idempotent.
    Transactional,
    /// Run outside any transaction, statement by statement, after the schema
    /// transaction has committed: `CREATE INDEX CONCURRENTLY` cannot run inside
    /// a transaction block. The file holds only
    /// `CREATE INDEX CONCURRENTLY IF NOT EXISTS <name> ON queen.<table> ...;`
    /// statements (see `sql/README.md`).
    Concurrent,
}

/// One embedded SQL file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlFile {
    /// Path relative to `sql/`, for example `schema/000_queen.sql`.
    pub name: &'static str,
    /// The file's text.
    pub text: &'static str,
    /// Whether it runs inside the schema transaction or statement by statement
    /// outside it.
    pub mode: ApplyMode,
}

/// Every SQL file, in apply order.
pub const FILES: &[SqlFile] = &[
    SqlFile {
        name: "schema/000_queen.sql",
        text: include_str!("../../../sql/schema/000_queen.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "schema/001_log_schema.sql",
        text: include_str!("../../../sql/schema/001_log_schema.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "schema/005_log_ack.sql",
        text: include_str!("../../../sql/schema/005_log_ack.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "schema/006_traces.sql",
        text: include_str!("../../../sql/schema/006_traces.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "schema/090_concurrent_indexes.sql",
        text: include_str!("../../../sql/schema/090_concurrent_indexes.sql"),
        mode: ApplyMode::Concurrent,
    },
    SqlFile {
        name: "procedures/configure.sql",
        text: include_str!("../../../sql/procedures/configure.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "procedures/push.sql",
        text: include_str!("../../../sql/procedures/push.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "procedures/pop.sql",
        text: include_str!("../../../sql/procedures/pop.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "procedures/ack.sql",
        text: include_str!("../../../sql/procedures/ack.sql"),
        mode: ApplyMode::Transactional,
    },
    SqlFile {
        name: "procedures/lifecycle.sql",
        text: include_str!("../../../sql/procedures/lifecycle.sql"),
        mode: ApplyMode::Transactional,
    },
];
