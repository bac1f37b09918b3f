//! `queen.log_push_v2`'s set-based path: a flush whose partitions
//! all exist is written with a handful of statements whatever its slot
//! count, and writes exactly what the per-slot loop wrote.

use queen_sql::push::{push_segments, Coverage, SegmentWrite, SlotOutcome};
use queen_testkit::TestDb;
use uuid::Uuid;

const SLOTS: usize = 20;

fn names() -> Vec<String> {
    // Sorted, as the broker sends them.
    let mut names: Vec<String> = (0..SLOTS).map(|p| format!("p{p:02}")).collect();
    names.sort();
    names
}

fn slot<'a>(
    partition: &'a str,
    hashes: &'a [u8],
    n_frames: i32,
    coverage: Option<Coverage>,
) -> SegmentWrite<'a> {
    SegmentWrite {
        queue: "flush",
        partition,
        namespace: "",
        task: "",
        new_queue_id: Uuid::now_v7(),
        new_partition_id: Uuid::now_v7(),
        encrypted: false,
        probe: false,
        coverage,
        n_frames,
        blob: b"blob",
        hashes,
    }
}

/// (log_txns index scans, log_partitions index scans) this transaction made.
async fn scans(client: &tokio_postgres::Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT COALESCE(sum(idx_scan) FILTER (WHERE relname = 'log_txns'), 0)::bigint, \
                    COALESCE(sum(idx_scan) FILTER (WHERE relname = 'log_partitions'), 0)::bigint \
               FROM pg_stat_xact_user_tables WHERE schemaname = 'queen'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

fn queued(outcome: &SlotOutcome) -> (Uuid, i64) {
    match outcome {
        SlotOutcome::Queued {
            partition_id,
            base_offset,
            ..
        } => (*partition_id, *base_offset),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_flush_of_existing_partitions_reads_no_sidecar_and_writes_every_slot() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let names = names();
    let one = [7u8; 16];
    // First flush: every partition is new (the per-slot path creates them).
    let writes: Vec<_> = names.iter().map(|p| slot(p, &one, 1, None)).collect();
    let first = push_segments(&client, "", &writes).await.unwrap();
    let ids: Vec<Uuid> = first.iter().map(|o| queued(o).0).collect();
    assert!(first.iter().all(|o| queued(o).1 == 0));

    // Second flush: every partition exists and the broker covers its one
    // sidecar row, so nothing needs the sidecar; slot i carries i + 1 frames.
    let hashes: Vec<Vec<u8>> = (0..SLOTS).map(|i| vec![9u8; 16 * (i + 1)]).collect();
    let writes: Vec<_> = names
        .iter()
        .zip(&ids)
        .zip(&hashes)
        .enumerate()
        .map(|(i, ((p, &partition_id), h))| {
            let coverage = Coverage {
                partition_id,
                cover_from: 0,
                known_to: 0,
            };
            slot(p, h, i32::try_from(i + 1).unwrap(), Some(coverage))
        })
        .collect();
    client.batch_execute("BEGIN").await.unwrap();
    let before = scans(&client).await;
    let second = push_segments(&client, "", &writes).await.unwrap();
    let after = scans(&client).await;
    client.batch_execute("COMMIT").await.unwrap();
    // The per-slot loop read the sidecar once per covered slot (rows another
    // broker wrote above the coverage) and the partition by key twice.
    assert_eq!(after.0 - before.0, 0, "sidecar index scans");
    assert!(
        after.1 - before.1 <= 2 * SLOTS as i64,
        "partition index scans: {}",
        after.1 - before.1
    );
    for (i, outcome) in second.iter().enumerate() {
        assert_eq!(queued(outcome), (ids[i], 1), "slot {i}");
    }
    // Segment and sidecar rows mirror each other, one offset range per slot.
    let rows = client
        .query(
            "SELECT p.name, s.base_offset, s.end_offset, s.msg_count, t.base_offset, t.end_offset, \
                    length(t.hashes), p.last_offset \
               FROM queen.log_segments s \
               JOIN queen.log_txns t USING (partition_id, base_offset) \
               JOIN queen.log_partitions p ON p.id = s.partition_id \
              WHERE s.base_offset = 1 ORDER BY p.name",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), SLOTS);
    for (i, row) in rows.iter().enumerate() {
        let n = i64::try_from(i + 1).unwrap();
        assert_eq!(row.get::<_, String>(0), names[i]);
        assert_eq!(row.get::<_, i64>(2), n);
        assert_eq!(row.get::<_, i32>(3), i32::try_from(n).unwrap());
        assert_eq!(row.get::<_, i64>(4), 1);
        assert_eq!(row.get::<_, i64>(5), n);
        assert_eq!(row.get::<_, i32>(6), i32::try_from(16 * n).unwrap());
        assert_eq!(row.get::<_, i64>(7), n, "allocator of {}", names[i]);
    }
}

#[tokio::test]
async fn rows_another_writer_added_above_the_coverage_come_back_known() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let names = names();
    let one = [3u8; 16];
    let writes: Vec<_> = names.iter().map(|p| slot(p, &one, 1, None)).collect();
    let ids: Vec<Uuid> = push_segments(&client, "", &writes)
        .await
        .unwrap()
        .iter()
        .map(|o| queued(o).0)
        .collect();
    // "Another broker" writes two rows to the third partition.
    for _ in 0..2 {
        push_segments(&client, "", &[slot(&names[2], &one, 1, None)])
            .await
            .unwrap();
    }
    // This broker still covers only offset 0 everywhere, and its slots carry
    // client ids (new ones), so each needs the rows above its coverage.
    let fresh = [4u8; 16];
    let writes: Vec<_> = names
        .iter()
        .zip(&ids)
        .map(|(p, &partition_id)| {
            let coverage = Coverage {
                partition_id,
                cover_from: 0,
                known_to: 0,
            };
            SegmentWrite {
                probe: true,
                ..slot(p, &fresh, 1, Some(coverage))
            }
        })
        .collect();
    let outcomes = push_segments(&client, "", &writes).await.unwrap();
    for (i, outcome) in outcomes.iter().enumerate() {
        let SlotOutcome::Queued {
            base_offset, known, ..
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        if i == 2 {
            assert_eq!(*base_offset, 3);
            let known: Vec<(i64, i64)> = known
                .iter()
                .map(|k| (k.base_offset, k.end_offset))
                .collect();
            assert_eq!(known, vec![(1, 1), (2, 2)]);
        } else {
            assert_eq!(*base_offset, 1);
            assert!(known.is_empty(), "slot {i}: {known:?}");
        }
    }
}

#[tokio::test]
async fn a_new_partition_among_existing_ones_is_written_in_the_same_call() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let one = [5u8; 16];
    push_segments(
        &client,
        "",
        &[slot("a", &one, 1, None), slot("c", &one, 1, None)],
    )
    .await
    .unwrap();
    let outcomes = push_segments(
        &client,
        "",
        &[
            slot("a", &one, 1, None),
            slot("b", &one, 1, None),
            slot("c", &one, 1, None),
        ],
    )
    .await
    .unwrap();
    let offsets: Vec<i64> = outcomes.iter().map(|o| queued(o).1).collect();
    assert_eq!(offsets, vec![1, 0, 1]);
}

