//! The thin unsafe layer over CUPTI's PC Sampling API (`cupti_pcsampling.h`): enable and
//! configure sampling on one context in continuous mode with start/stop control, start and
//! stop a range, read what was sampled, and map a sampled PC to its source line through the
//! cubin. `pcsampling/` has no `unsafe`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

use cudarc::driver::CudaContext;
use cupti_sys as sys;

use super::result::check;
use super::LoadedCupti;
use crate::error::{Error, Result};

/// One sampled PC: where it is, and how many samples each stall reason got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SampledPc {
    /// CRC of the cubin the function is in (`cuptiGetCubinCrc`).
    pub(crate) cubin_crc: u64,
    /// Offset of the instruction in the function, bytes.
    pub(crate) pc_offset: u64,
    /// The function's name as the module spells it (mangled for C++).
    pub(crate) function: String,
    /// `(stall reason index, samples)`, indices as [`PcSampler::reasons`] lists them.
    pub(crate) stalls: Vec<(u32, u32)>,
}

/// What one read of the sampled data returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SampledRange {
    /// Every PC with at least one sample of a collected reason.
    pub(crate) pcs: Vec<SampledPc>,
    /// Samples CUPTI counted, user and non-user kernels and dropped ones included.
    pub(crate) total_samples: u64,
    /// Samples the hardware dropped (back-pressure or overflow of its buffer).
    pub(crate) dropped_samples: u64,
    /// Samples of kernels CUPTI gives no PCs for (the driver's own).
    pub(crate) non_user_samples: u64,
    /// Whether the hardware buffer filled (its PCs read as zero: samples lost).
    pub(crate) hardware_buffer_full: bool,
}

/// The settings CUPTI takes at configuration; `None` leaves CUPTI's default.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SamplingOptions {
    /// The period is 2^n cycles per SM, n in 5..=31.
    pub(crate) period_log2: Option<u32>,
    /// The device buffer the hardware writes samples into.
    pub(crate) hardware_buffer_bytes: Option<usize>,
    /// The host buffer CUPTI decodes raw samples into before `cuptiPCSamplingGetData`.
    pub(crate) scratch_buffer_bytes: Option<usize>,
    /// How often CUPTI's worker threads wake to decode, ms.
    pub(crate) worker_sleep_ms: Option<u32>,
    /// Kernels serialized, CUPTI's per-kernel collection, instead of continuous mode.
    pub(crate) serialized: bool,
    /// No start/stop control: everything is sampled while enabled, read without stopping.
    pub(crate) free_running: bool,
}

/// PC sampling enabled on one context. Disabled on drop.
pub(crate) struct PcSampler {
    lib: &'static LoadedCupti,
    ctx: Arc<CudaContext>,
    reasons: Vec<(u32, String)>,
    /// The read buffer: `collect` PC records, each with room for every stall reason.
    buffer: Box<sys::CUpti_PCSamplingData>,
    records: Vec<sys::CUpti_PCSamplingPCData>,
    /// The stall slots the records point into: owned, never read directly.
    _stall_slots: Vec<sys::CUpti_PCSamplingStallReason>,
    /// The buffer CUPTI fills at disable (configuration requires one); read at drop only.
    final_buffer: Box<sys::CUpti_PCSamplingData>,
    _final_records: Vec<sys::CUpti_PCSamplingPCData>,
    _final_slots: Vec<sys::CUpti_PCSamplingStallReason>,
    started: bool,
    enabled: bool,
    free_running: bool,
}

// SAFETY: the raw pointers point into buffers this value owns (or CUPTI's names, freed only by
// it); every use goes through `&mut self`, so moving it to another thread is sound.
unsafe impl Send for PcSampler {}

/// The GPUs a sampler of this process samples now.
static SAMPLED: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());

/// PC records one read holds; more are read by further calls.
const RECORDS_PER_READ: usize = 4096;

