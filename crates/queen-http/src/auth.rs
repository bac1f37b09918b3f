//! JWT authentication and the access levels of the route table
//! (wire-api.md §0.5, §1).
//!
//! With auth on (`JWT_ENABLED`), a route whose level is above public needs
//! `Authorization: Bearer <jwt>` (the prefix in any case, or a bare token),
//! verified with `jsonwebtoken`: HS256 with `JWT_SECRET`, RS256 or EdDSA
//! with the PEM in `JWT_PUBLIC_KEY` or the key of the JWKS document at
//! `JWT_JWKS_URL` (`jwks.rs`) that the token's `kid` names, or `auto`
//! (whichever of those the token's header names and the broker holds a key
//! for). A token with a `kid` is verified with the JWKS key of that id; one
//! without, or with an id the JWKS lacks, with `JWT_PUBLIC_KEY` when it is
//! set. `exp` and `nbf`
//! are checked with `JWT_CLOCK_SKEW` of leeway (30 s); `iss` and `aud` when
//! configured. The token's roles (the `role` claim, a string, or the `roles`
//! claim, an array; names configurable) give its level, the highest of
//! them: admin ⊇ read-write ⊇ read-only.
//!
//! Answers, worded as the contract words them: no token 401 `Authentication
//! required`; a bad one 401 (`Token has expired`, `Invalid token
//! signature`, ...); a level below the route's 403 `Insufficient
//! permissions`; a key id neither cached nor fetchable (the JWKS server is
//! down) 500 `JWKS fetch failed`. `JWT_SKIP_PATHS` lists paths served
//! without a token (exact, or a prefix for an entry ending in `/`, `/`
//! itself being exact), matched against the path as the router reads it.
//! A token whose `sub` is over 1 KiB or holds a NUL is refused (401
//! `Invalid token subject`).
//!
//! A verified token also says who the request acts for ([`Caller`]): its
//! tenant claim (`JWT_TENANT_CLAIM`, default `tenant`; absent: tenant
//! `default`) scopes every queue name and id the request uses, and its
//! `sub` is stamped into what it pushes. Without auth every request is
//! tenant `default` with no `sub`.
//!
//! Nothing here logs a token or a claim.

use std::sync::Arc;
use std::time::Duration;

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use queen_engine::naming::{default_tenant, name_problem};

use crate::error::HttpError;
use crate::jwks::{JwkKey, Jwks, JwksConfig, JwksError};
use crate::routes::Access;

/// Which algorithms tokens may use (`JWT_ALGORITHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    /// HS256, RS256 or EdDSA, by the token's header, among the keys held.
    Auto,
    /// HMAC-SHA256 with `JWT_SECRET`.
    Hs256,
    /// RSA with `JWT_PUBLIC_KEY` or `JWT_JWKS_URL`.
    Rs256,
    /// Ed25519 with `JWT_PUBLIC_KEY` or `JWT_JWKS_URL`.
    EdDsa,
}

impl std::str::FromStr for JwtAlgorithm {
    type Err = String;

    fn from_str(text: &str) -> Result<JwtAlgorithm, String> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(JwtAlgorithm::Auto),
            "hs256" => Ok(JwtAlgorithm::Hs256),
            "rs256" => Ok(JwtAlgorithm::Rs256),
            "eddsa" => Ok(JwtAlgorithm::EdDsa),
            other => Err(format!(
                "JWT_ALGORITHM must be auto, HS256, RS256 or EdDSA, not {other}"
            )),
        }
    }
}

