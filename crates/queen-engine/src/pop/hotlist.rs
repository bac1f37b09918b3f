//! The hot-list (decisions.md §5): per (queue, consumer group), a ring of
//! partition names believed to hold pending data, so a pop asks SQL only
//! about those.
//!
//! Fed by: local pushes after commit (`mark_ready` on every ring of the
//! queue), acks that leave data behind the cursor, the revisit wheel (a lease
//! expires, a visibility hold ends), and a reseed from SQL on first contact and
//! every `QUEEN_HOTLIST_RESEED_MS` (default 5000; `reseeder.rs` reseeds the
//! rings pops keep polling together, a pop the others), so a missed hint
//! costs at most about one reseed period, never a stranded message.
//!
//! A reseed (`log_hot_reseed_v1`) reads what was written since the previous
//! one, plus one page of a keyset walk over the queue's partitions by name:
//! its cost follows the work, not the partition count. Until the walk has
//! gone once round the queue since the ring was created (or since the ring
//! dropped a name at its cap), the ring is catching up: a pop that finds
//! nothing ready reseeds at once with a big page ([`CATCH_UP_PAGE`]) rather
//! than waiting out the period. Once round, every period reads a small page
//! ([`RESEED_PAGE`]): the rare full pass, spread out.
//!
//! After each `log_pop_list_v1`, the verdicts are checked back in: delivered
//! (keep, there may be more), empty (drop), leased (wait for the lease's
//! release or expiry: a local push meanwhile readies nothing, see
//! [`HotList::mark_pushed`]), busy (revisit shortly), deferred by windowBuffer (revisit when quiet, skipping
//! the SQL debounce unless a push came since), delayed by delayedProcessing
//! (revisit when visible, debounce and all), missing (drop). Candidates a
//! pop took but never reached go back to the front.
//!
//! Memory is bounded: a ring holds at most [`MAX_RING_PARTITIONS`] names
//! (extra hints are dropped; the reseed finds them), and a ring unused for
//! [`IDLE_RING_EXPIRY`] is removed by [`HotList::expire_idle`].
//!
//! All methods take the current `Instant` from the caller and never await:
//! the lock is held only to move names around.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

/// Most partition names one ring holds.
pub(super) const MAX_RING_PARTITIONS: usize = 65_536;

/// Partitions one periodic reseed walks once the ring has caught up (with
/// their cursors, about twice as many rows read).
pub(super) const RESEED_PAGE: i32 = 256;

/// Partitions one reseed walks while the ring catches up.
pub(super) const CATCH_UP_PAGE: i32 = 8_192;

/// A ring unused this long is forgotten (and reseeded if used again).
pub(super) const IDLE_RING_EXPIRY: Duration = Duration::from_secs(300);

/// Revisit delay for a partition whose cursor row was busy (being created or
/// claimed by a concurrent pop).
const BUSY_REVISIT: Duration = Duration::from_millis(100);

/// The latest a local push to a leased partition is looked at, when no ack
/// here releases the lease first (it was acked through another broker with
/// nothing left behind, so no hint came): the bound on what a missed release
/// costs. Until then pushes to it wake no pop that could not claim it.
pub(super) const LEASED_PUSH_RECHECK: Duration = Duration::from_millis(100);

/// What a pop found in one partition, as the ring needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Messages were delivered: keep it ready.
    Delivered,
    /// Nothing pending: drop it.
    Empty,
    /// Look again at `at` (a busy row, a delayedProcessing tail).
    RevisitAt(Instant),
    /// A lease holds it for the group until `at` (its expiry) or its release
    /// (an ack): a local push meanwhile readies nothing no pop could claim.
    LeasedUntil(Instant),
    /// Hidden by windowBuffer until `at`: revisit then, and bypass the SQL
    /// debounce on that visit (the wheel owns the hold).
    WindowUntil(Instant),
}

/// Candidates for one pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidates {
    /// Partition names, in the order to try them.
    pub(super) names: Vec<String>,
    /// True when every name comes from an expired windowBuffer hold, so the
    /// pop may skip the SQL debounce.
    pub(super) skip_window: bool,
}

/// The state of one (queue, group) ring.
#[derive(Debug)]
struct Ring {
    ready: VecDeque<String>,
    /// Names in `ready`, for de-duplication.
    in_ready: HashSet<String>,
    /// Names whose windowBuffer hold ended (promoted by the wheel).
    window_due: HashSet<String>,
    /// Names waiting for a revisit time, and why.
    waiting: HashMap<String, Wait>,
    wheel: BTreeMap<Instant, Vec<String>>,
    reseeded_at: Option<Instant>,
    /// The queue's id, once a reseed from the pop path named it (what the
    /// periodic reseeds of [`HotList::due_reseeds`] ask with).
    queue_id: Option<uuid::Uuid>,
    /// Where the next reseed starts.
    walk: Walk,
    used_at: Instant,
    /// Names taken by pops and not checked back in yet.
    out: usize,
    /// A pop found nothing ready while names were out: the next check-in
    /// that puts names back should wake the queue's parked pops.
    starved: bool,
    /// Names whose lease an ack here released while names were out: a pop
    /// out with one may have seen the lease before it went, and its
    /// `LeasedUntil` must not park the name until a lease that no longer
    /// exists (or `LEASED_PUSH_RECHECK`). An entry leaves at the name's next
    /// check-in, and all of them when nothing is out; at most
    /// `MAX_RING_PARTITIONS`.
    released_while_out: HashSet<String>,
}

/// Where a ring's reseeds stand: what the next `log_hot_reseed_v1` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Walk {
    /// PostgreSQL's clock at the previous reseed (`None`: none yet).
    pub(super) since: Option<SystemTime>,
    /// The keyset walk's position: the last partition name it looked at.
    pub(super) after: Option<String>,
    /// The walk went once round the queue since the ring was created or
    /// last dropped a name at its cap.
    pub(super) caught_up: bool,
}

