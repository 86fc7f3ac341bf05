//! Errors of the counters level: CUPTI result codes mapped to messages that name the fix, and the
//! classification the profiler writes into the ledger header when counters cannot be collected
//! (the timeline level goes on without them).

use cupti_sys as sys;
use serde::{Deserialize, Serialize};

use super::ffi::DeviceSupport;
use crate::error::{Error, Result};
use crate::loader::LoadedCupti;

/// The fix for missing counter permission (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, shown by Nsight
/// tools as ERR_NVGPUCTRPERM).
pub const PERMISSION_FIX: &str = "the NVIDIA driver lets only administrators read GPU performance \
counters (ERR_NVGPUCTRPERM, https://developer.nvidia.com/ERR_NVGPUCTRPERM). As root, set the \
driver's profiling permission: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' > \
/etc/modprobe.d/nvidia-profiling.conf`, then reload the nvidia module (or reboot) and check that \
`grep RmProfilingAdminOnly /proc/driver/nvidia/params` shows 0; or run this process as root or \
with CAP_SYS_ADMIN (in a container: --cap-add=SYS_ADMIN); on a vGPU the host must enable \
profiling for the VM. Level::Timeline needs no such permission";

/// The fix when another tool holds the counters (CUPTI_ERROR_HARDWARE_BUSY).
pub const BUSY_FIX: &str = "another profiler holds this GPU's performance counters: Nsight \
Compute, a second Range Profiler, or DCGM profiling metrics (dcgm-exporter, `dcgmi dmon -e \
1001..`); stop it or pause DCGM profiling with `dcgmi profile --pause`, then retry. \
Level::Timeline does not use the counters";

/// The fix when the device or its configuration cannot be profiled.
pub const UNSUPPORTED_FIX: &str = "the CUPTI Range Profiler does not support this GPU or \
configuration: it needs compute capability 7.0 or newer, no SLI, no confidential computing, not \
a CMP part, a MIG-disabled GPU (or MIG support in the driver), and profiling enabled on vGPU; \
run counters on a supported GPU and keep Level::Timeline here";

/// The fix for an unknown metric name.
pub const METRIC_NAME_FIX: &str = "use metric names exactly as Nsight Compute spells them \
(`ncu --query-metrics --chip <chip>`); gpu_ledger::counters validates names before the run and \
suggests the nearest ones";

/// How the message of a rejected metric list starts (an [`Error::Config`]).
pub const UNKNOWN_METRIC_PREFIX: &str = "unknown metric";

/// The hint for a CUPTI code of the counters level, when one is known.
pub fn hint(code: sys::CUptiResult::Type) -> Option<&'static str> {
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
        r::CUPTI_ERROR_NOT_COMPATIBLE => {
            Some("use the CUPTI of the CUDA version the driver supports")
        }
        _ => None,
    }
}

/// Builds the crate error for a failed counters-level CUPTI call (pure: no CUPTI needed).
pub fn counter_error(call: &'static str, code: sys::CUptiResult::Type, message: String) -> Error {
    if code == sys::CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        return Error::CuptiBusy(format!(
            "{call} returned CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
        ));
    }
    Error::Cupti {
        call,
        code,
        message,
        hint: hint(code),
    }
}

/// Turns a CUPTI return code of the counters level into a `Result`, with CUPTI's message and the
/// fix where one is known.
pub fn check(lib: &LoadedCupti, call: &'static str, code: sys::CUptiResult::Type) -> Result<()> {
    if code == sys::CUptiResult::CUPTI_SUCCESS {
        return Ok(());
    }
    Err(counter_error(
        call,
        code,
        crate::cupti::result_string(lib, code),
    ))
}

fn level_name(level: u32) -> &'static str {
    use sys::CUpti_Profiler_Support_Level as l;
    match level {
        l::CUPTI_PROFILER_CONFIGURATION_SUPPORTED => "supported",
        l::CUPTI_PROFILER_CONFIGURATION_DISABLED => "disabled",
        l::CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED => "unsupported",
        _ => "unknown",
    }
}

