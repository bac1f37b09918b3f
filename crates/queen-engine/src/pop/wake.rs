//! Wake gates: one per queue, a generation counter plus a notify.
//!
//! Who wakes how many: a push (or an ack-promote) of one partition wakes one
//! parked pop per consumer group parked on the queue (and every pop parked on
//! that very partition), not every pop parked on the queue: ten thousand
//! consumers parked on 100 queues used to wake a hundred pops per push,
//! all but one of which found nothing and parked again. A woken
//! pop that is cancelled before it runs hands its wake to the next waiter
//! (`tokio::sync::Notify::notify_one`). Everything else that opens a gate
//! (a lease or hold ending, a group's cursors moved, a queue deleted,
//! maintenance, shutdown) wakes every waiter.
//!
//! Who waits: a parked long-poll pop, holding no permit, no pooled connection
//! and no lock. Who wakes: a local push after commit, an ack that leaves data
//! behind the cursor, the hot-list's wheel when a lease or a visibility hold
//! ends, and peers' mesh hints; each of those also opens the one
//! discovery gate that namespace/task pops wait on. What a missed wake costs: at most one
//! backoff interval (`POP_WAIT_MAX_INTERVAL_MS`), because a parked pop also
//! re-polls on a timer; the generation counter closes the race between
//! "checked, found nothing" and "started waiting".
//!
//! On the SQL candidate path (`QUEEN_HOTLIST=0`) a gate also carries the
//! pushed-partition hints (life-of-a-pop step 7): the partitions pushes and
//! ack-promotes named since a woken pop last drained them, at most
//! [`MAX_HINTS`] distinct names (more are dropped: the wildcard scan, the
//! backstop, finds them).
//!
//! Memory: gates are keyed by the queue names pops ask for, which clients
//! choose. A gate nobody holds (no pop parked on it) is dropped when the map
//! has grown to twice its size after the last sweep (at least
//! [`SWEEP_FLOOR`] gates), so the map holds the gates of parked pops plus at
//! most as many idle ones. A gate made again starts at a generation no
//! earlier gate of any name had, so a cached "no such queue" read under the
//! old gate is never taken for current (`queue_cache.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::naming::{queue_key, split_queue_key};

/// One queue's gate.
#[derive(Debug, Default)]
pub(super) struct Gate {
    generation: AtomicU64,
    notify: Notify,
    /// Set when the queue was deleted: parked pops answer empty at once.
    closed: std::sync::atomic::AtomicBool,
    /// Pushed-partition hints (SQL path only), at most [`MAX_HINTS`].
    hints: Mutex<Vec<String>>,
    /// Pops waiting on the gate now (the parked pops of `/metrics` and the
    /// statistics rows).
    parked: AtomicUsize,
    /// The waiters by who they are, each kind with its own notify (for
    /// [`Gate::open_partition`]) and how many wait on it. An entry lives only
    /// while a pop waits on it, so the map is bounded by the parked pops.
    waiters: Mutex<HashMap<WaitKey, (Arc<Notify>, usize)>>,
}

/// Who a parked pop is, for the wakes of one partition's new data: its
/// consumer group, and its partition when it pops only that one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct WaitKey {
    group: Box<str>,
    partition: Option<Box<str>>,
}

impl WaitKey {
    pub(super) fn new(group: &str, partition: Option<&str>) -> WaitKey {
        WaitKey {
            group: group.into(),
            partition: partition.map(Into::into),
        }
    }
}

/// Takes a waiter off its gate's map when its wait ends or is cancelled.
struct Registered<'g> {
    gate: &'g Gate,
    key: &'g WaitKey,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut waiters = self.gate.waiters.lock();
        if let Some(entry) = waiters.get_mut(self.key) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                waiters.remove(self.key);
            }
        }
    }
}

/// Counts one waiter of a gate while it waits (dropped when the wait ends or
/// is cancelled).
struct Parked<'g>(&'g AtomicUsize);

