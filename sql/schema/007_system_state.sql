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
