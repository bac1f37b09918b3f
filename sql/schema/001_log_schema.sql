-- 001_log_schema.sql: the log tables (partitions, segments, the hash sidecar,
-- consumer cursors) and the hash-unnesting helper.
--
-- A message's address is (partition_id, offset): a BIGINT offset, monotone
-- within its partition. There is no per-message row and no per-message state.
-- Messages are packed into segments covering an inclusive offset range
-- [base_offset, end_offset]; a consumer group's progress in a partition is one
-- integer, the committed offset.
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on these tables (see 000_queen.sql and
-- sql/README.md). The two partial indexes on log_partitions are built
-- CONCURRENTLY by 090_concurrent_indexes.sql, outside this transaction.

-- queen.log_partitions: one row per partition, and the write serializer for it.
--
-- Three offset watermarks:
--   last_offset  the last allocated offset (-1: nothing ever written). Push
--                allocates [last_offset + 1, last_offset + n] with an UPDATE of
--                this row, under its row lock, so ranges never interleave and a
--                rolled-back push rolls the allocation back (no holes).
--   log_start    the first live segment's base_offset, or last_offset + 1 when
--                the partition is empty. Retention deletes whole-segment
--                prefixes only and moves it forward.
--   txns_start   the same watermark for the hash sidecar, which is purged on
--                its own clock.
-- last_write_at is indexed (idx_log_partitions_queue_write) so a wildcard pop
-- range-scans only recently written partitions. Because it is indexed, bumping
-- it makes the allocator UPDATE non-HOT, so push writes it only when the stored
-- value is more than a second old; the candidate scan allows two minutes of
-- slack for that quantisation.
-- oldest_live_at / oldest_txn_at are the retention work-list: the created_at of
-- the row at log_start / txns_start, NULL when there is nothing there. Because
-- created_at is monotone per partition, "holds something deletable under cutoff
-- C" is "oldest_* < C", one range scan over a partial index instead of one probe
-- per partition. Each is a fact, never a policy, and is maintained in the same
-- transaction and under the same row lock as the watermark it mirrors; push
-- fills them only on the empty-to-non-empty transition (COALESCE), so the
-- allocator UPDATE stays HOT for a partition that already holds data.
CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id             uuid        PRIMARY KEY,
    queue_id       uuid        NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name           text        NOT NULL,
    last_offset    bigint      NOT NULL DEFAULT -1,
    log_start      bigint      NOT NULL DEFAULT 0,
    txns_start     bigint      NOT NULL DEFAULT 0,
    last_write_at  timestamptz NOT NULL DEFAULT now(),
    oldest_live_at timestamptz NULL,
    oldest_txn_at  timestamptz NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

-- Churn tuning. Every push updates this row, so between autovacuum passes the
-- dead tuples dwarf the live rows.
--   fillfactor = 70: room on each page for HOT updates of the same row.
--   autovacuum_vacuum_scale_factor = 0 with autovacuum_vacuum_threshold = 500:
--     trigger on a fixed number of dead tuples, not on a fraction of a table
--     whose live population is small and fixed, so vacuum re-fires under churn.
--   vacuum_truncate = off, the important one: heap truncation takes an ACCESS
--     EXCLUSIVE lock, and on a table with a fixed row population it reclaims
--     nothing while freezing every push and pop behind the lock for seconds.
--     Turning it off removed a whole class of periodic latency spikes.
-- Do not strip these parameters in a tuning pass.
SELECT queen.schema_set_reloptions('queen.log_partitions', ARRAY[
    'fillfactor=70',
    'autovacuum_vacuum_scale_factor=0',
    'autovacuum_vacuum_threshold=500',
    'vacuum_truncate=off'
]);

-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it
-- notices the index exists, and a SHARE lock on this table stops every push.
DO $$
BEGIN
    IF to_regclass('queen.idx_log_partitions_queue_write') IS NULL THEN
        CREATE INDEX idx_log_partitions_queue_write
            ON queen.log_partitions (queue_id, last_write_at);
    END IF;
END
$$;

