//! The thin unsafe layer over CUPTI's Range Profiler (`cupti_range_profiler.h`), Profiler Host
//! (`cupti_profiler_host.h`), Profiler Target (`cupti_profiler_target.h`) and device
//! (`cupti_target.h`) APIs. Every CUPTI call of the counters level is made here, once, behind a
//! safe signature; `counters/` has no `unsafe`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use cudarc::driver::CudaContext;
use cupti_sys as sys;

use super::params::Padded;
use super::result::check;
use super::{LoadedCupti, Subscription};
use crate::error::{Error, Result};

/// Copies a C string CUPTI owns; null gives an empty string.
fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI returned a non-null, NUL-terminated string that stays valid at least until
    // its next call on the same object; it is copied before that.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Copies an array of `n` C strings CUPTI owns.
fn owned_strs(p: *const *const c_char, n: usize) -> Vec<String> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: CUPTI returned `n` valid string pointers at `p`, alive until its next call on the
    // same host object; they are copied before that.
    unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|s| owned_str(*s))
        .collect()
}

/// A byte buffer with 8-byte alignment (the config and counter-data images must be `align(8)`)
/// that never moves: CUPTI keeps pointers into it between calls.
pub(crate) struct AlignedBuf {
    words: Box<[u64]>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> Self {
        AlignedBuf {
            words: vec![0u64; len.div_ceil(8)].into_boxed_slice(),
            len,
        }
    }

    /// A copy of `bytes`.
    pub(crate) fn copy_of(bytes: &[u8]) -> Self {
        let mut b = AlignedBuf::zeroed(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the words hold at least `len` initialised bytes; u8 has no alignment need.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and the borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// `cuptiProfilerInitialize`, once per process (CUPTI's profiler interface is process-wide).
pub(crate) fn profiler_initialize(lib: &LoadedCupti) -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), (u32, String)>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        let mut p = params!(CUpti_Profiler_Initialize_Params, pPriv);
        // SAFETY: valid params struct with its size set.
        let rc = unsafe { lib.api.cuptiProfilerInitialize(p.as_mut_ptr()) };
        if rc == sys::CUptiResult::CUPTI_SUCCESS {
            Ok(())
        } else {
            Err((rc, crate::cupti::result_string(lib, rc)))
        }
    });
    match r {
        Ok(()) => Ok(()),
        Err((rc, msg)) => Err(super::result::error(
            "cuptiProfilerInitialize",
            *rc,
            msg.clone(),
        )),
    }
}

/// What `cuptiProfilerDeviceSupported` says about one GPU, one field per reason (the values
/// of `CUpti_Profiler_Support_Level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSupport {
    /// Overall verdict.
    pub overall: u32,
    /// Compute capability 7.0 or newer.
    pub architecture: u32,
    /// Not part of an SLI group.
    pub sli: u32,
    /// vGPU with profiling enabled (or not a vGPU).
    pub vgpu: u32,
    /// Confidential computing off.
    pub confidential_compute: u32,
    /// Not a Crypto Mining Processor.
    pub cmp: u32,
    /// WSL supported (or not WSL).
    pub wsl: u32,
}

/// `cuptiProfilerDeviceSupported` for the Range Profiler on the context's device.
pub(crate) fn device_supported(lib: &LoadedCupti, ctx: &CudaContext) -> Result<DeviceSupport> {
    let mut p = params!(CUpti_Profiler_DeviceSupported_Params, api);
    p.cuDevice = ctx.cu_device();
    p.api = sys::CUpti_Profiler_API::CUPTI_PROFILER_RANGE_PROFILING;
    // SAFETY: valid params struct with its size set; the device is a plain ordinal.
    trace_call("cuptiProfilerDeviceSupported");
    check(lib, "cuptiProfilerDeviceSupported", unsafe {
        lib.api.cuptiProfilerDeviceSupported(p.as_mut_ptr())
    })?;
    Ok(DeviceSupport {
        overall: p.isSupported,
        architecture: p.architecture,
        sli: p.sli,
        vgpu: p.vGpu,
        confidential_compute: p.confidentialCompute,
        cmp: p.cmp,
        wsl: p.wsl,
    })
}

