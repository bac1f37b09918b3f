-- procedures/migration.sql: what a database migration runs on its target
-- (crates/queen-engine/src/migration/). The target holds the procedures of
-- the source's dump, so these are the source broker's.
--
-- Applied at every boot inside the schema transaction: CREATE OR REPLACE
-- only, every name qualified with queen., plpgsql (see sql/README.md).

-- queen.migration_messages_skipped_v1: after a copy that skipped the data of
-- log_segments and log_txns (excludeTableData "messages"), make the
-- partitions agree with that. The copy brought log_partitions as the source
-- had it, so log_start, txns_start and oldest_live_at / oldest_txn_at point at
-- rows that were not copied (001_log_schema.sql; storage-model invariant 3),
-- and the admin views would count those messages as pending. Each partition
-- becomes empty: log_start = txns_start = last_offset + 1 and the oldest_*
-- NULL. last_offset stays, so new pushes continue after it and no offset is
-- used twice. Cursors stay where they are (a cursor below log_start is a gap,
-- invariant 4); their leases, retry holds and retry counts end, because they
-- were about messages that are gone. Returns the number of partitions.
CREATE OR REPLACE FUNCTION queen.migration_messages_skipped_v1()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_partitions bigint;
BEGIN
    UPDATE queen.log_consumers c
       SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
           batch_end = NULL, attempt_count = 0, attempt_offset = NULL,
           batch_retry_count = 0
     WHERE c.worker_id IS NOT NULL OR c.batch_end IS NOT NULL
        OR c.attempt_offset IS NOT NULL OR c.batch_retry_count > 0;
    UPDATE queen.log_partitions p
       SET log_start = p.last_offset + 1, txns_start = p.last_offset + 1,
           oldest_live_at = NULL, oldest_txn_at = NULL;
    GET DIAGNOSTICS v_partitions = ROW_COUNT;
    RETURN v_partitions;
END;
$$;
