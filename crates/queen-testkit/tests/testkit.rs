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

/// Tests of one binary make their password roles at the same time:
/// each must have its password checked from the start.
#[test]
fn password_roles_made_at_once_each_have_their_password_checked() {
    const ROLES: usize = 8;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let db = runtime.block_on(TestDb::empty());
    let start = std::sync::Arc::new(std::sync::Barrier::new(ROLES));
    let makers: Vec<_> = (0..ROLES)
        .map(|i| {
            let (db, start) = (db.clone(), std::sync::Arc::clone(&start));
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                start.wait();
                runtime.block_on(db.create_password_role(&format!("kit_pw_{i}"), "right"));
            })
        })
        .collect();
    for maker in makers {
        maker.join().expect("create a password role");
    }
    runtime.block_on(async {
        for i in 0..ROLES {
            let mut config = db.config();
            config.user(format!("kit_pw_{i}"));
            let wrong = config
                .clone()
                .password("wrong")
                .connect(tokio_postgres::NoTls)
                .await
                .err()
                .unwrap_or_else(|| panic!("kit_pw_{i} logged in with a wrong password"));
            let wrong = queen_sql::error_chain(&wrong);
            assert!(
                wrong.contains("password authentication failed"),
                "kit_pw_{i}: {wrong}"
            );
            let (client, connection) = config
                .password("right")
                .connect(tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|error| panic!("kit_pw_{i}: {error}"));
            drop(connection);
            drop(client);
        }
    });
}
