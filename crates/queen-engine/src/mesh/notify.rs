//! The `LISTEN`/`NOTIFY` transport: the zero-configuration mesh of brokers
//! that share a database.
//!
//! A batch is sent as `pg_notify('queen_mesh', <hex>)` (`queen_sql::notify`) on a pooled
//! connection, outside any transaction of the requests it reports (the
//! sender task runs after their commits); PostgreSQL delivers it to every
//! listening session. Each broker listens on one dedicated connection
//! (never the pool's), opened again a second after it broke; hints sent
//! while it was down are lost, which the reseed bounds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use super::wire;
use super::{Apply, Counters};

/// Largest batch per notification: PostgreSQL takes payloads under 8000
/// bytes, and hex doubles the batch.
pub(crate) const MAX_BATCH: usize = 3900;

/// Send `batches` in one round trip; false when it failed.
pub(crate) async fn send(pool: &deadpool_postgres::Pool, batches: &[Vec<u8>]) -> bool {
    let payloads: Vec<String> = batches.iter().map(hex::encode).collect();
    let Ok(client) = pool.get().await else {
        return false;
    };
    queen_sql::notify::notify(&**client, &payloads)
        .await
        .is_ok()
}

/// Listen until the task is aborted, reconnecting after a failure.
pub(crate) async fn listen_loop(
    config: tokio_postgres::Config,
    sender_id: u64,
    counters: Arc<Counters>,
    apply: Apply,
) {
    loop {
        if let Err(error) = listen(&config, sender_id, &counters, &apply).await {
            tracing::debug!(%error, "mesh LISTEN connection ended; reconnecting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn listen(
    config: &tokio_postgres::Config,
    sender_id: u64,
    counters: &Counters,
    apply: &Apply,
) -> Result<(), queen_sql::SqlError> {
    let (client, mut connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(queen_sql::SqlError::from)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(super::MAX_PENDING);
    // The connection is driven here; notifications come out of it.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    // Full (the engine is not keeping up): a lost hint.
                    if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                        tx.try_send(note.payload().to_owned())
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    });
    let listened = queen_sql::notify::listen(&client).await;
    if let Err(error) = listened {
        driver.abort();
        return Err(error);
    }
    while let Some(payload) = rx.recv().await {
        let batch = hex::decode(payload)
            .ok()
            .and_then(|bytes| wire::decode(&bytes));
        match batch {
            Some(batch) => super::received(batch, None, sender_id, counters, apply),
            None => {
                counters.dropped_malformed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    driver.abort();
    drop(client);
    Ok(())
}
