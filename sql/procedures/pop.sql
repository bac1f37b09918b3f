-- procedures/pop.sql: the pop path (life-of-a-pop.md).
--
-- A pop answers one question under a row lock: which offsets may this consumer
-- group take from this partition right now. queen.log_pop_v1 answers it for
-- one partition; every pop shape funnels into it:
--   log_pop_specific_v1  the single-partition route;
--   log_pop_list_v1      a list of candidate partitions (the hot-list path);
--   log_pop_wildcard_v1  the SQL candidate scan (QUEEN_HOTLIST=0), with the
--                        empty-scan watermark.
-- log_group_first_contact_v1 registers a (queue, group) and bulk-seeds its
-- cursors once; log_subscribe_early_v1 provisions a queue a group subscribes
-- to before its first push; log_has_pending_v1 is the cheap "anything at all?" probe;
-- log_seek_offset_v1 maps a timestamp to a cursor position;
-- log_rewind_auto_ack_v1 gives back an auto-acked claim the broker could not
-- deliver.
--
-- Every function that reads a table is plpgsql: a LANGUAGE sql body is
-- analysed when it is created, which takes locks on the tables it names, and
-- this file is re-applied at every boot while other brokers serve traffic.
--
-- Nothing here waits on another transaction: claims use FOR UPDATE SKIP
-- LOCKED, cursor creation uses a try-lock, and every non-happy edge leaves at
-- once (a wildcard pop keeps its transaction open across its whole candidate
-- loop, so one wait would chain into others). log_pending_count_v1 answers
-- minPopWaitTime's "would the batch be full?".
--
-- Rows a pop returns are raw segment rows plus slicing bounds
-- (base_offset, start_idx, take, msg_count, created_at, blob); the broker
-- decompresses and slices frames. PostgreSQL never looks inside a blob.
-- Besides segment rows, every visited partition yields one 'verdict' row that
-- the broker checks back into its hot-list:
--   delivered  messages were taken and more are pending
--   drained    messages were taken, and they were the last visible ones
--              (o_revisit_at: the lease expiry of a leased batch; for an
--              auto-acked one, when a delayedProcessing tail shows, if any)
--   empty      nothing pending for this group
--   leased     another worker holds the lease (o_revisit_at: its expiry)
--   busy       the cursor row is being created or claimed by someone else
--   deferred   pending, but windowBuffer holds it: the partition is not
--              quiet yet (o_revisit_at: when it will be)
--   delayed    pending, but delayedProcessing hides it (o_revisit_at: when
--              it becomes visible)
--   missing    (log_pop_list_v1) no partition of that name in the queue;
--              o_partition_id is NULL

-- The row the three pop routes return (log_pop_list_v1, and the two built on
-- it, log_pop_specific_v1 and log_pop_wildcard_v1): log_pop_v1's columns
-- behind the partition's id and name. log_pop_v1 keeps its own nine-column
-- RETURNS TABLE on purpose: an older log_pop_list_v1 still running in another
-- session when the upgrade commits reads log_pop_v1's rows by position, and
-- must find the shape it was written for. The attribute names and types are
-- the ones the three returned as RETURNS TABLE before this type existed, in
-- the same order: a broker still running when the upgrade commits (whose
-- prepared statements expect exactly those result columns) keeps working. Changing an attribute is a new type and new function
-- versions, never an ALTER TYPE.
DO $$
BEGIN
    IF to_regtype('queen.log_pop_row') IS NULL THEN
        CREATE TYPE queen.log_pop_row AS (
            o_partition_id   uuid,
            o_partition_name text,
            o_kind           text,
            o_base_offset    bigint,
            o_start_idx      integer,
            o_take           integer,
            o_msg_count      integer,
            o_created_at     timestamptz,
            o_blob           bytea,
            o_verdict        text,
            o_revisit_at     timestamptz
        );
    END IF;
END $$;

-- CREATE OR REPLACE cannot change a function's return type, so pop functions
-- left by an older schema (which returned RETURNS TABLE) are dropped here and
-- recreated below. This file runs inside the applier's one transaction: other
-- sessions see the old functions until the commit and the new ones after it,
-- never neither. A drop takes no lock on any table, and nothing depends on
-- these functions (plpgsql callers resolve them by name at run time). On a
-- schema that is already current this loop finds nothing and drops nothing.
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'queen'
           AND p.proname IN ('log_pop_list_v1', 'log_pop_specific_v1', 'log_pop_wildcard_v1')
           AND (p.prorettype <> 'queen.log_pop_row'::regtype OR NOT p.proretset)
    LOOP
        EXECUTE format('DROP FUNCTION %s', v_fn);
    END LOOP;
END $$;

