//! The one way a writer tells pop serving that a partition has work.
//!
//! Push fusion, transactions and acks hold a [`Ready`] handle. It can only
//! announce: every group's hot-list ring learns the partition is pending and
//! parked pops of the queue wake. It cannot read the rings or wait on a gate;
//! those belong to pop serving (`pop/mod.rs`), which owns the hot-list and the
//! wake gates. Both know a queue by its `naming::queue_key`, so one tenant's
//! push never wakes another tenant's queue of the same name. With a mesh,
//! each announcement is also sent to the other brokers as a hint; a push
//! also marks its partition for the admin views' figures (`figures.rs`).

use std::sync::Arc;
use std::time::Instant;

use crate::figures::Marks;
use crate::mesh::{Hint, MeshOut};
use crate::naming::queue_key;
use crate::pop::hotlist::HotList;
use crate::pop::wake::WakeGates;

/// Announces committed work to pop serving.
#[derive(Clone)]
pub(crate) struct Ready {
    hotlist: Arc<HotList>,
    gates: Arc<WakeGates>,
    /// The other brokers, told the same (`mesh/`), when there is a mesh.
    mesh: Option<MeshOut>,
    /// The admin views' kept figures: a push, an ack or an auto-ack pop
    /// marks its partition there.
    figures: Arc<Marks>,
}

impl Ready {
    pub(super) fn new(hotlist: Arc<HotList>, gates: Arc<WakeGates>, figures: Arc<Marks>) -> Ready {
        Ready {
            hotlist,
            gates,
            mesh: None,
            figures,
        }
    }

    /// The same handle, also telling the mesh's peers.
    pub(crate) fn with_mesh(self, mesh: Option<MeshOut>) -> Ready {
        Ready { mesh, ..self }
    }

    /// After a commit that consumed messages of a partition (an ack, an
    /// auto-ack pop, a give-back): its figures are to be counted again
    /// (`figures.rs`; other cursor changes are marked by triggers).
    pub(crate) fn consumed(&self, partition_id: uuid::Uuid) {
        self.figures.consumed(partition_id);
    }

    /// A peer's push hint: what [`Ready::pushed`] does here, not told on.
    pub(crate) fn hinted(&self, tenant: &str, queue: &str, partition: &str) {
        let key = queue_key(tenant, queue);
        self.hotlist.mark_ready(&key, partition);
        self.gates.open_partition(&key, partition);
    }

    fn tell(&self, tenant: &str, queue: &str, partition: &str) {
        if let Some(mesh) = &self.mesh {
            mesh.send(Hint::Pushed {
                tenant: tenant.to_owned(),
                queue: queue.to_owned(),
                partition: partition.to_owned(),
            });
        }
    }

    /// After a push committed: every group's ring of the queue offers the
    /// partition (unless a lease here holds it: then at its release), then
    /// parked pops of the queue (and discovery pops) wake.
    pub(crate) fn pushed(&self, tenant: &str, queue: &str, partition: &str) {
        self.figures.pushed(tenant, queue, partition);
        let key = queue_key(tenant, queue);
        self.hotlist.mark_pushed(&key, partition, Instant::now());
        self.gates.open_partition(&key, partition);
        self.tell(tenant, queue, partition);
    }

    /// After an ack released a cursor with data behind it (ack-promote): the
    /// acking group's ring offers the partition again, and pops wake.
    pub(crate) fn promoted(&self, tenant: &str, queue: &str, group: &str, partition: &str) {
        let key = queue_key(tenant, queue);
        self.hotlist.mark_ready_for(&key, group, partition);
        self.gates.open_partition(&key, partition);
        // Peers' rings may have dropped the partition while it was leased.
        self.tell(tenant, queue, partition);
    }

    /// After an ack released a lease with nothing behind the cursor: the
    /// acking group's ring stops waiting on the lease, and offers the
    /// partition if a push came meanwhile (perhaps after the ack looked).
    /// Peers are not told: a ring of theirs waiting on this lease rechecks
    /// at their next local push, within `LEASED_PUSH_RECHECK`, or at a
    /// peer's push hint.
    pub(crate) fn released(&self, tenant: &str, queue: &str, group: &str, partition: &str) {
        let key = queue_key(tenant, queue);
        if self.hotlist.release_for(&key, group, partition) {
            self.gates.open_partition(&key, partition);
        }
    }

    /// After an ack released a lease: [`Ready::promoted`] when it left data
    /// behind the cursor, [`Ready::released`] otherwise.
    pub(crate) fn lease_ended(
        &self,
        tenant: &str,
        queue: &str,
        group: &str,
        partition: &str,
        pending: bool,
    ) {
        if pending {
            self.promoted(tenant, queue, group, partition);
        } else {
            self.released(tenant, queue, group, partition);
        }
    }
}