/// `cuptiDeviceGetChipName` for CUDA device `ordinal` (for example `GH100` on an H100/H200).
pub(crate) fn chip_name(lib: &LoadedCupti, ordinal: usize) -> Result<String> {
    let mut p = params!(CUpti_Device_GetChipName_Params, pChipName);
    p.deviceIndex = ordinal;
    // SAFETY: params sized as the header says; CUPTI fills pChipName with a static string.
    trace_call("cuptiDeviceGetChipName");
    check(lib, "cuptiDeviceGetChipName", unsafe {
        lib.api.cuptiDeviceGetChipName(p.as_mut_ptr())
    })?;
    Ok(owned_str(p.pChipName))
}

/// `cuptiProfilerGetCounterAvailability` on `ctx` (size query, then the image). Must run while
/// no profiling session is active on the context.
pub(crate) fn counter_availability(lib: &LoadedCupti, ctx: &CudaContext) -> Result<Vec<u8>> {
    let cu_ctx = crate::cupti::cupti_context(ctx.cu_ctx());
    let mut p = params!(
        CUpti_Profiler_GetCounterAvailability_Params,
        pCounterAvailabilityImage
    );
    p.ctx = cu_ctx;
    // SAFETY: null image pointer asks for the size; the context is alive (borrowed).
    trace_call("cuptiProfilerGetCounterAvailability");
    check(lib, "cuptiProfilerGetCounterAvailability", unsafe {
        lib.api.cuptiProfilerGetCounterAvailability(p.as_mut_ptr())
    })?;
    let mut image = vec![0u8; p.counterAvailabilityImageSize];
    p.pCounterAvailabilityImage = image.as_mut_ptr();
    // SAFETY: the buffer is writable for the size passed in the struct.
    trace_call("cuptiProfilerGetCounterAvailability");
    check(lib, "cuptiProfilerGetCounterAvailability", unsafe {
        lib.api.cuptiProfilerGetCounterAvailability(p.as_mut_ptr())
    })?;
    image.truncate(p.counterAvailabilityImageSize);
    Ok(image)
}

/// The metric kinds of `CUpti_MetricType`.
pub(crate) const METRIC_TYPES: [sys::CUpti_MetricType::Type; 3] = [
    sys::CUpti_MetricType::CUPTI_METRIC_TYPE_COUNTER,
    sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO,
    sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT,
];

/// What `cuptiProfilerHostGetMetricProperties` says about a metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricProperties {
    /// Short description.
    pub description: String,
    /// Hardware unit (`dram`, `sm`, `l1tex`, ...).
    pub hw_unit: String,
    /// Dimension of the values (`byte`, `nsecond`, `%`, ...).
    pub dim_unit: String,
    /// `counter`, `ratio` or `throughput`.
    pub metric_type: &'static str,
}

/// A `CUpti_Profiler_Host_Object`: the host side (metric names, config image, evaluation).
/// Deinitialized on drop.
pub(crate) struct HostObject {
    lib: &'static LoadedCupti,
    ptr: NonNull<sys::CUpti_Profiler_Host_Object>,
    // The chip name and the counter-availability image passed to `cuptiProfilerHostInitialize`
    // are kept alive as long as the object: libnvperf_host keeps the pointers and reads them in
    // later calls (`ConfigAddMetrics`). Freeing them after initialization made those calls
    // crash once the process had reused the memory (docs/measurements.md).
    chip: CString,
    availability: Box<[u8]>,
}

// SAFETY: the host object is plain host memory CUPTI allocated; it is only used through `&self`
// / `&mut self` of its one owner, never concurrently from two threads.
unsafe impl Send for HostObject {}

