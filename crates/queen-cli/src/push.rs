//! `queen push QUEUE`: NDJSON in, batched `POST /api/v1/push` out.
//!
//! Each non-blank line is one message: its JSON is the payload, sent as the
//! line's bytes (never re-serialised, so big numbers and key order survive).
//! With `--wrapped` a line is the broker's item shape instead,
//! `{"data", "partition"?, "transactionId"?, "traceId"?}` (what `queen tail`
//! prints, so `tail | push --wrapped` copies a queue keeping partitions and
//! transaction ids); other fields are ignored.
//!
//! The partition is the line's (`--wrapped`), else the value at
//! `--partition-key` (a dotted path into the payload; a string, number or
//! boolean), else `--partition`, else the broker's `Default`. Every item
//! carries a transaction id (a fresh UUIDv7 unless the line gives one), so a
//! batch the broker answered 503 is resent without duplicates.
//!
//! A malformed line stops the push: the lines before it are pushed (their
//! batch is sent first), nothing from it on is, and the error names its line
//! number, so the rest can be pushed after a fix with `tail -n +LINE`. The
//! reference stops too, but may leave the lines of the bad line's batch
//! unsent; here "before it" is exact.
//!
//! Prints `queued=N duplicate=N failed=N` (`buffered`, answered while the
//! broker is in maintenance, counts as queued). Exit 4 when the input held no
//! message; exit 2 when the broker failed some items (the reference exits 0).
//! A progress line is drawn on stderr when stderr is a terminal: a bar of
//! the bytes read with `--file` (whose size is known), else a spinner
//! counting messages.

use std::io::{BufRead, IsTerminal as _, Read as _};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::client::{Broker, Request};
use crate::error::CliError;

/// The longest input line: the broker's body limit is larger, but a line
/// this long is almost certainly not meant as one message.
pub(crate) const MAX_LINE_BYTES: u64 = 16 * 1024 * 1024;

/// `push`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    /// The queue (created on first push).
    pub(crate) queue: String,
    /// Messages per request.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) batch: u32,
    /// The partition of every message (default: the broker's `Default`).
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// A dotted path into each payload whose value is its partition
    /// (`user_id`, `order.id`).
    #[arg(long, value_name = "PATH")]
    pub(crate) partition_key: Option<String>,
    /// Lines are items `{data, partition?, transactionId?, traceId?}`.
    #[arg(long)]
    pub(crate) wrapped: bool,
    /// A trace id (UUID) for every message.
    #[arg(long, value_name = "UUID")]
    pub(crate) trace_id: Option<uuid::Uuid>,
    /// Read NDJSON from this file instead of stdin.
    #[arg(short, long, conflicts_with = "data")]
    pub(crate) file: Option<PathBuf>,
    /// Push this one JSON payload instead of reading input.
    #[arg(long, value_name = "JSON")]
    pub(crate) data: Option<String>,
}

/// One item of `POST /api/v1/push`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<String>,
    /// The line's own bytes.
    payload: Box<RawValue>,
    transaction_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
}

/// The body of `POST /api/v1/push`.
#[derive(Serialize)]
struct PushBody<'a> {
    items: &'a [Item],
}

/// The broker's answer to one item.
#[derive(Deserialize)]
struct ItemResult {
    #[serde(default)]
    status: String,
    #[serde(default)]
    error: Option<String>,
}

/// An item as `--wrapped` reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wrapped<'a> {
    /// `None` only when the field is missing: `"data": null` is a null
    /// payload (what `queen tail` prints for one), not a missing one.
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    partition: Option<String>,
    transaction_id: Option<String>,
    trace_id: Option<String>,
}

#[derive(Default)]
struct Counts {
    queued: u64,
    duplicate: u64,
    failed: u64,
    first_error: Option<String>,
}

