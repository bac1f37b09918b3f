//! What a lifecycle change invalidates, here and on the peers: the one
//! place that knows which component caches what about a queue or a
//! consumer group. A change made through this broker is applied to its
//! caches and sent to the peers as a [`Hint`]; a hint from a peer is applied
//! the same way ([`Changes::apply`]).

use std::sync::Arc;

use crate::ack::Acks;
use crate::crypto::AtRest;
use crate::mesh::{Hint, MeshOut};
use crate::naming::queue_key;
use crate::pop::Serving;
use crate::push::Fusion;

/// What a peer's hints ask this broker to read again from the database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reread {
    /// Which queues are bounded or encrypted (a queue was configured).
    pub(crate) marked: bool,
    /// The maintenance flags.
    pub(crate) maintenance: bool,
}

/// Handles on every cache a lifecycle change invalidates, and the mesh.
pub(crate) struct Changes {
    pub(crate) serving: Arc<Serving>,
    pub(crate) at_rest: Arc<AtRest>,
    pub(crate) push: Arc<Fusion>,
    pub(crate) acks: Arc<Acks>,
    pub(crate) out: Option<MeshOut>,
}

impl Changes {
    /// Tell the peers `hint` (nothing without a mesh).
    pub(crate) fn tell(&self, hint: Hint) {
        if let Some(out) = &self.out {
            out.send(hint);
        }
    }

    /// `(tenant, queue)` was configured here.
    pub(crate) fn queue_configured(&self, tenant: &str, queue: &str) {
        self.forget_configuration(&queue_key(tenant, queue));
        self.tell(Hint::QueueChanged {
            tenant: tenant.to_owned(),
            queue: queue.to_owned(),
        });
    }

    /// `(tenant, queue)` was deleted here.
    pub(crate) fn queue_deleted(&self, tenant: &str, queue: &str) {
        self.forget_queue(&queue_key(tenant, queue));
        self.tell(Hint::QueueDeleted {
            tenant: tenant.to_owned(),
            queue: queue.to_owned(),
        });
    }

    /// `group`'s cursors on `queue` (`None`: every queue) were deleted or
    /// moved here.
    pub(crate) fn group_changed(&self, tenant: &str, group: &str, queue: Option<&str>) {
        let key = queue.map(|queue| queue_key(tenant, queue));
        self.serving.group_changed(group, key.as_deref());
        self.tell(Hint::GroupChanged {
            tenant: tenant.to_owned(),
            group: group.to_owned(),
            queue: queue.map(str::to_owned),
        });
    }

    /// Apply what a peer told this broker: a push opens the queue's gate
    /// and marks its rings; an invalidation drops what is cached here.
    /// Answers what must be read again from the database.
    pub(crate) fn apply(&self, hints: Vec<Hint>) -> Reread {
        let mut reread = Reread::default();
        let ready = self.serving.ready();
        for hint in hints {
            match hint {
                Hint::Pushed {
                    tenant,
                    queue,
                    partition,
                } => ready.hinted(&tenant, &queue, &partition),
                Hint::QueueChanged { tenant, queue } => {
                    self.forget_configuration(&queue_key(&tenant, &queue));
                    reread.marked = true;
                }
                Hint::QueueDeleted { tenant, queue } => {
                    self.forget_queue(&queue_key(&tenant, &queue));
                }
                Hint::GroupChanged {
                    tenant,
                    group,
                    queue,
                } => {
                    let key = queue.as_deref().map(|queue| queue_key(&tenant, queue));
                    self.serving.group_changed(&group, key.as_deref());
                }
                Hint::Maintenance => reread.maintenance = true,
            }
        }
        reread
    }

    /// Forget everything cached about the queue of key `queue` after it was
    /// deleted: hot-list rings, configuration, encryption flag, dedup
    /// coverage, ack registry entries; parked pops on it answer empty at once.
    fn forget_queue(&self, queue: &str) {
        self.serving.queue_deleted(queue);
        self.at_rest.forget(queue);
        self.push.forget_queue(queue);
        self.acks.forget_queue(queue);
    }

    /// Forget the cached configuration of the queue of key `queue` (push
    /// caches its encryption flag, pop its settings).
    fn forget_configuration(&self, queue: &str) {
        self.at_rest.forget(queue);
        self.push.forget_queue(queue);
        self.serving.queue_configured(queue);
    }
}
