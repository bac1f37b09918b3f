-- 000_queen.sql: the `queen` schema, queue identity and configuration, and
-- per-(group, queue) subscription bookkeeping.
--
-- Applied at every boot, inside the applier's single schema transaction
-- (see sql/README.md). Every statement is idempotent, and a re-apply on a
-- live system takes no lock on a Queen table: statements that would lock a
-- table even when there is nothing to do (CREATE INDEX IF NOT EXISTS takes a
-- SHARE lock, ALTER TABLE ... SET STORAGE and ADD COLUMN IF NOT EXISTS take
-- ACCESS EXCLUSIVE, ALTER TABLE ... SET (...) takes SHARE UPDATE EXCLUSIVE)
-- are guarded by a catalog check first.

CREATE SCHEMA IF NOT EXISTS queen;

-- Applier helper: make sure a table carries the given storage parameters.
--
-- p_options are written exactly as PostgreSQL stores them in
-- pg_class.reloptions ('name=value', no spaces); a 'toast.' prefix addresses
-- the table's TOAST relation. When every option is already present with that
-- value the function does nothing, so a re-apply takes no lock. Otherwise it
-- runs ALTER TABLE ... SET (...) with all of them, which takes SHARE UPDATE
-- EXCLUSIVE: it does not block reads or writes, but it does conflict with a
-- running VACUUM, and an anti-wraparound autovacuum is never cancelled for a
-- waiter, so an unconditional ALTER could hold a boot for the length of one.
-- Options an operator added that are not in the list are left alone; a value
-- an operator changed is put back (these values are set by measurement, see
-- 001_log_schema.sql).
CREATE OR REPLACE FUNCTION queen.schema_set_reloptions(p_table regclass, p_options text[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_want_heap  text[] := ARRAY(SELECT o FROM unnest(p_options) AS o WHERE o NOT LIKE 'toast.%');
    v_want_toast text[] := ARRAY(SELECT substr(o, 7) FROM unnest(p_options) AS o WHERE o LIKE 'toast.%');
    v_have_heap  text[];
    v_have_toast text[];
BEGIN
    SELECT coalesce(h.reloptions, '{}'), coalesce(t.reloptions, '{}')
      INTO v_have_heap, v_have_toast
      FROM pg_catalog.pg_class h
      LEFT JOIN pg_catalog.pg_class t ON t.oid = h.reltoastrelid
     WHERE h.oid = p_table;
    IF v_have_heap @> v_want_heap AND v_have_toast @> v_want_toast THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE %s SET (%s)', p_table, array_to_string(p_options, ', '));
END
$$;

-- queen.queues: one row per queue. The row's id is the queue's identity;
-- on the wire a queue is named by (tenant_id, name), made unique by
-- queues_tenant_name_uk, so two tenants can hold the same queue name. Every
-- partition-to-config join is by id. There is no separate engine-side queue
-- table: this row carries the whole configuration. There is no storage-engine
-- selector column: there is one engine (the wire echoes storage: "segments"
-- as a literal).
--
-- A queue that was never /configured exists anyway: the first push, or an
-- early subscription, inserts this row with the defaults below. The id has no
-- default on purpose: ids are UUIDv7 minted by the broker (decisions §1).
--
-- lease_time defaults to 60 and that is a truth fix, not a behaviour change:
-- implicitly created queues always leased for 60 s (the pop path read this
-- default), while the old config display showed a 300 the pop path never used.
-- POST /api/v1/configure computes leaseTime with a default of 300 and writes it
-- into this same column, so the effective default depends on how the queue came
-- into existence, and what the configuration shows is the lease actually granted.
--
-- Wire options (wire-api §2.1) with their stored defaults: retry_delay is
-- applied only when configured (retry_delay_applied, below); ttl and
-- priority are stored and echoed only; max_queue_size is the wire's maxSize,
-- enforced by log_push_v1; dead_letter_queue and dlq_after_max_retries are
-- stored and echoed wire flags. The last three columns are engine-side:
--   dlq_enabled           dead-lettering is on by default; when false a poison
--                         frame is dropped instead of filed, and the cursor
--                         still moves past it.
--   min_pop_wait_time     milliseconds.
--   dedup_window_seconds  how far back the push duplicate probe looks in the
--                         hash sidecar (also a floor of the sidecar's purge age).
--                         The probe reads every hash the partition stored in
--                         the window, so its cost per flush is O(rate x window):
--                         300 s by default (the SQS FIFO window), 0 turns it off.
CREATE TABLE IF NOT EXISTS queen.queues (
    id                          uuid        PRIMARY KEY,
    tenant_id                   text        NOT NULL DEFAULT 'default',
    name                        text        NOT NULL,
    namespace                   text        NOT NULL DEFAULT '',
    task                        text        NOT NULL DEFAULT '',
    lease_time                  integer     NOT NULL DEFAULT 60,
    retry_limit                 integer     NOT NULL DEFAULT 3,
    retry_delay                 integer     NOT NULL DEFAULT 1000,
    max_queue_size              integer     NOT NULL DEFAULT 0,
    ttl                         integer     NOT NULL DEFAULT 3600,
    priority                    integer     NOT NULL DEFAULT 0,
    delayed_processing          integer     NOT NULL DEFAULT 0,
    window_buffer               integer     NOT NULL DEFAULT 0,
    retention_enabled           boolean     NOT NULL DEFAULT false,
    retention_seconds           integer     NOT NULL DEFAULT 0,
    completed_retention_seconds integer     NOT NULL DEFAULT 0,
    max_wait_time_seconds       integer     NOT NULL DEFAULT 0,
    dead_letter_queue           boolean     NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean     NOT NULL DEFAULT false,
    dlq_enabled                 boolean     NOT NULL DEFAULT true,
    encryption_enabled          boolean     NOT NULL DEFAULT false,
    min_pop_wait_time           integer     NOT NULL DEFAULT 0,
    dedup_window_seconds        integer     NOT NULL DEFAULT 300,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- retry_delay_applied: the last configure named retryDelay, so a failed batch
-- stays invisible to its group for retry_delay ms (procedures/ack.sql). Left
-- out, retry_delay holds the reference's 1000, echoed and not applied, as the
-- reference never applied it (clients that nack and pop again at once rely on
-- that). Added after the table's first release: guarded (sql/README.md, rule 2).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'queen.queues'::regclass
                      AND attname = 'retry_delay_applied' AND NOT attisdropped) THEN
        ALTER TABLE queen.queues
            ADD COLUMN retry_delay_applied boolean NOT NULL DEFAULT false;
    END IF;
END
$$;

-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it
-- notices the index exists, which would block queue provisioning at every boot.
DO $$
BEGIN
    IF to_regclass('queen.queues_tenant_name_uk') IS NULL THEN
        CREATE UNIQUE INDEX queues_tenant_name_uk ON queen.queues (tenant_id, name);
    END IF;
END
$$;

-- queen.consumer_groups_metadata: per (consumer group, queue) subscription
-- bookkeeping.
--
-- subscription_timestamp is the durable subscription record: a partition's
-- cursor for this group, seeded on first contact, lands just before the first
-- segment at or after it (life-of-a-pop, step 3). subscription_mode is the mode
-- the group registered with ('all', 'new', ...), echoed by the admin views.
--
-- seeded_at is the group-first-contact bulk seed marker. On the first pop of a
-- (queue, group) one insert into this table elects a single seeder (the
-- insertion that returns a row count), which seeds the cursor of every
-- partition of the queue in one set-based statement; once the marker is set,
-- pops take the hot-list path. Without the single seeder, per-partition lazy
-- cursor creation by many concurrent consumers forms wait chains that the
-- deadlock detector never breaks.
--
-- scan_watermark / watermark_checked_at are the empty-scan watermark of the
-- SQL candidate path (QUEEN_HOTLIST=0): the wildcard scan only considers
-- partitions written since scan_watermark - 2 minutes. The watermark moves
-- only when a check (throttled to once per 30 s) finds the queue genuinely
-- empty for this group, ignoring leases, so a lease-held backlog is never
-- stranded.
CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    consumer_group         text        NOT NULL,
    queue_id               uuid        NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    subscription_mode      text        NOT NULL DEFAULT 'all',
    subscription_timestamp timestamptz NULL,
    seeded_at              timestamptz NULL,
    scan_watermark         timestamptz NOT NULL DEFAULT '-infinity',
    watermark_checked_at   timestamptz NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, queue_id)
);
