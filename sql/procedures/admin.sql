-- procedures/admin.sql: the admin views of wire-api.md §5 and
-- dashboard-routes.md, computed from the segment model.
--
-- Each view is one function returning the route's JSON body (jsonb): the
-- contract defines these bodies as what the named procedure returns, so the
-- shape lives here, next to the query that fills it, and the broker passes it
-- through unchanged. Every function is plpgsql (bodies that read tables are
-- not analysed at CREATE), names are qualified, timestamps are ISO-8601 UTC
-- strings, numbers are JSON numbers.
--
-- Message counts, from the cursor model (per partition):
--   total       live messages: last_offset - log_start + 1 (what retention
--               has not removed)
--   completed   consumed by the least advanced cursor of the partition
--               (every offset <= its committed, from log_start)
--   processing  leased by that cursor now (committed, batch_end]
--   pending     the rest of total
--   deadLetter  dead letters filed from the partition (any group)
--   failed      the messages whose processing failed, per group: every dead
--               letter (deadLetter) plus each group's head message waiting
--               for a retry after a failed ack (its cursor's
--               batch_retry_count > 0); so failed >= deadLetter
-- A partition no group has a cursor on yet counts all its messages pending.
-- docs/admin-api.md says field by field what each view answers.
-- The views over many queues (queues, namespaces and tasks, overview,
-- status) read these counts per queue from the kept figures
-- (figures_queue_counts_v1, procedures/figures.sql), at a cost that follows
-- the queues and the writes since the last fold, not the partitions; the
-- views of one queue's partitions read every partition (and its cursors) of
-- that queue: meant for the operator's look, not for a hot loop.

-- queen.admin_iso: a timestamp as the views write it (NULL stays NULL).
CREATE OR REPLACE FUNCTION queen.admin_iso(p_at timestamptz)
RETURNS text
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- queen.admin_partition_stats_v2: one row per partition of the tenant's
-- queues (of p_queue only, unless NULL; of p_namespace / p_task when given),
-- with the counts described above, and of the live leases on it:
--   o_leases         how many
--   o_lease_messages what they still hold (committed, batch_end]
--   o_lease_batch    the batches as popped: from the first offset the pop
--                    delivered (attempt_offset, kept while the lease is
--                    held) to batch_end
--   o_lease_acked    what of those batches is acked already (a partial ack
--                    moves the cursor and keeps the lease)
-- A lease whose attempt_offset is unknown (claimed by an older broker, or
-- partly acked through one) counts its remaining span as its batch, acked 0.
CREATE OR REPLACE FUNCTION queen.admin_partition_stats_v2(
    p_tenant    text,
    p_queue     text,
    p_namespace text,
    p_task      text
) RETURNS TABLE (
    o_queue_id         uuid,
    o_queue            text,
    o_namespace        text,
    o_task             text,
    o_partition_id     uuid,
    o_partition        text,
    o_created_at       timestamptz,
    o_last_write_at    timestamptz,
    o_total            bigint,
    o_pending          bigint,
    o_processing       bigint,
    o_completed        bigint,
    o_dead_letter      bigint,
    o_total_consumed   bigint,
    o_last_consumed_at timestamptz,
    o_leases           bigint,
    o_lease_messages   bigint,
    o_failed           bigint,
    o_lease_batch      bigint,
    o_lease_acked      bigint
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT q.id, q.name, q.namespace, q.task, p.id, p.name, p.created_at, p.last_write_at,
           t.total,
           greatest(t.total - t.completed - t.processing, 0),
           t.processing, t.completed,
           COALESCE(d.n, 0),
           COALESCE(c.total_consumed, 0), c.last_consumed_at,
           COALESCE(c.leases, 0), COALESCE(c.lease_messages, 0),
           COALESCE(d.n, 0) + COALESCE(c.retrying, 0),
           COALESCE(c.lease_batch, 0), COALESCE(c.lease_acked, 0)
      FROM queen.queues q
      JOIN queen.log_partitions p ON p.queue_id = q.id
      LEFT JOIN LATERAL (
          SELECT min(x.committed) AS committed,
                 sum(x.total_consumed)::bigint AS total_consumed,
                 max(x.last_consumed_at) AS last_consumed_at,
                 count(*) FILTER (WHERE x.live)::bigint AS leases,
                 COALESCE(sum(x.batch_end - x.committed) FILTER (WHERE x.live), 0)::bigint AS lease_messages,
                 COALESCE(sum(x.batch_end - x.base) FILTER (WHERE x.live), 0)::bigint AS lease_batch,
                 COALESCE(sum(greatest(x.committed - x.base, 0)) FILTER (WHERE x.live), 0)::bigint AS lease_acked,
                 count(*) FILTER (WHERE x.batch_retry_count > 0)::bigint AS retrying
            FROM (SELECT lc.committed, lc.total_consumed, lc.last_consumed_at, lc.batch_end,
                         lc.batch_retry_count,
                         -- The offset before the batch: its first offset
                         -- less one, never above the cursor.
                         least(COALESCE(lc.attempt_offset - 1, lc.committed), lc.committed) AS base,
                         lc.worker_id IS NOT NULL
                           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                           AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL AS live
                    FROM queen.log_consumers lc
                   WHERE lc.partition_id = p.id) AS x
      ) AS c ON true
      LEFT JOIN LATERAL (
          -- The least advanced cursor's live lease is what "processing" shows.
          SELECT CASE WHEN lc.worker_id IS NOT NULL
                           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                           AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL
                      THEN greatest(lc.batch_end - lc.committed, 0) ELSE 0 END AS leased
            FROM queen.log_consumers lc
           WHERE lc.partition_id = p.id
           ORDER BY lc.committed
           LIMIT 1
      ) AS h ON true
      LEFT JOIN LATERAL (
          SELECT count(*)::bigint AS n FROM queen.log_dlq dl WHERE dl.partition_id = p.id
      ) AS d ON true
      CROSS JOIN LATERAL (
          SELECT greatest(p.last_offset - p.log_start + 1, 0)::bigint AS total,
                 CASE WHEN c.committed IS NULL THEN 0::bigint
                      ELSE least(greatest(c.committed - p.log_start + 1, 0),
                                 greatest(p.last_offset - p.log_start + 1, 0))::bigint END AS completed,
                 COALESCE(h.leased, 0)::bigint AS processing
      ) AS t
     WHERE q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task);
END
$$;

-- queen.admin_counts: the messages object of a set of partition rows.
-- (numeric, so sums of bigint columns fit without casts). Superseded by
-- admin_message_counts, which knows failed; only the superseded views below
-- call it.
CREATE OR REPLACE FUNCTION queen.admin_counts(
    p_total numeric, p_pending numeric, p_processing numeric, p_completed numeric, p_dead numeric
) RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'total', COALESCE(p_total, 0), 'pending', COALESCE(p_pending, 0),
        'processing', COALESCE(p_processing, 0), 'completed', COALESCE(p_completed, 0),
        'failed', 0, 'deadLetter', COALESCE(p_dead, 0))
$$;

-- queen.admin_message_counts: the messages object of a set of partition
-- rows, failed included (admin_counts answered failed 0).
CREATE OR REPLACE FUNCTION queen.admin_message_counts(
    p_total numeric, p_pending numeric, p_processing numeric, p_completed numeric,
    p_failed numeric, p_dead numeric
) RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'total', COALESCE(p_total, 0), 'pending', COALESCE(p_pending, 0),
        'processing', COALESCE(p_processing, 0), 'completed', COALESCE(p_completed, 0),
        'failed', COALESCE(p_failed, 0), 'deadLetter', COALESCE(p_dead, 0))
$$;

-- queen.admin_queue_config: a queue's configuration as the views show it.
-- (Arguments are ids and variables are records, never a table's row type:
-- a function naming one locks the table when it is created and validated,
-- and these files are re-applied at boot while brokers serve.)
CREATE OR REPLACE FUNCTION queen.admin_queue_config(p_queue_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    q record;
BEGIN
    SELECT * INTO q FROM queen.queues x WHERE x.id = p_queue_id;
    RETURN jsonb_build_object(
        'leaseTime', q.lease_time, 'retryLimit', q.retry_limit, 'retryDelay', q.retry_delay,
        'ttl', q.ttl, 'priority', q.priority, 'maxQueueSize', q.max_queue_size,
        'maxSize', q.max_queue_size,
        'delayedProcessing', q.delayed_processing, 'windowBuffer', q.window_buffer,
        'retentionEnabled', q.retention_enabled, 'retentionSeconds', q.retention_seconds,
        'completedRetentionSeconds', q.completed_retention_seconds,
        'maxWaitTimeSeconds', q.max_wait_time_seconds,
        'deadLetterQueue', q.dead_letter_queue, 'dlqAfterMaxRetries', q.dlq_after_max_retries,
        'dlqEnabled', q.dlq_enabled, 'encryptionEnabled', q.encryption_enabled,
        'minPopWaitTime', q.min_pop_wait_time, 'dedupWindowSeconds', q.dedup_window_seconds);
END
$$;

-- queen.admin_queues_v2: GET /api/v1/resources/queues.
CREATE OR REPLACE FUNCTION queen.admin_queues_v2(p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN jsonb_build_object('queues', COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
                   'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                   'priority', q.priority,
                   'createdAt', queen.admin_iso(q.created_at),
                   'partitions', COALESCE(s.partitions, 0),
                   'messages', queen.admin_message_counts(s.total, s.pending, s.processing, s.completed, s.failed, s.dead))
                 ORDER BY q.name)
          FROM queen.queues q
          LEFT JOIN (
              SELECT a.o_queue_id AS id, a.o_partitions AS partitions, a.o_total AS total,
                     a.o_pending AS pending, a.o_processing AS processing,
                     a.o_completed AS completed, a.o_failed AS failed, a.o_dead AS dead
                FROM queen.figures_queue_counts_v1(p_tenant, NULL, NULL, NULL) a) AS s ON s.id = q.id
         WHERE q.tenant_id = p_tenant), '[]'::jsonb));
END
$$;

-- queen.admin_queue_v2: GET /api/v1/resources/queues/:queue; NULL when the
-- queue does not exist.
CREATE OR REPLACE FUNCTION queen.admin_queue_v2(p_tenant text, p_queue text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_queue record;
    v_partitions jsonb;
    v_totals jsonb;
BEGIN
    SELECT * INTO v_queue FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'id', a.o_partition_id, 'name', a.o_partition,
               'createdAt', queen.admin_iso(a.o_created_at),
               'lastActivity', queen.admin_iso(a.o_last_write_at),
               'messages', queen.admin_message_counts(a.o_total, a.o_pending, a.o_processing, a.o_completed, a.o_failed, a.o_dead_letter),
               'stats', queen.admin_message_counts(a.o_total, a.o_pending, a.o_processing, a.o_completed, a.o_failed, a.o_dead_letter),
               'cursor', jsonb_build_object('totalConsumed', a.o_total_consumed,
                                            'lastConsumedAt', queen.admin_iso(a.o_last_consumed_at)))
             ORDER BY a.o_partition), '[]'::jsonb),
           queen.admin_message_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint,
                                      sum(a.o_processing)::bigint, sum(a.o_completed)::bigint,
                                      sum(a.o_failed)::bigint, sum(a.o_dead_letter)::bigint)
      INTO v_partitions, v_totals
      FROM queen.admin_partition_stats_v2(p_tenant, p_queue, NULL, NULL) a;
    RETURN jsonb_build_object(
        'id', v_queue.id, 'name', v_queue.name, 'namespace', v_queue.namespace,
        'task', v_queue.task, 'priority', v_queue.priority,
        'createdAt', queen.admin_iso(v_queue.created_at),
        'config', queen.admin_queue_config(v_queue.id),
        'partitions', v_partitions,
        'totals', v_totals || jsonb_build_object('messages', v_totals,
                                                 'partitions', jsonb_array_length(v_partitions)));
END
$$;

-- queen.admin_groupings_v2: GET /api/v1/resources/namespaces (p_by
-- 'namespace') and /resources/tasks (p_by 'task'): queues grouped by that
-- field (queues without one are left out).
CREATE OR REPLACE FUNCTION queen.admin_groupings_v2(p_tenant text, p_by text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_list jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               p_by, g.key, 'queues', g.queues, 'partitions', g.partitions,
               'messages', queen.admin_message_counts(g.total, g.pending, g.processing, g.completed, g.failed, g.dead))
             ORDER BY g.key), '[]'::jsonb)
      INTO v_list
      FROM (SELECT CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END AS key,
                   count(DISTINCT q.id) AS queues,
                   COALESCE(sum(s.partitions), 0)::bigint AS partitions,
                   sum(s.total)::bigint AS total, sum(s.pending)::bigint AS pending,
                   sum(s.processing)::bigint AS processing, sum(s.completed)::bigint AS completed,
                   sum(s.failed)::bigint AS failed, sum(s.dead)::bigint AS dead
              FROM queen.queues q
              LEFT JOIN (
                  SELECT a.o_queue_id AS id, a.o_partitions AS partitions, a.o_total AS total,
                         a.o_pending AS pending, a.o_processing AS processing,
                         a.o_completed AS completed, a.o_failed AS failed, a.o_dead AS dead
                    FROM queen.figures_queue_counts_v1(p_tenant, NULL, NULL, NULL) a) AS s ON s.id = q.id
             WHERE q.tenant_id = p_tenant
               AND (CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END) <> ''
             GROUP BY 1) AS g;
    RETURN jsonb_build_object(CASE WHEN p_by = 'task' THEN 'tasks' ELSE 'namespaces' END, v_list);