impl Walk {
    /// Partitions the next reseed's page walks.
    pub(super) fn page(&self) -> i32 {
        if self.caught_up {
            RESEED_PAGE
        } else {
            CATCH_UP_PAGE
        }
    }
}

/// A ring whose periodic reseed is due ([`HotList::due_reseeds`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Due {
    pub(super) queue: String,
    pub(super) group: String,
    pub(super) queue_id: uuid::Uuid,
    pub(super) walk: Walk,
}

/// Why a name waits for its revisit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Any other revisit (busy, delayedProcessing).
    Plain(Instant),
    /// A windowBuffer hold: its visit may skip the SQL debounce.
    Window(Instant),
    /// A lease; `pushed`: a local push came while it was held, so its release
    /// readies the name even when the ack saw nothing behind the cursor.
    Lease { at: Instant, pushed: bool },
}

impl Wait {
    fn at(self) -> Instant {
        match self {
            Wait::Plain(at) | Wait::Window(at) | Wait::Lease { at, .. } => at,
        }
    }
}

impl Ring {
    fn new(now: Instant) -> Ring {
        Ring {
            ready: VecDeque::new(),
            in_ready: HashSet::new(),
            window_due: HashSet::new(),
            waiting: HashMap::new(),
            wheel: BTreeMap::new(),
            reseeded_at: None,
            queue_id: None,
            walk: Walk::default(),
            used_at: now,
            out: 0,
            starved: false,
            released_while_out: HashSet::new(),
        }
    }

    fn push_back(&mut self, name: &str) {
        if self.in_ready.contains(name) {
            return;
        }
        if self.in_ready.len() >= MAX_RING_PARTITIONS {
            // Dropped: only the walk finds it again, so it starts over and
            // the ring is catching up until it has gone round.
            self.walk.after = None;
            self.walk.caught_up = false;
            return;
        }
        self.waiting.remove(name);
        self.in_ready.insert(name.to_owned());
        self.ready.push_back(name.to_owned());
    }

    fn push_front(&mut self, name: String) {
        if self.in_ready.contains(&name) {
            return;
        }
        self.in_ready.insert(name.clone());
        self.ready.push_front(name);
    }

    fn schedule(&mut self, name: &str, wait: Wait) {
        if self.in_ready.contains(name) {
            return;
        }
        self.waiting.insert(name.to_owned(), wait);
        self.wheel
            .entry(wait.at())
            .or_default()
            .push(name.to_owned());
    }

    /// A local push made `name` pending. Returns the revisit it scheduled
    /// instead of readying the name, if a lease holds it.
    fn pushed(&mut self, name: &str, now: Instant) -> Option<Instant> {
        self.window_due.remove(name);
        match self.waiting.get(name).copied() {
            Some(Wait::Lease { at, pushed }) => {
                let recheck = at.min(now + LEASED_PUSH_RECHECK);
                let wait = Wait::Lease {
                    at: recheck,
                    pushed: true,
                };
                if recheck == at {
                    // Already on the wheel then: one entry, however many pushes.
                    if !pushed {
                        self.waiting.insert(name.to_owned(), wait);
                    }
                } else {
                    self.schedule(name, wait);
                }
                Some(recheck)
            }
            _ => {
                self.push_back(name);
                None
            }
        }
    }

    /// An ack here released `name`'s lease with nothing behind the cursor
    /// when it looked. True when the name became ready (a push came during
    /// the lease, perhaps after the ack looked).
    fn released(&mut self, name: &str) -> bool {
        if self.out > 0 && self.released_while_out.len() < MAX_RING_PARTITIONS {
            self.released_while_out.insert(name.to_owned());
        }
        match self.waiting.get(name).copied() {
            Some(Wait::Lease { pushed: true, .. }) => {
                self.push_back(name);
                true
            }
            // The wheel's entry goes stale: only the latest schedule counts.
            Some(Wait::Lease { pushed: false, .. }) => {
                self.waiting.remove(name);
                false
            }
            _ => false,
        }
    }

    /// Move every revisit due at `now` into the ready queue.
    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.wheel.first_entry() {
            if *entry.key() > now {
                break;
            }
            let (at, names) = entry.remove_entry();
            for name in names {
                // Only the latest schedule of a name counts.
                if let Some(&wait) = self.waiting.get(&name) {
                    if wait.at() == at {
                        self.waiting.remove(&name);
                        if matches!(wait, Wait::Window(_)) {
                            self.window_due.insert(name.clone());
                        }
                        self.push_back(&name);
                    }
                }
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.wheel.keys().next().copied()
    }
}

/// Every ring of the broker, by queue, then group: a push marks the rings of
/// its queue without visiting any other queue's (with one flat map keyed by
/// (queue, group), every pushed partition walked every ring of the broker:
/// 10,000 queues made that 10,000 comparisons a push).
#[derive(Debug, Default)]
pub(super) struct HotList {
    rings: Mutex<Rings>,
}

#[derive(Debug, Default)]
struct Rings {
    by_queue: HashMap<String, HashMap<String, Ring>>,
    /// No ring has a revisit due before this: the wheel's tick walks the
    /// rings only once it passed (an idle broker's tick walks none).
    next_due: Option<Instant>,
    /// Rings held.
    count: usize,
}

impl Rings {
    fn get_mut(&mut self, queue: &str, group: &str) -> Option<&mut Ring> {
        self.by_queue.get_mut(queue)?.get_mut(group)
    }

    /// Keep only the rings `keep` says yes to, dropping emptied queues.
    fn retain(&mut self, mut keep: impl FnMut(&str, &str, &Ring) -> bool) {
        self.by_queue.retain(|queue, groups| {
            groups.retain(|group, ring| keep(queue, group, ring));
            !groups.is_empty()
        });
        self.count = self.by_queue.values().map(HashMap::len).sum();
    }

