//! The hot-list path: candidates from the ring in memory, one `pop_list`
//! call, verdicts checked back into the ring (a guard gives names back when
//! the pop is dropped first).

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

/// The longest one pop walks a catching-up ring's pages that find nothing.
const CATCH_UP_BUDGET: Duration = Duration::from_millis(50);

impl Serving {
    /// One look at the ring of (queue, group): `None` when this broker has
    /// none yet (first contact).
    pub(super) fn hot_probe(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
    ) -> Option<crate::pop::hotlist::Probe> {
        let probe = self.hotlist.probe(
            &queue.key,
            group,
            Instant::now(),
            self.config.hotlist_reseed,
        );
        probe.known.then_some(probe)
    }

    /// The hot-list path. `probe` is the cheap check the caller made (`None`:
    /// no ring yet, so this is the first contact).
    pub(super) async fn pop_hot(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
        probe: Option<crate::pop::hotlist::Probe>,
    ) -> Result<Popped, EngineError> {
        let group = request.group.as_str();
        let first_contact = probe.is_none();
        let reseed = probe.is_none_or(|probe| probe.reseed_due);
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        let permit = self.limiter.acquire().await;
        let (rows, candidates) = {
            let client = self.pop_client().await?;
            if first_contact {
                // O(1): the subscription is recorded, and each cursor row
                // appears when the group first touches its partition.
                queen_sql::pop::register_subscription(
                    &**client,
                    info.id,
                    group,
                    params.sub_mode,
                    params.sub_from,
                )
                .await?;
            }
            if reseed {
                self.reseed(&**client, queue, info.id, group).await?;
            }
            let k = (request.max_partitions.saturating_mul(8)).clamp(16, 256);
            let candidates = self.hotlist.take_share(
                &queue.key,
                group,
                k,
                request.max_partitions.saturating_mul(2),
                self.limiter.stats().in_flight,
                Instant::now(),
            );
            if candidates.names.is_empty() {
                permit.release();
                return Ok(Popped::default());
            }
            let skip_window = candidates.skip_window;
            // Out of the ring until checked in: if this future is dropped
            // first (the client went away mid-statement), the guard puts
            // every name back.
            let taken = Taken {
                serving: self,
                queue,
                group,
                names: candidates.names,
            };
            let names: Vec<&str> = taken.names.iter().map(String::as_str).collect();
            let rows =
                queen_sql::pop::pop_list(&client, info.id, &names, &params, skip_window).await;
            (rows, taken)
        };
        permit.release();
        let rows = match rows {
            // Nothing was claimed: every candidate goes back (the guard).
            Err(error) => return Err(error.into()),
            Ok(rows) => rows,
        };
        let candidates = candidates.into_names();
        if rows.is_empty() {
            // Every visited name yields a verdict, and the first is always
            // visited: no row at all means the cached queue id is gone (the
            // queue was deleted or re-created through another broker). Its
            // rings name the old queue's partitions: the next pop looks the
            // queue up again and makes first contact afresh.
            self.state.forget_queue(&queue.key);
            self.hotlist.forget_queue(&queue.key);
            return Ok(Popped::default());
        }
        self.check_in(queue, group, &rows, candidates, !request.auto_ack);
        self.render(queue, request, worker, &rows).await
    }

    /// Reseed the ring of (queue, group) from SQL. A ring still catching up
    /// walks page after page while they find nothing, for at most
    /// [`CATCH_UP_BUDGET`]: a first pop answers quickly, and a sparse
    /// backlog of a big queue is found within a few pops.
    async fn reseed(
        &self,
        client: &impl queen_sql::GenericClient,
        queue: &QueueRef<'_>,
        queue_id: Uuid,
        group: &str,
    ) -> Result<(), EngineError> {
        let started = Instant::now();
        let limit = crate::pop::hotlist::MAX_RING_PARTITIONS;
        loop {
            let walk = self.hotlist.walk(&queue.key, group);
            let found = queen_sql::pop::hot_reseed(
                client,
                queue_id,
                group,
                walk.since,
                walk.after.as_deref(),
                walk.page(),
                i32::try_from(limit).unwrap_or(i32::MAX),
            )
            .await?;
            self.state.reseeds.counted(1);
            let found_any = !found.names.is_empty();
            let caught_up =
                self.hotlist
                    .reseeded(&queue.key, group, queue_id, found, limit, Instant::now());
            if found_any || caught_up || started.elapsed() >= CATCH_UP_BUDGET {
                return Ok(());
            }
        }
    }