END
$$;

-- queen.admin_lag_summary: {avg, median, min, max} of a set of numbers.
CREATE OR REPLACE FUNCTION queen.admin_summary(p_values double precision[])
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'avg', COALESCE((SELECT avg(v) FROM unnest(p_values) v), 0),
        'median', COALESCE((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v) FROM unnest(p_values) v), 0),
        'min', COALESCE((SELECT min(v) FROM unnest(p_values) v), 0),
        'max', COALESCE((SELECT max(v) FROM unnest(p_values) v), 0))
$$;

-- queen.admin_overview_v2: GET /api/v1/resources/overview. Throughput is the
-- statistics rows' last full minute (every broker's), per second; statsAge
-- the seconds since the newest statistics row (-1: none yet).
CREATE OR REPLACE FUNCTION queen.admin_overview_v2(p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_counts jsonb;
    v_partitions bigint;
    v_time double precision[];
    v_offset double precision[];
    v_newest timestamptz;
    v_pushed bigint;
    v_acked bigint;
BEGIN
    SELECT COALESCE(sum(a.o_partitions), 0)::bigint,
           queen.admin_message_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint,
                                      sum(a.o_processing)::bigint, sum(a.o_completed)::bigint,
                                      sum(a.o_failed)::bigint, sum(a.o_dead)::bigint)
      INTO v_partitions, v_counts
      FROM queen.figures_queue_counts_v1(p_tenant, NULL, NULL, NULL) a;
    SELECT array_agg(c.o_time_lag_seconds::double precision) FILTER (WHERE c.o_offset_lag > 0),
           array_agg(c.o_offset_lag::double precision) FILTER (WHERE c.o_offset_lag > 0)
      INTO v_time, v_offset
      FROM queen.consumer_group_cursors_v1(p_tenant, NULL, NULL) c;
    SELECT max(s.bucket) INTO v_newest FROM queen.stats_queue_minute s WHERE s.tenant_id = p_tenant;
    SELECT COALESCE(sum(s.pushed), 0), COALESCE(sum(s.acked), 0)
      INTO v_pushed, v_acked
      FROM queen.stats_queue_minute s
     WHERE s.tenant_id = p_tenant AND s.bucket = v_newest;
    RETURN jsonb_build_object(
        'queues', (SELECT count(*) FROM queen.queues q WHERE q.tenant_id = p_tenant),
        'partitions', v_partitions,
        'namespaces', (SELECT count(DISTINCT q.namespace) FROM queen.queues q
                        WHERE q.tenant_id = p_tenant AND q.namespace <> ''),
        'tasks', (SELECT count(DISTINCT q.task) FROM queen.queues q
                   WHERE q.tenant_id = p_tenant AND q.task <> ''),
        'messages', v_counts,
        'lag', jsonb_build_object('time', queen.admin_summary(v_time),
                                  'offset', queen.admin_summary(v_offset)),
        'throughput', jsonb_build_object('ingestedPerSecond', round(v_pushed / 60.0, 3),
                                         'processedPerSecond', round(v_acked / 60.0, 3)),
        'timestamp', queen.admin_iso(v_now),
        'statsAge', CASE WHEN v_newest IS NULL THEN -1
                         ELSE greatest(floor(extract(epoch FROM v_now - v_newest)), 0) END);
END
$$;

