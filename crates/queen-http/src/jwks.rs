//! The keys of a JWKS document (`JWT_JWKS_URL`), fetched over HTTP or HTTPS
//! and cached by key id (`kid`).
//!
//! Lookups read the cache; the document is fetched again:
//! - in the background, when a cached key is asked for and the cache is
//!   older than `JWT_JWKS_CACHE_TTL_SECS` (the request does not wait);
//! - in the request, when a token names a `kid` the cache lacks (a rotated
//!   key), unless a fetch started less than `JWT_JWKS_REFRESH_MIN_SECS` ago:
//!   a flood of tokens with made-up key ids fetches at most once per window.
//!
//! One fetch runs at a time; verifiers that need its result wait for it and
//! then read what it stored (single flight). A fetch is bounded in time
//! (`JWT_JWKS_TIMEOUT_MS`, connect to last byte) and in size
//! ([`MAX_DOCUMENT_BYTES`]), and at most [`MAX_KEYS`] keys are kept, so what
//! a JWKS server or a client sends cannot grow the broker's memory.
//! A failed fetch keeps the keys already cached (a stale key beats an
//! outage); a key id the cache lacks then answers [`JwksError::Unavailable`].
//!
//! Failures are logged at warn with the URL (without its user, password and
//! query) and the error; never a token or a key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::RwLock;
use serde_json::value::RawValue;
use tokio::time::Instant;

/// The largest JWKS document accepted, in bytes: larger ones fail the fetch.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// The most keys kept from one document; the rest are ignored (and logged).
/// Real issuers publish a handful; the cap bounds what a document can cost.
pub const MAX_KEYS: usize = 100;

/// Where the JWKS document is and how it is fetched.
#[derive(Debug, Clone)]
pub struct JwksConfig {
    /// `JWT_JWKS_URL`: an `http` or `https` URL.
    pub url: String,
    /// `JWT_JWKS_TIMEOUT_MS`: the most one fetch may take, connect to last byte.
    pub timeout: Duration,
    /// `JWT_JWKS_CACHE_TTL_SECS`: how long fetched keys are used before the
    /// document is fetched again.
    pub cache_ttl: Duration,
    /// `JWT_JWKS_REFRESH_MIN_SECS`: the least time between the start of one
    /// fetch and the next.
    pub refresh_min: Duration,
}

impl JwksConfig {
    /// The document at `url`, with the default bounds (5 s, an hour, 30 s).
    pub fn new(url: impl Into<String>) -> JwksConfig {
        JwksConfig {
            url: url.into(),
            timeout: Duration::from_millis(5000),
            cache_ttl: Duration::from_secs(3600),
            refresh_min: Duration::from_secs(30),
        }
    }
}

/// Why no key was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JwksError {
    /// The document, as recently fetched as the rate limit allows, has no
    /// usable key of this id.
    UnknownKey,
    /// The key of this id is not for the token's algorithm.
    WrongAlgorithm,
    /// The key id is not cached and the last fetch failed.
    Unavailable,
}

/// A verification key of the document.
pub(crate) struct JwkKey {
    /// RS256 for an RSA key, EdDSA for an Ed25519 one.
    pub(crate) algorithm: Algorithm,
    pub(crate) key: DecodingKey,
}

/// The JWKS client and its cache.
pub(crate) struct Jwks {
    url: reqwest::Url,
    /// The URL as logged: no user, password or query.
    shown_url: String,
    client: reqwest::Client,
    timeout: Duration,
    cache_ttl: Duration,
    refresh_min: Duration,
    /// Which algorithms' keys are kept (`JWT_ALGORITHM`).
    algorithms: Vec<Algorithm>,
    /// The keys and the fetch history. Held only to copy an `Arc` out or to
    /// store a fetch's result, never across an await.
    cache: RwLock<Cache>,
    /// Held for the whole of one fetch, so one runs at a time; verifiers
    /// that need a fetch wait here and then read what it stored.
    fetching: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<String, Arc<JwkKey>>,
    /// When the last successful fetch started.
    fetched: Option<Instant>,
    /// When the last fetch started, whatever its outcome.
    attempted: Option<Instant>,
    /// Whether the last fetch failed.
    failed: bool,
    /// Fetches finished so far: a waiter that sees it move knows a fetch ran
    /// while it waited.
    n_fetches: u64,
}

/// Why a fetch failed. The messages name no key material.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Request(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("document larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    #[error("not a JWKS document: {0}")]
    Malformed(serde_json::Error),
    #[error("no usable RS256 or EdDSA key with a kid")]
    NoUsableKey,
}