    /// Check verdicts back into the ring; `leased`: the pop leased what it
    /// took (no `autoAck`).
    pub(super) fn check_in(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        rows: &[PopRow],
        candidates: Vec<String>,
        leased: bool,
    ) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let to_instant = |at: Option<SystemTime>| at.map(|at| instant_of(at, now, wall));
        let mut outcomes = Vec::new();
        for row in rows {
            let PopRow::Verdict {
                partition,
                verdict,
                revisit_at,
                ..
            } = row
            else {
                continue;
            };
            let outcome = match verdict {
                // A leased batch locks the partition for the group until its
                // ack (which releases the name here) or its expiry: no other
                // pop could claim it meanwhile, so it waits instead of
                // drawing every parked consumer to a partition they cannot
                // have, and a local push meanwhile does not ready it.
                // Auto-acked, there may be more for anyone: keep it.
                Verdict::Delivered => match to_instant(*revisit_at) {
                    Some(at) if leased => Outcome::LeasedUntil(at),
                    Some(at) => Outcome::RevisitAt(at),
                    None => Outcome::Delivered,
                },
                // A drained partition leaves the ring; a leased batch comes back
                // at its lease expiry in case it is never acked, an auto-acked
                // one when its hidden delayedProcessing tail shows.
                Verdict::Drained => match to_instant(*revisit_at) {
                    Some(at) if leased => Outcome::LeasedUntil(at),
                    Some(at) => Outcome::RevisitAt(at),
                    None => Outcome::Empty,
                },
                // A name with no partition leaves the ring like an empty one.
                Verdict::Empty | Verdict::Missing => Outcome::Empty,
                // Another worker's lease, until its expiry (or its release:
                // an ack here, or a peer's hint).
                Verdict::Leased => match to_instant(*revisit_at) {
                    Some(at) => Outcome::LeasedUntil(at),
                    None => Outcome::RevisitAt(HotList::busy_revisit(now)),
                },
                // When a delayedProcessing tail shows; it goes through every
                // gate again (no window skip).
                Verdict::Delayed => Outcome::RevisitAt(
                    to_instant(*revisit_at).unwrap_or_else(|| HotList::busy_revisit(now)),
                ),
                Verdict::Busy => Outcome::RevisitAt(HotList::busy_revisit(now)),
                // Only windowBuffer's hold is the wheel's to end (its
                // revisit skips the SQL debounce).
                Verdict::Deferred => match to_instant(*revisit_at) {
                    Some(at) => Outcome::WindowUntil(at),
                    None => Outcome::RevisitAt(HotList::busy_revisit(now)),
                },
            };
            outcomes.push((partition.clone(), outcome));
        }
        let unvisited = unvisited(rows, candidates);
        if self
            .hotlist
            .check_in(&queue.key, group, &outcomes, unvisited, now)
        {
            // A pop found the ring empty while these names were out, and
            // parked: without this it would sleep until its backoff re-poll.
            self.gates.open(&queue.key);
        }
    }
}

/// Names a pop took from a hot-list ring: checked back in, all unvisited,
/// if dropped before [`Taken::into_names`] (the pop's future was dropped
/// mid-statement, or its statement failed), so no partition stays out of
/// the ring until the next reseed.
struct Taken<'a> {
    serving: &'a Serving,
    queue: &'a QueueRef<'a>,
    group: &'a str,
    names: Vec<String>,
}

impl Taken<'_> {
    /// The names, for the caller to check in with their verdicts.
    fn into_names(mut self) -> Vec<String> {
        std::mem::take(&mut self.names)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            let names = std::mem::take(&mut self.names);
            self.serving
                .check_in(self.queue, self.group, &[], names, false);
        }
    }
}

/// Candidates a pop list never reached: the names with no verdict row (every
/// visited partition yields one), in candidate order.
pub(super) fn unvisited(rows: &[PopRow], candidates: Vec<String>) -> Vec<String> {
    let visited: HashSet<&str> = rows
        .iter()
        .filter_map(|row| match row {
            PopRow::Verdict { partition, .. } => Some(partition.as_str()),
            PopRow::Segment { .. } => None,
        })
        .collect();
    candidates
        .into_iter()
        .filter(|name| !visited.contains(name.as_str()))
        .collect()
}
