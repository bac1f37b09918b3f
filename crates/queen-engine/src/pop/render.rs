//! Turning claimed rows into messages: decompress, slice, filter by audience
//! and decrypt; register leased batches for the ack path; give back an
//! undeliverable auto-ack claim, release a claim with nothing for the group.

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

impl Serving {
    /// Decompress, slice and decrypt the delivered frames: off the worker
    /// thread when the segments are large (`offload.rs`).
    pub(super) async fn render(
        &self,
        queue: &QueueRef<'_>,
        request: &PopRequest,
        worker: Uuid,
        rows: &[PopRow],
    ) -> Result<Popped, EngineError> {
        let bytes = rows
            .iter()
            .map(|row| match row {
                PopRow::Segment { blob, .. } => crate::offload::inflated_estimate(blob.len()),
                PopRow::Verdict { .. } => 0,
            })
            .sum();
        // Per partition the claimed span's last offset, and whether any of
        // its frames is this group's: a replayed dead letter is for the
        // groups that dead-lettered it only (its frame's audience).
        let mut spans: HashMap<Uuid, (i64, bool)> = HashMap::new();
        let rendered = crate::offload::cpu(bytes, || -> Result<Popped, EngineError> {
            let mut messages = Vec::new();
            let mut names: HashMap<Uuid, Arc<str>> = HashMap::new();
            for row in rows {
                let PopRow::Segment {
                    partition_id,
                    partition,
                    base_offset,
                    start_idx,
                    take,
                    created_at,
                    blob,
                    ..
                } = row
                else {
                    continue;
                };
                let name = Arc::clone(
                    names
                        .entry(*partition_id)
                        .or_insert_with(|| Arc::from(partition.as_str())),
                );
                let segment = queen_frame::decompress(blob)?;
                let first = base_offset.saturating_add(i64::try_from(*start_idx).unwrap_or(0));
                let last = first.saturating_add(i64::try_from(*take).unwrap_or(0)) - 1;
                let span = spans.entry(*partition_id).or_insert((last, false));
                span.0 = span.0.max(last);
                for (idx, frame) in segment.slice(*start_idx, *take)?.iter().enumerate() {
                    if !frame.delivered_to(&request.group) {
                        continue;
                    }
                    spans.entry(*partition_id).or_insert((last, false)).1 = true;
                    let payload = if frame.encrypted {
                        let key = self.at_rest.key().ok_or_else(|| {
                            EngineError::EncryptionKeyMissing {
                                queue: queue.name.to_owned(),
                            }
                        })?;
                        Bytes::from(key.open(frame.payload)?)
                    } else {
                        segment.bytes().slice_ref(frame.payload)
                    };
                    let offset_in_segment = i64::try_from(start_idx + idx).unwrap_or(i64::MAX);
                    messages.push(PoppedMessage {
                        id: Uuid::from_bytes(frame.message_id),
                        transaction_id: frame.transaction_id.to_owned(),
                        trace_id: frame.trace_id.map(Uuid::from_bytes),
                        producer_sub: frame.producer_sub.map(str::to_owned),
                        payload,
                        created_at: *created_at,
                        partition_id: *partition_id,
                        partition: Arc::clone(&name),
                        offset: base_offset.saturating_add(offset_in_segment),
                    });
                }
            }
            let lease_id = (!messages.is_empty() && !request.auto_ack).then_some(worker);
            if let Some(lease) = lease_id {
                self.register_leased(queue, &request.group, lease, rows, &messages, &spans);
            }
            Ok(Popped {
                queue: (!messages.is_empty()).then(|| queue.name.to_owned()),
                messages,
                lease_id,
                partitions_claimed: names.len(),
            })
        })
        .await;
        if request.auto_ack {
            // The claim moved the cursors (and a give-back moves them back):
            // the admin views' figures count these partitions again.
            for row in rows {
                let (PopRow::Segment { partition_id, .. } | PopRow::Verdict { partition_id, .. }) =
                    row;
                self.figures.consumed(*partition_id);
            }
        }
        if rendered.is_err() && request.auto_ack {
            self.give_back(queue, &request.group, rows).await;
        }
        if rendered.is_ok() && !request.auto_ack {
            self.release_hidden(queue, &request.group, worker, rows, &spans)
                .await;
        }
        rendered
    }