impl Jwks {
    /// The client of `config`'s document, keeping keys of `algorithms`; an
    /// error names `JWT_JWKS_URL` and what is wrong with it.
    pub(crate) fn new(config: &JwksConfig, algorithms: Vec<Algorithm>) -> Result<Jwks, String> {
        let url = reqwest::Url::parse(&config.url)
            .map_err(|error| format!("JWT_JWKS_URL is not a valid URL: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err("JWT_JWKS_URL must be an http or https URL with a host".to_owned());
        }
        let mut shown = url.clone();
        // Neither fails on a URL with a host, which was just checked.
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        shown.set_query(None);
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|error| format!("JWT_JWKS_URL: cannot make an HTTP client: {error}"))?;
        Ok(Jwks {
            url,
            shown_url: shown.to_string(),
            client,
            timeout: config.timeout,
            cache_ttl: config.cache_ttl,
            refresh_min: config.refresh_min,
            algorithms,
            cache: RwLock::new(Cache::default()),
            fetching: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// Whether tokens of `algorithm` are verified with this document's keys.
    pub(crate) fn serves(&self, algorithm: Algorithm) -> bool {
        self.algorithms.contains(&algorithm)
    }

    /// Fetch the document once (at boot); a failure is logged, not returned.
    pub(crate) async fn warm(&self) {
        let seen = self.cache.read().n_fetches;
        self.refresh(seen).await;
    }

    /// The key `kid` names, for a token of `algorithm`.
    pub(crate) async fn key(
        self: &Arc<Self>,
        kid: &str,
        algorithm: Algorithm,
    ) -> Result<Arc<JwkKey>, JwksError> {
        let now = Instant::now();
        let (cached, expired, seen) = {
            let cache = self.cache.read();
            let expired = cache
                .fetched
                .is_none_or(|fetched| now.duration_since(fetched) >= self.cache_ttl);
            (cache.keys.get(kid).cloned(), expired, cache.n_fetches)
        };
        if let Some(key) = cached {
            if expired {
                self.refresh_in_background(now);
            }
            return of_algorithm(key, algorithm);
        }
        self.refresh(seen).await;
        let cache = self.cache.read();
        match cache.keys.get(kid) {
            Some(key) => of_algorithm(Arc::clone(key), algorithm),
            // The key may have been added after the document we hold.
            None if cache.failed => Err(JwksError::Unavailable),
            None => Err(JwksError::UnknownKey),
        }
    }

    /// Fetch unless one runs now or the rate limit forbids it; do not wait.
    fn refresh_in_background(self: &Arc<Self>, now: Instant) {
        if self.rate_limited(now) {
            return;
        }
        let Ok(guard) = Arc::clone(&self.fetching).try_lock_owned() else {
            return;
        };
        let jwks = Arc::clone(self);
        tokio::spawn(async move {
            if !jwks.rate_limited(Instant::now()) {
                jwks.fetch().await;
            }
            drop(guard);
        });
    }

    /// Fetch, unless a fetch finished since the caller saw `seen` fetches
    /// or the last one started within the rate limit: either way the cache
    /// is as fresh as it may be when this returns.
    async fn refresh(&self, seen: u64) {
        let _guard = self.fetching.lock().await;
        if self.cache.read().n_fetches != seen || self.rate_limited(Instant::now()) {
            return;
        }
        self.fetch().await;
    }

    /// Whether the last fetch started less than `refresh_min` before `now`.
    fn rate_limited(&self, now: Instant) -> bool {
        self.cache
            .read()
            .attempted
            .is_some_and(|attempted| now.duration_since(attempted) < self.refresh_min)
    }

    /// Fetch the document and store its keys, or log why not. The caller
    /// holds `fetching`.
    async fn fetch(&self) {
        let started = Instant::now();
        self.cache.write().attempted = Some(started);
        let outcome = match tokio::time::timeout(self.timeout, self.download()).await {
            Ok(Ok(body)) => parse(&body, &self.algorithms),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(FetchError::Timeout(self.timeout)),
        };
        let mut cache = self.cache.write();
        cache.n_fetches += 1;
        match outcome {
            Ok((keys, n_ignored)) => {
                let n_keys = keys.len();
                cache.keys = keys;
                cache.fetched = Some(started);
                cache.failed = false;
                drop(cache);
                if n_ignored > 0 {
                    tracing::warn!(
                        url = %self.shown_url,
                        n_keys,
                        n_ignored,
                        "JWKS document holds more than {MAX_KEYS} usable keys; the rest are ignored"
                    );
                }
                tracing::debug!(url = %self.shown_url, n_keys, "JWKS fetched");
            }
            Err(error) => {
                cache.failed = true;
                let n_cached = cache.keys.len();
                drop(cache);
                tracing::warn!(
                    url = %self.shown_url,
                    %error,
                    n_cached,
                    "JWKS fetch failed; cached keys stay in use"
                );
            }
        }
    }

    /// The document's bytes, at most [`MAX_DOCUMENT_BYTES`] of them.
    async fn download(&self) -> Result<Vec<u8>, FetchError> {
        let mut res = self
            .client
            .get(self.url.clone())
            .header(hyper::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(request_error)?;
        if !res.status().is_success() {
            return Err(FetchError::Status(res.status().as_u16()));
        }
        if res
            .content_length()
            .is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(FetchError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(request_error)? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// `key` if it is for `algorithm`.
fn of_algorithm(key: Arc<JwkKey>, algorithm: Algorithm) -> Result<Arc<JwkKey>, JwksError> {
    if key.algorithm == algorithm {
        Ok(key)
    } else {
        Err(JwksError::WrongAlgorithm)
    }
}

/// A request error with its causes ("connection refused"), without the URL.
fn request_error(error: reqwest::Error) -> FetchError {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    FetchError::Request(text)
}

/// The usable keys of a JWKS document by key id (the first of an id wins),
/// and how many usable keys past [`MAX_KEYS`] were ignored.
///
/// Keys are read one by one, so a key of a kind jsonwebtoken does not know
/// (another curve, an encryption key) is skipped instead of failing the
/// whole document, as `JwkSet` would. Usable: a `kid`, not `use: enc`, and
/// an RSA key (RS256) or an Ed25519 key (EdDSA) of `algorithms`, with an
/// `alg`, if any, that agrees.
fn parse(
    body: &[u8],
    algorithms: &[Algorithm],
) -> Result<(HashMap<String, Arc<JwkKey>>, usize), FetchError> {
    #[derive(serde::Deserialize)]
    struct Document<'a> {
        #[serde(borrow)]
        keys: Vec<&'a RawValue>,
    }
    let document: Document<'_> = serde_json::from_slice(body).map_err(FetchError::Malformed)?;
    let mut keys = HashMap::new();
    let mut n_ignored = 0;
    for raw in document.keys {
        let Ok(jwk) = serde_json::from_str::<Jwk>(raw.get()) else {
            continue;
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        if matches!(
            jwk.common.public_key_use,
            Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
        ) {
            continue;
        }
        let algorithm = match (&jwk.algorithm, &jwk.common.key_algorithm) {
            (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
            (AlgorithmParameters::OctetKeyPair(params), None | Some(KeyAlgorithm::EdDSA))
                if params.curve == EllipticCurve::Ed25519 =>
            {
                Algorithm::EdDSA
            }
            _ => continue,
        };
        if !algorithms.contains(&algorithm) || keys.contains_key(&kid) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        if keys.len() == MAX_KEYS {
            n_ignored += 1;
            continue;
        }
        keys.insert(kid, Arc::new(JwkKey { algorithm, key }));
    }
    if keys.is_empty() {
        return Err(FetchError::NoUsableKey);
    }
    Ok((keys, n_ignored))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &[Algorithm] = &[Algorithm::RS256, Algorithm::EdDSA];
    /// An Ed25519 public key (RFC 8037's example), base64url.
    const ED_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    fn ed(kid: &str) -> serde_json::Value {
        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": kid})
    }

    /// An RSA key as far as parsing goes (the components are only decoded).
    fn rsa(kid: &str) -> serde_json::Value {
        serde_json::json!({"kty": "RSA", "n": "sXchDaQe", "e": "AQAB", "kid": kid, "alg": "RS256"})
    }

    fn parsed(keys: &[serde_json::Value]) -> Result<(Vec<String>, usize), String> {
        let body = serde_json::to_vec(&serde_json::json!({ "keys": keys })).unwrap();
        parse(&body, BOTH)
            .map(|(keys, n_ignored)| {
                let mut kids: Vec<String> = keys.into_keys().collect();
                kids.sort();
                (kids, n_ignored)
            })
            .map_err(|error| error.to_string())
    }

    #[test]
    fn usable_keys_are_kept_by_kid_and_the_rest_skipped() {
        let keys = [
            rsa("r"),
            ed("e"),
            // An unknown kind fails `Jwk` alone, not the document.
            serde_json::json!({"kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA", "kid": "k1"}),
            serde_json::json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}),
            serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X}),
            {
                let mut key = ed("enc");
                key["use"] = "enc".into();
                key
            },
            {
                let mut key = rsa("ps");
                key["alg"] = "PS256".into();
                key
            },
            {
                let mut key = ed("r");
                key["x"] = "not base64!".into();
                key
            },
        ];
        assert_eq!(parsed(&keys), Ok((vec!["e".to_owned(), "r".to_owned()], 0)));
    }

    #[test]
    fn at_most_max_keys_are_kept() {
        let keys: Vec<_> = (0..MAX_KEYS + 7).map(|n| ed(&n.to_string())).collect();
        let (kids, n_ignored) = parsed(&keys).unwrap();
        assert_eq!((kids.len(), n_ignored), (MAX_KEYS, 7));
    }

    #[test]
    fn a_document_without_usable_keys_or_not_a_jwks_fails() {
        assert_eq!(
            parsed(&[]),
            Err("no usable RS256 or EdDSA key with a kid".to_owned())
        );
        assert!(parse(b"<html>", BOTH).is_err());
        assert!(parse(b"{\"keys\": {}}", BOTH).is_err());
        let only_ed = serde_json::to_vec(&serde_json::json!({"keys": [ed("e")]})).unwrap();
        assert!(parse(&only_ed, &[Algorithm::RS256]).is_err());
    }

    #[test]
    fn a_malformed_url_is_refused_naming_the_setting() {
        for url in ["not a url", "ftp://example.com/jwks", "file:///etc/jwks"] {
            let error = Jwks::new(&JwksConfig::new(url), BOTH.to_vec())
                .err()
                .unwrap();
            assert!(error.starts_with("JWT_JWKS_URL "), "{url}: {error}");
        }
    }
}
