//! Issue 15, item 5: queue options the reference stores and ignores, made
//! real. `retryDelay` holds a failed batch back from its group for that many
//! milliseconds (when the configure request names it; left out, the
//! reference's 1000 is echoed and not applied, as the reference never
//! applied it); `maxSize` refuses a push that would take the queue's depth
//! past it, naming the queue, and writes nothing of that request.

use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{ack_all, both_paths, configure, data, pop, push};

both_paths!(a_failed_batch_comes_back_after_the_retry_delay);

async fn a_failed_batch_comes_back_after_the_retry_delay(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(
        &broker,
        "slow-retry",
        json!({"retryDelay": 1500, "retryLimit": 3}),
    )
    .await;
    push(&broker, "slow-retry", "p", &[json!(1), json!(2)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/slow-retry?batch=10")
        .await
        .expect("the batch");
    let acked = ack_all(&broker, &popped, "failed", None).await;
    assert_eq!(acked[0]["success"], true, "{acked:?}");
    let failed_at = Instant::now();
    // Not visible during the delay, to a quick pop or a parked one...
    assert!(pop(&broker, "/api/v1/pop/queue/slow-retry?wait=false")
        .await
        .is_none());
    let parked = pop(
        &broker,
        "/api/v1/pop/queue/slow-retry?batch=10&wait=true&timeout=8000",
    )
    .await
    .expect("the batch again, once the delay is over");
    let waited = failed_at.elapsed();
    // ...and the parked one gets it once the delay ends.
    assert_eq!(data(&parked), [json!(1), json!(2)]);
    assert!(
        waited >= Duration::from_millis(1300),
        "redelivered after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(6),
        "redelivered after {waited:?}"
    );

    // Without retryDelay in the request the reference's 1000 is echoed and
    // the batch comes back at once, as clients expect from the reference.
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "quick-retry", "options": {"retryLimit": 3}}),
        )
        .await;
    assert_eq!(reply.json()["options"]["retryDelay"], 1000);
    push(&broker, "quick-retry", "p", &[json!("x")]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/quick-retry")
        .await
        .expect("the message");
    ack_all(&broker, &popped, "failed", None).await;
    let again = pop(&broker, "/api/v1/pop/queue/quick-retry?wait=false").await;
    assert_eq!(again.map(|p| data(&p)), Some(vec![json!("x")]));
    broker.stop().await;
}