impl HostObject {
    /// `cuptiProfilerHostInitialize` for the Range Profiler with the chip name and the counter
    /// availability image of the device.
    pub(crate) fn new(lib: &'static LoadedCupti, chip: &str, availability: &[u8]) -> Result<Self> {
        let chip_c = CString::new(chip)
            .map_err(|_| Error::Config(format!("chip name {chip:?} holds a NUL byte")))?;
        let availability: Box<[u8]> = availability.into();
        let mut p = params!(CUpti_Profiler_Host_Initialize_Params, pHostObject);
        p.profilerType = sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_RANGE_PROFILER;
        p.pChipName = chip_c.as_ptr();
        p.pCounterAvailabilityImage = if availability.is_empty() {
            std::ptr::null()
        } else {
            availability.as_ptr()
        };
        // SAFETY: the chip name and the image live in the returned object, as long as CUPTI may
        // read them; CUPTI writes the object pointer.
        trace_call("cuptiProfilerHostInitialize");
        check(lib, "cuptiProfilerHostInitialize", unsafe {
            lib.api.cuptiProfilerHostInitialize(p.as_mut_ptr())
        })?;
        let ptr = NonNull::new(p.pHostObject).ok_or_else(|| {
            Error::Config("cuptiProfilerHostInitialize returned no host object".into())
        })?;
        Ok(HostObject {
            lib,
            ptr,
            chip: chip_c,
            availability,
        })
    }

    /// A second host object for the same chip and counter availability (one whose state a
    /// refused configuration may leave behind can be thrown away).
    pub(crate) fn fresh(&self) -> Result<Self> {
        let chip = self.chip.to_str().unwrap_or_default();
        HostObject::new(self.lib, chip, &self.availability)
    }

    /// `cuptiProfilerHostGetBaseMetrics` for one metric type.
    pub(crate) fn base_metrics(
        &self,
        metric_type: sys::CUpti_MetricType::Type,
    ) -> Result<Vec<String>> {
        let mut p = params!(CUpti_Profiler_Host_GetBaseMetrics_Params, numMetrics);
        p.pHostObject = self.ptr.as_ptr();
        p.metricType = metric_type;
        // SAFETY: live host object; CUPTI fills the name array it owns.
        trace_call("cuptiProfilerHostGetBaseMetrics");
        check(self.lib, "cuptiProfilerHostGetBaseMetrics", unsafe {
            self.lib.api.cuptiProfilerHostGetBaseMetrics(p.as_mut_ptr())
        })?;
        Ok(owned_strs(p.ppMetricNames, p.numMetrics))
    }

    /// `cuptiProfilerHostGetSubMetrics`: the rollups and submetrics of a base metric.
    pub(crate) fn sub_metrics(
        &self,
        metric_type: sys::CUpti_MetricType::Type,
        base: &str,
    ) -> Result<Vec<String>> {
        let name = CString::new(base)
            .map_err(|_| Error::Config(format!("metric name {base:?} holds a NUL byte")))?;
        let mut p = params!(CUpti_Profiler_Host_GetSubMetrics_Params, ppSubMetrics);
        p.pHostObject = self.ptr.as_ptr();
        p.metricType = metric_type;
        p.pMetricName = name.as_ptr();
        // SAFETY: live host object and name; CUPTI fills the array it owns.
        trace_call("cuptiProfilerHostGetSubMetrics");
        check(self.lib, "cuptiProfilerHostGetSubMetrics", unsafe {
            self.lib.api.cuptiProfilerHostGetSubMetrics(p.as_mut_ptr())
        })?;
        Ok(owned_strs(p.ppSubMetrics, p.numOfSubmetrics))
    }

    /// `cuptiProfilerHostGetMetricProperties`; `Ok(None)` when the name is not a metric of this
    /// chip (`CUPTI_ERROR_INVALID_METRIC_NAME`).
    pub(crate) fn metric_properties(&self, metric: &str) -> Result<Option<MetricProperties>> {
        let Ok(name) = CString::new(metric) else {
            return Ok(None);
        };
        let mut p = params!(CUpti_Profiler_Host_GetMetricProperties_Params, metricType);
        p.pHostObject = self.ptr.as_ptr();
        p.pMetricName = name.as_ptr();
        // SAFETY: live host object and name; CUPTI fills static description strings.
        trace_call("cuptiProfilerHostGetMetricProperties");
        let rc = unsafe {
            self.lib
                .api
                .cuptiProfilerHostGetMetricProperties(p.as_mut_ptr())
        };
        if rc == sys::CUptiResult::CUPTI_ERROR_INVALID_METRIC_NAME
            || rc == sys::CUptiResult::CUPTI_ERROR_INVALID_PARAMETER
        {
            return Ok(None);
        }
        check(self.lib, "cuptiProfilerHostGetMetricProperties", rc)?;
        use sys::CUpti_MetricType as t;
        Ok(Some(MetricProperties {
            description: owned_str(p.pDescription),
            hw_unit: owned_str(p.pHwUnit),
            dim_unit: owned_str(p.pDimUnit),
            metric_type: match p.metricType {
                t::CUPTI_METRIC_TYPE_COUNTER => "counter",
                t::CUPTI_METRIC_TYPE_RATIO => "ratio",
                t::CUPTI_METRIC_TYPE_THROUGHPUT => "throughput",
                _ => "unknown",
            },
        }))
    }