-- queen.admin_overview_v3: admin_overview_v2 (above, kept verbatim for the
-- previous version's brokers) with the lag read from the kept cursor
-- figures (figures_lag_values_v1): the cursors with lag, not every cursor.
CREATE OR REPLACE FUNCTION queen.admin_overview_v3(p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_counts jsonb;
    v_partitions bigint;
    v_time double precision[];
    v_offset double precision[];
    v_newest timestamptz;
    v_pushed bigint;
    v_acked bigint;
BEGIN
    SELECT COALESCE(sum(a.o_partitions), 0)::bigint,
           queen.admin_message_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint,
                                      sum(a.o_processing)::bigint, sum(a.o_completed)::bigint,
                                      sum(a.o_failed)::bigint, sum(a.o_dead)::bigint)
      INTO v_partitions, v_counts
      FROM queen.figures_queue_counts_v1(p_tenant, NULL, NULL, NULL) a;
    SELECT array_agg(c.o_time_lag), array_agg(c.o_offset_lag)
      INTO v_time, v_offset
      FROM queen.figures_lag_values_v1(p_tenant) c;
    SELECT max(s.bucket) INTO v_newest FROM queen.stats_queue_minute s WHERE s.tenant_id = p_tenant;
    SELECT COALESCE(sum(s.pushed), 0), COALESCE(sum(s.acked), 0)
      INTO v_pushed, v_acked
      FROM queen.stats_queue_minute s
     WHERE s.tenant_id = p_tenant AND s.bucket = v_newest;
    RETURN jsonb_build_object(
        'queues', (SELECT count(*) FROM queen.queues q WHERE q.tenant_id = p_tenant),
        'partitions', v_partitions,
        'namespaces', (SELECT count(DISTINCT q.namespace) FROM queen.queues q
                        WHERE q.tenant_id = p_tenant AND q.namespace <> ''),
        'tasks', (SELECT count(DISTINCT q.task) FROM queen.queues q
                   WHERE q.tenant_id = p_tenant AND q.task <> ''),
        'messages', v_counts,
        'lag', jsonb_build_object('time', queen.admin_summary(v_time),
                                  'offset', queen.admin_summary(v_offset)),
        'throughput', jsonb_build_object('ingestedPerSecond', round(v_pushed / 60.0, 3),
                                         'processedPerSecond', round(v_acked / 60.0, 3)),
        'timestamp', queen.admin_iso(v_now),
        'statsAge', CASE WHEN v_newest IS NULL THEN -1
                         ELSE greatest(floor(extract(epoch FROM v_now - v_newest)), 0) END);
END
$$;

-- queen.admin_queue_detail_v2: GET /api/v1/status/queues/:queue (the
-- dashboard's preferred queue view); NULL when the queue does not exist.
CREATE OR REPLACE FUNCTION queen.admin_queue_detail_v2(p_tenant text, p_queue text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v jsonb := queen.admin_queue_v2(p_tenant, p_queue);
BEGIN
    IF v IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object(
        'queue', v - 'partitions' - 'totals',
        'messages', v -> 'totals' -> 'messages',
        'partitions', v -> 'partitions',
        'totals', v -> 'totals');
END
$$;

-- queen.admin_status_queues_v2: GET /api/v1/status/queues, the queues with
-- their counts and what the statistics rows say of [p_from, p_to).
CREATE OR REPLACE FUNCTION queen.admin_status_queues_v2(
    p_tenant text, p_namespace text, p_task text, p_queue text,
    p_from timestamptz, p_to timestamptz, p_limit integer, p_offset integer
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_list jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(x.row ORDER BY x.name), '[]'::jsonb) INTO v_list
      FROM (SELECT q.name,
                   jsonb_build_object(
                       'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                       'priority', q.priority, 'createdAt', queen.admin_iso(q.created_at),
                       'partitions', COALESCE(s.partitions, 0),
                       'messages', queen.admin_message_counts(s.total, s.pending, s.processing, s.completed, s.failed, s.dead),
                       'throughput', jsonb_build_object(
                           'pushed', COALESCE(st.pushed, 0), 'popped', COALESCE(st.popped, 0),
                           'acked', COALESCE(st.acked, 0), 'failed', COALESCE(st.failed, 0))) AS row
              FROM queen.queues q
              LEFT JOIN (
                  SELECT a.o_queue_id AS id, a.o_partitions AS partitions, a.o_total AS total,
                         a.o_pending AS pending, a.o_processing AS processing,
                         a.o_completed AS completed, a.o_failed AS failed, a.o_dead AS dead
                    FROM queen.figures_queue_counts_v1(p_tenant, p_queue, p_namespace, p_task) a) AS s ON s.id = q.id
              LEFT JOIN (
                  SELECT sq.queue_name, sum(sq.pushed)::bigint AS pushed, sum(sq.popped)::bigint AS popped,
                         sum(sq.acked)::bigint AS acked, sum(sq.ack_failed)::bigint AS failed
                    FROM queen.stats_queue_minute sq
                   WHERE sq.tenant_id = p_tenant AND sq.bucket >= p_from AND sq.bucket < p_to
                   GROUP BY sq.queue_name) AS st ON st.queue_name = q.name
             WHERE q.tenant_id = p_tenant
               AND (p_queue IS NULL OR q.name = p_queue)
               AND (p_namespace IS NULL OR q.namespace = p_namespace)
               AND (p_task IS NULL OR q.task = p_task)
             ORDER BY q.name
             LIMIT p_limit OFFSET p_offset) AS x;
    RETURN jsonb_build_object('queues', v_list,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END
$$;

-- queen.admin_bucket_minutes: the bucket width of a chart over [p_from, p_to).
CREATE OR REPLACE FUNCTION queen.admin_bucket_minutes(p_from timestamptz, p_to timestamptz)
RETURNS integer
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE WHEN p_to - p_from <= interval '1 hour' THEN 1
                WHEN p_to - p_from <= interval '6 hours' THEN 5
                WHEN p_to - p_from <= interval '24 hours' THEN 15
                ELSE 60 END
$$;

-- queen.admin_bucket: the start of the p_minutes-wide bucket holding p_at.
CREATE OR REPLACE FUNCTION queen.admin_bucket(p_at timestamptz, p_minutes integer)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT to_timestamp(floor(extract(epoch FROM p_at) / (p_minutes * 60)) * (p_minutes * 60))
$$;

-- queen.admin_queue_series: the queue rows of the statistics in [p_from,
-- p_to), summed per (bucket, queue) over every broker, for the tenant's
-- queues of the filters.
CREATE OR REPLACE FUNCTION queen.admin_queue_series(
    p_tenant text, p_from timestamptz, p_to timestamptz, p_minutes integer,
    p_queue text, p_namespace text, p_task text
) RETURNS TABLE (
    o_bucket timestamptz, o_queue text, o_push_requests bigint, o_pushed bigint,
    o_pop_requests bigint, o_popped bigint, o_pop_empty bigint, o_acked bigint,
    o_ack_failed bigint, o_dlq bigint, o_transactions bigint, o_parked bigint,
    o_lag_seconds_avg double precision, o_lag_seconds_max bigint, o_partitions bigint,
    o_partitions_created bigint, o_retention bigint, o_completed_retention bigint,
    o_eviction bigint, o_partitions_deleted bigint
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT queen.admin_bucket(s.bucket, p_minutes), s.queue_name,
           sum(s.push_requests)::bigint, sum(s.pushed)::bigint, sum(s.pop_requests)::bigint,
           sum(s.popped)::bigint, sum(s.pop_empty)::bigint, sum(s.acked)::bigint,
           sum(s.ack_failed)::bigint, sum(s.dlq)::bigint, sum(s.transactions)::bigint,
           max(s.parked)::bigint,
           avg(s.lag_seconds)::double precision, max(s.lag_seconds)::bigint,
           max(s.partitions)::bigint, max(s.partitions_created)::bigint,
           sum(s.retention_msgs)::bigint, sum(s.completed_retention_msgs)::bigint,
           sum(s.eviction_msgs)::bigint, sum(s.partitions_deleted)::bigint
      FROM queen.stats_queue_minute s
      LEFT JOIN queen.queues q ON q.tenant_id = s.tenant_id AND q.name = s.queue_name
     WHERE s.tenant_id = p_tenant AND s.bucket >= p_from AND s.bucket < p_to
       AND (p_queue IS NULL OR s.queue_name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task)
     GROUP BY 1, 2;
END
$$;

-- queen.admin_workers: each broker of the statistics rows in [p_from, p_to)
-- with its averages and its latest figures (the workers[] of the status and
-- worker-metrics views).
CREATE OR REPLACE FUNCTION queen.admin_workers(p_from timestamptz, p_to timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
                   'hostname', w.hostname, 'port', w.port, 'workerId', w.broker,
                   'avgEventLoopLagMs', round(w.loop_avg / 1000.0, 3),
                   'maxEventLoopLagMs', round(w.loop_max / 1000.0, 3),
                   'freeSlots', w.free_slots, 'dbConnections', w.db_connections,
                   'jobQueueSize', w.waiting, 'lastSeen', queen.admin_iso(w.last_seen))
                 ORDER BY w.broker)
          FROM (SELECT s.broker, max(s.hostname) AS hostname, max(s.port) AS port,
                       avg(s.event_loop_lag_avg_us) AS loop_avg,
                       max(s.event_loop_lag_max_us) AS loop_max,
                       (array_agg(s.limiter_limit - s.limiter_in_flight ORDER BY s.bucket DESC))[1] AS free_slots,
                       (array_agg(s.pool_size ORDER BY s.bucket DESC))[1] AS db_connections,
                       (array_agg(s.pool_waiting ORDER BY s.bucket DESC))[1] AS waiting,
                       max(s.bucket) AS last_seen
                  FROM queen.stats_broker_minute s
                 WHERE s.bucket >= p_from AND s.bucket < p_to
                 GROUP BY s.broker) AS w), '[]'::jsonb);
END
$$;

-- queen.admin_status_v2: GET /api/v1/status.
CREATE OR REPLACE FUNCTION queen.admin_status_v2(
    p_tenant text, p_from timestamptz, p_to timestamptz,
    p_queue text, p_namespace text, p_task text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_dlq_total      bigint;
    v_dlq_partitions bigint;
    v_dlq_top        jsonb;
    v_now timestamptz := clock_timestamp();
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_seconds numeric := v_minutes * 60;
    v_throughput jsonb;
    v_counts jsonb;
    v_leases jsonb;
    v_dlq jsonb;
    v_workers jsonb;
    v_queues jsonb;
    v_newest timestamptz;
    v_efficiency jsonb;
    v_errors jsonb;
BEGIN
    WITH q AS (
        SELECT a.o_bucket AS bucket, sum(a.o_pushed) AS pushed, sum(a.o_popped) AS popped,
               sum(a.o_acked) AS acked, sum(a.o_ack_failed) AS failed, sum(a.o_dlq) AS dlq,
               avg(a.o_lag_seconds_avg) AS lag_avg, max(a.o_lag_seconds_max) AS lag_max
          FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a
         GROUP BY 1),
    b AS (
        SELECT queen.admin_bucket(s.bucket, v_minutes) AS bucket,
               sum(s.db_errors) AS db_errors,
               avg(s.event_loop_lag_avg_us) AS loop_avg, max(s.event_loop_lag_max_us) AS loop_max,
               sum(s.cpu_user_us) AS cpu_user, sum(s.cpu_system_us) AS cpu_sys,
               count(DISTINCT s.broker) AS brokers,
               avg(s.pool_size - s.pool_idle) AS pool_active, avg(s.pool_idle) AS pool_idle,
               avg(s.pool_size) AS pool_size
          FROM queen.stats_broker_minute s
         WHERE s.bucket >= p_from AND s.bucket < p_to
         GROUP BY 1)
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'timestamp', queen.admin_iso(k.bucket),
               'ingested', COALESCE(q.pushed, 0), 'processed', COALESCE(q.acked, 0),
               'ingestedPerSecond', round(COALESCE(q.pushed, 0) / v_seconds, 3),
               'popPerSecond', round(COALESCE(q.popped, 0) / v_seconds, 3),
               'processedPerSecond', round(COALESCE(q.acked, 0) / v_seconds, 3),
               'avgLagMs', round(COALESCE(q.lag_avg, 0) * 1000),
               'maxLagMs', COALESCE(q.lag_max, 0) * 1000,
               'dbErrors', COALESCE(b.db_errors, 0), 'ackFailed', COALESCE(q.failed, 0),
               'dlqCount', COALESCE(q.dlq, 0),
               'avgEventLoopLagMs', round(COALESCE(b.loop_avg, 0) / 1000.0, 3),
               'maxEventLoopLagMs', round(COALESCE(b.loop_max, 0) / 1000.0, 3),
               'queenCpuUserPct', round(COALESCE(b.cpu_user, 0) / (v_seconds * 1e6) * 100, 2),
               'queenCpuSysPct', round(COALESCE(b.cpu_sys, 0) / (v_seconds * 1e6) * 100, 2),
               'dbPoolActive', round(COALESCE(b.pool_active, 0), 1),
               'dbPoolIdle', round(COALESCE(b.pool_idle, 0), 1),
               'dbPoolSize', round(COALESCE(b.pool_size, 0), 1))
             ORDER BY k.bucket DESC), '[]'::jsonb)
      INTO v_throughput
      FROM (SELECT bucket FROM q UNION SELECT bucket FROM b) AS k
      LEFT JOIN q ON q.bucket = k.bucket
      LEFT JOIN b ON b.bucket = k.bucket;

    SELECT queen.admin_message_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint,
                                      sum(a.o_processing)::bigint, sum(a.o_completed)::bigint,
                                      sum(a.o_failed)::bigint, sum(a.o_dead)::bigint),
           jsonb_build_object('active', COALESCE(sum(a.o_leases), 0),
                              'partitionsWithLeases', COALESCE(sum(a.o_leased_partitions), 0),
                              'totalBatchSize', COALESCE(sum(a.o_lease_batch), 0),
                              'totalAcked', COALESCE(sum(a.o_lease_acked), 0))
      INTO v_counts, v_leases
      FROM queen.figures_queue_counts_v1(p_tenant, p_queue, p_namespace, p_task) a;

    -- Dead letters: the totals, then the top errors, as two statements (on
    -- Citus a subquery in an aggregate's target list is not pushed down).
    SELECT count(*), count(DISTINCT d.partition_id)
      INTO v_dlq_total, v_dlq_partitions
      FROM queen.log_dlq d
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task);
    SELECT COALESCE(jsonb_agg(jsonb_build_object('error', e.error, 'count', e.n) ORDER BY e.n DESC, e.error),
                    '[]'::jsonb)
      INTO v_dlq_top
      FROM (SELECT COALESCE(d2.error, '') AS error, count(*) AS n
              FROM queen.log_dlq d2
              JOIN queen.log_partitions p2 ON p2.id = d2.partition_id
              JOIN queen.queues q2 ON q2.id = p2.queue_id
             WHERE q2.tenant_id = p_tenant
               AND (p_queue IS NULL OR q2.name = p_queue)
               AND (p_namespace IS NULL OR q2.namespace = p_namespace)
               AND (p_task IS NULL OR q2.task = p_task)
             GROUP BY 1 ORDER BY 2 DESC LIMIT 10) AS e;
    v_dlq := jsonb_build_object('totalMessages', v_dlq_total,
                                'affectedPartitions', v_dlq_partitions,
                                'topErrors', v_dlq_top);

    v_workers := queen.admin_workers(p_from, p_to);

    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'name', x.o_queue, 'pushed', x.pushed, 'popped', x.popped, 'acked', x.acked)
             ORDER BY x.o_queue), '[]'::jsonb)
      INTO v_queues
      FROM (SELECT a.o_queue, sum(a.o_pushed)::bigint AS pushed, sum(a.o_popped)::bigint AS popped,
                   sum(a.o_acked)::bigint AS acked
              FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a
             GROUP BY a.o_queue) AS x;

    -- Messages per request: how well batching works (acks: the items an ack
    -- call applied, from the queue rows' ack counts).
    SELECT jsonb_build_object(
               'push', COALESCE(round(sum(a.o_pushed)::numeric / NULLIF(sum(a.o_push_requests), 0), 2), 0),
               'pop', COALESCE(round(sum(a.o_popped)::numeric / NULLIF(sum(a.o_pop_requests) - sum(a.o_pop_empty), 0), 2), 0),
               'ack', (SELECT COALESCE(round(sum(s.ack_messages)::numeric / NULLIF(sum(s.ack_requests), 0), 2), 0)
                         FROM queen.stats_queue_minute s
                         LEFT JOIN queen.queues q ON q.tenant_id = s.tenant_id AND q.name = s.queue_name
                        WHERE s.tenant_id = p_tenant AND s.bucket >= p_from AND s.bucket < p_to
                          AND (p_queue IS NULL OR s.queue_name = p_queue)
                          AND (p_namespace IS NULL OR q.namespace = p_namespace)
                          AND (p_task IS NULL OR q.task = p_task))),
           jsonb_build_object('ackFailed', COALESCE(sum(a.o_ack_failed), 0),
                              'dlq', COALESCE(sum(a.o_dlq), 0))
      INTO v_efficiency, v_errors
      FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a;
    v_errors := v_errors || jsonb_build_object('dbErrors',
        (SELECT COALESCE(sum(s.db_errors), 0) FROM queen.stats_broker_minute s
          WHERE s.bucket >= p_from AND s.bucket < p_to));

    SELECT max(s.bucket) INTO v_newest FROM queen.stats_broker_minute s;
    RETURN jsonb_build_object(
        'timeRange', jsonb_build_object('from', queen.admin_iso(p_from), 'to', queen.admin_iso(p_to),
                                        'bucketMinutes', v_minutes,
                                        'pointCount', jsonb_array_length(v_throughput)),
        'bucketMinutes', v_minutes,
        'throughput', v_throughput,
        'queues', v_queues,
        'messages', v_counts || jsonb_build_object('batchEfficiency', v_efficiency),
        'leases', v_leases,
        'deadLetterQueue', v_dlq,
        'workers', v_workers,
        'errors', v_errors,
        'statsAge', CASE WHEN v_newest IS NULL THEN -1
                         ELSE greatest(floor(extract(epoch FROM v_now - v_newest)), 0) END);
END
$$;

-- queen.admin_agg: {avg, max, min, last} of a series' values within a bucket.
CREATE OR REPLACE FUNCTION queen.admin_agg(p_avg numeric, p_max numeric, p_min numeric, p_last numeric)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT jsonb_build_object('avg', round(COALESCE(p_avg, 0), 2), 'max', COALESCE(p_max, 0),
                              'min', COALESCE(p_min, 0), 'last', COALESCE(p_last, 0))
$$;

-- queen.admin_system_metrics_v2: GET /api/v1/analytics/system-metrics, one
-- series per broker. cpu.user_us and cpu.system_us are CPU time per wall
-- time in hundredths of a percent of one core (the dashboard shows
-- value / 100 as a percentage). threadpool.db.queue_size is the requests
-- waiting for a pooled connection; the broker has no other thread pool, so
-- there is no threadpool.system.
CREATE OR REPLACE FUNCTION queen.admin_system_metrics_v2(
    p_from timestamptz, p_to timestamptz, p_hostname text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_replicas jsonb;
BEGIN
    WITH m AS (
        SELECT s.broker, s.hostname, s.port, queen.admin_bucket(s.bucket, v_minutes) AS bucket, s.bucket AS minute,
               s.cpu_user_us / 6000.0 AS cpu_user, s.cpu_system_us / 6000.0 AS cpu_sys,
               s.rss_bytes::numeric AS rss, (s.pool_size - s.pool_idle)::numeric AS active,
               s.pool_idle::numeric AS idle, s.pool_size::numeric AS size, s.pool_waiting::numeric AS waiting
          FROM queen.stats_broker_minute s
         WHERE s.bucket >= p_from AND s.bucket < p_to
           AND (p_hostname IS NULL OR s.hostname = p_hostname)),
    points AS (
        SELECT m.broker, m.bucket,
               jsonb_build_object(
                   'timestamp', queen.admin_iso(m.bucket),
                   'metrics', jsonb_build_object(
                       'cpu', jsonb_build_object(
                           'user_us', queen.admin_agg(avg(m.cpu_user), max(m.cpu_user), min(m.cpu_user),
                                                      (array_agg(m.cpu_user ORDER BY m.minute DESC))[1]),
                           'system_us', queen.admin_agg(avg(m.cpu_sys), max(m.cpu_sys), min(m.cpu_sys),
                                                        (array_agg(m.cpu_sys ORDER BY m.minute DESC))[1])),
                       'memory', jsonb_build_object(
                           'rss_bytes', queen.admin_agg(avg(m.rss), max(m.rss), min(m.rss),
                                                        (array_agg(m.rss ORDER BY m.minute DESC))[1])),
                       'database', jsonb_build_object(
                           'pool_active', queen.admin_agg(avg(m.active), max(m.active), min(m.active),
                                                          (array_agg(m.active ORDER BY m.minute DESC))[1]),
                           'pool_idle', queen.admin_agg(avg(m.idle), max(m.idle), min(m.idle),
                                                        (array_agg(m.idle ORDER BY m.minute DESC))[1]),
                           'pool_size', queen.admin_agg(avg(m.size), max(m.size), min(m.size),
                                                        (array_agg(m.size ORDER BY m.minute DESC))[1])),
                       'threadpool', jsonb_build_object(
                           'db', jsonb_build_object('queue_size', queen.admin_agg(avg(m.waiting), max(m.waiting),
                                                    min(m.waiting), (array_agg(m.waiting ORDER BY m.minute DESC))[1]))))) AS point
          FROM m
         GROUP BY m.broker, m.bucket)
    SELECT COALESCE(jsonb_agg(r.replica ORDER BY r.broker), '[]'::jsonb) INTO v_replicas
      FROM (SELECT m.broker,
                   jsonb_build_object('hostname', max(m.hostname), 'port', max(m.port), 'workerId', m.broker,
                                      'timeSeries', (SELECT jsonb_agg(pt.point ORDER BY pt.bucket)
                                                       FROM points pt WHERE pt.broker = m.broker)) AS replica
              FROM m GROUP BY m.broker) AS r;
    RETURN jsonb_build_object(
        'timeRange', jsonb_build_object('from', queen.admin_iso(p_from), 'to', queen.admin_iso(p_to)),
        'bucketMinutes', v_minutes,
        'replicaCount', jsonb_array_length(v_replicas),
        'pointCount', (SELECT COALESCE(max(jsonb_array_length(x -> 'timeSeries')), 0)
                         FROM jsonb_array_elements(v_replicas) x),
        'replicas', v_replicas);
END
$$;

-- queen.admin_worker_metrics_v2: GET /api/v1/analytics/worker-metrics, every
-- broker summed per bucket (newest first) and the brokers' latest figures.
-- avgLagMs and maxLagMs: how long the messages the brokers delivered in the
-- bucket had waited since their commit (pop_lag_*); null in a bucket that
-- delivered nothing, where there is no wait to report.
CREATE OR REPLACE FUNCTION queen.admin_worker_metrics_v2(p_from timestamptz, p_to timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_seconds numeric := v_minutes * 60;
    v_series jsonb;
    v_workers jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'timestamp', queen.admin_iso(x.bucket),
               'pushPerSecond', round(x.pushed / v_seconds, 3),
               'popPerSecond', round(x.popped / v_seconds, 3),
               'ackPerSecond', round(x.acked / v_seconds, 3),
               'avgLagMs', round(x.lag_sum / NULLIF(x.lag_count, 0)),
               'maxLagMs', CASE WHEN x.lag_count > 0 THEN x.lag_max END,
               'avgEventLoopLagMs', round(x.loop_avg / 1000.0, 3),
               'maxEventLoopLagMs', round(x.loop_max / 1000.0, 3),
               'avgFreeSlots', round(x.free_slots, 2),
               'dbConnections', round(x.db_connections, 2),
               'avgJobQueueSize', round(x.waiting_avg, 2), 'maxJobQueueSize', x.waiting_max,
               'dbErrors', x.db_errors, 'ackFailed', x.ack_failed, 'dlqCount', x.dlq)
             ORDER BY x.bucket DESC), '[]'::jsonb)
      INTO v_series
      FROM (SELECT queen.admin_bucket(s.bucket, v_minutes) AS bucket,
                   sum(s.pushed) AS pushed, sum(s.popped) AS popped, sum(s.acked) AS acked,
                   avg(s.event_loop_lag_avg_us) AS loop_avg, max(s.event_loop_lag_max_us) AS loop_max,
                   avg(s.limiter_limit - s.limiter_in_flight) AS free_slots,
                   avg(s.pool_size) AS db_connections,
                   avg(s.pool_waiting) AS waiting_avg, max(s.pool_waiting) AS waiting_max,
                   sum(s.db_errors) AS db_errors, sum(s.ack_failed) AS ack_failed, sum(s.dlq) AS dlq,
                   sum(s.pop_lag_sum_ms) AS lag_sum, sum(s.pop_lag_count) AS lag_count,
                   max(s.pop_lag_max_ms) AS lag_max
              FROM queen.stats_broker_minute s
             WHERE s.bucket >= p_from AND s.bucket < p_to
             GROUP BY 1) AS x;
    v_workers := queen.admin_workers(p_from, p_to);
    RETURN jsonb_build_object('bucketMinutes', v_minutes,
                              'pointCount', jsonb_array_length(v_series),
                              'timeSeries', v_series, 'workers', v_workers);
