//! The timeline level: CUPTI activity tracing.
//!
//! CUPTI fills buffers from the preallocated [`pool::BufferPool`] and hands each completed buffer
//! to the collector thread through a channel, without copying; decoding into owned
//! [`record::Record`]s happens there, never on the application's threads.

pub mod calls;
pub mod pool;
pub mod record;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use cupti_sys as sys;
use parking_lot::RwLock;

use crate::cupti::{self, Subscription};
use crate::error::Result;
use crate::loader::LoadedCupti;
use pool::BufferPool;

/// A buffer CUPTI has filled, on its way to the collector.
pub struct FilledBuffer {
    /// Start of the buffer (from the pool).
    pub ptr: NonNull<u8>,
    /// Bytes of valid records in it.
    pub valid: usize,
}

// SAFETY: ownership of the buffer moves with the value; CUPTI no longer touches it.
unsafe impl Send for FilledBuffer {}

/// Counters kept by the buffer callbacks.
#[derive(Default)]
pub struct ActivityStats {
    /// Buffers handed to CUPTI.
    pub buffers_used: AtomicU64,
    /// Requests refused because the pool was exhausted.
    pub requests_refused: AtomicU64,
    /// Buffers allocated after start because the pool ran dry.
    pub pool_growth: AtomicU64,
    /// Time spent inside the callbacks, ns.
    pub callback_ns: AtomicU64,
    /// Records CUPTI reported as dropped.
    pub dropped_records: AtomicU64,
}

/// What the callbacks need: the pool, the collector's inbox and the counters.
pub struct ActivityShared {
    /// Free buffers.
    pub pool: BufferPool,
    /// The collector's inbox for filled buffers.
    pub sink: Sender<FilledBuffer>,
    /// Callback counters.
    pub stats: ActivityStats,
}

/// The state CUPTI's callbacks reach (they take no user pointer). Set while a session runs.
static SHARED: RwLock<Option<Arc<ActivityShared>>> = RwLock::new(None);

unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let t0 = Instant::now();
    let _ = std::panic::catch_unwind(|| {
        let shared = SHARED.read();
        let taken = shared.as_ref().and_then(|s| s.pool.take().map(|t| (s, t)));
        // One lock of SHARED per callback (this may run on the launching thread).
        let _timer = shared.as_deref().map(|s| CallbackTimer(s, t0));
        // SAFETY: CUPTI passes valid out-pointers.
        unsafe {
            *max_records = 0;
            match taken {
                Some((s, (ptr, grew))) => {
                    *buffer = ptr.as_ptr();
                    *size = s.pool.buffer_bytes();
                    s.stats.buffers_used.fetch_add(1, Ordering::Relaxed);
                    if grew {
                        s.stats.pool_growth.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => {
                    *buffer = std::ptr::null_mut();
                    *size = 0;
                    if let Some(s) = shared.as_ref() {
                        s.stats.requests_refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
}

unsafe extern "C" fn buffer_completed(
    ctx: sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let t0 = Instant::now();
    let _ = std::panic::catch_unwind(|| {
        let shared = SHARED.read();
        let Some(s) = shared.as_ref() else { return };
        let _timer = CallbackTimer(s, t0);
        if let Ok(lib) = cupti::api() {
            // SAFETY: ctx is the handle CUPTI passed to this callback.
            if let Ok(n) = unsafe { cupti::dropped_records(lib, ctx, stream_id) } {
                s.stats
                    .dropped_records
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        let Some(ptr) = NonNull::new(buffer) else {
            return;
        };
        if let Err(e) = s.sink.send(FilledBuffer { ptr, valid }) {
            // The collector is gone: nothing can decode it, so count what it held as dropped.
            s.pool.give_back(e.into_inner().ptr);
            s.stats.dropped_records.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Adds the time since its start to the callbacks' total when dropped, at the end of the
/// callback's body, through the state the callback already holds.
struct CallbackTimer<'a>(&'a ActivityShared, Instant);

impl Drop for CallbackTimer<'_> {
    fn drop(&mut self) {
        self.0
            .stats
            .callback_ns
            .fetch_add(self.1.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Calls `f` on every record of a filled buffer, then returns the buffer to the pool.
///
/// # Safety
/// `buf` came from CUPTI's completion callback of the running session and is not used again.
pub unsafe fn drain_buffer(
    lib: &LoadedCupti,
    shared: &ActivityShared,
    buf: FilledBuffer,
    mut f: impl FnMut(*const sys::CUpti_Activity),
) {
    let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: buffer and valid size are CUPTI's own; `rec` walks the buffer as CUPTI
        // documents (start with null, stop at MAX_LIMIT_REACHED or any error).
        let rc = unsafe {
            lib.api
                .cuptiActivityGetNextRecord(buf.ptr.as_ptr(), buf.valid, &mut rec)
        };
        if rc != sys::CUptiResult::CUPTI_SUCCESS {
            break;
        }
        f(rec);
    }
    shared.pool.give_back(buf.ptr);
}

/// How a traced API call relates to GPU activity, for attribution and completeness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiClass {
    /// A kernel launch: exactly one kernel record follows.
    KernelLaunch,
    /// A graph launch: any number of records follow.
    GraphLaunch,
    /// A copy: one memcpy record follows (none for zero bytes).
    Memcpy,
    /// A memset: one memset record follows.
    Memset,
    /// Allocation, release or synchronization: records of their own kinds, not awaited.
    Other,
}

/// Classifies a driver or runtime API function by name; `None` for functions not traced.
pub fn classify_api(name: &str) -> Option<ApiClass> {
    let n = name.strip_prefix("cu").unwrap_or(name);
    let n = n.strip_prefix("da").unwrap_or(n); // cudaX -> X for runtime names
    if n.starts_with("LaunchHostFunc") {
        return Some(ApiClass::Other);
    }
    if n.starts_with("GraphLaunch") {
        return Some(ApiClass::GraphLaunch);
    }
    if n.starts_with("Launch") {
        return Some(ApiClass::KernelLaunch);
    }
    if n.starts_with("Memcpy") {
        return Some(ApiClass::Memcpy);
    }
    if n.starts_with("Memset") {
        return Some(ApiClass::Memset);
    }
    const OTHER: [&str; 8] = [
        "MemAlloc",
        "MemFree",
        "Malloc",
        "Free",
        "StreamSynchronize",
        "CtxSynchronize",
        "DeviceSynchronize",
        "EventSynchronize",
    ];
    if OTHER.iter().any(|p| n.starts_with(p)) || n.starts_with("StreamWaitEvent") {
        return Some(ApiClass::Other);
    }
    None
}

/// The class of every driver and runtime function ([`classify_api`]), by callback id: the
/// callback's "is it counted" and the collector's "is it awaited" read the same table.
pub struct ApiClasses {
    driver: Box<[Option<ApiClass>]>,
    runtime: Box<[Option<ApiClass>]>,
}

impl Default for ApiClasses {
    fn default() -> Self {
        fn table(cbids: &[(u32, &str)]) -> Box<[Option<ApiClass>]> {
            let max = cbids.iter().map(|(id, _)| *id).max().unwrap_or(0) as usize;
            let mut out = vec![None; max + 1];
            for (id, name) in cbids {
                out[*id as usize] = classify_api(name);
            }
            out.into_boxed_slice()
        }
        ApiClasses {
            driver: table(sys::DRIVER_API_CBIDS),
            runtime: table(sys::RUNTIME_API_CBIDS),
        }
    }
}

impl ApiClasses {
    /// The class of function `cbid` of the runtime (`runtime`) or driver API; `None` for
    /// functions not traced and unknown ids.
    #[inline]
    pub fn of(&self, runtime: bool, cbid: u32) -> Option<ApiClass> {
        let table = if runtime { &self.runtime } else { &self.driver };
        table.get(cbid as usize).copied().flatten()
    }
}

/// True for the API classes whose calls are counted and awaited.
pub fn is_counted(class: Option<ApiClass>) -> bool {
    matches!(
        class,
        Some(ApiClass::KernelLaunch | ApiClass::GraphLaunch | ApiClass::Memcpy | ApiClass::Memset)
    )
}

/// Activity kinds the timeline level enables. Not DRIVER and RUNTIME, nor EXTERNAL_CORRELATION:
/// the callback captures what attribution needs of each call ([`calls`]).
const KINDS: [sys::CUpti_ActivityKind::Type; 7] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY2,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMORY2,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_OVERHEAD,
];

/// A running activity-tracing session: CUPTI's subscriber slot, the enabled kinds, the buffer
/// callbacks' shared state and the calls the API callback captures.
pub struct TimelineSession {
    lib: &'static LoadedCupti,
    subscription: Option<Subscription>,
    shared: Arc<ActivityShared>,
    /// Kept alive here: CUPTI's callback holds a pointer to it until unsubscribe.
    calls: Arc<calls::ApiCalls>,
}

impl TimelineSession {
    /// Claims CUPTI, installs the buffer callbacks, enables the timeline's activity kinds and
    /// the API callback that captures what attribution needs of each call.
    ///
    /// # Errors
    /// [`crate::Error::CuptiBusy`] when another CUPTI client is attached; any CUPTI failure.
    pub fn start(
        lib: &'static LoadedCupti,
        shared: Arc<ActivityShared>,
        calls: Arc<calls::ApiCalls>,
    ) -> Result<Self> {
        let userdata = Arc::as_ptr(&calls) as *mut std::os::raw::c_void;
        // SAFETY: `calls` outlives the subscription (the session owns a clone and unsubscribes
        // before dropping it); capture_api_call never unwinds.
        let subscription = unsafe { cupti::subscribe(lib, calls::capture_api_call, userdata) }?;
        *SHARED.write() = Some(shared.clone());
        let session = TimelineSession {
            lib,
            subscription: Some(subscription),
            shared,
            calls,
        };
        // On any failure below, Drop undoes what was done.
        // The pool hands out zeroed buffers (see `pool`): CUPTI need not zero them on the
        // launching thread. Before the callbacks, so that it holds for every buffer. A CUPTI
        // without the attribute zeroes them itself: slower, nothing lost, so not an error.
        let _ = cupti::declare_zeroed_buffers(lib, true);
        cupti::register_callbacks(lib, buffer_requested, buffer_completed)?;
        for kind in KINDS {
            cupti::activity_enable(lib, kind)?;
        }
        session.set_capture(true)?;
        Ok(session)
    }

    /// The calls captured and counted so far.
    pub fn calls(&self) -> &Arc<calls::ApiCalls> {
        &self.calls
    }

    /// The API callback, for every function attribution traces ([`classify_api`]).
    fn set_capture(&self, enable: bool) -> Result<()> {
        let Some(sub) = &self.subscription else {
            return Ok(());
        };
        use sys::CUpti_CallbackDomain as d;
        for (domain, table) in [
            (d::CUPTI_CB_DOMAIN_DRIVER_API, sys::DRIVER_API_CBIDS),
            (d::CUPTI_CB_DOMAIN_RUNTIME_API, sys::RUNTIME_API_CBIDS),
        ] {
            for (cbid, name) in table {
                if classify_api(name).is_some() {
                    cupti::enable_callback(self.lib, sub, domain, *cbid, enable)?;
                }
            }
        }
        Ok(())
    }

    /// The callbacks' shared state.
    pub fn shared(&self) -> &Arc<ActivityShared> {
        &self.shared
    }

    /// Asks CUPTI to hand over every buffer holding completed records.
    pub fn flush(&self) -> Result<()> {
        cupti::flush_all(self.lib, false)
    }

    /// Disables tracing, flushes everything (forced) and releases CUPTI.
    ///
    /// # Errors
    /// The first CUPTI failure; the rest of the teardown still runs.
    pub fn stop(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(sub) = self.subscription.take() else {
            return Ok(());
        };
        let mut first_err = None;
        let mut keep = |r: Result<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        for kind in KINDS {
            keep(cupti::activity_disable(self.lib, kind));
        }
        keep(self.set_capture(false));
        keep(cupti::flush_all(self.lib, true));
        // Best effort, as at start.
        let _ = cupti::declare_zeroed_buffers(self.lib, false);
        keep(cupti::unsubscribe(self.lib, sub));
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for TimelineSession {
    fn drop(&mut self) {
        let _ = self.teardown();
        let mut shared = SHARED.write();
        if shared
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &self.shared))
        {
            *shared = None;
        }
    }
}