#[tokio::test]
async fn covered_client_ids_take_the_set_path_and_an_uncovered_duplicate_is_still_caught() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let names = names();
    // First flush: client ids, nothing covered: every slot is probed.
    let firsts: Vec<[u8; 16]> = (0..SLOTS).map(|i| [u8::try_from(i).unwrap(); 16]).collect();
    let writes: Vec<_> = names
        .iter()
        .zip(&firsts)
        .map(|(p, h)| SegmentWrite {
            probe: true,
            ..slot(p, h, 1, None)
        })
        .collect();
    let ids: Vec<Uuid> = push_segments(&client, "", &writes)
        .await
        .unwrap()
        .iter()
        .map(|o| queued(o).0)
        .collect();
    // Second flush: new client ids, covered, except slot 5, which has no
    // coverage and repeats its first id.
    let seconds: Vec<[u8; 16]> = (0..SLOTS)
        .map(|i| [u8::try_from(100 + i).unwrap(); 16])
        .collect();
    let writes: Vec<_> = names
        .iter()
        .zip(&ids)
        .enumerate()
        .map(|(i, (p, &partition_id))| {
            if i == 5 {
                return SegmentWrite {
                    probe: true,
                    ..slot(p, &firsts[5], 1, None)
                };
            }
            let coverage = Coverage {
                partition_id,
                cover_from: 0,
                known_to: 0,
            };
            SegmentWrite {
                probe: true,
                ..slot(p, &seconds[i], 1, Some(coverage))
            }
        })
        .collect();
    client.batch_execute("BEGIN").await.unwrap();
    let before = scans(&client).await;
    let outcomes = push_segments(&client, "", &writes).await.unwrap();
    let after = scans(&client).await;
    client.batch_execute("COMMIT").await.unwrap();
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 5 {
            let SlotOutcome::Duplicates { duplicates, .. } = outcome else {
                panic!("slot 5: {outcome:?}");
            };
            assert_eq!(duplicates.len(), 1);
            assert_eq!(duplicates[0].winner_base, Some(0));
        } else {
            assert_eq!(queued(outcome), (ids[i], 1), "slot {i}");
        }
    }
    // The covered slots each read one sidecar row below their coverage (is
    // it still in the window?) and nothing else; slot 5 takes the loop.
    assert!(
        after.0 - before.0 <= SLOTS as i64 + 2,
        "sidecar index scans: {}",
        after.0 - before.0
    );
    let stored: i64 = client
        .query_one("SELECT count(*) FROM queen.log_segments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 2 * SLOTS as i64 - 1);
}

