//! Why counters cannot be collected: a device the Range Profiler does not support, and the
//! classification the profiler writes into the ledger header (the timeline level goes on
//! without counters). CUPTI's result codes and their fixes are `crate::cupti::result`'s.

use cupti_sys as sys;

use crate::cupti::range_profiler::DeviceSupport;
use crate::cupti::result::{fix, BUSY_FIX, METRIC_NAME_FIX, PERMISSION_FIX, UNSUPPORTED_FIX};
use crate::error::Error;
use crate::ledger::counters::Unavailable;

/// How the message of a rejected metric list starts (an [`Error::Config`]).
pub const UNKNOWN_METRIC_PREFIX: &str = "unknown metric";

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

/// Classifies an error from the counters level.
pub fn unavailable_of(error: &Error) -> Unavailable {
    use sys::CUptiResult as r;
    match error {
        Error::Cupti { code, .. } => match *code {
            r::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
            | r::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => {
                Unavailable::NoPermission
            }
            r::CUPTI_ERROR_HARDWARE_BUSY => Unavailable::HardwareBusy,
            r::CUPTI_ERROR_INVALID_METRIC_NAME => Unavailable::UnknownMetric,
            c if fix(c) == Some(UNSUPPORTED_FIX) => Unavailable::UnsupportedDevice,
            _ => Unavailable::Other,
        },
        Error::Config(m) if m.starts_with(UNKNOWN_METRIC_PREFIX) => Unavailable::UnknownMetric,
        Error::NoDriver
        | Error::NoDevice(_)
        | Error::CuptiNotFound { .. }
        | Error::CuptiVersionMismatch { .. }
        | Error::CuptiPathUnusable { .. }
        | Error::CuptiNeedsNewerDriver { .. } => Unavailable::NoCupti,
        Error::CuptiLacks { .. } => Unavailable::UnsupportedRelease,
        _ => Unavailable::Other,
    }
}

/// What to do about it.
pub fn unavailable_fix(unavailable: Unavailable) -> &'static str {
    match unavailable {
        Unavailable::NoPermission => PERMISSION_FIX,
        Unavailable::HardwareBusy => BUSY_FIX,
        Unavailable::UnsupportedDevice => UNSUPPORTED_FIX,
        Unavailable::UnknownMetric => METRIC_NAME_FIX,
        Unavailable::NoCupti => {
            "install a CUPTI of CUDA 12.6 to 13.5 and an NVIDIA driver that serves it (see \
             the CUPTI loading error)"
        }
        Unavailable::UnsupportedRelease => {
            "see the error: it names what the loaded CUPTI release lacks and what to do"
        }
        Unavailable::Other => "see the error message",
    }
}

#[cfg(test)]
mod tests {
    //! CUPTI errors of the counters level map to messages that name the fix, and to the class
    //! the ledger header records.

    use super::*;
    use crate::cupti::result::{error, fix};
    use cupti_sys::CUptiResult as r;

    #[test]
    fn no_permission_names_err_nvgpuctrperm_and_the_driver_setting() {
        let e = error(
            "cuptiRangeProfilerEnable",
            r::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
            "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES".into(),
        );
        let msg = e.to_string();
        println!("{msg}");
        assert!(msg.contains("cuptiRangeProfilerEnable"), "{msg}");
        assert!(msg.contains("ERR_NVGPUCTRPERM"), "{msg}");
        assert!(
            msg.contains("NVreg_RestrictProfilingToAdminUsers=0"),
            "{msg}"
        );
        assert!(msg.contains("Level::Timeline"), "{msg}");
        assert_eq!(unavailable_of(&e), Unavailable::NoPermission);
        assert_eq!(
            unavailable_of(&error(
                "x",
                r::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES,
                String::new()
            )),
            Unavailable::NoPermission
        );
    }

