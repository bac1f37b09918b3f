//! The kept message figures of the admin views (`schema/010_figures.sql`,
//! `procedures/figures.sql`): the fold step.

use tokio_postgres::GenericClient;

use crate::SqlError;

const FOLD: &str = "SELECT queen.figures_fold_v2($1, $2, $3, $4, $5, $6)";
const PASS: &str = "SELECT queen.figures_pass_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const LEAVE: &str = "SELECT queen.figures_leave_v1($1)";
const MARK: &str = "SELECT queen.figures_mark_v1($1, $2, $3, $4)";

/// Partitions named (tenant, queue, partition), as three parallel arrays.
pub type Named<'a> = (&'a [String], &'a [String], &'a [String]);

/// What one fold step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Another session was folding: nothing was done.
    Skipped,
    /// This many partitions were folded (0: nothing was dirty).
    Folded(u32),
}

impl Fold {
    /// What a fold procedure's answer says: partitions folded, or -1.
    fn of(answer: i32) -> Fold {
        match u32::try_from(answer) {
            Ok(folded) => Fold::Folded(folded),
            Err(_) => Fold::Skipped,
        }
    }
}

/// Fold the partitions of dirty rows, at most `limit` of them (the last row
/// taken is split there), the partitions `pushed` names, the
/// partitions `ids` and the next `verify` partitions in id order into the
/// kept figures, in one transaction. When another session is folding,
/// `pushed` and `ids` are marked dirty instead and the answer is
/// [`Fold::Skipped`].
pub async fn fold(
    client: &impl GenericClient,
    limit: i32,
    verify: i32,
    pushed: Named<'_>,
    ids: &[uuid::Uuid],
) -> Result<Fold, SqlError> {
    let row = client
        .query_one(
            FOLD,
            &[&limit, &verify, &pushed.0, &pushed.1, &pushed.2, &ids],
        )
        .await?;
    Ok(Fold::of(row.try_get(0)?))
}

/// A folding broker's word to the others (`figures_watch_v1`).
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    /// This broker.
    pub broker: uuid::Uuid,
    /// It dropped a mark since its last word: a verify cycle is due.
    pub lost: bool,
    /// Milliseconds it counts as alive after this word, unless it leaves.
    pub alive_ms: i32,
}

/// The first step of a fold pass (`figures_pass_v1`), one statement:
/// `watch` (this broker is alive; a broker past its time died holding
/// marks, and it or a dropped mark starts a verify cycle, which marks the
/// next `verify` partitions dirty a pass), then [`fold`] of the dirty rows
/// and the marks, and of the next `verify` partitions while a build pass is
/// to walk.
pub async fn first_step(
    client: &impl GenericClient,
    limit: i32,
    verify: i32,
    pushed: Named<'_>,
    ids: &[uuid::Uuid],
    watch: &Watch,
) -> Result<Fold, SqlError> {
    let row = client
        .query_one(
            PASS,
            &[
                &limit,
                &verify,
                &pushed.0,
                &pushed.1,
                &pushed.2,
                &ids,
                &watch.broker,
                &watch.lost,
                &watch.alive_ms,
            ],
        )
        .await?;
    Ok(Fold::of(row.try_get(0)?))
}

/// Broker `broker` exits, its marks written: it no longer counts as a
/// folding broker, and its absence starts no verify cycle.
pub async fn leave(client: &impl GenericClient, broker: uuid::Uuid) -> Result<(), SqlError> {
    client.execute(LEAVE, &[&broker]).await?;
    Ok(())
}

/// Mark the partitions `pushed` names and the partitions `ids` dirty; those
/// that no longer exist are skipped. Answers the dirty rows written (one per
/// queue).
pub async fn mark(
    client: &impl GenericClient,
    pushed: Named<'_>,
    ids: &[uuid::Uuid],
) -> Result<u32, SqlError> {
    let row = client
        .query_one(MARK, &[&pushed.0, &pushed.1, &pushed.2, &ids])
        .await?;
    let written: i32 = row.try_get(0)?;
    Ok(u32::try_from(written).unwrap_or(0))
}
