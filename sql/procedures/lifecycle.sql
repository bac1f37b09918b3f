-- procedures/lifecycle.sql: the everyday lifecycle routes (wire-api §2.8,
-- §2.11 and the consumer-group rows of §5): deleting a queue, deleting a
-- consumer group's cursors, seeking, re-timing a subscription, and the
-- consumer-group views computed from the cursor model.
--
-- Applied at every boot inside the schema transaction: CREATE OR REPLACE
-- only, every name qualified with queen., and every function that reads a
-- table is plpgsql (a LANGUAGE sql body is analysed at CREATE, which locks the
-- tables it names).
--
-- Lag, from the cursor model: a cursor's offset lag is last_offset -
-- committed; its time lag is now - created_at of the segment holding
-- committed + 1 (the oldest unconsumed message), found with one backward
-- primary-key step on log_segments (and, when retention left a gap there, one
-- forward step to the next live segment). No scan.

-- queen.delete_queue_v1: delete the queue (p_tenant, p_name) and everything it
-- owns, in one transaction. Returns whether it existed.
--
-- log_segments, log_txns, log_dlq and message_traces carry no foreign key
-- (storage model; 001_log_schema.sql says why for segments), so their rows
-- are deleted here explicitly; the queue row's ON DELETE CASCADE removes
-- partitions, cursors and subscription metadata.
--
-- Order, and why:
--   1. the queue row FOR UPDATE: a push creating a new partition of this queue
--      needs a KEY SHARE lock on it (the partition's foreign key), so once we
--      hold it every partition of the queue is committed and visible, and no
--      new one can appear until we commit (such a push then fails its foreign
--      key check and is retried by the client, creating the queue anew);
--   2. every partition row FOR UPDATE, in name order (the order push flushes
--      lock them in): waits out in-flight pushes, and no push can write a
--      segment or a sidecar row until we commit;
--   3. the segments and the sidecar rows, complete under those locks;
--   4. the queue row: the cascade waits out pops and acks holding cursor rows;
--   5. dead letters and traces last, in new statements, so one filed by an ack
--      that was in flight until step 4 is seen and deleted too.
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_tenant text, p_name text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_qid  uuid;
    v_pid  uuid;
    v_pids uuid[];
BEGIN
    SELECT q.id INTO v_qid
      FROM queen.queues q
     WHERE q.tenant_id = p_tenant AND q.name = p_name
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;

    IF current_setting('queen.citus', true) = 'on' THEN
        -- On Citus a locking read over shards is refused: read the ids, then
        -- lock each by id, in the same (name) order. The queue row's lock
        -- keeps new partitions out meanwhile (their insert checks the key).
        -- The deletes below span shards and the queue row is a reference
        -- table: Citus allows both in one transaction shard by shard.
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
        SELECT coalesce(array_agg(p.id ORDER BY p.name), '{}') INTO v_pids
          FROM queen.log_partitions p
         WHERE p.queue_id = v_qid;
        FOREACH v_pid IN ARRAY v_pids LOOP
            PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_pid FOR UPDATE;
        END LOOP;
    ELSE
        SELECT coalesce(array_agg(l.id), '{}') INTO v_pids
          FROM (SELECT p.id
                  FROM queen.log_partitions p
                 WHERE p.queue_id = v_qid
                 ORDER BY p.name
                   FOR UPDATE) AS l;
    END IF;

    DELETE FROM queen.log_segments s WHERE s.partition_id = ANY (v_pids);
    DELETE FROM queen.log_txns t WHERE t.partition_id = ANY (v_pids);
    DELETE FROM queen.queues q WHERE q.id = v_qid;
    DELETE FROM queen.log_dlq d WHERE d.partition_id = ANY (v_pids);
    DELETE FROM queen.message_traces m WHERE m.partition_id = ANY (v_pids);
    DELETE FROM queen.partition_offset_floors f WHERE f.queue_id = v_qid;
    -- The streaming queries reading the queue, and with them their state.
    DELETE FROM queen_streams.queries sq
     WHERE sq.tenant_id = p_tenant AND sq.source_queue = p_name;
    RETURN true;
END;
$$;

-- queen.delete_consumer_group_v1: remove consumer group p_group's cursors and
-- leases on queue p_queue (NULL: every queue of the tenant), and its
-- subscription records when p_delete_metadata. Kept records are reset instead:
-- the bulk-seed marker (so the group's next first contact seeds every
-- partition again, from the stored subscription) and the empty-scan
-- watermark. A group that never existed deletes nothing and succeeds.
--
-- Pops never wait on the rows deleted here: a claim skips a locked cursor row
-- and the re-probe reports it busy, so a pop of the group racing the delete
-- recreates nothing until the delete committed.
CREATE OR REPLACE FUNCTION queen.delete_consumer_group_v1(
    p_tenant          text,
    p_group           text,
    p_queue           text,
    p_delete_metadata boolean
) RETURNS TABLE (o_deleted_partitions bigint, o_metadata_rows bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    -- On Citus (queen.citus = 'on') the cursors' delete spans shards and the
    -- subscription rows are a reference table: Citus allows both in one
    -- transaction only when the multi-shard statement runs shard by shard.
    IF current_setting('queen.citus', true) = 'on' THEN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    DELETE FROM queen.log_consumers c
     USING queen.log_partitions p, queen.queues q
     WHERE c.consumer_group = p_group
       AND p.id = c.partition_id
       AND q.id = p.queue_id
       AND q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue);
    GET DIAGNOSTICS o_deleted_partitions = ROW_COUNT;

    IF p_delete_metadata THEN
        DELETE FROM queen.consumer_groups_metadata m
         USING queen.queues q
         WHERE m.consumer_group = p_group
           AND q.id = m.queue_id
           AND q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue);
    ELSE
        UPDATE queen.consumer_groups_metadata m
           SET seeded_at = NULL, scan_watermark = '-infinity', watermark_checked_at = NULL,
               updated_at = now()
          FROM queen.queues q
         WHERE m.consumer_group = p_group
           AND q.id = m.queue_id
           AND q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue);
    END IF;
    GET DIAGNOSTICS o_metadata_rows = ROW_COUNT;
    RETURN NEXT;
