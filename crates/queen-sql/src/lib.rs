//! Queen's PostgreSQL layer.
//!
//! Everything that speaks SQL lives here and in `sql/` at the workspace root:
//!
//! - `registry`: the `.sql` files, embedded with `include_str!`, in apply order.
//! - `schema`: [`apply_schema`], run at every boot, idempotent, serialised by an
//!   advisory lock so two brokers booting at once are safe.
//!
//! Managed PostgreSQL (the server processes themselves) is `queen-pg`'s.
//! - `connect`: connection settings and the pool.
//! - `segments`: typed functions over segment rows (one per statement).
//! - `prepared`: [`Conn`], how the hot statements (push, pop, ack) are
//!   prepared once per pooled connection.
//!
//! Nothing above this crate builds SQL text.

pub mod ack;
pub mod admin;
pub mod connect;
pub mod dlq;
mod error;
pub mod figures;
pub mod lifecycle;
pub mod migration;
pub mod notify;
pub mod pop;
mod prepared;
pub mod push;
pub mod queues;
pub mod registry;
pub mod retention;
mod schema;
pub mod segments;
pub mod stats;
pub mod streams;
pub mod system;
pub mod traces;

pub use error::{error_chain, SqlError};
pub use prepared::Conn;
pub use schema::{apply_schema, citus_placement, CitusPlacement};
pub use tokio_postgres::GenericClient;
