//! How much of the hash sidecar `queen.log_push_v2`'s duplicate probe reads,
//! measured with the session's own transaction statistics.

use queen_sql::pop::{pop_list, PopParams, PopRow};
use queen_sql::push::{push_segments, Coverage, SegmentWrite, SlotOutcome};
use queen_testkit::TestDb;
use uuid::Uuid;

const ROWS: i64 = 300;

/// A one-frame segment whose transaction-id hash is 16 copies of `n`'s bytes.
/// A queue-mode, auto-ack pop of one message from one partition.
fn queue_mode_pop() -> PopParams<'static> {
    PopParams {
        group: "__QUEUE_MODE__",
        worker: Uuid::now_v7(),
        budget: 1,
        max_partitions: 1,
        lease_seconds: None,
        auto_ack: true,
        sub_mode: "all",
        sub_from: None,
    }
}

fn hash_of(n: i64) -> Vec<u8> {
    let mut hash = [0u8; 16];
    hash[..8].copy_from_slice(&n.to_le_bytes());
    hash[8..].copy_from_slice(&(!n).to_le_bytes());
    hash.to_vec()
}

/// A one-frame segment of queue `queue`, partition `p`, with client ids.
fn write<'a>(queue: &'a str, hashes: &'a [u8], coverage: Option<Coverage>) -> SegmentWrite<'a> {
    SegmentWrite {
        queue,
        partition: "p",
        namespace: queue,
        task: "",
        new_queue_id: Uuid::now_v7(),
        new_partition_id: Uuid::now_v7(),
        encrypted: false,
        probe: true,
        coverage,
        n_frames: 1,
        blob: b"blob",
        hashes,
    }
}

async fn push_one(
    client: &tokio_postgres::Client,
    n: i64,
    coverage: Option<Coverage>,
) -> SlotOutcome {
    let hashes = hash_of(n);
    let mut outcomes = push_segments(client, "", &[write("probe", &hashes, coverage)])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 1);
    outcomes.remove(0)
}

/// Sidecar rows this session's transaction has read so far.
async fn sidecar_reads(client: &tokio_postgres::Client) -> i64 {
    crate::xact_rows_read(client, &["log_txns"]).await
}

/// Sidecar rows read by one push of `n` with `coverage` (rolled back), and
/// its outcome.
async fn rows_read(
    client: &tokio_postgres::Client,
    n: i64,
    coverage: Option<Coverage>,
) -> (i64, SlotOutcome) {
    client.batch_execute("BEGIN").await.unwrap();
    let before = sidecar_reads(client).await;
    let outcome = push_one(client, n, coverage).await;
    let read = sidecar_reads(client).await - before;
    client.batch_execute("ROLLBACK").await.unwrap();
    (read, outcome)
}

#[tokio::test]
async fn with_coverage_the_probe_reads_only_rows_above_it() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let mut partition_id = Uuid::nil();
    for n in 0..ROWS {
        match push_one(&client, n, None).await {
            SlotOutcome::Queued {
                partition_id: id,
                base_offset,
                ..
            } => {
                assert_eq!(base_offset, n);
                partition_id = id;
            }
            other => panic!("push {n}: {other:?}"),
        }
    }
    let covering = |cover_from, known_to| {
        Some(Coverage {
            partition_id,
            cover_from,
            known_to,
        })
    };
    // Everything covered: the probe reads no sidecar row, however many the
    // partition holds in the window (it read all 300 when the coverage was
    // only a filter).
    let (read, outcome) = rows_read(&client, ROWS, covering(0, ROWS - 1)).await;
    assert!(matches!(outcome, SlotOutcome::Queued { .. }), "{outcome:?}");
    assert!(read <= 1, "read {read} sidecar rows");
    // Ten rows above the coverage (another broker's): those ten, sent back.
    let (read, outcome) = rows_read(&client, ROWS, covering(0, ROWS - 11)).await;
    let SlotOutcome::Queued { known, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(known.len(), 10);
    assert!(read <= 2 * 10 + 1, "read {read} sidecar rows");
    // Coverage that starts inside the window: the rows below it are probed,
    // so a duplicate there is still found.
    let (read, outcome) = rows_read(&client, 5, covering(100, ROWS - 1)).await;
    assert!(
        matches!(&outcome, SlotOutcome::Duplicates { duplicates, .. } if duplicates.len() == 1),
        "{outcome:?}"
    );
    assert!(read >= 100, "read {read} sidecar rows");
    // No coverage: the whole window.
    let (read, outcome) = rows_read(&client, 7, None).await;
    assert!(
        matches!(outcome, SlotOutcome::Duplicates { .. }),
        "{outcome:?}"
    );
    assert!(read >= ROWS, "read {read} sidecar rows");
}

