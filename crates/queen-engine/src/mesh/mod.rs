//! The mesh: what one broker tells the others sharing its database
//! (decisions.md §7).
//!
//! After a push commits, every peer's hot-list learns the partition has data
//! and its parked pops on the queue wake; after a configure, a queue or
//! group deletion, a seek or a maintenance switch, peers drop what they
//! cached. These are *hints*: lossy by design. A lost push hint costs at
//! most the long-poll backoff or one hot-list reseed (`QUEEN_HOTLIST_RESEED_MS`),
//! a lost invalidation at most the cache's own bound (a queue's config 5 s,
//! maintenance flags one refresh), never a message.
//!
//! Outbound, [`MeshOut::send`] never waits: hints go into a bounded queue
//! ([`MAX_PENDING`]; past it they are dropped and counted) that one task
//! drains in rounds, duplicates removed: a hint after a quiet spell leaves
//! at once, and under load a round goes at most every [`UDP_SPACING`] (1 ms)
//! or [`NOTIFY_SPACING`] (5 ms), carrying everything that arrived meanwhile. Two transports carry batches:
//! - UDP (`udp.rs`) to `QUEEN_PEERS`, each datagram tagged with a MAC
//!   over `QUEEN_SYNC_SECRET`; unsigned, forged and replayed datagrams are
//!   dropped and counted;
//! - without peers, PostgreSQL `LISTEN`/`NOTIFY` (`notify.rs`) on a dedicated
//!   connection: one `pg_notify` per batch, on a pooled connection after
//!   the commits it reports, never inside a push transaction.
//!
//! Inbound, a batch from another broker is applied through the engine's
//! narrow [`Apply`] callback (a batch of this broker's own is ignored).

mod changes;
mod notify;
mod udp;
pub(crate) mod wire;

pub(crate) use changes::{Changes, Reread};

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

/// One thing a peer should know.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Hint {
    /// A partition of the queue has new data (a push committed, an ack left
    /// data behind a cursor).
    Pushed {
        /// The queue's tenant.
        tenant: String,
        /// The queue.
        queue: String,
        /// The partition.
        partition: String,
    },
    /// The queue was configured: cached settings are stale.
    QueueChanged {
        /// The queue's tenant.
        tenant: String,
        /// The queue.
        queue: String,
    },
    /// The queue was deleted.
    QueueDeleted {
        /// The queue's tenant.
        tenant: String,
        /// The queue.
        queue: String,
    },
    /// A consumer group's cursors were deleted or moved (on one queue, or
    /// on every queue).
    GroupChanged {
        /// The tenant.
        tenant: String,
        /// The group.
        group: String,
        /// The queue, or every queue of the tenant.
        queue: Option<String>,
    },
    /// A maintenance flag changed.
    Maintenance,
}

/// How the mesh reaches its peers.
#[derive(Debug, Clone)]
pub enum MeshTransport {
    /// UDP datagrams to `QUEEN_PEERS`.
    Udp {
        /// The socket, bound by the caller to `QUEEN_SYNC_PORT` (so a port
        /// that cannot be bound stops the boot there).
        socket: Arc<std::net::UdpSocket>,
        /// `host:port` entries; a name resolving to several addresses is
        /// several peers, resolved again every `RESOLVE_EVERY`.
        peers: Vec<String>,
        /// `QUEEN_SYNC_SECRET`.
        secret: Vec<u8>,
    },
    /// PostgreSQL `LISTEN`/`NOTIFY` through the shared database, over a
    /// dedicated connection made with these settings.
    Notify(Box<tokio_postgres::Config>),
}

/// The mesh's settings.
#[derive(Debug, Clone)]
pub struct MeshConfig {
    /// The transport.
    pub transport: MeshTransport,
    /// Test hook: drop every inbound batch (peers' hints are lost), to show
    /// what a lost hint costs.
    pub drop_inbound: bool,
}