    /// `cuptiProfilerHostConfigAddMetrics`, then `GetConfigImageSize` and `GetConfigImage`.
    pub(crate) fn config_image(&self, metrics: &[CString]) -> Result<AlignedBuf> {
        let mut names: Vec<*const c_char> = metrics.iter().map(|m| m.as_ptr()).collect();
        let mut add = params!(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
        add.pHostObject = self.ptr.as_ptr();
        add.ppMetricNames = names.as_mut_ptr();
        add.numMetrics = names.len();
        // SAFETY: live host object; the name array and its strings outlive the call.
        trace_call("cuptiProfilerHostConfigAddMetrics");
        check(self.lib, "cuptiProfilerHostConfigAddMetrics", unsafe {
            self.lib
                .api
                .cuptiProfilerHostConfigAddMetrics(add.as_mut_ptr())
        })?;
        let mut size = params!(
            CUpti_Profiler_Host_GetConfigImageSize_Params,
            configImageSize
        );
        size.pHostObject = self.ptr.as_ptr();
        // SAFETY: live host object.
        trace_call("cuptiProfilerHostGetConfigImageSize");
        check(self.lib, "cuptiProfilerHostGetConfigImageSize", unsafe {
            self.lib
                .api
                .cuptiProfilerHostGetConfigImageSize(size.as_mut_ptr())
        })?;
        let mut image = AlignedBuf::zeroed(size.configImageSize);
        let mut get = params!(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
        get.pHostObject = self.ptr.as_ptr();
        get.configImageSize = image.len();
        get.pConfigImage = image.as_mut_slice().as_mut_ptr();
        // SAFETY: the buffer is writable for the size passed.
        trace_call("cuptiProfilerHostGetConfigImage");
        check(self.lib, "cuptiProfilerHostGetConfigImage", unsafe {
            self.lib
                .api
                .cuptiProfilerHostGetConfigImage(get.as_mut_ptr())
        })?;
        Ok(image)
    }

    /// `cuptiProfilerHostEvaluateToGpuValues`: the metric values of one range.
    pub(crate) fn evaluate(
        &self,
        counter_data: &[u8],
        range: usize,
        metrics: &[CString],
    ) -> Result<Vec<f64>> {
        let mut names: Vec<*const c_char> = metrics.iter().map(|m| m.as_ptr()).collect();
        let mut values = vec![f64::NAN; metrics.len()];
        let mut p = params!(
            CUpti_Profiler_Host_EvaluateToGpuValues_Params,
            pMetricValues
        );
        p.pHostObject = self.ptr.as_ptr();
        p.pCounterDataImage = counter_data.as_ptr();
        p.counterDataImageSize = counter_data.len();
        p.rangeIndex = range;
        p.ppMetricNames = names.as_mut_ptr();
        p.numMetrics = names.len();
        p.pMetricValues = values.as_mut_ptr();
        // SAFETY: live host object; image, names and the output array (one f64 per name) all
        // outlive the call.
        trace_call("cuptiProfilerHostEvaluateToGpuValues");
        check(self.lib, "cuptiProfilerHostEvaluateToGpuValues", unsafe {
            self.lib
                .api
                .cuptiProfilerHostEvaluateToGpuValues(p.as_mut_ptr())
        })?;
        Ok(values)
    }
}

impl Drop for HostObject {
    fn drop(&mut self) {
        let mut p = params!(CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
        p.pHostObject = self.ptr.as_ptr();
        // SAFETY: the object came from cuptiProfilerHostInitialize and is deinitialized once.
        let _ = unsafe { self.lib.api.cuptiProfilerHostDeinitialize(p.as_mut_ptr()) };
    }
}

/// `cuptiProfilerHostGetNumOfPasses` for a config image.
pub(crate) fn num_passes(lib: &LoadedCupti, config: &mut AlignedBuf) -> Result<usize> {
    let mut p = params!(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
    p.configImageSize = config.len();
    p.pConfigImage = config.as_mut_slice().as_mut_ptr();
    // SAFETY: the image is valid for its size.
    trace_call("cuptiProfilerHostGetNumOfPasses");
    check(lib, "cuptiProfilerHostGetNumOfPasses", unsafe {
        lib.api.cuptiProfilerHostGetNumOfPasses(p.as_mut_ptr())
    })?;
    Ok(p.numOfPasses)
}

/// `cuptiRangeProfilerGetCounterDataInfo`: ranges stored in a counter-data image.
pub(crate) fn counter_data_ranges(lib: &LoadedCupti, image: &[u8]) -> Result<usize> {
    let mut p = params!(
        CUpti_RangeProfiler_GetCounterDataInfo_Params,
        numTotalRanges
    );
    p.pCounterDataImage = image.as_ptr();
    p.counterDataImageSize = image.len();
    // SAFETY: the image is valid for its size.
    trace_call("cuptiRangeProfilerGetCounterDataInfo");
    check(lib, "cuptiRangeProfilerGetCounterDataInfo", unsafe {
        lib.api.cuptiRangeProfilerGetCounterDataInfo(p.as_mut_ptr())
    })?;
    Ok(p.numTotalRanges)
}

/// `cuptiRangeProfilerCounterDataGetRangeInfo`: the name of range `index`, nested names joined
/// by `delimiter`.
///
/// The header does not say who owns the returned string (the host API's twin,
/// `cuptiProfilerHostGetRangeName`, says the caller frees it); NVIDIA's sample copies it and
/// frees nothing, and so does this: at worst a few bytes per range and collection stay allocated.
pub(crate) fn range_name(
    lib: &LoadedCupti,
    image: &[u8],
    index: usize,
    delimiter: &CStr,
) -> Result<String> {
    let mut p = params!(
        CUpti_RangeProfiler_CounterData_GetRangeInfo_Params,
        rangeName
    );
    p.pCounterDataImage = image.as_ptr();
    p.counterDataImageSize = image.len();
    p.rangeIndex = index;
    p.rangeDelimiter = delimiter.as_ptr();
    // SAFETY: image and delimiter outlive the call; CUPTI returns a NUL-terminated name.
    trace_call("cuptiRangeProfilerCounterDataGetRangeInfo");
    check(lib, "cuptiRangeProfilerCounterDataGetRangeInfo", unsafe {
        lib.api
            .cuptiRangeProfilerCounterDataGetRangeInfo(p.as_mut_ptr())
    })?;
    Ok(owned_str(p.rangeName))
}

/// What `cuptiRangeProfilerStop` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StopInfo {
    pub(crate) pass_index: usize,
    pub(crate) target_nesting_level: usize,
    pub(crate) all_passes_submitted: bool,
}

/// The target side: a `CUpti_RangeProfiler_Object` enabled on a context, with the config image
/// and counter-data image it points into (owned here so they cannot move or be freed while it
/// lives). Disabled on drop.
pub(crate) struct Target {
    lib: &'static LoadedCupti,
    ptr: NonNull<sys::CUpti_RangeProfiler_Object>,
    /// Keeps the context alive as long as the object that is enabled on it.
    _ctx: Arc<CudaContext>,
    config: Option<AlignedBuf>,
    counter_data: Option<AlignedBuf>,
    enabled: bool,
}

// SAFETY: the object is a handle CUPTI accepts from any thread; it is used only through its one
// owner, never concurrently.
unsafe impl Send for Target {}

impl Target {
    /// `cuptiRangeProfilerEnable` on `ctx`.
    pub(crate) fn enable(lib: &'static LoadedCupti, ctx: &Arc<CudaContext>) -> Result<Self> {
        let mut p = params!(CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject);
        p.ctx = crate::cupti::cupti_context(ctx.cu_ctx());
        // SAFETY: the context is alive (an Arc clone is kept with the object).
        trace_call("cuptiRangeProfilerEnable");
        check(lib, "cuptiRangeProfilerEnable", unsafe {
            lib.api.cuptiRangeProfilerEnable(p.as_mut_ptr())
        })?;
        let ptr = NonNull::new(p.pRangeProfilerObject).ok_or_else(|| {
            Error::Config("cuptiRangeProfilerEnable returned no range profiler object".into())
        })?;
        Ok(Target {
            lib,
            ptr,
            _ctx: ctx.clone(),
            config: None,
            counter_data: None,
            enabled: true,
        })
    }

    /// `cuptiRangeProfilerGetCounterDataSize` and `cuptiRangeProfilerCounterDataImageInitialize`,
    /// then keeps a copy of the config image for `set_config`.
    pub(crate) fn prepare(
        &mut self,
        metrics: &[CString],
        max_ranges: usize,
        max_tree_nodes: u32,
        config: &[u8],
    ) -> Result<()> {
        let mut names: Vec<*const c_char> = metrics.iter().map(|m| m.as_ptr()).collect();
        let mut size = params!(
            CUpti_RangeProfiler_GetCounterDataSize_Params,
            counterDataSize
        );
        size.pRangeProfilerObject = self.ptr.as_ptr();
        size.pMetricNames = names.as_mut_ptr();
        size.numMetrics = names.len();
        size.maxNumOfRanges = max_ranges;
        size.maxNumRangeTreeNodes = max_tree_nodes;
        // SAFETY: live object; names outlive the call.
        trace_call("cuptiRangeProfilerGetCounterDataSize");
        check(self.lib, "cuptiRangeProfilerGetCounterDataSize", unsafe {
            self.lib
                .api
                .cuptiRangeProfilerGetCounterDataSize(size.as_mut_ptr())
        })?;
        let mut image = AlignedBuf::zeroed(size.counterDataSize);
        let mut init = params!(
            CUpti_RangeProfiler_CounterDataImage_Initialize_Params,
            pCounterData
        );
        init.pRangeProfilerObject = self.ptr.as_ptr();
        init.counterDataSize = image.len();
        init.pCounterData = image.as_mut_slice().as_mut_ptr();
        // SAFETY: live object; the buffer is writable for its size and is kept (boxed, never
        // moved) in `self` from here on.
        check(
            self.lib,
            "cuptiRangeProfilerCounterDataImageInitialize",
            unsafe {
                self.lib
                    .api
                    .cuptiRangeProfilerCounterDataImageInitialize(init.as_mut_ptr())
            },
        )?;
        self.counter_data = Some(image);
        self.config = Some(AlignedBuf::copy_of(config));
        Ok(())
    }

    /// `cuptiRangeProfilerSetConfig` with the images from [`Target::prepare`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_config(
        &mut self,
        range: sys::CUpti_ProfilerRange::Type,
        replay: sys::CUpti_ProfilerReplayMode::Type,
        max_ranges_per_pass: usize,
        num_nesting_levels: u16,
        min_nesting_level: u16,
        pass_index: usize,
        target_nesting_level: u16,
    ) -> Result<()> {
        let (Some(config), Some(data)) = (self.config.as_ref(), self.counter_data.as_mut()) else {
            return Err(Error::Config(
                "range profiler: set_config before the counter-data image was prepared".into(),
            ));
        };
        let mut p = params!(CUpti_RangeProfiler_SetConfig_Params, targetNestingLevel);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        p.configSize = config.len();
        p.pConfig = config.as_slice().as_ptr();
        p.counterDataImageSize = data.len();
        p.pCounterDataImage = data.as_mut_slice().as_mut_ptr();
        p.range = range;
        p.replayMode = replay;
        p.maxRangesPerPass = max_ranges_per_pass;
        p.numNestingLevels = num_nesting_levels;
        p.minNestingLevel = min_nesting_level;
        p.passIndex = pass_index;
        p.targetNestingLevel = target_nesting_level;
        // SAFETY: live object; both images are owned by `self`, boxed (they never move) and
        // outlive the object, which is disabled in Drop before they are freed.
        trace_call("cuptiRangeProfilerSetConfig");
        check(self.lib, "cuptiRangeProfilerSetConfig", unsafe {
            self.lib.api.cuptiRangeProfilerSetConfig(p.as_mut_ptr())
        })
    }

    /// `cuptiRangeProfilerStart`.
    pub(crate) fn start(&mut self) -> Result<()> {
        let mut p = params!(CUpti_RangeProfiler_Start_Params, pRangeProfilerObject);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        // SAFETY: live, configured object.
        trace_call("cuptiRangeProfilerStart");
        check(self.lib, "cuptiRangeProfilerStart", unsafe {
            self.lib.api.cuptiRangeProfilerStart(p.as_mut_ptr())
        })
    }

    /// `cuptiRangeProfilerStop`.
    pub(crate) fn stop(&mut self) -> Result<StopInfo> {
        let mut p = params!(CUpti_RangeProfiler_Stop_Params, isAllPassSubmitted);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        // SAFETY: live, started object.
        trace_call("cuptiRangeProfilerStop");
        check(self.lib, "cuptiRangeProfilerStop", unsafe {
            self.lib.api.cuptiRangeProfilerStop(p.as_mut_ptr())
        })?;
        Ok(StopInfo {
            pass_index: p.passIndex,
            target_nesting_level: p.targetNestingLevel,
            all_passes_submitted: p.isAllPassSubmitted != 0,
        })
    }

    /// `cuptiRangeProfilerPushRange`.
    pub(crate) fn push_range(&mut self, name: &CStr) -> Result<()> {
        let mut p = params!(CUpti_RangeProfiler_PushRange_Params, pRangeName);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        p.pRangeName = name.as_ptr();
        // SAFETY: live object; CUPTI copies the name before returning.
        trace_call("cuptiRangeProfilerPushRange");
        check(self.lib, "cuptiRangeProfilerPushRange", unsafe {
            self.lib.api.cuptiRangeProfilerPushRange(p.as_mut_ptr())
        })
    }

    /// `cuptiRangeProfilerPopRange`.
    pub(crate) fn pop_range(&mut self) -> Result<()> {
        let mut p = params!(CUpti_RangeProfiler_PopRange_Params, pRangeProfilerObject);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        // SAFETY: live object.
        trace_call("cuptiRangeProfilerPopRange");
        check(self.lib, "cuptiRangeProfilerPopRange", unsafe {
            self.lib.api.cuptiRangeProfilerPopRange(p.as_mut_ptr())
        })
    }

    /// `cuptiRangeProfilerDecodeData`: fills the counter-data image; returns the ranges dropped.
    pub(crate) fn decode(&mut self) -> Result<usize> {
        let mut p = params!(CUpti_RangeProfiler_DecodeData_Params, numOfRangeDropped);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        // SAFETY: live object; it writes into the counter-data image `self` owns.
        trace_call("cuptiRangeProfilerDecodeData");
        check(self.lib, "cuptiRangeProfilerDecodeData", unsafe {
            self.lib.api.cuptiRangeProfilerDecodeData(p.as_mut_ptr())
        })?;
        Ok(p.numOfRangeDropped)
    }

    /// The counter-data image (decoded after [`Target::decode`]).
    pub(crate) fn counter_data(&self) -> &[u8] {
        self.counter_data.as_ref().map_or(&[], |d| d.as_slice())
    }

    /// `cuptiRangeProfilerDisable`, reporting its error (Drop ignores it).
    pub(crate) fn disable(mut self) -> Result<()> {
        self.disable_inner()
    }

    fn disable_inner(&mut self) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        self.enabled = false;
        let mut p = params!(CUpti_RangeProfiler_Disable_Params, pRangeProfilerObject);
        p.pRangeProfilerObject = self.ptr.as_ptr();
        // SAFETY: the object came from cuptiRangeProfilerEnable and is disabled once (the flag
        // above); the images it points into are still alive (fields drop after this).
        trace_call("cuptiRangeProfilerDisable");
        check(self.lib, "cuptiRangeProfilerDisable", unsafe {
            self.lib.api.cuptiRangeProfilerDisable(p.as_mut_ptr())
        })
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.disable_inner();
    }
}

/// Kernel-launch bookkeeping the launch callback writes into (see `launches.rs`).
pub(crate) trait LaunchSink: Send + Sync {
    /// A launch API call was entered (`runtime`: runtime API domain), with the kernel's name
    /// when CUPTI gave one.
    fn on_launch(&self, runtime: bool, cbid: u32, symbol: Option<&CStr>, enter: bool);
}

/// CUPTI callback for the launch recorder: forwards launch enter/exit to the `LaunchSink` that
/// `userdata` points to. Never unwinds.
pub(crate) unsafe extern "C" fn launch_callback(
    userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain::Type,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const c_void,
) {
    if userdata.is_null() || cbdata.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let runtime = domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API;
        if !runtime && domain != sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API {
            return;
        }
        // SAFETY: for the driver and runtime API domains, the only ones enabled, CUPTI passes a
        // CUpti_CallbackData; userdata is the recorder's `Arc<dyn LaunchSink>` box, alive until
        // the recorder has unsubscribed; symbolName is null or a NUL-terminated string valid
        // during the callback.
        unsafe {
            let data = &*(cbdata as *const sys::CUpti_CallbackData);
            let sink = &*(userdata as *const Arc<dyn LaunchSink>);
            let symbol = (!data.symbolName.is_null()).then(|| CStr::from_ptr(data.symbolName));
            let enter = data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
            sink.on_launch(runtime, cbid, symbol, enter);
        }
    }));
}

