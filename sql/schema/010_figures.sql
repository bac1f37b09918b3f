-- 010_figures.sql: the message figures of the admin views, kept per queue so
-- a view reads one row per queue instead of every partition.
--
-- Applied at every boot inside the applier's schema transaction; idempotent,
-- and a re-apply takes no lock on a Queen table (the triggers are created
-- only when the catalog lacks them: CREATE TRIGGER takes SHARE ROW EXCLUSIVE
-- on its table, which stops every write for that instant, once).
--
-- The figures of a partition (procedures/figures.sql, figures_live_v1) are
-- what the views count per partition (procedures/admin.sql): total (live
-- messages), completed (by its least advanced cursor), dead (its dead
-- letters), retrying (its cursors waiting to retry a failed batch). Leases
-- are not kept here: the views count them live from the live-lease index,
-- because a lease ends by the clock, with no write to mark it.
--
-- Three tables:
--   figures_partition  each partition's figures as last folded
--   figures_queue      their sums per queue, and how many partitions
--   figures_dirty      the partitions changed since: one row per writing
--                      statement (an array, so a push flush over a hundred
--                      partitions adds one row), written by the triggers
--                      below in the writer's own transaction
-- The invariant: for every partition, its live figures equal its
-- figures_partition row unless a committed figures_dirty row names it. So a
-- view reading figures_queue plus, for each partition the dirty rows name,
-- live minus folded, answers exactly what a scan of every partition would,
-- under its one snapshot (figures_queue_counts_v1). The fold
-- (figures_fold_v1, every broker's background step, one at a time) moves
-- dirty partitions into the kept rows; it makes the views cheaper, never
-- more correct.
--
-- What marks a partition (everything that changes its figures):
--   log_partitions  INSERT (a new partition), DELETE, and an UPDATE that
--                   moves last_offset (push) or log_start (retention)
--   log_consumers   INSERT, DELETE (statement level: a group's deletion or a
--                   bulk seed is one row), an UPDATE of committed or
--                   batch_retry_count (row level with a WHEN clause, so a
--                   lease claim, which changes neither, runs no function)
--   log_dlq         INSERT, DELETE
--
-- A database populated before these tables existed is counted once by the
-- fold's build pass (figures_build): until it has visited every partition
-- the views count the old way, by a scan.
--
-- Downgrading to a broker that predates this file: drop the eight triggers
-- (DROP TRIGGER figures_... ON queen.<table>), or figures_dirty grows with
-- every write and nothing folds it.

CREATE TABLE IF NOT EXISTS queen.figures_partition (
    partition_id uuid   PRIMARY KEY,
    queue_id     uuid   NOT NULL,
    total        bigint NOT NULL,
    completed    bigint NOT NULL,
    dead         bigint NOT NULL,
    retrying     bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS queen.figures_queue (
    queue_id   uuid   PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
    partitions bigint NOT NULL DEFAULT 0,
    total      bigint NOT NULL DEFAULT 0,
    completed  bigint NOT NULL DEFAULT 0,
    dead       bigint NOT NULL DEFAULT 0,
    retrying   bigint NOT NULL DEFAULT 0
);

-- No index: the fold takes its rows in any order and the views read all of
-- them; it holds what changed since the last fold (a second, by default).
CREATE TABLE IF NOT EXISTS queen.figures_dirty (
    partition_ids uuid[] NOT NULL
);

-- Rows come and go every second: the same churn tuning as log_partitions.
SELECT queen.schema_set_reloptions('queen.figures_dirty', ARRAY[
    'autovacuum_vacuum_scale_factor=0',
    'autovacuum_vacuum_threshold=500',
    'vacuum_truncate=off'
]);

-- The trigger functions: each adds one figures_dirty row naming the
-- partitions its statement (or row) changed, or none.
CREATE OR REPLACE FUNCTION queen.figures_mark_new_partitions_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids)
    SELECT array_agg(n.id) FROM figures_new n HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_old_partitions_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids)
    SELECT array_agg(o.id) FROM figures_old o HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_moved_partitions_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids)
    SELECT array_agg(n.id)
      FROM figures_new n
      JOIN figures_old o ON o.id = n.id
     WHERE n.last_offset <> o.last_offset OR n.log_start <> o.log_start
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_new_rows_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids)
    SELECT array_agg(DISTINCT n.partition_id) FROM figures_new n HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_old_rows_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids)
    SELECT array_agg(DISTINCT o.partition_id) FROM figures_old o HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_cursor_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (partition_ids) VALUES (ARRAY[NEW.partition_id]);
    RETURN NULL;
END
$$;

-- The triggers, each created once (see the top of the file). Transition
-- tables take one event per trigger, hence one trigger per event.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_partitions_insert') THEN
        CREATE TRIGGER figures_partitions_insert AFTER INSERT ON queen.log_partitions
            REFERENCING NEW TABLE AS figures_new
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_new_partitions_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_partitions_delete') THEN
        CREATE TRIGGER figures_partitions_delete AFTER DELETE ON queen.log_partitions
            REFERENCING OLD TABLE AS figures_old
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_old_partitions_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_partitions_update') THEN
        CREATE TRIGGER figures_partitions_update AFTER UPDATE ON queen.log_partitions
            REFERENCING OLD TABLE AS figures_old NEW TABLE AS figures_new
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_moved_partitions_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_consumers_insert') THEN
        CREATE TRIGGER figures_consumers_insert AFTER INSERT ON queen.log_consumers
            REFERENCING NEW TABLE AS figures_new
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_new_rows_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_consumers_delete') THEN
        CREATE TRIGGER figures_consumers_delete AFTER DELETE ON queen.log_consumers
            REFERENCING OLD TABLE AS figures_old
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_old_rows_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_consumers_update') THEN
        CREATE TRIGGER figures_consumers_update AFTER UPDATE ON queen.log_consumers
            FOR EACH ROW
            WHEN (OLD.committed IS DISTINCT FROM NEW.committed
                  OR OLD.batch_retry_count IS DISTINCT FROM NEW.batch_retry_count
                  OR OLD.partition_id IS DISTINCT FROM NEW.partition_id)
            EXECUTE FUNCTION queen.figures_mark_cursor_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_dlq_insert') THEN
        CREATE TRIGGER figures_dlq_insert AFTER INSERT ON queen.log_dlq
            REFERENCING NEW TABLE AS figures_new
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_new_rows_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgname = 'figures_dlq_delete') THEN
        CREATE TRIGGER figures_dlq_delete AFTER DELETE ON queen.log_dlq
            REFERENCING OLD TABLE AS figures_old
            FOR EACH STATEMENT EXECUTE FUNCTION queen.figures_mark_old_rows_v1();
    END IF;
END
$$;

-- The build pass of a database that held partitions before this table was
-- created: done once every partition (in id order, after after_id) has been
-- folded. A fresh database has none, so it starts done. (The query
-- runs only when the table is created:
-- after the triggers above, in the transaction that created them, whose
-- locks keep writers out until it commits, so a partition either is counted
-- by this query or marked by a trigger. Guarded by the catalog, because the
-- parse analysis of CREATE TABLE ... AS takes a lock on log_partitions before
-- it notices the table exists.)
DO $$
BEGIN
    IF to_regclass('queen.figures_build') IS NULL THEN
        CREATE TABLE queen.figures_build AS
            SELECT NOT EXISTS (SELECT 1 FROM queen.log_partitions) AS done, NULL::uuid AS after_id;
    END IF;
END
$$;
