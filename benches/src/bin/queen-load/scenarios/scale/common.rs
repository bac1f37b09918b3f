//! What the `scale` cases share: the settings, their push items and
//! payloads, a small random generator, and the vacuum before an idle window.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::payload::Bodies;
use crate::client::Conn;
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::output::report::Row;

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

    pub(crate) fn settings(&self, _: &Bodies) -> serde_json::Value {
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

/// One case's figures, one JSON object with a `case` field naming it; its
/// tables are printed as it finishes.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub(crate) struct ScaleCase(pub(crate) serde_json::Value);

impl Row for ScaleCase {
    const KEY: &'static str = "scale";

    fn title() -> Option<String> {
        None
    }

    fn table(_: &[ScaleCase]) -> String {
        String::new()
    }
}
