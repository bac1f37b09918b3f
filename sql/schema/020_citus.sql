-- 020_citus.sql: Queen on Citus (docs/citus.md). Does nothing unless the
-- database has the citus extension (CREATE EXTENSION citus, with the
-- workers added); then, in the applier's one schema transaction, the first
-- boot distributes the log tables and every boot re-asserts what must hold.
--
-- What is distributed, by partition (colocated, so a statement about one
-- partition's rows routes to one shard, on one worker):
--   log_partitions (by id), log_segments, log_txns, log_consumers and
--   log_dlq (by partition_id).
-- Reference tables (a copy on every node): queues, consumer_groups_metadata,
-- partition_offset_floors. Everything else stays on the coordinator.
--
-- The switch: the database setting queen.citus = 'on', written here, read by
-- the procedures (every session opened after this commit has it, and the
-- applier runs before the broker opens its pool):
--   - a partition is found by its derived id only (log_partition_open_v1):
--     a lookup by name would visit every shard;
--   - a push flush takes its per-slot path, with custom plans (log_push_v2):
--     the set statement updates partitions of many shards by ctid, which
--     Citus cannot plan, and a generic plan carries no partition id to route
--     by;
--   - no figures triggers (010_figures.sql), no marks and no fold
--     (figures_mark_v1, figures_pass_v1): Citus runs no trigger on a
--     distributed table. The kept figures are marked not built, so the admin
--     views and maxSize count by scanning, as before the figures existed.
--
-- Not distributed, with a warning at every boot: a database whose partitions
-- were created before ids were derived (their drawn ids cannot be found by
-- id); it goes on serving undistributed, as before. Distribute a fresh
-- database. An operator who wants the extension's database left alone sets
-- `ALTER DATABASE ... SET queen.citus = 'off'`: nothing here runs then.
--
-- Unique constraints on a distributed table must include its distribution
-- column: UNIQUE (queue_id, name) on log_partitions is dropped, and the
-- primary key, derived from (queue, name), carries it. The foreign key from
-- log_consumers to log_partitions is dropped while the tables are
-- distributed and put back (colocated tables may keep it).
DO $$
DECLARE
    v_trigger record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')
       OR current_setting('queen.citus', true) = 'off' THEN
        RETURN;
    END IF;
    IF current_setting('queen.citus', true) IS DISTINCT FROM 'on' THEN
        IF EXISTS (SELECT 1 FROM queen.log_partitions p
                    WHERE p.id <> queen.partition_id_v1(p.queue_id, p.name)) THEN
            RAISE WARNING 'queen on citus: not distributing this database: it holds partitions created before partition ids were derived (distribute a fresh database; ALTER DATABASE ... SET queen.citus = ''off'' silences this)';
            RETURN;
        END IF;
        EXECUTE format('ALTER DATABASE %I SET queen.citus = %L', current_database(), 'on');
        PERFORM set_config('queen.citus', 'on', true);
    END IF;
    FOR v_trigger IN
        SELECT t.tgname, t.tgrelid::regclass AS rel
          FROM pg_catalog.pg_trigger t
         WHERE t.tgname LIKE 'figures\_%' AND NOT t.tgisinternal
           AND t.tgrelid IN ('queen.log_partitions'::regclass, 'queen.log_consumers'::regclass,
                             'queen.log_dlq'::regclass)
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', v_trigger.tgname, v_trigger.rel);
    END LOOP;
    UPDATE queen.figures_build SET done = false WHERE done;
    UPDATE queen.figures_cursor_build SET done = false WHERE done;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition
                    WHERE logicalrelid = 'queen.log_partitions'::regclass) THEN
        ALTER TABLE queen.log_partitions DROP CONSTRAINT IF EXISTS log_partitions_queue_id_name_key;
        ALTER TABLE queen.log_consumers DROP CONSTRAINT IF EXISTS log_consumers_partition_id_fkey;
        PERFORM create_reference_table('queen.queues');
        PERFORM create_reference_table('queen.consumer_groups_metadata');
        PERFORM create_reference_table('queen.partition_offset_floors');
        PERFORM create_distributed_table('queen.log_partitions', 'id');
        PERFORM create_distributed_table('queen.log_segments', 'partition_id',
                                         colocate_with => 'queen.log_partitions');
        PERFORM create_distributed_table('queen.log_txns', 'partition_id',
                                         colocate_with => 'queen.log_partitions');
        PERFORM create_distributed_table('queen.log_consumers', 'partition_id',
                                         colocate_with => 'queen.log_partitions');
        PERFORM create_distributed_table('queen.log_dlq', 'partition_id',
                                         colocate_with => 'queen.log_partitions');
        ALTER TABLE queen.log_consumers ADD CONSTRAINT log_consumers_partition_id_fkey
            FOREIGN KEY (partition_id) REFERENCES queen.log_partitions (id) ON DELETE CASCADE;
    END IF;
END
$$;