/// The auth settings.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `JWT_ALGORITHM`.
    pub algorithm: JwtAlgorithm,
    /// `JWT_SECRET` (HS256).
    pub secret: Option<String>,
    /// `JWT_PUBLIC_KEY`, PEM (RS256 or EdDSA).
    pub public_key: Option<String>,
    /// `JWT_JWKS_URL` and its bounds (RS256 or EdDSA keys by `kid`).
    pub jwks: Option<JwksConfig>,
    /// `JWT_ISSUER`: tokens must carry this `iss`.
    pub issuer: Option<String>,
    /// `JWT_AUDIENCE`: tokens must carry this `aud`.
    pub audience: Option<String>,
    /// `JWT_CLOCK_SKEW`.
    pub clock_skew: Duration,
    /// `JWT_SKIP_PATHS`.
    pub skip_paths: Vec<String>,
    /// `JWT_ROLES_CLAIM`: a string claim naming one role.
    pub role_claim: String,
    /// `JWT_ROLES_ARRAY_CLAIM`: an array claim of roles.
    pub roles_claim: String,
    /// `JWT_ROLE_ADMIN`, `JWT_ROLE_READ_WRITE`, `JWT_ROLE_READ_ONLY`.
    pub role_names: [String; 3],
    /// The claim naming the token's tenant (`JWT_TENANT_CLAIM`, default
    /// `tenant`); a token without it acts for tenant `default`.
    pub tenant_claim: String,
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            algorithm: JwtAlgorithm::Auto,
            secret: None,
            public_key: None,
            jwks: None,
            issuer: None,
            audience: None,
            clock_skew: Duration::from_secs(30),
            skip_paths: crate::routes::public_paths(),
            role_claim: "role".to_owned(),
            roles_claim: "roles".to_owned(),
            role_names: ["admin", "read-write", "read-only"].map(str::to_owned),
            tenant_claim: "tenant".to_owned(),
        }
    }
}

/// The longest `sub` stamped into a message (frame flag 2 holds a
/// `u16`-prefixed string; this is far below it).
const MAX_SUB_BYTES: usize = 1024;

/// Who a request acts for: the tenant owning every name it uses, and the
/// token's `sub` that a push stamps into its messages.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The tenant (`default` without auth, or without the tenant claim).
    pub(crate) tenant: Arc<str>,
    /// The token's `sub`, when auth is on and the token has one.
    pub(crate) sub: Option<Arc<str>>,
}

impl Caller {
    /// A request without a verified token: tenant `default`, no `sub`.
    pub(crate) fn anonymous() -> Caller {
        Caller {
            tenant: default_tenant(),
            sub: None,
        }
    }

    /// Make `items` this caller's: its tenant, and its `sub` as their
    /// producer (whatever the body said: a `producerSub` there is never
    /// read, and without auth there is none).
    pub(crate) fn stamp(&self, items: &mut [queen_engine::PushItem]) {
        for item in items {
            item.tenant = Arc::clone(&self.tenant);
            item.producer_sub = self.sub.as_deref().map(str::to_owned);
        }
    }
}

/// Verified tokens' keys and rules.
pub struct Auth {
    keys: Vec<(Algorithm, DecodingKey)>,
    /// The JWKS document's keys, when `JWT_JWKS_URL` is set.
    jwks: Option<Arc<Jwks>>,
    config: AuthConfig,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field(
                "algorithms",
                &self.keys.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            )
            .field("jwks", &self.jwks.is_some())
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// The verifier `config` describes; an error names what is missing or
    /// malformed (never a key's content).
    pub fn new(config: AuthConfig) -> Result<Auth, String> {
        let mut keys = Vec::new();
        let wants = |algorithm: JwtAlgorithm| {
            config.algorithm == algorithm || config.algorithm == JwtAlgorithm::Auto
        };
        if wants(JwtAlgorithm::Hs256) {
            if let Some(secret) = &config.secret {
                keys.push((
                    Algorithm::HS256,
                    DecodingKey::from_secret(secret.as_bytes()),
                ));
            } else if config.algorithm == JwtAlgorithm::Hs256 {
                return Err("JWT_ALGORITHM HS256 needs JWT_SECRET".to_owned());
            }
        }
        if let Some(pem) = &config.public_key {
            let pem = pem.replace("\\n", "\n");
            if wants(JwtAlgorithm::Rs256) {
                match DecodingKey::from_rsa_pem(pem.as_bytes()) {
                    Ok(key) => keys.push((Algorithm::RS256, key)),
                    Err(_) if config.algorithm == JwtAlgorithm::Auto => {}
                    Err(_) => {
                        return Err("JWT_PUBLIC_KEY is not an RSA public key in PEM".to_owned())
                    }
                }
            }
            if wants(JwtAlgorithm::EdDsa) {
                match DecodingKey::from_ed_pem(pem.as_bytes()) {
                    Ok(key) => keys.push((Algorithm::EdDSA, key)),
                    Err(_) if config.algorithm == JwtAlgorithm::Auto => {}
                    Err(_) => {
                        return Err("JWT_PUBLIC_KEY is not an Ed25519 public key in PEM".to_owned())
                    }
                }
            }
            if keys.iter().all(|(a, _)| *a == Algorithm::HS256) {
                return Err(
                    "JWT_PUBLIC_KEY is neither an RSA nor an Ed25519 public key in PEM".to_owned(),
                );
            }
        } else if matches!(config.algorithm, JwtAlgorithm::Rs256 | JwtAlgorithm::EdDsa)
            && config.jwks.is_none()
        {
            return Err(
                "JWT_ALGORITHM RS256 and EdDSA need JWT_PUBLIC_KEY or JWT_JWKS_URL".to_owned(),
            );
        }
        if config.jwks.is_some() && config.algorithm == JwtAlgorithm::Hs256 {
            return Err(
                "JWT_JWKS_URL holds RS256 and EdDSA keys, which JWT_ALGORITHM HS256 refuses"
                    .to_owned(),
            );
        }
        let jwks_algorithms = [
            (JwtAlgorithm::Rs256, Algorithm::RS256),
            (JwtAlgorithm::EdDsa, Algorithm::EdDSA),
        ]
        .into_iter()
        .filter(|(ours, _)| wants(*ours))
        .map(|(_, algorithm)| algorithm)
        .collect();
        let jwks = config
            .jwks
            .as_ref()
            .map(|jwks_config| Jwks::new(jwks_config, jwks_algorithms).map(Arc::new))
            .transpose()?;
        if keys.is_empty() && jwks.is_none() {
            return Err("JWT_ENABLED needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL".to_owned());
        }
        Ok(Auth { keys, jwks, config })
    }

