-- procedures/dlq.sql: replaying dead letters (storage-model.md, queen.log_dlq).
--
--   log_dlq_take_v1  deletes the dead letters a replay moves back into the
--                    log and returns them, with their queue and partition
--                    names, for the broker to push in the same transaction.
--   log_message_delete_v1  deletes a message: its dead letters, and it is
--                    marked consumed for every group reading the partition
--                    (at the end of the file); kept for brokers of the
--                    previous version. This version deletes in two steps:
--                    log_message_find_v1 (and log_message_segments_v1 for
--                    offsets the sidecar no longer indexes) says where the
--                    message's copies are, the broker decodes their frames,
--                    and log_message_delete_v2 decides and writes.
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
    -- On Citus (queen.citus = 'on') the pick takes no row locks: Citus runs
    -- no FOR UPDATE over several shards ("could not run distributed query
    -- with FOR UPDATE/SHARE commands"). Each dead letter is still taken
    -- once: the DELETE returns only the rows it deleted, and a concurrent
    -- take that picked the same rows waits for them and deletes none. It
    -- may then return fewer than p_limit while more are left (SKIP LOCKED
    -- would have passed over to them).
    IF current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on' THEN
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
        )
        DELETE FROM queen.log_dlq d
         USING picked k
         WHERE d.partition_id = k.partition_id
           AND d.consumer_group = k.consumer_group
           AND d.message_offset = k.message_offset
        RETURNING k.queue_name, k.partition_name, d.partition_id, d.message_offset,
                  d.consumer_group, d.transaction_id, d.trace_id, d.producer_sub,
                  d.payload, d.encrypted;
        RETURN;
    END IF;
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

