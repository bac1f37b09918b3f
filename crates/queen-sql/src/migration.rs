//! What copying Queen's database to another PostgreSQL needs in SQL: the
//! schemas and tables Queen owns, a target's summary, the target's
//! migration lock, clearing a target's Queen schemas before a restore
//! (refused while objects elsewhere depend on them), emptying the
//! partitions of a copy without messages, row counts for validation, and a
//! check that a target is not the source itself. The copy itself is
//! `pg_dump` and `pg_restore` (`queen_engine`'s migration component).

use tokio_postgres::error::SqlState;
use tokio_postgres::GenericClient;

use crate::SqlError;

/// The schemas Queen owns; a copy holds exactly these.
pub const SCHEMAS: &[&str] = &["queen", "queen_streams"];

/// The tables of [`SCHEMAS`] whose rows a validation compares, qualified
/// (a test checks these and [`DERIVED`] against the catalog of a database
/// with the schema applied).
pub const TABLES: &[&str] = &[
    "queen.queues",
    "queen.consumer_groups_metadata",
    "queen.log_partitions",
    "queen.partition_offset_floors",
    "queen.log_segments",
    "queen.log_txns",
    "queen.log_consumers",
    "queen.log_dlq",
    "queen.message_traces",
    "queen.system_state",
    "queen.database_identity",
    "queen.stats_queue_minute",
    "queen.stats_broker_minute",
    "queen_streams.queries",
    "queen_streams.state",
];

/// The tables of [`SCHEMAS`] a copy carries but does not compare: the
/// admin views' kept figures, derived from the tables above. A restore's
/// inserts fire the figures triggers, so the target's restored partitions
/// are marked dirty and its fold recounts them; their row counts differ
/// from the source's by design.
pub const DERIVED: &[&str] = &[
    "queen.figures_brokers",
    "queen.figures_build",
    "queen.figures_cursor",
    "queen.figures_cursor_build",
    "queen.figures_dirty",
    "queen.figures_group",
    "queen.figures_partition",
    "queen.figures_queue",
    "queen.figures_verify",
];

/// What a target database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSummary {
    /// `version()`.
    pub version: String,
    /// Tables outside PostgreSQL's own schemas.
    pub user_tables: i64,
    /// Whether any of [`SCHEMAS`] exists (a copy replaces them).
    pub has_queen_schema: bool,
}

const SUMMARY: &str = "SELECT version(), \
     (SELECT count(*) FROM pg_catalog.pg_tables \
       WHERE schemaname NOT IN ('pg_catalog', 'information_schema')), \
     EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ANY($1::text[]))";

/// The target's version and whether it holds tables, Queen's or others.
pub async fn target_summary(client: &impl GenericClient) -> Result<TargetSummary, SqlError> {
    let schemas: Vec<&str> = SCHEMAS.to_vec();
    let row = client.query_one(SUMMARY, &[&schemas]).await?;
    Ok(TargetSummary {
        version: row.try_get(0)?,
        user_tables: row.try_get(1)?,
        has_queen_schema: row.try_get(2)?,
    })
}

/// The session-level advisory lock a copy holds on its target for its
/// whole length ("QUEENMIG"), so two brokers never copy to one target at
/// once. Not the schema applier's key.
pub const TARGET_LOCK_KEY: i64 = 0x5155_4545_4E4D_4947;

const TRY_LOCK_TARGET: &str = "SELECT pg_catalog.pg_try_advisory_lock($1)";

/// Take [`TARGET_LOCK_KEY`] for this session without waiting; false: another
/// session holds it. It is released when the session closes.
pub async fn try_lock_target(client: &impl GenericClient) -> Result<bool, SqlError> {
    let row = client
        .query_one(TRY_LOCK_TARGET, &[&TARGET_LOCK_KEY])
        .await?;
    Ok(row.try_get(0)?)
}