#[tokio::test]
async fn the_hot_statements_are_prepared_once_per_pooled_connection() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let client = pool.get().await.unwrap();
    let mut queue_id = Uuid::nil();
    for n in 0..3 {
        let hashes = hash_of(n);
        let outcomes =
            queen_sql::push::push_segments(&client, "", &[write("prepared", &hashes, None)])
                .await
                .unwrap();
        match outcomes.as_slice() {
            [SlotOutcome::Queued {
                base_offset,
                queue_id: id,
                ..
            }] if *base_offset == n => queue_id = *id,
            other => panic!("{other:?}"),
        }
    }
    let params = queue_mode_pop();
    for _ in 0..2 {
        let rows = pop_list(&client, queue_id, &["p"], &params, false)
            .await
            .unwrap();
        assert!(
            rows.iter().any(|row| matches!(row, PopRow::Segment { .. })),
            "{rows:?}"
        );
    }
    // One statement each, prepared on the first call and reused after.
    assert_eq!(client.statement_cache.size(), 2);
    let prepared: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements \
              WHERE starts_with(statement, 'SELECT * FROM queen.log_')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(prepared, 2);
}

/// `log_pop_list_v1` answers a candidate name with no partition with a
/// `missing` verdict (so the hot-list drops it) and goes on to the next name.
#[tokio::test]
async fn a_candidate_with_no_partition_gets_a_missing_verdict() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let client = pool.get().await.unwrap();
    let hashes = hash_of(0);
    let outcomes = queen_sql::push::push_segments(&client, "", &[write("listed", &hashes, None)])
        .await
        .unwrap();
    let [SlotOutcome::Queued { queue_id, .. }] = outcomes.as_slice() else {
        panic!("{outcomes:?}");
    };
    let params = queue_mode_pop();
    let rows = pop_list(&client, *queue_id, &["gone", "p"], &params, false)
        .await
        .unwrap();
    assert!(
        matches!(
            rows.first(),
            Some(PopRow::Verdict { partition, verdict: queen_sql::pop::Verdict::Missing, partition_id, .. })
                if partition == "gone" && partition_id.is_nil()
        ),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|row| matches!(row, PopRow::Segment { partition, .. } if partition == "p")),
        "the live partition after the missing one was not popped: {rows:?}"
    );
}

