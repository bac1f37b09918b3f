//! `/metrics/prometheus` read by the Prometheus project's own parser (the
//! Python `prometheus_client`, both its 0.0.4 and its strict OpenMetrics
//! parser, from the SDK test's environment), with PostgreSQL up and stopped.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::faults::{own_cluster, scratch};
use crate::harness::Broker;
use crate::sdk::{python, run_limited, workspace_root};

/// One parsed sample: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: serde_json::Map<String, Value>,
    value: f64,
}

/// Parse `text` with both parsers; panics with the parser's complaint.
async fn parse(text: &str) -> Vec<Sample> {
    let python = python().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    let script = workspace_root().join("tests/sdk/prom_parse.py");
    let path = file.path().to_owned();
    let done = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(python).arg(script).arg(path),
            Duration::from_secs(60),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        done.ok(),
        "the parser refused the scrape:\n{}\n{text}",
        done.describe()
    );
    let parsed: Value = serde_json::from_str(&done.stdout).unwrap();
    parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sample| Sample {
            name: sample[0].as_str().unwrap().to_owned(),
            labels: sample[1].as_object().unwrap().clone(),
            value: sample[2].as_f64().unwrap(),
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|sample| {
            sample.name == name
                && labels.iter().all(|(key, want)| {
                    sample.labels.get(*key).and_then(Value::as_str) == Some(*want)
                })
        })
        .map(|sample| sample.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_scrape_parses_and_counts_with_postgres_up_and_down() {
    let dir = scratch();
    let (cluster, url) = own_cluster(dir.path()).await;
    let broker = Broker::start(dir.path(), &[("QUEEN_DATABASE_URL", &url)]).await;
    let client = &broker.client;

    let items: Vec<Value> = (0..5)
        .map(|i| json!({"queue": "scraped", "partition": "p", "payload": {"i": i}}))
        .collect();
    assert_eq!(
        client
            .post_json("/api/v1/push", &json!({"items": items}))
            .await
            .status,
        201
    );
    let popped = client.get("/api/v1/pop/queue/scraped?batch=3").await;
    assert_eq!(popped.status, 200);
    let popped = popped.json();
    let acks: Vec<Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                   "leaseId": m["leaseId"], "status": "completed"})
        })
        .collect();
    assert_eq!(acks.len(), 3);
    let acked = client
        .post_json("/api/v1/ack/batch", &json!({"acknowledgments": acks}))
        .await;
    assert_eq!(acked.status, 200, "{:?}", acked.body);

    let scrape = client.get("/metrics/prometheus").await;
    assert_eq!(scrape.status, 200);
    assert_eq!(
        scrape.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = String::from_utf8(scrape.body.to_vec()).unwrap();
    let samples = parse(&text).await;
    assert_eq!(value(&samples, "queen_push_messages_total", &[]), Some(5.0));
    assert_eq!(value(&samples, "queen_pop_messages_total", &[]), Some(3.0));
    assert_eq!(
        value(
            &samples,
            "queen_ack_messages_total",
            &[("outcome", "completed")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "queen_http_requests_total",
            &[
                ("route", "/api/v1/push"),
                ("method", "POST"),
                ("status", "201")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "queen_http_request_duration_seconds_count",
            &[("route", "/api/v1/pop/queue/:queue"), ("method", "GET")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&samples, "queen_cluster_up", &[]), Some(1.0));
    assert_eq!(
        value(&samples, "queen_queue_messages", &[("queue", "scraped")]),
        Some(5.0)
    );
    assert_eq!(
        value(&samples, "queen_queue_depth", &[("queue", "scraped")]),
        Some(2.0)
    );
    assert_eq!(
        value(
            &samples,
            "queen_consumer_lag_messages",
            &[("queue", "scraped"), ("group", "__QUEUE_MODE__")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&samples, "queen_dlq_messages", &[("queue", "scraped")]),
        Some(0.0)
    );
    assert!(value(&samples, "queen_fusion_flush_messages_count", &[]).is_some_and(|n| n >= 1.0));
    assert!(value(&samples, "queen_db_pool_size", &[]).is_some_and(|n| n >= 1.0));
    // The admin views' figures: nothing dropped, the marks bounded.
    assert_eq!(
        value(&samples, "queen_figures_marks_dropped_total", &[]),
        Some(0.0)
    );
    assert!(value(&samples, "queen_figures_marks", &[]).is_some_and(|n| n <= 65_536.0));
    assert!(value(&samples, "queen_figures_folded_partitions_total", &[]).is_some());

    // PostgreSQL stopped: the scrape still answers at once-ish, with every
    // process series, the last cluster series and cluster_up 0.
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.stop().expect("stop PostgreSQL");
        cluster
    })
    .await
    .unwrap();
    // Past the cluster TTL and the overdue allowance.
    tokio::time::sleep(
        queen_engine::metrics::CLUSTER_TTL
            + queen_engine::metrics::CLUSTER_TIMEOUT
            + Duration::from_secs(1),
    )
    .await;
    let started = Instant::now();
    let scrape = client.get("/metrics/prometheus").await;
    let took = started.elapsed();
    assert_eq!(scrape.status, 200);
    assert!(
        took < Duration::from_secs(4),
        "a scrape with PostgreSQL down took {took:?}"
    );
    let text = String::from_utf8(scrape.body.to_vec()).unwrap();
    let samples = parse(&text).await;
    assert_eq!(value(&samples, "queen_cluster_up", &[]), Some(0.0));
    assert_eq!(value(&samples, "queen_push_messages_total", &[]), Some(5.0));
    assert!(value(&samples, "queen_uptime_seconds", &[]).is_some_and(|n| n > 0.0));
    assert!(value(&samples, "queen_cluster_age_seconds", &[]).is_some_and(|age| age >= 5.0));
    let json = client.get("/metrics").await;
    assert_eq!(json.status, 200);
    assert_eq!(json.json()["messages"]["pushed"], 5);

    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster.start().expect("start PostgreSQL again");
        cluster
    })
    .await
    .unwrap();
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
}
