//! The Vegas limiter around serving permits (decisions.md §6).
//!
//! A pop that has real work takes a permit before it takes a pooled
//! connection; at most `limit` pops are in flight. The limit adapts like TCP
//! Vegas: with `rtt_min` the smallest round trip seen in a sliding 30 s window
//! and `rtt_recent` an EMA over ~50 completions, the estimated queueing is
//! `in_flight * (1 - rtt_min / rtt_recent)`. Below `alpha` the limit grows by
//! one, above `beta` it shrinks by one, at most once a second, within
//! `[min, max]`. Defaults follow the reference broker: 1, 16, 3, 6.
//!
//! It starts at `initial` (default: `max`), not at `min`: growing one step a
//! second from 1 left a freshly booted broker serving one pop at a time for
//! about 15 s. Starting open is safe because the pool bounds
//! the real concurrency and Vegas steps down as soon as round trips inflate.
//!
//! The ordering that makes this work is in the pop path, not here: the cheap
//! in-memory "is there anything?" check comes before the permit, so thousands
//! of parked consumers re-polling an empty queue never queue for permits.
//!
//! Time comes from the caller (`Instant`s), so the control law is tested with
//! explicit clocks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Limiter settings.
#[derive(Debug, Clone, Copy)]
pub struct LimiterConfig {
    /// Lowest limit.
    pub min: usize,
    /// Highest limit.
    pub max: usize,
    /// The limit at start, clamped to `[min, max]`.
    pub initial: usize,
    /// Grow while estimated queueing is below this.
    pub alpha: f64,
    /// Shrink while estimated queueing is above this.
    pub beta: f64,
    /// Completions the recent-RTT average spans.
    pub ema_span: u32,
}

impl Default for LimiterConfig {
    fn default() -> LimiterConfig {
        LimiterConfig {
            min: 1,
            max: 16,
            initial: 16,
            alpha: 3.0,
            beta: 6.0,
            ema_span: 50,
        }
    }
}

/// How long the RTT minimum remembers a sample.
const RTT_MIN_WINDOW: Duration = Duration::from_secs(30);

/// The limit changes at most this often.
const ADJUST_EVERY: Duration = Duration::from_secs(1);

/// A snapshot for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimiterStats {
    /// The current limit.
    pub limit: usize,
    /// Permits held now.
    pub in_flight: usize,
    /// Smallest RTT in the window, if any.
    pub rtt_min: Option<Duration>,
    /// Recent RTT average, if any.
    pub rtt_recent: Option<Duration>,
    /// Permits granted since start.
    pub granted: u64,
}

#[derive(Debug)]
struct State {
    limit: usize,
    in_flight: usize,
    /// (when, rtt) samples kept for the sliding minimum, oldest first, each
    /// smaller than every later one (a monotonic deque).
    minima: VecDeque<(Instant, Duration)>,
    rtt_recent: Option<f64>,
    last_adjust: Option<Instant>,
    granted: u64,
    /// Tickets of the pops waiting for a permit, first come first.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// The limiter. Share it with `Arc`.
#[derive(Debug)]
pub(super) struct Limiter {
    config: LimiterConfig,
    state: Mutex<State>,
    released: Notify,
}

/// A held permit; give it back with [`Permit::release`] to record the RTT.
/// Dropping it without releasing frees the slot without a sample.
#[derive(Debug)]
pub(super) struct Permit {
    limiter: Arc<Limiter>,
    started: Instant,
    done: bool,
}

impl Limiter {
    /// A limiter starting at `config.initial`.
    pub(super) fn new(config: LimiterConfig) -> Arc<Limiter> {
        let min = config.min.max(1);
        let max = config.max.max(min);
        let initial = config.initial.clamp(min, max);
        Arc::new(Limiter {
            config: LimiterConfig {
                min,
                max,
                initial,
                ..config
            },
            state: Mutex::new(State {
                limit: initial,
                in_flight: 0,
                minima: VecDeque::new(),
                rtt_recent: None,
                last_adjust: None,
                granted: 0,
                waiting: VecDeque::new(),
                next_ticket: 0,
            }),
            released: Notify::new(),
        })
    }

