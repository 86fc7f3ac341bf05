//! Timing events for scopes opened on a stream (`Profiler::scope_on`), recycled so that a scope
//! costs two `cuEventRecord` calls and no event creation in steady state.
//!
//! The pool owns every event it makes and destroys them when the run ends; scopes and the
//! collector pass plain driver handles ([`EventHandle`]). A scope thread takes events from its own
//! free list (`LocalEvents`) and, when that is empty, takes a whole batch of events the
//! collector has read, from a lock-free queue: no lock, no reference count and no allocation on
//! the scope's thread, whose cache lines the collector would otherwise take from it at every
//! scope (docs/overhead.md, "Scope on a stream").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use cudarc::driver::sys::{CUcontext, CUevent, CUevent_flags, CUstream};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

/// One of the pool's timing events: its driver handle and its context's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EventHandle {
    event: CUevent,
    ctx: CUcontext,
}

// SAFETY: driver handles are opaque values that the driver lets any thread use. The event behind
// a handle lives as long as the run's `EventPool`, which owns it, and handles are only used
// through the pool's run: scope threads drop theirs when a new run starts, and the collector,
// which reads them, holds the run.
unsafe impl Send for EventHandle {}
// SAFETY: as for Send; a handle is a copied value with no interior state.
unsafe impl Sync for EventHandle {}

/// The events of a scope opened on a stream, as its record carries them to the collector.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScopeEvents {
    /// Recorded when the scope began.
    pub start: EventHandle,
    /// Recorded when it ended.
    pub end: EventHandle,
    /// `start` is also the end of the scope before it ([`crate::ScopeGuard::next`]).
    pub start_shared: bool,
    /// `end` is also the start of the scope after it.
    pub end_shared: bool,
}

/// A scope's two events in 24 bytes: both are recorded on the scope's one stream, so they share
/// its context. [`PackedEvents::NONE`] for a scope without events.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedEvents {
    start: CUevent,
    end: CUevent,
    ctx: CUcontext,
}

// SAFETY: as for `EventHandle`: opaque driver handles of the run's pool, copied values.
unsafe impl Send for PackedEvents {}
// SAFETY: as for Send.
unsafe impl Sync for PackedEvents {}

impl PackedEvents {
    /// A scope's start and end events, as its ring record carries them (the shared flags travel
    /// beside them, so that the record fits one cache line).
    pub(crate) fn new(start: EventHandle, end: EventHandle) -> Self {
        debug_assert_eq!(
            start.ctx, end.ctx,
            "a scope's events share its stream's context"
        );
        PackedEvents {
            start: start.event,
            end: end.event,
            ctx: start.ctx,
        }
    }

    /// No events: the scope was not timed on a stream, or CUDA refused a record.
    pub(crate) const NONE: PackedEvents = PackedEvents {
        start: std::ptr::null_mut(),
        end: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };

    /// The events back, with their shared flags; `None` for [`PackedEvents::NONE`].
    pub(crate) fn unpack(self, start_shared: bool, end_shared: bool) -> Option<ScopeEvents> {
        if self.start.is_null() {
            return None;
        }
        Some(ScopeEvents {
            start: EventHandle {
                event: self.start,
                ctx: self.ctx,
            },
            end: EventHandle {
                event: self.end,
                ctx: self.ctx,
            },
            start_shared,
            end_shared,
        })
    }
}

/// A CUDA stream an application holds as a raw driver handle (frameworks keep streams of their
/// own), with its context, for [`Profiler::scope_on_raw`](crate::Profiler::scope_on_raw).
#[derive(Debug, Clone, Copy)]
pub struct RawStream {
    stream: CUstream,
    ctx: CUcontext,
}

