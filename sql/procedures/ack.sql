-- procedures/ack.sql: acknowledgements (decisions.md §4).
--
-- A consumer group's progress is one cursor per partition, so an ack moves a
-- cursor: acking offset N completes every earlier offset of the partition for
-- the group. The cursor only ever moves forward.
--
--   log_ack_batch_v1  the common case: the whole leased batch completed, one
--                     positional advance to batch_end, guarded by the lease.
--   log_ack_v1        everything else: transaction-id hashes resolved to
--                     offsets through the hash sidecar of the leased span,
--                     then each status applied in offset order.
--   log_dlq_head_v1   files one frame in queen.log_dlq (or drops it when
--                     dead-lettering is off) and moves the cursor past exactly
--                     that offset, in one transaction; log_dlq_head_v2 does
--                     it only while no other worker holds a live lease.
--   log_lease_extend_v1  extends a lease on every partition it holds.
--   *_v2 (at the end)  log_ack_v1 and log_lease_extend_v1 guarded by the
--                     caller's tenant (partition_in_tenant_v1); the broker
--                     calls log_ack_batch_v1 only for a batch it served to a
--                     pop of the acking tenant.
--
-- An ack whose lease is no longer the live one (another worker re-claimed the
-- batch after expiry) is refused: the batch belongs to the new holder. An ack
-- arriving after expiry but before anyone re-claimed is accepted: the work was
-- done, and refusing it would only cause a redelivery.

