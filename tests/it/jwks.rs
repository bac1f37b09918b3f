//! `JWT_JWKS_URL` (wire-api.md §0.5): RS256 and EdDSA tokens verified with
//! the keys of a JWKS document, chosen by `kid`; the cache, its refresh on
//! an unknown key id and its rate limit; and the answers when the JWKS
//! server is down, silent or sends too much.
//!
//! The JWKS server is a few lines over a `TcpListener` inside the test: it
//! serves what the test sets and counts the requests it reads. The keys of
//! `jwt/jwks.json` are the public halves of `jwt/*.pem`: `rsa-1` is
//! `rsa-*.pem`, `rsa-2` is `rsa2-*.pem`, `ed-1` is `ed25519-*.pem`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use parking_lot::Mutex;
use queen_http::{Auth, AuthConfig, JwksConfig};
use queen_tests::TestBroker;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const JWKS: &str = include_str!("jwt/jwks.json");
const RSA_PRIVATE: &str = include_str!("jwt/rsa-private.pem");
const RSA2_PRIVATE: &str = include_str!("jwt/rsa2-private.pem");
const ED_PRIVATE: &str = include_str!("jwt/ed25519-private.pem");

/// What the JWKS server answers.
#[derive(Clone)]
enum Reply {
    /// 200 with this body.
    Document(Vec<u8>),
    /// 200 with this body and no length: it ends when the connection closes.
    Unsized(Vec<u8>),
    /// Read the request, then say nothing and keep the connection open.
    Silence,
}

/// A JWKS server on a loopback port.
struct JwksServer {
    url: String,
    reply: Arc<Mutex<Reply>>,
    n_requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    async fn start(reply: Reply) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        let reply = Arc::new(Mutex::new(reply));
        let n_requests = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (reply, n_requests) = (Arc::clone(&reply), Arc::clone(&n_requests));
            async move {
                // Aborting the server drops the set, which ends its connections.
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    let (reply, n_requests) = (Arc::clone(&reply), Arc::clone(&n_requests));
                    connections.spawn(answer(stream, reply, n_requests));
                }
            }
        });
        JwksServer {
            url,
            reply,
            n_requests,
            task,
        }
    }

    fn serve(&self, reply: Reply) {
        *self.reply.lock() = reply;
    }

    fn n_requests(&self) -> usize {
        self.n_requests.load(Ordering::SeqCst)
    }

    /// Stop listening: connections are refused from now on.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Read one request head, count it, answer it, close.
async fn answer(mut stream: TcpStream, reply: Arc<Mutex<Reply>>, n_requests: Arc<AtomicUsize>) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    n_requests.fetch_add(1, Ordering::SeqCst);
    let reply = reply.lock().clone();
    match &reply {
        Reply::Document(body) | Reply::Unsized(body) => {
            let length = match &reply {
                Reply::Document(_) => format!("content-length: {}\r\n", body.len()),
                _ => String::new(),
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}connection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body).await;
            let _ = stream.shutdown().await;
        }
        Reply::Silence => tokio::time::sleep(Duration::from_secs(600)).await,
    }
}

/// A JWKS document of the keys of `jwt/jwks.json` with these ids.
fn document(kids: &[&str]) -> Reply {
    let all: Value = serde_json::from_str(JWKS).unwrap();
    let keys: Vec<Value> = all["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|key| kids.contains(&key["kid"].as_str().unwrap()))
        .cloned()
        .collect();
    assert_eq!(keys.len(), kids.len(), "{kids:?}");
    Reply::Document(serde_json::to_vec(&json!({ "keys": keys })).unwrap())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A read-only token signed with `private` (PEM), naming `kid`.
fn token(algorithm: Algorithm, private: &str, kid: &str) -> String {
    let key = match algorithm {
        Algorithm::EdDSA => EncodingKey::from_ed_pem(private.as_bytes()).unwrap(),
        _ => EncodingKey::from_rsa_pem(private.as_bytes()).unwrap(),
    };
    let header = Header {
        kid: Some(kid.to_owned()),
        ..Header::new(algorithm)
    };
    let claims = json!({"sub": "tester", "role": "read-only", "exp": now() + 600});
    encode(&header, &claims, &key).unwrap()
}

fn rsa(kid: &str) -> String {
    token(Algorithm::RS256, RSA_PRIVATE, kid)
}

/// The broker verifying tokens with the document at `url`.
async fn broker(jwks: JwksConfig) -> TestBroker {
    let auth = Auth::new(AuthConfig {
        jwks: Some(jwks),
        ..AuthConfig::default()
    })
    .unwrap();
    TestBroker::start_serving(queen_http::ServeOptions {
        auth: Some(Arc::new(auth)),
        ..queen_http::ServeOptions::default()
    })
    .await
}

/// Status and JSON body of `GET /api/v1/dlq` (read-only) with `token`.
async fn get(broker: &TestBroker, token: &str) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    let reply = broker
        .client
        .send_with(
            Method::GET,
            "/api/v1/dlq",
            Bytes::new(),
            &[("authorization", &bearer)],
        )
        .await;
    let body = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status.as_u16(), body)
}