fn record_buffers(
    reasons: usize,
    n: usize,
) -> (
    Box<sys::CUpti_PCSamplingData>,
    Vec<sys::CUpti_PCSamplingPCData>,
    Vec<sys::CUpti_PCSamplingStallReason>,
) {
    let mut slots = vec![sys::CUpti_PCSamplingStallReason::default(); reasons.max(1) * n];
    let mut records = vec![sys::CUpti_PCSamplingPCData::default(); n];
    for (i, r) in records.iter_mut().enumerate() {
        r.size = std::mem::size_of::<sys::CUpti_PCSamplingPCData>();
        r.stallReason = slots[i * reasons.max(1)..].as_mut_ptr();
    }
    let mut data = Box::<sys::CUpti_PCSamplingData>::default();
    data.size = std::mem::size_of::<sys::CUpti_PCSamplingData>();
    data.collectNumPcs = n;
    data.pPcData = records.as_mut_ptr();
    (data, records, slots)
}

impl PcSampler {
    /// Enables PC sampling on `ctx`: continuous mode (kernels run concurrently, as without it),
    /// start/stop control (nothing is sampled until [`start`](Self::start)), every stall reason,
    /// and the period `2^period_log2` cycles when given (CUPTI's default, set by the SM count,
    /// otherwise).
    ///
    /// # Errors
    /// The CUPTI failure, with its fix; [`Error::Config`] for a period outside 5..=31.
    pub(crate) fn enable(
        lib: &'static LoadedCupti,
        ctx: &Arc<CudaContext>,
        options: SamplingOptions,
    ) -> Result<Self> {
        if let Some(p) = options.period_log2 {
            if !(5..=31).contains(&p) {
                return Err(Error::Config(format!(
                    "pc sampling: the sampling period is 2^n cycles with n in 5..=31; {p} is \
                     outside"
                )));
            }
        }
        let ordinal = ctx.ordinal();
        {
            // CUPTI accepts a second enable on the same context and then tears it down twice;
            // a second context on the GPU cannot be sampled at all. One sampler per GPU, said so.
            let mut sampled = SAMPLED.lock();
            if sampled.contains(&ordinal) {
                return Err(Error::Config(format!(
                    "pc sampling: GPU {ordinal} is already sampled by another PcSampler of this \
                     process; {SAMPLING_BUSY_FIX}"
                )));
            }
            sampled.push(ordinal);
        }
        let sampler = Self::enable_claimed(lib, ctx, options);
        if sampler.is_err() {
            SAMPLED.lock().retain(|o| *o != ordinal);
        }
        sampler
    }