/// The objects outside [`SCHEMAS`] that depend on something inside them
/// (`DROP SCHEMA ... CASCADE` would drop them too), as their type and
/// qualified name, at most 20.
/// A dependent's schema is its own, or its table's for a rule (named as
/// its view), trigger, default or policy; a dependent without a schema (an
/// extension, a cast) counts as outside. TOAST tables are their table's.
const OUTSIDE_DEPENDENTS: &str = "\
WITH queen AS (
    SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = ANY($1::text[])
), inside (classid, objid) AS (
    SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, q.oid FROM queen q
    UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_class c
     WHERE c.relnamespace IN (SELECT oid FROM queen)
    UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_type t
     WHERE t.typnamespace IN (SELECT oid FROM queen)
    UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_proc p
     WHERE p.pronamespace IN (SELECT oid FROM queen)
    UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, k.oid FROM pg_catalog.pg_constraint k
     WHERE k.connamespace IN (SELECT oid FROM queen)
    UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid FROM pg_catalog.pg_operator o
     WHERE o.oprnamespace IN (SELECT oid FROM queen)
    UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, l.oid FROM pg_catalog.pg_collation l
     WHERE l.collnamespace IN (SELECT oid FROM queen)
), dependent AS (
    SELECT DISTINCT d.classid, d.objid, d.objsubid,
           CASE d.classid
             WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN
               (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = d.objid)
             WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN
               (SELECT t.typnamespace FROM pg_catalog.pg_type t WHERE t.oid = d.objid)
             WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN
               (SELECT p.pronamespace FROM pg_catalog.pg_proc p WHERE p.oid = d.objid)
             WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass THEN
               (SELECT k.connamespace FROM pg_catalog.pg_constraint k WHERE k.oid = d.objid)
             WHEN 'pg_catalog.pg_operator'::pg_catalog.regclass THEN
               (SELECT o.oprnamespace FROM pg_catalog.pg_operator o WHERE o.oid = d.objid)
             WHEN 'pg_catalog.pg_collation'::pg_catalog.regclass THEN
               (SELECT l.collnamespace FROM pg_catalog.pg_collation l WHERE l.oid = d.objid)
             WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass THEN
               (SELECT c.relnamespace FROM pg_catalog.pg_rewrite r
                  JOIN pg_catalog.pg_class c ON c.oid = r.ev_class WHERE r.oid = d.objid)
             WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass THEN
               (SELECT c.relnamespace FROM pg_catalog.pg_trigger g
                  JOIN pg_catalog.pg_class c ON c.oid = g.tgrelid WHERE g.oid = d.objid)
             WHEN 'pg_catalog.pg_attrdef'::pg_catalog.regclass THEN
               (SELECT c.relnamespace FROM pg_catalog.pg_attrdef a
                  JOIN pg_catalog.pg_class c ON c.oid = a.adrelid WHERE a.oid = d.objid)
             WHEN 'pg_catalog.pg_policy'::pg_catalog.regclass THEN
               (SELECT c.relnamespace FROM pg_catalog.pg_policy y
                  JOIN pg_catalog.pg_class c ON c.oid = y.polrelid WHERE y.oid = d.objid)
           END AS nsp
      FROM pg_catalog.pg_depend d
      JOIN inside i ON d.refclassid = i.classid AND d.refobjid = i.objid
)
SELECT DISTINCT (SELECT i.type || ' ' || i.identity FROM pg_catalog.pg_identify_object(o.classid, o.objid, o.objsubid) i) AS what
  FROM dependent x
 CROSS JOIN LATERAL (
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid AS classid, r.ev_class AS objid, 0 AS objsubid
      FROM pg_catalog.pg_rewrite r
     WHERE x.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = x.objid
    UNION ALL
    SELECT x.classid, x.objid, x.objsubid
     WHERE x.classid <> 'pg_catalog.pg_rewrite'::pg_catalog.regclass
 ) o
 WHERE x.nsp IS NULL
    OR (x.nsp NOT IN (SELECT oid FROM queen)
        AND x.nsp <> 'pg_toast'::pg_catalog.regnamespace)
 ORDER BY 1
 LIMIT 20";

const DROP_SCHEMAS: &str =
    "DROP SCHEMA IF EXISTS queen CASCADE; DROP SCHEMA IF EXISTS queen_streams CASCADE";

/// What [`drop_queen_schemas`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaDrop {
    /// [`SCHEMAS`] are gone (or were never there).
    Dropped,
    /// Nothing was dropped: these objects outside [`SCHEMAS`] (type and
    /// qualified name, at most 20) depend on something inside them.
    Dependents(Vec<String>),
}

/// Drop [`SCHEMAS`] and everything in them (before a restore into the
/// target; never run on the source), in one transaction, unless an object
/// outside them depends on them: `CASCADE` would drop that too.
pub async fn drop_queen_schemas(
    client: &mut tokio_postgres::Client,
) -> Result<SchemaDrop, SqlError> {
    let schemas: Vec<&str> = SCHEMAS.to_vec();
    let txn = client.transaction().await?;
    let rows = txn.query(OUTSIDE_DEPENDENTS, &[&schemas]).await?;
    if !rows.is_empty() {
        let mut named = Vec::with_capacity(rows.len());
        for row in rows {
            named.push(row.try_get::<_, String>(0)?);
        }
        return Ok(SchemaDrop::Dependents(named));
    }
    txn.batch_execute(DROP_SCHEMAS).await?;
    txn.commit().await?;
    Ok(SchemaDrop::Dropped)
}

const MESSAGES_SKIPPED: &str = "SELECT queen.migration_messages_skipped_v1()";

/// `queen.migration_messages_skipped_v1`: after a restore without the data
/// of `log_segments` and `log_txns`, empty every partition (their
/// watermarks then point at no missing row) and end the cursors' leases;
/// returns the number of partitions.
pub async fn messages_skipped(client: &impl GenericClient) -> Result<i64, SqlError> {
    let row = client.query_one(MESSAGES_SKIPPED, &[]).await?;
    Ok(row.try_get(0)?)
}

/// The rows of `table`, one of [`TABLES`]; `None` when the table does not
/// exist there (a target the copy has not reached), or `table` is not one
/// of [`TABLES`].
pub async fn count_rows(client: &impl GenericClient, table: &str) -> Result<Option<i64>, SqlError> {
    // The name comes from the fixed list, never from a request.
    let Some(table) = TABLES.iter().find(|known| **known == table) else {
        return Ok(None);
    };
    match client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
    {
        Ok(row) => Ok(Some(row.try_get(0)?)),
        Err(error)
            if matches!(
                error.code(),
                Some(&SqlState::UNDEFINED_TABLE | &SqlState::INVALID_SCHEMA_NAME)
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

const SESSION_SEEN: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity \
     WHERE application_name = $1 AND datname = current_database())";

/// Whether a session named `application_name` is connected to this
/// session's database: with a name only the source's own session carries,
/// true means the target is the source.
pub async fn session_seen(
    client: &impl GenericClient,
    application_name: &str,
) -> Result<bool, SqlError> {
    let row = client.query_one(SESSION_SEEN, &[&application_name]).await?;
    Ok(row.try_get(0)?)
}
