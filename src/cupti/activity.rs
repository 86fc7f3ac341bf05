//! The timeline level's CUPTI session: activity tracing and the API callback.
//!
//! CUPTI fills buffers from the preallocated [`BufferPool`] and hands each completed buffer to
//! the collector thread through a channel, without copying; decoding into owned [`Record`]s
//! happens there ([`FilledBuffer::drain`]), never on the application's threads.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use cupti_sys as sys;
use parking_lot::RwLock;

use super::calls::{self, ApiCalls};
use super::functions::traced_functions;
use super::pool::BufferPool;
use super::record::{decode, NameCache, Record};
use super::{LoadedCupti, Subscription};
use crate::cupti;
use crate::error::Result;

/// A buffer CUPTI has filled, on its way to the collector. Made only by the completion
/// callback, so that it always holds a buffer of the pool with `valid` bytes of CUPTI's records.
pub(crate) struct FilledBuffer {
    /// Start of the buffer (from the pool).
    ptr: NonNull<u8>,
    /// Bytes of valid records in it.
    valid: usize,
}

// SAFETY: ownership of the buffer moves with the value; CUPTI no longer touches it.
unsafe impl Send for FilledBuffer {}

/// Counters kept by the buffer callbacks.
#[derive(Default)]
pub(crate) struct ActivityStats {
    /// Buffers handed to CUPTI.
    pub(crate) buffers_used: AtomicU64,
    /// Requests refused because the pool was exhausted.
    pub(crate) requests_refused: AtomicU64,
    /// Buffers allocated after start because the pool ran dry.
    pub(crate) pool_growth: AtomicU64,
    /// Time spent inside the callbacks, ns.
    pub(crate) callback_ns: AtomicU64,
    /// Records CUPTI reported as dropped.
    pub(crate) dropped_records: AtomicU64,
}

/// What the callbacks need: the pool, the collector's inbox and the counters.
pub(crate) struct ActivityShared {
    /// Free buffers.
    pub(crate) pool: BufferPool,
    /// The collector's inbox for filled buffers.
    pub(crate) sink: Sender<FilledBuffer>,
    /// Callback counters.
    pub(crate) stats: ActivityStats,
}

/// The state CUPTI's callbacks reach (they take no user pointer). Set while a session runs.
static SHARED: RwLock<Option<Arc<ActivityShared>>> = RwLock::new(None);

/// Whether a timeline session traces in this process now.
pub(crate) fn tracing() -> bool {
    SHARED.read().is_some()
}

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

impl FilledBuffer {
    /// Decodes every record of the buffer in order, hands each to `f`, then returns the buffer
    /// to the pool.
    pub(crate) fn drain(
        self,
        lib: &LoadedCupti,
        shared: &ActivityShared,
        names: &mut NameCache,
        mut f: impl FnMut(Record),
    ) {
        let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
        loop {
            // SAFETY: the buffer and its valid size are CUPTI's own (only the completion
            // callback makes a FilledBuffer); `rec` walks the buffer as CUPTI documents (start
            // with null, stop at MAX_LIMIT_REACHED or any error).
            let rc = unsafe {
                lib.api
                    .cuptiActivityGetNextRecord(self.ptr.as_ptr(), self.valid, &mut rec)
            };
            if rc != sys::CUptiResult::CUPTI_SUCCESS {
                break;
            }
            // SAFETY: `rec` is a complete record handed out by cuptiActivityGetNextRecord, from
            // the CUPTI whose release the loader found, which writes its release's layouts.
            f(unsafe { decode(rec, names, &lib.release.layouts) });
        }
        shared.pool.give_back(self.ptr);
    }
}

