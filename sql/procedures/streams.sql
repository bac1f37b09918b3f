-- procedures/streams.sql: the streaming SDKs' queries and state
-- (wire-api.md §6; tables in schema/008_streams.sql).
--
--   queen_streams.register_query_v1  register a query, or find it again
--   queen_streams.state_get_v1       a (query, partition)'s state rows

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
