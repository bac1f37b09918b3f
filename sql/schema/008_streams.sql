-- 008_streams.sql: the state of Queen's streaming SDKs (wire-api.md §6).
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on the tables (see sql/README.md).
--
-- queen_streams.queries: one row per registered streaming query, named by
-- (tenant_id, name), with the source queue it reads, the optional sink queue
-- it writes, and the hash of the operator configuration its state belongs
-- to (a changed hash needs an explicit reset, which wipes the state). The
-- SDKs' test harnesses delete rows here directly; the state goes with them.
CREATE SCHEMA IF NOT EXISTS queen_streams;

CREATE TABLE IF NOT EXISTS queen_streams.queries (
    id           uuid        PRIMARY KEY,
    tenant_id    text        NOT NULL DEFAULT 'default',
    name         text        NOT NULL,
    source_queue text        NOT NULL,
    sink_queue   text        NULL,
    config_hash  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

DO $$
BEGIN
    IF to_regclass('queen_streams.queries_tenant_name_uk') IS NULL THEN
        CREATE UNIQUE INDEX queries_tenant_name_uk ON queen_streams.queries (tenant_id, name);
    END IF;
    -- Deleting a queue finds its queries by source queue.
    IF to_regclass('queen_streams.idx_queries_source') IS NULL THEN
        CREATE INDEX idx_queries_source ON queen_streams.queries (tenant_id, source_queue);
    END IF;
END
$$;

-- queen_streams.state: a query's operator state, one row per (query,
-- source partition, key). value is the operator's JSON, of any shape (the
-- broker bounds its size). Rows are upserted in place on every cycle of a
-- windowed operator, so the table is tuned against churn like
-- log_partitions: fillfactor 70 leaves room for HOT updates, autovacuum
-- triggers on a threshold rather than a fraction of a small live set, and
-- vacuum_truncate is off (truncation's ACCESS EXCLUSIVE lock would stall
-- every cycle for nothing on a table whose row count does not shrink).
-- The foreign key to queries is deliberate (unlike the log tables): deleting
-- a query, through the broker or by hand, must take its state along.
CREATE TABLE IF NOT EXISTS queen_streams.state (
    query_id     uuid        NOT NULL REFERENCES queen_streams.queries (id) ON DELETE CASCADE,
    partition_id uuid        NOT NULL,
    key          text        NOT NULL,
    value        jsonb       NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);

SELECT queen.schema_set_reloptions('queen_streams.state', ARRAY[
    'fillfactor=70',
    'autovacuum_vacuum_scale_factor=0',
    'autovacuum_vacuum_threshold=500',
    'vacuum_truncate=off'
]);
