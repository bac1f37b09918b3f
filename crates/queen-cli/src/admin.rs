//! The operator views and switches: `ping`, `status`, `queue`, `cg`, `lag`,
//! `replay`, `dlq`, `maintenance`. Each is one or two requests; `-o json`
//! prints the broker's bodies as they came, a table picks columns.

use serde_json::{json, Value};

use crate::client::{Broker, Request};
use crate::error::CliError;
use crate::output::{self, col, Format};
use crate::timespec;

/// `queue`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum QueueCommand {
    /// List queues with their message counts (the default).
    #[command(visible_alias = "ls")]
    List,
    /// One queue: configuration, partitions, counts.
    #[command(visible_aliases = ["get", "show"])]
    Describe {
        /// The queue.
        queue: String,
    },
}

/// `cg`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum GroupCommand {
    /// List consumer groups per queue with their lag (the default).
    #[command(visible_alias = "ls")]
    List,
    /// One group: its cursor on every partition.
    #[command(visible_aliases = ["get", "show"])]
    Describe {
        /// The group.
        group: String,
    },
}

/// `lag`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct LagArgs {
    /// Alert mode: list the partition cursors whose oldest unconsumed message
    /// is at least N seconds old, and exit 5 when there is one.
    #[arg(long, value_name = "N")]
    pub(crate) min_seconds: Option<u64>,
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this consumer group.
    #[arg(short, long, visible_alias = "cg")]
    pub(crate) group: Option<String>,
}

/// `replay`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The queue.
    pub(crate) queue: String,
    /// The consumer group to move.
    #[arg(short, long, visible_alias = "cg")]
    pub(crate) group: String,
    /// Where to: '15m ago', an RFC 3339 time, 'beginning', or 'now' (also
    /// 'end', 'latest': past every message).
    #[arg(long, value_name = "TIME")]
    pub(crate) to: String,
    /// Print what would be sent and send nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// `dlq`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum DlqCommand {
    /// List dead letters, newest first.
    #[command(visible_alias = "ls")]
    List(DlqFilter),
    /// Replay dead letters into their partitions for the groups that
    /// dead-lettered them: one message by id, or those matching --queue.
    Retry {
        /// The message's partition id (with TRANSACTION_ID).
        #[arg(requires = "transaction_id")]
        partition_id: Option<String>,
        /// The message's transaction id.
        transaction_id: Option<String>,
        #[command(flatten)]
        filter: DlqFilter,
    },
}

/// The dead-letter filters.
#[derive(Debug, clap::Args)]
pub(crate) struct DlqFilter {
    /// Only this queue (required by `retry` without an id).
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this consumer group's dead letters.
    #[arg(short, long, visible_alias = "cg")]
    pub(crate) group: Option<String>,
    /// Only this partition.
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// Filed at or after this time.
    #[arg(long, value_name = "TIME")]
    pub(crate) from: Option<String>,
    /// Filed at or before this time.
    #[arg(long, value_name = "TIME")]
    pub(crate) to: Option<String>,
    /// At most this many (the broker caps it at 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: u32,
    /// Skip this many (`list` only).
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: u32,
}

/// `maintenance`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum MaintenanceCommand {
    /// Show the maintenance flags and the spool.
    Get {
        /// Pop maintenance only.
        #[arg(long)]
        pop: bool,
    },
    /// Turn maintenance on: pushes are spooled (or, with --pop, pops answer
    /// empty) cluster-wide until it is turned off.
    On {
        /// Pop maintenance only.
        #[arg(long)]
        pop: bool,
        /// Confirm (the broker stops writing pushes to PostgreSQL).
        #[arg(long)]
        yes: bool,
    },
    /// Turn maintenance off: the spool drains into PostgreSQL.
    Off {
        /// Pop maintenance only.
        #[arg(long)]
        pop: bool,
    },
}

/// `ping`: the broker's health.
pub(crate) async fn ping(broker: &Broker, format: Format) -> Result<(), CliError> {
    let health: Value = broker.get_json(&["health"]).await?;
    match format {
        Format::Json => output::json(&health),
        Format::Table => output::fields(&health),
    }
}

