//! Database migration (the dashboard's Migration page): a broker copies its
//! database to a second real database of the test cluster with `pg_dump |
//! pg_restore`, reports the run, and compares row counts; the copy serves
//! a second broker, also when it was made without the messages. Unhappy
//! paths: a wrong password (a role the cluster checks by password), the
//! broker's own database as the target, a target whose other schemas
//! depend on Queen's, a role that may not create schemas there (with more
//! data than a pipe holds), a start or reset while a copy runs, a second
//! broker's start to the same target, malformed requests. Admin-only with
//! auth on is checked for every route by `auth.rs`.

use std::time::Duration;

use queen_engine::EngineConfig;
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, expect_status, pop, push};

/// The role the copies log in as, checked by password.
const ROLE: &str = "queen_migrator";
const PASSWORD: &str = "right horse battery";

/// A broker whose figures change only when the test says so (no
/// statistics writer, no retention loop), so counts compare exactly.
fn quiet() -> EngineConfig {
    EngineConfig {
        stats_interval: None,
        retention_interval: None,
        eviction_interval: None,
        ..EngineConfig::default()
    }
}

/// The request body naming `db` as the target, as the dashboard sends it.
fn target(db: &TestDb, password: &str) -> Value {
    let host = match db.config().get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
        other => panic!("the test cluster listens on a socket, not {other:?}"),
    };
    json!({"host": host, "port": "5432", "database": db.name(), "user": ROLE,
           "password": password, "ssl": false})
}

async fn status(broker: &TestBroker) -> Value {
    let reply = broker.client.get("/api/v1/migration/status").await;
    expect_status(&reply, 200);
    reply.json()
}

/// Poll the status until the copy ended (generously bounded).
async fn until_ended(broker: &TestBroker) -> Value {
    broker.client.migration_ended(Duration::from_secs(60)).await
}

/// `target(db, "")` as the cluster's superuser, who connects by trust.
fn target_as_postgres(db: &TestDb) -> Value {
    let mut body = target(db, "");
    body["user"] = json!("postgres");
    body
}

async fn post(broker: &TestBroker, path: &str, body: &Value) -> (u16, Value) {
    let reply = broker.client.post_json(path, body).await;
    let json = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status.as_u16(), json)
}

/// The validation's row for `table`.
fn row<'v>(validation: &'v Value, table: &str) -> &'v Value {
    validation["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["table"] == table)
        .unwrap_or_else(|| panic!("no {table} in {validation}"))
}