END
$$;

-- queen.admin_queue_lag_v1: GET /api/v1/analytics/queue-lag, a bare array.
CREATE OR REPLACE FUNCTION queen.admin_queue_lag_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz, p_queue text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
                   'queueName', a.o_queue, 'bucketTime', queen.admin_iso(a.o_bucket),
                   'avgLagMs', round(COALESCE(a.o_lag_seconds_avg, 0) * 1000),
                   'maxLagMs', COALESCE(a.o_lag_seconds_max, 0) * 1000)
                 ORDER BY a.o_bucket, a.o_queue)
          FROM queen.admin_queue_series(p_tenant, p_from, p_to,
                                        queen.admin_bucket_minutes(p_from, p_to), p_queue, NULL, NULL) a),
        '[]'::jsonb);
END
$$;

-- queen.admin_queue_ops_v1: GET /api/v1/analytics/queue-ops, per (bucket,
-- queue).
CREATE OR REPLACE FUNCTION queen.admin_queue_ops_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz, p_queue text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_seconds numeric := v_minutes * 60;
    v_series jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'bucket', queen.admin_iso(a.o_bucket), 'queueName', a.o_queue,
               'pushPerSecond', round(a.o_pushed / v_seconds, 3),
               'popPerSecond', round(a.o_popped / v_seconds, 3),
               'ackPerSecond', round(a.o_acked / v_seconds, 3),
               'emptyPerSecond', round(a.o_pop_empty / v_seconds, 3),
               'pushMessages', a.o_pushed, 'popMessages', a.o_popped, 'popEmpty', a.o_pop_empty,
               'ackMessages', a.o_acked, 'ackFailed', a.o_ack_failed, 'dlqCount', a.o_dlq,
               'transactions', a.o_transactions, 'parkedCount', a.o_parked,
               'partitionCount', a.o_partitions, 'partitionsCreated', a.o_partitions_created,
               'partitionsDeleted', a.o_partitions_deleted,
               'avgLagMs', round(COALESCE(a.o_lag_seconds_avg, 0) * 1000),
               'maxLagMs', COALESCE(a.o_lag_seconds_max, 0) * 1000)
             ORDER BY a.o_bucket, a.o_queue), '[]'::jsonb)
      INTO v_series
      FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, NULL, NULL) a;
    RETURN jsonb_build_object(
        'bucketMinutes', v_minutes,
        'queues', COALESCE((SELECT jsonb_agg(DISTINCT x -> 'queueName') FROM jsonb_array_elements(v_series) x), '[]'::jsonb),
        'series', v_series);
END
$$;

-- queen.admin_queue_parked_v1: GET /api/v1/analytics/queue-parked-replicas.
CREATE OR REPLACE FUNCTION queen.admin_queue_parked_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz, p_queue text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
BEGIN
    RETURN jsonb_build_object('bucketMinutes', v_minutes, 'series', COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
                   'bucket', queen.admin_iso(x.bucket), 'queueName', x.queue_name,
                   'hostname', split_part(x.broker, ':', 1), 'workerId', x.broker,
                   'parkedCount', x.parked)
                 ORDER BY x.bucket, x.queue_name, x.broker)
          FROM (SELECT queen.admin_bucket(s.bucket, v_minutes) AS bucket, s.queue_name, s.broker,
                       max(s.parked) AS parked
                  FROM queen.stats_queue_minute s
                 WHERE s.tenant_id = p_tenant AND s.bucket >= p_from AND s.bucket < p_to
                   AND (p_queue IS NULL OR s.queue_name = p_queue)
                 GROUP BY 1, 2, 3) AS x), '[]'::jsonb));
END
$$;

-- queen.admin_retention_v1: GET /api/v1/analytics/retention, from the
-- queue rows (the sweeping broker counts what its passes removed of each
-- queue), for the tenant's queues (p_queue: one of them).
CREATE OR REPLACE FUNCTION queen.admin_retention_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz, p_queue text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_series jsonb;
    v_totals jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'bucket', queen.admin_iso(x.bucket), 'retentionMsgs', x.retention,
               'completedRetentionMsgs', x.completed, 'evictionMsgs', x.eviction,
               'partitionsDeleted', x.deleted)
             ORDER BY x.bucket), '[]'::jsonb),
           jsonb_build_object('retentionMsgs', COALESCE(sum(x.retention), 0),
                              'completedRetentionMsgs', COALESCE(sum(x.completed), 0),
                              'evictionMsgs', COALESCE(sum(x.eviction), 0),
                              'partitionsDeleted', COALESCE(sum(x.deleted), 0),
                              'eventCount', count(*) FILTER (WHERE x.retention + x.completed + x.eviction + x.deleted > 0))
      INTO v_series, v_totals
      FROM (SELECT a.o_bucket AS bucket, sum(a.o_retention)::bigint AS retention,
                   sum(a.o_completed_retention)::bigint AS completed,
                   sum(a.o_eviction)::bigint AS eviction,
                   sum(a.o_partitions_deleted)::bigint AS deleted
              FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, NULL, NULL) a
             GROUP BY 1) AS x;
    RETURN jsonb_build_object('bucketMinutes', v_minutes, 'series', v_series, 'totals', v_totals);
END
$$;

-- queen.admin_postgres_stats_v2: GET /api/v1/analytics/postgres-stats, from
-- PostgreSQL's own statistics views, for Queen's schemas; bufferUsage only
-- where pg_buffercache is installed.
CREATE OR REPLACE FUNCTION queen.admin_postgres_stats_v2()
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_db jsonb;
    v_summary jsonb;
    v_buffers jsonb;
BEGIN
    -- What of shared_buffers each Queen relation holds needs the
    -- pg_buffercache extension, which Queen does not install: without it
    -- there is no bufferUsage. (EXECUTE: the view does not exist otherwise.)
    IF EXISTS (SELECT 1 FROM pg_extension e WHERE e.extname = 'pg_buffercache') THEN
        EXECUTE $q$
            SELECT COALESCE(jsonb_agg(jsonb_build_object(
                       'object', x.object, 'bufferedSize', pg_size_pretty(x.buffers * current_setting('block_size')::bigint),
                       'bufferedBytes', x.buffers * current_setting('block_size')::bigint,
                       'percentOfCache', round(100.0 * x.buffers / NULLIF(x.total, 0), 2))
                     ORDER BY x.buffers DESC, x.object), '[]'::jsonb)
              FROM (SELECT n.nspname || '.' || c.relname AS object, count(*) AS buffers,
                           (SELECT count(*) FROM pg_buffercache) AS total
                      FROM pg_buffercache b
                      JOIN pg_class c ON pg_relation_filenode(c.oid) = b.relfilenode
                      JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE b.reldatabase = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                       AND n.nspname IN ('queen', 'queen_streams')
                     GROUP BY 1) AS x
        $q$ INTO v_buffers;
    END IF;
    SELECT jsonb_build_object(
               'name', d.datname, 'size', pg_size_pretty(pg_database_size(d.datname)),
               'sizeBytes', pg_database_size(d.datname), 'connections', d.numbackends,
               'commits', d.xact_commit, 'rollbacks', d.xact_rollback,
               'deadlocks', d.deadlocks, 'tempBytes', d.temp_bytes),
           jsonb_build_object('cacheHitRatio',
               round(100.0 * d.blks_hit / NULLIF(d.blks_hit + d.blks_read, 0), 2),
               'blocksHit', d.blks_hit, 'blocksRead', d.blks_read)
      INTO v_db, v_summary
      FROM pg_stat_database d WHERE d.datname = current_database();
    RETURN jsonb_build_object(
        'database', v_db,
        'databaseCache', v_summary,
        'cacheSummary', jsonb_build_object(
            'tables', (SELECT jsonb_build_object('hitRatio',
                           round(100.0 * sum(t.heap_blks_hit) / NULLIF(sum(t.heap_blks_hit + t.heap_blks_read), 0), 2))
                         FROM pg_statio_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')),
            'indexes', (SELECT jsonb_build_object('hitRatio',
                            round(100.0 * sum(i.idx_blks_hit) / NULLIF(sum(i.idx_blks_hit + i.idx_blks_read), 0), 2))
                          FROM pg_statio_user_indexes i WHERE i.schemaname IN ('queen', 'queen_streams'))),
        'bufferConfig', jsonb_build_object('sharedBuffersSize', current_setting('shared_buffers')),
        'tableCache', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'cacheHitRatio', round(100.0 * t.heap_blks_hit / NULLIF(t.heap_blks_hit + t.heap_blks_read, 0), 2),
                'cacheHits', t.heap_blks_hit, 'diskReads', t.heap_blks_read) ORDER BY t.relname)
              FROM pg_statio_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'indexCache', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', i.schemaname || '.' || i.relname, 'index', i.indexrelname,
                'cacheHitRatio', round(100.0 * i.idx_blks_hit / NULLIF(i.idx_blks_hit + i.idx_blks_read, 0), 2),
                'cacheHits', i.idx_blks_hit, 'diskReads', i.idx_blks_read) ORDER BY i.indexrelname)
              FROM pg_statio_user_indexes i WHERE i.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'tableSizes', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'totalSize', pg_size_pretty(pg_total_relation_size(t.relid)),
                'tableSize', pg_size_pretty(pg_relation_size(t.relid)),
                'indexSize', pg_size_pretty(pg_indexes_size(t.relid)),
                'totalBytes', pg_total_relation_size(t.relid)) ORDER BY pg_total_relation_size(t.relid) DESC)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'deadTuples', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname, 'deadTuples', t.n_dead_tup,
                'liveTuples', t.n_live_tup,
                'deadPercentage', round(100.0 * t.n_dead_tup / NULLIF(t.n_live_tup + t.n_dead_tup, 0), 2),
                'lastVacuum', queen.admin_iso(t.last_vacuum),
                'lastAutovacuum', queen.admin_iso(t.last_autovacuum)) ORDER BY t.n_dead_tup DESC)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'hotUpdates', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname, 'totalUpdates', t.n_tup_upd,
                'hotUpdates', t.n_tup_hot_upd,
                'hotUpdatePercentage', round(100.0 * t.n_tup_hot_upd / NULLIF(t.n_tup_upd, 0), 2)) ORDER BY t.relname)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'activeQueries', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'pid', a.pid, 'duration', round(extract(epoch FROM clock_timestamp() - a.query_start)::numeric, 3),
                'state', a.state, 'query', left(a.query, 500),
                'waitEventType', a.wait_event_type, 'waitEvent', a.wait_event) ORDER BY a.query_start)
              FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.state <> 'idle' AND a.pid <> pg_backend_pid()), '[]'::jsonb),
        'autovacuumStatus', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'lastAutovacuum', queen.admin_iso(t.last_autovacuum),
                'autovacuumCount', t.autovacuum_count, 'deadTuples', t.n_dead_tup) ORDER BY t.relname)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb))
        || CASE WHEN v_buffers IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('bufferUsage', v_buffers) END;
