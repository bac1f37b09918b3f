-- 009_stats.sql: statistics over time (one row per queue per broker per
-- minute, one row per broker per minute).
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on the tables (see sql/README.md).
--
-- Written by each broker once a minute with one statement
-- (queen.stats_write_v1); a write repeated for the same minute (a retried
-- write, a broker restarted within the minute) adds to the row. Read by the
-- analytics and status routes; purged by the retention loop
-- (QUEEN_STATS_RETENTION_DAYS, queen.stats_purge_v1) through the bucket
-- index. Rows are inserted and, rarely, updated in place: the default
-- fillfactor, but vacuum_truncate off as on the other churned tables, since
-- the purge empties the oldest pages continually.
CREATE TABLE IF NOT EXISTS queen.stats_queue_minute (
    bucket            timestamptz NOT NULL,
    broker            text        NOT NULL,
    tenant_id         text        NOT NULL DEFAULT 'default',
    queue_name        text        NOT NULL,
    push_requests     bigint      NOT NULL DEFAULT 0,
    pushed            bigint      NOT NULL DEFAULT 0,
    pop_requests      bigint      NOT NULL DEFAULT 0,
    popped            bigint      NOT NULL DEFAULT 0,
    pop_empty         bigint      NOT NULL DEFAULT 0,
    acked             bigint      NOT NULL DEFAULT 0,
    ack_failed        bigint      NOT NULL DEFAULT 0,
    dlq               bigint      NOT NULL DEFAULT 0,
    transactions      bigint      NOT NULL DEFAULT 0,
    -- Sampled when the row is written.
    parked            integer     NOT NULL DEFAULT 0,
    lag_messages      bigint      NOT NULL DEFAULT 0,
    lag_seconds       bigint      NOT NULL DEFAULT 0,
    partitions        integer     NOT NULL DEFAULT 0,
    partitions_created integer    NOT NULL DEFAULT 0,
    -- What this broker's retention and eviction passes removed of the queue.
    retention_msgs    bigint      NOT NULL DEFAULT 0,
    completed_retention_msgs bigint NOT NULL DEFAULT 0,
    eviction_msgs     bigint      NOT NULL DEFAULT 0,
    partitions_deleted bigint     NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, broker, tenant_id, queue_name)
);

CREATE TABLE IF NOT EXISTS queen.stats_broker_minute (
    bucket                   timestamptz NOT NULL,
    broker                   text        NOT NULL,
    hostname                 text        NOT NULL,
    port                     integer     NOT NULL DEFAULT 0,
    pid                      integer     NOT NULL DEFAULT 0,
    cpu_user_us              bigint      NOT NULL DEFAULT 0,
    cpu_system_us            bigint      NOT NULL DEFAULT 0,
    rss_bytes                bigint      NOT NULL DEFAULT 0,
    pool_size                integer     NOT NULL DEFAULT 0,
    pool_idle                integer     NOT NULL DEFAULT 0,
    pool_waiting             integer     NOT NULL DEFAULT 0,
    limiter_limit            integer     NOT NULL DEFAULT 0,
    limiter_in_flight        integer     NOT NULL DEFAULT 0,
    event_loop_lag_avg_us    bigint      NOT NULL DEFAULT 0,
    event_loop_lag_max_us    bigint      NOT NULL DEFAULT 0,
    parked                   integer     NOT NULL DEFAULT 0,
    push_requests            bigint      NOT NULL DEFAULT 0,
    pushed                   bigint      NOT NULL DEFAULT 0,
    pop_requests             bigint      NOT NULL DEFAULT 0,
    popped                   bigint      NOT NULL DEFAULT 0,
    pop_empty                bigint      NOT NULL DEFAULT 0,
    acked                    bigint      NOT NULL DEFAULT 0,
    ack_failed               bigint      NOT NULL DEFAULT 0,
    dlq                      bigint      NOT NULL DEFAULT 0,
    db_errors                bigint      NOT NULL DEFAULT 0,
    retention_msgs           bigint      NOT NULL DEFAULT 0,
    eviction_msgs            bigint      NOT NULL DEFAULT 0,
    partitions_deleted       bigint      NOT NULL DEFAULT 0,
    dropped_counts           bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, broker)
);

-- Added after the tables' first release, so guarded (sql/README.md, rule 2):
--   stats_queue_minute.ack_requests, ack_messages   ack calls that applied
--                                    to the queue and the items they applied
--                                    (the status view's ack batch efficiency);
--   stats_broker_minute.pop_lag_*    how long the messages this broker
--                                    delivered had waited since their commit
--                                    (count, sum and largest, ms): the
--                                    worker-metrics view's lag.
DO $$
DECLARE
    v_col record;
BEGIN
    FOR v_col IN
        SELECT * FROM (VALUES ('queen.stats_queue_minute', 'ack_requests'),
                              ('queen.stats_queue_minute', 'ack_messages'),
                              ('queen.stats_broker_minute', 'pop_lag_count'),
                              ('queen.stats_broker_minute', 'pop_lag_sum_ms'),
                              ('queen.stats_broker_minute', 'pop_lag_max_ms')) AS c (tbl, col)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_attribute
                        WHERE attrelid = v_col.tbl::regclass
                          AND attname = v_col.col AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I bigint NOT NULL DEFAULT 0',
                           v_col.tbl, v_col.col);
        END IF;
    END LOOP;
END
$$;

SELECT queen.schema_set_reloptions('queen.stats_queue_minute', ARRAY['vacuum_truncate=off']);
SELECT queen.schema_set_reloptions('queen.stats_broker_minute', ARRAY['vacuum_truncate=off']);
