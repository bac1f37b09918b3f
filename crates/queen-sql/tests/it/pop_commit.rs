//! `queen.log_pop_list_v1` commits a leased claim without waiting for its WAL
//! flush (a lease is soft state), and everything else durably: an auto-acked
//! claim moves the cursor, and a created cursor row holds a seeded position.
//! Each pop runs in a transaction here so `synchronous_commit` can be read
//! before it commits.

use queen_sql::pop::{pop_list, PopParams, PopRow};
use queen_sql::push::{push_segments, SegmentWrite, SlotOutcome};
use queen_testkit::TestDb;
use uuid::Uuid;

fn params(group: &'static str, auto_ack: bool) -> PopParams<'static> {
    PopParams {
        group,
        worker: Uuid::now_v7(),
        budget: 1,
        max_partitions: 1,
        lease_seconds: None,
        auto_ack,
        sub_mode: "all",
        sub_from: None,
    }
}

/// One pop of partition `p` in its own transaction: whether it claimed
/// anything, and the `synchronous_commit` its commit will use.
async fn pop_and_commit_mode(
    client: &mut deadpool_postgres::Object,
    queue_id: Uuid,
    params: &PopParams<'_>,
) -> (bool, String) {
    let tx = client.transaction().await.unwrap();
    let rows = pop_list(&tx, queue_id, &["p"], params, false)
        .await
        .unwrap();
    let mode: String = tx
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    tx.commit().await.unwrap();
    let claimed = rows.iter().any(|row| matches!(row, PopRow::Segment { .. }));
    (claimed, mode)
}

#[tokio::test]
async fn only_a_leased_claim_that_created_no_cursor_commits_without_the_flush() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let mut client = pool.get().await.unwrap();
    // Test clusters run with it off; a session of a production server has it on.
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .unwrap();
    let mut queue_id = Uuid::nil();
    for n in 0..3u8 {
        let hashes = [n; 16];
        let write = SegmentWrite {
            queue: "soft",
            partition: "p",
            namespace: "soft",
            task: "",
            new_queue_id: Uuid::now_v7(),
            new_partition_id: Uuid::now_v7(),
            encrypted: false,
            probe: true,
            coverage: None,
            n_frames: 1,
            blob: b"blob",
            hashes: &hashes,
        };
        let outcomes = push_segments(&client, "", &[write]).await.unwrap();
        let [SlotOutcome::Queued { queue_id: id, .. }] = outcomes.as_slice() else {
            panic!("{outcomes:?}");
        };
        queue_id = *id;
    }
    // Auto-ack: the cursor moves, durably.
    let auto = params("auto", true);
    assert_eq!(
        pop_and_commit_mode(&mut client, queue_id, &auto).await,
        (true, "on".into())
    );
    // A leased first contact creates the group's cursor row: durable.
    let leased = params("leased", false);
    assert_eq!(
        pop_and_commit_mode(&mut client, queue_id, &leased).await,
        (true, "on".into())
    );
    // The lease's ack, then a plain leased claim: soft, no flush wait.
    client
        .execute(
            "UPDATE queen.log_consumers SET committed = batch_end, worker_id = NULL, \
                    lease_expires_at = NULL, batch_end = NULL \
              WHERE consumer_group = 'leased'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        pop_and_commit_mode(&mut client, queue_id, &leased).await,
        (true, "off".into())
    );
    // Leased, but nothing claimed (the lease is still held): nothing to soften.
    assert_eq!(
        pop_and_commit_mode(&mut client, queue_id, &leased).await,
        (false, "on".into())
    );
    // The setting ended with its transaction.
    let after: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, "on");
}