END
$$;

-- queen.admin_trace_entry: one trace as the trace views show it. No worker_id:
-- a trace records no worker (the clients send none). (admin_trace_row, with
-- a worker_id of null, is the superseded views'.)
CREATE OR REPLACE FUNCTION queen.admin_trace_entry(p_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM queen.message_traces x WHERE x.id = p_id;
    RETURN jsonb_build_object(
        'id', t.id, 'transaction_id', t.transaction_id, 'partition_id', t.partition_id,
        'event_type', t.event_type, 'data', t.data, 'consumer_group', t.consumer_group,
        'created_at', queen.admin_iso(t.created_at),
        'trace_names', to_jsonb(t.trace_names));
END
$$;

-- queen.admin_trace_partitions_v1: the partitions of tenant p_tenant that
-- hold traces (of name p_name; of any name when it is NULL), with their
-- queue's and their own names. The trace views join this, not the partition
-- and queue tables: on Citus message_traces stays on the coordinator, and a
-- statement joining it to the distributed partitions is refused ("cannot
-- perform a lateral outer join ...") or runs admin_trace_entry on a worker,
-- which has no message_traces. Two statements: the partitions with traces,
-- then which of them are the tenant's.
CREATE OR REPLACE FUNCTION queen.admin_trace_partitions_v1(p_tenant text, p_name text)
RETURNS TABLE (o_pid uuid, o_queue text, o_partition text)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_pids uuid[];
BEGIN
    SELECT array_agg(DISTINCT t.partition_id) INTO v_pids
      FROM queen.message_traces t
     WHERE p_name IS NULL OR t.trace_names @> ARRAY[p_name];
    RETURN QUERY
    SELECT p.id, q.name, p.name
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = ANY (v_pids) AND q.tenant_id = p_tenant;
END
$$;

-- queen.admin_message_traces_v2: GET /api/v1/traces/:partitionId/:transactionId.
CREATE OR REPLACE FUNCTION queen.admin_message_traces_v2(
    p_tenant text, p_partition_id uuid, p_transaction_id text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    -- The partition is the tenant's (one statement, which Citus routes to
    -- its shard), then its traces alone (admin_trace_partitions_v1 says why).
    IF NOT EXISTS (SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = p_partition_id AND q.tenant_id = p_tenant) THEN
        RETURN jsonb_build_object('traces', '[]'::jsonb);
    END IF;
    RETURN jsonb_build_object('traces', COALESCE((
        SELECT jsonb_agg(queen.admin_trace_entry(t.id) ORDER BY t.created_at, t.id)
          FROM queen.message_traces t
         WHERE t.partition_id = p_partition_id
           AND t.transaction_id = p_transaction_id), '[]'::jsonb));
END
$$;

-- queen.admin_traces_by_name_v2: GET /api/v1/traces/by-name/:name, newest
-- first (through idx_message_traces_names). Each row's message_payload is
-- added by the broker, which decodes the message's frame (admin.rs).
CREATE OR REPLACE FUNCTION queen.admin_traces_by_name_v2(
    p_tenant text, p_name text, p_limit integer, p_offset integer
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_total bigint;
    v_list jsonb;
BEGIN
    SELECT count(*) INTO v_total
      FROM queen.message_traces t
      JOIN queen.admin_trace_partitions_v1(p_tenant, p_name) tp ON tp.o_pid = t.partition_id
     WHERE t.trace_names @> ARRAY[p_name];
    SELECT COALESCE(jsonb_agg(x.row ORDER BY x.created_at DESC, x.id), '[]'::jsonb) INTO v_list
      FROM (SELECT t.created_at, t.id,
                   queen.admin_trace_entry(t.id) || jsonb_build_object(
                       'queue_name', tp.o_queue, 'partition_name', tp.o_partition) AS row
              FROM queen.message_traces t
              JOIN queen.admin_trace_partitions_v1(p_tenant, p_name) tp ON tp.o_pid = t.partition_id
             WHERE t.trace_names @> ARRAY[p_name]
             ORDER BY t.created_at DESC, t.id
             LIMIT p_limit OFFSET p_offset) AS x;
    RETURN jsonb_build_object('traces', v_list, 'total', v_total,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset,
                                                               'total', v_total));
END
$$;

-- queen.admin_trace_names_v1: GET /api/v1/traces/names.
CREATE OR REPLACE FUNCTION queen.admin_trace_names_v1(p_tenant text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_total bigint;
    v_list jsonb;
BEGIN
    WITH names AS (
        SELECT n.name, count(*) AS traces, count(DISTINCT (t.partition_id, t.transaction_id)) AS messages,
               max(t.created_at) AS last_seen
          FROM queen.message_traces t
          JOIN queen.admin_trace_partitions_v1(p_tenant, NULL) tp ON tp.o_pid = t.partition_id
          CROSS JOIN LATERAL unnest(t.trace_names) AS n(name)
         GROUP BY n.name)
    SELECT (SELECT count(*) FROM names),
           COALESCE((SELECT jsonb_agg(jsonb_build_object(
                        'trace_name', x.name, 'trace_count', x.traces, 'message_count', x.messages,
                        'last_seen', queen.admin_iso(x.last_seen)) ORDER BY x.last_seen DESC, x.name)
                       FROM (SELECT * FROM names ORDER BY last_seen DESC, name
                             LIMIT p_limit OFFSET p_offset) AS x), '[]'::jsonb)
      INTO v_total, v_list;
    RETURN jsonb_build_object('trace_names', v_list, 'total', v_total,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset,
                                                               'total', v_total));
END
$$;

-- queen.admin_analytics_v1: GET /api/v1/status/analytics, the queue series
-- in p_interval buckets ('minute', 'hour' or 'day').
CREATE OR REPLACE FUNCTION queen.admin_analytics_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz,
    p_queue text, p_namespace text, p_task text, p_interval text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := CASE p_interval WHEN 'minute' THEN 1 WHEN 'day' THEN 1440 ELSE 60 END;
    v_points jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'timestamp', queen.admin_iso(x.bucket), 'pushed', x.pushed, 'popped', x.popped,
               'acked', x.acked, 'failed', x.failed, 'deadLettered', x.dlq,
               'avgLagSeconds', round(COALESCE(x.lag_avg, 0)::numeric, 3), 'maxLagSeconds', COALESCE(x.lag_max, 0))
             ORDER BY x.bucket), '[]'::jsonb)
      INTO v_points
      FROM (SELECT a.o_bucket AS bucket, sum(a.o_pushed)::bigint AS pushed, sum(a.o_popped)::bigint AS popped,
                   sum(a.o_acked)::bigint AS acked, sum(a.o_ack_failed)::bigint AS failed,
                   sum(a.o_dlq)::bigint AS dlq, avg(a.o_lag_seconds_avg) AS lag_avg,
                   max(a.o_lag_seconds_max) AS lag_max
              FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a
             GROUP BY 1) AS x;
    RETURN jsonb_build_object(
        'interval', CASE WHEN p_interval IN ('minute', 'day') THEN p_interval ELSE 'hour' END,
        'timeRange', jsonb_build_object('from', queen.admin_iso(p_from), 'to', queen.admin_iso(p_to)),
        'dataPoints', v_points,
        'totals', jsonb_build_object(
            'pushed', COALESCE((SELECT sum((x ->> 'pushed')::bigint) FROM jsonb_array_elements(v_points) x), 0),
            'acked', COALESCE((SELECT sum((x ->> 'acked')::bigint) FROM jsonb_array_elements(v_points) x), 0)));
END
$$;

-- queen.admin_message_segments_v2: the segments holding one page of the
-- message listing (GET /api/v1/messages), newest first: of the filtered
-- queues' partitions written since p_from, the segments committed in
-- [p_from, p_to], in created_at order from the newest, as many as cover
-- p_need messages but never more than p_max_segments. Each partition is read
-- backwards along its primary key (created_at is monotone in offset), and
-- only partitions written since p_from are visited (last_write_at is
-- quantised to a second, hence the slack), so the cost is the window's
-- segments, never a whole partition. o_more: the cap cut the page short;
-- o_priority the queue's priority (the listing's queuePriority).
CREATE OR REPLACE FUNCTION queen.admin_message_segments_v2(
    p_tenant text, p_queue text, p_partition text, p_namespace text, p_task text,
    p_from timestamptz, p_to timestamptz, p_need integer, p_max_segments integer
) RETURNS TABLE (
    o_partition_id uuid, o_queue text, o_partition text, o_namespace text, o_task text,
    o_base_offset bigint, o_end_offset bigint, o_created_at timestamptz, o_blob bytea,
    o_more boolean, o_priority integer
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    WITH candidates AS (
        SELECT p.id AS pid, q.name AS queue, p.name AS partition, q.namespace, q.task,
               q.priority,
               s.base_offset, s.end_offset, s.msg_count, s.created_at
          FROM queen.queues q
          JOIN queen.log_partitions p ON p.queue_id = q.id
          CROSS JOIN LATERAL (
              SELECT x.base_offset, x.end_offset, x.msg_count, x.created_at
                FROM queen.log_segments x
               WHERE x.partition_id = p.id AND x.created_at >= p_from AND x.created_at <= p_to
               ORDER BY x.base_offset DESC
               LIMIT p_need) AS s
         WHERE q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue)
           AND (p_partition IS NULL OR p.name = p_partition)
           AND (p_namespace IS NULL OR q.namespace = p_namespace)
           AND (p_task IS NULL OR q.task = p_task)
           AND p.last_write_at >= p_from - interval '2 seconds'),
    ranked AS (
        SELECT c.*, sum(c.msg_count) OVER (ORDER BY c.created_at DESC, c.pid, c.base_offset DESC
                                           ROWS UNBOUNDED PRECEDING) - c.msg_count AS before,
               row_number() OVER (ORDER BY c.created_at DESC, c.pid, c.base_offset DESC) AS n
          FROM candidates c),
    chosen AS (
        SELECT r.* FROM ranked r WHERE r.before < p_need AND r.n <= p_max_segments),
    more AS (
        SELECT EXISTS (SELECT 1 FROM ranked r WHERE r.before < p_need AND r.n > p_max_segments) AS cut)
    SELECT c.pid, c.queue, c.partition, c.namespace, c.task, c.base_offset, c.end_offset,
           c.created_at, seg.blob, more.cut, c.priority
      FROM chosen c
      JOIN queen.log_segments seg ON seg.partition_id = c.pid AND seg.base_offset = c.base_offset
      CROSS JOIN more
     ORDER BY c.created_at DESC, c.pid, c.base_offset DESC;
END
$$;