    /// Fetch the JWKS document once, if there is one, so the first tokens
    /// do not wait for it. A failure is logged, not returned: the broker
    /// serves without it and fetches again when a token needs a key.
    pub async fn warm(&self) {
        if let Some(jwks) = &self.jwks {
            jwks.warm().await;
        }
    }

    /// Whether `path` (as the router reads it: `query::normalised`) is
    /// served without a token.
    fn skipped(&self, path: &str) -> bool {
        self.config.skip_paths.iter().any(|entry| {
            if entry != "/" && entry.ends_with('/') {
                path.starts_with(entry.as_str())
            } else {
                path == entry
            }
        })
    }

    /// Let a request of `path` (normalised: decoded segments, empty ones
    /// dropped, so a prefix entry `/X/` does not cover the route `/X`
    /// spelled `/X/`) with `headers` reach a route of level
    /// `access`, or answer why not; answers who it acts for.
    pub(crate) async fn authorize(
        &self,
        headers: &HeaderMap,
        path: &str,
        access: Access,
    ) -> Result<Caller, HttpError> {
        if access == Access::Public || self.skipped(path) {
            return Ok(Caller::anonymous());
        }
        let token = bearer(headers)
            .ok_or_else(|| HttpError::Unauthorized("Authentication required".to_owned()))?;
        let claims = self.verify(token).await?;
        if self.level(&claims).is_none_or(|level| level < access) {
            return Err(HttpError::Forbidden("Insufficient permissions".to_owned()));
        }
        self.caller(&claims)
    }

