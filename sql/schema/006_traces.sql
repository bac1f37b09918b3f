-- 006_traces.sql: message traces (POST /api/v1/traces), the events a consumer
-- records while it processes a message.
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on the table (see sql/README.md).
--
-- A trace names its message by address (partition_id, transaction_id). Like
-- log_dlq there is deliberately no foreign key: traces outlive retention of
-- their segment, and the hot paths never pay trigger cost. Whatever deletes a
-- partition deletes its traces (delete_queue_v1).
CREATE TABLE IF NOT EXISTS queen.message_traces (
    id             uuid        PRIMARY KEY,
    partition_id   uuid        NOT NULL,
    transaction_id text        NOT NULL,
    consumer_group text        NOT NULL,
    event_type     text        NOT NULL,
    trace_names    text[]      NOT NULL DEFAULT '{}',
    data           jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock before it notices the
-- index exists.
DO $$
BEGIN
    IF to_regclass('queen.idx_message_traces_message') IS NULL THEN
        CREATE INDEX idx_message_traces_message
            ON queen.message_traces (partition_id, transaction_id, created_at);
    END IF;
END
$$;
