//! The SQL candidate paths (`QUEEN_HOTLIST=0`): the targeted pop of the
//! partitions a wake's hints name, and the wildcard scan.

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

impl Serving {
    /// The SQL candidate path after a wake (life-of-a-pop step 7): a targeted
    /// pop of the partitions the gate's hints name, instead of another
    /// candidate scan. One `log_pop_list_v1` call visits them in turn, as a
    /// single-partition pop of each would, in one round trip rather than one
    /// per hint. Names it did not reach go back to the gate; when nothing is
    /// delivered the caller falls through to the wildcard scan, the backstop
    /// for missed wakes and older backlog. Before first contact there is no
    /// cursor to pop from: the scan's first contact comes first.
    pub(super) async fn pop_hinted(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
        gate: &Gate,
    ) -> Result<Popped, EngineError> {
        let key = (info.id, request.group.clone());
        if !self.state.contacted.lock().contains(&key) {
            return Ok(Popped::default());
        }
        let hints = gate.take_hints();
        if hints.is_empty() {
            return Ok(Popped::default());
        }
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        // Given back to the gate when this future is dropped first.
        let hints = TakenHints { gate, hints };
        let names: Vec<&str> = hints.hints.iter().map(String::as_str).collect();
        // An error claimed nothing: every hint goes back (the guard).
        let rows = self
            .claim(async |client| {
                Ok(queen_sql::pop::pop_list(client, info.id, &names, &params, false).await?)
            })
            .await?;
        gate.return_hints(unvisited(&rows, hints.into_hints()));
        self.render(queue, request, worker, &rows).await
    }

    /// The SQL candidate path (`QUEEN_HOTLIST=0`).
    pub(super) async fn pop_scan(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
    ) -> Result<Popped, EngineError> {
        let group = request.group.as_str();
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        let key = (info.id, request.group.clone());
        let contacted = self.state.contacted.lock().contains(&key);
        {
            let client = self.pop_client().await?;
            if !contacted {
                first_contact_of(&**client, info.id, &params).await?;
                self.state.contacted.lock().insert(key);
            } else if !queen_sql::pop::has_pending(&**client, info.id, group).await? {
                // The cheap probe, before any permit: definitively nothing.
                return Ok(Popped::default());
            }
        }
        let rows = self
            .claim(async |client| Ok(queen_sql::pop::pop_wildcard(client, info.id, &params).await?))
            .await?;
        self.render(queue, request, worker, &rows).await
    }
}

/// Pushed-partition hints a pop took from a gate: given back if dropped
/// before [`TakenHints::into_hints`].
struct TakenHints<'a> {
    gate: &'a Gate,
    hints: Vec<String>,
}

impl TakenHints<'_> {
    fn into_hints(mut self) -> Vec<String> {
        std::mem::take(&mut self.hints)
    }
}

impl Drop for TakenHints<'_> {
    fn drop(&mut self) {
        if !self.hints.is_empty() {
            self.gate.return_hints(std::mem::take(&mut self.hints));
        }
    }
}
