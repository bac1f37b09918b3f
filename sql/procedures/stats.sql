-- procedures/stats.sql: the cluster series of /metrics, the per-minute
-- statistics rows, and their purge.
--
-- Every function is plpgsql (see sql/README.md: bodies that read tables are
-- not analysed at CREATE).

-- queen.metrics_cluster_v1: the cluster series of /metrics in one call.
--   kind 'queue': o_a partitions, o_b live messages (last_offset - log_start
--                 + 1 over its partitions), o_c dead letters
--   kind 'group': o_a messages behind (last_offset - committed over the
--                 group's cursors), o_b seconds since the oldest unconsumed
--                 message was committed (the segment created_at after the
--                 cursor, as consumer_group_cursors_v1 computes it), o_c
--                 partitions with lag
CREATE OR REPLACE FUNCTION queen.metrics_cluster_v1(p_tenant text)
RETURNS TABLE (o_kind text, o_queue text, o_group text, o_a bigint, o_b bigint, o_c bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    -- Partitions and messages, and dead letters, each grouped by queue in a
    -- subquery of its own (Citus plans no correlated subquery beside the
    -- queues reference table; it plans these one query per shard).
    SELECT 'queue'::text, q.name, NULL::text,
           COALESCE(pp.n, 0)::bigint,
           COALESCE(pp.total, 0)::bigint,
           COALESCE(dd.dead, 0)::bigint
      FROM queen.queues q
      LEFT JOIN (SELECT p.queue_id, count(*) AS n,
                        sum(greatest(p.last_offset - p.log_start + 1, 0)) AS total
                   FROM queen.log_partitions p
                  WHERE p.queue_id IN (SELECT q2.id FROM queen.queues q2 WHERE q2.tenant_id = p_tenant)
                  GROUP BY p.queue_id) pp ON pp.queue_id = q.id
      LEFT JOIN (SELECT p.queue_id, count(*) AS dead
                   FROM queen.log_dlq d
                   JOIN queen.log_partitions p ON p.id = d.partition_id
                  WHERE p.queue_id IN (SELECT q2.id FROM queen.queues q2 WHERE q2.tenant_id = p_tenant)
                  GROUP BY p.queue_id) dd ON dd.queue_id = q.id
     WHERE q.tenant_id = p_tenant;

    RETURN QUERY
    SELECT 'group'::text, c.o_queue, c.o_group,
           sum(c.o_offset_lag)::bigint,
           COALESCE(max(c.o_time_lag_seconds), 0)::bigint,
           count(*) FILTER (WHERE c.o_offset_lag > 0)::bigint
      FROM queen.consumer_group_cursors_v1(p_tenant, NULL, NULL) c
     GROUP BY c.o_queue, c.o_group;
END
$$;

-- queen.metrics_cluster_v2: metrics_cluster_v1 of every tenant, each row
-- with its tenant (the operator's /metrics labels every queue series with
-- it, so two tenants' queues of one name are two series).
CREATE OR REPLACE FUNCTION queen.metrics_cluster_v2()
RETURNS TABLE (o_tenant text, o_kind text, o_queue text, o_group text,
               o_a bigint, o_b bigint, o_c bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_tenant text;
BEGIN
    FOR v_tenant IN SELECT DISTINCT q.tenant_id FROM queen.queues q ORDER BY 1 LOOP
        RETURN QUERY
        SELECT v_tenant, m.o_kind, m.o_queue, m.o_group, m.o_a, m.o_b, m.o_c
          FROM queen.metrics_cluster_v1(v_tenant) m;
    END LOOP;
END
$$;

-- queen.metrics_cluster_v3: metrics_cluster_v2's rows, read from the kept
-- figures (procedures/figures.sql) instead of every partition and cursor:
-- a queue's partitions, live messages and dead letters from
-- figures_queue_counts_v1, a group's lag from figures_group_counts_v1. Its
-- cost follows the queues, the cursors with lag and the writes since the
-- last fold. A tenant whose figures are not built yet is read the old way.
CREATE OR REPLACE FUNCTION queen.metrics_cluster_v3()
RETURNS TABLE (o_tenant text, o_kind text, o_queue text, o_group text,
               o_a bigint, o_b bigint, o_c bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_tenant text;
    v_built boolean := queen.figures_cursors_built_v1();
BEGIN
    FOR v_tenant IN SELECT DISTINCT q.tenant_id FROM queen.queues q ORDER BY 1 LOOP
        IF NOT v_built THEN
            RETURN QUERY
            SELECT v_tenant, m.o_kind, m.o_queue, m.o_group, m.o_a, m.o_b, m.o_c
              FROM queen.metrics_cluster_v1(v_tenant) m;
            CONTINUE;
        END IF;
        RETURN QUERY
        SELECT v_tenant, 'queue'::text, q.name, NULL::text,
               COALESCE(c.o_partitions, 0)::bigint, COALESCE(c.o_total, 0)::bigint,
               COALESCE(c.o_dead, 0)::bigint
          FROM queen.queues q
          LEFT JOIN queen.figures_queue_counts_v1(v_tenant, NULL, NULL, NULL) c
            ON c.o_queue_id = q.id
         WHERE q.tenant_id = v_tenant;
        RETURN QUERY
        SELECT v_tenant, 'group'::text, g.o_queue, g.o_group, g.o_lag, g.o_max_time_lag, g.o_lagging
          FROM queen.figures_group_counts_v1(v_tenant) g;
    END LOOP;
END
$$;

-- queen.stats_write_v2: one broker's statistics of one minute, in one call.
--   p_broker  one object: the stats_broker_minute columns but bucket
--             (hostname, port, pid, cpu_user_us, ...); missing keys are 0
--   p_queues  an array of objects: queue_name (and tenant_id, else p_tenant:
--             brokers before tenants send none) and the stats_queue_minute
--             counters (push_requests, pushed, ..., parked, lag_messages,
--             lag_seconds, retention_msgs, ..., partitions_deleted,
--             ack_requests, ack_messages)
-- A queue row also records the queue's partition count and how many of its
-- partitions were created in the minute (read here, one pass over each named
-- queue's partitions). Rows of the same (bucket, broker) add up.
CREATE OR REPLACE FUNCTION queen.stats_write_v2(
    p_tenant text,
    p_bucket timestamptz,
    p_broker_id text,
    p_broker jsonb,
    p_queues jsonb
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_rows integer;
    v_tenants text[];
    v_names   text[];
    v_counts  integer[];
    v_created integer[];
BEGIN
    -- The partitions of each queue named, and those created in the minute:
    -- one grouped statement ahead of the insert, which joins its answer.
    -- (Citus plans no lateral outer join to a distributed table from a
    -- set-returning function; it does plan this as one query per shard.)
    SELECT array_agg(q.tenant_id), array_agg(q.name), array_agg(c.n), array_agg(c.created)
      INTO v_tenants, v_names, v_counts, v_created
      FROM (SELECT p.queue_id, count(*)::integer AS n,
                   (count(*) FILTER (WHERE p.created_at >= p_bucket
                                       AND p.created_at < p_bucket + interval '1 minute'))::integer AS created
              FROM queen.log_partitions p
             WHERE p.queue_id IN (SELECT q.id
                                    FROM jsonb_to_recordset(p_queues) AS r (tenant_id text, queue_name text)
                                    JOIN queen.queues q
                                      ON q.tenant_id = COALESCE(r.tenant_id, p_tenant)
                                     AND q.name = r.queue_name)
             GROUP BY p.queue_id) c
      JOIN queen.queues q ON q.id = c.queue_id;

    INSERT INTO queen.stats_broker_minute AS s (
        bucket, broker, hostname, port, pid, cpu_user_us, cpu_system_us, rss_bytes,
        pool_size, pool_idle, pool_waiting, limiter_limit, limiter_in_flight,
        event_loop_lag_avg_us, event_loop_lag_max_us, parked,
        push_requests, pushed, pop_requests, popped, pop_empty, acked, ack_failed, dlq,
        db_errors, retention_msgs, eviction_msgs, partitions_deleted, dropped_counts,
        pop_lag_count, pop_lag_sum_ms, pop_lag_max_ms)
    SELECT p_bucket, p_broker_id, COALESCE(b.hostname, ''), COALESCE(b.port, 0), COALESCE(b.pid, 0),
           COALESCE(b.cpu_user_us, 0), COALESCE(b.cpu_system_us, 0), COALESCE(b.rss_bytes, 0),
           COALESCE(b.pool_size, 0), COALESCE(b.pool_idle, 0), COALESCE(b.pool_waiting, 0),
           COALESCE(b.limiter_limit, 0), COALESCE(b.limiter_in_flight, 0),
           COALESCE(b.event_loop_lag_avg_us, 0), COALESCE(b.event_loop_lag_max_us, 0),
           COALESCE(b.parked, 0),
           COALESCE(b.push_requests, 0), COALESCE(b.pushed, 0), COALESCE(b.pop_requests, 0),
           COALESCE(b.popped, 0), COALESCE(b.pop_empty, 0), COALESCE(b.acked, 0),
           COALESCE(b.ack_failed, 0), COALESCE(b.dlq, 0), COALESCE(b.db_errors, 0),
           COALESCE(b.retention_msgs, 0), COALESCE(b.eviction_msgs, 0),
           COALESCE(b.partitions_deleted, 0), COALESCE(b.dropped_counts, 0),
           COALESCE(b.pop_lag_count, 0), COALESCE(b.pop_lag_sum_ms, 0), COALESCE(b.pop_lag_max_ms, 0)
      FROM jsonb_to_record(p_broker) AS b (
               hostname text, port integer, pid integer, cpu_user_us bigint, cpu_system_us bigint,
               rss_bytes bigint, pool_size integer, pool_idle integer, pool_waiting integer,
               limiter_limit integer, limiter_in_flight integer, event_loop_lag_avg_us bigint,
               event_loop_lag_max_us bigint, parked integer, push_requests bigint, pushed bigint,
               pop_requests bigint, popped bigint, pop_empty bigint, acked bigint,
               ack_failed bigint, dlq bigint, db_errors bigint, retention_msgs bigint,
               eviction_msgs bigint, partitions_deleted bigint, dropped_counts bigint,
               pop_lag_count bigint, pop_lag_sum_ms bigint, pop_lag_max_ms bigint)
    ON CONFLICT (bucket, broker) DO UPDATE SET
        cpu_user_us = s.cpu_user_us + EXCLUDED.cpu_user_us,
        cpu_system_us = s.cpu_system_us + EXCLUDED.cpu_system_us,
        rss_bytes = EXCLUDED.rss_bytes,
        pool_size = EXCLUDED.pool_size,
        pool_idle = EXCLUDED.pool_idle,
        pool_waiting = EXCLUDED.pool_waiting,
        limiter_limit = EXCLUDED.limiter_limit,
        limiter_in_flight = EXCLUDED.limiter_in_flight,
        event_loop_lag_avg_us = greatest(s.event_loop_lag_avg_us, EXCLUDED.event_loop_lag_avg_us),
        event_loop_lag_max_us = greatest(s.event_loop_lag_max_us, EXCLUDED.event_loop_lag_max_us),
        parked = EXCLUDED.parked,
        push_requests = s.push_requests + EXCLUDED.push_requests,
        pushed = s.pushed + EXCLUDED.pushed,
        pop_requests = s.pop_requests + EXCLUDED.pop_requests,
        popped = s.popped + EXCLUDED.popped,
        pop_empty = s.pop_empty + EXCLUDED.pop_empty,
        acked = s.acked + EXCLUDED.acked,
        ack_failed = s.ack_failed + EXCLUDED.ack_failed,
        dlq = s.dlq + EXCLUDED.dlq,
        db_errors = s.db_errors + EXCLUDED.db_errors,
        retention_msgs = s.retention_msgs + EXCLUDED.retention_msgs,
        eviction_msgs = s.eviction_msgs + EXCLUDED.eviction_msgs,
        partitions_deleted = s.partitions_deleted + EXCLUDED.partitions_deleted,
        dropped_counts = s.dropped_counts + EXCLUDED.dropped_counts,
        pop_lag_count = s.pop_lag_count + EXCLUDED.pop_lag_count,
        pop_lag_sum_ms = s.pop_lag_sum_ms + EXCLUDED.pop_lag_sum_ms,
        pop_lag_max_ms = greatest(s.pop_lag_max_ms, EXCLUDED.pop_lag_max_ms);

    INSERT INTO queen.stats_queue_minute AS s (
        bucket, broker, tenant_id, queue_name, push_requests, pushed, pop_requests, popped,
        pop_empty, acked, ack_failed, dlq, transactions, parked, lag_messages, lag_seconds,
        partitions, partitions_created, retention_msgs, completed_retention_msgs, eviction_msgs,
        partitions_deleted, ack_requests, ack_messages)
    SELECT p_bucket, p_broker_id, COALESCE(r.tenant_id, p_tenant), r.queue_name,
           COALESCE(r.push_requests, 0), COALESCE(r.pushed, 0), COALESCE(r.pop_requests, 0),
           COALESCE(r.popped, 0), COALESCE(r.pop_empty, 0), COALESCE(r.acked, 0),
           COALESCE(r.ack_failed, 0), COALESCE(r.dlq, 0), COALESCE(r.transactions, 0),
           COALESCE(r.parked, 0), COALESCE(r.lag_messages, 0), COALESCE(r.lag_seconds, 0),
           COALESCE(pc.partitions, 0), COALESCE(pc.created, 0),
           COALESCE(r.retention_msgs, 0), COALESCE(r.completed_retention_msgs, 0),
           COALESCE(r.eviction_msgs, 0), COALESCE(r.partitions_deleted, 0),
           COALESCE(r.ack_requests, 0), COALESCE(r.ack_messages, 0)
      FROM jsonb_to_recordset(p_queues) AS r (
               tenant_id text, queue_name text, push_requests bigint, pushed bigint, pop_requests bigint,
               popped bigint, pop_empty bigint, acked bigint, ack_failed bigint, dlq bigint,
               transactions bigint, parked integer, lag_messages bigint, lag_seconds bigint,
               retention_msgs bigint, completed_retention_msgs bigint, eviction_msgs bigint,
               partitions_deleted bigint, ack_requests bigint, ack_messages bigint)
      LEFT JOIN unnest(v_tenants, v_names, v_counts, v_created) AS pc (tenant_id, queue_name, partitions, created)
        ON pc.tenant_id = COALESCE(r.tenant_id, p_tenant) AND pc.queue_name = r.queue_name
     WHERE r.queue_name IS NOT NULL
    ON CONFLICT (bucket, broker, tenant_id, queue_name) DO UPDATE SET
        push_requests = s.push_requests + EXCLUDED.push_requests,
        pushed = s.pushed + EXCLUDED.pushed,
        pop_requests = s.pop_requests + EXCLUDED.pop_requests,
        popped = s.popped + EXCLUDED.popped,
        pop_empty = s.pop_empty + EXCLUDED.pop_empty,
        acked = s.acked + EXCLUDED.acked,
        ack_failed = s.ack_failed + EXCLUDED.ack_failed,
        dlq = s.dlq + EXCLUDED.dlq,
        transactions = s.transactions + EXCLUDED.transactions,
        parked = greatest(s.parked, EXCLUDED.parked),
        lag_messages = EXCLUDED.lag_messages,
        lag_seconds = EXCLUDED.lag_seconds,
        partitions = EXCLUDED.partitions,
        partitions_created = greatest(s.partitions_created, EXCLUDED.partitions_created),
        retention_msgs = s.retention_msgs + EXCLUDED.retention_msgs,
        completed_retention_msgs = s.completed_retention_msgs + EXCLUDED.completed_retention_msgs,
        eviction_msgs = s.eviction_msgs + EXCLUDED.eviction_msgs,
        partitions_deleted = s.partitions_deleted + EXCLUDED.partitions_deleted,
        ack_requests = s.ack_requests + EXCLUDED.ack_requests,
        ack_messages = s.ack_messages + EXCLUDED.ack_messages;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;

-- queen.stats_write_v1: stats_write_v2 as brokers before the ack counts and
-- the delivery lag called it (it writes neither: ack_requests, ack_messages
-- and pop_lag_* stay 0). Kept unchanged for them during a rolling upgrade:
-- such a broker re-applies this body at its boot, so a body changed here
-- would be overwritten under the brokers that rely on it.
CREATE OR REPLACE FUNCTION queen.stats_write_v1(
    p_tenant text,
    p_bucket timestamptz,
    p_broker_id text,
    p_broker jsonb,
    p_queues jsonb
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_rows integer;
BEGIN
    INSERT INTO queen.stats_broker_minute AS s (
        bucket, broker, hostname, port, pid, cpu_user_us, cpu_system_us, rss_bytes,
        pool_size, pool_idle, pool_waiting, limiter_limit, limiter_in_flight,
        event_loop_lag_avg_us, event_loop_lag_max_us, parked,
        push_requests, pushed, pop_requests, popped, pop_empty, acked, ack_failed, dlq,
        db_errors, retention_msgs, eviction_msgs, partitions_deleted, dropped_counts)
    SELECT p_bucket, p_broker_id, COALESCE(b.hostname, ''), COALESCE(b.port, 0), COALESCE(b.pid, 0),
           COALESCE(b.cpu_user_us, 0), COALESCE(b.cpu_system_us, 0), COALESCE(b.rss_bytes, 0),
           COALESCE(b.pool_size, 0), COALESCE(b.pool_idle, 0), COALESCE(b.pool_waiting, 0),
           COALESCE(b.limiter_limit, 0), COALESCE(b.limiter_in_flight, 0),
           COALESCE(b.event_loop_lag_avg_us, 0), COALESCE(b.event_loop_lag_max_us, 0),
           COALESCE(b.parked, 0),
           COALESCE(b.push_requests, 0), COALESCE(b.pushed, 0), COALESCE(b.pop_requests, 0),
           COALESCE(b.popped, 0), COALESCE(b.pop_empty, 0), COALESCE(b.acked, 0),
           COALESCE(b.ack_failed, 0), COALESCE(b.dlq, 0), COALESCE(b.db_errors, 0),
           COALESCE(b.retention_msgs, 0), COALESCE(b.eviction_msgs, 0),
           COALESCE(b.partitions_deleted, 0), COALESCE(b.dropped_counts, 0)
      FROM jsonb_to_record(p_broker) AS b (
               hostname text, port integer, pid integer, cpu_user_us bigint, cpu_system_us bigint,
               rss_bytes bigint, pool_size integer, pool_idle integer, pool_waiting integer,
               limiter_limit integer, limiter_in_flight integer, event_loop_lag_avg_us bigint,
               event_loop_lag_max_us bigint, parked integer, push_requests bigint, pushed bigint,
               pop_requests bigint, popped bigint, pop_empty bigint, acked bigint,
               ack_failed bigint, dlq bigint, db_errors bigint, retention_msgs bigint,
               eviction_msgs bigint, partitions_deleted bigint, dropped_counts bigint)
    ON CONFLICT (bucket, broker) DO UPDATE SET
        cpu_user_us = s.cpu_user_us + EXCLUDED.cpu_user_us,
        cpu_system_us = s.cpu_system_us + EXCLUDED.cpu_system_us,
        rss_bytes = EXCLUDED.rss_bytes,
        pool_size = EXCLUDED.pool_size,
        pool_idle = EXCLUDED.pool_idle,
        pool_waiting = EXCLUDED.pool_waiting,
        limiter_limit = EXCLUDED.limiter_limit,
        limiter_in_flight = EXCLUDED.limiter_in_flight,
        event_loop_lag_avg_us = greatest(s.event_loop_lag_avg_us, EXCLUDED.event_loop_lag_avg_us),
        event_loop_lag_max_us = greatest(s.event_loop_lag_max_us, EXCLUDED.event_loop_lag_max_us),
        parked = EXCLUDED.parked,
        push_requests = s.push_requests + EXCLUDED.push_requests,
        pushed = s.pushed + EXCLUDED.pushed,
        pop_requests = s.pop_requests + EXCLUDED.pop_requests,
        popped = s.popped + EXCLUDED.popped,
        pop_empty = s.pop_empty + EXCLUDED.pop_empty,
        acked = s.acked + EXCLUDED.acked,
        ack_failed = s.ack_failed + EXCLUDED.ack_failed,
        dlq = s.dlq + EXCLUDED.dlq,
        db_errors = s.db_errors + EXCLUDED.db_errors,
        retention_msgs = s.retention_msgs + EXCLUDED.retention_msgs,
        eviction_msgs = s.eviction_msgs + EXCLUDED.eviction_msgs,
        partitions_deleted = s.partitions_deleted + EXCLUDED.partitions_deleted,
        dropped_counts = s.dropped_counts + EXCLUDED.dropped_counts;

    INSERT INTO queen.stats_queue_minute AS s (
        bucket, broker, tenant_id, queue_name, push_requests, pushed, pop_requests, popped,
        pop_empty, acked, ack_failed, dlq, transactions, parked, lag_messages, lag_seconds,
        partitions, partitions_created, retention_msgs, completed_retention_msgs, eviction_msgs,
        partitions_deleted)
    SELECT p_bucket, p_broker_id, COALESCE(r.tenant_id, p_tenant), r.queue_name,
           COALESCE(r.push_requests, 0), COALESCE(r.pushed, 0), COALESCE(r.pop_requests, 0),
           COALESCE(r.popped, 0), COALESCE(r.pop_empty, 0), COALESCE(r.acked, 0),
           COALESCE(r.ack_failed, 0), COALESCE(r.dlq, 0), COALESCE(r.transactions, 0),
           COALESCE(r.parked, 0), COALESCE(r.lag_messages, 0), COALESCE(r.lag_seconds, 0),
           COALESCE(pc.partitions, 0), COALESCE(pc.created, 0),
           COALESCE(r.retention_msgs, 0), COALESCE(r.completed_retention_msgs, 0),
           COALESCE(r.eviction_msgs, 0), COALESCE(r.partitions_deleted, 0)
      FROM jsonb_to_recordset(p_queues) AS r (
               tenant_id text, queue_name text, push_requests bigint, pushed bigint, pop_requests bigint,
               popped bigint, pop_empty bigint, acked bigint, ack_failed bigint, dlq bigint,
               transactions bigint, parked integer, lag_messages bigint, lag_seconds bigint,
               retention_msgs bigint, completed_retention_msgs bigint, eviction_msgs bigint,
               partitions_deleted bigint)
      LEFT JOIN LATERAL (
          SELECT count(*)::integer AS partitions,
                 (count(*) FILTER (WHERE p.created_at >= p_bucket
                                     AND p.created_at < p_bucket + interval '1 minute'))::integer AS created
            FROM queen.queues q
            JOIN queen.log_partitions p ON p.queue_id = q.id
           WHERE q.tenant_id = COALESCE(r.tenant_id, p_tenant) AND q.name = r.queue_name
      ) AS pc ON true
     WHERE r.queue_name IS NOT NULL
    ON CONFLICT (bucket, broker, tenant_id, queue_name) DO UPDATE SET
        push_requests = s.push_requests + EXCLUDED.push_requests,
        pushed = s.pushed + EXCLUDED.pushed,
        pop_requests = s.pop_requests + EXCLUDED.pop_requests,
        popped = s.popped + EXCLUDED.popped,
        pop_empty = s.pop_empty + EXCLUDED.pop_empty,
        acked = s.acked + EXCLUDED.acked,
        ack_failed = s.ack_failed + EXCLUDED.ack_failed,
        dlq = s.dlq + EXCLUDED.dlq,
        transactions = s.transactions + EXCLUDED.transactions,
        parked = greatest(s.parked, EXCLUDED.parked),
        lag_messages = EXCLUDED.lag_messages,
        lag_seconds = EXCLUDED.lag_seconds,
        partitions = EXCLUDED.partitions,
        partitions_created = greatest(s.partitions_created, EXCLUDED.partitions_created),
        retention_msgs = s.retention_msgs + EXCLUDED.retention_msgs,
        completed_retention_msgs = s.completed_retention_msgs + EXCLUDED.completed_retention_msgs,
        eviction_msgs = s.eviction_msgs + EXCLUDED.eviction_msgs,
        partitions_deleted = s.partitions_deleted + EXCLUDED.partitions_deleted;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;

-- queen.stats_purge_v1: delete at most p_limit rows of each statistics table
-- older than p_before, oldest first (through the primary key, which leads
-- with the bucket). Returns the rows deleted.
CREATE OR REPLACE FUNCTION queen.stats_purge_v1(p_before timestamptz, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue bigint;
    v_broker bigint;
BEGIN
    DELETE FROM queen.stats_queue_minute s
     WHERE (s.bucket, s.broker, s.tenant_id, s.queue_name) IN (
           SELECT o.bucket, o.broker, o.tenant_id, o.queue_name
             FROM queen.stats_queue_minute o
            WHERE o.bucket < p_before
            ORDER BY o.bucket
            LIMIT p_limit);
    GET DIAGNOSTICS v_queue = ROW_COUNT;
    DELETE FROM queen.stats_broker_minute s
     WHERE (s.bucket, s.broker) IN (
           SELECT o.bucket, o.broker
             FROM queen.stats_broker_minute o
            WHERE o.bucket < p_before
            ORDER BY o.bucket
            LIMIT p_limit);
    GET DIAGNOSTICS v_broker = ROW_COUNT;
    RETURN v_queue + v_broker;
END
$$;
