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