    fn enable_claimed(
        lib: &'static LoadedCupti,
        ctx: &Arc<CudaContext>,
        options: SamplingOptions,
    ) -> Result<Self> {
        ctx.bind_to_thread()?;
        let cu_ctx = super::cupti_context(ctx.cu_ctx());
        let mut p = sys::CUpti_PCSamplingEnableParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingEnableParams>(),
            ctx: cu_ctx,
            ..Default::default()
        };
        // SAFETY: params sized and filled as the header asks; the context is alive (held).
        check(lib, "cuptiPCSamplingEnable", unsafe {
            lib.api.cuptiPCSamplingEnable(&mut p)
        })
        .map_err(busy)?;
        let reasons = match stall_reasons(lib, cu_ctx) {
            Ok(r) => r,
            Err(e) => {
                disable(lib, cu_ctx);
                return Err(e);
            }
        };
        let (buffer, records, stall_slots) = record_buffers(reasons.len(), RECORDS_PER_READ);
        let (final_buffer, final_records, final_slots) =
            record_buffers(reasons.len(), RECORDS_PER_READ);
        let mut sampler = PcSampler {
            lib,
            ctx: ctx.clone(),
            reasons,
            buffer,
            records,
            _stall_slots: stall_slots,
            final_buffer,
            _final_records: final_records,
            _final_slots: final_slots,
            started: false,
            enabled: true,
            free_running: options.free_running,
        };
        sampler.configure(options)?;
        Ok(sampler)
    }

    fn configure(&mut self, options: SamplingOptions) -> Result<()> {
        use sys::CUpti_PCSamplingConfigurationAttributeType as a;
        let mut indices: Vec<u32> = self.reasons.iter().map(|r| r.0).collect();
        let mut infos = Vec::new();
        let info = |t: a::Type| sys::CUpti_PCSamplingConfigurationInfo {
            attributeType: t,
            ..Default::default()
        };
        let mut mode = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE);
        mode.attributeData.collectionModeData.collectionMode = if options.serialized {
            sys::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
        } else {
            sys::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS
        };
        infos.push(mode);
        let mut control =
            info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL);
        control
            .attributeData
            .enableStartStopControlData
            .enableStartStopControl = u32::from(!options.free_running);
        infos.push(control);
        let mut stalls = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON);
        stalls.attributeData.stallReasonData.stallReasonCount = indices.len();
        stalls.attributeData.stallReasonData.pStallReasonIndex = indices.as_mut_ptr();
        infos.push(stalls);
        let mut format = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT);
        format.attributeData.outputDataFormatData.outputDataFormat =
            sys::CUpti_PCSamplingOutputDataFormat::CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
        infos.push(format);
        let mut data = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER);
        data.attributeData.samplingDataBufferData.samplingDataBuffer =
            (&mut *self.final_buffer as *mut sys::CUpti_PCSamplingData).cast::<c_void>();
        infos.push(data);
        if let Some(p) = options.period_log2 {
            let mut i = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD);
            i.attributeData.samplingPeriodData.samplingPeriod = p;
            infos.push(i);
        }
        if let Some(ms) = options.worker_sleep_ms {
            let mut i = info(
                a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN,
            );
            i.attributeData
                .workerThreadPeriodicSleepSpanData
                .workerThreadPeriodicSleepSpan = ms;
            infos.push(i);
        }
        if let Some(bytes) = options.hardware_buffer_bytes {
            let mut i = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE);
            i.attributeData.hardwareBufferSizeData.hardwareBufferSize = bytes;
            infos.push(i);
        }
        if let Some(bytes) = options.scratch_buffer_bytes {
            let mut i = info(a::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE);
            i.attributeData.scratchBufferSizeData.scratchBufferSize = bytes;
            infos.push(i);
        }
        let mut p = sys::CUpti_PCSamplingConfigurationInfoParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingConfigurationInfoParams>(),
            ctx: super::cupti_context(self.ctx.cu_ctx()),
            numAttributes: infos.len(),
            pPCSamplingConfigurationInfo: infos.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: `infos` and `indices` outlive the call; the sampling data buffer is boxed in
        // `self` and stays put until disable (in drop), before which it is not freed.
        check(
            self.lib,
            "cuptiPCSamplingSetConfigurationAttribute",
            unsafe {
                self.lib
                    .api
                    .cuptiPCSamplingSetConfigurationAttribute(&mut p)
            },
        )
    }

    /// The stall reasons this device samples: `(index, CUPTI's name)`.
    pub(crate) fn reasons(&self) -> &[(u32, String)] {
        &self.reasons
    }

    /// Starts sampling (a range).
    ///
    /// # Errors
    /// The CUPTI failure.
    pub(crate) fn start(&mut self) -> Result<()> {
        if self.free_running {
            // Sampling runs from enable on; a range is the time between two reads.
            self.started = true;
            return Ok(());
        }
        let mut p = sys::CUpti_PCSamplingStartParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingStartParams>(),
            ctx: super::cupti_context(self.ctx.cu_ctx()),
            ..Default::default()
        };
        // SAFETY: params sized and filled; sampling is enabled on this context.
        check(self.lib, "cuptiPCSamplingStart", unsafe {
            self.lib.api.cuptiPCSamplingStart(&mut p)
        })?;
        self.started = true;
        Ok(())
    }

    /// Synchronizes the context (so that the range holds all its work), stops sampling and
    /// reads every PC sampled since [`start`](Self::start).
    ///
    /// # Errors
    /// The synchronization's or CUPTI's failure.
    pub(crate) fn stop_and_read(&mut self) -> Result<SampledRange> {
        self.ctx.synchronize()?;
        if self.free_running {
            self.started = false;
            let mut out = SampledRange::default();
            while self.read_once(&mut out)? {}
            return Ok(out);
        }
        let mut p = sys::CUpti_PCSamplingStopParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingStopParams>(),
            ctx: super::cupti_context(self.ctx.cu_ctx()),
            ..Default::default()
        };
        // SAFETY: params sized and filled; sampling is enabled on this context.
        check(self.lib, "cuptiPCSamplingStop", unsafe {
            self.lib.api.cuptiPCSamplingStop(&mut p)
        })?;
        self.started = false;
        let mut out = SampledRange::default();
        loop {
            let more = self.read_once(&mut out)?;
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// One `cuptiPCSamplingGetData`; true while CUPTI holds more PCs.
    fn read_once(&mut self, out: &mut SampledRange) -> Result<bool> {
        self.buffer.totalNumPcs = 0;
        self.buffer.remainingNumPcs = 0;
        let mut p = sys::CUpti_PCSamplingGetDataParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingGetDataParams>(),
            ctx: super::cupti_context(self.ctx.cu_ctx()),
            pcSamplingData: (&mut *self.buffer as *mut sys::CUpti_PCSamplingData).cast(),
            ..Default::default()
        };
        // SAFETY: the buffer holds `collectNumPcs` records, each pointing at room for every
        // stall reason this context has, all owned by `self` and alive for the call.
        let rc = unsafe { self.lib.api.cuptiPCSamplingGetData(&mut p) };
        let full = rc == sys::CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY;
        if !full {
            check(self.lib, "cuptiPCSamplingGetData", rc)?;
        }
        let data = &*self.buffer;
        out.total_samples += data.totalSamples;
        out.dropped_samples += data.droppedSamples;
        out.non_user_samples += data.nonUsrKernelsTotalSamples;
        out.hardware_buffer_full |= full || data.hardwareBufferFull != 0;
        let n = data.totalNumPcs.min(self.records.len());
        for r in &self.records[..n] {
            let name_ptr = r.functionName;
            let function = if name_ptr.is_null() {
                String::new()
            } else {
                // SAFETY: CUPTI set a NUL-terminated name it allocated and keeps (below).
                unsafe { CStr::from_ptr(name_ptr) }
                    .to_string_lossy()
                    .into_owned()
            };
            let count = r.stallReasonCount.min(self.reasons.len().max(1));
            // SAFETY: stallReason points at this record's `reasons.len()` slots in
            // `_stall_slots`, of which CUPTI filled `stallReasonCount`.
            let stalls = unsafe { std::slice::from_raw_parts(r.stallReason, count) }
                .iter()
                .filter(|s| s.samples > 0)
                .map(|s| (s.pcSamplingStallReasonIndex, s.samples))
                .collect();
            out.pcs.push(SampledPc {
                cubin_crc: r.cubinCrc,
                pc_offset: r.pcOffset,
                function,
                stalls,
            });
        }
        Ok(data.remainingNumPcs > 0 && n > 0 && !full)
    }
}