CREATE OR REPLACE FUNCTION queen.log_ack_batch_v1(
    p_pid       uuid,
    p_group     text,
    p_lease     uuid,
    p_batch_end bigint
) RETURNS TABLE (o_acked boolean, o_pending boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now       timestamptz := clock_timestamp();
    v_committed bigint;
BEGIN
    UPDATE queen.log_consumers c
       SET committed = p_batch_end,
           total_consumed = c.total_consumed + (p_batch_end - c.committed),
           last_consumed_at = v_now,
           worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
           batch_end = NULL, batch_retry_count = 0, attempt_count = 0
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       AND c.worker_id = p_lease AND c.batch_end = p_batch_end
    RETURNING c.committed INTO v_committed;
    o_acked := FOUND;
    o_pending := o_acked AND EXISTS (
        SELECT 1 FROM queen.log_partitions p WHERE p.id = p_pid AND p.last_offset > v_committed);
    RETURN NEXT;
END;
$$;

-- Resolve ack hashes (16 bytes each, concatenated) to offsets through the
-- sidecar of partition p_pid: the span (p_committed, p_upper] plus the last 16
-- rows before it, so a repeated ack of an already-covered message answers ok
-- instead of not_found. A transaction id stored twice (a replayed dead letter,
-- or a push after the dedup window) resolves to its first occurrence after the
-- cursor, the one being delivered; only when none is there, to the newest
-- covered one. One row per hash, off NULL when the sidecar does not hold it.
CREATE OR REPLACE FUNCTION queen.log_ack_resolve_v1(
    p_pid       uuid,
    p_committed bigint,
    p_upper     bigint,
    p_hashes    bytea
) RETURNS TABLE (idx integer, off bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    WITH incoming AS MATERIALIZED (
        SELECT n.idx, n.h FROM queen.log_unnest_hashes(p_hashes) n
    ), span AS (
        SELECT t.base_offset, t.hashes
          FROM queen.log_txns t
         WHERE t.partition_id = p_pid AND t.end_offset > p_committed
           AND t.base_offset <= p_upper
        UNION ALL
        (SELECT t.base_offset, t.hashes
           FROM queen.log_txns t
          WHERE t.partition_id = p_pid AND t.end_offset <= p_committed
          ORDER BY t.base_offset DESC
          LIMIT 16)
    ), matched AS (
        SELECT i.idx,
               COALESCE(min(s.base_offset + u.idx)
                            FILTER (WHERE s.base_offset + u.idx > p_committed),
                        max(s.base_offset + u.idx)) AS off
          FROM span s
         CROSS JOIN LATERAL queen.log_unnest_hashes(s.hashes) u
          JOIN incoming i ON i.h = u.h
         GROUP BY i.idx
    )
    SELECT i.idx, m.off
      FROM incoming i LEFT JOIN matched m ON m.idx = i.idx;
END;
$$;

-- Per-item acks by transaction-id hash. Items are applied in offset order.
-- Each item answers one row:
--   ok             applied (or already covered by the cursor: acks are idempotent)
--   not_found      the hash is not in the partition's recent sidecar: not acked,
--                  the message will be redelivered (never silently lost)
--   invalid_lease  a lease id was given and it is not the live lease
--   unknown_status nothing done
--   dlq            the frame at o_dlq_offset must be filed: the broker decodes it
--                  from o_dlq_blob and calls log_dlq_head_v1; processing stopped
--   deferred       not processed (after a 'dlq' row); the broker resubmits it
-- and a final 'state' row carries o_pending (data left behind the cursor) and
-- o_lease_released for the hot-list's ack-promote.
-- p_failed_to_dlq: transactions file 'failed' straight to the DLQ.
CREATE OR REPLACE FUNCTION queen.log_ack_v1(
    p_pid           uuid,
    p_group         text,
    p_lease         uuid,
    p_hashes        bytea,
    p_statuses      text[],
    p_errors        text[],
    p_failed_to_dlq boolean
) RETURNS TABLE (
    o_idx            integer,
    o_result         text,
    o_offset         bigint,
    o_lease_released boolean,
    o_dlq_offset     bigint,
    o_dlq_base       bigint,
    o_dlq_blob       bytea,
    o_dlq_created_at timestamptz,
    o_dlq_error      text,
    o_retry_count    integer,
    o_pending        boolean,
    o_queue          text,
    o_partition      text
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now         timestamptz := clock_timestamp();
    v_queue       text;
    v_partition   text;
    v_retry_limit integer;
    v_retry_delay integer;
    v_hold        boolean := false;
    v_last_off    bigint;
    v_c           record;
    v_start       bigint;
    v_upper       bigint;
    v_item        record;
    v_status      text;
    v_released    boolean := false;
    v_stopped     boolean := false;
    v_changed     boolean := false;
    v_n           integer := coalesce(array_length(p_statuses, 1), 0);
BEGIN
    SELECT q.name, p.name, q.retry_limit, p.last_offset,
           CASE WHEN q.retry_delay_applied THEN q.retry_delay ELSE 0 END
      INTO v_queue, v_partition, v_retry_limit, v_last_off, v_retry_delay
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid;
    o_queue := v_queue; o_partition := v_partition;
    IF NOT FOUND THEN
        FOR v_i IN 0 .. v_n - 1 LOOP
            o_idx := v_i; o_result := 'not_found'; RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    SELECT c.committed, c.worker_id, c.batch_end, c.batch_retry_count
      INTO v_c
      FROM queen.log_consumers c
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       FOR UPDATE;
    IF NOT FOUND THEN
        FOR v_i IN 0 .. v_n - 1 LOOP
            o_idx := v_i; o_result := 'not_found'; RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    v_start := v_c.committed;

    -- Resolve every hash through the sidecar of the span after the cursor (up
    -- to the batch end, or everything written when there is no lease).
    v_upper := COALESCE(v_c.batch_end, v_last_off);
    FOR v_item IN
        SELECT r.idx, r.off
          FROM queen.log_ack_resolve_v1(p_pid, v_c.committed, v_upper, p_hashes) r
         ORDER BY r.off NULLS FIRST, r.idx
    LOOP
        o_idx := v_item.idx;
        o_offset := v_item.off;
        o_dlq_offset := NULL; o_dlq_base := NULL; o_dlq_blob := NULL;
        o_dlq_created_at := NULL; o_dlq_error := NULL; o_retry_count := NULL;
        v_status := p_statuses[v_item.idx + 1];

        IF v_stopped THEN
            o_result := 'deferred'; RETURN NEXT; CONTINUE;
        END IF;
        IF v_item.off IS NULL THEN
            o_result := 'not_found'; RETURN NEXT; CONTINUE;
        END IF;
        IF v_status NOT IN ('completed', 'success', 'failed', 'dlq', 'retry') THEN
            o_result := 'unknown_status'; RETURN NEXT; CONTINUE;
        END IF;
        -- Already covered by the cursor: done, whoever holds the lease now
        -- (acks are idempotent, and repeating one must not fail).
        IF v_item.off <= v_c.committed THEN
            o_result := 'ok'; RETURN NEXT; CONTINUE;
        END IF;
        IF p_lease IS NOT NULL AND v_c.worker_id IS DISTINCT FROM p_lease THEN
            o_result := 'invalid_lease'; RETURN NEXT; CONTINUE;
        END IF;

        IF v_status = 'failed' AND p_failed_to_dlq THEN
            v_status := 'dlq';
        END IF;

        IF v_status IN ('completed', 'success') THEN
            v_c.committed := v_item.off;
            v_changed := true;
            IF v_c.batch_end IS NULL OR v_item.off >= v_c.batch_end THEN
                v_c.worker_id := NULL; v_c.batch_end := NULL; v_c.batch_retry_count := 0;
                v_released := true;
            END IF;
            o_result := 'ok';
        ELSIF v_status = 'retry' THEN
            -- Release without spending the retry budget; the cursor stays.
            v_c.worker_id := NULL; v_c.batch_end := NULL;
            v_changed := true; v_released := true;
            o_result := 'ok';
        ELSIF v_status = 'failed' AND v_c.batch_retry_count < v_retry_limit THEN
            -- Spend one retry: the whole batch comes back from the cursor,
            -- after the queue's retryDelay when one is configured: the
            -- cursor is then held by the nil lease until then (no pop claims
            -- it; a pop that meets it answers 'leased' with that revisit
            -- time, so parked consumers are woken when it ends).
            v_hold := v_retry_delay > 0;
            v_c.worker_id := CASE WHEN v_hold THEN '00000000-0000-0000-0000-000000000000'::uuid END;
            v_c.batch_end := NULL;
            v_c.batch_retry_count := v_c.batch_retry_count + 1;
            v_changed := true; v_released := true;
            o_result := 'ok';
        ELSE
            -- Budget spent ('failed'), or an explicit 'dlq': file a frame. A
            -- failure files the head (the first unacked message); 'dlq' files
            -- the message named. The broker decodes it and calls
            -- log_dlq_head_v1; the rest of this call is deferred.
            o_dlq_offset := CASE WHEN v_status = 'dlq' THEN v_item.off ELSE v_c.committed + 1 END;
            SELECT s.base_offset, s.blob, s.created_at INTO o_dlq_base, o_dlq_blob, o_dlq_created_at
              FROM queen.log_segments s
             WHERE s.partition_id = p_pid AND s.base_offset <= o_dlq_offset
             ORDER BY s.base_offset DESC
             LIMIT 1;
            o_dlq_error := COALESCE(NULLIF(p_errors[v_item.idx + 1], ''),
                                    CASE WHEN v_status = 'dlq' THEN 'Moved to DLQ' ELSE 'Retries exhausted' END);
            o_retry_count := v_c.batch_retry_count;
            o_result := 'dlq';
            v_stopped := true;
        END IF;
        RETURN NEXT;
    END LOOP;

    IF v_changed THEN
        UPDATE queen.log_consumers c
           SET committed = v_c.committed,
               total_consumed = c.total_consumed + (v_c.committed - v_start),
               last_consumed_at = CASE WHEN v_c.committed > v_start THEN v_now ELSE c.last_consumed_at END,
               worker_id = v_c.worker_id,
               batch_end = v_c.batch_end,
               lease_expires_at = CASE WHEN v_c.worker_id IS NULL THEN NULL
                                       WHEN v_hold THEN v_now + make_interval(secs => v_retry_delay / 1000.0)
                                       ELSE c.lease_expires_at END,
               lease_acquired_at = CASE WHEN v_c.worker_id IS NULL THEN NULL
                                        WHEN v_hold THEN v_now
                                        ELSE c.lease_acquired_at END,
               batch_retry_count = v_c.batch_retry_count,
               attempt_count = CASE WHEN v_c.worker_id IS NULL AND v_c.committed > v_start THEN 0
                                    ELSE c.attempt_count END
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
    END IF;

    o_idx := NULL; o_offset := NULL; o_result := 'state';
    o_dlq_offset := NULL; o_dlq_base := NULL; o_dlq_blob := NULL;
    o_dlq_created_at := NULL; o_dlq_error := NULL; o_retry_count := NULL;
    o_lease_released := v_released;
    o_pending := v_last_off > v_c.committed;
    RETURN NEXT;
END;
$$;

-- File one frame as a dead letter (or drop it when the queue's dlq_enabled is
-- false) and move the cursor past exactly that offset: committed becomes
-- GREATEST(committed, p_off) (a guard, never arithmetic: a stale caller cannot
-- walk the cursor back), the lease is released and the retry and attempt
-- counters reset, so the rest of the batch is redelivered at once. Idempotent:
-- filing the same (partition, group, offset) twice keeps the first row.
CREATE OR REPLACE FUNCTION queen.log_dlq_head_v1(
    p_pid         uuid,
    p_group       text,
    p_off         bigint,
    p_message_id  uuid,
    p_txn         text,
    p_trace       uuid,
    p_sub         text,
    p_payload     bytea,
    p_encrypted   boolean,
    p_created_at  timestamptz,
    p_error       text,
    p_retry_count integer
) RETURNS TABLE (o_filed boolean, o_pending boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_enabled   boolean;
    v_last_off  bigint;
    v_committed bigint;
    -- A variable, not clock_timestamp() in the UPDATE: Citus refuses a
    -- VOLATILE function in an UPDATE of a distributed table.
    v_now       timestamptz := clock_timestamp();
BEGIN
    SELECT q.dlq_enabled, p.last_offset INTO v_enabled, v_last_off
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid;
    o_filed := false;
    -- The cursor first: it locks the row, and if the partition was deleted
    -- meanwhile (queue delete) there is no row and nothing is filed, so no
    -- dead letter is orphaned.
    UPDATE queen.log_consumers c
       SET committed = GREATEST(c.committed, p_off),
           total_consumed = c.total_consumed + GREATEST(p_off - c.committed, 0),
           last_consumed_at = v_now,
           worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
           batch_end = NULL, batch_retry_count = 0, attempt_count = 0, attempt_offset = NULL
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
    RETURNING c.committed INTO v_committed;
    IF FOUND AND COALESCE(v_enabled, true) THEN
        INSERT INTO queen.log_dlq (partition_id, consumer_group, message_offset, message_id,
                                   transaction_id, trace_id, producer_sub, payload, encrypted,
                                   message_created_at, error, retry_count)
        VALUES (p_pid, p_group, p_off, p_message_id, p_txn, p_trace, p_sub, p_payload,
                p_encrypted, p_created_at, p_error, p_retry_count)
        ON CONFLICT (partition_id, consumer_group, message_offset) DO NOTHING;
        o_filed := true;
    END IF;
    o_pending := v_last_off > COALESCE(v_committed, p_off);
    RETURN NEXT;
END;
$$;

-- log_dlq_head_v1 with the lease guard: the filing runs in its
-- own statement after log_ack_v1 decided it, so in between the lease may have
-- ended and another worker re-claimed the batch. v2 takes the lease the
-- decision was made under and refuses (o_applied false, nothing filed, the
-- cursor untouched) when another worker holds a live lease on the row, as
-- log_ack_v1 would. p_lease NULL (an ack without a lease id) is not guarded,
-- as in log_ack_v1. v1 stays for brokers of the previous version during a
-- rolling upgrade.
CREATE OR REPLACE FUNCTION queen.log_dlq_head_v2(
    p_pid         uuid,
    p_group       text,
    p_lease       uuid,
    p_off         bigint,
    p_message_id  uuid,
    p_txn         text,
    p_trace       uuid,
    p_sub         text,
    p_payload     bytea,
    p_encrypted   boolean,
    p_created_at  timestamptz,
    p_error       text,
    p_retry_count integer
) RETURNS TABLE (o_applied boolean, o_filed boolean, o_pending boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_worker    uuid;
    v_expires   timestamptz;
BEGIN
    SELECT c.worker_id, c.lease_expires_at INTO v_worker, v_expires
      FROM queen.log_consumers c
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       FOR UPDATE;
    IF p_lease IS NOT NULL AND v_worker IS NOT NULL AND v_worker <> p_lease
       AND v_expires IS NOT NULL AND v_expires >= clock_timestamp() THEN
        o_applied := false; o_filed := false; o_pending := false;
        RETURN NEXT;
        RETURN;
    END IF;
    o_applied := true;
    SELECT h.o_filed, h.o_pending INTO o_filed, o_pending
      FROM queen.log_dlq_head_v1(p_pid, p_group, p_off, p_message_id, p_txn, p_trace, p_sub,
                                 p_payload, p_encrypted, p_created_at, p_error, p_retry_count) h;
    RETURN NEXT;
END;
$$;

-- Extend a lease on every partition it holds: lease_expires_at becomes
-- GREATEST(current, now + p_seconds). p_pids narrows the search to partitions
-- the broker knows the lease holds (its ack registry); NULL scans the group
-- rows of every partition. Answers the new expiry, or NULL when no live
-- lease has that id (o_found says whether an expired one was seen).
CREATE OR REPLACE FUNCTION queen.log_lease_extend_v1(
    p_lease   uuid,
    p_seconds integer,
    p_pids    uuid[]
) RETURNS TABLE (o_expires_at timestamptz, o_found boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Two statements so that a partition list is planned as an index lookup;
    -- each answers the new expiry from the rows it extended.
    IF p_pids IS NOT NULL THEN
        WITH extended AS (
            UPDATE queen.log_consumers c
               SET lease_expires_at = GREATEST(c.lease_expires_at, v_now + make_interval(secs => p_seconds))
             WHERE c.partition_id = ANY (p_pids) AND c.worker_id = p_lease AND c.lease_expires_at > v_now
            RETURNING c.lease_expires_at
        )
        SELECT max(e.lease_expires_at) INTO o_expires_at FROM extended e;
    ELSE
        WITH extended AS (
            UPDATE queen.log_consumers c
               SET lease_expires_at = GREATEST(c.lease_expires_at, v_now + make_interval(secs => p_seconds))
             WHERE c.worker_id = p_lease AND c.lease_expires_at > v_now
            RETURNING c.lease_expires_at
        )
        SELECT max(e.lease_expires_at) INTO o_expires_at FROM extended e;
    END IF;
    -- Only a miss asks whether an expired lease had that id; two statements
    -- again, so each is planned on its index (idx_log_consumers_worker for
    -- the registry's misses).
    IF o_expires_at IS NOT NULL THEN
        o_found := true;
    ELSIF p_pids IS NOT NULL THEN
        o_found := EXISTS (SELECT 1 FROM queen.log_consumers c
                            WHERE c.partition_id = ANY (p_pids) AND c.worker_id = p_lease);
    ELSE
        o_found := EXISTS (SELECT 1 FROM queen.log_consumers c WHERE c.worker_id = p_lease);
    END IF;
    RETURN NEXT;
END;
$$;

-- Find a message's offset by its transaction-id hash among the partition's
-- most recent sidecar rows (newest first, at most p_rows rows): used to check
-- that a trace names a real message. NULL when not found.
CREATE OR REPLACE FUNCTION queen.log_find_txn_v1(p_pid uuid, p_hash bytea, p_rows integer)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (
        SELECT min(r.base_offset + u.idx)
          FROM (SELECT t.base_offset, t.hashes
                  FROM queen.log_txns t
                 WHERE t.partition_id = p_pid
                 ORDER BY t.base_offset DESC
                 LIMIT p_rows) r
         CROSS JOIN LATERAL queen.log_unnest_hashes(r.hashes) u
         WHERE u.h = p_hash);
END;
$$;

-- ---- tenant-guarded entry points (the security issue) ----
--
-- A partition id and a lease id are enough to ack, extend or trace a message,
-- so every call that names a partition by id checks that it belongs to the
-- caller's tenant first: a token of tenant A holding tenant B's ids changes
-- nothing of B's. The _v1 functions stay, unguarded, for brokers of the
-- previous version during a rolling upgrade.

-- Whether partition p_pid belongs to a queue of tenant p_tenant.
CREATE OR REPLACE FUNCTION queen.partition_in_tenant_v1(p_pid uuid, p_tenant text)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1
                     FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = p_pid AND q.tenant_id = p_tenant);
END;
$$;

-- log_ack_v1 of a partition of p_tenant; another tenant's partition answers
-- not_found for every item, exactly as a partition that does not exist.
CREATE OR REPLACE FUNCTION queen.log_ack_v2(
    p_tenant        text,
    p_pid           uuid,
    p_group         text,
    p_lease         uuid,
    p_hashes        bytea,
    p_statuses      text[],
    p_errors        text[],
    p_failed_to_dlq boolean
) RETURNS TABLE (
    o_idx            integer,
    o_result         text,
    o_offset         bigint,
    o_lease_released boolean,
    o_dlq_offset     bigint,
    o_dlq_base       bigint,
    o_dlq_blob       bytea,
    o_dlq_created_at timestamptz,
    o_dlq_error      text,
    o_retry_count    integer,
    o_pending        boolean,
    o_queue          text,
    o_partition      text
)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    IF NOT queen.partition_in_tenant_v1(p_pid, p_tenant) THEN
        FOR v_i IN 0 .. coalesce(array_length(p_statuses, 1), 0) - 1 LOOP
            o_idx := v_i; o_result := 'not_found'; RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM queen.log_ack_v1(
        p_pid, p_group, p_lease, p_hashes, p_statuses, p_errors, p_failed_to_dlq);
END;
$$;

-- log_lease_extend_v1 restricted to the partitions of p_tenant the lease
-- holds (of p_pids, when given): another tenant's lease is not found.
CREATE OR REPLACE FUNCTION queen.log_lease_extend_v2(
    p_tenant  text,
    p_lease   uuid,
    p_seconds integer,
    p_pids    uuid[]
) RETURNS TABLE (o_expires_at timestamptz, o_found boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_pids uuid[];
BEGIN
    IF p_pids IS NOT NULL THEN
        v_pids := ARRAY(SELECT u.pid FROM unnest(p_pids) u(pid)
                         WHERE queen.partition_in_tenant_v1(u.pid, p_tenant));
    ELSE
        v_pids := ARRAY(SELECT c.partition_id
                          FROM queen.log_consumers c
                          JOIN queen.log_partitions p ON p.id = c.partition_id
                          JOIN queen.queues q ON q.id = p.queue_id
                         WHERE c.worker_id = p_lease AND q.tenant_id = p_tenant);
    END IF;
    RETURN QUERY SELECT * FROM queen.log_lease_extend_v1(p_lease, p_seconds, v_pids);
END;
$$;

-- ---- log_ack_v3: one partition's items in one statement ----
--
-- The per-item ack the broker calls (v1/v2 stay for brokers of the previous
-- version during a rolling upgrade). Items are applied in offset order, all
-- in this one statement, so an ack batch's dispositions never race each
-- other:
--   completed   moves the cursor to the item (acking offset N completes every
--               earlier offset: the cursor is a prefix);
--   dlq         files the item's frame in queen.log_dlq (each dlq item its own
--               row; dropped when dlqEnabled is false) and moves the cursor
--               to it; so does 'failed' once the retry budget is spent (and
--               always inside a transaction, p_failed_to_dlq);
--   failed      with budget left: charges one retry, releases the lease (or
--               holds it for retryDelay) and stops: the cursor stays before
--               it, and it and everything after it are delivered again, after
--               the messages already completed, as ordered partitions require;
--               the later items answer 'not_applied';
--   retry       releases without charging budget, and stops the same way.
-- The retry budget counts failures of the message at the cursor's head: it
-- starts again from 0 whenever the cursor moves. attempt_offset (where the
-- leased batch began) is kept while the lease is still held.
--
-- Two things need the broker, which alone can decode frames, and the call
-- then changes nothing and answers what it needs instead, for a second call
-- with it (nothing is decided across the two calls: the second decides again
-- from the row as it is then):
--   need_frame    o_offset: the frame to file as a dead letter; pass it in the
--                 p_frame_* arrays (a segment retention removed is filed with
--                 a placeholder without asking);
--   need_resolve  o_idx: the item's hash is not in the sidecar, and the
--                 sidecar no longer covers the span after the cursor (it was
--                 purged after GREATEST(dedup window, completed retention,
--                 900 s)); pass the item's offset in p_offsets, found by
--                 decoding the span's frames. p_offsets NULL means first call:
--                 given (even all NULL), no resolution is asked for again and
--                 an unresolved item is not_found.
-- Both come with 'segment' rows (o_seg_base, o_seg_blob, o_seg_created_at):
-- each segment the broker must decode, once.
-- Every other call answers one row per item (ok, not_found, invalid_lease,
-- unknown_status, dlq, not_applied) and a final 'state' row (o_lease_released,
-- o_pending, o_queue, o_partition). Another tenant's partition answers
-- not_found for every item, exactly as a partition that does not exist.
CREATE OR REPLACE FUNCTION queen.log_ack_v3(
    p_tenant          text,
    p_pid             uuid,
    p_group           text,
    p_lease           uuid,
    p_hashes          bytea,
    p_statuses        text[],
    p_errors          text[],
    p_failed_to_dlq   boolean,
    p_offsets         bigint[],
    p_frame_offsets   bigint[],
    p_frame_ids       uuid[],
    p_frame_txns      text[],
    p_frame_traces    uuid[],
    p_frame_subs      text[],
    p_frame_payloads  bytea[],
    p_frame_encrypted boolean[],
    p_frame_created   timestamptz[]
) RETURNS TABLE (
    o_idx            integer,
    o_result         text,
    o_offset         bigint,
    o_seg_base       bigint,
    o_seg_blob       bytea,
    o_seg_created_at timestamptz,
    o_lease_released boolean,
    o_pending        boolean,
    o_queue          text,
    o_partition      text
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now         timestamptz := clock_timestamp();
    v_hold_until  timestamptz;
    v_n           integer := coalesce(array_length(p_statuses, 1), 0);
    v_queue       text;
    v_partition   text;
    v_retry_limit integer;
    v_retry_delay integer;
    v_dlq_enabled boolean;
    v_last_off    bigint;
    v_txns_start  bigint;
    v_c           record;
    v_start       bigint;
    v_upper       bigint;
    v_committed   bigint;
    v_worker      uuid;
    v_batch_end   bigint;
    v_retries     integer;
    v_hold        boolean := false;
    v_released    boolean := false;
    v_stopped     boolean := false;
    v_changed     boolean := false;
    v_item        record;
    v_status      text;
    v_result      text;
    v_fi          integer;
    v_off         bigint;
    v_seg         record;
    v_res_idx     integer[] := '{}';
    v_res         text[] := '{}';
    v_res_off     bigint[] := '{}';
    v_need_frames bigint[] := '{}';
    v_need_idx    integer[] := '{}';
    v_dlq_offs    bigint[] := '{}';
    v_dlq_fi      integer[] := '{}';
    v_dlq_err     text[] := '{}';
    v_dlq_retries integer[] := '{}';
BEGIN
    SELECT q.name, p.name, q.retry_limit, q.dlq_enabled, p.last_offset, p.txns_start,
           CASE WHEN q.retry_delay_applied THEN q.retry_delay ELSE 0 END
      INTO v_queue, v_partition, v_retry_limit, v_dlq_enabled, v_last_off, v_txns_start,
           v_retry_delay
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid AND q.tenant_id = p_tenant;
    IF FOUND THEN
        SELECT c.committed, c.worker_id, c.batch_end, c.batch_retry_count
          INTO v_c
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group
           FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        FOR v_i IN 0 .. v_n - 1 LOOP
            o_idx := v_i; o_result := 'not_found'; RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    o_queue := v_queue; o_partition := v_partition;
    v_start := v_c.committed;
    v_committed := v_c.committed;
    v_worker := v_c.worker_id;
    v_batch_end := v_c.batch_end;
    v_retries := v_c.batch_retry_count;
    v_upper := COALESCE(v_c.batch_end, v_last_off);

    -- Resolve every hash: an offset the broker found (p_offsets), else the
    -- sidecar (log_ack_resolve_v1).
    FOR v_item IN
        SELECT r.idx, COALESCE(g.off, r.off) AS off
          FROM queen.log_ack_resolve_v1(p_pid, v_c.committed, v_upper, p_hashes) r
          LEFT JOIN unnest(p_offsets) WITH ORDINALITY g(off, ord) ON g.ord - 1 = r.idx
         ORDER BY 2 NULLS FIRST, r.idx
    LOOP
        v_status := p_statuses[v_item.idx + 1];
        IF v_status = 'success' THEN
            v_status := 'completed';
        END IF;
        IF v_status IS NULL OR v_status NOT IN ('completed', 'failed', 'dlq', 'retry') THEN
            v_result := 'unknown_status';
        ELSIF v_item.off IS NULL THEN
            IF p_offsets IS NULL AND v_txns_start > v_c.committed + 1 THEN
                v_need_idx := v_need_idx || v_item.idx;
                v_result := 'need';
            ELSE
                v_result := 'not_found';
            END IF;
        ELSIF v_item.off <= v_committed THEN
            -- Covered by the cursor: done, whoever holds the lease now (acks
            -- are idempotent, and repeating one must not fail).
            v_result := 'ok';
        ELSIF v_stopped THEN
            v_result := 'not_applied';
        ELSIF p_lease IS NOT NULL AND v_worker IS DISTINCT FROM p_lease THEN
            v_result := 'invalid_lease';
        ELSE
            IF v_status = 'failed' AND (p_failed_to_dlq OR v_retries >= v_retry_limit) THEN
                v_status := 'dlq';
            END IF;
            IF v_status = 'completed' THEN
                v_result := 'ok';
            ELSIF v_status = 'retry' THEN
                v_worker := NULL; v_batch_end := NULL;
                v_changed := true; v_released := true; v_stopped := true;
                v_result := 'ok';
            ELSIF v_status = 'failed' THEN
                -- Spend one retry: everything from the cursor comes back,
                -- after the queue's retryDelay when one is configured (the
                -- cursor is then held by the nil lease until then: no pop
                -- claims it, a pop that meets it answers 'leased' with that
                -- revisit time, so parked consumers are woken when it ends).
                v_hold := v_retry_delay > 0;
                v_worker := CASE WHEN v_hold THEN '00000000-0000-0000-0000-000000000000'::uuid END;
                v_batch_end := NULL;
                v_retries := v_retries + 1;
                v_changed := true; v_released := true; v_stopped := true;
                v_result := 'ok';
            ELSE
                -- A dead letter: its frame, as the broker decoded it, or a
                -- placeholder when retention removed its segment.
                v_fi := array_position(p_frame_offsets, v_item.off);
                IF v_fi IS NULL AND EXISTS (
                    SELECT 1 FROM (SELECT s.end_offset FROM queen.log_segments s
                                    WHERE s.partition_id = p_pid AND s.base_offset <= v_item.off
                                    ORDER BY s.base_offset DESC LIMIT 1) s
                     WHERE s.end_offset >= v_item.off) THEN
                    v_need_frames := v_need_frames || v_item.off;
                END IF;
                v_dlq_offs := v_dlq_offs || v_item.off;
                v_dlq_fi := v_dlq_fi || v_fi;
                v_dlq_err := v_dlq_err || COALESCE(NULLIF(p_errors[v_item.idx + 1], ''),
                    CASE WHEN p_statuses[v_item.idx + 1] = 'dlq' THEN 'Moved to DLQ'
                         ELSE 'Retries exhausted' END);
                v_dlq_retries := v_dlq_retries || v_retries;
                v_result := 'dlq';
            END IF;
            IF v_result IN ('ok', 'dlq') AND NOT v_stopped THEN
                -- completed or dead-lettered: the cursor moves to the item,
                -- and the head's retry budget starts again.
                v_committed := v_item.off;
                v_retries := 0;
                v_changed := true;
                IF v_batch_end IS NULL OR v_item.off >= v_batch_end THEN
                    v_worker := NULL; v_batch_end := NULL;
                    v_released := true;
                END IF;
            END IF;
        END IF;
        v_res_idx := v_res_idx || v_item.idx;
        v_res := v_res || v_result;
        v_res_off := v_res_off || v_item.off;
    END LOOP;

    -- Something only the broker can do first: answer what, change nothing.
    IF cardinality(v_need_frames) > 0 OR cardinality(v_need_idx) > 0 THEN
        FOREACH v_fi IN ARRAY v_need_idx LOOP
            o_idx := v_fi; o_result := 'need_resolve'; RETURN NEXT;
        END LOOP;
        o_idx := NULL;
        FOR v_seg IN
            SELECT DISTINCT ON (s.base_offset) s.base_offset, s.blob, s.created_at
              FROM queen.log_segments s
             WHERE s.partition_id = p_pid
               AND (   (cardinality(v_need_idx) > 0
                        AND s.end_offset > v_c.committed AND s.base_offset <= v_upper
                        AND s.base_offset < v_txns_start)
                    OR s.base_offset = ANY (ARRAY(
                        SELECT (SELECT s2.base_offset FROM queen.log_segments s2
                                 WHERE s2.partition_id = p_pid AND s2.base_offset <= f.off
                                 ORDER BY s2.base_offset DESC LIMIT 1)
                          FROM unnest(v_need_frames) f(off))))
             ORDER BY s.base_offset
             LIMIT 256
        LOOP
            o_result := 'segment'; o_offset := v_c.committed;
            o_seg_base := v_seg.base_offset; o_seg_blob := v_seg.blob;
            o_seg_created_at := v_seg.created_at;
            RETURN NEXT;
        END LOOP;
        o_seg_base := NULL; o_seg_blob := NULL; o_seg_created_at := NULL;
        FOREACH v_off IN ARRAY v_need_frames LOOP
            o_offset := v_off; o_result := 'need_frame'; RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    IF v_changed THEN
        -- Computed apart: Citus plans no STABLE operator inside a CASE.
        v_hold_until := v_now + make_interval(secs => v_retry_delay / 1000.0);
        UPDATE queen.log_consumers c
           SET committed = v_committed,
               total_consumed = c.total_consumed + (v_committed - v_start),
               last_consumed_at = CASE WHEN v_committed > v_start THEN v_now ELSE c.last_consumed_at END,
               worker_id = v_worker,
               batch_end = v_batch_end,
               lease_expires_at = CASE WHEN v_worker IS NULL THEN NULL
                                       WHEN v_hold THEN v_hold_until
                                       ELSE c.lease_expires_at END,
               lease_acquired_at = CASE WHEN v_worker IS NULL THEN NULL
                                        WHEN v_hold THEN v_now
                                        ELSE c.lease_acquired_at END,
               batch_retry_count = v_retries,
               attempt_count = CASE WHEN v_committed > v_start THEN 0 ELSE c.attempt_count END,
               -- Kept while a live lease stays held after a partial ack: the
               -- admin views read where that batch began (the next delivery
               -- starts past it, so attempt_count restarts just the same).
               attempt_offset = CASE WHEN v_committed > v_start
                                      AND (v_worker IS NULL
                                           OR v_worker = '00000000-0000-0000-0000-000000000000'::uuid)
                                     THEN NULL ELSE c.attempt_offset END
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
    END IF;
    IF cardinality(v_dlq_offs) > 0 AND COALESCE(v_dlq_enabled, true) THEN
        INSERT INTO queen.log_dlq (partition_id, consumer_group, message_offset, message_id,
                                   transaction_id, trace_id, producer_sub, payload, encrypted,
                                   message_created_at, error, retry_count)
        SELECT p_pid, p_group, d.off,
               COALESCE(p_frame_ids[d.fi], '00000000-0000-0000-0000-000000000000'::uuid),
               COALESCE(p_frame_txns[d.fi], ''), p_frame_traces[d.fi], p_frame_subs[d.fi],
               COALESCE(p_frame_payloads[d.fi], 'null'::bytea),
               COALESCE(p_frame_encrypted[d.fi], false),
               COALESCE(p_frame_created[d.fi], v_now), d.err, d.retries
          FROM unnest(v_dlq_offs, v_dlq_fi, v_dlq_err, v_dlq_retries) d(off, fi, err, retries)
        ON CONFLICT (partition_id, consumer_group, message_offset) DO NOTHING;
    END IF;

    FOR v_fi IN 1 .. cardinality(v_res) LOOP
        o_idx := v_res_idx[v_fi]; o_result := v_res[v_fi]; o_offset := v_res_off[v_fi];
        RETURN NEXT;
    END LOOP;
    o_idx := NULL; o_offset := NULL; o_result := 'state';
    o_lease_released := v_released;
    o_pending := v_last_off > v_committed;
    RETURN NEXT;
END;
$$;
