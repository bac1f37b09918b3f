//! JWT authentication and the route table's access levels (wire-api.md
//! §0.5, §1): every algorithm, every failure, every route at every level.
//! The keys under `tests/it/jwt/` are test-only, made with openssl.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use queen_http::{Access, Auth, AuthConfig};
use queen_tests::TestBroker;
use serde_json::{json, Value};

const SECRET: &str = "a-test-secret-of-some-length";
const RSA_PRIVATE: &str = include_str!("jwt/rsa-private.pem");
const RSA_PUBLIC: &str = include_str!("jwt/rsa-public.pem");
const ED_PRIVATE: &str = include_str!("jwt/ed25519-private.pem");
const ED_PUBLIC: &str = include_str!("jwt/ed25519-public.pem");

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

async fn broker(config: AuthConfig) -> TestBroker {
    TestBroker::start_serving(queen_http::ServeOptions {
        auth: Some(Arc::new(Auth::new(config).unwrap())),
        ..queen_http::ServeOptions::default()
    })
    .await
}

fn hs256(claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn claims(role: &str) -> Value {
    json!({"sub": "tester", "role": role, "exp": now() + 600})
}

async fn get(broker: &TestBroker, path: &str, token: Option<&str>) -> (u16, Value) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    let reply = broker
        .client
        .send_with(Method::GET, path, Bytes::new(), &headers)
        .await;
    let body = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status.as_u16(), body)
}

