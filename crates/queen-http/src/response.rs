//! Building responses: JSON bodies with the CORS headers every route carries.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS};
use hyper::header::{ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, CONTENT_TYPE};
use hyper::StatusCode;

/// The response type of every handler.
pub(crate) type Response = hyper::Response<Full<Bytes>>;

/// A JSON response with `status`.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    // Serialising a `Value` cannot fail: its keys are strings.
    raw_json(status, serde_json::to_vec(value).unwrap_or_default())
}

/// A response whose JSON body was already serialised.
pub(crate) fn raw_json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut res = hyper::Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    add_cors(&mut res);
    res
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    json(status, &serde_json::json!({ "error": message }))
}

/// A response with no body at all (not even `Content-Length`), for 204s.
pub(crate) fn empty(status: StatusCode) -> Response {
    let mut res = hyper::Response::new(Full::new(Bytes::new()));
    *res.status_mut() = status;
    add_cors(&mut res);
    res
}

/// The CORS headers of wire-api.md §0.2.
pub(crate) fn add_cors(res: &mut Response) {
    let headers = res.headers_mut();
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type, Authorization"),
    );
    headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
}

/// A body of `content_type` with `status`, and a `Cache-Control` when given.
pub(crate) fn bytes(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
    cache_control: Option<&'static str>,
) -> Response {
    let mut res = hyper::Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(cache_control) = cache_control {
        res.headers_mut().insert(
            hyper::header::CACHE_CONTROL,
            HeaderValue::from_static(cache_control),
        );
    }
    add_cors(&mut res);
    res
}
