-- procedures/configure.sql: queue configuration (POST /api/v1/configure).
--
-- Applied at every boot inside the schema transaction: CREATE OR REPLACE only,
-- every name qualified with queen., and nothing here touches a table at apply
-- time (a PL/pgSQL body is not planned until its first call).

-- queen.configure_queue_v2: create the queue (tenant, name) or fully replace
-- its configuration, and make sure its partition 'Default' exists. Returns the
-- queue's id and the Default partition's id.
--
-- Full replace: every option column is written from the arguments, so an
-- option the caller left out is whatever default the caller passed for it.
-- The defaults, and the lease_time rule (a requested 0 is stored as 60, the
-- lease actually granted), live in the broker; this function stores what it is
-- given. namespace and task are replaced too; id and created_at never change.
--
-- p_new_queue_id is a UUIDv7 minted by the broker (the tables have no id
-- defaults, decisions §1), used only if the row has to be created; an
-- existing queue keeps its id. p_default_partition_id is no longer used: the
-- Default partition takes its derived id (partition_id_v1), and one created
-- before ids were derived keeps its own (log_partition_open_v1).
--
-- p_retry_delay_applied says the request named retryDelay: only then is the
-- delay applied to failed batches (procedures/ack.sql); left out, retry_delay
-- holds the reference's 1000 and is echoed, as the reference never applied it.
--
-- Concurrency: the upsert locks the queue row, so two configures of one queue
-- serialise on it. log_partition_open_v1 finds, locks or creates the Default
-- partition, and covers a racing creator and a partition cleanup between its
-- reads.
CREATE OR REPLACE FUNCTION queen.configure_queue_v2(
    p_tenant                      text,
    p_name                        text,
    p_namespace                   text,
    p_task                        text,
    p_lease_time                  integer,
    p_retry_limit                 integer,
    p_retry_delay                 integer,
    p_max_queue_size              integer,
    p_ttl                         integer,
    p_priority                    integer,
    p_delayed_processing          integer,
    p_window_buffer               integer,
    p_retention_enabled           boolean,
    p_retention_seconds           integer,
    p_completed_retention_seconds integer,
    p_max_wait_time_seconds       integer,
    p_dead_letter_queue           boolean,
    p_dlq_after_max_retries       boolean,
    p_dlq_enabled                 boolean,
    p_encryption_enabled          boolean,
    p_min_pop_wait_time           integer,
    p_dedup_window_seconds        integer,
    p_retry_delay_applied         boolean,
    p_new_queue_id                uuid,
    p_default_partition_id        uuid
)
RETURNS TABLE (queue_id uuid, partition_id uuid)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
-- (The output columns are named like log_partitions.queue_id; inside the body
-- a bare name means the column.)
DECLARE
    v_queue_id     uuid;
    v_partition_id uuid;
    v_now          timestamptz := now();
BEGIN
    INSERT INTO queen.queues AS q (
        id, tenant_id, name, namespace, task,
        lease_time, retry_limit, retry_delay, max_queue_size, ttl, priority,
        delayed_processing, window_buffer, retention_enabled, retention_seconds,
        completed_retention_seconds, max_wait_time_seconds, dead_letter_queue,
        dlq_after_max_retries, dlq_enabled, encryption_enabled, min_pop_wait_time,
        dedup_window_seconds, retry_delay_applied
    ) VALUES (
        p_new_queue_id, p_tenant, p_name, p_namespace, p_task,
        p_lease_time, p_retry_limit, p_retry_delay, p_max_queue_size, p_ttl, p_priority,
        p_delayed_processing, p_window_buffer, p_retention_enabled, p_retention_seconds,
        p_completed_retention_seconds, p_max_wait_time_seconds, p_dead_letter_queue,
        p_dlq_after_max_retries, p_dlq_enabled, p_encryption_enabled, p_min_pop_wait_time,
        p_dedup_window_seconds, p_retry_delay_applied
    )
    ON CONFLICT (tenant_id, name) DO UPDATE SET
        namespace                   = EXCLUDED.namespace,
        task                        = EXCLUDED.task,
        lease_time                  = EXCLUDED.lease_time,
        retry_limit                 = EXCLUDED.retry_limit,
        retry_delay                 = EXCLUDED.retry_delay,
        max_queue_size              = EXCLUDED.max_queue_size,
        ttl                         = EXCLUDED.ttl,
        priority                    = EXCLUDED.priority,
        delayed_processing          = EXCLUDED.delayed_processing,
        window_buffer               = EXCLUDED.window_buffer,
        retention_enabled           = EXCLUDED.retention_enabled,
        retention_seconds           = EXCLUDED.retention_seconds,
        completed_retention_seconds = EXCLUDED.completed_retention_seconds,
        max_wait_time_seconds       = EXCLUDED.max_wait_time_seconds,
        dead_letter_queue           = EXCLUDED.dead_letter_queue,
        dlq_after_max_retries       = EXCLUDED.dlq_after_max_retries,
        dlq_enabled                 = EXCLUDED.dlq_enabled,
        encryption_enabled          = EXCLUDED.encryption_enabled,
        min_pop_wait_time           = EXCLUDED.min_pop_wait_time,
        dedup_window_seconds        = EXCLUDED.dedup_window_seconds,
        retry_delay_applied         = EXCLUDED.retry_delay_applied,
        -- A variable, not now(): Citus takes no function that is not
        -- IMMUTABLE in DO UPDATE SET of a distributed or reference table.
        updated_at                  = v_now
    RETURNING q.id INTO v_queue_id;

    -- The Default partition, under its derived id (p_default_partition_id,
    -- the broker's proposal, is not used), locked until the commit: the
    -- order queue row, then partition, that every writer of both follows.
    v_partition_id := queen.log_partition_open_v1(v_queue_id, 'Default');

    RETURN QUERY SELECT v_queue_id, v_partition_id;
END
$$;

-- queen.configure_queue_v1: the previous signature, for a broker of the
-- previous version still serving during an upgrade: configure_queue_v2 with
-- retryDelay not applied.
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(
    p_tenant                      text,
    p_name                        text,
    p_namespace                   text,
    p_task                        text,
    p_lease_time                  integer,
    p_retry_limit                 integer,
    p_retry_delay                 integer,
    p_max_queue_size              integer,
    p_ttl                         integer,
    p_priority                    integer,
    p_delayed_processing          integer,
    p_window_buffer               integer,
    p_retention_enabled           boolean,
    p_retention_seconds           integer,
    p_completed_retention_seconds integer,
    p_max_wait_time_seconds       integer,
    p_dead_letter_queue           boolean,
    p_dlq_after_max_retries       boolean,
    p_dlq_enabled                 boolean,
    p_encryption_enabled          boolean,
    p_min_pop_wait_time           integer,
    p_dedup_window_seconds        integer,
    p_new_queue_id                uuid,
    p_default_partition_id        uuid
)
RETURNS TABLE (queue_id uuid, partition_id uuid)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT * FROM queen.configure_queue_v2(
        p_tenant, p_name, p_namespace, p_task, p_lease_time, p_retry_limit, p_retry_delay,
        p_max_queue_size, p_ttl, p_priority, p_delayed_processing, p_window_buffer,
        p_retention_enabled, p_retention_seconds, p_completed_retention_seconds,
        p_max_wait_time_seconds, p_dead_letter_queue, p_dlq_after_max_retries, p_dlq_enabled,
        p_encryption_enabled, p_min_pop_wait_time, p_dedup_window_seconds, false,
        p_new_queue_id, p_default_partition_id);
END
$$;
