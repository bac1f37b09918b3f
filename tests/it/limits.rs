//! Limits that protect the broker from its clients (issue 14, item 5):
//! connections at once, request body bytes in flight, and the time a body
//! may take to arrive.

use std::time::{Duration, Instant};

use queen_tests::TestBroker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::select_i64;

/// A raw connection to `broker`.
async fn connect(broker: &TestBroker) -> TcpStream {
    let addr = broker
        .client
        .base()
        .trim_start_matches("http://")
        .to_owned();
    TcpStream::connect(addr).await.unwrap()
}

/// Send `head` (and `body`), then read one response head and body, up to
/// `Content-Length`; returns the raw text.
async fn exchange(stream: &mut TcpStream, head: &str, body: &[u8]) -> String {
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    read_response(stream).await
}

async fn read_response(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("no response within 10 s")
            .unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return text;
            }
        }
        if n == 0 {
            return text;
        }
    }
}

const HEALTH: &str = "GET /health HTTP/1.1\r\nhost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_cap_is_answered_busy_and_a_freed_slot_serves_again() {
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        max_connections: 2,
        ..queen_http::ServeOptions::default()
    })
    .await;
    let mut first = connect(&broker).await;
    let mut second = connect(&broker).await;
    assert!(exchange(&mut first, HEALTH, b"")
        .await
        .starts_with("HTTP/1.1 200"));
    assert!(exchange(&mut second, HEALTH, b"")
        .await
        .starts_with("HTTP/1.1 200"));
    // Both keep-alive connections are open: a third is refused.
    let mut third = connect(&broker).await;
    let refused = exchange(&mut third, HEALTH, b"").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(refused.contains("too many connections"), "{refused}");
    // One closes: a new connection is served.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect(&broker).await;
        let answer = exchange(&mut again, HEALTH, b"").await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed slot never served: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A push of one item with `filler` bytes of payload, as raw HTTP.
fn push_request(queue: &str, filler: usize) -> (String, Vec<u8>) {
    let body = format!(
        r#"{{"items":[{{"queue":"{queue}","payload":"{}"}}]}}"#,
        "x".repeat(filler)
    )
    .into_bytes();
    let head = format!(
        "POST /api/v1/push HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    (head, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_in_flight_budget_are_answered_busy_and_write_nothing() {
    // The smallest budget there is: one body of the 64 MiB limit (a smaller
    // setting is raised to it, or a large body could never fit).
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        max_body_bytes_in_flight: 1 << 20,
        ..queen_http::ServeOptions::default()
    })
    .await;
    // A declared body holds its share from its headers on: a slow client
    // holds 40 MiB of the 64 and sends nothing yet.
    let declared = |length: usize| {
        format!(
            "POST /api/v1/push HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {length}\r\nexpect: 100-continue\r\n\r\n"
        )
    };
    let mut slow = connect(&broker).await;
    slow.write_all(declared(40 << 20).as_bytes()).await.unwrap();
    let admitted = read_head(&mut slow).await;
    assert!(admitted.starts_with("HTTP/1.1 100"), "{admitted}");
    // Another 40 MiB does not fit now: refused from its headers (with
    // `Expect: 100-continue` the client never sends the body).
    let mut other = connect(&broker).await;
    let refused = exchange(&mut other, &declared(40 << 20), b"").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(
        refused.contains("too many request bytes in flight"),
        "{refused}"
    );
    // A small one still does.
    let (head, body) = push_request("small", 100);
    let mut small = connect(&broker).await;
    assert!(exchange(&mut small, &head, &body)
        .await
        .starts_with("HTTP/1.1 201"));
    // The slow client goes away: its share comes back, and a 40 MiB body is
    // admitted again.
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut retry = connect(&broker).await;
        retry
            .write_all(declared(40 << 20).as_bytes())
            .await
            .unwrap();
        let answer = read_head(&mut retry).await;
        if answer.starts_with("HTTP/1.1 100") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the share never came back: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sql = broker.sql().await;
    let stored = "SELECT coalesce(sum(msg_count), 0)::bigint FROM queen.log_segments";
    assert_eq!(select_i64(&sql, stored).await, 1);
}

/// The first response head on `stream` (an interim `100 Continue` included).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("no response head within 10 s")
            .unwrap();
        if n == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    String::from_utf8_lossy(&buf).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_dribbles_is_cut_by_the_timeout_and_writes_nothing() {
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        body_timeout: Duration::from_millis(500),
        ..queen_http::ServeOptions::default()
    })
    .await;
    let (head, body) = push_request("dribbled", 100);
    let mut stream = connect(&broker).await;
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // A byte every 100 ms: never idle long, never done within 500 ms.
    let mut answer = String::new();
    for byte in &body[..20] {
        stream.write_all(std::slice::from_ref(byte)).await.unwrap();
        let mut probe = [0u8; 1024];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut probe)).await
        {
            answer = String::from_utf8_lossy(&probe[..n]).to_string();
            break;
        }
    }
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        answer.contains("request body not received within 0.5 s"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let sql = broker.sql().await;
    let stored = "SELECT count(*) FROM queen.log_segments";
    assert_eq!(select_i64(&sql, stored).await, 0);
}