impl<'g> Parked<'g> {
    fn new(count: &'g AtomicUsize) -> Parked<'g> {
        count.fetch_add(1, Ordering::Relaxed);
        Parked(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The most pushed-partition hints one gate keeps.
pub(super) const MAX_HINTS: usize = 64;

impl Gate {
    /// The current generation; pass it to [`Gate::wait_past`].
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// True once the queue was deleted: waiters should stop waiting.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Open the gate: every waiter whose generation is older wakes.
    pub(super) fn open(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Open the gate for new data in `partition`: one waiter of each group
    /// waiting on the whole queue wakes, and every waiter on that partition.
    /// A pop that finds nothing re-checks the generation and parks again; the
    /// others of its group stay parked.
    pub(super) fn open_partition(&self, partition: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let waiters = self.waiters.lock();
        for (key, (notify, _)) in waiters.iter() {
            match key.partition.as_deref() {
                None => notify.notify_one(),
                Some(name) if name == partition => notify.notify_waiters(),
                Some(_) => {}
            }
        }
    }

    /// Remember that `partition` has new data, unless the gate already holds
    /// [`MAX_HINTS`] names.
    fn hint(&self, partition: &str) {
        let mut hints = self.hints.lock();
        if hints.len() < MAX_HINTS && !hints.iter().any(|name| name == partition) {
            hints.push(partition.to_owned());
        }
    }

    /// Take every hint: the woken pop that drains them tries these partitions
    /// first.
    pub(super) fn take_hints(&self) -> Vec<String> {
        std::mem::take(&mut *self.hints.lock())
    }

    /// Give back hints a woken pop took but did not visit.
    pub(super) fn return_hints(&self, names: impl IntoIterator<Item = String>) {
        for name in names {
            self.hint(&name);
        }
    }

    /// Wait, as `key`, until the gate was opened after `seen` was read for
    /// everyone or for `key` ([`Gate::open_partition`]). Returns at once if
    /// that already happened.
    pub(super) async fn wait_past(&self, seen: u64, key: &WaitKey) {
        let _parked = Parked::new(&self.parked);
        let own = {
            let mut waiters = self.waiters.lock();
            let entry = waiters
                .entry(key.clone())
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            entry.1 += 1;
            Arc::clone(&entry.0)
        };
        let _registered = Registered { gate: self, key };
        loop {
            let everyone = self.notify.notified();
            let mine = own.notified();
            tokio::pin!(everyone);
            tokio::pin!(mine);
            // Register before checking, so an `open` between the check and the
            // await is not lost.
            everyone.as_mut().enable();
            mine.as_mut().enable();
            if self.generation() != seen {
                return;
            }
            tokio::select! {
                () = &mut everyone => {}
                () = &mut mine => {}
            }
        }
    }
}

/// The name of a tenant's discovery gate (under its `naming::queue_key`): no
/// queue name can hold a NUL.
pub(super) const DISCOVERY: &str = "\u{0}discovery";

/// Whether gate key `name` is a tenant's discovery gate.
fn is_discovery(name: &str) -> bool {
    split_queue_key(name).1 == DISCOVERY
}

/// Idle gates are swept once the map holds at least this many.
pub(super) const SWEEP_FLOOR: usize = 1024;

/// Every queue's gate, created on first use, by `naming::queue_key`.
#[derive(Debug, Default)]
pub(super) struct WakeGates {
    gates: Mutex<Gates>,
    /// Whether gates collect pushed-partition hints (the SQL path).
    hints: bool,
}

#[derive(Debug, Default)]
struct Gates {
    by_queue: HashMap<String, Arc<Gate>>,
    /// Gates made so far: a new gate's generations start at `made << 32`.
    made: u64,
    /// The size at which idle gates are next swept.
    sweep_at: usize,
}

impl Gates {
    /// Drop the gates nobody but the map holds (the discovery gate stays).
    fn sweep(&mut self) {
        self.by_queue
            .retain(|name, gate| is_discovery(name) || Arc::strong_count(gate) > 1);
        self.sweep_at = (self.by_queue.len() * 2).max(SWEEP_FLOOR);
    }
}

impl WakeGates {
    /// Gates that collect pushed-partition hints when `hints` (the SQL
    /// candidate path; the hot-list path has its rings instead).
    pub(super) fn new(hints: bool) -> WakeGates {
        WakeGates {
            gates: Mutex::default(),
            hints,
        }
    }

    /// The gate of `queue`.
    pub(super) fn gate(&self, queue: &str) -> Arc<Gate> {
        let mut gates = self.gates.lock();
        if let Some(gate) = gates.by_queue.get(queue) {
            return Arc::clone(gate);
        }
        if gates.by_queue.len() >= gates.sweep_at.max(SWEEP_FLOOR) {
            gates.sweep();
        }
        gates.made += 1;
        let gate = Arc::new(Gate {
            generation: AtomicU64::new(gates.made << 32),
            ..Gate::default()
        });
        gates.by_queue.insert(queue.to_owned(), Arc::clone(&gate));
        gate
    }

    /// Gates held now (for tests and the operator).
    pub(super) fn len(&self) -> usize {
        self.gates.lock().by_queue.len()
    }

    /// The queues (by `naming::queue_key`) with pops parked on their gate
    /// now, with how many (a tenant's discovery gate under the empty queue
    /// name). One pass over the gate map.
    pub(super) fn parked(&self) -> Vec<(String, usize)> {
        let gates = self.gates.lock();
        gates
            .by_queue
            .iter()
            .filter_map(|(name, gate)| {
                let parked = gate.parked.load(Ordering::Relaxed);
                let (tenant, queue) = split_queue_key(name);
                let queue = if queue == DISCOVERY { "" } else { queue };
                (parked > 0).then(|| (queue_key(tenant, queue).into_owned(), parked))
            })
            .collect()
    }

    /// The generation of `queue`'s gate (0 when nobody asked for it yet).
    pub(super) fn generation(&self, queue: &str) -> u64 {
        self.gates
            .lock()
            .by_queue
            .get(queue)
            .map_or(0, |gate| gate.generation())
    }

    /// Open `queue`'s gate, if anyone ever asked for it, and the discovery
    /// gate: whatever may wake a pop of the queue (a push, an ack-promote, a
    /// lease or hold ending) may wake a discovery pop that would find it.
    pub(super) fn open(&self, queue: &str) {
        self.open_with(queue, None);
    }

    /// [`WakeGates::open`] because `partition` of `queue` has new data (a
    /// push committed, an ack left data behind the cursor): on the SQL path
    /// the gate also remembers the partition for the pop it wakes.
    pub(super) fn open_partition(&self, queue: &str, partition: &str) {
        self.open_with(queue, Some(partition));
    }

    fn open_with(&self, queue: &str, partition: Option<&str>) {
        let discovery_key = queue_key(split_queue_key(queue).0, DISCOVERY);
        let (gate, discovery) = {
            let gates = self.gates.lock();
            (
                gates.by_queue.get(queue).cloned(),
                gates.by_queue.get(&*discovery_key).cloned(),
            )
        };
        if let (Some(gate), Some(partition), true) = (&gate, partition, self.hints) {
            gate.hint(partition);
        }
        if let Some(gate) = gate {
            match partition {
                Some(partition) => gate.open_partition(partition),
                None => gate.open(),
            }
        }
        if let Some(discovery) = discovery {
            discovery.open();
        }
    }

    /// The gate `tenant`'s discovery pops (`/api/v1/pop?namespace=&task=`)
    /// wait on.
    pub(super) fn discovery(&self, tenant: &str) -> Arc<Gate> {
        self.gate(&queue_key(tenant, DISCOVERY))
    }

    /// Open every gate (shutdown: parked pops return empty at once).
    pub(super) fn open_all(&self) {
        let gates: Vec<Arc<Gate>> = self.gates.lock().by_queue.values().cloned().collect();
        for gate in gates {
            gate.open();
        }
    }

    /// Forget `queue`'s gate (the queue was deleted): its waiters see it
    /// closed and answer empty; later pops get a fresh gate.
    pub(super) fn forget(&self, queue: &str) {
        let gate = self.gates.lock().by_queue.remove(queue);
        if let Some(gate) = gate {
            gate.closed.store(true, Ordering::Release);
            gate.open();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn idle_gates_of_client_chosen_names_are_swept_and_held_ones_stay() {
        // A gate was made for every popped queue name and
        // freed only on queue delete (20,000 random names: 8 MB to 52 MB RSS).
        let gates = WakeGates::default();
        let held = gates.gate("held");
        let first = held.generation();
        let idle_generation = gates.gate("idle").generation();
        for i in 0..20_000 {
            drop(gates.gate(&format!("random-{i}")));
        }
        assert!(gates.len() <= 2 * SWEEP_FLOOR, "{}", gates.len());
        // A parked pop's gate survives every sweep, opens included.
        assert!(Arc::ptr_eq(&held, &gates.gate("held")));
        assert_eq!(held.generation(), first);
        // A swept gate made again never repeats a generation it had.
        assert_ne!(gates.gate("idle").generation(), idle_generation);
        assert_eq!(gates.generation("never-asked"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_after_the_generation_was_read_is_never_lost() {
        let gates = Arc::new(WakeGates::default());
        let gate = gates.gate("q");
        let seen = gate.generation();
        gates.open("q");
        // Opened before waiting: returns at once.
        let key = WaitKey::new("g", None);
        tokio::time::timeout(Duration::from_millis(1), gate.wait_past(seen, &key))
            .await
            .expect("wait_past missed an earlier open");
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_sleep_until_opened_and_all_wake() {
        let gates = Arc::new(WakeGates::default());
        let gate = gates.gate("q");
        let seen = gate.generation();
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let gate = Arc::clone(&gate);
            waiters.push(tokio::spawn(async move {
                gate.wait_past(seen, &WaitKey::new("g", None)).await;
            }));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "woke without an open"
        );
        gates.open("q");
        for waiter in waiters {
            tokio::time::timeout(Duration::from_millis(10), waiter)
                .await
                .expect("a waiter did not wake")
                .unwrap();
        }
    }

    /// Spawn a waiter on `gate` as `key` that counts itself in `woken`.
    fn waiter(
        gate: &Arc<Gate>,
        key: WaitKey,
        woken: &Arc<AtomicUsize>,
    ) -> tokio::task::JoinHandle<()> {
        let (gate, woken) = (Arc::clone(gate), Arc::clone(woken));
        tokio::spawn(async move {
            let seen = gate.generation();
            gate.wait_past(seen, &key).await;
            woken.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test(start_paused = true)]
    async fn new_data_in_a_partition_wakes_one_pop_per_group_not_every_pop() {
        // 10,000 consumers parked on 100 queues; every push woke
        // all hundred parked on its queue.
        let gates = Arc::new(WakeGates::default());
        let gate = gates.gate("q");
        let (a, b, p, other) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let mut tasks = Vec::new();
        for _ in 0..100 {
            tasks.push(waiter(&gate, WaitKey::new("a", None), &a));
        }
        for _ in 0..10 {
            tasks.push(waiter(&gate, WaitKey::new("b", None), &b));
        }
        for _ in 0..3 {
            tasks.push(waiter(&gate, WaitKey::new("a", Some("p1")), &p));
            tasks.push(waiter(&gate, WaitKey::new("a", Some("p2")), &other));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(gate.parked.load(Ordering::SeqCst), 116);

        gates.open_partition("q", "p1");
        tokio::time::sleep(Duration::from_millis(10)).await;
        // One of each group's queue-wide waiters, every waiter on p1, none on p2.
        assert_eq!(a.load(Ordering::SeqCst), 1);
        assert_eq!(b.load(Ordering::SeqCst), 1);
        assert_eq!(p.load(Ordering::SeqCst), 3);
        assert_eq!(other.load(Ordering::SeqCst), 0);

        // A second push wakes the next one of each group.
        gates.open_partition("q", "p1");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(a.load(Ordering::SeqCst), 2);
        assert_eq!(b.load(Ordering::SeqCst), 2);

        // Anything else still wakes everyone, and the map empties behind them.
        gates.open("q");
        for task in tasks {
            tokio::time::timeout(Duration::from_millis(10), task)
                .await
                .expect("open() left a waiter parked")
                .unwrap();
        }
        assert_eq!(a.load(Ordering::SeqCst), 100);
        assert_eq!(other.load(Ordering::SeqCst), 3);
        assert!(gate.waiters.lock().is_empty());
        assert_eq!(gate.parked.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wake_passes_to_the_next_waiter() {
        let gates = Arc::new(WakeGates::default());
        let gate = gates.gate("q");
        let woken = Arc::new(AtomicUsize::new(0));
        let first = waiter(&gate, WaitKey::new("a", None), &woken);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = waiter(&gate, WaitKey::new("a", None), &woken);
        tokio::time::sleep(Duration::from_millis(1)).await;
        // The first waiter is chosen, then cancelled before it runs.
        gates.open_partition("q", "p");
        first.abort();
        tokio::time::timeout(Duration::from_millis(10), second)
            .await
            .expect("the wake was lost with the cancelled waiter")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn gates_are_per_queue() {
        let gates = WakeGates::default();
        let a = gates.gate("a");
        let b = gates.gate("b");
        let seen_b = b.generation();
        gates.open("a");
        assert_ne!(a.generation(), 0);
        assert_eq!(b.generation(), seen_b);
        assert!(
            tokio::time::timeout(
                Duration::from_millis(50),
                b.wait_past(seen_b, &WaitKey::new("g", None))
            )
            .await
            .is_err(),
            "opening a woke b"
        );
    }

    #[test]
    fn hints_are_collected_only_when_enabled_deduplicated_and_capped() {
        let off = WakeGates::new(false);
        let gate = off.gate("q");
        off.open_partition("q", "p");
        assert!(gate.take_hints().is_empty());

        let on = WakeGates::new(true);
        let gate = on.gate("q");
        let seen = gate.generation();
        on.open_partition("q", "a");
        on.open_partition("q", "a");
        assert_ne!(
            gate.generation(),
            seen,
            "a hinted open still opens the gate"
        );
        for i in 0..2 * MAX_HINTS {
            on.open_partition("q", &format!("p{i}"));
        }
        let hints = gate.take_hints();
        assert_eq!(hints.len(), MAX_HINTS);
        assert_eq!(hints[0], "a");
        assert_eq!(hints.iter().filter(|name| *name == "a").count(), 1);
        assert!(gate.take_hints().is_empty(), "taking drains the hints");
        gate.return_hints(["b".to_owned()]);
        assert_eq!(gate.take_hints(), ["b"]);
        // A queue nobody waits on keeps no hints at all.
        on.open_partition("unwatched", "p");
        assert!(on.gate("unwatched").take_hints().is_empty());
    }
}
