-- procedures/push.sql: the flush transaction of push fusion (decisions.md §3.4).
--
-- One call writes one segment per slot, for several partitions at once, in one
-- transaction and one round trip. The broker has already packed and compressed
-- each slot's frames and hashed its transaction ids; SQL never looks inside a
-- blob and never hashes anything.
--
-- Per slot, in array order (the broker sorts slots by queue and partition name,
-- so two flushes that share partitions lock them in the same order):
--   1. find or create the queue row (implicit creation with table defaults);
--   2. refuse the slot if the blob's encryption does not match the queue's
--      encryptionEnabled (a stale broker cache): status 'encryption', the true
--      flag returned, nothing written; the broker reseals and retries;
--   3. find or create the partition row and take its row lock (FOR UPDATE):
--      this lock is the partition's write serializer;
--   4. probe the hash sidecar for duplicates inside the queue's dedup window.
--      It runs after the lock, as a new statement with a new snapshot, so it
--      sees every push to this partition that committed before we got the lock
--      (the race between two brokers pushing the same transaction id is
--      decided here). Duplicates are returned one row each, with the winner's
--      segment blob and frame index so the broker can answer with the winner's
--      message id; nothing is written for the slot and the broker retries it
--      without the duplicates;
--   4b. refuse the slot when the queue has maxSize (max_queue_size > 0) and
--      the slot would take its depth past it: status 'full', nothing
--      written (log_push_v2 reads the depth from the kept figures and marks
--      what it wrote, step 5b). The depth is counted under the queue row's
--      lock (FOR NO KEY UPDATE), taken
--      before the partition's (step 1, bounded queues only), so concurrent
--      pushes to a bounded queue count one after another and it is never
--      exceeded; the order queue row, then partitions by name, is the one
--      every writer of both follows (configure, queue delete);
--   5. stamp created_at after the lock (invariant 2: monotone per partition in
--      commit order), allocate [base, end] with the allocator UPDATE
--      (invariant 1), bump last_write_at only when over a second stale (the
--      column is indexed; an unchanged value keeps the UPDATE HOT), fill
--      oldest_live_at / oldest_txn_at only on the empty-to-non-empty
--      transition (COALESCE), and insert the segment and sidecar rows.
--
-- A rolled-back call rolls back every allocation with it: no holes.

