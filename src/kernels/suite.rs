//! The bundled kernel suite: vector add, transpose, reduction, GEMM, softmax, fused attention and a
//! register-spilling kernel, each of a known character (bandwidth-bound, bank-conflicted,
//! tail-limited, tensor-core, fusion, local memory), with its launch configuration, its analytic
//! bytes and FLOPs as a function of its shape, a CPU reference and a GPU check against it. They are
//! the ground truth the profiler's numbers are checked against.
//!
//! Two layers per workload:
//!
//! - a **spec** (`VectorAddSpec`, `GemmSpec`, ...): plain data implementing [`Workload`] — the
//!   kernels it launches with their grid, block and dynamic shared memory exactly as CUPTI will
//!   record them ([`Launch`]), its analytic [`Work`], its padded shape ([`Padding`]) and its
//!   tolerance. No GPU needed: the profiler's analysis and the CPU tests use it as is;
//! - a **GPU instance** (`VectorAddGpu`, `GemmGpu`, ...) implementing [`GpuWorkload`]: compiled
//!   kernels (NVRTC, through [`super::compile`]), device buffers filled from a seeded [`Rng`],
//!   `poison` (outputs set to NaN), `run` (enqueues [`Workload::launches`] in order) and `verify`
//!   (the relative L2 error ‖out − ref‖ / ‖ref‖ against a float64 CPU reference).
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use gpu_ledger::kernels::suite::{vadd::{VaddKernels, VaddVariant, VectorAddGpu, VectorAddSpec},
//!     GpuWorkload, Workload};
//!
//! let ctx = CudaContext::new(0)?;
//! let kernels = VaddKernels::load(&ctx)?;
//! let spec = VectorAddSpec::new(1 << 24, VaddVariant::Vec4);
//! println!("{}: {} bytes, {} FLOPs", spec.name(), spec.work().bytes, spec.work().flops);
//! let mut w = VectorAddGpu::new(&ctx.default_stream(), &kernels, spec, 7)?;
//! w.poison()?;
//! w.run()?;
//! let v = w.verify()?;
//! assert!(v.passed(), "{v}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Library calls (cuBLAS) have no launch list: their kernels and grids are chosen at run time
//! and only the ledger knows them; their [`Workload::launches`] is empty and
//! [`Workload::work`] states the work.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtrMut};

use super::{compile, Work};
use crate::ledger::schema::{IterationRow, KernelGroup};
use gpu_ledger_tools::analysis::rng::SplitMix64;

/// The part of a [`GpuWorkload`] impl that every GPU instance writes the same way: `spec` and
/// `stream` return the fields of those names, and `poison` fills the listed output buffers.
macro_rules! spec_stream_and_poison {
    ($($output:ident),+ $(,)?) => {
        fn spec(&self) -> &dyn $crate::kernels::suite::Workload {
            &self.spec
        }

        fn stream(&self) -> &::std::sync::Arc<::cudarc::driver::CudaStream> {
            &self.stream
        }

        fn poison(&mut self) -> $crate::kernels::suite::SuiteResult<()> {
            $($crate::kernels::suite::poison(&self.stream, &mut self.$output)?;)+
            Ok(())
        }
    };
}

pub mod attention;
pub mod experiment;
pub mod gemm;
pub mod reduce;
pub mod softmax;
pub mod spill;
pub mod stalls;
pub mod transpose;
pub mod vadd;

/// Why a suite operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuiteError {
    /// Compiling or loading a kernel, or another gpu-ledger failure.
    #[error(transparent)]
    Ledger(#[from] crate::Error),
    /// A CUDA driver call (allocation, copy, launch) failed.
    #[error("CUDA driver call failed: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// A cuBLAS call failed.
    #[error("cuBLAS call failed: {0:?}")]
    Cublas(#[from] cudarc::cublas::result::CublasError),
    /// A library (libcublas) could not be loaded.
    #[error("{0} could not be loaded: install the CUDA 13 toolkit or the matching `nvidia-*` wheel and put it on LD_LIBRARY_PATH")]
    MissingLibrary(&'static str),
    /// A shape the kernels cannot run (too large for 32-bit indices, a row that does not fit on
    /// chip, ...).
    #[error("unsupported shape: {0}")]
    Shape(String),
}

/// Result of suite operations.
pub type SuiteResult<T> = std::result::Result<T, SuiteError>;

/// One kernel launch of a workload, as CUPTI records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Function name (`extern "C"`, so CUPTI reports it unmangled).
    pub kernel: &'static str,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub dynamic_shared_bytes: u32,
    /// Analytic work of this launch.
    pub work: Work,
}

impl Launch {
    /// A launch of `kernel` with a one-dimensional grid and block and no dynamic shared memory.
    pub fn linear(kernel: &'static str, grid: u32, block: u32, work: Work) -> Self {
        Launch {
            kernel,
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            dynamic_shared_bytes: 0,
            work,
        }
    }

    /// The cudarc launch configuration.
    pub fn config(&self) -> cudarc::driver::LaunchConfig {
        cudarc::driver::LaunchConfig {
            grid_dim: (self.grid[0], self.grid[1], self.grid[2]),
            block_dim: (self.block[0], self.block[1], self.block[2]),
            shared_mem_bytes: self.dynamic_shared_bytes,
        }
    }

    /// Blocks in the grid.
    pub fn grid_blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads per block.
    pub fn block_threads(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }

    /// True when the ledger's kernel group has this launch's name and shape.
    pub fn matches(&self, k: &KernelGroup) -> bool {
        k.name == self.kernel
            && k.shape.grid == self.grid
            && k.shape.block == self.block
            && k.shape.dynamic_shared_bytes == self.dynamic_shared_bytes
    }
}

/// Useful against padded problem dimensions of a tiled kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padding {
    /// Dimensions of the problem (`[M, N, K]` for a GEMM).
    pub useful: Vec<u64>,
    /// Dimensions the kernel computes, rounded up to its tiles (`[M', N', K']`).
    pub padded: Vec<u64>,
}

impl Padding {
    /// `∏ useful / ∏ padded` ([`gpu_ledger_tools::analysis::occupancy::padding_efficiency`]).
    pub fn efficiency(&self) -> Option<f64> {
        gpu_ledger_tools::analysis::occupancy::padding_efficiency(&self.useful, &self.padded)
    }
}

/// `x` rounded up to a multiple of `tile`.
pub(crate) fn round_up(x: u64, tile: u64) -> u64 {
    x.div_ceil(tile) * tile
}

/// Sum of works.
pub(crate) fn total_work<'a>(works: impl IntoIterator<Item = &'a Work>) -> Work {
    works
        .into_iter()
        .fold(Work { bytes: 0, flops: 0 }, |acc, w| Work {
            bytes: acc.bytes + w.bytes,
            flops: acc.flops + w.flops,
        })
}

