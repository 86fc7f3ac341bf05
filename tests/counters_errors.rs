//! CPU tests: CUPTI errors of the counters level map to messages that name the fix, and to the
//! class the ledger header records.

use cupti_sys::CUptiResult as r;
use gpu_ledger::counters::error::{counter_error, hint, support_error};
use gpu_ledger::counters::{DeviceSupport, Unavailable};
use gpu_ledger::Error;

#[test]
fn no_permission_names_err_nvgpuctrperm_and_the_driver_setting() {
    let e = counter_error(
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
    assert_eq!(Unavailable::of(&e), Unavailable::NoPermission);
    assert_eq!(
        Unavailable::of(&counter_error(
            "x",
            r::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES,
            String::new()
        )),
        Unavailable::NoPermission
    );
}

#[test]
fn counters_held_by_another_tool() {
    let e = counter_error(
        "cuptiRangeProfilerStart",
        r::CUPTI_ERROR_HARDWARE_BUSY,
        "busy".into(),
    );
    let msg = e.to_string();
    assert!(msg.contains("Nsight Compute"), "{msg}");
    assert!(msg.contains("dcgmi profile --pause"), "{msg}");
    assert_eq!(Unavailable::of(&e), Unavailable::HardwareBusy);
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
        let e = counter_error("cuptiProfilerHostInitialize", code, String::new());
        assert_eq!(
            Unavailable::of(&e),
            Unavailable::UnsupportedDevice,
            "code {code}"
        );
        assert!(e.to_string().contains("compute capability 7.0"));
    }
}

#[test]
fn a_second_subscriber_is_cupti_busy_and_unknown_codes_have_no_hint() {
    let e = counter_error(
        "cuptiSubscribe",
        r::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
        String::new(),
    );
    assert!(matches!(e, Error::CuptiBusy(_)));
    assert_eq!(hint(r::CUPTI_ERROR_UNKNOWN), None);
    let e = counter_error("x", r::CUPTI_ERROR_UNKNOWN, "unknown".into());
    assert_eq!(Unavailable::of(&e), Unavailable::Other);
    assert!(hint(r::CUPTI_ERROR_INVALID_METRIC_NAME).is_some());
}

#[test]
fn other_errors_classify() {
    assert_eq!(Unavailable::of(&Error::NoDriver), Unavailable::NoCupti);
    assert_eq!(
        Unavailable::of(&Error::CuptiNotFound { tried: vec![] }),
        Unavailable::NoCupti
    );
    assert_eq!(
        Unavailable::of(&Error::Config("something else".into())),
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
        assert!(!u.fix().is_empty());
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
    assert_eq!(Unavailable::of(&e), Unavailable::UnsupportedDevice);

    let vgpu = DeviceSupport {
        overall: UNSUPPORTED,
        vgpu: DISABLED,
        ..all_supported()
    };
    let e = support_error(0, &vgpu).unwrap();
    assert!(e.to_string().contains("vGPU: disabled"));
    assert_eq!(Unavailable::of(&e), Unavailable::NoPermission);
}
