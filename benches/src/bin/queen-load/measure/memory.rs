//! The broker's memory: its resident set from `/proc`, and its own account
//! of it, from `GET /metrics/prometheus` (gauges by name) and `GET /metrics`
//! (the bounded maps).

use std::collections::HashMap;
use std::net::SocketAddr;

use hyper::StatusCode;
use serde::Serialize;
use serde_json::json;

use crate::client::Conn;
use crate::error::{Context, Error, Result};

/// VmRSS and RssAnon of process `pid`, KiB.
pub(crate) fn rss(pid: u32) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
    };
    let vm_rss = field("VmRSS:").ok_or_else(|| Error::msg(format!("{path}: no VmRSS")))?;
    Ok((vm_rss, field("RssAnon:").unwrap_or(0)))
}

/// The process's resident set (`VmRSS`), in bytes.
pub(crate) fn rss_bytes(pid: u32) -> Result<u64> {
    Ok(rss(pid)?.0 * 1024)
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

/// The `memory` section of the broker's `GET /metrics`: its bounded maps.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct BrokerMemory {
    /// False when the scrape failed (the other fields are then 0).
    pub(crate) scraped: bool,
    pub(crate) rss_bytes: u64,
    pub(crate) ack_registry_bytes: u64,
    pub(crate) dedup_cache_bytes: u64,
    pub(crate) wake_gates: u64,
    pub(crate) hotlist_entries: u64,
}

/// Scrape `GET /metrics` on `conn` (reconnecting once when it fails).
pub(crate) async fn broker_memory(addr: SocketAddr, conn: &mut Conn) -> BrokerMemory {
    let mut reply = conn.get("/metrics").await;
    if reply.is_err() {
        if let Ok(fresh) = Conn::connect(addr).await {
            *conn = fresh;
            reply = conn.get("/metrics").await;
        }
    }
    let Some(answer) = reply
        .ok()
        .filter(|reply| reply.status.is_success())
        .and_then(|reply| serde_json::from_slice::<serde_json::Value>(&reply.body).ok())
    else {
        return BrokerMemory::default();
    };
    let memory = &answer["memory"];
    let field = |name: &str| memory[name].as_u64().unwrap_or(0);
    BrokerMemory {
        scraped: memory.is_object(),
        rss_bytes: field("rss"),
        ack_registry_bytes: field("ackRegistryBytes"),
        dedup_cache_bytes: field("dedupCacheBytes"),
        wake_gates: field("wakeGates"),
        hotlist_entries: field("hotlistEntries"),
    }
}