-- queen.admin_message_state_v1: what the listing and the detail need to say
-- a message's status, for the partitions p_ids and the offsets
-- [p_min, p_max] of each (parallel arrays):
--   kind 'cursor': o_group, o_a committed, o_b batch_end, o_active (a live
--                  lease), o_at its expiry
--   kind 'dead':   o_group, o_a the offset, o_b retry count, o_error, o_at
--                  when it was filed
CREATE OR REPLACE FUNCTION queen.admin_message_state_v1(
    p_ids uuid[], p_min bigint[], p_max bigint[]
) RETURNS TABLE (
    o_kind text, o_partition_id uuid, o_group text, o_a bigint, o_b bigint,
    o_active boolean, o_at timestamptz, o_error text
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT 'cursor'::text, c.partition_id, c.consumer_group, c.committed, c.batch_end,
           c.worker_id IS NOT NULL AND c.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
               AND c.lease_expires_at > v_now AND c.batch_end IS NOT NULL,
           c.lease_expires_at, NULL::text
      FROM queen.log_consumers c
     WHERE c.partition_id = ANY (p_ids);
    RETURN QUERY
    SELECT 'dead'::text, d.partition_id, d.consumer_group, d.message_offset, d.retry_count::bigint,
           false, d.failed_at, d.error
      FROM unnest(p_ids, p_min, p_max) AS r (pid, lo, hi)
      JOIN queen.log_dlq d ON d.partition_id = r.pid
     WHERE d.message_offset BETWEEN r.lo AND r.hi;
END
$$;

-- queen.admin_message_locate_v1: the message (p_partition_id, transaction id
-- hash p_hash) of the tenant: its offset (searched among the partition's
-- newest p_rows sidecar rows, log_find_txn_v1), queue and partition names and
-- the queue's id; no row when the partition is not the tenant's or the
-- message is not found.
CREATE OR REPLACE FUNCTION queen.admin_message_locate_v1(
    p_tenant text, p_partition_id uuid, p_hash bytea, p_rows integer
) RETURNS TABLE (o_offset bigint, o_queue text, o_partition text, o_namespace text, o_task text,
                 o_queue_id uuid)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_offset bigint;
BEGIN
    v_offset := queen.log_find_txn_v1(p_partition_id, p_hash, p_rows);
    IF v_offset IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_offset, q.name, p.name, q.namespace, q.task, q.id
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition_id AND q.tenant_id = p_tenant;
END
$$;

-- ---------------------------------------------------------------------------
-- Superseded versions, kept verbatim.
--
-- A broker of the previous version still serving during a rolling upgrade
-- calls these names, and re-applies these exact bodies when it boots (its
-- own copy of this file). So a view whose answer changes gets a new name and
-- its old body stays here unchanged: a re-apply by either version then
-- leaves every name meaning what its callers expect. The digest test
-- (crates/queen-sql/tests/it/schema.rs, sql/function_digests.txt) fails when
-- a released body changes.
-- ---------------------------------------------------------------------------

-- queen.admin_partition_stats_v1: one row per partition of the tenant's
-- queues (of p_queue only, unless NULL; of p_namespace / p_task when given),
-- with the counts described above.
CREATE OR REPLACE FUNCTION queen.admin_partition_stats_v1(
    p_tenant    text,
    p_queue     text,
    p_namespace text,
    p_task      text
) RETURNS TABLE (
    o_queue_id         uuid,
    o_queue            text,
    o_namespace        text,
    o_task             text,
    o_partition_id     uuid,
    o_partition        text,
    o_created_at       timestamptz,
    o_last_write_at    timestamptz,
    o_total            bigint,
    o_pending          bigint,
    o_processing       bigint,
    o_completed        bigint,
    o_dead_letter      bigint,
    o_total_consumed   bigint,
    o_last_consumed_at timestamptz,
    o_leases           bigint,
    o_lease_messages   bigint
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT q.id, q.name, q.namespace, q.task, p.id, p.name, p.created_at, p.last_write_at,
           t.total,
           greatest(t.total - t.completed - t.processing, 0),
           t.processing, t.completed,
           COALESCE(d.n, 0),
           COALESCE(c.total_consumed, 0), c.last_consumed_at,
           COALESCE(c.leases, 0), COALESCE(c.lease_messages, 0)
      FROM queen.queues q
      JOIN queen.log_partitions p ON p.queue_id = q.id
      LEFT JOIN LATERAL (
          SELECT min(x.committed) AS committed,
                 sum(x.total_consumed)::bigint AS total_consumed,
                 max(x.last_consumed_at) AS last_consumed_at,
                 count(*) FILTER (WHERE x.live)::bigint AS leases,
                 COALESCE(sum(x.batch_end - x.committed) FILTER (WHERE x.live), 0)::bigint AS lease_messages
            FROM (SELECT lc.committed, lc.total_consumed, lc.last_consumed_at, lc.batch_end,
                         lc.worker_id IS NOT NULL
                           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                           AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL AS live
                    FROM queen.log_consumers lc
                   WHERE lc.partition_id = p.id) AS x
      ) AS c ON true
      LEFT JOIN LATERAL (
          -- The least advanced cursor's live lease is what "processing" shows.
          SELECT CASE WHEN lc.worker_id IS NOT NULL
                           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                           AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL
                      THEN greatest(lc.batch_end - lc.committed, 0) ELSE 0 END AS leased
            FROM queen.log_consumers lc
           WHERE lc.partition_id = p.id
           ORDER BY lc.committed
           LIMIT 1
      ) AS h ON true
      LEFT JOIN LATERAL (
          SELECT count(*)::bigint AS n FROM queen.log_dlq dl WHERE dl.partition_id = p.id
      ) AS d ON true
      CROSS JOIN LATERAL (
          SELECT greatest(p.last_offset - p.log_start + 1, 0)::bigint AS total,
                 CASE WHEN c.committed IS NULL THEN 0::bigint
                      ELSE least(greatest(c.committed - p.log_start + 1, 0),
                                 greatest(p.last_offset - p.log_start + 1, 0))::bigint END AS completed,
                 COALESCE(h.leased, 0)::bigint AS processing
      ) AS t
     WHERE q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task);
END
$$;

-- queen.admin_queues_v1: GET /api/v1/resources/queues.
CREATE OR REPLACE FUNCTION queen.admin_queues_v1(p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN jsonb_build_object('queues', COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
                   'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                   'priority', q.priority,
                   'createdAt', queen.admin_iso(q.created_at),
                   'partitions', COALESCE(s.partitions, 0),
                   'messages', queen.admin_counts(s.total, s.pending, s.processing, s.completed, s.dead))
                 ORDER BY q.name)
          FROM queen.queues q
          LEFT JOIN (
              SELECT a.o_queue_id AS id, count(*) AS partitions, sum(a.o_total) AS total,
                     sum(a.o_pending) AS pending, sum(a.o_processing) AS processing,
                     sum(a.o_completed) AS completed, sum(a.o_dead_letter) AS dead
                FROM queen.admin_partition_stats_v1(p_tenant, NULL, NULL, NULL) a
               GROUP BY a.o_queue_id) AS s ON s.id = q.id
         WHERE q.tenant_id = p_tenant), '[]'::jsonb));
END
$$;

-- queen.admin_queue_v1: GET /api/v1/resources/queues/:queue; NULL when the
-- queue does not exist.
CREATE OR REPLACE FUNCTION queen.admin_queue_v1(p_tenant text, p_queue text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_queue record;
    v_partitions jsonb;
    v_totals jsonb;
BEGIN
    SELECT * INTO v_queue FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'id', a.o_partition_id, 'name', a.o_partition,
               'createdAt', queen.admin_iso(a.o_created_at),
               'lastActivity', queen.admin_iso(a.o_last_write_at),
               'messages', queen.admin_counts(a.o_total, a.o_pending, a.o_processing, a.o_completed, a.o_dead_letter),
               'stats', queen.admin_counts(a.o_total, a.o_pending, a.o_processing, a.o_completed, a.o_dead_letter),
               'cursor', jsonb_build_object('totalConsumed', a.o_total_consumed,
                                            'lastConsumedAt', queen.admin_iso(a.o_last_consumed_at)))
             ORDER BY a.o_partition), '[]'::jsonb),
           queen.admin_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint, sum(a.o_processing)::bigint,
                              sum(a.o_completed)::bigint, sum(a.o_dead_letter)::bigint)
      INTO v_partitions, v_totals
      FROM queen.admin_partition_stats_v1(p_tenant, p_queue, NULL, NULL) a;
    RETURN jsonb_build_object(
        'id', v_queue.id, 'name', v_queue.name, 'namespace', v_queue.namespace,
        'task', v_queue.task, 'priority', v_queue.priority,
        'createdAt', queen.admin_iso(v_queue.created_at),
        'config', queen.admin_queue_config(v_queue.id),
        'partitions', v_partitions,
        'totals', v_totals || jsonb_build_object('messages', v_totals,
                                                 'partitions', jsonb_array_length(v_partitions)));
END
$$;

-- queen.admin_groupings_v1: GET /api/v1/resources/namespaces (p_by
-- 'namespace') and /resources/tasks (p_by 'task'): queues grouped by that
-- field (queues without one are left out).
CREATE OR REPLACE FUNCTION queen.admin_groupings_v1(p_tenant text, p_by text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_list jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               p_by, g.key, 'queues', g.queues, 'partitions', g.partitions,
               'messages', queen.admin_counts(g.total, g.pending, g.processing, g.completed, g.dead))
             ORDER BY g.key), '[]'::jsonb)
      INTO v_list
      FROM (SELECT CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END AS key,
                   count(DISTINCT q.id) AS queues,
                   COALESCE(sum(s.partitions), 0)::bigint AS partitions,
                   sum(s.total)::bigint AS total, sum(s.pending)::bigint AS pending,
                   sum(s.processing)::bigint AS processing, sum(s.completed)::bigint AS completed,
                   sum(s.dead)::bigint AS dead
              FROM queen.queues q
              LEFT JOIN (
                  SELECT a.o_queue_id AS id, count(*) AS partitions, sum(a.o_total) AS total,
                         sum(a.o_pending) AS pending, sum(a.o_processing) AS processing,
                         sum(a.o_completed) AS completed, sum(a.o_dead_letter) AS dead
                    FROM queen.admin_partition_stats_v1(p_tenant, NULL, NULL, NULL) a
                   GROUP BY a.o_queue_id) AS s ON s.id = q.id
             WHERE q.tenant_id = p_tenant
               AND (CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END) <> ''
             GROUP BY 1) AS g;
    RETURN jsonb_build_object(CASE WHEN p_by = 'task' THEN 'tasks' ELSE 'namespaces' END, v_list);
END
$$;

-- queen.admin_overview_v1: GET /api/v1/resources/overview. Throughput is the
-- statistics rows' last full minute (every broker's), per second; statsAge
-- the seconds since the newest statistics row (-1: none yet).
CREATE OR REPLACE FUNCTION queen.admin_overview_v1(p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_counts jsonb;
    v_partitions bigint;
    v_time double precision[];
    v_offset double precision[];
    v_newest timestamptz;
    v_pushed bigint;
    v_acked bigint;
BEGIN
    SELECT count(*),
           queen.admin_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint, sum(a.o_processing)::bigint,
                              sum(a.o_completed)::bigint, sum(a.o_dead_letter)::bigint)
      INTO v_partitions, v_counts
      FROM queen.admin_partition_stats_v1(p_tenant, NULL, NULL, NULL) a;
    SELECT array_agg(c.o_time_lag_seconds::double precision) FILTER (WHERE c.o_offset_lag > 0),
           array_agg(c.o_offset_lag::double precision) FILTER (WHERE c.o_offset_lag > 0)
      INTO v_time, v_offset
      FROM queen.consumer_group_cursors_v1(p_tenant, NULL, NULL) c;
    SELECT max(s.bucket) INTO v_newest FROM queen.stats_queue_minute s WHERE s.tenant_id = p_tenant;
    SELECT COALESCE(sum(s.pushed), 0), COALESCE(sum(s.acked), 0)
      INTO v_pushed, v_acked
      FROM queen.stats_queue_minute s
     WHERE s.tenant_id = p_tenant AND s.bucket = v_newest;
    RETURN jsonb_build_object(
        'queues', (SELECT count(*) FROM queen.queues q WHERE q.tenant_id = p_tenant),
        'partitions', v_partitions,
        'namespaces', (SELECT count(DISTINCT q.namespace) FROM queen.queues q
                        WHERE q.tenant_id = p_tenant AND q.namespace <> ''),
        'tasks', (SELECT count(DISTINCT q.task) FROM queen.queues q
                   WHERE q.tenant_id = p_tenant AND q.task <> ''),
        'messages', v_counts,
        'lag', jsonb_build_object('time', queen.admin_summary(v_time),
                                  'offset', queen.admin_summary(v_offset)),
        'throughput', jsonb_build_object('ingestedPerSecond', round(v_pushed / 60.0, 3),
                                         'processedPerSecond', round(v_acked / 60.0, 3)),
        'timestamp', queen.admin_iso(v_now),
        'statsAge', CASE WHEN v_newest IS NULL THEN -1
                         ELSE greatest(floor(extract(epoch FROM v_now - v_newest)), 0) END);
END
$$;