/// Activity kinds the timeline level enables, each with the enable call that names it. Not
/// DRIVER and RUNTIME, nor EXTERNAL_CORRELATION: the callback captures what attribution needs of
/// each call (the `calls` module).
pub const KINDS: [(sys::CUpti_ActivityKind::Type, &str); 7] = {
    use sys::CUpti_ActivityKind as k;
    [
        (
            k::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            "cuptiActivityEnable(CONCURRENT_KERNEL)",
        ),
        (k::CUPTI_ACTIVITY_KIND_MEMCPY, "cuptiActivityEnable(MEMCPY)"),
        (
            k::CUPTI_ACTIVITY_KIND_MEMCPY2,
            "cuptiActivityEnable(MEMCPY2)",
        ),
        (k::CUPTI_ACTIVITY_KIND_MEMSET, "cuptiActivityEnable(MEMSET)"),
        (
            k::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            "cuptiActivityEnable(SYNCHRONIZATION)",
        ),
        (
            k::CUPTI_ACTIVITY_KIND_MEMORY2,
            "cuptiActivityEnable(MEMORY2)",
        ),
        (
            k::CUPTI_ACTIVITY_KIND_OVERHEAD,
            "cuptiActivityEnable(OVERHEAD)",
        ),
    ]
};

/// Turns the timeline's activity kinds and the API callbacks on or off, for a sampled
/// timeline: on, the kinds first, then the callbacks; off, the other way round. Which calls are
/// captured is the capture flag's ([`ApiCalls::traced`]), set apart. Records of work launched
/// before the kinds went off still arrive.
///
/// # Errors
/// The first CUPTI failure; the remaining kinds are still switched.
pub(crate) fn set_kinds_and_callbacks(lib: &LoadedCupti, calls: &ApiCalls, on: bool) -> Result<()> {
    let callbacks = |on: bool| calls.callbacks.get().map_or(Ok(()), |c| c.switch(lib, on));
    if on {
        set_kinds(lib, true)?;
        callbacks(true)
    } else {
        callbacks(false)?;
        set_kinds(lib, false)
    }
}

