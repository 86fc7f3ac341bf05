//! The crate's one error type. Every failure that can reach a user names its cause and its fix.

use std::path::PathBuf;

/// Result alias used throughout gpu-ledger.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gpu-ledger.
#[derive(Debug, thiserror::Error)]
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
        "CUPTI (libcupti.so.13) not found. Tried:\n{}\nFix: set GPU_LEDGER_CUPTI_PATH to the \
         libcupti.so.13 file or its directory, set CUDA_HOME to a CUDA 13.0 toolkit, or \
         `pip install nvidia-cuda-cupti==13.0.85` for the python3 on PATH",
        format_tried(.tried)
    )]
    CuptiNotFound {
        /// Every place that was tried, with why it failed.
        tried: Vec<(String, String)>,
    },

    /// A libcupti was found but its API version is not the one the bindings were made for.
    #[error(
        "CUPTI at {path} reports API version {found}, but gpu-ledger's bindings are for API \
         version {expected} (CUDA 13.0): activity record layouts differ between versions, so it \
         is refused. Point GPU_LEDGER_CUPTI_PATH at the libcupti.so.13 of a CUDA 13.0 toolkit, \
         or `pip install nvidia-cuda-cupti==13.0.85`"
    )]
    CuptiVersionMismatch {
        /// The library that was refused.
        path: PathBuf,
        /// Version it reported.
        found: u32,
        /// Version the bindings were generated from.
        expected: u32,
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
    #[error("{}{}: {message}", path.display(), line_suffix(*line))]
    LedgerRead {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0 when the file itself could not be opened).
        line: usize,
        /// What was wrong and what was expected.
        message: String,
    },

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

/// `:N` for a line number; nothing for 0 (the file itself could not be opened).
fn line_suffix(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}")
    }
}

fn hint_suffix(hint: &Option<&'static str>) -> String {
    match hint {
        Some(h) => format!(". Fix: {h}"),
        None => String::new(),
    }
}
