//! `maxSize` from the kept figures: what a push to a bounded queue reads
//! (`queen.log_push_v2` step 4b, `figures_queue_depth_v1`), measured with
//! the session's own transaction statistics, and the depth it counts.

use queen_sql::figures::{fold, mark, Fold};
use queen_sql::pop::{pop_list, PopParams};
use queen_sql::push::{push_segments, SegmentWrite, SlotOutcome};
use queen_testkit::TestDb;
use uuid::Uuid;

/// Partitions of the bounded queue: a scan of them shows plainly.
const PARTITIONS: i32 = 2_000;

const QUEUE: &str = "bounded";

fn write<'a>(partition: &'a str, hash: &'a [u8]) -> SegmentWrite<'a> {
    crate::one_frame(QUEUE, partition, hash)
}

async fn push_to(client: &tokio_postgres::Client, partition: &str) -> SlotOutcome {
    let hash = [7u8; 16];
    let mut outcomes = push_segments(client, "", &[write(partition, &hash)])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 1);
    outcomes.remove(0)
}

/// Rows of the partitions and cursors tables this session's transaction
/// has read so far.
async fn partition_reads(client: &tokio_postgres::Client) -> i64 {
    crate::xact_rows_read(client, &["log_partitions", "log_consumers"]).await
}

async fn fold_all(client: &tokio_postgres::Client) {
    let none: &[String] = &[];
    while fold(client, 512, 0, (none, none, none), &[]).await.unwrap() != Fold::Folded(0) {}
}

async fn depths(client: &tokio_postgres::Client, queue_id: Uuid) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT queen.figures_queue_depth_v1($1), queen.log_queue_depth_v1($1)",
            &[&queue_id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_bounded_push_reads_its_changes_not_the_queues_partitions() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let names: Vec<String> = (0..PARTITIONS).map(|p| format!("p{p:05}")).collect();
    let hash = [1u8; 16];
    let writes: Vec<SegmentWrite<'_>> = names.iter().map(|name| write(name, &hash)).collect();
    let outcomes = push_segments(&client, "", &writes).await.unwrap();
    let SlotOutcome::Queued { queue_id, .. } = outcomes[0] else {
        panic!("{:?}", outcomes[0]);
    };
    fold_all(&client).await;
    client
        .execute(
            "UPDATE queen.queues SET max_queue_size = $1 WHERE id = $2",
            &[&(PARTITIONS + 1), &queue_id],
        )
        .await
        .unwrap();

    // One push with room: the queue's kept row and its dirty partitions,
    // not its 2,000 partitions (the scan it replaced reads every one).
    client.batch_execute("BEGIN").await.unwrap();
    let before = partition_reads(&client).await;
    let outcome = push_to(&client, "p00000").await;
    let read = partition_reads(&client).await - before;
    client.batch_execute("ROLLBACK").await.unwrap();
    assert!(matches!(outcome, SlotOutcome::Queued { .. }), "{outcome:?}");
    assert!(
        read < 20,
        "a bounded push read {read} partition and cursor rows"
    );
    client.batch_execute("BEGIN").await.unwrap();
    let before = partition_reads(&client).await;
    client
        .query_one("SELECT queen.log_queue_depth_v1($1)", &[&queue_id])
        .await
        .unwrap();
    let scanned = partition_reads(&client).await - before;
    client.batch_execute("ROLLBACK").await.unwrap();
    assert!(scanned >= i64::from(PARTITIONS), "the scan read {scanned}");

    // The push marks what it wrote in its own transaction: the next push,
    // with no fold between, counts it and is refused.
    assert!(matches!(
        push_to(&client, "p00001").await,
        SlotOutcome::Queued { .. }
    ));
    assert_eq!(depths(&client, queue_id).await, (2_001, 2_001));
    let refused = push_to(&client, "p00002").await;
    assert!(matches!(refused, SlotOutcome::Full { .. }), "{refused:?}");
    assert_eq!(depths(&client, queue_id).await, (2_001, 2_001));
}

#[tokio::test]
async fn an_unmarked_consumption_over_counts_the_depth_until_marked() {
    let db = TestDb::new().await;
    let client = db.client().await;
    for _ in 0..3 {
        assert!(matches!(
            push_to(&client, "a").await,
            SlotOutcome::Queued { .. }
        ));
    }
    let SlotOutcome::Queued {
        queue_id,
        partition_id,
        ..
    } = push_to(&client, "b").await
    else {
        panic!("the push to b");
    };
    let params = PopParams {
        group: "g",
        worker: Uuid::now_v7(),
        budget: 1,
        max_partitions: 1,
        lease_seconds: None,
        auto_ack: true,
        sub_mode: "all",
        sub_from: None,
    };
    // The first pop creates the group's cursor: a trigger marks that.
    pop_list(&client, queue_id, &["a"], &params, false)
        .await
        .unwrap();
    fold_all(&client).await;
    assert_eq!(depths(&client, queue_id).await, (3, 3));
    // The second moves the cursor as an ack does: no trigger, the broker
    // marks it. Until it does, the depth counts the message still.
    pop_list(&client, queue_id, &["a"], &params, false)
        .await
        .unwrap();
    assert_eq!(depths(&client, queue_id).await, (3, 2));
    let a: Uuid = client
        .query_one(
            "SELECT id FROM queen.log_partitions WHERE queue_id = $1 AND name = 'a'",
            &[&queue_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(a, partition_id);
    let none: &[String] = &[];
    mark(&client, (none, none, none), &[a]).await.unwrap();
    assert_eq!(depths(&client, queue_id).await, (2, 2));
    fold_all(&client).await;
    assert_eq!(depths(&client, queue_id).await, (2, 2));
}