    /// A leased claim whose span held no frame for this group (only replayed
    /// dead letters of other groups) delivered nothing: move the cursor over
    /// it and release the lease at once instead of at its expiry.
    pub(super) async fn release_hidden(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        lease: Uuid,
        rows: &[PopRow],
        spans: &HashMap<Uuid, (i64, bool)>,
    ) {
        let hidden: Vec<(Uuid, &str, i64)> = rows
            .iter()
            .filter_map(|row| match row {
                PopRow::Verdict {
                    partition_id,
                    partition,
                    verdict: Verdict::Delivered | Verdict::Drained,
                    ..
                } => match spans.get(partition_id) {
                    Some(&(end, false)) => Some((*partition_id, partition.as_str(), end)),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if hidden.is_empty() {
            return;
        }
        let Ok(client) = self.pop_client().await else {
            return; // The lease's expiry releases it.
        };
        for (partition_id, partition, end) in hidden {
            match queen_sql::ack::ack_batch(&client, partition_id, group, lease, end).await {
                Ok(acked) if acked.acked => {
                    self.figures.consumed(partition_id);
                    self.ready().lease_ended(
                        queue.tenant,
                        queue.name,
                        group,
                        partition,
                        acked.pending,
                    );
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, %partition_id, "releasing a claim with nothing for this group failed; its lease expires");
                }
            }
        }
    }

    /// An auto-acked claim moved the cursors in the claiming statement, but
    /// its messages cannot be delivered (a payload sealed with a key this
    /// broker does not hold): put each partition's cursor back before what
    /// it claimed, so the messages are delivered again (once the key is
    /// there) instead of lost. When another pop moved a cursor meanwhile,
    /// that partition's rewind is refused and logged.
    pub(super) async fn give_back(&self, queue: &QueueRef<'_>, group: &str, rows: &[PopRow]) {
        let mut claimed: Vec<(Uuid, &str, i64, i64)> = Vec::new();
        for row in rows {
            let PopRow::Segment {
                partition_id,
                partition,
                base_offset,
                start_idx,
                take,
                ..
            } = row
            else {
                continue;
            };
            let first = base_offset.saturating_add(i64::try_from(*start_idx).unwrap_or(0));
            let last = first.saturating_add(i64::try_from(*take).unwrap_or(0)) - 1;
            match claimed.iter_mut().find(|(id, ..)| id == partition_id) {
                Some((_, _, from, to)) => {
                    *from = (*from).min(first);
                    *to = (*to).max(last);
                }
                None => claimed.push((*partition_id, partition, first, last)),
            }
        }
        let Ok(client) = self.pop_client().await else {
            tracing::error!(
                queue = queue.name,
                "an undeliverable auto-ack claim could not be given back: no connection"
            );
            return;
        };
        for (partition_id, partition, from, to) in claimed {
            match queen_sql::pop::rewind_auto_ack(&**client, partition_id, group, from, to).await {
                Ok(true) => {
                    // Pending again: the ring offers it (no gate opens, so a
                    // message that cannot be opened is not retried in a loop).
                    self.hotlist.mark_ready_for(&queue.key, group, partition);
                    tracing::warn!(queue = queue.name, %partition_id, from, to, "auto-ack claim given back: its messages could not be opened");
                }
                Ok(false) | Err(_) => {
                    tracing::error!(queue = queue.name, %partition_id, from, to, "an undeliverable auto-ack claim could not be given back; a seek reaches its messages");
                }
            }
        }
    }

    /// Remember what a leased pop served, per partition, so a full ack is one
    /// positional advance.
    pub(super) fn register_leased(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        lease: Uuid,
        rows: &[PopRow],
        messages: &[PoppedMessage],
        spans: &HashMap<Uuid, (i64, bool)>,
    ) {
        let now = Instant::now();
        let wall = SystemTime::now();
        for row in rows {
            let PopRow::Verdict {
                partition_id,
                partition,
                verdict: Verdict::Delivered | Verdict::Drained,
                revisit_at,
            } = row
            else {
                continue;
            };
            let served: Vec<&PoppedMessage> = messages
                .iter()
                .filter(|m| m.partition_id == *partition_id)
                .collect();
            let Some(last) = served.last() else {
                continue;
            };
            // The claimed span's end, past frames of other groups' replays
            // this group does not see: acking every served message moves the
            // cursor over those too.
            let batch_end = spans
                .get(partition_id)
                .map_or(last.offset, |&(end, _)| end.max(last.offset));
            let lease_ends = revisit_at.map_or(now, |at| instant_of(at, now, wall));
            self.registry.register(
                lease,
                *partition_id,
                crate::registry::Served {
                    group: group.to_owned(),
                    queue: queue.key.clone().into_owned(),
                    partition: partition.clone(),
                    batch_end,
                    hashes: served
                        .iter()
                        .map(|m| queen_frame::txn_hash(&m.transaction_id))
                        .collect(),
                    forget_at: lease_ends,
                },
                lease_ends,
            );
        }
    }
}
