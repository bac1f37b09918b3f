//! The one name rule (issue 13, item 2): a queue, partition or consumer-group
//! name with a control character, or longer than 255 bytes, is refused with
//! a 400 naming the field on every route that takes one, and nothing is
//! written.

use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{expect_status, select_i64};

/// Every route that takes a name, with `{bad}` where the name goes.
const PATH_ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/api/v1/pop/queue/{bad}", "queue"),
    ("GET", "/api/v1/pop/queue/q/partition/{bad}", "partition"),
    (
        "GET",
        "/api/v1/pop/queue/q?consumerGroup={bad}",
        "consumerGroup",
    ),
    ("DELETE", "/api/v1/resources/queues/{bad}", "queue"),
    ("GET", "/api/v1/consumer-groups/{bad}", "consumerGroup"),
    ("DELETE", "/api/v1/consumer-groups/{bad}", "consumerGroup"),
    ("DELETE", "/api/v1/consumer-groups/g/queues/{bad}", "queue"),
    (
        "POST",
        "/api/v1/consumer-groups/{bad}/subscription",
        "consumerGroup",
    ),
    (
        "POST",
        "/api/v1/consumer-groups/g/queues/{bad}/seek",
        "queue",
    ),
    (
        "POST",
        "/api/v1/consumer-groups/g/queues/q/partitions/{bad}/seek",
        "partition",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_a_bad_name_and_writes_nothing() {
    let broker = TestBroker::start().await;
    let long = "x".repeat(256);
    for (bad, rule) in [
        // NUL is refused by the text rule, in its words, wherever it comes.
        ("a%00b", "must not contain NUL characters"),
        ("a%01b", "must not contain control characters"),
        ("tab%09", "must not contain control characters"),
        (long.as_str(), "must be at most 255 bytes"),
    ] {
        for (method, template, field) in PATH_ROUTES {
            let path = template.replace("{bad}", bad);
            let reply = match *method {
                "GET" => broker.client.get(&path).await,
                "DELETE" => broker.client.delete(&path).await,
                _ => {
                    broker
                        .client
                        .post_json(&path, &json!({"timestamp": "2026-01-01T00:00:00Z"}))
                        .await
                }
            };
            expect_status(&reply, 400);
            assert_eq!(
                reply.json()["error"],
                format!("{field} {rule}"),
                "{method} {path}"
            );
        }
        // Bodies: push and configure name the same fields the same way.
        let raw = bad
            .replace("%00", "\u{0}")
            .replace("%01", "\u{1}")
            .replace("%09", "\t");
        for (path, body, message) in [
            (
                "/api/v1/push",
                json!({"items": [{"queue": raw, "payload": 1}]}),
                format!("items[0].queue {rule}"),
            ),
            (
                "/api/v1/push",
                json!({"items": [{"queue": "q", "partition": raw, "payload": 1}]}),
                format!("items[0].partition {rule}"),
            ),
            ("/api/v1/configure", json!({"queue": raw}), String::new()),
        ] {
            let reply = broker.client.post_json(path, &body).await;
            expect_status(&reply, 400);
            let error = reply.json()["error"].as_str().unwrap().to_owned();
            if message.is_empty() {
                assert!(error.contains("queue") && error.contains(rule), "{error}");
            } else {
                assert_eq!(error, message);
            }
        }
    }
    let sql = broker.sql().await;
    for table in [
        "queen.queues",
        "queen.log_partitions",
        "queen.consumer_groups_metadata",
    ] {
        assert_eq!(
            select_i64(&sql, &format!("SELECT count(*) FROM {table}")).await,
            0,
            "a refused name wrote to {table}"
        );
    }
    broker.stop().await;
}