/// A CUPTI callback subscription whose callback is [`launch_callback`] with `sink` as its
/// userdata. The sink is boxed here so that the pointer CUPTI holds stays valid until
/// `cuptiUnsubscribe` has returned (Drop unsubscribes before the fields are freed).
pub(crate) struct LaunchSubscription {
    lib: &'static LoadedCupti,
    sub: Option<Subscription>,
    _sink: Box<Arc<dyn LaunchSink>>,
}

impl LaunchSubscription {
    /// `cuptiSubscribe` with [`launch_callback`].
    pub(crate) fn new(lib: &'static LoadedCupti, sink: Arc<dyn LaunchSink>) -> Result<Self> {
        let sink = Box::new(sink);
        let userdata = (&*sink as *const Arc<dyn LaunchSink>)
            .cast_mut()
            .cast::<c_void>();
        // SAFETY: the box lives in the returned value until after cuptiUnsubscribe (Drop);
        // launch_callback catches every panic and only reads through the pointer.
        let sub = unsafe { crate::cupti::subscribe(lib, launch_callback, userdata) }?;
        Ok(LaunchSubscription {
            lib,
            sub: Some(sub),
            _sink: sink,
        })
    }

    /// The subscription handle, while subscribed.
    pub(crate) fn handle(&self) -> Option<&Subscription> {
        self.sub.as_ref()
    }

    /// `cuptiUnsubscribe` (once).
    pub(crate) fn unsubscribe(&mut self) -> Result<()> {
        match self.sub.take() {
            Some(sub) => crate::cupti::unsubscribe(self.lib, sub),
            None => Ok(()),
        }
    }
}

impl Drop for LaunchSubscription {
    fn drop(&mut self) {
        let _ = self.unsubscribe();
    }
}

/// With `GPU_LEDGER_TRACE_CUPTI=1`, names each CUPTI profiler call on stderr before it is made,
/// so that a crash inside CUPTI can be placed.
fn trace_call(name: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("GPU_LEDGER_TRACE_CUPTI").is_some()) {
        eprintln!("gpu-ledger: cupti call {name}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_8_aligned_and_sized() {
        for len in [0usize, 1, 7, 8, 9, 1000] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_slice().len(), len);
            assert_eq!(b.as_mut_slice().as_ptr() as usize % 8, 0);
        }
        let c = AlignedBuf::copy_of(&[1, 2, 3]);
        assert_eq!(c.as_slice(), &[1, 2, 3]);
    }
}
