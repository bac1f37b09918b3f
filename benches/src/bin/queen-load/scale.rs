//! The `scale` scenario (issue 20): the design at the scale it claims.
//!
//! Cases (`--cases`, comma-separated; default every one but `soak`):
//! - `million`: a million partitions in one queue (`scale_million.rs`);
//! - `queues`: ten thousand queues with one consumer group each
//!   (`scale_queues.rs`);
//! - `parked`: ten thousand parked long-poll consumers on 100 queues
//!   (`scale_parked.rs`);
//! - `spread`: single-message pushes from 50 connections over 1 and 100
//!   partitions (`scale_spread.rs`);
//! - `soak`: the long soak with flat memory (`scale_soak.rs`).
//!
//! Every case reports its figures as ratios to a small case measured in the
//! same run, and pushes one JSON object (with a `case` field) to
//! `report.scale`; its table goes to stderr as it finishes.
//!
//! This file also holds what the cases share: the broker's `/metrics`
//! gauges, its RSS, `pg_stat_database` counters, pops and batch acks, a
//! small random generator, and the tables' layout.
//!
//! On `pg_stat_database`: a backend flushes its counts when it goes idle, at
//! most once a second, and a backend that goes idle less than a second after
//! its last flush keeps them for up to 10 s (`stats::SETTLE`). Reads taken in
//! a steady state (a background pass every second or so) are right within
//! about a second of that activity; reads that must include a burst just
//! before them wait `SETTLE` first, as the cases' docs say.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::Conn;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::report::{fixed, Report, Table};

/// One case of the scale scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Case {
    Million,
    Queues,
    Parked,
    Spread,
    Soak,
}

/// The scale scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScaleOpts {
    /// Cases to run, comma-separated [default: million,queues,parked,spread].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) cases: Vec<Case>,
    /// Seconds of traffic of each measured phase [default: 10; 20 for the
    /// pushes of `parked`].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// Partitions of the `million` case's queue.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub(crate) million_partitions: usize,
    /// Partitions of `million`'s small case, and the size of its hot set.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub(crate) hot_partitions: usize,
    /// Queues of the `queues` case.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub(crate) queues: usize,
    /// Queues of `queues`' small case.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) small_queues: usize,
    /// Parked consumers of the `parked` case (on 100 queues).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub(crate) parked: usize,
    /// Seconds of the idle windows (`queues`, `parked`).
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
    pub(crate) idle: f64,
    /// Minutes of the `soak` case.
    #[arg(long, value_name = "MIN", default_value_t = 30.0)]
    pub(crate) soak_minutes: f64,
    /// Where the `soak` case writes its SVG plot.
    #[arg(long, value_name = "PATH", default_value = "docs/scale-soak.svg")]
    pub(crate) soak_svg: std::path::PathBuf,
}

impl ScaleOpts {
    pub(crate) fn cases(&self) -> Vec<Case> {
        if self.cases.is_empty() {
            vec![Case::Million, Case::Queues, Case::Parked, Case::Spread]
        } else {
            self.cases.clone()
        }
    }

    /// Seconds of traffic of a phase whose default is `default`.
    pub(crate) fn duration(&self, default: f64) -> Duration {
        Duration::from_secs_f64(self.duration.unwrap_or(default))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.soak_minutes.is_finite() && self.soak_minutes > 0.0) {
            return Err(Error::msg("--soak-minutes must be more than 0"));
        }
        let seconds = [
            ("duration", self.duration.unwrap_or(1.0)),
            ("idle", self.idle),
        ];
        for (name, value) in seconds {
            if !(value.is_finite() && value > 0.0 && value < 86_400.0) {
                return Err(Error::msg(format!(
                    "--{name} must be a number of seconds > 0"
                )));
            }
        }
        let counts = [
            ("million-partitions", self.million_partitions),
            ("hot-partitions", self.hot_partitions),
            ("queues", self.queues),
            ("small-queues", self.small_queues),
            ("parked", self.parked),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(Error::msg(format!("--{name} must be more than 0")));
            }
        }
        Ok(())
    }

    pub(crate) fn settings(&self) -> serde_json::Value {
        json!({
            "cases": self.cases(),
            "duration_seconds": self.duration,
            "million_partitions": self.million_partitions,
            "hot_partitions": self.hot_partitions,
            "queues": self.queues,
            "small_queues": self.small_queues,
            "parked": self.parked,
            "idle_seconds": self.idle,
            "soak_minutes": self.soak_minutes,
            "soak_svg": self.soak_svg,
        })
    }
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ScaleOpts,
    report: &mut Report,
) -> Result<()> {
    for case in opts.cases() {
        eprintln!("queen-load: scale case {case:?}");
        let result = match case {
            Case::Soak => {
                crate::scale_soak::run(env, common, opts.soak_minutes, &opts.soak_svg, report)
                    .await?;
                continue;
            }
            Case::Million => crate::scale_million::run(env, common, opts).await,
            Case::Queues => crate::scale_queues::run(env, common, opts).await,
            Case::Parked => crate::scale_parked::run(env, common, opts).await,
            Case::Spread => crate::scale_spread::run(env, common, opts).await,
        };
        let value = result.map_err(|error| error.wrap(format!("scale case {case:?}")))?;
        report.scale.push(value);
    }
    Ok(())
}