    /// A revisit was scheduled at `at`.
    fn scheduled(&mut self, at: Instant) {
        self.next_due = Some(self.next_due.map_or(at, |due| due.min(at)));
    }
}

/// What the pop path needs to know of one (queue, group) before it spends a
/// permit or a connection, read under one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Probe {
    /// The ring exists (its first contact happened here).
    pub(super) known: bool,
    /// Never seeded, or the reseed period passed: ask SQL for the pending
    /// partitions.
    pub(super) reseed_due: bool,
    /// A pop could find work in the ring now.
    pub(super) ready: bool,
}

impl Probe {
    /// A known ring with nothing ready and no reseed due: a pop can answer
    /// empty without a permit, a connection or a queue lookup.
    pub(super) fn idle(&self) -> bool {
        self.known && !self.reseed_due && !self.ready
    }
}

impl HotList {
    /// `f` over the ring of (queue, group), if there is one, under the lock.
    fn with_ring<R>(&self, queue: &str, group: &str, f: impl FnOnce(Option<&mut Ring>) -> R) -> R {
        let mut rings = self.rings.lock();
        f(rings.get_mut(queue, group))
    }

    /// [`Probe`] of (queue, group) at `now`, with reseed `period`. A probe of
    /// a known ring counts as use and promotes revisits that are due.
    pub(super) fn probe(&self, queue: &str, group: &str, now: Instant, period: Duration) -> Probe {
        self.with_ring(queue, group, |ring| match ring {
            None => Probe {
                known: false,
                reseed_due: true,
                ready: false,
            },
            Some(ring) => {
                ring.used_at = now;
                ring.promote_due(now);
                let ready = !ring.ready.is_empty();
                if !ready && ring.out > 0 {
                    ring.starved = true;
                }
                // A ring the periodic reseeds keep fresh never gets here;
                // one they skipped (unused for a period) or fell behind on
                // is reseeded by the pop.
                let late = period.saturating_mul(2);
                Probe {
                    known: true,
                    reseed_due: (!ready && !ring.walk.caught_up)
                        || ring
                            .reseeded_at
                            .is_none_or(|at| now.duration_since(at) >= late),
                    ready,
                }
            }
        })
    }

    #[cfg(test)]
    /// True when this (queue, group) has never been seeded here, or its
    /// reseed period passed: the pop must ask SQL for the pending partitions.
    pub(super) fn needs_reseed(
        &self,
        queue: &str,
        group: &str,
        now: Instant,
        period: Duration,
    ) -> bool {
        self.with_ring(queue, group, |ring| {
            ring.is_none_or(|ring| {
                ring.reseeded_at
                    .is_none_or(|at| now.duration_since(at) >= period)
            })
        })
    }

    #[cfg(test)]
    /// True when this (queue, group) has a ring (its first contact happened here).
    pub(super) fn knows(&self, queue: &str, group: &str) -> bool {
        self.with_ring(queue, group, |ring| ring.is_some())
    }

    /// True when (queue, group) has a ring whose walk has gone round.
    pub(super) fn caught_up(&self, queue: &str, group: &str) -> bool {
        self.with_ring(queue, group, |ring| {
            ring.is_some_and(|ring| ring.walk.caught_up)
        })
    }

    /// Where the next reseed of (queue, group) starts (a fresh walk when
    /// there is no ring yet).
    pub(super) fn walk(&self, queue: &str, group: &str) -> Walk {
        self.with_ring(queue, group, |ring| {
            ring.map(|ring| ring.walk.clone()).unwrap_or_default()
        })
    }

    /// The rings whose periodic reseed is due at `now` (reseeded `period`
    /// ago or more, or `early` less: rings due before the next round go in
    /// this one, so rings created at different moments fall into step and
    /// share a statement) and that pops used within the last two periods,
    /// caught up and with their queue id known; at most `max` of them, the
    /// most overdue first. A ring nobody polled for two periods is left to
    /// its next pop (a parked pop looks at its ring once a period).
    pub(super) fn due_reseeds(
        &self,
        now: Instant,
        period: Duration,
        early: Duration,
        max: usize,
    ) -> Vec<Due> {
        let rings = self.rings.lock();
        let mut due: Vec<(Instant, Due)> = Vec::new();
        for (queue, groups) in &rings.by_queue {
            for (group, ring) in groups {
                let (Some(queue_id), Some(at)) = (ring.queue_id, ring.reseeded_at) else {
                    continue;
                };
                if ring.walk.caught_up
                    && (now + early).duration_since(at) >= period
                    && now.duration_since(ring.used_at) < period.saturating_mul(2)
                {
                    due.push((
                        at,
                        Due {
                            queue: queue.clone(),
                            group: group.clone(),
                            queue_id,
                            walk: ring.walk.clone(),
                        },
                    ));
                }
            }
        }
        drop(rings);
        due.sort_by_key(|(at, _)| *at);
        due.truncate(max);
        due.into_iter().map(|(_, due)| due).collect()
    }

    /// A reseed asked for at most `limit` names found `reseed`. Its walk
    /// moves on unless it returned `limit` names (it may have dropped some
    /// of its page); it went round when its page reached the queue's end.
    /// Returns whether the walk has caught up.
    pub(super) fn reseeded(
        &self,
        queue: &str,
        group: &str,
        queue_id: uuid::Uuid,
        reseed: queen_sql::pop::Reseed,
        limit: usize,
        now: Instant,
    ) -> bool {
        self.apply_reseed(queue, group, Some(queue_id), reseed, limit, now)
            .unwrap_or(false)
    }

    /// [`HotList::reseeded`] of a periodic reseed: a ring forgotten while
    /// the statement ran (its queue deleted, its group's cursors moved) is
    /// not brought back (`None`).
    pub(super) fn reseeded_if_known(
        &self,
        queue: &str,
        group: &str,
        reseed: queen_sql::pop::Reseed,
        limit: usize,
        now: Instant,
    ) -> Option<bool> {
        self.apply_reseed(queue, group, None, reseed, limit, now)
    }

