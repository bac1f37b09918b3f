//! Which database errors count as transient (retry later: a pop answers
//! empty, a request 503) and which must fail loudly.

use queen_sql::SqlError;
use queen_testkit::TestDb;

fn transient(error: tokio_postgres::Error) -> bool {
    SqlError::from(error).is_transient()
}

#[tokio::test]
async fn driver_errors_without_a_cause_in_the_connection_are_not_transient() {
    let db = TestDb::empty().await;
    let client = db.client().await;
    let row = client.query_one("SELECT 1::int4 AS n", &[]).await.unwrap();
    // A type mismatch and an unknown column: a broken deployment, not a
    // database that will come back. They used to count as transient because
    // they carry no SQLSTATE.
    let mismatch = row.try_get::<_, String>("n").unwrap_err();
    assert!(mismatch.code().is_none());
    assert!(!transient(mismatch));
    let unknown = row.try_get::<_, i32>("missing").unwrap_err();
    assert!(!transient(unknown));
    // A server error that is the caller's fault.
    let syntax = client.execute("SELEC 1", &[]).await.unwrap_err();
    assert!(!transient(syntax));
    // One that retrying resolves.
    let serialization = client
        .batch_execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$")
        .await
        .unwrap_err();
    assert!(transient(serialization));
    // A row deleted under the statement (a partition cleanup racing a
    // cursor insert): the retry sees the new state.
    let vanished = client
        .batch_execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '23503'; END $$")
        .await
        .unwrap_err();
    assert!(transient(vanished));
}

#[tokio::test]
async fn a_connection_the_server_dropped_is_transient() {
    let db = TestDb::empty().await;
    let victim = db.client().await;
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let killer = db.client().await;
    killer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    // The first statement after the kill may see the server's FATAL
    // (SQLSTATE 57P01) or a closed connection; both are transient, and so is
    // every one after.
    for _ in 0..2 {
        let mut failed = None;
        for _ in 0..250 {
            match victim.execute("SELECT 1", &[]).await {
                Err(error) => {
                    failed = Some(error);
                    break;
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
        let error = failed.expect("the terminated session kept answering for 5 s");
        assert!(transient(error));
    }
}
