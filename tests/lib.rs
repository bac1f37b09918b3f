//! Support for the cross-crate integration tests in `tests/it`: a broker served
//! in-process over real HTTP on a fresh database.

use std::sync::Arc;

use queen_engine::{Engine, EngineConfig};
use queen_testkit::http::Client;
use queen_testkit::TestDb;

/// A broker on its own fresh database, listening on an ephemeral port.
pub struct TestBroker {
    /// The broker's database.
    pub db: TestDb,
    /// The engine behind the HTTP server.
    pub engine: Arc<Engine>,
    /// A keep-alive client for the broker.
    pub client: Client,
    /// Fires the server's shutdown.
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestBroker {
    /// A broker with default settings.
    pub async fn start() -> TestBroker {
        TestBroker::start_with(EngineConfig::default()).await
    }

    /// A broker with `config`.
    pub async fn start_with(config: EngineConfig) -> TestBroker {
        let db = TestDb::new().await;
        TestBroker::serve(db, config).await
    }

    /// A broker serving an existing database (several brokers may share one).
    pub async fn serve(db: TestDb, config: EngineConfig) -> TestBroker {
        TestBroker::serve_with(db, config, queen_http::ServeOptions::default()).await
    }

    /// A broker on its own fresh database with serving `options`.
    pub async fn start_serving(options: queen_http::ServeOptions) -> TestBroker {
        TestBroker::serve_with(TestDb::new().await, EngineConfig::default(), options).await
    }

    /// A broker serving an existing database with serving `options`.
    pub async fn serve_with(
        db: TestDb,
        config: EngineConfig,
        options: queen_http::ServeOptions,
    ) -> TestBroker {
        let mut config = config;
        // The migration copies from the broker's own database, as the
        // server's does.
        config
            .migration
            .get_or_insert_with(|| queen_engine::MigrationConfig {
                source: db.config(),
                bin_dir: None,
            });
        // The spool records the database it spools for, as the server's does.
        if let Some(spool) = config
            .spool
            .as_mut()
            .filter(|spool| spool.database.is_none())
        {
            let client = db.client().await;
            spool.database = Some(
                queen_sql::system::database_id(&client)
                    .await
                    .expect("the database's id"),
            );
        }
        let engine = Engine::new(db.pool(16), config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind test broker");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(queen_http::serve(
            listener,
            Arc::clone(&engine),
            options,
            async move {
                let _ = rx.await;
            },
        ));
        TestBroker {
            db,
            engine,
            client: Client::new(format!("http://{addr}")),
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    /// Stop the server and wait for it to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    /// A new direct connection to the broker's database.
    pub async fn sql(&self) -> tokio_postgres::Client {
        self.db.client().await
    }
}
