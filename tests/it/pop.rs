//! The pop path over real HTTP and PostgreSQL (issue: pop path).
//!
//! Behaviour tests run twice, through the hot-list (`QUEEN_HOTLIST=1`, the
//! default) and through the SQL candidate scan (`QUEEN_HOTLIST=0`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{both_paths, configure, cut, data, pop, push, select_i64};

both_paths!(
    pop_returns_pushed_messages_with_the_contract_fields,
    empty_pops_answer_204_with_no_body,
    a_lease_holds_the_partition_until_it_expires_then_redelivers,
    auto_ack_commits_at_delivery_with_an_empty_lease_id,
    named_groups_each_see_every_message_and_queue_mode_shares_one_cursor,
    subscription_new_skips_the_backlog_and_all_delivers_it,
    subscription_from_a_timestamp_starts_at_that_instant,
    later_partitions_deliver_their_backlog_to_a_new_subscription,
    delayed_processing_hides_young_segments,
    window_buffer_waits_for_a_quiet_partition,
    wildcard_pops_claim_up_to_n_partitions_with_one_lease,
    a_long_poll_wakes_when_a_push_arrives,
    a_long_poll_answers_empty_at_its_deadline,
    many_consumers_receive_every_message_exactly_once_in_order,
);

async fn pop_returns_pushed_messages_with_the_contract_fields(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    let pushed = push(
        &broker,
        "fields",
        "p0",
        &[json!({"n": 1}), json!("two"), json!(null)],
    )
    .await;
    let popped = pop(&broker, "/api/v1/pop/queue/fields?batch=10&wait=false")
        .await
        .unwrap();
    assert_eq!(popped["success"], true);
    assert_eq!(popped["queue"], "fields");
    assert_eq!(popped["partition"], "p0");
    assert_eq!(popped["partitionId"], pushed[0]["partition_id"]);
    assert_eq!(popped["consumerGroup"], "__QUEUE_MODE__");
    assert_eq!(popped["partitionsClaimed"], 1);
    let lease = popped["leaseId"].as_str().unwrap();
    assert!(lease.parse::<uuid::Uuid>().is_ok());
    assert_eq!(data(&popped), [json!({"n": 1}), json!("two"), json!(null)]);
    for (message, pushed) in popped["messages"].as_array().unwrap().iter().zip(&pushed) {
        assert_eq!(message["id"], pushed["message_id"]);
        assert_eq!(message["transactionId"], pushed["transaction_id"]);
        assert_eq!(message["partitionId"], pushed["partition_id"]);
        assert_eq!(message["partition"], "p0");
        assert_eq!(message["leaseId"], lease);
        assert_eq!(message["consumerGroup"], "__QUEUE_MODE__");
        assert!(message["traceId"].is_null());
        assert!(message["producerSub"].is_null());
        let created = message["createdAt"].as_str().unwrap();
        // ISO-8601 UTC with microseconds: 2026-01-01T00:00:00.123456Z
        assert_eq!(created.len(), 27, "{created}");
        assert!(created.ends_with('Z') && created.as_bytes()[19] == b'.');
    }
    // The single-partition route sees the same partition (now leased: empty).
    assert!(
        pop(&broker, "/api/v1/pop/queue/fields/partition/p0?wait=false")
            .await
            .is_none()
    );
    broker.stop().await;
}

async fn empty_pops_answer_204_with_no_body(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    // Unknown queue: empty, and the pop does not create it.
    let reply = broker
        .client
        .get("/api/v1/pop/queue/nothing?wait=false")
        .await;
    assert_eq!(reply.status, 204);
    assert!(reply.body.is_empty());
    assert!(reply.headers.get("content-length").is_none_or(|v| v == "0"));
    let sql = broker.sql().await;
    let queues: i64 = select_i64(&sql, "SELECT count(*) FROM queen.queues").await;
    assert_eq!(queues, 0);
    // Known but empty queue, and an unknown partition.
    configure(&broker, "known", json!({})).await;
    assert!(pop(&broker, "/api/v1/pop/queue/known?wait=false")
        .await
        .is_none());
    assert!(
        pop(&broker, "/api/v1/pop/queue/known/partition/nope?wait=false")
            .await
            .is_none()
    );
    broker.stop().await;
}