/// Hints waiting to be sent at most; past this they are dropped (counted).
pub(crate) const MAX_PENDING: usize = 4096;
/// Hints of one outbound round at most.
const MAX_ROUND: usize = 1024;
/// The least time between two UDP rounds: a hint after a quiet spell
/// leaves at once; under load, what arrives within this is one round.
pub(crate) const UDP_SPACING: Duration = Duration::from_millis(1);
/// The same for `NOTIFY`, where each round is a statement and a commit of
/// its own: at most 200 per second per broker.
pub(crate) const NOTIFY_SPACING: Duration = Duration::from_millis(5);
/// How often `QUEEN_PEERS` names are resolved again.
pub(crate) const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// The mesh's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) sent_hints: AtomicU64,
    pub(crate) sent_batches: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) received_hints: AtomicU64,
    pub(crate) received_batches: AtomicU64,
    pub(crate) dropped_unsigned: AtomicU64,
    pub(crate) dropped_malformed: AtomicU64,
    pub(crate) dropped_replayed: AtomicU64,
    /// The brokers heard from, by sender id: at most
    /// [`wire::MAX_SENDERS`], the longest silent dropped first.
    heard: parking_lot::Mutex<HashMap<u64, Heard>>,
}

/// What this broker heard from one other.
#[derive(Debug, Clone, Copy)]
struct Heard {
    address: Option<SocketAddr>,
    last: SystemTime,
    batches: u64,
    hints: u64,
}

/// Another broker this one heard from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHeard {
    /// Its random id (new at each start).
    pub server_id: u64,
    /// The address its last datagram came from (UDP only).
    pub address: Option<SocketAddr>,
    /// When its last batch arrived.
    pub last_heard: SystemTime,
    /// Batches received from it.
    pub batches: u64,
    /// Hints received from it.
    pub hints: u64,
}

/// What this broker knows of its mesh.
#[derive(Debug, Clone)]
pub struct MeshState {
    /// `udp` or `notify`.
    pub transport: &'static str,
    /// This broker's id in its batches.
    pub server_id: u64,
    /// `QUEEN_PEERS` as configured (UDP).
    pub peers: Vec<String>,
    /// What they resolved to last (UDP).
    pub resolved: Vec<SocketAddr>,
    /// The brokers heard from, most recent first.
    pub heard: Vec<PeerHeard>,
    /// The counters.
    pub stats: MeshStats,
}

/// What the mesh has done since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// Hints sent.
    pub sent_hints: u64,
    /// Batches (datagrams or notifications) sent.
    pub sent_batches: u64,
    /// Batches that failed to leave.
    pub send_errors: u64,
    /// Hints dropped because the outbound queue was full.
    pub dropped_full: u64,
    /// Hints received from peers and applied.
    pub received_hints: u64,
    /// Batches received from peers.
    pub received_batches: u64,
    /// Datagrams without a valid tag.
    pub dropped_unsigned: u64,
    /// Batches that did not decode.
    pub dropped_malformed: u64,
    /// Batches seen before, or sent too long ago.
    pub dropped_replayed: u64,
}

impl Counters {
    /// Remember a batch from `sender` (at `address`, over UDP).
    fn heard(&self, sender: u64, address: Option<SocketAddr>, hints: usize) {
        let mut heard = self.heard.lock();
        if !heard.contains_key(&sender) && heard.len() >= wire::MAX_SENDERS {
            if let Some(oldest) = heard
                .iter()
                .min_by_key(|(_, peer)| peer.last)
                .map(|(sender, _)| *sender)
            {
                heard.remove(&oldest);
            }
        }
        let peer = heard.entry(sender).or_insert(Heard {
            address,
            last: SystemTime::now(),
            batches: 0,
            hints: 0,
        });
        peer.address = address.or(peer.address);
        peer.last = SystemTime::now();
        peer.batches += 1;
        peer.hints += hints as u64;
    }

