//! Cross-crate integration tests: the broker over real HTTP and PostgreSQL.

mod support;

mod ack;
mod admin;
mod auth;
mod configure;
mod dlq;
mod figures;
mod fuzz_corpus;
mod health;
mod jwks;
mod lifecycle;
mod limits;
mod maintenance;
mod malformed;
mod mesh;
mod message_delete;
mod migration;
mod names;
mod on_citus;
mod partition_ids;
mod pop;
mod pop_early;
mod pop_mechanics;
mod push;
mod queue_options;
mod replica;
mod retention;
mod spool;
mod stats;
mod streams;
mod tenants;
mod txn;
mod upgrade;
mod webapp;
mod wide_queues;
