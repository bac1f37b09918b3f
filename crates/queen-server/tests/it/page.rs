//! The built-in status page, end to end in headless Chromium (Debian's
//! `chromium` and `chromium-driver`; `cargo xtask ci` installs them as
//! root): it loads, shows a queue the test created with the right depth,
//! and updates by itself after a push. A screenshot lands in
//! `target/status-page.png` (the one in `docs/` was taken this way).
//!
//! ChromeDriver is driven over the W3C WebDriver protocol directly: the test
//! needs five JSON calls, which the test kit's HTTP client makes, where a
//! WebDriver crate would bring a TLS stack into the test build.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use queen_testkit::http::Client;
use queen_testkit::TestDb;
use serde_json::{json, Value};

use crate::harness::{free_port, Broker};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running ChromeDriver, killed on drop.
struct Driver {
    child: Child,
    client: Client,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    async fn start() -> Driver {
        assert!(
            std::path::Path::new(CHROMIUM).is_file()
                && std::path::Path::new(CHROMEDRIVER).is_file(),
            "the status page test needs {CHROMIUM} and {CHROMEDRIVER}: \
             apt-get install chromium chromium-driver (cargo xtask ci does, as root)"
        );
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let client = Client::new(format!("http://127.0.0.1:{port}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(reply) = client
                .try_send(hyper::Method::GET, "/status", bytes::Bytes::new())
                .await
            {
                if reply.status == 200 && reply.json()["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Driver { child, client }
    }

    /// A new headless browser session; its id.
    async fn session(&self, profile: &std::path::Path) -> String {
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1200,800".to_owned(),
            format!("--user-data-dir={}", profile.display()),
        ];
        let reply = self
            .client
            .post_json(
                "/session",
                &json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": CHROMIUM, "args": args}
                }}}),
            )
            .await;
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["value"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn call(&self, session: &str, path: &str, body: &Value) -> Value {
        let reply = self
            .client
            .post_json(&format!("/session/{session}{path}"), body)
            .await;
        assert_eq!(
            reply.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["value"].clone()
    }

    /// Run `script` in the page; its return value.
    async fn eval(&self, session: &str, script: &str) -> Value {
        self.call(
            session,
            "/execute/sync",
            &json!({"script": script, "args": []}),
        )
        .await
    }
}

/// The text of the depth cell of `queue`'s row, once it shows.
const DEPTH: &str =
    "const c = document.querySelector('tr[data-queue=\"page-q\"] td.depth'); return c ? c.textContent : null;";

async fn until(driver: &Driver, session: &str, script: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = driver.eval(session, script).await;
        if seen == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the page shows {seen}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn push(client: &Client, count: usize) {
    let items: Vec<Value> = (0..count)
        .map(|i| json!({"queue": "page-q", "partition": format!("p{i}"), "payload": {"i": i}}))
        .collect();
    assert_eq!(
        client
            .post_json("/api/v1/push", &json!({"items": items}))
            .await
            .status,
        201
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_page_shows_queue_depth_and_updates_after_a_push() {
    let scratch = tempfile::tempdir().unwrap();
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(scratch.path(), &[("QUEEN_DATABASE_URL", &url)]).await;
    push(&broker.client, 3).await;

    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let session = driver.session(profile.path()).await;
    let base = broker.client.base().to_owned();
    driver
        .call(&session, "/url", &json!({"url": format!("{base}/")}))
        .await;
    assert_eq!(
        driver.eval(&session, "return document.title").await,
        "Queen"
    );
    until(&driver, &session, DEPTH, "3").await;
    until(
        &driver,
        &session,
        "return document.getElementById('health').className",
        "dot ok",
    )
    .await;

    // No reload: the page refreshes itself.
    push(&broker.client, 2).await;
    until(&driver, &session, DEPTH, "5").await;
    let partitions = driver
        .eval(
            &session,
            "return document.querySelector('tr[data-queue=\"page-q\"] td.partitions').textContent",
        )
        .await;
    assert_eq!(partitions, "3", "p0, p1 and p2");
    let limiter = driver
        .eval(
            &session,
            "return document.getElementById('limiter').textContent",
        )
        .await;
    assert!(limiter.as_str().unwrap().contains(" / "), "{limiter}");
    // A consumer leases one message: its group appears, the depth holds.
    let popped = broker.client.get("/api/v1/pop/queue/page-q?batch=1").await;
    assert_eq!(popped.status, 200);
    until(
        &driver,
        &session,
        "const c = document.querySelector('tr[data-queue=\"page-q\"] td.processing'); return c ? c.textContent : null;",
        "1",
    )
    .await;
    until(
        &driver,
        &session,
        "return document.querySelectorAll('tr[data-group]').length.toString()",
        "1",
    )
    .await;
    assert_eq!(driver.eval(&session, DEPTH).await, "5");

    let png = driver
        .client
        .get(&format!("/session/{session}/screenshot"))
        .await
        .json()["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let png = base64::engine::general_purpose::STANDARD
        .decode(png)
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let target = crate::sdk::workspace_root().join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("status-page.png"), &png).unwrap();
    let _ = driver.client.delete(&format!("/session/{session}")).await;

    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
}