/// A PC sampling error that means another client samples this context, with the fix.
fn busy(e: Error) -> Error {
    match e {
        Error::Cupti {
            call,
            code,
            message,
            ..
        } if code == sys::CUptiResult::CUPTI_ERROR_HARDWARE_BUSY
            || code == sys::CUptiResult::CUPTI_ERROR_INVALID_OPERATION =>
        {
            Error::Cupti {
                call,
                code,
                message,
                hint: Some(SAMPLING_BUSY_FIX),
            }
        }
        other => other,
    }
}

/// The fix when PC sampling cannot be enabled because another client samples.
pub(crate) const SAMPLING_BUSY_FIX: &str = "only one client can PC-sample a GPU: another \
profiler (Nsight Compute or Nsight Systems PC sampling, a second gpu-ledger PcSampler, DCGM \
profiling) or a second context of this process already samples it; stop it, or sample only \
one context per GPU";

fn disable(lib: &LoadedCupti, ctx: sys::CUcontext) {
    let mut p = sys::CUpti_PCSamplingDisableParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingDisableParams>(),
        ctx,
        ..Default::default()
    };
    // SAFETY: params sized and filled; a failure leaves nothing to undo.
    let _ = unsafe { lib.api.cuptiPCSamplingDisable(&mut p) };
}

