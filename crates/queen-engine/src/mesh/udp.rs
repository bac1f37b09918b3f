//! The UDP transport: tagged datagrams to `QUEEN_PEERS`.
//!
//! Each `QUEEN_PEERS` entry is `host:port`; a name resolving to several
//! addresses (a Kubernetes headless service) counts as several peers, and
//! names are resolved again every [`RESOLVE_EVERY`](super::RESOLVE_EVERY).
//! A datagram is a batch and its tag (`wire.rs`); one that does not verify,
//! does not decode, or was seen before (replay guard) is dropped and
//! counted. This broker's own datagrams (a peer list naming itself) are
//! ignored by their sender id.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::net::UdpSocket;

use super::wire;
use super::{Apply, Counters};

/// Largest batch in one datagram (below a typical 1500-byte MTU with IP and
/// UDP headers and the tag, so a datagram is never fragmented).
pub(crate) const MAX_BATCH: usize = 1200;

/// Peer addresses resolved at most (client-independent, but bounded anyway).
const MAX_PEER_ADDRESSES: usize = 256;

pub(crate) struct Udp {
    socket: UdpSocket,
    key: [u8; 32],
    names: Vec<String>,
    peers: RwLock<Vec<SocketAddr>>,
    guard: Mutex<wire::ReplayGuard>,
}

impl Udp {
    /// Use `socket` for peers `names` with `secret`.
    pub(crate) fn new(
        socket: &std::net::UdpSocket,
        names: Vec<String>,
        secret: &[u8],
    ) -> std::io::Result<Udp> {
        let socket = socket.try_clone()?;
        socket.set_nonblocking(true)?;
        Ok(Udp {
            socket: UdpSocket::from_std(socket)?,
            key: wire::mac_key(secret),
            names,
            peers: RwLock::new(Vec::new()),
            guard: Mutex::new(wire::ReplayGuard::default()),
        })
    }

    /// Send `batch`, tagged, to every peer; false when any send failed.
    pub(crate) async fn send(&self, batch: Vec<u8>) -> bool {
        let datagram = wire::seal(&self.key, batch);
        let peers = self.peers.read().clone();
        let mut ok = true;
        for peer in peers {
            ok &= self.socket.send_to(&datagram, peer).await.is_ok();
        }
        ok
    }

    /// `QUEEN_PEERS` as configured.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// What the names resolved to last.
    pub(crate) fn resolved(&self) -> Vec<SocketAddr> {
        self.peers.read().clone()
    }

    /// Resolve every peer name now.
    async fn resolve(&self) {
        let mut resolved = Vec::new();
        for name in &self.names {
            match tokio::net::lookup_host(name.as_str()).await {
                Ok(addresses) => resolved.extend(addresses),
                Err(error) => {
                    tracing::warn!(peer = %name, %error, "cannot resolve a QUEEN_PEERS entry");
                }
            }
        }
        resolved.sort_unstable();
        resolved.dedup();
        resolved.truncate(MAX_PEER_ADDRESSES);
        *self.peers.write() = resolved;
    }
}

/// Resolve the peers now and every [`RESOLVE_EVERY`](super::RESOLVE_EVERY).
pub(crate) async fn resolve_loop(udp: Arc<Udp>) {
    loop {
        udp.resolve().await;
        tokio::time::sleep(super::RESOLVE_EVERY).await;
    }
}

/// Receive datagrams until the task is aborted.
pub(crate) async fn receive_loop(
    udp: Arc<Udp>,
    sender_id: u64,
    counters: Arc<Counters>,
    apply: Apply,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((len, from)) = udp.socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some(batch) = wire::open(&udp.key, &buf[..len]) else {
            counters.dropped_unsigned.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(batch) = wire::decode(batch) else {
            counters.dropped_malformed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if batch.sender == sender_id {
            continue;
        }
        if !udp.guard.lock().accept(&batch, wire::now_ms()) {
            counters.dropped_replayed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        super::received(batch, Some(from), sender_id, &counters, &apply);
    }
}
