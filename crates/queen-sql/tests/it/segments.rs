//! `queen_sql::segments::fetch_segment` over hand-inserted rows.

use std::time::{Duration, SystemTime};

use queen_sql::segments::{fetch_segment, SegmentRow};
use queen_sql::SqlError;
use queen_testkit::TestDb;
use uuid::Uuid;

/// One partition holding segments [0, 2] (with its sidecar) and [5, 9] (sidecar
/// already purged), with a retention-style gap at 3 and 4.
struct Fixture {
    partition_id: Uuid,
    first: SegmentRow,
    second: SegmentRow,
}

async fn fixture(client: &tokio_postgres::Client) -> Fixture {
    let queue_id = Uuid::now_v7();
    let partition_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'inspect')",
            &[&queue_id],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO queen.log_partitions (id, queue_id, name, last_offset, log_start) \
             VALUES ($1, $2, 'Default', 9, 0)",
            &[&partition_id, &queue_id],
        )
        .await
        .unwrap();
    let first = SegmentRow {
        partition_id,
        base_offset: 0,
        end_offset: 2,
        msg_count: 3,
        created_at: SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
        blob: b"first segment blob".to_vec(),
        hashes: Some((0..48).collect()),
    };
    let second = SegmentRow {
        partition_id,
        base_offset: 5,
        end_offset: 9,
        msg_count: 5,
        created_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_100),
        blob: vec![0, 1, 2, 255],
        hashes: None,
    };
    for segment in [&first, &second] {
        client
            .execute(
                "INSERT INTO queen.log_segments \
                 (partition_id, base_offset, end_offset, msg_count, created_at, blob) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &segment.partition_id,
                    &segment.base_offset,
                    &segment.end_offset,
                    &segment.msg_count,
                    &segment.created_at,
                    &segment.blob,
                ],
            )
            .await
            .unwrap();
        if let Some(hashes) = &segment.hashes {
            client
                .execute(
                    "INSERT INTO queen.log_txns \
                     (partition_id, base_offset, end_offset, created_at, hashes) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &segment.partition_id,
                        &segment.base_offset,
                        &segment.end_offset,
                        &segment.created_at,
                        hashes,
                    ],
                )
                .await
                .unwrap();
        }
    }
    Fixture {
        partition_id,
        first,
        second,
    }
}

fn assert_not_found(result: Result<SegmentRow, SqlError>, partition_id: Uuid, offset: i64) {
    match result {
        Err(SqlError::SegmentNotFound {
            partition_id: got_partition,
            offset: got_offset,
        }) => assert_eq!((got_partition, got_offset), (partition_id, offset)),
        other => panic!("offset {offset}: expected SegmentNotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn fetch_segment_returns_the_covering_segment_with_its_hashes() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fixture = fixture(&client).await;

    for offset in [0, 1, 2] {
        assert_eq!(
            fetch_segment(&client, fixture.partition_id, offset)
                .await
                .unwrap(),
            fixture.first,
            "offset {offset}"
        );
    }
    for offset in [5, 7, 9] {
        assert_eq!(
            fetch_segment(&client, fixture.partition_id, offset)
                .await
                .unwrap(),
            fixture.second,
            "offset {offset}"
        );
    }
}

#[tokio::test]
async fn fetch_segment_reports_gaps_the_tail_and_unknown_partitions_as_not_found() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fixture = fixture(&client).await;

    for offset in [-1, 3, 4, 10, i64::MAX] {
        assert_not_found(
            fetch_segment(&client, fixture.partition_id, offset).await,
            fixture.partition_id,
            offset,
        );
    }
    let unknown = Uuid::now_v7();
    assert_not_found(fetch_segment(&client, unknown, 1).await, unknown, 1);
}

#[tokio::test]
async fn fetch_segment_works_inside_a_transaction() {
    let db = TestDb::new().await;
    let mut client = db.client().await;
    let fixture = fixture(&client).await;
    let transaction = client.transaction().await.unwrap();
    assert_eq!(
        fetch_segment(&transaction, fixture.partition_id, 6)
            .await
            .unwrap(),
        fixture.second
    );
    transaction.rollback().await.unwrap();
}