fn secret_config() -> AuthConfig {
    AuthConfig {
        secret: Some(SECRET.to_owned()),
        ..AuthConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_of_a_token_is_a_401_worded_as_the_contract_says() {
    let broker = broker(AuthConfig {
        issuer: Some("queen-tests".to_owned()),
        audience: Some("queen".to_owned()),
        ..secret_config()
    })
    .await;
    let good = json!({"sub": "s", "role": "admin", "iss": "queen-tests", "aud": "queen", "exp": now() + 600});
    assert_eq!(
        get(&broker, "/api/v1/dlq", Some(&hs256(&good))).await.0,
        200
    );
    let with = |patch: Value| {
        let mut claims = good.clone();
        for (key, value) in patch.as_object().unwrap() {
            claims[key] = value.clone();
        }
        hs256(&claims)
    };
    let wrong_key = encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(b"another secret"),
    )
    .unwrap();
    let cases = [
        (None, "Authentication required"),
        (Some(with(json!({"exp": now() - 120}))), "Token has expired"),
        (
            Some(with(json!({"nbf": now() + 600}))),
            "Token is not valid yet",
        ),
        (Some(wrong_key), "Invalid token signature"),
        (
            Some(with(json!({"iss": "someone-else"}))),
            "Invalid token issuer",
        ),
        (
            Some(with(json!({"aud": "other"}))),
            "Invalid token audience",
        ),
        (Some("not.a.token".to_owned()), "Invalid token"),
    ];
    for (token, message) in cases {
        let (status, body) = get(&broker, "/api/v1/dlq", token.as_deref()).await;
        assert_eq!(
            (status, body),
            (401, json!({"error": message})),
            "{message}"
        );
    }
    // Inside the 30 s clock skew, an expiry just past is still accepted.
    assert_eq!(
        get(
            &broker,
            "/api/v1/dlq",
            Some(&with(json!({"exp": now() - 10})))
        )
        .await
        .0,
        200
    );
    // The prefix in any case, or none.
    let token = hs256(&good);
    for header in [
        format!("bearer {token}"),
        format!("BEARER {token}"),
        token.clone(),
    ] {
        let reply = broker
            .client
            .send_with(
                Method::GET,
                "/api/v1/dlq",
                Bytes::new(),
                &[("authorization", &header)],
            )
            .await;
        assert_eq!(reply.status, 200, "{header:.12}");
    }
    // Public routes and skipped paths need nothing.
    for path in ["/health", "/metrics", "/metrics/prometheus", "/"] {
        assert_eq!(get(&broker, path, None).await.0, 200, "{path}");
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_eddsa_tokens_verify_with_their_public_keys() {
    for (algorithm, private, public) in [
        (
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
            RSA_PUBLIC,
        ),
        (
            Algorithm::EdDSA,
            EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap(),
            ED_PUBLIC,
        ),
    ] {
        let broker = broker(AuthConfig {
            public_key: Some(public.to_owned()),
            ..AuthConfig::default()
        })
        .await;
        let token = encode(&Header::new(algorithm), &claims("read-only"), &private).unwrap();
        assert_eq!(
            get(&broker, "/api/v1/dlq", Some(&token)).await.0,
            200,
            "{algorithm:?}"
        );
        // An HS256 token signed with the public key's text is refused: the
        // broker holds no HS256 key (the algorithm-confusion attack).
        let confused = encode(
            &Header::new(Algorithm::HS256),
            &claims("admin"),
            &EncodingKey::from_secret(public.as_bytes()),
        )
        .unwrap();
        assert_eq!(
            get(&broker, "/api/v1/dlq", Some(&confused)).await,
            (401, json!({"error": "Invalid token algorithm"}))
        );
        broker.stop().await;
    }
    assert!(Auth::new(AuthConfig {
        public_key: Some("not a pem".to_owned()),
        ..AuthConfig::default()
    })
    .is_err());
    assert!(
        Auth::new(AuthConfig::default()).is_err(),
        "auth with no key at all"
    );
}

/// A path that reaches `pattern` (parameters filled in).
fn path_of(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|segment| match segment {
            ":partition_id" => "00000000-0000-0000-0000-000000000001",
            ":lease" => "00000000-0000-0000-0000-000000000002",
            s if s.starts_with(':') => "x",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_table_answers_its_level_and_refuses_the_one_below() {
    let broker = broker(secret_config()).await;
    let tokens = [
        (Access::ReadOnly, hs256(&claims("read-only"))),
        (
            Access::ReadWrite,
            hs256(&json!({"sub": "s", "roles": ["read-only", "read-write"], "exp": now() + 600})),
        ),
        (Access::Admin, hs256(&claims("admin"))),
    ];
    let no_role = hs256(&json!({"sub": "s", "exp": now() + 600}));
    for (method, pattern, access, _) in queen_http::route_table() {
        let method: Method = method.parse().unwrap();
        let path = path_of(pattern);
        let send = |token: Option<String>| {
            let (method, path, client) = (method.clone(), path.clone(), broker.client.clone());
            async move {
                let header = token.map(|t| format!("Bearer {t}"));
                let headers: Vec<(&str, &str)> = header
                    .iter()
                    .map(|h| ("authorization", h.as_str()))
                    .collect();
                let reply = client
                    .send_with(method, &path, Bytes::from_static(b"{}"), &headers)
                    .await;
                (
                    reply.status.as_u16(),
                    serde_json::from_slice::<Value>(&reply.body).unwrap_or(Value::Null),
                )
            }
        };
        let (status, body) = send(None).await;
        if access == Access::Public {
            assert_ne!(status, 401, "{method} {pattern} is public");
            continue;
        }
        assert_eq!(
            (status, body),
            (401, json!({"error": "Authentication required"})),
            "{method} {pattern}"
        );
        assert_eq!(
            send(Some(no_role.clone())).await.0,
            403,
            "{method} {pattern}: a token without a role"
        );
        for (level, token) in &tokens {
            let (status, body) = send(Some(token.clone())).await;
            if *level >= access {
                assert!(
                    status != 401 && status != 403,
                    "{method} {pattern} at {level:?}: {status} {body}"
                );
            } else {
                assert_eq!(
                    (status, body),
                    (403, json!({"error": "Insufficient permissions"})),
                    "{method} {pattern} at {level:?}"
                );
            }
        }
    }
    broker.stop().await;
}
