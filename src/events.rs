//! Timing events for scopes opened on a stream (`Profiler::scope_on`), recycled so that a scope
//! costs two `cuEventRecord` calls and no event creation in steady state.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use parking_lot::Mutex;

/// Free timing-enabled events, of any context. Each is kept in its `Arc` across uses, so that an
/// event shared by two scope records ([`crate::ScopeGuard::next`]) costs no allocation either.
#[derive(Default)]
pub struct EventPool {
    free: Mutex<Vec<Arc<CudaEvent>>>,
    failures: std::sync::atomic::AtomicU64,
}

impl EventPool {
    /// Records an event on `stream`: one from the pool when one of the stream's context is free.
    /// `None` when CUDA refused (counted; the scope then has no device time).
    pub fn record(&self, stream: &Arc<CudaStream>) -> Option<Arc<CudaEvent>> {
        let ctx = stream.context();
        let reused = {
            let mut free = self.free.lock();
            free.iter()
                .rposition(|e| Arc::ptr_eq(e.context(), ctx))
                .map(|i| free.swap_remove(i))
        };
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
            self.free.lock().push(event);
        }
    }

    /// Event records CUDA refused.
    pub fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Device time between two events recorded on one stream, `start` first, once `end` has
/// completed; `None` while pending. `Err` when CUDA reports an error for them.
///
/// Two driver calls: `cuEventQuery` on the end, then `cuEventElapsedTime`. (cudarc's
/// `elapsed_ms` also synchronizes on both events and binds the context three times, seven calls
/// per scope made on the collector's thread while the application launches.)
pub fn elapsed_ns(
    start: &CudaEvent,
    end: &CudaEvent,
) -> Result<Option<u64>, cudarc::driver::DriverError> {
    if !end.try_is_complete()? {
        return Ok(None);
    }
    start.context().bind_to_thread()?;
    // SAFETY: both handles belong to events borrowed for the call, so neither is destroyed
    // during it. `end` has completed and `start` was recorded before it on the same stream, so
    // both have, as cuEventElapsedTime requires; were `start` pending, the call would return
    // NOT_READY, handled below.
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