    /// What [`HotList::reseeded`] does; with no `queue_id`, only to a ring
    /// that exists.
    fn apply_reseed(
        &self,
        queue: &str,
        group: &str,
        queue_id: Option<uuid::Uuid>,
        reseed: queen_sql::pop::Reseed,
        limit: usize,
        now: Instant,
    ) -> Option<bool> {
        let full = reseed.names.len() >= limit;
        self.reseed_with(
            queue,
            group,
            reseed.names,
            now,
            queue_id.is_some(),
            |ring| {
                if queue_id.is_some() {
                    ring.queue_id = queue_id;
                }
                let walk = &mut ring.walk;
                walk.since = Some(reseed.now);
                if !full {
                    walk.caught_up |= reseed.next.is_none();
                    walk.after = reseed.next;
                }
            },
        )
    }

    #[cfg(any(test, feature = "bench"))]
    /// Replace the ring's ready set with `names` from SQL (plus anything due),
    /// keeping pending revisits.
    pub(super) fn reseed(&self, queue: &str, group: &str, names: Vec<String>, now: Instant) {
        let _ = self.reseed_with(queue, group, names, now, true, |_| {});
    }

    /// [`HotList::reseed`], moving the walk with `walked` before the names go
    /// in (a name dropped at the cap then restarts it). Creates the ring
    /// only when `create` (`None`: there was none); else whether the walk
    /// has caught up.
    fn reseed_with(
        &self,
        queue: &str,
        group: &str,
        names: Vec<String>,
        now: Instant,
        create: bool,
        walked: impl FnOnce(&mut Ring),
    ) -> Option<bool> {
        let mut rings = self.rings.lock();
        if !create && rings.get_mut(queue, group).is_none() {
            return None;
        }
        let groups = rings.by_queue.entry(queue.to_owned()).or_default();
        let before = groups.len();
        let ring = groups
            .entry(group.to_owned())
            .or_insert_with(|| Ring::new(now));
        ring.reseeded_at = Some(now);
        if create {
            // A pop's reseed is use; a periodic one is not (else every ring
            // it took would stay due, and never expire, with nobody polling).
            ring.used_at = now;
        }
        walked(ring);
        for name in names {
            if !ring.waiting.contains_key(&name) {
                ring.push_back(&name);
            }
        }
        let caught_up = ring.walk.caught_up;
        let after = groups.len();
        rings.count += after - before;
        Some(caught_up)
    }

    /// A peer's hint (a push or an ack-promote there) made `partition` of
    /// `queue` pending for every group that has a ring, leased here or not:
    /// the hint may be the release of a lease this ring waits on. A push
    /// also restarts the partition's windowBuffer quiet period, so a hold the
    /// wheel already ended no longer lets the next visit skip the SQL
    /// debounce.
    pub(super) fn mark_ready(&self, queue: &str, partition: &str) {
        let mut rings = self.rings.lock();
        if let Some(groups) = rings.by_queue.get_mut(queue) {
            for ring in groups.values_mut() {
                ring.window_due.remove(partition);
                ring.push_back(partition);
            }
        }
    }