// SAFETY: driver handles are opaque values the driver lets any thread use; the stream's and the
// context's lifetimes are the caller's promise at `from_raw`.
unsafe impl Send for RawStream {}
// SAFETY: as for Send; the value is two copied handles with no interior state.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// The stream `stream` and the context it belongs to (asked of the driver once here).
    ///
    /// # Safety
    /// `stream` is a stream handle of the CUDA driver API (a `cudaStream_t` of the runtime is
    /// one), not destroyed while this value is used, and its context stays alive until the
    /// running profiler has finished (the collector reads the scope's events there).
    ///
    /// # Errors
    /// The driver's answer when it does not know the stream (`CUDA_ERROR_INVALID_HANDLE`,
    /// `CUDA_ERROR_INVALID_CONTEXT`).
    pub unsafe fn from_raw(stream: CUstream) -> Result<RawStream, DriverError> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: the caller vouches for the handle; cuStreamGetCtx only reads it and writes the
        // context through the pointer, which points at a local.
        unsafe { cudarc::driver::sys::cuStreamGetCtx(stream, &mut ctx) }.result()?;
        Ok(RawStream { stream, ctx })
    }

    /// The driver handle.
    pub fn handle(&self) -> CUstream {
        self.stream
    }
}

/// The stream a scope is timed on.
#[derive(Clone, Copy)]
pub(crate) enum StreamRef<'s> {
    Cudarc(&'s CudaStream),
    Raw(&'s RawStream),
}

/// A thread's free events, taken without a lock or an atomic operation.
#[derive(Default)]
pub(crate) struct LocalEvents {
    free: Vec<EventHandle>,
}

/// Free events of the wrong context looked at before one of the stream's is sought elsewhere:
/// with one context per thread the last free event always fits.
const CONTEXT_TRIES: usize = 4;

impl LocalEvents {
    fn take(&mut self, ctx: CUcontext) -> Option<EventHandle> {
        let from = self.free.len().saturating_sub(CONTEXT_TRIES);
        let i = self.free[from..].iter().rposition(|h| h.ctx == ctx)?;
        Some(self.free.swap_remove(from + i))
    }
}

/// Batches of returned events the queues hold; the collector keeps adding to its own batch while
/// the queue is full (no scope thread has taken any for a while).
const BATCHES: usize = 64;

/// Timing-enabled events of any context, owned for the run.
pub(crate) struct EventPool {
    /// Every event made; dropped (destroyed) with the pool. Locked only to add a new event.
    owned: parking_lot::Mutex<Vec<CudaEvent>>,
    /// Events made for raw streams, with their contexts; destroyed with the pool.
    owned_raw: parking_lot::Mutex<Vec<EventHandle>>,
    /// Batches of events the collector has read, for any scope thread to take whole.
    returned: ArrayQueue<Vec<EventHandle>>,
    /// Emptied batch vectors going back to the collector, so that neither side allocates.
    spare: ArrayQueue<Vec<EventHandle>>,
    failures: AtomicU64,
}

impl Default for EventPool {
    fn default() -> Self {
        EventPool {
            owned: parking_lot::Mutex::new(Vec::new()),
            owned_raw: parking_lot::Mutex::new(Vec::new()),
            returned: ArrayQueue::new(BATCHES),
            spare: ArrayQueue::new(BATCHES),
            failures: AtomicU64::new(0),
        }
    }
}

impl EventPool {
    /// Records an event on `stream`: a free one of the stream's context from `local`, else from
    /// those returned since, else a new one. `None` when CUDA refused (counted; the scope then
    /// has no device time).
    pub(crate) fn record(
        &self,
        local: &mut LocalEvents,
        stream: StreamRef<'_>,
    ) -> Option<EventHandle> {
        let (key, cu_stream) = match stream {
            StreamRef::Cudarc(s) => (s.context().cu_ctx(), s.cu_stream()),
            StreamRef::Raw(r) => (r.ctx, r.stream),
        };
        let handle = match local.take(key) {
            Some(h) => h,
            None => {
                self.take_returned(local);
                match local.take(key) {
                    Some(h) => h,
                    None => match stream {
                        StreamRef::Cudarc(s) => self.create(s.context())?,
                        StreamRef::Raw(r) => self.create_raw(r.ctx)?,
                    },
                }
            }
        };
        // A stream of its own names its context, so the record is tried first without asking
        // the driver which context is current (cudarc's `CudaEvent::record` asks every time,
        // a driver call per record next to the application's launches). Where it is refused
        // (no context current, another one current), the context is bound and the record tried
        // again. The NULL stream means the current context's: bound first.
        if !cu_stream.is_null() {
            // SAFETY: the event belongs to the pool, which outlives this call, and to the
            // stream's context (`take` matched it); the stream is borrowed for the call (a raw
            // one by the guarantee of `RawStream::from_raw`).
            if unsafe { cudarc::driver::result::event::record(handle.event, cu_stream) }.is_ok() {
                return Some(handle);
            }
        }
        let bound = match stream {
            StreamRef::Cudarc(s) => s.context().bind_to_thread().is_ok(),
            // SAFETY: the context is alive (`RawStream::from_raw`'s guarantee).
            StreamRef::Raw(r) => unsafe { cudarc::driver::result::ctx::set_current(r.ctx) }.is_ok(),
        };
        if !bound {
            return self.failed(local, handle);
        }
        // SAFETY: as above, with the stream's context now bound to this thread.
        match unsafe { cudarc::driver::result::event::record(handle.event, cu_stream) } {
            Ok(()) => Some(handle),
            Err(_) => self.failed(local, handle),
        }
    }

    /// A new event of the raw context `ctx`, bound to this thread for the call.
    #[cold]
    #[inline(never)]
    fn create_raw(&self, ctx: CUcontext) -> Option<EventHandle> {
        // SAFETY: the context is alive (`RawStream::from_raw`'s guarantee); binding it on this
        // thread is what the application's own event creation would do.
        let made = unsafe { cudarc::driver::result::ctx::set_current(ctx) }
            .and_then(|()| cudarc::driver::result::event::create(CUevent_flags::CU_EVENT_DEFAULT));
        match made {
            Ok(event) => {
                let handle = EventHandle { event, ctx };
                self.owned_raw.lock().push(handle);
                Some(handle)
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    // Out of line, as the two below: the scope's hot path stays a few cache lines of code.
    #[cold]
    #[inline(never)]
    fn failed(&self, local: &mut LocalEvents, handle: EventHandle) -> Option<EventHandle> {
        self.failures.fetch_add(1, Ordering::Relaxed);
        local.free.push(handle);
        None
    }

    /// Moves one returned batch into `local`. The emptied vector goes back as a spare.
    #[inline(never)]
    fn take_returned(&self, local: &mut LocalEvents) {
        let Some(mut batch) = self.returned.pop() else {
            return;
        };
        if local.free.is_empty() {
            std::mem::swap(&mut local.free, &mut batch);
        } else {
            local.free.append(&mut batch);
        }
        // A full spare queue drops the vector: only when threads took far more than returned.
        let _ = self.spare.push(batch);
    }

    #[cold]
    #[inline(never)]
    fn create(&self, ctx: &Arc<CudaContext>) -> Option<EventHandle> {
        match ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)) {
            Ok(e) => {
                let handle = EventHandle {
                    event: e.cu_event(),
                    ctx: ctx.cu_ctx(),
                };
                self.owned.lock().push(e);
                Some(handle)
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Makes the events in `batch` free for any scope thread, leaving it empty; while the queue
    /// of returned batches is full, `batch` keeps them for the next call.
    pub(crate) fn give_back(&self, batch: &mut Vec<EventHandle>) {
        if batch.is_empty() {
            return;
        }
        let full = std::mem::replace(batch, self.spare.pop().unwrap_or_default());
        if let Err(full) = self.returned.push(full) {
            let spare = std::mem::replace(batch, full);
            let _ = self.spare.push(spare);
        }
    }

    /// Event records CUDA refused.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Events made so far.
    pub(crate) fn made(&self) -> usize {
        self.owned.lock().len() + self.owned_raw.lock().len()
    }
}

impl Drop for EventPool {
    fn drop(&mut self) {
        for h in self.owned_raw.get_mut().drain(..) {
            // SAFETY: the pool made the event and nothing uses it any more (the run has
            // finished); its context is alive (`RawStream::from_raw`'s guarantee). A failure
            // leaves the event to its context's destruction.
            unsafe {
                if cudarc::driver::result::ctx::set_current(h.ctx).is_ok() {
                    let _ = cudarc::driver::result::event::destroy(h.event);
                }
            }
        }
    }
}

/// The collector's side: reads scope events and gives the read ones back to the pool.
#[derive(Default)]
pub(crate) struct EventReader {
    /// The context made current on the collector's thread for the last read, this pass.
    bound: Option<CUcontext>,
    /// Events read this pass, given back together.
    batch: Vec<EventHandle>,
    /// Shared boundary events whose one scope has been read: the event is free once the
    /// other's has been read too.
    half_read: rustc_hash::FxHashSet<EventHandle>,
}

impl EventReader {
    /// Device time of a scope's events, once both have completed; `None` while either is
    /// pending. The events are given back (at [`EventReader::end_pass`]) once read.
    pub(crate) fn read(&mut self, ev: &ScopeEvents) -> Result<Option<u64>, DriverError> {
        if self.bound != Some(ev.start.ctx) {
            // SAFETY: the context is alive: the run's pool owns events of it, and cudarc's
            // context, which the pool's events hold, keeps it.
            unsafe { cudarc::driver::result::ctx::set_current(ev.start.ctx) }?;
            self.bound = Some(ev.start.ctx);
        }
        // SAFETY: both events belong to the run's pool, alive while the collector runs; the
        // call only reads them.
        let ns = raw_elapsed_ns(unsafe {
            cudarc::driver::result::event::elapsed(ev.start.event, ev.end.event)
        })?;
        if ns.is_some() {
            self.release(ev.start, ev.start_shared);
            self.release(ev.end, ev.end_shared);
        }
        Ok(ns)
    }

    fn release(&mut self, handle: EventHandle, shared: bool) {
        if !shared || self.half_read.remove(&handle) {
            self.batch.push(handle);
        } else {
            self.half_read.insert(handle);
        }
    }

    /// Ends a pass: gives the events read back to `pool` in one lock, and forgets the bound
    /// context (other work on the thread may change it between passes).
    pub(crate) fn end_pass(&mut self, pool: &EventPool) {
        pool.give_back(&mut self.batch);
        self.bound = None;
    }
}

/// Device time between two events recorded on one stream, `start` first, once both have
/// completed; `None` while either is pending. `Err` when CUDA reports an error for them.
///
/// One driver call, `cuEventElapsedTime`, which itself answers NOT_READY while an event is
/// pending (and a context check). cudarc's `elapsed_ms` also synchronizes on both events and
/// binds the context three times: seven calls per scope on the collector's thread, each contending
/// with the application's launches (`overhead --scope-on`).
#[cfg(feature = "internals")]
pub fn elapsed_ns(start: &CudaEvent, end: &CudaEvent) -> Result<Option<u64>, DriverError> {
    start.context().bind_to_thread()?;
    // SAFETY: both handles belong to events borrowed for the call, so neither is destroyed
    // during it; cuEventElapsedTime only reads them, and returns NOT_READY (handled below) while
    // either has not completed.
    raw_elapsed_ns(unsafe {
        cudarc::driver::result::event::elapsed(start.cu_event(), end.cu_event())
    })
}

/// `cuEventElapsedTime`'s answer in ns: NOT_READY is `None`.
fn raw_elapsed_ns(answer: Result<f32, DriverError>) -> Result<Option<u64>, DriverError> {
    match answer {
        Ok(ms) => Ok(Some((f64::from(ms) * 1e6).round().max(0.0) as u64)),
        Err(DriverError(cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_READY)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn handle(event: usize, ctx: usize) -> EventHandle {
        EventHandle {
            event: event as CUevent,
            ctx: ctx as CUcontext,
        }
    }

    /// Packed events `start`, `end` of context `ctx` (for the scope module's tests).
    pub(crate) fn packed(start: usize, end: usize, ctx: usize) -> PackedEvents {
        PackedEvents::new(handle(start, ctx), handle(end, ctx))
    }

    #[test]
    fn packed_events_unpack_to_the_same_handles_and_flags() {
        let p = PackedEvents::new(handle(1, 10), handle(2, 10));
        let back = p.unpack(true, false).expect("events");
        assert_eq!((back.start, back.end), (handle(1, 10), handle(2, 10)));
        assert!(back.start_shared && !back.end_shared);
        assert!(PackedEvents::NONE.unpack(true, true).is_none());
    }

    #[test]
    fn a_thread_takes_the_newest_free_event_of_its_context() {
        let mut local = LocalEvents {
            free: vec![handle(1, 10), handle(2, 10), handle(3, 20)],
        };
        assert_eq!(local.take(10 as CUcontext), Some(handle(2, 10)));
        assert_eq!(local.take(20 as CUcontext), Some(handle(3, 20)));
        assert_eq!(local.take(10 as CUcontext), Some(handle(1, 10)));
        assert_eq!(local.take(10 as CUcontext), None);
    }

    #[test]
    fn events_of_another_context_beyond_the_last_few_are_not_searched() {
        let mut free = vec![handle(1, 10)];
        free.extend((0..CONTEXT_TRIES).map(|i| handle(100 + i, 20)));
        let mut local = LocalEvents { free };
        assert_eq!(local.take(10 as CUcontext), None);
        assert_eq!(
            local.free.len(),
            CONTEXT_TRIES + 1,
            "nothing is lost by looking"
        );
    }

    #[test]
    fn returned_events_reach_a_thread_in_one_take_and_nothing_is_made() {
        let pool = EventPool::default();
        let mut batch = vec![handle(1, 10), handle(2, 10)];
        pool.give_back(&mut batch);
        assert!(batch.is_empty());
        let mut local = LocalEvents::default();
        pool.take_returned(&mut local);
        assert_eq!(local.free.len(), 2);
        assert!(pool.returned.is_empty());
        assert_eq!(pool.spare.len(), 1, "the emptied vector goes back");
        // The next batch is built in that spare: nothing allocated on either side.
        let mut batch = vec![handle(3, 10)];
        pool.give_back(&mut batch);
        assert!(pool.spare.is_empty());
        pool.take_returned(&mut local);
        assert_eq!(local.free.len(), 3);
        assert_eq!(pool.made(), 0);
    }

    #[test]
    fn while_no_thread_takes_returned_events_the_collector_keeps_them() {
        let pool = EventPool::default();
        for i in 0..BATCHES {
            pool.give_back(&mut vec![handle(i, 10)]);
        }
        let mut batch = vec![handle(1000, 10)];
        pool.give_back(&mut batch);
        assert_eq!(batch, vec![handle(1000, 10)], "kept for the next call");
        let mut local = LocalEvents::default();
        pool.take_returned(&mut local);
        pool.give_back(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(pool.returned.len(), BATCHES);
    }

    #[test]
    fn a_shared_boundary_event_is_given_back_only_after_both_its_scopes_are_read() {
        let mut reader = EventReader::default();
        let boundary = handle(2, 10);
        reader.release(handle(1, 10), false);
        reader.release(boundary, true);
        assert_eq!(reader.batch, vec![handle(1, 10)]);
        reader.release(boundary, true);
        reader.release(handle(3, 10), false);
        assert_eq!(reader.batch, vec![handle(1, 10), boundary, handle(3, 10)]);
        assert!(reader.half_read.is_empty());
        let pool = EventPool::default();
        reader.end_pass(&pool);
        assert_eq!(pool.returned.pop().map(|b| b.len()), Some(3));
        assert!(reader.batch.is_empty());
    }
}
