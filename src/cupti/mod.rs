//! Every CUPTI call gpu-ledger makes, and all the unsafe code of the timeline, behind safe
//! functions.
//!
//! - [`loader`]: finds and opens `libcupti`, refusing a version the bindings were not made for.
//! - [`result`]: the one check of a CUPTI result code and the one table of fixes.
//! - this module: the activity API calls, each one line over `cupti-sys`, and the callback
//!   subscription that claims CUPTI's one subscriber slot.
//! - [`activity`] and [`pool`]: the timeline session, its buffer callbacks and buffers;
//!   [`record`]: decoding a filled buffer's records into owned ones.
//! - [`calls`] and [`functions`]: the API callback that captures, on the calling thread, what
//!   attribution needs of each traced call.
//! - [`range_profiler`]: the Range Profiler, Profiler Host and Target APIs of the counters level.
//!
//! This is also the one conversion point between cudarc's CUDA driver types and the ones bindgen
//! generated for CUPTI: both are pointers to the same opaque driver structs, so the conversion is
//! a pointer cast ([`cupti_context`]), never a transmute.

pub(crate) mod activity;
pub(crate) mod calibrate;
// First: its macros are used by the modules below.
#[macro_use]
mod params;
pub(crate) mod calls;
pub(crate) mod functions;
pub(crate) mod layouts;
pub(crate) mod loader;
pub(crate) mod nvtx;
pub(crate) mod pc_sampling;
pub(crate) mod pool;
pub(crate) mod range_profiler;
pub(crate) mod record;
pub(crate) mod result;

use cupti_sys as sys;

use crate::error::Result;
pub use loader::LoadedCupti;
pub use result::check;
pub(crate) use result::result_string;

/// The loaded CUPTI, or why it is not there.
pub fn api() -> Result<&'static LoadedCupti> {
    loader::cupti()
}

/// cudarc's `CUcontext` as CUPTI's `CUcontext` (same opaque `CUctx_st`).
pub(crate) fn cupti_context(ctx: cudarc::driver::sys::CUcontext) -> sys::CUcontext {
    ctx.cast()
}

/// `cuptiActivityEnable`.
pub(crate) fn activity_enable(
    lib: &LoadedCupti,
    kind: sys::CUpti_ActivityKind::Type,
) -> Result<()> {
    // The call names its kind, so that a kind CUPTI refuses is known from the message.
    let call = activity::KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("cuptiActivityEnable", |(_, call)| call);
    // SAFETY: plain enum argument.
    check(lib, call, unsafe { lib.api.cuptiActivityEnable(kind) })
}

/// `cuptiActivityDisable`.
pub(crate) fn activity_disable(
    lib: &LoadedCupti,
    kind: sys::CUpti_ActivityKind::Type,
) -> Result<()> {
    // SAFETY: plain enum argument.
    check(lib, "cuptiActivityDisable", unsafe {
        lib.api.cuptiActivityDisable(kind)
    })
}

/// `cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER)`: whether the
/// buffers handed to CUPTI come zeroed (then it does not zero them inside the request callback).
/// The attribute is CUPTI's, process-wide: a session that declares it undeclares it when it
/// stops, so that a later client with its own buffers gets CUPTI's default again.
pub(crate) fn declare_zeroed_buffers(lib: &LoadedCupti, zeroed: bool) -> Result<()> {
    let mut value = u8::from(zeroed);
    let mut size = std::mem::size_of::<u8>();
    // SAFETY: the attribute's value is a uint8_t; both pointers are to locals that outlive the
    // call, and `size` says how many bytes `value` holds.
    check(lib, "cuptiActivitySetAttribute", unsafe {
        lib.api.cuptiActivitySetAttribute(
            sys::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
            &mut size,
            (&mut value as *mut u8).cast(),
        )
    })
}

/// Buffer-request callback signature.
pub(crate) type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
/// Buffer-completed callback signature.
pub(crate) type CompleteFn = unsafe extern "C" fn(sys::CUcontext, u32, *mut u8, usize, usize);

/// `cuptiActivityRegisterCallbacks`.
pub(crate) fn register_callbacks(
    lib: &LoadedCupti,
    request: RequestFn,
    complete: CompleteFn,
) -> Result<()> {
    // SAFETY: both callbacks are `extern "C"`, never unwind (they catch panics) and live for the
    // whole process (plain functions).
    check(lib, "cuptiActivityRegisterCallbacks", unsafe {
        lib.api
            .cuptiActivityRegisterCallbacks(Some(request), Some(complete))
    })
}

/// `cuptiActivityFlushAll`; `forced` also flushes records of work still running.
pub(crate) fn flush_all(lib: &LoadedCupti, forced: bool) -> Result<()> {
    let flag = if forced {
        sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
    } else {
        0
    };
    // SAFETY: plain flag argument; CUPTI calls our completion callback from inside.
    check(lib, "cuptiActivityFlushAll", unsafe {
        lib.api.cuptiActivityFlushAll(flag)
    })
}