    /// Wait for a permit. Waiters are served first come, first served: a pop
    /// that found no free slot takes a ticket, and a free slot goes to the
    /// oldest ticket. (Every waiter used to race for each released slot, and
    /// at 32 consumers some lost for a hundred milliseconds.)
    pub(super) async fn acquire(self: &Arc<Self>) -> Permit {
        let mut queued: Option<Queued<'_>> = None;
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                let my_turn = match &queued {
                    None => state.waiting.is_empty(),
                    Some(queued) => state.waiting.front() == Some(&queued.ticket),
                };
                if my_turn && state.in_flight < state.limit {
                    if let Some(queued) = queued.take() {
                        state.waiting.pop_front();
                        // The ticket left the queue just above; its drop
                        // would lock `state` again (held here: a deadlock).
                        std::mem::forget(queued);
                    }
                    state.in_flight += 1;
                    state.granted += 1;
                    // Another slot may be free for the next in line, who was
                    // woken with everyone and went back to sleep.
                    let more = state.in_flight < state.limit && !state.waiting.is_empty();
                    drop(state);
                    if more {
                        self.released.notify_waiters();
                    }
                    return Permit {
                        limiter: Arc::clone(self),
                        started: Instant::now(),
                        done: false,
                    };
                }
                if queued.is_none() {
                    let ticket = state.next_ticket;
                    state.next_ticket = state.next_ticket.wrapping_add(1);
                    state.waiting.push_back(ticket);
                    queued = Some(Queued {
                        limiter: self,
                        ticket,
                    });
                }
            }
            notified.await;
        }
    }

    /// Current figures.
    pub(super) fn stats(&self) -> LimiterStats {
        let state = self.state.lock();
        LimiterStats {
            limit: state.limit,
            in_flight: state.in_flight,
            rtt_min: state.minima.front().map(|(_, rtt)| *rtt),
            rtt_recent: state.rtt_recent.map(Duration::from_secs_f64),
            granted: state.granted,
        }
    }

    /// Record one completion of `rtt` observed at `now`, with `in_flight`
    /// permits out (including this one), and adjust the limit. Answers the
    /// new limit when it shrank (the caller logs it after the lock).
    fn record(&self, state: &mut State, rtt: Duration, now: Instant) -> Option<usize> {
        while state
            .minima
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RTT_MIN_WINDOW)
        {
            state.minima.pop_front();
        }
        while state.minima.back().is_some_and(|(_, old)| *old >= rtt) {
            state.minima.pop_back();
        }
        state.minima.push_back((now, rtt));

        let sample = rtt.as_secs_f64();
        let weight = 2.0 / (f64::from(self.config.ema_span) + 1.0);
        state.rtt_recent = Some(match state.rtt_recent {
            Some(recent) => recent + weight * (sample - recent),
            None => sample,
        });

        if state
            .last_adjust
            .is_some_and(|at| now.duration_since(at) < ADJUST_EVERY)
        {
            return None;
        }
        let (Some((_, rtt_min)), Some(recent)) = (state.minima.front(), state.rtt_recent) else {
            return None;
        };
        if recent <= 0.0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss)] // in_flight is at most `max`, a small number
        let queued = state.in_flight as f64 * (1.0 - rtt_min.as_secs_f64() / recent);
        if queued < self.config.alpha && state.limit < self.config.max {
            state.limit += 1;
            state.last_adjust = Some(now);
        } else if queued > self.config.beta && state.limit > self.config.min {
            state.limit -= 1;
            state.last_adjust = Some(now);
            return Some(state.limit);
        }
        None
    }

    /// Feed one completion without a permit (tests and replays).
    #[cfg(test)]
    fn observe(&self, rtt: Duration, in_flight: usize, now: Instant) {
        let mut state = self.state.lock();
        let held = state.in_flight;
        state.in_flight = in_flight;
        let _ = self.record(&mut state, rtt, now);
        state.in_flight = held;
    }
}

