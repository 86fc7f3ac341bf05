//! The CUDA driver's facts: is there one, which version, and what GPUs it shows. cudarc panics
//! when libcuda is missing, so every path here checks for the library first.

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::ledger::GpuRecord;

/// True when libcuda can be loaded.
pub fn driver_present() -> bool {
    // cudarc's own check exists only in its dynamic-loading mode, which is the application's to
    // choose; these names are among those cudarc's loading tries, so `true` means it finds one too.
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    ["cuda", "nvcuda"].iter().any(|name| {
        [
            format!("{DLL_PREFIX}{name}{DLL_SUFFIX}"),
            format!("{DLL_PREFIX}{name}{DLL_SUFFIX}.1"),
        ]
        .iter()
        // SAFETY: only attempts to dlopen the driver library by its usual names, as cudarc does.
        .any(|file| unsafe { libloading::Library::new(file) }.is_ok())
    })
}

/// Checks that the CUDA driver loads, initialises and shows at least one GPU.
///
/// # Errors
/// [`Error::NoDriver`] or [`Error::NoDevice`].
pub fn require_driver() -> Result<()> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    cu::init().map_err(|e| Error::NoDevice(format!("cuInit failed: {e}")))?;
    match cu::device::get_count() {
        Ok(0) => Err(Error::NoDevice(
            "0 devices (check CUDA_VISIBLE_DEVICES)".into(),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(Error::NoDevice(format!("cuDeviceGetCount failed: {e}"))),
    }
}

/// One GPU's basic facts from the driver.
pub(crate) fn gpu_record(ordinal: u32) -> Result<GpuRecord> {
    let dev = cu::device::get(ordinal as i32)?;
    let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        Ok(unsafe { cu::device::get_attribute(dev, a) }? as u32)
    };
    use sys::CUdevice_attribute as A;
    Ok(GpuRecord {
        ordinal,
        name: cu::device::get_name(dev)?,
        compute_capability: [
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ],
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        // SAFETY: as above.
        total_memory_bytes: unsafe { cu::device::total_mem(dev) }? as u64,
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .ok()
            .map(u64::from),
        uuid: cu::device::get_uuid(dev)
            .ok()
            .map(|u| format_uuid(&u.bytes)),
        pci_bus_id: pci_bus_id(dev),
        ..GpuRecord::default()
    })
}

/// A CUDA UUID as NVML writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub(crate) fn format_uuid(bytes: &[std::os::raw::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

fn pci_bus_id(dev: sys::CUdevice) -> Option<String> {
    let mut buf = [0 as std::os::raw::c_char; 32];
    // SAFETY: the buffer is writable for its full length, which is passed; dev is valid.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }
        .result()
        .ok()?;
    // SAFETY: the driver wrote a NUL-terminated string into the buffer.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// `cuDriverGetVersion` (13000 for CUDA 13.0).
///
/// # Errors
/// [`Error::NoDriver`] without a driver library; a driver error.
pub fn driver_version() -> Result<u32> {
    // cudarc's dynamic loading panics on a machine without libcuda.
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    let mut v = 0i32;
    // SAFETY: out-pointer valid; the driver library is loaded (checked above).
    unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
    Ok(v as u32)
}
