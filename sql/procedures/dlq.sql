-- procedures/dlq.sql: replaying dead letters (storage-model.md, queen.log_dlq).
--
--   log_dlq_take_v1  deletes the dead letters a replay moves back into the
--                    log and returns them, with their queue and partition
--                    names, for the broker to push in the same transaction.
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
