//! Queen's HTTP API over hyper 1.x.
//!
//! - `routes`: the one route table, a single `match` on method and path segments.
//! - `handlers`: one module per endpoint: parse the request, call the engine,
//!   encode the reply (mini-redis's parse / apply / encode).
//! - `error`: the only place an error becomes a status code.
//! - `server`: the accept loop and graceful connection shutdown.
//! - `wire`: what every handler shares about the wire (the one name rule).
//! - `auth`, `jwks`: JWT verification and the JWKS document's cached keys.
//!
//! **Invariant:** this crate never sees `tokio_postgres` types; it talks to
//! `queen_engine::Engine` only.

// A panic on input is a bug: no unwrap or expect outside tests (clippy.toml
// allows them in tests).
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod body;
mod context;
mod error;
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;
mod handlers;
mod json;
mod jwks;
mod metrics;
mod query;
mod response;
mod routes;
mod server;
mod static_files;
mod wire;

pub use auth::{Auth, AuthConfig, JwtAlgorithm};
pub use error::HttpError;
pub use jwks::{JwksConfig, MAX_DOCUMENT_BYTES as MAX_JWKS_BYTES, MAX_KEYS as MAX_JWKS_KEYS};
pub use routes::{public_paths, Access};

/// The route table as (method, pattern, access level, tenant-scoped), in
/// match order: for tests that walk every route.
#[doc(hidden)]
pub fn route_table() -> Vec<(&'static str, &'static str, Access, bool)> {
    routes::table()
}
pub use context::WireDefaults;
pub use server::{serve, ServeOptions};
pub use static_files::{Webapp, MAX_FILE_BYTES};

/// The 200 body of a pop, exactly as the broker sends it (public for the
/// rendering bench and for embedders that serve pops themselves).
pub fn render_pop_response(popped: &queen_engine::Popped, group: &str) -> Vec<u8> {
    handlers::pop::render(popped, group)
}
