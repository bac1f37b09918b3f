//! Messages completed per second of a phase.

use std::time::Instant;

/// Messages completed in each second since a phase started.
#[derive(Debug, Default)]
pub(crate) struct Timeline(Vec<u64>);

impl Timeline {
    /// Count `messages` completed at `at`, in the phase that began at `started`.
    pub(crate) fn add(&mut self, started: Instant, at: Instant, messages: u64) {
        let second = usize::try_from(at.duration_since(started).as_secs()).unwrap_or(usize::MAX);
        if self.0.len() <= second {
            self.0.resize(second.saturating_add(1), 0);
        }
        if let Some(count) = self.0.get_mut(second) {
            *count += messages;
        }
    }

    /// Add another task's counts, second by second.
    pub(crate) fn merge(&mut self, other: Timeline) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (total, count) in self.0.iter_mut().zip(other.0) {
            *total += count;
        }
    }

    /// The counts, second by second.
    pub(crate) fn into_vec(self) -> Vec<u64> {
        self.0
    }
}
