//! `queen-inspect` decodes blobs from a file and from the database.

use std::process::Command;

use queen_frame::{Frame, SegmentBuilder};
use queen_testkit::TestDb;

fn frames() -> Vec<Frame<'static>> {
    vec![
        Frame {
            message_id: [1; 16],
            trace_id: None,
            transaction_id: "tx-a",
            producer_sub: None,
            encrypted: false,
            audience: None,
            payload: br#"{"n":1}"#,
        },
        Frame {
            message_id: [2; 16],
            trace_id: Some([9; 16]),
            transaction_id: "tx-b",
            producer_sub: Some("alice"),
            encrypted: false,
            audience: None,
            payload: b"null",
        },
        Frame {
            message_id: [3; 16],
            trace_id: None,
            transaction_id: "tx-c",
            producer_sub: None,
            encrypted: true,
            audience: None,
            payload: &[0xde, 0xad, 0xbe, 0xef],
        },
    ]
}

fn encode() -> (Vec<u8>, Vec<u8>) {
    let mut builder = SegmentBuilder::new();
    let frames = frames();
    for frame in &frames {
        builder.push(frame).unwrap();
    }
    let blob = builder.finish().unwrap().blob;
    let hashes: Vec<[u8; 16]> = frames
        .iter()
        .map(|f| queen_frame::txn_hash(f.transaction_id))
        .collect();
    (blob, queen_frame::build_sidecar(&hashes))
}

fn lines(output: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        output.status.success(),
        "queen-inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn check_lines(lines: &[serde_json::Value], base: i64) {
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["offset"], base);
    assert_eq!(
        lines[0]["messageId"],
        "01010101-0101-0101-0101-010101010101"
    );
    assert_eq!(lines[0]["transactionId"], "tx-a");
    assert_eq!(lines[0]["payload"], serde_json::json!({"n": 1}));
    assert_eq!(lines[0]["flags"], 0);
    assert_eq!(lines[0]["hashMatches"], true);
    assert_eq!(lines[1]["offset"], base + 1);
    assert_eq!(lines[1]["traceId"], "09090909-0909-0909-0909-090909090909");
    assert_eq!(lines[1]["producerSub"], "alice");
    assert_eq!(lines[1]["flags"], 3);
    assert!(lines[1]["payload"].is_null() && lines[1].get("payload").is_some());
    assert_eq!(lines[2]["encrypted"], true);
    assert_eq!(lines[2]["flags"], 4);
    assert_eq!(lines[2]["payloadHex"], "deadbeef");
}

#[test]
fn inspects_a_blob_file_with_its_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let (blob, hashes) = encode();
    std::fs::write(dir.path().join("seg.bin"), &blob).unwrap();
    std::fs::write(dir.path().join("seg.hashes"), &hashes).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_queen-inspect"))
        .arg("file")
        .arg(dir.path().join("seg.bin"))
        .arg("--hashes")
        .arg(dir.path().join("seg.hashes"))
        .args(["--base-offset", "40"])
        .output()
        .unwrap();
    check_lines(&lines(&output), 40);
}

#[test]
fn a_corrupt_blob_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (mut blob, _) = encode();
    blob.truncate(blob.len() / 2);
    std::fs::write(dir.path().join("seg.bin"), &blob).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_queen-inspect"))
        .arg("file")
        .arg(dir.path().join("seg.bin"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("queen-inspect: corrupt segment"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn inspects_a_segment_fetched_from_the_database() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let (blob, hashes) = encode();
    let queue_id = uuid::Uuid::now_v7();
    let partition_id = uuid::Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'inspect-q')",
            &[&queue_id],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO queen.log_partitions (id, queue_id, name, last_offset) VALUES ($1, $2, 'p', 12)",
            &[&partition_id, &queue_id],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob) \
             VALUES ($1, 10, 12, 3, now(), $2)",
            &[&partition_id, &blob],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes) \
             VALUES ($1, 10, 12, now(), $2)",
            &[&partition_id, &hashes],
        )
        .await
        .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_queen-inspect"))
        .args(["db", "--url", &db.url(), &partition_id.to_string(), "11"])
        .output()
        .unwrap();
    check_lines(&lines(&output), 10);

    let missing = Command::new(env!("CARGO_BIN_EXE_queen-inspect"))
        .args(["db", "--url", &db.url(), &partition_id.to_string(), "13"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no segment"));
}