/// A workload as the profiler's analysis sees it: what it launches and what it must do.
pub trait Workload {
    /// Name with shape, e.g. `vadd_vec4 n=16777216`.
    fn name(&self) -> String;
    /// The launches of one run, in order.
    fn launches(&self) -> Vec<Launch>;
    /// Analytic work of one run: the sum over [`Workload::launches`] by default.
    fn work(&self) -> Work {
        total_work(self.launches().iter().map(|l| &l.work))
    }
    /// Distinct kernel names, in launch order.
    fn kernel_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for l in self.launches() {
            if !names.contains(&l.kernel) {
                names.push(l.kernel);
            }
        }
        names
    }
    /// Useful against padded shape, for tiled kernels.
    fn padding(&self) -> Option<Padding> {
        None
    }
    /// Largest relative L2 error ‖out − ref‖ / ‖ref‖ that [`GpuWorkload::verify`] accepts.
    fn tolerance(&self) -> f64;
}

/// A workload with its compiled kernels and device buffers.
pub trait GpuWorkload {
    /// The description.
    fn spec(&self) -> &dyn Workload;
    /// The stream everything is enqueued on.
    fn stream(&self) -> &Arc<CudaStream>;
    /// Sets every output buffer to NaN (all bytes 0xFF), so that an output a kernel did not write
    /// fails verification.
    ///
    /// # Errors
    /// A driver error.
    fn poison(&mut self) -> SuiteResult<()>;
    /// Enqueues one run ([`Workload::launches`], in order) on the stream; does not synchronize.
    ///
    /// # Errors
    /// A launch failure.
    fn run(&mut self) -> SuiteResult<()>;
    /// Enqueues one run like [`run`](Self::run), calling `before(i)` before launch `i` is
    /// enqueued: a caller that wants one counted range (or an L2 flush) per kernel places it
    /// there. A workload of one launch needs nothing more than this default.
    ///
    /// # Errors
    /// A launch failure or `before`'s error; a workload of several launches that does not
    /// implement it.
    fn run_each(&mut self, before: &mut dyn FnMut(usize) -> SuiteResult<()>) -> SuiteResult<()> {
        let launches = self.spec().launches().len();
        if launches != 1 {
            return Err(SuiteError::Shape(format!(
                "{} makes {launches} launches and cannot yet run them one at a time",
                self.spec().name()
            )));
        }
        before(0)?;
        self.run()
    }
    /// Synchronizes, copies the outputs back and compares them with the CPU reference.
    ///
    /// # Errors
    /// A driver error; a wrong result is a [`Verification`] that did not pass, not an error.
    fn verify(&mut self) -> SuiteResult<Verification>;
}

