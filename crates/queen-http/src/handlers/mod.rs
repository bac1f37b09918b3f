//! One module per endpoint: parse the request into a typed command, call the
//! engine, encode the reply.

pub(crate) mod ack;
pub(crate) mod admin;
pub(crate) mod configure;
pub(crate) mod consumer_groups;
pub(crate) mod dlq;
pub(crate) mod health;
pub(crate) mod lease;
pub(crate) mod maintenance;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod migration;
pub(crate) mod pop;
pub(crate) mod push;
pub(crate) mod queues;
pub(crate) mod shared_state;
pub(crate) mod streams;
pub(crate) mod traces;
pub(crate) mod transaction;
