-- 007_system_state.sql: cluster-wide broker state (wire-api.md §4).
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on the table (see sql/README.md).
--
-- One row per setting every broker on the database follows:
--   maintenance_mode      {"enabled": bool}  pushes go to each broker's spool
--   pop_maintenance_mode  {"enabled": bool}  every pop answers empty at once
-- A broker reads the rows at boot and every QUEEN_MAINTENANCE_REFRESH_MS; the
-- broker that changes one applies it at once.
CREATE TABLE IF NOT EXISTS queen.system_state (
    key        text        PRIMARY KEY,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- queen.database_identity: one row, the id of this Queen database, drawn
-- when the schema is first applied. Each broker's spool directory records
-- the id it spools for and is never drained into a database with another
-- (crates/queen-engine/src/spool). A copy of the database (the migration's
-- pg_dump | pg_restore, a restored backup, a promoted replica) keeps the
-- id: it names the data, not the server, so pushes spooled while the data
-- moves drain into its new home. (CREATE TABLE ... AS IF NOT EXISTS takes no
-- lock on an existing table, and its query does not run then.)
CREATE TABLE IF NOT EXISTS queen.database_identity AS SELECT gen_random_uuid() AS id;
