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