/// The error for a device `cuptiProfilerDeviceSupported` does not call supported, naming each
/// failing item; `None` when the device is supported.
pub fn support_error(ordinal: usize, support: &DeviceSupport) -> Option<Error> {
    use sys::CUpti_Profiler_Support_Level as l;
    if support.overall == l::CUPTI_PROFILER_CONFIGURATION_SUPPORTED {
        return None;
    }
    let items = [
        (
            "architecture (compute capability 7.0+)",
            support.architecture,
        ),
        ("SLI", support.sli),
        ("vGPU", support.vgpu),
        ("confidential computing", support.confidential_compute),
        ("CMP", support.cmp),
        ("WSL", support.wsl),
    ];
    let failing: Vec<String> = items
        .iter()
        .filter(|(_, level)| *level != l::CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
        .map(|(what, level)| format!("{what}: {}", level_name(*level)))
        .collect();
    let vgpu_disabled = support.vgpu == l::CUPTI_PROFILER_CONFIGURATION_DISABLED;
    Some(Error::Cupti {
        call: "cuptiProfilerDeviceSupported",
        code: if vgpu_disabled {
            sys::CUptiResult::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES
        } else {
            sys::CUptiResult::CUPTI_ERROR_NOT_SUPPORTED
        },
        message: format!(
            "GPU {ordinal} cannot run the Range Profiler ({})",
            if failing.is_empty() {
                format!("overall: {}", level_name(support.overall))
            } else {
                failing.join(", ")
            }
        ),
        hint: Some(if vgpu_disabled {
            PERMISSION_FIX
        } else {
            UNSUPPORTED_FIX
        }),
    })
}

/// Why counters were not collected: what the ledger header records, with the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unavailable {
    /// No permission to read the counters (ERR_NVGPUCTRPERM).
    NoPermission,
    /// Another tool holds the counters.
    HardwareBusy,
    /// The GPU or its configuration cannot be profiled.
    UnsupportedDevice,
    /// A requested metric does not exist on this GPU.
    UnknownMetric,
    /// CUPTI or the CUDA driver is missing or of the wrong version.
    NoCupti,
    /// Anything else (the error text says what).
    Other,
}

impl Unavailable {
    /// Classifies an error from the counters level.
    pub fn of(error: &Error) -> Unavailable {
        use sys::CUptiResult as r;
        match error {
            Error::Cupti { code, .. } => match *code {
                r::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
                | r::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => {
                    Unavailable::NoPermission
                }
                r::CUPTI_ERROR_HARDWARE_BUSY => Unavailable::HardwareBusy,
                r::CUPTI_ERROR_INVALID_METRIC_NAME => Unavailable::UnknownMetric,
                c if hint(c) == Some(UNSUPPORTED_FIX) => Unavailable::UnsupportedDevice,
                _ => Unavailable::Other,
            },
            Error::Config(m) if m.starts_with(UNKNOWN_METRIC_PREFIX) => Unavailable::UnknownMetric,
            Error::NoDriver
            | Error::NoDevice(_)
            | Error::CuptiNotFound { .. }
            | Error::CuptiVersionMismatch { .. } => Unavailable::NoCupti,
            _ => Unavailable::Other,
        }
    }

    /// What to do about it.
    pub fn fix(self) -> &'static str {
        match self {
            Unavailable::NoPermission => PERMISSION_FIX,
            Unavailable::HardwareBusy => BUSY_FIX,
            Unavailable::UnsupportedDevice => UNSUPPORTED_FIX,
            Unavailable::UnknownMetric => METRIC_NAME_FIX,
            Unavailable::NoCupti => {
                "install a CUDA 13.0 CUPTI and an NVIDIA driver (see the CUPTI loading error)"
            }
            Unavailable::Other => "see the error message",
        }
    }
}
