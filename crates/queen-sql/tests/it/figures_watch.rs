//! The kept figures' verify cycle runs only after a loss
//! (`figures_watch_v1`): an idle fold pass reads no partition, a dead
//! broker's expired row starts a cycle that marks partitions dirty a bounded
//! share at a time, measured with the session's own transaction statistics.

use queen_sql::figures::{first_step, fold, Fold, Watch};
use queen_sql::push::{push_segments, SegmentWrite};
use queen_testkit::TestDb;
use uuid::Uuid;

const PARTITIONS: usize = 1_000;
const VERIFY: i32 = 256;

/// The tables a verify reads per partition.
const READ: &[&str] = &[
    "log_partitions",
    "log_consumers",
    "log_dlq",
    "figures_partition",
    "figures_cursor",
];

async fn populate(client: &tokio_postgres::Client) {
    let names: Vec<String> = (0..PARTITIONS).map(|p| format!("p{p:05}")).collect();
    let hash = [1u8; 16];
    let writes: Vec<SegmentWrite<'_>> = names
        .iter()
        .map(|name| crate::one_frame("watched", name, &hash))
        .collect();
    push_segments(client, "", &writes).await.unwrap();
    let none: &[String] = &[];
    while fold(client, 4096, 0, (none, none, none), &[])
        .await
        .unwrap()
        != Fold::Folded(0)
    {}
}

/// One pass's first step as a broker runs it, in a transaction: what it
/// folded, and the rows of [`READ`] it read.
async fn pass_start(client: &tokio_postgres::Client, broker: Uuid) -> (Fold, i64) {
    let none: &[String] = &[];
    client.batch_execute("BEGIN").await.unwrap();
    let before = crate::xact_rows_read(client, READ).await;
    let watch = Watch {
        broker,
        lost: false,
        alive_ms: 60_000,
    };
    let folded = first_step(client, 4096, VERIFY, (none, none, none), &[], &watch)
        .await
        .unwrap();
    let read = crate::xact_rows_read(client, READ).await - before;
    client.batch_execute("COMMIT").await.unwrap();
    (folded, read)
}

async fn dirty_partitions(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT COALESCE(sum(cardinality(partition_ids)), 0)::bigint FROM queen.figures_dirty",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn an_idle_pass_reads_no_partition_until_a_broker_dies() {
    let db = TestDb::new().await;
    let client = db.client().await;
    populate(&client).await;
    let broker = Uuid::now_v7();

    // Idle, nobody lost anything: nothing is read for a verify.
    for _ in 0..3 {
        let (folded, read) = pass_start(&client, broker).await;
        assert_eq!(folded, Fold::Folded(0));
        assert!(read < 5, "an idle pass read {read} rows");
    }
    assert_eq!(dirty_partitions(&client).await, 0);

    // Another broker's row past its time: it died holding marks. The next
    // pass marks the first 256 partitions dirty and folds them, each later
    // one the next 256.
    client
        .execute(
            "INSERT INTO queen.figures_brokers (broker_id, expires_at) \
             VALUES ($1, now() - interval '1 second')",
            &[&Uuid::now_v7()],
        )
        .await
        .unwrap();
    let (folded, read) = pass_start(&client, broker).await;
    assert_eq!(folded, Fold::Folded(VERIFY.unsigned_abs()));
    assert!(read >= i64::from(VERIFY), "{read}");
    assert_eq!(dirty_partitions(&client).await, 0);
    let brokers: i64 = client
        .query_one("SELECT count(*) FROM queen.figures_brokers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        brokers, 1,
        "the dead broker's row is gone, this one's stays"
    );
    let mut steps = 1;
    loop {
        let pending: bool = client
            .query_one("SELECT pending FROM queen.figures_verify", &[])
            .await
            .unwrap()
            .get(0);
        if !pending {
            break;
        }
        pass_start(&client, broker).await;
        steps += 1;
        assert!(steps <= 5, "the cycle never ended");
    }
    // 1,000 partitions at 256 a pass: four passes, the last one short.
    assert_eq!(steps, 4);
    let (folded, read) = pass_start(&client, broker).await;
    assert_eq!(folded, Fold::Folded(0));
    assert!(read < 5, "idle again: {read} rows");
}