/// `status [QUEUE]`: the overview and every queue, or one queue's partitions.
pub(crate) async fn status(
    broker: &Broker,
    queue: Option<&str>,
    format: Format,
) -> Result<(), CliError> {
    if let Some(queue) = queue {
        let reply = broker
            .send(Request::get(&["api", "v1", "resources", "queues", queue]))
            .await?;
        let detail: Value = reply.json()?;
        if format == Format::Json {
            return output::json(&detail);
        }
        let partitions = output::rows(&reply, &detail, "/partitions")?;
        output::fields(&json!({
            "queue": detail.get("name"),
            "namespace": detail.get("namespace"),
            "task": detail.get("task"),
            "messages": detail.pointer("/totals/messages"),
        }))?;
        println!();
        return output::table(
            &[
                col("PARTITION", "/name"),
                col("TOTAL", "/messages/total"),
                col("PENDING", "/messages/pending"),
                col("PROCESSING", "/messages/processing"),
                col("COMPLETED", "/messages/completed"),
                col("DLQ", "/messages/deadLetter"),
                col("LAST-WRITE", "/lastActivity"),
            ],
            partitions,
        );
    }
    let overview: Value = broker
        .get_json(&["api", "v1", "resources", "overview"])
        .await?;
    let queues_reply = broker
        .send(Request::get(&["api", "v1", "resources", "queues"]))
        .await?;
    let queues: Value = queues_reply.json()?;
    if format == Format::Json {
        return output::json(&json!({
            "overview": overview,
            "queues": queues.get("queues"),
        }));
    }
    output::fields(&json!({
        "queues": overview.get("queues"),
        "partitions": overview.get("partitions"),
        "messages": overview.get("messages"),
        "lag": overview.pointer("/lag/time"),
    }))?;
    println!();
    queue_table(output::rows(&queues_reply, &queues, "/queues")?)
}

fn queue_table(rows: &[Value]) -> Result<(), CliError> {
    output::table(
        &[
            col("QUEUE", "/name"),
            col("NAMESPACE", "/namespace"),
            col("TASK", "/task"),
            col("PARTITIONS", "/partitions"),
            col("TOTAL", "/messages/total"),
            col("PENDING", "/messages/pending"),
            col("PROCESSING", "/messages/processing"),
            col("COMPLETED", "/messages/completed"),
            col("DLQ", "/messages/deadLetter"),
        ],
        rows,
    )
}

/// `queue ...`.
pub(crate) async fn queue(
    broker: &Broker,
    command: &QueueCommand,
    format: Format,
) -> Result<(), CliError> {
    match command {
        QueueCommand::List => {
            let reply = broker
                .send(Request::get(&["api", "v1", "resources", "queues"]))
                .await?;
            let body: Value = reply.json()?;
            match format {
                Format::Json => output::json(&body),
                Format::Table => queue_table(output::rows(&reply, &body, "/queues")?),
            }
        }
        QueueCommand::Describe { queue } => {
            let body: Value = broker
                .get_json(&["api", "v1", "resources", "queues", queue])
                .await?;
            match format {
                Format::Json => output::json(&body),
                Format::Table => output::fields(&body),
            }
        }
    }
}

/// `cg ...`.
pub(crate) async fn group(
    broker: &Broker,
    command: &GroupCommand,
    format: Format,
) -> Result<(), CliError> {
    match command {
        GroupCommand::List => {
            let reply = broker
                .send(Request::get(&["api", "v1", "consumer-groups"]))
                .await?;
            let body: Value = reply.json()?;
            match format {
                Format::Json => output::json(&body),
                Format::Table => group_table(output::rows(&reply, &body, "")?),
            }
        }
        GroupCommand::Describe { group } => {
            let reply = broker
                .send(Request::get(&["api", "v1", "consumer-groups", group]))
                .await?;
            let body: Value = reply.json()?;
            if format == Format::Json {
                return output::json(&body);
            }
            let map = body
                .as_object()
                .ok_or_else(|| reply.unexpected("expected an object"))?;
            let mut rows = Vec::new();
            for (queue, detail) in map {
                for partition in detail
                    .get("partitions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let mut row = partition.clone();
                    row["queue"] = Value::String(queue.clone());
                    rows.push(row);
                }
            }
            output::table(
                &[
                    col("QUEUE", "/queue"),
                    col("PARTITION", "/partition"),
                    col("BEHIND", "/offsetLag"),
                    col("LAG-SECONDS", "/timeLagSeconds"),
                    col("CONSUMED", "/totalConsumed"),
                    col("LAST-CONSUMED", "/lastConsumedAt"),
                    col("LEASED", "/leaseActive"),
                ],
                &rows,
            )
        }
    }
}

fn group_table(rows: &[Value]) -> Result<(), CliError> {
    output::table(
        &[
            col("GROUP", "/name"),
            col("QUEUE", "/queueName"),
            col("PARTITIONS", "/members"),
            col("LAGGING", "/partitionsWithLag"),
            col("BEHIND", "/totalLag"),
            col("MAX-LAG-SECONDS", "/maxTimeLag"),
            col("STATE", "/state"),
            col("MODE", "/subscriptionMode"),
        ],
        rows,
    )
}

