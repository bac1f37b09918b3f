//! `GET /api/v1/system/shared-state` (admin): what this broker knows of the
//! other brokers on its database, the mesh (`queen_engine` `mesh/`), in the
//! reference's snake_case shape.
//!
//! `{enabled, running, server_id, transport: {mode, configured_peers,
//! resolved_peers, peer_count}, peers: [{server_id, address, last_heard,
//! seconds_since_heard, batches, hints}], hints: {sent, sent_batches,
//! send_errors, dropped_queue_full, received, received_batches,
//! dropped_unsigned, dropped_malformed, dropped_replayed}, caches:
//! {queue_config_entries, hotlist_queues, hotlist_partitions, wake_gates,
//! ack_registry_batches, dedup_cache_bytes}, maintenance_mode,
//! pop_maintenance_mode}`. `peers` are the brokers heard from (most recent
//! first; a broker's id is new at each start), `caches` what the hints
//! keep fresh. Without a mesh, `enabled` is false with a `reason`, and
//! there are no `transport`, `peers` or `hints`.

use std::time::SystemTime;

use hyper::StatusCode;
use queen_engine::Engine;
use serde_json::{json, Value};

use crate::response::{self, Response};

pub(crate) fn get(engine: &Engine) -> Response {
    let observer = engine.observe();
    let memory = observer.memory_stats();
    let (hotlist_queues, hotlist_partitions) = observer.hotlist_size();
    let mut body = json!({
        "caches": {
            "queue_config_entries": memory.queue_cache_entries,
            "hotlist_queues": hotlist_queues,
            "hotlist_partitions": hotlist_partitions,
            "wake_gates": memory.wake_gates,
            "ack_registry_batches": memory.ack_registry_batches,
            "dedup_cache_bytes": memory.dedup_cache_bytes,
        },
        "maintenance_mode": engine.cluster_state().maintenance(),
        "pop_maintenance_mode": engine.cluster_state().pop_maintenance(),
    });
    let Some(mesh) = observer.mesh_state() else {
        body["enabled"] = json!(false);
        body["running"] = json!(false);
        body["reason"] = json!("no mesh: QUEEN_PEERS is empty and QUEEN_MESH_NOTIFY is 0");
        return response::json(StatusCode::OK, &body);
    };
    let now = SystemTime::now();
    let peers: Vec<Value> = mesh
        .heard
        .iter()
        .map(|peer| {
            let ago = now
                .duration_since(peer.last_heard)
                .unwrap_or_default()
                .as_secs_f64();
            json!({
                "server_id": format!("{:016x}", peer.server_id),
                "address": peer.address.map(|address| address.to_string()),
                "last_heard": crate::wire::format_millis(peer.last_heard),
                "seconds_since_heard": (ago * 10.0).round() / 10.0,
                "batches": peer.batches,
                "hints": peer.hints,
            })
        })
        .collect();
    let resolved: Vec<String> = mesh.resolved.iter().map(ToString::to_string).collect();
    let stats = mesh.stats;
    body["enabled"] = json!(true);
    body["running"] = json!(true);
    body["server_id"] = json!(format!("{:016x}", mesh.server_id));
    body["transport"] = json!({
        "mode": mesh.transport,
        "configured_peers": mesh.peers,
        "peer_count": resolved.len(),
        "resolved_peers": resolved,
    });
    body["peers"] = json!(peers);
    body["hints"] = json!({
        "sent": stats.sent_hints,
        "sent_batches": stats.sent_batches,
        "send_errors": stats.send_errors,
        "dropped_queue_full": stats.dropped_full,
        "received": stats.received_hints,
        "received_batches": stats.received_batches,
        "dropped_unsigned": stats.dropped_unsigned,
        "dropped_malformed": stats.dropped_malformed,
        "dropped_replayed": stats.dropped_replayed,
    });
    response::json(StatusCode::OK, &body)
}