    fn heard_list(&self) -> Vec<PeerHeard> {
        let mut list: Vec<PeerHeard> = self
            .heard
            .lock()
            .iter()
            .map(|(sender, peer)| PeerHeard {
                server_id: *sender,
                address: peer.address,
                last_heard: peer.last,
                batches: peer.batches,
                hints: peer.hints,
            })
            .collect();
        list.sort_by_key(|peer| std::cmp::Reverse(peer.last_heard));
        list
    }

    fn snapshot(&self) -> MeshStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MeshStats {
            sent_hints: get(&self.sent_hints),
            sent_batches: get(&self.sent_batches),
            send_errors: get(&self.send_errors),
            dropped_full: get(&self.dropped_full),
            received_hints: get(&self.received_hints),
            received_batches: get(&self.received_batches),
            dropped_unsigned: get(&self.dropped_unsigned),
            dropped_malformed: get(&self.dropped_malformed),
            dropped_replayed: get(&self.dropped_replayed),
        }
    }
}

/// How a received batch reaches the engine.
pub(crate) type Apply = Arc<dyn Fn(Vec<Hint>) + Send + Sync>;

/// The sending half, cloned into every writer (through `Ready`) and the
/// engine's lifecycle calls.
#[derive(Clone)]
pub(crate) struct MeshOut {
    tx: mpsc::Sender<Hint>,
    counters: Arc<Counters>,
    sender_id: u64,
    /// The UDP transport (its peers), or none for `NOTIFY`.
    udp: Option<Arc<udp::Udp>>,
}

impl MeshOut {
    /// What the mesh has sent and received.
    pub(crate) fn stats(&self) -> MeshStats {
        self.counters.snapshot()
    }

    /// What this broker knows of its mesh.
    pub(crate) fn state(&self) -> MeshState {
        let (transport, peers, resolved) = match &self.udp {
            Some(udp) => ("udp", udp.names().to_vec(), udp.resolved()),
            None => ("notify", Vec::new(), Vec::new()),
        };
        MeshState {
            transport,
            server_id: self.sender_id,
            peers,
            resolved,
            heard: self.counters.heard_list(),
            stats: self.stats(),
        }
    }

