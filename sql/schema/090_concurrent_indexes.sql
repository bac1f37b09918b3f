-- 090_concurrent_indexes.sql: indexes built CONCURRENTLY, because they arrive
-- on tables that may already be populated and hot.
--
-- The applier runs this file OUTSIDE any transaction, one statement at a time,
-- after the transactional files have committed (registry: ApplyMode::Concurrent).
-- Rules for this file, checked by the crate's tests:
--   * only statements of the form
--       CREATE INDEX CONCURRENTLY IF NOT EXISTS <name> ON queen.<table> ...;
--     with a bare lower-case <name>, each ending with ';';
--   * outside comments, no ';' except at the end of a statement; comments are
--     '--' comments (stripped before the file is split), never /* */.
-- Before each statement the applier looks the index up: a valid index is left
-- alone without running the statement (CREATE INDEX CONCURRENTLY IF NOT EXISTS
-- takes a SHARE UPDATE EXCLUSIVE lock before it notices the index exists); an
-- INVALID one, left by a build that crashed or failed, is dropped with
-- DROP INDEX CONCURRENTLY first, because IF NOT EXISTS would otherwise keep the
-- broken index forever.

-- The retention work-list of log_partitions. Because created_at is monotone per
-- partition, "partition holds something deletable under cutoff C" is exactly
-- "oldest_live_at < C" (segments) or "oldest_txn_at < C" (hash sidecar), so
-- retention finds its work with one range scan per queue over these partial
-- indexes and its cost scales with deletable work, not with the partition
-- count. The NOT NULL predicate keeps empty partitions out of the index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_queue_oldest_live
    ON queen.log_partitions (queue_id, oldest_live_at)
    WHERE oldest_live_at IS NOT NULL;

CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_queue_oldest_txn
    ON queen.log_partitions (queue_id, oldest_txn_at)
    WHERE oldest_txn_at IS NOT NULL;

-- The sidecar's work-list across queues: every queue's sidecar cutoff is at
-- least 900 s old, so the purge scans this from the oldest for partitions
-- past 900 s and checks each one's own cutoff; its cost follows the due work,
-- not the queue count.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_oldest_txn
    ON queen.log_partitions (oldest_txn_at)
    WHERE oldest_txn_at IS NOT NULL;

-- The lease lookup of log_lease_extend_v1 when the broker's ack registry does
-- not know the lease (popped through another broker, or before a restart):
-- without it, every such extend reads every cursor row of every queue.
-- Partial, so it holds only live leases (one entry per leased partition).
-- The price: a leased pop and its ack change an indexed column, so those two
-- updates are not HOT (auto-ack pops, which never set worker_id, still are).
-- Measured with cargo xtask bench pop --consumers 32 --modes ack: throughput
-- within run-to-run noise (99k/130k msg/s without, 110k/126k with), WAL per
-- message 4 -> 7 bytes. Concurrent, because log_consumers of an upgraded
-- broker is populated and every pop and ack writes it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_consumers_worker
    ON queen.log_consumers (worker_id)
    WHERE worker_id IS NOT NULL;

-- Partition cleanup's work-list: empty partitions by idle time
-- (log_partition_cleanup_step_v1). A row enters and leaves it only when
-- oldest_live_at goes NULL or stops being so, columns already indexed.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_queue_empty
    ON queen.log_partitions (queue_id, last_write_at)
    WHERE oldest_live_at IS NULL;

-- The same work-list for every queue at once (log_partition_cleanup_step_v3:
-- one range scan from the oldest, not a probe per queue).
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_empty
    ON queen.log_partitions (last_write_at)
    WHERE oldest_live_at IS NULL;

-- The queues the retention and eviction steps visit: only those configured
-- for them, so a step reads none of the queues that are not (the steps'
-- queue filters are these predicates, which lets the planner use them).
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_queues_retention
    ON queen.queues (id)
    WHERE retention_enabled AND (retention_seconds > 0 OR completed_retention_seconds > 0);

CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_queues_eviction
    ON queen.queues (id)
    WHERE max_wait_time_seconds > 0;

-- The queues every broker must know before it writes to them (maxSize,
-- encryptionEnabled), read again every second by each broker
-- (queen_sql::queues::marked_queues): only those, in key order.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_queues_marked
    ON queen.queues (tenant_id, name)
    WHERE max_queue_size > 0 OR encryption_enabled;

-- The trace-name lookup of the trace views (GET /api/v1/traces/by-name/:name
-- and /traces/names): trace_names @> ARRAY[name] without reading every trace.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_message_traces_names
    ON queen.message_traces USING gin (trace_names);
