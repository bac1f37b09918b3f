//! The broker's calls, typed: push (every item must be `queued`), pop (the
//! delivered messages, their payloads in the caller's type), batch ack (one
//! result per acknowledgement), and queue configuration. Every scenario
//! talks to the broker through these, over a [`Conn`].

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use hyper::StatusCode;
use serde::Deserialize;

use super::payload::{self, Bodies, TxnIds};
use super::{Conn, Reply};
use crate::error::{Context, Error, Result};

/// The push route.
const PUSH: &str = "/api/v1/push";

/// The batch ack route.
const ACK_BATCH: &str = "/api/v1/ack/batch";

/// Items per partition-creating request.
const CREATE_CHUNK: usize = 1000;

/// One entry of the push response; only the status is read.
#[derive(Deserialize)]
struct ItemResult<'a> {
    #[serde(borrow)]
    status: Cow<'a, str>,
}

/// 201, one result per item of the `items` pushed, every one `queued`.
pub(crate) fn check_push(reply: &Reply, items: usize) -> Result<()> {
    if reply.status != StatusCode::CREATED {
        return Err(Error::msg(format!(
            "push answered {}: {}",
            reply.status,
            reply.snippet()
        )));
    }
    let results: Vec<ItemResult<'_>> = serde_json::from_slice(&reply.body)
        .with_context(|| format!("push response is not a result array: {}", reply.snippet()))?;
    if results.len() != items {
        return Err(Error::msg(format!(
            "push answered {} results for {items} items",
            results.len()
        )));
    }
    if let Some((index, item)) = results
        .iter()
        .enumerate()
        .find(|(_, item)| item.status != "queued")
    {
        return Err(Error::msg(format!(
            "push item {index} is `{}`, not `queued`",
            item.status
        )));
    }
    Ok(())
}

/// The items a push reply says are `queued` (0 when its body is not a result
/// array).
pub(crate) fn queued(reply: &Reply) -> usize {
    serde_json::from_slice::<Vec<ItemResult<'_>>>(&reply.body).map_or(0, |results| {
        results
            .iter()
            .filter(|item| item.status == "queued")
            .count()
    })
}

/// What a pop delivered: the body of a 200, nothing for a 204.
pub(crate) struct Popped(Bytes);

impl Popped {
    /// A pop's reply: 200 (messages) or 204 (none); any other status fails.
    pub(crate) fn from_reply(reply: Reply) -> Result<Popped> {
        match reply.status {
            StatusCode::OK => Ok(Popped(reply.body)),
            StatusCode::NO_CONTENT => Ok(Popped(Bytes::new())),
            status => Err(Error::msg(format!(
                "pop answered {status}: {}",
                reply.snippet()
            ))),
        }
    }

    /// The delivered messages, each payload read as a `D` (none for a 204).
    pub(crate) fn messages<'a, D: Deserialize<'a>>(&'a self) -> Result<Vec<Message<'a, D>>> {
        /// The pop response; only the messages are read.
        #[derive(Deserialize)]
        #[serde(bound(deserialize = "D: Deserialize<'de>"))]
        struct Body<'a, D> {
            #[serde(borrow, default)]
            messages: Vec<Message<'a, D>>,
        }
        if self.0.is_empty() {
            return Ok(Vec::new());
        }
        let body: Body<'a, D> = serde_json::from_slice(&self.0).with_context(|| {
            format!(
                "pop response: {}",
                String::from_utf8_lossy(&self.0[..self.0.len().min(300)])
            )
        })?;
        Ok(body.messages)
    }
}

/// One delivered message: what its ack names, and its payload.
#[derive(Deserialize)]
pub(crate) struct Message<'a, D> {
    #[serde(rename = "transactionId", borrow)]
    pub(crate) transaction_id: Cow<'a, str>,
    #[serde(rename = "partitionId", borrow)]
    pub(crate) partition_id: Cow<'a, str>,
    #[serde(rename = "leaseId", borrow, default)]
    pub(crate) lease_id: Option<Cow<'a, str>>,
    pub(crate) data: D,
}

impl<D> Message<'_, D> {
    /// The acknowledgement of this message with `status`.
    pub(crate) fn ack(&self, status: &'static str) -> Ack<'_> {
        Ack {
            transaction_id: &self.transaction_id,
            partition_id: &self.partition_id,
            lease_id: self.lease_id.as_deref(),
            status,
            error: None,
        }
    }
}