-- queen.log_partition_open_v1(p_qid, p_name): the id of queue p_qid's
-- partition p_name, its row locked FOR UPDATE (the partition's write
-- serializer), created when missing. A new partition takes the derived id
-- (partition_id_v1) and starts at the queue's offset floor
-- (partition_offset_floors).
--
-- Found by name, in one statement, as before ids were derived: a partition
-- created before keeps its drawn id, and on PostgreSQL the unique index on
-- (queue_id, name) costs what the primary key would. On Citus (the database
-- setting queen.citus = 'on', docs/citus.md) a statement by name would visit
-- every shard (and under log_push_v2's generic plans Citus refuses it), so
-- the partition is found by its derived id alone: a distributed database
-- holds only derived ids.
--
-- ON CONFLICT names no arbiter: a concurrent creator of the same name
-- conflicts on the primary key or on (queue_id, name), and either is "it
-- exists now" (with an arbiter, the other index would raise instead). The
-- loop covers a partition removed by cleanup between the insert and the
-- read, ten times at most.
CREATE OR REPLACE FUNCTION queen.log_partition_open_v1(p_qid uuid, p_name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_id     uuid;
    v_found  uuid;
    v_floor  bigint;
    v_try    integer;
    v_citus  boolean := current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on';
BEGIN
    -- The derived id (3 us) only where it is used: Citus's lookup, or the
    -- insert.
    IF v_citus THEN
        v_id := queen.partition_id_v1(p_qid, p_name);
    END IF;
    FOR v_try IN 1 .. 10 LOOP
        IF v_citus THEN
            SELECT p.id INTO v_found FROM queen.log_partitions p WHERE p.id = v_id FOR UPDATE;
        ELSE
            SELECT p.id INTO v_found
              FROM queen.log_partitions p
             WHERE p.queue_id = p_qid AND p.name = p_name
               FOR UPDATE;
        END IF;
        IF FOUND THEN
            RETURN v_found;
        END IF;
        -- Two statements, each of which Citus routes (an INSERT ... SELECT
        -- from the reference table it cannot).
        v_id := coalesce(v_id, queen.partition_id_v1(p_qid, p_name));
        v_floor := coalesce((SELECT fl.next_offset FROM queen.partition_offset_floors fl
                              WHERE fl.queue_id = p_qid), 0);
        INSERT INTO queen.log_partitions (id, queue_id, name, last_offset, log_start, txns_start)
        VALUES (v_id, p_qid, p_name, v_floor - 1, v_floor, v_floor)
        ON CONFLICT DO NOTHING;
    END LOOP;
    -- Ten inserts that conflicted and lookups that found nothing: on Citus,
    -- a partition of this name under an id not derived from it (020_citus.sql
    -- distributes only databases without such ids); elsewhere, a cleanup
    -- removing the partition ten times over.
    RAISE EXCEPTION 'partition % of queue % could not be found or created', p_name, p_qid
        USING ERRCODE = 'object_not_in_prerequisite_state';
END;
$$;

-- The depth of a queue: per partition, the messages some consumer group has
-- not consumed (after the least advanced cursor; every live message when the
-- partition has no cursor), summed. What maxSize bounds. Reads every
-- partition of the queue and their cursors: log_push_v1 pays that per
-- bounded push slot; log_push_v2 reads figures_queue_depth_v1 instead,
-- which falls back to this until the figures' build pass is done.
CREATE OR REPLACE FUNCTION queen.log_queue_depth_v1(p_qid uuid)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (
        SELECT coalesce(sum(p.last_offset - greatest(p.log_start - 1,
                   coalesce((SELECT min(c.committed) FROM queen.log_consumers c
                              WHERE c.partition_id = p.id), p.log_start - 1))), 0)::bigint
          FROM queen.log_partitions p
         WHERE p.queue_id = p_qid);
END;
$$;

CREATE OR REPLACE FUNCTION queen.log_push_v1(
    p_tenant        text,
    p_queues        text[],
    p_partitions    text[],
    p_namespaces    text[],
    p_tasks         text[],
    p_queue_ids     uuid[],
    p_partition_ids uuid[],
    p_encrypted     boolean[],
    p_probe         boolean[],
    p_cache_pids    uuid[],
    p_cover_from    bigint[],
    p_known_to      bigint[],
    p_counts        integer[],
    p_blobs         bytea[],
    p_hashes        bytea[]
) RETURNS TABLE (
    o_slot               integer,
    o_status             text,
    o_queue_id           uuid,
    o_partition_id       uuid,
    o_base_offset        bigint,
    o_created_at         timestamptz,
    o_encryption_enabled boolean,
    o_dup_item           integer,
    o_dup_frame          integer,
    o_dup_blob           bytea,
    o_known_base         bigint,
    o_known_end          bigint,
    o_known_hashes       bytea,
    o_window             integer
)
LANGUAGE plpgsql
VOLATILE
-- Generic plans, always. A custom plan of the set statement costs more to
-- plan than to run (the plan cache kept choosing one and replanned it on
-- every call), and the generic plan is the one written for: index lookups
-- by key and an UPDATE by tid, whatever the partition count.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n       integer := coalesce(array_length(p_queues, 1), 0);
    v_i       integer;
    v_qid     uuid;
    v_enc     boolean;
    v_window  integer;
    v_max     integer;
    v_pid     uuid;
    v_now     timestamptz;
    v_last    bigint;
    v_since   timestamptz;
    v_below   boolean;
    v_from    bigint;
    v_newer   integer;
    v_has_dup boolean;
    v_cached  boolean;
    v_known   record;
    v_row     record;
    v_done    boolean[];
    v_written integer := 0;
    v_fresh_pids uuid[];
    v_fresh_at   timestamptz[];
BEGIN
    -- The set path: one statement locks, allocates and inserts every slot
    -- that needs nothing else (the steady state), and the loop below takes
    -- the rest. Per-slot statements cost more than the rows they write
    -- (planning, executor start-up, the CHECK constraints compiled again per
    -- statement), and a lock taken apart from the allocator UPDATE visits
    -- each partition row twice and writes a lock record for it; one UPDATE
    -- takes the row lock itself (docs/performance.md has the figures).
    --
    -- A slot is written here when its queue exists, is not bounded and
    -- matches its encryption flag, its partition exists, and it needs no
    -- duplicate probe: no client transaction id, or a dedup window of 0, or
    -- the broker's coverage holds every sidecar row the probe would read.
    -- That last test has two halves. Rows below the coverage in the window
    -- are checked before the lock: rows below an offset never appear later,
    -- and time only takes them out of the window, so an early "none" stays
    -- true. Rows above the coverage (another broker wrote) are checked in the
    -- UPDATE's WHERE on the locked row: when the row was locked by another
    -- writer, PostgreSQL re-evaluates the condition on the version it then
    -- updates. A slot that fails any test is not touched and goes to the
    -- loop, which probes, returns the known rows, creates what is missing.
    --
    -- created_at is clock_timestamp() in RETURNING, evaluated after the row
    -- is updated and so after its lock (invariant 2). Rows are locked in
    -- slot order: the UPDATE runs a nested loop over the slots in order
    -- (the broker sorts them by queue and partition name). The loop's slots
    -- are then locked after the set path's, out of that order: two brokers
    -- whose flushes share two such partitions can deadlock, which PostgreSQL
    -- detects and the broker retries.
    --
    -- A flush of one slot takes the loop: one partition's flushes are one
    -- slot each (a lane has one flush in flight).
    IF v_n > 1 THEN
        v_now := clock_timestamp();
        FOR v_row IN
            WITH s AS (
                SELECT s.i, pp.tid, s.cnt, s.blob, s.hashes, q.id AS qid, q.encryption_enabled AS enc,
                       q.dedup_window_seconds AS win, s.probe, s.cpid, s.kt,
                       -- The probe is needed below the coverage: the newest
                       -- sidecar row under it is still in the window.
                       s.probe AND q.dedup_window_seconds > 0
                           AND (s.kt IS NULL
                                OR coalesce((SELECT t.created_at >= v_now - make_interval(secs => q.dedup_window_seconds)
                                               FROM queen.log_txns t
                                              WHERE t.partition_id = s.cpid AND t.base_offset < s.cf
                                              ORDER BY t.base_offset DESC
                                              LIMIT 1), false)) AS below
                  FROM unnest(p_queues, p_partitions, p_encrypted, p_counts, p_blobs, p_hashes,
                              p_probe, p_cache_pids, p_cover_from, p_known_to)
                       WITH ORDINALITY AS s(qn, pn, enc, cnt, blob, hashes, probe, cpid, cf, kt, i)
                  -- LIMIT 1 keeps each lookup an index probe of its own key
                  -- (as a join, a generic plan read every queue of the tenant).
                  CROSS JOIN LATERAL (
                        SELECT q.id, q.encryption_enabled, q.dedup_window_seconds
                          FROM queen.queues q
                         WHERE q.tenant_id = p_tenant AND q.name = s.qn AND q.max_queue_size = 0
                           AND q.encryption_enabled IS NOT DISTINCT FROM s.enc
                         LIMIT 1) q
                  -- The partition row's current version, by its key; the
                  -- UPDATE reaches it by tid. Had another writer updated it
                  -- since, the UPDATE waits for its lock and follows the
                  -- update chain to the version it then changes.
                  CROSS JOIN LATERAL (
                        SELECT p.ctid AS tid
                          FROM queen.log_partitions p
                         WHERE p.queue_id = q.id AND p.name = s.pn
                         LIMIT 1) pp
            ), alloc AS (
                UPDATE queen.log_partitions p
                   SET last_offset   = p.last_offset + s.cnt,
                       last_write_at = CASE WHEN p.last_write_at < v_now - interval '1 second'
                                            THEN v_now ELSE p.last_write_at END
                  FROM s
                 WHERE p.ctid = s.tid
                   AND NOT s.below
                   AND (NOT s.probe OR s.win = 0 OR (p.id = s.cpid AND p.last_offset <= s.kt))
                RETURNING s.i, p.id AS pid, s.qid, s.enc, s.win, s.cnt, s.blob, s.hashes,
                          p.last_offset - s.cnt + 1 AS base, p.last_offset AS last,
                          clock_timestamp() AS at,
                          p.oldest_live_at IS NULL OR p.oldest_txn_at IS NULL AS fresh
            ), seg AS (
                INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
                SELECT a.pid, a.base, a.last, a.cnt, a.at, a.blob FROM alloc a
            ), txn AS (
                INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
                SELECT a.pid, a.base, a.last, a.at, a.hashes FROM alloc a
            )
            SELECT a.i::integer AS i, a.qid, a.pid, a.enc, a.win, a.base, a.at, a.fresh FROM alloc a
        LOOP
            v_done[v_row.i] := true;
            v_written := v_written + 1;
            IF v_row.fresh THEN
                v_fresh_pids := v_fresh_pids || v_row.pid;
                v_fresh_at := v_fresh_at || v_row.at;
            END IF;
            o_slot := v_row.i - 1; o_status := 'queued';
            o_queue_id := v_row.qid; o_partition_id := v_row.pid;
            o_base_offset := v_row.base; o_created_at := v_row.at;
            o_encryption_enabled := v_row.enc; o_window := v_row.win;
            o_dup_item := NULL; o_dup_frame := NULL; o_dup_blob := NULL;
            o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL;
            RETURN NEXT;
        END LOOP;
        -- The empty-to-non-empty transition (rare): the retention work-list
        -- columns take the created_at of the row now at the watermark.
        IF v_fresh_pids IS NOT NULL THEN
            UPDATE queen.log_partitions p
               SET oldest_live_at = COALESCE(p.oldest_live_at, f.at),
                   oldest_txn_at  = COALESCE(p.oldest_txn_at, f.at)
              FROM unnest(v_fresh_pids, v_fresh_at) AS f(pid, at)
             WHERE p.id = f.pid;
        END IF;
        IF v_written = v_n THEN
            RETURN;
        END IF;
    END IF;

    FOR v_i IN 1 .. v_n LOOP
        IF v_done[v_i] THEN
            CONTINUE;
        END IF;
        o_slot := v_i - 1;
        o_queue_id := NULL; o_partition_id := NULL; o_base_offset := NULL;
        o_created_at := NULL; o_encryption_enabled := NULL;
        o_dup_item := NULL; o_dup_frame := NULL; o_dup_blob := NULL;
        o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL; o_window := NULL;

        -- 1. The queue row, created implicitly on first push.
        SELECT q.id, q.encryption_enabled, q.dedup_window_seconds, q.max_queue_size
          INTO v_qid, v_enc, v_window, v_max
          FROM queen.queues q
         WHERE q.tenant_id = p_tenant AND q.name = p_queues[v_i];
        IF NOT FOUND THEN
            INSERT INTO queen.queues (id, tenant_id, name, namespace, task)
            VALUES (p_queue_ids[v_i], p_tenant, p_queues[v_i], p_namespaces[v_i], p_tasks[v_i])
            ON CONFLICT (tenant_id, name) DO NOTHING;
            SELECT q.id, q.encryption_enabled, q.dedup_window_seconds, q.max_queue_size
              INTO STRICT v_qid, v_enc, v_window, v_max
              FROM queen.queues q
             WHERE q.tenant_id = p_tenant AND q.name = p_queues[v_i];
        END IF;
        IF v_max > 0 THEN
            -- A bounded queue: its pushes count its depth one at a time.
            -- NO KEY UPDATE: it serialises the pushes all the same, and does not
            -- block the key-share locks of inserts that reference the queue.
            PERFORM 1 FROM queen.queues q WHERE q.id = v_qid FOR NO KEY UPDATE;
        END IF;
        o_queue_id := v_qid;
        o_encryption_enabled := v_enc;

        -- 2. Never store plaintext for an encrypted queue (or sealed bytes for
        --    a plain one): the broker's cached flag was stale.
        IF v_enc IS DISTINCT FROM p_encrypted[v_i] THEN
            o_status := 'encryption';
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- 3. The partition row and its lock.
        SELECT p.id INTO v_pid
          FROM queen.log_partitions p
         WHERE p.queue_id = v_qid AND p.name = p_partitions[v_i]
           FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO queen.log_partitions (id, queue_id, name)
            VALUES (p_partition_ids[v_i], v_qid, p_partitions[v_i])
            ON CONFLICT (queue_id, name) DO NOTHING;
            SELECT p.id INTO STRICT v_pid
              FROM queen.log_partitions p
             WHERE p.queue_id = v_qid AND p.name = p_partitions[v_i]
               FOR UPDATE;
        END IF;
        o_partition_id := v_pid;

        -- 4. The dedup probe, under the lock. Hashes are matched first (a
        --    hash join against the slot's incoming hashes); only the few
        --    matches fetch their winner's blob. Skipped when the dedup window
        --    is 0, or when every transaction id of the slot was generated by
        --    the broker (a fresh UUIDv7 cannot repeat).
        --
        --    The broker's dedup cache: when the broker already holds every
        --    hash of this partition's sidecar rows in [p_cover_from,
        --    p_known_to] (and checked the slot against them), only rows
        --    outside that range are probed: older ones still in the window,
        --    and newer ones another broker wrote. Those newer rows come back
        --    as 'known' rows so the broker's coverage stays contiguous. The
        --    coverage counts only for the partition id it was built on (a
        --    re-created partition starts over).
        o_window := v_window;
        v_has_dup := false;
        v_cached := p_cache_pids[v_i] IS NOT DISTINCT FROM v_pid AND p_known_to[v_i] IS NOT NULL;
        v_newer := 0;
        IF v_window > 0 AND v_cached THEN
            FOR v_known IN
                SELECT t.base_offset, t.end_offset, t.hashes
                  FROM queen.log_txns t
                 WHERE t.partition_id = v_pid AND t.base_offset > p_known_to[v_i]
                 ORDER BY t.base_offset
            LOOP
                v_newer := v_newer + 1;
                o_status := 'known';
                o_known_base := v_known.base_offset;
                o_known_end := v_known.end_offset;
                o_known_hashes := v_known.hashes;
                RETURN NEXT;
            END LOOP;
            o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL;
        END IF;
        IF v_window > 0 AND p_probe[v_i] THEN
            v_since := clock_timestamp() - make_interval(secs => v_window);
            -- With coverage, rows below it are in the window only if the
            -- newest of them is (created_at is monotone in offset): one index
            -- probe. Usually none is, and the probe reads only the rows above
            -- the coverage (v_from: a range of the primary key, so the cost
            -- no longer grows with the rows the partition holds); otherwise
            -- every row of the partition in the window outside the coverage.
            v_from := -1;  -- offsets start at 0: every row
            IF v_cached THEN
                SELECT t.created_at >= v_since INTO v_below
                  FROM queen.log_txns t
                 WHERE t.partition_id = v_pid AND t.base_offset < p_cover_from[v_i]
                 ORDER BY t.base_offset DESC
                 LIMIT 1;
                IF NOT coalesce(v_below, false) THEN
                    v_from := p_known_to[v_i];
                END IF;
            END IF;
            -- Covered, nothing below the coverage in the window, nothing
            -- above it (one broker writes this partition): nothing to probe.
            IF v_from = -1 OR v_newer > 0 THEN
                RETURN QUERY
                WITH incoming AS MATERIALIZED (
                    SELECT n.idx, n.h FROM queen.log_unnest_hashes(p_hashes[v_i]) n
                ), matches AS MATERIALIZED (
                    SELECT i.idx AS item, t.base_offset, u.idx AS frame
                      FROM queen.log_txns t
                     CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) u
                      JOIN incoming i ON i.h = u.h
                     WHERE t.partition_id = v_pid
                       AND t.base_offset > v_from
                       AND t.created_at >= v_since
                       AND (NOT v_cached
                            OR t.base_offset < p_cover_from[v_i]
                            OR t.base_offset > p_known_to[v_i])
                )
                -- Each winner segment travels once: o_base_offset names it on
                -- every duplicate row, its blob rides on the first of them
                -- only (a retried 10,000-item push used to carry the same
                -- blob 10,000 times, and the broker inflated each copy).
                , numbered AS (
                    SELECT mm.item, mm.base_offset, mm.frame,
                           row_number() OVER (PARTITION BY mm.base_offset ORDER BY mm.item) = 1
                               AS first_of_segment
                      FROM matches mm
                )
                SELECT o_slot, 'duplicate'::text, v_qid, v_pid, m.base_offset, NULL::timestamptz,
                       v_enc, m.item, m.frame, s.blob, NULL::bigint, NULL::bigint, NULL::bytea, v_window
                  FROM numbered m
                  LEFT JOIN queen.log_segments s
                    ON m.first_of_segment AND s.partition_id = v_pid AND s.base_offset = m.base_offset;
                v_has_dup := FOUND;
            END IF;
        END IF;
        IF v_has_dup THEN
            CONTINUE;
        END IF;

        -- 4b. maxSize.
        IF v_max > 0 AND queen.log_queue_depth_v1(v_qid) + p_counts[v_i] > v_max THEN
            o_status := 'full';
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- 5. Stamp, allocate, insert: one statement (the inserts read the
        --    allocator UPDATE's RETURNING), so one executor start for the
        --    three (measured at batch 1: 15% less PostgreSQL CPU per message).
        v_now := clock_timestamp();
        WITH alloc AS (
            UPDATE queen.log_partitions p
               SET last_offset    = p.last_offset + p_counts[v_i],
                   last_write_at  = CASE WHEN p.last_write_at < v_now - interval '1 second'
                                         THEN v_now ELSE p.last_write_at END,
                   oldest_live_at = COALESCE(p.oldest_live_at, v_now),
                   oldest_txn_at  = COALESCE(p.oldest_txn_at, v_now)
             WHERE p.id = v_pid
            RETURNING p.last_offset
        ), seg AS (
            INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
            SELECT v_pid, alloc.last_offset - p_counts[v_i] + 1, alloc.last_offset, p_counts[v_i], v_now, p_blobs[v_i]
              FROM alloc
        ), txn AS (
            INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
            SELECT v_pid, alloc.last_offset - p_counts[v_i] + 1, alloc.last_offset, v_now, p_hashes[v_i]
              FROM alloc
        )
        SELECT alloc.last_offset INTO STRICT v_last FROM alloc;

        o_status := 'queued';
        o_base_offset := v_last - p_counts[v_i] + 1;
        o_created_at := v_now;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- queen.log_push_v2: log_push_v1 (above, kept verbatim for the brokers of
-- the previous version during a rolling upgrade) with a maxSize check that
-- costs what the queue's writes since the last fold cost, not its
-- partitions: step 4b reads the kept figures (figures_queue_depth_v1), and
-- step 5b marks a bounded queue's written partition dirty in the push's own
-- transaction, so the next push under the queue row's lock counts it. The
-- depth can only be over-counted, never under: a consumption another broker
-- has not yet marked (its next fold, QUEEN_FIGURES_FOLD_MS) still counts,
-- and a refused push's broker writes its own marks and tries once more.
CREATE OR REPLACE FUNCTION queen.log_push_v2(
    p_tenant        text,
    p_queues        text[],
    p_partitions    text[],
    p_namespaces    text[],
    p_tasks         text[],
    p_queue_ids     uuid[],
    p_partition_ids uuid[],
    p_encrypted     boolean[],
    p_probe         boolean[],
    p_cache_pids    uuid[],
    p_cover_from    bigint[],
    p_known_to      bigint[],
    p_counts        integer[],
    p_blobs         bytea[],
    p_hashes        bytea[]
) RETURNS TABLE (
    o_slot               integer,
    o_status             text,
    o_queue_id           uuid,
    o_partition_id       uuid,
    o_base_offset        bigint,
    o_created_at         timestamptz,
    o_encryption_enabled boolean,
    o_dup_item           integer,
    o_dup_frame          integer,
    o_dup_blob           bytea,
    o_known_base         bigint,
    o_known_end          bigint,
    o_known_hashes       bytea,
    o_window             integer
)
LANGUAGE plpgsql
VOLATILE
-- Generic plans, always. A custom plan of the set statement costs more to
-- plan than to run (the plan cache kept choosing one and replanned it on
-- every call), and the generic plan is the one written for: index lookups
-- by key and an UPDATE by tid, whatever the partition count.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n       integer := coalesce(array_length(p_queues, 1), 0);
    v_i       integer;
    v_qid     uuid;
    v_enc     boolean;
    v_window  integer;
    v_max     integer;
    v_pid     uuid;
    v_now     timestamptz;
    v_stale   timestamptz;
    v_citus   boolean;
    v_last    bigint;
    v_since   timestamptz;
    v_below   boolean;
    v_from    bigint;
    v_newer   integer;
    v_has_dup boolean;
    v_cached  boolean;
    v_known   record;
    v_row     record;
    v_done    boolean[];
    v_written integer := 0;
    v_fresh_pids uuid[];
    v_fresh_at   timestamptz[];
BEGIN
    -- On Citus (queen.citus = 'on'), custom plans: Citus routes a statement
    -- by the partition id's value, which a generic plan does not carry.
    -- set_config with is_local lasts until this function returns (its SET
    -- clause restores the setting).
    v_citus := current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on';
    -- The set path: one statement locks, allocates and inserts every slot
    -- that needs nothing else (the steady state), and the loop below takes
    -- the rest. Per-slot statements cost more than the rows they write
    -- (planning, executor start-up, the CHECK constraints compiled again per
    -- statement), and a lock taken apart from the allocator UPDATE visits
    -- each partition row twice and writes a lock record for it; one UPDATE
    -- takes the row lock itself (docs/performance.md has the figures).
    --
    -- A slot is written here when its queue exists, is not bounded and
    -- matches its encryption flag, its partition exists, and it needs no
    -- duplicate probe: no client transaction id, or a dedup window of 0, or
    -- the broker's coverage holds every sidecar row the probe would read.
    -- That last test has two halves. Rows below the coverage in the window
    -- are checked before the lock: rows below an offset never appear later,
    -- and time only takes them out of the window, so an early "none" stays
    -- true. Rows above the coverage (another broker wrote) are checked in the
    -- UPDATE's WHERE on the locked row: when the row was locked by another
    -- writer, PostgreSQL re-evaluates the condition on the version it then
    -- updates. A slot that fails any test is not touched and goes to the
    -- loop, which probes, returns the known rows, creates what is missing.
    --
    -- created_at is clock_timestamp() in RETURNING, evaluated after the row
    -- is updated and so after its lock (invariant 2). Rows are locked in
    -- slot order: the UPDATE runs a nested loop over the slots in order
    -- (the broker sorts them by queue and partition name). The loop's slots
    -- are then locked after the set path's, out of that order: two brokers
    -- whose flushes share two such partitions can deadlock, which PostgreSQL
    -- detects and the broker retries.
    --
    -- A flush of one slot takes the loop: one partition's flushes are one
    -- slot each (a lane has one flush in flight). On Citus (queen.citus =
    -- 'on') every slot takes the loop: the set statement joins partitions of
    -- many shards and updates them by ctid, which Citus cannot plan; the
    -- loop's statements each name one partition and route to its shard.
    IF v_n > 1 AND NOT v_citus THEN
        v_now := clock_timestamp();
        FOR v_row IN
            WITH s AS (
                SELECT s.i, pp.tid, s.cnt, s.blob, s.hashes, q.id AS qid, q.encryption_enabled AS enc,
                       q.dedup_window_seconds AS win, s.probe, s.cpid, s.kt,
                       -- The probe is needed below the coverage: the newest
                       -- sidecar row under it is still in the window.
                       s.probe AND q.dedup_window_seconds > 0
                           AND (s.kt IS NULL
                                OR coalesce((SELECT t.created_at >= v_now - make_interval(secs => q.dedup_window_seconds)
                                               FROM queen.log_txns t
                                              WHERE t.partition_id = s.cpid AND t.base_offset < s.cf
                                              ORDER BY t.base_offset DESC
                                              LIMIT 1), false)) AS below
                  FROM unnest(p_queues, p_partitions, p_encrypted, p_counts, p_blobs, p_hashes,
                              p_probe, p_cache_pids, p_cover_from, p_known_to)
                       WITH ORDINALITY AS s(qn, pn, enc, cnt, blob, hashes, probe, cpid, cf, kt, i)
                  -- LIMIT 1 keeps each lookup an index probe of its own key
                  -- (as a join, a generic plan read every queue of the tenant).
                  CROSS JOIN LATERAL (
                        SELECT q.id, q.encryption_enabled, q.dedup_window_seconds
                          FROM queen.queues q
                         WHERE q.tenant_id = p_tenant AND q.name = s.qn AND q.max_queue_size = 0
                           AND q.encryption_enabled IS NOT DISTINCT FROM s.enc
                         LIMIT 1) q
                  -- The partition row's current version, by its key; the
                  -- UPDATE reaches it by tid. Had another writer updated it
                  -- since, the UPDATE waits for its lock and follows the
                  -- update chain to the version it then changes.
                  CROSS JOIN LATERAL (
                        SELECT p.ctid AS tid
                          FROM queen.log_partitions p
                         WHERE p.queue_id = q.id AND p.name = s.pn
                         LIMIT 1) pp
            ), alloc AS (
                UPDATE queen.log_partitions p
                   SET last_offset   = p.last_offset + s.cnt,
                       last_write_at = CASE WHEN p.last_write_at < v_now - interval '1 second'
                                            THEN v_now ELSE p.last_write_at END
                  FROM s
                 WHERE p.ctid = s.tid
                   AND NOT s.below
                   AND (NOT s.probe OR s.win = 0 OR (p.id = s.cpid AND p.last_offset <= s.kt))
                RETURNING s.i, p.id AS pid, s.qid, s.enc, s.win, s.cnt, s.blob, s.hashes,
                          p.last_offset - s.cnt + 1 AS base, p.last_offset AS last,
                          clock_timestamp() AS at,
                          p.oldest_live_at IS NULL OR p.oldest_txn_at IS NULL AS fresh
            ), seg AS (
                INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
                SELECT a.pid, a.base, a.last, a.cnt, a.at, a.blob FROM alloc a
            ), txn AS (
                INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
                SELECT a.pid, a.base, a.last, a.at, a.hashes FROM alloc a
            )
            SELECT a.i::integer AS i, a.qid, a.pid, a.enc, a.win, a.base, a.at, a.fresh FROM alloc a
        LOOP
            v_done[v_row.i] := true;
            v_written := v_written + 1;
            IF v_row.fresh THEN
                v_fresh_pids := v_fresh_pids || v_row.pid;
                v_fresh_at := v_fresh_at || v_row.at;
            END IF;
            o_slot := v_row.i - 1; o_status := 'queued';
            o_queue_id := v_row.qid; o_partition_id := v_row.pid;
            o_base_offset := v_row.base; o_created_at := v_row.at;
            o_encryption_enabled := v_row.enc; o_window := v_row.win;
            o_dup_item := NULL; o_dup_frame := NULL; o_dup_blob := NULL;
            o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL;
            RETURN NEXT;
        END LOOP;
        -- The empty-to-non-empty transition (rare): the retention work-list
        -- columns take the created_at of the row now at the watermark.
        IF v_fresh_pids IS NOT NULL THEN
            UPDATE queen.log_partitions p
               SET oldest_live_at = COALESCE(p.oldest_live_at, f.at),
                   oldest_txn_at  = COALESCE(p.oldest_txn_at, f.at)
              FROM unnest(v_fresh_pids, v_fresh_at) AS f(pid, at)
             WHERE p.id = f.pid;
        END IF;
        IF v_written = v_n THEN
            RETURN;
        END IF;
    END IF;

    FOR v_i IN 1 .. v_n LOOP
        IF v_done[v_i] THEN
            CONTINUE;
        END IF;
        o_slot := v_i - 1;
        o_queue_id := NULL; o_partition_id := NULL; o_base_offset := NULL;
        o_created_at := NULL; o_encryption_enabled := NULL;
        o_dup_item := NULL; o_dup_frame := NULL; o_dup_blob := NULL;
        o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL; o_window := NULL;

        -- 1. The queue row, created implicitly on first push.
        SELECT q.id, q.encryption_enabled, q.dedup_window_seconds, q.max_queue_size
          INTO v_qid, v_enc, v_window, v_max
          FROM queen.queues q
         WHERE q.tenant_id = p_tenant AND q.name = p_queues[v_i];
        IF NOT FOUND THEN
            INSERT INTO queen.queues (id, tenant_id, name, namespace, task)
            VALUES (p_queue_ids[v_i], p_tenant, p_queues[v_i], p_namespaces[v_i], p_tasks[v_i])
            ON CONFLICT (tenant_id, name) DO NOTHING;
            SELECT q.id, q.encryption_enabled, q.dedup_window_seconds, q.max_queue_size
              INTO STRICT v_qid, v_enc, v_window, v_max
              FROM queen.queues q
             WHERE q.tenant_id = p_tenant AND q.name = p_queues[v_i];
        END IF;
        IF v_max > 0 THEN
            -- A bounded queue: its pushes count its depth one at a time.
            -- NO KEY UPDATE: it serialises the pushes all the same, and does not
            -- block the key-share locks of inserts that reference the queue.
            PERFORM 1 FROM queen.queues q WHERE q.id = v_qid FOR NO KEY UPDATE;
        END IF;
        o_queue_id := v_qid;
        o_encryption_enabled := v_enc;

        -- 2. Never store plaintext for an encrypted queue (or sealed bytes for
        --    a plain one): the broker's cached flag was stale.
        IF v_enc IS DISTINCT FROM p_encrypted[v_i] THEN
            o_status := 'encryption';
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- 3. The partition row and its lock (created when missing, under its
        --    derived id: p_partition_ids, the broker's proposals, are not used).
        --    On PostgreSQL the lookup by name runs here, in the statement
        --    log_push_v1 ran (the function call costs a slot 3 us more);
        --    log_partition_open_v1 only when it finds nothing, and on Citus,
        --    where a partition is found by its derived id.
        v_pid := NULL;
        IF NOT v_citus THEN
            SELECT p.id INTO v_pid
              FROM queen.log_partitions p
             WHERE p.queue_id = v_qid AND p.name = p_partitions[v_i]
               FOR UPDATE;
        END IF;
        IF v_pid IS NULL THEN
            v_pid := queen.log_partition_open_v1(v_qid, p_partitions[v_i]);
        END IF;
        o_partition_id := v_pid;

        -- On Citus the probe and the depth below need custom plans (Citus
        -- routes their statements by the partition id's value, which a
        -- generic plan does not carry); the other statements of a slot
        -- route with generic plans, which cost half the PostgreSQL time a
        -- message (docs/citus.md).
        IF v_citus THEN
            PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
        END IF;

        -- 4. The dedup probe, under the lock. Hashes are matched first (a
        --    hash join against the slot's incoming hashes); only the few
        --    matches fetch their winner's blob. Skipped when the dedup window
        --    is 0, or when every transaction id of the slot was generated by
        --    the broker (a fresh UUIDv7 cannot repeat).
        --
        --    The broker's dedup cache: when the broker already holds every
        --    hash of this partition's sidecar rows in [p_cover_from,
        --    p_known_to] (and checked the slot against them), only rows
        --    outside that range are probed: older ones still in the window,
        --    and newer ones another broker wrote. Those newer rows come back
        --    as 'known' rows so the broker's coverage stays contiguous. The
        --    coverage counts only for the partition id it was built on (a
        --    re-created partition starts over).
        o_window := v_window;
        v_has_dup := false;
        v_cached := p_cache_pids[v_i] IS NOT DISTINCT FROM v_pid AND p_known_to[v_i] IS NOT NULL;
        v_newer := 0;
        IF v_window > 0 AND v_cached THEN
            FOR v_known IN
                SELECT t.base_offset, t.end_offset, t.hashes
                  FROM queen.log_txns t
                 WHERE t.partition_id = v_pid AND t.base_offset > p_known_to[v_i]
                 ORDER BY t.base_offset
            LOOP
                v_newer := v_newer + 1;
                o_status := 'known';
                o_known_base := v_known.base_offset;
                o_known_end := v_known.end_offset;
                o_known_hashes := v_known.hashes;
                RETURN NEXT;
            END LOOP;
            o_known_base := NULL; o_known_end := NULL; o_known_hashes := NULL;
        END IF;
        IF v_window > 0 AND p_probe[v_i] THEN
            v_since := clock_timestamp() - make_interval(secs => v_window);
            -- With coverage, rows below it are in the window only if the
            -- newest of them is (created_at is monotone in offset): one index
            -- probe. Usually none is, and the probe reads only the rows above
            -- the coverage (v_from: a range of the primary key, so the cost
            -- no longer grows with the rows the partition holds); otherwise
            -- every row of the partition in the window outside the coverage.
            v_from := -1;  -- offsets start at 0: every row
            IF v_cached THEN
                SELECT t.created_at >= v_since INTO v_below
                  FROM queen.log_txns t
                 WHERE t.partition_id = v_pid AND t.base_offset < p_cover_from[v_i]
                 ORDER BY t.base_offset DESC
                 LIMIT 1;
                IF NOT coalesce(v_below, false) THEN
                    v_from := p_known_to[v_i];
                END IF;
            END IF;
            -- Covered, nothing below the coverage in the window, nothing
            -- above it (one broker writes this partition): nothing to probe.
            IF v_from = -1 OR v_newer > 0 THEN
                RETURN QUERY
                WITH incoming AS MATERIALIZED (
                    SELECT n.idx, n.h FROM queen.log_unnest_hashes(p_hashes[v_i]) n
                ), matches AS MATERIALIZED (
                    SELECT i.idx AS item, t.base_offset, u.idx AS frame
                      FROM queen.log_txns t
                     CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) u
                      JOIN incoming i ON i.h = u.h
                     WHERE t.partition_id = v_pid
                       AND t.base_offset > v_from
                       AND t.created_at >= v_since
                       AND (NOT v_cached
                            OR t.base_offset < p_cover_from[v_i]
                            OR t.base_offset > p_known_to[v_i])
                )
                -- Each winner segment travels once: o_base_offset names it on
                -- every duplicate row, its blob rides on the first of them
                -- only (a retried 10,000-item push used to carry the same
                -- blob 10,000 times, and the broker inflated each copy).
                , numbered AS (
                    SELECT mm.item, mm.base_offset, mm.frame,
                           row_number() OVER (PARTITION BY mm.base_offset ORDER BY mm.item) = 1
                               AS first_of_segment
                      FROM matches mm
                )
                SELECT o_slot, 'duplicate'::text, v_qid, v_pid, m.base_offset, NULL::timestamptz,
                       v_enc, m.item, m.frame, s.blob, NULL::bigint, NULL::bigint, NULL::bytea, v_window
                  FROM numbered m
                  LEFT JOIN queen.log_segments s
                    ON m.first_of_segment AND s.partition_id = v_pid AND s.base_offset = m.base_offset;
                v_has_dup := FOUND;
            END IF;
        END IF;
        IF v_has_dup THEN
            CONTINUE;
        END IF;

        -- 4b. maxSize, from the kept figures (figures_queue_depth_v1).
        IF v_max > 0 AND queen.figures_queue_depth_v1(v_qid) + p_counts[v_i] > v_max THEN
            o_status := 'full';
            RETURN NEXT;
            CONTINUE;
        END IF;

        IF v_citus THEN
            PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
        END IF;

        -- 5. Stamp, allocate, insert: one statement (the inserts read the
        --    allocator UPDATE's RETURNING), so one executor start for the
        --    three (measured at batch 1: 15% less PostgreSQL CPU per message).
        v_now := clock_timestamp();
        -- (Computed apart: Citus plans no STABLE operator inside a CASE.)
        v_stale := v_now - interval '1 second';
        IF v_citus THEN
            UPDATE queen.log_partitions p
               SET last_offset    = p.last_offset + p_counts[v_i],
                   last_write_at  = CASE WHEN p.last_write_at < v_stale
                                         THEN v_now ELSE p.last_write_at END,
                   oldest_live_at = COALESCE(p.oldest_live_at, v_now),
                   oldest_txn_at  = COALESCE(p.oldest_txn_at, v_now)
             WHERE p.id = v_pid
            RETURNING p.last_offset INTO STRICT v_last;
            INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
            VALUES (v_pid, v_last - p_counts[v_i] + 1, v_last, p_counts[v_i], v_now, p_blobs[v_i]);
            INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
            VALUES (v_pid, v_last - p_counts[v_i] + 1, v_last, v_now, p_hashes[v_i]);
        ELSE
        WITH alloc AS (
            UPDATE queen.log_partitions p
               SET last_offset    = p.last_offset + p_counts[v_i],
                   last_write_at  = CASE WHEN p.last_write_at < v_stale
                                         THEN v_now ELSE p.last_write_at END,
                   oldest_live_at = COALESCE(p.oldest_live_at, v_now),
                   oldest_txn_at  = COALESCE(p.oldest_txn_at, v_now)
             WHERE p.id = v_pid
            RETURNING p.last_offset
        ), seg AS (
            INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
            SELECT v_pid, alloc.last_offset - p_counts[v_i] + 1, alloc.last_offset, p_counts[v_i], v_now, p_blobs[v_i]
              FROM alloc
        ), txn AS (
            INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
            SELECT v_pid, alloc.last_offset - p_counts[v_i] + 1, alloc.last_offset, v_now, p_hashes[v_i]
              FROM alloc
        )
        SELECT alloc.last_offset INTO STRICT v_last FROM alloc;
        END IF;
        -- 5b. A bounded queue's write is marked dirty in this transaction,
        --     so the next push's depth (under the queue row's lock) counts
        --     it before any fold.
        IF v_max > 0 AND current_setting('queen.citus', true) IS DISTINCT FROM 'on' THEN
            INSERT INTO queen.figures_dirty (queue_id, partition_ids) VALUES (v_qid, ARRAY[v_pid]);
        END IF;

        o_status := 'queued';
        o_base_offset := v_last - p_counts[v_i] + 1;
        o_created_at := v_now;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- The spool drain's deep duplicate probe. A drained item
-- was accepted long ago, possibly longer than its queue's dedup window: the
-- copy a timed-out attempt committed, or a drain chunk stored before a
-- crash, lies outside what log_push_v1 probes. The drain asks first, per
-- slot (tenant, queue, partition, the slot's hashes, and p_since: when its
-- oldest item was accepted, less the push timeout and clock slack), which
-- of its transaction ids the partition stored since then, whatever the
-- window, and stores only the rest through the normal push path (whose own
-- probe covers what commits in between, inside the window).
--
-- p_until bounds the probe from above: the database's clock when the drain
-- pass first probed (NULL on that first call: now() is used, and returned
-- as the 'now' row, slot -1). Rows the pass stored itself are newer, so a
-- long drain does not probe its own output again and again (a repeated id
-- among them is a normal duplicate, inside the window).
--
-- One statement, so one snapshot: the sidecar rows still held since
-- p_since (a match: one row per matching item hash, the winner segment's
-- blob on the first row of each segment), and the partition's txns_start
-- at that snapshot (o_status 'start', always returned for a partition that
-- exists): the sidecar rows below it were purged, so the drain reads the
-- segments below it created since p_since (log_drain_segments_v1) and
-- matches their frames' transaction ids itself. A purge after this
-- snapshot removes only rows this statement already read. Reads every
-- sidecar row of the partition since p_since: the drain pays for it, the
-- normal push path never calls this.
CREATE OR REPLACE FUNCTION queen.log_drain_probe_v1(
    p_tenants    text[],
    p_queues     text[],
    p_partitions text[],
    p_since      timestamptz[],
    p_hashes     bytea[],
    p_until      timestamptz
) RETURNS TABLE (
    o_slot         integer,
    o_status       text,
    o_partition_id uuid,
    o_txns_start   bigint,
    o_hash         bytea,
    o_base_offset  bigint,
    o_frame        integer,
    o_blob         bytea,
    o_now          timestamptz
)
LANGUAGE plpgsql
STABLE
AS $$
-- plpgsql, not sql: a LANGUAGE sql body is analysed when it is created, which
-- locks the tables it names, and a re-apply must take no lock on a Queen
-- table (sql/README.md, rule 2).
BEGIN
    RETURN QUERY
    WITH s AS MATERIALIZED (
        SELECT (s.i - 1)::integer AS slot, p.id AS pid, p.txns_start, s.since, s.hashes
          FROM unnest(p_tenants, p_queues, p_partitions, p_since, p_hashes)
               WITH ORDINALITY AS s(tn, qn, pn, since, hashes, i)
          JOIN queen.queues q ON q.tenant_id = s.tn AND q.name = s.qn
          JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = s.pn
    -- Both sides materialised, so they meet in one hash join on the hash
    -- (as a nested loop, 1,000 hashes against 100,000 stored ones took
    -- minutes).
    ), incoming AS MATERIALIZED (
        SELECT s.slot, n.h
          FROM s CROSS JOIN LATERAL queen.log_unnest_hashes(s.hashes) n
    ), held AS MATERIALIZED (
        SELECT s.slot, s.pid, t.base_offset, u.idx AS frame, u.h
          FROM s
          JOIN queen.log_txns t ON t.partition_id = s.pid AND t.created_at >= s.since
                               AND t.created_at < coalesce(p_until, now())
          CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) u
    ), matches AS (
        SELECT h.slot, h.pid, h.h, h.base_offset, h.frame,
               row_number() OVER (PARTITION BY h.slot, h.base_offset ORDER BY h.frame) = 1 AS first_of_segment
          FROM held h
          JOIN incoming i ON i.slot = h.slot AND i.h = h.h
    )
    SELECT -1, 'now'::text, NULL::uuid, NULL::bigint, NULL::bytea, NULL::bigint, NULL::integer, NULL::bytea,
           coalesce(p_until, now())
    UNION ALL
    SELECT s.slot, 'start'::text, s.pid, s.txns_start, NULL::bytea, NULL::bigint, NULL::integer, NULL::bytea,
           NULL::timestamptz
      FROM s
    UNION ALL
    SELECT m.slot, 'match'::text, m.pid, NULL::bigint, m.h, m.base_offset, m.frame, g.blob, NULL::timestamptz
      FROM matches m
      LEFT JOIN queen.log_segments g
        ON m.first_of_segment AND g.partition_id = m.pid AND g.base_offset = m.base_offset;
END;
$$;

-- The drain's fallback below the sidecar: partition p_pid's segments below
-- p_before (the txns_start log_drain_probe_v1 answered, then the last base
-- offset read) created before p_until (the pass's bound), newest first, at
-- most p_limit, with their created_at. The drain stops at the first one
-- older than its p_since (created_at is monotone in offset), so it reads
-- only the segments since then.
CREATE OR REPLACE FUNCTION queen.log_drain_segments_v1(
    p_pid    uuid,
    p_before bigint,
    p_until  timestamptz,
    p_limit  integer
) RETURNS TABLE (o_base_offset bigint, o_created_at timestamptz, o_blob bytea)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT g.base_offset, g.created_at, g.blob
      FROM queen.log_segments g
     WHERE g.partition_id = p_pid AND g.base_offset < p_before AND g.created_at < p_until
     ORDER BY g.base_offset DESC
     LIMIT p_limit;
END;
$$;