async fn a_lease_holds_the_partition_until_it_expires_then_redelivers(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "leasing", json!({"leaseTime": 1})).await;
    push(&broker, "leasing", "only", &[json!(1), json!(2)]).await;
    let first = pop(&broker, "/api/v1/pop/queue/leasing?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&first), [json!(1), json!(2)]);
    // Leased: nobody else in the group gets it.
    assert!(pop(&broker, "/api/v1/pop/queue/leasing?batch=10")
        .await
        .is_none());
    let sql = broker.sql().await;
    assert_eq!(consumer_row(&sql).await, (1, 0, -1));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Expired: the same batch again, attempt_count up, retry budget untouched.
    let again = pop(
        &broker,
        "/api/v1/pop/queue/leasing?batch=10&wait=true&timeout=3000",
    )
    .await
    .unwrap();
    assert_eq!(data(&again), [json!(1), json!(2)]);
    assert_ne!(again["leaseId"], first["leaseId"]);
    assert_eq!(consumer_row(&sql).await, (2, 0, -1));
    broker.stop().await;
}

/// (attempt_count, batch_retry_count, committed) of the only cursor row.
async fn consumer_row(sql: &tokio_postgres::Client) -> (i32, i32, i64) {
    let row = sql
        .query_one(
            "SELECT c.attempt_count, c.batch_retry_count, c.committed FROM queen.log_consumers c \
             JOIN queen.log_partitions p ON p.id = c.partition_id WHERE p.name = 'only'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

async fn auto_ack_commits_at_delivery_with_an_empty_lease_id(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "auto", "p", &[json!(1), json!(2), json!(3)]).await;
    let first = pop(&broker, "/api/v1/pop/queue/auto?batch=2&autoAck=true")
        .await
        .unwrap();
    assert_eq!(first["leaseId"], "");
    assert_eq!(first["messages"][0]["leaseId"], "");
    assert_eq!(data(&first), [json!(1), json!(2)]);
    // Not leased: the next pop gets the rest at once.
    let second = pop(&broker, "/api/v1/pop/queue/auto?batch=10&autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&second), [json!(3)]);
    assert!(pop(&broker, "/api/v1/pop/queue/auto?batch=10&autoAck=true")
        .await
        .is_none());
    let committed: i64 = select_i64(
        &broker.sql().await,
        "SELECT committed FROM queen.log_consumers",
    )
    .await;
    assert_eq!(committed, 2);
    broker.stop().await;
}

async fn named_groups_each_see_every_message_and_queue_mode_shares_one_cursor(
    config: EngineConfig,
) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "fan", "p", &[json!("a"), json!("b")]).await;
    for group in ["billing", "audit"] {
        let got = pop(
            &broker,
            &format!("/api/v1/pop/queue/fan?batch=10&autoAck=true&consumerGroup={group}"),
        )
        .await
        .unwrap();
        assert_eq!(data(&got), [json!("a"), json!("b")], "{group}");
        assert_eq!(got["consumerGroup"], group);
    }
    let queue_mode = pop(&broker, "/api/v1/pop/queue/fan?batch=1&autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&queue_mode), [json!("a")]);
    let queue_mode = pop(&broker, "/api/v1/pop/queue/fan?batch=1&autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&queue_mode), [json!("b")]);
    broker.stop().await;
}

async fn subscription_new_skips_the_backlog_and_all_delivers_it(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "subs", "p", &[json!("old")]).await;
    for mode in ["new", "new-only"] {
        let group = format!("g-{mode}");
        let path = format!(
            "/api/v1/pop/queue/subs?autoAck=true&consumerGroup={group}&subscriptionMode={mode}"
        );
        assert!(
            pop(&broker, &path).await.is_none(),
            "{mode} delivered the backlog"
        );
    }
    let all = pop(
        &broker,
        "/api/v1/pop/queue/subs?autoAck=true&consumerGroup=g-all&subscriptionMode=all",
    )
    .await
    .unwrap();
    assert_eq!(data(&all), [json!("old")]);
    // subscriptionFrom=now means new; queue mode ignores subscription intent.
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/subs?autoAck=true&consumerGroup=g-now&subscriptionFrom=now"
    )
    .await
    .is_none());
    let queue_mode = pop(
        &broker,
        "/api/v1/pop/queue/subs?autoAck=true&subscriptionMode=new",
    )
    .await
    .unwrap();
    assert_eq!(data(&queue_mode), [json!("old")]);
    push(&broker, "subs", "p", &[json!("fresh")]).await;
    for group in ["g-new", "g-new-only", "g-now"] {
        let got = pop(
            &broker,
            &format!("/api/v1/pop/queue/subs?autoAck=true&consumerGroup={group}"),
        )
        .await
        .unwrap();
        assert_eq!(data(&got), [json!("fresh")], "{group}");
    }
    broker.stop().await;
}