    /// Who a request to a public route is, when it carries a token: `None`
    /// without one, else the verified token's caller and level (`None`
    /// for a token without a known role). A bad token is refused as on
    /// any route. What `/metrics` shows depends on it.
    pub(crate) async fn identify(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<(Caller, Option<Access>)>, HttpError> {
        let Some(token) = bearer(headers) else {
            return Ok(None);
        };
        let claims = self.verify(token).await?;
        Ok(Some((self.caller(&claims)?, self.level(&claims))))
    }

    /// The tenant and producer identity of verified `claims`.
    fn caller(&self, claims: &serde_json::Value) -> Result<Caller, HttpError> {
        let tenant = match claims.get(&self.config.tenant_claim) {
            None | Some(serde_json::Value::Null) => default_tenant(),
            Some(serde_json::Value::String(tenant)) if name_problem(tenant).is_none() => {
                Arc::from(tenant.as_str())
            }
            Some(_) => return Err(HttpError::Unauthorized("Invalid token tenant".to_owned())),
        };
        let sub = match claims.get("sub") {
            None | Some(serde_json::Value::Null) => None,
            // A NUL could not be filed in a dead letter's text column.
            Some(serde_json::Value::String(sub))
                if sub.len() <= MAX_SUB_BYTES && crate::wire::text("sub", sub).is_ok() =>
            {
                Some(Arc::from(sub.as_str()))
            }
            Some(_) => return Err(HttpError::Unauthorized("Invalid token subject".to_owned())),
        };
        Ok(Caller { tenant, sub })
    }

    /// The claims of a token signed by one of the keys.
    async fn verify(&self, token: &str) -> Result<serde_json::Value, HttpError> {
        let invalid = |message: &str| HttpError::Unauthorized(message.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("Invalid token"))?;
        let (key, jwks_down) = self.key_for(&header).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.config.clock_skew.as_secs();
        validation.validate_nbf = true;
        validation.required_spec_claims.clear();
        validation.required_spec_claims.insert("exp".to_owned());
        match &self.config.issuer {
            Some(issuer) => validation.set_issuer(&[issuer]),
            None => validation.iss = None,
        }
        match &self.config.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        jsonwebtoken::decode::<serde_json::Value>(token, key.decoding_key(), &validation)
            .map(|data| data.claims)
            .map_err(|error| {
                if jwks_down && *error.kind() == ErrorKind::InvalidSignature {
                    // Signed by a key the JWKS may hold: not the token's fault.
                    return HttpError::JwksUnavailable;
                }
                invalid(match error.kind() {
                    ErrorKind::ExpiredSignature => "Token has expired",
                    ErrorKind::ImmatureSignature => "Token is not valid yet",
                    ErrorKind::InvalidSignature => "Invalid token signature",
                    ErrorKind::InvalidIssuer => "Invalid token issuer",
                    ErrorKind::InvalidAudience => "Invalid token audience",
                    ErrorKind::MissingRequiredClaim(_) => "Token has no expiry",
                    _ => "Invalid token",
                })
            })
    }

    /// The key a token with `header` is verified with, and whether the JWKS
    /// could not be asked for it (the key is then `JWT_PUBLIC_KEY`).
    async fn key_for(&self, header: &jsonwebtoken::Header) -> Result<(Key<'_>, bool), HttpError> {
        let invalid = |message: &str| HttpError::Unauthorized(message.to_owned());
        let fixed = self
            .keys
            .iter()
            .find(|(algorithm, _)| *algorithm == header.alg)
            .map(|(_, key)| Key::Fixed(key));
        let Some(jwks) = self.jwks.as_ref().filter(|jwks| jwks.serves(header.alg)) else {
            return fixed
                .map(|key| (key, false))
                .ok_or_else(|| invalid("Invalid token algorithm"));
        };
        let Some(kid) = &header.kid else {
            return fixed
                .map(|key| (key, false))
                .ok_or_else(|| invalid("Token has no key id"));
        };
        match (jwks.key(kid, header.alg).await, fixed) {
            (Ok(key), _) => Ok((Key::Fetched(key), false)),
            (Err(JwksError::WrongAlgorithm), _) => Err(invalid("Invalid token algorithm")),
            (Err(JwksError::UnknownKey), Some(fixed)) => Ok((fixed, false)),
            (Err(JwksError::UnknownKey), None) => Err(invalid("Invalid token key id")),
            (Err(JwksError::Unavailable), Some(fixed)) => Ok((fixed, true)),
            (Err(JwksError::Unavailable), None) => Err(HttpError::JwksUnavailable),
        }
    }

    /// The highest level the token's roles grant.
    fn level(&self, claims: &serde_json::Value) -> Option<Access> {
        let [admin, read_write, read_only] = &self.config.role_names;
        let of = |role: &str| {
            if role == admin {
                Some(Access::Admin)
            } else if role == read_write {
                Some(Access::ReadWrite)
            } else if role == read_only {
                Some(Access::ReadOnly)
            } else {
                None
            }
        };
        let single = claims
            .get(&self.config.role_claim)
            .and_then(serde_json::Value::as_str)
            .and_then(of);
        let many = claims
            .get(&self.config.roles_claim)
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .filter_map(of)
            .max();
        single.max(many)
    }
}

/// A verification key: configured, or from the JWKS document.
enum Key<'a> {
    Fixed(&'a DecodingKey),
    Fetched(Arc<JwkKey>),
}

impl Key<'_> {
    fn decoding_key(&self) -> &DecodingKey {
        match self {
            Key::Fixed(key) => key,
            Key::Fetched(fetched) => &fetched.key,
        }
    }
}

/// The token of `Authorization: Bearer <token>` (any case) or a bare token.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let token = match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        Some(_) => return None,
        None => value,
    };
    (!token.is_empty()).then_some(token)
}
