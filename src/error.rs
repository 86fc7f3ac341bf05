//! The crate's one error type. Every failure that can reach a user names its cause and its fix.

use std::path::PathBuf;

/// Result alias used throughout gpu-ledger.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gpu-ledger.
///
/// `Debug` prints what `Display` does, the cause and the fix: Rust prints an error returned from
/// `main` with `Debug` (`Error: no NVIDIA driver: ... Install the NVIDIA driver, ...`), and that is
/// where a new user meets it first. `{:#?}` adds the variant's name.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (libcuda.so.1) could not be loaded: no NVIDIA driver or no GPU.
    #[error(
        "no NVIDIA driver: libcuda.so.1 could not be loaded. Install the NVIDIA driver, or run \
         on a machine with an NVIDIA GPU (inside a container, pass the GPU through, e.g. \
         `--gpus all`)"
    )]
    NoDriver,

    /// The driver loaded but reported no usable device.
    #[error("the CUDA driver reports no usable GPU: {0}")]
    NoDevice(String),

    /// A CUDA driver call failed.
    #[error("CUDA driver call failed: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),

    /// libcupti could not be found or opened.
    #[error(
        "CUPTI (libcupti.so.13 or libcupti.so.12) not found. Tried:\n{}\nFix: set \
         GPU_LEDGER_CUPTI_PATH to a libcupti of CUDA 12.6 to 13.5 (the file or its directory), \
         set CUDA_HOME to such a toolkit, or `pip install nvidia-cuda-cupti` (CUDA 13) or \
         `pip install nvidia-cuda-cupti-cu12` (CUDA 12) for the python3 on PATH",
        format_tried(.tried)
    )]
    CuptiNotFound {
        /// Every place that was tried, with why it failed.
        tried: Vec<(String, String)>,
    },

    /// `GPU_LEDGER_CUPTI_PATH` names a library that cannot be used; no other is tried.
    #[error(
        "GPU_LEDGER_CUPTI_PATH names {path}, which cannot be used: {why}. Fix: point it at the \
         libcupti.so.13 or libcupti.so.12 of CUDA 12.6 to 13.5 (or the directory holding it), \
         or unset it to let gpu-ledger search"
    )]
    CuptiPathUnusable {
        /// The path the variable holds.
        path: PathBuf,
        /// Why each file it stands for could not be used.
        why: String,
    },

    /// A libcupti was found but its release is outside the ones gpu-ledger can read.
    #[error(
        "CUPTI at {path} reports API version {found}: {reason}. gpu-ledger reads the activity \
         records of {supported}, whose layouts its bindings hold. Fix: point \
         GPU_LEDGER_CUPTI_PATH at a libcupti of one of those releases (`pip install \
         nvidia-cuda-cupti==13.0.85`, or `nvidia-cuda-cupti-cu12==12.9.79` for a CUDA 12 \
         driver)"
    )]
    CuptiVersionMismatch {
        /// The library that was refused.
        path: PathBuf,
        /// Version it reported.
        found: u32,
        /// Why it is refused (older than the oldest supported release, or newer than the
        /// bindings).
        reason: String,
        /// The releases supported.
        supported: String,
    },

    /// The CUPTI found needs a newer CUDA driver than the one installed.
    #[error(
        "CUPTI {release} at {path} needs a CUDA {major} driver, but the driver supports CUDA \
         {driver}. Fix: use a CUPTI of the driver's CUDA major release (GPU_LEDGER_CUPTI_PATH; \
         `pip install nvidia-cuda-cupti-cu12` for CUDA 12), or update the NVIDIA driver"
    )]
    CuptiNeedsNewerDriver {
        /// The CUPTI release (`13.4`).
        release: String,
        /// Where it was loaded from.
        path: PathBuf,
        /// The CUDA major release the CUPTI belongs to.
        major: u32,
        /// The CUDA version the driver supports (`12.4`).
        driver: String,
    },

    /// The loaded CUPTI release lacks a counters feature that was asked for.
    #[error("counters: CUPTI {release} at {} {what}, so {feature} cannot be collected; {fix}", path.display())]
    CuptiLacks {
        /// The CUPTI release (`12.9`).
        release: String,
        /// Where it was loaded from.
        path: PathBuf,
        /// The feature asked for (`auto ranges`).
        feature: String,
        /// What the release does instead.
        what: &'static str,
        /// What to do.
        fix: &'static str,
    },

    /// A CUPTI call failed.
    #[error("CUPTI call {call} failed: {code} ({message}){}", hint_suffix(.hint))]
    Cupti {
        /// The CUPTI function.
        call: &'static str,
        /// The CUptiResult value.
        code: u32,
        /// CUPTI's own text for the code.
        message: String,
        /// What to do about it, when known.
        hint: Option<&'static str>,
    },

    /// Another tool already holds CUPTI's one subscriber slot.
    #[error(
        "another CUPTI client is already attached to this process ({0}). Only one CUPTI \
         subscriber can exist per process: run without Nsight Systems / Nsight Compute / \
         torch.profiler / another gpu-ledger Profiler, or use Level::Scopes, which needs no CUPTI"
    )]
    CuptiBusy(String),

    /// A profiler is already running in this process.
    #[error(
        "a gpu-ledger Profiler is already running in this process; call finish() on it before \
         starting another"
    )]
    AlreadyRunning,

    /// The ledger file could not be created or written.
    #[error("cannot write the ledger at {path}: {source}. Choose a writable path with ProfilerBuilder::ledger_path (Config::ledger_path) or GPU_LEDGER_PATH, and free disk space")]
    LedgerWrite {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A ledger file could not be read or parsed.
    #[error(transparent)]
    Ledger(#[from] crate::ledger::Error),

    /// NVRTC (the CUDA run-time compiler) is missing or failed to compile a bundled kernel.
    #[error("compiling kernel {kernel} with NVRTC failed: {message}")]
    Nvrtc {
        /// Bundled kernel name.
        kernel: String,
        /// The compiler's log or the loading error.
        message: String,
    },

    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A background thread could not be started or did not stop in time.
    #[error("background thread {0}")]
    Thread(String),
}

fn format_tried(tried: &[(String, String)]) -> String {
    if tried.is_empty() {
        return "  (nothing)".to_string();
    }
    tried
        .iter()
        .map(|(path, why)| format!("  {path}: {why}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn hint_suffix(hint: &Option<&'static str>) -> String {
    match hint {
        Some(h) => format!(". Fix: {h}"),
        None => String::new(),
    }
}

impl Error {
    /// A copy of an error the CUPTI loader keeps for the rest of the process (each later caller
    /// gets the same one); other errors, which the loader does not make, as their message.
    pub(crate) fn clone_loader_error(&self) -> Error {
        match self {
            Error::CuptiNotFound { tried } => Error::CuptiNotFound {
                tried: tried.clone(),
            },
            Error::CuptiPathUnusable { path, why } => Error::CuptiPathUnusable {
                path: path.clone(),
                why: why.clone(),
            },
            Error::CuptiVersionMismatch {
                path,
                found,
                reason,
                supported,
            } => Error::CuptiVersionMismatch {
                path: path.clone(),
                found: *found,
                reason: reason.clone(),
                supported: supported.clone(),
            },
            other => Error::Config(other.to_string()),
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{}: ", self.variant())?;
        }
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// The variant's name, for `{:#?}`.
    fn variant(&self) -> &'static str {
        match self {
            Error::NoDriver => "NoDriver",
            Error::NoDevice(_) => "NoDevice",
            Error::Cuda(_) => "Cuda",
            Error::CuptiNotFound { .. } => "CuptiNotFound",
            Error::CuptiPathUnusable { .. } => "CuptiPathUnusable",
            Error::CuptiVersionMismatch { .. } => "CuptiVersionMismatch",
            Error::CuptiNeedsNewerDriver { .. } => "CuptiNeedsNewerDriver",
            Error::CuptiLacks { .. } => "CuptiLacks",
            Error::Cupti { .. } => "Cupti",
            Error::CuptiBusy(_) => "CuptiBusy",
            Error::AlreadyRunning => "AlreadyRunning",
            Error::LedgerWrite { .. } => "LedgerWrite",
            Error::Ledger(_) => "Ledger",
            Error::Nvrtc { .. } => "Nvrtc",
            Error::Config(_) => "Config",
            Error::Thread(_) => "Thread",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn debug_says_the_cause_and_the_fix_as_main_prints_it() {
        let shown = format!("Error: {:?}", Error::NoDriver);
        assert!(shown.starts_with("Error: no NVIDIA driver: libcuda.so.1 could not be loaded."));
        assert!(shown.contains("Install the NVIDIA driver"), "{shown}");
        assert!(!shown.contains('\n'), "one line: {shown}");
        // A configuration error is its message, not a quoted string.
        let shown = format!("{:?}", Error::Config("level \"fast\" is no level".into()));
        assert_eq!(shown, "invalid configuration: level \"fast\" is no level");
        assert_eq!(
            format!("{:#?}", Error::AlreadyRunning),
            format!("AlreadyRunning: {}", Error::AlreadyRunning)
        );
    }
}
