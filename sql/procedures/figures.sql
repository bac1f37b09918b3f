-- procedures/figures.sql: the kept message figures (schema/010_figures.sql
-- says what they are and what keeps them true): a partition's live figures,
-- the fold, and the per-queue counts the admin views read.

-- queen.figures_live_v1: the figures of the partitions p_ids that exist, as
-- the views count them (procedures/admin.sql): total, completed by the least
-- advanced cursor, dead letters, cursors retrying. One probe per partition.
CREATE OR REPLACE FUNCTION queen.figures_live_v1(p_ids uuid[])
RETURNS TABLE (
    o_partition_id uuid,
    o_queue_id     uuid,
    o_total        bigint,
    o_completed    bigint,
    o_dead         bigint,
    o_retrying     bigint
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT p.id, p.queue_id, t.total,
           CASE WHEN c.committed IS NULL THEN 0::bigint
                ELSE least(greatest(c.committed - p.log_start + 1, 0), t.total)::bigint END,
           d.n, c.retrying
      FROM queen.log_partitions p
      CROSS JOIN LATERAL (
          SELECT greatest(p.last_offset - p.log_start + 1, 0)::bigint AS total) AS t
      CROSS JOIN LATERAL (
          SELECT min(lc.committed) AS committed,
                 count(*) FILTER (WHERE lc.batch_retry_count > 0)::bigint AS retrying
            FROM queen.log_consumers lc
           WHERE lc.partition_id = p.id) AS c
      CROSS JOIN LATERAL (
          SELECT count(*)::bigint AS n FROM queen.log_dlq dl WHERE dl.partition_id = p.id) AS d
     WHERE p.id = ANY (p_ids);
END
$$;

-- queen.figures_mark_v1: mark dirty the partitions a broker pushed to,
-- named (tenant, queue, partition), and those it consumed from, by id: one
-- row per queue. Those that no longer exist are skipped.
CREATE OR REPLACE FUNCTION queen.figures_mark_v1(
    p_tenants    text[],
    p_queues     text[],
    p_partitions text[],
    p_ids        uuid[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_n integer;
BEGIN
    -- On Citus (queen.citus = 'on') nothing is kept: the views scan
    -- (schema/020_citus.sql), and a mark would only pile up unfolded.
    IF current_setting('queen.citus', true) = 'on' THEN
        RETURN 0;
    END IF;
    INSERT INTO queen.figures_dirty (queue_id, partition_ids)
    SELECT x.queue_id, array_agg(DISTINCT x.id)
      FROM (SELECT p.queue_id, p.id
              FROM unnest(p_tenants, p_queues, p_partitions) AS m(tenant, queue, partition)
              JOIN queen.queues q ON q.tenant_id = m.tenant AND q.name = m.queue
              JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = m.partition
            UNION ALL
            SELECT p.queue_id, p.id
              FROM queen.log_partitions p
             WHERE p.id = ANY (p_ids)) AS x
     GROUP BY x.queue_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- queen.figures_fold_v1: fold up to p_limit figures_dirty rows, the
-- partitions a broker pushed to or consumed from (p_tenants, p_queues,
-- p_partitions and p_ids, as figures_mark_v1 takes them) and the next
-- p_verify partitions in id order
-- (the build pass while it runs, then the verify cycle, which wraps) into
-- the kept figures. Returns how many partitions it folded, or -1 when
-- another session is folding (one fold at a time, so the kept rows have one
-- writer and no lock order to get wrong); then the broker's partitions are
-- marked dirty instead, for the next fold. The kept figure of each
-- partition is recomputed whole, never adjusted, so folding a partition
-- twice is harmless: a change that commits while a fold runs leaves its own
-- dirty row behind for the next one.
CREATE OR REPLACE FUNCTION queen.figures_fold_v1(
    p_limit      integer,
    p_verify     integer,
    p_tenants    text[],
    p_queues     text[],
    p_partitions text[],
    p_ids        uuid[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    -- "QFIGURES": the fold's transaction-scoped advisory lock.
    c_lock constant bigint := 5856652435425432915;
    v_ids uuid[];
    v_more uuid[];
    v_build record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        PERFORM queen.figures_mark_v1(p_tenants, p_queues, p_partitions, p_ids);
        RETURN -1;
    END IF;
    WITH taken AS (
        DELETE FROM queen.figures_dirty d
         WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM queen.figures_dirty x LIMIT p_limit))
        RETURNING d.partition_ids)
    SELECT array_agg(u.id) INTO v_ids
      FROM taken CROSS JOIN LATERAL unnest(taken.partition_ids) AS u(id);

    SELECT v_ids || array_agg(p.id) INTO v_ids
      FROM unnest(p_tenants, p_queues, p_partitions) AS m(tenant, queue, partition)
      JOIN queen.queues q ON q.tenant_id = m.tenant AND q.name = m.queue
      JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = m.partition;
    v_ids := COALESCE(v_ids, '{}'::uuid[]) || COALESCE(p_ids, '{}'::uuid[]);

    SELECT b.done, b.after_id INTO v_build FROM queen.figures_build b;
    IF p_verify > 0 THEN
        SELECT array_agg(x.id ORDER BY x.id) INTO v_more
          FROM (SELECT p.id FROM queen.log_partitions p
                 WHERE v_build.after_id IS NULL OR p.id > v_build.after_id
                 ORDER BY p.id LIMIT p_verify) AS x;
        IF COALESCE(cardinality(v_more), 0) < p_verify THEN
            -- The end of the partitions: the build is done, the cycle wraps.
            UPDATE queen.figures_build SET done = true, after_id = NULL;
        ELSE
            UPDATE queen.figures_build SET after_id = v_more[cardinality(v_more)];
        END IF;
        v_ids := COALESCE(v_ids, '{}'::uuid[]) || COALESCE(v_more, '{}'::uuid[]);
    END IF;

    SELECT array_agg(DISTINCT u) INTO v_ids FROM unnest(v_ids) AS u;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;

    WITH live AS (
        SELECT * FROM queen.figures_live_v1(v_ids)
    ), cmp AS (
        SELECT i.id, COALESCE(l.o_queue_id, f.queue_id) AS qid,
               (l.o_partition_id IS NOT NULL)::integer - (f.partition_id IS NOT NULL)::integer AS d_parts,
               COALESCE(l.o_total, 0) - COALESCE(f.total, 0) AS d_total,
               COALESCE(l.o_completed, 0) - COALESCE(f.completed, 0) AS d_completed,
               COALESCE(l.o_dead, 0) - COALESCE(f.dead, 0) AS d_dead,
               COALESCE(l.o_retrying, 0) - COALESCE(f.retrying, 0) AS d_retrying,
               l.o_partition_id IS NULL AS gone
          FROM unnest(v_ids) AS i(id)
          LEFT JOIN live l ON l.o_partition_id = i.id
          LEFT JOIN queen.figures_partition f ON f.partition_id = i.id
    ), kept AS (
        INSERT INTO queen.figures_partition AS f
               (partition_id, queue_id, total, completed, dead, retrying)
        SELECT l.o_partition_id, l.o_queue_id, l.o_total, l.o_completed, l.o_dead, l.o_retrying
          FROM live l
        ON CONFLICT (partition_id) DO UPDATE
           SET total = EXCLUDED.total, completed = EXCLUDED.completed,
               dead = EXCLUDED.dead, retrying = EXCLUDED.retrying
    ), dropped AS (
        DELETE FROM queen.figures_partition f
         USING cmp WHERE f.partition_id = cmp.id AND cmp.gone
    )
    INSERT INTO queen.figures_queue AS fq (queue_id, partitions, total, completed, dead, retrying)
    SELECT s.qid, s.parts, s.total, s.completed, s.dead, s.retrying
      FROM (SELECT c.qid, sum(c.d_parts)::bigint AS parts, sum(c.d_total)::bigint AS total,
                   sum(c.d_completed)::bigint AS completed, sum(c.d_dead)::bigint AS dead,
                   sum(c.d_retrying)::bigint AS retrying
              FROM cmp c
             WHERE c.qid IS NOT NULL
             GROUP BY c.qid) AS s
      -- A deleted queue's row went with it (ON DELETE CASCADE).
      JOIN queen.queues q ON q.id = s.qid
     WHERE s.parts <> 0 OR s.total <> 0 OR s.completed <> 0 OR s.dead <> 0 OR s.retrying <> 0
     ORDER BY s.qid
    ON CONFLICT (queue_id) DO UPDATE
       SET partitions = fq.partitions + EXCLUDED.partitions,
           total = fq.total + EXCLUDED.total,
           completed = fq.completed + EXCLUDED.completed,
           dead = fq.dead + EXCLUDED.dead,
           retrying = fq.retrying + EXCLUDED.retrying;
    RETURN cardinality(v_ids);
END
$$;

-- queen.figures_fold_v2: figures_fold_v1 (above, kept verbatim for the
-- brokers of the previous version during a rolling upgrade) with two
-- changes. p_limit bounds the partitions the dirty rows name, not the rows:
-- one row can name thousands (a statement that created as many), so a step
-- takes rows while their partitions fit, and writes the partitions of its
-- last row past p_limit back as a new dirty row (a step of v1 could take
-- 512 rows naming 500,000 partitions and run for a minute). And it also
-- folds the partitions' cursors into figures_cursor and figures_group, and
-- walks the cursor figures' build pass (figures_cursor_build) while it
-- runs. An old broker's v1 fold takes dirty rows without folding their
-- cursors: such a cursor's kept row is put right by a later change or the
-- verify cycle.
CREATE OR REPLACE FUNCTION queen.figures_fold_v2(
    p_limit      integer,
    p_verify     integer,
    p_tenants    text[],
    p_queues     text[],
    p_partitions text[],
    p_ids        uuid[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    -- "QFIGURES": the fold's transaction-scoped advisory lock.
    c_lock constant bigint := 5856652435425432915;
    v_ids uuid[];
    v_more uuid[];
    v_build record;
    v_cursors record;
    v_row record;
    v_rows tid[] := '{}';
    v_room integer;
    v_rest_queue uuid;
    v_rest uuid[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(c_lock) THEN
        PERFORM queen.figures_mark_v1(p_tenants, p_queues, p_partitions, p_ids);
        RETURN -1;
    END IF;
    -- The dirty rows while their partitions fit in p_limit (at most
    -- p_limit rows; only folds delete them, one at a time).
    v_ids := '{}';
    FOR v_row IN SELECT d.ctid AS tid, d.queue_id, d.partition_ids
                   FROM queen.figures_dirty d LIMIT greatest(p_limit, 0) LOOP
        v_room := p_limit - cardinality(v_ids);
        EXIT WHEN v_room <= 0;
        v_rows := v_rows || v_row.tid;
        IF cardinality(v_row.partition_ids) > v_room THEN
            v_ids := v_ids || v_row.partition_ids[1:v_room];
            v_rest_queue := v_row.queue_id;
            v_rest := v_row.partition_ids[v_room + 1:];
        ELSE
            v_ids := v_ids || v_row.partition_ids;
        END IF;
    END LOOP;
    DELETE FROM queen.figures_dirty d WHERE d.ctid = ANY (v_rows);
    IF v_rest IS NOT NULL THEN
        INSERT INTO queen.figures_dirty (queue_id, partition_ids) VALUES (v_rest_queue, v_rest);
    END IF;

    SELECT v_ids || array_agg(p.id) INTO v_ids
      FROM unnest(p_tenants, p_queues, p_partitions) AS m(tenant, queue, partition)
      JOIN queen.queues q ON q.tenant_id = m.tenant AND q.name = m.queue
      JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = m.partition;
    v_ids := COALESCE(v_ids, '{}'::uuid[]) || COALESCE(p_ids, '{}'::uuid[]);

    SELECT b.done, b.after_id INTO v_build FROM queen.figures_build b;
    IF p_verify > 0 THEN
        SELECT array_agg(x.id ORDER BY x.id) INTO v_more
          FROM (SELECT p.id FROM queen.log_partitions p
                 WHERE v_build.after_id IS NULL OR p.id > v_build.after_id
                 ORDER BY p.id LIMIT p_verify) AS x;
        IF COALESCE(cardinality(v_more), 0) < p_verify THEN
            -- The end of the partitions: the build is done, the cycle wraps.
            UPDATE queen.figures_build SET done = true, after_id = NULL;
        ELSE
            UPDATE queen.figures_build SET after_id = v_more[cardinality(v_more)];
        END IF;
        v_ids := COALESCE(v_ids, '{}'::uuid[]) || COALESCE(v_more, '{}'::uuid[]);
    END IF;
    -- The cursor figures' build pass, while it runs: the next p_verify
    -- partitions of its own walk.
    SELECT cb.done, cb.after_id INTO v_cursors FROM queen.figures_cursor_build cb;
    IF p_verify > 0 AND NOT v_cursors.done THEN
        SELECT array_agg(x.id ORDER BY x.id) INTO v_more
          FROM (SELECT p.id FROM queen.log_partitions p
                 WHERE v_cursors.after_id IS NULL OR p.id > v_cursors.after_id
                 ORDER BY p.id LIMIT p_verify) AS x;
        IF COALESCE(cardinality(v_more), 0) < p_verify THEN
            UPDATE queen.figures_cursor_build SET done = true, after_id = NULL;
        ELSE
            UPDATE queen.figures_cursor_build SET after_id = v_more[cardinality(v_more)];
        END IF;
        v_ids := COALESCE(v_ids, '{}'::uuid[]) || COALESCE(v_more, '{}'::uuid[]);
    END IF;

    SELECT array_agg(DISTINCT u) INTO v_ids FROM unnest(v_ids) AS u;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;

    WITH live AS (
        SELECT * FROM queen.figures_live_v1(v_ids)
    ), cmp AS (
        SELECT i.id, COALESCE(l.o_queue_id, f.queue_id) AS qid,
               (l.o_partition_id IS NOT NULL)::integer - (f.partition_id IS NOT NULL)::integer AS d_parts,
               COALESCE(l.o_total, 0) - COALESCE(f.total, 0) AS d_total,
               COALESCE(l.o_completed, 0) - COALESCE(f.completed, 0) AS d_completed,
               COALESCE(l.o_dead, 0) - COALESCE(f.dead, 0) AS d_dead,
               COALESCE(l.o_retrying, 0) - COALESCE(f.retrying, 0) AS d_retrying,
               l.o_partition_id IS NULL AS gone
          FROM unnest(v_ids) AS i(id)
          LEFT JOIN live l ON l.o_partition_id = i.id
          LEFT JOIN queen.figures_partition f ON f.partition_id = i.id
    ), kept AS (
        INSERT INTO queen.figures_partition AS f
               (partition_id, queue_id, total, completed, dead, retrying)
        SELECT l.o_partition_id, l.o_queue_id, l.o_total, l.o_completed, l.o_dead, l.o_retrying
          FROM live l
        ON CONFLICT (partition_id) DO UPDATE
           SET total = EXCLUDED.total, completed = EXCLUDED.completed,
               dead = EXCLUDED.dead, retrying = EXCLUDED.retrying
    ), dropped AS (
        DELETE FROM queen.figures_partition f
         USING cmp WHERE f.partition_id = cmp.id AND cmp.gone
    )
    INSERT INTO queen.figures_queue AS fq (queue_id, partitions, total, completed, dead, retrying)
    SELECT s.qid, s.parts, s.total, s.completed, s.dead, s.retrying
      FROM (SELECT c.qid, sum(c.d_parts)::bigint AS parts, sum(c.d_total)::bigint AS total,
                   sum(c.d_completed)::bigint AS completed, sum(c.d_dead)::bigint AS dead,
                   sum(c.d_retrying)::bigint AS retrying
              FROM cmp c
             WHERE c.qid IS NOT NULL
             GROUP BY c.qid) AS s
      -- A deleted queue's row went with it (ON DELETE CASCADE).
      JOIN queen.queues q ON q.id = s.qid
     WHERE s.parts <> 0 OR s.total <> 0 OR s.completed <> 0 OR s.dead <> 0 OR s.retrying <> 0
     ORDER BY s.qid
    ON CONFLICT (queue_id) DO UPDATE
       SET partitions = fq.partitions + EXCLUDED.partitions,
           total = fq.total + EXCLUDED.total,
           completed = fq.completed + EXCLUDED.completed,
           dead = fq.dead + EXCLUDED.dead,
           retrying = fq.retrying + EXCLUDED.retrying;

    -- The cursors of the same partitions: each kept row recomputed whole,
    -- and the per-(queue, group) cursor counts moved by the difference.
    WITH live AS (
        SELECT * FROM queen.figures_cursors_live_v1(v_ids)
    ), kept AS (
        SELECT f.partition_id, f.consumer_group, f.queue_id
          FROM queen.figures_cursor f
         WHERE f.partition_id = ANY (v_ids)
    ), dropped AS (
        DELETE FROM queen.figures_cursor f
         WHERE f.partition_id = ANY (v_ids)
           AND NOT EXISTS (SELECT 1 FROM live l
                            WHERE l.o_partition_id = f.partition_id AND l.o_group = f.consumer_group)
    ), written AS (
        INSERT INTO queen.figures_cursor AS f (partition_id, consumer_group, queue_id, lag, oldest_at)
        SELECT l.o_partition_id, l.o_group, l.o_queue_id, l.o_lag, l.o_oldest_at
          FROM live l
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
           SET lag = EXCLUDED.lag, oldest_at = EXCLUDED.oldest_at
         WHERE f.lag IS DISTINCT FROM EXCLUDED.lag OR f.oldest_at IS DISTINCT FROM EXCLUDED.oldest_at
    )
    INSERT INTO queen.figures_group AS g (queue_id, consumer_group, cursors)
    SELECT d.qid, d.grp, d.n
      FROM (SELECT COALESCE(l.o_queue_id, k.queue_id) AS qid,
                   COALESCE(l.o_group, k.consumer_group) AS grp,
                   sum((l.o_partition_id IS NOT NULL)::integer
                       - (k.partition_id IS NOT NULL)::integer)::bigint AS n
              FROM live l
              FULL JOIN kept k ON k.partition_id = l.o_partition_id AND k.consumer_group = l.o_group
             GROUP BY 1, 2) AS d
      -- A deleted queue's rows went with it (ON DELETE CASCADE).
      JOIN queen.queues q ON q.id = d.qid
     WHERE d.n <> 0
     ORDER BY 1, 2
    ON CONFLICT (queue_id, consumer_group) DO UPDATE SET cursors = g.cursors + EXCLUDED.cursors;
    RETURN cardinality(v_ids);
END
$$;

-- queen.figures_queue_counts_v1: per queue of the tenant (of the filters)
-- that has partitions, what admin_partition_stats_v2 summed over them
-- answers: partitions, total, pending, processing, completed, failed, dead,
-- and of the live leases: how many, on how many partitions, their batches
-- and what of those is acked. Reads the kept rows, the partitions the dirty
-- rows of these queues name, and the live leases (idx_log_consumers_worker):
-- its cost follows the queues, the writes since the last fold and the leases
-- held, not the partitions. Until the build pass is done it sums the scan.
CREATE OR REPLACE FUNCTION queen.figures_queue_counts_v1(
    p_tenant    text,
    p_queue     text,
    p_namespace text,
    p_task      text
) RETURNS TABLE (
    o_queue_id           uuid,
    o_partitions         bigint,
    o_total              bigint,
    o_pending            bigint,
    o_processing         bigint,
    o_completed          bigint,
    o_failed             bigint,
    o_dead               bigint,
    o_leases             bigint,
    o_leased_partitions  bigint,
    o_lease_batch        bigint,
    o_lease_acked        bigint
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_dirty uuid[];
BEGIN
    IF NOT COALESCE((SELECT b.done FROM queen.figures_build b), false) THEN
        RETURN QUERY
        SELECT a.o_queue_id, count(*)::bigint, sum(a.o_total)::bigint, sum(a.o_pending)::bigint,
               sum(a.o_processing)::bigint, sum(a.o_completed)::bigint, sum(a.o_failed)::bigint,
               sum(a.o_dead_letter)::bigint, sum(a.o_leases)::bigint,
               count(*) FILTER (WHERE a.o_leases > 0)::bigint,
               sum(a.o_lease_batch)::bigint, sum(a.o_lease_acked)::bigint
          FROM queen.admin_partition_stats_v2(p_tenant, p_queue, p_namespace, p_task) a
         GROUP BY a.o_queue_id;
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT u) INTO v_dirty
      FROM queen.queues q
      JOIN queen.figures_dirty d ON d.queue_id = q.id
      CROSS JOIN LATERAL unnest(d.partition_ids) AS u
     WHERE q.tenant_id = p_tenant
       AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task);
    RETURN QUERY
    WITH qs AS (
        SELECT q.id FROM queen.queues q
         WHERE q.tenant_id = p_tenant
           AND (p_queue IS NULL OR q.name = p_queue)
           AND (p_namespace IS NULL OR q.namespace = p_namespace)
           AND (p_task IS NULL OR q.task = p_task)
    ), live AS (
        SELECT * FROM queen.figures_live_v1(v_dirty)
    ), delta AS (
        -- The dirty partitions: live minus kept.
        SELECT COALESCE(l.o_queue_id, f.queue_id) AS qid,
               sum((l.o_partition_id IS NOT NULL)::integer - (f.partition_id IS NOT NULL)::integer)::bigint AS parts,
               sum(COALESCE(l.o_total, 0) - COALESCE(f.total, 0))::bigint AS total,
               sum(COALESCE(l.o_completed, 0) - COALESCE(f.completed, 0))::bigint AS completed,
               sum(COALESCE(l.o_dead, 0) - COALESCE(f.dead, 0))::bigint AS dead,
               sum(COALESCE(l.o_retrying, 0) - COALESCE(f.retrying, 0))::bigint AS retrying
          FROM unnest(v_dirty) AS i(id)
          LEFT JOIN live l ON l.o_partition_id = i.id
          LEFT JOIN queen.figures_partition f ON f.partition_id = i.id
         GROUP BY 1
    ), leased AS (
        -- The partitions holding a live lease (the partial index's rows).
        SELECT lc.partition_id AS pid,
               count(*)::bigint AS leases,
               sum(lc.batch_end - least(COALESCE(lc.attempt_offset - 1, lc.committed), lc.committed))::bigint AS batch,
               sum(greatest(lc.committed - least(COALESCE(lc.attempt_offset - 1, lc.committed), lc.committed), 0))::bigint AS acked
          FROM queen.log_consumers lc
         WHERE lc.worker_id IS NOT NULL
           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
           AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL
         GROUP BY lc.partition_id
    ), lease_rows AS (
        -- Per leased partition: processing is the least advanced cursor's
        -- live lease, and pending is clamped at 0 per partition, as the
        -- scan counts them.
        SELECT l.o_queue_id AS qid, x.leases, x.batch, x.acked, h.leased AS processing,
               greatest(h.leased - (l.o_total - l.o_completed), 0) AS excess
          FROM leased x
          JOIN queen.figures_live_v1(ARRAY(SELECT pid FROM leased)) l ON l.o_partition_id = x.pid
          CROSS JOIN LATERAL (
              SELECT CASE WHEN lc.worker_id IS NOT NULL
                               AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
                               AND lc.lease_expires_at > v_now AND lc.batch_end IS NOT NULL
                          THEN greatest(lc.batch_end - lc.committed, 0) ELSE 0 END::bigint AS leased
                FROM queen.log_consumers lc
               WHERE lc.partition_id = x.pid
               ORDER BY lc.committed
               LIMIT 1) AS h
    ), leases AS (
        SELECT r.qid, sum(r.leases)::bigint AS leases, count(*)::bigint AS parts,
               sum(r.batch)::bigint AS batch, sum(r.acked)::bigint AS acked,
               sum(r.processing)::bigint AS processing, sum(r.excess)::bigint AS excess
          FROM lease_rows r
         GROUP BY r.qid
    ), sums AS (
        SELECT qs.id,
               COALESCE(fq.partitions, 0) + COALESCE(d.parts, 0) AS parts,
               COALESCE(fq.total, 0) + COALESCE(d.total, 0) AS total,
               COALESCE(fq.completed, 0) + COALESCE(d.completed, 0) AS completed,
               COALESCE(fq.dead, 0) + COALESCE(d.dead, 0) AS dead,
               COALESCE(fq.retrying, 0) + COALESCE(d.retrying, 0) AS retrying,
               COALESCE(ls.leases, 0) AS leases, COALESCE(ls.parts, 0) AS leased_parts,
               COALESCE(ls.batch, 0) AS batch, COALESCE(ls.acked, 0) AS acked,
               COALESCE(ls.processing, 0) AS processing, COALESCE(ls.excess, 0) AS excess
          FROM qs
          LEFT JOIN queen.figures_queue fq ON fq.queue_id = qs.id
          LEFT JOIN delta d ON d.qid = qs.id
          LEFT JOIN leases ls ON ls.qid = qs.id
    )
    SELECT s.id, s.parts, s.total,
           s.total - s.completed - s.processing + s.excess,
           s.processing, s.completed, s.dead + s.retrying, s.dead,
           s.leases, s.leased_parts, s.batch, s.acked
      FROM sums s
     WHERE s.parts > 0;
END
$$;

-- queen.figures_queue_depth_v1: the depth of queue p_qid that maxSize
-- bounds (log_queue_depth_v1's answer: per partition, the live messages
-- after its least advanced cursor) from the kept figures: the queue's kept
-- row (total - completed) plus, for each partition its dirty rows name, the
-- live figure less the kept one. Costs the queue's changes since the last
-- fold, not its partitions. Every push to a bounded queue marks its
-- partition in its own transaction (log_push_v2, step 5b), so a push counts
-- at once; a consumption counts once its broker marked it (at that broker's
-- next fold, or when a refused push makes it write its marks), so the depth
-- may be over-counted for that long, never under-counted. Until the build
-- pass is done it is log_queue_depth_v1's scan.
CREATE OR REPLACE FUNCTION queen.figures_queue_depth_v1(p_qid uuid)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_dirty uuid[];
    v_kept  bigint;
BEGIN
    IF NOT COALESCE((SELECT b.done FROM queen.figures_build b), false) THEN
        RETURN queen.log_queue_depth_v1(p_qid);
    END IF;
    SELECT array_agg(DISTINCT u) INTO v_dirty
      FROM queen.figures_dirty d
      CROSS JOIN LATERAL unnest(d.partition_ids) AS u
     WHERE d.queue_id = p_qid;
    SELECT fq.total - fq.completed INTO v_kept
      FROM queen.figures_queue fq
     WHERE fq.queue_id = p_qid;
    RETURN COALESCE(v_kept, 0) + COALESCE((
        SELECT sum(COALESCE(l.o_total - l.o_completed, 0) - COALESCE(f.total - f.completed, 0))
          FROM unnest(v_dirty) AS i(id)
          LEFT JOIN queen.figures_live_v1(v_dirty) l ON l.o_partition_id = i.id
          LEFT JOIN queen.figures_partition f ON f.partition_id = i.id), 0)::bigint;
END
$$;

-- queen.figures_oldest_at_v1: when the oldest message after offset
-- p_committed of partition p_pid was written: the segment holding
-- p_committed + 1 (one backward index step), or where retention left a gap
-- the next live segment; NULL when there is none. What
-- consumer_group_cursors_v1 computes per cursor.
CREATE OR REPLACE FUNCTION queen.figures_oldest_at_v1(p_pid uuid, p_committed bigint)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN COALESCE(
        (SELECT b.created_at
           FROM (SELECT s.created_at, s.end_offset
                   FROM queen.log_segments s
                  WHERE s.partition_id = p_pid AND s.base_offset <= p_committed + 1
                  ORDER BY s.base_offset DESC
                  LIMIT 1) AS b
          WHERE b.end_offset >= p_committed + 1),
        (SELECT s.created_at
           FROM queen.log_segments s
          WHERE s.partition_id = p_pid AND s.base_offset > p_committed + 1
          ORDER BY s.base_offset
          LIMIT 1));
END
$$;

-- queen.figures_cursors_live_v1: the cursors of the partitions p_ids, with
-- their lag (messages after the cursor) and, when they lag, when the oldest
-- of those was written: what figures_cursor keeps. One probe per cursor.
CREATE OR REPLACE FUNCTION queen.figures_cursors_live_v1(p_ids uuid[])
RETURNS TABLE (
    o_partition_id uuid,
    o_group        text,
    o_queue_id     uuid,
    o_lag          bigint,
    o_oldest_at    timestamptz
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT c.partition_id, c.consumer_group, p.queue_id,
           greatest(p.last_offset - c.committed, 0)::bigint,
           CASE WHEN p.last_offset > c.committed
                THEN queen.figures_oldest_at_v1(p.id, c.committed) END
      FROM queen.log_consumers c
      JOIN queen.log_partitions p ON p.id = c.partition_id
     WHERE c.partition_id = ANY (p_ids);
END
$$;

-- queen.figures_cursors_built_v1: true once the kept cursor figures can be
-- read (both build passes done).
CREATE OR REPLACE FUNCTION queen.figures_cursors_built_v1()
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN COALESCE((SELECT b.done FROM queen.figures_build b), false)
       AND COALESCE((SELECT cb.done FROM queen.figures_cursor_build cb), false);
END
$$;

-- queen.figures_tenant_dirty_v1: the partitions the dirty rows of the
-- tenant's queues name, each once ('{}' when none).
CREATE OR REPLACE FUNCTION queen.figures_tenant_dirty_v1(p_tenant text)
RETURNS uuid[]
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (SELECT COALESCE(array_agg(DISTINCT u), '{}'::uuid[])
              FROM queen.queues q
              JOIN queen.figures_dirty d ON d.queue_id = q.id
              CROSS JOIN LATERAL unnest(d.partition_ids) AS u
             WHERE q.tenant_id = p_tenant);
END
$$;

-- queen.figures_lagging_kept_v1: the kept cursor rows with lag (the
-- partial index) of the tenant's queues whose partitions p_dirty does not
-- name: figures_lagging_v1 less the dirty partitions' live cursors.
CREATE OR REPLACE FUNCTION queen.figures_lagging_kept_v1(p_tenant text, p_dirty uuid[])
RETURNS TABLE (
    o_queue_id     uuid,
    o_group        text,
    o_partition_id uuid,
    o_lag          bigint,
    o_oldest_at    timestamptz
)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT f.queue_id, f.consumer_group, f.partition_id, f.lag, f.oldest_at
      FROM queen.queues q
      JOIN queen.figures_cursor f ON f.queue_id = q.id AND f.lag > 0
     WHERE q.tenant_id = p_tenant
       AND NOT (f.partition_id = ANY (p_dirty));
END
$$;

-- queen.figures_lagging_v1: the cursors with lag of the tenant's queues:
-- the kept rows with lag (the partial index) of the partitions no dirty row
-- names, and the dirty partitions' cursors counted live. Its cost follows
-- the lagging cursors and the writes since the last fold. Read only once
-- figures_cursors_built_v1 (the callers fall back to a scan before).
CREATE OR REPLACE FUNCTION queen.figures_lagging_v1(p_tenant text)
RETURNS TABLE (
    o_queue_id     uuid,
    o_group        text,
    o_partition_id uuid,
    o_lag          bigint,
    o_oldest_at    timestamptz
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_dirty uuid[] := queen.figures_tenant_dirty_v1(p_tenant);
BEGIN
    RETURN QUERY
    SELECT * FROM queen.figures_lagging_kept_v1(p_tenant, v_dirty)
    UNION ALL
    SELECT l.o_queue_id, l.o_group, l.o_partition_id, l.o_lag, l.o_oldest_at
      FROM queen.figures_cursors_live_v1(v_dirty) l
     WHERE l.o_lag > 0;
END
$$;

-- queen.figures_lag_values_v1: per cursor with lag of the tenant's queues,
-- its time lag (seconds since its oldest unconsumed message was written,
-- 0 when unknown) and offset lag: what the overview summarises. Kept
-- figures once built, else consumer_group_cursors_v1's scan.
CREATE OR REPLACE FUNCTION queen.figures_lag_values_v1(p_tenant text)
RETURNS TABLE (o_time_lag double precision, o_offset_lag double precision)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF NOT queen.figures_cursors_built_v1() THEN
        RETURN QUERY
        SELECT c.o_time_lag_seconds::double precision, c.o_offset_lag::double precision
          FROM queen.consumer_group_cursors_v1(p_tenant, NULL, NULL) c
         WHERE c.o_offset_lag > 0;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT CASE WHEN l.o_oldest_at IS NULL THEN 0::double precision
                ELSE greatest(floor(extract(epoch FROM v_now - l.o_oldest_at)), 0)::double precision END,
           l.o_lag::double precision
      FROM queen.figures_lagging_v1(p_tenant) l;
END
$$;

-- queen.figures_group_counts_v1: per (queue, group) of the tenant with a
-- cursor: its cursors, live leases, cursors with lag, their summed lag and
-- the largest time lag (seconds), as a scan of consumer_group_cursors_v1
-- would sum them. Kept figures once built (figures_group, plus the dirty
-- partitions' cursors live, the lagging cursors, the live-lease index),
-- else that scan.
CREATE OR REPLACE FUNCTION queen.figures_group_counts_v1(p_tenant text)
RETURNS TABLE (
    o_queue        text,
    o_group        text,
    o_cursors      bigint,
    o_leases       bigint,
    o_lagging      bigint,
    o_lag          bigint,
    o_max_time_lag bigint
)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_dirty uuid[];
BEGIN
    IF NOT queen.figures_cursors_built_v1() THEN
        RETURN QUERY
        SELECT c.o_queue, c.o_group, count(*)::bigint,
               count(*) FILTER (WHERE c.o_lease_active)::bigint,
               count(*) FILTER (WHERE c.o_offset_lag > 0)::bigint,
               COALESCE(sum(c.o_offset_lag), 0)::bigint,
               COALESCE(max(c.o_time_lag_seconds), 0)::bigint
          FROM queen.consumer_group_cursors_v1(p_tenant, NULL, NULL) c
         GROUP BY c.o_queue, c.o_group;
        RETURN;
    END IF;
    v_dirty := queen.figures_tenant_dirty_v1(p_tenant);
    RETURN QUERY
    WITH live AS MATERIALIZED (
        -- The dirty partitions' cursors, probed once for both uses below.
        SELECT * FROM queen.figures_cursors_live_v1(v_dirty)
    ), delta AS (
        -- The dirty partitions' cursors: live minus kept.
        SELECT COALESCE(l.o_queue_id, f.queue_id) AS qid,
               COALESCE(l.o_group, f.consumer_group) AS grp,
               sum((l.o_partition_id IS NOT NULL)::integer
                   - (f.partition_id IS NOT NULL)::integer)::bigint AS n
          FROM live AS l
          FULL JOIN (SELECT * FROM queen.figures_cursor k WHERE k.partition_id = ANY (v_dirty)) AS f
            ON f.partition_id = l.o_partition_id AND f.consumer_group = l.o_group
         GROUP BY 1, 2
    ), counts AS (
        SELECT COALESCE(g.queue_id, d.qid) AS qid, COALESCE(g.consumer_group, d.grp) AS grp,
               COALESCE(g.cursors, 0) + COALESCE(d.n, 0) AS cursors
          FROM (SELECT g0.* FROM queen.figures_group g0
                  JOIN queen.queues q0 ON q0.id = g0.queue_id AND q0.tenant_id = p_tenant) AS g
          FULL JOIN delta d ON d.qid = g.queue_id AND d.grp = g.consumer_group
    ), lagging AS (
        SELECT l.o_queue_id AS qid, l.o_group AS grp, count(*)::bigint AS n,
               sum(l.o_lag)::bigint AS lag,
               max(CASE WHEN l.o_oldest_at IS NULL THEN 0::bigint
                        ELSE greatest(floor(extract(epoch FROM v_now - l.o_oldest_at)), 0)::bigint
                   END) AS time_lag
          FROM (SELECT * FROM queen.figures_lagging_kept_v1(p_tenant, v_dirty)
                UNION ALL
                SELECT v.o_queue_id, v.o_group, v.o_partition_id, v.o_lag, v.o_oldest_at
                  FROM live v WHERE v.o_lag > 0) AS l
         GROUP BY 1, 2
    ), leases AS (
        -- The live leases (the partial index's rows); the nil worker is a
        -- retryDelay hold, no lease.
        SELECT p.queue_id AS qid, lc.consumer_group AS grp, count(*)::bigint AS n
          FROM queen.log_consumers lc
          JOIN queen.log_partitions p ON p.id = lc.partition_id
         WHERE lc.worker_id IS NOT NULL
           AND lc.worker_id <> '00000000-0000-0000-0000-000000000000'::uuid
           AND lc.lease_expires_at > v_now
         GROUP BY 1, 2
    )
    SELECT q.name, c.grp, c.cursors, COALESCE(ls.n, 0), COALESCE(lg.n, 0),
           COALESCE(lg.lag, 0), COALESCE(lg.time_lag, 0)
      FROM counts c
      JOIN queen.queues q ON q.id = c.qid
      LEFT JOIN lagging lg ON lg.qid = c.qid AND lg.grp = c.grp
      LEFT JOIN leases ls ON ls.qid = c.qid AND ls.grp = c.grp
     WHERE c.cursors > 0;
END
$$;

-- queen.figures_watch_v1: a folding broker's word, once a pass, before
-- its first fold step (figures_pass_v1). It says broker p_broker is alive for
-- p_alive_ms more (its figures_brokers row, rewritten only when a quarter
-- of that has passed, so most passes write nothing); p_lost says it
-- dropped a mark. A row past its time names a broker that died holding
-- marks: it is deleted. A loss of either kind starts the verify cycle over
-- (figures_verify); while it is pending, each call marks the next p_verify
-- partitions in id order dirty, for the fold to re-count, until the walk
-- ends. Answers whether a build pass (figures_build, figures_cursor_build)
-- is still to be walked.
CREATE OR REPLACE FUNCTION queen.figures_watch_v1(
    p_broker   uuid,
    p_lost     boolean,
    p_verify   integer,
    p_alive_ms integer
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_alive interval := make_interval(secs => p_alive_ms / 1000.0);
    v_lost boolean := p_lost;
    v_state record;
    v_more uuid[];
BEGIN
    INSERT INTO queen.figures_brokers AS b (broker_id, expires_at) VALUES (p_broker, v_now + v_alive)
    ON CONFLICT (broker_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
     WHERE b.expires_at < v_now + v_alive * 0.75;
    IF EXISTS (SELECT 1 FROM queen.figures_brokers b WHERE b.expires_at < v_now) THEN
        DELETE FROM queen.figures_brokers b WHERE b.expires_at < v_now;
        v_lost := true;
    END IF;
    IF v_lost THEN
        UPDATE queen.figures_verify SET pending = true, after_id = NULL;
    END IF;
    SELECT v.pending, v.after_id INTO v_state FROM queen.figures_verify v;
    IF v_state.pending AND p_verify > 0 THEN
        -- One walker at a time: the row lock, then the state again.
        SELECT v.pending, v.after_id INTO v_state FROM queen.figures_verify v FOR UPDATE;
    END IF;
    IF v_state.pending AND p_verify > 0 THEN
        IF v_state.after_id IS NULL THEN
            SELECT array_agg(x.id ORDER BY x.id) INTO v_more
              FROM (SELECT p.id FROM queen.log_partitions p ORDER BY p.id LIMIT p_verify) AS x;
        ELSE
            SELECT array_agg(x.id ORDER BY x.id) INTO v_more
              FROM (SELECT p.id FROM queen.log_partitions p
                     WHERE p.id > v_state.after_id ORDER BY p.id LIMIT p_verify) AS x;
        END IF;
        INSERT INTO queen.figures_dirty (queue_id, partition_ids)
        SELECT p.queue_id, array_agg(p.id)
          FROM queen.log_partitions p
         WHERE p.id = ANY (v_more)
         GROUP BY p.queue_id;
        IF COALESCE(cardinality(v_more), 0) < p_verify THEN
            UPDATE queen.figures_verify SET pending = false, after_id = NULL;
        ELSE
            UPDATE queen.figures_verify SET after_id = v_more[cardinality(v_more)];
        END IF;
    END IF;
    RETURN NOT (COALESCE((SELECT b.done FROM queen.figures_build b), false)
                AND COALESCE((SELECT cb.done FROM queen.figures_cursor_build cb), false));
END
$$;

-- queen.figures_leave_v1: broker p_broker exits cleanly (its marks are
-- written): its row goes, and starts no verify cycle.
CREATE OR REPLACE FUNCTION queen.figures_leave_v1(p_broker uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM queen.figures_brokers b WHERE b.broker_id = p_broker;
END
$$;

-- queen.figures_pass_v1: the first step of a broker's fold pass, in one
-- statement: figures_watch_v1 (alive, a loss, the verify cycle's next
-- partitions marked dirty), then figures_fold_v2 of the dirty rows, the
-- broker's marks and, while a build pass is to walk, its next p_verify
-- partitions. Returns what the fold returns.
CREATE OR REPLACE FUNCTION queen.figures_pass_v1(
    p_limit      integer,
    p_verify     integer,
    p_tenants    text[],
    p_queues     text[],
    p_partitions text[],
    p_ids        uuid[],
    p_broker     uuid,
    p_lost       boolean,
    p_alive_ms   integer
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_building boolean;
BEGIN
    -- On Citus nothing is kept, so nothing is folded (see figures_mark_v1).
    IF current_setting('queen.citus', true) = 'on' THEN
        RETURN 0;
    END IF;
    v_building := queen.figures_watch_v1(p_broker, p_lost, p_verify, p_alive_ms);
    RETURN queen.figures_fold_v2(p_limit, CASE WHEN v_building THEN p_verify ELSE 0 END,
                                 p_tenants, p_queues, p_partitions, p_ids);
END
$$;
