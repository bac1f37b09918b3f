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
--   figures_dirty      the partitions changed since: a row per writing
--                      statement and queue (an array of partitions)
--
-- What marks a partition dirty (everything that changes its figures):
--   a push         the broker that committed it, after the commit: it keeps
--                  the partitions it wrote in memory (once each) and hands
--                  them to its next fold, or to figures_mark_v1 before it
--                  answers an admin view. A trigger per push statement cost
--                  20-40% of PostgreSQL's time per single-message push
--                  (benches/wrk/round.sh), so pushes are not marked here.
--                  A push to a bounded queue (maxSize) is also marked in
--                  its own transaction (log_push_v2, step 5b): the next
--                  push's depth check (figures_queue_depth_v1) counts it.
--   a consuming    a cursor move that counts messages consumed (an ack, an
--   cursor move    auto-ack pop, a message delete, a give-back: they change
--                  total_consumed with committed): the same, by the broker
--                  that committed it; a row trigger cost auto-ack pops
--                  15% of their throughput (queen-load pop).
--   log_partitions INSERT (a new partition), DELETE, an UPDATE that moves
--                  log_start (retention; row level with a WHEN clause, so a
--                  push's UPDATE runs no function)
--   log_consumers  INSERT, DELETE (statement level: a group's deletion or a
--                  bulk seed is one row); an UPDATE of batch_retry_count, or
--                  of committed without total_consumed (a seek, a stream's
--                  cycle, an empty partition's seal; row level with a WHEN
--                  clause, so a lease claim runs no function)
--   log_dlq        INSERT, DELETE (a dead letter's filing moves a cursor too)
-- The triggers write in the writer's own transaction. A broker's marks
-- count in the views (figures_queue_counts_v1, which counts every dirty
-- partition live, so it answers what a scan of every partition would) at
-- once on that broker (it writes them before a view) and within its fold
-- interval on another. A broker that exits cleanly writes its marks; one
-- that dies loses them, and a verify cycle then re-counts every partition
-- in turn (a few hundred a pass, figures_brokers and figures_verify below),
-- so a figure a lost mark left behind is corrected within one cycle.
-- The fold (figures_fold_v2, every broker's background step, one at a time)
-- moves dirty partitions into the kept rows.
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

-- One row per writing statement and queue; it holds what changed since the
-- last fold (a second, by default). Indexed by queue, so a view of one
-- tenant, or a bounded queue's depth check, reads only its queues' rows.
CREATE TABLE IF NOT EXISTS queen.figures_dirty (
    queue_id      uuid   NOT NULL,
    partition_ids uuid[] NOT NULL
);

-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table
-- before it notices the index exists.
DO $$
BEGIN
    IF to_regclass('queen.idx_figures_dirty_queue') IS NULL THEN
        CREATE INDEX idx_figures_dirty_queue ON queen.figures_dirty (queue_id);
    END IF;
END
$$;

-- Rows come and go every second: the same churn tuning as log_partitions.
SELECT queen.schema_set_reloptions('queen.figures_dirty', ARRAY[
    'autovacuum_vacuum_scale_factor=0',
    'autovacuum_vacuum_threshold=500',
    'vacuum_truncate=off'
]);

-- The trigger functions: each adds a figures_dirty row per queue naming the
-- partitions of it its statement (or row) changed, or none. A cursor or dead
-- letter of a partition deleted in the same statement (a queue's delete
-- cascades) finds no partition row and marks nothing: the partition's own
-- delete marks it.
CREATE OR REPLACE FUNCTION queen.figures_mark_new_partitions_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT n.queue_id, array_agg(n.id) FROM figures_new n GROUP BY n.queue_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_old_partitions_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT o.queue_id, array_agg(o.id) FROM figures_old o GROUP BY o.queue_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_partition_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids) VALUES (NEW.queue_id, ARRAY[NEW.id]);
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION queen.figures_mark_new_rows_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT p.queue_id, array_agg(DISTINCT n.partition_id)
      FROM figures_new n JOIN queen.log_partitions p ON p.id = n.partition_id
     GROUP BY p.queue_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_old_rows_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT p.queue_id, array_agg(DISTINCT o.partition_id)
      FROM figures_old o JOIN queen.log_partitions p ON p.id = o.partition_id
     GROUP BY p.queue_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queen.figures_mark_cursor_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT p.queue_id, ARRAY[NEW.partition_id] FROM queen.log_partitions p WHERE p.id = NEW.partition_id;
    RETURN NULL;
END
$$;

-- The triggers, each created once (see the top of the file). Transition
-- tables take one event per trigger, hence one trigger per event. None on
-- Citus (the database setting queen.citus = 'on'): a distributed table runs
-- no trigger (docs/citus.md).
DO $$
BEGIN
    IF current_setting('queen.citus', true) = 'on' THEN
        RETURN;
    END IF;
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
            FOR EACH ROW
            WHEN (OLD.log_start IS DISTINCT FROM NEW.log_start)
            EXECUTE FUNCTION queen.figures_mark_partition_v1();
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
            WHEN ((OLD.committed IS DISTINCT FROM NEW.committed
                   AND OLD.total_consumed IS NOT DISTINCT FROM NEW.total_consumed)
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
-- folded. A fresh database has none, so it starts done. (A fold given
-- p_verify walks on after it is done, as a verify cycle did before
-- figures_verify; the brokers of this version pass 0 once it is.) (The query
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

-- The consumer groups' figures (the consumer-groups list and the overview's
-- lag): kept per cursor by the same fold (figures_fold_v2) from the same
-- marks, since a cursor's lag changes exactly when its partition's figures
-- do (a push, a consuming cursor move, a cursor's insert, delete or seek).
--   figures_cursor  each cursor's lag as last folded: messages after it
--                   and when the oldest of them was written (NULL: none)
--   figures_group   per (queue, group), how many cursors it has
-- The views read figures_group, the lagging cursors (a partial index, so a
-- caught-up group costs nothing) and the dirty partitions' cursors live:
-- their cost follows the cursors with lag and the writes since the last
-- fold, not the cursors or the partitions.
CREATE TABLE IF NOT EXISTS queen.figures_cursor (
    partition_id   uuid        NOT NULL,
    consumer_group text        NOT NULL,
    queue_id       uuid        NOT NULL,
    lag            bigint      NOT NULL,
    oldest_at      timestamptz NULL,
    PRIMARY KEY (partition_id, consumer_group)
);

DO $$
BEGIN
    IF to_regclass('queen.idx_figures_cursor_lagging') IS NULL THEN
        CREATE INDEX idx_figures_cursor_lagging ON queen.figures_cursor (queue_id) WHERE lag > 0;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS queen.figures_group (
    queue_id       uuid   NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    consumer_group text   NOT NULL,
    cursors        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, consumer_group)
);

-- The cursor figures' own build pass, for a database that held cursors
-- before figures_cursor existed (the partition figures' build may be long
-- done): the fold walks every partition once more, in id order, and the
-- views read the consumer groups the old way until it ends. Guarded by the
-- catalog, as figures_build is.
DO $$
BEGIN
    IF to_regclass('queen.figures_cursor_build') IS NULL THEN
        CREATE TABLE queen.figures_cursor_build AS
            SELECT NOT EXISTS (SELECT 1 FROM queen.log_consumers) AS done, NULL::uuid AS after_id;
    END IF;
END
$$;

-- The verify cycle (figures_watch_v1): a mark is lost when a broker dies
-- holding marks it had not written (killed between folds) or drops one
-- (past its bound). Either starts a cycle that marks every partition dirty
-- in turn, a few hundred a pass, so the fold re-counts each; with no loss
-- there is no cycle, and an idle database reads nothing for it.
--   figures_brokers  each folding broker, and until when it counts as
--                    alive (it moves that on, at most every few seconds); a
--                    clean exit writes its marks and deletes its row, so a
--                    row past its time names a broker that died: deleting
--                    it starts a cycle
--   figures_verify   the cycle: pending, and how far it walked in id order
CREATE TABLE IF NOT EXISTS queen.figures_brokers (
    broker_id  uuid        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

DO $$
BEGIN
    IF to_regclass('queen.figures_verify') IS NULL THEN
        CREATE TABLE queen.figures_verify AS
            SELECT false AS pending, NULL::uuid AS after_id;
    END IF;
END
$$;
