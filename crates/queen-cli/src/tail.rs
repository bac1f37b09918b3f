//! `queen tail QUEUE`: pop, print one JSON object per message on stdout,
//! ack, repeat.
//!
//! Each line is `{"queue", "partition", "partitionId", "transactionId", "id",
//! "traceId", "createdAt", "producerSub", "data"}`, `data` being the
//! payload's bytes as stored; nothing else is written to stdout, so the
//! output pipes into `jq` or into `queen push --wrapped`. Messages of one
//! partition come in order.
//!
//! The group is `--group` (the reference's `--cg` also works), by default
//! `queenctl-tail` as in the reference: a named group, so tailing never takes
//! messages from the queue's own (queue-mode) consumers. Without `--follow`
//! the tool pops without waiting until a pop finds nothing, then exits; with
//! it, it long-polls until interrupted (Ctrl-C between batches exits 0).
//! `--limit N` exits after N messages: each pop asks for at most the
//! messages still wanted, so every message printed is acked and none is
//! left leased.
//!
//! A batch is acked (`POST /api/v1/ack/batch`) after its lines are written
//! and flushed, so a message is acked only once it is out. If stdout is
//! closed early (`| head`), the batch is given back unacked (status `retry`
//! releases the lease without moving the cursor) and the tool exits 0.
//! `--auto-ack` lets the broker commit at delivery instead (no ack request;
//! a crash loses what was popped but not printed).

use std::io::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::client::{Broker, Request};
use crate::error::CliError;

/// The group `tail` uses without `--group` (the reference's).
pub(crate) const DEFAULT_GROUP: &str = "queenctl-tail";

/// Slack on top of the long-poll time before a pop request times out.
const POLL_SLACK: Duration = Duration::from_secs(15);

/// `tail`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {
    /// The queue.
    pub(crate) queue: String,
    /// The consumer group whose cursor is read and moved.
    #[arg(short, long, visible_alias = "cg", default_value = DEFAULT_GROUP)]
    pub(crate) group: String,
    /// Only this partition.
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// Keep long-polling for new messages until interrupted.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Exit after this many messages (acking them).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) limit: Option<u64>,
    /// Messages per pop.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) batch: u32,
    /// Partitions one pop may claim.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) max_partitions: u32,
    /// Let the broker commit at delivery (no acks).
    #[arg(long)]
    pub(crate) auto_ack: bool,
    /// Where a new group starts: `all` (default) or `new`.
    #[arg(long, value_name = "MODE")]
    pub(crate) from: Option<String>,
    /// Where a new group starts, as a time ('5m ago', RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
    /// How long one long poll waits with --follow (e.g. 30s).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

/// A pop's answer (the fields used).
#[derive(Deserialize)]
struct PopAnswer<'a> {
    #[serde(default)]
    queue: String,
    #[serde(borrow, default)]
    messages: Vec<Popped<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Popped<'a> {
    id: Option<String>,
    transaction_id: String,
    partition_id: String,
    #[serde(default)]
    partition: String,
    #[serde(default)]
    lease_id: Option<String>,
    trace_id: Option<String>,
    created_at: Option<String>,
    producer_sub: Option<String>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

/// One output line.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    queue: &'a str,
    partition: &'a str,
    partition_id: &'a str,
    transaction_id: &'a str,
    id: Option<&'a str>,
    trace_id: Option<&'a str>,
    created_at: Option<&'a str>,
    producer_sub: Option<&'a str>,
    data: Option<&'a RawValue>,
}