/// `lag`: every group's lag, or (with `--min-seconds N`) the cursors at least
/// N seconds behind, exiting 5 when there is one.
pub(crate) async fn lag(
    broker: &Broker,
    args: &LagArgs,
    format: Format,
    quiet: bool,
) -> Result<(), CliError> {
    let Some(min_seconds) = args.min_seconds else {
        let reply = broker
            .send(Request::get(&["api", "v1", "consumer-groups"]))
            .await?;
        let body: Value = reply.json()?;
        let rows: Vec<Value> = output::rows(&reply, &body, "")?
            .iter()
            .filter(|row| keep(row, "/queueName", "/name", args))
            .cloned()
            .collect();
        return match format {
            Format::Json => output::json(&Value::Array(rows)),
            Format::Table => group_table(&rows),
        };
    };
    let reply = broker
        .send(
            Request::get(&["api", "v1", "consumer-groups", "lagging"])
                .query("minLagSeconds", &min_seconds),
        )
        .await?;
    let body: Value = reply.json()?;
    let rows: Vec<Value> = output::rows(&reply, &body, "")?
        .iter()
        .filter(|row| keep(row, "/queue_name", "/consumer_group", args))
        .cloned()
        .collect();
    match format {
        Format::Json => output::json(&Value::Array(rows.clone()))?,
        Format::Table if rows.is_empty() => {
            if !quiet {
                eprintln!("no consumer group lags {min_seconds} s or more");
            }
        }
        Format::Table => output::table(
            &[
                col("GROUP", "/consumer_group"),
                col("QUEUE", "/queue_name"),
                col("PARTITION", "/partition_name"),
                col("BEHIND", "/offset_lag"),
                col("LAG-SECONDS", "/time_lag_seconds"),
                col("OLDEST-UNCONSUMED", "/oldest_unconsumed_at"),
            ],
            &rows,
        )?,
    }
    if rows.is_empty() {
        Ok(())
    } else {
        Err(CliError::Lagging {
            cursors: rows.len(),
            min_seconds,
        })
    }
}

/// Whether `row` passes `--queue` and `--group`.
fn keep(row: &Value, queue_at: &str, group_at: &str, args: &LagArgs) -> bool {
    let is = |at: &str, want: &Option<String>| {
        want.as_deref()
            .is_none_or(|want| row.pointer(at).and_then(Value::as_str) == Some(want))
    };
    is(queue_at, &args.queue) && is(group_at, &args.group)
}

/// `replay`: seek the group's cursors on the queue to a time.
pub(crate) async fn replay(
    broker: Option<&Broker>,
    args: &ReplayArgs,
    quiet: bool,
) -> Result<(), CliError> {
    let now = time::OffsetDateTime::now_utc();
    let to_end = matches!(
        args.to.trim().to_ascii_lowercase().as_str(),
        "end" | "latest"
    );
    let body = match timespec::parse(&args.to, now) {
        _ if to_end => json!({"toEnd": true}),
        Err(err) => return Err(err),
        Ok(timespec::Instant::Now) => json!({"toEnd": true}),
        Ok(instant) => json!({"timestamp": timespec::timestamp(instant, now)}),
    };
    let Some(broker) = broker else {
        println!(
            "[dry-run] would seek cg={} queue={} with {body}",
            args.group, args.queue
        );
        return Ok(());
    };
    let path = [
        "api",
        "v1",
        "consumer-groups",
        &args.group,
        "queues",
        &args.queue,
        "seek",
    ];
    let reply = broker.send(Request::post(&path, &body)?).await?;
    let answer: Value = reply.json()?;
    if !quiet {
        let to = body
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("the end");
        println!(
            "replayed cg={} queue={} to={to} partitions={}",
            args.group,
            args.queue,
            answer
                .get("partitionsUpdated")
                .map_or_else(|| "?".to_owned(), Value::to_string)
        );
    }
    Ok(())
}

