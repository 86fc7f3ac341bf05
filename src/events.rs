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

/// Device time between two recorded events, when both have completed; `None` while pending.
/// `Err` when CUDA reports an error for them.
pub fn elapsed_ns(
    start: &CudaEvent,
    end: &CudaEvent,
) -> Result<Option<u64>, cudarc::driver::DriverError> {
    if !end.try_is_complete()? {
        return Ok(None);
    }
    let ms = start.elapsed_ms(end)?;
    Ok(Some((f64::from(ms) * 1e6).round().max(0.0) as u64))
}