/// A ticket in the wait queue; a waiter that gives up (its pop was
/// cancelled) leaves the queue, so it never blocks the ones behind it.
struct Queued<'a> {
    limiter: &'a Limiter,
    ticket: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let was_front = {
            let mut state = self.limiter.state.lock();
            let was_front = state.waiting.front() == Some(&self.ticket);
            state.waiting.retain(|ticket| *ticket != self.ticket);
            was_front
        };
        if was_front {
            self.limiter.released.notify_waiters();
        }
    }
}

impl Permit {
    /// Give the permit back, recording how long it was held.
    pub(super) fn release(mut self) {
        self.finish(true);
    }

    fn finish(&mut self, sample: bool) {
        if self.done {
            return;
        }
        self.done = true;
        let now = Instant::now();
        let rtt = now.duration_since(self.started);
        let shrunk = {
            let mut state = self.limiter.state.lock();
            let shrunk = if sample {
                self.limiter.record(&mut state, rtt, now)
            } else {
                None
            };
            state.in_flight = state.in_flight.saturating_sub(1);
            shrunk
        };
        if sample {
            crate::stats::warn_if_slow("pop round trip", rtt);
        }
        if let Some(limit) = shrunk {
            tracing::warn!(
                limit,
                rtt_ms = rtt.as_secs_f64() * 1000.0,
                "pop round trips inflate: the serving limiter shrank"
            );
        }
        // Wake every waiter: the limit may have grown by one as well.
        self.limiter.released.notify_waiters();
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.finish(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A limiter that starts at the bottom, to watch it grow.
    fn from_the_bottom() -> Arc<Limiter> {
        Limiter::new(LimiterConfig {
            initial: 1,
            ..LimiterConfig::default()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_limiter_grants_its_initial_limit_at_once() {
        let limiter = Limiter::new(LimiterConfig::default());
        let mut held = Vec::new();
        for _ in 0..16 {
            let permit = tokio::time::timeout(Duration::from_millis(1), limiter.acquire())
                .await
                .expect("a fresh limiter made a pop wait below its maximum");
            held.push(permit);
        }
        assert_eq!(limiter.stats().in_flight, 16);
    }

    #[test]
    fn grows_while_round_trips_stay_near_the_minimum() {
        let limiter = from_the_bottom();
        let start = Instant::now();
        for second in 0..20 {
            let now = start + Duration::from_secs(second);
            let in_flight = limiter.stats().limit;
            limiter.observe(Duration::from_millis(2), in_flight, now);
        }
        assert_eq!(limiter.stats().limit, 16, "did not grow to max");
    }

    #[test]
    fn shrinks_when_round_trips_inflate_under_load() {
        let limiter = from_the_bottom();
        let start = Instant::now();
        for second in 0..20 {
            limiter.observe(
                Duration::from_millis(2),
                1,
                start + Duration::from_secs(second),
            );
        }
        assert_eq!(limiter.stats().limit, 16);
        // Round trips ten times the minimum with 16 in flight: queueing is
        // estimated at 16 * 0.9 = 14.4 > beta, so the limit steps down, once
        // a second. Five seconds of it: four to six steps (the recent-RTT
        // average needs a few samples to rise, and the last step of the
        // growth phase may be under a second old).
        let mut now = start + Duration::from_secs(20);
        for _ in 0..50 {
            now += Duration::from_millis(100);
            limiter.observe(Duration::from_millis(20), 16, now);
        }
        let limit = limiter.stats().limit;
        assert!((10..=12).contains(&limit), "five seconds: {limit}");
        // Twelve more seconds: it reaches the configured minimum and stays.
        for _ in 0..120 {
            now += Duration::from_millis(100);
            limiter.observe(Duration::from_millis(20), 16, now);
        }
        assert_eq!(limiter.stats().limit, LimiterConfig::default().min);
    }

    #[test]
    fn the_limit_moves_at_most_once_a_second() {
        let limiter = from_the_bottom();
        let now = Instant::now();
        for _ in 0..100 {
            limiter.observe(Duration::from_millis(2), 1, now);
        }
        assert_eq!(
            limiter.stats().limit,
            2,
            "adjusted more than once in one instant"
        );
    }

    #[test]
    fn the_rtt_minimum_forgets_samples_older_than_30_seconds() {
        let limiter = Limiter::new(LimiterConfig::default());
        let start = Instant::now();
        limiter.observe(Duration::from_millis(1), 1, start);
        limiter.observe(Duration::from_millis(9), 1, start + Duration::from_secs(10));
        assert_eq!(limiter.stats().rtt_min, Some(Duration::from_millis(1)));
        limiter.observe(Duration::from_millis(9), 1, start + Duration::from_secs(31));
        assert_eq!(limiter.stats().rtt_min, Some(Duration::from_millis(9)));
    }

    #[tokio::test]
    async fn permits_beyond_the_limit_wait_for_a_release() {
        let limiter = Limiter::new(LimiterConfig {
            min: 2,
            max: 2,
            ..LimiterConfig::default()
        });
        let a = limiter.acquire().await;
        let b = limiter.acquire().await;
        assert_eq!(limiter.stats().in_flight, 2);
        let waiting = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "a third permit was granted over the limit"
        );
        a.release();
        let c = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the waiter was not woken")
            .unwrap();
        assert_eq!(limiter.stats().in_flight, 2);
        drop(b);
        drop(c);
        assert_eq!(limiter.stats().in_flight, 0);
    }

    /// One permit, `n` waiters queued in a known order.
    async fn queue_behind_one(
        n: usize,
    ) -> (
        Arc<Limiter>,
        Permit,
        Vec<tokio::task::JoinHandle<usize>>,
        Arc<Mutex<Vec<usize>>>,
    ) {
        let limiter = Limiter::new(LimiterConfig {
            min: 1,
            max: 1,
            ..LimiterConfig::default()
        });
        let held = limiter.acquire().await;
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..n {
            let limiter = Arc::clone(&limiter);
            let served = Arc::clone(&served);
            waiters.push(tokio::spawn(async move {
                let permit = limiter.acquire().await;
                served.lock().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
                permit.release();
                i
            }));
            // Let it queue before the next one arrives.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (limiter, held, waiters, served)
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_first_come_first_served() {
        let (_limiter, held, waiters, served) = queue_behind_one(8).await;
        held.release();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*served.lock(), (0..8).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_leaves_the_queue() {
        let (limiter, held, mut waiters, served) = queue_behind_one(3).await;
        // The first in line gives up (its client went away).
        waiters.remove(0).abort();
        tokio::time::sleep(Duration::from_millis(5)).await;
        held.release();
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a cancelled waiter blocked the queue")
                .unwrap();
        }
        assert_eq!(*served.lock(), [1, 2]);
        assert_eq!(limiter.stats().in_flight, 0);
        assert!(limiter.state.lock().waiting.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pop_that_releases_cannot_barge_ahead_of_a_waiter() {
        let limiter = Limiter::new(LimiterConfig {
            min: 1,
            max: 1,
            ..LimiterConfig::default()
        });
        let first = limiter.acquire().await;
        let waiter = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.acquire().await.release() })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        // A consumer looping pop after pop gives its permit back and asks
        // again at once, before the woken waiter has run.
        first.release();
        let again = limiter.acquire().await;
        assert!(
            waiter.is_finished(),
            "the releasing pop took the slot again ahead of the queued waiter"
        );
        again.release();
        waiter.await.unwrap();
    }
}
