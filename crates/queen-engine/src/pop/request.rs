//! What a pop asks for and what it gets: the request, the messages, the
//! long-poll backoff, and the SQL parameters a request becomes.

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

/// The consumer group of queue mode: one shared cursor per partition.
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";

/// What to pop from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopTarget {
    /// One named partition.
    Partition {
        /// Queue name.
        queue: String,
        /// Partition name.
        partition: String,
    },
    /// Any partitions of a queue.
    Queue {
        /// Queue name.
        queue: String,
    },
    /// Any queue with this namespace and/or task.
    Discovery {
        /// Namespace filter.
        namespace: Option<String>,
        /// Task filter.
        task: Option<String>,
    },
}

impl PopTarget {
    /// The queue this pop names (`None`: a discovery pop).
    pub fn queue(&self) -> Option<&str> {
        match self {
            PopTarget::Queue { queue } | PopTarget::Partition { queue, .. } => Some(queue),
            PopTarget::Discovery { .. } => None,
        }
    }
}

/// Where a new cursor of a named group starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionMode {
    /// Everything retained.
    All,
    /// Only what arrives after the subscription (`new`, `new-only`, `now`).
    New,
}

/// A pop, as the engine needs it (the HTTP layer applies the wire defaults).
#[derive(Debug, Clone)]
pub struct PopRequest {
    /// The tenant whose queues are popped.
    pub tenant: Arc<str>,
    /// What to pop from.
    pub target: PopTarget,
    /// Consumer group; [`QUEUE_MODE_GROUP`] for queue mode.
    pub group: String,
    /// Most messages, across partitions.
    pub batch: usize,
    /// Most partitions (wildcard pops).
    pub max_partitions: usize,
    /// Long-poll until a message or the timeout.
    pub wait: bool,
    /// Long-poll deadline.
    pub timeout: Duration,
    /// At-most-once delivery: no lease.
    pub auto_ack: bool,
    /// Subscription mode for a cursor this pop creates.
    pub subscription_mode: SubscriptionMode,
    /// Subscription timestamp for a cursor this pop creates.
    pub subscription_from: Option<SystemTime>,
}

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoppedMessage {
    /// Message id.
    pub id: Uuid,
    /// Transaction id.
    pub transaction_id: String,
    /// Trace id, if the producer sent one.
    pub trace_id: Option<Uuid>,
    /// Producer `sub`, when auth stamped one.
    pub producer_sub: Option<String>,
    /// The payload, decrypted, exactly as the producer sent it.
    pub payload: Bytes,
    /// The segment's commit timestamp.
    pub created_at: SystemTime,
    /// The partition's id.
    pub partition_id: Uuid,
    /// The partition's name.
    pub partition: Arc<str>,
    /// The message's offset in its partition (admin and tests only).
    pub offset: i64,
}

/// The answer of a pop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Popped {
    /// Queue the messages came from.
    pub queue: Option<String>,
    /// Messages, partition by partition, in offset order within each.
    pub messages: Vec<PoppedMessage>,
    /// The lease id (`None` for auto-ack or an empty pop).
    pub lease_id: Option<Uuid>,
    /// Partitions that delivered.
    pub partitions_claimed: usize,
}

/// Long-poll backoff (decisions.md §6): `initial` for the first `threshold`
/// attempts, then `initial × attempt × multiplier`, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct PopWait {
    /// `POP_WAIT_INITIAL_INTERVAL_MS`.
    pub initial: Duration,
    /// `POP_WAIT_BACKOFF_THRESHOLD`.
    pub threshold: u32,
    /// `POP_WAIT_BACKOFF_MULTIPLIER`.
    pub multiplier: u32,
    /// `POP_WAIT_MAX_INTERVAL_MS`.
    pub max: Duration,
}

impl Default for PopWait {
    fn default() -> PopWait {
        PopWait {
            initial: Duration::from_millis(100),
            threshold: 3,
            multiplier: 2,
            max: Duration::from_millis(1000),
        }
    }
}

impl PopWait {
    /// The re-poll interval after `attempt` empty attempts since the last wake.
    pub fn interval(&self, attempt: u32) -> Duration {
        if attempt < self.threshold {
            return self.initial.min(self.max);
        }
        self.initial
            .saturating_mul(attempt.saturating_mul(self.multiplier.max(1)))
            .min(self.max)
    }
}

/// Who `request` waits as on its queue's gate: its group, and its partition
/// when it pops only that one.
pub(super) fn wait_key_of(request: &PopRequest) -> WaitKey {
    match &request.target {
        PopTarget::Partition { partition, .. } => WaitKey::new(&request.group, Some(partition)),
        _ => WaitKey::new(&request.group, None),
    }
}

pub(super) fn params(request: &PopRequest, worker: Uuid, max_partitions: usize) -> PopParams<'_> {
    PopParams {
        group: &request.group,
        worker,
        budget: i32::try_from(request.batch.max(1)).unwrap_or(i32::MAX),
        max_partitions: i32::try_from(max_partitions.max(1)).unwrap_or(i32::MAX),
        lease_seconds: None,
        auto_ack: request.auto_ack,
        sub_mode: match request.subscription_mode {
            SubscriptionMode::All => "all",
            SubscriptionMode::New => "new",
        },
        sub_from: request.subscription_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_floor_matches_the_documented_schedule() {
        let wait = PopWait::default();
        let ms = |attempt| wait.interval(attempt).as_millis();
        assert_eq!([ms(0), ms(1), ms(2)], [100, 100, 100]);
        assert_eq!(ms(3), 600);
        assert_eq!(ms(4), 800);
        assert_eq!(ms(5), 1000);
        assert_eq!(ms(50), 1000);
    }
}