-- The cursor position just before the first segment at or after p_ts: a
-- forward walk on the primary key from the retention watermark (created_at is
-- monotone in base_offset, so the first match is the answer). Nothing that
-- recent: last_offset (future only).
CREATE OR REPLACE FUNCTION queen.log_seek_offset_v1(p_pid uuid, p_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (
        SELECT COALESCE(
            (SELECT s.base_offset - 1
               FROM queen.log_segments s
              WHERE s.partition_id = p.id
                AND s.base_offset >= p.log_start
                AND s.created_at >= p_ts
              ORDER BY s.base_offset
              LIMIT 1),
            p.last_offset)
          FROM queen.log_partitions p
         WHERE p.id = p_pid);
END;
$$;

-- Where a new cursor starts (life-of-a-pop step 3), in order of preference:
-- the durable subscription record of (group, queue); the pop-carried intent
-- (a timestamp, or 'new' = skip the existing backlog); otherwise just before
-- log_start, deliver everything retained. __QUEUE_MODE__ skips the first two
-- on purpose. (Before log_start was the start, this answered -1, which
-- delivers the same messages: nothing lies below log_start. log_start - 1
-- keeps a new cursor's lag, last_offset - committed, to what it can read,
-- also in a partition that starts at its queue's offset floor.)
CREATE OR REPLACE FUNCTION queen.log_seed_position_v1(
    p_pid      uuid,
    p_qid      uuid,
    p_group    text,
    p_sub_mode text,
    p_sub_from timestamptz
) RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_ts    timestamptz;
    v_start bigint := coalesce((SELECT p.log_start - 1 FROM queen.log_partitions p
                                 WHERE p.id = p_pid), -1);
BEGIN
    IF p_group = '__QUEUE_MODE__' THEN
        RETURN v_start;
    END IF;
    SELECT m.subscription_timestamp INTO v_ts
      FROM queen.consumer_groups_metadata m
     WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
    IF FOUND THEN
        -- Registered: its record decides, and a NULL timestamp means 'all'.
        -- The pop-carried intent below is only for a group that never
        -- registered (a direct single-partition pop).
        IF v_ts IS NOT NULL THEN
            RETURN queen.log_seek_offset_v1(p_pid, v_ts);
        END IF;
        RETURN v_start;
    END IF;
    IF p_sub_from IS NOT NULL THEN
        RETURN queen.log_seek_offset_v1(p_pid, p_sub_from);
    END IF;
    IF p_sub_mode = 'new' THEN
        RETURN (SELECT p.last_offset FROM queen.log_partitions p WHERE p.id = p_pid);
    END IF;
    RETURN v_start;
END;
$$;

-- Register a (queue, group) subscription, first writer wins: a named group's
-- subscriptionFrom becomes 'timestamp', its 'new' becomes 'new' at now();
-- anything else, and queue mode always, is 'all' (NULL timestamp). Used by
-- the first contact and by an early subscription.
CREATE OR REPLACE FUNCTION queen.log_register_subscription_v1(
    p_qid      uuid,
    p_group    text,
    p_sub_mode text,
    p_sub_from timestamptz
) RETURNS void
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_named boolean := p_group <> '__QUEUE_MODE__';
    v_ts    timestamptz;
    v_mode  text;
BEGIN
    IF v_named AND p_sub_from IS NOT NULL THEN
        v_ts := p_sub_from; v_mode := 'timestamp';
    ELSIF v_named AND p_sub_mode = 'new' THEN
        v_ts := now(); v_mode := 'new';
    ELSE
        v_ts := NULL; v_mode := 'all';
    END IF;
    INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, subscription_mode, subscription_timestamp)
    VALUES (p_group, p_qid, v_mode, v_ts)
    ON CONFLICT (consumer_group, queue_id) DO NOTHING;
END;
$$;

-- First contact of a (queue, group): register the subscription (first writer
-- wins: a named group's 'new' or timestamp intent becomes the durable
-- subscription_timestamp) and elect exactly one seeder. Runs as its own short
-- transaction, before the group's first pop. Returns true to the one call
-- that won the election; that caller then seeds the cursors with
-- log_seed_cursors_v1, chunk by chunk. (The seed used to run here, as one
-- statement over every partition in this transaction: a lazy creator in
-- log_pop_v1 whose ON CONFLICT met one of its uncommitted rows waited for
-- the whole seed to commit.)
CREATE OR REPLACE FUNCTION queen.log_group_first_contact_v1(
    p_qid      uuid,
    p_group    text,
    p_sub_mode text,
    p_sub_from timestamptz
) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    PERFORM queen.log_register_subscription_v1(p_qid, p_group, p_sub_mode, p_sub_from);

    -- The election: one UPDATE returns a row, every later one sees seeded_at
    -- set. Competing electors wait only for each other's short transaction.
    UPDATE queen.consumer_groups_metadata m
       SET seeded_at = now(), updated_at = now()
     WHERE m.consumer_group = p_group AND m.queue_id = p_qid AND m.seeded_at IS NULL;
    RETURN FOUND;
END;
$$;

-- The elected seeder's bulk seed, one chunk per call and per transaction: the
-- cursors of up to p_limit partitions named after p_after (in name order),
-- seeded per step 3. Each row is inserted only under the same try-lock a lazy
-- creator in log_pop_v1 takes, so neither ever waits on the other: a
-- partition whose lock is taken is being created by a pop already and is
-- skipped here. Returns the last name looked at (pass it back as p_after),
-- NULL when no partition is left after this chunk (a chunk shorter than
-- p_limit was the last, so one call seeds a small queue). A seeder that dies half way leaves the rest
-- to lazy creation, which is what seeds partitions created later anyway.
CREATE OR REPLACE FUNCTION queen.log_seed_cursors_v1(
    p_qid      uuid,
    p_group    text,
    p_sub_mode text,
    p_sub_from timestamptz,
    p_after    text,
    p_limit    integer
) RETURNS text
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_ids   uuid[];
    v_names text[];
    v_id    uuid;
    v_pos   bigint;
BEGIN
    SELECT array_agg(c.id ORDER BY c.name), array_agg(c.name ORDER BY c.name)
      INTO v_ids, v_names
      FROM (SELECT p.id, p.name
              FROM queen.log_partitions p
             WHERE p.queue_id = p_qid AND (p_after IS NULL OR p.name > p_after)
             ORDER BY p.name
             LIMIT greatest(p_limit, 1)) c;
    IF v_ids IS NULL THEN
        RETURN NULL;
    END IF;
    IF current_setting('queen.citus', true) = 'on' THEN
        -- On Citus, one statement per partition, each routed to its shard
        -- (Citus plans no INSERT ... SELECT from unnest() with a correlated
        -- NOT EXISTS on a distributed table): the same rows, the same locks.
        -- The try-lock is an expression of its own, so it is taken on the
        -- coordinator as every cursor creation's is (in one expression with
        -- the lookup, Citus ran it on the partition's worker).
        FOREACH v_id IN ARRAY v_ids LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM queen.log_consumers c
                                   WHERE c.partition_id = v_id AND c.consumer_group = p_group);
            IF pg_try_advisory_xact_lock(queen.log_cursor_lock_key(v_id, p_group)) THEN
                v_pos := queen.log_seed_position_v1(v_id, p_qid, p_group, p_sub_mode, p_sub_from);
                INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
                VALUES (v_id, p_group, v_pos)
                ON CONFLICT (partition_id, consumer_group) DO NOTHING;
            END IF;
        END LOOP;
    ELSE
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT f.id, p_group, queen.log_seed_position_v1(f.id, p_qid, p_group, p_sub_mode, p_sub_from)
          FROM (SELECT u.id
                  FROM unnest(v_ids) AS u(id)
                 WHERE NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                    WHERE c.partition_id = u.id AND c.consumer_group = p_group)
                 -- Materialised so the try-lock runs only for rows still missing.
                 OFFSET 0) f
         WHERE pg_try_advisory_xact_lock(queen.log_cursor_lock_key(f.id, p_group))
        ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    END IF;
    IF array_length(v_names, 1) < greatest(p_limit, 1) THEN
        RETURN NULL;
    END IF;
    RETURN v_names[array_length(v_names, 1)];
