//! The raw-CUPTI reference: the least a CUPTI kernel tracer can do (configurations `raw-cupti`,
//! `raw+api`, `raw+api+cb`, `raw+all`).

use gpu_ledger::cupti;

use super::*;

/// The reference's buffers and counters. The buffers are allocated once and never freed, so a
/// buffer CUPTI still held could never be written after release.
struct RawPool {
    free: crossbeam_queue::ArrayQueue<usize>,
    buffer_bytes: usize,
    buffers: usize,
    kernels: AtomicU64,
    dropped: AtomicU64,
    refused: AtomicU64,
}

/// Buffers of the raw pool: as many and as large as gpu-ledger's defaults (8 × 4 MiB).
const RAW_BUFFERS: usize = 8;
const RAW_BUFFER_BYTES: usize = 4 << 20;

static RAW_POOL: OnceLock<RawPool> = OnceLock::new();
static RAW_LIB: OnceLock<&'static LoadedCupti> = OnceLock::new();
/// Calls seen by the reference's subscriber callback.
static RAW_API_CALLS: AtomicU64 = AtomicU64::new(0);

/// `--flip` only: while set, the callback also does what a callback-only design would do in
/// place of CUPTI's API records (`docs/overhead.md`): read CUPTI's clock at a call's entry and
/// exit and hand the call (correlation id, function, times, return value, thread, the scope path
/// open on the thread) to a per-thread ring that a collector drains, as scopes are handed over.
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// One call as the callback-only design would capture it.
#[derive(Clone, Copy, Default)]
struct CapturedCall {
    correlation_id: u32,
    cbid: u32,
    start: u64,
    end: u64,
    return_value: i32,
    path_id: u32,
    runtime: bool,
}

/// Calls a thread's capture ring holds (10 MiB); the `--flip` loop drains every ring between
/// blocks, so a block of up to this many launches loses none.
const CAPTURE_RING: usize = 1 << 18;
/// Calls that found their ring full (a block longer than the ring).
static CAPTURE_LOST: AtomicU64 = AtomicU64::new(0);

/// The reading ends of every thread's capture ring.
static CAPTURE_RINGS: parking_lot::Mutex<Vec<rtrb::Consumer<CapturedCall>>> =
    parking_lot::Mutex::new(Vec::new());

thread_local! {
    /// This thread's capture ring (created at its first captured call), the calls entered and
    /// not yet left, and the scope path open on the thread (the raw reference has no scopes:
    /// it is read as the design would read it, and stays 0).
    static CAPTURE_STATE: std::cell::RefCell<CaptureState> = const {
        std::cell::RefCell::new(CaptureState { ring: None, open: Vec::new(), path_id: 0 })
    };
}

struct CaptureState {
    ring: Option<rtrb::Producer<CapturedCall>>,
    open: Vec<CapturedCall>,
    path_id: u32,
}

/// CUPTI's clock, as API records carry it.
fn cupti_clock() -> u64 {
    RAW_LIB
        .get()
        .and_then(|lib| cupti::timestamp(lib).ok())
        .unwrap_or(0)
}

