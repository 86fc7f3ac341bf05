//! Timing events for scopes opened on a stream (`Profiler::scope_on`), recycled so that a scope
//! costs two `cuEventRecord` calls and no event creation in steady state.

use std::sync::Arc;

use crossbeam_queue::SegQueue;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

/// Free timing-enabled events, of any context. Each is kept in its `Arc` across uses, so that an
/// event shared by two scope records ([`crate::ScopeGuard::next`]) costs no allocation either.
/// A lock-free queue: the collector gives events back in bursts while scopes take them on the
/// application's threads, and a lock there made the two wait on each other.
#[derive(Default)]
pub struct EventPool {
    free: SegQueue<Arc<CudaEvent>>,
    failures: std::sync::atomic::AtomicU64,
}

/// Events of another context taken off the queue before one of the stream's is found (or a new
/// one made): they go back, and with one context per process this never happens.
const CONTEXT_TRIES: usize = 4;

impl EventPool {
    /// Records an event on `stream`: one from the pool when one of the stream's context is free.
    /// `None` when CUDA refused (counted; the scope then has no device time).
    pub fn record(&self, stream: &Arc<CudaStream>) -> Option<Arc<CudaEvent>> {
        let ctx = stream.context();
        let mut reused = None;
        for _ in 0..CONTEXT_TRIES {
            let Some(e) = self.free.pop() else { break };
            if Arc::ptr_eq(e.context(), ctx) {
                reused = Some(e);
                break;
            }
            self.free.push(e);
        }
        let event = match reused {
            Some(e) => e,
            None => match ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)) {
                Ok(e) => Arc::new(e),
                Err(_) => {
                    self.failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return None;
                }
            },
        };
        match event.record(stream) {
            Ok(()) => Some(event),
            Err(_) => {
                self.failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.give_back(event);
                None
            }
        }
    }

    /// Returns an event whose time has been read. An event still held elsewhere (shared by the
    /// next scope's record, which has not been read yet) is left to its last holder.
    pub fn give_back(&self, mut event: Arc<CudaEvent>) {
        if Arc::get_mut(&mut event).is_some() {
            self.free.push(event);
        }
    }

    /// Event records CUDA refused.
    pub fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Device time between two events recorded on one stream, `start` first, once both have
/// completed; `None` while either is pending. `Err` when CUDA reports an error for them.
///
/// One driver call, `cuEventElapsedTime`, which itself answers NOT_READY while an event is
/// pending (and a context check). cudarc's `elapsed_ms` also synchronizes on both events and
/// binds the context three times: seven calls per scope on the collector's thread, each contending
/// with the application's launches (`overhead --scope-on`, runs 49–51).
pub fn elapsed_ns(
    start: &CudaEvent,
    end: &CudaEvent,
) -> Result<Option<u64>, cudarc::driver::DriverError> {
    start.context().bind_to_thread()?;
    // SAFETY: both handles belong to events borrowed for the call, so neither is destroyed
    // during it; cuEventElapsedTime only reads them, and returns NOT_READY (handled below) while
    // either has not completed.
    let ms =
        match unsafe { cudarc::driver::result::event::elapsed(start.cu_event(), end.cu_event()) } {
            Ok(ms) => ms,
            Err(cudarc::driver::DriverError(
                cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_READY,
            )) => return Ok(None),
            Err(e) => return Err(e),
        };
    Ok(Some((f64::from(ms) * 1e6).round().max(0.0) as u64))
}