    /// A local push made `partition` of `queue` pending: what
    /// [`HotList::mark_ready`] does, except in a ring where a lease holds the
    /// partition. There the name waits for the lease's release (an ack here),
    /// at most [`LEASED_PUSH_RECHECK`]: with batch 1 on a busy partition,
    /// nearly every push lands during a lease, and readying it drew every
    /// parked consumer to a claim that could only answer `leased`.
    pub(super) fn mark_pushed(&self, queue: &str, partition: &str, now: Instant) {
        let mut rings = self.rings.lock();
        let mut earliest: Option<Instant> = None;
        if let Some(groups) = rings.by_queue.get_mut(queue) {
            for ring in groups.values_mut() {
                if let Some(at) = ring.pushed(partition, now) {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
        }
        if let Some(at) = earliest {
            rings.scheduled(at);
        }
    }

    /// An ack here released (queue, group)'s lease on `partition`, with
    /// nothing behind the cursor when it looked. True when the name became
    /// ready because a push came during the lease: the caller opens the gate.
    pub(super) fn release_for(&self, queue: &str, group: &str, partition: &str) -> bool {
        self.with_ring(queue, group, |ring| {
            ring.is_some_and(|ring| ring.released(partition))
        })
    }

    /// Mark one (queue, group)'s partition pending (ack-promote).
    pub(super) fn mark_ready_for(&self, queue: &str, group: &str, partition: &str) {
        self.with_ring(queue, group, |ring| {
            if let Some(ring) = ring {
                ring.push_back(partition);
            }
        });
    }

    /// True when a pop could find work in the ring now (the cheap check before
    /// any permit or connection).
    pub(super) fn has_ready(&self, queue: &str, group: &str, now: Instant) -> bool {
        self.probe(queue, group, now, Duration::MAX).ready
    }

    #[cfg(any(test, feature = "bench"))]
    /// Take up to `k` candidates from the front of the ring. Window-due names
    /// are handed out on their own so their pop may skip the SQL debounce.
    pub(super) fn take(&self, queue: &str, group: &str, k: usize, now: Instant) -> Candidates {
        self.take_share(queue, group, k, 1, 1, now)
    }

    /// [`HotList::take`] for one of `sharers` pops serving the ring at once:
    /// at most an even share of the ready names (but at least `floor`), so a
    /// few in-flight pops do not hold every name while the others find the
    /// ring empty and park.
    pub(super) fn take_share(
        &self,
        queue: &str,
        group: &str,
        k: usize,
        floor: usize,
        sharers: usize,
        now: Instant,
    ) -> Candidates {
        let mut rings = self.rings.lock();
        let Some(ring) = rings.get_mut(queue, group) else {
            return Candidates {
                names: Vec::new(),
                skip_window: false,
            };
        };
        ring.used_at = now;
        ring.promote_due(now);
        let k = k.min((ring.ready.len() / sharers.max(1)).max(floor.max(1)));
        let window_first = ring
            .ready
            .front()
            .is_some_and(|name| ring.window_due.contains(name));
        let mut names = Vec::with_capacity(k.min(ring.ready.len()));
        while names.len() < k {
            let Some(front) = ring.ready.front() else {
                break;
            };
            if ring.window_due.contains(front) != window_first {
                break;
            }
            let Some(name) = ring.ready.pop_front() else {
                break;
            };
            ring.in_ready.remove(&name);
            ring.window_due.remove(&name);
            names.push(name);
        }
        if names.is_empty() && ring.out > 0 {
            ring.starved = true;
        }
        ring.out = ring.out.saturating_add(names.len());
        Candidates {
            names,
            skip_window: window_first,
        }
    }

    /// Check one pop's results back in. `unvisited` are candidates the pop
    /// never reached; they go back to the front.
    ///
    /// Returns true when a pop found the ring empty while these names were
    /// out (more consumers than the ring hands out at once) and names went
    /// back into the ready set: that pop parked, and the caller should open
    /// the queue's gate rather than leave it to its backoff re-poll. Only
    /// then: a check-in nobody waited for wakes no one.
    pub(super) fn check_in(
        &self,
        queue: &str,
        group: &str,
        outcomes: &[(String, Outcome)],
        unvisited: Vec<String>,
        now: Instant,
    ) -> bool {
        let mut rings = self.rings.lock();
        let mut earliest: Option<Instant> = None;
        let Some(ring) = rings.get_mut(queue, group) else {
            return false;
        };
        ring.out = ring.out.saturating_sub(outcomes.len() + unvisited.len());
        let mut readied = !unvisited.is_empty();
        for name in unvisited.into_iter().rev() {
            ring.push_front(name);
        }
        for (name, outcome) in outcomes {
            let raced_release = ring.released_while_out.remove(name.as_str());
            match *outcome {
                Outcome::Delivered => {
                    ring.push_back(name);
                    readied = true;
                }
                // The lease this pop saw was released since: look again now
                // rather than at its expiry (one claim more at worst).
                Outcome::LeasedUntil(_) if raced_release => {
                    ring.push_back(name);
                    readied = true;
                }
                Outcome::Empty => {}
                Outcome::RevisitAt(at) | Outcome::WindowUntil(at) | Outcome::LeasedUntil(at) => {
                    let at = at.max(now);
                    let wait = match outcome {
                        Outcome::WindowUntil(_) => Wait::Window(at),
                        Outcome::LeasedUntil(_) => Wait::Lease { at, pushed: false },
                        _ => Wait::Plain(at),
                    };
                    ring.schedule(name, wait);
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
        }
        if ring.out == 0 {
            ring.released_while_out.clear();
        }
        let woke = readied && std::mem::take(&mut ring.starved);
        if let Some(at) = earliest {
            rings.scheduled(at);
        }
        woke
    }

    /// The default revisit time of a busy partition.
    pub(super) fn busy_revisit(now: Instant) -> Instant {
        now + BUSY_REVISIT
    }

    /// Promote every revisit due at `now` and return the queues that got one
    /// (the wheel tick opens their gates).
    pub(super) fn promote_due(&self, now: Instant) -> Vec<String> {
        let mut rings = self.rings.lock();
        if rings.next_due.is_none_or(|due| due > now) {
            return Vec::new();
        }
        let mut queues = Vec::new();
        let mut next_due: Option<Instant> = None;
        for (queue, groups) in &mut rings.by_queue {
            let mut promoted = false;
            for ring in groups.values_mut() {
                if ring.next_due().is_some_and(|at| at <= now) {
                    ring.promote_due(now);
                    promoted = true;
                }
                if let Some(at) = ring.next_due() {
                    next_due = Some(next_due.map_or(at, |due| due.min(at)));
                }
            }
            if promoted {
                queues.push(queue.clone());
            }
        }
        rings.next_due = next_due;
        queues.sort();
        queues
    }

    /// (rings, partition names they hold ready or scheduled, the bytes those
    /// take): one pass under the lock, for `/metrics`. Bytes count each
    /// ring's containers at their capacity and every name's heap copy (a
    /// ready name is held twice: the queue and its de-duplication set).
    pub(super) fn size(&self) -> (usize, usize, usize) {
        const STRING: usize = std::mem::size_of::<String>();
        let rings = self.rings.lock();
        let (mut entries, mut bytes) = (0, 0);
        let all = rings.by_queue.iter().flat_map(|(queue, groups)| {
            groups.iter().map(move |(group, ring)| (queue, group, ring))
        });
        for (queue, group, ring) in all {
            entries += ring.ready.len() + ring.waiting.len();
            bytes += std::mem::size_of::<Ring>() + 2 * STRING + queue.len() + group.len();
            bytes += ring.ready.capacity() * STRING
                + ring.in_ready.capacity() * (STRING + 8)
                + ring.window_due.capacity() * (STRING + 8)
                + ring.waiting.capacity() * (STRING + 32);
            bytes += ring.ready.iter().map(|name| 2 * name.len()).sum::<usize>();
            bytes += ring.window_due.iter().map(String::len).sum::<usize>();
            bytes += ring
                .wheel
                .values()
                .map(|names| 48 + names.capacity() * STRING)
                .sum::<usize>();
            bytes += ring
                .waiting
                .keys()
                .map(|name| 2 * name.len())
                .sum::<usize>();
        }
        (rings.count, entries, bytes)
    }

    /// Forget rings unused for [`IDLE_RING_EXPIRY`].
    pub(super) fn expire_idle(&self, now: Instant) {
        self.rings
            .lock()
            .retain(|_, _, ring| now.duration_since(ring.used_at) < IDLE_RING_EXPIRY);
    }

    /// Forget every ring of `queue` (it was deleted).
    pub(super) fn forget_queue(&self, queue: &str) {
        self.rings
            .lock()
            .retain(|ring_queue, _, _| ring_queue != queue);
    }

    /// Forget the rings of `group` (on `queue`, or on every queue): the group
    /// was deleted or its cursors moved, so its next pop reseeds.
    pub(super) fn forget_group(&self, group: &str, queue: Option<&str>) {
        self.rings.lock().retain(|ring_queue, ring_group, _| {
            ring_group != group || queue.is_some_and(|q| q != ring_queue)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QID: uuid::Uuid = uuid::Uuid::from_u128(7);

    fn names(candidates: &Candidates) -> Vec<&str> {
        candidates.names.iter().map(String::as_str).collect()
    }

    fn found(names: &[&str], next: Option<&str>) -> queen_sql::pop::Reseed {
        queen_sql::pop::Reseed {
            names: names.iter().map(|&n| n.to_owned()).collect(),
            next: next.map(str::to_owned),
            now: std::time::SystemTime::now(),
        }
    }

    #[test]
    fn a_ring_catches_up_page_by_page_then_reseeds_once_a_period() {
        let hot = HotList::default();
        let now = Instant::now();
        let period = Duration::from_secs(5);
        // A new ring walks big pages from the start.
        assert_eq!(hot.walk("q", "g"), Walk::default());
        assert_eq!(Walk::default().page(), CATCH_UP_PAGE);
        hot.reseeded("q", "g", QID, found(&[], Some("p8191")), 16, now);
        let walk = hot.walk("q", "g");
        assert_eq!(walk.after.as_deref(), Some("p8191"));
        assert!(walk.since.is_some() && !walk.caught_up);
        // Nothing ready and not round yet: the next pop reseeds at once.
        assert!(hot.probe("q", "g", now, period).reseed_due);
        // A page that found names: they are served before the next page.
        hot.reseeded("q", "g", QID, found(&["p9000"], Some("p16383")), 16, now);
        assert!(!hot.probe("q", "g", now, period).reseed_due);
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p9000"]);
        hot.check_in("q", "g", &[("p9000".into(), Outcome::Empty)], vec![], now);
        assert!(hot.probe("q", "g", now, period).reseed_due);
        // The walk reaches the queue's end: caught up, small pages, and no
        // reseed by a pop however empty the ring: the periodic reseeds
        // (`due_reseeds`) take it at the period, a pop only once they have
        // missed one.
        hot.reseeded("q", "g", QID, found(&[], None), 16, now);
        let walk = hot.walk("q", "g");
        assert!(walk.caught_up && walk.after.is_none());
        assert_eq!(walk.page(), RESEED_PAGE);
        assert!(!hot.probe("q", "g", now, period).reseed_due);
        assert!(!hot.probe("q", "g", now + period, period).reseed_due);
        assert!(hot.probe("q", "g", now + 2 * period, period).reseed_due);
        // A reseed that filled its limit may have dropped part of its page:
        // the walk does not move past it.
        hot.reseeded("q", "g", QID, found(&["a", "b"], Some("zzz")), 2, now);
        assert!(hot.walk("q", "g").after.is_none());
    }

    #[test]
    fn the_periodic_reseeds_take_the_caught_up_rings_pops_use() {
        let hot = HotList::default();
        let now = Instant::now();
        let period = Duration::from_secs(5);
        let queues = |due: Vec<Due>| -> Vec<(String, String)> {
            due.into_iter().map(|due| (due.queue, due.group)).collect()
        };
        // A reseed of `queue`'s ring that found nothing and went round.
        let caught_up = |queue: &str, at: Instant| {
            hot.reseeded(queue, "g", QID, found(&[], None), 16, at);
        };
        // Caught up at `now`: "a" polled since, "b" never again, "c" still
        // walking, "d" filled by a bench with no queue id.
        for queue in ["a", "b", "c"] {
            let next = (queue == "c").then_some("p9");
            hot.reseeded(queue, "g", QID, found(&[], next), 16, now);
        }
        hot.reseed("d", "g", vec![], now);
        assert!(hot.due_reseeds(now, period, Duration::ZERO, 10).is_empty());
        let later = now + 2 * period;
        for queue in ["a", "c", "d"] {
            hot.probe(queue, "g", later - Duration::from_secs(1), period);
        }
        let due = hot.due_reseeds(later, period, Duration::ZERO, 10);
        assert_eq!(queues(due.clone()), [("a".into(), "g".into())]);
        assert_eq!(due[0].queue_id, QID);
        assert_eq!(due[0].walk.page(), RESEED_PAGE);
        // Applied: not due again until the next period; a forgotten ring
        // is not brought back.
        assert_eq!(
            hot.reseeded_if_known("a", "g", found(&["p1"], None), 16, later),
            Some(true)
        );
        assert!(hot
            .due_reseeds(later, period, Duration::ZERO, 10)
            .is_empty());
        // A periodic reseed is not use: two periods after its last poll
        // (a second before `later`), "a" is not due again.
        let unpolled = later + 2 * period - Duration::from_millis(500);
        assert!(hot
            .due_reseeds(unpolled, period, Duration::ZERO, 10)
            .is_empty());
        hot.forget_queue("a");
        assert_eq!(
            hot.reseeded_if_known("a", "g", found(&["p1"], None), 16, later),
            None
        );
        assert!(!hot.knows("a", "g"));
        // The most overdue first, at most `max`.
        caught_up("x", now);
        caught_up("y", now + Duration::from_secs(1));
        let at = now + 3 * period;
        for queue in ["x", "y"] {
            hot.probe(queue, "g", at, period);
        }
        assert_eq!(
            queues(hot.due_reseeds(at, period, Duration::ZERO, 1)),
            [("x".into(), "g".into())]
        );
        // Due within `early`: taken now, with the ones due already.
        caught_up("x", at);
        caught_up("y", at + Duration::from_secs(1));
        let next = at + period;
        for queue in ["x", "y"] {
            hot.probe(queue, "g", next, period);
        }
        assert_eq!(hot.due_reseeds(next, period, Duration::ZERO, 10).len(), 1);
        assert_eq!(
            hot.due_reseeds(next, period, Duration::from_secs(1), 10)
                .len(),
            2
        );
    }

    #[test]
    fn a_name_dropped_at_the_cap_restarts_the_walk() {
        let hot = HotList::default();
        let now = Instant::now();
        let all: Vec<String> = (0..=MAX_RING_PARTITIONS).map(|i| format!("p{i}")).collect();
        hot.reseeded("q", "g", QID, found(&[], None), 16, now);
        assert!(hot.walk("q", "g").caught_up);
        hot.reseed("q", "g", all, now);
        let walk = hot.walk("q", "g");
        assert!(!walk.caught_up && walk.after.is_none());
    }

    #[test]
    fn pushes_feed_every_group_ring_of_the_queue_once() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed("q", "g1", vec![], now);
        hot.reseed("q", "g2", vec![], now);
        hot.reseed("other", "g1", vec![], now);
        hot.mark_ready("q", "p1");
        hot.mark_ready("q", "p1");
        assert_eq!(names(&hot.take("q", "g1", 10, now)), ["p1"]);
        assert_eq!(names(&hot.take("q", "g2", 10, now)), ["p1"]);
        assert!(!hot.has_ready("other", "g1", now));
    }

    #[test]
    fn verdicts_keep_drop_and_schedule() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed(
            "q",
            "g",
            vec!["a".into(), "b".into(), "c".into(), "d".into()],
            now,
        );
        let taken = hot.take("q", "g", 3, now);
        assert_eq!(names(&taken), ["a", "b", "c"]);
        let later = now + Duration::from_secs(30);
        hot.check_in(
            "q",
            "g",
            &[
                ("a".into(), Outcome::Delivered),
                ("b".into(), Outcome::Empty),
                ("c".into(), Outcome::RevisitAt(later)),
            ],
            vec![],
            now,
        );
        assert_eq!(names(&hot.take("q", "g", 10, now)), ["d", "a"]);
        assert!(!hot.has_ready("q", "g", now + Duration::from_secs(29)));
        assert!(hot.promote_due(now).is_empty());
        assert_eq!(hot.promote_due(later), ["q"]);
        assert!(hot.promote_due(later).is_empty(), "promoted twice");
        assert_eq!(names(&hot.take("q", "g", 10, later)), ["c"]);
    }

    #[test]
    fn unvisited_candidates_go_back_to_the_front() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed("q", "g", vec!["a".into(), "b".into(), "c".into()], now);
        let taken = hot.take("q", "g", 2, now);
        assert_eq!(names(&taken), ["a", "b"]);
        hot.check_in(
            "q",
            "g",
            &[("a".into(), Outcome::Empty)],
            vec!["b".into()],
            now,
        );
        assert_eq!(names(&hot.take("q", "g", 10, now)), ["b", "c"]);
    }

    /// Check `partition` of q/g in as held by its window until `until`.
    fn hold_window(hot: &HotList, partition: &str, until: Instant, now: Instant) {
        let verdict = [(partition.into(), Outcome::WindowUntil(until))];
        hot.check_in("q", "g", &verdict, vec![], now);
    }

    #[test]
    fn window_holds_come_back_on_their_own_with_skip_window() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed("q", "g", vec!["w".into(), "x".into()], now);
        let _ = hot.take("q", "g", 1, now);
        let until = now + Duration::from_secs(2);
        hold_window(&hot, "w", until, now);
        let before = hot.take("q", "g", 10, now);
        assert_eq!((names(&before), before.skip_window), (vec!["x"], false));
        let due = hot.take("q", "g", 10, until);
        assert_eq!((names(&due), due.skip_window), (vec!["w"], true));
    }

    #[test]
    fn a_push_after_a_hold_ended_takes_the_skip_away() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed("q", "g", vec!["w".into()], now);
        let _ = hot.take("q", "g", 1, now);
        let until = now + Duration::from_secs(1);
        hold_window(&hot, "w", until, now);
        assert_eq!(hot.promote_due(until), ["q"]);
        // A push lands after the wheel ended the hold: not quiet any more.
        hot.mark_ready("q", "w");
        let taken = hot.take("q", "g", 10, until);
        assert_eq!((names(&taken), taken.skip_window), (vec!["w"], false));
    }

    #[test]
    fn reseed_is_due_on_first_contact_and_after_the_period() {
        let hot = HotList::default();
        let now = Instant::now();
        let period = Duration::from_secs(5);
        assert!(hot.needs_reseed("q", "g", now, period));
        hot.reseed("q", "g", vec![], now);
        assert!(!hot.needs_reseed("q", "g", now + Duration::from_secs(4), period));
        assert!(hot.needs_reseed("q", "g", now + Duration::from_secs(5), period));
    }

    #[test]
    fn one_probe_answers_known_reseed_due_and_ready() {
        let hot = HotList::default();
        let now = Instant::now();
        let period = Duration::from_secs(5);
        let probe = |at: Instant| {
            let p = hot.probe("q", "g", at, period);
            (p.known, p.reseed_due, p.ready)
        };
        // Never seen: unknown, reseed due, nothing ready.
        assert_eq!(probe(now), (false, true, false));
        hot.reseed("q", "g", vec!["a".into()], now);
        assert_eq!(probe(now), (true, false, true));
        // Taken, and the period has passed.
        let _ = hot.take("q", "g", 1, now);
        assert_eq!(probe(now + period), (true, true, false));
    }

    #[test]
    fn rings_are_capped_and_idle_rings_expire() {
        let hot = HotList::default();
        let now = Instant::now();
        let many: Vec<String> = (0..MAX_RING_PARTITIONS + 10)
            .map(|i| format!("p{i}"))
            .collect();
        hot.reseed("q", "g", many, now);
        let taken = hot.take("q", "g", usize::MAX, now);
        assert_eq!(taken.names.len(), MAX_RING_PARTITIONS);
        hot.reseed("q2", "g", vec![], now + IDLE_RING_EXPIRY);
        hot.expire_idle(now + IDLE_RING_EXPIRY);
        assert!(!hot.knows("q", "g"), "an idle ring survived");
        assert!(hot.knows("q2", "g"));
    }

    #[test]
    fn a_check_in_wakes_only_when_a_pop_found_the_ring_empty_while_names_were_out() {
        let hot = HotList::default();
        let now = Instant::now();
        hot.reseed("q", "g", vec!["a".to_owned(), "b".to_owned()], now);
        let first = hot.take("q", "g", 1, now);
        // Nobody went without: putting the name back is no news.
        assert!(!hot.check_in(
            "q",
            "g",
            &[(first.names[0].clone(), Outcome::Delivered)],
            vec![],
            now
        ));
        let all = hot.take("q", "g", 16, now);
        assert_eq!(all.names.len(), 2);
        // A second pop finds nothing ready while both are out, and parks.
        assert!(!hot.probe("q", "g", now, Duration::MAX).ready);
        let mut names = all.names.into_iter();
        let a = names.next().unwrap();
        let b = names.next().unwrap();
        // Dropping a name readies nothing: still no news.
        assert!(!hot.check_in("q", "g", &[(a, Outcome::Empty)], vec![], now));
        // Putting one back wakes, once.
        assert!(hot.check_in("q", "g", &[(b.clone(), Outcome::Delivered)], vec![], now));
        let again = hot.take("q", "g", 16, now);
        assert!(!hot.check_in(
            "q",
            "g",
            &[(b, Outcome::Delivered)],
            again.names[1..].to_vec(),
            now
        ));
        // An empty ring with nothing out (a drained queue) is not starvation.
        let hot = HotList::default();
        hot.reseed("q", "g", vec![], now);
        assert!(!hot.probe("q", "g", now, Duration::MAX).ready);
        hot.mark_ready("q", "p");
        let taken = hot.take("q", "g", 16, now);
        assert!(!hot.check_in(
            "q",
            "g",
            &[(taken.names[0].clone(), Outcome::Delivered)],
            vec![],
            now
        ));
    }

    /// Check `partition` of q/g (taken) in as leased until `until`.
    fn lease(hot: &HotList, partition: &str, until: Instant, now: Instant) {
        let verdict = [(partition.into(), Outcome::LeasedUntil(until))];
        hot.check_in("q", "g", &verdict, vec![], now);
    }

    #[test]
    fn a_local_push_to_a_leased_partition_waits_for_the_release() {
        let hot = HotList::default();
        let now = Instant::now();
        let expiry = now + Duration::from_secs(30);
        hot.reseed("q", "g", vec!["p".into()], now);
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        lease(&hot, "p", expiry, now);
        // Pushes during the lease ready nothing a pop could not claim...
        hot.mark_pushed("q", "p", now);
        hot.mark_pushed("q", "p", now);
        assert!(!hot.has_ready("q", "g", now));
        // ...until the ack here releases it: a push came, so it is ready.
        assert!(hot.release_for("q", "g", "p"));
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        // Released with no push meanwhile: the wait ends, nothing is ready,
        // and the next push readies it at once.
        lease(&hot, "p", expiry, now);
        assert!(!hot.release_for("q", "g", "p"));
        assert!(!hot.has_ready("q", "g", now));
        hot.mark_pushed("q", "p", now);
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        // A release that never comes here (acked through another broker):
        // the push is looked at within LEASED_PUSH_RECHECK, once.
        lease(&hot, "p", expiry, now);
        hot.mark_pushed("q", "p", now);
        let recheck = now + LEASED_PUSH_RECHECK;
        hot.mark_pushed("q", "p", recheck - Duration::from_millis(1));
        assert!(!hot.has_ready("q", "g", recheck - Duration::from_millis(1)));
        assert_eq!(hot.promote_due(recheck), ["q"]);
        assert_eq!(names(&hot.take("q", "g", 16, recheck)), ["p"]);
        hot.promote_due(expiry);
        assert!(
            !hot.has_ready("q", "g", expiry),
            "the stale expiry readied it again"
        );
        // A peer's hint may be the release: it readies the name at once.
        lease(&hot, "p", expiry, now);
        hot.mark_ready("q", "p");
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        // A release for a name that waits on no lease changes nothing.
        hot.check_in("q", "g", &[("p".into(), Outcome::Empty)], vec![], now);
        hot.check_in(
            "q",
            "g",
            &[("p".into(), Outcome::RevisitAt(expiry))],
            vec![],
            now,
        );
        assert!(!hot.release_for("q", "g", "p"));
        assert!(!hot.has_ready("q", "g", now));
    }

    #[test]
    fn a_lease_released_while_a_pop_was_out_does_not_park_its_answer() {
        let hot = HotList::default();
        let now = Instant::now();
        let expiry = now + Duration::from_secs(60);
        hot.reseed("q", "g", vec!["p".into()], now);
        // A pop takes p; its claim sees another consumer's lease, and that
        // consumer's ack here releases the lease before the pop checks in.
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        assert!(!hot.release_for("q", "g", "p"));
        hot.check_in(
            "q",
            "g",
            &[("p".into(), Outcome::LeasedUntil(expiry))],
            vec![],
            now,
        );
        // The lease it saw is gone: p is looked at again now, not at the
        // lease's expiry or the next push's LEASED_PUSH_RECHECK.
        assert!(
            hot.has_ready("q", "g", now),
            "parked behind a released lease"
        );
        // The next lease is honoured: a release recorded while nothing of
        // it was out, or already consumed, readies nothing.
        assert_eq!(names(&hot.take("q", "g", 16, now)), ["p"]);
        lease(&hot, "p", expiry, now);
        assert!(!hot.has_ready("q", "g", now));
        hot.mark_pushed("q", "p", now);
        assert!(!hot.has_ready("q", "g", now));
    }

    #[test]
    fn concurrent_pops_take_an_even_share_of_the_ring() {
        let hot = HotList::default();
        let now = Instant::now();
        let hundred: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
        hot.reseed("q", "g", hundred, now);
        // 16 pops serving at once: 100 / 16 = 6 each, not 16.
        assert_eq!(hot.take_share("q", "g", 16, 2, 16, now).names.len(), 6);
        // Alone, a pop takes its full k; never fewer than the floor.
        assert_eq!(hot.take_share("q", "g", 16, 2, 1, now).names.len(), 16);
        assert_eq!(hot.take_share("q", "g", 16, 2, 1000, now).names.len(), 2);
    }
}
