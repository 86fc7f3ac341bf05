//! The raw-CUPTI reference (configuration `raw-cupti`): the least a CUPTI kernel tracer can do,
//! `CONCURRENT_KERNEL` records into a preallocated pool, counted and handed back.

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

/// A running raw-CUPTI reference. Only one CUPTI client runs at a time: it is stopped (disabled
/// and fully flushed) before any gpu-ledger timeline profiler starts, and started only after one
/// has finished.
pub(super) struct RawSession {
    lib: &'static LoadedCupti,
    /// Counter values at start: kernel records, dropped records, refused requests.
    start: (u64, u64, u64),
    /// Set once torn down.
    stopped: bool,
}

/// The one activity kind the reference enables.
const KERNELS: sys::CUpti_ActivityKind::Type =
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;

pub(super) fn cupti_ok(
    lib: &LoadedCupti,
    call: &'static str,
    code: sys::CUptiResult::Type,
) -> Result<()> {
    Ok(gpu_ledger::internals::cupti_check(lib, call, code)?)
}

/// Hands CUPTI the raw pool's buffer callbacks.
pub(super) fn register_raw_buffers(lib: &'static LoadedCupti) -> Result<()> {
    let _ = RAW_LIB.set(lib);
    raw_pool();
    // SAFETY: both callbacks are plain `extern "C"` functions that never unwind (they catch
    // panics) and live for the whole process; the buffers they hand out are never freed.
    let rc = unsafe {
        lib.api
            .cuptiActivityRegisterCallbacks(Some(raw_buffer_requested), Some(raw_buffer_completed))
    };
    cupti_ok(lib, "cuptiActivityRegisterCallbacks", rc)
}

impl RawSession {
    pub(super) fn start(lib: &'static LoadedCupti) -> Result<Self> {
        let pool = raw_pool();
        let start = (
            pool.kernels.load(Ordering::Relaxed),
            pool.dropped.load(Ordering::Relaxed),
            pool.refused.load(Ordering::Relaxed),
        );
        register_raw_buffers(lib)?;
        let session = RawSession {
            lib,
            start,
            stopped: false,
        };
        // SAFETY: plain enum argument.
        let rc = unsafe { lib.api.cuptiActivityEnable(KERNELS) };
        cupti_ok(lib, "cuptiActivityEnable", rc)?;
        Ok(session)
    }

    /// Disables kernel records and flushes every buffer back (forced).
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
        // SAFETY: plain enum argument.
        let disabled = cupti_ok(lib, "cuptiActivityDisable", unsafe {
            lib.api.cuptiActivityDisable(KERNELS)
        });
        // SAFETY: plain flag argument; CUPTI calls the completion callback from inside.
        let flushed = cupti_ok(lib, "cuptiActivityFlushAll", unsafe {
            lib.api
                .cuptiActivityFlushAll(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
        });
        disabled.and(flushed)
    }
}

impl Drop for RawSession {
    fn drop(&mut self) {
        // After `stop` there is nothing left to do; on an early return this releases CUPTI.
        let _ = self.teardown();
    }
}
