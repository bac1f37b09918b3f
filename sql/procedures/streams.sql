-- procedures/streams.sql: the streaming SDKs' queries and state
-- (wire-api.md §6; tables in schema/008_streams.sql).
--
--   queen_streams.register_query_v1  register a query, or find it again
--   queen_streams.state_get_v1       a (query, partition)'s state rows
--   queen_streams.state_get_v2       the same, also filtered by window end
--                                    (the idle flush's ripe windows)

-- Register query (tenant, name) reading p_source (writing p_sink) with
-- operator configuration hash p_hash. o_status:
--   created   a new query (o_query_id is p_new_id);
--   same      it exists with this hash: nothing changes;
--   reset     it existed and p_reset: its state is wiped and the new hash,
--             source and sink stored;
--   mismatch  it exists with another hash and no reset: nothing changes
--             (o_hash is the stored one).
-- The row is locked while it is compared, so two registrations of one name
-- serialise; a row deleted meanwhile (the SDK harnesses delete rows by hand)
-- is created again.
CREATE OR REPLACE FUNCTION queen_streams.register_query_v1(
    p_tenant text,
    p_name   text,
    p_source text,
    p_sink   text,
    p_hash   text,
    p_reset  boolean,
    p_new_id uuid
) RETURNS TABLE (o_query_id uuid, o_status text, o_hash text)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_id   uuid;
    v_hash text;
BEGIN
    LOOP
        INSERT INTO queen_streams.queries (id, tenant_id, name, source_queue, sink_queue, config_hash)
        VALUES (p_new_id, p_tenant, p_name, p_source, p_sink, p_hash)
        ON CONFLICT (tenant_id, name) DO NOTHING;
        IF FOUND THEN
            o_query_id := p_new_id; o_status := 'created'; o_hash := p_hash;
            RETURN NEXT;
            RETURN;
        END IF;
        SELECT q.id, q.config_hash INTO v_id, v_hash
          FROM queen_streams.queries q
         WHERE q.tenant_id = p_tenant AND q.name = p_name
           FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    o_query_id := v_id;
    IF p_reset THEN
        DELETE FROM queen_streams.state s WHERE s.query_id = v_id;
        UPDATE queen_streams.queries q
           SET config_hash = p_hash, source_queue = p_source, sink_queue = p_sink,
               updated_at = now()
         WHERE q.id = v_id;
        o_status := 'reset'; o_hash := p_hash;
    ELSIF v_hash = p_hash THEN
        o_status := 'same'; o_hash := v_hash;
    ELSE
        o_status := 'mismatch'; o_hash := v_hash;
    END IF;
    RETURN NEXT;
END;
$$;

-- The state rows of (p_query, p_partition) within the tenant: those named in
-- p_keys, or those whose key starts with p_prefix, or all of them (both
-- NULL or empty); by key.
CREATE OR REPLACE FUNCTION queen_streams.state_get_v1(
    p_tenant    text,
    p_query     uuid,
    p_partition uuid,
    p_keys      text[],
    p_prefix    text
) RETURNS TABLE (o_key text, o_value jsonb, o_updated_at timestamptz)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT s.key, s.value, s.updated_at
      FROM queen_streams.state s
      JOIN queen_streams.queries q ON q.id = s.query_id
     WHERE q.tenant_id = p_tenant
       AND s.query_id = p_query AND s.partition_id = p_partition
       AND (coalesce(cardinality(p_keys), 0) = 0 OR s.key = ANY (p_keys))
       AND (coalesce(p_prefix, '') = '' OR starts_with(s.key, p_prefix))
     ORDER BY s.key;
END;
$$;

-- state_get_v1 with the idle flush's filter: p_ripe NOT NULL keeps only the
-- rows whose value has a numeric windowEnd at or before p_ripe (epoch ms), as
-- the SDK runners ask for windows whose end plus grace period has passed; a
-- row without a numeric windowEnd (a session, a watermark) is not ripe. The
-- comparison is numeric, so a windowEnd beyond float8's range cannot fail
-- the read; the CASE keeps the cast off non-numbers. v1 stays for brokers of
-- the previous version during a rolling upgrade.
CREATE OR REPLACE FUNCTION queen_streams.state_get_v2(
    p_tenant    text,
    p_query     uuid,
    p_partition uuid,
    p_keys      text[],
    p_prefix    text,
    p_ripe      double precision
) RETURNS TABLE (o_key text, o_value jsonb, o_updated_at timestamptz)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT s.key, s.value, s.updated_at
      FROM queen_streams.state s
      JOIN queen_streams.queries q ON q.id = s.query_id
     WHERE q.tenant_id = p_tenant
       AND s.query_id = p_query AND s.partition_id = p_partition
       AND (coalesce(cardinality(p_keys), 0) = 0 OR s.key = ANY (p_keys))
       AND (coalesce(p_prefix, '') = '' OR starts_with(s.key, p_prefix))
       AND (p_ripe IS NULL
            OR CASE WHEN jsonb_typeof(s.value -> 'windowEnd') = 'number'
                    THEN (s.value -> 'windowEnd')::numeric <= p_ripe::numeric
                    ELSE false
               END)
     ORDER BY s.key;
END;
$$;

-- A cycle's state writes for (p_query, p_partition): upsert p_keys[i] :=
-- p_values[i] (one statement for all of them) and delete p_delete (another);
-- the broker has already folded the cycle's ops so each key appears once.
-- Answers how many rows were written and removed.
CREATE OR REPLACE FUNCTION queen_streams.state_apply_v1(
    p_query     uuid,
    p_partition uuid,
    p_keys      text[],
    p_values    jsonb[],
    p_delete    text[]
) RETURNS TABLE (o_upserted bigint, o_deleted bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    o_upserted := 0;
    o_deleted := 0;
    IF coalesce(cardinality(p_keys), 0) > 0 THEN
        INSERT INTO queen_streams.state AS s (query_id, partition_id, key, value, updated_at)
        SELECT p_query, p_partition, u.k, u.v, now()
          FROM unnest(p_keys, p_values) AS u(k, v)
        ON CONFLICT (query_id, partition_id, key)
        DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
        GET DIAGNOSTICS o_upserted = ROW_COUNT;
    END IF;
    IF coalesce(cardinality(p_delete), 0) > 0 THEN
        DELETE FROM queen_streams.state s
         WHERE s.query_id = p_query AND s.partition_id = p_partition
           AND s.key = ANY (p_delete);
        GET DIAGNOSTICS o_deleted = ROW_COUNT;
    END IF;
    RETURN NEXT;
END;
$$;

-- The source queue of query p_query within the tenant, locking the query
-- row for the cycle (a reset or a delete of the query waits for it); NULL
-- when there is no such query.
CREATE OR REPLACE FUNCTION queen_streams.cycle_query_v1(p_tenant text, p_query uuid)
RETURNS text
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_source text;
BEGIN
    SELECT q.source_queue INTO v_source
      FROM queen_streams.queries q
     WHERE q.tenant_id = p_tenant AND q.id = p_query
       FOR SHARE;
    RETURN v_source;
END;
$$;

-- Release lease p_lease on (p_partition, p_group), if it still holds the
-- cursor (a cycle that acked part of a batch and gives the rest back).
-- Answers whether it did.
CREATE OR REPLACE FUNCTION queen_streams.release_lease_v1(
    p_partition uuid,
    p_group     text,
    p_lease     uuid
) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    UPDATE queen.log_consumers c
       SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_end = NULL
     WHERE c.partition_id = p_partition AND c.consumer_group = p_group AND c.worker_id = p_lease;
    RETURN FOUND;
END;
$$;
