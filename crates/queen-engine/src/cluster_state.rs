//! The cluster-wide state every broker on the database follows: the two
//! maintenance flags (`maintenance.rs` persists them), which queues have
//! `maxSize` (`bounded.rs`) and which are encrypted at rest (what a keyless
//! broker must not spool).
//!
//! [`ClusterState`] reads them every `maintenance_refresh` (a task holding a
//! weak reference, so it ends with the engine), again at once when a peer's
//! hint says they changed, and applies them: push maintenance to the spool,
//! pop maintenance to the pop path. A change made through this broker is
//! persisted, applied here at once and told to the peers.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::bounded::Bounded;
use crate::crypto::AtRest;
use crate::maintenance::Maintenance;
use crate::mesh::{Changes, Hint, Reread};
use crate::pop::Serving;
use crate::push::Pushes;
use crate::EngineError;

/// The cluster-wide flags and sets, and where they are applied.
pub struct ClusterState {
    maintenance: Arc<Maintenance>,
    bounded: Arc<Bounded>,
    at_rest: Arc<AtRest>,
    serving: Arc<Serving>,
    pushes: Arc<Pushes>,
    changes: Arc<Changes>,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("maintenance", &self.maintenance())
            .field("pop_maintenance", &self.pop_maintenance())
            .finish_non_exhaustive()
    }
}

impl ClusterState {
    /// The state over the components it reads into and applies to.
    pub(crate) fn new(
        maintenance: Arc<Maintenance>,
        bounded: Arc<Bounded>,
        at_rest: Arc<AtRest>,
        serving: Arc<Serving>,
        pushes: Arc<Pushes>,
        changes: Arc<Changes>,
    ) -> Arc<ClusterState> {
        Arc::new(ClusterState {
            maintenance,
            bounded,
            at_rest,
            serving,
            pushes,
            changes,
        })
    }

    /// Start the refresh task: every `period`, until the state is dropped
    /// or the pop path shuts down.
    pub(crate) fn start_refresh(self: &Arc<Self>, period: Duration) {
        tokio::spawn(refresh_every(Arc::downgrade(self), period));
    }

    /// Enable or disable pop maintenance mode (every pop answers empty) for
    /// every broker on the database: persisted, applied here at once, by the
    /// others within their refresh period. Enabling it wakes every parked
    /// pop, which then answers empty at once rather than delivering what
    /// arrives while it waited.
    pub async fn set_pop_maintenance(&self, enabled: bool) -> Result<(), EngineError> {
        self.maintenance
            .set_pop(enabled, |enabled| self.serving.set_maintenance(enabled))
            .await?;
        self.changes.tell(Hint::Maintenance);
        Ok(())
    }

    /// Whether pop maintenance mode is on.
    pub fn pop_maintenance(&self) -> bool {
        self.serving.maintenance()
    }

    /// Enable or disable push maintenance mode for every broker on the
    /// database: while on, pushes go to the spool; turning it off drains it.
    pub async fn set_maintenance(&self, enabled: bool) -> Result<(), EngineError> {
        self.maintenance
            .set_push(enabled, |enabled| {
                if let Some(spool) = self.pushes.spool() {
                    spool.set_maintenance(enabled);
                }
            })
            .await?;
        self.changes.tell(Hint::Maintenance);
        Ok(())
    }

    /// Whether push maintenance mode is on.
    pub fn maintenance(&self) -> bool {
        self.maintenance.push()
    }

    /// Read the cluster-wide state now and apply it. The refresh task does
    /// this every `maintenance_refresh`; a server calls it once before it
    /// serves.
    pub async fn refresh(&self) -> Result<(), EngineError> {
        self.refresh_marked().await?;
        self.maintenance
            .refresh(|push, pop| {
                if let Some(spool) = self.pushes.spool() {
                    spool.set_maintenance(push);
                }
                if self.serving.maintenance() != pop {
                    self.serving.set_maintenance(pop);
                }
            })
            .await
    }

    /// Read which queues have `maxSize` (for the push routing) and
    /// `encryptionEnabled`, in one statement.
    async fn refresh_marked(&self) -> Result<(), EngineError> {
        let encrypted = self.bounded.refresh().await?;
        self.at_rest.set_sealed(encrypted);
        Ok(())
    }

    /// Apply what a peer told this broker (`mesh/changes.rs`), then read
    /// again what its hints changed in the database.
    pub(crate) fn apply_hints(self: Arc<Self>, hints: Vec<Hint>) {
        let reread = self.changes.apply(hints);
        if reread == Reread::default() {
            return;
        }
        tokio::spawn(async move {
            if reread.marked {
                let _ = self.refresh_marked().await;
            }
            if reread.maintenance {
                if let Err(error) = self.refresh().await {
                    tracing::debug!(error = %crate::error_chain(&error), "cluster-state refresh after a peer's hint failed");
                }
            }
        });
    }
}

/// Read and apply the cluster-wide state every `period`, until `state` is
/// dropped or the pop path shuts down.
async fn refresh_every(state: Weak<ClusterState>, period: Duration) {
    let mut first = true;
    loop {
        {
            let Some(state) = state.upgrade() else {
                return;
            };
            if state.serving.is_shutting_down() {
                return;
            }
            if let Err(error) = state.refresh().await {
                if first {
                    tracing::debug!(error = %crate::error_chain(&error), "cannot read the cluster-wide state yet");
                }
            }
        }
        first = false;
        tokio::time::sleep(period).await;
    }
}