fn stall_reasons(lib: &LoadedCupti, ctx: sys::CUcontext) -> Result<Vec<(u32, String)>> {
    let mut n = 0usize;
    let mut p = sys::CUpti_PCSamplingGetNumStallReasonsParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingGetNumStallReasonsParams>(),
        ctx,
        numStallReasons: &mut n,
        ..Default::default()
    };
    // SAFETY: out-pointer valid for the call.
    check(lib, "cuptiPCSamplingGetNumStallReasons", unsafe {
        lib.api.cuptiPCSamplingGetNumStallReasons(&mut p)
    })?;
    let width = sys::CUPTI_STALL_REASON_STRING_SIZE as usize;
    let mut names = vec![0 as c_char; n * width];
    let mut ptrs: Vec<*mut c_char> = (0..n).map(|i| names[i * width..].as_mut_ptr()).collect();
    let mut indices = vec![0u32; n];
    let mut p = sys::CUpti_PCSamplingGetStallReasonsParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingGetStallReasonsParams>(),
        ctx,
        numStallReasons: n,
        stallReasonIndex: indices.as_mut_ptr(),
        stallReasons: ptrs.as_mut_ptr(),
        ..Default::default()
    };
    // SAFETY: `n` index slots and `n` name buffers of CUPTI_STALL_REASON_STRING_SIZE bytes,
    // alive for the call.
    check(lib, "cuptiPCSamplingGetStallReasons", unsafe {
        lib.api.cuptiPCSamplingGetStallReasons(&mut p)
    })?;
    Ok((0..n)
        .map(|i| {
            let s = &names[i * width..(i + 1) * width];
            let end = s.iter().position(|&c| c == 0).unwrap_or(width);
            let bytes: Vec<u8> = s[..end].iter().map(|&c| c as u8).collect();
            (indices[i], String::from_utf8_lossy(&bytes).into_owned())
        })
        .collect())
}

impl Drop for PcSampler {
    fn drop(&mut self) {
        if self.enabled {
            if self.started {
                let _ = self.stop_and_read();
            }
            disable(self.lib, super::cupti_context(self.ctx.cu_ctx()));
            self.enabled = false;
        }
        let ordinal = self.ctx.ordinal();
        SAMPLED.lock().retain(|o| *o != ordinal);
        // The function names in the records are not freed: CUPTI shares one string per function
        // between records and between sampling sessions of the process (freeing them after one
        // session made the next one free them again: a double free, seen on the H200), so they
        // stay CUPTI's, one per sampled function.
    }
}

/// `cuptiGetCubinCrc`: the CRC PC records name a cubin by.
///
/// # Errors
/// The CUPTI failure (an empty or invalid cubin).
pub(crate) fn cubin_crc(lib: &LoadedCupti, cubin: &[u8]) -> Result<u64> {
    let mut p = sys::CUpti_GetCubinCrcParams {
        size: std::mem::size_of::<sys::CUpti_GetCubinCrcParams>(),
        cubinSize: cubin.len(),
        cubin: cubin.as_ptr().cast(),
        cubinCrc: 0,
    };
    // SAFETY: the cubin slice is valid for the call.
    check(lib, "cuptiGetCubinCrc", unsafe {
        lib.api.cuptiGetCubinCrc(&mut p)
    })?;
    Ok(p.cubinCrc)
}

/// A PC's place in the source: directory, file and line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SourcePlace {
    pub(crate) dir: String,
    pub(crate) file: String,
    pub(crate) line: u32,
}

