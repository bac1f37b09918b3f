-- procedures/dlq.sql: replaying dead letters (storage-model.md, queen.log_dlq).
--
--   log_dlq_take_v1  deletes the dead letters a replay moves back into the
--                    log and returns them, with their queue and partition
--                    names, for the broker to push in the same transaction.
--   log_message_delete_v1  deletes a message: its dead letters, and it is
--                    marked consumed for every group reading the partition
--                    (at the end of the file).
--
-- The broker calls it inside the transaction that then pushes the taken
-- frames (procedures/push.sql), so a dead letter leaves queen.log_dlq exactly
-- when its replay commits. Rows are taken FOR UPDATE SKIP LOCKED: two replays
-- racing over the same rows never take one row twice (the second skips what
-- the first holds, and a row the first deleted is gone once it commits), so
-- every row is replayed exactly once.
--
-- Every filter is optional (NULL matches everything) and they combine:
-- p_partition_id and p_transaction_id select one message's rows (one per
-- consumer group it failed in, narrowed by p_group); p_queue, p_partition,
-- p_group, p_from and p_to (on failed_at, inclusive) select a range. Oldest
-- filing first, at most p_limit rows.
CREATE OR REPLACE FUNCTION queen.log_dlq_take_v1(
    p_tenant         text,
    p_queue          text,
    p_partition_id   uuid,
    p_transaction_id text,
    p_partition      text,
    p_group          text,
    p_from           timestamptz,
    p_to             timestamptz,
    p_limit          integer
) RETURNS TABLE (
    o_queue          text,
    o_partition      text,
    o_partition_id   uuid,
    o_offset         bigint,
    o_consumer_group text,
    o_transaction_id text,
    o_trace_id       uuid,
    o_producer_sub   text,
    o_payload        bytea,
    o_encrypted      boolean
)
LANGUAGE plpgsql
VOLATILE
AS $$
-- plpgsql, not sql: a LANGUAGE sql body is analysed when it is created, which
-- locks the tables it names, and a re-apply must take no lock on a Queen
-- table (sql/README.md, rule 2).
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT d.partition_id, d.consumer_group, d.message_offset,
               q.name AS queue_name, p.name AS partition_name
          FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue)
           AND (p_partition_id IS NULL OR d.partition_id = p_partition_id)
           AND (p_transaction_id IS NULL OR d.transaction_id = p_transaction_id)
           AND (p_partition IS NULL OR p.name = p_partition)
           AND (p_group IS NULL OR d.consumer_group = p_group)
           AND (p_from IS NULL OR d.failed_at >= p_from)
           AND (p_to IS NULL OR d.failed_at <= p_to)
         ORDER BY d.failed_at, d.partition_id, d.message_offset
         LIMIT p_limit
           FOR UPDATE OF d SKIP LOCKED
    )
    DELETE FROM queen.log_dlq d
     USING picked k
     WHERE d.partition_id = k.partition_id
       AND d.consumer_group = k.consumer_group
       AND d.message_offset = k.message_offset
    RETURNING k.queue_name, k.partition_name, d.partition_id, d.message_offset,
              d.consumer_group, d.transaction_id, d.trace_id, d.producer_sub,
              d.payload, d.encrypted;
END;
$$;

-- DELETE /api/v1/messages/:partitionId/:transactionId for a message the
-- broker found in the log: offset p_off of partition p_pid (of p_tenant),
-- transaction id p_txn. There is no row per message to delete, so the
-- message is deleted by marking it consumed for every consumer group that
-- reads the partition, which the cursor model allows only where it moves no
-- cursor over anything else (storage-model.md: no holes, no reordering):
--   a group whose cursor is past it       nothing to do;
--   a group whose next message it is      its cursor moves onto it (the
--     (committed = p_off - 1), not leased  retry counters and any retryDelay
--                                          hold reset, as a dead letter's do);
--   a group that holds it in a live lease refused: 'leased';
--   a group with earlier messages to read refused: 'behind' (o_next: the
--                                          offset it reads next);
-- and every group's dead letter of the transaction id goes. One refusal
-- refuses the whole call and nothing changes ('leased' and 'behind' rows,
-- one per group in the way); so does a partition no group reads and that
-- holds no dead letter of it ('no_cursor'), since there is no cursor to
-- move. Otherwise: one 'moved' row per cursor moved, then 'done' with the
-- dead letters removed. A group whose first cursor on the partition is
-- created later starts where its subscription says and may still read the
-- message. Cursor rows are locked in group order for the decision.
CREATE OR REPLACE FUNCTION queen.log_message_delete_v1(
    p_tenant text,
    p_pid    uuid,
    p_off    bigint,
    p_txn    text
) RETURNS TABLE (o_result text, o_group text, o_next bigint, o_dead_letters bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_c       record;
    v_cursors integer := 0;
    v_move    text[] := '{}';
    v_refused boolean := false;
    v_dead    bigint;
BEGIN
    IF NOT queen.partition_in_tenant_v1(p_pid, p_tenant) THEN
        o_result := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    FOR v_c IN
        SELECT c.consumer_group, c.committed, c.worker_id, c.lease_expires_at, c.batch_end
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid
         ORDER BY c.consumer_group
           FOR UPDATE
    LOOP
        v_cursors := v_cursors + 1;
        IF v_c.committed >= p_off THEN
            CONTINUE;
        END IF;
        IF v_c.worker_id IS NOT NULL
           AND v_c.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
           AND v_c.lease_expires_at > v_now AND v_c.batch_end >= p_off THEN
            o_result := 'leased'; o_group := v_c.consumer_group; o_next := v_c.committed + 1;
            v_refused := true;
            RETURN NEXT;
        ELSIF v_c.committed = p_off - 1 THEN
            v_move := v_move || v_c.consumer_group;
        ELSE
            o_result := 'behind'; o_group := v_c.consumer_group; o_next := v_c.committed + 1;
            v_refused := true;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF v_refused THEN
        RETURN;
    END IF;
    DELETE FROM queen.log_dlq d
     WHERE d.partition_id = p_pid AND d.transaction_id = p_txn;
    GET DIAGNOSTICS v_dead = ROW_COUNT;
    IF v_cursors = 0 AND v_dead = 0 THEN
        o_result := 'no_cursor'; o_group := NULL; o_next := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE queen.log_consumers c
       SET committed = p_off,
           total_consumed = c.total_consumed + 1,
           last_consumed_at = v_now,
           worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
           batch_end = NULL, batch_retry_count = 0, attempt_count = 0, attempt_offset = NULL
     WHERE c.partition_id = p_pid AND c.consumer_group = ANY (v_move);
    FOR v_i IN 1 .. coalesce(cardinality(v_move), 0) LOOP
        o_result := 'moved'; o_group := v_move[v_i]; o_next := p_off + 1;
        RETURN NEXT;
    END LOOP;
    o_result := 'done'; o_group := NULL; o_next := NULL; o_dead_letters := v_dead;
    RETURN NEXT;
END;
$$;