/// A source with messages, a cursor, a dead letter and statistics.
async fn history(broker: &TestBroker) {
    configure(broker, "orders", json!({"retryLimit": 0})).await;
    for partition in ["p0", "p1", "p2"] {
        let payloads: Vec<Value> = (0..4).map(|i| json!({"i": i, "p": partition})).collect();
        push(broker, "orders", partition, &payloads).await;
    }
    let popped = pop(broker, "/api/v1/pop/queue/orders/partition/p0?batch=2")
        .await
        .unwrap();
    ack_all(broker, &popped, "completed", None).await;
    let message = &popped["messages"][0];
    let trace = json!({"transactionId": message["transactionId"], "partitionId": message["partitionId"],
                       "traceName": "checkout", "data": {"step": 1}});
    expect_status(
        &broker.client.post_json("/api/v1/traces", &trace).await,
        200,
    );
    let flag = broker
        .client
        .post_json("/api/v1/system/maintenance/pop", &json!({"enabled": false}))
        .await;
    expect_status(&flag, 200);
    let popped = pop(broker, "/api/v1/pop/queue/orders/partition/p1?batch=1")
        .await
        .unwrap();
    ack_all(broker, &popped, "dlq", None).await;
    broker.engine.observe().write_stats().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_completes_serves_a_broker_and_validates_until_the_target_changes() {
    let broker = TestBroker::start_with(quiet()).await;
    history(&broker).await;
    let copy = TestDb::empty().await;
    copy.create_password_role(ROLE, PASSWORD).await;
    assert_eq!(status(&broker).await["status"], "idle");

    let (code, tested) = post(
        &broker,
        "/api/v1/migration/test-connection",
        &target(&copy, "wrong"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(tested["success"], false, "{tested}");
    assert!(
        tested["message"]
            .as_str()
            .unwrap()
            .contains("password authentication failed"),
        "{tested}"
    );
    let (_, tested) = post(
        &broker,
        "/api/v1/migration/test-connection",
        &target(&copy, PASSWORD),
    )
    .await;
    assert_eq!(tested["success"], true, "{tested}");
    assert!(
        tested["version"]
            .as_str()
            .unwrap()
            .starts_with("PostgreSQL "),
        "{tested}"
    );
    assert_eq!(
        (tested["empty"].clone(), tested["hasQueenSchema"].clone()),
        (json!(true), json!(false))
    );

    // A Queen schema the copy must replace, held by an open transaction so
    // the copy waits in its first phase while the test looks at it.
    let blocker = copy.client().await;
    blocker
        .batch_execute("CREATE SCHEMA queen; CREATE TABLE queen.stale (id int)")
        .await
        .unwrap();
    blocker
        .batch_execute("BEGIN; SELECT * FROM queen.stale")
        .await
        .unwrap();
    let (_, tested) = post(
        &broker,
        "/api/v1/migration/test-connection",
        &target(&copy, PASSWORD),
    )
    .await;
    assert_eq!(
        (tested["empty"].clone(), tested["hasQueenSchema"].clone()),
        (json!(false), json!(true))
    );

    let (code, started) = post(&broker, "/api/v1/migration/start", &target(&copy, PASSWORD)).await;
    assert_eq!(
        (code, started["status"].clone()),
        (202, json!("started")),
        "{started}"
    );
    let running = status(&broker).await;
    assert_eq!(running["status"], "dumping", "{running}");
    let (code, refused) = post(&broker, "/api/v1/migration/start", &target(&copy, PASSWORD)).await;
    assert_eq!(
        (code, refused),
        (409, json!({"error": "a migration is in progress"}))
    );
    let (code, refused) = post(&broker, "/api/v1/migration/reset", &json!({})).await;
    assert_eq!(
        (code, refused),
        (409, json!({"error": "a migration is in progress"}))
    );
    blocker.batch_execute("COMMIT").await.unwrap();

    let done = until_ended(&broker).await;
    assert_eq!(done["status"], "complete", "{done}");
    assert_eq!(done["currentStep"], "Migration complete");
    assert_eq!(done["error"], Value::Null);
    assert!(done["elapsedSeconds"].as_f64().unwrap() > 0.0, "{done}");
    assert!(
        done["dumpOutput"]
            .as_str()
            .unwrap()
            .contains("dumping contents of table \"queen.log_segments\""),
        "{done}"
    );
    assert!(
        done["restoreOutput"]
            .as_str()
            .unwrap()
            .contains("pg_restore: "),
        "{done}"
    );
    // The status never shows the password (the commands' unit test checks
    // it reaches the programs only through their environment).
    assert!(!done.to_string().contains(PASSWORD));

    let (code, validation) = post(
        &broker,
        "/api/v1/migration/validate",
        &target(&copy, PASSWORD),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(validation["allMatch"], true, "{validation}");
    assert_eq!(validation["success"], true);
    assert_eq!(
        validation["tables"].as_array().unwrap().len(),
        queen_sql::migration::TABLES.len()
    );
    for (table, rows) in [
        ("queen.queues", 1),
        ("queen.log_partitions", 4),
        ("queen.log_segments", 3),
        ("queen.log_dlq", 1),
        ("queen.log_consumers", 2),
        ("queen.message_traces", 1),
        ("queen.system_state", 1),
        ("queen.database_identity", 1),
        ("queen.stats_queue_minute", 1),
    ] {
        assert_eq!(
            row(&validation, table)["sourceCount"],
            rows,
            "{table}: {validation}"
        );
        assert_eq!(row(&validation, table)["targetCount"], rows, "{table}");
    }

    // The copy is the same Queen database to a spool: pushes spooled while
    // the data moved drain into it.
    assert_eq!(
        queen_sql::system::database_id(&copy.client().await)
            .await
            .unwrap(),
        queen_sql::system::database_id(&broker.sql().await)
            .await
            .unwrap()
    );

    // The copy is a working Queen database: a broker on it delivers what
    // the source had not consumed, after the cursor the source moved.
    let second = TestBroker::serve(copy.clone(), quiet()).await;
    let popped = pop(&second, "/api/v1/pop/queue/orders/partition/p0?batch=10")
        .await
        .unwrap();
    let seen: Vec<Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"]["i"].clone())
        .collect();
    assert_eq!(seen, [json!(2), json!(3)]);
    // A push there makes the target differ: validate says where.
    push(&second, "orders", "p9", &[json!({"new": true})]).await;
    second.stop().await;
    let (_, validation) = post(
        &broker,
        "/api/v1/migration/validate",
        &target(&copy, PASSWORD),
    )
    .await;
    assert_eq!(validation["allMatch"], false, "{validation}");
    let partitions = row(&validation, "queen.log_partitions");
    assert_eq!(
        (
            partitions["sourceCount"].clone(),
            partitions["targetCount"].clone(),
            partitions["match"].clone()
        ),
        (json!(4), json!(5), json!(false))
    );
    assert_eq!(row(&validation, "queen.queues")["match"], true);

    let (code, reset) = post(&broker, "/api/v1/migration/reset", &json!({})).await;
    assert_eq!((code, reset["status"].clone()), (200, json!("idle")));
    let idle = status(&broker).await;
    assert_eq!(
        (
            idle["status"].clone(),
            idle["elapsedSeconds"].clone(),
            idle["currentStep"].clone()
        ),
        (json!("idle"), json!(0.0), json!(""))
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_is_reported_and_skipped_tables_arrive_empty() {
    let broker = TestBroker::start_with(quiet()).await;
    history(&broker).await;
    let copy = TestDb::empty().await;
    copy.create_password_role("queen_migrator_two", PASSWORD)
        .await;
    let with_role = |password: &str| {
        let mut body = target(&copy, password);
        body["user"] = json!("queen_migrator_two");
        body
    };

    // A wrong password: accepted, then failed in the status, with the reason.
    let (code, _) = post(&broker, "/api/v1/migration/start", &with_role("wrong")).await;
    assert_eq!(code, 202);
    let failed = until_ended(&broker).await;
    assert_eq!(failed["status"], "error", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("cannot connect to the target")
            && error.contains("password authentication failed"),
        "{failed}"
    );
    // A failed run is not reset by a new start's refusal, and reset clears it.
    let (code, _) = post(&broker, "/api/v1/migration/reset", &Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(status(&broker).await["status"], "idle");

    // The broker's own database is never a target.
    let mut own = target(&broker.db, PASSWORD);
    own["user"] = json!("postgres");
    own["password"] = json!("");
    let (code, _) = post(&broker, "/api/v1/migration/start", &own).await;
    assert_eq!(code, 202);
    let refused = until_ended(&broker).await;
    assert_eq!(
        refused["error"], "the target is this broker's own database",
        "{refused}"
    );
    let sql = broker.sql().await;
    let queues: i64 = sql
        .query_one("SELECT count(*) FROM queen.queues", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(queues, 1, "the source is untouched");

    // A target whose other schemas depend on Queen's: dropping them would
    // drop those objects too, so the copy is refused and nothing changes.
    let shared = TestDb::new().await;
    shared
        .client()
        .await
        .batch_execute("CREATE VIEW public.queue_names AS SELECT name FROM queen.queues")
        .await
        .unwrap();
    let (code, _) = post(
        &broker,
        "/api/v1/migration/start",
        &target_as_postgres(&shared),
    )
    .await;
    assert_eq!(code, 202);
    let refused = until_ended(&broker).await;
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with("the target was left as it was: objects outside Queen's schemas depend")
            && error.ends_with("view public.queue_names"),
        "{refused}"
    );
    let kept: i64 = shared
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM public.queue_names, queen.log_partitions",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 0, "the view and Queen's tables are still there");

    // A lease the source holds, on messages the copy below leaves out.
    pop(&broker, "/api/v1/pop/queue/orders/partition/p2?batch=1")
        .await
        .unwrap();

    // Skipped data: the tables exist on the target, empty; the rest is copied.
    let mut body = with_role(PASSWORD);
    body["excludeTableData"] = json!(["messages", "stats", "system_metrics", "messages_consumed"]);
    let (code, _) = post(&broker, "/api/v1/migration/start", &body).await;
    assert_eq!(code, 202, "a new start after an error needs no reset");
    let done = until_ended(&broker).await;
    assert_eq!(done["status"], "complete", "{done}");
    let (_, validation) = post(&broker, "/api/v1/migration/validate", &with_role(PASSWORD)).await;
    assert_eq!(validation["allMatch"], false);
    for table in [
        "queen.log_segments",
        "queen.log_txns",
        "queen.stats_queue_minute",
        "queen.stats_broker_minute",
    ] {
        assert_eq!(
            row(&validation, table)["targetCount"],
            0,
            "{table}: {validation}"
        );
        assert!(
            row(&validation, table)["sourceCount"].as_i64().unwrap() > 0,
            "{table}"
        );
    }
    for table in [
        "queen.queues",
        "queen.log_partitions",
        "queen.log_consumers",
        "queen.log_dlq",
    ] {
        assert_eq!(
            row(&validation, table)["match"],
            true,
            "{table}: {validation}"
        );
    }
    // Without its messages, the copy's partitions are empty, not missing
    // messages: a broker on it counts nothing stored, pending or leased,
    // delivers nothing old, and numbers new messages after the source's
    // last offset.
    let second = TestBroker::serve(copy.clone(), quiet()).await;
    let detail = second
        .client
        .get("/api/v1/resources/queues/orders")
        .await
        .json();
    let messages = &detail["totals"]["messages"];
    assert_eq!(
        (
            messages["total"].clone(),
            messages["pending"].clone(),
            messages["processing"].clone()
        ),
        (json!(0), json!(0), json!(0)),
        "{detail}"
    );
    assert!(
        pop(&second, "/api/v1/pop/queue/orders/partition/p0?batch=10")
            .await
            .is_none()
    );
    push(&second, "orders", "p2", &[json!({"after": "copy"})]).await;
    let popped = pop(&second, "/api/v1/pop/queue/orders/partition/p2?batch=10")
        .await
        .expect("the new message, not held by the source's lease");
    assert_eq!(
        crate::support::data(&popped),
        [json!({"after": "copy"})],
        "{popped}"
    );
    second.stop().await;
    let watermarks = copy
        .client()
        .await
        .query_one(
            "SELECT p.last_offset, p.log_start, p.txns_start, s.base_offset \
               FROM queen.log_partitions p JOIN queen.log_segments s ON s.partition_id = p.id \
              WHERE p.name = 'p2'",
            &[],
        )
        .await
        .unwrap();
    let watermarks: [i64; 4] = [0, 1, 2, 3].map(|i| watermarks.get(i));
    assert_eq!(watermarks, [4, 4, 4, 4], "p2 held offsets 0 to 3");

    // A target that cannot be read is an answer with the reason.
    let (code, unreachable) =
        post(&broker, "/api/v1/migration/validate", &with_role("wrong")).await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            unreachable["success"].clone(),
            unreachable["allMatch"].clone()
        ),
        (json!(false), json!(false))
    );
    assert!(
        unreachable["error"]
            .as_str()
            .unwrap()
            .contains("password authentication failed"),
        "{unreachable}"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_fails_early_ends_the_copy_and_releases_the_target() {
    let broker = TestBroker::start_with(quiet()).await;
    // Incompressible payloads (segments are zstd-compressed), several times
    // the 64 KiB a pipe holds: pg_dump has far more to write than
    // pg_restore reads before it fails.
    let noise = |_| {
        let text: String = (0..128)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        json!({"noise": text})
    };
    let payloads: Vec<Value> = (0..64).map(noise).collect();
    push(&broker, "bulky", "p0", &payloads).await;
    // A role that may connect but not create schemas in the database: the
    // restore fails at its first statement.
    let copy = TestDb::empty().await;
    copy.client()
        .await
        .batch_execute("CREATE ROLE queen_no_create LOGIN")
        .await
        .unwrap();
    let mut body = target(&copy, "");
    body["user"] = json!("queen_no_create");

    let (code, _) = post(&broker, "/api/v1/migration/start", &body).await;
    assert_eq!(code, 202);
    let failed = until_ended(&broker).await;
    assert_eq!(failed["status"], "error", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("pg_restore exited with status 1: ")
            && error.contains("permission denied for database"),
        "{failed}"
    );
    let (code, _) = post(&broker, "/api/v1/migration/reset", &json!({})).await;
    assert_eq!(code, 200);
    // The failed copy released the target: a copy by a role that may
    // create schemas completes.
    let (code, _) = post(
        &broker,
        "/api/v1/migration/start",
        &target_as_postgres(&copy),
    )
    .await;
    assert_eq!(code, 202);
    let done = until_ended(&broker).await;
    assert_eq!(done["status"], "complete", "{done}");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_never_copy_to_one_target_at_once() {
    let first = TestBroker::start_with(quiet()).await;
    let second = TestBroker::serve(first.db.clone(), quiet()).await;
    push(&first, "orders", "p0", &[json!({"n": 1})]).await;
    // The target holds a Queen database (nothing outside it depends on it);
    // a reader of one of its tables holds the first copy in its first phase.
    let copy = TestDb::new().await;
    let blocker = copy.client().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE queen.queues IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let body = target_as_postgres(&copy);
    let (code, _) = post(&first, "/api/v1/migration/start", &body).await;
    assert_eq!(code, 202);
    assert_eq!(status(&first).await["status"], "dumping");

    let (code, refused) = post(&second, "/api/v1/migration/start", &body).await;
    assert_eq!(code, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("another migration to this target is running"),
        "{refused}"
    );
    assert_eq!(status(&second).await["status"], "idle");

    blocker.batch_execute("COMMIT").await.unwrap();
    let done = until_ended(&first).await;
    assert_eq!(done["status"], "complete", "{done}");
    // Once the first copy ended, the target is free.
    let (code, _) = post(&second, "/api/v1/migration/start", &body).await;
    assert_eq!(code, 202);
    let done = until_ended(&second).await;
    assert_eq!(done["status"], "complete", "{done}");
    second.stop().await;
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_migration_requests_are_400_naming_the_problem_and_start_nothing() {
    let broker = TestBroker::start_with(quiet()).await;
    let copy = TestDb::empty().await;
    let good = {
        let mut body = target(&copy, "");
        body["user"] = json!("postgres");
        body
    };
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(field);
        body
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "request body must be a JSON object"),
        (without("host"), "host is required"),
        (with("database", json!("  ")), "database is required"),
        (with("user", json!(7)), "user must be a string"),
        (
            with("port", json!("abc")),
            "port must be a number from 1 to 65535",
        ),
        (
            with("port", json!(70000)),
            "port must be a number from 1 to 65535",
        ),
        (
            with("port", json!(0)),
            "port must be a number from 1 to 65535",
        ),
        (with("password", json!(["x"])), "password must be a string"),
        (with("ssl", json!("maybe")), "ssl must be a boolean"),
    ];
    for path in [
        "/api/v1/migration/test-connection",
        "/api/v1/migration/start",
        "/api/v1/migration/validate",
    ] {
        for (body, error) in &cases {
            let (code, answer) = post(&broker, path, body).await;
            assert_eq!(
                (code, answer),
                (400, json!({"error": error})),
                "{path} {body}"
            );
        }
        let reply = broker
            .client
            .send(
                hyper::Method::POST,
                path,
                bytes::Bytes::from_static(b"{not json"),
            )
            .await;
        assert_eq!(reply.status, 400, "{path}");
        assert!(reply.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid JSON"));
    }
    for (exclude, error) in [
        (
            json!("stats"),
            "excludeTableData must be an array of table names".to_owned(),
        ),
        (
            json!([1]),
            "excludeTableData must be an array of table names".to_owned(),
        ),
        (
            json!(["stats", "queues"]),
            "the data of \"queues\" cannot be skipped".to_owned(),
        ),
        (
            json!(["stats; DROP SCHEMA queen"]),
            "the data of \"stats; DROP SCHEMA queen\" cannot be skipped".to_owned(),
        ),
    ] {
        let (code, answer) = post(
            &broker,
            "/api/v1/migration/start",
            &with("excludeTableData", exclude),
        )
        .await;
        assert_eq!(code, 400, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().starts_with(&error),
            "{answer}"
        );
    }
    // TLS: refused where the broker would connect, a failed test otherwise.
    let tls = with("ssl", json!(true));
    for path in ["/api/v1/migration/start", "/api/v1/migration/validate"] {
        let (code, answer) = post(&broker, path, &tls).await;
        assert_eq!(code, 400, "{path}");
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("TLS to the target is not supported"),
            "{answer}"
        );
    }
    let (code, answer) = post(&broker, "/api/v1/migration/test-connection", &tls).await;
    assert_eq!((code, answer["success"].clone()), (200, json!(false)));
    // Nothing ran, nothing was created on the target.
    assert_eq!(status(&broker).await["status"], "idle");
    let schemas: i64 = copy
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'queen%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schemas, 0);
    // Reset when idle is fine.
    let (code, _) = post(&broker, "/api/v1/migration/reset", &json!({})).await;
    assert_eq!(code, 200);
    broker.stop().await;
}

/// The copy's validated and derived table lists are every table of Queen's
/// schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validated_tables_are_every_table_of_queens_schemas() {
    let db = TestDb::new().await;
    let rows = db
        .client()
        .await
        .query(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables \
             WHERE table_schema = ANY($1) AND table_type = 'BASE TABLE' ORDER BY 1",
            &[&queen_sql::migration::SCHEMAS.to_vec()],
        )
        .await
        .unwrap();
    let catalog: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    let mut listed: Vec<String> = queen_sql::migration::TABLES
        .iter()
        .chain(queen_sql::migration::DERIVED)
        .map(|t| (*t).to_owned())
        .collect();
    listed.sort();
    assert_eq!(catalog, listed);
}