/// Enables or disables every activity kind the timeline traces.
///
/// # Errors
/// The first CUPTI failure; the remaining kinds are still switched.
pub(crate) fn set_kinds(lib: &LoadedCupti, on: bool) -> Result<()> {
    let mut first_err = None;
    for (kind, _) in KINDS {
        let r = if on {
            cupti::activity_enable(lib, kind)
        } else {
            cupti::activity_disable(lib, kind)
        };
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// A running activity-tracing session: CUPTI's subscriber slot, the enabled kinds, the buffer
/// callbacks' shared state and the calls the API callback captures.
pub(crate) struct TimelineSession {
    lib: &'static LoadedCupti,
    subscription: Option<Subscription>,
    shared: Arc<ActivityShared>,
    /// Kept alive here: CUPTI's callback holds a pointer to it until unsubscribe.
    calls: Arc<ApiCalls>,
    /// Functions whose callback the CUPTI refused at start.
    refused: Vec<&'static str>,
}

impl TimelineSession {
    /// Claims CUPTI, installs the buffer callbacks, enables the timeline's activity kinds and
    /// the API callback that captures what attribution needs of each call.
    ///
    /// # Errors
    /// [`crate::Error::CuptiBusy`] when another CUPTI client is attached; any CUPTI failure.
    pub(crate) fn start(
        lib: &'static LoadedCupti,
        shared: Arc<ActivityShared>,
        calls: Arc<ApiCalls>,
    ) -> Result<Self> {
        let userdata = Arc::as_ptr(&calls) as *mut std::os::raw::c_void;
        // SAFETY: `calls` outlives the subscription (the session owns a clone and unsubscribes
        // before dropping it); capture_api_call never unwinds.
        let subscription = unsafe { cupti::subscribe(lib, calls::capture_api_call, userdata) }?;
        *SHARED.write() = Some(shared.clone());
        let mut session = TimelineSession {
            lib,
            subscription: Some(subscription),
            shared,
            calls,
            refused: Vec::new(),
        };
        // On any failure below, Drop undoes what was done.
        // The pool hands out zeroed buffers (see `pool`): CUPTI need not zero them on the
        // launching thread. Before the callbacks, so that it holds for every buffer. A CUPTI
        // without the attribute zeroes them itself: slower, nothing lost, so not an error.
        let _ = cupti::declare_zeroed_buffers(lib, true);
        cupti::register_callbacks(lib, buffer_requested, buffer_completed)?;
        for (kind, _) in KINDS {
            cupti::activity_enable(lib, kind)?;
        }
        session.refused = session.set_capture(true)?;
        Ok(session)
    }

    /// The API callback, for every function attribution traces ([`traced_functions`]), by the
    /// loaded release's own callback ids. The functions whose callback the release refuses
    /// (`CUPTI_ERROR_INVALID_PARAMETER`) are returned by name: their calls are not captured, and
    /// their records are placed by time. Refusing them all is an error.
    fn set_capture(&self, enable: bool) -> Result<Vec<&'static str>> {
        let Some(sub) = &self.subscription else {
            return Ok(Vec::new());
        };
        use sys::CUpti_CallbackDomain as d;
        let mut refused = Vec::new();
        let mut enabled = Vec::new();
        for (runtime, cbid, name, _) in traced_functions(self.lib.release.cbids) {
            let domain = if runtime {
                d::CUPTI_CB_DOMAIN_RUNTIME_API
            } else {
                d::CUPTI_CB_DOMAIN_DRIVER_API
            };
            match cupti::enable_callback(self.lib, sub, domain, cbid, enable) {
                Ok(()) => enabled.push((domain, cbid)),
                Err(crate::Error::Cupti { code, .. })
                    if code == sys::CUptiResult::CUPTI_ERROR_INVALID_PARAMETER =>
                {
                    refused.push(name);
                }
                Err(e) => return Err(e),
            }
        }
        if enable && enabled.is_empty() {
            return Err(crate::Error::Config(format!(
                "CUPTI {} refused the callback of every traced function ({} of them, \
                 CUPTI_ERROR_INVALID_PARAMETER): launches cannot be attributed",
                self.lib.release.name,
                refused.len()
            )));
        }
        if enable {
            let _ = self
                .calls
                .callbacks
                .set(cupti::CallbackSet::new(sub, &enabled));
        }
        // The cubins of modules loaded while PC sampling is set up, for its source lines. At
        // teardown it is switched off whether or not it was on: nothing to report either way.
        let module_loaded = sys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED;
        if enable && super::pc_sampling::captures_cubins() {
            cupti::enable_callback(
                self.lib,
                sub,
                d::CUPTI_CB_DOMAIN_RESOURCE,
                module_loaded,
                true,
            )?;
        } else if !enable {
            let _ = cupti::enable_callback(
                self.lib,
                sub,
                d::CUPTI_CB_DOMAIN_RESOURCE,
                module_loaded,
                false,
            );
        }
        self.set_graph_capture(sub, enable);
        if self.calls.nvtx.get().is_some() {
            for cbid in super::nvtx::CALLBACKS {
                cupti::enable_callback(self.lib, sub, d::CUPTI_CB_DOMAIN_NVTX, cbid, enable)?;
            }
        }
        Ok(refused)
    }

    /// The graph resource callbacks ([`calls::graphs::CALLBACKS`]), kept out of the callback set
    /// a sampled timeline switches: a graph captured while tracing is off is known when a traced
    /// iteration replays it. A refusal costs only the graph nodes' capture scopes (their records
    /// then go to their graph launch's scope, and the trailer says why), so it is not an error.
    fn set_graph_capture(&self, sub: &Subscription, enable: bool) {
        let resource = sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE;
        for cbid in calls::graphs::CALLBACKS {
            let r = cupti::enable_callback(self.lib, sub, resource, cbid, enable);
            if enable && r.is_err() {
                self.calls.graphs.set_refused();
            }
        }
    }

    /// Functions whose callback the loaded CUPTI refused at start ([`Self::set_capture`]).
    pub(crate) fn refused_callbacks(&self) -> &[&'static str] {
        &self.refused
    }

    /// Disables tracing, flushes everything (forced) and releases CUPTI.
    ///
    /// # Errors
    /// The first CUPTI failure; the rest of the teardown still runs.
    pub(crate) fn stop(mut self) -> Result<()> {
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
        for (kind, _) in KINDS {
            keep(cupti::activity_disable(self.lib, kind));
        }
        keep(self.set_capture(false).map(|_| ()));
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
