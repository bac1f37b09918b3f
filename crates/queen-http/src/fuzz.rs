//! Entry points for the fuzz targets (`fuzz/`) and their corpus regression
//! test, built only with the `fuzz` feature: each feeds arbitrary bytes to
//! one parser of the HTTP layer, the way a request would reach it, and must
//! return (an error is fine) rather than panic. No I/O, no engine.

use bytes::Bytes;
use hyper::Method;
use serde_json::Value;

use crate::handlers::{ack, configure, push, transaction};
use crate::query::{self, Query};
use crate::routes;

/// `POST /api/v1/push`.
pub fn push_body(data: &[u8]) {
    let _ = push::parse(&Bytes::copy_from_slice(data));
}

/// `POST /api/v1/ack`.
pub fn ack_body(data: &[u8]) {
    if let Ok(body) = crate::body::json::<Value>(data) {
        let input = ack::AckInput::from_value(&body);
        let _ = ack::parse_single(&input);
    }
}

/// `POST /api/v1/ack/batch`.
pub fn ack_batch_body(data: &[u8]) {
    let mut careful = None;
    if let Ok((inputs, top_group)) = ack::parse_batch(data, &mut careful) {
        let _ = ack::batch_items(&inputs, top_group.as_ref());
    }
}

/// `POST /api/v1/transaction`.
pub fn transaction_body(data: &[u8]) {
    let _ = transaction::parse(&Bytes::copy_from_slice(data));
}

/// `POST /api/v1/configure`.
pub fn configure_body(data: &[u8]) {
    if let Ok(body) = crate::body::json::<Value>(data) {
        let _ = configure::Command::parse(&body);
    }
}

/// A request target (`path?query`): the query parser with every key a
/// handler reads, then the route table and the name rule, for every method.
pub fn path_and_query(data: &[u8]) {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let _ = query::check(query);
    let query = Query::parse(query);
    for key in [
        "batch",
        "partitions",
        "timeout",
        "wait",
        "autoAck",
        "consumerGroup",
        "subscriptionMode",
        "subscriptionFrom",
        "namespace",
        "task",
        "limit",
        "offset",
        "minLagSeconds",
        "deleteMetadata",
    ] {
        let _ = query.int(key, 0);
        let _ = query.bool(key, false);
        let _ = query.non_empty(key);
    }
    let Ok(decoded) = query::segments(path) else {
        return;
    };
    let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
    for method in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
        if let Some((route, params)) = routes::find(&method, &segments) {
            let _ = route.check_names(&params);
            let _ = route.check_text(&params);
        }
    }
}