async fn subscription_from_a_timestamp_starts_at_that_instant(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "ts", "p", &[json!("before")]).await;
    let cut = cut(&broker).await;
    push(&broker, "ts", "p", &[json!("after")]).await;
    let got = pop(
        &broker,
        &format!(
            "/api/v1/pop/queue/ts?batch=10&autoAck=true&consumerGroup=since&subscriptionFrom={cut}"
        ),
    )
    .await
    .unwrap();
    assert_eq!(data(&got), [json!("after")]);
    // The one ISO-8601 parser: without an offset the time is UTC, as the
    // seek and subscription routes always read it (pop used to answer 400).
    let naive = cut.trim_end_matches('Z');
    let got = pop(
        &broker,
        &format!(
            "/api/v1/pop/queue/ts?batch=10&autoAck=true&consumerGroup=since-naive&subscriptionFrom={naive}"
        ),
    )
    .await
    .unwrap();
    assert_eq!(data(&got), [json!("after")]);
    let bad = broker
        .client
        .get("/api/v1/pop/queue/ts?consumerGroup=x&subscriptionFrom=yesterday")
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]
        .as_str()
        .unwrap()
        .contains("subscriptionFrom"));
    broker.stop().await;
}

async fn later_partitions_deliver_their_backlog_to_a_new_subscription(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "late", "early", &[json!("skipped")]).await;
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/late?autoAck=true&consumerGroup=g&subscriptionMode=new"
    )
    .await
    .is_none());
    // A partition created after the group subscribed delivers everything.
    push(&broker, "late", "newcomer", &[json!(1), json!(2)]).await;
    let got = pop(
        &broker,
        "/api/v1/pop/queue/late?batch=10&autoAck=true&consumerGroup=g",
    )
    .await
    .unwrap();
    assert_eq!(data(&got), [json!(1), json!(2)]);
    assert_eq!(got["partition"], "newcomer");
    broker.stop().await;
}

async fn delayed_processing_hides_young_segments(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "delayed", json!({"delayedProcessing": 1})).await;
    push(&broker, "delayed", "p", &[json!("later")]).await;
    assert!(pop(&broker, "/api/v1/pop/queue/delayed?autoAck=true")
        .await
        .is_none());
    let started = Instant::now();
    let got = pop(
        &broker,
        "/api/v1/pop/queue/delayed?autoAck=true&wait=true&timeout=5000",
    )
    .await
    .unwrap();
    assert_eq!(data(&got), [json!("later")]);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "delivered too early"
    );
    broker.stop().await;
}

