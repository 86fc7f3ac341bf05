//! A raw CUPTI activity session for the diagnostics: kernel records (their GPU start and end)
//! and CUPTI's overhead records (what CUPTI says it spent, by kind), into a preallocated pool,
//! kept until read. Enabled before PC sampling is: CUPTI refuses to enable kernel records while
//! sampling is enabled.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cupti_sys as sys;
use gpu_ledger::internals::{decode, LoadedCupti, NameCache, Record};
use parking_lot::Mutex;

/// One record the session kept.
#[derive(Debug, Clone)]
pub enum Kept {
    /// A kernel's GPU interval, CUPTI ns.
    Kernel { name: String, start: u64, end: u64 },
    /// CUPTI's own work: its kind and interval.
    Overhead { kind: u32, start: u64, end: u64 },
}

struct Pool {
    free: Mutex<Vec<usize>>,
    kept: Mutex<Vec<Kept>>,
    dropped: Mutex<u64>,
}

const BUFFERS: usize = 16;
const BUFFER_BYTES: usize = 4 << 20;

static POOL: OnceLock<Pool> = OnceLock::new();
static LIB: OnceLock<&'static LoadedCupti> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool {
        free: Mutex::new(
            (0..BUFFERS)
                .map(|_| {
                    let b: &'static mut [u64] =
                        Box::leak(vec![0u64; BUFFER_BYTES / 8].into_boxed_slice());
                    b.as_mut_ptr() as usize
                })
                .collect(),
        ),
        kept: Mutex::new(Vec::new()),
        dropped: Mutex::new(0),
    })
}

unsafe extern "C" fn requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let b = pool().free.lock().pop();
        // SAFETY: CUPTI passes valid out-pointers.
        unsafe {
            *max_records = 0;
            *buffer = b.map_or(std::ptr::null_mut(), |b| b as *mut u8);
            *size = if b.is_some() { BUFFER_BYTES } else { 0 };
        }
    });
}

unsafe extern "C" fn completed(
    ctx: sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let Some(lib) = LIB.get() else { return };
        if buffer.is_null() {
            return;
        }
        let mut names = NameCache::default();
        let mut kept = Vec::new();
        let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
        loop {
            // SAFETY: `buffer` and `valid` are CUPTI's for this completion; `rec` walks it.
            let rc = unsafe { lib.api.cuptiActivityGetNextRecord(buffer, valid, &mut rec) };
            if rc != sys::CUptiResult::CUPTI_SUCCESS {
                break;
            }
            // SAFETY: a complete record of this buffer, written by the loaded release.
            match unsafe { decode(rec, &mut names, &lib.release.layouts) } {
                Record::Kernel(k) => kept.push(Kept::Kernel {
                    name: k.name.to_string(),
                    start: k.start,
                    end: k.end,
                }),
                Record::Overhead {
                    overhead_kind,
                    start,
                    end,
                } => kept.push(Kept::Overhead {
                    kind: overhead_kind,
                    start,
                    end,
                }),
                _ => {}
            }
        }
        pool().kept.lock().extend(kept);
        let mut dropped = 0usize;
        // SAFETY: `ctx` and `stream_id` are the ones CUPTI passed to this callback.
        let rc = unsafe {
            lib.api
                .cuptiActivityGetNumDroppedRecords(ctx, stream_id, &mut dropped)
        };
        if rc == sys::CUptiResult::CUPTI_SUCCESS {
            *pool().dropped.lock() += dropped as u64;
        }
        pool().free.lock().push(buffer as usize);
    });
}

const KINDS: [sys::CUpti_ActivityKind::Type; 2] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_OVERHEAD,
];

fn check(lib: &LoadedCupti, call: &'static str, rc: sys::CUptiResult::Type) -> crate::Res<()> {
    Ok(gpu_ledger::internals::cupti_check(lib, call, rc)?)
}

/// The session: kernel and overhead records on until dropped.
pub struct Session {
    lib: &'static LoadedCupti,
}