/// The broker's gauges and counters from `GET /metrics/prometheus`, the
/// unlabelled samples by name (`queen_hotlist_rings`, ...).
pub(crate) struct Metrics(HashMap<String, f64>);

impl Metrics {
    /// Scrape the broker at `addr` (on a connection of its own). The scrape
    /// may read the cluster's figures from PostgreSQL: not inside a window
    /// whose statements are counted.
    pub(crate) async fn scrape(addr: SocketAddr) -> Result<Metrics> {
        let reply = Conn::connect(addr)
            .await?
            .get("/metrics/prometheus")
            .await?;
        if reply.status != StatusCode::OK {
            return Err(Error::msg(format!(
                "/metrics/prometheus answered {}: {}",
                reply.status,
                reply.snippet()
            )));
        }
        let text = std::str::from_utf8(&reply.body).context("/metrics/prometheus text")?;
        let samples = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.split_once(' ')?;
                let value = value.split_whitespace().next()?.parse().ok()?;
                (!name.contains('{')).then(|| (name.to_owned(), value))
            })
            .collect();
        Ok(Metrics(samples))
    }

    /// A sample, `None` when this broker does not export it.
    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }

    /// `names` and their values (`null` when absent), as a JSON object.
    pub(crate) fn json(&self, names: &[&str]) -> serde_json::Value {
        names
            .iter()
            .map(|&name| ((*name).to_owned(), json!(self.get(name))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// `a / b` of two optional figures, `None` unless both are there and `b > 0`.
pub(crate) fn per(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The process's resident set (`VmRSS` of `/proc/<pid>/status`), in bytes.
pub(crate) fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| Error::msg(format!("{path}: no VmRSS line")))
}

/// `pg_stat_database` counters of one database.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct DbStat {
    /// `xact_commit`: statements, for the broker (each runs in its own
    /// transaction).
    pub(crate) commits: i64,
    pub(crate) tup_returned: i64,
    pub(crate) tup_fetched: i64,
    pub(crate) tup_inserted: i64,
    pub(crate) tup_updated: i64,
    /// Buffer accesses (`blks_hit + blks_read`): the work a statement did,
    /// where rows read can mislead (a seq scan of a tiny table reads every
    /// row, cheaply).
    pub(crate) blocks: i64,
}

impl DbStat {
    /// The counters of `dbname` now, read from the admin session (which is
    /// on another database, so it adds nothing to them).
    pub(crate) async fn read(admin: &tokio_postgres::Client, dbname: &str) -> Result<DbStat> {
        let row = admin
            .query_one(
                "SELECT xact_commit, tup_returned, tup_fetched, tup_inserted, tup_updated, \
                        blks_hit + blks_read \
                 FROM pg_stat_database WHERE datname = $1",
                &[&dbname],
            )
            .await
            .with_context(|| format!("read pg_stat_database for {dbname}"))?;
        Ok(DbStat {
            commits: row.get(0),
            tup_returned: row.get(1),
            tup_fetched: row.get(2),
            tup_inserted: row.get(3),
            tup_updated: row.get(4),
            blocks: row.get(5),
        })
    }

    /// What was counted from `before` to these.
    pub(crate) fn since(self, before: DbStat) -> DbStat {
        DbStat {
            commits: self.commits - before.commits,
            tup_returned: self.tup_returned - before.tup_returned,
            tup_fetched: self.tup_fetched - before.tup_fetched,
            tup_inserted: self.tup_inserted - before.tup_inserted,
            tup_updated: self.tup_updated - before.tup_updated,
            blocks: self.blocks - before.blocks,
        }
    }

    /// Rows read: returned by scans plus fetched through indexes.
    pub(crate) fn rows_read(self) -> i64 {
        self.tup_returned + self.tup_fetched
    }
}

/// Rows read per table, catalogs included (`seq_tup_read + idx_tup_fetch`
/// of `pg_stat_all_tables`), to say where a window's rows went. Read on a
/// session of its own, closed at once so its own counts are flushed (they
/// are a few hundred catalog rows).
pub(crate) async fn table_reads(env: &Env, dbname: &str) -> Result<HashMap<String, i64>> {
    let sql = queen_sql::connect::connect_one(&env.connect_config(dbname))
        .await
        .with_context(|| format!("connect to {dbname}"))?;
    let rows = sql
        .query(
            "SELECT schemaname || '.' || relname, \
                    (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::bigint \
             FROM pg_stat_all_tables",
            &[],
        )
        .await
        .context("read pg_stat_all_tables")?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The tables that read the most rows from `before` to `after`, most first
/// (at most 5, none that read nothing): `[{"table", "rows"}, ..]`.
pub(crate) fn top_reads(
    before: &HashMap<String, i64>,
    after: &HashMap<String, i64>,
) -> serde_json::Value {
    let mut reads: Vec<(&String, i64)> = after
        .iter()
        .map(|(table, &n)| (table, n - before.get(table).copied().unwrap_or(0)))
        .filter(|&(_, n)| n > 0)
        .collect();
    reads.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    reads
        .into_iter()
        .take(5)
        .map(|(table, n)| json!({"table": table, "rows": n}))
        .collect()
}

/// `VACUUM (ANALYZE)` the case's database, so autovacuum does not pick the
/// freshly created rows up during an idle window.
pub(crate) async fn vacuum(env: &Env, dbname: &str) -> Result<()> {
    let sql = queen_sql::connect::connect_one(&env.connect_config(dbname))
        .await
        .with_context(|| format!("connect to {dbname}"))?;
    sql.batch_execute("VACUUM (ANALYZE)")
        .await
        .with_context(|| format!("vacuum {dbname}"))
}

/// The payload of a message this scenario pushed (`{"n": .., "sent_us": ..}`).
#[derive(Deserialize, Default)]
pub(crate) struct Data {
    /// The message's number.
    #[serde(default)]
    pub(crate) n: u64,
    /// When it was pushed, microseconds since the Unix epoch.
    #[serde(default)]
    pub(crate) sent_us: u64,
}

/// A push item of this scenario: `{"queue", "partition"?, "payload": {"n",
/// "sent_us"}}`, the broker generating the transaction id.
pub(crate) fn item(queue: &str, partition: Option<&str>, n: u64) -> String {
    let partition = partition.map_or(String::new(), |p| format!("\"partition\":\"{p}\","));
    format!(
        "{{\"queue\":\"{queue}\",{partition}\"payload\":{{\"n\":{n},\"sent_us\":{}}}}}",
        unix_micros()
    )
}

/// Push the `items` (JSON objects from [`item`]) in one request; fail
/// unless every one is `queued`.
pub(crate) async fn push(conn: &mut Conn, items: &[String]) -> Result<()> {
    let body = format!("{{\"items\":[{}]}}", items.join(","));
    conn.push(Bytes::from(body), items.len()).await
}

/// Microseconds since the Unix epoch.
pub(crate) fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|elapsed| u64::try_from(elapsed.as_micros()).ok())
        .unwrap_or_default()
}

/// splitmix64: cheap, good enough to pick partitions and queues.
pub(crate) struct Rng(u64);

impl Rng {
    /// Seeded from a fresh random UUID.
    pub(crate) fn new() -> Rng {
        Rng(uuid::Uuid::new_v4().as_u64_pair().0)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(z % n).unwrap_or(0)
    }
}

/// A figure for a table cell: `-` when absent.
pub(crate) fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| fixed(v, decimals))
}

/// A table of figures: a name column, then one column per `columns` title.
pub(crate) fn figures(columns: &[&str]) -> Table {
    let mut titles = vec![("figure", 44)];
    titles.extend(columns.iter().map(|&title| (title, 14)));
    Table::new(&titles)
}

/// Add a row comparing a `big` and a `small` figure, with `big / small`.
pub(crate) fn compare(
    table: &mut Table,
    name: &str,
    big: Option<f64>,
    small: Option<f64>,
    decimals: usize,
) {
    table.row([
        name.to_owned(),
        cell(big, decimals),
        cell(small, decimals),
        cell(per(big, small), 2),
    ]);
}