async fn window_buffer_waits_for_a_quiet_partition(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "windowed", json!({"windowBuffer": 1})).await;
    push(&broker, "windowed", "p", &[json!(1)]).await;
    assert!(pop(&broker, "/api/v1/pop/queue/windowed?autoAck=true")
        .await
        .is_none());
    tokio::time::sleep(Duration::from_millis(500)).await;
    push(&broker, "windowed", "p", &[json!(2)]).await;
    // Still inside the quiet period of the second push.
    assert!(pop(&broker, "/api/v1/pop/queue/windowed?autoAck=true")
        .await
        .is_none());
    let got = pop(
        &broker,
        "/api/v1/pop/queue/windowed?batch=10&autoAck=true&wait=true&timeout=5000",
    )
    .await
    .unwrap();
    assert_eq!(data(&got), [json!(1), json!(2)]);
    broker.stop().await;
}

async fn wildcard_pops_claim_up_to_n_partitions_with_one_lease(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    for p in 0..5 {
        push(
            &broker,
            "multi",
            &format!("p{p}"),
            &[json!(p), json!(p * 10)],
        )
        .await;
    }
    let got = pop(&broker, "/api/v1/pop/queue/multi?batch=100&partitions=3")
        .await
        .unwrap();
    assert_eq!(got["partitionsClaimed"], 3);
    let messages = got["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 6);
    let lease = got["leaseId"].clone();
    assert!(messages.iter().all(|m| m["leaseId"] == lease));
    // Grouped partition by partition, in order within each.
    for pair in messages.chunks(2) {
        assert_eq!(pair[0]["partition"], pair[1]["partition"]);
        assert_eq!(
            pair[1]["data"],
            json!(pair[0]["data"].as_i64().unwrap() * 10)
        );
    }
    // The batch is a global cap across partitions.
    let capped = pop(&broker, "/api/v1/pop/queue/multi?batch=3&partitions=5")
        .await
        .unwrap();
    assert_eq!(capped["messages"].as_array().unwrap().len(), 3);
    broker.stop().await;
}

async fn a_long_poll_wakes_when_a_push_arrives(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "wake", json!({})).await;
    // Prime the group so the ring and the gate exist, then park.
    assert!(pop(&broker, "/api/v1/pop/queue/wake?autoAck=true")
        .await
        .is_none());
    let client = broker.client.clone();
    let parked = tokio::spawn(async move {
        let reply = client
            .get("/api/v1/pop/queue/wake?autoAck=true&wait=true&timeout=10000")
            .await;
        (reply.status, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!parked.is_finished());
    let pushed_at = Instant::now();
    push(&broker, "wake", "p", &[json!("hello")]).await;
    let (status, answered_at) = parked.await.unwrap();
    assert_eq!(status, 200);
    let latency = answered_at.duration_since(pushed_at);
    // The backoff floor is 1 s by now; a wake must beat it clearly.
    assert!(
        latency < Duration::from_millis(500),
        "woke after {latency:?}"
    );
    broker.stop().await;
}

async fn a_long_poll_answers_empty_at_its_deadline(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "deadline", json!({})).await;
    let started = Instant::now();
    assert!(
        pop(&broker, "/api/v1/pop/queue/deadline?wait=true&timeout=700")
            .await
            .is_none()
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(650),
        "returned early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(2500),
        "overslept: {elapsed:?}"
    );
    broker.stop().await;
}

async fn many_consumers_receive_every_message_exactly_once_in_order(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    const PARTITIONS: usize = 50;
    const PER_PARTITION: usize = 40;
    const CONSUMERS: usize = 200;
    for p in 0..PARTITIONS {
        let payloads: Vec<Value> = (0..PER_PARTITION)
            .map(|i| json!({"p": p, "i": i}))
            .collect();
        push(&broker, "crowd", &format!("p{p}"), &payloads).await;
    }
    let total = PARTITIONS * PER_PARTITION;
    // One entry per answered pop: what it delivered, in answer order.
    let batches = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<Vec<(usize, usize)>>::new()));
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let client = broker.client.clone();
        let batches = std::sync::Arc::clone(&batches);
        let delivered = std::sync::Arc::clone(&delivered);
        consumers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while delivered.load(std::sync::atomic::Ordering::Relaxed) < total
                && Instant::now() < deadline
            {
                let reply = client
                    .get("/api/v1/pop/queue/crowd?batch=7&autoAck=true&wait=true&timeout=300")
                    .await;
                if reply.status != 200 {
                    continue;
                }
                let body = reply.json();
                let got: Vec<(usize, usize)> = body["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| {
                        (
                            usize::try_from(m["data"]["p"].as_u64().unwrap()).unwrap(),
                            usize::try_from(m["data"]["i"].as_u64().unwrap()).unwrap(),
                        )
                    })
                    .collect();
                delivered.fetch_add(got.len(), std::sync::atomic::Ordering::Relaxed);
                batches.lock().push(got);
            }
        }));
    }
    for consumer in consumers {
        consumer.await.unwrap();
    }
    let batches = batches.lock().clone();
    let received: Vec<(usize, usize)> = batches.iter().flatten().copied().collect();
    let unique: HashSet<(usize, usize)> = received.iter().copied().collect();
    assert_eq!(unique.len(), total, "lost messages");
    assert_eq!(received.len(), total, "duplicated messages");
    // Order per partition: every answer carries, per partition, a run of
    // consecutive offsets in ascending order, and together the runs tile each
    // partition exactly (checked above), so no message jumped the queue.
    for batch in &batches {
        let mut runs: HashMap<usize, Vec<usize>> = HashMap::new();
        for (p, i) in batch {
            runs.entry(*p).or_default().push(*i);
        }
        for (p, run) in runs {
            assert!(
                run.windows(2).all(|w| w[1] == w[0] + 1),
                "partition {p} delivered out of order within one answer: {run:?}"
            );
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_bare_pop_without_namespace_or_task_is_400() {
    let broker = TestBroker::start().await;
    let reply = broker.client.get("/api/v1/pop").await;
    assert_eq!(reply.status, 400);
    assert!(reply.json()["error"]
        .as_str()
        .unwrap()
        .contains("namespace or task"));
    broker.stop().await;
}

#[tokio::test]
async fn a_discovery_pop_finds_queues_by_namespace_and_task() {
    let broker = TestBroker::start().await;
    push(&broker, "shop.orders.v1", "p", &[json!("order")]).await;
    push(&broker, "other.stuff", "p", &[json!("no")]).await;
    let got = pop(&broker, "/api/v1/pop?namespace=shop&autoAck=true")
        .await
        .unwrap();
    assert_eq!(got["queue"], "shop.orders.v1");
    assert_eq!(data(&got), [json!("order")]);
    assert!(pop(
        &broker,
        "/api/v1/pop?namespace=shop&task=orders&autoAck=true"
    )
    .await
    .is_none());
    push(&broker, "shop.orders.v1", "p", &[json!("again")]).await;
    let got = pop(&broker, "/api/v1/pop?task=orders&autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&got), [json!("again")]);
    broker.stop().await;
}

#[tokio::test]
async fn pop_maintenance_mode_answers_204_at_once() {
    let broker = TestBroker::start().await;
    push(&broker, "maint", "p", &[json!(1)]).await;
    let on = broker
        .client
        .post_json("/api/v1/system/maintenance/pop", &json!({"enabled": true}))
        .await;
    assert_eq!(on.status, 200);
    let started = Instant::now();
    let reply = broker
        .client
        .get("/api/v1/pop/queue/maint?wait=true&timeout=5000")
        .await;
    assert_eq!(reply.status, 204);
    assert!(reply.body.is_empty());
    assert!(started.elapsed() < Duration::from_millis(500));
    broker
        .client
        .post_json("/api/v1/system/maintenance/pop", &json!({"enabled": false}))
        .await;
    assert!(pop(&broker, "/api/v1/pop/queue/maint?autoAck=true")
        .await
        .is_some());
    broker.stop().await;
}