/// Run `push`.
pub(crate) async fn run(broker: &Broker, args: &PushArgs, quiet: bool) -> Result<(), CliError> {
    let mut file_len = None;
    let mut input: Box<dyn BufRead> = match (&args.data, &args.file) {
        (Some(data), _) => Box::new(std::io::Cursor::new(format!("{data}\n").into_bytes())),
        (None, Some(path)) => {
            let file = std::fs::File::open(path)
                .map_err(CliError::io(format!("opening {}", path.display())))?;
            file_len = file.metadata().ok().map(|meta| meta.len());
            Box::new(std::io::BufReader::new(file))
        }
        (None, None) => Box::new(std::io::stdin().lock()),
    };
    let shown = std::io::stderr().is_terminal() && !quiet && args.data.is_none();
    let progress = progress_bar(match (shown, file_len) {
        (false, _) => Progress::Hidden,
        (true, Some(len)) => Progress::Bytes(len),
        (true, None) => Progress::Messages,
    });
    let mut consumed: u64 = 0;
    let mut counts = Counts::default();
    let mut items: Vec<Item> = Vec::with_capacity(args.batch as usize);
    let mut line_number: u64 = 0;
    let mut line = Vec::new();
    let outcome = loop {
        line.clear();
        let read = (&mut input)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(CliError::io("reading input"))?;
        if read == 0 {
            break Ok(());
        }
        consumed += read as u64;
        line_number += 1;
        if line.len() as u64 > MAX_LINE_BYTES {
            break Err(CliError::Input {
                line: line_number,
                problem: format!("longer than {MAX_LINE_BYTES} bytes"),
            });
        }
        let item = match item(args, &line) {
            Ok(Some(item)) => item,
            Ok(None) => continue,
            Err(problem) => {
                break Err(CliError::Input {
                    line: line_number,
                    problem,
                })
            }
        };
        items.push(item);
        if items.len() >= args.batch as usize {
            send(broker, &args.queue, &mut items, &mut counts).await?;
            let pushed = counts.queued + counts.duplicate + counts.failed;
            if progress.length().is_some() {
                progress.set_position(consumed);
                progress.set_message(format!("{pushed} messages pushed"));
            } else {
                progress.set_position(pushed);
            }
        }
    };
    // Everything before a bad line is pushed before it is reported.
    send(broker, &args.queue, &mut items, &mut counts).await?;
    progress.finish_and_clear();
    if !quiet {
        println!(
            "queued={} duplicate={} failed={}",
            counts.queued, counts.duplicate, counts.failed
        );
    }
    if let Err(CliError::Input { line, problem }) = outcome {
        let pushed = counts.queued + counts.duplicate + counts.failed;
        return Err(CliError::Input {
            line,
            problem: format!(
                "{problem} (the {pushed} message(s) before it were pushed, nothing from it on)"
            ),
        });
    }
    outcome?;
    if counts.failed > 0 {
        return Err(CliError::Refused {
            what: format!("push to {}", args.queue),
            message: format!(
                "{} message(s) failed, the first: {}",
                counts.failed,
                counts.first_error.unwrap_or_default()
            ),
        });
    }
    if counts.queued + counts.duplicate == 0 {
        return Err(CliError::Nothing(
            "nothing pushed: the input held no message".to_owned(),
        ));
    }
    Ok(())
}

/// What the progress line on stderr shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Nothing (stderr is not a terminal, `--quiet`, `--data`).
    Hidden,
    /// A spinner counting messages (stdin: its size is unknown).
    Messages,
    /// A bar of the bytes read of a `--file` of this many bytes.
    Bytes(u64),
}

fn progress_bar(progress: Progress) -> indicatif::ProgressBar {
    let (bar, template) = match progress {
        Progress::Hidden => return indicatif::ProgressBar::hidden(),
        Progress::Messages => (
            indicatif::ProgressBar::new_spinner(),
            "{spinner} {human_pos} messages pushed in {elapsed}",
        ),
        Progress::Bytes(len) => (
            indicatif::ProgressBar::new(len),
            "{wide_bar} {bytes}/{total_bytes} read, {msg}, {elapsed} (eta {eta})",
        ),
    };
    match indicatif::ProgressStyle::with_template(template) {
        Ok(style) => bar.with_style(style),
        Err(_) => bar,
    }
}

/// The push item of one input line; `None` for a blank line; `Err` names
/// the problem.
fn item(args: &PushArgs, line: &[u8]) -> Result<Option<Item>, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_owned())?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let mut partition = args.partition.clone();
    let mut transaction_id = None;
    let mut trace_id = args.trace_id.map(|t| t.to_string());
    let payload: &RawValue = if args.wrapped {
        let wrapped: Wrapped<'_> = serde_json::from_str(text)
            .map_err(|err| format!("not a JSON item: {}", json_problem(&err)))?;
        if wrapped.partition.is_some() {
            partition = wrapped.partition;
        }
        transaction_id = wrapped.transaction_id;
        if wrapped.trace_id.is_some() {
            trace_id = wrapped.trace_id;
        }
        wrapped
            .data
            .ok_or_else(|| "--wrapped: the item has no \"data\" field".to_owned())?
    } else {
        serde_json::from_str(text).map_err(|err| format!("not JSON: {}", json_problem(&err)))?
    };
    if let Some(path) = &args.partition_key {
        let value: Value =
            serde_json::from_str(payload.get()).map_err(|err| format!("not JSON: {err}"))?;
        if let Some(key) = key_at(&value, path) {
            partition = Some(key);
        }
    }
    Ok(Some(Item {
        queue: args.queue.clone(),
        partition,
        payload: payload.to_owned(),
        transaction_id: transaction_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        trace_id,
    }))
}