END;
$$;

-- queen.seek_consumer_group_v1: move consumer group p_group's cursors on queue
-- p_queue, every partition (p_partition NULL) or the one named, to last_offset
-- (p_to_end) or to just before the first segment at or after p_ts
-- (log_seek_offset_v1: the forward walk from log_start that subscription
-- seeding uses; nothing that recent means last_offset). A partition without a
-- cursor gets one at that position. Leases are released and the attempt and
-- retry counters reset. The group's empty-scan watermark on the queue is reset
-- to -infinity: a seek backwards re-exposes partitions the SQL candidate scan
-- would otherwise skip as not recently written.
--
-- Answers one row per partition moved (name, id, new committed offset); an
-- unknown queue answers one row with o_queue_found false, an unknown
-- partition no row.
--
-- Each partition's cursor-creation advisory lock (the one log_pop_v1
-- try-locks before it creates a cursor) is taken before its upsert, so a pop
-- racing the seek reports the partition busy instead of inserting a row that
-- would wait on ours. Rows are visited in partition id order.
CREATE OR REPLACE FUNCTION queen.seek_consumer_group_v1(
    p_tenant    text,
    p_group     text,
    p_queue     text,
    p_partition text,
    p_to_end    boolean,
    p_ts        timestamptz
) RETURNS TABLE (
    o_queue_found  boolean,
    o_partition    text,
    o_partition_id uuid,
    o_committed    bigint
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_qid  uuid;
    v_part record;
BEGIN
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        o_queue_found := false;
        RETURN NEXT;
        RETURN;
    END IF;
    o_queue_found := true;

    FOR v_part IN
        SELECT p.id, p.name, p.last_offset
          FROM queen.log_partitions p
         WHERE p.queue_id = v_qid AND (p_partition IS NULL OR p.name = p_partition)
         ORDER BY p.id
    LOOP
        o_committed := CASE WHEN p_to_end THEN v_part.last_offset
                            ELSE queen.log_seek_offset_v1(v_part.id, p_ts) END;
        PERFORM pg_advisory_xact_lock(queen.log_cursor_lock_key(v_part.id, p_group));
        INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
        VALUES (v_part.id, p_group, o_committed)
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
           SET committed = EXCLUDED.committed,
               worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
               batch_end = NULL, attempt_count = 0, attempt_offset = NULL,
               batch_retry_count = 0;
        o_partition := v_part.name;
        o_partition_id := v_part.id;
        RETURN NEXT;
    END LOOP;

    UPDATE queen.consumer_groups_metadata m
       SET scan_watermark = '-infinity', watermark_checked_at = NULL, updated_at = now()
     WHERE m.consumer_group = p_group AND m.queue_id = v_qid;
END;
$$;

-- queen.set_subscription_timestamp_v1: set the stored subscription timestamp
-- of every (p_group, queue) record of the tenant and reset their empty-scan
-- watermarks. It moves no cursor: it decides where the cursors the group
-- creates from now on start (life-of-a-pop step 3), so it changes the start
-- only of partitions the group has not touched yet. Returns the rows updated.
CREATE OR REPLACE FUNCTION queen.set_subscription_timestamp_v1(
    p_tenant text,
    p_group  text,
    p_ts     timestamptz
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_rows bigint;
BEGIN
    UPDATE queen.consumer_groups_metadata m
       SET subscription_timestamp = p_ts,
           scan_watermark = '-infinity', watermark_checked_at = NULL,
           updated_at = now()
      FROM queen.queues q
     WHERE m.consumer_group = p_group AND q.id = m.queue_id AND q.tenant_id = p_tenant;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

-- queen.consumer_group_cursors_v1: one row per cursor of group p_group (NULL:
-- every group) on the tenant's queues, with its lag (see the file header).
-- p_min_time_lag (seconds, NULL: no filter) keeps only cursors whose oldest
-- unconsumed message is at least that old. A lease is active while it has a
-- holder and has not expired.
CREATE OR REPLACE FUNCTION queen.consumer_group_cursors_v1(
    p_tenant       text,
    p_group        text,
    p_min_time_lag bigint
) RETURNS TABLE (
    o_group                text,
    o_queue                text,
    o_partition            text,
    o_partition_id         uuid,
    o_committed            bigint,
    o_last_offset          bigint,
    o_offset_lag           bigint,
    o_worker_id            uuid,
    o_lease_active         boolean,
    o_total_consumed       bigint,
    o_last_consumed_at     timestamptz,
    o_oldest_unconsumed_at timestamptz,
    o_time_lag_seconds     bigint
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT r.*
      FROM (SELECT c.consumer_group, q.name, p.name, p.id, c.committed, p.last_offset,
                   greatest(p.last_offset - c.committed, 0),
                   c.worker_id,
                   -- The nil worker is a retryDelay hold (ack.sql), no lease.
                   c.worker_id IS NOT NULL AND c.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                       AND c.lease_expires_at > v_now,
                   c.total_consumed, c.last_consumed_at,
                   CASE WHEN b.end_offset >= c.committed + 1 THEN b.created_at ELSE n.created_at END,
                   -- 0 when nothing waits (greatest ignores the NULL).
                   greatest(floor(extract(epoch FROM v_now - CASE WHEN b.end_offset >= c.committed + 1 THEN b.created_at ELSE n.created_at END)), 0)::bigint
              FROM queen.log_consumers c
              JOIN queen.log_partitions p ON p.id = c.partition_id
              JOIN queen.queues q ON q.id = p.queue_id
              -- When the oldest unconsumed message was written: the segment
              -- holding committed + 1 (one backward step), or, where
              -- retention left a gap, the next live segment. Two lateral
              -- subqueries, each with a FROM (Citus plans no correlated
              -- subquery without one); the second runs only when the first
              -- does not hold committed + 1.
              LEFT JOIN LATERAL (
                  SELECT s.created_at, s.end_offset
                    FROM queen.log_segments s
                   WHERE s.partition_id = p.id AND p.last_offset > c.committed
                     AND s.base_offset <= c.committed + 1
                   ORDER BY s.base_offset DESC
                   LIMIT 1
              ) AS b ON true
              LEFT JOIN LATERAL (
                  SELECT s.created_at
                    FROM queen.log_segments s
                   WHERE s.partition_id = p.id AND p.last_offset > c.committed
                     AND NOT coalesce(b.end_offset >= c.committed + 1, false)
                     AND s.base_offset > c.committed + 1
                   ORDER BY s.base_offset
                   LIMIT 1
              ) AS n ON true
             WHERE q.tenant_id = p_tenant
               AND (p_group IS NULL OR c.consumer_group = p_group)
           ) AS r (grp, queue, part, pid, committed, last_offset, offset_lag, worker_id,
                   lease_active, total_consumed, last_consumed_at, oldest_at, time_lag)
     WHERE p_min_time_lag IS NULL OR (r.oldest_at IS NOT NULL AND r.time_lag >= p_min_time_lag)
     ORDER BY r.grp, r.queue, r.part;
END;
$$;

-- queen.consumer_group_subscriptions_v1: the subscription records of group
-- p_group (NULL: every group) on the tenant's queues.
CREATE OR REPLACE FUNCTION queen.consumer_group_subscriptions_v1(p_tenant text, p_group text)
RETURNS TABLE (
    o_group      text,
    o_queue      text,
    o_mode       text,
    o_timestamp  timestamptz,
    o_created_at timestamptz
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT m.consumer_group, q.name, m.subscription_mode, m.subscription_timestamp, m.created_at
      FROM queen.consumer_groups_metadata m
      JOIN queen.queues q ON q.id = m.queue_id
     WHERE q.tenant_id = p_tenant
       AND (p_group IS NULL OR m.consumer_group = p_group)
     ORDER BY m.consumer_group, q.name;
END;
$$;