-- queen.admin_queue_detail_v1: GET /api/v1/status/queues/:queue (the
-- dashboard's preferred queue view); NULL when the queue does not exist.
CREATE OR REPLACE FUNCTION queen.admin_queue_detail_v1(p_tenant text, p_queue text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v jsonb := queen.admin_queue_v1(p_tenant, p_queue);
BEGIN
    IF v IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object(
        'queue', v - 'partitions' - 'totals',
        'messages', v -> 'totals' -> 'messages',
        'partitions', v -> 'partitions',
        'totals', v -> 'totals');
END
$$;

-- queen.admin_status_queues_v1: GET /api/v1/status/queues, the queues with
-- their counts and what the statistics rows say of [p_from, p_to).
CREATE OR REPLACE FUNCTION queen.admin_status_queues_v1(
    p_tenant text, p_namespace text, p_task text, p_queue text,
    p_from timestamptz, p_to timestamptz, p_limit integer, p_offset integer
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_list jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(x.row ORDER BY x.name), '[]'::jsonb) INTO v_list
      FROM (SELECT q.name,
                   jsonb_build_object(
                       'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                       'priority', q.priority, 'createdAt', queen.admin_iso(q.created_at),
                       'partitions', COALESCE(s.partitions, 0),
                       'messages', queen.admin_counts(s.total, s.pending, s.processing, s.completed, s.dead),
                       'throughput', jsonb_build_object(
                           'pushed', COALESCE(st.pushed, 0), 'popped', COALESCE(st.popped, 0),
                           'acked', COALESCE(st.acked, 0), 'failed', COALESCE(st.failed, 0))) AS row
              FROM queen.queues q
              LEFT JOIN (
                  SELECT a.o_queue_id AS id, count(*) AS partitions, sum(a.o_total)::bigint AS total,
                         sum(a.o_pending)::bigint AS pending, sum(a.o_processing)::bigint AS processing,
                         sum(a.o_completed)::bigint AS completed, sum(a.o_dead_letter)::bigint AS dead
                    FROM queen.admin_partition_stats_v1(p_tenant, p_queue, p_namespace, p_task) a
                   GROUP BY a.o_queue_id) AS s ON s.id = q.id
              LEFT JOIN (
                  SELECT sq.queue_name, sum(sq.pushed)::bigint AS pushed, sum(sq.popped)::bigint AS popped,
                         sum(sq.acked)::bigint AS acked, sum(sq.ack_failed)::bigint AS failed
                    FROM queen.stats_queue_minute sq
                   WHERE sq.tenant_id = p_tenant AND sq.bucket >= p_from AND sq.bucket < p_to
                   GROUP BY sq.queue_name) AS st ON st.queue_name = q.name
             WHERE q.tenant_id = p_tenant
               AND (p_queue IS NULL OR q.name = p_queue)
               AND (p_namespace IS NULL OR q.namespace = p_namespace)
               AND (p_task IS NULL OR q.task = p_task)
             ORDER BY q.name
             LIMIT p_limit OFFSET p_offset) AS x;
    RETURN jsonb_build_object('queues', v_list,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END
$$;

-- queen.admin_status_v1: GET /api/v1/status.
CREATE OR REPLACE FUNCTION queen.admin_status_v1(
    p_tenant text, p_from timestamptz, p_to timestamptz,
    p_queue text, p_namespace text, p_task text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_seconds numeric := v_minutes * 60;
    v_throughput jsonb;
    v_counts jsonb;
    v_leases jsonb;
    v_dlq jsonb;
    v_workers jsonb;
    v_queues jsonb;
    v_newest timestamptz;
    v_efficiency jsonb;
    v_errors jsonb;
BEGIN
    WITH q AS (
        SELECT a.o_bucket AS bucket, sum(a.o_pushed) AS pushed, sum(a.o_popped) AS popped,
               sum(a.o_acked) AS acked, sum(a.o_ack_failed) AS failed, sum(a.o_dlq) AS dlq,
               avg(a.o_lag_seconds_avg) AS lag_avg, max(a.o_lag_seconds_max) AS lag_max
          FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a
         GROUP BY 1),
    b AS (
        SELECT queen.admin_bucket(s.bucket, v_minutes) AS bucket,
               sum(s.db_errors) AS db_errors,
               avg(s.event_loop_lag_avg_us) AS loop_avg, max(s.event_loop_lag_max_us) AS loop_max,
               sum(s.cpu_user_us) AS cpu_user, sum(s.cpu_system_us) AS cpu_sys,
               count(DISTINCT s.broker) AS brokers,
               avg(s.pool_size - s.pool_idle) AS pool_active, avg(s.pool_idle) AS pool_idle,
               avg(s.pool_size) AS pool_size
          FROM queen.stats_broker_minute s
         WHERE s.bucket >= p_from AND s.bucket < p_to
         GROUP BY 1)
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'timestamp', queen.admin_iso(k.bucket),
               'ingested', COALESCE(q.pushed, 0), 'processed', COALESCE(q.acked, 0),
               'ingestedPerSecond', round(COALESCE(q.pushed, 0) / v_seconds, 3),
               'popPerSecond', round(COALESCE(q.popped, 0) / v_seconds, 3),
               'processedPerSecond', round(COALESCE(q.acked, 0) / v_seconds, 3),
               'avgLagMs', round(COALESCE(q.lag_avg, 0) * 1000),
               'maxLagMs', COALESCE(q.lag_max, 0) * 1000,
               'dbErrors', COALESCE(b.db_errors, 0), 'ackFailed', COALESCE(q.failed, 0),
               'dlqCount', COALESCE(q.dlq, 0),
               'avgEventLoopLagMs', round(COALESCE(b.loop_avg, 0) / 1000.0, 3),
               'maxEventLoopLagMs', round(COALESCE(b.loop_max, 0) / 1000.0, 3),
               'queenCpuUserPct', round(COALESCE(b.cpu_user, 0) / (v_seconds * 1e6) * 100, 2),
               'queenCpuSysPct', round(COALESCE(b.cpu_sys, 0) / (v_seconds * 1e6) * 100, 2),
               'dbPoolActive', round(COALESCE(b.pool_active, 0), 1),
               'dbPoolIdle', round(COALESCE(b.pool_idle, 0), 1),
               'dbPoolSize', round(COALESCE(b.pool_size, 0), 1))
             ORDER BY k.bucket DESC), '[]'::jsonb)
      INTO v_throughput
      FROM (SELECT bucket FROM q UNION SELECT bucket FROM b) AS k
      LEFT JOIN q ON q.bucket = k.bucket
      LEFT JOIN b ON b.bucket = k.bucket;

    SELECT queen.admin_counts(sum(a.o_total)::bigint, sum(a.o_pending)::bigint, sum(a.o_processing)::bigint,
                              sum(a.o_completed)::bigint, sum(a.o_dead_letter)::bigint),
           jsonb_build_object('active', COALESCE(sum(a.o_leases), 0),
                              'partitionsWithLeases', count(*) FILTER (WHERE a.o_leases > 0),
                              'totalBatchSize', COALESCE(sum(a.o_lease_messages), 0),
                              'totalAcked', 0)
      INTO v_counts, v_leases
      FROM queen.admin_partition_stats_v1(p_tenant, p_queue, p_namespace, p_task) a;

    SELECT jsonb_build_object(
               'totalMessages', count(*),
               'affectedPartitions', count(DISTINCT d.partition_id),
               'topErrors', COALESCE((
                   SELECT jsonb_agg(jsonb_build_object('error', e.error, 'count', e.n) ORDER BY e.n DESC, e.error)
                     FROM (SELECT COALESCE(d2.error, '') AS error, count(*) AS n
                             FROM queen.log_dlq d2
                             JOIN queen.log_partitions p2 ON p2.id = d2.partition_id
                             JOIN queen.queues q2 ON q2.id = p2.queue_id
                            WHERE q2.tenant_id = p_tenant
                              AND (p_queue IS NULL OR q2.name = p_queue)
                              AND (p_namespace IS NULL OR q2.namespace = p_namespace)
                              AND (p_task IS NULL OR q2.task = p_task)
                            GROUP BY 1 ORDER BY 2 DESC LIMIT 10) AS e), '[]'::jsonb))
      INTO v_dlq
      FROM queen.log_dlq d
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task);

    v_workers := queen.admin_workers(p_from, p_to);

    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'name', x.o_queue, 'pushed', x.pushed, 'popped', x.popped, 'acked', x.acked)
             ORDER BY x.o_queue), '[]'::jsonb)
      INTO v_queues
      FROM (SELECT a.o_queue, sum(a.o_pushed)::bigint AS pushed, sum(a.o_popped)::bigint AS popped,
                   sum(a.o_acked)::bigint AS acked
              FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a
             GROUP BY a.o_queue) AS x;

    -- Messages per request: how well batching works.
    SELECT jsonb_build_object(
               'push', COALESCE(round(sum(a.o_pushed)::numeric / NULLIF(sum(a.o_push_requests), 0), 2), 0),
               'pop', COALESCE(round(sum(a.o_popped)::numeric / NULLIF(sum(a.o_pop_requests) - sum(a.o_pop_empty), 0), 2), 0),
               'ack', 0),
           jsonb_build_object('dbErrors', 0, 'ackFailed', COALESCE(sum(a.o_ack_failed), 0),
                              'dlq', COALESCE(sum(a.o_dlq), 0))
      INTO v_efficiency, v_errors
      FROM queen.admin_queue_series(p_tenant, p_from, p_to, v_minutes, p_queue, p_namespace, p_task) a;
    v_errors := v_errors || jsonb_build_object('dbErrors',
        (SELECT COALESCE(sum(s.db_errors), 0) FROM queen.stats_broker_minute s
          WHERE s.bucket >= p_from AND s.bucket < p_to));

    SELECT max(s.bucket) INTO v_newest FROM queen.stats_broker_minute s;
    RETURN jsonb_build_object(
        'timeRange', jsonb_build_object('from', queen.admin_iso(p_from), 'to', queen.admin_iso(p_to),
                                        'bucketMinutes', v_minutes,
                                        'pointCount', jsonb_array_length(v_throughput)),
        'bucketMinutes', v_minutes,
        'throughput', v_throughput,
        'queues', v_queues,
        'messages', v_counts || jsonb_build_object('batchEfficiency', v_efficiency),
        'leases', v_leases,
        'deadLetterQueue', v_dlq,
        'workers', v_workers,
        'errors', v_errors,
        'statsAge', CASE WHEN v_newest IS NULL THEN -1
                         ELSE greatest(floor(extract(epoch FROM v_now - v_newest)), 0) END);
END
$$;

-- queen.admin_system_metrics_v1: GET /api/v1/analytics/system-metrics, one
-- series per broker. cpu.user_us and cpu.system_us are CPU time per wall
-- time in hundredths of a percent of one core (the dashboard shows
-- value / 100 as a percentage).
CREATE OR REPLACE FUNCTION queen.admin_system_metrics_v1(
    p_from timestamptz, p_to timestamptz, p_hostname text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_replicas jsonb;
BEGIN
    WITH m AS (
        SELECT s.broker, s.hostname, s.port, queen.admin_bucket(s.bucket, v_minutes) AS bucket, s.bucket AS minute,
               s.cpu_user_us / 6000.0 AS cpu_user, s.cpu_system_us / 6000.0 AS cpu_sys,
               s.rss_bytes::numeric AS rss, (s.pool_size - s.pool_idle)::numeric AS active,
               s.pool_idle::numeric AS idle, s.pool_size::numeric AS size, s.pool_waiting::numeric AS waiting
          FROM queen.stats_broker_minute s
         WHERE s.bucket >= p_from AND s.bucket < p_to
           AND (p_hostname IS NULL OR s.hostname = p_hostname)),
    points AS (
        SELECT m.broker, m.bucket,
               jsonb_build_object(
                   'timestamp', queen.admin_iso(m.bucket),
                   'metrics', jsonb_build_object(
                       'cpu', jsonb_build_object(
                           'user_us', queen.admin_agg(avg(m.cpu_user), max(m.cpu_user), min(m.cpu_user),
                                                      (array_agg(m.cpu_user ORDER BY m.minute DESC))[1]),
                           'system_us', queen.admin_agg(avg(m.cpu_sys), max(m.cpu_sys), min(m.cpu_sys),
                                                        (array_agg(m.cpu_sys ORDER BY m.minute DESC))[1])),
                       'memory', jsonb_build_object(
                           'rss_bytes', queen.admin_agg(avg(m.rss), max(m.rss), min(m.rss),
                                                        (array_agg(m.rss ORDER BY m.minute DESC))[1])),
                       'database', jsonb_build_object(
                           'pool_active', queen.admin_agg(avg(m.active), max(m.active), min(m.active),
                                                          (array_agg(m.active ORDER BY m.minute DESC))[1]),
                           'pool_idle', queen.admin_agg(avg(m.idle), max(m.idle), min(m.idle),
                                                        (array_agg(m.idle ORDER BY m.minute DESC))[1]),
                           'pool_size', queen.admin_agg(avg(m.size), max(m.size), min(m.size),
                                                        (array_agg(m.size ORDER BY m.minute DESC))[1])),
                       'threadpool', jsonb_build_object(
                           'db', jsonb_build_object('queue_size', queen.admin_agg(avg(m.waiting), max(m.waiting),
                                                    min(m.waiting), (array_agg(m.waiting ORDER BY m.minute DESC))[1])),
                           'system', jsonb_build_object('queue_size', queen.admin_agg(0, 0, 0, 0))))) AS point
          FROM m
         GROUP BY m.broker, m.bucket)
    SELECT COALESCE(jsonb_agg(r.replica ORDER BY r.broker), '[]'::jsonb) INTO v_replicas
      FROM (SELECT m.broker,
                   jsonb_build_object('hostname', max(m.hostname), 'port', max(m.port), 'workerId', m.broker,
                                      'timeSeries', (SELECT jsonb_agg(pt.point ORDER BY pt.bucket)
                                                       FROM points pt WHERE pt.broker = m.broker)) AS replica
              FROM m GROUP BY m.broker) AS r;
    RETURN jsonb_build_object(
        'timeRange', jsonb_build_object('from', queen.admin_iso(p_from), 'to', queen.admin_iso(p_to)),
        'bucketMinutes', v_minutes,
        'replicaCount', jsonb_array_length(v_replicas),
        'pointCount', (SELECT COALESCE(max(jsonb_array_length(x -> 'timeSeries')), 0)
                         FROM jsonb_array_elements(v_replicas) x),
        'replicas', v_replicas);
END
$$;

-- queen.admin_worker_metrics_v1: GET /api/v1/analytics/worker-metrics, every
-- broker summed per bucket (newest first) and the brokers' latest figures.
CREATE OR REPLACE FUNCTION queen.admin_worker_metrics_v1(p_from timestamptz, p_to timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_minutes integer := queen.admin_bucket_minutes(p_from, p_to);
    v_seconds numeric := v_minutes * 60;
    v_series jsonb;
    v_workers jsonb;
BEGIN
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'timestamp', queen.admin_iso(x.bucket),
               'pushPerSecond', round(x.pushed / v_seconds, 3),
               'popPerSecond', round(x.popped / v_seconds, 3),
               'ackPerSecond', round(x.acked / v_seconds, 3),
               'avgLagMs', 0, 'maxLagMs', 0,
               'avgEventLoopLagMs', round(x.loop_avg / 1000.0, 3),
               'maxEventLoopLagMs', round(x.loop_max / 1000.0, 3),
               'avgFreeSlots', round(x.free_slots, 2),
               'dbConnections', round(x.db_connections, 2),
               'avgJobQueueSize', round(x.waiting_avg, 2), 'maxJobQueueSize', x.waiting_max,
               'dbErrors', x.db_errors, 'ackFailed', x.ack_failed, 'dlqCount', x.dlq)
             ORDER BY x.bucket DESC), '[]'::jsonb)
      INTO v_series
      FROM (SELECT queen.admin_bucket(s.bucket, v_minutes) AS bucket,
                   sum(s.pushed) AS pushed, sum(s.popped) AS popped, sum(s.acked) AS acked,
                   avg(s.event_loop_lag_avg_us) AS loop_avg, max(s.event_loop_lag_max_us) AS loop_max,
                   avg(s.limiter_limit - s.limiter_in_flight) AS free_slots,
                   avg(s.pool_size) AS db_connections,
                   avg(s.pool_waiting) AS waiting_avg, max(s.pool_waiting) AS waiting_max,
                   sum(s.db_errors) AS db_errors, sum(s.ack_failed) AS ack_failed, sum(s.dlq) AS dlq
              FROM queen.stats_broker_minute s
             WHERE s.bucket >= p_from AND s.bucket < p_to
             GROUP BY 1) AS x;
    v_workers := queen.admin_workers(p_from, p_to);
    RETURN jsonb_build_object('bucketMinutes', v_minutes,
                              'pointCount', jsonb_array_length(v_series),
                              'timeSeries', v_series, 'workers', v_workers);
