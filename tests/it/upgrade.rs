//! Upgrading the schema under a serving broker.
//!
//! The three pop routes (`log_pop_list_v1`, `log_pop_specific_v1`,
//! `log_pop_wildcard_v1`) once returned a `RETURNS TABLE` of eleven columns
//! each; they now return `SETOF queen.log_pop_row`. `CREATE OR REPLACE`
//! cannot change a return type, so the schema apply drops the old ones and
//! creates the new ones in its one transaction. These tests boot a broker
//! (the apply, then a second engine) against a database whose pop functions
//! have the old return type while another broker pops, acks and is pushed
//! to, and check that nothing is lost, nothing is delivered twice and no
//! request fails.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{ack_all, both_paths, data, pop, push};

/// The pop routes whose return type changed.
const ROUTES: [&str; 3] = [
    "log_pop_list_v1",
    "log_pop_specific_v1",
    "log_pop_wildcard_v1",
];

/// The eleven columns the routes returned before `queen.log_pop_row`.
const OLD_COLUMNS: &str = "o_partition_id uuid, o_partition_name text, o_kind text, \
    o_base_offset bigint, o_start_idx integer, o_take integer, o_msg_count integer, \
    o_created_at timestamptz, o_blob bytea, o_verdict text, o_revisit_at timestamptz";

/// Give the three routes the older return type, as a database an earlier
/// broker version left them: each becomes a `RETURNS TABLE` function (same
/// name, arguments and result columns) answering what the current
/// definition, kept under another name, answers.
async fn install_returns_table_routes(sql: &tokio_postgres::Client) {
    for name in ROUTES {
        let row = sql
            .query_one(
                "SELECT pg_get_function_identity_arguments(p.oid), \
                        pg_get_function_arguments(p.oid), \
                        array_to_string(p.proargnames, ', ') \
                   FROM pg_proc p \
                  WHERE p.pronamespace = 'queen'::regnamespace AND p.proname = $1",
                &[&name],
            )
            .await
            .unwrap();
        let (identity, arguments, names): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        sql.batch_execute(&format!(
            "ALTER FUNCTION queen.{name}({identity}) RENAME TO {name}_current;
             CREATE FUNCTION queen.{name}({arguments}) RETURNS TABLE ({OLD_COLUMNS})
             LANGUAGE plpgsql VOLATILE AS $f$
             BEGIN
                 RETURN QUERY SELECT * FROM queen.{name}_current({names});
             END;
             $f$;"
        ))
        .await
        .unwrap();
    }
}

/// Each route's (oid, return type, returns a set).
async fn route_catalog(sql: &tokio_postgres::Client) -> Vec<(u32, String, bool)> {
    let mut out = Vec::new();
    for name in ROUTES {
        let row = sql
            .query_one(
                "SELECT p.oid, p.prorettype::regtype::text, p.proretset FROM pg_proc p \
                  WHERE p.pronamespace = 'queen'::regnamespace AND p.proname = $1",
                &[&name],
            )
            .await
            .unwrap();
        out.push((row.get(0), row.get(1), row.get(2)));
    }
    out
}

/// Pop (batch 10, long-poll) and ack until `done`, recording each payload
/// with the broker that delivered it.
fn consume(
    broker: Arc<TestBroker>,
    tag: &'static str,
    received: Arc<Mutex<Vec<(&'static str, i64)>>>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !done.load(Ordering::Relaxed) {
            let path = "/api/v1/pop/queue/upgrade?batch=10&wait=true&timeout=200";
            if let Some(popped) = pop(&broker, path).await {
                let payloads = data(&popped);
                for result in ack_all(&broker, &popped, "completed", None).await {
                    assert_eq!(result["success"], true, "{result}");
                }
                let mut received = received.lock();
                for payload in payloads {
                    received.push((tag, payload.as_i64().unwrap()));
                }
            }
        }
    })
}

both_paths!(a_broker_upgrades_the_pop_routes_while_another_serves);

async fn a_broker_upgrades_the_pop_routes_while_another_serves(config: EngineConfig) {
    const PUSHES: i64 = 120;
    const UPGRADE_AT: i64 = 40;
    let serving = Arc::new(TestBroker::start_with(config.clone()).await);
    let sql = serving.sql().await;
    install_returns_table_routes(&sql).await;
    for (_, returns, _) in route_catalog(&sql).await {
        assert_eq!(returns, "record", "the old routes are RETURNS TABLE");
    }

    let received = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let mut consumers = vec![consume(
        Arc::clone(&serving),
        "serving",
        Arc::clone(&received),
        Arc::clone(&done),
    )];
    let mut booted = None;
    let mut before_upgrade = 0;
    for i in 0..PUSHES {
        if i == UPGRADE_AT {
            before_upgrade = received
                .lock()
                .iter()
                .filter(|(tag, _)| *tag == "serving")
                .count();
            // What a booting broker does: apply the schema, then serve.
            let booting = serving.db.client().await;
            queen_sql::apply_schema(&booting)
                .await
                .unwrap_or_else(|e| panic!("apply_schema: {}", queen_sql::error_chain(&e)));
            let broker = Arc::new(TestBroker::serve(serving.db.clone(), config.clone()).await);
            consumers.push(consume(
                Arc::clone(&broker),
                "booted",
                Arc::clone(&received),
                Arc::clone(&done),
            ));
            booted = Some(broker);
        }
        let partition = format!("p{}", i % 4);
        push(&serving, "upgrade", &partition, &[json!(i)]).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.lock().len() < usize::try_from(PUSHES).unwrap()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done.store(true, Ordering::Relaxed);
    for consumer in consumers {
        consumer.await.expect("a consumer failed");
    }

    // Every message exactly once, and the serving broker kept delivering
    // across the upgrade.
    let received = received.lock().clone();
    let mut times: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, payload) in &received {
        *times.entry(*payload).or_default() += 1;
    }
    let missing: Vec<i64> = (0..PUSHES).filter(|i| !times.contains_key(i)).collect();
    let twice: Vec<i64> = times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(i, _)| *i)
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    let serving_total = received.iter().filter(|(tag, _)| *tag == "serving").count();
    assert!(before_upgrade > 0, "nothing was served before the upgrade");
    assert!(
        serving_total > before_upgrade,
        "the serving broker delivered nothing after the upgrade"
    );
    assert!(booted.is_some());

    // The routes now return the composite, and a re-apply on the current
    // schema drops nothing (the functions keep their oids).
    let upgraded = route_catalog(&sql).await;
    for (_, returns, set) in &upgraded {
        assert_eq!((returns.as_str(), *set), ("queen.log_pop_row", true));
    }
    queen_sql::apply_schema(&serving.db.client().await)
        .await
        .unwrap();
    assert_eq!(route_catalog(&sql).await, upgraded);
}