fn fetch_failed() -> (u16, Value) {
    (500, json!({"error": "JWKS fetch failed"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_eddsa_tokens_verify_with_the_jwks_key_their_kid_names() {
    let server = JwksServer::start(document(&["rsa-1", "ed-1"])).await;
    let broker = broker(JwksConfig::new(&server.url)).await;
    assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    assert_eq!(
        get(&broker, &token(Algorithm::EdDSA, ED_PRIVATE, "ed-1"))
            .await
            .0,
        200
    );
    // Signed by another key but naming a served kid.
    assert_eq!(
        get(&broker, &token(Algorithm::RS256, RSA2_PRIVATE, "rsa-1")).await,
        (401, json!({"error": "Invalid token signature"}))
    );
    // A kid whose key is of another algorithm.
    assert_eq!(
        get(&broker, &token(Algorithm::RS256, RSA_PRIVATE, "ed-1")).await,
        (401, json!({"error": "Invalid token algorithm"}))
    );
    // Without a kid there is no key to choose (no JWT_PUBLIC_KEY here).
    let no_kid = encode(
        &Header::new(Algorithm::RS256),
        &json!({"sub": "s", "role": "admin", "exp": now() + 600}),
        &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        get(&broker, &no_kid).await,
        (401, json!({"error": "Token has no key id"}))
    );
    // The document was fetched once, on the first token.
    assert_eq!(server.n_requests(), 1);
    broker.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kid_fetches_the_document_again_and_finds_a_rotated_key() {
    let server = JwksServer::start(document(&["rsa-1"])).await;
    let broker = broker(JwksConfig {
        refresh_min: Duration::ZERO,
        ..JwksConfig::new(&server.url)
    })
    .await;
    assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    assert_eq!(server.n_requests(), 1);
    // The issuer rotates: the new key is served, and a token naming it
    // makes the broker fetch once more.
    server.serve(document(&["rsa-1", "rsa-2"]));
    assert_eq!(
        get(&broker, &token(Algorithm::RS256, RSA2_PRIVATE, "rsa-2"))
            .await
            .0,
        200
    );
    assert_eq!(server.n_requests(), 2);
    // Cached now: no fetch.
    assert_eq!(
        get(&broker, &token(Algorithm::RS256, RSA2_PRIVATE, "rsa-2"))
            .await
            .0,
        200
    );
    assert_eq!(server.n_requests(), 2);
    // A kid the fresh document lacks too: one fetch, then 401.
    assert_eq!(
        get(&broker, &rsa("nobody")).await,
        (401, json!({"error": "Invalid token key id"}))
    );
    assert_eq!(server.n_requests(), 3);
    broker.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_kids_fetches_at_most_once_per_window() {
    let server = JwksServer::start(document(&["rsa-1"])).await;
    // The default window, 30 s, which the test never reaches.
    let broker = broker(JwksConfig::new(&server.url)).await;
    let flood = (0..40).map(|n| {
        let client = broker.client.clone();
        let bearer = format!("Bearer {}", rsa(&format!("random-{n}")));
        async move {
            client
                .send_with(
                    Method::GET,
                    "/api/v1/dlq",
                    Bytes::new(),
                    &[("authorization", &bearer)],
                )
                .await
                .status
                .as_u16()
        }
    });
    let statuses: Vec<u16> = futures_join_all(flood).await;
    assert!(statuses.iter().all(|status| *status == 401), "{statuses:?}");
    for n in 40..60 {
        assert_eq!(get(&broker, &rsa(&format!("random-{n}"))).await.0, 401);
    }
    assert_eq!(server.n_requests(), 1, "one fetch for 60 unknown kids");
    // The known key still works, from the cache.
    assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    assert_eq!(server.n_requests(), 1);
    broker.stop().await;
    server.stop().await;
}

/// Run the futures at once (tasks on the runtime), their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await.unwrap());
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_server_that_refuses_connections_is_a_500_unless_the_key_is_cached() {
    // A port nothing listens on: connections are refused.
    let refused = JwksServer::start(document(&["rsa-1"])).await;
    let refused_url = refused.url.clone();
    refused.stop().await;
    let broker_down = broker(JwksConfig::new(&refused_url)).await;
    assert_eq!(get(&broker_down, &rsa("rsa-1")).await, fetch_failed());
    broker_down.stop().await;

    // Cached, then the server goes away. The cache is always due for a
    // refresh (TTL 0), which fails: the cached key stays in use.
    let server = JwksServer::start(document(&["rsa-1"])).await;
    let broker = broker(JwksConfig {
        cache_ttl: Duration::ZERO,
        refresh_min: Duration::ZERO,
        ..JwksConfig::new(&server.url)
    })
    .await;
    assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    server.stop().await;
    for _ in 0..3 {
        assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    }
    // A key id the cache lacks cannot be looked up now: 500, not 401.
    assert_eq!(get(&broker, &rsa("rsa-2")).await, fetch_failed());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_server_that_never_answers_is_a_500_within_the_timeout() {
    let server = JwksServer::start(Reply::Silence).await;
    let broker = broker(JwksConfig {
        timeout: Duration::from_millis(300),
        ..JwksConfig::new(&server.url)
    })
    .await;
    let started = Instant::now();
    assert_eq!(get(&broker, &rsa("rsa-1")).await, fetch_failed());
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert_eq!(server.n_requests(), 1);
    broker.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_document_over_the_size_limit_is_refused() {
    // A valid document, padded past the limit with whitespace.
    let Reply::Document(mut body) = document(&["rsa-1"]) else {
        unreachable!()
    };
    body.resize(queen_http::MAX_JWKS_BYTES + 1, b' ');
    let server = JwksServer::start(Reply::Document(body.clone())).await;
    let broker = broker(JwksConfig {
        refresh_min: Duration::ZERO,
        ..JwksConfig::new(&server.url)
    })
    .await;
    assert_eq!(get(&broker, &rsa("rsa-1")).await, fetch_failed());
    // Without a declared length, the broker stops reading past the limit.
    server.serve(Reply::Unsized(body.clone()));
    assert_eq!(get(&broker, &rsa("rsa-1")).await, fetch_failed());
    // The same document at the limit is accepted.
    body.truncate(queen_http::MAX_JWKS_BYTES);
    server.serve(Reply::Unsized(body));
    assert_eq!(get(&broker, &rsa("rsa-1")).await.0, 200);
    assert_eq!(server.n_requests(), 3);
    broker.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_combines_with_a_secret_and_a_public_key() {
    let server = JwksServer::start(document(&["rsa-1"])).await;
    let auth = Auth::new(AuthConfig {
        secret: Some("a-test-secret-of-some-length".to_owned()),
        public_key: Some(include_str!("jwt/rsa2-public.pem").to_owned()),
        jwks: Some(JwksConfig::new(&server.url)),
        ..AuthConfig::default()
    })
    .unwrap();
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        auth: Some(Arc::new(auth)),
        ..queen_http::ServeOptions::default()
    })
    .await;
    let claims = json!({"sub": "s", "role": "read-only", "exp": now() + 600});
    let hs256 = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(b"a-test-secret-of-some-length"),
    )
    .unwrap();
    let rsa2_key = EncodingKey::from_rsa_pem(RSA2_PRIVATE.as_bytes()).unwrap();
    let pem_no_kid = encode(&Header::new(Algorithm::RS256), &claims, &rsa2_key).unwrap();
    for (what, token) in [
        ("HS256 with the secret", hs256),
        ("RS256 from the JWKS", rsa("rsa-1")),
        ("RS256 without a kid, JWT_PUBLIC_KEY", pem_no_kid),
        (
            "RS256 with a kid the JWKS lacks, JWT_PUBLIC_KEY",
            token(Algorithm::RS256, RSA2_PRIVATE, "elsewhere"),
        ),
    ] {
        assert_eq!(get(&broker, &token).await.0, 200, "{what}");
    }
    broker.stop().await;
    server.stop().await;
}

#[test]
fn a_malformed_jwks_url_or_one_with_hs256_is_refused() {
    for url in ["::not a url::", "ftp://example.com/jwks"] {
        let error = Auth::new(AuthConfig {
            jwks: Some(JwksConfig::new(url)),
            ..AuthConfig::default()
        })
        .unwrap_err();
        assert!(error.contains("JWT_JWKS_URL"), "{url}: {error}");
    }
    let error = Auth::new(AuthConfig {
        algorithm: queen_http::JwtAlgorithm::Hs256,
        secret: Some("s".to_owned()),
        jwks: Some(JwksConfig::new("http://127.0.0.1:9/jwks")),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(error.contains("JWT_JWKS_URL"), "{error}");
    // RS256 with only a JWKS is a complete configuration.
    assert!(Auth::new(AuthConfig {
        algorithm: queen_http::JwtAlgorithm::Rs256,
        jwks: Some(JwksConfig::new("https://issuer.example/jwks")),
        ..AuthConfig::default()
    })
    .is_ok());
}
