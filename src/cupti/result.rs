//! CUPTI result codes: one check for every CUPTI call, and one table of fixes, so that the same
//! error reads the same whichever level met it.

use cupti_sys as sys;

use super::LoadedCupti;
use crate::error::{Error, Result};

/// The fix for missing counter permission (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, shown by Nsight
/// tools as ERR_NVGPUCTRPERM).
pub(crate) const PERMISSION_FIX: &str = "the NVIDIA driver lets only administrators read GPU \
performance counters (ERR_NVGPUCTRPERM, https://developer.nvidia.com/ERR_NVGPUCTRPERM). As root, \
set the driver's profiling permission: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' \
> /etc/modprobe.d/nvidia-profiling.conf`, then reload the nvidia module (or reboot) and check that \
`grep RmProfilingAdminOnly /proc/driver/nvidia/params` shows 0; or run this process as root or \
with CAP_SYS_ADMIN (in a container: --cap-add=SYS_ADMIN); on a vGPU the host must enable \
profiling for the VM. Level::Timeline needs no such permission";

/// The fix when another tool holds the counters (CUPTI_ERROR_HARDWARE_BUSY).
pub(crate) const BUSY_FIX: &str = "another profiler holds this GPU's performance counters: Nsight \
Compute, a second Range Profiler, or DCGM profiling metrics (dcgm-exporter, `dcgmi dmon -e \
1001..`); stop it or pause DCGM profiling with `dcgmi profile --pause`, then retry. \
Level::Timeline does not use the counters";

/// The fix when the device or its configuration cannot be profiled.
pub(crate) const UNSUPPORTED_FIX: &str = "the CUPTI Range Profiler does not support this GPU or \
configuration: it needs compute capability 7.0 or newer, no SLI, no confidential computing, not \
a CMP part, a MIG-disabled GPU (or MIG support in the driver), and profiling enabled on vGPU; \
run counters on a supported GPU and keep Level::Timeline here";

/// The fix for an unknown metric name.
pub(crate) const METRIC_NAME_FIX: &str = "use metric names exactly as Nsight Compute spells them \
(`ncu --query-metrics --chip <chip>`); gpu_ledger::counters validates names before the run and \
suggests the nearest ones";

/// The fix for a CUPTI code, when one is known.
pub(crate) fn fix(code: sys::CUptiResult::Type) -> Option<&'static str> {
    use sys::CUptiResult as r;
    match code {
        r::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
        | r::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => Some(PERMISSION_FIX),
        r::CUPTI_ERROR_HARDWARE_BUSY => Some(BUSY_FIX),
        r::CUPTI_ERROR_NOT_SUPPORTED
        | r::CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED
        | r::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
        | r::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED
        | r::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED
        | r::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED
        | r::CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED
        | r::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED
        | r::CUPTI_ERROR_INVALID_CHIP_NAME => Some(UNSUPPORTED_FIX),
        r::CUPTI_ERROR_INVALID_METRIC_NAME => Some(METRIC_NAME_FIX),
        r::CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED => Some(
            "the legacy CUPTI Profiler API (cuptiProfilerBeginSession) is already in use in this \
             process; only one of the two APIs can run",
        ),
        r::CUPTI_ERROR_NOT_INITIALIZED => {
            Some("the CUDA driver could not be initialised; check the driver and the GPU")
        }
        r::CUPTI_ERROR_NOT_COMPATIBLE => Some(
            "use the CUPTI of the CUDA version the driver supports; CUPTI also refuses to \
                 enable kernel tracing while PC sampling is enabled on a context (drop the \
                 PcSampler first)",
        ),
        _ => None,
    }
}

/// The crate's error for a failed CUPTI call, with CUPTI's own `message` (pure: no CUPTI
/// needed). A second subscriber is [`Error::CuptiBusy`], whose text names the tools that take
/// CUPTI's one slot.
pub(crate) fn error(call: &'static str, code: sys::CUptiResult::Type, message: String) -> Error {
    if code == sys::CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        return Error::CuptiBusy(format!(
            "{call} returned CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
        ));
    }
    Error::Cupti {
        call,
        code,
        message,
        hint: fix(code),
    }
}

/// Turns a CUPTI return code into a `Result`, with CUPTI's message and the fix where one is
/// known.
pub fn check(lib: &LoadedCupti, call: &'static str, code: sys::CUptiResult::Type) -> Result<()> {
    if code == sys::CUptiResult::CUPTI_SUCCESS {
        return Ok(());
    }
    Err(error(call, code, result_string(lib, code)))
}

/// CUPTI's own text for a result code.
pub(crate) fn result_string(lib: &LoadedCupti, code: sys::CUptiResult::Type) -> String {
    let mut ptr: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: out-pointer valid; CUPTI returns a static string.
    let rc = unsafe { lib.api.cuptiGetResultString(code, &mut ptr) };
    if rc != sys::CUptiResult::CUPTI_SUCCESS || ptr.is_null() {
        return format!("CUptiResult {code}");
    }
    // SAFETY: non-null, NUL-terminated static string owned by CUPTI.
    unsafe { std::ffi::CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}
