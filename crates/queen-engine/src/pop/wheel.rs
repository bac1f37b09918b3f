//! The revisit wheel: promotes due lease expiries and visibility holds and
//! opens their gates, and expires idle rings.

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

/// How often the revisit wheel ticks: a lease expiry or a visibility hold is
/// noticed at most this late.
const WHEEL_TICK: Duration = Duration::from_millis(50);

/// How often idle hot-list rings are expired.
const RING_EXPIRY_EVERY: Duration = Duration::from_secs(60);

/// The revisit wheel: promotes due hot-list revisits and opens their queues'
/// gates, so a parked pop wakes when a lease expires or a hold ends.
pub(super) async fn run_wheel(
    gates: Arc<WakeGates>,
    hotlist: Arc<HotList>,
    shutting_down: Arc<AtomicBool>,
) {
    let mut ticker = tokio::time::interval(WHEEL_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_expiry = Instant::now();
    while !shutting_down.load(Ordering::Relaxed) {
        ticker.tick().await;
        let now = Instant::now();
        for queue in hotlist.promote_due(now) {
            gates.open(&queue);
        }
        if now.duration_since(last_expiry) >= RING_EXPIRY_EVERY {
            hotlist.expire_idle(now);
            last_expiry = now;
        }
    }
}