/// The capture work of one callback (entry or exit).
fn capture(data: &sys::CUpti_CallbackData, cbid: u32, runtime: bool) {
    let _ = CAPTURE_STATE.try_with(|state| {
        let mut state = state.borrow_mut();
        if data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
            let path_id = state.path_id;
            state.open.push(CapturedCall {
                correlation_id: data.correlationId,
                cbid,
                start: cupti_clock(),
                path_id,
                runtime,
                ..CapturedCall::default()
            });
            return;
        }
        let Some(mut call) = state.open.pop() else {
            return;
        };
        call.end = cupti_clock();
        if !data.functionReturnValue.is_null() {
            // SAFETY: at exit CUPTI points this at the function's return value, a CUresult or a
            // cudaError_t, both C enums of int size.
            call.return_value = unsafe { *(data.functionReturnValue as *const i32) };
        }
        let ring = state.ring.get_or_insert_with(|| {
            let (producer, consumer) = rtrb::RingBuffer::new(CAPTURE_RING);
            CAPTURE_RINGS.lock().push(consumer);
            producer
        });
        if ring.push(call).is_err() {
            CAPTURE_LOST.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// What the capture rings held when drained.
#[derive(Default, Clone, Copy)]
pub(super) struct CapturedSummary {
    /// Calls with a correlation id, a function and an end not before their start.
    pub(super) calls: usize,
    /// Calls whose record would be malformed (the opposite of the above).
    pub(super) malformed: usize,
    /// Calls of the runtime API.
    pub(super) runtime: usize,
    /// Calls made inside a scope.
    pub(super) scoped: usize,
    /// Calls that found their ring full, so far.
    pub(super) lost: u64,
}

/// Empties every capture ring, as a collector would (outside the timed blocks).
pub(super) fn drain_captured(into: &mut CapturedSummary) {
    into.lost = CAPTURE_LOST.load(Ordering::Relaxed);
    for ring in CAPTURE_RINGS.lock().iter_mut() {
        let slots = ring.slots();
        let Ok(chunk) = ring.read_chunk(slots) else {
            continue;
        };
        for c in chunk {
            if c.correlation_id != 0 && c.cbid != 0 && c.end >= c.start {
                into.calls += 1;
            } else {
                into.malformed += 1;
            }
            into.runtime += usize::from(c.runtime);
            into.scoped += usize::from(c.path_id != 0);
        }
    }
}

/// `--probe-correlation` only: while set, the callbacks also keep what they see (under a lock,
/// which no timed configuration takes).
static PROBE: AtomicBool = AtomicBool::new(false);
/// (correlation id, runtime domain) of every counted call's entry while probing.
static PROBE_CALLS: parking_lot::Mutex<Vec<(u32, bool)>> = parking_lot::Mutex::new(Vec::new());
/// Kernel records' correlation ids, and external-correlation records' (correlation id, external
/// id), while probing.
static PROBE_KERNELS: parking_lot::Mutex<Vec<u32>> = parking_lot::Mutex::new(Vec::new());
static PROBE_EXTERNAL: parking_lot::Mutex<Vec<(u32, u64)>> = parking_lot::Mutex::new(Vec::new());

fn raw_pool() -> &'static RawPool {
    RAW_POOL.get_or_init(|| {
        let free = crossbeam_queue::ArrayQueue::new(RAW_BUFFERS);
        for _ in 0..RAW_BUFFERS {
            let buf: &'static mut [u64] =
                Box::leak(vec![0u64; RAW_BUFFER_BYTES / 8].into_boxed_slice());
            let _ = free.push(buf.as_mut_ptr() as usize);
        }
        RawPool {
            free,
            buffer_bytes: RAW_BUFFER_BYTES,
            buffers: RAW_BUFFERS,
            kernels: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    })
}

/// CUPTI asks for a buffer: one from the pool, or none (CUPTI then drops and counts records).
unsafe extern "C" fn raw_buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let pool = RAW_POOL.get();
        let taken = pool.and_then(|p| p.free.pop().map(|b| (p, b)));
        // SAFETY: CUPTI passes valid out-pointers.
        unsafe {
            *max_records = 0;
            match taken {
                Some((p, b)) => {
                    *buffer = b as *mut u8;
                    *size = p.buffer_bytes;
                }
                None => {
                    *buffer = std::ptr::null_mut();
                    *size = 0;
                    if let Some(p) = pool {
                        p.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
}

/// CUPTI hands back a filled buffer: count its records and return it to the pool.
unsafe extern "C" fn raw_buffer_completed(
    ctx: sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let (Some(pool), Some(lib)) = (RAW_POOL.get(), RAW_LIB.get()) else {
            return;
        };
        if buffer.is_null() {
            return;
        }
        let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
        let mut kernels = 0u64;
        loop {
            // SAFETY: `buffer` and `valid` are CUPTI's own for this completion; `rec` walks it
            // from null as documented.
            let rc = unsafe { lib.api.cuptiActivityGetNextRecord(buffer, valid, &mut rec) };
            if rc != sys::CUptiResult::CUPTI_SUCCESS {
                break;
            }
            // SAFETY: every record starts with its kind.
            let kind = unsafe { (*rec).kind };
            let kernel = kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            kernels += u64::from(kernel);
            if PROBE.load(Ordering::Relaxed) {
                probe_record(rec, kind);
            }
        }
        pool.kernels.fetch_add(kernels, Ordering::Relaxed);
        let mut dropped = 0usize;
        // SAFETY: `ctx` and `stream_id` are the ones CUPTI passed to this callback.
        let rc = unsafe {
            lib.api
                .cuptiActivityGetNumDroppedRecords(ctx, stream_id, &mut dropped)
        };
        if rc == sys::CUptiResult::CUPTI_SUCCESS {
            pool.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        let _ = pool.free.push(buffer as usize);
    });
}

/// The reference's subscriber callback: one relaxed add on entry, as gpu-ledger's counter
/// (and, only under `--probe-correlation`, the entry's correlation id kept under a lock).
unsafe extern "C" fn raw_api_callback(
    _userdata: *mut std::os::raw::c_void,
    domain: sys::CUpti_CallbackDomain::Type,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const std::os::raw::c_void,
) {
    if cbdata.is_null() {
        return;
    }
    // SAFETY: for the driver and runtime API domains, the only ones enabled, CUPTI passes a
    // CUpti_CallbackData.
    let data = unsafe { &*(cbdata as *const sys::CUpti_CallbackData) };
    if CAPTURE.load(Ordering::Relaxed) {
        capture(
            data,
            cbid,
            domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
        );
    }
    if data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
        RAW_API_CALLS.fetch_add(1, Ordering::Relaxed);
        if PROBE.load(Ordering::Relaxed) {
            let runtime = domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API;
            PROBE_CALLS.lock().push((data.correlationId, runtime));
        }
    }
}

/// A running raw-CUPTI reference. Only one CUPTI client runs at a time: it is stopped (disabled
/// and fully flushed) before any gpu-ledger timeline profiler starts, and started only after one
/// has finished.
pub(super) struct RawSession {
    lib: &'static LoadedCupti,
    mode: RawMode,
    subscriber: Option<sys::CUpti_SubscriberHandle>,
    /// Counter values at start: kernel records, dropped records, refused requests.
    start: (u64, u64, u64),
    /// Set once torn down.
    stopped: bool,
}

fn cupti_ok(lib: &LoadedCupti, call: &'static str, code: sys::CUptiResult::Type) -> Result<()> {
    Ok(gpu_ledger::cupti::check(lib, call, code)?)
}

/// The driver and runtime functions gpu-ledger does not keep API records for.
fn unneeded_api_functions() -> impl Iterator<Item = (bool, u32)> {
    let driver = sys::DRIVER_API_CBIDS.iter().map(|(id, n)| (false, *id, *n));
    let runtime = sys::RUNTIME_API_CBIDS.iter().map(|(id, n)| (true, *id, *n));
    driver
        .chain(runtime)
        .filter(|(_, _, n)| gpu_ledger::activity::classify_api(n).is_none())
        .map(|(rt, id, _)| (rt, id))
}

impl RawSession {
    pub(super) fn start(lib: &'static LoadedCupti, mode: RawMode) -> Result<Self> {
        let _ = RAW_LIB.set(lib);
        let pool = raw_pool();
        let start = (
            pool.kernels.load(Ordering::Relaxed),
            pool.dropped.load(Ordering::Relaxed),
            pool.refused.load(Ordering::Relaxed),
        );
        // SAFETY: both callbacks are plain `extern "C"` functions that never unwind (they catch
        // panics) and live for the whole process; the buffers they hand out are never freed.
        let rc = unsafe {
            lib.api.cuptiActivityRegisterCallbacks(
                Some(raw_buffer_requested),
                Some(raw_buffer_completed),
            )
        };
        cupti_ok(lib, "cuptiActivityRegisterCallbacks", rc)?;
        let mut session = RawSession {
            lib,
            mode,
            subscriber: None,
            start,
            stopped: false,
        };
        for kind in mode.kinds() {
            cupti::activity_enable(lib, kind)?;
        }
        if mode >= RawMode::KernelApi {
            session.filter_api_records()?;
        }
        if mode >= RawMode::KernelApiCallback {
            let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
            // SAFETY: out-pointer valid; the callback never unwinds and uses no user data.
            let rc = unsafe {
                lib.api
                    .cuptiSubscribe(&mut handle, Some(raw_api_callback), std::ptr::null_mut())
            };
            cupti_ok(lib, "cuptiSubscribe", rc)?;
            session.subscriber = Some(handle);
            session.set_callback(true)?;
        }
        Ok(session)
    }

    /// Switches off the API records of every function gpu-ledger does not keep.
    fn filter_api_records(&self) -> Result<()> {
        for (runtime, cbid) in unneeded_api_functions() {
            if runtime {
                cupti::enable_runtime_api(self.lib, cbid, false)?;
            } else {
                cupti::enable_driver_api(self.lib, cbid, false)?;
            }
        }
        Ok(())
    }

    /// The subscriber callback on the counted functions, on or off (needs a subscriber).
    fn set_callback(&self, on: bool) -> Result<()> {
        let Some(handle) = self.subscriber else {
            return Err("this raw session has no subscriber callback to switch".into());
        };
        use sys::CUpti_CallbackDomain as d;
        for (domain, table) in [
            (d::CUPTI_CB_DOMAIN_DRIVER_API, sys::DRIVER_API_CBIDS),
            (d::CUPTI_CB_DOMAIN_RUNTIME_API, sys::RUNTIME_API_CBIDS),
        ] {
            for (cbid, name) in table {
                if gpu_ledger::activity::is_counted(gpu_ledger::activity::classify_api(name)) {
                    // SAFETY: the handle came from cuptiSubscribe and is subscribed.
                    let rc = unsafe {
                        self.lib
                            .api
                            .cuptiEnableCallback(u32::from(on), handle, domain, *cbid)
                    };
                    cupti_ok(self.lib, "cuptiEnableCallback", rc)?;
                }
            }
        }
        Ok(())
    }

    fn set_kind(&self, kind: sys::CUpti_ActivityKind::Type, on: bool) -> Result<()> {
        if on {
            cupti::activity_enable(self.lib, kind)?;
        } else {
            cupti::activity_disable(self.lib, kind)?;
        }
        Ok(())
    }

    /// `cuptiActivityFlushAll(0)`: completed buffers come back to the pool (for runs longer than
    /// the pool holds; the callers flush outside what they time).
    pub(super) fn flush(&self) -> Result<()> {
        Ok(cupti::flush_all(self.lib, false)?)
    }

    /// Switches one part of the timeline level's CUPTI configuration inside a session started
    /// with [`RawMode::All`] (`--flip`).
    pub(super) fn set_part(&self, part: Part, on: bool) -> Result<()> {
        use sys::CUpti_ActivityKind as k;
        match part {
            Part::Nothing => Ok(()),
            Part::ApiRecords => {
                self.set_kind(k::CUPTI_ACTIVITY_KIND_DRIVER, on)?;
                self.set_kind(k::CUPTI_ACTIVITY_KIND_RUNTIME, on)?;
                if on {
                    self.filter_api_records()?;
                }
                Ok(())
            }
            Part::Callback => self.set_callback(on),
            Part::Capture => {
                CAPTURE.store(on, Ordering::Relaxed);
                Ok(())
            }
            Part::ApiRecordsOverCapture => {
                // On: today's design (API records, no capture); off: the callback-only design.
                CAPTURE.store(!on, Ordering::Relaxed);
                self.set_part(Part::ApiRecords, on)
            }
            Part::Kind(kind) => self.set_kind(kind, on),
            Part::AllButKernels => {
                self.set_part(Part::ApiRecords, on)?;
                self.set_callback(on)?;
                for kind in Part::other_kinds() {
                    self.set_kind(kind, on)?;
                }
                Ok(())
            }
        }
    }

    /// Disables everything, flushes every buffer back (forced) and releases the subscriber.
    pub(super) fn stop(mut self) -> Result<SelfReport> {
        let first_err = self.teardown();
        let pool = raw_pool();
        let report = SelfReport {
            kernel_records: pool.kernels.load(Ordering::Relaxed) - self.start.0,
            dropped: pool.dropped.load(Ordering::Relaxed) - self.start.1,
            refused: pool.refused.load(Ordering::Relaxed) - self.start.2,
            warnings: if pool.free.len() == pool.buffers {
                Vec::new()
            } else {
                vec![format!(
                    "{} raw buffers still held by CUPTI after the forced flush",
                    pool.buffers - pool.free.len()
                )]
            },
            ..SelfReport::default()
        };
        first_err.map(|()| report)
    }

    fn teardown(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        let lib = self.lib;
        let mut first: Result<()> = Ok(());
        for kind in self.mode.kinds() {
            if let Err(e) = cupti::activity_disable(lib, kind) {
                first = first.and(Err(e.into()));
            }
        }
        if let Err(e) = cupti::flush_all(lib, true) {
            first = first.and(Err(e.into()));
        }
        if let Some(handle) = self.subscriber.take() {
            // SAFETY: the handle came from cuptiSubscribe and is released once.
            let rc = unsafe { lib.api.cuptiUnsubscribe(handle) };
            if let Err(e) = cupti_ok(lib, "cuptiUnsubscribe", rc) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for RawSession {
    fn drop(&mut self) {
        // After `stop` there is nothing left to do; on an early return this releases CUPTI.
        let _ = self.teardown();
    }
}

/// A part of the timeline level's CUPTI configuration that `--flip` switches off and on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// Nothing switched: the method's own spread (its interval should hold 0).
    Nothing,
    /// The driver and runtime API records gpu-ledger keeps.
    ApiRecords,
    /// The subscriber callback on the counted functions (gpu-ledger's launch counter).
    Callback,
    /// One activity kind beyond kernels and API records.
    Kind(sys::CUpti_ActivityKind::Type),
    /// The callback-only design's work in the callback (clock reads, a ring write per call),
    /// with everything else on.
    Capture,
    /// API records (on) against the callback-only design's capture in their place (off): what
    /// replacing one by the other would save per launch.
    ApiRecordsOverCapture,
    /// All of the above at once: `raw+all` against `raw-cupti`.
    AllButKernels,
}

impl Part {
    /// The kinds [`RawMode::All`] adds beyond kernels and API records.
    pub(super) fn other_kinds() -> Vec<sys::CUpti_ActivityKind::Type> {
        let before = RawMode::KernelApiCallback.kinds();
        RawMode::All
            .kinds()
            .into_iter()
            .filter(|k| !before.contains(k))
            .collect()
    }

    /// Whether the part is on in the configuration every part is measured from (`raw+all`, as
    /// the timeline level runs today): everything but the proposed capture.
    pub(super) fn in_baseline(self) -> bool {
        self != Part::Capture
    }

    pub(super) fn label(self) -> String {
        use sys::CUpti_ActivityKind as k;
        match self {
            Part::Nothing => "nothing (control)".into(),
            Part::ApiRecords => "API records".into(),
            Part::Callback => "launch-counting callback".into(),
            Part::Kind(kind) => match kind {
                k::CUPTI_ACTIVITY_KIND_MEMCPY => "kind MEMCPY".into(),
                k::CUPTI_ACTIVITY_KIND_MEMCPY2 => "kind MEMCPY2".into(),
                k::CUPTI_ACTIVITY_KIND_MEMSET => "kind MEMSET".into(),
                k::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => "kind SYNCHRONIZATION".into(),
                k::CUPTI_ACTIVITY_KIND_MEMORY2 => "kind MEMORY2".into(),
                k::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION => "kind EXTERNAL_CORRELATION".into(),
                k::CUPTI_ACTIVITY_KIND_OVERHEAD => "kind OVERHEAD".into(),
                other => format!("kind {other}"),
            },
            Part::AllButKernels => "all of them (raw+all - raw-cupti)".into(),
            Part::Capture => "callback capture (proposed)".into(),
            Part::ApiRecordsOverCapture => "API records - callback capture".into(),
        }
    }
}

/// Keeps a kernel or external-correlation record's ids while probing.
fn probe_record(rec: *const sys::CUpti_Activity, kind: sys::CUpti_ActivityKind::Type) {
    use sys::CUpti_ActivityKind as k;
    match kind {
        k::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL => {
            // SAFETY: a record of this kind is a CUpti_ActivityKernel10 (CUPTI 13).
            let corr = unsafe { (*(rec as *const sys::CUpti_ActivityKernel10)).correlationId };
            PROBE_KERNELS.lock().push(corr);
        }
        k::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION => {
            // SAFETY: a record of this kind is a CUpti_ActivityExternalCorrelation.
            let e = unsafe { &*(rec as *const sys::CUpti_ActivityExternalCorrelation) };
            PROBE_EXTERNAL.lock().push((e.correlationId, e.externalId));
        }
        _ => {}
    }
}

/// What `--probe-correlation` saw in one state of the session.
pub(super) struct ProbeSeen {
    /// (correlation id, runtime domain) of the counted calls' entries.
    pub(super) calls: Vec<(u32, bool)>,
    pub(super) kernels: Vec<u32>,
    pub(super) external: Vec<(u32, u64)>,
}

impl RawSession {
    /// Runs `work` with the probe on, flushes (forced) and returns what the callbacks saw.
    pub(super) fn probe(&self, work: impl FnOnce() -> Result<()>) -> Result<ProbeSeen> {
        // Records made before the probe are handed back first: none is counted as the probe's.
        cupti::flush_all(self.lib, true)?;
        PROBE_CALLS.lock().clear();
        PROBE_KERNELS.lock().clear();
        PROBE_EXTERNAL.lock().clear();
        PROBE.store(true, Ordering::Relaxed);
        let worked = work();
        let flushed = cupti::flush_all(self.lib, true);
        PROBE.store(false, Ordering::Relaxed);
        worked?;
        flushed?;
        Ok(ProbeSeen {
            calls: std::mem::take(&mut *PROBE_CALLS.lock()),
            kernels: std::mem::take(&mut *PROBE_KERNELS.lock()),
            external: std::mem::take(&mut *PROBE_EXTERNAL.lock()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn callback_data(
        site: sys::CUpti_ApiCallbackSite::Type,
        corr: u32,
        ret: &mut i32,
    ) -> sys::CUpti_CallbackData {
        sys::CUpti_CallbackData {
            callbackSite: site,
            correlationId: corr,
            functionReturnValue: (ret as *mut i32).cast(),
            ..sys::CUpti_CallbackData::default()
        }
    }

    #[test]
    fn the_modelled_capture_hands_each_call_to_the_ring_at_its_exit() {
        use sys::CUpti_ApiCallbackSite::{CUPTI_API_ENTER, CUPTI_API_EXIT};
        let mut ret = 0i32;
        // A runtime call with a driver call nested inside, then a lone driver call.
        capture(&callback_data(CUPTI_API_ENTER, 10, &mut ret), 211, true);
        capture(&callback_data(CUPTI_API_ENTER, 11, &mut ret), 307, false);
        let mut seen = CapturedSummary::default();
        drain_captured(&mut seen);
        assert_eq!(
            seen.calls + seen.malformed,
            0,
            "nothing is handed over before an exit"
        );
        capture(&callback_data(CUPTI_API_EXIT, 11, &mut ret), 307, false);
        ret = 1;
        capture(&callback_data(CUPTI_API_EXIT, 10, &mut ret), 211, true);
        capture(&callback_data(CUPTI_API_ENTER, 12, &mut ret), 307, false);
        capture(&callback_data(CUPTI_API_EXIT, 12, &mut ret), 307, false);
        drain_captured(&mut seen);
        assert_eq!(
            (seen.calls, seen.malformed, seen.runtime, seen.scoped),
            (3, 0, 1, 0)
        );
        let mut again = CapturedSummary::default();
        drain_captured(&mut again);
        assert_eq!(again.calls, 0, "drained once");
    }
}
