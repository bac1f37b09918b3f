//! The test kit itself: a cluster per binary, a fresh database per test.

use queen_testkit::TestDb;

#[tokio::test]
async fn each_test_database_is_fresh_and_isolated() {
    let first = TestDb::empty().await;
    let second = TestDb::empty().await;
    assert_ne!(first.name(), second.name());

    let a = first.client().await;
    a.batch_execute("CREATE TABLE only_here (x int)")
        .await
        .unwrap();
    let b = second.client().await;
    let n: i64 = b
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n, 0,
        "a table made in one test database leaked into another"
    );
}

#[tokio::test]
async fn sessions_run_in_utc() {
    let db = TestDb::empty().await;
    let client = db.client().await;
    let zone: String = client.query_one("SHOW timezone", &[]).await.unwrap().get(0);
    assert_eq!(zone, "UTC");
}

#[tokio::test]
async fn template_databases_carry_the_queen_schema() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}
