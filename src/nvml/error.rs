//! Errors of the NVML layer, each saying what is missing and what still works.

use std::ffi::OsStr;
use std::time::Duration;

use nvml_wrapper::error::NvmlError as WrapperError;

use super::config::SAMPLER_THREAD_NAME;

/// Errors of the NVML layer.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// NVML cannot be used at all (no library, driver not loaded, no permission, ...).
    #[error(
        "NVML is not available: {reason}. Clocks, power, temperature and energy will not be \
         sampled and the per-GPU NVML items of the environment record will be missing; \
         everything else keeps working"
    )]
    Unavailable {
        /// What is missing, in words.
        reason: String,
    },
    /// A call about one device failed.
    #[error("NVML device {index}: {what}: {detail}")]
    Device {
        /// NVML device index.
        index: u32,
        /// What was being read.
        what: &'static str,
        /// The error NVML reported.
        detail: String,
    },
    /// The sampler configuration cannot work (zero period, zero capacity, no device, ...).
    #[error("invalid NVML sampler configuration: {0}")]
    Config(String),
    /// The sampler thread could not be started.
    #[error("could not start the {SAMPLER_THREAD_NAME} thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The sampler thread did not finish within the timeout; it was left detached.
    #[error(
        "the {SAMPLER_THREAD_NAME} thread did not stop within {0:?}; it was left running detached"
    )]
    StopTimedOut(Duration),
    /// The sampler thread panicked (a bug, or a panicking [`NvmlSource`](super::NvmlSource)).
    #[error("the {SAMPLER_THREAD_NAME} thread panicked; samples taken before the panic are kept")]
    Panicked,
}

impl NvmlError {
    /// Maps an initialization failure of nvml-wrapper to [`NvmlError::Unavailable`] with a reason
    /// that names what is missing.
    pub(super) fn unavailable(error: &WrapperError, lib_path: Option<&OsStr>) -> Self {
        let lib = lib_path
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "libnvidia-ml.so.1".to_owned());
        let reason = match error {
            WrapperError::LibloadingError(e) => format!(
                "the NVML library {lib} could not be loaded ({e}); it ships with the NVIDIA \
                 driver, so either no driver is installed or its library directory is not on \
                 the loader path (LD_LIBRARY_PATH)"
            ),
            WrapperError::LibraryNotFound => format!("the NVML library {lib} was not found"),
            WrapperError::FailedToLoadSymbol(s) => format!(
                "the NVML library {lib} lacks the symbol {s} (a driver too old for nvml-wrapper \
                 0.13)"
            ),
            WrapperError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
            WrapperError::NoPermission => "permission denied while initializing NVML (check the \
                 access rights on /dev/nvidia* or the container's device list)"
                .to_owned(),
            WrapperError::LibRmVersionMismatch => "the NVML library does not match the loaded \
                 kernel driver (driver updated without a reboot?)"
                .to_owned(),
            other => format!("NVML initialization failed: {other}"),
        };
        NvmlError::Unavailable { reason }
    }

    pub(super) fn device(index: u32, what: &'static str, error: &WrapperError) -> Self {
        NvmlError::Device {
            index,
            what,
            detail: error.to_string(),
        }
    }
}
