//! One module per endpoint.

pub(crate) mod health;
