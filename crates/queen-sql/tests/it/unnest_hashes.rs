//! `queen.log_unnest_hashes`: byte slicing, and that PostgreSQL inlines it.

use queen_testkit::TestDb;

async fn unnest(client: &tokio_postgres::Client, value: Option<&[u8]>) -> Vec<(i32, Vec<u8>)> {
    client
        .query(
            "SELECT idx, h FROM queen.log_unnest_hashes($1) ORDER BY idx",
            &[&value],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test]
async fn a_48_byte_value_yields_three_zero_based_slices() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let value: Vec<u8> = (0..48).collect();
    assert_eq!(
        unnest(&client, Some(&value)).await,
        [
            (0, (0..16).collect::<Vec<u8>>()),
            (1, (16..32).collect()),
            (2, (32..48).collect()),
        ]
    );
}

#[tokio::test]
async fn empty_null_and_short_values_yield_nothing_and_a_partial_slot_is_ignored() {
    let db = TestDb::new().await;
    let client = db.client().await;
    assert_eq!(unnest(&client, Some(&[])).await, []);
    assert_eq!(unnest(&client, None).await, []);
    assert_eq!(unnest(&client, Some(&[7; 15])).await, []);
    let value: Vec<u8> = (0..47).collect();
    assert_eq!(
        unnest(&client, Some(&value)).await,
        [(0, (0..16).collect::<Vec<u8>>()), (1, (16..32).collect())]
    );
}

#[tokio::test]
async fn the_function_is_inlined_into_the_calling_query() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let plan: Vec<String> = client
        .query(
            "EXPLAIN (VERBOSE, COSTS OFF) \
             SELECT u.idx, u.h FROM queen.log_txns t, queen.log_unnest_hashes(t.hashes) AS u",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Function Scan on pg_catalog.generate_series"),
        "{plan}"
    );
    assert!(!plan.contains("log_unnest_hashes"), "not inlined:\n{plan}");

    let flags: String = client
        .query_one(
            "SELECT concat_ws(',', l.lanname, p.provolatile, p.proisstrict, p.prosecdef, \
                    p.proconfig IS NULL, p.proretset) \
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang \
              WHERE p.oid = 'queen.log_unnest_hashes(bytea)'::regprocedure",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // sql, immutable, not strict, not security definer, no SET clause, set-returning.
    assert_eq!(flags, "sql,i,f,f,t,t");
}