/// `log_dlq_head_v2` files nothing and leaves the cursor alone while another
/// worker holds a live lease: between `log_ack_v1`'s decision and the filing,
/// the lease may have ended and the batch been re-claimed.
#[tokio::test]
async fn filing_a_dead_letter_under_someone_elses_live_lease_is_refused() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let client = pool.get().await.unwrap();
    let hashes = hash_of(0);
    let outcomes = queen_sql::push::push_segments(&client, "", &[write("guarded", &hashes, None)])
        .await
        .unwrap();
    let [SlotOutcome::Queued { queue_id, .. }] = outcomes.as_slice() else {
        panic!("{outcomes:?}");
    };
    // A leased pop by "the other worker".
    let mut params = queue_mode_pop();
    params.auto_ack = false;
    let other = params.worker;
    pop_list(&client, *queue_id, &["p"], &params, false)
        .await
        .unwrap();
    let partition_id: Uuid = client
        .query_one(
            "SELECT id FROM queen.log_partitions WHERE queue_id = $1",
            &[queue_id],
        )
        .await
        .unwrap()
        .get(0);
    let letter = |lease| queen_sql::ack::DeadLetter {
        partition_id,
        group: "__QUEUE_MODE__",
        lease: Some(lease),
        offset: 0,
        message_id: Uuid::nil(),
        transaction_id: "t",
        trace_id: None,
        producer_sub: None,
        payload: b"null",
        encrypted: false,
        created_at: std::time::SystemTime::now(),
        error: "boom",
        retry_count: 3,
    };
    let state = || async {
        let row = client
            .query_one(
                "SELECT c.committed, (SELECT count(*) FROM queen.log_dlq) \
                   FROM queen.log_consumers c WHERE c.partition_id = $1",
                &[&partition_id],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    let refused = queen_sql::ack::dlq_head(&**client, &letter(Uuid::now_v7()))
        .await
        .unwrap();
    assert!(!refused.applied && !refused.filed, "{refused:?}");
    assert_eq!(
        state().await,
        (-1, 0),
        "the refused filing moved the cursor or filed"
    );
    let filed = queen_sql::ack::dlq_head(&**client, &letter(other))
        .await
        .unwrap();
    assert!(filed.applied && filed.filed, "{filed:?}");
    assert_eq!(state().await, (0, 1));
}

/// Until the sidecar is purged, the duplicate probe
/// without coverage and the hash-path ack walk a partition's whole sidecar
/// history (the ack's span is bounded by the index only from above); after
/// the retention step's purge both read about the window.
#[tokio::test]
async fn after_the_purge_the_probe_and_the_hash_ack_read_about_the_window() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let client = pool.get().await.unwrap();
    let mut ids = (Uuid::nil(), Uuid::nil());
    for n in 0..ROWS {
        if let SlotOutcome::Queued {
            queue_id,
            partition_id,
            ..
        } = push_one(&client, n, None).await
        {
            ids = (queue_id, partition_id);
        }
    }
    let (queue_id, partition_id) = ids;
    // The queue-mode cursor moves past all but the last five.
    let params = PopParams {
        budget: i32::try_from(ROWS - 5).unwrap(),
        ..queue_mode_pop()
    };
    pop_list(&client, queue_id, &["p"], &params, false)
        .await
        .unwrap();
    // All but the newest ten rows are two hours old.
    client
        .batch_execute(&format!(
            "UPDATE queen.log_txns SET created_at = created_at - interval '2 hours'
              WHERE base_offset < {};
             UPDATE queen.log_partitions SET oldest_txn_at = oldest_txn_at - interval '2 hours';",
            ROWS - 10
        ))
        .await
        .unwrap();
    // A hash-path ack of one of the last messages, in a rolled-back
    // transaction: the sidecar rows it read.
    let ack_reads = |n: i64| {
        let client = &client;
        async move {
            client.batch_execute("BEGIN").await.unwrap();
            let before = sidecar_reads(client).await;
            let hash = hash_of(n);
            let call = queen_sql::ack::AckCall {
                tenant: "",
                partition_id,
                group: "__QUEUE_MODE__",
                lease: None,
                hashes: &hash,
                statuses: &["completed"],
                errors: &[None],
                failed_to_dlq: false,
                offsets: None,
                frames: &[],
            };
            queen_sql::ack::ack(client, &call).await.unwrap();
            let read = sidecar_reads(client).await - before;
            client.batch_execute("ROLLBACK").await.unwrap();
            read
        }
    };
    let (probe_before, _) = rows_read(&client, ROWS + 1, None).await;
    let ack_before = ack_reads(ROWS - 2).await;
    assert!(probe_before >= ROWS, "probe read {probe_before}");
    assert!(ack_before >= ROWS - 10, "ack read {ack_before}");

    let step = queen_sql::retention::step(&**client, 256, 1024)
        .await
        .unwrap();
    assert_eq!(step.txn_rows, u32::try_from(ROWS - 10).unwrap());
    let (probe_after, _) = rows_read(&client, ROWS + 1, None).await;
    let ack_after = ack_reads(ROWS - 2).await;
    assert!(probe_after <= 2 * 10 + 2, "probe read {probe_after}");
    assert!(ack_after <= 2 * 10 + 2, "ack read {ack_after}");
}
