//! The `queen` binary run as a real process against a real broker: the
//! broker served in process over real HTTP (`queen_tests::TestBroker`) on a
//! fresh database per test. Each test covers one flow end to end, unhappy
//! paths included; exit codes are the ones `src/error.rs` documents.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{encode, EncodingKey, Header};
use queen_http::{Auth, AuthConfig};
use queen_tests::TestBroker;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;

/// One run of the binary.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Stdout as NDJSON, one value per line.
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"))
            })
            .collect()
    }

    /// Stdout as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    #[track_caller]
    fn expect(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "exit code; run: {self:#?}");
        self
    }
}

/// A way to run the binary: an environment with no user config and no
/// `QUEEN_*` variables but those given.
struct Queen {
    /// Passed as `--server` unless `None`.
    server: Option<String>,
    env: Vec<(String, String)>,
    /// Holds the (empty) config directory.
    home: tempfile::TempDir,
}

impl Queen {
    fn new(server: Option<String>) -> Queen {
        Queen {
            server,
            env: Vec::new(),
            home: tempfile::tempdir().expect("temp home"),
        }
    }

    fn at(broker: &TestBroker) -> Queen {
        Queen::new(Some(broker.client.base().to_owned()))
    }

    /// Run with stderr (and stdout) on a terminal: under `script(1)`, whose
    /// output is what the terminal showed.
    async fn run_in_terminal(&self, args: &[&str]) -> Run {
        let quote = |arg: &str| format!("'{}'", arg.replace('\'', r"'\''"));
        let mut line = quote(env!("CARGO_BIN_EXE_queen"));
        for arg in self
            .server
            .iter()
            .flat_map(|s| ["--server", s.as_str()])
            .chain(args.iter().copied())
        {
            line.push(' ');
            line.push_str(&quote(arg));
        }
        let mut cmd = tokio::process::Command::new("script");
        for var in [
            "QUEEN_CONFIG",
            "QUEEN_CONTEXT",
            "QUEEN_SERVER",
            "QUEEN_TOKEN",
        ] {
            cmd.env_remove(var);
        }
        let output = cmd
            .env("HOME", self.home.path())
            .args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(120), output)
            .await
            .unwrap_or_else(|_| panic!("queen {args:?} did not finish"))
            .expect("run script(1), util-linux's");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    async fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, b"", &[]).await
    }

    async fn run_with(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_queen"));
        for var in [
            "QUEEN_CONFIG",
            "QUEEN_CONTEXT",
            "QUEEN_SERVER",
            "QUEEN_TOKEN",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("HOME", self.home.path());
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        for (key, value) in env {
            cmd.env(key, value);
        }
        if let Some(server) = &self.server {
            cmd.arg("--server").arg(server);
        }
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn queen");
        let mut input = child.stdin.take().expect("stdin");
        let bytes = stdin.to_vec();
        let writer = tokio::spawn(async move {
            // The tool may stop reading early (a malformed line).
            let _ = input.write_all(&bytes).await;
        });
        let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("queen {args:?} did not finish"))
            .expect("wait for queen");
        let _ = writer.await;
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        }
    }
}