/// `cuptiActivityGetNumDroppedRecords` for one context and stream of a completed buffer.
///
/// # Safety
/// `ctx` is a context handed out by CUPTI (the completion callback's) or null.
pub(crate) unsafe fn dropped_records(
    lib: &LoadedCupti,
    ctx: sys::CUcontext,
    stream_id: u32,
) -> Result<usize> {
    let mut dropped = 0usize;
    // SAFETY: the caller passes CUPTI's own context handle; out-pointer valid.
    check(lib, "cuptiActivityGetNumDroppedRecords", unsafe {
        lib.api
            .cuptiActivityGetNumDroppedRecords(ctx, stream_id, &mut dropped)
    })?;
    Ok(dropped)
}

/// `cuptiGetTimestamp`: CUPTI's clock, the one activity records use (ns).
pub(crate) fn timestamp(lib: &LoadedCupti) -> Result<u64> {
    let mut ts = 0u64;
    // SAFETY: out-pointer valid.
    check(lib, "cuptiGetTimestamp", unsafe {
        lib.api.cuptiGetTimestamp(&mut ts)
    })?;
    Ok(ts)
}

/// A CUPTI callback subscription, held so that a second CUPTI client is detected at start.
pub struct Subscription(sys::CUpti_SubscriberHandle);

// SAFETY: the handle is an opaque token that CUPTI accepts from any thread.
unsafe impl Send for Subscription {}
// SAFETY: as above; it is only read.
unsafe impl Sync for Subscription {}

/// Callback-API callback signature.
pub(crate) type CallbackFn = unsafe extern "C" fn(
    *mut std::os::raw::c_void,
    sys::CUpti_CallbackDomain::Type,
    sys::CUpti_CallbackId,
    *const std::os::raw::c_void,
);

/// `cuptiSubscribe`: claims CUPTI's one subscriber slot (reporting
/// [`Error::CuptiBusy`](crate::Error::CuptiBusy) when another tool holds it) with `callback`,
/// which receives `userdata`.
///
/// # Safety
/// `userdata` must stay valid until [`unsubscribe`] returns, and `callback` must never unwind.
pub unsafe fn subscribe(
    lib: &LoadedCupti,
    callback: CallbackFn,
    userdata: *mut std::os::raw::c_void,
) -> Result<Subscription> {
    let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: out-pointer valid; the caller guarantees the callback and userdata contract.
    check(lib, "cuptiSubscribe", unsafe {
        lib.api
            .cuptiSubscribe(&mut handle, Some(callback), userdata)
    })?;
    Ok(Subscription(handle))
}

/// `cuptiEnableCallback` for one function of one API domain.
pub(crate) fn enable_callback(
    lib: &LoadedCupti,
    sub: &Subscription,
    domain: sys::CUpti_CallbackDomain::Type,
    cbid: u32,
    enable: bool,
) -> Result<()> {
    // SAFETY: the handle came from cuptiSubscribe and is still subscribed.
    check(lib, "cuptiEnableCallback", unsafe {
        lib.api
            .cuptiEnableCallback(u32::from(enable), sub.0, domain, cbid)
    })
}

/// The API callbacks a session enabled, switched off and on again by a sampled timeline between
/// iterations: an untraced iteration's calls then cost CUPTI nothing, not even a call into the
/// callback. Its handle is a copy of the session's, never unsubscribed: the session owns the
/// subscription, and switches happen only in `step()`, which stops before the session does.
///
/// A switch is one `cuptiEnableDomain` per API domain, not one `cuptiEnableCallback` per traced
/// function, which costs a few µs more a switch (most of either is a fixed cost). Switched on, a
/// domain calls the callback for its other functions too; the callback returns at once for them.
pub(crate) struct CallbackSet {
    sub: Subscription,
    domains: Vec<sys::CUpti_CallbackDomain::Type>,
}

impl CallbackSet {
    /// The domains of the callbacks `ids` of `sub`, enabled now.
    pub(crate) fn new(sub: &Subscription, ids: &[(sys::CUpti_CallbackDomain::Type, u32)]) -> Self {
        let mut domains: Vec<_> = ids.iter().map(|&(domain, _)| domain).collect();
        domains.sort_unstable();
        domains.dedup();
        CallbackSet {
            sub: Subscription(sub.0),
            domains,
        }
    }

    /// Enables or disables every callback of its domains.
    ///
    /// # Errors
    /// The first CUPTI failure; the rest are still switched.
    pub(crate) fn switch(&self, lib: &LoadedCupti, enable: bool) -> Result<()> {
        let mut first = Ok(());
        for &domain in &self.domains {
            // SAFETY: the handle came from cuptiSubscribe and the session keeps it subscribed
            // while step() can switch (see the type's note).
            let r = check(lib, "cuptiEnableDomain", unsafe {
                lib.api
                    .cuptiEnableDomain(u32::from(enable), self.sub.0, domain)
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// `cuptiUnsubscribe`.
pub fn unsubscribe(lib: &LoadedCupti, sub: Subscription) -> Result<()> {
    // SAFETY: the handle came from cuptiSubscribe and is used once.
    check(lib, "cuptiUnsubscribe", unsafe {
        lib.api.cuptiUnsubscribe(sub.0)
    })
}
