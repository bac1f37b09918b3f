//! The one way a writer tells pop serving that a partition has work.
//!
//! Push fusion, transactions and acks hold a [`Ready`] handle. It can only
//! announce: every group's hot-list ring learns the partition is pending and
//! parked pops of the queue wake. It cannot read the rings or wait on a gate;
//! those belong to pop serving (`pop.rs`), which owns the hot-list and the
//! wake gates. Both know a queue by its `naming::queue_key`, so one tenant's
//! push never wakes another tenant's queue of the same name.

use std::sync::Arc;

use crate::hotlist::HotList;
use crate::naming::queue_key;
use crate::wake::WakeGates;

/// Announces committed work to pop serving.
#[derive(Clone)]
pub(crate) struct Ready {
    hotlist: Arc<HotList>,
    gates: Arc<WakeGates>,
}

impl Ready {
    pub(crate) fn new(hotlist: Arc<HotList>, gates: Arc<WakeGates>) -> Ready {
        Ready { hotlist, gates }
    }

    /// After a push committed: every group's ring of the queue offers the
    /// partition, then parked pops of the queue (and discovery pops) wake.
    pub(crate) fn pushed(&self, tenant: &str, queue: &str, partition: &str) {
        let key = queue_key(tenant, queue);
        self.hotlist.mark_ready(&key, partition);
        self.gates.open_partition(&key, partition);
    }

    /// After an ack released a cursor with data behind it (ack-promote): the
    /// acking group's ring offers the partition again, and pops wake.
    pub(crate) fn promoted(&self, tenant: &str, queue: &str, group: &str, partition: &str) {
        let key = queue_key(tenant, queue);
        self.hotlist.mark_ready_for(&key, group, partition);
        self.gates.open_partition(&key, partition);
    }
}
