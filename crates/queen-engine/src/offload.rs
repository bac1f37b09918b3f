//! Large compression work off the async worker threads.
//!
//! zstd over a segment of a few KiB takes microseconds and stays where it is.
//! Over megabytes (a fusion flush of up to 64 lanes of up to 8 MiB, a pop of
//! large segments, a big transactional push) it takes milliseconds to
//! seconds, and a worker thread busy with it serves no other connection. So
//! work over [`OFFLOAD_BYTES`] runs in `tokio::task::block_in_place`: the
//! worker's other tasks move to another thread of the runtime while this
//! one compresses, and the borrowing closure needs no copy of its input. At
//! most as many offloads as the machine has cores run at once (a bounded
//! pool); the rest wait for a slot, asynchronously. On a current-thread
//! runtime (where `block_in_place` is not allowed) the work runs inline.

use std::sync::OnceLock;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Semaphore;

/// Work over this many bytes (raw payload to compress, or compressed blobs
/// to inflate) leaves the worker thread.
pub(crate) const OFFLOAD_BYTES: usize = 256 * 1024;

/// About how many bytes inflating a blob of `compressed` bytes produces and
/// walks. JSON payloads compress 3 to 10 times and a repetitive one far more,
/// so the compressed size alone would leave a large, compressible segment
/// inline; a factor of 8 errs towards offloading.
pub(crate) fn inflated_estimate(compressed: usize) -> usize {
    compressed.saturating_mul(8)
}

/// Offloads running at once, machine-wide.
fn slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Semaphore::new(cores)
    })
}

/// Run `work`, which handles about `bytes` bytes: inline when small, else
/// off the worker thread (see the module docs).
pub(crate) async fn cpu<T>(bytes: usize, work: impl FnOnce() -> T) -> T {
    if bytes < OFFLOAD_BYTES || !offloadable() {
        return work();
    }
    // The semaphore is never closed: a failed acquire cannot happen, and
    // would only mean running without a slot.
    let _slot = slots().acquire().await;
    tokio::task::block_in_place(work)
}

/// Whether this runtime can hand its worker's tasks elsewhere.
fn offloadable() -> bool {
    Handle::try_current().is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread)
}
