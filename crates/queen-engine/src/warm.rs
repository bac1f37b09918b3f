//! Pool warm-up: the first calls of Queen's procedures on a fresh PostgreSQL
//! session are several times slower than later ones (PL/pgSQL compiles each
//! function, and plans each statement in it, once per session), and on a
//! broker that just started every connection is fresh. Measured on the
//! early-consumer latency bench: the first push through a connection spent
//! 7.3 ms in `log_push_v1` against 0.7-1.0 ms warm, the first
//! `log_pop_list_v1` 3.4 ms against 0.6 ms, and the first delivery to a
//! consumer parked before its queue existed took about 20 ms, most of it that.
//!
//! [`Engine::warm_up`](crate::Engine::warm_up) takes a few connections at once (so the pool opens
//! that many) and runs, on each, the statements of the push, first contact,
//! pop and ack paths in one transaction that is rolled back: the sessions keep
//! their compiled functions, cached plans and prepared statements, and the
//! database keeps nothing. The queue it writes has a name no other session
//! can see (the transaction never commits) and a fresh id.

use std::time::Duration;

use bytes::Bytes;
use queen_sql::pop::{PopParams, PopRow};
use queen_sql::push::{SegmentWrite, SlotOutcome};
use uuid::Uuid;

use crate::naming::DEFAULT_TENANT;
use crate::push::{encode_entries, Entry, PushItem};
use crate::EngineError;

/// The longest the whole warm-up may take before it is abandoned.
const WARM_UP_BUDGET: Duration = Duration::from_secs(10);

/// Warm up to `connections` connections of `pool` (capped at the pool's
/// size). Returns how many were warmed; a failure is logged and only
/// means the next requests on those connections are slower.
pub(crate) async fn warm_up(
    pool: &deadpool_postgres::Pool,
    zstd_level: i32,
    connections: usize,
) -> usize {
    let n = connections.min(pool.status().max_size);
    let warm = async {
        // All held at once, so the pool opens `n` distinct sessions.
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            clients.push(pool.get().await.map_err(queen_sql::SqlError::from)?);
        }
        let mut warmed = 0;
        for client in &mut clients {
            match warm_one(client, zstd_level).await {
                Ok(()) => warmed += 1,
                Err(error) => {
                    tracing::debug!(error = %crate::error_chain(&error), "warming a connection failed");
                }
            }
        }
        Ok::<_, EngineError>(warmed)
    };
    match tokio::time::timeout(WARM_UP_BUDGET, warm).await {
        Ok(Ok(warmed)) => {
            tracing::info!(warmed, "connection pool warmed");
            warmed
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::error_chain(&error), "connection pool warm-up failed");
            0
        }
        Err(_) => {
            tracing::warn!("connection pool warm-up took too long; abandoned");
            0
        }
    }
}

/// One connection: push, first contact, seed, pending scan, pop and ack
/// a message of a queue of its own, then roll it all back.
async fn warm_one(
    client: &mut deadpool_postgres::Object,
    zstd_level: i32,
) -> Result<(), EngineError> {
    let transaction = client
        .transaction()
        .await
        .map_err(queen_sql::SqlError::from)?;
    let queue = format!("__queen_warm_up_{}", Uuid::now_v7());
    let (_, _, partition, entry) = Entry::from_item(
        PushItem {
            tenant: crate::naming::default_tenant(),
            queue: queue.clone(),
            partition: "Default".to_owned(),
            transaction_id: None,
            trace_id: None,
            producer_sub: None,
            payload: Bytes::from_static(b"{}"),
        },
        false,
    );
    let mut builder = queen_frame::SegmentBuilder::with_level(zstd_level);
    let encoded = encode_entries(std::iter::once(&entry), false, None, &queue, &mut builder)?;
    let write = SegmentWrite {
        queue: &queue,
        partition: &partition,
        namespace: "",
        task: "",
        new_queue_id: Uuid::now_v7(),
        new_partition_id: Uuid::now_v7(),
        encrypted: false,
        probe: false,
        coverage: None,
        n_frames: encoded.n_frames,
        blob: &encoded.blob,
        hashes: &encoded.hashes,
    };
    let outcomes = queen_sql::push::push_segments(&transaction, DEFAULT_TENANT, &[write]).await?;
    let Some(SlotOutcome::Queued { queue_id, .. }) = outcomes.into_iter().next() else {
        // Nothing to pop (cannot happen for a fresh queue): the push
        // path is warm at least.
        return Ok(());
    };
    queen_sql::pop::queue_info(&*transaction, DEFAULT_TENANT, &queue).await?;
    let params = PopParams {
        group: crate::QUEUE_MODE_GROUP,
        worker: Uuid::now_v7(),
        budget: 1,
        max_partitions: 1,
        lease_seconds: None,
        auto_ack: false,
        sub_mode: "all",
        sub_from: None,
    };
    crate::pop::first_contact_of(&*transaction, queue_id, &params).await?;
    queen_sql::pop::register_subscription(&*transaction, queue_id, params.group, "all", None)
        .await?;
    queen_sql::pop::hot_reseed(&*transaction, queue_id, params.group, None, None, 1, 1).await?;
    let rows = queen_sql::pop::pop_list(
        &transaction,
        queue_id,
        &[partition.as_str()],
        &params,
        false,
    )
    .await?;
    for row in &rows {
        if let PopRow::Segment {
            partition_id,
            base_offset,
            start_idx,
            take,
            ..
        } = row
        {
            let end = base_offset
                .saturating_add(i64::try_from(start_idx + take).unwrap_or(i64::MAX))
                .saturating_sub(1);
            queen_sql::ack::ack_batch(
                &transaction,
                *partition_id,
                params.group,
                params.worker,
                end,
            )
            .await?;
        }
    }
    transaction
        .rollback()
        .await
        .map_err(queen_sql::SqlError::from)?;
    Ok(())
}