/// A field that is present, whatever its value (serde reads `null` into an
/// `Option` as `None`; this keeps it as the raw `null`).
fn present<'de, D>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// A JSON error without serde's "at line 1": the line is the input's.
fn json_problem(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let problem = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(p, _)| p);
    format!("{problem} at column {}", err.column())
}

/// The scalar at dotted `path` in `value`, as a partition name.
fn key_at(value: &Value, path: &str) -> Option<String> {
    let found = path
        .split('.')
        .try_fold(value, |node, key| node.as_object()?.get(key))?;
    match found {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Push `items` (emptied) and count the answers.
async fn send(
    broker: &Broker,
    queue: &str,
    items: &mut Vec<Item>,
    counts: &mut Counts,
) -> Result<(), CliError> {
    if items.is_empty() {
        return Ok(());
    }
    let sent = items.len();
    let request = Request::post(&["api", "v1", "push"], &PushBody { items })?;
    items.clear();
    // Every item has a transaction id: a resend is deduplicated.
    let reply = broker.send(request.idempotent()).await?;
    let results: Vec<ItemResult> = reply.json()?;
    if results.len() != sent {
        return Err(reply.unexpected(format!(
            "{} results for {sent} items pushed to {queue}",
            results.len()
        )));
    }
    for result in results {
        match result.status.as_str() {
            "queued" | "buffered" => counts.queued += 1,
            "duplicate" => counts.duplicate += 1,
            _ => {
                counts.failed += 1;
                if counts.first_error.is_none() {
                    counts.first_error = Some(
                        result
                            .error
                            .unwrap_or_else(|| format!("status {:?}", result.status)),
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> PushArgs {
        PushArgs {
            queue: "q".into(),
            batch: 10,
            partition: Some("fixed".into()),
            partition_key: None,
            wrapped: false,
            trace_id: None,
            file: None,
            data: None,
        }
    }

    #[test]
    fn a_line_becomes_an_item_with_its_bytes_as_payload() {
        let item = item(&args(), b" {\"n\": 123456789012345678901234567890}\n")
            .unwrap()
            .unwrap();
        let item = serde_json::to_string(&item).unwrap();
        // The payload's text is kept: no rounding of the big number.
        assert!(
            item.contains(r#""payload":{"n": 123456789012345678901234567890}"#),
            "{item}"
        );
        let item: Value = serde_json::from_str(&item).unwrap();
        assert_eq!(item["partition"], "fixed");
        assert_eq!(item["queue"], "q");
        assert_eq!(item["transactionId"].as_str().unwrap().len(), 36);
        assert!(super::item(&args(), b"   \n").unwrap().is_none());
        assert!(super::item(&args(), b"{oops")
            .unwrap_err()
            .starts_with("not JSON"));
    }

    #[test]
    fn a_file_gets_a_bar_of_its_bytes_and_stdin_a_spinner() {
        let bar = progress_bar(Progress::Bytes(4096));
        assert_eq!(bar.length(), Some(4096));
        bar.set_position(1024);
        assert_eq!(bar.position(), 1024);
        assert_eq!(progress_bar(Progress::Messages).length(), None);
        assert!(progress_bar(Progress::Hidden).is_hidden());
    }

    #[test]
    fn partition_keys_and_wrapped_items() {
        let keyed = PushArgs {
            partition_key: Some("order.id".into()),
            ..args()
        };
        let item = item(&keyed, br#"{"order": {"id": 7}}"#).unwrap().unwrap();
        assert_eq!(item.partition.as_deref(), Some("7"));
        let missing = super::item(&keyed, br#"{"order": {}}"#).unwrap().unwrap();
        assert_eq!(missing.partition.as_deref(), Some("fixed"));
        let wrapped = PushArgs {
            wrapped: true,
            ..args()
        };
        let item = super::item(
            &wrapped,
            br#"{"data": [1], "partition": "p", "transactionId": "t", "queue": "other"}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(item.partition.as_deref(), Some("p"));
        assert_eq!(item.transaction_id, "t");
        assert_eq!(item.queue, "q");
        assert_eq!(item.payload.get(), "[1]");
        let err = super::item(&wrapped, br#"{"partition": "p"}"#).unwrap_err();
        assert!(err.contains("no \"data\""), "{err}");
        // A null payload, as `queen tail` prints it, is pushed as null.
        let null = super::item(&wrapped, br#"{"data": null, "partition": "p"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(null.payload.get(), "null");
    }
}