#[tokio::test]
async fn an_emptied_partition_written_by_the_set_path_gets_its_retention_work_list_back() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let names = names();
    let one = [6u8; 16];
    let writes: Vec<_> = names.iter().map(|p| slot(p, &one, 1, None)).collect();
    push_segments(&client, "", &writes).await.unwrap();
    // Retention emptied the first partition: no segment, no sidecar row,
    // watermarks past the end, work-list columns NULL.
    client
        .batch_execute(&format!(
            "DELETE FROM queen.log_segments s USING queen.log_partitions p
              WHERE p.id = s.partition_id AND p.name = '{0}';
             DELETE FROM queen.log_txns t USING queen.log_partitions p
              WHERE p.id = t.partition_id AND p.name = '{0}';
             UPDATE queen.log_partitions SET log_start = last_offset + 1,
                    txns_start = last_offset + 1, oldest_live_at = NULL, oldest_txn_at = NULL
              WHERE name = '{0}';",
            names[0]
        ))
        .await
        .unwrap();
    let writes: Vec<_> = names.iter().map(|p| slot(p, &one, 1, None)).collect();
    let outcomes = push_segments(&client, "", &writes).await.unwrap();
    assert!(outcomes.iter().all(|o| queued(o).1 == 1));
    let row = client
        .query_one(
            "SELECT p.oldest_live_at = s.created_at, p.oldest_txn_at = t.created_at,
                    s.created_at = t.created_at
               FROM queen.log_partitions p
               JOIN queen.log_segments s ON s.partition_id = p.id
               JOIN queen.log_txns t ON t.partition_id = p.id AND t.base_offset = s.base_offset
              WHERE p.name = $1",
            &[&names[0]],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (true, true, true)
    );
    // The others kept the created_at of their first segment.
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM queen.log_partitions p
               JOIN queen.log_segments s ON s.partition_id = p.id AND s.base_offset = 0
              WHERE p.oldest_live_at = s.created_at AND p.oldest_txn_at = s.created_at",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, SLOTS as i64 - 1);
}
