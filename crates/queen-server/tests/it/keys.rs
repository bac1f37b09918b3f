//! The at-rest key as an operator handles it: from the environment or a
//! file, refused at boot when malformed, and rotated across a restart.

use std::time::Duration;

use queen_testkit::TestDb;
use serde_json::{json, Value};

use crate::harness::{command, Broker};

const KEY_A: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
const KEY_B: &str = "f9e8d7c6b5a4938271605f4e3d2c1b0af9e8d7c6b5a4938271605f4e3d2c1b0a";

/// Run the binary with `vars` to its exit; its status and stderr.
fn boot_failure(vars: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = command(vars);
    // Nothing reachable: a boot that got past its settings would wait for it.
    cmd.env(
        "QUEEN_DATABASE_URL",
        "host=/nonexistent port=1 user=nobody dbname=none",
    );
    let output = cmd.output().expect("run queen-server");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_malformed_key_stops_the_boot_naming_its_variable_and_not_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let short_file = dir.path().join("short.key");
    std::fs::write(&short_file, "abcd\n").unwrap();
    let short_file = short_file.display().to_string();
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("QUEEN_ENCRYPTION_KEY", "not-hex-at-all")],
            "QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters",
        ),
        (
            &[("QUEEN_ENCRYPTION_KEY", &KEY_A[..62])],
            "QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters",
        ),
        (
            &[("QUEEN_ENCRYPTION_KEY_FILE", &short_file)],
            "the content of QUEEN_ENCRYPTION_KEY_FILE must be 64 hexadecimal characters",
        ),
        (
            &[
                ("QUEEN_ENCRYPTION_KEY", KEY_A),
                ("QUEEN_ENCRYPTION_KEY_FILE", &short_file),
            ],
            "not both",
        ),
        (
            &[("QUEEN_ENCRYPTION_KEY_OLD", KEY_A)],
            "QUEEN_ENCRYPTION_KEY_OLD needs the new key",
        ),
    ];
    for (vars, message) in cases {
        let started = std::time::Instant::now();
        let (ok, stderr) = boot_failure(vars);
        assert!(!ok, "{vars:?} booted");
        assert!(stderr.contains(message), "{vars:?}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "refused before any database work"
        );
        for (_, value) in vars {
            if value.len() >= 32 {
                assert!(!stderr.contains(*value), "a key reached the log");
            }
        }
    }
    let (ok, stderr) = boot_failure(&[("QUEEN_ENCRYPTION_KEY_FILE", "/nonexistent/queen.key")]);
    assert!(!ok);
    assert!(
        stderr.contains("cannot read the encryption key file /nonexistent/queen.key"),
        "{stderr}"
    );
}

async fn pop_one(broker: &Broker) -> Value {
    let reply = broker
        .client
        .get("/api/v1/pop/queue/vault?autoAck=true&batch=1")
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["messages"][0]["data"].clone()
}

async fn push(broker: &Broker, payload: Value) {
    let reply = broker
        .client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "vault", "payload": payload}]}),
        )
        .await;
    assert_eq!(
        reply.status,
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_reads_what_the_old_one_sealed_across_restarts() {
    let scratch = tempfile::tempdir().unwrap();
    let key_file = scratch.path().join("a.key");
    std::fs::write(&key_file, format!("  {KEY_A}\n")).unwrap();
    let key_file = key_file.display().to_string();
    let db = TestDb::empty().await;
    let url = db.url();

    // Key A, from a file: an encrypted queue and two messages sealed with it.
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_ENCRYPTION_KEY_FILE", &key_file),
        ],
    )
    .await;
    let configured = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "vault", "options": {"encryptionEnabled": true, "leaseTime": 1}}),
        )
        .await;
    assert_eq!(configured.status, 200);
    push(&broker, json!({"sealed": "by A, 1"})).await;
    push(&broker, json!({"sealed": "by A, 2"})).await;
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");

    // Rotated: key B, A as the old key. A's messages open; new ones use B.
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_ENCRYPTION_KEY", KEY_B),
            ("QUEEN_ENCRYPTION_KEY_OLD", KEY_A),
        ],
    )
    .await;
    assert_eq!(pop_one(&broker).await, json!({"sealed": "by A, 1"}));
    push(&broker, json!({"sealed": "by B"})).await;
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");

    // Key B alone: what A sealed no longer opens. An autoAck pop fails,
    // and gives its claim back (its cursor moved in the claiming
    // statement): nothing is lost. A leased pop fails too; its lease runs
    // out and the message comes back.
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_ENCRYPTION_KEY", KEY_B),
        ],
    )
    .await;
    for pop in [
        "/api/v1/pop/queue/vault?batch=1&autoAck=true",
        "/api/v1/pop/queue/vault?batch=1&autoAck=true",
        "/api/v1/pop/queue/vault?batch=1",
    ] {
        let reply = broker.client.get(pop).await;
        assert_ne!(
            reply.status,
            200,
            "a message sealed by A opened without A: {}",
            String::from_utf8_lossy(&reply.body)
        );
    }
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("auto-ack claim given back"), "{log}");

    // B with A as the old key again, once that lease ended: A's second
    // message, then B's.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_ENCRYPTION_KEY", KEY_B),
            ("QUEEN_ENCRYPTION_KEY_OLD", KEY_A),
        ],
    )
    .await;
    assert_eq!(pop_one(&broker).await, json!({"sealed": "by A, 2"}));
    assert_eq!(pop_one(&broker).await, json!({"sealed": "by B"}));
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
}
