-- 005_log_ack.sql: the dead-letter table. (The ack procedures, including
-- log_dlq_head_v1 which files rows here, live in sql/procedures/.)
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on the table (see sql/README.md).

-- queen.log_dlq: the per-message escape hatch. Everything else in the storage
-- model is a cursor; this is the one table with a row per message, one row per
-- (partition_id, consumer_group, message_offset).
--
-- A message that exhausts its retries (or is acked 'dlq') is filed here and the
-- group's cursor moves past exactly that offset in the same transaction, so one
-- poison message cannot pin an ordered lane. When the queue's dlq_enabled is
-- false the frame is dropped instead of filed, and the cursor still moves.
--
-- The row is a snapshot, not a pointer: payload and the frame's fields are
-- copied out of the segment, so a dead letter survives the retention that
-- deletes its source segment. encrypted says payload is still sealed
-- (AES-256-GCM, nonce in front) as it was in the frame.
--
-- Deliberately NO foreign key on partition_id, for the same reason: a dead
-- letter must outlive its segment, and the DLQ path must not pay foreign-key
-- trigger cost. The obligation that leaves: whatever deletes a partition deletes
-- these rows itself. delete_queue_v1 does so before dropping the queue row;
-- partition cleanup instead refuses to reclaim a partition that still holds a
-- dead letter (the log_partition_dead_v1 veto). Retention never touches this
-- table; rows leave only by DELETE /api/v1/messages/:partitionId/:transactionId
-- or by a replay, which moves one row back into the log in the push's
-- transaction.
CREATE TABLE IF NOT EXISTS queen.log_dlq (
    partition_id       uuid        NOT NULL,
    consumer_group     text        NOT NULL,
    message_offset     bigint      NOT NULL,
    message_id         uuid        NOT NULL,
    transaction_id     text        NOT NULL,
    trace_id           uuid        NULL,
    producer_sub       text        NULL,
    payload            bytea       NOT NULL,
    encrypted          boolean     NOT NULL DEFAULT false,
    message_created_at timestamptz NOT NULL,
    error              text        NULL,
    retry_count        integer     NOT NULL DEFAULT 0,
    failed_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group, message_offset)
);

-- The one secondary index: what the DLQ browse and depth queries scan.
-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it
-- notices the index exists.
DO $$
BEGIN
    IF to_regclass('queen.idx_log_dlq_partition_failed_at') IS NULL THEN
        CREATE INDEX idx_log_dlq_partition_failed_at
            ON queen.log_dlq (partition_id, failed_at DESC);
    END IF;
END
$$;