-- DELETE /api/v1/messages/:partitionId/:transactionId for a message the
-- broker found in the log: offset p_off of partition p_pid (of p_tenant),
-- transaction id p_txn. There is no row per message to delete, so the
-- message is deleted by marking it consumed for every consumer group that
-- reads the partition, which the cursor model allows only where it moves no
-- cursor over anything else (storage-model.md: no holes, no reordering):
--   a group whose cursor is past it       nothing to do;
--   a group whose next message it is      its cursor moves onto it (the
--     (committed = p_off - 1), not leased  retry counters and any retryDelay
--                                          hold reset, as a dead letter's do);
--   a group that holds it in a live lease refused: 'leased';
--   a group with earlier messages to read refused: 'behind' (o_next: the
--                                          offset it reads next);
-- and every group's dead letter of the transaction id goes. One refusal
-- refuses the whole call and nothing changes ('leased' and 'behind' rows,
-- one per group in the way); so does a partition no group reads and that
-- holds no dead letter of it ('no_cursor'), since there is no cursor to
-- move. Otherwise: one 'moved' row per cursor moved, then 'done' with the
-- dead letters removed. A group whose first cursor on the partition is
-- created later starts where its subscription says and may still read the
-- message. Cursor rows are locked in group order for the decision.
CREATE OR REPLACE FUNCTION queen.log_message_delete_v1(
    p_tenant text,
    p_pid    uuid,
    p_off    bigint,
    p_txn    text
) RETURNS TABLE (o_result text, o_group text, o_next bigint, o_dead_letters bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_c       record;
    v_cursors integer := 0;
    v_move    text[] := '{}';
    v_refused boolean := false;
    v_dead    bigint;
BEGIN
    IF NOT queen.partition_in_tenant_v1(p_pid, p_tenant) THEN
        o_result := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    FOR v_c IN
        SELECT c.consumer_group, c.committed, c.worker_id, c.lease_expires_at, c.batch_end
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid
         ORDER BY c.consumer_group
           FOR UPDATE
    LOOP
        v_cursors := v_cursors + 1;
        IF v_c.committed >= p_off THEN
            CONTINUE;
        END IF;
        IF v_c.worker_id IS NOT NULL
           AND v_c.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
           AND v_c.lease_expires_at > v_now AND v_c.batch_end >= p_off THEN
            o_result := 'leased'; o_group := v_c.consumer_group; o_next := v_c.committed + 1;
            v_refused := true;
            RETURN NEXT;
        ELSIF v_c.committed = p_off - 1 THEN
            v_move := v_move || v_c.consumer_group;
        ELSE
            o_result := 'behind'; o_group := v_c.consumer_group; o_next := v_c.committed + 1;
            v_refused := true;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF v_refused THEN
        RETURN;
    END IF;
    DELETE FROM queen.log_dlq d
     WHERE d.partition_id = p_pid AND d.transaction_id = p_txn;
    GET DIAGNOSTICS v_dead = ROW_COUNT;
    IF v_cursors = 0 AND v_dead = 0 THEN
        o_result := 'no_cursor'; o_group := NULL; o_next := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE queen.log_consumers c
       SET committed = p_off,
           total_consumed = c.total_consumed + 1,
           last_consumed_at = v_now,
           worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
           batch_end = NULL, batch_retry_count = 0, attempt_count = 0, attempt_offset = NULL
     WHERE c.partition_id = p_pid AND c.consumer_group = ANY (v_move);
    FOR v_i IN 1 .. coalesce(cardinality(v_move), 0) LOOP
        o_result := 'moved'; o_group := v_move[v_i]; o_next := p_off + 1;
        RETURN NEXT;
    END LOOP;
    o_result := 'done'; o_group := NULL; o_next := NULL; o_dead_letters := v_dead;
    RETURN NEXT;
END;
$$;

-- ---- deleting a message, this version ----
--
-- A message is addressed by (partition, transaction id), and a transaction id
-- can be stored more than once: a replayed dead letter is the same message
-- again at a new offset (its frame's audience names the groups it is for),
-- and a push after the dedup window stores the id again. Deleting the message
-- acts on every copy a consumer group would still read.

-- The consumer groups known to read queue p_qid: every group with a
-- subscription record (consumer_groups_metadata: a group that popped the
-- whole queue, or subscribed early) and every group with a cursor on one of
-- its partitions (queue mode, or a group that pops single partitions).
-- o_start_known: where its cursor on a partition it has not read yet starts
-- is known: its record decides (log_seed_position_v1), or it is queue mode
-- (always from the start). A group without a record that pops single
-- partitions starts where each first pop's subscription intent says.
CREATE OR REPLACE FUNCTION queen.log_known_groups_v1(p_qid uuid)
RETURNS TABLE (o_group text, o_start_known boolean)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT k.g, bool_or(k.registered) OR k.g = '__QUEUE_MODE__'
      FROM (SELECT m.consumer_group AS g, true AS registered
              FROM queen.consumer_groups_metadata m
             WHERE m.queue_id = p_qid
            UNION ALL
            SELECT DISTINCT c.consumer_group, false
              FROM queen.log_partitions p
              JOIN queen.log_consumers c ON c.partition_id = p.id
             WHERE p.queue_id = p_qid) k
     GROUP BY k.g
     ORDER BY k.g;
END;
$$;

-- Where the copies of a message are, for partition p_pid of p_tenant (no row
-- when the partition is not the tenant's):
--   'partition'  o_offset: log_start; o_last: last_offset; o_covered: the
--                lowest offset the sidecar search covers (every offset from
--                it up was searched); o_least: the least advanced position
--                of the queue's known groups here (log_start - 1 when one of
--                them has no cursor here; NULL when no group is known);
--   'sidecar'    o_offset: an offset whose transaction-id hash is p_hash,
--                newest first, at most p_max rows, among the partition's
--                newest p_rows sidecar rows;
--   'dead'       o_offset: the offset a dead letter of transaction id p_txn
--                was filed from.
CREATE OR REPLACE FUNCTION queen.log_message_find_v1(
    p_tenant text,
    p_pid    uuid,
    p_hash   bytea,
    p_txn    text,
    p_rows   integer,
    p_max    integer
) RETURNS TABLE (o_kind text, o_offset bigint, o_last bigint, o_covered bigint, o_least bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_p      record;
    v_rows   integer;
    v_lowest bigint;
    v_groups text[];
BEGIN
    SELECT p.queue_id, p.log_start, p.last_offset, p.txns_start INTO v_p
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid AND q.tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT count(*), min(r.base_offset) INTO v_rows, v_lowest
      FROM (SELECT t.base_offset
              FROM queen.log_txns t
             WHERE t.partition_id = p_pid
             ORDER BY t.base_offset DESC
             LIMIT p_rows) r;
    o_kind := 'partition';
    o_offset := v_p.log_start;
    o_last := v_p.last_offset;
    -- Fewer rows than the limit: the whole sidecar was searched, and it
    -- indexes every offset from txns_start up.
    o_covered := CASE WHEN v_rows < p_rows THEN least(v_p.txns_start, coalesce(v_lowest, v_p.txns_start))
                      ELSE v_lowest END;
    SELECT min(c.committed) INTO o_least FROM queen.log_consumers c WHERE c.partition_id = p_pid;
    -- A known group without a cursor here: fewer of their cursors here than
    -- groups (a cursor is one row per (partition, group)). The groups are
    -- gathered first: on Citus, a statement naming p_pid's rows runs on its
    -- shard, where log_known_groups_v1 (a query over every shard) cannot.
    SELECT array_agg(k.o_group) INTO v_groups FROM queen.log_known_groups_v1(v_p.queue_id) k;
    IF (SELECT count(*) FROM queen.log_consumers c
         WHERE c.partition_id = p_pid AND c.consumer_group = ANY (v_groups))
       < coalesce(cardinality(v_groups), 0) THEN
        o_least := v_p.log_start - 1;
    END IF;
    RETURN NEXT;
    RETURN QUERY
    SELECT 'sidecar'::text, m.off, NULL::bigint, NULL::bigint, NULL::bigint
      FROM (SELECT r.base_offset + u.idx AS off
              FROM (SELECT t.base_offset, t.hashes
                      FROM queen.log_txns t
                     WHERE t.partition_id = p_pid
                     ORDER BY t.base_offset DESC
                     LIMIT p_rows) r
             CROSS JOIN LATERAL queen.log_unnest_hashes(r.hashes) u
             WHERE u.h = p_hash
             ORDER BY 1 DESC
             LIMIT p_max) m;
    RETURN QUERY
    SELECT DISTINCT 'dead'::text, d.message_offset, NULL::bigint, NULL::bigint, NULL::bigint
      FROM queen.log_dlq d
     WHERE d.partition_id = p_pid AND d.transaction_id = p_txn;
END;
$$;

-- The segments of partition p_pid (of p_tenant) holding offsets in
-- [p_from, p_to), in offset order: at most p_max_rows of them, and none that
-- starts after p_max_bytes of blob (the first is always returned). The
-- broker decodes them to find a message the sidecar no longer indexes;
-- PostgreSQL never looks inside a blob. The segment covering p_from is one
-- backward step on the primary key, the rest a forward range scan.
CREATE OR REPLACE FUNCTION queen.log_message_segments_v1(
    p_tenant    text,
    p_pid       uuid,
    p_from      bigint,
    p_to        bigint,
    p_max_rows  integer,
    p_max_bytes bigint
) RETURNS TABLE (o_base_offset bigint, o_end_offset bigint, o_blob bytea)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF NOT queen.partition_in_tenant_v1(p_pid, p_tenant) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT w.base_offset, w.end_offset, w.blob
      FROM (SELECT s.base_offset, s.end_offset, s.blob,
                   coalesce(sum(octet_length(s.blob)) OVER (ORDER BY s.base_offset
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
              FROM ((SELECT h.base_offset, h.end_offset, h.blob
                       FROM queen.log_segments h
                      WHERE h.partition_id = p_pid AND h.base_offset <= p_from
                      ORDER BY h.base_offset DESC
                      LIMIT 1)
                    UNION ALL
                    (SELECT f.base_offset, f.end_offset, f.blob
                       FROM queen.log_segments f
                      WHERE f.partition_id = p_pid AND f.base_offset > p_from AND f.base_offset < p_to
                      ORDER BY f.base_offset
                      LIMIT p_max_rows)) s
             WHERE s.end_offset >= p_from) w
     WHERE w.before < greatest(p_max_bytes, 1)
     ORDER BY w.base_offset
     LIMIT p_max_rows;
END;
$$;

-- What deleting copies p_offs of a message asks of one consumer group whose
-- position is p_pos (its cursor, or where its cursor would start), in a
-- partition whose first live offset is p_start. p_offs is ascending;
-- p_audiences[i] is copy i's audience (its frame's, groups separated by a
-- newline; NULL: every group). A group reads the copies after its position
-- that are for it; it may be moved over them only where that skips nothing
-- else, so each must be its next offset in turn. Offsets in [p_gap_lo,
-- p_gap_hi) were not searched for copies: a group that would still read one
-- of them cannot be decided. One row:
--   none        nothing to do (it is past every copy, or none is for it);
--   move        move it to o_to, over o_n copies;
--   leased      it holds a live lease (p_leased) and has a copy to read;
--   behind      it reads offset o_next first, which is not a copy;
--   unsearched  it reads offset o_next on, into the unsearched offsets.
CREATE OR REPLACE FUNCTION queen.log_message_delete_plan_v1(
    p_group     text,
    p_pos       bigint,
    p_leased    boolean,
    p_start     bigint,
    p_offs      bigint[],
    p_audiences text[],
    p_gap_lo    bigint,
    p_gap_hi    bigint
) RETURNS TABLE (o_verdict text, o_to bigint, o_n integer, o_next bigint)
LANGUAGE plpgsql
IMMUTABLE
AS $$
DECLARE
    v_cur bigint := p_pos;
    v_n   integer := 0;
    v_off bigint;
BEGIN
    FOR v_i IN 1 .. coalesce(cardinality(p_offs), 0) LOOP
        v_off := p_offs[v_i];
        CONTINUE WHEN v_off <= v_cur OR v_off < p_start
                   OR NOT (p_audiences[v_i] IS NULL
                           OR p_group = ANY (string_to_array(p_audiences[v_i], E'\n')));
        IF p_leased THEN
            o_verdict := 'leased'; o_next := p_pos + 1;
            RETURN NEXT;
            RETURN;
        END IF;
        IF greatest(v_cur + 1, p_start) <> v_off THEN
            o_verdict := 'behind'; o_next := greatest(v_cur + 1, p_start);
            RETURN NEXT;
            RETURN;
        END IF;
        v_cur := v_off;
        v_n := v_n + 1;
    END LOOP;
    IF p_gap_lo < p_gap_hi AND greatest(v_cur + 1, p_start) < p_gap_hi THEN
        o_verdict := 'unsearched'; o_next := greatest(v_cur + 1, p_start);
        RETURN NEXT;
        RETURN;
    END IF;
    o_verdict := CASE WHEN v_n > 0 THEN 'move' ELSE 'none' END;
    o_to := v_cur;
    o_n := v_n;
    RETURN NEXT;
END;
$$;

-- DELETE /api/v1/messages/:partitionId/:transactionId: delete copies p_offs
-- (ascending, with their audiences p_audiences, as log_message_delete_plan_v1
-- takes them) of the message with transaction id p_txn in partition p_pid of
-- p_tenant, found by the broker; offsets [p_gap_lo, p_gap_hi) were not
-- searched. There is no row per message: a copy is deleted by marking it
-- consumed for every consumer group known to read the queue
-- (log_known_groups_v1), where that moves no cursor over another message
-- (storage-model.md: no holes, no reordering). Per group, the plan above:
--   a cursor here         moved onto the copies ('moved', o_next: the offset
--                         it reads next), its lease fields and retry counters
--                         reset (a retryDelay hold is released);
--   no cursor here yet    where it would start is computed as its first pop
--                         would (log_seed_position_v1 of its record), and if
--                         that start has the copy next, its cursor is created
--                         past it ('created'), under the cursor-creation
--                         try-lock log_pop_v1 and the bulk seed take, so a
--                         concurrent creation answers 'busy'; a group whose
--                         start is not known (no record, single-partition
--                         pops) and that would need one answers 'unseeded';
-- refusals: 'leased', 'behind', 'unsearched' (o_next as the plan says),
-- 'busy', 'unseeded', and 'no_group' when a copy is live and no group is
-- known at all (nothing to mark it consumed on). One refusal refuses the
-- whole call and nothing changes. Otherwise every group's dead letter of
-- p_txn goes too, and the last row is 'done' with the dead letters removed.
-- Cursor rows are locked in group order, then the try-locks taken (they
-- never wait).
CREATE OR REPLACE FUNCTION queen.log_message_delete_v2(
    p_tenant    text,
    p_pid       uuid,
    p_txn       text,
    p_offs      bigint[],
    p_audiences text[],
    p_gap_lo    bigint,
    p_gap_hi    bigint
) RETURNS TABLE (o_result text, o_group text, o_next bigint, o_dead_letters bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_qid      uuid;
    v_start    bigint;
    v_c        record;
    v_k        record;
    v_plan     record;
    v_seen     text[] := '{}';
    v_known    integer := 0;
    v_move     text[] := '{}';
    v_move_to  bigint[] := '{}';
    v_move_n   integer[] := '{}';
    v_make     text[] := '{}';
    v_make_at  bigint[] := '{}';
    v_make_n   integer[] := '{}';
    v_refused  boolean := false;
    v_dead     bigint;
BEGIN
    SELECT p.queue_id, p.log_start INTO v_qid, v_start
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid AND q.tenant_id = p_tenant;
    IF NOT FOUND THEN
        o_result := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;

    -- The cursors here, locked in group order.
    FOR v_c IN
        SELECT c.consumer_group, c.committed,
               (c.worker_id IS NOT NULL
                AND c.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                AND c.lease_expires_at > v_now) AS leased
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid
         ORDER BY c.consumer_group
           FOR UPDATE
    LOOP
        v_seen := v_seen || v_c.consumer_group;
        SELECT * INTO v_plan
          FROM queen.log_message_delete_plan_v1(v_c.consumer_group, v_c.committed, v_c.leased,
                                                v_start, p_offs, p_audiences, p_gap_lo, p_gap_hi);
        IF v_plan.o_verdict = 'move' THEN
            v_move := v_move || v_c.consumer_group;
            v_move_to := v_move_to || v_plan.o_to;
            v_move_n := v_move_n || v_plan.o_n;
        ELSIF v_plan.o_verdict <> 'none' THEN
            o_result := v_plan.o_verdict; o_group := v_c.consumer_group; o_next := v_plan.o_next;
            v_refused := true;
            RETURN NEXT;
        END IF;
    END LOOP;

    -- The queue's known groups without a cursor here.
    FOR v_k IN
        SELECT k.o_group, k.o_start_known
          FROM queen.log_known_groups_v1(v_qid) k
         WHERE NOT (k.o_group = ANY (v_seen))
         ORDER BY k.o_group
    LOOP
        v_known := v_known + 1;
        SELECT * INTO v_plan
          FROM queen.log_message_delete_plan_v1(
                   v_k.o_group,
                   CASE WHEN v_k.o_start_known
                        THEN queen.log_seed_position_v1(p_pid, v_qid, v_k.o_group, NULL, NULL)
                        ELSE -1 END,
                   false, v_start, p_offs, p_audiences, p_gap_lo, p_gap_hi);
        CONTINUE WHEN v_plan.o_verdict = 'none';
        o_group := v_k.o_group; o_next := v_plan.o_next;
        IF NOT v_k.o_start_known THEN
            o_result := 'unseeded'; o_next := NULL;
        ELSIF v_plan.o_verdict <> 'move' THEN
            o_result := v_plan.o_verdict;
        -- A pop is creating its cursor now, or has just created it. The
        -- try-lock is an expression of its own: beside a statement on
        -- log_consumers, Citus would run it on the partition's worker, not
        -- on the coordinator where cursor creation takes it (docs/citus.md).
        ELSIF NOT pg_try_advisory_xact_lock(queen.log_cursor_lock_key(p_pid, v_k.o_group)) THEN
            o_result := 'busy'; o_next := NULL;
        ELSIF EXISTS (SELECT 1 FROM queen.log_consumers c
                       WHERE c.partition_id = p_pid AND c.consumer_group = v_k.o_group) THEN
            o_result := 'busy'; o_next := NULL;
        ELSE
            v_make := v_make || v_k.o_group;
            v_make_at := v_make_at || v_plan.o_to;
            v_make_n := v_make_n || v_plan.o_n;
            CONTINUE;
        END IF;
        v_refused := true;
        RETURN NEXT;
    END LOOP;
    IF v_refused THEN
        RETURN;
    END IF;
    IF cardinality(v_seen) = 0 AND v_known = 0
       AND EXISTS (SELECT 1 FROM unnest(p_offs) o WHERE o >= v_start) THEN
        o_result := 'no_group'; o_group := NULL; o_next := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    FOR v_i IN 1 .. cardinality(v_move) LOOP
        UPDATE queen.log_consumers c
           SET committed = greatest(c.committed, v_move_to[v_i]),
               total_consumed = c.total_consumed + v_move_n[v_i],
               last_consumed_at = v_now,
               worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
               batch_end = NULL, batch_retry_count = 0, attempt_count = 0, attempt_offset = NULL
         WHERE c.partition_id = p_pid AND c.consumer_group = v_move[v_i];
        o_result := 'moved'; o_group := v_move[v_i]; o_next := v_move_to[v_i] + 1;
        RETURN NEXT;
    END LOOP;
    FOR v_i IN 1 .. cardinality(v_make) LOOP
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed,
                                         total_consumed, last_consumed_at)
        VALUES (p_pid, v_make[v_i], v_make_at[v_i], v_make_n[v_i], v_now);
        o_result := 'created'; o_group := v_make[v_i]; o_next := v_make_at[v_i] + 1;
        RETURN NEXT;
    END LOOP;
    DELETE FROM queen.log_dlq d
     WHERE d.partition_id = p_pid AND d.transaction_id = p_txn;
    GET DIAGNOSTICS v_dead = ROW_COUNT;
    o_result := 'done'; o_group := NULL; o_next := NULL; o_dead_letters := v_dead;
    RETURN NEXT;
END;
$$;
