-- procedures/retention.sql: one step of the retention loop and one of the
-- eviction loop (decisions.md §8, storage-model.md: the oldest_* work-lists,
-- invariants 3 and 4), the prefix deletion they share (log_drop_prefix_v1)
-- and the sidecar's (log_purge_txns_v1).
--
-- One call is one transaction and a bounded amount of work:
--   1. segments: for queues with retentionEnabled, the partitions whose oldest
--      live segment is older than the queue's smaller positive threshold
--      (one range scan of the partial index (queue_id, oldest_live_at)), and
--      for each at most p_max_segments segments from log_start, of which the
--      prefix that is older than retentionSeconds, or older than
--      completedRetentionSeconds and consumed by every group of the queue,
--      is deleted; log_start and oldest_live_at move with it;
--   2. the sidecar, on its own clock and for every queue: rows older than
--      GREATEST(dedup window, completed retention, 900 s), found through
--      idx_log_partitions_oldest_txn (every queue at once), at most p_max_segments rows a partition;
--      txns_start and oldest_txn_at move with them.
-- Its cost scales with deletable work: a partition appears in a work-list
-- scan only when the row at its watermark is older than the cutoff. Each
-- partition row is taken FOR UPDATE SKIP LOCKED: a partition a push holds is
-- left for the next pass, so retention never waits on a push. A push may
-- wait on retention: the rows a step took stay locked until it commits,
-- which is why a step is small (the broker passes 32 partitions and 256
-- segments) and a pass is many steps.
--
-- Only one broker sweeps at a time: the step takes a transaction-level
-- advisory try-lock and answers o_skipped when another session holds it.
-- o_more says some partition still had deletable work past the bounds: the
-- caller runs another step at once.

-- Delete the deletable prefix of partition p_pid's segments, looking at most
-- at p_max_segments of them from log_start: a segment goes when it is older
-- than p_cut_time, or older than p_cut_done and at or below p_consumed. Both
-- conditions hold for a prefix (created_at and end_offset are monotone), so
-- what goes is a prefix. Moves log_start and oldest_live_at. The caller
-- holds the partition row's lock.
-- queen.queue_key_v1: the key a broker knows queue (p_tenant, p_name) by in
-- memory, exactly as naming::queue_key builds it: the bare name for tenant
-- 'default', else tenant, U+001F, name (neither can hold a control
-- character). The retention steps key their per-queue counts by it.
CREATE OR REPLACE FUNCTION queen.queue_key_v1(p_tenant text, p_name text)
RETURNS text
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE WHEN p_tenant = 'default' THEN p_name ELSE p_tenant || chr(31) || p_name END
$$;