END
$$;

-- queen.admin_postgres_stats_v1: GET /api/v1/analytics/postgres-stats, from
-- PostgreSQL's own statistics views, for Queen's schemas.
CREATE OR REPLACE FUNCTION queen.admin_postgres_stats_v1()
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_db jsonb;
    v_summary jsonb;
BEGIN
    SELECT jsonb_build_object(
               'name', d.datname, 'size', pg_size_pretty(pg_database_size(d.datname)),
               'sizeBytes', pg_database_size(d.datname), 'connections', d.numbackends,
               'commits', d.xact_commit, 'rollbacks', d.xact_rollback,
               'deadlocks', d.deadlocks, 'tempBytes', d.temp_bytes),
           jsonb_build_object('cacheHitRatio',
               round(100.0 * d.blks_hit / NULLIF(d.blks_hit + d.blks_read, 0), 2),
               'blocksHit', d.blks_hit, 'blocksRead', d.blks_read)
      INTO v_db, v_summary
      FROM pg_stat_database d WHERE d.datname = current_database();
    RETURN jsonb_build_object(
        'database', v_db,
        'databaseCache', v_summary,
        'cacheSummary', jsonb_build_object(
            'tables', (SELECT jsonb_build_object('hitRatio',
                           round(100.0 * sum(t.heap_blks_hit) / NULLIF(sum(t.heap_blks_hit + t.heap_blks_read), 0), 2))
                         FROM pg_statio_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')),
            'indexes', (SELECT jsonb_build_object('hitRatio',
                            round(100.0 * sum(i.idx_blks_hit) / NULLIF(sum(i.idx_blks_hit + i.idx_blks_read), 0), 2))
                          FROM pg_statio_user_indexes i WHERE i.schemaname IN ('queen', 'queen_streams'))),
        'bufferConfig', jsonb_build_object('sharedBuffersSize', current_setting('shared_buffers')),
        'tableCache', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'cacheHitRatio', round(100.0 * t.heap_blks_hit / NULLIF(t.heap_blks_hit + t.heap_blks_read, 0), 2),
                'cacheHits', t.heap_blks_hit, 'diskReads', t.heap_blks_read) ORDER BY t.relname)
              FROM pg_statio_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'indexCache', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', i.schemaname || '.' || i.relname, 'index', i.indexrelname,
                'cacheHitRatio', round(100.0 * i.idx_blks_hit / NULLIF(i.idx_blks_hit + i.idx_blks_read, 0), 2),
                'cacheHits', i.idx_blks_hit, 'diskReads', i.idx_blks_read) ORDER BY i.indexrelname)
              FROM pg_statio_user_indexes i WHERE i.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'bufferUsage', '[]'::jsonb,
        'tableSizes', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'totalSize', pg_size_pretty(pg_total_relation_size(t.relid)),
                'tableSize', pg_size_pretty(pg_relation_size(t.relid)),
                'indexSize', pg_size_pretty(pg_indexes_size(t.relid)),
                'totalBytes', pg_total_relation_size(t.relid)) ORDER BY pg_total_relation_size(t.relid) DESC)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'deadTuples', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname, 'deadTuples', t.n_dead_tup,
                'liveTuples', t.n_live_tup,
                'deadPercentage', round(100.0 * t.n_dead_tup / NULLIF(t.n_live_tup + t.n_dead_tup, 0), 2),
                'lastVacuum', queen.admin_iso(t.last_vacuum),
                'lastAutovacuum', queen.admin_iso(t.last_autovacuum)) ORDER BY t.n_dead_tup DESC)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'hotUpdates', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname, 'totalUpdates', t.n_tup_upd,
                'hotUpdates', t.n_tup_hot_upd,
                'hotUpdatePercentage', round(100.0 * t.n_tup_hot_upd / NULLIF(t.n_tup_upd, 0), 2)) ORDER BY t.relname)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb),
        'activeQueries', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'pid', a.pid, 'duration', round(extract(epoch FROM clock_timestamp() - a.query_start)::numeric, 3),
                'state', a.state, 'query', left(a.query, 500),
                'waitEventType', a.wait_event_type, 'waitEvent', a.wait_event) ORDER BY a.query_start)
              FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.state <> 'idle' AND a.pid <> pg_backend_pid()), '[]'::jsonb),
        'autovacuumStatus', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'table', t.schemaname || '.' || t.relname,
                'lastAutovacuum', queen.admin_iso(t.last_autovacuum),
                'autovacuumCount', t.autovacuum_count, 'deadTuples', t.n_dead_tup) ORDER BY t.relname)
              FROM pg_stat_user_tables t WHERE t.schemaname IN ('queen', 'queen_streams')), '[]'::jsonb));
END
$$;

-- queen.admin_trace_row: one trace as the trace views show it.
CREATE OR REPLACE FUNCTION queen.admin_trace_row(p_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM queen.message_traces x WHERE x.id = p_id;
    RETURN jsonb_build_object(
        'id', t.id, 'transaction_id', t.transaction_id, 'partition_id', t.partition_id,
        'event_type', t.event_type, 'data', t.data, 'consumer_group', t.consumer_group,
        'worker_id', NULL, 'created_at', queen.admin_iso(t.created_at),
        'trace_names', to_jsonb(t.trace_names));
END
$$;

-- queen.admin_message_traces_v1: GET /api/v1/traces/:partitionId/:transactionId.
CREATE OR REPLACE FUNCTION queen.admin_message_traces_v1(
    p_tenant text, p_partition_id uuid, p_transaction_id text
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN jsonb_build_object('traces', COALESCE((
        SELECT jsonb_agg(queen.admin_trace_row(t.id) ORDER BY t.created_at, t.id)
          FROM queen.message_traces t
          JOIN queen.log_partitions p ON p.id = t.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.tenant_id = p_tenant AND t.partition_id = p_partition_id
           AND t.transaction_id = p_transaction_id), '[]'::jsonb));
END
$$;

-- queen.admin_traces_by_name_v1: GET /api/v1/traces/by-name/:name, newest
-- first (through idx_message_traces_names).
CREATE OR REPLACE FUNCTION queen.admin_traces_by_name_v1(
    p_tenant text, p_name text, p_limit integer, p_offset integer
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_total bigint;
    v_list jsonb;
BEGIN
    SELECT count(*) INTO v_total
      FROM queen.message_traces t
      JOIN queen.log_partitions p ON p.id = t.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant_id = p_tenant AND t.trace_names @> ARRAY[p_name];
    SELECT COALESCE(jsonb_agg(x.row ORDER BY x.created_at DESC, x.id), '[]'::jsonb) INTO v_list
      FROM (SELECT t.created_at, t.id,
                   queen.admin_trace_row(t.id) || jsonb_build_object(
                       'queue_name', q.name, 'partition_name', p.name, 'message_payload', NULL) AS row
              FROM queen.message_traces t
              JOIN queen.log_partitions p ON p.id = t.partition_id
              JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.tenant_id = p_tenant AND t.trace_names @> ARRAY[p_name]
             ORDER BY t.created_at DESC, t.id
             LIMIT p_limit OFFSET p_offset) AS x;
    RETURN jsonb_build_object('traces', v_list, 'total', v_total,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset,
                                                               'total', v_total));
END
$$;

-- queen.admin_message_segments_v1: the segments holding one page of the
-- message listing (GET /api/v1/messages), newest first: of the filtered
-- queues' partitions written since p_from, the segments committed in
-- [p_from, p_to], in created_at order from the newest, as many as cover
-- p_need messages but never more than p_max_segments. Each partition is read
-- backwards along its primary key (created_at is monotone in offset), and
-- only partitions written since p_from are visited (last_write_at is
-- quantised to a second, hence the slack), so the cost is the window's
-- segments, never a whole partition. o_more: the cap cut the page short.
CREATE OR REPLACE FUNCTION queen.admin_message_segments_v1(
    p_tenant text, p_queue text, p_partition text, p_namespace text, p_task text,
    p_from timestamptz, p_to timestamptz, p_need integer, p_max_segments integer
) RETURNS TABLE (
    o_partition_id uuid, o_queue text, o_partition text, o_namespace text, o_task text,
    o_base_offset bigint, o_end_offset bigint, o_created_at timestamptz, o_blob bytea,
    o_more boolean
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    WITH candidates AS (
        SELECT p.id AS pid, q.name AS queue, p.name AS partition, q.namespace, q.task,
               s.base_offset, s.end_offset, s.msg_count, s.created_at
          FROM queen.queues q
          JOIN queen.log_partitions p ON p.queue_id = q.id
          CROSS JOIN LATERAL (
              SELECT x.base_offset, x.end_offset, x.msg_count, x.created_at
                FROM queen.log_segments x
               WHERE x.partition_id = p.id AND x.created_at >= p_from AND x.created_at <= p_to
               ORDER BY x.base_offset DESC
               LIMIT p_need) AS s
         WHERE q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue)
           AND (p_partition IS NULL OR p.name = p_partition)
           AND (p_namespace IS NULL OR q.namespace = p_namespace)
           AND (p_task IS NULL OR q.task = p_task)
           AND p.last_write_at >= p_from - interval '2 seconds'),
    ranked AS (
        SELECT c.*, sum(c.msg_count) OVER (ORDER BY c.created_at DESC, c.pid, c.base_offset DESC
                                           ROWS UNBOUNDED PRECEDING) - c.msg_count AS before,
               row_number() OVER (ORDER BY c.created_at DESC, c.pid, c.base_offset DESC) AS n
          FROM candidates c),
    chosen AS (
        SELECT r.* FROM ranked r WHERE r.before < p_need AND r.n <= p_max_segments),
    more AS (
        SELECT EXISTS (SELECT 1 FROM ranked r WHERE r.before < p_need AND r.n > p_max_segments) AS cut)
    SELECT c.pid, c.queue, c.partition, c.namespace, c.task, c.base_offset, c.end_offset,
           c.created_at, seg.blob, more.cut
      FROM chosen c
      JOIN queen.log_segments seg ON seg.partition_id = c.pid AND seg.base_offset = c.base_offset
      CROSS JOIN more
     ORDER BY c.created_at DESC, c.pid, c.base_offset DESC;
END
$$;