END;
$$;

-- An early subscription (storage-model.md: "the first push, or an early
-- subscription, provisions the row"): a named group subscribing 'new' or from
-- a timestamp to a queue that does not exist yet provisions the queue row with
-- its defaults and records the subscription now, first writer wins, without
-- the seed marker (the group's first contact still seeds its cursors). Every
-- partition a later push creates then seeds this group's cursor from that
-- timestamp, so nothing pushed after the subscription is skipped. Returns the
-- queue's pop columns.
CREATE OR REPLACE FUNCTION queen.log_subscribe_early_v1(
    p_tenant   text,
    p_name     text,
    p_new_qid  uuid,
    p_group    text,
    p_sub_mode text,
    p_sub_from timestamptz
) RETURNS TABLE (o_id uuid, o_min_pop_wait_time integer)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_qid uuid;
BEGIN
    INSERT INTO queen.queues (id, tenant_id, name)
    VALUES (p_new_qid, p_tenant, p_name)
    ON CONFLICT (tenant_id, name) DO NOTHING;
    SELECT q.id INTO STRICT v_qid
      FROM queen.queues q
     WHERE q.tenant_id = p_tenant AND q.name = p_name;
    -- Only a subscription with a moment to remember registers now; 'all'
    -- registers at the group's first contact as usual.
    IF p_group <> '__QUEUE_MODE__' AND (p_sub_from IS NOT NULL OR p_sub_mode = 'new') THEN
        PERFORM queen.log_register_subscription_v1(v_qid, p_group, p_sub_mode, p_sub_from);
    END IF;
    RETURN QUERY SELECT q.id, q.min_pop_wait_time FROM queen.queues q WHERE q.id = v_qid;
END;
$$;

-- One partition: visibility gates, claim, scan, lease or auto-ack.
CREATE OR REPLACE FUNCTION queen.log_pop_v1(
    p_pid           uuid,
    p_qid           uuid,
    p_group         text,
    p_worker        uuid,
    p_budget        integer,
    p_lease_seconds integer,
    p_auto_ack      boolean,
    p_sub_mode      text,
    p_sub_from      timestamptz,
    p_delayed       integer,
    p_window        integer,
    p_skip_window   boolean
) RETURNS TABLE (
    o_kind        text,
    o_base_offset bigint,
    o_start_idx   integer,
    o_take        integer,
    o_msg_count   integer,
    o_created_at  timestamptz,
    o_blob        bytea,
    o_verdict     text,
    o_revisit_at  timestamptz
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_cutoff     timestamptz;
    v_newest     timestamptz;
    v_committed  bigint;
    v_last_off   bigint;
    v_wanted     bigint;
    v_budget     integer := greatest(p_budget, 1);
    v_taken      integer := 0;
    v_start      bigint := NULL;
    v_last       bigint;
    v_seen_any   boolean := false;
    v_hidden_at  timestamptz := NULL;
    v_lease_exp  timestamptz;
    v_seg        record;
    v_take       integer;
BEGIN
    o_kind := 'segment';

    -- Step 2a, windowBuffer: a quiet-period debounce, one backward PK step to
    -- the newest segment. The broker's revisit wheel may own the hold instead.
    IF p_window > 0 AND NOT p_skip_window THEN
        SELECT s.created_at INTO v_newest
          FROM queen.log_segments s
         WHERE s.partition_id = p_pid
         ORDER BY s.base_offset DESC
         LIMIT 1;
        IF v_newest IS NOT NULL AND v_newest > v_now - make_interval(secs => p_window) THEN
            o_kind := 'verdict'; o_verdict := 'deferred';
            o_revisit_at := v_newest + make_interval(secs => p_window);
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- Step 2b, delayedProcessing: only segments at least D seconds old are
    -- visible. Never bypassed.
    v_cutoff := CASE WHEN p_delayed > 0 THEN v_now - make_interval(secs => p_delayed) ELSE 'infinity' END;

    -- Step 4: claim first.
    SELECT c.committed INTO v_committed
      FROM queen.log_consumers c
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Re-probe without the lease filter: present means leased or locked.
        SELECT c.lease_expires_at INTO v_lease_exp
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        IF FOUND THEN
            o_kind := 'verdict';
            o_verdict := CASE WHEN v_lease_exp IS NOT NULL AND v_lease_exp >= v_now THEN 'leased' ELSE 'busy' END;
            o_revisit_at := CASE WHEN v_lease_exp >= v_now THEN v_lease_exp END;
            RETURN NEXT;
            RETURN;
        END IF;
        -- Missing: exactly one pop creates it; everyone else skips one cycle.
        IF NOT pg_try_advisory_xact_lock(queen.log_cursor_lock_key(p_pid, p_group)) THEN
            o_kind := 'verdict'; o_verdict := 'busy'; o_revisit_at := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        VALUES (p_pid, p_group,
                queen.log_seed_position_v1(p_pid, p_qid, p_group, p_sub_mode, p_sub_from))
        ON CONFLICT (partition_id, consumer_group) DO NOTHING;
        -- A seeded position is not soft state ('new' seeds where the log ends
        -- now): this transaction commits durably (log_pop_list_v1).
        PERFORM set_config('queen.pop_durable', 'on', true);
        -- Re-claim.
        SELECT c.committed INTO v_committed
          FROM queen.log_consumers c
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group
           AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            o_kind := 'verdict'; o_verdict := 'busy'; o_revisit_at := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    SELECT p.last_offset INTO v_last_off FROM queen.log_partitions p WHERE p.id = p_pid;
    IF v_last_off IS NULL OR v_committed >= v_last_off THEN
        o_kind := 'verdict'; o_verdict := 'empty'; o_revisit_at := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    -- Step 5: the head probe, one backward PK step; the covering test is
    -- applied afterwards so a miss never walks the partition head.
    v_wanted := v_committed + 1;
    SELECT s.base_offset, s.end_offset, s.msg_count, s.created_at, s.blob INTO v_seg
      FROM queen.log_segments s
     WHERE s.partition_id = p_pid AND s.base_offset <= v_wanted
     ORDER BY s.base_offset DESC
     LIMIT 1;
    IF FOUND THEN
        v_seen_any := true;
        IF v_seg.end_offset >= v_wanted THEN
            IF v_seg.created_at <= v_cutoff THEN
                v_take := least(v_seg.end_offset - v_wanted + 1, v_budget)::integer;
                o_base_offset := v_seg.base_offset;
                o_start_idx := (v_wanted - v_seg.base_offset)::integer;
                o_take := v_take;
                o_msg_count := v_seg.msg_count;
                o_created_at := v_seg.created_at;
                o_blob := v_seg.blob;
                RETURN NEXT;
                v_taken := v_take;
                v_start := v_wanted;
                v_last := v_wanted + v_take - 1;
            ELSE
                v_hidden_at := v_seg.created_at;
            END IF;
        END IF;
    END IF;

    -- The forward scan: a cursor over the PK, so leaving at the budget stops
    -- the index walk. Gaps (retention) are simply stepped over. created_at is
    -- monotone, so the first hidden segment hides everything after it.
    IF v_hidden_at IS NULL AND v_taken < v_budget THEN
        FOR v_seg IN
            SELECT s.base_offset, s.end_offset, s.msg_count, s.created_at, s.blob
              FROM queen.log_segments s
             WHERE s.partition_id = p_pid AND s.base_offset > v_wanted
             ORDER BY s.base_offset
        LOOP
            v_seen_any := true;
            IF v_seg.created_at > v_cutoff THEN
                v_hidden_at := v_seg.created_at;
                EXIT;
            END IF;
            v_take := least(v_seg.msg_count, v_budget - v_taken);
            o_base_offset := v_seg.base_offset;
            o_start_idx := 0;
            o_take := v_take;
            o_msg_count := v_seg.msg_count;
            o_created_at := v_seg.created_at;
            o_blob := v_seg.blob;
            RETURN NEXT;
            IF v_start IS NULL THEN
                v_start := v_seg.base_offset;
            END IF;
            v_taken := v_taken + v_take;
            v_last := v_seg.base_offset + v_take - 1;
            EXIT WHEN v_taken >= v_budget;
        END LOOP;
    END IF;

    o_kind := 'verdict';
    o_base_offset := NULL; o_start_idx := NULL; o_take := NULL;
    o_msg_count := NULL; o_created_at := NULL; o_blob := NULL;

    IF v_taken = 0 THEN
        IF v_hidden_at IS NOT NULL THEN
            -- Not 'deferred': that one is windowBuffer's, whose revisit may
            -- skip the debounce; this revisit must not.
            o_verdict := 'delayed';
            o_revisit_at := v_hidden_at + make_interval(secs => p_delayed);
        ELSE
            -- The empty-partition cursor seal: no segments at all (retention
            -- removed them) while last_offset > committed. Without it the
            -- partition stays phantom-pending forever. Narrow on purpose: not
            -- when segments exist but are hidden (that would skip live
            -- messages); a concurrent push lands above the snapshotted
            -- last_offset and stays pending. A cursor seal, not a claim.
            IF NOT v_seen_any THEN
                UPDATE queen.log_consumers c
                   SET committed = v_last_off
                 WHERE c.partition_id = p_pid AND c.consumer_group = p_group
                   AND c.committed < v_last_off;
            END IF;
            o_verdict := 'empty';
            o_revisit_at := NULL;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    -- Step 6: auto-ack (at-most-once) or lease.
    IF p_auto_ack THEN
        UPDATE queen.log_consumers c
           SET committed = v_last, worker_id = NULL, lease_expires_at = NULL,
               lease_acquired_at = NULL, batch_end = NULL,
               total_consumed = c.total_consumed + v_taken,
               last_consumed_at = v_now
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        -- A tail hidden by delayedProcessing is pending: say when it shows.
        o_revisit_at := CASE WHEN v_hidden_at IS NOT NULL
                             THEN v_hidden_at + make_interval(secs => p_delayed) END;
    ELSE
        UPDATE queen.log_consumers c
           SET worker_id = p_worker,
               lease_expires_at = v_now + make_interval(secs => p_lease_seconds),
               lease_acquired_at = v_now,
               batch_end = v_last,
               attempt_count = CASE WHEN c.attempt_offset IS NOT DISTINCT FROM v_start
                                    THEN c.attempt_count + 1 ELSE 1 END,
               attempt_offset = v_start
         WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        o_revisit_at := v_now + make_interval(secs => p_lease_seconds);
    END IF;
    o_verdict := CASE WHEN v_last >= v_last_off OR v_hidden_at IS NOT NULL
                      THEN 'drained' ELSE 'delivered' END;
    RETURN NEXT;
END;
$$;

-- Candidate partitions by name, in the order given, until the budget is spent
-- or p_max_partitions partitions delivered. One transaction for the loop.
-- Candidates never reached get no verdict (they stay hot).
CREATE OR REPLACE FUNCTION queen.log_pop_list_v1(
    p_qid           uuid,
    p_group         text,
    p_names         text[],
    p_worker        uuid,
    p_budget        integer,
    p_max_partitions integer,
    p_lease_seconds integer,
    p_auto_ack      boolean,
    p_sub_mode      text,
    p_sub_from      timestamptz,
    p_skip_window   boolean
) RETURNS SETOF queen.log_pop_row
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_lease     integer;
    v_delayed   integer;
    v_window    integer;
    v_budget    integer := greatest(p_budget, 1);
    v_claimed   integer := 0;
    v_ids       uuid[];
    v_names     text[];
    v_citus     boolean;
    v_found     uuid;
    v_i         integer;
    v_pid       uuid;
    v_pname     text;
    v_took      integer;
    r           queen.log_pop_row;
BEGIN
    SELECT COALESCE(p_lease_seconds, NULLIF(q.lease_time, 0), 60), q.delayed_processing, q.window_buffer
      INTO v_lease, v_delayed, v_window
      FROM queen.queues q WHERE q.id = p_qid;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Each name's partition id (NULL: none), in the order given. On
    -- PostgreSQL one join by name, before the loop. On Citus (queen.citus =
    -- 'on') the join would visit every shard, so each name's derived id is
    -- probed in the loop, routed to its shard, and only for the names the
    -- loop reaches: a probe is a round trip from the coordinator, and a pop
    -- is usually served by the first names of a list of a dozen or more.
    v_citus := current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on';
    IF v_citus THEN
        v_names := p_names;
    ELSE
        SELECT array_agg(p.id ORDER BY n.ord), array_agg(n.name ORDER BY n.ord)
          INTO v_ids, v_names
          FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
          LEFT JOIN queen.log_partitions p ON p.queue_id = p_qid AND p.name = n.name;
    END IF;
    FOR v_i IN 1 .. coalesce(array_length(v_names, 1), 0) LOOP
        v_pname := v_names[v_i];
        EXIT WHEN v_budget <= 0 OR v_claimed >= greatest(p_max_partitions, 1);
        IF v_citus THEN
            v_found := queen.partition_id_v1(p_qid, v_pname);
            SELECT p.id INTO v_pid FROM queen.log_partitions p WHERE p.id = v_found;
        ELSE
            v_pid := v_ids[v_i];
        END IF;
        IF v_pid IS NULL THEN
            -- No such partition (deleted, or the queue re-created elsewhere):
            -- say so, so the broker drops the name instead of retrying it.
            r := NULL;
            r.o_partition_name := v_pname;
            r.o_kind := 'verdict';
            r.o_verdict := 'missing';
            RETURN NEXT r;
            CONTINUE;
        END IF;
        v_took := 0;
        FOR r IN
            SELECT v_pid, v_pname, x.*
              FROM queen.log_pop_v1(v_pid, p_qid, p_group, p_worker, v_budget, v_lease,
                                    p_auto_ack, p_sub_mode, p_sub_from, v_delayed, v_window,
                                    p_skip_window) AS x
        LOOP
            RETURN NEXT r;
            IF r.o_kind = 'segment' THEN
                v_took := v_took + r.o_take;
            END IF;
        END LOOP;
        IF v_took > 0 THEN
            v_budget := v_budget - v_took;
            v_claimed := v_claimed + 1;
        END IF;
    END LOOP;
    -- A lease is soft state: lost in a PostgreSQL crash before its WAL is
    -- flushed, its batch is pending again and delivered again, as after a
    -- lease expiry (at least once), and the consumer's ack commits durably,
    -- flushing the lease's WAL with its own. So a leased claim with no cursor
    -- created commits without waiting for its flush: at batch 1 a partition
    -- serves one pop and one ack per message in turn, and the flush was a
    -- third of that turn. Auto-acked claims move the cursor and stay durable.
    -- This is the caller's whole transaction (every caller runs it alone).
    IF NOT p_auto_ack AND v_claimed > 0
       AND current_setting('queen.pop_durable', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
END;
$$;

-- The single-partition route: log_pop_list_v1 over that one name. Its rows
-- carry the partition id from the same join that found the partition to
-- claim, so a pop racing the partition-creating push either sees the
-- partition (and its id) or claims nothing: it never reports an empty
-- partitionId for a batch it leased.
CREATE OR REPLACE FUNCTION queen.log_pop_specific_v1(
    p_tenant        text,
    p_queue         text,
    p_partition     text,
    p_group         text,
    p_worker        uuid,
    p_budget        integer,
    p_lease_seconds integer,
    p_auto_ack      boolean,
    p_sub_mode      text,
    p_sub_from      timestamptz
) RETURNS SETOF queen.log_pop_row
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_qid  uuid;
BEGIN
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM queen.log_pop_list_v1(v_qid, p_group, ARRAY[p_partition], p_worker, p_budget, 1,
                                        p_lease_seconds, p_auto_ack, p_sub_mode, p_sub_from, false);
END;
$$;

-- The cheap probe of the SQL candidate path: false means definitively nothing
-- to deliver for this group (leases ignored), so the pop can park without a
-- scan or a permit. A false answer is exactly the proof the empty-scan
-- watermark needs, so it also moves the watermark (at most once per 30 s,
-- skipped if another pop holds the metadata row): after that, probes of a
-- caught-up queue only look at recently written partitions.
CREATE OR REPLACE FUNCTION queen.log_has_pending_v1(p_qid uuid, p_group text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
-- The watermark is a run-time value; a generic plan cannot see that it
-- excludes almost every partition and would scan them all.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now       timestamptz := clock_timestamp();
    v_watermark timestamptz;
    v_pending   boolean;
BEGIN
    SELECT m.scan_watermark INTO v_watermark
      FROM queen.consumer_groups_metadata m
     WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
    v_watermark := COALESCE(v_watermark, '-infinity');
    v_pending := EXISTS (
        SELECT 1
          FROM queen.log_partitions p
          LEFT JOIN queen.log_consumers c
            ON c.partition_id = p.id AND c.consumer_group = p_group
         WHERE p.queue_id = p_qid
           AND p.last_write_at >= v_watermark - interval '2 minutes'
           AND (c.partition_id IS NULL OR p.last_offset > c.committed));
    -- The check just ran, so only the write is throttled: at most one every
    -- 30 s per (queue, group), whatever checks ran in between.
    IF NOT v_pending AND v_watermark < v_now - interval '30 seconds' THEN
        PERFORM 1
           FROM queen.consumer_groups_metadata m
          WHERE m.consumer_group = p_group AND m.queue_id = p_qid
            FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE queen.consumer_groups_metadata m
               SET watermark_checked_at = v_now, scan_watermark = v_now
             WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
        END IF;
    END IF;
    RETURN v_pending;
END;
$$;

-- The hot-list's reseed (decisions.md §5), priced by the work and not by the
-- partition count. Two reads, each bounded:
--   written  partitions written since p_since (the previous reseed's o_now),
--            with 5 s of slack for last_write_at's one-second quantisation
--            and for pushes that committed after that reseed looked; on a
--            ring's first reseed (NULL p_since) the last 2 s, for pushes
--            whose hint came before the ring existed. Through
--            idx_log_partitions_queue_write;
--   page     the next p_page partitions by name after p_after, a keyset walk
--            of the whole queue spread over many reseeds: what no write
--            announces (a hint lost, a ring over its cap, a cursor moved
--            back) is still found.
-- Pending means: the group's cursor is behind last_offset; or, with no
-- cursor yet (cursors appear when the group first touches a partition), the
-- partition holds anything at all for a group subscribed to everything, and
-- a segment created at or after the subscription's moment for a 'new' or
-- from-timestamp group (exactly where its cursor would start: the newest
-- segment, one backward index step, looked at only when last_write_at is
-- within its one-second quantisation of that moment). log_pop_v1 still
-- decides under the row lock. o_names holds at most p_limit names; o_next
-- is where the walk continues (NULL: it reached the end, the next page
-- starts over); o_now is this reseed's p_since for the next one.
CREATE OR REPLACE FUNCTION queen.log_hot_reseed_v1(
    p_qid    uuid,
    p_group  text,
    p_since  timestamptz,
    p_after  text,
    p_page   integer,
    p_limit  integer,
    OUT o_names text[],
    OUT o_next  text,
    OUT o_now   timestamptz
)
LANGUAGE plpgsql
STABLE
-- Custom plans: the written part's bound excludes almost every partition of
-- a big queue, which only the actual values show. Generic plans were tried:
-- cheaper for queues of a few partitions, slower at a million partitions
-- (docs/benchmarks.md, "Ten thousand queues, 2026-12-06").
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_from  timestamptz;
    v_limit integer := greatest(p_limit, 1);
    v_page  text[];
    v_count integer;
BEGIN
    o_now := clock_timestamp();
    IF p_group <> '__QUEUE_MODE__' THEN
        SELECT m.subscription_timestamp INTO v_from
          FROM queen.consumer_groups_metadata m
         WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
    END IF;
    SELECT array_agg(w.name) INTO o_names
      FROM (SELECT p.name
              FROM queen.log_partitions p
              LEFT JOIN queen.log_consumers c
                ON c.partition_id = p.id AND c.consumer_group = p_group
             WHERE p.queue_id = p_qid
               AND p.last_write_at >= CASE WHEN p_since IS NULL THEN o_now - interval '2 seconds'
                                           ELSE p_since - interval '5 seconds' END
               AND CASE WHEN c.partition_id IS NOT NULL THEN p.last_offset > c.committed
                        WHEN v_from IS NULL THEN true
                        ELSE p.last_write_at >= v_from - interval '2 seconds'
                             AND (SELECT s.created_at FROM queen.log_segments s
                                   WHERE s.partition_id = p.id
                                   ORDER BY s.base_offset DESC LIMIT 1) >= v_from END
             LIMIT v_limit) w;
    IF p_page > 0 AND coalesce(array_length(o_names, 1), 0) < v_limit THEN
        SELECT array_agg(g.name ORDER BY g.name) FILTER (WHERE g.pending),
               max(g.name), count(*)
          INTO v_page, o_next, v_count
          FROM (SELECT p.name,
                       CASE WHEN c.partition_id IS NOT NULL THEN p.last_offset > c.committed
                            WHEN v_from IS NULL THEN true
                            ELSE p.last_write_at >= v_from - interval '2 seconds'
                                 AND (SELECT s.created_at FROM queen.log_segments s
                                       WHERE s.partition_id = p.id
                                       ORDER BY s.base_offset DESC LIMIT 1) >= v_from END AS pending
                  FROM queen.log_partitions p
                  LEFT JOIN queen.log_consumers c
                    ON c.partition_id = p.id AND c.consumer_group = p_group
                 -- A custom plan sees p_after's value, so the OR folds away
                 -- and the page starts where the last one ended.
                 WHERE p.queue_id = p_qid AND (p_after IS NULL OR p.name > p_after)
                 ORDER BY p.name
                 LIMIT p_page) g;
        IF v_count < p_page THEN
            o_next := NULL;
        END IF;
        SELECT array_agg(DISTINCT n) INTO o_names
          FROM (SELECT unnest(o_names) UNION ALL SELECT unnest(v_page)) AS u(n);
        o_names := o_names[1:v_limit];
    ELSE
        o_next := p_after;
    END IF;
    o_names := coalesce(o_names, '{}');
END;
$$;

-- The periodic reseeds of a broker's rings in one statement: ring i of the
-- arrays is log_hot_reseed_v1(p_qids[i], p_groups[i], p_since[i],
-- p_after[i], p_pages[i], p_limit), answered by the row with o_ring = i.
-- With many rings polled and nothing pushed (parked long-polls on many
-- queues), one round trip per reseed period, not one per ring.
CREATE OR REPLACE FUNCTION queen.log_hot_reseed_many_v1(
    p_qids   uuid[],
    p_groups text[],
    p_since  timestamptz[],
    p_after  text[],
    p_pages  integer[],
    p_limit  integer
)
RETURNS TABLE (o_ring integer, o_names text[], o_next text, o_now timestamptz)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_qids, 1), 0) LOOP
        RETURN QUERY
        SELECT i, r.o_names, r.o_next, r.o_now
          FROM queen.log_hot_reseed_v1(p_qids[i], p_groups[i], p_since[i],
                                       p_after[i], p_pages[i], p_limit) r;
    END LOOP;
END;
$$;

-- minPopWaitTime's question (life-of-a-pop, "The minimum pop wait"): how
-- many messages could a claim of up to p_max_partitions partitions take for
-- this group now, at most p_cap. Coarse like the candidate scan (a missing
-- cursor counts from log_start, delayedProcessing is not applied): it only
-- decides whether the broker keeps holding an under-full claim. Partitions
-- under a live lease cannot be claimed and do not count. Its cost grows with
-- the queue's pending partitions; it runs only for queues that configured
-- min_pop_wait_time, and only while a pop holds.
CREATE OR REPLACE FUNCTION queen.log_pending_count_v1(
    p_qid            uuid,
    p_group          text,
    p_max_partitions integer,
    p_cap            integer
) RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN (
        SELECT COALESCE(least(sum(pending), p_cap), 0)::integer
          FROM (SELECT least(p.last_offset - COALESCE(c.committed, p.log_start - 1), p_cap) AS pending
                  FROM queen.log_partitions p
                  LEFT JOIN queen.log_consumers c
                    ON c.partition_id = p.id AND c.consumer_group = p_group
                 WHERE p.queue_id = p_qid
                   AND (c.partition_id IS NULL OR p.last_offset > c.committed)
                   AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
                 ORDER BY pending DESC
                 LIMIT greatest(p_max_partitions, 1)) AS top);
END;
$$;

-- The SQL candidate path (QUEEN_HOTLIST=0): scan for partitions with pending
-- data for the group, in random order, capped, then pop them as a list.
-- The write watermark keeps a caught-up consumer from scanning every
-- partition on every poll; the two minutes of slack absorb last_write_at's
-- one-second quantisation. The filter is coarse; log_pop_v1 re-verifies under
-- the row lock. When nothing is claimed, the watermark advances only if a
-- throttled (30 s) re-check, ignoring leases, finds the queue genuinely empty.
CREATE OR REPLACE FUNCTION queen.log_pop_wildcard_v1(
    p_qid           uuid,
    p_group         text,
    p_worker        uuid,
    p_budget        integer,
    p_max_partitions integer,
    p_lease_seconds integer,
    p_auto_ack      boolean,
    p_sub_mode      text,
    p_sub_from      timestamptz
) RETURNS SETOF queen.log_pop_row
LANGUAGE plpgsql
VOLATILE
-- See log_has_pending_v1: the watermark must be planned as a value.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now       timestamptz := clock_timestamp();
    v_watermark timestamptz;
    v_checked   timestamptz;
    v_cap       integer;
    v_names     text[];
    v_delivered boolean := false;
    r           queen.log_pop_row;
BEGIN
    SELECT m.scan_watermark, m.watermark_checked_at INTO v_watermark, v_checked
      FROM queen.consumer_groups_metadata m
     WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
    v_watermark := COALESCE(v_watermark, '-infinity');
    v_cap := CASE WHEN p_max_partitions >= 128 THEN 512
                  ELSE least(greatest(p_max_partitions * 4, 64), 512) END;

    SELECT array_agg(cand.name) INTO v_names
      FROM (SELECT p.name
              FROM queen.log_partitions p
              LEFT JOIN queen.log_consumers c
                ON c.partition_id = p.id AND c.consumer_group = p_group
             WHERE p.queue_id = p_qid
               AND p.last_write_at >= v_watermark - interval '2 minutes'
               AND (c.partition_id IS NULL OR p.last_offset > c.committed)
               AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
             ORDER BY random()
             LIMIT v_cap) AS cand;

    IF v_names IS NOT NULL THEN
        FOR r IN
            SELECT * FROM queen.log_pop_list_v1(p_qid, p_group, v_names, p_worker, p_budget,
                                                p_max_partitions, p_lease_seconds, p_auto_ack,
                                                p_sub_mode, p_sub_from, false)
        LOOP
            RETURN NEXT r;
            IF r.o_kind = 'segment' THEN
                v_delivered := true;
            END IF;
        END LOOP;
    END IF;

    -- The empty-scan watermark, throttled. A partition may have been skipped
    -- only because someone else held its lease, so check again ignoring the
    -- lease filter, and advance only when the queue is genuinely empty.
    IF NOT v_delivered AND (v_checked IS NULL OR v_checked < v_now - interval '30 seconds') THEN
        -- Whoever holds the metadata row does the check; nobody waits for it.
        PERFORM 1
           FROM queen.consumer_groups_metadata m
          WHERE m.consumer_group = p_group AND m.queue_id = p_qid
            FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            IF EXISTS (
                SELECT 1
                  FROM queen.log_partitions p
                  LEFT JOIN queen.log_consumers c
                    ON c.partition_id = p.id AND c.consumer_group = p_group
                 WHERE p.queue_id = p_qid
                   AND p.last_write_at >= v_watermark - interval '2 minutes'
                   AND (c.partition_id IS NULL OR p.last_offset > c.committed)
            ) THEN
                UPDATE queen.consumer_groups_metadata m
                   SET watermark_checked_at = v_now
                 WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
            ELSE
                UPDATE queen.consumer_groups_metadata m
                   SET watermark_checked_at = v_now, scan_watermark = v_now
                 WHERE m.consumer_group = p_group AND m.queue_id = p_qid;
            END IF;
        END IF;
    END IF;
END;
$$;

-- An auto-acked claim moved the cursor of (p_pid, p_group) past offsets
-- p_from .. p_to in the claiming statement; when the broker then cannot
-- deliver them (a payload sealed with a key it does not hold), it puts the
-- cursor back before p_from, so nothing is lost. Only while the cursor is
-- still where that claim left it and nobody leases the partition: if
-- another pop moved on meanwhile, the answer is false and nothing changes
-- (the messages stay in the log; a seek reaches them).
CREATE OR REPLACE FUNCTION queen.log_rewind_auto_ack_v1(
    p_pid   uuid,
    p_group text,
    p_from  bigint,
    p_to    bigint
) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    UPDATE queen.log_consumers c
       SET committed = p_from - 1,
           total_consumed = greatest(c.total_consumed - (p_to - p_from + 1), 0)
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       AND c.committed = p_to AND c.worker_id IS NULL;
    RETURN FOUND;
END;
$$;
