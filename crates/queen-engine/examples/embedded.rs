//! Queen's engine embedded in another Rust program, without HTTP: push,
//! pop and ack against PostgreSQL.
//!
//! ```sh
//! cargo run -p queen-engine --example embedded
//! ```
//!
//! With `QUEEN_DATABASE_URL` set it uses that database; otherwise it starts a
//! throwaway PostgreSQL cluster in a temporary directory and stops it at the
//! end. CI runs it (`cargo xtask ci`), so it must keep working.

use std::time::Duration;

use bytes::Bytes;
use queen_engine::{
    AckItem, AckStatus, Engine, EngineConfig, PopRequest, PopTarget, PushItem, SubscriptionMode,
    QUEUE_MODE_GROUP,
};
use queen_pg::cluster::{Cluster, ClusterOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A database: the configured one, or a throwaway managed cluster.
    let (config, _cluster) = match std::env::var("QUEEN_DATABASE_URL") {
        Ok(url) => (queen_sql::connect::config_from_url(&url)?, None),
        Err(_) => {
            let dir = std::env::temp_dir().join(format!("queen-example-{}", std::process::id()));
            let mut cluster = Cluster::init_or_reuse(ClusterOptions::throwaway(&dir))?;
            cluster.start()?;
            let admin =
                queen_sql::connect::connect_one(&cluster.connect_config("postgres")).await?;
            queen_sql::connect::create_database_if_missing(&admin, "example").await?;
            (
                cluster.connect_config("example"),
                Some(CleanUp { cluster, dir }),
            )
        }
    };

    // 2. The schema, applied idempotently, then the engine over a pool.
    let client = queen_sql::connect::connect_one(&config).await?;
    queen_sql::apply_schema(&client).await?;
    let engine = Engine::new(
        queen_sql::connect::pool(config, 8)?,
        EngineConfig::default(),
    );

    // 3. Push three messages to one partition.
    let items = (1..=3)
        .map(|n| PushItem {
            tenant: queen_engine::naming::default_tenant(),
            queue: "embedded.demo".to_owned(),
            partition: "orders".to_owned(),
            transaction_id: Some(format!("order-{n}")),
            trace_id: None,
            producer_sub: None,
            payload: Bytes::from(format!(r#"{{"order":{n}}}"#)),
        })
        .collect();
    // Without a spool configured, a push is always stored (or fails).
    match engine.push(items).await? {
        queen_engine::Pushed::Stored(outcomes) => println!("pushed {} messages", outcomes.len()),
        queen_engine::Pushed::Buffered(items) => println!("spooled {} messages", items.len()),
    }

    // 4. Pop them under a lease.
    let popped = engine
        .pop(PopRequest {
            tenant: queen_engine::naming::default_tenant(),
            target: PopTarget::Queue {
                queue: "embedded.demo".to_owned(),
            },
            group: QUEUE_MODE_GROUP.to_owned(),
            batch: 10,
            max_partitions: 1,
            wait: true,
            timeout: Duration::from_secs(5),
            auto_ack: false,
            subscription_mode: SubscriptionMode::All,
            subscription_from: None,
        })
        .await?;
    let lease = popped.lease_id.ok_or("no lease")?;
    for message in &popped.messages {
        println!(
            "popped {} {}",
            message.transaction_id,
            String::from_utf8_lossy(&message.payload)
        );
    }
    assert_eq!(popped.messages.len(), 3, "expected the three messages");

    // 5. Ack the whole batch: one positional cursor advance.
    let acks = popped
        .messages
        .iter()
        .map(|m| AckItem {
            transaction_id: m.transaction_id.clone(),
            partition_id: m.partition_id,
            status: AckStatus::Completed,
            error: None,
            lease_id: Some(lease),
        })
        .collect();
    let outcomes = engine
        .ack(queen_engine::naming::DEFAULT_TENANT, QUEUE_MODE_GROUP, acks)
        .await?;
    assert!(outcomes.iter().all(|o| o.success), "every ack succeeds");
    println!(
        "acked {} messages; positional acks: {}",
        outcomes.len(),
        engine.observe().ack_stats().0
    );

    engine.shutdown().await;
    Ok(())
}

/// Stops the throwaway cluster and removes its directory.
struct CleanUp {
    cluster: Cluster,
    dir: std::path::PathBuf,
}

impl Drop for CleanUp {
    fn drop(&mut self) {
        let _ = self.cluster.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