fn ndjson(values: impl IntoIterator<Item = Value>) -> Vec<u8> {
    let mut out = Vec::new();
    for value in values {
        out.extend_from_slice(value.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("format now")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_ten_thousand_lines_and_tail_them_back_in_partition_order() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    let lines = ndjson((0..10_000).map(|n| json!({"n": n, "k": format!("p{}", n % 8)})));
    let pushed = queen
        .run_with(&["push", "orders", "--partition-key", "k"], &lines, &[])
        .await;
    pushed.expect(0);
    assert_eq!(pushed.stdout, "queued=10000 duplicate=0 failed=0\n");

    // --limit takes exactly that many and acks them; the rest follows.
    let first = queen
        .run(&["tail", "orders", "--group", "g", "-n", "7"])
        .await;
    first.expect(0);
    let rest = queen.run(&["tail", "orders", "--group", "g"]).await;
    rest.expect(0);
    let mut seen = BTreeSet::new();
    let mut last_in_partition: BTreeMap<String, i64> = BTreeMap::new();
    let (first, rest) = (first.lines(), rest.lines());
    assert_eq!(first.len(), 7);
    assert_eq!(rest.len(), 9_993);
    for line in first.iter().chain(&rest) {
        let n = line["data"]["n"].as_i64().expect("n");
        let partition = line["partition"].as_str().expect("partition").to_owned();
        assert_eq!(partition, format!("p{}", n % 8), "{line}");
        assert_eq!(line["queue"], "orders");
        assert!(line["transactionId"].is_string() && line["partitionId"].is_string());
        assert!(seen.insert(n), "message {n} printed twice");
        if let Some(last) = last_in_partition.insert(partition, n) {
            assert!(last < n, "partition order broken: {last} then {n}");
        }
    }
    assert_eq!(seen, (0..10_000).collect::<BTreeSet<i64>>());
    // Everything printed was acked.
    let again = queen.run(&["tail", "orders", "--group", "g"]).await;
    assert_eq!(again.expect(0).stdout, "");

    // The views see it.
    let queues = queen.run(&["queues"]).await;
    let queue = &queues.expect(0).json()["queues"][0];
    assert_eq!(queue["name"], "orders");
    assert_eq!(queue["partitions"], 8);
    assert_eq!(queue["messages"]["total"], 10_000);
    let groups = queen.run(&["groups"]).await;
    let groups = groups.expect(0).json();
    assert!(
        groups
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "g" && g["queueName"] == "orders" && g["totalLag"] == 0),
        "{groups}"
    );
    let status = queen.run(&["status"]).await;
    assert_eq!(status.expect(0).json()["overview"]["queues"], 1);
    let detail = queen.run(&["status", "orders"]).await;
    assert_eq!(
        detail.expect(0).json()["partitions"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
    let table = queen.run(&["-o", "table", "queues"]).await;
    let table = &table.expect(0).stdout;
    assert!(table.starts_with("QUEUE "), "{table}");
    assert!(
        table.contains("orders") && table.contains("10000"),
        "{table}"
    );
    queen.run(&["ping"]).await.expect(0);
    queen.run(&["status", "nosuch"]).await.expect(2);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_moves_a_group_back_to_a_time_and_the_tail_rereads_from_there() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    let before = ndjson((0..5).map(|n| json!({"batch": "before", "n": n})));
    let after = ndjson((0..5).map(|n| json!({"batch": "after", "n": n})));
    queen
        .run_with(&["push", "events"], &before, &[])
        .await
        .expect(0);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let cut = now_rfc3339();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    queen
        .run_with(&["push", "events"], &after, &[])
        .await
        .expect(0);
    let batches = |run: &Run| -> Vec<String> {
        run.lines()
            .iter()
            .map(|l| {
                format!(
                    "{}-{}",
                    l["data"]["batch"].as_str().unwrap(),
                    l["data"]["n"]
                )
            })
            .collect()
    };
    let all = queen.run(&["tail", "events", "--group", "g"]).await;
    assert_eq!(batches(all.expect(0)).len(), 10);

    let replayed = queen
        .run(&["replay", "events", "--group", "g", "--to", &cut])
        .await;
    assert!(
        replayed
            .expect(0)
            .stdout
            .starts_with("replayed cg=g queue=events to="),
        "{replayed:?}"
    );
    let reread = queen.run(&["tail", "events", "--group", "g"]).await;
    assert_eq!(
        batches(reread.expect(0)),
        (0..5).map(|n| format!("after-{n}")).collect::<Vec<_>>()
    );
    // The reference's relative form, through the `--cg` alias.
    queen
        .run(&["replay", "events", "--cg", "g", "--to", "15m ago"])
        .await
        .expect(0);
    let everything = queen.run(&["tail", "events", "--group", "g"]).await;
    assert_eq!(batches(everything.expect(0)).len(), 10);
    queen
        .run(&["replay", "events", "--group", "g", "--to", "beginning"])
        .await
        .expect(0);
    queen
        .run(&["replay", "events", "--group", "g", "--to", "now"])
        .await
        .expect(0);
    let nothing = queen.run(&["tail", "events", "--group", "g"]).await;
    assert_eq!(nothing.expect(0).stdout, "");

    let unknown = queen
        .run(&["replay", "nosuch", "--group", "g", "--to", "now"])
        .await;
    assert!(
        unknown.expect(2).stderr.contains("Queue not found"),
        "{unknown:?}"
    );
    let bad_time = queen
        .run(&["replay", "events", "--group", "g", "--to", "yesterday"])
        .await;
    assert!(
        bad_time.expect(1).stderr.contains("unrecognised time"),
        "{bad_time:?}"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_exits_five_while_a_group_lags_and_zero_when_none_does() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    queen
        .run_with(&["push", "jobs"], &ndjson((0..3).map(|n| json!(n))), &[])
        .await
        .expect(0);
    queen
        .run(&["tail", "jobs", "--group", "slow", "-n", "1"])
        .await
        .expect(0);
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let calm = queen.run(&["lag", "--min-seconds", "3600"]).await;
    assert_eq!(calm.expect(0).json(), json!([]));
    let lagging = queen.run(&["lag", "--min-seconds", "1"]).await;
    let rows = lagging.expect(5).json();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0]["consumer_group"], "slow");
    assert_eq!(rows[0]["queue_name"], "jobs");
    assert_eq!(rows[0]["offset_lag"], 2);
    assert!(lagging.stderr.contains("lag 1 s or more"), "{lagging:?}");
    // Filters narrow what alerts.
    queen
        .run(&["lag", "--min-seconds", "1", "--group", "other"])
        .await
        .expect(0);
    queen
        .run(&["lag", "--min-seconds", "1", "--queue", "jobs"])
        .await
        .expect(5);
    let table = queen
        .run(&["-o", "table", "lag", "--min-seconds", "1"])
        .await;
    assert!(table.expect(5).stdout.contains("slow"), "{table:?}");
    // Without --min-seconds it lists and succeeds.
    let listed = queen.run(&["lag"]).await;
    assert!(listed.expect(0).json()[0]["name"] == "slow", "{listed:?}");

    // Caught up: nothing lags.
    queen
        .run(&["tail", "jobs", "--group", "slow"])
        .await
        .expect(0);
    queen.run(&["lag", "--min-seconds", "1"]).await.expect(0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_list_shows_dead_letters_and_retry_replays_them_once() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    queen
        .run_with(
            &["push", "work"],
            &ndjson([json!({"id": 1}), json!({"id": 2})]),
            &[],
        )
        .await
        .expect(0);
    let popped = broker
        .client
        .get("/api/v1/pop/queue/work?consumerGroup=w&batch=2")
        .await
        .json();
    let messages = popped["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    let acks: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                   "leaseId": m["leaseId"], "status": "dlq", "error": "boom"})
        })
        .collect();
    let acked = broker
        .client
        .post_json(
            "/api/v1/ack/batch",
            &json!({"acknowledgments": acks, "consumerGroup": "w"}),
        )
        .await;
    assert_eq!(acked.status, 200);

    let listed = queen.run(&["dlq", "list", "--queue", "work"]).await;
    let listed = listed.expect(0).json();
    let letters = listed["messages"].as_array().unwrap();
    assert_eq!(letters.len(), 2, "{listed}");
    assert!(letters.iter().all(|l| l["errorMessage"] == "boom"));
    let table = queen.run(&["-o", "table", "dlq", "list"]).await;
    assert!(table.expect(0).stdout.contains("boom"), "{table:?}");

    let (partition_id, transaction_id) = (
        letters[0]["partitionId"].as_str().unwrap(),
        letters[0]["transactionId"].as_str().unwrap(),
    );
    let one = queen
        .run(&["dlq", "retry", partition_id, transaction_id])
        .await;
    assert_eq!(one.expect(0).json()["requeued"], 1);
    queen
        .run(&["dlq", "retry", partition_id, transaction_id])
        .await
        .expect(4);
    let rest = queen
        .run(&["dlq", "retry", "--queue", "work", "--group", "w"])
        .await;
    assert_eq!(rest.expect(0).json()["deadLetters"], 1);
    queen
        .run(&["dlq", "retry", "--queue", "work"])
        .await
        .expect(4);
    let usage = queen.run(&["dlq", "retry"]).await;
    assert!(usage.expect(1).stderr.contains("--queue"), "{usage:?}");

    let redelivered = queen.run(&["tail", "work", "--group", "w"]).await;
    let ids: BTreeSet<i64> = redelivered
        .expect(0)
        .lines()
        .iter()
        .map(|l| l["data"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from([1, 2]));
    let empty = queen.run(&["dlq", "list", "--queue", "work"]).await;
    assert_eq!(empty.expect(0).json()["messages"], json!([]));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_turns_on_only_when_confirmed_and_off_again() {
    let spool = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(queen_engine::EngineConfig {
        spool: Some(queen_engine::SpoolConfig {
            dir: spool.path().to_owned(),
            max_bytes: 1 << 30,
            push_timeout: Duration::from_secs(5),
            adopt: None,
            database: None,
        }),
        maintenance_refresh: Duration::from_millis(100),
        ..queen_engine::EngineConfig::default()
    })
    .await;
    let queen = Queen::at(&broker);
    let state = |run: &Run| run.json()["maintenanceMode"].clone();
    let refused = queen.run(&["maintenance", "on"]).await;
    assert!(refused.expect(1).stderr.contains("--yes"), "{refused:?}");
    assert_eq!(
        state(queen.run(&["maintenance", "get"]).await.expect(0)),
        false
    );

    queen.run(&["maintenance", "on", "--yes"]).await.expect(0);
    assert_eq!(
        state(queen.run(&["maintenance", "get"]).await.expect(0)),
        true
    );
    // A push while on is spooled and still answered.
    let pushed = queen
        .run_with(&["push", "held", "--data", r#"{"a":1}"#], b"", &[])
        .await;
    assert_eq!(pushed.expect(0).stdout, "queued=1 duplicate=0 failed=0\n");
    let quiet = queen.run(&["-o", "table", "maint", "off"]).await;
    assert_eq!(quiet.expect(0).stdout, "maintenance off\n");
    assert_eq!(
        state(queen.run(&["maintenance", "get"]).await.expect(0)),
        false
    );
    // Off, the spool drains: the message arrives.
    let arrived = queen
        .run(&[
            "tail",
            "held",
            "--group",
            "g",
            "-f",
            "-n",
            "1",
            "--timeout",
            "20s",
        ])
        .await;
    assert_eq!(arrived.expect(0).lines()[0]["data"], json!({"a": 1}));

    queen
        .run(&["maintenance", "on", "--pop", "--yes"])
        .await
        .expect(0);
    let pop = queen.run(&["maintenance", "get", "--pop"]).await;
    assert_eq!(pop.expect(0).json()["popMaintenanceMode"], true);
    queen.run(&["maintenance", "off", "--pop"]).await.expect(0);
    let pop = queen.run(&["maintenance", "get", "--pop"]).await;
    assert_eq!(pop.expect(0).json()["popMaintenanceMode"], false);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_line_stops_the_push_after_pushing_what_came_before() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    let input = b"{\"n\":1}\n{\"n\":2}\n\n{\"n\":3\n{\"n\":4}\n";
    let run = queen.run_with(&["push", "mixed"], input, &[]).await;
    run.expect(1);
    assert!(
        run.stderr.contains("line 4: not JSON")
            && run
                .stderr
                .contains("the 2 message(s) before it were pushed"),
        "{run:?}"
    );
    assert_eq!(run.stdout, "queued=2 duplicate=0 failed=0\n");
    let tailed = queen.run(&["tail", "mixed", "--group", "g"]).await;
    let ns: Vec<Value> = tailed
        .expect(0)
        .lines()
        .iter()
        .map(|l| l["data"]["n"].clone())
        .collect();
    assert_eq!(ns, vec![json!(1), json!(2)]);

    let wrapped = queen
        .run_with(
            &["push", "mixed", "--wrapped"],
            b"{\"partition\":\"p\"}\n",
            &[],
        )
        .await;
    assert!(
        wrapped.expect(1).stderr.contains("line 1: --wrapped"),
        "{wrapped:?}"
    );
    let empty = queen.run_with(&["push", "mixed"], b"\n\n", &[]).await;
    assert!(
        empty.expect(4).stderr.contains("nothing pushed"),
        "{empty:?}"
    );
    // A usage error is 1, as in the reference (clap's own default is 2).
    queen.run(&["tail"]).await.expect(1);
    queen.run(&["push", "q", "--batch", "0"]).await.expect(1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_output_pushed_wrapped_copies_a_queue_with_its_partitions() {
    let broker = TestBroker::start().await;
    let queen = Queen::at(&broker);
    // A number no f64 holds: payloads travel as their bytes.
    let big = "123456789012345678901234567890";
    let mut lines: String = (0..20)
        .map(|n| format!("{{\"n\":{n},\"big\":{big},\"k\":{}}}\n", n % 3))
        .collect();
    // A null payload: tail prints `"data": null`, which push --wrapped takes.
    lines.push_str("null\n");
    let lines = lines.into_bytes();
    queen
        .run_with(&["push", "src", "--partition-key", "k"], &lines, &[])
        .await
        .expect(0);
    let tailed = queen.run(&["tail", "src", "--group", "copy"]).await;
    assert_eq!(
        tailed.expect(0).stdout.matches(big).count(),
        20,
        "{tailed:?}"
    );
    let copied = queen
        .run_with(&["push", "dst", "--wrapped"], tailed.stdout.as_bytes(), &[])
        .await;
    assert_eq!(copied.expect(0).stdout, "queued=21 duplicate=0 failed=0\n");
    // The same transaction ids again are duplicates.
    let again = queen
        .run_with(&["push", "dst", "--wrapped"], tailed.stdout.as_bytes(), &[])
        .await;
    assert_eq!(again.expect(0).stdout, "queued=0 duplicate=21 failed=0\n");
    let out = queen.run(&["tail", "dst", "--group", "check"]).await;
    let key = |l: &Value| {
        (
            l["partition"].as_str().unwrap().to_owned(),
            l["transactionId"].as_str().unwrap().to_owned(),
            l["data"].to_string(),
        )
    };
    let source: BTreeSet<_> = tailed.lines().iter().map(key).collect();
    assert_eq!(out.expect(0).stdout.matches(big).count(), 20, "{out:?}");
    let copy: BTreeSet<_> = out.lines().iter().map(key).collect();
    assert_eq!(source.len(), 21);
    assert!(
        source.iter().any(|(_, _, data)| data == "null"),
        "{source:?}"
    );
    assert_eq!(source, copy);

    // From a file, on a terminal: a bar of the bytes read, not a spinner.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tailed.ndjson");
    std::fs::write(&file, &tailed.stdout).unwrap();
    let path = file.to_str().unwrap();
    let args = ["push", "bar", "--wrapped", "--batch", "5", "--file", path];
    let shown = queen.run_in_terminal(&args).await;
    assert!(
        shown
            .expect(0)
            .stdout
            .contains("queued=21 duplicate=0 failed=0"),
        "{shown:?}"
    );
    let total = format!("/{}", human_bytes(tailed.stdout.len()));
    assert!(
        shown.stdout.contains(&total) && shown.stdout.contains(" read, "),
        "no bar ending at {total}: {shown:?}"
    );
    broker.stop().await;
}

/// `n` bytes as indicatif's `{bytes}` writes them (binary units).
fn human_bytes(n: usize) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a display value")]
    let kib = n as f64 / 1024.0;
    if n < 1024 {
        format!("{n} B")
    } else {
        format!("{kib:.2} KiB")
    }
}

fn jwt(role: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    encode(
        &Header::default(),
        &json!({"sub": "cli-test", "role": role, "exp": exp}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

const SECRET: &str = "a-cli-test-secret-of-some-length";

async fn auth_broker() -> TestBroker {
    TestBroker::start_serving(queen_http::ServeOptions {
        auth: Some(Arc::new(
            Auth::new(AuthConfig {
                secret: Some(SECRET.to_owned()),
                ..AuthConfig::default()
            })
            .unwrap(),
        )),
        ..queen_http::ServeOptions::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_server_or_token_fails_clearly_with_its_own_exit_code() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let nowhere = Queen::new(Some(format!("http://127.0.0.1:{closed}")));
    let run = nowhere.run(&["queues"]).await;
    assert!(
        run.expect(2).stderr.contains(&format!(
            "cannot reach the broker at http://127.0.0.1:{closed}"
        )),
        "{run:?}"
    );
    let run = Queen::new(Some("not a url".to_owned()))
        .run(&["queues"])
        .await;
    assert!(
        run.expect(1).stderr.contains("invalid server URL"),
        "{run:?}"
    );
    let run = Queen::new(None).run(&["queues"]).await;
    assert!(
        run.expect(1).stderr.contains("no broker configured"),
        "{run:?}"
    );

    let broker = auth_broker().await;
    let queen = Queen::at(&broker);
    let run = queen.run(&["queues"]).await;
    assert!(run.expect(3).stderr.contains("401"), "{run:?}");
    let run = queen
        .run(&["--token", "not-a-real-token-xyz", "queues"])
        .await;
    assert!(run.expect(3).stderr.contains("401"), "{run:?}");
    assert!(!run.stderr.contains("not-a-real-token-xyz"), "{run:?}");
    let reader = jwt("read-only");
    queen.run(&["--token", &reader, "queues"]).await.expect(0);
    let run = queen
        .run(&["--token", &reader, "maintenance", "on", "--yes"])
        .await;
    assert!(run.expect(3).stderr.contains("403"), "{run:?}");
    assert!(!run.stderr.contains(&reader), "{run:?}");
    // $QUEEN_TOKEN works like --token.
    queen
        .run_with(&["queues"], b"", &[("QUEEN_TOKEN", &reader)])
        .await
        .expect(0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_choose_the_broker_and_its_token_and_never_print_it() {
    let broker = auth_broker().await;
    let url = broker.client.base().to_owned();
    let admin = jwt("admin");
    let queen = Queen::new(None);
    let config = queen.home.path().join(".queen/config.yaml");
    let dead = "http://127.0.0.1:9";

    queen
        .run(&[
            "config",
            "set-context",
            "prod",
            "--server",
            &url,
            "--token",
            &admin,
        ])
        .await
        .expect(0);
    queen
        .run(&["config", "set-context", "dead", "--server", dead])
        .await
        .expect(0);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&config)
            .expect("config file")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let listed = queen.run(&["config", "get-contexts"]).await;
    let contexts = listed.expect(0).json();
    assert_eq!(contexts[0]["name"], "prod");
    assert_eq!(contexts[0]["current"], true);
    assert_eq!(contexts[0]["auth"], "literal");
    assert_eq!(contexts[1]["current"], false);
    let viewed = queen.run(&["config", "view"]).await;
    assert!(
        viewed.expect(0).stdout.contains("literal:<redacted>"),
        "{viewed:?}"
    );
    for run in [&listed, &viewed] {
        assert!(!run.stdout.contains(&admin) && !run.stderr.contains(&admin));
    }

    // The current context's server and token are used.
    queen.run(&["queues"]).await.expect(0);
    queen.run(&["--context", "dead", "queues"]).await.expect(2);
    queen
        .run_with(&["queues"], b"", &[("QUEEN_CONTEXT", "dead")])
        .await
        .expect(2);
    // --server overrides the context's server; the token stays the current one's.
    queen
        .run_with(
            &["--server", &url, "queues"],
            b"",
            &[("QUEEN_CONTEXT", "prod")],
        )
        .await
        .expect(0);
    queen
        .run(&["config", "use-context", "dead"])
        .await
        .expect(0);
    let current = queen.run(&["config", "current-context"]).await;
    assert_eq!(current.expect(0).stdout, "dead\n");
    queen.run(&["queues"]).await.expect(2);
    // $QUEEN_SERVER overrides the context; a context without a token gets a 401.
    queen
        .run_with(&["queues"], b"", &[("QUEEN_SERVER", url.as_str())])
        .await
        .expect(3);
    // A token file, by reference.
    let token_file = queen.home.path().join("prod.jwt");
    std::fs::write(&token_file, format!("{admin}\n")).unwrap();
    let token_ref = format!("file://{}", token_file.display());
    queen
        .run(&[
            "config",
            "set-context",
            "dead",
            "--server",
            &url,
            "--token-ref",
            &token_ref,
        ])
        .await
        .expect(0);
    queen.run(&["queues"]).await.expect(0);

    queen
        .run(&["config", "delete-context", "dead"])
        .await
        .expect(0);
    queen.run(&["config", "current-context"]).await.expect(4);
    let missing = queen.run(&["--context", "dead", "queues"]).await;
    assert!(
        missing.expect(1).stderr.contains("no context named"),
        "{missing:?}"
    );
    // Another file, by --config or $QUEEN_CONFIG: empty, so no broker.
    let other = queen.home.path().join("other.yaml");
    let other = other.to_str().unwrap();
    queen.run(&["--config", other, "queues"]).await.expect(1);
    queen
        .run_with(&["queues"], b"", &[("QUEEN_CONFIG", other)])
        .await
        .expect(1);
    broker.stop().await;
}
