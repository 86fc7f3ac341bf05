//! Bundled CUDA kernels: compiled at run time with NVRTC for the device's own architecture (with
//! line info), with the analytic byte and FLOP counts the profiler's numbers are checked against.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};

use crate::error::{Error, Result};

pub mod suite;

include!(concat!(env!("OUT_DIR"), "/kernel_registry.rs"));

/// The source of a bundled kernel file (`kernels/<name>.cu`).
pub fn source(name: &str) -> Option<&'static str> {
    KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Each bundled kernel file's text under the name its cubins' line tables give it
/// (`stalls.cu`), for source lines of kernels compiled from embedded text.
pub fn source_files() -> impl Iterator<Item = (String, &'static str)> {
    KERNEL_SOURCES
        .iter()
        .map(|(n, text)| (format!("{n}.cu"), *text))
}

/// Names of all bundled kernel files.
pub fn names() -> impl Iterator<Item = &'static str> {
    KERNEL_SOURCES.iter().map(|(n, _)| *n)
}

/// True when libnvrtc can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only attempts to dlopen libnvrtc by its usual names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles `kernels/<name>.cu` for `ctx`'s device (`sm_XY` of its compute capability, with
/// `-lineinfo`) to a cubin and loads it.
///
/// # Errors
/// [`Error::Nvrtc`] with the compiler log, or the driver's load error.
pub fn compile(ctx: &Arc<CudaContext>, name: &str) -> Result<Arc<CudaModule>> {
    compile_cubin(ctx, name).map(|(m, _)| m)
}

/// [`compile`], returning the cubin too: its line table maps sampled PCs to source lines
/// (`gpu_ledger::pcsampling`). Compiled to a cubin rather than PTX because the driver's PTX
/// JIT drops the line information unless asked for it.
///
/// # Errors
/// As [`compile`].
pub fn compile_cubin(ctx: &Arc<CudaContext>, name: &str) -> Result<(Arc<CudaModule>, Arc<[u8]>)> {
    let src = source(name).ok_or_else(|| Error::Nvrtc {
        kernel: name.into(),
        message: format!(
            "no kernels/{name}.cu is bundled (have: {})",
            names().collect::<Vec<_>>().join(", ")
        ),
    })?;
    if !nvrtc_present() {
        return Err(Error::Nvrtc {
            kernel: name.into(),
            message:
                "libnvrtc not found: install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`"
                    .into(),
        });
    }
    let (major, minor) = ctx.compute_capability()?;
    let options = [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "-lineinfo".into(),
    ];
    let file = format!("{name}.cu");
    let cubin: Arc<[u8]> = nvrtc_cubin(src, &file, &options)
        .map_err(|message| Error::Nvrtc {
            kernel: name.into(),
            message,
        })?
        .into();
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec()))?;
    let mut compiled = COMPILED.lock();
    if !compiled
        .iter()
        .any(|(n, c)| n == name && c[..] == cubin[..])
    {
        compiled.push((name.to_string(), cubin.clone()));
    }
    drop(compiled);
    Ok((module, cubin))
}

/// Every distinct cubin [`compile_cubin`] built in this process, with its kernel file's name.
pub fn compiled_cubins() -> Vec<(String, Arc<[u8]>)> {
    COMPILED.lock().clone()
}

static COMPILED: parking_lot::Mutex<Vec<(String, Arc<[u8]>)>> = parking_lot::Mutex::new(Vec::new());

/// NVRTC to a cubin; the error is the compiler's log. cudarc's safe API returns PTX only, so
/// this goes through its result layer (create, compile, log, destroy) and, for the cubin, which
/// that layer does not read, through its `sys` layer.
fn nvrtc_cubin(src: &str, file: &str, options: &[String]) -> std::result::Result<Vec<u8>, String> {
    use std::ffi::CString;
    let src = CString::new(src).map_err(|e| e.to_string())?;
    let file = CString::new(file).map_err(|e| e.to_string())?;
    // Borrows `src` and `file`, which NVRTC may point into, so it is destroyed before them.
    let prog = Program::create(&src, &file)?;
    prog.compile(options)?;
    prog.cubin()
}

/// An NVRTC program, destroyed when it drops: the handle is valid for as long as this lives,
/// and the source and name it may point into (`'a`) outlive it.
struct Program<'a>(cudarc::nvrtc::sys::nvrtcProgram, PhantomData<&'a CStr>);

