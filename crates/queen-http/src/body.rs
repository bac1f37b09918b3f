//! Reading request bodies: a hard size limit (413 past it), a shared budget
//! of body bytes in flight (503 with `Retry-After` past it), a time limit
//! for the whole body (408 past it, so a client that dribbles a body cannot
//! hold its buffer forever), and JSON parsing with the contract's error
//! messages.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::HttpError;

/// The largest request body accepted (wire-api.md §0.1: at least 64 MB).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What every connection's body reads share (from `ServeOptions`); the
/// server puts it in each request's extensions.
#[derive(Debug)]
pub(crate) struct BodyLimits {
    /// Body bytes buffered by requests in progress, across all connections.
    in_flight: Arc<Semaphore>,
    /// How long a whole body may take to arrive.
    timeout: Duration,
}

impl BodyLimits {
    /// A budget of `in_flight_bytes`, raised to at least one body of
    /// [`MAX_BODY_BYTES`]: a smaller one would answer "busy, retry" to a
    /// body that could never fit.
    pub(crate) fn new(in_flight_bytes: usize, timeout: Duration) -> BodyLimits {
        let bytes = in_flight_bytes.clamp(MAX_BODY_BYTES, Semaphore::MAX_PERMITS);
        BodyLimits {
            in_flight: Arc::new(Semaphore::new(bytes)),
            timeout,
        }
    }
}

/// A request body, read: its bytes, and its share of the in-flight budget,
/// held until the handler is done with it (dropped with it).
#[derive(Debug)]
pub(crate) struct ReadBody {
    bytes: Bytes,
    _held: Reservation,
}

impl Deref for ReadBody {
    type Target = Bytes;

    fn deref(&self) -> &Bytes {
        &self.bytes
    }
}

/// Bytes taken from the in-flight budget for one body.
#[derive(Debug, Default)]
struct Reservation {
    limits: Option<Arc<BodyLimits>>,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// Take `n` more bytes of the budget, or answer busy.
    fn take(&mut self, n: usize) -> Result<(), HttpError> {
        let Some(limits) = &self.limits else {
            return Ok(());
        };
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| HttpError::BodyTooLarge {
            limit: MAX_BODY_BYTES,
        })?;
        let permit = Arc::clone(&limits.in_flight)
            .try_acquire_many_owned(n)
            .map_err(|_| HttpError::Busy {
                what: "too many request bytes in flight",
            })?;
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        Ok(())
    }
}

/// Read the whole body of the request `parts` belong to, refusing more than
/// [`MAX_BODY_BYTES`]. A declared `Content-Length` over the limit is refused
/// before reading, and one the budget cannot hold now is answered busy
/// before reading; a body without one takes its budget as it arrives.
pub(crate) async fn read(
    parts: &hyper::http::request::Parts,
    body: Incoming,
) -> Result<ReadBody, HttpError> {
    let limit = MAX_BODY_BYTES;
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(HttpError::BodyTooLarge { limit });
    }
    let limits = parts.extensions.get::<Arc<BodyLimits>>().cloned();
    let timeout = limits.as_ref().map(|limits| limits.timeout);
    let mut reservation = Reservation { limits, held: None };
    let reserved = declared.and_then(|len| usize::try_from(len).ok());
    if let Some(len) = reserved {
        reservation.take(len)?;
    }
    let collect = collect(body, limit, reserved.unwrap_or(0), &mut reservation);
    let bytes =
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, collect).await.map_err(|_| {
                HttpError::BodyTimeout {
                    seconds: timeout.as_secs_f64(),
                }
            })??,
            None => collect.await?,
        };
    // Every string of every body obeys the one text rule (no NUL), before
    // any handler reads it.
    crate::wire::body_text(&bytes)?;
    Ok(ReadBody {
        bytes,
        _held: reservation,
    })
}

/// The body's frames, joined (a one-frame body is not copied). Bytes past
/// `reserved` take budget as they arrive.
async fn collect(
    mut body: Incoming,
    limit: usize,
    reserved: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, HttpError> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| HttpError::BodyRead)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let before = total;
        total += data.len();
        if total > limit {
            return Err(HttpError::BodyTooLarge { limit });
        }
        reservation.take(total.saturating_sub(reserved.max(before)))?;
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut joined = BytesMut::with_capacity(total);
            for chunk in chunks {
                joined.extend_from_slice(&chunk);
            }
            joined.freeze()
        }
    })
}

/// Parse a JSON body. An empty (or all-whitespace) body is `EmptyBody`.
pub(crate) fn json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, HttpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(HttpError::EmptyBody);
    }
    serde_json::from_slice(bytes).map_err(|error| HttpError::InvalidJson(error.to_string()))
}

/// The body of `req`, read within the limits (see [`read`]).
pub(crate) async fn of(req: crate::context::Request) -> Result<ReadBody, HttpError> {
    let (parts, body) = req.into_parts();
    read(&parts, body).await
}

/// The body of `req` as JSON; an empty body is `EmptyBody`.
pub(crate) async fn value(req: crate::context::Request) -> Result<serde_json::Value, HttpError> {
    json(&of(req).await?)
}

/// The body of `req` as a JSON object; an empty body counts as `{}`.
pub(crate) async fn object(req: crate::context::Request) -> Result<serde_json::Value, HttpError> {
    let bytes = of(req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    let value: serde_json::Value = json(&bytes)?;
    if !value.is_object() {
        return Err(HttpError::Validation(
            "request body must be a JSON object".to_owned(),
        ));
    }
    Ok(value)
}