/// `cuptiGetSassToSourceCorrelation`: the source line of `pc_offset` in `function` of
/// `cubin`; `None` when the cubin has no line information for it.
pub(crate) fn source_place(
    lib: &LoadedCupti,
    cubin: &[u8],
    function: &str,
    pc_offset: u64,
) -> Option<SourcePlace> {
    let name = CString::new(function).ok()?;
    let mut p = sys::CUpti_GetSassToSourceCorrelationParams {
        size: std::mem::size_of::<sys::CUpti_GetSassToSourceCorrelationParams>(),
        cubin: cubin.as_ptr().cast(),
        functionName: name.as_ptr(),
        cubinSize: cubin.len(),
        lineNumber: 0,
        pcOffset: pc_offset,
        fileName: std::ptr::null_mut(),
        dirName: std::ptr::null_mut(),
    };
    // SAFETY: cubin and name valid for the call; CUPTI allocates fileName and dirName, freed
    // below with free() as the header asks.
    let rc = unsafe { lib.api.cuptiGetSassToSourceCorrelation(&mut p) };
    let take = |s: *mut c_char| -> String {
        if s.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string CUPTI allocated for the caller, freed once here.
        let v = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        // SAFETY: as above.
        unsafe { libc::free(s.cast()) };
        v
    };
    let (file, dir) = (take(p.fileName), take(p.dirName));
    if rc != sys::CUptiResult::CUPTI_SUCCESS || p.lineNumber == 0 {
        return None;
    }
    Some(SourcePlace {
        dir,
        file,
        line: p.lineNumber,
    })
}

/// Cubins of the modules loaded while a profiler PC-samples, kept for the sampled PCs' source
/// lines: CUPTI's resource callback hands each module's image over at load.
struct LoadedCubins {
    on: bool,
    cubins: Vec<Arc<[u8]>>,
    bytes: usize,
    /// Modules not kept because the bound was reached.
    skipped: u64,
}

static LOADED: parking_lot::Mutex<LoadedCubins> = parking_lot::Mutex::new(LoadedCubins {
    on: false,
    cubins: Vec::new(),
    bytes: 0,
    skipped: 0,
});

/// The most cubin bytes kept between two reads: a framework that loads a gigabyte of modules
/// keeps the first 512 MiB, and the rest are counted.
const CUBIN_BOUND: usize = 512 << 20;

/// Starts or stops keeping the cubins of loaded modules (the resource callback is enabled with
/// the timeline's callbacks when this is on).
pub(crate) fn capture_cubins(on: bool) {
    let mut l = LOADED.lock();
    l.on = on;
    if !on {
        l.cubins.clear();
        l.bytes = 0;
        l.skipped = 0;
    }
}

/// Whether loaded modules' cubins are kept.
pub(crate) fn captures_cubins() -> bool {
    LOADED.lock().on
}

/// The cubins kept since the last call, and how many modules were not kept (the bound).
pub(crate) fn take_loaded_cubins() -> (Vec<Arc<[u8]>>, u64) {
    let mut l = LOADED.lock();
    l.bytes = 0;
    (
        std::mem::take(&mut l.cubins),
        std::mem::take(&mut l.skipped),
    )
}

/// CUPTI's `CUPTI_CBID_RESOURCE_MODULE_LOADED`: keeps a copy of the module's cubin.
///
/// # Safety
/// `data` is the `CUpti_ResourceData` CUPTI passed for a module-loaded callback.
pub(crate) unsafe fn on_module_loaded(data: *const sys::CUpti_ResourceData) {
    // SAFETY: the caller passes CUPTI's resource data for this callback; its descriptor is a
    // CUpti_ModuleResourceData whose cubin pointer covers cubinSize bytes during the callback.
    let bytes: Option<&[u8]> = unsafe {
        let d = (*data).resourceDescriptor as *const sys::CUpti_ModuleResourceData;
        if d.is_null() || (*d).pCubin.is_null() || (*d).cubinSize == 0 {
            None
        } else {
            Some(std::slice::from_raw_parts(
                (*d).pCubin.cast::<u8>(),
                (*d).cubinSize,
            ))
        }
    };
    let Some(bytes) = bytes else { return };
    let mut l = LOADED.lock();
    if !l.on {
        return;
    }
    if l.bytes.saturating_add(bytes.len()) > CUBIN_BOUND {
        l.skipped += 1;
        return;
    }
    l.bytes += bytes.len();
    l.cubins.push(Arc::from(bytes));
}