/// `dlq ...`.
pub(crate) async fn dlq(
    broker: &Broker,
    command: &DlqCommand,
    format: Format,
    quiet: bool,
) -> Result<(), CliError> {
    let now = time::OffsetDateTime::now_utc();
    let instant = |text: &Option<String>| -> Result<Option<String>, CliError> {
        text.as_deref()
            .map(|t| timespec::parse(t, now).map(|i| timespec::timestamp(i, now)))
            .transpose()
    };
    match command {
        DlqCommand::List(filter) => {
            let mut request = Request::get(&["api", "v1", "dlq"])
                .query("limit", &filter.limit)
                .query("offset", &filter.offset);
            for (key, value) in [
                ("queue", filter.queue.clone()),
                ("consumerGroup", filter.group.clone()),
                ("partition", filter.partition.clone()),
                ("from", instant(&filter.from)?),
                ("to", instant(&filter.to)?),
            ] {
                if let Some(value) = value {
                    request = request.query(key, &value);
                }
            }
            let reply = broker.send(request).await?;
            let body: Value = reply.json()?;
            match format {
                Format::Json => output::json(&body),
                Format::Table => output::table(
                    &[
                        col("QUEUE", "/queue"),
                        col("PARTITION", "/partition"),
                        col("GROUP", "/consumerGroup"),
                        col("TRANSACTION", "/transactionId"),
                        col("PARTITION-ID", "/partitionId"),
                        col("RETRIES", "/retryCount"),
                        col("FAILED-AT", "/failedAt"),
                        col("ERROR", "/errorMessage"),
                    ],
                    output::rows(&reply, &body, "/messages")?,
                ),
            }
        }
        DlqCommand::Retry {
            partition_id,
            transaction_id,
            filter,
        } => {
            let answer: Value = match (partition_id, transaction_id) {
                (Some(partition_id), Some(transaction_id)) => {
                    let mut body = json!({});
                    if let Some(group) = &filter.group {
                        body["consumerGroup"] = Value::String(group.clone());
                    }
                    let path = [
                        "api",
                        "v1",
                        "messages",
                        partition_id,
                        transaction_id,
                        "retry",
                    ];
                    match broker.send(Request::post(&path, &body)?).await {
                        Ok(reply) => reply.json()?,
                        Err(CliError::Broker { status: 404, .. }) => {
                            return Err(CliError::Nothing(format!(
                                "no dead letter of {partition_id}/{transaction_id}"
                            )))
                        }
                        Err(other) => return Err(other),
                    }
                }
                _ => {
                    let Some(queue) = &filter.queue else {
                        return Err(CliError::Usage(
                            "dlq retry needs PARTITION_ID TRANSACTION_ID or --queue".to_owned(),
                        ));
                    };
                    let mut body = json!({"queue": queue, "limit": filter.limit});
                    for (key, value) in [
                        ("consumerGroup", filter.group.clone()),
                        ("partition", filter.partition.clone()),
                        ("from", instant(&filter.from)?),
                        ("to", instant(&filter.to)?),
                    ] {
                        if let Some(value) = value {
                            body[key] = Value::String(value);
                        }
                    }
                    broker
                        .send(Request::post(&["api", "v1", "dlq", "requeue"], &body)?)
                        .await?
                        .json()?
                }
            };
            let requeued = answer.get("requeued").and_then(Value::as_u64).unwrap_or(0);
            let letters = answer
                .get("deadLetters")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if format == Format::Json {
                output::json(&answer)?;
            } else if !quiet {
                println!("requeued={requeued} deadLetters={letters}");
            }
            if letters == 0 {
                return Err(CliError::Nothing(
                    "no dead letter matched: nothing retried".to_owned(),
                ));
            }
            Ok(())
        }
    }
}

/// `maintenance ...`.
pub(crate) async fn maintenance(
    broker: &Broker,
    command: &MaintenanceCommand,
    format: Format,
    quiet: bool,
) -> Result<(), CliError> {
    let (pop, enable) = match command {
        MaintenanceCommand::Get { pop } => {
            let path: &[&str] = if *pop {
                &["api", "v1", "system", "maintenance", "pop"]
            } else {
                &["api", "v1", "system", "maintenance"]
            };
            let body: Value = broker.get_json(path).await?;
            return match format {
                Format::Json => output::json(&body),
                Format::Table => output::fields(&body),
            };
        }
        MaintenanceCommand::On { pop, yes } => {
            if !yes {
                return Err(CliError::Usage(
                    "refusing to turn maintenance on without --yes".to_owned(),
                ));
            }
            (*pop, true)
        }
        MaintenanceCommand::Off { pop } => (*pop, false),
    };
    let path: &[&str] = if pop {
        &["api", "v1", "system", "maintenance", "pop"]
    } else {
        &["api", "v1", "system", "maintenance"]
    };
    let reply = broker
        .send(Request::post(path, &json!({"enabled": enable}))?.idempotent())
        .await?;
    let body: Value = reply.json()?;
    if format == Format::Json {
        return output::json(&body);
    }
    if !quiet {
        let scope = if pop {
            "pop-maintenance"
        } else {
            "maintenance"
        };
        println!("{scope} {}", if enable { "on" } else { "off" });
    }
    Ok(())
}