-- queen.partition_id_v1(p_queue, p_name): a partition's id, derived from its
-- queue's id and its name: the first 16 bytes of SHA-256 over the queue id's
-- 16 bytes and then the name in UTF-8, with the version nibble 8 and the
-- RFC 9562 variant bits (a UUIDv8, so never equal to a drawn v4 or v7 id).
-- Why derived: whoever knows (queue, name) knows the key, so the partition
-- is found by its primary key, and on Citus (docs/citus.md), where the log
-- tables are distributed by partition, a lookup by name routes to one shard
-- and the primary key carries the uniqueness of (queue, name). Partitions
-- created before this keep the id they were given; log_partition_open_v1
-- finds both. A partition removed and created again gets the same id, so its
-- offsets go on above the old ones (queen.partition_offset_floors below).
-- Pure, and plpgsql although it reads no table: a LANGUAGE sql body of this
-- shape is not inlined, and called from a plpgsql procedure it cost 10.7 us a
-- call against 3.2 us (measured on PostgreSQL 15, 100,000 calls).
CREATE OR REPLACE FUNCTION queen.partition_id_v1(p_queue uuid, p_name text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
DECLARE
    h bytea := substring(sha256(uuid_send(p_queue) || convert_to(p_name, 'UTF8')) FROM 1 FOR 16);
BEGIN
    RETURN encode(set_byte(set_byte(h, 6, (get_byte(h, 6) & 15) | 128),
                           8, (get_byte(h, 8) & 63) | 128), 'hex')::uuid;
END;
$$;

-- queen.partition_offset_floors: per queue, the first offset a new partition
-- of it is given (none: 0). Partition cleanup (procedures/retention.sql)
-- raises it past the last offset of every partition it removes, in the same
-- transaction, so a partition created again under its derived id never
-- hands out an offset its earlier life used: an address (partition id,
-- offset) names one message for ever, and whatever a broker remembers of the
-- earlier life (the dedup cache's coverage, a cursor's offset) lies below
-- every new offset. One row per queue that lost a partition; delete_queue_v1
-- removes it. No foreign key to queues on purpose: cleanup writes this row
-- while it holds partition row locks, and a key-share lock on the queue row
-- there would deadlock against a queue delete (queue row, then partitions).
CREATE TABLE IF NOT EXISTS queen.partition_offset_floors (
    queue_id    uuid   PRIMARY KEY,
    next_offset bigint NOT NULL
);

-- queen.log_segments: the messages. One row holds the frames of
-- [base_offset, end_offset], packed and compressed together with zstd by the
-- broker; PostgreSQL never looks inside blob. A partition's segments have
-- disjoint ranges allocated in ascending order, and created_at is monotone per
-- partition in commit order (push stamps it after taking the partition row
-- lock), which is what lets time-based retention and timestamp subscriptions
-- walk the primary key forward without a sort.
--
-- ZERO secondary indexes, on purpose: the primary key is also the pop path.
-- Every read is a range scan or a backward step on (partition_id, base_offset).
-- Do not add an index here.
--
-- No foreign key on partition_id either, like log_txns: its check is a
-- trigger firing once per inserted segment, and a flush of single messages
-- over many partitions inserts a segment per message (100 partitions, 50
-- single-message producers: 35 -> 31 us of PostgreSQL CPU per message without
-- it, docs/performance.md). Every insert already holds the partition row's
-- lock (push), so the row exists. The obligation it leaves: whatever deletes a
-- partition deletes its segments first or refuses a partition that has any
-- (delete_queue_v1 deletes them; partition cleanup only takes a partition
-- with none, log_partition_dead_v1).
CREATE TABLE IF NOT EXISTS queen.log_segments (
    partition_id uuid        NOT NULL,
    base_offset  bigint      NOT NULL,
    end_offset   bigint      NOT NULL,
    msg_count    integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    blob         bytea       NOT NULL,
    PRIMARY KEY (partition_id, base_offset),
    CONSTRAINT log_segments_range_ck CHECK (base_offset >= 0 AND end_offset >= base_offset),
    CONSTRAINT log_segments_count_ck CHECK (msg_count = end_offset - base_offset + 1)
);

-- The foreign key of the schema before it was dropped (see above): removed
-- once, by the first boot of a broker of this version. Guarded by the catalog,
-- so a re-apply takes no lock; the one drop takes ACCESS EXCLUSIVE on both
-- tables for an instant.
DO $$
DECLARE
    v_name name;
BEGIN
    FOR v_name IN SELECT c.conname FROM pg_catalog.pg_constraint c
                   WHERE c.conrelid = 'queen.log_segments'::regclass AND c.contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE queen.log_segments DROP CONSTRAINT %I', v_name);
    END LOOP;
END
$$;

-- blob is already zstd-compressed by the broker: EXTERNAL stores it out of line
-- without TOAST spending CPU trying to compress it again. Guarded because
-- SET STORAGE takes an ACCESS EXCLUSIVE lock even when nothing changes.
DO $$
BEGIN
    IF (SELECT a.attstorage
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = 'queen.log_segments'::regclass AND a.attname = 'blob') <> 'e' THEN
        ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;
    END IF;
END
$$;

-- Autovacuum on this table is set by measurement.
--
-- Measured (date not stated in the storage-model design page, which records
-- only the figures): the earlier factors, autovacuum_vacuum_scale_factor = 0.02
-- and autovacuum_vacuum_insert_scale_factor = 0.05, re-fired vacuum roughly
-- every 13 s at 1M msg/s. Each pass over the growing heap and its TOAST table
-- competed for I/O exactly when the system had no headroom left: an absorbed
-- hiccup at 800k msg/s, a stall at 900k, and a contributor to collapse at 1M.
--
-- Measured (date likewise not stated in the design page): at 0.1 and 0.3 vacuum
-- still keeps pace with retention churn; the heap plateaus through slot reuse,
-- verified over 300 s at 1M msg/s with retention sweeping every 5 s.
--
-- So: scale factors 0.1 (vacuum) and 0.3 (insert), with cost_limit = 4000 and
-- cost_delay = 0 so each pass finishes fast. The same four values are set again
-- with the toast. prefix: the blob bytes live in the TOAST table, so tuning only
-- the heap would leave the larger half of the write volume on the stock cadence.
-- Storage parameters only: re-applying them rewrites nothing.
-- Do not strip these parameters in a tuning pass.
SELECT queen.schema_set_reloptions('queen.log_segments', ARRAY[
    'autovacuum_vacuum_scale_factor=0.1',
    'autovacuum_vacuum_insert_scale_factor=0.3',
    'autovacuum_vacuum_cost_limit=4000',
    'autovacuum_vacuum_cost_delay=0',
    'toast.autovacuum_vacuum_scale_factor=0.1',
    'toast.autovacuum_vacuum_insert_scale_factor=0.3',
    'toast.autovacuum_vacuum_cost_limit=4000',
    'toast.autovacuum_vacuum_cost_delay=0'
]);

-- queen.log_txns: the hash sidecar. One row per segment, mirroring its offset
-- range, holding 16 bytes per frame: the BLAKE3 hash of the frame's
-- transaction id truncated to 128 bits (decisions §2), frame i at bytes
-- [16 i, 16 i + 16). The broker computes the hashes; SQL only stores and
-- compares bytea. Position is the addressing: the index of a matching 16-byte
-- slot is the message's offset minus base_offset.
--
-- Deliberately NO foreign key on partition_id: the purge path must never pay
-- foreign-key trigger cost, and these rows are only ever reached through a live
-- log_partitions row. The obligation that leaves: whatever deletes a partition
-- deletes these rows itself first (log_partition_cleanup_step_v1 and
-- delete_queue_v1 do), because the purge walks live partitions and an orphaned
-- row would be unreachable forever.
--
-- Purged on its own clock, rows older than GREATEST(dedup_window_seconds,
-- completed_retention_seconds, 900) s, moving txns_start / oldest_txn_at, so
-- its size is O(rate x window), independent of retention or backlog.
CREATE TABLE IF NOT EXISTS queen.log_txns (
    partition_id uuid        NOT NULL,
    base_offset  bigint      NOT NULL,
    end_offset   bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    hashes       bytea       NOT NULL,
    PRIMARY KEY (partition_id, base_offset),
    CONSTRAINT log_txns_range_ck CHECK (end_offset >= base_offset),
    CONSTRAINT log_txns_hashes_ck CHECK (length(hashes) = 16 * (end_offset - base_offset + 1))
);

-- queen.log_consumers: coordination state, one row per (partition, consumer
-- group). This is the entire consumption model.
--   committed          the cursor: every offset <= committed is done for the
--                      group (-1: nothing yet).
--   worker_id          the live lease's id (the leaseId on the wire), NULL when
--                      not leased. A leased batch is (committed, batch_end]; one
--                      row holds at most one lease, so exactly one in-flight
--                      leased batch exists per (partition, group).
--   lease_expires_at, lease_acquired_at, batch_end   the lease.
--   attempt_count      telemetry: deliveries of the batch starting at
--                      attempt_offset. Lease expiry bumps it; it never spends
--                      the retry budget.
--   batch_retry_count  the retry budget spent by explicit failed acks, checked
--                      against queues.retry_limit. Kept apart from
--                      attempt_count on purpose: a consumer crash must not eat
--                      the budget an explicit failure is entitled to.
CREATE TABLE IF NOT EXISTS queen.log_consumers (
    partition_id      uuid        NOT NULL REFERENCES queen.log_partitions (id) ON DELETE CASCADE,
    consumer_group    text        NOT NULL,
    committed         bigint      NOT NULL DEFAULT -1,
    worker_id         uuid        NULL,
    lease_expires_at  timestamptz NULL,
    lease_acquired_at timestamptz NULL,
    batch_end         bigint      NULL,
    attempt_count     integer     NOT NULL DEFAULT 0,
    attempt_offset    bigint      NULL,
    batch_retry_count integer     NOT NULL DEFAULT 0,
    total_consumed    bigint      NOT NULL DEFAULT 0,
    last_consumed_at  timestamptz NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);

-- Churn tuning, for the same reasons as log_partitions: every pop and ack
-- updates these rows, so threshold-based autovacuum (scale factor 0, threshold
-- 500) and vacuum_truncate = off (truncation's ACCESS EXCLUSIVE lock would
-- freeze every pop and ack behind it). fillfactor = 50 leaves half of each page
-- free for HOT updates: a row is rewritten by every lease and every ack.
-- Do not strip these parameters in a tuning pass.
SELECT queen.schema_set_reloptions('queen.log_consumers', ARRAY[
    'fillfactor=50',
    'autovacuum_vacuum_scale_factor=0',
    'autovacuum_vacuum_threshold=500',
    'vacuum_truncate=off'
]);

-- queen.log_cursor_lock_key(p_pid, p_group): the transaction-scoped advisory
-- lock key of the cursor row (partition, group). Whoever creates or rewrites
-- that row outside its row lock takes it: log_pop_v1's lazy creation and the
-- bulk seed (log_seed_cursors_v1) and a message delete (log_message_delete_v2)
-- with pg_try_advisory_xact_lock, a seek with pg_advisory_xact_lock. They exclude each other only because the key is the
-- same, so it is written once, here. A hash collision makes an unrelated
-- partition skip one cycle, which is harmless. Pure and inlined (LANGUAGE sql,
-- IMMUTABLE, one SELECT).
CREATE OR REPLACE FUNCTION queen.log_cursor_lock_key(p_pid uuid, p_group text)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT hashtextextended(p_pid::text || '/' || p_group, 42)
$$;

-- queen.log_unnest_hashes(p): explode a 16-byte-stride blob into (idx, h) rows,
-- idx zero-based. Both the push duplicate probe and ack-by-hash resolution go
-- through it.
--
-- Written so PostgreSQL inlines it into the calling query: LANGUAGE sql, a
-- single SELECT, IMMUTABLE, not STRICT, not SECURITY DEFINER, no SET clause,
-- and output column types that match the declared ones exactly (int, bytea),
-- so no coercion is needed. Pure byte slicing: a trailing partial slot is
-- ignored, and an empty or NULL value yields no rows.
CREATE OR REPLACE FUNCTION queen.log_unnest_hashes(p bytea)
RETURNS TABLE (idx integer, h bytea)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT i, substring(p FROM i * 16 + 1 FOR 16)
      FROM generate_series(0, length(p) / 16 - 1) AS i
$$;