/// Run `tail`.
pub(crate) async fn run(broker: &Broker, args: &TailArgs) -> Result<(), CliError> {
    let since = match &args.since {
        Some(text) => {
            let now = time::OffsetDateTime::now_utc();
            Some(crate::timespec::timestamp(
                crate::timespec::parse(text, now)?,
                now,
            ))
        }
        None => None,
    };
    let path: Vec<&str> = match &args.partition {
        Some(partition) => vec![
            "api",
            "v1",
            "pop",
            "queue",
            &args.queue,
            "partition",
            partition,
        ],
        None => vec!["api", "v1", "pop", "queue", &args.queue],
    };
    let wait_ms = u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX);
    let mut printed: u64 = 0;
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let want = match args.limit {
            Some(limit) => (limit - printed).min(u64::from(args.batch)),
            None => u64::from(args.batch),
        };
        let mut request = Request::get(&path)
            .query("consumerGroup", &args.group)
            .query("batch", &want)
            .query("wait", &args.follow)
            .query("autoAck", &args.auto_ack);
        if args.follow {
            request = request
                .query("timeout", &wait_ms)
                .timeout(args.timeout + POLL_SLACK);
        }
        if args.partition.is_none() && args.max_partitions > 1 {
            request = request.query("partitions", &args.max_partitions);
        }
        if let Some(mode) = &args.from {
            request = request.query("subscriptionMode", &mode);
        }
        if let Some(since) = &since {
            request = request.query("subscriptionFrom", &since);
        }
        // A pop is a read until it answers: interrupting it loses nothing
        // (a lease it took expires; with --follow the wait is the usual case).
        let reply = tokio::select! {
            reply = broker.send(request) => reply?,
            _ = &mut interrupt => return Ok(()),
        };
        let answer: Option<PopAnswer<'_>> = reply.json()?;
        let messages = answer.as_ref().map_or(&[][..], |a| a.messages.as_slice());
        if messages.is_empty() {
            if args.follow {
                continue;
            }
            return Ok(());
        }
        let queue = answer.as_ref().map_or("", |a| a.queue.as_str());
        match print(queue, messages) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                if !args.auto_ack {
                    give_back(broker, &args.group, messages).await?;
                }
                return Ok(());
            }
            Err(source) => {
                if !args.auto_ack {
                    give_back(broker, &args.group, messages).await?;
                }
                return Err(CliError::Io {
                    what: "writing to stdout".to_owned(),
                    source,
                });
            }
        }
        if !args.auto_ack {
            ack(broker, &args.group, messages).await?;
        }
        printed += messages.len() as u64;
        if args.limit.is_some_and(|limit| printed >= limit) {
            return Ok(());
        }
    }
}

/// Write `messages` as NDJSON and flush.
fn print(queue: &str, messages: &[Popped<'_>]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for message in messages {
        let line = Line {
            queue,
            partition: &message.partition,
            partition_id: &message.partition_id,
            transaction_id: &message.transaction_id,
            id: message.id.as_deref(),
            trace_id: message.trace_id.as_deref(),
            created_at: message.created_at.as_deref(),
            producer_sub: message.producer_sub.as_deref(),
            data: message.data,
        };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Ack `messages` as completed; an item the broker refused is an error.
async fn ack(broker: &Broker, group: &str, messages: &[Popped<'_>]) -> Result<(), CliError> {
    let results = send_acks(broker, group, messages.iter(), "completed").await?;
    let refused: Vec<&serde_json::Value> = results
        .iter()
        .filter(|r| r.get("success") != Some(&serde_json::Value::Bool(true)))
        .collect();
    if let Some(first) = refused.first() {
        return Err(CliError::Refused {
            what: "POST /api/v1/ack/batch".to_owned(),
            message: format!(
                "{} of {} acks refused, the first: {}",
                refused.len(),
                results.len(),
                first
                    .get("error")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no reason given")
            ),
        });
    }
    Ok(())
}

/// Release the leases of `messages` without moving the cursor: a `retry` of
/// each partition's first message (the broker releases the lease at the
/// first and refuses the rest of a partition's acks after it).
async fn give_back(broker: &Broker, group: &str, messages: &[Popped<'_>]) -> Result<(), CliError> {
    let mut seen = std::collections::HashSet::new();
    let firsts = messages
        .iter()
        .filter(|m| seen.insert(m.partition_id.as_str()));
    send_acks(broker, group, firsts, "retry").await.map(drop)
}

/// `POST /api/v1/ack/batch` of `messages` with `status`: the per-item results.
async fn send_acks<'m, 'a: 'm>(
    broker: &Broker,
    group: &str,
    messages: impl Iterator<Item = &'m Popped<'a>>,
    status: &str,
) -> Result<Vec<serde_json::Value>, CliError> {
    let acknowledgments: Vec<_> = messages
        .map(|m| {
            json!({
                "transactionId": m.transaction_id,
                "partitionId": m.partition_id,
                "leaseId": m.lease_id.as_deref().unwrap_or(""),
                "status": status,
            })
        })
        .collect();
    let body = json!({"acknowledgments": acknowledgments, "consumerGroup": group});
    broker
        .send(Request::post(&["api", "v1", "ack", "batch"], &body)?)
        .await?
        .json()
}
