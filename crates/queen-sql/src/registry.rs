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

/// One [`SqlFile`] from its path under `sql/`: the name and the embedded
/// text come from the one path, so they cannot disagree.
macro_rules! sql_file {
    ($name:literal, $mode:ident) => {
        SqlFile {
            name: $name,
            text: include_str!(concat!("../../../sql/", $name)),
            mode: ApplyMode::$mode,
        }
    };
}

/// Every SQL file, in apply order.
pub const FILES: &[SqlFile] = &[
    sql_file!("schema/000_queen.sql", Transactional),
    sql_file!("schema/001_log_schema.sql", Transactional),
    sql_file!("schema/002_citus_switch.sql", Transactional),
    sql_file!("schema/005_log_ack.sql", Transactional),
    sql_file!("schema/006_traces.sql", Transactional),
    sql_file!("schema/007_system_state.sql", Transactional),
    sql_file!("schema/008_streams.sql", Transactional),
    sql_file!("schema/009_stats.sql", Transactional),
    sql_file!("schema/010_figures.sql", Transactional),
    sql_file!("schema/020_citus.sql", Transactional),
    sql_file!("schema/090_concurrent_indexes.sql", Concurrent),
    sql_file!("procedures/configure.sql", Transactional),
    sql_file!("procedures/push.sql", Transactional),
    sql_file!("procedures/pop.sql", Transactional),
    sql_file!("procedures/ack.sql", Transactional),
    sql_file!("procedures/lifecycle.sql", Transactional),
    sql_file!("procedures/retention.sql", Transactional),
    sql_file!("procedures/dlq.sql", Transactional),
    sql_file!("procedures/streams.sql", Transactional),
    sql_file!("procedures/stats.sql", Transactional),
    sql_file!("procedures/figures.sql", Transactional),
    sql_file!("procedures/admin.sql", Transactional),
    sql_file!("procedures/migration.sql", Transactional),
];