    /// Queue `hint` for the peers; never waits (a full queue drops it).
    pub(crate) fn send(&self, hint: Hint) {
        if self.tx.try_send(hint).is_err() {
            self.counters.dropped_full.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The running mesh.
pub(crate) struct Mesh {
    out: MeshOut,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Mesh {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A transport's sending side.
enum Sender {
    Udp(Arc<udp::Udp>),
    Notify(deadpool_postgres::Pool),
}

impl Mesh {
    /// Start the mesh: the sender task and the transport's receiver.
    /// `None`, logged, when the UDP socket cannot be used: the broker runs
    /// on, but its peers do not hear of its pushes.
    pub(crate) fn start(
        config: &MeshConfig,
        pool: deadpool_postgres::Pool,
        apply: Apply,
    ) -> Option<Mesh> {
        Mesh::try_start(config, pool, apply)
            .map_err(|error| {
                tracing::error!(%error, "cannot start the mesh; peers will not hear of this broker's pushes");
            })
            .ok()
    }

    fn try_start(
        config: &MeshConfig,
        pool: deadpool_postgres::Pool,
        apply: Apply,
    ) -> std::io::Result<Mesh> {
        let counters = Arc::new(Counters::default());
        let sender_id = rand_u64();
        let (tx, rx) = mpsc::channel(MAX_PENDING);
        let apply: Apply = if config.drop_inbound {
            Arc::new(|_| {})
        } else {
            apply
        };
        let mut tasks = Vec::new();
        let mut udp_out = None;
        let sender = match &config.transport {
            MeshTransport::Udp {
                socket,
                peers,
                secret,
            } => {
                let udp = Arc::new(udp::Udp::new(socket, peers.clone(), secret)?);
                tasks.push(tokio::spawn(udp::resolve_loop(Arc::clone(&udp))));
                tasks.push(tokio::spawn(udp::receive_loop(
                    Arc::clone(&udp),
                    sender_id,
                    Arc::clone(&counters),
                    apply,
                )));
                udp_out = Some(Arc::clone(&udp));
                Sender::Udp(udp)
            }
            MeshTransport::Notify(pg) => {
                tasks.push(tokio::spawn(notify::listen_loop(
                    (**pg).clone(),
                    sender_id,
                    Arc::clone(&counters),
                    apply,
                )));
                Sender::Notify(pool)
            }
        };
        tasks.push(tokio::spawn(send_loop(
            rx,
            sender,
            sender_id,
            Arc::clone(&counters),
        )));
        Ok(Mesh {
            out: MeshOut {
                tx,
                counters,
                sender_id,
                udp: udp_out,
            },
            tasks,
        })
    }

    /// The sending half.
    pub(crate) fn out(&self) -> MeshOut {
        self.out.clone()
    }
}

/// A datagram as a peer with `secret` and sender id `sender` would send
/// it: batch number `seq` holding one push hint (for tests that forge and
/// replay datagrams).
#[doc(hidden)]
pub fn test_datagram(secret: &[u8], sender: u64, seq: u64) -> Vec<u8> {
    let mut next = seq.saturating_sub(1);
    let hints = [Hint::Pushed {
        tenant: crate::naming::DEFAULT_TENANT.to_owned(),
        queue: "forged".to_owned(),
        partition: "p".to_owned(),
    }];
    let batch = wire::encode(sender, &mut next, &hints, udp::MAX_BATCH)
        .into_iter()
        .next()
        .unwrap_or_default();
    wire::seal(&wire::mac_key(secret), batch)
}

/// A random id for this process's batches.
fn rand_u64() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]))
}

/// Drain the outbound queue in rounds: wait for a hint, wait out the
/// spacing since the last round, take everything queued, drop duplicates,
/// send.
async fn send_loop(
    mut rx: mpsc::Receiver<Hint>,
    sender: Sender,
    sender_id: u64,
    counters: Arc<Counters>,
) {
    let mut seq = 0u64;
    let spacing = match &sender {
        Sender::Udp(_) => UDP_SPACING,
        Sender::Notify(_) => NOTIFY_SPACING,
    };
    let mut last_round = tokio::time::Instant::now() - spacing;
    loop {
        let Some(first) = rx.recv().await else {
            return;
        };
        // A round at most every `spacing`: right away after a quiet
        // spell, else gathering until the spacing is over.
        tokio::time::sleep_until(last_round + spacing).await;
        last_round = tokio::time::Instant::now();
        let mut seen = HashSet::new();
        let mut round = Vec::new();
        for hint in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            if seen.insert(hint.clone()) {
                round.push(hint);
            }
            if round.len() >= MAX_ROUND {
                break;
            }
        }
        counters
            .sent_hints
            .fetch_add(round.len() as u64, Ordering::Relaxed);
        match &sender {
            Sender::Udp(udp) => {
                for batch in wire::encode(sender_id, &mut seq, &round, udp::MAX_BATCH) {
                    counters.sent_batches.fetch_add(1, Ordering::Relaxed);
                    if !udp.send(batch).await {
                        counters.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Sender::Notify(pool) => {
                let batches = wire::encode(sender_id, &mut seq, &round, notify::MAX_BATCH);
                counters
                    .sent_batches
                    .fetch_add(batches.len() as u64, Ordering::Relaxed);
                if !notify::send(pool, &batches).await {
                    counters.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Count and apply one received batch (not this broker's own), which came
/// from `address` over UDP.
fn received(
    batch: wire::Batch,
    address: Option<SocketAddr>,
    sender_id: u64,
    counters: &Counters,
    apply: &Apply,
) {
    if batch.sender == sender_id {
        return;
    }
    counters.heard(batch.sender, address, batch.hints.len());
    counters.received_batches.fetch_add(1, Ordering::Relaxed);
    counters
        .received_hints
        .fetch_add(batch.hints.len() as u64, Ordering::Relaxed);
    apply(batch.hints);
}