/// `completed` acknowledgements of every one of `messages`.
pub(crate) fn completed<'a, D>(messages: &'a [Message<'_, D>]) -> Vec<Ack<'a>> {
    messages.iter().map(|m| m.ack("completed")).collect()
}

/// One acknowledgement of a batch ack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ack<'a> {
    pub(crate) transaction_id: &'a str,
    pub(crate) partition_id: &'a str,
    /// Sent when present and not empty.
    pub(crate) lease_id: Option<&'a str>,
    /// `completed`, `failed`, `dlq`, ...
    pub(crate) status: &'a str,
    pub(crate) error: Option<&'a str>,
}

/// One result of a batch ack.
#[derive(Debug, Deserialize)]
pub(crate) struct AckResult {
    #[serde(default)]
    pub(crate) success: bool,
    /// The ack filed a dead letter.
    #[serde(default)]
    pub(crate) dlq: bool,
}

/// The results of a batch ack of `acks` acknowledgements: a success status
/// and one result each. A 404 says the route is not there.
pub(crate) fn ack_results(reply: &Reply, acks: usize) -> Result<Vec<AckResult>> {
    if reply.status == StatusCode::NOT_FOUND {
        return Err(Error::msg(format!(
            "ack route not available: POST {ACK_BATCH} answered 404 ({})",
            reply.snippet()
        )));
    }
    if !reply.status.is_success() {
        return Err(Error::msg(format!(
            "ack answered {}: {}",
            reply.status,
            reply.snippet()
        )));
    }
    let results: Vec<AckResult> = serde_json::from_slice(&reply.body)
        .with_context(|| format!("ack response is not a result array: {}", reply.snippet()))?;
    if results.len() != acks {
        return Err(Error::msg(format!(
            "ack answered {} results for {acks} acknowledgments",
            results.len()
        )));
    }
    Ok(results)
}

/// The body of a batch ack of `acks` for `group` (`None`: queue mode), written
/// by hand: plain string fields only, the broker's fast path.
fn ack_body(acks: &[Ack<'_>], group: Option<&str>) -> Result<Bytes> {
    let mut body = String::with_capacity(acks.len() * 160 + 64);
    body.push_str("{\"acknowledgments\":[");
    for (i, ack) in acks.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str("{\"transactionId\":");
        body.push_str(&json_string(ack.transaction_id)?);
        body.push_str(",\"partitionId\":");
        body.push_str(&json_string(ack.partition_id)?);
        if let Some(lease) = ack.lease_id.filter(|lease| !lease.is_empty()) {
            body.push_str(",\"leaseId\":");
            body.push_str(&json_string(lease)?);
        }
        body.push_str(",\"status\":");
        body.push_str(&json_string(ack.status)?);
        if let Some(error) = ack.error {
            body.push_str(",\"error\":");
            body.push_str(&json_string(error)?);
        }
        body.push('}');
    }
    body.push(']');
    if let Some(group) = group {
        body.push_str(",\"consumerGroup\":");
        body.push_str(&json_string(group)?);
    }
    body.push('}');
    Ok(Bytes::from(body))
}

fn json_string(text: &str) -> Result<String> {
    serde_json::to_string(text).context("encode a JSON string")
}

impl Conn {
    /// `POST /api/v1/push` of `body`; fails unless every one of its `items`
    /// was queued.
    pub(crate) async fn push(&mut self, body: Bytes, items: usize) -> Result<()> {
        let reply = self.post_json(PUSH, body).await?;
        check_push(&reply, items)
    }

    /// `POST /api/v1/push` of `body`: the reply, unchecked.
    pub(crate) async fn push_request(&mut self, body: Bytes) -> Result<Reply> {
        self.post_json(PUSH, body).await
    }

    /// `GET path`, a pop: what it delivered.
    pub(crate) async fn pop(&mut self, path: &str) -> Result<Popped> {
        Popped::from_reply(self.get(path).await?)
    }