CREATE OR REPLACE FUNCTION queen.log_drop_prefix_v2(
    p_pid          uuid,
    p_cut_time     timestamptz,
    p_cut_done     timestamptz,
    p_consumed     bigint,
    p_max_segments integer
) RETURNS TABLE (o_segments integer, o_messages bigint, o_more boolean, o_time_messages bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_log_start bigint;
    v_gone_end  bigint;
    v_next      record;
BEGIN
    SELECT p.log_start INTO v_log_start FROM queen.log_partitions p WHERE p.id = p_pid;
    WITH head AS (
        SELECT s.base_offset
          FROM queen.log_segments s
         WHERE s.partition_id = p_pid AND s.base_offset >= v_log_start
         ORDER BY s.base_offset
         LIMIT p_max_segments
    ), gone AS (
        DELETE FROM queen.log_segments s
         USING head
         WHERE s.partition_id = p_pid
           AND s.base_offset = head.base_offset
           AND (s.created_at < p_cut_time
                OR (s.created_at < p_cut_done AND s.end_offset <= p_consumed))
        RETURNING s.end_offset, s.msg_count, s.created_at < p_cut_time AS by_time
    )
    SELECT max(gone.end_offset), count(*), coalesce(sum(gone.msg_count), 0),
           coalesce(sum(gone.msg_count) FILTER (WHERE gone.by_time), 0)
      INTO v_gone_end, o_segments, o_messages, o_time_messages
      FROM gone;
    o_more := o_segments >= p_max_segments;
    IF o_segments > 0 THEN
        SELECT s.base_offset, s.created_at INTO v_next
          FROM queen.log_segments s
         WHERE s.partition_id = p_pid AND s.base_offset > v_gone_end
         ORDER BY s.base_offset
         LIMIT 1;
        UPDATE queen.log_partitions p
           SET log_start = coalesce(v_next.base_offset, greatest(v_gone_end, p.last_offset) + 1),
               oldest_live_at = v_next.created_at
         WHERE p.id = p_pid;
    END IF;
    RETURN NEXT;
END;
$$;

-- v1: v2 without the split by rule, for brokers of the previous version.
CREATE OR REPLACE FUNCTION queen.log_drop_prefix_v1(
    p_pid          uuid,
    p_cut_time     timestamptz,
    p_cut_done     timestamptz,
    p_consumed     bigint,
    p_max_segments integer
) RETURNS TABLE (o_segments integer, o_messages bigint, o_more boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    RETURN QUERY
    SELECT d.o_segments, d.o_messages, d.o_more
      FROM queen.log_drop_prefix_v2(p_pid, p_cut_time, p_cut_done, p_consumed, p_max_segments) d;
END;
$$;

-- The sidecar's counterpart of log_drop_prefix_v1: delete the rows of
-- partition p_pid older than p_cutoff, looking at most at p_max_rows of them
-- from txns_start (created_at is monotone, so what goes is a prefix), and
-- move txns_start and oldest_txn_at. The caller holds the partition row's
-- lock.
CREATE OR REPLACE FUNCTION queen.log_purge_txns_v1(
    p_pid      uuid,
    p_cutoff   timestamptz,
    p_max_rows integer
) RETURNS TABLE (o_rows integer, o_more boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_txns_start bigint;
    v_gone_end   bigint;
    v_next       record;
BEGIN
    SELECT p.txns_start INTO v_txns_start FROM queen.log_partitions p WHERE p.id = p_pid;
    WITH head AS (
        SELECT t.base_offset
          FROM queen.log_txns t
         WHERE t.partition_id = p_pid AND t.base_offset >= v_txns_start
         ORDER BY t.base_offset
         LIMIT p_max_rows
    ), gone AS (
        DELETE FROM queen.log_txns t
         USING head
         WHERE t.partition_id = p_pid
           AND t.base_offset = head.base_offset
           AND t.created_at < p_cutoff
        RETURNING t.end_offset
    )
    SELECT max(gone.end_offset), count(*) INTO v_gone_end, o_rows FROM gone;
    o_more := o_rows >= p_max_rows;
    IF o_rows > 0 THEN
        SELECT t.base_offset, t.created_at INTO v_next
          FROM queen.log_txns t
         WHERE t.partition_id = p_pid AND t.base_offset > v_gone_end
         ORDER BY t.base_offset
         LIMIT 1;
        UPDATE queen.log_partitions p
           SET txns_start = coalesce(v_next.base_offset, greatest(v_gone_end, p.last_offset) + 1),
               oldest_txn_at = v_next.created_at
         WHERE p.id = p_pid;
    END IF;
    RETURN NEXT;
END;
$$;

CREATE OR REPLACE FUNCTION queen.log_retention_step_v2(
    p_max_partitions integer,
    p_max_segments   integer
) RETURNS TABLE (
    o_skipped         boolean,
    o_partitions      integer,
    o_segments        integer,
    o_messages        bigint,
    o_txn_rows        integer,
    o_more            boolean,
    o_by_queue        jsonb
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    -- "QUEENRET": the retention sweep's lock, shared by every broker version.
    c_lock constant bigint := 5860666654061643092;
    v_now       timestamptz := clock_timestamp();
    v_part      record;
    v_cut_time  timestamptz;
    v_cut_done  timestamptz;
    v_consumed  bigint;
    v_gone_n    integer;
    v_gone_msgs bigint;
    v_more      boolean;
    v_purged    integer := 0;
    v_by_time   bigint;
    v_name      text;
BEGIN
    o_skipped := false; o_partitions := 0; o_segments := 0; o_messages := 0;
    o_txn_rows := 0; o_more := false; o_by_queue := '{}'::jsonb;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        o_skipped := true;
        RETURN NEXT;
        RETURN;
    END IF;

    -- 1. Segments.
    FOR v_part IN
        SELECT p.id, p.queue_id, queen.queue_key_v1(q.tenant_id, q.name) AS queue_name, q.retention_seconds,
               q.completed_retention_seconds
          FROM queen.queues q
          CROSS JOIN LATERAL (
              SELECT p.id, p.queue_id
                FROM queen.log_partitions p
               WHERE p.queue_id = q.id
                 AND p.oldest_live_at IS NOT NULL
                 AND p.oldest_live_at < v_now - make_interval(secs => least(
                         CASE WHEN q.retention_seconds > 0 THEN q.retention_seconds END,
                         CASE WHEN q.completed_retention_seconds > 0
                              THEN q.completed_retention_seconds END))
               ORDER BY p.oldest_live_at
               LIMIT p_max_partitions) p
         WHERE q.retention_enabled
           AND (q.retention_seconds > 0 OR q.completed_retention_seconds > 0)
         LIMIT p_max_partitions
    LOOP
        PERFORM 1
          FROM queen.log_partitions p
         WHERE p.id = v_part.id
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;  -- a push holds it: next pass
        END IF;
        v_cut_time := CASE WHEN v_part.retention_seconds > 0
                           THEN v_now - make_interval(secs => v_part.retention_seconds)
                           ELSE '-infinity' END;
        v_cut_done := CASE WHEN v_part.completed_retention_seconds > 0
                           THEN v_now - make_interval(secs => v_part.completed_retention_seconds)
                           ELSE '-infinity' END;
        -- Consumed by every group: the smallest cursor, and only when every
        -- group registered on the queue has a cursor here (a group that has
        -- none yet has consumed nothing of it).
        v_consumed := NULL;
        IF v_cut_done > '-infinity' THEN
            SELECT min(c.committed) INTO v_consumed
              FROM queen.log_consumers c
             WHERE c.partition_id = v_part.id;
            IF EXISTS (SELECT 1
                         FROM queen.consumer_groups_metadata m
                        WHERE m.queue_id = v_part.queue_id
                          AND NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                           WHERE c.partition_id = v_part.id
                                             AND c.consumer_group = m.consumer_group)) THEN
                v_consumed := NULL;
            END IF;
        END IF;
        SELECT d.o_segments, d.o_messages, d.o_more, d.o_time_messages
          INTO v_gone_n, v_gone_msgs, v_more, v_by_time
          FROM queen.log_drop_prefix_v2(v_part.id, v_cut_time, v_cut_done, v_consumed,
                                        p_max_segments) d;
        IF v_gone_n = 0 THEN
            CONTINUE;
        END IF;
        -- Per queue: [messages past retentionSeconds, messages consumed and
        -- past completedRetentionSeconds].
        v_name := v_part.queue_name;
        o_by_queue := o_by_queue || jsonb_build_object(v_name, jsonb_build_array(
            COALESCE((o_by_queue -> v_name ->> 0)::bigint, 0) + v_by_time,
            COALESCE((o_by_queue -> v_name ->> 1)::bigint, 0) + v_gone_msgs - v_by_time));
        o_more := o_more OR v_more;
        o_partitions := o_partitions + 1;
        -- A full list of partitions with work done: there may be more.
        IF o_partitions >= p_max_partitions THEN
            o_more := true;
        END IF;
        o_segments := o_segments + v_gone_n;
        o_messages := o_messages + v_gone_msgs;
    END LOOP;

    -- 2. The sidecar, on its own clock. Every queue's cutoff is at least
    --    900 s old, so one range scan of the global work-list
    --    (idx_log_partitions_oldest_txn) from the oldest finds the due
    --    partitions, whatever the queue count: it used to probe every
    --    queue's list (10,000 queues: 10,000 index probes a step with
    --    nothing to do).
    FOR v_part IN
        SELECT p.id,
               v_now - make_interval(secs => greatest(q.dedup_window_seconds,
                                                      q.completed_retention_seconds, 900)) AS cutoff
          FROM queen.log_partitions p
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE p.oldest_txn_at IS NOT NULL
           AND p.oldest_txn_at < v_now - interval '900 seconds'
           AND p.oldest_txn_at < v_now - make_interval(secs => greatest(
                   q.dedup_window_seconds, q.completed_retention_seconds, 900))
         ORDER BY p.oldest_txn_at
         LIMIT p_max_partitions
    LOOP
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_part.id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        SELECT d.o_rows, d.o_more INTO v_gone_n, v_more
          FROM queen.log_purge_txns_v1(v_part.id, v_part.cutoff, p_max_segments) d;
        IF v_gone_n = 0 THEN
            CONTINUE;
        END IF;
        o_more := o_more OR v_more;
        o_txn_rows := o_txn_rows + v_gone_n;
        v_purged := v_purged + 1;
        IF v_purged >= p_max_partitions THEN
            o_more := true;
        END IF;
    END LOOP;
    RETURN NEXT;
END;
$$;

-- The ids of at most p_limit partitions of queue p_qid holding a live
-- message older than p_due, oldest first: the work list of retention and
-- eviction on Citus, a queue at a time (Citus plans no LIMIT in a lateral
-- subquery naming the queue, so the two steps ask per queue).
CREATE OR REPLACE FUNCTION queen.log_due_partitions_v1(p_qid uuid, p_due timestamptz, p_limit integer)
RETURNS uuid[]
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN ARRAY(
        SELECT p.id
          FROM queen.log_partitions p
         WHERE p.queue_id = p_qid
           AND p.oldest_live_at IS NOT NULL
           AND p.oldest_live_at < p_due
         ORDER BY p.oldest_live_at
         LIMIT p_limit);
END;
$$;

-- v3: v2, with a registered group that has no cursor on a partition yet
-- counted at the position its cursor would start from, not as having
-- consumed nothing: the hot-list path no longer seeds every cursor at a
-- group's first contact, so a 'new' group that never touches an old
-- partition must not hold back its completedRetentionSeconds.
CREATE OR REPLACE FUNCTION queen.log_retention_step_v3(
    p_max_partitions integer,
    p_max_segments   integer
) RETURNS TABLE (
    o_skipped         boolean,
    o_partitions      integer,
    o_segments        integer,
    o_messages        bigint,
    o_txn_rows        integer,
    o_more            boolean,
    o_by_queue        jsonb
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    -- "QUEENRET": the retention sweep's lock, shared by every broker version.
    c_lock constant bigint := 5860666654061643092;
    v_now       timestamptz := clock_timestamp();
    v_part      record;
    v_cut_time  timestamptz;
    v_cut_done  timestamptz;
    v_consumed  bigint;
    v_gone_n    integer;
    v_gone_msgs bigint;
    v_more      boolean;
    v_purged    integer := 0;
    v_by_time   bigint;
    v_name      text;
    v_ids       uuid[];
    v_id        uuid;
    v_q         record;
    v_groups    text[];
    v_have      text[];
    v_g         text;
BEGIN
    o_skipped := false; o_partitions := 0; o_segments := 0; o_messages := 0;
    o_txn_rows := 0; o_more := false; o_by_queue := '{}'::jsonb;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        o_skipped := true;
        RETURN NEXT;
        RETURN;
    END IF;

    -- 1. Segments. The partitions due, oldest first, at most p_max_partitions
    --    of each queue and in all: on PostgreSQL one statement over the
    --    queues with a lateral probe of each queue's work-list; on Citus
    --    (queen.citus = 'on') a statement per queue with retention (Citus
    --    plans no LIMIT in a subquery that names the outer query's columns).
    --    Then each partition, locked, with its queue's settings.
    IF current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on' THEN
        v_ids := '{}';
        FOR v_q IN
            SELECT q.id,
                   v_now - make_interval(secs => least(
                       CASE WHEN q.retention_seconds > 0 THEN q.retention_seconds END,
                       CASE WHEN q.completed_retention_seconds > 0
                            THEN q.completed_retention_seconds END)) AS due
              FROM queen.queues q
             WHERE q.retention_enabled
               AND (q.retention_seconds > 0 OR q.completed_retention_seconds > 0)
        LOOP
            EXIT WHEN cardinality(v_ids) >= p_max_partitions;
            v_ids := v_ids || queen.log_due_partitions_v1(v_q.id, v_q.due,
                                                          p_max_partitions - cardinality(v_ids));
        END LOOP;
    ELSE
        v_ids := ARRAY(
            SELECT p.id
              FROM queen.queues q
              CROSS JOIN LATERAL (
                  SELECT p.id, p.queue_id
                    FROM queen.log_partitions p
                   WHERE p.queue_id = q.id
                     AND p.oldest_live_at IS NOT NULL
                     AND p.oldest_live_at < v_now - make_interval(secs => least(
                             CASE WHEN q.retention_seconds > 0 THEN q.retention_seconds END,
                             CASE WHEN q.completed_retention_seconds > 0
                                  THEN q.completed_retention_seconds END))
                   ORDER BY p.oldest_live_at
                   LIMIT p_max_partitions) p
             WHERE q.retention_enabled
               AND (q.retention_seconds > 0 OR q.completed_retention_seconds > 0)
             LIMIT p_max_partitions);
    END IF;
    FOREACH v_id IN ARRAY v_ids
    LOOP
        PERFORM 1
          FROM queen.log_partitions p
         WHERE p.id = v_id
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;  -- a push holds it: next pass
        END IF;
        SELECT p.id, p.queue_id, queen.queue_key_v1(q.tenant_id, q.name) AS queue_name,
               q.retention_seconds, q.completed_retention_seconds
          INTO v_part
          FROM queen.log_partitions p
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE p.id = v_id;
        v_cut_time := CASE WHEN v_part.retention_seconds > 0
                           THEN v_now - make_interval(secs => v_part.retention_seconds)
                           ELSE '-infinity' END;
        v_cut_done := CASE WHEN v_part.completed_retention_seconds > 0
                           THEN v_now - make_interval(secs => v_part.completed_retention_seconds)
                           ELSE '-infinity' END;
        -- Consumed by every group: the least of the cursors here and, for a
        -- group registered on the queue with no cursor here yet (cursors
        -- appear when a group first touches a partition), where its cursor
        -- would start (log_seed_position_v1: a 'new' or from-timestamp group
        -- has passed what came before its moment, an 'all' group nothing).
        --
        -- In steps, each a statement Citus runs (it plans no correlated
        -- subquery beside the groups reference table): the least cursor
        -- here, the registered groups, which of them have a cursor here,
        -- and where each one without would start. LEAST skips NULLs, as
        -- min() over their union did.
        v_consumed := NULL;
        IF v_cut_done > '-infinity' THEN
            SELECT min(c.committed) INTO v_consumed
              FROM queen.log_consumers c
             WHERE c.partition_id = v_part.id;
            SELECT array_agg(m.consumer_group) INTO v_groups
              FROM queen.consumer_groups_metadata m
             WHERE m.queue_id = v_part.queue_id;
            IF v_groups IS NOT NULL THEN
                SELECT array_agg(c.consumer_group) INTO v_have
                  FROM queen.log_consumers c
                 WHERE c.partition_id = v_part.id AND c.consumer_group = ANY (v_groups);
                FOREACH v_g IN ARRAY v_groups LOOP
                    IF NOT (v_g = ANY (coalesce(v_have, '{}'))) THEN
                        v_consumed := least(v_consumed,
                            queen.log_seed_position_v1(v_part.id, v_part.queue_id, v_g, 'all', NULL));
                    END IF;
                END LOOP;
            END IF;
        END IF;
        SELECT d.o_segments, d.o_messages, d.o_more, d.o_time_messages
          INTO v_gone_n, v_gone_msgs, v_more, v_by_time
          FROM queen.log_drop_prefix_v2(v_part.id, v_cut_time, v_cut_done, v_consumed,
                                        p_max_segments) d;
        IF v_gone_n = 0 THEN
            CONTINUE;
        END IF;
        -- Per queue: [messages past retentionSeconds, messages consumed and
        -- past completedRetentionSeconds].
        v_name := v_part.queue_name;
        o_by_queue := o_by_queue || jsonb_build_object(v_name, jsonb_build_array(
            COALESCE((o_by_queue -> v_name ->> 0)::bigint, 0) + v_by_time,
            COALESCE((o_by_queue -> v_name ->> 1)::bigint, 0) + v_gone_msgs - v_by_time));
        o_more := o_more OR v_more;
        o_partitions := o_partitions + 1;
        -- A full list of partitions with work done: there may be more.
        IF o_partitions >= p_max_partitions THEN
            o_more := true;
        END IF;
        o_segments := o_segments + v_gone_n;
        o_messages := o_messages + v_gone_msgs;
    END LOOP;

    -- 2. The sidecar, on its own clock. Every queue's cutoff is at least
    --    900 s old, so one range scan of the global work-list
    --    (idx_log_partitions_oldest_txn) from the oldest finds the due
    --    partitions, whatever the queue count: it used to probe every
    --    queue's list (10,000 queues: 10,000 index probes a step with
    --    nothing to do).
    FOR v_part IN
        SELECT p.id,
               v_now - make_interval(secs => greatest(q.dedup_window_seconds,
                                                      q.completed_retention_seconds, 900)) AS cutoff
          FROM queen.log_partitions p
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE p.oldest_txn_at IS NOT NULL
           AND p.oldest_txn_at < v_now - interval '900 seconds'
           AND p.oldest_txn_at < v_now - make_interval(secs => greatest(
                   q.dedup_window_seconds, q.completed_retention_seconds, 900))
         ORDER BY p.oldest_txn_at
         LIMIT p_max_partitions
    LOOP
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_part.id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        SELECT d.o_rows, d.o_more INTO v_gone_n, v_more
          FROM queen.log_purge_txns_v1(v_part.id, v_part.cutoff, p_max_segments) d;
        IF v_gone_n = 0 THEN
            CONTINUE;
        END IF;
        o_more := o_more OR v_more;
        o_txn_rows := o_txn_rows + v_gone_n;
        v_purged := v_purged + 1;
        IF v_purged >= p_max_partitions THEN
            o_more := true;
        END IF;
    END LOOP;
    RETURN NEXT;
END;
$$;

-- v1: v2 without the per-queue counts, for brokers of the previous version.
CREATE OR REPLACE FUNCTION queen.log_retention_step_v1(
    p_max_partitions integer,
    p_max_segments   integer
) RETURNS TABLE (
    o_skipped         boolean,
    o_partitions      integer,
    o_segments        integer,
    o_messages        bigint,
    o_txn_rows        integer,
    o_more            boolean
)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    RETURN QUERY
    SELECT r.o_skipped, r.o_partitions, r.o_segments, r.o_messages, r.o_txn_rows, r.o_more
      FROM queen.log_retention_step_v2(p_max_partitions, p_max_segments) r;
END;
$$;

-- The eviction loop's one step (EVICTION_INTERVAL): queue option
-- maxWaitTimeSeconds removes the messages no group consumed within that
-- many seconds, whatever retentionEnabled says. Same work-list, bounds,
-- row locks and prefix rule as the retention step; its own advisory lock
-- ("QUEENEVI"), so one session evicts at a time.
CREATE OR REPLACE FUNCTION queen.log_eviction_step_v2(
    p_max_partitions integer,
    p_max_segments   integer
) RETURNS TABLE (
    o_skipped    boolean,
    o_partitions integer,
    o_segments   integer,
    o_messages   bigint,
    o_more       boolean,
    o_by_queue   jsonb
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    c_lock constant bigint := 5860666654060795465;
    v_now  timestamptz := clock_timestamp();
    v_part record;
    v_drop record;
    v_ids  uuid[];
    v_id   uuid;
    v_q    record;
BEGIN
    o_skipped := false; o_partitions := 0; o_segments := 0; o_messages := 0; o_more := false;
    o_by_queue := '{}'::jsonb;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        o_skipped := true;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The partitions due, as log_retention_step_v3 finds them: on Citus
    -- (queen.citus = 'on') a statement per queue with maxWaitTimeSeconds.
    IF current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on' THEN
        v_ids := '{}';
        FOR v_q IN
            SELECT q.id, v_now - make_interval(secs => q.max_wait_time_seconds) AS due
              FROM queen.queues q
             WHERE q.max_wait_time_seconds > 0
        LOOP
            EXIT WHEN cardinality(v_ids) >= p_max_partitions;
            v_ids := v_ids || queen.log_due_partitions_v1(v_q.id, v_q.due,
                                                          p_max_partitions - cardinality(v_ids));
        END LOOP;
    ELSE
        v_ids := ARRAY(
            SELECT p.id
              FROM queen.queues q
              CROSS JOIN LATERAL (
                  SELECT p.id
                    FROM queen.log_partitions p
                   WHERE p.queue_id = q.id
                     AND p.oldest_live_at IS NOT NULL
                     AND p.oldest_live_at < v_now - make_interval(secs => q.max_wait_time_seconds)
                   ORDER BY p.oldest_live_at
                   LIMIT p_max_partitions) p
             WHERE q.max_wait_time_seconds > 0
             LIMIT p_max_partitions);
    END IF;
    FOREACH v_id IN ARRAY v_ids
    LOOP
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        SELECT p.id, queen.queue_key_v1(q.tenant_id, q.name) AS queue_name,
               v_now - make_interval(secs => q.max_wait_time_seconds) AS cutoff
          INTO v_part
          FROM queen.log_partitions p
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE p.id = v_id;
        SELECT * INTO v_drop
          FROM queen.log_drop_prefix_v2(v_part.id, v_part.cutoff, '-infinity', NULL,
                                        p_max_segments);
        IF v_drop.o_segments > 0 THEN
            o_by_queue := o_by_queue || jsonb_build_object(v_part.queue_name,
                COALESCE((o_by_queue ->> v_part.queue_name)::bigint, 0) + v_drop.o_messages);
            o_partitions := o_partitions + 1;
            o_segments := o_segments + v_drop.o_segments;
            o_messages := o_messages + v_drop.o_messages;
            o_more := o_more OR v_drop.o_more OR o_partitions >= p_max_partitions;
        END IF;
    END LOOP;
    RETURN NEXT;
END;
$$;

-- v1: v2 without the per-queue counts, for brokers of the previous version.
CREATE OR REPLACE FUNCTION queen.log_eviction_step_v1(
    p_max_partitions integer,
    p_max_segments   integer
) RETURNS TABLE (
    o_skipped    boolean,
    o_partitions integer,
    o_segments   integer,
    o_messages   bigint,
    o_more       boolean
)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    RETURN QUERY
    SELECT e.o_skipped, e.o_partitions, e.o_segments, e.o_messages, e.o_more
      FROM queen.log_eviction_step_v2(p_max_partitions, p_max_segments) e;
END;
$$;

-- Whether partition p_pid may be removed: it holds no segment, nothing was
-- written to it since p_idle_before, and it holds no dead letter (a dead
-- letter keeps its partition: storage-model.md, log_dlq). The caller holds
-- the partition row's lock, so a push cannot change the answer.
CREATE OR REPLACE FUNCTION queen.log_partition_dead_v1(p_pid uuid, p_idle_before timestamptz)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM queen.log_partitions p
                    WHERE p.id = p_pid AND p.last_write_at < p_idle_before)
       AND NOT EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p_pid)
       AND NOT EXISTS (SELECT 1 FROM queen.log_dlq d WHERE d.partition_id = p_pid);
END;
$$;

-- queen.log_partition_remove_v1(p_pid): remove a partition the caller holds
-- locked (with its cursors) and found dead: raise its queue's offset floor
-- past its last offset (a partition created again under the same derived id
-- starts above it, 001_log_schema.sql), delete its sidecar rows and its
-- traces (they have no foreign key), then the row, whose cascade takes the
-- cursors. The floor row stays locked until the caller commits, so two
-- callers removing partitions of the same queues could wait on each other:
-- the cleanup steps hold a try-lock, one at a time.
CREATE OR REPLACE FUNCTION queen.log_partition_remove_v1(p_pid uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    INSERT INTO queen.partition_offset_floors AS f (queue_id, next_offset)
    SELECT p.queue_id, p.last_offset + 1 FROM queen.log_partitions p WHERE p.id = p_pid
    ON CONFLICT (queue_id) DO UPDATE
       SET next_offset = greatest(f.next_offset, EXCLUDED.next_offset);
    DELETE FROM queen.log_txns t WHERE t.partition_id = p_pid;
    -- Its traces too: a partition created again has this id, and its
    -- messages must not show the earlier life's traces.
    DELETE FROM queen.message_traces m WHERE m.partition_id = p_pid;
    DELETE FROM queen.log_partitions p WHERE p.id = p_pid;
END;
$$;

-- Partition cleanup, run by the retention loop after its steps: partitions
-- that are empty (oldest_live_at NULL) and idle for p_idle_seconds, found
-- through the partial index (queue_id, last_write_at) WHERE oldest_live_at
-- IS NULL, at most p_max_partitions. Each is locked FOR UPDATE SKIP LOCKED
-- (a push holding it keeps it), checked again with log_partition_dead_v1
-- under the lock, and deleted: its sidecar rows first (they have no foreign
-- key), then the row, whose cascade takes the cursors. A push that was
-- waiting for the row lock finds no row once this commits and creates the
-- partition again, under its derived id, with offsets above the old ones
-- (log_partition_remove_v1).
CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v2(
    p_idle_seconds   integer,
    p_max_partitions integer
) RETURNS TABLE (o_removed integer, o_by_queue jsonb)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_cutoff  timestamptz := clock_timestamp() - make_interval(secs => p_idle_seconds);
    v_part    record;
    v_cursors bigint;
    v_locked  bigint;
    -- "QCLEANUP": one cleanup step at a time (log_partition_remove_v1).
    c_lock    constant bigint := 5855607800843883856;
BEGIN
    o_removed := 0;
    o_by_queue := '{}'::jsonb;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    FOR v_part IN
        SELECT p.id, queen.queue_key_v1(q.tenant_id, q.name) AS queue_name
          FROM queen.queues q
          CROSS JOIN LATERAL (
              SELECT p.id
                FROM queen.log_partitions p
               WHERE p.queue_id = q.id
                 AND p.oldest_live_at IS NULL
                 AND p.last_write_at < v_cutoff
               ORDER BY p.last_write_at
               LIMIT p_max_partitions) p
         LIMIT p_max_partitions
    LOOP
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_part.id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        -- Its cursors too: filing a dead letter locks the cursor row first
        -- (log_dlq_head_v1) and inserts the letter in the same transaction,
        -- so a cursor someone holds may be about to file one. Skip the
        -- partition then; once these locks are held, a filing waits, finds
        -- no cursor after the delete, and files nothing.
        SELECT count(*) INTO v_cursors FROM queen.log_consumers c WHERE c.partition_id = v_part.id;
        SELECT count(*) INTO v_locked
          FROM (SELECT 1 FROM queen.log_consumers c
                 WHERE c.partition_id = v_part.id
                   FOR UPDATE SKIP LOCKED) l;
        IF v_locked < v_cursors OR NOT queen.log_partition_dead_v1(v_part.id, v_cutoff) THEN
            CONTINUE;
        END IF;
        PERFORM queen.log_partition_remove_v1(v_part.id);
        o_removed := o_removed + 1;
        o_by_queue := o_by_queue || jsonb_build_object(v_part.queue_name,
            COALESCE((o_by_queue ->> v_part.queue_name)::integer, 0) + 1);
    END LOOP;
    RETURN NEXT;
END;
$$;

-- v3: v2 with its work-list read in one range scan of the global
-- idx_log_partitions_empty (last_write_at) WHERE oldest_live_at IS NULL,
-- oldest first, whatever the queue count: v2 probed every queue's list (and
-- read the whole queues table) on every pass.
CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v3(
    p_idle_seconds   integer,
    p_max_partitions integer
) RETURNS TABLE (o_removed integer, o_by_queue jsonb)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_cutoff  timestamptz := clock_timestamp() - make_interval(secs => p_idle_seconds);
    v_part    record;
    v_cursors bigint;
    v_locked  bigint;
    -- "QCLEANUP": one cleanup step at a time (log_partition_remove_v1).
    c_lock    constant bigint := 5855607800843883856;
BEGIN
    o_removed := 0;
    o_by_queue := '{}'::jsonb;
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    FOR v_part IN
        SELECT p.id, queen.queue_key_v1(q.tenant_id, q.name) AS queue_name
          FROM (SELECT p.id, p.queue_id
                  FROM queen.log_partitions p
                 WHERE p.oldest_live_at IS NULL
                   AND p.last_write_at < v_cutoff
                 ORDER BY p.last_write_at
                 LIMIT p_max_partitions) p
          JOIN queen.queues q ON q.id = p.queue_id
    LOOP
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_part.id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        -- Its cursors too: filing a dead letter locks the cursor row first
        -- (log_dlq_head_v1) and inserts the letter in the same transaction,
        -- so a cursor someone holds may be about to file one. Skip the
        -- partition then; once these locks are held, a filing waits, finds
        -- no cursor after the delete, and files nothing.
        SELECT count(*) INTO v_cursors FROM queen.log_consumers c WHERE c.partition_id = v_part.id;
        SELECT count(*) INTO v_locked
          FROM (SELECT 1 FROM queen.log_consumers c
                 WHERE c.partition_id = v_part.id
                   FOR UPDATE SKIP LOCKED) l;
        IF v_locked < v_cursors OR NOT queen.log_partition_dead_v1(v_part.id, v_cutoff) THEN
            CONTINUE;
        END IF;
        PERFORM queen.log_partition_remove_v1(v_part.id);
        o_removed := o_removed + 1;
        o_by_queue := o_by_queue || jsonb_build_object(v_part.queue_name,
            COALESCE((o_by_queue ->> v_part.queue_name)::integer, 0) + 1);
    END LOOP;
    RETURN NEXT;
END;
$$;

-- v1: the count alone, for brokers of the previous version.
CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v1(
    p_idle_seconds   integer,
    p_max_partitions integer
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    RETURN (SELECT c.o_removed
              FROM queen.log_partition_cleanup_step_v2(p_idle_seconds, p_max_partitions) c);
END;
$$;
