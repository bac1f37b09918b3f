//! `Broker`, the HTTP client of one broker: builds URLs from path segments
//! (each percent-encoded), sends the bearer token, and turns every failure
//! into a `CliError` that names the request.
//!
//! A 401 or 403 is `CliError::Auth`; another error status is
//! `CliError::Broker` carrying the broker's `{"error"}` text; a 2xx whose
//! object body says `"success": false` with an `error` (wire-api.md §0.4:
//! some routes refuse that way) is `CliError::Refused`; no answer at all is
//! `CliError::Unreachable`. A 503 (the broker's "try again", with
//! `Retry-After`) is retried up to `RETRIES` times when the request is
//! idempotent.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::config::Target;
use crate::error::CliError;

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request without a long poll may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of an idempotent request the broker answered 503.
const RETRIES: u32 = 3;
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// One broker.
pub(crate) struct Broker {
    http: reqwest::Client,
    base: Url,
    /// `base` without credentials, for messages.
    shown: String,
    token: Option<String>,
}

/// A successful answer.
pub(crate) struct Reply {
    pub(crate) body: bytes::Bytes,
    what: String,
}

impl Reply {
    /// The body as `T` (which may borrow from it); 204 and an empty body
    /// read as JSON `null`.
    pub(crate) fn json<'de, T: Deserialize<'de>>(&'de self) -> Result<T, CliError> {
        let body: &[u8] = if self.body.is_empty() {
            b"null"
        } else {
            &self.body
        };
        serde_json::from_slice(body).map_err(|err| CliError::Answer {
            what: self.what.clone(),
            problem: err.to_string(),
        })
    }

    /// An error naming this request: the answer was not what was expected.
    pub(crate) fn unexpected(&self, problem: impl Into<String>) -> CliError {
        CliError::Answer {
            what: self.what.clone(),
            problem: problem.into(),
        }
    }
}

/// A request's path and query.
pub(crate) struct Request<'a> {
    pub(crate) method: Method,
    /// Path segments after the base URL, each encoded.
    pub(crate) path: &'a [&'a str],
    pub(crate) query: Vec<(&'a str, String)>,
    /// The JSON body, encoded.
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) timeout: Duration,
    /// A repeat does no harm: retried on 503.
    pub(crate) idempotent: bool,
}

impl<'a> Request<'a> {
    pub(crate) fn get(path: &'a [&'a str]) -> Request<'a> {
        Request {
            method: Method::GET,
            path,
            query: Vec::new(),
            body: None,
            timeout: REQUEST_TIMEOUT,
            idempotent: true,
        }
    }

    pub(crate) fn post(
        path: &'a [&'a str],
        body: &impl serde::Serialize,
    ) -> Result<Request<'a>, CliError> {
        let body = serde_json::to_vec(body).map_err(|err| {
            CliError::Usage(format!(
                "POST /{}: cannot encode the request: {err}",
                path.join("/")
            ))
        })?;
        Ok(Request {
            method: Method::POST,
            path,
            query: Vec::new(),
            body: Some(body),
            timeout: REQUEST_TIMEOUT,
            idempotent: false,
        })
    }

    pub(crate) fn query(mut self, key: &'a str, value: &impl std::fmt::Display) -> Request<'a> {
        self.query.push((key, value.to_string()));
        self
    }

    pub(crate) fn timeout(mut self, timeout: Duration) -> Request<'a> {
        self.timeout = timeout;
        self
    }

    pub(crate) fn idempotent(mut self) -> Request<'a> {
        self.idempotent = true;
        self
    }
}

impl Broker {
    /// A client of `target`'s broker.
    pub(crate) fn new(target: &Target) -> Result<Broker, CliError> {
        let base = Url::parse(&target.server)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "invalid server URL {:?}: expected http://HOST:PORT or https://HOST:PORT",
                    target.server
                ))
            })?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .danger_accept_invalid_certs(target.insecure)
            .user_agent(concat!("queen-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| CliError::Usage(format!("cannot set up the HTTP client: {err}")))?;
        let mut shown = base.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        Ok(Broker {
            http,
            base,
            shown: shown.as_str().trim_end_matches('/').to_owned(),
            token: target.token.clone(),
        })
    }

    fn url(&self, request: &Request<'_>) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(request.path);
        }
        if !request.query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(request.query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// Send `request`; a 2xx is `Ok` (see the module doc for the rest).
    pub(crate) async fn send(&self, request: Request<'_>) -> Result<Reply, CliError> {
        let url = self.url(&request);
        let what = format!("{} /{}", request.method, request.path.join("/"));
        let mut attempt = 0;
        loop {
            let mut builder = self
                .http
                .request(request.method.clone(), url.clone())
                .timeout(request.timeout)
                .header(reqwest::header::ACCEPT, "application/json");
            if let Some(token) = &self.token {
                builder = builder.bearer_auth(token);
            }
            if let Some(body) = &request.body {
                builder = builder
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            let response = builder
                .send()
                .await
                .map_err(|source| CliError::Unreachable {
                    url: self.shown.clone(),
                    source: source.without_url(),
                })?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let bytes = response
                .bytes()
                .await
                .map_err(|source| CliError::Unreachable {
                    url: self.shown.clone(),
                    source: source.without_url(),
                })?;
            if status == StatusCode::SERVICE_UNAVAILABLE && request.idempotent && attempt < RETRIES
            {
                attempt += 1;
                let wait = retry_after
                    .unwrap_or(Duration::from_secs(u64::from(attempt)))
                    .min(MAX_RETRY_AFTER);
                tokio::time::sleep(wait).await;
                continue;
            }
            return judge(what, status, bytes);
        }
    }

    /// GET `path` and read the body as `T`.
    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &[&str]) -> Result<T, CliError> {
        self.send(Request::get(path)).await?.json()
    }
}

/// A reply, or the error its status or body says.
fn judge(what: String, status: StatusCode, body: bytes::Bytes) -> Result<Reply, CliError> {
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let message = || {
        parsed
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&body);
                let text = text.trim();
                if text.is_empty() {
                    status.canonical_reason().unwrap_or("no reason").to_owned()
                } else {
                    text.chars().take(200).collect()
                }
            })
    };
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(CliError::Auth {
            what,
            status: status.as_u16(),
            message: message(),
        });
    }
    if !status.is_success() {
        return Err(CliError::Broker {
            what,
            status: status.as_u16(),
            message: message(),
        });
    }
    // Some routes signal failure in the body with a 200 (wire-api.md §0.4).
    let refused = parsed.as_ref().is_some_and(|v| {
        v.get("success") == Some(&Value::Bool(false))
            && v.get("error").is_some_and(|e| !e.is_null())
    });
    if refused {
        return Err(CliError::Refused {
            what,
            message: message(),
        });
    }
    Ok(Reply { body, what })
}