/// The outcome of comparing a GPU output with its CPU reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    /// What was compared.
    pub what: String,
    /// ‖out − ref‖₂ / ‖ref‖₂ (NaN when the output holds a NaN).
    pub rel_err: f64,
    /// Largest accepted `rel_err`.
    pub tolerance: f64,
    /// Values compared.
    pub compared: usize,
}

impl Verification {
    /// Compares `out` with `reference`.
    pub fn compare(
        what: impl Into<String>,
        out: &[f32],
        reference: &[f64],
        tolerance: f64,
    ) -> Self {
        Verification {
            what: what.into(),
            rel_err: rel_l2(out, reference),
            tolerance,
            compared: out.len().min(reference.len()),
        }
    }

    /// True when the error is within tolerance (never for NaN).
    pub fn passed(&self) -> bool {
        self.rel_err <= self.tolerance
    }
}

impl fmt::Display for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: rel L2 error {:.3e} (tolerance {:.1e}, {} values) {}",
            self.what,
            self.rel_err,
            self.tolerance,
            self.compared,
            if self.passed() { "ok" } else { "FAILED" }
        )
    }
}

/// ‖out − ref‖₂ / ‖ref‖₂ in float64; NaN when any output is NaN or the lengths differ; the
/// absolute error when the reference is all zeros.
pub fn rel_l2(out: &[f32], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::NAN;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        let d = f64::from(o) - r;
        diff += d * d;
        norm += r * r;
    }
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// A small seeded generator (the bootstrap's SplitMix64): reproducible inputs without another
/// crate.
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, 1)` with 24 random bits (exact in f32).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Uniform below `bound` (> 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// Sets every byte of `buf` to 0xFF: NaN for f32 and BF16, so an unwritten output cannot pass.
///
/// # Errors
/// The driver's error.
pub fn poison<T>(stream: &Arc<CudaStream>, buf: &mut CudaSlice<T>) -> SuiteResult<()> {
    let bytes = buf.num_bytes();
    let (ptr, _sync) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses the `bytes` bytes of the live allocation `buf`, which is borrowed
    // mutably for the call; the memset is ordered on `stream`, and any byte pattern is a valid
    // f32 / u16 value.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }?;
    Ok(())
}

/// Uploads `host` into a new device buffer.
///
/// # Errors
/// The driver's error.
pub fn upload<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    host: &[T],
) -> SuiteResult<CudaSlice<T>> {
    Ok(stream.clone_htod(host)?)
}

/// Synchronizes `stream` and returns the first `len` values of `buf`.
///
/// # Errors
/// The driver's error.
pub fn download<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &CudaSlice<T>,
    len: usize,
) -> SuiteResult<Vec<T>> {
    let mut v = stream.clone_dtoh(buf)?;
    stream.synchronize()?;
    v.truncate(len);
    Ok(v)
}

/// Loads the functions `names` of `kernels/<module>.cu`, compiled for `ctx`'s device, in the
/// order of `names`.
///
/// # Errors
/// As [`super::compile`], or a missing function.
pub(crate) fn load_functions<const N: usize>(
    ctx: &Arc<CudaContext>,
    module: &str,
    names: [&str; N],
) -> SuiteResult<[CudaFunction; N]> {
    let m = compile(ctx, module)?;
    let functions = names
        .iter()
        .map(|n| m.load_function(n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(functions.try_into().expect("one function loaded per name"))
}

/// BF16 bits of `x` (round to nearest even), as the GPU buffers hold them.
pub fn to_bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// The f32 value of BF16 bits.
pub fn from_bf16_bits(b: u16) -> f32 {
    half::bf16::from_bits(b).to_f32()
}

/// Checks a ledger row against the launches a workload makes `repeats` times: every expected
/// (kernel, grid, block, dynamic shared memory) appears with exactly `repeats ×` its expected
/// count, and no launch of those kernel names has another shape. Other kernels in the row are
/// ignored.
///
/// # Errors
/// Every difference, one per line.
pub fn check_launches(row: &IterationRow, expected: &[Launch], repeats: u64) -> Result<(), String> {
    type Shape = (&'static str, [u32; 3], [u32; 3], u32);
    let mut want: BTreeMap<Shape, u64> = BTreeMap::new();
    for l in expected {
        *want
            .entry((l.kernel, l.grid, l.block, l.dynamic_shared_bytes))
            .or_default() += repeats;
    }
    let mut problems = Vec::new();
    for (&(kernel, grid, block, dynamic), &count) in &want {
        let got: u64 = row
            .kernels
            .iter()
            .filter(|k| {
                k.name == kernel
                    && k.shape.grid == grid
                    && k.shape.block == block
                    && k.shape.dynamic_shared_bytes == dynamic
            })
            .map(|k| k.count)
            .sum();
        if got != count {
            problems.push(format!(
                "{kernel} grid {grid:?} block {block:?} dynamic smem {dynamic}: {got} launches recorded, {count} expected"
            ));
        }
    }
    for k in &row.kernels {
        let known_name = expected.iter().any(|l| l.kernel == k.name);
        let known_shape = expected.iter().any(|l| l.matches(k));
        if known_name && !known_shape {
            problems.push(format!(
                "{} launched with unexpected shape grid {:?} block {:?} dynamic smem {} ({} launches)",
                k.name, k.shape.grid, k.shape.block, k.shape.dynamic_shared_bytes, k.count
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Launches and summed duration (ns) of the kernels named `kernel` in a row.
pub fn kernel_time(row: &IterationRow, kernel: &str) -> (u64, u64) {
    row.kernels
        .iter()
        .filter(|k| k.name == kernel)
        .fold((0, 0), |(c, t), k| (c + k.count, t + k.total_ns))
}

/// Launches and summed duration (ns) of every kernel in a row.
pub fn all_kernel_time(row: &IterationRow) -> (u64, u64) {
    row.kernels
        .iter()
        .fold((0, 0), |(c, t), k| (c + k.count, t + k.total_ns))
}

/// Bytes over nanoseconds, in GB/s (10⁹ bytes per second).
pub fn gb_per_s(bytes: u64, ns: f64) -> f64 {
    if ns > 0.0 {
        bytes as f64 / ns
    } else {
        f64::NAN
    }
}

/// FLOPs over nanoseconds, in TFLOP/s.
pub fn tflop_per_s(flops: u64, ns: f64) -> f64 {
    if ns > 0.0 {
        flops as f64 / ns / 1e3
    } else {
        f64::NAN
    }
}

/// `u64` to `u32`, or a [`SuiteError::Shape`] naming `what`.
pub(crate) fn to_u32(x: u64, what: &str) -> SuiteResult<u32> {
    u32::try_from(x).map_err(|_| SuiteError::Shape(format!("{what} = {x} exceeds 32 bits")))
}

/// The larger of two errors, NaN when either is NaN.
pub(crate) fn worst(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Ceiling division to a grid dimension, at least 1.
pub(crate) fn grid_dim(items: u64, per_block: u64) -> u32 {
    u32::try_from(items.div_ceil(per_block.max(1)).max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_l2_basics() {
        assert_eq!(rel_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(rel_l2(&[f32::NAN], &[1.0]).is_nan());
        assert!(rel_l2(&[1.0], &[1.0, 2.0]).is_nan());
        assert!((rel_l2(&[3.0, 4.0], &[0.0, 0.0]) - 5.0).abs() < 1e-12);
        let v = Verification::compare("x", &[f32::NAN], &[1.0], 1.0);
        assert!(!v.passed());
    }

    #[test]
    fn rng_is_reproducible_and_in_range() {
        let a = Rng::new(3).vec(1000, -1.0, 1.0);
        let b = Rng::new(3).vec(1000, -1.0, 1.0);
        assert_eq!(a, b);
        assert!(a.iter().all(|&x| (-1.0..1.0).contains(&x)));
        assert_ne!(a, Rng::new(4).vec(1000, -1.0, 1.0));
    }
}
