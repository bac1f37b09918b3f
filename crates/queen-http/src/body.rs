//! Reading request bodies: a hard size limit (413 past it) and JSON parsing
//! with the contract's error messages.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::HttpError;

/// The largest request body accepted (wire-api.md §0.1: at least 64 MB).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Read the whole body, refusing more than `limit` bytes.
/// A declared `Content-Length` over the limit is refused before reading.
pub(crate) async fn read(
    headers: &hyper::HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, HttpError> {
    let declared = headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(HttpError::BodyTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(HttpError::BodyTooLarge { limit })
        }
        Err(_) => Err(HttpError::BodyRead),
    }
}

/// Parse a JSON body. An empty (or all-whitespace) body is `EmptyBody`.
pub(crate) fn json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, HttpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(HttpError::EmptyBody);
    }
    serde_json::from_slice(bytes).map_err(|error| HttpError::InvalidJson(error.to_string()))
}