impl<'a> Program<'a> {
    /// A program of `src`, named `file` in the compiler's messages and the line table.
    fn create(src: &'a CStr, file: &'a CStr) -> std::result::Result<Self, String> {
        cudarc::nvrtc::result::create_program(src, Some(file))
            .map(|prog| Program(prog, PhantomData))
            .map_err(|e| format!("nvrtcCreateProgram: {:?}", e.0))
    }

    /// Compiles with `options`; the error is the result code and the compiler's log.
    fn compile(&self, options: &[String]) -> std::result::Result<(), String> {
        use cudarc::nvrtc::result;
        // SAFETY: `self.0` was created by `create_program` and is destroyed only on drop.
        let Err(e) = (unsafe { result::compile_program(self.0, options) }) else {
            return Ok(());
        };
        // SAFETY: as above. A log that cannot be read is an empty one.
        let log = unsafe { result::get_program_log(self.0) }.unwrap_or_default();
        // NVRTC's log is C chars (`i8` or `u8` by platform), NUL-terminated.
        let log: Vec<u8> = log.iter().map(|c| c.to_ne_bytes()[0]).collect();
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        Err(format!(
            "{:?}: {}",
            e.0,
            String::from_utf8_lossy(&log[..end]).trim_end()
        ))
    }

    /// The cubin of the compiled program. cudarc's result layer has no call for it (it reads
    /// PTX), so this calls `nvrtcGetCUBINSize` and `nvrtcGetCUBIN` of its `sys` layer.
    fn cubin(&self) -> std::result::Result<Vec<u8>, String> {
        use cudarc::nvrtc::sys;
        let mut size = 0usize;
        // SAFETY: `self.0` is a live program (see `compile`), compiled for a real architecture
        // (`sm_XY`), so it holds a cubin; `size` is a valid place for its size.
        let rc = unsafe { sys::nvrtcGetCUBINSize(self.0, &mut size) };
        if rc != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
            return Err(format!("nvrtcGetCUBINSize: {rc:?}"));
        }
        let mut cubin = vec![0u8; size];
        // SAFETY: as above; the buffer holds the `size` bytes NVRTC reported.
        let rc = unsafe { sys::nvrtcGetCUBIN(self.0, cubin.as_mut_ptr().cast()) };
        if rc == sys::nvrtcResult::NVRTC_SUCCESS {
            Ok(cubin)
        } else {
            Err(format!("nvrtcGetCUBIN: {rc:?}"))
        }
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.0` was created by `create_program` and this is its one destruction. A
        // failure to destroy only leaks the program: the compilation's outcome stands.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// Analytic work of one launch: the fewest bytes it must move through device memory and the
/// floating-point operations it performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Bytes read from and written to device memory.
    pub bytes: u64,
    /// Floating-point operations.
    pub flops: u64,
}

/// `c = a + b` over `n` floats, one thread per element: the `vector_add` kernel of
/// `kernels/vadd.cu`, the scalar variant of the suite's [`suite::vadd`].
pub struct VectorAdd {
    function: CudaFunction,
    /// Threads per block.
    pub block: u32,
}

impl VectorAdd {
    /// The kernel file.
    pub const MODULE: &'static str = "vadd";
    /// The kernel's name, as the ledger records it.
    pub const KERNEL: &'static str = "vector_add";

    /// Compiles and loads the kernel for `ctx`'s device.
    ///
    /// # Errors
    /// As [`compile`].
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let module = compile(ctx, Self::MODULE)?;
        Ok(VectorAdd {
            function: module.load_function(Self::KERNEL)?,
            block: 256,
        })
    }

    /// Analytic work for `n` elements: 8n bytes read, 4n written, n additions.
    pub fn work(n: u64) -> Work {
        Work {
            bytes: 12 * n,
            flops: n,
        }
    }

    /// Grid size for `n` elements.
    pub fn grid(&self, n: u64) -> u32 {
        n.div_ceil(u64::from(self.block)).max(1) as u32
    }

    /// Launches `c = a + b` over the first `n` elements on `stream`.
    ///
    /// # Errors
    /// A launch failure, or `n` larger than a slice.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        n: u64,
    ) -> Result<()> {
        if n as usize > a.len().min(b.len()).min(c.len()) {
            return Err(Error::Config(format!(
                "vector_add over {n} elements, but a slice holds fewer"
            )));
        }
        let cfg = LaunchConfig {
            grid_dim: (self.grid(n), 1, 1),
            block_dim: (self.block, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.function);
        launch.arg(a).arg(b).arg(c).arg(&n);
        // SAFETY: the argument list matches the kernel's signature (three float pointers and an
        // unsigned long long), and n is within every slice.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }
}

/// A phase of a training step, as the kernels of `kernels/train_ops.cu` stand for it: one kernel
/// of a distinct name per phase, `iters` dependent FMAs per element, so that tests of attribution
/// know which scope each kernel belongs to and how long it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrainOp {
    /// `forward_op`
    Forward,
    /// `backward_op`
    Backward,
    /// `optimizer_op`
    Optimizer,
}

impl TrainOp {
    /// The kernel file.
    pub const MODULE: &'static str = "train_ops";
    /// Every phase, in step order.
    pub const ALL: [TrainOp; 3] = [TrainOp::Forward, TrainOp::Backward, TrainOp::Optimizer];

    /// The kernel's name, as the ledger records it.
    pub fn kernel(self) -> &'static str {
        match self {
            TrainOp::Forward => "forward_op",
            TrainOp::Backward => "backward_op",
            TrainOp::Optimizer => "optimizer_op",
        }
    }

    /// The phase's scope name (`forward`, `backward`, `optimizer`).
    pub fn scope(self) -> &'static str {
        match self {
            TrainOp::Forward => "forward",
            TrainOp::Backward => "backward",
            TrainOp::Optimizer => "optimizer",
        }
    }

    /// Analytic work over `n` elements with `iters` FMAs each: 8n bytes, 2n*iters FLOPs.
    pub fn work(n: u64, iters: u32) -> Work {
        Work {
            bytes: 8 * n,
            flops: 2 * n * u64::from(iters),
        }
    }
}

/// The three kernels of [`TrainOp`], loaded.
pub struct TrainOps {
    functions: [CudaFunction; 3],
}

impl TrainOps {
    /// Compiles and loads `kernels/train_ops.cu` for `ctx`'s device.
    ///
    /// # Errors
    /// As [`compile`].
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let module = compile(ctx, TrainOp::MODULE)?;
        let f = |op: TrainOp| module.load_function(op.kernel());
        Ok(TrainOps {
            functions: [
                f(TrainOp::Forward)?,
                f(TrainOp::Backward)?,
                f(TrainOp::Optimizer)?,
            ],
        })
    }

    /// Launches `op` over the first `n` elements of `x` on `stream`, `iters` FMAs each.
    ///
    /// # Errors
    /// A launch failure, or `n` larger than `x`.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        op: TrainOp,
        x: &mut CudaSlice<f32>,
        n: u64,
        iters: u32,
    ) -> Result<()> {
        if n as usize > x.len() {
            return Err(Error::Config(format!(
                "{} over {n} elements, but the slice holds {}",
                op.kernel(),
                x.len()
            )));
        }
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256).max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let i = TrainOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        let mut launch = stream.launch_builder(&self.functions[i]);
        launch.arg(x).arg(&n).arg(&iters);
        // SAFETY: the arguments match the kernel's signature (a float pointer, an unsigned long
        // long and an unsigned int), and n is within the slice.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEEDS_NVRTC: &str =
        "libnvrtc.so.13 not found: run scripts/check-kernels.sh (or put it on LD_LIBRARY_PATH)";

    fn sm90(src: &str, file: &str) -> std::result::Result<Vec<u8>, String> {
        assert!(nvrtc_present(), "{NEEDS_NVRTC}");
        let options = ["--gpu-architecture=sm_90".to_string(), "-lineinfo".into()];
        nvrtc_cubin(src, file, &options)
    }

    #[test]
    #[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
    fn every_bundled_kernel_file_compiles_to_a_cubin() {
        for (name, src) in KERNEL_SOURCES {
            let cubin = sm90(src, &format!("{name}.cu")).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "{name}: a cubin is an ELF image"
            );
            println!("kernels/{name}.cu: {} bytes of cubin", cubin.len());
        }
    }

    #[test]
    #[ignore = "needs libnvrtc.so.13 (scripts/check-kernels.sh)"]
    fn a_kernel_that_does_not_compile_gives_the_result_code_and_the_log() {
        let e = sm90(
            "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared; }",
            "broken.cu",
        )
        .unwrap_err();
        println!("{e}");
        assert!(e.starts_with("NVRTC_ERROR_COMPILATION: "), "{e}");
        assert!(e.contains("broken.cu") && e.contains("undeclared"), "{e}");
        assert!(!e.ends_with('\n') && !e.contains('\0'), "{e:?}");
    }
}