    /// `POST /api/v1/ack/batch` of `acks` for `group` (`None`: queue mode):
    /// the reply, unchecked (see [`ack_results`]).
    pub(crate) async fn ack_request(
        &mut self,
        acks: &[Ack<'_>],
        group: Option<&str>,
    ) -> Result<Reply> {
        self.post_json(ACK_BATCH, ack_body(acks, group)?).await
    }

    /// A batch ack of `acks` for `group`; fails unless every one succeeded
    /// (nothing is sent for none).
    pub(crate) async fn ack_all(&mut self, acks: &[Ack<'_>], group: Option<&str>) -> Result<()> {
        if acks.is_empty() {
            return Ok(());
        }
        let reply = self.ack_request(acks, group).await?;
        let results = ack_results(&reply, acks.len())?;
        if results.iter().any(|result| !result.success) {
            return Err(Error::msg(format!(
                "ack of {} messages did not succeed for every one: {}",
                acks.len(),
                reply.snippet()
            )));
        }
        Ok(())
    }

    /// `Some(reason)` when the batch ack route answers 404 (an empty batch
    /// ack for `group` is sent to find out).
    pub(crate) async fn ack_route_missing(&mut self, group: &str) -> Result<Option<String>> {
        let reply = self.ack_request(&[], Some(group)).await?;
        if reply.status != StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(ack_results(&reply, 0).err().map(|error| error.to_string()))
    }

    /// `POST /api/v1/configure` of `queue` with `options`; fails unless the
    /// broker answers that it is configured.
    pub(crate) async fn configure(
        &mut self,
        queue: &str,
        options: serde_json::Value,
    ) -> Result<()> {
        let body = serde_json::json!({"queue": queue, "options": options});
        let reply = self
            .post_json("/api/v1/configure", Bytes::from(body.to_string()))
            .await?;
        let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        if !reply.status.is_success() || answer["configured"] != serde_json::json!(true) {
            return Err(Error::msg(format!("configure: {}", reply.snippet())));
        }
        Ok(())
    }

    /// Create the queue and every partition with one message each (payload
    /// ids `0..partitions.len()`), in requests of up to [`CREATE_CHUNK`]
    /// items, one per partition; `sending(ids)` is told each request's ids
    /// before it is built. Returns the messages pushed.
    pub(crate) async fn create_partitions(
        &mut self,
        bodies: &Bodies,
        queue: &str,
        partitions: &[String],
        txn: TxnIds,
        mut sending: impl FnMut(Range<u64>),
    ) -> Result<u64> {
        let mut created = 0;
        for chunk in partitions.chunks(CREATE_CHUNK) {
            let n = u64::try_from(chunk.len()).context("chunk size")?;
            sending(created..created + n);
            let mut body = Vec::with_capacity(chunk.len() * 1200 + 64);
            payload::push_request_spread(&mut body, bodies, queue, chunk, created, txn);
            self.push(Bytes::from(body), chunk.len())
                .await
                .map_err(|error| error.wrap("create the partitions"))?;
            created += n;
        }
        Ok(created)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    /// A server that answers every request with `status_line` and `body`.
    async fn canned(status_line: &'static str, body: &'static str) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let reply = format!(
                            "HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(reply.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_missing_ack_route_is_a_reason_to_skip_and_an_existing_one_is_not() {
        let missing = canned("404 Not Found", r#"{"error":"route not found"}"#).await;
        let mut conn = Conn::connect(missing).await.unwrap();
        let reason = conn.ack_route_missing("g").await.unwrap().unwrap();
        assert!(reason.starts_with("ack route not available"), "{reason}");
        let present = canned("200 OK", "[]").await;
        let mut conn = Conn::connect(present).await.unwrap();
        assert_eq!(conn.ack_route_missing("g").await.unwrap(), None);
    }

    #[test]
    fn an_ack_body_names_what_is_there_and_leaves_out_empty_leases() {
        let acks = [
            Ack {
                transaction_id: "t\"1",
                partition_id: "p",
                lease_id: Some(""),
                status: "completed",
                error: None,
            },
            Ack {
                transaction_id: "t2",
                partition_id: "p",
                lease_id: Some("l"),
                status: "failed",
                error: Some("boom"),
            },
        ];
        let body = ack_body(&acks, Some("g")).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["consumerGroup"], "g");
        assert_eq!(value["acknowledgments"][0]["transactionId"], "t\"1");
        assert!(value["acknowledgments"][0].get("leaseId").is_none());
        assert_eq!(value["acknowledgments"][1]["leaseId"], "l");
        assert_eq!(value["acknowledgments"][1]["error"], "boom");
        let body = ack_body(&[], None).unwrap();
        assert_eq!(&body[..], b"{\"acknowledgments\":[]}");
    }
}