impl Session {
    /// Registers the pool and enables kernel and overhead records.
    pub fn start() -> crate::Res<Session> {
        let lib = gpu_ledger::internals::cupti()?;
        let _ = LIB.set(lib);
        pool();
        // SAFETY: both callbacks are `extern "C"`, never unwind and live for the process; the
        // buffers they hand out are never freed.
        let rc = unsafe {
            lib.api
                .cuptiActivityRegisterCallbacks(Some(requested), Some(completed))
        };
        check(lib, "cuptiActivityRegisterCallbacks", rc)?;
        for kind in KINDS {
            // SAFETY: plain enum argument.
            check(lib, "cuptiActivityEnable", unsafe {
                lib.api.cuptiActivityEnable(kind)
            })?;
        }
        Ok(Session { lib })
    }

    /// Flushes every buffer and takes the records kept so far, and the records CUPTI dropped.
    pub fn take(&self) -> crate::Res<(Vec<Kept>, u64)> {
        // SAFETY: plain flag argument; CUPTI calls the completion callback from inside.
        check(self.lib, "cuptiActivityFlushAll", unsafe {
            self.lib
                .api
                .cuptiActivityFlushAll(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
        })?;
        let kept = std::mem::take(&mut *pool().kept.lock());
        let dropped = std::mem::take(&mut *pool().dropped.lock());
        Ok((kept, dropped))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for kind in KINDS {
            // SAFETY: plain enum argument.
            let _ = unsafe { self.lib.api.cuptiActivityDisable(kind) };
        }
        let _ = self.take();
    }
}

/// CUPTI's name of an overhead kind.
pub fn overhead_name(kind: u32) -> &'static str {
    use sys::CUpti_ActivityOverheadKind as o;
    match kind {
        o::CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER => "DRIVER_COMPILER",
        o::CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH => "CUPTI_BUFFER_FLUSH",
        o::CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION => "CUPTI_INSTRUMENTATION",
        o::CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE => "CUPTI_RESOURCE",
        o::CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING => {
            "RUNTIME_TRIGGERED_MODULE_LOADING"
        }
        o::CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING => "LAZY_FUNCTION_LOADING",
        o::CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL => "COMMAND_BUFFER_FULL",
        o::CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST => "ACTIVITY_BUFFER_REQUEST",
        o::CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT => "UVM_ACTIVITY_INIT",
        _ => "UNKNOWN",
    }
}

/// What the records of one phase show: overhead records by kind (count, total ns), and the
/// kernels' median duration, GPU span per kernel and median gap between consecutive kernels.
pub struct PhaseRecords {
    pub overhead: BTreeMap<&'static str, (u64, u64)>,
    pub kernels: usize,
    pub median_kernel_ns: f64,
    pub span_per_kernel_ns: f64,
    pub median_gap_ns: f64,
}

/// Sums the records of one phase; only kernels named `kernel` are looked at.
pub fn summarize(kept: &[Kept], kernel: &str) -> PhaseRecords {
    let mut overhead: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let mut ks: Vec<(u64, u64)> = Vec::new();
    for k in kept {
        match k {
            Kept::Overhead { kind, start, end } => {
                let e = overhead.entry(overhead_name(*kind)).or_default();
                e.0 += 1;
                e.1 += end.saturating_sub(*start);
            }
            Kept::Kernel { name, start, end } if name == kernel => ks.push((*start, *end)),
            Kept::Kernel { .. } => {}
        }
    }
    ks.sort_unstable();
    let mut durations: Vec<f64> = ks.iter().map(|k| (k.1 - k.0) as f64).collect();
    let mut gaps: Vec<f64> = ks
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].1) as f64)
        .collect();
    let span = match (ks.first(), ks.last()) {
        (Some(a), Some(b)) => (b.1 - a.0) as f64 / ks.len() as f64,
        _ => f64::NAN,
    };
    PhaseRecords {
        overhead,
        kernels: ks.len(),
        median_kernel_ns: crate::median(&mut durations),
        span_per_kernel_ns: span,
        median_gap_ns: crate::median(&mut gaps),
    }
}
