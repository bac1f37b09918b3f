//! A small HTTP client for tests: keep-alive connections, JSON in and out.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A response as tests want to see it.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The raw body.
    pub body: Bytes,
}

impl Reply {
    /// The body parsed as JSON; panics with the body text if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "body is not JSON ({error}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// A client bound to one base URL such as `http://127.0.0.1:6632`.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    inner: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client for `base` (no trailing slash).
    pub fn new(base: impl Into<String>) -> Client {
        Client {
            base: base.into(),
            inner: hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(64)
                .build_http(),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, Bytes::new()).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("serialise request body");
        self.send(Method::POST, path, Bytes::from(bytes)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Reply {
        self.send(Method::DELETE, path, Bytes::new()).await
    }

    /// Any method with a raw body (sent as `application/json`).
    pub async fn send(&self, method: Method, path: &str, body: Bytes) -> Reply {
        self.try_send(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("request to {}{path} failed: {error}", self.base))
    }

    /// Like [`Client::send`], returning transport errors instead of panicking.
    pub async fn try_send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
        self.try_send_with(method, path, body, &[]).await
    }

    /// [`Client::send`] with extra request `headers`.
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.try_send_with(method, path, body, headers)
            .await
            .unwrap_or_else(|error| panic!("request to {}{path} failed: {error}", self.base))
    }

    /// [`Client::try_send`] with extra request `headers`.
    pub async fn try_send_with(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(hyper::header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Full::new(body))?;
        let res = self.inner.request(req).await?;
        let status = res.status();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Poll `GET /api/v1/migration/status` every 100 ms until the copy
    /// ended (`complete` or `error`) and return that status; panics,
    /// showing the last status, when it has not ended `within`.
    pub async fn migration_ended(&self, within: std::time::Duration) -> serde_json::Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let reply = self.get("/api/v1/migration/status").await;
            assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
            let status = reply.json();
            if status["status"] == "complete" || status["status"] == "error" {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the copy did not end within {within:?}: {status}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