    #[test]
    fn counters_held_by_another_tool() {
        let e = error(
            "cuptiRangeProfilerStart",
            r::CUPTI_ERROR_HARDWARE_BUSY,
            "busy".into(),
        );
        let msg = e.to_string();
        assert!(msg.contains("Nsight Compute"), "{msg}");
        assert!(msg.contains("dcgmi profile --pause"), "{msg}");
        assert_eq!(unavailable_of(&e), Unavailable::HardwareBusy);
    }

    #[test]
    fn unsupported_devices_and_configurations() {
        for code in [
            r::CUPTI_ERROR_NOT_SUPPORTED,
            r::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED,
            r::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED,
            r::CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED,
            r::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED,
            r::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED,
            r::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED,
            r::CUPTI_ERROR_INVALID_CHIP_NAME,
        ] {
            let e = error("cuptiProfilerHostInitialize", code, String::new());
            assert_eq!(
                unavailable_of(&e),
                Unavailable::UnsupportedDevice,
                "code {code}"
            );
            assert!(e.to_string().contains("compute capability 7.0"));
        }
    }

    #[test]
    fn a_second_subscriber_is_cupti_busy_and_unknown_codes_have_no_hint() {
        let e = error(
            "cuptiSubscribe",
            r::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
            String::new(),
        );
        assert!(matches!(e, Error::CuptiBusy(_)));
        assert_eq!(fix(r::CUPTI_ERROR_UNKNOWN), None);
        let e = error("x", r::CUPTI_ERROR_UNKNOWN, "unknown".into());
        assert_eq!(unavailable_of(&e), Unavailable::Other);
        assert!(fix(r::CUPTI_ERROR_INVALID_METRIC_NAME).is_some());
    }

    #[test]
    fn other_errors_classify() {
        assert_eq!(unavailable_of(&Error::NoDriver), Unavailable::NoCupti);
        assert_eq!(
            unavailable_of(&Error::CuptiNotFound { tried: vec![] }),
            Unavailable::NoCupti
        );
        assert_eq!(
            unavailable_of(&Error::Config("something else".into())),
            Unavailable::Other
        );
        for u in [
            Unavailable::NoPermission,
            Unavailable::HardwareBusy,
            Unavailable::UnsupportedDevice,
            Unavailable::UnknownMetric,
            Unavailable::NoCupti,
            Unavailable::Other,
        ] {
            assert!(!unavailable_fix(u).is_empty());
            let json = serde_json::to_string(&u).unwrap();
            assert_eq!(serde_json::from_str::<Unavailable>(&json).unwrap(), u);
        }
        assert_eq!(
            serde_json::to_string(&Unavailable::NoPermission).unwrap(),
            r#""no_permission""#
        );
    }

    const SUPPORTED: u32 = 3;
    const DISABLED: u32 = 2;
    const UNSUPPORTED: u32 = 1;

    fn all_supported() -> DeviceSupport {
        DeviceSupport {
            overall: SUPPORTED,
            architecture: SUPPORTED,
            sli: SUPPORTED,
            vgpu: SUPPORTED,
            confidential_compute: SUPPORTED,
            cmp: SUPPORTED,
            wsl: SUPPORTED,
        }
    }

    #[test]
    fn device_support_names_each_failing_item() {
        assert!(support_error(0, &all_supported()).is_none());
        let old = DeviceSupport {
            overall: UNSUPPORTED,
            architecture: UNSUPPORTED,
            ..all_supported()
        };
        let e = support_error(1, &old).unwrap();
        let msg = e.to_string();
        println!("{msg}");
        assert!(msg.contains("GPU 1"), "{msg}");
        assert!(
            msg.contains("architecture (compute capability 7.0+): unsupported"),
            "{msg}"
        );
        assert!(!msg.contains("SLI:"), "{msg}");
        assert_eq!(unavailable_of(&e), Unavailable::UnsupportedDevice);

        let vgpu = DeviceSupport {
            overall: UNSUPPORTED,
            vgpu: DISABLED,
            ..all_supported()
        };
        let e = support_error(0, &vgpu).unwrap();
        assert!(e.to_string().contains("vGPU: disabled"));
        assert_eq!(unavailable_of(&e), Unavailable::NoPermission);
    }
}
